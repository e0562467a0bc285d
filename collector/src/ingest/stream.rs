//! One agent stream. It waits for the Hello ([`StreamTask::hello`]), then runs one `select!` over what can
//! wake it — the stream being superseded, the collector shutting down, the
//! throttle lifting, the next message — and dispatches each to one method: [`StreamTask::heartbeat`],
//! [`StreamTask::inventory_update`] (with its [`StreamTask::job_inventory`]), [`StreamTask::batch`] (with its
//! markers counted in [`count_accepted`]). The acks are the reply stream's ([`super::replies`]): handed the
//! instance's durable sequence number after the Hello, it acks each move; a resend asks it for an ack again.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use crate::persist::mark_durable;
use commwatch_model::clock::unix_now_ns;
use commwatch_proto::codec::Received;
use commwatch_proto::v1 as pb;
use commwatch_proto::v1::agent_message::Msg;
use prost::Message;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Sleep;
use tonic::{Code, Status, Streaming};
use tracing::{debug, info, warn};

use super::domain::IngestError;
use super::replies::{ack, Reply, ReplyTx};
use super::{rate, Shared};
use crate::store::{
    ApplyCounts, Batch, BatchOutcome, Hello, Inventory, JobList, NodeRef, StoreError,
};
use crate::telemetry::Health;

/// How a stream ended.
pub(super) enum End {
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

/// The stream of one agent connection.
pub(super) struct StreamTask<'a> {
    pub shared: &'a Arc<Shared>,
    pub tx: &'a ReplyTx,
    pub conn_id: u64,
    /// The node once its Hello was accepted (released when the stream ends).
    pub node: Option<NodeRef>,
    pub node_name: String,
    /// Names the agent's client certificate vouches for (mutual TLS); `None` without a client certificate.
    pub identities: Option<Vec<String>>,
    /// The connection's peer address (`None` on a transport without one): the key of the connection's node
    /// names in [`super::connections::ConnTable`].
    pub peer: Option<std::net::SocketAddr>,
}

/// What woke the stream loop.
enum Event {
    Superseded,
    ShuttingDown,
    Unthrottled,
    Message(Result<Option<Received>, Status>),
}

/// A node's complete job list from an inventory update, validated, with its encoding when persistence is on.
struct JobUpdate {
    list: JobList,
    payload: Option<Vec<u8>>,
}

/// A stream after its Hello was accepted.
struct Session {
    node: NodeRef,
    instance_id: u64,
    durable: Arc<watch::Sender<u64>>,
    /// The instance's Hello with every inventory update merged in (persistence only): what is stored, so that
    /// the persisted Hello always carries the complete inventory.
    current_hello: Option<pb::Hello>,
    /// A node not touched for this long may have been expired from the map (half of `node_expiry`).
    stale_ns: i64,
    scratch: Vec<u32>,
    /// Rate limit: while throttled the stream is not read (acks still go out).
    bucket: rate::SampleBucket,
    throttled: bool,
    throttle_sleep: Pin<Box<Sleep>>,
    /// Whether this stream's samples outside the clock window were warned about (once per stream).
    warned_clock: bool,
}

/// Maps a receive error (tonic decode failure, oversized message, transport error) to how the stream ends.
fn receive_error(status: &Status, limit: usize) -> End {
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

/// Resolves when the collector shuts down.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

fn superseded(node: &str) -> End {
    End::Status(Status::aborted(format!(
        "superseded by a newer stream for node {node}"
    )))
}

fn shutting_down() -> End {
    End::Status(Status::unavailable("collector shutting down"))
}

impl Session {
    /// Stops reading the stream for `wait` (the sample rate limit).
    fn throttle(&mut self, wait: std::time::Duration) {
        self.throttle_sleep
            .as_mut()
            .reset(tokio::time::Instant::now() + wait);
        self.throttled = true;
    }
}

impl StreamTask<'_> {
    async fn send(&self, reply: Reply) -> Result<(), End> {
        self.tx.send(reply).await.map_err(|_| End::Closed)
    }

    /// Asks the reply stream for an ack though nothing new is durable (a resent batch). One already queued
    /// (the channel full) carries this one too: acks are cumulative.
    fn ack_again(&self) -> Result<(), End> {
        match self.tx.try_send(Reply::Again) {
            Err(mpsc::error::TrySendError::Closed(_)) => Err(End::Closed),
            Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => Ok(()),
        }
    }

    /// Counts the series an inventory refuses and says so once for the inventory, with the first reason: their
    /// samples are skipped (counted apart), the stream goes on.
    fn note_refused(&self, inv: &Inventory) {
        let Some(first) = inv.refused.first() else {
            return;
        };
        self.health()
            .refused_series
            .inc_by(inv.refused.len() as u64);
        warn!(
            node = %self.node_name,
            refused = inv.refused.len(),
            first = %first.reason,
            "series refused: not stored, their samples skipped; the rest of the stream goes on"
        );
    }

    fn health(&self) -> &Health {
        &self.shared.health
    }

    pub(super) async fn run(&mut self, mut inbound: Streaming<Received>) -> End {
        match self.run_inner(&mut inbound).await {
            Ok(()) => End::Closed,
            Err(e) => e,
        }
    }

    async fn run_inner(&mut self, inbound: &mut Streaming<Received>) -> Result<(), End> {
        let limit = self.shared.config.limits.max_batch_bytes;
        let mut shutdown = self.shared.shutdown.clone();
        let Some(hello) = self.first_hello(inbound, &mut shutdown).await? else {
            return Ok(());
        };
        let (mut s, mut close_rx) = self.hello(hello).await?;
        // Made once: a fresh one at every wake would join and leave the waiters of the watch that every stream
        // shares (a lock each way), several times a batch.
        let stop = stopped(&mut shutdown);
        tokio::pin!(stop);
        loop {
            let event = tokio::select! {
                biased;
                _ = &mut close_rx => Event::Superseded,
                _ = &mut stop => Event::ShuttingDown,
                _ = s.throttle_sleep.as_mut(), if s.throttled => Event::Unthrottled,
                msg = inbound.message(), if !s.throttled => Event::Message(msg),
            };
            match event {
                Event::Superseded => return Err(superseded(&self.node_name)),
                Event::ShuttingDown => return Err(shutting_down()),
                Event::Unthrottled => s.throttled = false,
                Event::Message(Ok(Some(m))) => self.message(&mut s, m).await?,
                Event::Message(Ok(None)) => return Ok(()),
                Event::Message(Err(status)) => return Err(self.receive_failed(&status, limit)),
            }
        }
    }

    /// How a failed receive ends the stream: a message the agent got wrong is a rejected batch; the transport
    /// failing (reset, broken pipe, keepalive timeout) is the network's doing — counted apart and said at info.
    fn receive_failed(&self, status: &Status, limit: usize) -> End {
        let end = receive_error(status, limit);
        if matches!(end, End::Closed) {
            self.note_dropped(status);
        } else {
            self.health().hot.batches_rejected.inc();
        }
        end
    }

    fn note_dropped(&self, status: &Status) {
        self.health().dropped_streams.inc();
        info!(node = %self.node_name, peer = ?self.peer, error = %status.message(),
            "agent stream dropped by the transport");
    }

    /// Waits for the stream's first known message, which must be a Hello (empty messages — unknown oneof
    /// members — are ignored). `None`: the agent closed the stream first.
    async fn first_hello(
        &self,
        inbound: &mut Streaming<Received>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Option<pb::Hello>, End> {
        loop {
            let msg = tokio::select! {
                m = inbound.message() => m,
                _ = stopped(shutdown) => return Err(shutting_down()),
            };
            match msg.map(|m| m.map(|r| r.message)) {
                Ok(Some(pb::AgentMessage {
                    msg: Some(Msg::Hello(h)),
                })) => return Ok(Some(h)),
                Ok(Some(pb::AgentMessage { msg: None })) => continue,
                Ok(Some(_)) => {
                    self.health().batches.with_label_values(&["rejected"]).inc();
                    return Err(IngestError::invalid(
                        "message",
                        "the first message must be a Hello",
                    )
                    .into());
                }
                Ok(None) => return Ok(None),
                Err(status) => {
                    let end = receive_error(&status, self.shared.config.limits.max_batch_bytes);
                    if matches!(end, End::Closed) {
                        self.note_dropped(&status);
                    }
                    return Err(end);
                }
            }
        }
    }

    /// Accepts the Hello: checks it against the client certificate and the limits, registers the instance
    /// in the store (closing an older stream of the node), persists it, and answers with the held sequence
    /// number and the configured periods. Returns the session and the receiver that closes this stream when
    /// a newer one claims the node.
    async fn hello(
        &mut self,
        hello_pb: pb::Hello,
    ) -> Result<(Session, oneshot::Receiver<()>), End> {
        let received = unix_now_ns();
        let persist = self.shared.persist.clone();
        let hello_payload = persist.as_ref().map(|_| hello_pb.encode_to_vec());
        let current_hello = persist.as_ref().map(|_| hello_pb.clone());
        let hello = Hello::try_from(hello_pb)?;
        self.node_name = hello.node.clone();
        self.note_refused(&hello.inventory);
        self.check_identity(&hello)?;
        hello.inventory.check_limits(&self.shared.config.limits)?;
        self.claim_node(&hello.node)?;
        let (close_tx, close_rx) = oneshot::channel();
        let out = self
            .shared
            .store
            .hello(&hello, received, Some((self.conn_id, close_tx)))?;
        if out.superseded {
            self.health().superseded_streams.inc();
            info!(node = %hello.node, instance_id = hello.instance_id, "newer stream for the node: the older one is closed");
        }
        self.node = Some(out.node.clone());
        let mut durable_rx = out.durable.subscribe();
        if let (Some(p), Some(payload)) = (&persist, hello_payload) {
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
        self.greet(held, durable_rx).await?;
        let cfg = &self.shared.config;
        let session = Session {
            node: out.node,
            instance_id: hello.instance_id,
            durable: out.durable,
            current_hello,
            stale_ns: i64::try_from(cfg.node_expiry.as_nanos() / 2).unwrap_or(i64::MAX),
            scratch: Vec::new(),
            bucket: rate::SampleBucket::new(cfg.limits.max_samples_per_second, Instant::now()),
            throttled: false,
            throttle_sleep: Box::pin(tokio::time::sleep(std::time::Duration::ZERO)),
            warned_clock: false,
        };
        Ok((session, close_rx))
    }

    /// With mutual TLS, the Hello's node must be a name the client certificate vouches for.
    fn check_identity(&self, hello: &Hello) -> Result<(), End> {
        let Some(ids) = &self.identities else {
            return Ok(());
        };
        if ids.iter().any(|n| n == &hello.node) {
            return Ok(());
        }
        self.health()
            .rejected_streams
            .with_label_values(&["identity"])
            .inc();
        warn!(node = %hello.node, certificate = ?ids, "agent reported as a node its certificate does not name");
        Err(End::Status(Status::permission_denied(format!(
            "the client certificate does not name node {:?}",
            hello.node
        ))))
    }

    /// Counts `node` among the names this stream's connection reported as (`limits.max_nodes_per_connection`).
    fn claim_node(&self, node: &str) -> Result<(), End> {
        let Some(peer) = self.peer else { return Ok(()) };
        self.shared.conns.claim_node(peer, node).map_err(|n| {
            End::Rejected(IngestError::limit(
                "max_nodes_per_connection",
                "hello.node",
                format!("this connection already reported as {n} other nodes (limits.max_nodes_per_connection)"),
            ))
        })
    }

    /// The answer to a Hello: the sequence number held durably, then the periods when configured; then the
    /// reply stream takes over the acks, from `durable` (whose value `held` was read from).
    async fn greet(&self, held: u64, durable: watch::Receiver<u64>) -> Result<(), End> {
        self.send(Reply::Send(Ok(ack(held)))).await?;
        let cfg = &self.shared.config;
        if cfg.fast_period_ms != 0 || cfg.slow_period_ms != 0 {
            self.send(Reply::Send(Ok(pb::CollectorMessage {
                msg: Some(pb::collector_message::Msg::Config(pb::Config {
                    fast_period_ms: cfg.fast_period_ms,
                    slow_period_ms: cfg.slow_period_ms,
                })),
            })))
            .await?;
        }
        self.send(Reply::Acks(durable)).await
    }

    /// Dispatches one message after the Hello.
    async fn message(&self, s: &mut Session, received: Received) -> Result<(), End> {
        let now = unix_now_ns();
        match received.message.msg {
            None => {
                s.node.lock().touch(now);
                Ok(())
            }
            Some(Msg::Hello(_)) => Err(IngestError::invalid(
                "hello",
                "only the first message of a stream may be a Hello",
            )
            .into()),
            Some(Msg::Heartbeat(_)) => self.heartbeat(s, now),
            Some(Msg::InventoryUpdate(u)) => self.inventory_update(s, u, now).await,
            Some(Msg::Batch(b)) => self.batch(s, b, received.batch_bytes, now).await,
            Some(Msg::ProbeAdvert(a)) => {
                self.probe_advert(&a.address);
                s.node.lock().touch(now);
                Ok(())
            }
        }
    }

    /// Keeps the node's advertised probe address ([`crate::probes::advertised_address`]); a refused one is
    /// counted and logged, and the stream goes on.
    fn probe_advert(&self, address: &str) {
        let peer = self.peer.map(|p| p.ip());
        let adverts = &self.shared.probe_adverts;
        match adverts.record(&self.node_name, address, peer) {
            Ok(a) => debug!(node = %self.node_name, address = %a, "probe address advertised"),
            Err(why) => {
                let shown: String = address.chars().take(64).collect();
                warn!(node = %self.node_name, advertised = %shown.escape_debug(), %why,
                    "advertised probe address refused")
            }
        }
    }

    /// A heartbeat keeps the node fresh (and brings it back if the expiry sweep removed it meanwhile).
    fn heartbeat(&self, s: &Session, now: i64) -> Result<(), End> {
        let stale = {
            let mut n = s.node.lock();
            if !n.is_current(self.conn_id) {
                return Err(superseded(&self.node_name));
            }
            let stale = now - n.last_seen_unix_ns() > s.stale_ns;
            n.touch(now);
            stale
        };
        if stale {
            self.shared.store.ensure_present(&s.node);
        }
        Ok(())
    }

    /// An inventory update (with, optionally, the node's complete job list): validated whole, then applied
    /// under one node lock, then persisted as the merged Hello (and the job list).
    async fn inventory_update(
        &self,
        s: &mut Session,
        u: pb::InventoryUpdate,
        now: i64,
    ) -> Result<(), End> {
        let limits = &self.shared.config.limits;
        if let Some(h) = s.current_hello.as_mut() {
            merge_inventory(h, u.inventory.clone());
        }
        let inv = Inventory::try_from(u.inventory)?;
        self.note_refused(&inv);
        inv.check_limits(limits)?;
        let jobs = self.job_inventory(u.jobs)?;
        let job_counts = jobs
            .as_ref()
            .map(|j| (j.list.jobs.len(), j.list.rank_count()));
        let jobs_payload = {
            let mut n = s.node.lock();
            if !n.is_current(self.conn_id) {
                return Err(superseded(&self.node_name));
            }
            n.apply_inventory(&inv, limits)?;
            let payload = jobs.map(|j| {
                n.set_jobs(j.list);
                j.payload
            });
            n.touch(now);
            payload.flatten()
        };
        if job_counts.is_some() {
            self.shared.store.note_jobs_changed();
        }
        if let (Some(p), Some(h)) = (&self.shared.persist, &s.current_hello) {
            p.hello(&self.node_name, s.instance_id, now, h.encode_to_vec())
                .await;
        }
        if let (Some(p), Some(payload)) = (&self.shared.persist, jobs_payload) {
            p.jobs(&self.node_name, s.instance_id, now, payload).await;
        }
        if let Some((jobs, ranks)) = job_counts {
            debug!(node = %self.node_name, jobs, ranks, "job list replaced");
        }
        debug!(node = %self.node_name, links = inv.links.len(), series = inv.series.len(), "inventory update");
        Ok(())
    }

    /// The job list of an inventory update, validated whole (nothing is applied from a bad one), with its
    /// encoding when persistence is on.
    fn job_inventory(&self, jobs: Option<pb::JobInventory>) -> Result<Option<JobUpdate>, End> {
        let Some(j) = jobs else { return Ok(None) };
        let payload = self.shared.persist.as_ref().map(|_| j.encode_to_vec());
        let list = JobList::validated(j, &self.shared.config.limits)?;
        Ok(Some(JobUpdate { list, payload }))
    }

    /// A sample batch: validated, applied under the node's lock (a resend is acked, not applied again),
    /// counted, then made durable. `bytes`: the batch as received (persisted as it is; else encoded here).
    async fn batch(
        &self,
        s: &mut Session,
        b: pb::SampleBatch,
        bytes: Option<Vec<u8>>,
        now: i64,
    ) -> Result<(), End> {
        let started = Instant::now();
        let payload = self
            .shared
            .persist
            .as_ref()
            .map(|_| bytes.unwrap_or_else(|| b.encode_to_vec()));
        let batch = match Batch::try_from(b) {
            Ok(b) => b,
            Err(e) => {
                self.health().hot.batches_rejected.inc();
                return Err(e.into());
            }
        };
        let (outcome, was_stale) = {
            let mut n = s.node.lock();
            if !n.is_current(self.conn_id) {
                return Err(superseded(&self.node_name));
            }
            let was_stale = now - n.last_seen_unix_ns() > s.stale_ns;
            (n.apply_batch(&batch, now, &mut s.scratch), was_stale)
        };
        if was_stale {
            self.shared.store.ensure_present(&s.node);
        }
        let h = self.health();
        match outcome {
            Err(e) => {
                h.hot.batches_rejected.inc();
                Err(e.into())
            }
            Ok(BatchOutcome::Duplicate) => {
                h.hot.batches_duplicate.inc();
                debug!(node = %self.node_name, seq = batch.seq, "duplicate batch acked, not applied");
                self.ack_again()
            }
            Ok(BatchOutcome::Accepted { gap, counts }) => {
                h.hot.batches_accepted.inc();
                let wait = s.bucket.take(counts.samples, Instant::now());
                if !wait.is_zero() {
                    h.throttled_batches.inc();
                    h.throttled_seconds.inc_by(wait.as_secs_f64());
                    s.throttle(wait);
                }
                count_accepted(h, &self.node_name, &batch, gap, &counts);
                if counts.out_of_window > 0 && !s.warned_clock {
                    s.warned_clock = true;
                    let skew = self.shared.config.limits.max_clock_skew;
                    warn!(node = %self.node_name, samples = counts.out_of_window, seq = batch.seq,
                        max_clock_skew = ?skew,
                        "samples stamped before the Unix epoch or ahead of the collector's clock by more than \
                         limits.max_clock_skew were refused: is the node's clock set? (said once per stream, counted \
                         in commwatch_collector_out_of_window_samples_total)");
                }
                h.ingest_seconds.observe(started.elapsed().as_secs_f64());
                match (&self.shared.persist, payload) {
                    (Some(p), Some(payload)) => {
                        p.batch(
                            &self.node_name,
                            s.instance_id,
                            batch.seq,
                            now,
                            payload,
                            s.durable.clone(),
                        )
                        .await
                    }
                    // Durable at once: the reply stream acks it.
                    _ => mark_durable(&s.durable, batch.seq),
                }
                Ok(())
            }
        }
    }
}

/// Counts an accepted batch: its samples, the sequence gap before it, what the store refused or corrected,
/// its step markers (accepted, and dropped as invalid at the edge) and its refused Inspector records.
fn count_accepted(h: &Health, node: &str, batch: &Batch, gap: u64, counts: &ApplyCounts) {
    h.samples.inc_by(counts.samples);
    if gap > 0 {
        h.gap_batches.inc_by(gap);
        debug!(
            node,
            seq = batch.seq,
            gap,
            "sequence gap: batches lost by the agent"
        );
    }
    if counts.implausible > 0 {
        h.implausible_rates.inc_by(counts.implausible);
    }
    if counts.resets > 0 {
        h.counter_resets.inc_by(counts.resets);
    }
    if counts.refused > 0 {
        h.refused_samples.inc_by(counts.refused);
    }
    if counts.out_of_order > 0 {
        h.out_of_order_samples.inc_by(counts.out_of_order);
    }
    if counts.out_of_window > 0 {
        h.out_of_window_samples.inc_by(counts.out_of_window);
    }
    if counts.markers > 0 {
        h.hot.markers_accepted.inc_by(counts.markers);
    }
    if batch.invalid_markers > 0 {
        h.hot.markers_invalid.inc_by(batch.invalid_markers);
        debug!(
            node,
            seq = batch.seq,
            invalid = batch.invalid_markers,
            "invalid step markers dropped"
        );
    }
    for reason in &batch.invalid_collectives {
        h.refused_collectives.with_label_values(&[reason]).inc();
    }
    if !batch.invalid_collectives.is_empty() {
        debug!(
            node,
            seq = batch.seq,
            refused = batch.invalid_collectives.len(),
            "invalid NCCL Inspector records dropped"
        );
    }
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
