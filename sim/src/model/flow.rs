//! One direction of a link: the AllReduce bytes of every step (on the job's step clock), a constant
//! background, and — on `eth0` with the `storage` variant — storage traffic.

use std::time::Duration;

use crate::model::clock::StepClock;
use crate::model::storage::StorageFlow;
use crate::model::ETH_FRAME_BYTES;

const NS_PER_S: u128 = 1_000_000_000;

/// One direction of a link: the AllReduce's bytes in every step plus a constant background (plus storage
/// traffic on `eth0` with the `storage` variant).
///
/// All functions are pure in `t`, non-decreasing in `t`, and exact integers. Without variants,
/// `burst_bytes_at(t) = k·B + floor(B · clamp(τ − start, 0, d) / d)` where `k = floor(t / period)`,
/// `τ = t − k·period`, `B` the burst bytes per step and `d` the burst duration; with them, the same per
/// burst of each step on the job's step clock (see [`crate::StepTimeline`]).
/// `background_bytes_at(t) = floor(r · t)` for background rate `r` in B/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Bytes moved by the AllReduce in every step.
    pub burst_bytes_per_step: u64,
    /// Bytes moved by the AllReduce in a step where the `flapping` variant's port is down (rerouted:
    /// 0 on that port, more on the node's other rails); equal to `burst_bytes_per_step` otherwise.
    pub burst_bytes_per_flapped_step: u64,
    /// Constant background traffic, in bytes per second.
    pub background_bytes_per_second: u64,
    /// Bytes per packet of the burst traffic.
    pub burst_packet_bytes: u64,
    /// Bytes per packet of the background traffic.
    pub background_packet_bytes: u64,
    /// Storage traffic (`storage` variant, `eth0` of a job node), counted in 1514-byte frames.
    pub storage: Option<StorageFlow>,
    clock: StepClock,
}

impl Flow {
    pub(crate) fn new(
        clock: StepClock,
        burst: (u64, u64),
        background_bytes_per_second: u64,
        packets: (u64, u64),
    ) -> Flow {
        Flow {
            burst_bytes_per_step: burst.0,
            burst_bytes_per_flapped_step: burst.1,
            background_bytes_per_second,
            burst_packet_bytes: packets.0,
            background_packet_bytes: packets.1,
            storage: None,
            clock,
        }
    }

    /// Bytes moved by the bursts between 0 and `t`.
    pub fn burst_bytes_at(&self, t: Duration) -> u64 {
        let v = self.clock.bytes_at(
            t.as_nanos(),
            self.burst_bytes_per_step,
            self.burst_bytes_per_flapped_step,
        );
        u64::try_from(v).unwrap_or(u64::MAX)
    }

    /// AllReduce bytes of step `k` (the job's steps; see [`crate::StepTimeline::step_start`]).
    pub fn step_bytes(&self, k: u64) -> u64 {
        if self.clock.is_flapped(k) {
            self.burst_bytes_per_flapped_step
        } else {
            self.burst_bytes_per_step
        }
    }

    /// Time (nanoseconds) this flow spent in bursts between 0 and `t`; 0 if it has no burst.
    pub fn burst_active_ns_at(&self, t: Duration) -> u128 {
        self.clock.active_ns_at(
            t.as_nanos(),
            self.burst_bytes_per_step > 0,
            self.burst_bytes_per_flapped_step > 0,
        )
    }

    /// Background bytes moved between 0 and `t`: `floor(rate · t)`.
    pub fn background_bytes_at(&self, t: Duration) -> u64 {
        let v = u128::from(self.background_bytes_per_second) * t.as_nanos() / NS_PER_S;
        u64::try_from(v).unwrap_or(u64::MAX)
    }

    /// Storage bytes moved between 0 and `t` (0 without the `storage` variant).
    pub fn storage_bytes_at(&self, t: Duration) -> u64 {
        self.storage.map_or(0, |s| s.bytes_at(t))
    }

    /// All bytes moved between 0 and `t` (burst + background + storage).
    pub fn bytes_at(&self, t: Duration) -> u64 {
        self.burst_bytes_at(t)
            .saturating_add(self.background_bytes_at(t))
            .saturating_add(self.storage_bytes_at(t))
    }

    /// Packets moved between 0 and `t`: `floor(burst bytes / burst packet size) +
    /// floor(background bytes / background packet size) + floor(storage bytes / 1514)`.
    pub fn packets_at(&self, t: Duration) -> u64 {
        self.burst_bytes_at(t) / self.burst_packet_bytes.max(1)
            + self.background_bytes_at(t) / self.background_packet_bytes.max(1)
            + self.storage_bytes_at(t) / ETH_FRAME_BYTES
    }

    /// The burst's achieved rate in a normal step, bytes per second: the step's bytes over the time its
    /// bursts last (0 without a burst). Background and storage traffic are not included.
    pub fn burst_rate_bytes_per_second(&self) -> f64 {
        let busy = self.clock.buckets * self.clock.bucket_ns;
        if self.burst_bytes_per_step == 0 || busy == 0 {
            return 0.0;
        }
        self.burst_bytes_per_step as f64 * 1e9 / busy as f64
    }
}

/// Both directions of one link and what it can carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkModel {
    /// Transmit direction (`port_xmit_data`·4, `tx_bytes`).
    pub tx: Flow,
    /// Receive direction (`port_rcv_data`·4, `rx_bytes`).
    pub rx: Flow,
    /// Capacity as inventory reports it, bytes per second (`rate` Gb/s × 125e6, `speed` Mb/s
    /// × 125e3; 0 for an IPoIB netdev, whose bytes are bounded by its HCA).
    pub capacity_bytes_per_second: u64,
    /// The most the job's traffic achieves on it, bytes per second (capacity × efficiency).
    pub effective_bytes_per_second: u64,
}
