//! One simulated agent: a gRPC stream to its collector carrying pre-encoded messages (a raw codec: the bytes
//! are written as they are, never re-encoded), a batch every batch period from the shared tape, and the ack
//! latency of every batch (send → first ack at or above its seq).

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use commwatch_proto::v1 as pb;
use prost::bytes::{Buf, BufMut, Bytes};
use prost::Message;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

use crate::tape::frame_batch;
use crate::Slots;

/// What goes out: an encoded `AgentMessage`, or a batch body and the seq to append.
pub enum Out {
    Raw(Bytes),
    Batch(u64, Bytes),
}

/// Writes [`Out`] as it is; decodes the collector's messages with prost.
#[derive(Clone, Copy, Default)]
pub struct RawCodec;

pub struct RawEncoder;
pub struct ProstDecoder;

impl Encoder for RawEncoder {
    type Item = Out;
    type Error = Status;
    fn encode(&mut self, item: Out, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        match item {
            Out::Raw(b) => dst.put_slice(&b),
            Out::Batch(seq, body) => frame_batch(seq, &body, dst),
        }
        Ok(())
    }
}

impl Decoder for ProstDecoder {
    type Item = pb::CollectorMessage;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<pb::CollectorMessage>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        pb::CollectorMessage::decode(bytes)
            .map(Some)
            .map_err(|e| Status::internal(format!("undecodable collector message: {e}")))
    }
}

impl Codec for RawCodec {
    type Encode = Out;
    type Decode = pb::CollectorMessage;
    type Encoder = RawEncoder;
    type Decoder = ProstDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> ProstDecoder {
        ProstDecoder
    }
}

/// One agent's plan.
pub struct Plan {
    pub url: String,
    /// Source address (spreads agents over loopback addresses: the collector limits connections per address).
    pub local: Option<IpAddr>,
    /// `Hello` and job list, encoded.
    pub opening: Vec<Bytes>,
    /// Delay of its first batch after the run's start (spreads agents over the batch period).
    pub phase: Duration,
}

/// What one agent saw.
#[derive(Default, Debug)]
pub struct AgentStats {
    pub sent: u64,
    pub acked: u64,
    /// Ticks when the stream's queue was full (the connection did not take the batch): not sent.
    pub blocked: u64,
    /// Ack latencies, µs, of batches sent after the warm-up.
    pub latencies_us: Vec<u32>,
    /// Batches sent after the warm-up and never acked.
    pub unacked_measured: u64,
    /// Of the measured batches acked later than 1 s: when each was sent, whole seconds after the warm-up (when
    /// a run's late batches came: a stall of the collector's, or all along).
    pub late_sent_s: Vec<u16>,
    /// Why the stream failed, if it did (after the warm-up, or its last try before).
    pub error: Option<String>,
    /// Streams opened again after one failed during the warm-up (refused, closed, reset), as an agent
    /// reconnects: a fleet's agents all connecting at once is the warm-up's start.
    pub reconnects: u32,
    /// Why the last stream reopened had failed.
    pub reopened_after: Option<String>,
}

/// Pause before opening a stream again after one failed during the warm-up (an agent's first backoff).
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// Runs one agent until `stop`; `slots` hands out the shared batch bodies.
pub async fn run_agent(
    plan: Plan,
    slots: Arc<Slots>,
    warmup_end: Instant,
    stop: Arc<AtomicBool>,
) -> AgentStats {
    let mut st = AgentStats::default();
    while let Err(e) = stream(&plan, &slots, warmup_end, &stop, &mut st).await {
        st.error = Some(e);
        let again = Instant::now() + RECONNECT_AFTER;
        if again >= warmup_end || stop.load(Ordering::Relaxed) {
            break;
        }
        st.reconnects += 1;
        st.reopened_after = st.error.take();
        tokio::time::sleep_until(again).await;
    }
    st
}

async fn stream(
    plan: &Plan,
    slots: &Slots,
    warmup_end: Instant,
    stop: &AtomicBool,
    st: &mut AgentStats,
) -> Result<(), String> {
    let endpoint = tonic::transport::Endpoint::from_shared(plan.url.clone())
        .map_err(|e| format!("url: {e}"))?
        .local_address(plan.local)
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10));
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("connect: {}", with_sources(&e)))?;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(4 << 20);
    grpc.ready().await.map_err(|e| format!("not ready: {e}"))?;
    let (tx, rx) = mpsc::channel::<Out>(16);
    for m in &plan.opening {
        let _ = tx.try_send(Out::Raw(m.clone()));
    }
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/commwatch.v1.Ingest/Stream");
    let response = grpc
        .streaming(tonic::Request::new(ReceiverStream::new(rx)), path, RawCodec)
        .await
        .map_err(|s| format!("refused: {:?} {}", s.code(), s.message()))?;
    let mut inbound = response.into_inner();
    tokio::time::sleep(plan.phase).await;
    let mut tick = tokio::time::interval(slots.period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // (seq, sent at, measured)
    let mut pending: VecDeque<(u64, Instant, bool)> = VecDeque::new();
    let mut seq = 0u64;
    let mut stopping_at: Option<Instant> = None;
    loop {
        if stop.load(Ordering::Relaxed) && stopping_at.is_none() {
            stopping_at = Some(Instant::now() + Duration::from_secs(3));
        }
        if let Some(at) = stopping_at {
            if pending.is_empty() || Instant::now() > at {
                break;
            }
        }
        tokio::select! {
            _ = tick.tick(), if stopping_at.is_none() => {
                let body = slots.body();
                let now = Instant::now();
                match tx.try_send(Out::Batch(seq + 1, body)) {
                    Ok(()) => {
                        seq += 1;
                        st.sent += 1;
                        pending.push_back((seq, now, now >= warmup_end));
                    }
                    Err(_) => st.blocked += 1,
                }
            }
            m = inbound.message() => match m {
                Ok(Some(msg)) => on_reply(msg, &mut pending, warmup_end, st),
                Ok(None) => return Err("closed by the collector".into()),
                Err(s) => return Err(format!("stream failed: {:?} {}", s.code(), s.message())),
            },
            _ = tokio::time::sleep(Duration::from_millis(100)), if stopping_at.is_some() => {}
        }
    }
    st.unacked_measured = pending.iter().filter(|p| p.2).count() as u64;
    Ok(())
}

/// `e` and the errors under it, joined by ": " (tonic's transport error says only "transport error").
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut under = e.source();
    while let Some(s) = under {
        text.push_str(": ");
        text.push_str(&s.to_string());
        under = s.source();
    }
    text
}

/// An ack settles every pending batch at or below its seq.
fn on_reply(
    msg: pb::CollectorMessage,
    pending: &mut VecDeque<(u64, Instant, bool)>,
    warmup_end: Instant,
    st: &mut AgentStats,
) {
    let Some(pb::collector_message::Msg::Ack(a)) = msg.msg else {
        return;
    };
    let now = Instant::now();
    while let Some(&(seq, at, measured)) = pending.front() {
        if seq > a.seq {
            break;
        }
        pending.pop_front();
        st.acked += 1;
        if measured {
            let us = now.saturating_duration_since(at).as_micros();
            st.latencies_us.push(u32::try_from(us).unwrap_or(u32::MAX));
            if us > 1_000_000 {
                let s = at.saturating_duration_since(warmup_end).as_secs();
                st.late_sent_s.push(u16::try_from(s).unwrap_or(u16::MAX));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots() -> Slots {
        let batch = |t0: i64| pb::SampleBatch {
            timestamps_unix_ns: vec![t0],
            tick_lengths: vec![0],
            ..Default::default()
        };
        Slots {
            period: Duration::from_millis(250),
            start: Instant::now(),
            start_ns: 0,
            tape: crate::tape::Tape::new(vec![batch(0), batch(250_000_000)], &[], 250_000_000)
                .expect("tape"),
            cache: Default::default(),
        }
    }

    /// Runs one agent against a loopback port nothing listens on (every connect refused), the warm-up ending
    /// `warmup` from now.
    async fn refused(warmup: Duration) -> AgentStats {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let plan = Plan {
            url: format!("http://127.0.0.1:{port}"),
            local: None,
            opening: Vec::new(),
            phase: Duration::ZERO,
        };
        let stop = Arc::new(AtomicBool::new(false));
        run_agent(plan, Arc::new(slots()), Instant::now() + warmup, stop).await
    }

    #[tokio::test]
    async fn a_stream_that_fails_in_the_warm_up_is_opened_again_and_one_after_it_is_not() {
        // Tries at 0, 1 and 2 s (a third would start after the warm-up's 2.5 s): two reopenings, or one where
        // a refused connect took half a second on a loaded machine.
        let during = refused(Duration::from_millis(2_500)).await;
        assert!((1..=2).contains(&during.reconnects), "{during:?}");
        let why = during.reopened_after.as_deref().unwrap_or_default();
        assert!(why.starts_with("connect:"), "{why}");
        let after = refused(Duration::ZERO).await;
        assert_eq!(after.reconnects, 0);
        for st in [&during, &after] {
            let e = st.error.as_deref().unwrap_or_default();
            assert!(e.starts_with("connect:"), "{e}");
            assert_eq!((st.sent, st.acked), (0, 0));
        }
    }
}
