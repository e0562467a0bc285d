//! The shipper against an in-process collector on loopback: the order of what goes out on a stream, acks
//! and configs coming back, the bearer token, resend after the collector closes a stream, and the end once
//! the sampler is gone and everything is acknowledged; with two collectors (shards), the move to the next one
//! when the first is down and to the job's shard when the job list changes, without replaying acked batches.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use commwatch_proto::v1 as pb;
use pb::agent_message::Msg as AgentMsg;
use pb::collector_message::Msg as CollectorMsg;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

use super::*;
use crate::sampler::Periods;
use crate::telemetry::MoveReason;

mod dns;

/// What the fake collector saw: every message in arrival order (with its stream's number) and the
/// `authorization` header of each stream.
#[derive(Default)]
struct Seen {
    messages: Vec<(usize, pb::AgentMessage)>,
    auth: Vec<Option<String>>,
}

/// Acks `Hello` with 0 (and sends a `Config`) and every batch with its seq; with `close_first_after_batch`,
/// the first stream ends, unacknowledged, at its first batch.
#[derive(Clone, Default)]
struct FakeCollector {
    seen: Arc<Mutex<Seen>>,
    streams: Arc<AtomicUsize>,
    close_first_after_batch: bool,
    /// At a batch above this seq (0: never): the stream ends unacknowledged and every later stream is
    /// refused.
    down_after_seq: Arc<AtomicU64>,
    down: Arc<AtomicBool>,
}

fn collector_msg(msg: CollectorMsg) -> Result<pb::CollectorMessage, Status> {
    Ok(pb::CollectorMessage { msg: Some(msg) })
}

#[tonic::async_trait]
impl pb::ingest_server::Ingest for FakeCollector {
    type StreamStream = ReceiverStream<Result<pb::CollectorMessage, Status>>;

    async fn stream(
        &self,
        request: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<Self::StreamStream>, Status> {
        if self.down.load(Ordering::SeqCst) {
            return Err(Status::unavailable("down"));
        }
        let stream = self.streams.fetch_add(1, Ordering::SeqCst);
        let auth = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        self.seen.lock().unwrap().auth.push(auth);
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(64);
        let fake = self.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                let reply = match &m.msg {
                    Some(AgentMsg::Hello(_)) => vec![
                        CollectorMsg::Ack(pb::Ack { seq: 0 }),
                        CollectorMsg::Config(pb::Config {
                            fast_period_ms: 100,
                            slow_period_ms: 2000,
                        }),
                    ],
                    Some(AgentMsg::Batch(b)) => vec![CollectorMsg::Ack(pb::Ack { seq: b.seq })],
                    _ => Vec::new(),
                };
                let is_batch = matches!(m.msg, Some(AgentMsg::Batch(_)));
                let limit = fake.down_after_seq.load(Ordering::SeqCst);
                let going_down = match &m.msg {
                    Some(AgentMsg::Batch(b)) => limit > 0 && b.seq > limit,
                    _ => false,
                };
                fake.seen.lock().unwrap().messages.push((stream, m));
                if going_down {
                    fake.down.store(true, Ordering::SeqCst);
                    return;
                }
                if is_batch && stream == 0 && fake.close_first_after_batch {
                    return;
                }
                for r in reply {
                    if tx.send(collector_msg(r)).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Serves `fake` on a loopback port; returns its URL.
async fn serve(fake: FakeCollector) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::ingest_server::IngestServer::new(fake))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    format!("http://{addr}")
}

fn settings(collector: String) -> ShipperSettings {
    ShipperSettings {
        collector,
        collector_refresh: Duration::from_secs(30),
        tls_server_name: None,
        node: "n1".into(),
        boot_id: "b".into(),
        instance_id: 7,
        buffer_bytes: 1 << 20,
        ack_timeout: Duration::from_secs(5),
        shard_retry: Duration::from_secs(60),
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
        connect_timeout: Duration::from_secs(2),
        tls: None,
        token: Some(Arc::from("t0k")),
        probe_advert: None,
        blind: Vec::new(),
    }
}

fn batch(value: u64) -> SamplerEvent {
    SamplerEvent::Batch(pb::SampleBatch {
        timestamps_unix_ns: vec![1],
        tick_lengths: vec![1],
        series_ids: vec![1],
        values: vec![value],
        ..Default::default()
    })
}

fn link(id: u32) -> pb::Link {
    pb::Link {
        id,
        device: format!("mlx5_{id}"),
        port: "1".into(),
        ..Default::default()
    }
}

/// The `collector` label of every `commwatch_agent_collector_info` series (each at 1).
fn info(metrics: &AgentMetrics) -> Vec<String> {
    use prometheus::core::Collector;
    metrics
        .shards
        .collector_info
        .collect()
        .iter()
        .flat_map(|f| f.get_metric())
        .inspect(|m| assert_eq!(m.get_gauge().value(), 1.0))
        .flat_map(|m| m.get_label().iter().map(|l| l.value().to_string()))
        .collect()
}

/// `commwatch_agent_collector_moves_total` for each reason, in [`MoveReason::ALL`]'s order.
fn moves(metrics: &AgentMetrics) -> [u64; 4] {
    MoveReason::ALL.map(|r| metrics.shards.moves.with_label_values(&[r.as_str()]).get())
}

/// Waits (up to 10 s) until `cond` holds.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A short name for each message, in order: `hello`, `batch <seq>`, `inventory <link ids>`, `jobs <n>`.
fn names(seen: &Seen) -> Vec<(usize, String)> {
    seen.messages
        .iter()
        .filter_map(|(s, m)| {
            let name = match m.msg.as_ref()? {
                AgentMsg::Hello(_) => "hello".to_string(),
                AgentMsg::Batch(b) => format!("batch {}", b.seq),
                AgentMsg::InventoryUpdate(u) => match (&u.inventory, &u.jobs) {
                    (Some(inv), _) => format!(
                        "inventory {:?}",
                        inv.links.iter().map(|l| l.id).collect::<Vec<_>>()
                    ),
                    (None, Some(j)) => format!("jobs {}", j.jobs.len()),
                    (None, None) => "empty update".to_string(),
                },
                AgentMsg::Heartbeat(_) => return None,
                AgentMsg::ProbeAdvert(a) => format!("probe {}", a.address),
            };
            Some((*s, name))
        })
        .collect()
}

#[tokio::test]
async fn updates_go_ahead_of_the_batches_that_use_them_and_acks_empty_the_buffer() {
    let fake = FakeCollector::default();
    let url = serve(fake.clone()).await;
    let metrics = Arc::new(AgentMetrics::new());
    let periods = Periods::new(Duration::from_millis(50), Duration::from_secs(1));
    let start = pb::Inventory {
        links: vec![link(1)],
        series: Vec::new(),
    };
    let shipper = Shipper::new(settings(url), metrics.clone(), periods.clone(), start);
    let (ev_tx, ev_rx) = mpsc::channel(16);
    let (_stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(shipper.run(ev_rx, stop_rx));
    until("connected", || metrics.connected.get() == 1).await;

    ev_tx.send(batch(10)).await.unwrap();
    ev_tx
        .send(SamplerEvent::Inventory(pb::Inventory {
            links: vec![link(2)],
            series: Vec::new(),
        }))
        .await
        .unwrap();
    ev_tx.send(batch(20)).await.unwrap();
    ev_tx
        .send(SamplerEvent::Jobs(pb::JobInventory {
            jobs: vec![pb::Job {
                id: "j".into(),
                ..Default::default()
            }],
        }))
        .await
        .unwrap();
    until("both batches acked", || metrics.acked_seq.get() == 2).await;
    until("the job list sent", || {
        names(&fake.seen.lock().unwrap()).len() == 5
    })
    .await;

    {
        let seen = fake.seen.lock().unwrap();
        let order: Vec<String> = names(&seen).into_iter().map(|(_, n)| n).collect();
        assert_eq!(
            order,
            ["hello", "batch 1", "inventory [2]", "batch 2", "jobs 1"]
        );
        match &seen.messages[0].1.msg {
            Some(AgentMsg::Hello(h)) => {
                assert_eq!((h.node.as_str(), h.instance_id), ("n1", 7));
                assert_eq!(h.inventory.as_ref().unwrap().links, vec![link(1)]);
                assert_eq!((h.fast_period_ms, h.slow_period_ms), (50, 1000));
            }
            other => panic!("first message is not a Hello: {other:?}"),
        }
        assert_eq!(seen.auth, vec![Some("Bearer t0k".to_string())]);
    }
    // The collector's Config set the periods.
    assert_eq!(
        (periods.fast(), periods.slow()),
        (Duration::from_millis(100), Duration::from_secs(2))
    );
    assert_eq!(metrics.buffer_batches.get(), 0);
    assert_eq!(metrics.sent_batches.get(), 2);

    // The sampler gone and everything acknowledged: the shipper is done.
    drop(ev_tx);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the shipper ends once the sampler is gone and the buffer is empty")
        .unwrap();
}

#[tokio::test]
async fn the_probe_address_is_advertised_right_after_the_hello() {
    let fake = FakeCollector::default();
    let url = serve(fake.clone()).await;
    let metrics = Arc::new(AgentMetrics::new());
    let periods = Periods::new(Duration::from_millis(50), Duration::from_secs(1));
    let mut s = settings(url);
    s.probe_advert = Some("0.0.0.0:7400".into());
    let shipper = Shipper::new(s, metrics.clone(), periods, pb::Inventory::default());
    let (ev_tx, ev_rx) = mpsc::channel(16);
    let (_stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(shipper.run(ev_rx, stop_rx));
    until("connected", || metrics.connected.get() == 1).await;
    ev_tx.send(batch(10)).await.unwrap();
    until("the batch acked", || metrics.acked_seq.get() == 1).await;
    let order: Vec<String> = names(&fake.seen.lock().unwrap())
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(order, ["hello", "probe 0.0.0.0:7400", "batch 1"]);
    drop(ev_tx);
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
}

#[test]
fn only_a_reachable_listen_address_is_advertised() {
    let parse = |s: &str| Some(s.parse::<std::net::SocketAddr>().unwrap());
    assert_eq!(crate::probe_advert(None), None);
    assert_eq!(crate::probe_advert(parse("127.0.0.1:7400")), None);
    assert_eq!(crate::probe_advert(parse("10.0.0.1:0")), None);
    assert_eq!(
        crate::probe_advert(parse("0.0.0.0:7400")).as_deref(),
        Some("0.0.0.0:7400")
    );
    assert_eq!(
        crate::probe_advert(parse("10.0.0.1:7400")).as_deref(),
        Some("10.0.0.1:7400")
    );
}

#[tokio::test]
async fn a_stream_closed_by_the_collector_is_reopened_and_unacked_batches_resent() {
    let fake = FakeCollector {
        close_first_after_batch: true,
        ..FakeCollector::default()
    };
    let url = serve(fake.clone()).await;
    let metrics = Arc::new(AgentMetrics::new());
    let periods = Periods::new(Duration::from_millis(50), Duration::from_secs(1));
    let shipper = Shipper::new(
        settings(url),
        metrics.clone(),
        periods,
        pb::Inventory::default(),
    );
    let (ev_tx, ev_rx) = mpsc::channel(16);
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(shipper.run(ev_rx, stop_rx));
    until("connected", || metrics.connected.get() == 1).await;
    ev_tx.send(batch(10)).await.unwrap();
    until("batch 1 acked on the second stream", || {
        metrics.acked_seq.get() == 1
    })
    .await;

    assert_eq!(
        names(&fake.seen.lock().unwrap()),
        [
            (0, "hello".to_string()),
            (0, "batch 1".to_string()),
            (1, "hello".to_string()),
            (1, "batch 1".to_string())
        ]
    );
    assert_eq!(metrics.resent_batches.get(), 1);
    assert_eq!(
        metrics.disconnects.with_label_values(&["collector"]).get(),
        1
    );

    stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the shipper stops at shutdown")
        .unwrap();
}

/// The batches `fake` received, by seq.
fn batches(fake: &FakeCollector) -> Vec<u64> {
    let seen = fake.seen.lock().unwrap();
    seen.messages
        .iter()
        .filter_map(|(_, m)| match &m.msg {
            Some(AgentMsg::Batch(b)) => Some(b.seq),
            _ => None,
        })
        .collect()
}

/// Two fakes served, listed in the settings; returns them with the one that ranks first for `key` first.
async fn two_shards(key: &str) -> (ShipperSettings, FakeCollector, FakeCollector) {
    let (a, b) = (FakeCollector::default(), FakeCollector::default());
    let (ua, ub) = (serve(a.clone()).await, serve(b.clone()).await);
    let urls = vec![ua, ub];
    let s = settings(urls.join(","));
    if shard::order(key, &urls)[0] == 0 {
        (s, a, b)
    } else {
        (s, b, a)
    }
}

fn start(
    settings: ShipperSettings,
) -> (
    Arc<AgentMetrics>,
    mpsc::Sender<SamplerEvent>,
    watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let metrics = Arc::new(AgentMetrics::new());
    let periods = Periods::new(Duration::from_millis(50), Duration::from_secs(1));
    let shipper = Shipper::new(settings, metrics.clone(), periods, pb::Inventory::default());
    let (ev_tx, ev_rx) = mpsc::channel(16);
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(shipper.run(ev_rx, stop_rx));
    (metrics, ev_tx, stop, task)
}

#[tokio::test]
async fn a_down_shard_moves_the_agent_to_the_next_which_gets_only_the_unacked_batches() {
    let (settings, preferred, next) = two_shards("n1").await;
    let urls = shard::parse_list(&settings.collector);
    let order = shard::order("n1", &urls);
    preferred.down_after_seq.store(2, Ordering::SeqCst);
    let (metrics, ev_tx, stop, task) = start(settings);
    until("connected", || metrics.connected.get() == 1).await;
    assert_eq!(info(&metrics), [urls[order[0]].clone()]);
    assert_eq!(metrics.shards.shards.get(), 2);
    ev_tx.send(batch(1)).await.unwrap();
    ev_tx.send(batch(2)).await.unwrap();
    until("batches 1 and 2 acked by the preferred shard", || {
        metrics.acked_seq.get() == 2
    })
    .await;
    // Batch 3 takes the preferred shard down unacknowledged; the agent moves on and replays it there.
    ev_tx.send(batch(3)).await.unwrap();
    until("batch 3 acked by the next shard", || {
        metrics.acked_seq.get() == 3
    })
    .await;
    ev_tx.send(batch(4)).await.unwrap();
    until("batch 4 acked", || metrics.acked_seq.get() == 4).await;
    assert_eq!(
        info(&metrics),
        [urls[order[1]].clone()],
        "the info series switched"
    );
    assert_eq!(moves(&metrics), [0, 1, 0, 0], "one move, unreachable");
    assert_eq!(batches(&preferred), [1, 2, 3]);
    assert_eq!(
        batches(&next),
        [3, 4],
        "acked batches are not replayed to another shard"
    );
    stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the shipper stops at shutdown")
        .unwrap();
}

#[tokio::test]
async fn a_job_on_another_shard_moves_the_stream_there() {
    let (settings, home, away) = two_shards("n1").await;
    let urls = shard::parse_list(&settings.collector);
    let home_url = urls[shard::order("n1", &urls)[0]].clone();
    let job = (0..)
        .map(|i| format!("job-{i}"))
        .find(|j| urls[shard::order(j, &urls)[0]] != home_url)
        .unwrap();
    let (metrics, ev_tx, stop, task) = start(settings);
    until("connected", || metrics.connected.get() == 1).await;
    ev_tx.send(batch(1)).await.unwrap();
    until("batch 1 acked", || metrics.acked_seq.get() == 1).await;
    ev_tx
        .send(SamplerEvent::Jobs(pb::JobInventory {
            jobs: vec![pb::Job {
                id: job.clone(),
                ..Default::default()
            }],
        }))
        .await
        .unwrap();
    until("moved", || {
        metrics.disconnects.with_label_values(&["moved"]).get() == 1 && metrics.connected.get() == 1
    })
    .await;
    ev_tx.send(batch(2)).await.unwrap();
    until("batch 2 acked", || metrics.acked_seq.get() == 2).await;
    assert_eq!(moves(&metrics), [1, 0, 0, 0], "one move, job_changed");
    assert_eq!(info(&metrics), [urls[shard::order(&job, &urls)[0]].clone()]);
    assert_ne!(info(&metrics), [home_url]);
    assert_eq!(batches(&home), [1]);
    assert_eq!(
        batches(&away),
        [2],
        "the acked batch 1 is not replayed to the job's shard"
    );
    stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the shipper stops at shutdown")
        .unwrap();
}

#[tokio::test]
async fn an_agent_on_a_fallback_returns_to_its_preferred_shard_when_it_is_back() {
    let (mut settings, preferred, fallback) = two_shards("n1").await;
    settings.shard_retry = Duration::from_secs(1);
    preferred.down.store(true, Ordering::SeqCst);
    let (metrics, ev_tx, stop, task) = start(settings);
    until("connected to the fallback", || metrics.connected.get() == 1).await;
    ev_tx.send(batch(1)).await.unwrap();
    until("batch 1 acked", || metrics.acked_seq.get() == 1).await;
    preferred.down.store(false, Ordering::SeqCst);
    until("back on the preferred shard", || {
        metrics.disconnects.with_label_values(&["moved"]).get() == 1 && metrics.connected.get() == 1
    })
    .await;
    ev_tx.send(batch(2)).await.unwrap();
    until("batch 2 acked", || metrics.acked_seq.get() == 2).await;
    // Trying the fallback before any stream was open is no move; coming back is.
    assert_eq!(moves(&metrics), [0, 0, 0, 1], "one move, retry_preferred");
    assert_eq!(batches(&fallback), [1]);
    assert_eq!(batches(&preferred), [2]);
    stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the shipper stops at shutdown")
        .unwrap();
}

#[tokio::test]
async fn a_job_list_queued_before_the_first_connection_sends_everything_to_the_jobs_shard() {
    let (settings, home, away) = two_shards("n1").await;
    let urls = shard::parse_list(&settings.collector);
    let home_url = urls[shard::order("n1", &urls)[0]].clone();
    let job = (0..)
        .map(|i| format!("job-{i}"))
        .find(|j| urls[shard::order(j, &urls)[0]] != home_url)
        .unwrap();
    let metrics = Arc::new(AgentMetrics::new());
    let periods = Periods::new(Duration::from_millis(50), Duration::from_secs(1));
    let shipper = Shipper::new(settings, metrics.clone(), periods, pb::Inventory::default());
    let (ev_tx, ev_rx) = mpsc::channel(16);
    ev_tx
        .send(SamplerEvent::Jobs(pb::JobInventory {
            jobs: vec![pb::Job {
                id: job,
                ..Default::default()
            }],
        }))
        .await
        .unwrap();
    ev_tx.send(batch(1)).await.unwrap();
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(shipper.run(ev_rx, stop_rx));
    until("batch 1 acked", || metrics.acked_seq.get() == 1).await;
    assert_eq!(batches(&away), [1]);
    assert!(batches(&home).is_empty(), "{:?}", batches(&home));
    stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the shipper stops at shutdown")
        .unwrap();
}

/// The move bookkeeping without a network: a move is counted when a stream opens on another collector than
/// the previous stream's, under the reason the agent left that one; walking the order while nothing answers
/// and coming back to the previous collector is no move.
#[test]
fn a_move_is_counted_once_a_stream_opens_elsewhere_under_why_it_left() {
    let metrics = Arc::new(AgentMetrics::new());
    let periods = Periods::new(Duration::from_millis(50), Duration::from_secs(1));
    let list = "http://a:1,http://u:secret@b:2,http://c:3";
    let mut s = Shipper::new(
        settings(list.into()),
        metrics.clone(),
        periods,
        pb::Inventory::default(),
    );
    let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(2));
    // The collector in use was dialled and could not be reached.
    let mut fail = |s: &mut Shipper| {
        s.dialed = s.target().to_string();
        s.next_attempt(Ended::Failed("connect"), &mut backoff)
    };
    assert_eq!(metrics.shards.shards.get(), 3);
    let label = |url: &str| observe::collector_label(url);
    let first = s.target().to_string();
    s.stream_opened();
    assert_eq!(info(&metrics), [label(&first)]);
    s.stream_closed();
    assert!(info(&metrics).is_empty(), "no stream, no series");
    // Two shards unreachable, the third answers: one move.
    fail(&mut s);
    fail(&mut s);
    let third = s.target().to_string();
    s.stream_opened();
    assert_eq!(moves(&metrics), [0, 1, 0, 0]);
    assert_eq!(info(&metrics), [label(&third)]);
    assert!(
        !info(&metrics)[0].contains("secret"),
        "{:?}",
        info(&metrics)
    );
    // Around the whole order and back to the third: no move.
    s.stream_closed();
    for _ in 0..3 {
        fail(&mut s);
    }
    assert_eq!(s.target(), third);
    s.stream_opened();
    assert_eq!(moves(&metrics), [0, 1, 0, 0]);
    // A job whose shard is the one in neither place: job_changed.
    let urls = s.urls.clone();
    let job = (0..)
        .map(|i| format!("job-{i}"))
        .find(|j| ![&first, &third].contains(&&urls[shard::order(j, &urls)[0]]))
        .unwrap();
    assert!(s.absorb_jobs(pb::JobInventory {
        jobs: vec![pb::Job {
            id: job,
            ..Default::default()
        }],
    }));
    s.stream_opened();
    assert_eq!(moves(&metrics), [1, 1, 0, 0]);
    assert_ne!(info(&metrics), [label(&third)]);
    assert_eq!(info(&metrics).len(), 1, "one series at a time");
}
