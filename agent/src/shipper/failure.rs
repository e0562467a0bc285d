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
        Some(tls) => tls_words(tls),
        None => chain_once(e.to_string(), inner_or_source(e)),
    }
}

/// What a stream's status says, with its reason: its message, then its source chain.
pub fn describe_status(status: &tonic::Status) -> String {
    let e: &(dyn Error + 'static) = status;
    match find_tls(e) {
        Some(tls) => tls_words(tls),
        None => chain_once(status.message().to_string(), e.source()),
    }
}

fn tls_words(tls: &rustls::Error) -> String {
    format!("TLS handshake failed: {} ({tls})", tls_reason(tls))
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

/// `first`, then the messages of the chain from `next` on, joined by `: `, leaving out one already said.
fn chain_once(first: String, mut next: Option<&(dyn Error + 'static)>) -> String {
    let mut out = first;
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
    match e
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
    {
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
            let said = describe_status(&status);
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
        let status = tonic::Status::from_error(Box::new(t));
        let said = describe_status(&status);
        assert!(said.starts_with("transport error"), "{said}");
        assert!(said.contains("refused"), "{said}");
    }

    /// A real handshake against a TLS server (rustls, as the collector's): tonic's error carries the reason.
    mod handshake {
        use super::super::describe;
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        use std::sync::Arc;
        use tokio_rustls::rustls;

        /// A CA's PEM, and a server certificate for `name` it signs (`expired`: valid only in 2000).
        fn pki(name: &str, expired: bool) -> (String, Vec<u8>, Vec<u8>) {
            let ca_key = KeyPair::generate().unwrap();
            let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            // Each CA its own name: a CA is found by the issuer name of the certificate.
            let ca_name = format!("test CA {}", rand::random::<u64>());
            ca.distinguished_name
                .push(rcgen::DnType::CommonName, ca_name);
            let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
            let issuer = Issuer::new(ca, ca_key);
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(vec![name.to_string()]).unwrap();
            if expired {
                p.not_before = rcgen::date_time_ymd(2000, 1, 1);
                p.not_after = rcgen::date_time_ymd(2000, 12, 31);
            }
            let cert = p.signed_by(&key, &issuer).unwrap();
            (ca_pem, cert.der().to_vec(), key.serialize_der())
        }

        /// Serves TLS handshakes (then drops the connection) with `cert`; returns the port.
        async fn server(cert: Vec<u8>, key: Vec<u8>) -> u16 {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let key = rustls::pki_types::PrivateKeyDer::try_from(key).unwrap();
            let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![cert.into()], key)
                .unwrap();
            cfg.alpn_protocols = vec![b"h2".to_vec()];
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let a = acceptor.clone();
                    tokio::spawn(async move { a.accept(tcp).await });
                }
            });
            port
        }

        async fn connect_error(port: u16, ca_pem: &str, host: &str) -> String {
            let tls = tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem))
                .domain_name(host);
            let e = tonic::transport::Endpoint::from_shared(format!("https://127.0.0.1:{port}"))
                .unwrap()
                .tls_config(tls)
                .unwrap()
                .connect()
                .await
                .expect_err("the handshake fails");
            assert_eq!(e.to_string(), "transport error", "tonic's own words");
            describe(&e)
        }

        #[tokio::test]
        async fn unknown_ca_expired_and_hostname_mismatch_are_named() {
            let (ca, cert, key) = pki("localhost", false);
            let port = server(cert, key).await;
            let (other_ca, _, _) = pki("localhost", false);
            let said = connect_error(port, &other_ca, "localhost").await;
            assert!(said.contains("unknown CA"), "{said}");
            let said = connect_error(port, &ca, "collector.example").await;
            assert!(said.contains("hostname mismatch"), "{said}");
            let (old_ca, old_cert, old_key) = pki("localhost", true);
            let old = server(old_cert, old_key).await;
            let said = connect_error(old, &old_ca, "localhost").await;
            assert!(said.contains("expired"), "{said}");
        }
    }
}
