//! The tape: one captured node's batches, replayed for every simulated agent.
//!
//! Built once from a few seconds of a real agent's batches ([`Tape::new`]); [`Tape::body`] gives the encoded
//! `SampleBatch` (without its `seq`) for a batch slot since the run started: the captured batch `slot % len`,
//! its timestamps moved to the slot's time and its counters advanced by one capture's increase per lap, so
//! counters keep rising across laps. Every agent sends the same body for a slot (shared bytes); only the
//! sequence number differs, appended at send time ([`frame_batch`]). Pure: no I/O, no clock.

use std::collections::HashMap;

use commwatch_proto::v1 as pb;
use prost::bytes::{BufMut, Bytes, BytesMut};
use prost::Message;

/// A counter's increase over one lap of the tape, and its saturation value (0: 2⁶⁴−1).
#[derive(Debug, Clone, Copy)]
struct Counter {
    lap_increase: u64,
    max: u64,
}

/// Captured batches and what replaying them needs.
pub struct Tape {
    batches: Vec<pb::SampleBatch>,
    counters: HashMap<u32, Counter>,
    /// Timestamp of the first captured tick, ns since the Unix epoch.
    first_ns: i64,
    /// The batch period, ns.
    batch_ns: i64,
}

/// Errors building a tape.
#[derive(Debug, thiserror::Error)]
pub enum TapeError {
    #[error("the capture holds {0} batches; at least 2 are needed")]
    TooShort(usize),
}

impl Tape {
    /// `batches` in order (their `seq`, markers and drop counts are cleared); `series` describes their ids
    /// (counters are advanced per lap, gauges replayed as they are); `batch_ns` is the agent's batch period.
    pub fn new(
        mut batches: Vec<pb::SampleBatch>,
        series: &[pb::SeriesDescriptor],
        batch_ns: i64,
    ) -> Result<Tape, TapeError> {
        if batches.len() < 2 {
            return Err(TapeError::TooShort(batches.len()));
        }
        for b in &mut batches {
            b.seq = 0;
            b.dropped_batches_total = 0;
            b.markers.clear();
        }
        let first_ns = batches[0].timestamps_unix_ns.first().copied().unwrap_or(0);
        let counters = lap_increases(&batches, series);
        Ok(Tape {
            batches,
            counters,
            first_ns,
            batch_ns: batch_ns.max(1),
        })
    }

    /// Batches in one lap.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// Samples in one lap.
    pub fn samples_per_lap(&self) -> usize {
        self.batches.iter().map(|b| b.values.len()).sum()
    }

    /// The encoded batch (no `seq`) for `slot` batches after `start_ns` (ns since the Unix epoch): its ticks
    /// one batch period before the slot's time, so never ahead of the sender's clock.
    pub fn body(&self, slot: u64, start_ns: i64) -> Bytes {
        let lap = slot / self.batches.len() as u64;
        let mut b = self.batches[(slot % self.batches.len() as u64) as usize].clone();
        let lap_ns = self.batch_ns * self.batches.len() as i64;
        let shift = start_ns - self.batch_ns + lap as i64 * lap_ns - self.first_ns;
        for t in &mut b.timestamps_unix_ns {
            *t += shift;
        }
        for (id, v) in b.series_ids.iter().zip(b.values.iter_mut()) {
            if let Some(c) = self.counters.get(id) {
                let raised = v.wrapping_add(c.lap_increase.wrapping_mul(lap));
                *v = if c.max == 0 {
                    raised
                } else {
                    raised.min(c.max)
                };
            }
        }
        Bytes::from(b.encode_to_vec())
    }
}

/// Per counter id: its last value minus its first over the capture, stretched by one tick (the lap repeats
/// after the last tick, so one more increase separates the last sample from the first of the next lap).
fn lap_increases(
    batches: &[pb::SampleBatch],
    series: &[pb::SeriesDescriptor],
) -> HashMap<u32, Counter> {
    let kinds: HashMap<u32, &pb::SeriesDescriptor> = series
        .iter()
        .filter(|d| d.kind == pb::SeriesKind::Counter as i32)
        .map(|d| (d.id, d))
        .collect();
    // id -> (first, last, samples)
    let mut seen: HashMap<u32, (u64, u64, u64)> = HashMap::new();
    for b in batches {
        for (id, v) in b.series_ids.iter().zip(&b.values) {
            if kinds.contains_key(id) {
                let e = seen.entry(*id).or_insert((*v, *v, 0));
                e.1 = *v;
                e.2 += 1;
            }
        }
    }
    seen.into_iter()
        .map(|(id, (first, last, n))| {
            let rise = u128::from(last.saturating_sub(first));
            let lap_increase = if n > 1 {
                (rise * u128::from(n) / u128::from(n - 1)) as u64
            } else {
                0
            };
            let max = kinds.get(&id).map_or(0, |d| d.max_value);
            (id, Counter { lap_increase, max })
        })
        .collect()
}

/// One `AgentMessage` carrying the batch `body` numbered `seq`, as sent on the wire: the oneof's field 2
/// (`batch`) holding `body` followed by field 1 (`seq`). Protobuf merges fields in any order.
pub fn frame_batch(seq: u64, body: &[u8], dst: &mut impl BufMut) {
    let mut seq_field = [0u8; 11];
    seq_field[0] = 0x08; // field 1, varint
    let seq_len = 1 + put_varint(seq, &mut seq_field[1..]);
    dst.put_u8(0x12); // field 2, length-delimited
    let mut len = [0u8; 10];
    let n = put_varint((body.len() + seq_len) as u64, &mut len);
    dst.put_slice(&len[..n]);
    dst.put_slice(body);
    dst.put_slice(&seq_field[..seq_len]);
}

/// Writes `v` as a protobuf varint into `out`; returns its length.
fn put_varint(mut v: u64, out: &mut [u8]) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        out[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    out[i] = v as u8;
    i + 1
}

/// An encoded `AgentMessage`.
pub fn encode_message(msg: pb::agent_message::Msg) -> Bytes {
    let mut buf = BytesMut::new();
    pb::AgentMessage { msg: Some(msg) }
        .encode(&mut buf)
        .expect("BytesMut grows");
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(id: u32) -> pb::SeriesDescriptor {
        pb::SeriesDescriptor {
            id,
            kind: pb::SeriesKind::Counter as i32,
            ..Default::default()
        }
    }

    fn batch(t0: i64, values: [u64; 2]) -> pb::SampleBatch {
        pb::SampleBatch {
            seq: 9,
            timestamps_unix_ns: vec![t0],
            tick_lengths: vec![2],
            series_ids: vec![1, 2],
            values: values.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn framed_batches_decode_with_their_seq_and_laps_keep_counters_rising() {
        // Series 1 a counter rising 100 per batch, series 2 a gauge.
        let tape = Tape::new(
            vec![batch(1_000, [100, 7]), batch(251_000, [200, 8])],
            &[counter(1)],
            250_000,
        )
        .unwrap();
        let start = 10_000_000;
        let mut seen = Vec::new();
        for slot in 0..5u64 {
            let mut buf = BytesMut::new();
            frame_batch(300 + slot, &tape.body(slot, start), &mut buf);
            let msg = pb::AgentMessage::decode(buf.freeze()).unwrap();
            let Some(pb::agent_message::Msg::Batch(b)) = msg.msg else {
                panic!("not a batch");
            };
            assert_eq!(b.seq, 300 + slot);
            assert_eq!(
                b.timestamps_unix_ns,
                vec![start - 250_000 + slot as i64 * 250_000]
            );
            seen.push(b.values);
        }
        assert_eq!(
            seen,
            vec![
                vec![100, 7],
                vec![200, 8],
                vec![300, 7],
                vec![400, 8],
                vec![500, 7]
            ]
        );
        assert_eq!((tape.len(), tape.samples_per_lap()), (2, 4));
        assert!(matches!(
            Tape::new(vec![batch(0, [0, 0])], &[], 1),
            Err(TapeError::TooShort(1))
        ));
    }

    #[test]
    fn large_sequence_numbers_frame_correctly() {
        for seq in [0, 1, 127, 128, 300, u64::MAX] {
            let mut buf = BytesMut::new();
            frame_batch(seq, &[], &mut buf);
            let msg = pb::AgentMessage::decode(buf.freeze()).unwrap();
            match msg.msg {
                Some(pb::agent_message::Msg::Batch(b)) => assert_eq!(b.seq, seq),
                other => panic!("{other:?}"),
            }
        }
    }
}
