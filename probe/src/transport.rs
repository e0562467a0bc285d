//! The data path a probe measures, behind one trait: TCP here (bulk and pings on the control connection),
//! RDMA verbs in `rdma/`. The session (`session.rs`) drives the phases; a transport only moves bytes and times
//! them.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::conn::{Conn, GRACE};
use crate::error::ProbeError;
use crate::pace::{self, Rate};
use crate::params::{MAX_PINGS, PING_BYTES};
use crate::wire::{FrameKind, QpInfo, TransportKind};

/// What one side of a bulk phase counted: bytes and seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Measure {
    pub bytes: u64,
    pub seconds: f64,
}

/// A data path. Contract: `connect` runs once, after the two ends exchanged their `local_qp`; a bulk phase is
/// `send_bulk` on one end and `recv_bulk` on the other, each returning its own measure when this transport
/// measures on that side (TCP measures at the receiver, RDMA WRITE at the sender); a latency phase is `pings`
/// on the client and `pongs` on the server. Every wait is bounded: by the span plus [`GRACE`], or in a bulk
/// phase by what the rate measured so far allows ([`crate::pace`]), at least [`GRACE`].
pub trait Transport: Send {
    fn kind(&self) -> TransportKind;
    /// This end's queue pair, sent to the peer in `Hello`/`Accept` (`None` for TCP).
    fn local_qp(&self) -> Option<QpInfo>;
    /// Connects to the peer's queue pair (RDMA); nothing for TCP.
    fn connect(&mut self, peer: Option<&QpInfo>) -> Result<(), ProbeError>;
    /// Sends bulk of `size`-byte messages for `span`, then signals the end on `conn`.
    fn send_bulk(
        &mut self,
        conn: &mut Conn,
        span: Duration,
        size: usize,
    ) -> impl Future<Output = Result<Option<Measure>, ProbeError>> + Send;
    /// Receives bulk until the sender's end.
    fn recv_bulk(
        &mut self,
        conn: &mut Conn,
        span: Duration,
    ) -> impl Future<Output = Result<Option<Measure>, ProbeError>> + Send;
    /// Client: ping-pong for `span`; the round-trip times.
    fn pings(
        &mut self,
        conn: &mut Conn,
        span: Duration,
    ) -> impl Future<Output = Result<Vec<Duration>, ProbeError>> + Send;
    /// Server: echoes pings until the client's end.
    fn pongs(
        &mut self,
        conn: &mut Conn,
        span: Duration,
    ) -> impl Future<Output = Result<(), ProbeError>> + Send;
}

/// TCP: DATA frames for bulk, PING/PONG frames for latency, all on the control connection.
#[derive(Debug, Default)]
pub struct Tcp;

impl Transport for Tcp {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }

    fn local_qp(&self) -> Option<QpInfo> {
        None
    }

    fn connect(&mut self, _peer: Option<&QpInfo>) -> Result<(), ProbeError> {
        Ok(())
    }

    async fn send_bulk(
        &mut self,
        conn: &mut Conn,
        span: Duration,
        size: usize,
    ) -> Result<Option<Measure>, ProbeError> {
        let buf = vec![0x5au8; size];
        let end = Instant::now() + span;
        while Instant::now() < end {
            conn.send_frame(FrameKind::Data, &buf).await?;
        }
        conn.send_frame(FrameKind::End, &[]).await?;
        Ok(None)
    }

    async fn recv_bulk(
        &mut self,
        conn: &mut Conn,
        span: Duration,
    ) -> Result<Option<Measure>, ProbeError> {
        let start = Instant::now();
        let mut bytes = 0u64;
        let mut frame = 0u64;
        loop {
            let rate = Rate {
                bytes,
                seconds: start.elapsed().as_secs_f64(),
            };
            // The first frame may come at the span's end; then each within its time at the rate so far.
            let wait = if bytes == 0 {
                span + GRACE
            } else {
                pace::wait_for(rate, frame, GRACE)
            };
            let h = conn.recv_header(wait).await?;
            match h.kind {
                FrameKind::Data => {
                    conn.recv_payload(h.len).await?;
                    frame = u64::from(h.len);
                    bytes += frame;
                }
                FrameKind::End => break,
                k => return Err(ProbeError::Protocol(format!("{k:?} frame in a bulk phase"))),
            }
            // What the sender queued before its span ended drains at the rate: a slow path is slow, not late.
            let limit = pace::tcp_phase_limit(span, rate, GRACE);
            if start.elapsed() > limit {
                return Err(ProbeError::Timeout(limit));
            }
        }
        Ok(Some(Measure {
            bytes,
            seconds: start.elapsed().as_secs_f64(),
        }))
    }

    async fn pings(
        &mut self,
        conn: &mut Conn,
        span: Duration,
    ) -> Result<Vec<Duration>, ProbeError> {
        let mut rtts = Vec::new();
        let end = Instant::now() + span;
        let mut seq = 0u64;
        while Instant::now() < end && rtts.len() < MAX_PINGS {
            let payload = seq.to_be_bytes();
            let t0 = Instant::now();
            conn.send_frame(FrameKind::Ping, &payload[..PING_BYTES])
                .await?;
            let h = conn.recv_header(GRACE).await?;
            if h.kind != FrameKind::Pong {
                return Err(ProbeError::Protocol(format!(
                    "{:?} frame instead of a pong",
                    h.kind
                )));
            }
            let back = conn.recv_payload(h.len).await?;
            if back != payload {
                return Err(ProbeError::Protocol(format!(
                    "pong {seq} echoed other bytes"
                )));
            }
            rtts.push(t0.elapsed());
            seq += 1;
        }
        conn.send_frame(FrameKind::End, &[]).await?;
        Ok(rtts)
    }

    async fn pongs(&mut self, conn: &mut Conn, span: Duration) -> Result<(), ProbeError> {
        loop {
            let h = conn.recv_header(span + GRACE).await?;
            match h.kind {
                FrameKind::Ping => {
                    let p = conn.recv_payload(h.len).await?.to_vec();
                    conn.send_frame(FrameKind::Pong, &p).await?;
                }
                FrameKind::End => return Ok(()),
                k => {
                    return Err(ProbeError::Protocol(format!(
                        "{k:?} frame in a latency phase"
                    )))
                }
            }
        }
    }
}
