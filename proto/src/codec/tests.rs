//! The fast path against prost on random batches, and on corrupted and unusual encodings.

use super::*;
use crate::v1::{AgentMessage, Heartbeat};

/// xorshift64*: deterministic random input without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Values of every size class (small ids, large counters, f64 bits, negatives).
    fn value(&mut self) -> u64 {
        match self.below(4) {
            0 => self.below(200),
            1 => self.below(1 << 35),
            2 => f64::to_bits(self.below(1000) as f64 / 7.0),
            _ => self.next(),
        }
    }
}

fn random_batch(r: &mut Rng) -> SampleBatch {
    let ticks = r.below(8) as usize;
    let mut b = SampleBatch {
        seq: r.value(),
        dropped_batches_total: r.below(3).wrapping_mul(r.value()),
        ..Default::default()
    };
    for _ in 0..ticks {
        let n = r.below(300) as u32;
        b.timestamps_unix_ns.push(r.value() as i64);
        b.tick_lengths.push(n);
        for _ in 0..n {
            b.series_ids.push(r.value() as u32);
            b.values.push(r.value());
        }
    }
    for i in 0..r.below(3) {
        b.markers.push(StepMarker {
            job: format!("job-{i}"),
            rank: r.below(64) as u32,
            step: r.value(),
            phase: r.below(3) as i32,
            sent_unix_ns: r.value() as i64,
            received_unix_ns: r.value() as i64,
            samples: (r.below(2) == 0).then(|| r.value()),
        });
    }
    for i in 0..r.below(2) {
        b.collectives.push(CollectiveRecord {
            job: format!("j{i}"),
            ..Default::default()
        });
    }
    b
}

fn wrap(b: SampleBatch) -> AgentMessage {
    AgentMessage {
        msg: Some(agent_message::Msg::Batch(b)),
    }
}

/// `decode_slice` says exactly what prost says: the same message, or an error with the same text.
fn same_as_prost(bytes: &[u8]) {
    let ours = AgentMessage::decode_slice(bytes).map_err(|e| e.to_string());
    let prost = AgentMessage::decode(bytes).map_err(|e| e.to_string());
    assert_eq!(ours, prost, "input {bytes:02x?}");
    if let Some(fast) = fast_agent_message(bytes) {
        assert_eq!(Ok(fast), prost, "fast path differs on {bytes:02x?}");
    }
    let received = Received::decode_slice(bytes, true);
    let message = received.as_ref().map(|r| r.message.clone());
    assert_eq!(
        message.map_err(|e| e.to_string()),
        prost,
        "received differs on {bytes:02x?}"
    );
    // Kept bytes decode into the very batch.
    if let Ok(Received {
        message: AgentMessage {
            msg: Some(agent_message::Msg::Batch(b)),
        },
        batch_bytes: Some(kept),
    }) = received
    {
        assert_eq!(
            SampleBatch::decode(kept.as_slice()),
            Ok(b),
            "kept bytes of {bytes:02x?}"
        );
    }
}

#[test]
fn random_batches_take_the_fast_path_and_equal_prost() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..2000 {
        let m = wrap(random_batch(&mut r));
        let bytes = m.encode_to_vec();
        let fast = fast_agent_message(&bytes).expect("an agent's encoding takes the fast path");
        assert_eq!(fast, m);
        same_as_prost(&bytes);
        let Some(agent_message::Msg::Batch(b)) = &m.msg else {
            unreachable!()
        };
        let kept = Received::decode_slice(&bytes, true).unwrap().batch_bytes;
        assert_eq!(
            kept,
            Some(b.encode_to_vec()),
            "prost's encoding kept as it came"
        );
        assert_eq!(
            Received::decode_slice(&bytes, false).unwrap().batch_bytes,
            None
        );
    }
}

#[test]
fn corrupted_batches_decode_as_prost_does() {
    let mut r = Rng(42);
    for _ in 0..3000 {
        let mut bytes = wrap(random_batch(&mut r)).encode_to_vec();
        if bytes.is_empty() {
            continue;
        }
        match r.below(4) {
            0 => {
                let i = r.below(bytes.len() as u64) as usize;
                bytes[i] = r.next() as u8;
            }
            1 => bytes.truncate(r.below(bytes.len() as u64) as usize),
            2 => {
                let i = r.below(bytes.len() as u64) as usize;
                bytes.insert(i, r.next() as u8);
            }
            _ => {
                for _ in 0..4 {
                    let i = r.below(bytes.len() as u64) as usize;
                    bytes[i] ^= 1 << r.below(8);
                }
            }
        }
        same_as_prost(&bytes);
    }
}

#[test]
fn unusual_encodings_fall_back_to_prost() {
    // Unpacked columns (legal proto3), an unknown field, two oneof members, a message other than a batch,
    // an empty message, an over-long varint.
    let mut unpacked = vec![0x12, 0];
    let body = [
        0x08, 0x07, 0x10, 0x05, 0x29, 1, 2, 3, 4, 5, 6, 7, 8, 0x78, 0x01,
    ];
    unpacked[1] = body.len() as u8;
    unpacked.extend_from_slice(&body);
    assert!(fast_agent_message(&unpacked).is_none());
    same_as_prost(&unpacked);
    let received = Received::decode_slice(&unpacked, true).unwrap();
    assert_eq!(
        received.batch_bytes, None,
        "prost's decoding keeps no bytes"
    );
    let m = AgentMessage::decode(unpacked.as_slice()).expect("valid");
    let Some(agent_message::Msg::Batch(b)) = m.msg else {
        panic!("a batch")
    };
    assert_eq!(
        (b.seq, b.timestamps_unix_ns, b.values),
        (7, vec![5], vec![0x0807060504030201])
    );

    let mut two = wrap(SampleBatch {
        seq: 1,
        ..Default::default()
    })
    .encode_to_vec();
    two.extend(
        AgentMessage {
            msg: Some(agent_message::Msg::Heartbeat(Heartbeat { unix_ns: 5 })),
        }
        .encode_to_vec(),
    );
    assert!(fast_agent_message(&two).is_none());
    same_as_prost(&two);
    same_as_prost(&[]);
    same_as_prost(&[
        0x12, 0x0b, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
    ]);
    same_as_prost(&[0x12, 0x03, 0x2a, 0x01, 0x00]);
}

/// Figures, not an assertion: decode time per sample of a demo-sized batch, prost from the buffer versus this
/// codec (`cargo test --release -p commwatch-proto codec -- --nocapture`).
#[test]
fn decode_cost_per_sample() {
    let mut r = Rng(7);
    let mut b = SampleBatch {
        seq: 9,
        ..Default::default()
    };
    for t in 0..5 {
        b.timestamps_unix_ns
            .push(1_700_000_000_000_000_000 + t * 50_000_000);
        b.tick_lengths.push(340);
        for id in 0..340 {
            b.series_ids.push(id);
            b.values.push(r.below(1 << 40));
        }
    }
    let bytes = wrap(b).encode_to_vec();
    let rounds = 2000;
    let t0 = std::time::Instant::now();
    for _ in 0..rounds {
        let mut buf = prost::bytes::BytesMut::from(&bytes[..]);
        std::hint::black_box(AgentMessage::decode(&mut buf).ok());
    }
    let prost_ns = t0.elapsed().as_nanos() as f64 / (rounds * 1700) as f64;
    let t0 = std::time::Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(AgentMessage::decode_slice(&bytes).ok());
    }
    let fast_ns = t0.elapsed().as_nanos() as f64 / (rounds * 1700) as f64;
    println!(
        "decode per sample: prost from a BytesMut {prost_ns:.2} ns, slice codec {fast_ns:.2} ns"
    );
}
