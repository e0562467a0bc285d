//! The gRPC codec of the `Ingest` service (both ends): prost encoding, and decoding from one contiguous slice.
//!
//! tonic hands a decoder the whole message in one buffer; prost decoding straight from tonic's buffer pays a
//! buffer bookkeeping call per value (`BytesMut::advance`), and grows every repeated field one push at a time.
//! Here a message is decoded from the buffer's slice, and an `AgentMessage` carrying a `SampleBatch` (nearly
//! every message of a stream) takes [`fast_batch`]: its packed columns are decoded into vectors of their exact
//! length. Anything the fast path does not recognise (unpacked columns, unknown fields, a malformed varint, a
//! second oneof member, ...) is decoded by prost from the start instead, so the result — message or error —
//! is always exactly prost's (the tests compare both on random and corrupted input).
//!
//! The collector's server decodes with [`ReceiveCodec`] instead: the same decoding, into [`Received`], which
//! can keep a batch's bytes as they came, so that the collector persists them instead of encoding the batch
//! again.

use std::marker::PhantomData;

use prost::bytes::Buf;
use prost::{DecodeError, Message};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstEncoder;

use crate::v1::{
    agent_message, AgentMessage, CollectiveRecord, CollectorMessage, SampleBatch, StepMarker,
};

/// Initial size of a stream's receive buffer, bytes: a demo node's 250 ms batch (~1,700 samples, ~20 KB)
/// fits without the buffer growing; tonic's default is 8 KiB.
pub const DECODE_BUFFER_BYTES: usize = 32 * 1024;
/// Bytes decoded before a stream yields to the runtime: tonic's default (not exported by tonic).
const YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

/// A message type the codec decodes: from a slice by prost unless it has a fast path.
pub trait SliceDecode: Message + Default + Sized {
    /// Decodes `bytes` as one whole message; exactly `prost::Message::decode`'s result.
    fn decode_slice(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::decode(bytes)
    }
}

impl SliceDecode for crate::v1::CollectorMessage {}

impl SliceDecode for AgentMessage {
    fn decode_slice(bytes: &[u8]) -> Result<Self, DecodeError> {
        match fast_agent_message(bytes) {
            Some(m) => Ok(m),
            None => Self::decode(bytes),
        }
    }
}

/// The codec the generated `Ingest` client and server use (`codec_path` in `build.rs`).
#[derive(Debug, Clone)]
pub struct SliceCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for SliceCodec<T, U> {
    fn default() -> Self {
        SliceCodec { _pd: PhantomData }
    }
}

impl<T, U> Codec for SliceCodec<T, U>
where
    T: Message + Send + 'static,
    U: SliceDecode + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = SliceDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        SliceDecoder { _pd: PhantomData }
    }
}

/// Decodes one message from its contiguous bytes ([`SliceDecode`]).
#[derive(Debug, Clone)]
pub struct SliceDecoder<U> {
    _pd: PhantomData<U>,
}

impl<U: SliceDecode> Decoder for SliceDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        decode_whole(buf, U::decode_slice)
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(DECODE_BUFFER_BYTES, YIELD_THRESHOLD_BYTES)
    }
}

/// Decodes the whole of `buf` (one message) with `decode`, from its slice when the buffer is one chunk (it
/// nearly always is), else from a copy. As tonic-prost: a message that does not parse is INTERNAL, saying
/// prost's error.
fn decode_whole<U>(
    buf: &mut DecodeBuf<'_>,
    decode: impl FnOnce(&[u8]) -> Result<U, DecodeError>,
) -> Result<Option<U>, Status> {
    let len = buf.remaining();
    let decoded = if buf.chunk().len() == len {
        let m = decode(buf.chunk());
        buf.advance(len);
        m
    } else {
        let bytes = buf.copy_to_bytes(len);
        decode(&bytes)
    };
    decoded
        .map(Some)
        .map_err(|e| Status::internal(e.to_string()))
}

/// An agent's message as the collector's server receives it ([`ReceiveCodec`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// The message, exactly as prost decodes it.
    pub message: AgentMessage,
    /// The encoded `SampleBatch` of `message`'s batch, as it came, when the codec keeps it and the fast path
    /// took the message (else `None`: encode the batch when its bytes are needed). Prost decodes these bytes
    /// into that same batch (the fast path takes only what prost decodes the same), though they may differ
    /// from prost's encoding of it (field order, default values written).
    pub batch_bytes: Option<Vec<u8>>,
}

impl Received {
    /// Decodes `bytes` as one `AgentMessage` (exactly `prost::Message::decode`'s result), keeping the batch's
    /// bytes when `keep_batch_bytes`.
    pub fn decode_slice(bytes: &[u8], keep_batch_bytes: bool) -> Result<Received, DecodeError> {
        if let Some((batch, payload)) = fast_agent_batch(bytes) {
            return Ok(Received {
                message: AgentMessage {
                    msg: Some(agent_message::Msg::Batch(batch)),
                },
                batch_bytes: keep_batch_bytes.then(|| payload.to_vec()),
            });
        }
        AgentMessage::decode(bytes).map(|message| Received {
            message,
            batch_bytes: None,
        })
    }
}

/// The collector's codec of the `Ingest` service: [`SliceCodec`]'s encoding and decoding, into [`Received`];
/// a batch's bytes are kept (copied out of tonic's buffer) when `keep_batch_bytes`.
#[derive(Debug, Clone, Copy)]
pub struct ReceiveCodec {
    pub keep_batch_bytes: bool,
}

impl Codec for ReceiveCodec {
    type Encode = CollectorMessage;
    type Decode = Received;
    type Encoder = ProstEncoder<CollectorMessage>;
    type Decoder = ReceiveDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ReceiveDecoder {
            keep_batch_bytes: self.keep_batch_bytes,
        }
    }
}

/// Decodes one [`Received`] from its contiguous bytes.
#[derive(Debug, Clone)]
pub struct ReceiveDecoder {
    keep_batch_bytes: bool,
}

impl Decoder for ReceiveDecoder {
    type Item = Received;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Received>, Status> {
        let keep = self.keep_batch_bytes;
        decode_whole(buf, |b| Received::decode_slice(b, keep))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(DECODE_BUFFER_BYTES, YIELD_THRESHOLD_BYTES)
    }
}

/// Reads a varint at the front of `b`, advancing it; `None` when it is cut short or longer than 64 bits
/// (prost then reports the error).
#[inline]
fn varint(b: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        if i == 9 && byte > 1 {
            return None;
        }
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

/// Splits a length-delimited field's payload off the front of `b`.
#[inline]
fn delimited<'a>(b: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(varint(b)?).ok()?;
    if len > b.len() {
        return None;
    }
    let (payload, rest) = b.split_at(len);
    *b = rest;
    Some(payload)
}

/// `AgentMessage { batch }` when `bytes` is exactly that one field and [`fast_batch`] takes its payload.
fn fast_agent_message(bytes: &[u8]) -> Option<AgentMessage> {
    let (batch, _) = fast_agent_batch(bytes)?;
    Some(AgentMessage {
        msg: Some(agent_message::Msg::Batch(batch)),
    })
}

/// The batch of `AgentMessage { batch }`, and its encoded bytes, when `bytes` is exactly that one field and
/// [`fast_batch`] takes its payload.
fn fast_agent_batch(bytes: &[u8]) -> Option<(SampleBatch, &[u8])> {
    let mut b = bytes;
    // Field 2 (`batch`), length-delimited.
    if varint(&mut b)? != (2 << 3 | 2) {
        return None;
    }
    let payload = delimited(&mut b)?;
    if !b.is_empty() {
        return None;
    }
    Some((fast_batch(payload)?, payload))
}

/// Appends the packed varints of `payload` to `out` as `f(value)`, reserved to their exact count. Values of
/// one and two bytes (series ids, tick lengths: nearly all of a batch's) are read without [`varint`]'s loop.
fn packed_varints<T>(payload: &[u8], out: &mut Vec<T>, f: impl Fn(u64) -> T) -> Option<()> {
    out.reserve(payload.iter().filter(|&&x| x < 0x80).count());
    let mut i = 0;
    while let Some(&b0) = payload.get(i) {
        if b0 < 0x80 {
            out.push(f(u64::from(b0)));
            i += 1;
            continue;
        }
        match payload.get(i + 1) {
            Some(&b1) if b1 < 0x80 => {
                out.push(f(u64::from(b0 & 0x7f) | u64::from(b1) << 7));
                i += 2;
            }
            _ => {
                let mut rest = payload.get(i..)?;
                out.push(f(varint(&mut rest)?));
                i = payload.len() - rest.len();
            }
        }
    }
    Some(())
}

/// Appends packed little-endian 64-bit values; `None` when the length is not a multiple of 8.
fn packed_fixed64(payload: &[u8], out: &mut Vec<u64>) -> Option<()> {
    if !payload.len().is_multiple_of(8) {
        return None;
    }
    out.reserve(payload.len() / 8);
    out.extend(
        payload
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())),
    );
    Some(())
}

/// A `SampleBatch` decoded field by field as prost would (scalars: last wins; repeated: appended), for the
/// encodings an agent writes: packed columns, known fields only. `None` for anything else.
pub fn fast_batch(bytes: &[u8]) -> Option<SampleBatch> {
    let mut m = SampleBatch::default();
    let mut b = bytes;
    while !b.is_empty() {
        let key = varint(&mut b)?;
        match (key >> 3, key & 7) {
            (1, 0) => m.seq = varint(&mut b)?,
            (6, 0) => m.dropped_batches_total = varint(&mut b)?,
            (2, 2) => packed_varints(delimited(&mut b)?, &mut m.timestamps_unix_ns, |v| v as i64)?,
            (3, 2) => packed_varints(delimited(&mut b)?, &mut m.tick_lengths, |v| v as u32)?,
            (4, 2) => packed_varints(delimited(&mut b)?, &mut m.series_ids, |v| v as u32)?,
            (5, 2) => packed_fixed64(delimited(&mut b)?, &mut m.values)?,
            (7, 2) => m.markers.push(StepMarker::decode(delimited(&mut b)?).ok()?),
            (8, 2) => m
                .collectives
                .push(CollectiveRecord::decode(delimited(&mut b)?).ok()?),
            _ => return None,
        }
    }
    Some(m)
}

#[cfg(test)]
mod tests;
