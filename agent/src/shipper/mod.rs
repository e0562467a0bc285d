//! The shipper: one bidirectional gRPC stream to the collector, a bounded buffer of unacknowledged batches,
//! resend after reconnect, exponential backoff with jitter.
//!
//! Contract:
//! - Batches are numbered 1, 2, 3, ... per agent instance and kept until the collector acknowledges them
//!   (`Ack.seq` = highest sequence number it holds durably). After a reconnect the agent sends `Hello` with the
//!   full inventory, waits for the collector's first `Ack`, and resends every buffered batch above it.
//! - The buffer is bounded in bytes; when full, the oldest batches are dropped and counted
//!   (`commwatch_agent_dropped_batches_total`, and `SampleBatch.dropped_batches_total` on the wire).
//! - A stream with unacknowledged batches and no ack for `ack_timeout` is considered stalled and reopened.
//! - The shipper never blocks the sampler: it always drains the sampler's queue, connected or not.
//! - Several collectors (shards): the setting is a comma-separated list of URLs. The agent ships to one of
//!   them, chosen by rendezvous hashing ([`shard`]) on its job id (its node name when it runs no job), so all
//!   ranks of a job land on one collector. When its job moves it to another shard, the stream is drained
//!   (acks awaited briefly) and reopened there at once. When a collector cannot be reached (connect, stream
//!   open or first `Ack` fails) the agent moves to the next in its order; after `shard_retry` on a fallback
//!   it tries its preferred shard again. Acks are per collector but the agent's acked sequence number only
//!   rises, so a batch acked by shard A is never replayed to shard B; the unacked ones are (at least once). A
//!   collector that sees the agent again after a stint elsewhere counts the batches it did not get as a
//!   sequence gap.
//!
//! Files: this one holds the state kept across connections and the reconnect loop; [`session`] one connected
//! stream (a `select!` that dispatches each message kind to its method); [`buffer`] the resend buffer;
//! [`backoff`] the reconnect delays; [`shard`] the choice of collector.

mod backoff;
mod buffer;
mod failure;
mod session;
pub mod shard;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use commwatch_proto::v1 as pb;
use pb::agent_message::Msg as AgentMsg;
use pb::collector_message::Msg as CollectorMsg;
use prost::Message;
use tokio::sync::{mpsc, watch};

pub use backoff::Backoff;
pub use buffer::ResendBuffer;

use crate::sampler::{Periods, SamplerEvent};
use crate::telemetry::AgentMetrics;

/// The gRPC client of the collector's ingest service.
type Client = pb::ingest_client::IngestClient<tonic::transport::Channel>;

/// Settings of the shipper.
#[derive(Debug, Clone)]
pub struct ShipperSettings {
    /// The collector URL, or several (shards) separated by commas.
    pub collector: String,
    pub node: String,
    pub boot_id: String,
    pub instance_id: u64,
    pub buffer_bytes: usize,
    pub ack_timeout: Duration,
    /// On a fallback collector (shard), how long before the preferred one is tried again.
    pub shard_retry: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    pub connect_timeout: Duration,
    /// TLS towards the collector (`https://` URLs), built once at start.
    pub tls: Option<tonic::transport::ClientTlsConfig>,
    /// Bearer token sent with every stream.
    pub token: Option<std::sync::Arc<str>>,
    /// The probe server's address advertised after every Hello (`ProbeAdvert`); `None`: not sent.
    pub probe_advert: Option<String>,
}

/// Why a connection ended.
enum Ended {
    Shutdown,
    /// An established stream ended: the same collector is tried again (after the backoff).
    Lost(&'static str),
    /// The collector could not be reached (connect, stream open, first ack): the next one in the order is
    /// tried (at once, unless the order wrapped around).
    Failed(&'static str),
    /// The shard changed (the job moved, or back to the preferred one): reconnect at once.
    Moved(&'static str),
}

/// State kept across connections.
pub struct Shipper {
    settings: ShipperSettings,
    metrics: Arc<AgentMetrics>,
    periods: Arc<Periods>,
    buffer: ResendBuffer,
    inventory: pb::Inventory,
    /// The node's complete job list, sent after every Hello and on change.
    jobs: Option<pb::JobInventory>,
    /// Whether `jobs` still has to go out on the current stream.
    jobs_unsent: bool,
    next_seq: u64,
    acked: u64,
    events_closed: bool,
    /// The collector URLs (shards), as configured.
    urls: Vec<String>,
    /// Indices into `urls`: the preferred collector for the current key first.
    order: Vec<usize>,
    /// Position in `order` of the collector in use.
    pos: usize,
    /// Index into `urls` of the collector last dialled (a job change while connecting moves the target).
    dialed: usize,
}

impl Shipper {
    /// `inventory` is what the sampler discovered at start (the first `Hello` carries it).
    pub fn new(
        settings: ShipperSettings,
        metrics: Arc<AgentMetrics>,
        periods: Arc<Periods>,
        inventory: pb::Inventory,
    ) -> Shipper {
        metrics
            .buffer_capacity_bytes
            .set(settings.buffer_bytes as i64);
        Shipper {
            buffer: ResendBuffer::new(settings.buffer_bytes),
            settings,
            metrics,
            periods,
            inventory,
            jobs: None,
            jobs_unsent: false,
            next_seq: 1,
            acked: 0,
            events_closed: false,
            urls: Vec::new(),
            order: Vec::new(),
            pos: 0,
            dialed: 0,
        }
        .with_shards()
    }

    /// Parses the collector list and orders it for the node name (no job known yet).
    fn with_shards(mut self) -> Shipper {
        self.urls = shard::parse_list(&self.settings.collector);
        if self.urls.is_empty() {
            self.urls.push(self.settings.collector.clone());
        }
        self.order = shard::order(&self.settings.node, &self.urls);
        self
    }

    /// The URL of the collector in use.
    fn target(&self) -> &str {
        &self.urls[self.order[self.pos]]
    }

    /// The shard key from the current job list; recomputes the order. True when the collector in use is no
    /// longer the preferred one (the stream should move).
    fn rekey(&mut self) -> bool {
        let ids = self
            .jobs
            .iter()
            .flat_map(|j| j.jobs.iter().map(|job| job.id.as_str()));
        let key = shard::shard_key(&self.settings.node, ids).to_string();
        let (preferred, current) = (self.order[0], self.order[self.pos]);
        self.order = shard::order(&key, &self.urls);
        if self.order[0] == preferred {
            // Same preferred shard: stay where we are (a fallback stays a fallback).
            self.pos = self.order.iter().position(|&i| i == current).unwrap_or(0);
            return false;
        }
        self.pos = 0;
        if current == self.order[0] {
            return false;
        }
        tracing::info!(key, from = %self.urls[current], to = %self.target(), "job moved to another collector shard");
        true
    }

    /// After a failure to reach the collector in use: the next in the order. True when it wrapped around to
    /// the preferred one (every shard was tried).
    fn advance(&mut self) -> bool {
        self.pos = (self.pos + 1) % self.order.len();
        self.pos == 0
    }

    /// How long to wait before the next connection after `outcome`; `None` to stop.
    fn next_attempt(
        &mut self,
        outcome: Ended,
        backoff: &mut Backoff,
    ) -> Option<(&'static str, Duration)> {
        match outcome {
            Ended::Shutdown => None,
            Ended::Moved(cause) => {
                self.metrics.disconnects.with_label_values(&["moved"]).inc();
                Some((cause, Duration::ZERO))
            }
            Ended::Lost(cause) => Some((cause, backoff.next_delay())),
            // The job moved while dialling: the new shard first, at once.
            Ended::Failed(cause) if self.order[self.pos] != self.dialed => {
                Some((cause, Duration::ZERO))
            }
            Ended::Failed(cause) if self.order.len() > 1 => {
                let from = self.target().to_string();
                let wrapped = self.advance();
                tracing::warn!(cause, from, to = %self.target(), "collector unreachable: trying the next shard");
                let delay = if wrapped {
                    backoff.next_delay()
                } else {
                    Duration::ZERO
                };
                Some((cause, delay))
            }
            Ended::Failed(cause) => Some((cause, backoff.next_delay())),
        }
    }

    /// Runs until `shutdown` resolves or the sampler's queue closes (and everything buffered was sent and
    /// acknowledged, or the collector is unreachable).
    pub async fn run(
        mut self,
        mut events: mpsc::Receiver<SamplerEvent>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut backoff = Backoff::new(self.settings.backoff_min, self.settings.backoff_max);
        while !*shutdown.borrow() {
            let Some(client) = self.connect_absorbing(&mut events, &mut shutdown).await else {
                return;
            };
            let outcome = match client {
                Ok(client) => {
                    self.metrics.connects.with_label_values(&["ok"]).inc();
                    self.session(client, &mut events, &mut shutdown, &mut backoff)
                        .await
                }
                Err(e) => {
                    self.metrics.connects.with_label_values(&["error"]).inc();
                    tracing::warn!(collector = %self.target(), error = %failure::describe(&e), "cannot connect to the collector");
                    Ended::Failed("connect")
                }
            };
            self.metrics.connected.set(0);
            let Some((cause, delay)) = self.next_attempt(outcome, &mut backoff) else {
                return;
            };
            if self.events_closed && self.buffer.is_empty() {
                return;
            }
            tracing::info!(
                cause,
                retry_in_ms = delay.as_millis() as u64,
                "stream to the collector ended"
            );
            if !self.wait_absorbing(delay, &mut events, &mut shutdown).await {
                return;
            }
        }
    }

    /// Connects to the collector while absorbing the sampler's events; `None` when `shutdown` fired first.
    async fn connect_absorbing(
        &mut self,
        events: &mut mpsc::Receiver<SamplerEvent>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<Result<Client, tonic::transport::Error>> {
        self.dialed = self.order[self.pos];
        let connect = connect(
            self.target().to_string(),
            self.settings.connect_timeout,
            self.settings.tls.clone(),
        );
        tokio::pin!(connect);
        loop {
            tokio::select! {
                ev = events.recv(), if !self.events_closed => self.absorb_or_close(ev),
                res = &mut connect => return Some(res),
                _ = shutdown.changed() => return None,
            }
        }
    }

    /// Waits `delay` while absorbing the sampler's events; false when `shutdown` fired first.
    async fn wait_absorbing(
        &mut self,
        delay: Duration,
        events: &mut mpsc::Receiver<SamplerEvent>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                ev = events.recv(), if !self.events_closed => self.absorb_or_close(ev),
                _ = &mut sleep => return true,
                _ = shutdown.changed() => return false,
            }
        }
    }

    /// Absorbs an event while not connected; `None` means the sampler's queue closed.
    fn absorb_or_close(&mut self, ev: Option<SamplerEvent>) {
        match ev {
            Some(ev) => self.absorb_event(ev),
            None => self.events_closed = true,
        }
    }

    fn absorb_event(&mut self, ev: SamplerEvent) {
        match ev {
            SamplerEvent::Inventory(inv) => self.absorb_inventory(&inv),
            SamplerEvent::Batch(b) => {
                self.absorb_batch(b);
            }
            SamplerEvent::Jobs(j) => {
                // Not connected: the next connection goes to the new preferred shard anyway.
                self.absorb_jobs(j);
            }
        }
    }

    fn absorb_inventory(&mut self, inv: &pb::Inventory) {
        for l in &inv.links {
            match self.inventory.links.iter_mut().find(|x| x.id == l.id) {
                Some(x) => *x = l.clone(),
                None => self.inventory.links.push(l.clone()),
            }
        }
        for d in &inv.series {
            match self.inventory.series.iter_mut().find(|x| x.id == d.id) {
                Some(x) => *x = d.clone(),
                None => self.inventory.series.push(d.clone()),
            }
        }
    }

    /// Numbers a batch and buffers it; returns its sequence number.
    fn absorb_batch(&mut self, mut batch: pb::SampleBatch) -> u64 {
        batch.seq = self.next_seq;
        self.next_seq += 1;
        batch.dropped_batches_total = self.buffer.dropped();
        self.metrics.batch_bytes.observe(batch.encoded_len() as f64);
        let seq = batch.seq;
        let dropped = self.buffer.push(batch);
        if dropped > 0 {
            self.metrics.dropped_batches.inc_by(dropped);
            tracing::warn!(
                dropped,
                buffer_bytes = self.buffer.bytes(),
                "resend buffer full: dropped the oldest batches"
            );
        }
        self.update_gauges();
        seq
    }

    /// Keeps the node's new job list, to be sent on the current (or next) stream. True when the job list
    /// moves the node to another collector shard.
    fn absorb_jobs(&mut self, jobs: pb::JobInventory) -> bool {
        self.jobs = Some(jobs);
        self.jobs_unsent = true;
        self.rekey()
    }

    fn update_gauges(&self) {
        self.metrics.buffer_bytes.set(self.buffer.bytes() as i64);
        self.metrics.buffer_batches.set(self.buffer.len() as i64);
        self.metrics.acked_seq.set(self.acked as i64);
    }

    /// The collector holds every batch up to `seq` (never beyond the last one numbered).
    fn ack(&mut self, seq: u64) {
        if seq > self.acked {
            self.acked = seq.min(self.next_seq.saturating_sub(1));
        }
        self.buffer.ack(self.acked);
        self.update_gauges();
    }

    /// Applies the sampling periods the collector asks for.
    fn apply_config(&mut self, c: &pb::Config) {
        self.periods.apply(c.fast_period_ms, c.slow_period_ms);
        tracing::info!(
            fast_ms = self.periods.fast().as_millis() as u64,
            slow_ms = self.periods.slow().as_millis() as u64,
            "sampling periods set by the collector"
        );
    }

    /// A message from the collector: an `Ack` or a `Config`.
    fn handle_inbound(&mut self, msg: pb::CollectorMessage) {
        match msg.msg {
            Some(CollectorMsg::Ack(a)) => self.ack(a.seq),
            Some(CollectorMsg::Config(c)) => self.apply_config(&c),
            None => {}
        }
    }

    /// Queues the job list if it has not gone out on this stream yet.
    fn send_jobs(&mut self, tx: &mpsc::Sender<pb::AgentMessage>) {
        if !self.jobs_unsent {
            return;
        }
        let Some(jobs) = self.jobs.clone() else {
            self.jobs_unsent = false;
            return;
        };
        let msg = pb::AgentMessage {
            msg: Some(AgentMsg::InventoryUpdate(pb::InventoryUpdate {
                inventory: None,
                jobs: Some(jobs),
            })),
        };
        if tx.try_send(msg).is_ok() {
            self.jobs_unsent = false;
        }
    }

    /// The stream request, with the bearer token when one is configured.
    fn stream_request(
        &self,
        rx: mpsc::Receiver<pb::AgentMessage>,
    ) -> tonic::Request<tokio_stream::wrappers::ReceiverStream<pb::AgentMessage>> {
        let mut req = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        if let Some(t) = &self.settings.token {
            match format!("Bearer {t}").parse() {
                Ok(v) => {
                    req.metadata_mut().insert("authorization", v);
                }
                Err(_) => tracing::warn!(
                    "the token contains characters not allowed in a header; not sent"
                ),
            }
        }
        req
    }

    fn hello(&self) -> pb::AgentMessage {
        pb::AgentMessage {
            msg: Some(AgentMsg::Hello(pb::Hello {
                node: self.settings.node.clone(),
                agent_version: env!("CARGO_PKG_VERSION").to_string(),
                boot_id: self.settings.boot_id.clone(),
                instance_id: self.settings.instance_id,
                inventory: Some(self.inventory.clone()),
                fast_period_ms: self.periods.fast().as_millis() as u32,
                slow_period_ms: self.periods.slow().as_millis() as u32,
            })),
        }
    }
}

async fn connect(
    url: String,
    timeout: Duration,
    tls: Option<tonic::transport::ClientTlsConfig>,
) -> Result<Client, tonic::transport::Error> {
    let mut endpoint = tonic::transport::Endpoint::from_shared(url)?;
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls)?;
    }
    let endpoint = endpoint
        .connect_timeout(timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true);
    let channel = endpoint.connect().await?;
    Ok(pb::ingest_client::IngestClient::new(channel)
        .max_decoding_message_size(4 << 20)
        .max_encoding_message_size(64 << 20))
}
