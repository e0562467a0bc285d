//! One connected stream: the handshake (`Hello`, then the collector's first `Ack`), the resend of what the
//! collector does not hold, and the stream loop. The loop is a `select!` that hands each kind of message to
//! its own method: a sampler event (outbound batch, inventory update, job list), a collector message (ack,
//! config), the stream's close or error, the housekeeping tick (stall check, heartbeat), and shutdown.

use std::collections::VecDeque;
use std::time::Duration;

use commwatch_model::clock::unix_now_ns;
use commwatch_proto::v1 as pb;
use pb::agent_message::Msg as AgentMsg;
use pb::collector_message::Msg as CollectorMsg;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::{Backoff, Client, Ended, Shipper};
use crate::sampler::SamplerEvent;

/// Capacity of the per-connection outbound queue (messages). Beyond it, batches wait in the resend buffer.
const OUTBOUND_QUEUE: usize = 64;
/// A heartbeat is sent when nothing else was sent for this long.
const HEARTBEAT_AFTER: Duration = Duration::from_secs(5);
/// How long to wait for the stream to open, and then for the collector's first `Ack` after `Hello`.
const HELLO_ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the loop checks for a stall and for a due heartbeat: a quarter of the ack timeout, within these
/// bounds ([`housekeeping_period`]).
const TICK_MIN: Duration = Duration::from_millis(250);
const TICK_MAX: Duration = Duration::from_secs(1);
/// A stream that lived this long resets the reconnect backoff.
const STABLE_AFTER: Duration = Duration::from_secs(10);
/// At shutdown, how long the collector is given to acknowledge what is in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The inbound half of the stream.
type Inbound = tonic::Streaming<pb::CollectorMessage>;

impl Shipper {
    /// One connected stream, until it ends.
    pub(super) async fn session(
        &mut self,
        mut client: Client,
        events: &mut mpsc::Receiver<SamplerEvent>,
        shutdown: &mut watch::Receiver<bool>,
        backoff: &mut Backoff,
    ) -> Ended {
        // Drain what queued while connecting so the Hello carries the newest inventory.
        while let Ok(ev) = events.try_recv() {
            self.absorb_event(ev);
        }
        // A job list (or a set of shards) that arrived while connecting may have moved the node.
        if self.target() != self.dialed {
            return Ended::Moved("moved to another shard while connecting");
        }
        let (tx, rx) = mpsc::channel::<pb::AgentMessage>(OUTBOUND_QUEUE);
        let mut inbound = match self.handshake(&mut client, &tx, rx, shutdown).await {
            Ok(inbound) => inbound,
            Err(ended) => return ended,
        };
        self.metrics.connected.set(1);
        self.stream_opened();
        tracing::info!(collector = %self.target(), acked = self.acked, buffered = self.buffer.len(), "connected");
        Session::new(self, tx)
            .run(&mut inbound, events, shutdown, backoff)
            .await
    }

    /// Sends `Hello` (and the job list), opens the stream and handles the collector's first message, which
    /// says what it already holds for this instance.
    async fn handshake(
        &mut self,
        client: &mut Client,
        tx: &mpsc::Sender<pb::AgentMessage>,
        rx: mpsc::Receiver<pb::AgentMessage>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Inbound, Ended> {
        if tx.try_send(self.hello()).is_err() {
            return Err(Ended::Lost("queue"));
        }
        // Where the collector reaches this node's probe server (`[probe] listen`), right after the Hello.
        if let Some(address) = &self.settings.probe_advert {
            let advert = pb::AgentMessage {
                msg: Some(AgentMsg::ProbeAdvert(pb::ProbeAdvert {
                    address: address.clone(),
                })),
            };
            if tx.try_send(advert).is_err() {
                return Err(Ended::Lost("queue"));
            }
        }
        // A new stream knows no jobs: send them right after the Hello.
        self.jobs_unsent = self.jobs.is_some();
        self.send_jobs(tx);
        let response = tokio::select! {
            r = client.stream(self.stream_request(rx)) => r,
            _ = tokio::time::sleep(HELLO_ACK_TIMEOUT) => return Err(Ended::Failed("open timeout")),
            _ = shutdown.changed() => return Err(Ended::Shutdown),
        };
        let mut inbound = match response {
            Ok(r) => r.into_inner(),
            Err(status) => {
                tracing::warn!(code = ?status.code(), error = %super::failure::describe_status(&status), "collector refused the stream");
                return Err(Ended::Failed("refused"));
            }
        };
        let first = tokio::select! {
            m = inbound.message() => m,
            _ = tokio::time::sleep(HELLO_ACK_TIMEOUT) => return Err(Ended::Failed("no ack after hello")),
            _ = shutdown.changed() => return Err(Ended::Shutdown),
        };
        match first {
            Ok(Some(msg)) => self.handle_inbound(msg),
            Ok(None) => return Err(Ended::Failed("closed")),
            Err(status) => {
                tracing::warn!(code = ?status.code(), error = %super::failure::describe_status(&status), "stream failed after hello");
                return Err(Ended::Failed("error"));
            }
        }
        Ok(inbound)
    }
}

/// The state of one connected stream.
struct Session<'a> {
    shipper: &'a mut Shipper,
    tx: mpsc::Sender<pb::AgentMessage>,
    /// Highest sequence number sent on this stream.
    sent_upto: u64,
    /// Inventory updates that arrived during this stream: (first seq that may use them, update).
    pending_inv: VecDeque<(u64, pb::Inventory)>,
    last_sent: Instant,
    /// When the collector last acknowledged something (or nothing was outstanding).
    last_progress: Instant,
    /// Since when the stream has been up; pushed far out once it reset the backoff.
    stable_since: Instant,
    /// When the stream opened.
    opened: Instant,
}

impl<'a> Session<'a> {
    /// A session on a stream whose handshake is done: everything the collector does not hold is to be
    /// resent.
    fn new(shipper: &'a mut Shipper, tx: mpsc::Sender<pb::AgentMessage>) -> Session<'a> {
        let sent_upto = shipper.acked;
        let resend = shipper.buffer.after(sent_upto).count() as u64;
        if resend > 0 {
            shipper.metrics.resent_batches.inc_by(resend);
        }
        let now = Instant::now();
        Session {
            shipper,
            tx,
            sent_upto,
            pending_inv: VecDeque::new(),
            last_sent: now,
            last_progress: now,
            stable_since: now,
            opened: now,
        }
    }

    /// The stream loop: sends what the outbound queue takes, then waits for the next thing to handle.
    async fn run(
        mut self,
        inbound: &mut Inbound,
        events: &mut mpsc::Receiver<SamplerEvent>,
        shutdown: &mut watch::Receiver<bool>,
        backoff: &mut Backoff,
    ) -> Ended {
        let mut ticker =
            tokio::time::interval(housekeeping_period(self.shipper.settings.ack_timeout));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.flush();
            let ended = tokio::select! {
                ev = events.recv(), if !self.shipper.events_closed => self.on_event(ev),
                m = inbound.message() => match m {
                    Ok(Some(msg)) => {
                        self.on_message(msg);
                        None
                    }
                    Ok(None) => Some(self.on_close()),
                    Err(status) => Some(self.on_error(&status)),
                },
                _ = ticker.tick() => self.on_tick(backoff),
                set = super::resolve::next_set(&mut self.shipper.discovery) => {
                    self.shipper.apply_set(set).then_some(Ended::Moved("the set of shards changed"))
                }
                _ = shutdown.changed() => Some(self.on_shutdown(inbound, events).await),
            };
            if let Some(ended) = ended {
                if matches!(ended, Ended::Moved(_)) {
                    self.drain(inbound).await;
                }
                return ended;
            }
        }
    }

    /// Sends as much as the outbound queue takes, in order, then the job list if it is due.
    fn flush(&mut self) {
        self.pump();
        self.shipper.send_jobs(&self.tx);
    }

    /// A sampler event; `None`: the sampler's queue closed. Ends the stream when a new job list moves the
    /// node to another collector shard.
    fn on_event(&mut self, ev: Option<SamplerEvent>) -> Option<Ended> {
        match ev {
            Some(SamplerEvent::Batch(b)) => self.on_batch(b),
            Some(SamplerEvent::Inventory(inv)) => self.on_inventory_update(inv),
            Some(SamplerEvent::Jobs(j)) => {
                if self.shipper.absorb_jobs(j) {
                    return Some(Ended::Moved("job moved to another shard"));
                }
            }
            None => self.shipper.events_closed = true,
        }
        None
    }

    /// An outbound batch: numbered and buffered; [`Session::pump`] sends it.
    fn on_batch(&mut self, batch: pb::SampleBatch) {
        self.shipper.absorb_batch(batch);
    }

    /// An inventory update: kept for the next `Hello`, and queued to be sent before the first batch numbered
    /// after it.
    fn on_inventory_update(&mut self, inv: pb::Inventory) {
        self.shipper.absorb_inventory(&inv);
        self.pending_inv.push_back((self.shipper.next_seq, inv));
    }

    /// A message from the collector.
    fn on_message(&mut self, msg: pb::CollectorMessage) {
        match msg.msg {
            Some(CollectorMsg::Ack(a)) => self.on_ack(a.seq),
            Some(CollectorMsg::Config(c)) => self.shipper.apply_config(&c),
            None => {}
        }
    }

    /// An ack: the buffer forgets what the collector holds; progress resets the stall clock.
    fn on_ack(&mut self, seq: u64) {
        let before = self.shipper.acked;
        self.shipper.ack(seq);
        if self.shipper.acked > before {
            self.last_progress = Instant::now();
        }
    }

    /// The collector closed the stream.
    fn on_close(&mut self) -> Ended {
        self.shipper
            .metrics
            .disconnects
            .with_label_values(&["collector"])
            .inc();
        Ended::Lost("closed by collector")
    }

    /// The stream failed.
    fn on_error(&mut self, status: &tonic::Status) -> Ended {
        tracing::warn!(code = ?status.code(), error = %super::failure::describe_status(status), "stream failed");
        self.shipper
            .metrics
            .disconnects
            .with_label_values(&["error"])
            .inc();
        Ended::Lost("error")
    }

    /// Housekeeping: a stream with outstanding batches and no ack for the ack timeout is stalled; a quiet
    /// stream gets a heartbeat; a stable one resets the backoff; with the sampler gone and nothing left to
    /// send, the shipper is done.
    fn on_tick(&mut self, backoff: &mut Backoff) -> Option<Ended> {
        let acked = self.shipper.acked;
        let outstanding = self.sent_upto > acked;
        if outstanding && self.last_progress.elapsed() > self.shipper.settings.ack_timeout {
            tracing::warn!(
                acked,
                sent = self.sent_upto,
                "no ack within the ack timeout: stream stalled, reconnecting"
            );
            self.shipper
                .metrics
                .disconnects
                .with_label_values(&["stalled"])
                .inc();
            return Some(Ended::Lost("stalled"));
        }
        if !outstanding {
            self.last_progress = Instant::now();
        }
        if self.last_sent.elapsed() >= HEARTBEAT_AFTER {
            let hb = pb::AgentMessage {
                msg: Some(AgentMsg::Heartbeat(pb::Heartbeat {
                    unix_ns: unix_now_ns(),
                })),
            };
            if self.tx.try_send(hb).is_ok() {
                self.last_sent = Instant::now();
            }
        }
        if self.shipper.pos != 0 && self.opened.elapsed() > self.shipper.settings.shard_retry {
            let from = self.shipper.target().to_string();
            self.shipper.pos = 0;
            self.shipper
                .note_retarget(&from, crate::telemetry::MoveReason::RetryPreferred);
            return Some(Ended::Moved("back to the preferred shard"));
        }
        if self.stable_since.elapsed() > STABLE_AFTER {
            backoff.reset();
            self.stable_since = Instant::now() + Duration::from_secs(3600);
        }
        (self.shipper.events_closed && self.shipper.buffer.is_empty()).then_some(Ended::Shutdown)
    }

    /// Shutdown: the sampler stopped before the signal, so what it queued last is handed over and sent; the
    /// collector then gets a moment to acknowledge what is in flight (best effort).
    async fn on_shutdown(
        &mut self,
        inbound: &mut Inbound,
        events: &mut mpsc::Receiver<SamplerEvent>,
    ) -> Ended {
        while let Ok(ev) = events.try_recv() {
            // Moving shards no longer matters: what is sent goes to this one.
            let _ = self.on_event(Some(ev));
        }
        self.flush();
        self.drain(inbound).await;
        Ended::Shutdown
    }

    /// Gives the collector a moment to acknowledge what is in flight (best effort: what stays unacknowledged
    /// is resent on the next stream). Sends nothing more: when moving shards, the new job list is for the new
    /// one.
    async fn drain(&mut self, inbound: &mut Inbound) {
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        while self.shipper.acked < self.sent_upto && Instant::now() < deadline {
            match tokio::time::timeout_at(deadline, inbound.message()).await {
                Ok(Ok(Some(msg))) => self.shipper.handle_inbound(msg),
                _ => break,
            }
        }
    }

    /// Sends buffered batches above `sent_upto` (and the inventory updates they need) while the outbound
    /// queue has room.
    fn pump(&mut self) {
        // Batches dropped from the buffer while waiting are skipped.
        if let Some(oldest) = self.shipper.buffer.oldest_seq() {
            if self.sent_upto + 1 < oldest {
                self.sent_upto = oldest - 1;
            }
        }
        loop {
            if self
                .pending_inv
                .front()
                .is_some_and(|(first_seq, _)| *first_seq <= self.sent_upto + 1)
            {
                let Ok(permit) = self.tx.try_reserve() else {
                    return;
                };
                if let Some((_, inv)) = self.pending_inv.pop_front() {
                    permit.send(pb::AgentMessage {
                        msg: Some(AgentMsg::InventoryUpdate(pb::InventoryUpdate {
                            inventory: Some(inv),
                            jobs: None,
                        })),
                    });
                    self.last_sent = Instant::now();
                }
                continue;
            }
            let Some(entry) = self.shipper.buffer.after(self.sent_upto).next() else {
                return;
            };
            let Ok(permit) = self.tx.try_reserve() else {
                return;
            };
            permit.send(pb::AgentMessage {
                msg: Some(AgentMsg::Batch(entry.batch.clone())),
            });
            self.sent_upto = entry.seq;
            self.shipper.metrics.sent_batches.inc();
            self.last_sent = Instant::now();
        }
    }
}
/// The period of the stream loop's housekeeping for `ack_timeout`: a stall is seen within a quarter of the
/// timeout past it (at most [`TICK_MAX`]: the default 15 s timeout wakes the loop once a second, not four
/// times, when no batch is due).
fn housekeeping_period(ack_timeout: Duration) -> Duration {
    (ack_timeout / 4).clamp(TICK_MIN, TICK_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn housekeeping_follows_the_ack_timeout_within_bounds() {
        let s = Duration::from_secs;
        assert_eq!(housekeeping_period(s(15)), s(1));
        assert_eq!(housekeeping_period(s(2)), Duration::from_millis(500));
        assert_eq!(housekeeping_period(s(1)), Duration::from_millis(250));
        assert_eq!(
            housekeeping_period(Duration::ZERO),
            Duration::from_millis(250)
        );
    }
}
