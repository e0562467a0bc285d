//! Test helpers: a collector on 127.0.0.1:0 and a fake agent speaking the real protocol through tonic.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use commwatch_collector::{start, CollectorConfig, CollectorHandle};
use commwatch_proto::v1 as pb;
use pb::agent_message::Msg;
use pb::collector_message::Msg as Reply;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

pub const MS: i64 = 1_000_000;
pub const S: i64 = 1_000_000_000;
/// A fixed epoch for sample timestamps (2024-01-01T00:00:00Z).
pub const T0: i64 = 1_704_067_200 * S;

pub fn config() -> CollectorConfig {
    CollectorConfig {
        grpc_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: "127.0.0.1:0".parse().unwrap(),
        ..CollectorConfig::default()
    }
}

pub async fn collector(cfg: CollectorConfig) -> CollectorHandle {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("warn")
        .try_init();
    start(cfg).await.expect("collector starts")
}

/// One IB link (id 1, mlx5_0 port 1, 25 GB/s) with tx (1) / rx (2) byte counters, symbol_errors (3),
/// port_xmit_wait (4), and a node-level CPU gauge (5).
pub fn hello(node: &str, instance_id: u64) -> pb::Hello {
    let counter = |id, metric: &str, link_id, max_value| pb::SeriesDescriptor {
        id,
        metric: metric.into(),
        kind: pb::SeriesKind::Counter as i32,
        link_id,
        labels: HashMap::new(),
        max_value,
        tier: 1,
    };
    pb::Hello {
        node: node.into(),
        agent_version: "test".into(),
        boot_id: "boot".into(),
        instance_id,
        inventory: Some(pb::Inventory {
            links: vec![pb::Link {
                id: 1,
                class: pb::LinkClass::Infiniband as i32,
                role: pb::LinkRole::Fabric as i32,
                device: "mlx5_0".into(),
                port: "1".into(),
                capacity_bytes_per_second: 25e9,
                state: "ACTIVE".into(),
                attributes: HashMap::new(),
                gpu: String::new(),
                link: String::new(),
                ..Default::default()
            }],
            series: vec![
                counter(1, "tx_bytes", 1, 0),
                counter(2, "rx_bytes", 1, 0),
                counter(3, "symbol_errors", 1, 0xffff),
                counter(4, "port_xmit_wait", 1, 0),
                pb::SeriesDescriptor {
                    id: 5,
                    metric: "cpu_utilization_ratio".into(),
                    kind: pb::SeriesKind::Gauge as i32,
                    link_id: 0,
                    labels: HashMap::new(),
                    max_value: 0,
                    tier: 2,
                },
            ],
        }),
        fast_period_ms: 50,
        slow_period_ms: 1000,
        blind: Vec::new(),
    }
}

/// A batch with one tick per `(timestamp, [(series, value)])`.
pub fn batch(seq: u64, ticks: &[(i64, Vec<(u32, u64)>)]) -> pb::SampleBatch {
    let mut b = pb::SampleBatch {
        seq,
        ..Default::default()
    };
    for (t, samples) in ticks {
        b.timestamps_unix_ns.push(*t);
        b.tick_lengths.push(samples.len() as u32);
        for (id, v) in samples {
            b.series_ids.push(*id);
            b.values.push(*v);
        }
    }
    b
}

/// Ticks every 50 ms from `start_tick`, `n` ticks: tx += tx_step, rx += rx_step per tick (starting at
/// `tick * step`).
pub fn traffic(start_tick: i64, n: i64, tx_step: u64, rx_step: u64) -> Vec<(i64, Vec<(u32, u64)>)> {
    (start_tick..start_tick + n)
        .map(|i| {
            (
                T0 + i * 50 * MS,
                vec![(1, i as u64 * tx_step), (2, i as u64 * rx_step)],
            )
        })
        .collect()
}

pub fn msg_hello(h: pb::Hello) -> pb::AgentMessage {
    pb::AgentMessage {
        msg: Some(Msg::Hello(h)),
    }
}

pub fn msg_batch(b: pb::SampleBatch) -> pb::AgentMessage {
    pb::AgentMessage {
        msg: Some(Msg::Batch(b)),
    }
}

/// A fake agent: one open stream.
pub struct Agent {
    tx: mpsc::Sender<pb::AgentMessage>,
    rx: Streaming<pb::CollectorMessage>,
}

impl Agent {
    /// Opens a stream; nothing sent yet.
    pub async fn open(addr: std::net::SocketAddr) -> Agent {
        let client = pb::ingest_client::IngestClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        Agent::open_on(client).await
    }

    /// Opens a stream on `channel` (a TLS one, say); nothing sent yet.
    pub async fn open_channel(channel: tonic::transport::Channel) -> Agent {
        Agent::open_on(pb::ingest_client::IngestClient::new(channel)).await
    }

    async fn open_on(
        mut client: pb::ingest_client::IngestClient<tonic::transport::Channel>,
    ) -> Agent {
        let (tx, rx) = mpsc::channel(64);
        let resp = client
            .stream(ReceiverStream::new(rx))
            .await
            .expect("stream opens");
        Agent {
            tx,
            rx: resp.into_inner(),
        }
    }

    /// Opens a stream, sends the Hello and returns the first Ack's seq.
    pub async fn connect(addr: std::net::SocketAddr, h: pb::Hello) -> (Agent, u64) {
        let mut a = Agent::open(addr).await;
        a.send(msg_hello(h)).await;
        let seq = a.next_ack().await.expect("first ack");
        (a, seq)
    }

    pub async fn send(&self, m: pb::AgentMessage) {
        self.tx.send(m).await.expect("stream open");
    }

    pub async fn send_batch(&self, b: pb::SampleBatch) {
        self.send(msg_batch(b)).await;
    }

    /// The next reply (Ack or Config), or the stream's error status.
    pub async fn next(&mut self) -> Result<Option<Reply>, tonic::Status> {
        match tokio::time::timeout(Duration::from_secs(5), self.rx.message()).await {
            Ok(Ok(Some(m))) => Ok(m.msg),
            Ok(Ok(None)) => Ok(None),
            Ok(Err(s)) => Err(s),
            Err(_) => panic!("no reply within 5 s"),
        }
    }

    /// The next Ack's seq (Configs skipped).
    pub async fn next_ack(&mut self) -> Result<u64, tonic::Status> {
        loop {
            match self.next().await? {
                Some(Reply::Ack(a)) => return Ok(a.seq),
                Some(Reply::Config(_)) => continue,
                None => return Err(tonic::Status::cancelled("stream ended")),
            }
        }
    }

    /// Waits for an Ack of at least `seq`.
    pub async fn ack_at_least(&mut self, seq: u64) -> u64 {
        loop {
            let s = self.next_ack().await.expect("ack");
            if s >= seq {
                return s;
            }
        }
    }

    /// Waits for the stream's error status.
    pub async fn error(&mut self) -> tonic::Status {
        loop {
            match self.next().await {
                Err(s) => return s,
                Ok(None) => panic!("stream ended without an error"),
                Ok(Some(_)) => continue,
            }
        }
    }
}

pub async fn get(url: String) -> (u16, String) {
    let r = reqwest::get(url).await.expect("http get");
    (r.status().as_u16(), r.text().await.expect("body"))
}

pub async fn nodes_json(h: &CollectorHandle) -> serde_json::Value {
    let (code, body) = get(format!("http://{}/api/v1/nodes", h.http_addr)).await;
    assert_eq!(code, 200);
    serde_json::from_str(&body).expect("json")
}

pub async fn metrics(h: &CollectorHandle) -> String {
    let (code, body) = get(format!("http://{}/metrics", h.http_addr)).await;
    assert_eq!(code, 200);
    body
}

/// Lines of the exposition for `node` (samples only).
pub fn node_lines(text: &str, node: &str) -> Vec<String> {
    let needle = format!("node=\"{node}\"");
    let mut v: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(&needle))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}
