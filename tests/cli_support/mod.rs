//! What the CLI tests need beside `common`: certificates made for the test, a TLS-terminating proxy in front of
//! a collector's plain-HTTP port (as an ingress or a reverse proxy puts one in front of it), and running the
//! binary to completion.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::common::BIN;

/// A CA (`ca.pem` in the directory) and a server certificate it signed for `localhost` and `127.0.0.1`.
pub struct Pki {
    pub dir: tempfile::TempDir,
    server_cert: CertificateDer<'static>,
    server_key: Vec<u8>,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "commwatch CLI test CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
        leaf.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::IpAddress("127.0.0.1".parse().unwrap()),
        ];
        leaf.distinguished_name
            .push(DnType::CommonName, "collector proxy");
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        Pki {
            dir,
            server_cert: cert.der().clone(),
            server_key: key.serialize_der(),
        }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }
}

/// A TLS proxy on a loopback port forwarding every connection to `127.0.0.1:backend`; stops when dropped.
pub struct TlsProxy {
    pub port: u16,
    _rt: tokio::runtime::Runtime,
}

impl TlsProxy {
    pub fn start(pki: &Pki, backend: u16) -> TlsProxy {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![pki.server_cert.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.server_key.clone())),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        rt.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that fails the handshake (a test without the CA) just ends here.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut up) = tokio::net::TcpStream::connect(("127.0.0.1", backend)).await
                    else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
        TlsProxy { port, _rt: rt }
    }
}

/// `commwatch ARGS…` run to completion with stdin closed and no collector in the environment.
pub fn run(args: &[&str]) -> Output {
    run_env(args, &[])
}

/// [`run`] with extra environment variables.
pub fn run_env(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("COMMWATCH_COLLECTOR")
        .env_remove("COMMWATCH_API_TOKEN_FILE")
        .env_remove("COMMWATCH_LOG_FORMAT")
        .env_remove("RUST_LOG")
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run commwatch")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The exit code, with both streams in the message when the process had none (killed by a signal).
pub fn code(o: &Output) -> i32 {
    o.status
        .code()
        .unwrap_or_else(|| panic!("no exit code\n{}\n{}", stdout(o), stderr(o)))
}

/// stdout read as one JSON document.
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}\n{}", stdout(o), stderr(o)))
}
