//! Shards behind a DNS name, with recorded answers (no network): fakes on 127.0.0.2, .3, .4 (one port, as the
//! pods behind a headless Service), a resolver whose answer the test changes. The agent ships to its
//! rendezvous shard of the resolved set, moves when that shard's record disappears (and not when the name
//! answers nothing), looks the name up at once when its shard cannot be reached, and the ranks of one job
//! meet on one shard before and after the set changes. One test with the system's resolver on `localhost`.

use std::net::{IpAddr, SocketAddr};

use futures::future::BoxFuture;

use super::*;
use crate::shipper::resolve::Resolve;

/// Answers every lookup with the addresses the test set (or fails while `fail` is set); counts the lookups.
#[derive(Clone, Default)]
struct Recorded {
    answer: Arc<Mutex<Vec<IpAddr>>>,
    lookups: Arc<AtomicUsize>,
    fail: Arc<AtomicBool>,
}

impl Recorded {
    fn set(&self, ips: &[IpAddr]) {
        *self.answer.lock().unwrap() = ips.to_vec();
    }
}

impl Resolve for Recorded {
    fn lookup(
        &self,
        _host: String,
        _port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            let e = std::io::Error::other("no answer from the name server (recorded)");
            return Box::pin(async move { Err(e) });
        }
        let answer = self.answer.lock().unwrap().clone();
        Box::pin(async move { Ok(answer) })
    }
}

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// Fakes on 127.0.0.`lasts[i]`, all on one port; the port and the fakes.
async fn pods(lasts: &[u8]) -> (u16, Vec<FakeCollector>) {
    'port: for _ in 0..20 {
        let first = tokio::net::TcpListener::bind((ip(lasts[0]), 0))
            .await
            .unwrap();
        let port = first.local_addr().unwrap().port();
        let mut listeners = vec![first];
        for &l in &lasts[1..] {
            match tokio::net::TcpListener::bind((ip(l), port)).await {
                Ok(x) => listeners.push(x),
                Err(_) => continue 'port,
            }
        }
        let fakes: Vec<FakeCollector> = listeners
            .into_iter()
            .map(|listener| {
                let fake = FakeCollector::default();
                tokio::spawn(
                    tonic::transport::Server::builder()
                        .add_service(pb::ingest_server::IngestServer::new(fake.clone()))
                        .serve_with_incoming(TcpListenerStream::new(listener)),
                );
                fake
            })
            .collect();
        return (port, fakes);
    }
    panic!("no port free on every address");
}

fn url_of(last: u8, port: u16) -> String {
    format!("http://{}", SocketAddr::new(ip(last), port))
}

/// The index in `lasts` of the shard `key` prefers among `lasts`.
fn preferred(key: &str, lasts: &[u8], port: u16) -> usize {
    let urls: Vec<String> = lasts.iter().map(|&l| url_of(l, port)).collect();
    shard::order(key, &urls)[0]
}

/// A shipper for `node` on the name; `first` queued before it starts (a job list known from the start).
fn start_dns(
    node: &str,
    port: u16,
    refresh: Duration,
    resolver: &Recorded,
    first: Option<SamplerEvent>,
) -> (
    Arc<AgentMetrics>,
    mpsc::Sender<SamplerEvent>,
    watch::Sender<bool>,
) {
    let mut s = settings(format!(
        "dns+http://commwatch-collector-headless.test:{port}"
    ));
    s.node = node.into();
    s.collector_refresh = refresh;
    let metrics = Arc::new(AgentMetrics::new());
    let periods = Periods::new(Duration::from_millis(50), Duration::from_secs(1));
    let shipper = Shipper::new(s, metrics.clone(), periods, pb::Inventory::default())
        .with_resolver(Arc::new(resolver.clone()));
    let (ev_tx, ev_rx) = mpsc::channel(16);
    if let Some(ev) = first {
        ev_tx.try_send(ev).unwrap();
    }
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(shipper.run(ev_rx, stop_rx));
    (metrics, ev_tx, stop)
}

/// Nodes whose last Hello `fake` got.
fn hellos(fake: &FakeCollector) -> Vec<String> {
    let seen = fake.seen.lock().unwrap();
    seen.messages
        .iter()
        .filter_map(|(_, m)| match &m.msg {
            Some(AgentMsg::Hello(h)) => Some(h.node.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_vanished_record_moves_the_agent_and_an_empty_answer_does_not() {
    let lasts = [2, 3];
    let (port, fakes) = pods(&lasts).await;
    let resolver = Recorded::default();
    resolver.set(&[ip(3), ip(2)]);
    let refresh = Duration::from_millis(200);
    let (metrics, ev_tx, _stop) = start_dns("n1", port, refresh, &resolver, None);
    let home = preferred("n1", &lasts, port);
    let other = 1 - home;
    until("connected", || metrics.connected.get() == 1).await;
    assert_eq!(info(&metrics), [url_of(lasts[home], port)]);
    assert_eq!(metrics.shards.shards.get(), 2);
    ev_tx.send(batch(1)).await.unwrap();
    until("batch 1 acked", || metrics.acked_seq.get() == 1).await;
    assert_eq!(
        batches(&fakes[home]),
        [1],
        "the rendezvous shard of the set"
    );
    assert!(batches(&fakes[other]).is_empty());

    // The name answers nothing (every pod not ready, a DNS hiccup): the agent stays.
    resolver.set(&[]);
    let before = resolver.lookups.load(Ordering::SeqCst);
    until("three lookups", || {
        resolver.lookups.load(Ordering::SeqCst) >= before + 3
    })
    .await;
    ev_tx.send(batch(2)).await.unwrap();
    until("batch 2 acked", || metrics.acked_seq.get() == 2).await;
    assert_eq!(batches(&fakes[home]), [1, 2]);
    assert!(
        resolves(&metrics, "empty") >= 3,
        "the empty answers counted"
    );
    assert_eq!(
        metrics.shards.shards.get(),
        2,
        "an empty answer keeps the last set"
    );
    assert_eq!(moves(&metrics), [0; 4]);

    // Its shard's record disappears (the pod is going away, still serving): the agent moves within one
    // refresh, drained, and the other shard gets only what comes after.
    let changed = tokio::time::Instant::now();
    resolver.set(&[ip(lasts[other])]);
    until("moved to the remaining shard", || {
        !hellos(&fakes[other]).is_empty() && metrics.connected.get() == 1
    })
    .await;
    let took = changed.elapsed();
    eprintln!("record removed → agent on the remaining shard in {took:?} (refresh {refresh:?})");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(metrics.disconnects.with_label_values(&["moved"]).get(), 1);
    assert_eq!(moves(&metrics), [0, 0, 1, 0], "one move, shard_set_changed");
    assert_eq!(
        info(&metrics),
        [url_of(lasts[other], port)],
        "the info series switched"
    );
    assert_eq!(metrics.shards.shards.get(), 1);
    eprintln!(
        "record removed → moves {:?} (job_changed, unreachable, shard_set_changed, retry_preferred), info {:?}, {} empty answers counted",
        moves(&metrics),
        info(&metrics),
        resolves(&metrics, "empty")
    );
    ev_tx.send(batch(3)).await.unwrap();
    until("batch 3 acked", || metrics.acked_seq.get() == 3).await;
    assert_eq!(batches(&fakes[home]), [1, 2]);
    assert_eq!(
        batches(&fakes[other]),
        [3],
        "acked batches are not replayed"
    );
}

/// `commwatch_agent_discovery_resolves_total{result}`.
fn resolves(metrics: &AgentMetrics, result: &str) -> u64 {
    metrics.shards.resolves.with_label_values(&[result]).get()
}

/// A failing name server: every failed lookup counted, the last success's time kept, the agent shipping on
/// to the shard it had; once the name answers again, the time moves on.
#[tokio::test]
async fn failed_lookups_are_counted_and_the_last_success_stays_put() {
    let lasts = [2, 3];
    let (port, fakes) = pods(&lasts).await;
    let resolver = Recorded::default();
    resolver.set(&[ip(2), ip(3)]);
    let (metrics, ev_tx, _stop) =
        start_dns("n1", port, Duration::from_millis(100), &resolver, None);
    let home = preferred("n1", &lasts, port);
    until("connected", || metrics.connected.get() == 1).await;
    let last_success = || metrics.shards.discovery_last_success.get();
    let first = last_success();
    let now = commwatch_model::clock::unix_now_s();
    assert!(first > now - 60.0 && first <= now, "{first} vs {now}");
    assert!(resolves(&metrics, "ok") >= 1);
    assert_eq!(resolves(&metrics, "error"), 0);

    resolver.fail.store(true, Ordering::SeqCst);
    let failing = tokio::time::Instant::now();
    let at = resolver.lookups.load(Ordering::SeqCst);
    until("three failed lookups", || resolves(&metrics, "error") >= 3).await;
    let ok_during = resolves(&metrics, "ok");
    assert!(resolver.lookups.load(Ordering::SeqCst) >= at + 3);
    assert_eq!(last_success(), first, "a failed round is no success");
    ev_tx.send(batch(1)).await.unwrap();
    until("batch 1 acked", || metrics.acked_seq.get() == 1).await;
    assert_eq!(batches(&fakes[home]), [1], "still shipping to its shard");
    assert_eq!(metrics.shards.shards.get(), 2);
    assert_eq!(info(&metrics), [url_of(lasts[home], port)]);

    resolver.fail.store(false, Ordering::SeqCst);
    until("answered again", || resolves(&metrics, "ok") > ok_during).await;
    until("the last success moved on", || last_success() > first).await;
    eprintln!(
        "name server failing for {:?}: {} failed lookups counted (refresh 100ms), last success held, then +{:.2}s once it answered",
        failing.elapsed(),
        resolves(&metrics, "error"),
        last_success() - first
    );
    assert_eq!(resolves(&metrics, "timeout"), 0);
    assert_eq!(moves(&metrics), [0; 4], "a DNS outage moves nobody");
}

#[tokio::test]
async fn an_unreachable_shard_makes_the_agent_look_the_name_up_at_once() {
    let lasts = [2, 3];
    let (port, fakes) = pods(&lasts).await;
    let resolver = Recorded::default();
    resolver.set(&[ip(2), ip(3)]);
    // A refresh of an hour: any lookup after the first is the shipper's nudge.
    let (metrics, ev_tx, _stop) = start_dns("n1", port, Duration::from_secs(3600), &resolver, None);
    let home = preferred("n1", &lasts, port);
    until("connected", || metrics.connected.get() == 1).await;
    assert_eq!(resolver.lookups.load(Ordering::SeqCst), 1);
    // The shard goes down at batch 2 (its pod is replaced); the name then answers the other pod only.
    fakes[home].down_after_seq.store(1, Ordering::SeqCst);
    resolver.set(&[ip(lasts[1 - home])]);
    let down = tokio::time::Instant::now();
    ev_tx.send(batch(1)).await.unwrap();
    ev_tx.send(batch(2)).await.unwrap();
    until("batch 2 acked elsewhere", || metrics.acked_seq.get() == 2).await;
    until("looked up again", || {
        resolver.lookups.load(Ordering::SeqCst) >= 2
    })
    .await;
    eprintln!(
        "shard down → name looked up again after {:?} (refresh 1h)",
        down.elapsed()
    );
    assert_eq!(batches(&fakes[1 - home]), [2]);
    // The set no longer holds the dead shard: the agent stays where it is, no return after shard_retry.
    assert_eq!(metrics.connected.get(), 1);
}

#[tokio::test]
async fn the_ranks_of_a_job_meet_on_one_shard_before_and_after_the_set_changes() {
    let lasts = [2, 3, 4];
    let (port, fakes) = pods(&lasts).await;
    let resolver = Recorded::default();
    resolver.set(&[ip(2), ip(3)]);
    let job = || {
        SamplerEvent::Jobs(pb::JobInventory {
            jobs: vec![pb::Job {
                id: "slurm-88121".into(),
                ..Default::default()
            }],
        })
    };
    let refresh = Duration::from_millis(200);
    let ranks: Vec<_> = ["rank-node-a", "rank-node-b", "rank-node-c"]
        .into_iter()
        .map(|n| start_dns(n, port, refresh, &resolver, Some(job())))
        .collect();
    let nodes = ["rank-node-a", "rank-node-b", "rank-node-c"];
    let on = |f: usize, n: &str| hellos(&fakes[f]).iter().filter(|x| *x == n).count();
    let home = preferred("slurm-88121", &lasts[..2], port);
    until("every rank on the job's shard", || {
        nodes.iter().all(|n| on(home, n) > 0)
    })
    .await;
    // A third pod joins: wherever the job goes, all its ranks go there (or all stay).
    let changed = tokio::time::Instant::now();
    resolver.set(&[ip(4), ip(3), ip(2)]);
    let new_home = preferred("slurm-88121", &lasts, port);
    let moves = || -> Vec<u64> {
        ranks
            .iter()
            .map(|(m, _, _)| m.disconnects.with_label_values(&["moved"]).get())
            .collect()
    };
    let all_on = |f: usize, times: usize| nodes.iter().all(|n| on(f, n) >= times);
    if new_home == home {
        tokio::time::sleep(refresh * 5).await;
        assert_eq!(
            moves(),
            [0, 0, 0],
            "the job's shard did not change: nobody moves"
        );
    } else {
        until("every rank on the job's shard of the new set", || {
            all_on(new_home, 1)
        })
        .await;
        eprintln!(
            "a pod joined → the job's 3 ranks on its new shard in {:?}",
            changed.elapsed()
        );
        assert_eq!(moves(), [1, 1, 1]);
    }
    // The job's shard's record goes: all its ranks move to one shard, the job's next in the set.
    let left: Vec<u8> = lasts
        .iter()
        .copied()
        .filter(|&l| l != lasts[new_home])
        .collect();
    let changed = tokio::time::Instant::now();
    resolver.set(&left.iter().map(|&l| ip(l)).collect::<Vec<_>>());
    let next = lasts
        .iter()
        .position(|&l| l == left[preferred("slurm-88121", &left, port)])
        .unwrap();
    let already = nodes.iter().map(|n| on(next, n)).min().unwrap();
    until("every rank on the job's next shard", || {
        all_on(next, already + 1)
    })
    .await;
    eprintln!(
        "the job's shard's record removed → its 3 ranks together on the next in {:?}",
        changed.elapsed()
    );
    let m = moves();
    assert!(m.iter().all(|&x| x == m[0]) && m[0] >= 1, "{m:?}");
    for f in (0..3).filter(|&f| ![home, new_home, next].contains(&f)) {
        assert!(
            hellos(&fakes[f]).is_empty(),
            "a rank went to 127.0.0.{}",
            lasts[f]
        );
    }
}

#[tokio::test]
async fn localhost_resolves_with_the_system_resolver() {
    let fake = FakeCollector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::ingest_server::IngestServer::new(fake.clone()))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let mut s = settings(format!("dns+http://localhost:{port}"));
    s.collector_refresh = Duration::from_secs(1);
    let (metrics, ev_tx, _stop, _task) = start(s);
    // Where localhost also names ::1 (nothing listens there), the agent may try it first and move on.
    ev_tx.send(batch(1)).await.unwrap();
    until("batch 1 acked through localhost", || {
        metrics.acked_seq.get() == 1
    })
    .await;
    assert_eq!(batches(&fake), [1]);
}

/// A CA's PEM, and a certificate and key (PEM) for `name` it signs.
fn pki(name: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "commwatch test CA");
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca_pem, cert.pem(), key.serialize_pem())
}

/// The chart's case: the certificate names the headless Service, the agent dials a pod's address and checks
/// the Service's name (without that, rustls would check the address and refuse).
#[tokio::test]
async fn a_resolved_tls_shard_is_verified_against_the_dns_name() {
    let name = "commwatch-collector-headless.ns.svc";
    let (ca, cert, key) = pki(name);
    let listener = tokio::net::TcpListener::bind((ip(2), 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = FakeCollector::default();
    let identity = tonic::transport::Identity::from_pem(cert, key);
    tokio::spawn(
        tonic::transport::Server::builder()
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .unwrap()
            .add_service(pb::ingest_server::IngestServer::new(fake.clone()))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let resolver = Recorded::default();
    resolver.set(&[ip(2)]);
    let mut s = settings(format!("dns+https://{name}:{port}"));
    s.tls = Some(
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca)),
    );
    let metrics = Arc::new(AgentMetrics::new());
    let periods = Periods::new(Duration::from_millis(50), Duration::from_secs(1));
    let shipper = Shipper::new(s, metrics.clone(), periods, pb::Inventory::default())
        .with_resolver(Arc::new(resolver.clone()));
    let (ev_tx, ev_rx) = mpsc::channel(16);
    let (_stop, stop_rx) = watch::channel(false);
    tokio::spawn(shipper.run(ev_rx, stop_rx));
    ev_tx.send(batch(1)).await.unwrap();
    until("batch 1 acked over TLS", || metrics.acked_seq.get() == 1).await;
    assert_eq!(batches(&fake), [1]);
    assert_eq!(metrics.connects.with_label_values(&["error"]).get(), 0);
}

/// The rules of a new set, without a network: stay on a fallback while the preferred shard is the same,
/// move when the one in use is gone or the preferred one changed, ignore an empty set.
#[test]
fn a_new_set_moves_the_stream_only_when_it_must() {
    let periods = Periods::new(Duration::from_millis(50), Duration::from_secs(1));
    let metrics = Arc::new(AgentMetrics::new());
    let mut s = Shipper::new(
        settings("dns+http://shards.test:7070".into()),
        metrics,
        periods,
        pb::Inventory::default(),
    );
    assert!(s.urls.is_empty(), "nothing known before the first answer");
    let set = |lasts: &[u8]| discovery::ShardSet {
        urls: {
            let mut u: Vec<String> = lasts.iter().map(|&l| url_of(l, 7070)).collect();
            u.sort();
            u
        },
        server_names: Default::default(),
    };
    assert!(
        !s.apply_set(set(&[2, 3, 4])),
        "the first set: nothing to move from"
    );
    let preferred = s.target().to_string();
    // On a fallback (its preferred shard failed): a set with the same preferred shard keeps it there.
    s.advance();
    let fallback = s.target().to_string();
    let fifth: Vec<u8> = (5..=40)
        .find(|&l| {
            let mut with = set(&[2, 3, 4, l]).urls;
            with.sort();
            with[shard::order("n1", &with)[0]] == preferred
        })
        .map(|l| vec![2, 3, 4, l])
        .expect("some fifth address keeps n1's preferred shard");
    assert!(!s.apply_set(set(&fifth)));
    assert_eq!(s.target(), fallback, "still on the fallback");
    // The fallback's record goes: back to the preferred shard.
    let without: Vec<u8> = fifth
        .iter()
        .copied()
        .filter(|&l| url_of(l, 7070) != fallback)
        .collect();
    assert!(s.apply_set(set(&without)));
    assert_eq!(s.target(), preferred);
    // An empty answer is no set.
    assert!(!s.apply_set(set(&[])));
    assert_eq!(s.target(), preferred);
    // The preferred shard's record goes: to the next, which is now preferred.
    let rest: Vec<u8> = without
        .iter()
        .copied()
        .filter(|&l| url_of(l, 7070) != preferred)
        .collect();
    assert!(s.apply_set(set(&rest)));
    assert_eq!(s.pos, 0);
    assert_ne!(s.target(), preferred);
}
