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

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use commwatch_model::clock::unix_now_ns;
use commwatch_proto::v1 as pb;
use pb::agent_message::Msg as AgentMsg;
use pb::collector_message::Msg as CollectorMsg;
use prost::Message;
use rand::Rng;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::sampler::{Periods, SamplerEvent};
use crate::telemetry::AgentMetrics;

/// Capacity of the per-connection outbound queue (messages). Beyond it, batches wait in the resend buffer.
const OUTBOUND_QUEUE: usize = 64;
/// A heartbeat is sent when nothing else was sent for this long.
const HEARTBEAT_AFTER: Duration = Duration::from_secs(5);
/// How long to wait for the collector's first `Ack` after `Hello`.
const HELLO_ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of the shipper.
#[derive(Debug, Clone)]
pub struct ShipperSettings {
    pub collector: String,
    pub node: String,
    pub boot_id: String,
    pub instance_id: u64,
    pub buffer_bytes: usize,
    pub ack_timeout: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    pub connect_timeout: Duration,
    /// TLS towards the collector (`https://` URLs), built once at start.
    pub tls: Option<tonic::transport::ClientTlsConfig>,
    /// Bearer token sent with every stream.
    pub token: Option<std::sync::Arc<str>>,
}

struct Entry {
    seq: u64,
    bytes: usize,
    batch: pb::SampleBatch,
}

/// Unacknowledged batches, oldest first, bounded in encoded bytes.
pub struct ResendBuffer {
    entries: VecDeque<Entry>,
    bytes: usize,
    capacity: usize,
    dropped: u64,
}

impl ResendBuffer {
    pub fn new(capacity: usize) -> ResendBuffer {
        ResendBuffer {
            entries: VecDeque::new(),
            bytes: 0,
            capacity,
            dropped: 0,
        }
    }

    /// Adds a batch (its `seq` must be above every held one); drops the oldest while over capacity and
    /// returns how many were dropped. The newest batch is always kept.
    pub fn push(&mut self, batch: pb::SampleBatch) -> u64 {
        let bytes = batch.encoded_len();
        self.bytes += bytes;
        self.entries.push_back(Entry {
            seq: batch.seq,
            bytes,
            batch,
        });
        let mut dropped = 0;
        while self.bytes > self.capacity && self.entries.len() > 1 {
            if let Some(e) = self.entries.pop_front() {
                self.bytes -= e.bytes;
                dropped += 1;
            }
        }
        self.dropped += dropped;
        dropped
    }

    /// Forgets every batch with `seq <= acked`.
    pub fn ack(&mut self, acked: u64) {
        while let Some(e) = self.entries.front() {
            if e.seq > acked {
                break;
            }
            self.bytes -= e.bytes;
            self.entries.pop_front();
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Batches dropped so far because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
    /// Held batches with `seq > after`, oldest first.
    ///
    /// Held sequence numbers are consecutive (drops and acks only remove from the front), so this indexes
    /// directly instead of scanning: resending a full buffer stays linear.
    fn after(&self, after: u64) -> impl Iterator<Item = &Entry> {
        let skip = match self.entries.front() {
            Some(front) => usize::try_from(after.saturating_add(1).saturating_sub(front.seq))
                .unwrap_or(usize::MAX),
            None => 0,
        };
        self.entries.iter().skip(skip)
    }
    fn oldest_seq(&self) -> Option<u64> {
        self.entries.front().map(|e| e.seq)
    }
}

/// Exponential backoff with jitter: each delay is uniformly random in [d/2, d], d doubling up to `max`.
#[derive(Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max,
            current: min,
        }
    }
    pub fn next_delay(&mut self) -> Duration {
        let d = self.current;
        self.current = (self.current * 2).min(self.max);
        let lo = d / 2;
        let span = d - lo;
        lo + span.mul_f64(rand::rng().random::<f64>())
    }
    pub fn reset(&mut self) {
        self.current = self.min;
    }
}

/// Why a connection ended.
enum Ended {
    Shutdown,
    Lost(&'static str),
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

    fn update_gauges(&self) {
        self.metrics.buffer_bytes.set(self.buffer.bytes() as i64);
        self.metrics.buffer_batches.set(self.buffer.len() as i64);
        self.metrics.acked_seq.set(self.acked as i64);
    }

    fn ack(&mut self, seq: u64) {
        if seq > self.acked {
            self.acked = seq.min(self.next_seq.saturating_sub(1));
        }
        self.buffer.ack(self.acked);
        self.update_gauges();
    }

    /// Runs until `shutdown` resolves or the sampler's queue closes (and everything buffered was sent and
    /// acknowledged, or the collector is unreachable).
    pub async fn run(
        mut self,
        mut events: mpsc::Receiver<SamplerEvent>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut backoff = Backoff::new(self.settings.backoff_min, self.settings.backoff_max);
        loop {
            if *shutdown.borrow() {
                return;
            }
            let connect = connect(
                self.settings.collector.clone(),
                self.settings.connect_timeout,
                self.settings.tls.clone(),
            );
            tokio::pin!(connect);
            let client = loop {
                tokio::select! {
                    ev = events.recv(), if !self.events_closed => match ev {
                        Some(ev) => self.absorb_event(ev),
                        None => self.events_closed = true,
                    },
                    res = &mut connect => break res,
                    _ = shutdown.changed() => return,
                }
            };
            let outcome = match client {
                Ok(client) => {
                    self.metrics.connects.with_label_values(&["ok"]).inc();
                    self.session(client, &mut events, &mut shutdown, &mut backoff)
                        .await
                }
                Err(e) => {
                    self.metrics.connects.with_label_values(&["error"]).inc();
                    tracing::warn!(collector = %self.settings.collector, error = %e, "cannot connect to the collector");
                    Ended::Lost("connect")
                }
            };
            self.metrics.connected.set(0);
            match outcome {
                Ended::Shutdown => return,
                Ended::Lost(cause) => {
                    if self.events_closed && self.buffer.is_empty() {
                        return;
                    }
                    let delay = backoff.next_delay();
                    tracing::info!(
                        cause,
                        retry_in_ms = delay.as_millis() as u64,
                        "stream to the collector ended"
                    );
                    let sleep = tokio::time::sleep(delay);
                    tokio::pin!(sleep);
                    loop {
                        tokio::select! {
                            ev = events.recv(), if !self.events_closed => match ev {
                                Some(ev) => self.absorb_event(ev),
                                None => self.events_closed = true,
                            },
                            _ = &mut sleep => break,
                            _ = shutdown.changed() => return,
                        }
                    }
                }
            }
        }
    }

    /// Absorbs an event during a session: an inventory update is also queued to be sent before the first
    /// batch numbered after it.
    fn absorb_live(&mut self, ev: SamplerEvent, pending_inv: &mut VecDeque<(u64, pb::Inventory)>) {
        match ev {
            SamplerEvent::Inventory(inv) => {
                self.absorb_inventory(&inv);
                pending_inv.push_back((self.next_seq, inv));
            }
            ev => self.absorb_event(ev),
        }
    }

    fn absorb_event(&mut self, ev: SamplerEvent) {
        match ev {
            SamplerEvent::Inventory(inv) => self.absorb_inventory(&inv),
            SamplerEvent::Batch(b) => {
                self.absorb_batch(b);
            }
            SamplerEvent::Jobs(j) => {
                self.jobs = Some(j);
                self.jobs_unsent = true;
            }
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

    /// One connected stream, until it ends.
    async fn session(
        &mut self,
        mut client: pb::ingest_client::IngestClient<tonic::transport::Channel>,
        events: &mut mpsc::Receiver<SamplerEvent>,
        shutdown: &mut tokio::sync::watch::Receiver<bool>,
        backoff: &mut Backoff,
    ) -> Ended {
        // Drain what queued while connecting so the Hello carries the newest inventory.
        while let Ok(ev) = events.try_recv() {
            self.absorb_event(ev);
        }
        let (tx, rx) = mpsc::channel::<pb::AgentMessage>(OUTBOUND_QUEUE);
        if tx.try_send(self.hello()).is_err() {
            return Ended::Lost("queue");
        }
        // A new stream knows no jobs: send them right after the Hello.
        self.jobs_unsent = self.jobs.is_some();
        self.send_jobs(&tx);
        let response = tokio::select! {
            r = client.stream(self.stream_request(rx)) => r,
            _ = tokio::time::sleep(HELLO_ACK_TIMEOUT) => return Ended::Lost("open timeout"),
            _ = shutdown.changed() => return Ended::Shutdown,
        };
        let mut inbound = match response {
            Ok(r) => r.into_inner(),
            Err(status) => {
                tracing::warn!(code = ?status.code(), message = status.message(), "collector refused the stream");
                return Ended::Lost("refused");
            }
        };
        // The collector's first Ack says what it already holds for this instance.
        let first = tokio::select! {
            m = inbound.message() => m,
            _ = tokio::time::sleep(HELLO_ACK_TIMEOUT) => return Ended::Lost("no ack after hello"),
            _ = shutdown.changed() => return Ended::Shutdown,
        };
        match first {
            Ok(Some(msg)) => self.handle_inbound(msg),
            Ok(None) => return Ended::Lost("closed"),
            Err(status) => {
                tracing::warn!(code = ?status.code(), message = status.message(), "stream failed after hello");
                return Ended::Lost("error");
            }
        }
        self.metrics.connected.set(1);
        tracing::info!(collector = %self.settings.collector, acked = self.acked, buffered = self.buffer.len(), "connected");
        // Resend what the collector does not hold yet.
        let mut sent_upto = self.acked;
        let resend: u64 = self.buffer.after(sent_upto).count() as u64;
        if resend > 0 {
            self.metrics.resent_batches.inc_by(resend);
        }
        // Inventory updates that arrive during this session: (first seq that may use them, update).
        let mut pending_inv: VecDeque<(u64, pb::Inventory)> = VecDeque::new();
        let mut last_sent = Instant::now();
        let mut last_progress = Instant::now();
        let mut ticker = tokio::time::interval(Duration::from_millis(250));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stable_since = Instant::now();
        loop {
            // Send as much as the outbound queue takes, in order.
            sent_upto = self.pump(&tx, sent_upto, &mut pending_inv, &mut last_sent);
            self.send_jobs(&tx);
            tokio::select! {
                ev = events.recv(), if !self.events_closed => match ev {
                    Some(ev) => self.absorb_live(ev, &mut pending_inv),
                    None => self.events_closed = true,
                },
                m = inbound.message() => match m {
                    Ok(Some(msg)) => {
                        let before = self.acked;
                        self.handle_inbound(msg);
                        if self.acked > before {
                            last_progress = Instant::now();
                        }
                    }
                    Ok(None) => {
                        self.metrics.disconnects.with_label_values(&["collector"]).inc();
                        return Ended::Lost("closed by collector");
                    }
                    Err(status) => {
                        tracing::warn!(code = ?status.code(), message = status.message(), "stream failed");
                        self.metrics.disconnects.with_label_values(&["error"]).inc();
                        return Ended::Lost("error");
                    }
                },
                _ = ticker.tick() => {
                    let outstanding = sent_upto > self.acked;
                    if outstanding && last_progress.elapsed() > self.settings.ack_timeout {
                        tracing::warn!(acked = self.acked, sent = sent_upto, "no ack within the ack timeout: stream stalled, reconnecting");
                        self.metrics.disconnects.with_label_values(&["stalled"]).inc();
                        return Ended::Lost("stalled");
                    }
                    if !outstanding {
                        last_progress = Instant::now();
                    }
                    if last_sent.elapsed() >= HEARTBEAT_AFTER {
                        let hb = pb::AgentMessage { msg: Some(AgentMsg::Heartbeat(pb::Heartbeat { unix_ns: unix_now_ns() })) };
                        if tx.try_send(hb).is_ok() {
                            last_sent = Instant::now();
                        }
                    }
                    if stable_since.elapsed() > Duration::from_secs(10) {
                        backoff.reset();
                        stable_since = Instant::now() + Duration::from_secs(3600);
                    }
                    if self.events_closed && self.buffer.is_empty() {
                        return Ended::Shutdown;
                    }
                }
                _ = shutdown.changed() => {
                    // The sampler stopped before the signal: hand over what it queued last, then send it.
                    while let Ok(ev) = events.try_recv() {
                        self.absorb_live(ev, &mut pending_inv);
                    }
                    sent_upto = self.pump(&tx, sent_upto, &mut pending_inv, &mut last_sent);
                    self.send_jobs(&tx);
                    // Best effort: give the collector a moment to acknowledge what is in flight.
                    let deadline = Instant::now() + Duration::from_secs(2);
                    while self.acked < sent_upto && Instant::now() < deadline {
                        match tokio::time::timeout_at(deadline, inbound.message()).await {
                            Ok(Ok(Some(msg))) => self.handle_inbound(msg),
                            _ => break,
                        }
                    }
                    return Ended::Shutdown;
                }
            }
        }
    }

    /// Sends buffered batches above `sent_upto` (and the inventory updates they need) while the outbound
    /// queue has room; returns the new `sent_upto`.
    fn pump(
        &mut self,
        tx: &mpsc::Sender<pb::AgentMessage>,
        mut sent_upto: u64,
        pending_inv: &mut VecDeque<(u64, pb::Inventory)>,
        last_sent: &mut Instant,
    ) -> u64 {
        // Batches dropped from the buffer while waiting are skipped.
        if let Some(oldest) = self.buffer.oldest_seq() {
            if sent_upto + 1 < oldest {
                sent_upto = oldest - 1;
            }
        }
        loop {
            if let Some((first_seq, _)) = pending_inv.front() {
                if *first_seq <= sent_upto + 1 {
                    let permit = match tx.try_reserve() {
                        Ok(p) => p,
                        Err(_) => return sent_upto,
                    };
                    if let Some((_, inv)) = pending_inv.pop_front() {
                        permit.send(pb::AgentMessage {
                            msg: Some(AgentMsg::InventoryUpdate(pb::InventoryUpdate {
                                inventory: Some(inv),
                                jobs: None,
                            })),
                        });
                        *last_sent = Instant::now();
                    }
                    continue;
                }
            }
            let Some(entry) = self.buffer.after(sent_upto).next() else {
                return sent_upto;
            };
            let permit = match tx.try_reserve() {
                Ok(p) => p,
                Err(_) => return sent_upto,
            };
            let seq = entry.seq;
            permit.send(pb::AgentMessage {
                msg: Some(AgentMsg::Batch(entry.batch.clone())),
            });
            self.metrics.sent_batches.inc();
            *last_sent = Instant::now();
            sent_upto = seq;
        }
    }

    fn handle_inbound(&mut self, msg: pb::CollectorMessage) {
        match msg.msg {
            Some(CollectorMsg::Ack(a)) => self.ack(a.seq),
            Some(CollectorMsg::Config(c)) => {
                self.periods.apply(c.fast_period_ms, c.slow_period_ms);
                tracing::info!(
                    fast_ms = self.periods.fast().as_millis() as u64,
                    slow_ms = self.periods.slow().as_millis() as u64,
                    "sampling periods set by the collector"
                );
            }
            None => {}
        }
    }
}

async fn connect(
    url: String,
    timeout: Duration,
    tls: Option<tonic::transport::ClientTlsConfig>,
) -> Result<pb::ingest_client::IngestClient<tonic::transport::Channel>, tonic::transport::Error> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seq: u64, n: usize) -> pb::SampleBatch {
        pb::SampleBatch {
            seq,
            timestamps_unix_ns: vec![1],
            tick_lengths: vec![n as u32],
            series_ids: vec![1; n],
            values: vec![7; n],
            dropped_batches_total: 0,
            markers: Vec::new(),
        }
    }

    #[test]
    fn buffer_drops_oldest_and_counts() {
        let one = batch(1, 100).encoded_len();
        let mut b = ResendBuffer::new(one * 3);
        for s in 1..=5 {
            b.push(batch(s, 100));
        }
        assert_eq!(b.len(), 3);
        assert_eq!(b.dropped(), 2);
        assert_eq!(b.oldest_seq(), Some(3));
        b.ack(4);
        assert_eq!(b.len(), 1);
        assert_eq!(b.bytes(), one);
        assert_eq!(b.after(4).map(|e| e.seq).collect::<Vec<_>>(), vec![5]);
        assert_eq!(b.after(0).map(|e| e.seq).collect::<Vec<_>>(), vec![5]);
        assert_eq!(b.after(5).count(), 0);
        assert_eq!(b.after(u64::MAX).count(), 0);
        b.push(batch(6, 100));
        b.push(batch(7, 100));
        assert_eq!(b.after(5).map(|e| e.seq).collect::<Vec<_>>(), vec![6, 7]);
    }

    #[test]
    fn backoff_grows_with_jitter_and_caps() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(800));
        let d: Vec<Duration> = (0..6).map(|_| b.next_delay()).collect();
        assert!(d[0] >= Duration::from_millis(50) && d[0] <= Duration::from_millis(100));
        assert!(d[3] >= Duration::from_millis(400) && d[3] <= Duration::from_millis(800));
        assert!(d[5] >= Duration::from_millis(400) && d[5] <= Duration::from_millis(800));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
