//! TLS, mutual TLS and bearer tokens between agent and collector, with certificates made for the test.

use std::path::{Path, PathBuf};
use std::time::Duration;

use commwatch_testdata::gpud_h100_sysfs;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A CA, a server certificate for localhost/127.0.0.1, and client certificates for the given node names.
    fn new(clients: &[&str]) -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "commwatch test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |name: &str, sans: Vec<SanType>, file: &str| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.subject_alt_names = sans;
            p.distinguished_name.push(DnType::CommonName, name);
            let cert = p.signed_by(&key, &issuer).unwrap();
            std::fs::write(dir.path().join(format!("{file}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.path().join(format!("{file}.key")), key.serialize_pem()).unwrap();
        };
        leaf(
            "collector",
            vec![
                SanType::DnsName("localhost".try_into().unwrap()),
                SanType::IpAddress("127.0.0.1".parse().unwrap()),
            ],
            "server",
        );
        for c in clients {
            leaf(c, vec![SanType::DnsName((*c).try_into().unwrap())], c);
        }
        Pki { dir }
    }

    fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }
}

/// An agent reading `sysfs` (the H100 tree, [`gpud_h100_sysfs!`]) and shipping to `url`.
fn agent_config(node: &str, url: String, sysfs: &Path) -> commwatch_agent::AgentConfig {
    commwatch_agent::AgentConfig {
        node: node.into(),
        collector: Some(url),
        sysfs_root: sysfs.to_path_buf(),
        http_listen: "127.0.0.1:0".parse().unwrap(),
        steps_udp: None,
        steps_socket: None,
        sources: vec!["infiniband".into()],
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_millis(500),
        ..Default::default()
    }
}

async fn wait_nodes(
    c: &commwatch_collector::CollectorHandle,
    want: &[&str],
    secs: u64,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let names: Vec<String> = c.snapshot_nodes().into_iter().map(|n| n.name).collect();
        if want.iter().all(|w| names.iter().any(|n| n == w))
            || tokio::time::Instant::now() > deadline
        {
            return names;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_token_admits_the_right_agent_only() {
    let Some(h100) = gpud_h100_sysfs!() else {
        return;
    };
    let pki = Pki::new(&[]);
    std::fs::write(pki.path("token"), "s3cret-token\n").unwrap();
    std::fs::write(pki.path("wrong"), "not-the-token\n").unwrap();
    let collector = commwatch_collector::start(commwatch_collector::CollectorConfig {
        grpc_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: "127.0.0.1:0".parse().unwrap(),
        tls: Some(commwatch_collector::TlsConfig {
            cert_file: pki.path("server.pem"),
            key_file: pki.path("server.key"),
            client_ca_file: None,
        }),
        token_file: Some(pki.path("token")),
        ..Default::default()
    })
    .await
    .unwrap();
    let https = format!("https://localhost:{}", collector.grpc_addr.port());
    let plain = format!("http://127.0.0.1:{}", collector.grpc_addr.port());

    let mut good = agent_config("good", https.clone(), h100.path());
    good.tls.ca_file = Some(pki.path("ca.pem"));
    good.token_file = Some(pki.path("token"));
    let mut wrong_token = agent_config("wrong-token", https.clone(), h100.path());
    wrong_token.tls.ca_file = Some(pki.path("ca.pem"));
    wrong_token.token_file = Some(pki.path("wrong"));
    let mut no_token = agent_config("no-token", https.clone(), h100.path());
    no_token.tls.ca_file = Some(pki.path("ca.pem"));
    // Verifies against the web PKI roots, which did not sign the test CA: the handshake fails.
    let mut untrusted = agent_config("untrusted", https, h100.path());
    untrusted.token_file = Some(pki.path("token"));
    let mut plaintext = agent_config("plaintext", plain, h100.path());
    plaintext.token_file = Some(pki.path("token"));

    let mut agents = Vec::new();
    for c in [good, wrong_token, no_token, untrusted, plaintext] {
        agents.push(commwatch_agent::start(c).await.unwrap());
    }
    let names = wait_nodes(&collector, &["good"], 20).await;
    assert!(names.contains(&"good".to_string()), "{names:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let names: Vec<String> = collector
        .snapshot_nodes()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(
        names,
        vec!["good".to_string()],
        "only the agent with the CA and the token gets in"
    );
    let acked = agents[0].metrics.acked_seq.get();
    assert!(acked > 0, "the good agent's batches are acknowledged");
    for a in &agents[1..] {
        assert_eq!(a.metrics.acked_seq.get(), 0);
    }
    // The two agents with the CA but a wrong or no token reach the token check and are counted.
    assert!(
        rejected(&collector, "unauthenticated") >= 2.0,
        "{}",
        collector.render_metrics()
    );
    for a in agents {
        a.shutdown().await;
    }
    collector.shutdown().await;
}

/// `commwatch_collector_rejected_streams_total{reason}` of a running collector.
fn rejected(collector: &commwatch_collector::CollectorHandle, reason: &str) -> f64 {
    let label = format!("reason=\"{reason}\"");
    collector
        .render_metrics()
        .lines()
        .filter(|l| {
            l.starts_with("commwatch_collector_rejected_streams_total") && l.contains(&label)
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_binds_the_node_name_to_the_certificate() {
    let Some(h100) = gpud_h100_sysfs!() else {
        return;
    };
    let pki = Pki::new(&["node-a", "node-b"]);
    let collector = commwatch_collector::start(commwatch_collector::CollectorConfig {
        grpc_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: "127.0.0.1:0".parse().unwrap(),
        tls: Some(commwatch_collector::TlsConfig {
            cert_file: pki.path("server.pem"),
            key_file: pki.path("server.key"),
            client_ca_file: Some(pki.path("ca.pem")),
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let url = format!("https://localhost:{}", collector.grpc_addr.port());
    let with_cert = |node: &str, cert: &str| {
        let mut c = agent_config(node, url.clone(), h100.path());
        c.tls.ca_file = Some(pki.path("ca.pem"));
        c.tls.cert_file = Some(pki.path(&format!("{cert}.pem")));
        c.tls.key_file = Some(pki.path(&format!("{cert}.key")));
        c
    };
    let honest = with_cert("node-a", "node-a");
    // node-b's certificate, claiming to be node-c: refused.
    let impostor = with_cert("node-c", "node-b");
    let mut anonymous = agent_config("anonymous", url.clone(), h100.path());
    anonymous.tls.ca_file = Some(pki.path("ca.pem"));
    let mut agents = Vec::new();
    for c in [honest, impostor, anonymous] {
        agents.push(commwatch_agent::start(c).await.unwrap());
    }
    let names = wait_nodes(&collector, &["node-a"], 20).await;
    assert!(names.contains(&"node-a".to_string()), "{names:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let names: Vec<String> = collector
        .snapshot_nodes()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(names, vec!["node-a".to_string()]);
    assert!(
        rejected(&collector, "identity") >= 1.0,
        "{}",
        collector.render_metrics()
    );
    for a in agents {
        a.shutdown().await;
    }
    collector.shutdown().await;
}
