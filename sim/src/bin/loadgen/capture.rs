//! The node shape: a real agent on one node of the simulated demo cluster (8 GPUs, its HCAs, NICs, NVLinks
//! and host, through the sim's trees and GPU backend), shipping to an in-process recorder for a few seconds.
//! What it recorded — the `Hello`, the job list and the batches — is what every simulated agent replays.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use commwatch_proto::v1 as pb;
use commwatch_sim::{Cluster, ClusterSpec, SimGpus, SimHost};
use pb::agent_message::Msg as AgentMsg;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

/// What one agent sent.
#[derive(Default, Clone)]
pub struct Capture {
    pub hello: Option<pb::Hello>,
    /// The job list of its last `InventoryUpdate` that carried one.
    pub jobs: Option<pb::JobInventory>,
    /// Every series described (the Hello's and the updates').
    pub series: Vec<pb::SeriesDescriptor>,
    pub batches: Vec<pb::SampleBatch>,
}

/// Errors capturing the node shape.
/// Each message says its cause itself, so none is also a `source()`: a chain printer says it once.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("simulated cluster: {0}")]
    Sim(commwatch_sim::SimError),
    #[error("temporary directory or listener: {0}")]
    Io(std::io::Error),
    #[error("starting the agent: {0}")]
    Agent(commwatch_agent::AgentError),
    #[error("the agent sent no Hello within the capture")]
    NoHello,
}

impl From<commwatch_sim::SimError> for CaptureError {
    fn from(e: commwatch_sim::SimError) -> Self {
        CaptureError::Sim(e)
    }
}

impl From<std::io::Error> for CaptureError {
    fn from(e: std::io::Error) -> Self {
        CaptureError::Io(e)
    }
}

impl From<commwatch_agent::AgentError> for CaptureError {
    fn from(e: commwatch_agent::AgentError) -> Self {
        CaptureError::Agent(e)
    }
}

/// Records what the agent sends; acks every batch.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Capture>>);

#[tonic::async_trait]
impl pb::ingest_server::Ingest for Recorder {
    type StreamStream = ReceiverStream<Result<pb::CollectorMessage, Status>>;

    async fn stream(
        &self,
        request: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<Self::StreamStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(64);
        let rec = self.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                let ack = rec.record(m);
                let reply = pb::CollectorMessage {
                    msg: Some(pb::collector_message::Msg::Ack(pb::Ack { seq: ack })),
                };
                if tx.send(Ok(reply)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

impl Recorder {
    /// Keeps `m`; returns the sequence number to ack.
    fn record(&self, m: pb::AgentMessage) -> u64 {
        let mut c = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match m.msg {
            Some(AgentMsg::Hello(h)) => {
                if let Some(inv) = &h.inventory {
                    c.series.extend(inv.series.iter().cloned());
                }
                c.hello = Some(h);
            }
            Some(AgentMsg::InventoryUpdate(u)) => {
                if let Some(inv) = u.inventory {
                    c.series.extend(inv.series);
                }
                if u.jobs.is_some() {
                    c.jobs = u.jobs;
                }
            }
            Some(AgentMsg::Batch(b)) => c.batches.push(b),
            _ => {}
        }
        c.batches.last().map_or(0, |b| b.seq)
    }
}

/// Runs the demo cluster's first node's agent for `span`, shipping a batch every `batch_period`, and returns
/// what it sent (the first and last batches, which may be partial, left out).
pub async fn capture(span: Duration, batch_period: Duration) -> Result<Capture, CaptureError> {
    let dir = tempfile::tempdir()?;
    let cluster = Cluster::create(dir.path(), ClusterSpec::demo())?;
    let procfs = cluster.write_procfs_trees()?;
    let (model, epoch) = (cluster.model().clone(), cluster.epoch());
    let (node, sysfs_root) = cluster.node_roots()[0].clone();
    let updater = cluster.spawn_updater(Duration::from_millis(10));

    let rec = Recorder::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::ingest_server::IngestServer::new(rec.clone()))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let config = commwatch_agent::AgentConfig {
        node,
        collector: Some(format!("http://{addr}")),
        sysfs_root,
        procfs_root: procfs[0].1.clone(),
        http_listen: "127.0.0.1:0".parse().expect("literal address"),
        sources: ["infiniband", "netdev", "host", "nvml", "processes"]
            .map(String::from)
            .to_vec(),
        steps_udp: None,
        steps_socket: None,
        batch_period,
        ..Default::default()
    };
    let extras = commwatch_agent::AgentExtras {
        gpu: Some(Box::new(SimGpus::new(&model, 0, epoch))),
        host: Some(Box::new(SimHost::new(&model, 0, epoch))),
    };
    let agent = commwatch_agent::start_with(config, extras).await?;
    tokio::time::sleep(span).await;
    agent.shutdown().await;
    server.abort();
    drop(updater);
    let mut c = rec.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if c.hello.is_none() {
        return Err(CaptureError::NoHello);
    }
    // The first batch may be partial (sources starting), the last too (cut at shutdown).
    if c.batches.len() > 3 {
        c.batches.remove(0);
        c.batches.pop();
    }
    Ok(c)
}
