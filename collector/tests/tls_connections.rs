//! The TLS gRPC listener under hostile clients: idle connections are closed within the handshake deadline,
//! every failed handshake is counted with its reason (no certificate, unknown CA, expired, not TLS, the agent
//! refusing the collector's certificate), and a certificate whose CN and SAN name different nodes speaks for its
//! SAN only. Certificates made for the test; real sockets on 127.0.0.1.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use commwatch_collector::{CollectorConfig, CollectorHandle, TlsConfig};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

const PROMPT: Duration = Duration::from_secs(5);

/// A CA and the certificates the tests present, written as PEM files.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = |name: &str, file: &str| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(DnType::CommonName, name);
            let cert = p.self_signed(&key).unwrap();
            std::fs::write(dir.path().join(format!("{file}.pem")), cert.pem()).unwrap();
            Issuer::new(p, key)
        };
        let ours = ca("commwatch test CA", "ca");
        let other = ca("some other CA", "other-ca");
        let leaf = |issuer: &Issuer<'_, KeyPair>, cn: &str, sans: &[&str], file: &str, expired| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.subject_alt_names = sans
                .iter()
                .map(|s| match s.parse() {
                    Ok(ip) => SanType::IpAddress(ip),
                    Err(_) => SanType::DnsName((*s).try_into().unwrap()),
                })
                .collect();
            p.distinguished_name.push(DnType::CommonName, cn);
            if expired {
                p.not_before = rcgen::date_time_ymd(2020, 1, 1);
                p.not_after = rcgen::date_time_ymd(2021, 1, 1);
            }
            let cert = p.signed_by(&key, issuer).unwrap();
            std::fs::write(dir.path().join(format!("{file}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.path().join(format!("{file}.key")), key.serialize_pem()).unwrap();
        };
        leaf(
            &ours,
            "collector",
            &["localhost", "127.0.0.1"],
            "server",
            false,
        );
        leaf(&ours, "node-a", &["node-a"], "node-a", false);
        // One certificate, two names: the CN says node-a, the SAN node-b.
        leaf(&ours, "node-a", &["node-b"], "two-names", false);
        // No SAN at all: the CN is the identity.
        leaf(&ours, "node-c", &[], "cn-only", false);
        leaf(&ours, "node-a", &["node-a"], "expired", true);
        leaf(&other, "node-a", &["node-a"], "stranger", false);
        Pki { dir }
    }

    fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }

    fn read(&self, f: &str) -> Vec<u8> {
        std::fs::read(self.path(f)).unwrap()
    }

    fn config(&self) -> CollectorConfig {
        let mut c = config();
        c.tls = Some(TlsConfig {
            cert_file: self.path("server.pem"),
            key_file: self.path("server.key"),
            client_ca_file: Some(self.path("ca.pem")),
        });
        c
    }

    /// A rustls client trusting `ca` (a file of this PKI), presenting `cert` (`None`: no certificate).
    fn client(&self, ca: &str, cert: Option<&str>) -> tokio_rustls::TlsConnector {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&self.read(&format!("{ca}.pem"))) {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let mut cfg = match cert {
            None => builder.with_no_client_auth(),
            Some(c) => {
                let chain = CertificateDer::pem_slice_iter(&self.read(&format!("{c}.pem")))
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap();
                let key = PrivateKeyDer::from_pem_slice(&self.read(&format!("{c}.key"))).unwrap();
                builder.with_client_auth_cert(chain, key).unwrap()
            }
        };
        cfg.alpn_protocols = vec![b"h2".to_vec()];
        tokio_rustls::TlsConnector::from(Arc::new(cfg))
    }

    /// A tonic channel to the collector presenting `cert`.
    async fn channel(&self, h: &CollectorHandle, cert: &str) -> tonic::transport::Channel {
        use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(self.read("ca.pem")))
            .identity(Identity::from_pem(
                self.read(&format!("{cert}.pem")),
                self.read(&format!("{cert}.key")),
            ))
            .domain_name("localhost");
        Endpoint::from_shared(format!("https://localhost:{}", h.grpc_addr.port()))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .expect("TLS channel")
    }
}

fn counted(h: &CollectorHandle, name: &str, reason: &str) -> f64 {
    let prefix = format!("{name}{{reason=\"{reason}\"}} ");
    h.render_metrics()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or(0.0)
}

/// `counted(…)` once it reaches `want` (or after a few seconds, whatever it is then).
async fn counted_soon(h: &CollectorHandle, name: &str, reason: &str, want: f64) -> f64 {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let n = counted(h, name, reason);
        if n >= want || Instant::now() > until {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const TLS_FAILURES: &str = "commwatch_collector_tls_handshake_failures_total";

/// Waits until the collector has counted `reason` at least once.
async fn wait_counted(h: &CollectorHandle, reason: &str) {
    let until = Instant::now() + PROMPT;
    while counted(h, TLS_FAILURES, reason) < 1.0 {
        assert!(
            Instant::now() < until,
            "no TLS failure counted as {reason}\n{}",
            h.render_metrics()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs a client handshake (and, TLS 1.3 finishing the client's side first, one read so that the server's
/// verdict on the client's certificate arrives).
async fn handshake(h: &CollectorHandle, connector: tokio_rustls::TlsConnector) {
    let tcp = TcpStream::connect(h.grpc_addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    if let Ok(mut s) = connector.connect(name, tcp).await {
        let _ = s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
        let mut buf = [0u8; 64];
        let _ = tokio::time::timeout(PROMPT, s.read(&mut buf)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_handshakes_are_counted_by_reason_and_agents_still_get_in() {
    let pki = Pki::new();
    let h = collector(pki.config()).await;
    handshake(&h, pki.client("ca", None)).await;
    wait_counted(&h, "no_certificate").await;
    handshake(&h, pki.client("ca", Some("stranger"))).await;
    wait_counted(&h, "unknown_ca").await;
    handshake(&h, pki.client("ca", Some("expired"))).await;
    wait_counted(&h, "expired").await;
    // A client that does not trust the collector's CA refuses the handshake itself.
    handshake(&h, pki.client("other-ca", Some("node-a"))).await;
    wait_counted(&h, "refused_by_agent").await;
    // A plain-text client on the TLS port.
    let mut plain = TcpStream::connect(h.grpc_addr).await.unwrap();
    plain
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    wait_counted(&h, "not_tls").await;
    let refused = counted(
        &h,
        "commwatch_collector_grpc_connections_refused_total",
        "tls",
    );
    assert_eq!(refused, 5.0, "{}", h.render_metrics());
    // The honest agent is served all along.
    let mut a = Agent::open_channel(pki.channel(&h, "node-a").await).await;
    a.send(msg_hello(hello("node-a", 1))).await;
    assert_eq!(a.next_ack().await.unwrap(), 0);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_to_the_tls_port_are_closed_within_the_deadline() {
    let pki = Pki::new();
    let mut cfg = pki.config();
    cfg.limits.grpc_handshake_timeout = Duration::from_secs(1);
    let h = collector(cfg).await;
    let t0 = Instant::now();
    let mut idle = Vec::new();
    for _ in 0..50 {
        idle.push(TcpStream::connect(h.grpc_addr).await.unwrap());
    }
    let mut a = Agent::open_channel(pki.channel(&h, "node-a").await).await;
    a.send(msg_hello(hello("node-a", 1))).await;
    assert_eq!(a.next_ack().await.unwrap(), 0);
    for s in &mut idle {
        let mut buf = [0u8; 16];
        let r = tokio::time::timeout(PROMPT, s.read(&mut buf)).await;
        assert!(
            matches!(r, Ok(Ok(0)) | Ok(Err(_))),
            "idle TLS connection not closed"
        );
    }
    eprintln!(
        "50 idle TLS connections closed {:?} after they were opened",
        t0.elapsed()
    );
    let name = "commwatch_collector_grpc_connections_refused_total";
    // Counted just after the close the client saw.
    assert_eq!(
        counted_soon(&h, name, "handshake_timeout", 50.0).await,
        50.0
    );
    h.shutdown().await;
}

/// One certificate is one identity: the SAN when there is one, the CN only without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_speaks_for_its_san_and_its_cn_only_without_a_san() {
    let pki = Pki::new();
    let h = collector(pki.config()).await;
    let mut as_cn = Agent::open_channel(pki.channel(&h, "two-names").await).await;
    as_cn.send(msg_hello(hello("node-a", 1))).await;
    let status = as_cn.error().await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    let mut as_san = Agent::open_channel(pki.channel(&h, "two-names").await).await;
    as_san.send(msg_hello(hello("node-b", 1))).await;
    assert_eq!(as_san.next_ack().await.unwrap(), 0);
    let mut cn_only = Agent::open_channel(pki.channel(&h, "cn-only").await).await;
    cn_only.send(msg_hello(hello("node-c", 1))).await;
    assert_eq!(cn_only.next_ack().await.unwrap(), 0);
    let names: Vec<String> = h.snapshot_nodes().into_iter().map(|n| n.name).collect();
    assert_eq!(names, vec!["node-b".to_string(), "node-c".to_string()]);
    h.shutdown().await;
}
