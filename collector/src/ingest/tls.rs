//! TLS of the gRPC listener, done by the collector rather than by tonic, so that the handshake runs under the
//! connection's deadline ([`super::connections`]) and every failed handshake is logged and counted with its
//! reason ([`HandshakeFailure`]).
//!
//! The server offers ALPN `h2` only (gRPC). With `tls.client_ca_file` the handshake requires a client
//! certificate chaining to that CA (mutual TLS); the names it vouches for are read by [`super::auth::identities`].

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, CertificateError, RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;

use crate::config::TlsConfig;

/// Accepts TLS connections with the collector's certificate (and, with mutual TLS, the client CA).
#[derive(Clone)]
pub struct TlsAcceptor {
    inner: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsAcceptor").finish_non_exhaustive()
    }
}

/// Why the TLS material cannot be used. Each message names the file and says its cause once.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {error}")]
    Read {
        what: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    #[error("TLS configuration: {0}")]
    Invalid(String),
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        what,
        path: path.to_path_buf(),
        error,
    })
}

fn invalid(what: &str, path: &Path, reason: impl std::fmt::Display) -> TlsError {
    TlsError::Invalid(format!("{what} {}: {reason}", path.display()))
}

impl TlsAcceptor {
    /// Reads the certificate chain, its key and the client CA the configuration names; a file that is
    /// missing, holds no PEM object of its kind, or does not go with the others fails (naming the file).
    pub fn load(cfg: &TlsConfig) -> Result<TlsAcceptor, TlsError> {
        let certs = CertificateDer::pem_slice_iter(&read("TLS certificate", &cfg.cert_file)?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("TLS certificate", &cfg.cert_file, e))?;
        if certs.is_empty() {
            return Err(invalid(
                "TLS certificate",
                &cfg.cert_file,
                "no PEM certificate in it",
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(&read("TLS key", &cfg.key_file)?)
            .map_err(|e| invalid("TLS key", &cfg.key_file, e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Invalid(e.to_string()))?;
        let builder = match &cfg.client_ca_file {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for c in CertificateDer::pem_slice_iter(&read("client CA", ca)?) {
                    let c = c.map_err(|e| invalid("client CA", ca, e))?;
                    roots.add(c).map_err(|e| invalid("client CA", ca, e))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| invalid("client CA", ca, e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| invalid("TLS key", &cfg.key_file, e))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(TlsAcceptor {
            inner: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Runs the server side of the handshake on `tcp` (the caller bounds it in time).
    pub async fn accept(&self, tcp: TcpStream) -> Result<TlsStream<TcpStream>, HandshakeFailure> {
        self.inner
            .accept(tcp)
            .await
            .map_err(|e| HandshakeFailure::from_io(&e))
    }
}

/// Why a TLS handshake failed: the `reason` label of `commwatch_collector_tls_handshake_failures_total` (one of
/// [`crate::telemetry::TLS_FAILURE_REASONS`]) and the TLS library's own words for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeFailure {
    pub reason: &'static str,
    pub detail: String,
}

impl HandshakeFailure {
    fn new(reason: &'static str, detail: impl std::fmt::Display) -> HandshakeFailure {
        HandshakeFailure {
            reason,
            detail: detail.to_string(),
        }
    }

    /// Classifies what the TLS stream reported: a TLS error (wrapped in the I/O error) or the I/O error itself.
    pub fn from_io(e: &io::Error) -> HandshakeFailure {
        match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            Some(tls) => HandshakeFailure::new(tls_reason(tls), tls),
            None => HandshakeFailure::new("closed", e),
        }
    }
}

fn tls_reason(e: &rustls::Error) -> &'static str {
    use rustls::Error as E;
    match e {
        E::NoCertificatesPresented => "no_certificate",
        E::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => "unknown_ca",
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => "expired",
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "not_yet_valid"
            }
            _ => "bad_certificate",
        },
        E::AlertReceived(_) => "refused_by_agent",
        E::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => "not_tls",
        _ => "protocol",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_classified_by_cause() {
        let wrap = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
        let cases = [
            (rustls::Error::NoCertificatesPresented, "no_certificate"),
            (
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
                "unknown_ca",
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::Expired),
                "expired",
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::BadSignature),
                "bad_certificate",
            ),
            (
                rustls::Error::AlertReceived(rustls::AlertDescription::UnknownCA),
                "refused_by_agent",
            ),
            (
                rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
                "not_tls",
            ),
            (rustls::Error::NoApplicationProtocol, "protocol"),
        ];
        for (e, want) in cases {
            let f = HandshakeFailure::from_io(&wrap(e));
            assert_eq!(f.reason, want, "{}", f.detail);
            assert!(crate::telemetry::TLS_FAILURE_REASONS.contains(&f.reason));
        }
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert_eq!(HandshakeFailure::from_io(&eof).reason, "closed");
    }
}
