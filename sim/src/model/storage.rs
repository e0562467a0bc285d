//! The `storage` variant: storage and checkpoint traffic on the management NIC `eth0` of every node that runs
//! a job — asymmetric, at storage rates, and not periodic with the training step.
//!
//! - **Reads** (rx): the data loader reads in chunks. Per node a cycle of [`READ_CHUNKS`] chunks, each
//!   seeded: duration 300–1500 ms, rate 200–1000 MB/s (whole MB/s), then a gap of 100–1100 ms. A chunk
//!   moves `rate × duration` bytes linearly (floor). Mean ≈ 360 MB/s; a cycle lasts ≈ 24 s, then repeats.
//! - **Checkpoints** (tx): every [`CHECKPOINT_EVERY_STEPS`] nominal steps of the node's job (at least
//!   every 8 s), starting a quarter of that period in (step 50 at the defaults: 15.5 s, then every
//!   61.9375 s), the node writes [`CHECKPOINT_BYTES`] at [`CHECKPOINT_BYTES_PER_SECOND`] (4 GB in 4 s).
//! - **Requests and acks**: the other direction of each carries 1/[`ACK_DIVISOR`] (2 %) of its bytes, at
//!   the same time.
//!
//! Storage bytes count as 1514-byte frames. They add to `eth0`'s background and, on the `management-nic`
//! fault node, to its NCCL traffic.

use std::time::Duration;

use crate::model::seed::seeded;

/// Read chunks per node per cycle.
pub const READ_CHUNKS: u64 = 16;
/// A read chunk lasts `[lo, hi)` milliseconds.
pub const READ_CHUNK_MS: (u64, u64) = (300, 1500);
/// A read chunk's rate is `[lo, hi)` MB/s (10⁶ B/s).
pub const READ_MB_PER_S: (u64, u64) = (200, 1000);
/// The gap after a read chunk lasts `[lo, hi)` milliseconds.
pub const READ_GAP_MS: (u64, u64) = (100, 1100);
/// A checkpoint every this many nominal steps.
pub const CHECKPOINT_EVERY_STEPS: u64 = 200;
/// Bytes a node writes per checkpoint.
pub const CHECKPOINT_BYTES: u64 = 4_000_000_000;
/// The checkpoint's write rate, bytes per second.
pub const CHECKPOINT_BYTES_PER_SECOND: u64 = 1_000_000_000;
/// Requests and acks are this fraction (1/n) of the bytes they go with.
pub const ACK_DIVISOR: u64 = 50;

const DEV_STORAGE: u64 = 0xffe;
const NS_PER_MS: u64 = 1_000_000;
const CHECKPOINT_NS: u64 = CHECKPOINT_BYTES / CHECKPOINT_BYTES_PER_SECOND * 1_000_000_000;

/// Which side of `eth0` a [`StorageFlow`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageDirection {
    /// Transmit: checkpoint writes plus read requests.
    Tx,
    /// Receive: reads plus checkpoint acks.
    Rx,
}

/// One read chunk within a node's cycle (nanoseconds from the cycle's start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadChunk {
    /// Start within the cycle.
    pub start_ns: u64,
    /// Duration.
    pub duration_ns: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Gap after it before the next chunk.
    pub gap_ns: u64,
}

/// One direction of a node's storage traffic. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageFlow {
    seed: u64,
    node: usize,
    direction: StorageDirection,
    cycle_ns: u64,
    cycle_bytes: u64,
    checkpoint_period_ns: u64,
}

fn chunk_params(seed: u64, node: usize, i: u64) -> (u64, u64, u64) {
    let pick = |what: u64, (lo, hi): (u64, u64)| {
        seeded(seed, node, DEV_STORAGE, 0x100 + 3 * i + what, lo, hi - lo)
    };
    let ms = pick(0, READ_CHUNK_MS);
    let mb = pick(1, READ_MB_PER_S);
    let gap = pick(2, READ_GAP_MS);
    (ms * NS_PER_MS, ms * mb * 1_000, gap * NS_PER_MS)
}

impl StorageFlow {
    /// The storage traffic of `node` in `direction`, checkpointing every [`CHECKPOINT_EVERY_STEPS`] steps
    /// of `step_period_ns`.
    pub(crate) fn new(
        seed: u64,
        node: usize,
        direction: StorageDirection,
        step_period_ns: u64,
    ) -> StorageFlow {
        let (mut cycle_ns, mut cycle_bytes) = (0, 0);
        for i in 0..READ_CHUNKS {
            let (d, b, g) = chunk_params(seed, node, i);
            cycle_ns += d + g;
            cycle_bytes += b;
        }
        StorageFlow {
            seed,
            node,
            direction,
            cycle_ns,
            cycle_bytes,
            checkpoint_period_ns: (CHECKPOINT_EVERY_STEPS * step_period_ns).max(2 * CHECKPOINT_NS),
        }
    }

    /// The read chunks of one cycle, in order.
    pub fn read_chunks(&self) -> Vec<ReadChunk> {
        let mut start = 0;
        (0..READ_CHUNKS)
            .map(|i| {
                let (duration_ns, bytes, gap_ns) = chunk_params(self.seed, self.node, i);
                let c = ReadChunk {
                    start_ns: start,
                    duration_ns,
                    bytes,
                    gap_ns,
                };
                start += duration_ns + gap_ns;
                c
            })
            .collect()
    }

    /// Length of the read cycle.
    pub fn read_cycle(&self) -> Duration {
        Duration::from_nanos(self.cycle_ns)
    }

    /// Time between checkpoint starts.
    pub fn checkpoint_period(&self) -> Duration {
        Duration::from_nanos(self.checkpoint_period_ns)
    }

    /// When the first checkpoint starts (a quarter of the period in).
    pub fn first_checkpoint(&self) -> Duration {
        Duration::from_nanos(self.checkpoint_period_ns / 4)
    }

    /// Bytes read between 0 and `t`.
    pub fn read_bytes_at(&self, t: Duration) -> u64 {
        let t = t.as_nanos();
        let cycle = u128::from(self.cycle_ns.max(1));
        let (k, tau) = (t / cycle, t % cycle);
        let mut done = k * u128::from(self.cycle_bytes);
        for c in self.read_chunks() {
            let start = u128::from(c.start_ns);
            if tau < start {
                break;
            }
            let d = u128::from(c.duration_ns);
            done += u128::from(c.bytes) * (tau - start).min(d) / d.max(1);
        }
        u64::try_from(done).unwrap_or(u64::MAX)
    }

    /// Checkpoint bytes written between 0 and `t`.
    pub fn checkpoint_bytes_at(&self, t: Duration) -> u64 {
        let first = u128::from(self.checkpoint_period_ns / 4);
        let Some(u) = t.as_nanos().checked_sub(first) else {
            return 0;
        };
        let period = u128::from(self.checkpoint_period_ns);
        let (n, r) = (u / period, u % period);
        let d = u128::from(CHECKPOINT_NS);
        let c = u128::from(CHECKPOINT_BYTES);
        u64::try_from(n * c + c * r.min(d) / d).unwrap_or(u64::MAX)
    }

    /// This direction's storage bytes between 0 and `t`.
    pub fn bytes_at(&self, t: Duration) -> u64 {
        let (reads, writes) = (self.read_bytes_at(t), self.checkpoint_bytes_at(t));
        match self.direction {
            StorageDirection::Rx => reads + writes / ACK_DIVISOR,
            StorageDirection::Tx => writes + reads / ACK_DIVISOR,
        }
    }
}
