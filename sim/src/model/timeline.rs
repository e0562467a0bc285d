//! The step timeline of a job: its nominal shape (the public fields, what every step looks like without
//! jitter or flapping) and, through its clock, the exact start and bursts of every step.

use std::time::Duration;

use crate::model::clock::StepClock;

const NS_PER_S: u128 = 1_000_000_000;

/// The shape of every step of a job, shared by its nodes.
///
/// The fields are the *nominal* step; without the `jitter` and `flapping` variants every step is exactly
/// that. [`StepTimeline::step_start`], [`StepTimeline::bursts_of_step`] and [`StepTimeline::bytes_at`] give
/// the exact figures of any step in every case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepTimeline {
    /// Length of a step.
    pub period: Duration,
    /// Host phase at the start of each step, GPUs idle.
    pub host: Duration,
    /// GPU compute per node, starting after `host` (zero on a node that is not in the job).
    pub compute: Vec<Duration>,
    /// Offset of the AllReduce's first burst from the start of the step (same on every node).
    pub burst_start: Duration,
    /// From the start of the first burst to the end of the last, set by the slowest link of the ring (one
    /// burst unless the `overlap` variant splits it into buckets).
    pub burst_duration: Duration,
    clock: StepClock,
}

pub(crate) fn nanos(ns: u128) -> Duration {
    let secs = u64::try_from(ns / NS_PER_S).unwrap_or(u64::MAX);
    Duration::new(secs, (ns % NS_PER_S) as u32)
}

impl StepTimeline {
    pub(crate) fn new(
        clock: StepClock,
        host_ns: u64,
        compute_ns: Vec<u64>,
        span_ns: u64,
    ) -> StepTimeline {
        StepTimeline {
            period: Duration::from_nanos(clock.period_ns),
            host: Duration::from_nanos(host_ns),
            compute: compute_ns.into_iter().map(Duration::from_nanos).collect(),
            burst_start: Duration::from_nanos(clock.first_ns),
            burst_duration: Duration::from_nanos(span_ns),
            clock,
        }
    }

    pub(crate) fn clock(&self) -> &StepClock {
        &self.clock
    }

    /// Communication not hidden under compute: `period − (host + max compute)`.
    pub fn exposed_comm(&self) -> Duration {
        let ready = self.host + self.compute.iter().copied().max().unwrap_or_default();
        self.period.saturating_sub(ready)
    }

    /// Share of the step `node`'s GPUs compute (0 for an unknown node).
    pub fn gpu_busy_share(&self, node: usize) -> f64 {
        match self.compute.get(node) {
            Some(c) if !self.period.is_zero() => c.as_secs_f64() / self.period.as_secs_f64(),
            _ => 0.0,
        }
    }

    /// Share of a nominal step a link with AllReduce bytes is busy bursting (the bursts' total over the
    /// period).
    pub fn busy_share(&self) -> f64 {
        let c = &self.clock;
        (c.buckets * c.bucket_ns) as f64 / c.period_ns as f64
    }

    /// The interval `[start, end)` from the first burst of step `k` to the end of its last, from t = 0.
    pub fn burst_of_step(&self, k: u64) -> (Duration, Duration) {
        let bursts = self.bursts_of_step(k);
        match (bursts.first(), bursts.last()) {
            (Some(a), Some(b)) => (a.0, b.1),
            _ => (self.step_start(k), self.step_start(k)),
        }
    }

    /// Every burst `[start, end)` of step `k`, from t = 0.
    pub fn bursts_of_step(&self, k: u64) -> Vec<(Duration, Duration)> {
        self.clock
            .bursts(k)
            .map(|(s, e)| (nanos(s), nanos(e)))
            .collect()
    }

    /// When step `k` starts.
    pub fn step_start(&self, k: u64) -> Duration {
        nanos(self.clock.step_start(k))
    }

    /// The step `t` falls in.
    pub fn step_at(&self, t: Duration) -> u64 {
        self.clock.step_at(t.as_nanos())
    }

    /// Whether the `flapping` variant's port is down during step `k` (always false without it, and on
    /// another job than the port's).
    pub fn is_flapped(&self, k: u64) -> bool {
        self.clock.is_flapped(k)
    }

    /// Bytes moved by `t` by a flow that moves `per_step` bytes in the bursts of every step (the NVLink
    /// side of the ring, which no port flap changes).
    pub fn bytes_at(&self, per_step: u64, t: Duration) -> u64 {
        u64::try_from(self.clock.bytes_at(t.as_nanos(), per_step, per_step)).unwrap_or(u64::MAX)
    }
}
