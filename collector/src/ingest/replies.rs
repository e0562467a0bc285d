//! The replies of one agent stream (the response half of `Ingest/Stream`). The stream task queues what it has
//! to say ([`Reply`]): the answer to the Hello, a repeated ack after a resent batch, the status that ends the
//! stream. The acks of batches becoming durable are made here: once handed the instance's durable sequence
//! number ([`Reply::Acks`]), the reply stream acks it whenever it moves. The writer's commit so wakes the task
//! that sends the response (hyper's, polling this stream) directly, not the stream task first, which would only
//! pass the ack on: one wake-up and one channel hop fewer per batch.
//!
//! Acks are cumulative (each carries the durable sequence number when it is sent) and coalesced: at most one
//! per [`ACK_INTERVAL`], sent within that interval of the change or the resend that calls for it.

use std::pin::Pin;

use commwatch_proto::v1 as pb;
use futures::Stream;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tonic::Status;

use super::ACK_INTERVAL;

/// What the stream task hands its reply stream.
pub(super) enum Reply {
    /// Sent as it is: the answer to the Hello, or the status that ends the stream.
    Send(Result<pb::CollectorMessage, Status>),
    /// From now on, ack the instance's durable sequence number as it moves. Its value when handed over was
    /// acked just before (the answer to the Hello): the first ack here waits for it to change, and comes no
    /// sooner than [`ACK_INTERVAL`] after the hand-over.
    Acks(watch::Receiver<u64>),
    /// Ack again, though nothing new became durable: the agent resent a batch already held.
    Again,
}

/// The stream task's side of its replies.
pub(super) type ReplyTx = mpsc::Sender<Reply>;

/// The response stream of `Ingest/Stream`.
pub type Replies = Pin<Box<dyn Stream<Item = Result<pb::CollectorMessage, Status>> + Send>>;

/// The reply stream fed by `rx`. It ends once every sender of `rx` is dropped (the stream task ended), after
/// what was queued: acks owed then are not sent, as the stream is over.
pub(super) fn replies(rx: mpsc::Receiver<Reply>) -> Replies {
    let acker = Acker {
        rx,
        durable: None,
        durable_open: false,
        owed: false,
        last_ack_at: Instant::now(),
    };
    Box::pin(futures::stream::unfold(acker, |mut a| async move {
        let next = a.next().await?;
        Some((next, a))
    }))
}

pub(super) fn ack(seq: u64) -> pb::CollectorMessage {
    pb::CollectorMessage {
        msg: Some(pb::collector_message::Msg::Ack(pb::Ack { seq })),
    }
}

struct Acker {
    rx: mpsc::Receiver<Reply>,
    /// The instance's durable sequence number, once handed over.
    durable: Option<watch::Receiver<u64>>,
    /// Whether its sender is still there (else it cannot move again; its last value is still read).
    durable_open: bool,
    /// An ack is owed: the durable sequence number moved, or a batch was resent, since the last ack.
    owed: bool,
    last_ack_at: Instant,
}

impl Acker {
    /// The next reply; `None` once the stream task has ended and everything it queued was sent.
    async fn next(&mut self) -> Option<Result<pb::CollectorMessage, Status>> {
        loop {
            let due = self.last_ack_at + ACK_INTERVAL;
            if self.owed && Instant::now() >= due {
                return Some(Ok(self.ack()));
            }
            let watching = self.durable_open;
            let durable = self.durable.as_mut();
            tokio::select! {
                biased;
                reply = self.rx.recv() => match reply? {
                    Reply::Send(m) => return Some(m),
                    Reply::Acks(rx) => {
                        self.durable = Some(rx);
                        self.durable_open = true;
                        self.last_ack_at = Instant::now();
                    }
                    Reply::Again => self.owed = true,
                },
                changed = async { durable?.changed().await.ok() }, if watching => match changed {
                    Some(()) => self.owed = true,
                    None => self.durable_open = false,
                },
                () = tokio::time::sleep_until(due), if self.owed => {}
            }
        }
    }

    /// The ack of the durable sequence number now (0 before it was handed over).
    fn ack(&mut self) -> pb::CollectorMessage {
        self.owed = false;
        self.last_ack_at = Instant::now();
        let seq = self.durable.as_mut().map_or(0, |d| *d.borrow_and_update());
        ack(seq)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;

    use super::*;

    fn seq_of(m: Option<Result<pb::CollectorMessage, Status>>) -> u64 {
        match m {
            Some(Ok(pb::CollectorMessage {
                msg: Some(pb::collector_message::Msg::Ack(a)),
            })) => a.seq,
            other => panic!("not an ack: {other:?}"),
        }
    }

    /// Whether the stream has nothing to say within `within` (paused clock: advanced instantly).
    async fn quiet(r: &mut Replies, within: Duration) -> bool {
        tokio::time::timeout(within, r.next()).await.is_err()
    }

    #[tokio::test(start_paused = true)]
    async fn durable_moves_are_acked_cumulatively_at_most_once_per_interval() {
        let (tx, rx) = mpsc::channel(4);
        let mut r = replies(rx);
        let (durable, durable_rx) = watch::channel(3u64);
        tx.send(Reply::Send(Ok(ack(3)))).await.unwrap();
        tx.send(Reply::Acks(durable_rx)).await.unwrap();
        assert_eq!(seq_of(r.next().await), 3, "the Hello's answer");
        assert!(
            quiet(&mut r, ACK_INTERVAL * 5).await,
            "nothing new durable: no ack"
        );
        durable.send(4).unwrap();
        let t0 = Instant::now();
        assert_eq!(seq_of(r.next().await), 4);
        assert_eq!(
            t0.elapsed(),
            Duration::ZERO,
            "the previous ack is old: at once"
        );
        // Two moves right after: one ack, an interval after the previous, carrying both.
        durable.send(5).unwrap();
        durable.send(6).unwrap();
        let t1 = Instant::now();
        assert_eq!(seq_of(r.next().await), 6);
        assert_eq!(t1.elapsed(), ACK_INTERVAL);
        assert!(quiet(&mut r, ACK_INTERVAL * 5).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resend_is_acked_again_and_the_stream_ends_with_its_status() {
        let (tx, rx) = mpsc::channel(4);
        let mut r = replies(rx);
        let (durable, durable_rx) = watch::channel(7u64);
        tx.send(Reply::Acks(durable_rx)).await.unwrap();
        tx.send(Reply::Again).await.unwrap();
        let t0 = Instant::now();
        assert_eq!(seq_of(r.next().await), 7, "the held number again");
        assert_eq!(
            t0.elapsed(),
            ACK_INTERVAL,
            "not sooner than an interval after the hand-over"
        );
        // The sender gone: its last value is still acked on a resend.
        durable.send(8).unwrap();
        drop(durable);
        assert_eq!(seq_of(r.next().await), 8);
        tx.send(Reply::Again).await.unwrap();
        assert_eq!(seq_of(r.next().await), 8);
        tx.send(Reply::Send(Err(Status::aborted("superseded"))))
            .await
            .unwrap();
        drop(tx);
        let end = r.next().await.unwrap().unwrap_err();
        assert_eq!(end.code(), tonic::Code::Aborted);
        assert!(
            r.next().await.is_none(),
            "ends once the stream task is gone"
        );
    }
}
