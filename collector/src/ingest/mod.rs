//! gRPC ingest: the `commwatch.v1.Ingest/Stream` server.
//!
//! Per stream: the first message must be a `Hello` (else `INVALID_ARGUMENT`); the collector answers at once with
//! an `Ack` carrying the highest sequence number already held durably for that `(node, instance_id)` (0 if none)
//! and a `Config` when periods are configured. Batches are validated at the edge ([`domain`]), deduplicated by
//! sequence number (a resend is acked, not applied again; a gap is accepted and counted), applied to the store
//! under one node lock, then made durable (committed to SQLite when persistence is on, else at once). Acks are
//! coalesced: at most one per [`ACK_INTERVAL`] per stream, sent within that interval of the batch becoming
//! durable. A malformed message fails that stream only; a newer stream claiming the same node closes the older.

pub mod auth;
pub mod domain;
pub mod rate;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_model::clock::unix_now_ns;
use commwatch_proto::v1 as pb;
use commwatch_proto::v1::agent_message::Msg;
use prost::Message;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status, Streaming};
use tracing::{debug, info, warn};

use crate::config::CollectorConfig;
use crate::export::health::Health;
use crate::persist::PersistHandle;
use crate::store::{Batch, BatchOutcome, Hello, Inventory, JobList, NodeRef, Store, StoreError};
use domain::IngestError;

/// Shortest interval between two acks on one stream.
pub const ACK_INTERVAL: Duration = Duration::from_millis(20);

/// State shared by all streams.
pub(crate) struct Shared {
    pub store: Arc<Store>,
    pub health: Health,
    pub persist: Option<PersistHandle>,
    pub config: CollectorConfig,
    pub next_conn: AtomicU64,
    /// Flips to `true` when the collector shuts down: streams end with `UNAVAILABLE`.
    pub shutdown: watch::Receiver<bool>,
}

/// The tonic service.
pub struct IngestService {
    shared: Arc<Shared>,
}

impl IngestService {
    pub(crate) fn new(shared: Arc<Shared>) -> IngestService {
        IngestService { shared }
    }
}

type ReplyTx = mpsc::Sender<Result<pb::CollectorMessage, Status>>;

#[tonic::async_trait]
impl pb::ingest_server::Ingest for IngestService {
    type StreamStream = ReceiverStream<Result<pb::CollectorMessage, Status>>;

    async fn stream(
        &self,
        request: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<Self::StreamStream>, Status> {
        let peer = request.remote_addr();
        let identities = auth::identities(&request);
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            shared.health.streams.inc();
            let conn_id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
            let mut s = StreamTask {
                shared: &shared,
                tx: &tx,
                conn_id,
                node: None,
                node_name: String::new(),
                identities,
            };
            let end = s.run(inbound).await;
            if let Some(node) = &s.node {
                shared.store.release(node, conn_id);
            }
            match end {
                End::Closed => debug!(node = %s.node_name, ?peer, "agent stream closed"),
                End::Rejected(e) => {
                    shared
                        .health
                        .rejected_streams
                        .with_label_values(&[e.reason()])
                        .inc();
                    warn!(node = %s.node_name, ?peer, reason = e.reason(), error = %e, "agent stream rejected");
                    let _ = tx.send(Err(e.to_status())).await;
                }
                End::Status(status) => {
                    let _ = tx.send(Err(status)).await;
                }
            }
            shared.health.streams.dec();
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

enum End {
    /// The agent closed its side, or went away.
    Closed,
    /// The agent broke the protocol or a limit: fail the stream and count it.
    Rejected(IngestError),
    /// Collector-side end (superseded, shutting down).
    Status(Status),
}

impl From<IngestError> for End {
    fn from(e: IngestError) -> Self {
        End::Rejected(e)
    }
}

impl From<StoreError> for End {
    fn from(e: StoreError) -> Self {
        End::Rejected(e.into())
    }
}

struct StreamTask<'a> {
    shared: &'a Arc<Shared>,
    tx: &'a ReplyTx,
    conn_id: u64,
    node: Option<NodeRef>,
    node_name: String,
    /// Names the agent's client certificate vouches for (mutual TLS); `None` without a client certificate.
    identities: Option<Vec<String>>,
}

fn ack(seq: u64) -> pb::CollectorMessage {
    pb::CollectorMessage {
        msg: Some(pb::collector_message::Msg::Ack(pb::Ack { seq })),
    }
}

/// Maps a receive error (tonic decode failure, oversized message, transport error) to how the stream ends.
fn receive_error(status: Status, limit: usize) -> End {
    match status.code() {
        Code::OutOfRange | Code::ResourceExhausted => End::Rejected(IngestError::limit(
            "max_batch_bytes",
            "message",
            format!("larger than {limit} bytes"),
        )),
        Code::Internal if status.message().contains("decode") => {
            End::Rejected(IngestError::Decode(status.message().to_string()))
        }
        // The transport went away (reset, broken pipe): nothing to answer.
        _ => End::Closed,
    }
}

impl StreamTask<'_> {
    async fn send(&self, msg: pb::CollectorMessage) -> Result<(), End> {
        self.tx.send(Ok(msg)).await.map_err(|_| End::Closed)
    }

    async fn run(&mut self, mut inbound: Streaming<pb::AgentMessage>) -> End {
        match self.run_inner(&mut inbound).await {
            Ok(()) => End::Closed,
            Err(e) => e,
        }
    }

    async fn run_inner(&mut self, inbound: &mut Streaming<pb::AgentMessage>) -> Result<(), End> {
        let limit = self.shared.config.limits.max_batch_bytes;
        let mut shutdown = self.shared.shutdown.clone();
        // First known message must be a Hello; empty messages (unknown oneof members) are ignored.
        let hello_pb = loop {
            let msg = tokio::select! {
                m = inbound.message() => m,
                _ = stopped(&mut shutdown) => return Err(End::Status(Status::unavailable("collector shutting down"))),
            };
            match msg {
                Ok(Some(pb::AgentMessage {
                    msg: Some(Msg::Hello(h)),
                })) => break h,
                Ok(Some(pb::AgentMessage { msg: None })) => continue,
                Ok(Some(_)) => {
                    self.shared
                        .health
                        .batches
                        .with_label_values(&["rejected"])
                        .inc();
                    return Err(IngestError::invalid(
                        "message",
                        "the first message must be a Hello",
                    )
                    .into());
                }
                Ok(None) => return Ok(()),
                Err(status) => return Err(receive_error(status, limit)),
            }
        };
        let received = unix_now_ns();
        let hello_payload = self
            .shared
            .persist
            .as_ref()
            .map(|_| hello_pb.encode_to_vec());
        // Kept (persistence only) so that an InventoryUpdate can be stored as a complete Hello.
        let mut current_hello = self.shared.persist.as_ref().map(|_| hello_pb.clone());
        let hello = Hello::try_from(hello_pb)?;
        self.node_name = hello.node.clone();
        if let Some(ids) = &self.identities {
            if !ids.iter().any(|n| n == &hello.node) {
                self.shared
                    .health
                    .rejected_streams
                    .with_label_values(&["identity"])
                    .inc();
                warn!(node = %hello.node, certificate = ?ids, "agent reported as a node its certificate does not name");
                return Err(End::Status(Status::permission_denied(format!(
                    "the client certificate does not name node {:?}",
                    hello.node
                ))));
            }
        }
        hello.inventory.check_limits(&self.shared.config.limits)?;
        let (close_tx, mut close_rx) = oneshot::channel();
        let out = self
            .shared
            .store
            .hello(&hello, received, Some((self.conn_id, close_tx)))?;
        if out.superseded {
            self.shared.health.superseded_streams.inc();
            info!(node = %hello.node, instance_id = hello.instance_id, "newer stream for the node: the older one is closed");
        }
        let node = out.node.clone();
        self.node = Some(node.clone());
        let durable = out.durable.clone();
        let mut durable_rx = durable.subscribe();
        if let (Some(p), Some(payload)) = (&self.shared.persist, hello_payload) {
            p.hello(&hello.node, hello.instance_id, received, payload)
                .await;
        }
        info!(
            node = %hello.node,
            instance_id = hello.instance_id,
            agent_version = %hello.agent_version,
            links = hello.inventory.links.len(),
            series = hello.inventory.series.len(),
            highest_seq = out.highest_seq,
            "agent connected"
        );
        let held = *durable_rx.borrow_and_update();
        self.send(ack(held)).await?;
        let cfg = &self.shared.config;
        if cfg.fast_period_ms != 0 || cfg.slow_period_ms != 0 {
            self.send(pb::CollectorMessage {
                msg: Some(pb::collector_message::Msg::Config(pb::Config {
                    fast_period_ms: cfg.fast_period_ms,
                    slow_period_ms: cfg.slow_period_ms,
                })),
            })
            .await?;
        }

        let expiry_ns = i64::try_from(cfg.node_expiry.as_nanos() / 2).unwrap_or(i64::MAX);
        let mut scratch: Vec<u32> = Vec::new();
        let mut ack_pending = false;
        let mut last_ack_at = Instant::now();
        let ack_sleep = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(ack_sleep);
        let mut durable_open = true;
        // Rate limit: while throttled the stream is not read (acks still go out).
        let mut bucket = rate::SampleBucket::new(cfg.limits.max_samples_per_second, Instant::now());
        let throttle_sleep = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(throttle_sleep);
        let mut throttled = false;
        loop {
            tokio::select! {
                biased;
                _ = &mut close_rx => return Err(superseded(&hello.node)),
                _ = stopped(&mut shutdown) => {
                    return Err(End::Status(Status::unavailable("collector shutting down")));
                }
                _ = &mut ack_sleep, if ack_pending => {
                    let seq = *durable_rx.borrow_and_update();
                    ack_pending = false;
                    last_ack_at = Instant::now();
                    // Acks are cumulative: when the reply channel is full, the next one carries this too.
                    match self.tx.try_send(Ok(ack(seq))) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            ack_pending = true;
                            ack_sleep.as_mut().reset(tokio::time::Instant::now() + ACK_INTERVAL);
                        }
                        Err(mpsc::error::TrySendError::Closed(_)) => return Ok(()),
                    }
                }
                changed = durable_rx.changed(), if durable_open => {
                    if changed.is_err() {
                        durable_open = false;
                    } else if !ack_pending {
                        ack_pending = true;
                        ack_sleep.as_mut().reset((last_ack_at + ACK_INTERVAL).into());
                    }
                }
                _ = &mut throttle_sleep, if throttled => throttled = false,
                msg = inbound.message(), if !throttled => {
                    let msg = match msg {
                        Ok(Some(m)) => m,
                        Ok(None) => return Ok(()),
                        Err(status) => {
                            self.shared.health.hot.batches_rejected.inc();
                            return Err(receive_error(status, limit));
                        }
                    };
                    let now = unix_now_ns();
                    match msg.msg {
                        None => node.lock().touch(now),
                        Some(Msg::Hello(_)) => {
                            return Err(IngestError::invalid("hello", "only the first message of a stream may be a Hello").into());
                        }
                        Some(Msg::Heartbeat(_)) => {
                            if self.touch_node(&node, now, expiry_ns)? {
                                self.shared.store.ensure_present(&node);
                            }
                        }
                        Some(Msg::InventoryUpdate(u)) => {
                            let pb_inv = u.inventory;
                            if let Some(h) = current_hello.as_mut() {
                                merge_inventory(h, pb_inv.clone());
                            }
                            let inv = Inventory::try_from(pb_inv)?;
                            inv.check_limits(&cfg.limits)?;
                            // The job list is validated whole before anything is applied.
                            let jobs_payload = match (&self.shared.persist, &u.jobs) {
                                (Some(_), Some(j)) => Some(j.encode_to_vec()),
                                _ => None,
                            };
                            let jobs = u
                                .jobs
                                .map(|j| JobList::validated(j, &cfg.limits))
                                .transpose()?;
                            let job_counts = jobs.as_ref().map(|l| (l.jobs.len(), l.rank_count()));
                            {
                                let mut n = node.lock();
                                if !n.is_current(self.conn_id) {
                                    return Err(superseded(&hello.node));
                                }
                                n.apply_inventory(&inv, &cfg.limits)?;
                                if let Some(l) = jobs {
                                    n.set_jobs(l);
                                }
                                n.touch(now);
                            }
                            if job_counts.is_some() {
                                self.shared.store.note_jobs_changed();
                            }
                            if let (Some(p), Some(h)) = (&self.shared.persist, &current_hello) {
                                p.hello(&hello.node, hello.instance_id, now, h.encode_to_vec()).await;
                            }
                            if let (Some(p), Some(payload)) = (&self.shared.persist, jobs_payload) {
                                p.jobs(&hello.node, hello.instance_id, now, payload).await;
                            }
                            if let Some((jobs, ranks)) = job_counts {
                                debug!(node = %hello.node, jobs, ranks, "job list replaced");
                            }
                            debug!(node = %hello.node, links = inv.links.len(), series = inv.series.len(), "inventory update");
                        }
                        Some(Msg::Batch(b)) => {
                            let started = Instant::now();
                            let payload = self.shared.persist.as_ref().map(|_| b.encode_to_vec());
                            let batch = match Batch::try_from(b) {
                                Ok(b) => b,
                                Err(e) => {
                                    self.shared.health.hot.batches_rejected.inc();
                                    return Err(e.into());
                                }
                            };
                            let (outcome, was_stale) = {
                                let mut n = node.lock();
                                if !n.is_current(self.conn_id) {
                                    return Err(superseded(&hello.node));
                                }
                                let was_stale = now - n.last_seen_unix_ns() > expiry_ns;
                                (n.apply_batch(&batch, now, &mut scratch), was_stale)
                            };
                            if was_stale {
                                self.shared.store.ensure_present(&node);
                            }
                            let h = &self.shared.health;
                            match outcome {
                                Err(e) => {
                                    h.hot.batches_rejected.inc();
                                    return Err(e.into());
                                }
                                Ok(BatchOutcome::Duplicate) => {
                                    h.hot.batches_duplicate.inc();
                                    debug!(node = %hello.node, seq = batch.seq, "duplicate batch acked, not applied");
                                    if !ack_pending {
                                        ack_pending = true;
                                        ack_sleep.as_mut().reset((last_ack_at + ACK_INTERVAL).into());
                                    }
                                }
                                Ok(BatchOutcome::Accepted { gap, counts }) => {
                                    h.hot.batches_accepted.inc();
                                    let wait = bucket.take(counts.samples, Instant::now());
                                    if !wait.is_zero() {
                                        h.throttled_batches.inc();
                                        h.throttled_seconds.inc_by(wait.as_secs_f64());
                                        throttle_sleep.as_mut().reset(tokio::time::Instant::now() + wait);
                                        throttled = true;
                                    }
                                    h.samples.inc_by(counts.samples);
                                    if gap > 0 {
                                        h.gap_batches.inc_by(gap);
                                        debug!(node = %hello.node, seq = batch.seq, gap, "sequence gap: batches lost by the agent");
                                    }
                                    if counts.implausible > 0 { h.implausible_rates.inc_by(counts.implausible); }
                                    if counts.resets > 0 { h.counter_resets.inc_by(counts.resets); }
                                    if counts.refused > 0 { h.refused_samples.inc_by(counts.refused); }
                                    if counts.out_of_order > 0 { h.out_of_order_samples.inc_by(counts.out_of_order); }
                                    if counts.markers > 0 { h.hot.markers_accepted.inc_by(counts.markers); }
                                    if batch.invalid_markers > 0 {
                                        h.hot.markers_invalid.inc_by(batch.invalid_markers);
                                        debug!(node = %hello.node, seq = batch.seq, invalid = batch.invalid_markers, "invalid step markers dropped");
                                    }
                                    h.ingest_seconds.observe(started.elapsed().as_secs_f64());
                                    match (&self.shared.persist, payload) {
                                        (Some(p), Some(payload)) => {
                                            p.batch(&hello.node, hello.instance_id, batch.seq, now, payload, durable.clone()).await;
                                        }
                                        _ => mark_durable(&durable, batch.seq),
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Touches the node; returns whether it had gone stale (may have been expired from the map).
    fn touch_node(&self, node: &NodeRef, now: i64, stale_ns: i64) -> Result<bool, End> {
        let mut n = node.lock();
        if !n.is_current(self.conn_id) {
            return Err(superseded(&self.node_name));
        }
        let stale = now - n.last_seen_unix_ns() > stale_ns;
        n.touch(now);
        Ok(stale)
    }
}

/// Resolves when the collector shuts down.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

fn superseded(node: &str) -> End {
    End::Status(Status::aborted(format!(
        "superseded by a newer stream for node {node}"
    )))
}

/// Raises the instance's durable sequence number to `seq`.
pub(crate) fn mark_durable(durable: &watch::Sender<u64>, seq: u64) {
    durable.send_if_modified(|v| {
        if seq > *v {
            *v = seq;
            true
        } else {
            false
        }
    });
}

/// Folds an `InventoryUpdate` into the instance's Hello (links replaced by id, series appended), so that the
/// persisted Hello always carries the complete inventory.
fn merge_inventory(hello: &mut pb::Hello, update: Option<pb::Inventory>) {
    let Some(update) = update else { return };
    let inv = hello.inventory.get_or_insert_with(Default::default);
    for l in update.links {
        match inv.links.iter_mut().find(|x| x.id == l.id) {
            Some(x) => *x = l,
            None => inv.links.push(l),
        }
    }
    for s in update.series {
        if !inv.series.iter().any(|x| x.id == s.id) {
            inv.series.push(s);
        }
    }
}
