//! Why a connection or a stream to the collector failed, in words an operator can act on. tonic says only
//! `transport error` (or `Unknown transport error`); the cause is further down the error's source chain — a
//! TLS error wrapped in an I/O error, which `source()` alone skips. [`describe`] walks the chain, looking
//! inside I/O errors, and names a TLS failure by its reason: unknown CA, expired, not yet valid, hostname
//! mismatch, no client certificate, the agent's certificate refused, no TLS at the other end. Any other
//! failure is the chain's messages, each said once.

use std::error::Error;

use tokio_rustls::rustls::{self, AlertDescription, CertificateError};

/// What failed, with its reason (see the module documentation).
pub fn describe(e: &(dyn Error + 'static)) -> String {
    match find_tls(e) {
        Some(tls) => format!("TLS handshake failed: {} ({tls})", tls_reason(tls)),
        None => chain_once(e),
    }
}

/// The first TLS error in `e`'s chain, looking inside I/O errors (whose `source()` is their inner error's
/// source, not the inner error).
fn find_tls<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            if let Some(tls) = find_tls(inner) {
                return Some(tls);
            }
        }
        cur = err.source();
    }
    None
}

/// The reason, in the operator's terms, and what to check.
fn tls_reason(e: &rustls::Error) -> &'static str {
    use rustls::Error as E;
    match e {
        E::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => {
                "unknown CA: the collector's certificate is not signed by a CA the agent trusts (--tls-ca)"
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "expired: the collector's certificate has expired"
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "not yet valid: the collector's certificate is not valid yet (check the clocks)"
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "hostname mismatch: the collector's certificate does not name the host in --collector"
            }
            _ => "bad certificate: the collector's certificate was refused",
        },
        E::AlertReceived(a) => match a {
            AlertDescription::CertificateRequired => {
                "no client certificate: the collector requires one (--tls-cert, --tls-key)"
            }
            AlertDescription::UnknownCA => {
                "unknown CA: the collector does not trust the agent's certificate (its tls.client_ca_file)"
            }
            AlertDescription::CertificateExpired => {
                "expired: the collector refused the agent's certificate as expired"
            }
            AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::AccessDenied => "the collector refused the agent's certificate",
            AlertDescription::HandshakeFailure => {
                "the collector ended the handshake (a client certificate required, or no common cipher)"
            }
            _ => "the collector ended the handshake",
        },
        E::InvalidMessage(_) | E::InappropriateMessage { .. } => {
            "not TLS: the collector does not answer in TLS there (a plain-text collector needs http://)"
        }
        E::NoCertificatesPresented => "the collector presented no certificate",
        _ => "protocol error",
    }
}

/// The messages of `e`'s chain, joined by `: `, leaving out one its predecessor already says.
fn chain_once(e: &(dyn Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = inner_or_source(e);
    while let Some(err) = next {
        let m = err.to_string();
        if !m.is_empty() && !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        next = inner_or_source(err);
    }
    out
}

/// An I/O error's inner error, else `source()`.
fn inner_or_source<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a (dyn Error + 'static)> {
    match e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
        Some(inner) => Some(inner),
        None => e.source(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    /// A transport error as tonic's stack builds it: an outer error whose source is an I/O error that
    /// wraps the TLS error.
    #[derive(Debug)]
    struct Transport(io::Error);

    impl std::fmt::Display for Transport {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("transport error")
        }
    }

    impl Error for Transport {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    fn wrapped(tls: rustls::Error) -> tonic::Status {
        let t = Transport(io::Error::new(io::ErrorKind::InvalidData, tls));
        tonic::Status::from_error(Box::new(t))
    }

    #[test]
    fn each_tls_failure_is_named_by_its_reason() {
        let cases = [
            (
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
                "unknown CA",
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::Expired),
                "expired",
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::NotValidForName),
                "hostname mismatch",
            ),
            (
                rustls::Error::AlertReceived(AlertDescription::CertificateRequired),
                "no client certificate",
            ),
            (
                rustls::Error::AlertReceived(AlertDescription::UnknownCA),
                "does not trust the agent's certificate",
            ),
            (
                rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
                "not TLS",
            ),
        ];
        for (tls, want) in cases {
            let status = wrapped(tls);
            let said = describe(&status);
            assert!(said.starts_with("TLS handshake failed: "), "{said}");
            assert!(said.contains(want), "{said}");
            assert!(!said.contains("Unknown transport error"), "{said}");
        }
    }

    #[test]
    fn other_failures_say_the_chain_once() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let t = Transport(io::Error::other(Transport(refused)));
        let said = describe(&t);
        assert_eq!(said.matches("transport error").count(), 1, "{said}");
        assert!(said.contains("refused"), "{said}");
    }
}
