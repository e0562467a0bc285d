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
//! - Shards by DNS: an entry `dns+http://NAME:PORT` (or `dns+https://`) stands for every address `NAME`
//!   resolves to, one shard each, as a Kubernetes headless Service answers ([`discovery`]). The names are
//!   resolved again every `collector_refresh` and at once when a collector cannot be reached ([`resolve`]);
//!   when the set changes the order is computed again, and the agent moves when its preferred shard changed
//!   or the one in use is gone (drained as for a job's move). Every agent that sees the same set picks the same
//!   shard for a job, so a job's ranks meet again on one shard within one refresh after a change.
//!
//! - Observable ([`observe`]): `/metrics` names the collector of the open stream
//!   (`commwatch_agent_collector_info`), the shards known (`commwatch_agent_collector_shards`), the streams
//!   that moved to another collector and why (`commwatch_agent_collector_moves_total{reason}`), and the DNS
//!   lookups (`commwatch_agent_discovery_resolves_total{result}`, `..._last_success_unix_seconds`).
//! - Quiet while shards are down: a failed connection, the move to the next shard and the wait before the
//!   next try are logged at most once per [`FAILURE_LOG_EVERY`] each, with the number held back since
//!   (every attempt is counted in `commwatch_agent_connects_total{result="error"}`): a thousand unreachable
//!   shards give a few lines a minute, not thousands.
//!
//! Files: this one holds the state kept across connections and the reconnect loop; [`session`] one connected
//! stream (a `select!` that dispatches each message kind to its method); [`buffer`] the resend buffer;
//! [`backoff`] the reconnect delays; [`shard`] the choice of collector; [`discovery`] and [`resolve`] the
//! shards behind a DNS name; [`observe`] the shard metrics.

mod backoff;
mod buffer;
pub mod discovery;
mod failure;
pub mod observe;
pub mod resolve;
mod session;
pub mod shard;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_model::throttle::LogThrottle;

use commwatch_proto::v1 as pb;
use pb::agent_message::Msg as AgentMsg;
use pb::collector_message::Msg as CollectorMsg;
use prost::Message;
use tokio::sync::{mpsc, watch};

pub use backoff::Backoff;
pub use buffer::ResendBuffer;
use discovery::{ShardSet, Target};
use resolve::{Discovery, Resolve};

use crate::sampler::{Periods, SamplerEvent};
use crate::telemetry::{AgentMetrics, MoveReason};

/// The gRPC client of the collector's ingest service.
type Client = pb::ingest_client::IngestClient<tonic::transport::Channel>;

/// Settings of the shipper.
#[derive(Debug, Clone)]
pub struct ShipperSettings {
    /// The collector URL, or several (shards) separated by commas; `dns+` entries are names to resolve.
    pub collector: String,
    /// How often `dns+` names are resolved again.
    pub collector_refresh: Duration,
    /// The configured `tls.server_name`: what a resolved shard's certificate is verified against (else the
    /// `dns+` name).
    pub tls_server_name: Option<String>,
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
    /// What the agent is blind to (`coverage::blindness` at start), sent in every Hello.
    pub blind: Vec<pb::Blindness>,
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

/// Failures to reach a collector are logged at most once per this, per kind, with the number held back.
pub const FAILURE_LOG_EVERY: Duration = Duration::from_secs(10);

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
    /// The collector setting's entries.
    targets: Vec<Target>,
    /// The collector URLs (shards): as configured, or as last resolved; empty until the first resolution.
    urls: Vec<String>,
    /// URL → TLS name, for shards resolved from a `dns+https` name.
    server_names: BTreeMap<String, String>,
    /// Resolves the `dns+` names (the system's resolver unless replaced).
    resolver: Arc<dyn Resolve>,
    /// The running discovery task's set and nudge; `None` without `dns+` names (or before `run`).
    discovery: Option<Discovery>,
    /// Indices into `urls`: the preferred collector for the current key first.
    order: Vec<usize>,
    /// Position in `order` of the collector in use.
    pos: usize,
    /// URL of the collector last dialled (a job or shard set change while connecting moves the target).
    dialed: String,
    /// URL of the collector of the last stream opened; `None` before the first.
    streamed: Option<String>,
    /// Why the agent left `streamed`, once the collector in use is another one ([`observe`]).
    move_reason: Option<MoveReason>,
    /// The failure lines' throttle ([`FAILURE_LOG_EVERY`]).
    failure_log: LogThrottle,
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
            targets: Vec::new(),
            urls: Vec::new(),
            server_names: BTreeMap::new(),
            resolver: Arc::new(resolve::SystemResolver),
            discovery: None,
            order: Vec::new(),
            pos: 0,
            dialed: String::new(),
            streamed: None,
            move_reason: None,
            failure_log: LogThrottle::new(FAILURE_LOG_EVERY),
        }
        .with_shards()
    }

    /// Parses the collector list and orders it for the node name (no job known yet). With `dns+` names the
    /// resolved shards join at `run`.
    fn with_shards(mut self) -> Shipper {
        let list = shard::parse_list(&self.settings.collector);
        self.targets = discovery::parse_targets(&list).unwrap_or_else(|e| {
            // Validated at start; a bad entry is dialled as is and fails there, said in the log.
            tracing::error!(error = %e, "collector setting");
            list.iter().cloned().map(Target::Url).collect()
        });
        let set = discovery::shard_set(&self.targets, &[], None);
        self.urls = set.urls;
        if self.urls.is_empty() && !discovery::has_dns(&self.targets) {
            self.urls.push(self.settings.collector.clone());
        }
        self.order = shard::order(&self.settings.node, &self.urls);
        self.count_shards();
        self
    }

    /// Resolves `dns+` names with `resolver` instead of the system's (tests: recorded answers).
    pub fn with_resolver(mut self, resolver: Arc<dyn Resolve>) -> Shipper {
        self.resolver = resolver;
        self
    }

    /// The key the shard is chosen by: the node's job id, else its name.
    fn key(&self) -> String {
        let ids = self
            .jobs
            .iter()
            .flat_map(|j| j.jobs.iter().map(|job| job.id.as_str()));
        shard::shard_key(&self.settings.node, ids).to_string()
    }

    /// A new set of shards from discovery: the order computed again. True when the stream should move: the
    /// preferred shard changed, or the one in use is gone.
    fn apply_set(&mut self, set: ShardSet) -> bool {
        self.server_names = set.server_names;
        if set.urls.is_empty() || set.urls == self.urls {
            return false;
        }
        let before = (!self.urls.is_empty()).then(|| {
            let preferred = self.urls[self.order[0]].clone();
            (preferred, self.target().to_string())
        });
        self.urls = set.urls;
        self.count_shards();
        self.order = shard::order(&self.key(), &self.urls);
        let preferred = self.urls[self.order[0]].clone();
        let Some((was_preferred, current)) = before else {
            self.pos = 0;
            return false;
        };
        let still = self.order.iter().position(|&i| self.urls[i] == current);
        match still {
            Some(p) if was_preferred == preferred => {
                self.pos = p;
                false
            }
            _ => {
                self.pos = 0;
                if current != preferred {
                    tracing::info!(from = %current, to = %preferred, "collector shards changed: moving");
                    self.note_retarget(&current, MoveReason::ShardSetChanged);
                }
                current != preferred
            }
        }
    }

    /// Asks discovery for a lookup now (a collector could not be reached: its record may be gone).
    fn nudge_discovery(&self) {
        if let Some(d) = &self.discovery {
            d.nudge.notify_one();
        }
    }

    /// The URL of the collector in use.
    fn target(&self) -> &str {
        &self.urls[self.order[self.pos]]
    }

    /// The shard key from the current job list; recomputes the order. True when the collector in use is no
    /// longer the preferred one (the stream should move).
    fn rekey(&mut self) -> bool {
        if self.urls.is_empty() {
            return false;
        }
        let key = self.key();
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
        let from = self.urls[current].clone();
        tracing::info!(key, from = %from, to = %self.target(), "job moved to another collector shard");
        self.note_retarget(&from, MoveReason::JobChanged);
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
        if matches!(outcome, Ended::Failed(_) | Ended::Lost(_)) {
            // The collector's record may be gone: look the names up again now.
            self.nudge_discovery();
        }
        match outcome {
            Ended::Shutdown => None,
            Ended::Moved(cause) => {
                self.metrics.disconnects.with_label_values(&["moved"]).inc();
                Some((cause, Duration::ZERO))
            }
            Ended::Lost(cause) => Some((cause, backoff.next_delay())),
            // The job (or the set of shards) moved while dialling: the new shard first, at once.
            Ended::Failed(cause) if self.target() != self.dialed => Some((cause, Duration::ZERO)),
            Ended::Failed(cause) if self.order.len() > 1 => {
                let from = self.target().to_string();
                let wrapped = self.advance();
                self.note_retarget(&from, MoveReason::Unreachable);
                if let Some(held) = self.failure_log.allow("next_shard", Instant::now()) {
                    tracing::warn!(cause, from, to = %self.target(), held_back = held,
                        "collector unreachable: trying the next shard");
                }
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
        self.start_discovery(&shutdown);
        while !*shutdown.borrow() {
            if self.urls.is_empty() && !self.wait_for_shards(&mut events, &mut shutdown).await {
                return;
            }
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
                    if let Some(held) = self.failure_log.allow("connect", Instant::now()) {
                        tracing::warn!(collector = %self.target(), error = %failure::describe(&e),
                            held_back = held, "cannot connect to the collector");
                    }
                    Ended::Failed("connect")
                }
            };
            self.metrics.connected.set(0);
            self.stream_closed();
            let Some((cause, delay)) = self.next_attempt(outcome, &mut backoff) else {
                return;
            };
            if self.events_closed && self.buffer.is_empty() {
                return;
            }
            if let Some(held) = self.failure_log.allow("ended", Instant::now()) {
                tracing::info!(
                    cause,
                    retry_in_ms = delay.as_millis() as u64,
                    held_back = held,
                    "stream to the collector ended"
                );
            }
            if !self.wait_absorbing(delay, &mut events, &mut shutdown).await {
                return;
            }
        }
    }

    /// With `dns+` names: starts resolving them.
    fn start_discovery(&mut self, shutdown: &watch::Receiver<bool>) {
        if self.discovery.is_some() || !discovery::has_dns(&self.targets) {
            return;
        }
        self.discovery = Some(resolve::spawn(
            self.targets.clone(),
            self.resolver.clone(),
            self.settings.collector_refresh,
            self.settings.tls_server_name.clone(),
            self.metrics.shards.clone(),
            shutdown.clone(),
        ));
    }

    /// Until discovery knows a shard, absorbing the sampler's events; false when `shutdown` fired first.
    async fn wait_for_shards(
        &mut self,
        events: &mut mpsc::Receiver<SamplerEvent>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        while self.urls.is_empty() {
            if self.events_closed && self.buffer.is_empty() {
                return false;
            }
            if self.discovery.is_none() {
                tracing::error!("no collector shard and no way to find one");
                return false;
            }
            tokio::select! {
                ev = events.recv(), if !self.events_closed => self.absorb_or_close(ev),
                set = resolve::next_set(&mut self.discovery) => {
                    self.apply_set(set);
                }
                _ = shutdown.changed() => return false,
            }
        }
        // What queued meanwhile (a job list known from the start) picks the first shard.
        while let Ok(ev) = events.try_recv() {
            self.absorb_event(ev);
        }
        true
    }

    /// The TLS settings for the collector in use: its `dns+https` name as the name to verify.
    fn target_tls(&self) -> Option<tonic::transport::ClientTlsConfig> {
        let tls = self.settings.tls.clone()?;
        Some(match self.server_names.get(self.target()) {
            Some(name) => tls.domain_name(name.clone()),
            None => tls,
        })
    }

    /// Connects to the collector while absorbing the sampler's events; `None` when `shutdown` fired first.
    async fn connect_absorbing(
        &mut self,
        events: &mut mpsc::Receiver<SamplerEvent>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<Result<Client, tonic::transport::Error>> {
        self.dialed = self.target().to_string();
        let connect = connect(
            self.dialed.clone(),
            self.settings.connect_timeout,
            self.target_tls(),
        );
        tokio::pin!(connect);
        loop {
            tokio::select! {
                ev = events.recv(), if !self.events_closed => self.absorb_or_close(ev),
                // A move is noticed once connected (or failed): the session checks the target.
                set = resolve::next_set(&mut self.discovery) => {
                    self.apply_set(set);
                }
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
                set = resolve::next_set(&mut self.discovery) => {
                    if self.apply_set(set) {
                        return true;
                    }
                }
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
                blind: self.settings.blind.clone(),
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
