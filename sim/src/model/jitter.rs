//! The `jitter` variant: seeded step-time and link-rate jitter that never drifts.
//!
//! Both jitters are *differences of seeded offsets*, so that sums over steps telescope and every counter
//! stays an exact closed-form function of time:
//!
//! - **Step time.** Step `k` starts at `k·P + e(k)`, `e(0) = 0`, `e(k)` seeded in `[−J, J]` with
//!   `J = P / 40`: a step lasts `P + e(k+1) − e(k)`, within ±5 % of `P` (±15.5 ms at the default 310.3 ms).
//!   Compute absorbs the difference; the bursts keep their place before the *next* step's start. `J` is
//!   capped at half the compute and half the first burst's offset, so compute and bursts stay inside their
//!   step.
//! - **Link rate.** Every burst of step `k` lasts its nominal `d` plus `g(k+1) − g(k)`, `g` seeded in
//!   `[−G, G]` with `G = 1.5 %` of `d`: the achieved rate varies within about ±3 % (bytes per step are
//!   unchanged). The nominal period leaves room for the longest burst (`d + 2G`). `g` is 0 at step 0 and
//!   at every flap boundary of the `flapping` variant, which keeps sums over flapped steps closed-form too.

use crate::model::seed::{seeded_signed, stream_key};

/// Stream keys of the two jitters (per job).
const STEP_STREAM: u64 = 0x6a69_7474_0001;
const BURST_STREAM: u64 = 0x6a69_7474_0002;

/// One job's jitter amplitudes and seed (nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Jitter {
    step_key: u64,
    burst_key: u64,
    /// `J`: the most a step boundary moves.
    pub(crate) step_ns: u64,
    /// `G`: the most a burst's end moves.
    pub(crate) burst_ns: u64,
}

impl Jitter {
    /// The jitter of job `job`: boundaries by up to `step_ns`, burst ends by up to `burst_ns`.
    pub(crate) fn new(seed: u64, job: usize, step_ns: u64, burst_ns: u64) -> Jitter {
        let job = (job as u64) << 48;
        Jitter {
            step_key: stream_key(seed, STEP_STREAM ^ job),
            burst_key: stream_key(seed, BURST_STREAM ^ job),
            step_ns,
            burst_ns,
        }
    }

    /// `e(k)`: how far step `k`'s start moves (0 for step 0).
    pub(crate) fn step_offset(&self, k: u64) -> i128 {
        if k == 0 {
            return 0;
        }
        seeded_signed(self.step_key, k, self.step_ns)
    }

    /// `g(k)` before the flap rule (the clock zeroes it at step 0 and at flap boundaries).
    pub(crate) fn burst_offset(&self, k: u64) -> i128 {
        seeded_signed(self.burst_key, k, self.burst_ns)
    }
}

/// `J` for a step of nominal length `period_ns` whose compute is at least `compute_ns` and whose first
/// burst starts `first_ns` into the step: `P / 40`, at most half of either.
pub(crate) fn step_amplitude_ns(period_ns: u64, compute_ns: u64, first_ns: u64) -> u64 {
    (period_ns / 40).min(compute_ns / 2).min(first_ns / 2)
}

/// `G` for bursts of nominal length `burst_ns`: 1.5 % of it.
pub(crate) fn burst_amplitude_ns(burst_ns: u64) -> u64 {
    burst_ns / 1000 * 15
}
