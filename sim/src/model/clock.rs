//! A job's step clock: where every step starts and when, within it, the AllReduce bursts run — the one
//! function of time every training byte, every busy nanosecond and every flap state is read from.
//!
//! Step `k` starts at `s(k) = k·P + e(k)` ([`Jitter`], `e ≡ 0` without the `jitter` variant). Its bursts are
//! `buckets` intervals (1 without the `overlap` variant), bucket `i` starting at
//! `k·P + first + e(k+1) + i·spacing` and lasting `d(k) = base + g(k+1) − g(k)`, where `base` is the
//! bucket's nominal duration (longer in a step where the flapping port is down) and `g ≡ 0` without jitter.
//! A flow moving `B` bytes in a step moves bucket `i`'s share `floor(B·(i+1)/buckets) − floor(B·i/buckets)`
//! linearly (floor) over the bucket. Everything is integer nanoseconds and bytes, O(1) in `t`.

use crate::model::flap::FlapCycle;
use crate::model::jitter::Jitter;

/// See the module documentation. All times in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StepClock {
    /// `P`: nominal step length (at least 1).
    pub(crate) period_ns: u64,
    /// Offset of the first burst from a nominal step's start.
    pub(crate) first_ns: u64,
    /// Bursts per step (at least 1).
    pub(crate) buckets: u64,
    /// Between the starts of consecutive bursts of one step.
    pub(crate) spacing_ns: u64,
    /// A burst's nominal duration.
    pub(crate) bucket_ns: u64,
    /// A burst's nominal duration in a step where the flapping port is down.
    pub(crate) flapped_bucket_ns: u64,
    /// Step and burst jitter (`jitter` variant).
    pub(crate) jitter: Option<Jitter>,
    /// The flap cycle of the `flapping` variant, on the job that carries the port.
    pub(crate) flap: Option<FlapCycle>,
}

impl StepClock {
    /// A clock with one burst of `duration_ns` at `start_ns` in every step of `period_ns`.
    pub(crate) fn single(period_ns: u64, start_ns: u64, duration_ns: u64) -> StepClock {
        StepClock {
            period_ns: period_ns.max(1),
            first_ns: start_ns,
            buckets: 1,
            spacing_ns: 0,
            bucket_ns: duration_ns,
            flapped_bucket_ns: duration_ns,
            jitter: None,
            flap: None,
        }
    }

    fn e(&self, k: u64) -> i128 {
        self.jitter.map_or(0, |j| j.step_offset(k))
    }

    fn g(&self, k: u64) -> i128 {
        match self.jitter {
            None => 0,
            Some(_) if k == 0 => 0,
            Some(_) if self.flap.is_some_and(|f| f.is_boundary(k)) => 0,
            Some(j) => j.burst_offset(k),
        }
    }

    /// `s(k)`: the start of step `k`.
    pub(crate) fn step_start(&self, k: u64) -> u128 {
        let s = i128::from(k) * i128::from(self.period_ns) + self.e(k);
        s.max(0) as u128
    }

    /// The step that `t` falls in: the largest `k` with `s(k) ≤ t`.
    pub(crate) fn step_at(&self, t: u128) -> u64 {
        let k0 = u64::try_from(t / u128::from(self.period_ns)).unwrap_or(u64::MAX - 1);
        // |e| ≤ P/40, so the step is k0 − 1, k0 or k0 + 1.
        if self.step_start(k0 + 1) <= t {
            k0 + 1
        } else if k0 == 0 || self.step_start(k0) <= t {
            k0
        } else {
            k0 - 1
        }
    }

    /// Whether the flapping port is down during step `k`.
    pub(crate) fn is_flapped(&self, k: u64) -> bool {
        self.flap.is_some_and(|f| f.is_down(k))
    }

    /// Flapped steps among `0..k`.
    fn flapped_before(&self, k: u64) -> u64 {
        self.flap.map_or(0, |f| f.downs_before(k))
    }

    /// Down transitions of the flapping port up to `t` (0 without flapping).
    pub(crate) fn flap_transitions_at(&self, t: u128) -> u64 {
        self.flap.map_or(0, |f| f.transitions_by(self.step_at(t)))
    }

    fn base_ns(&self, k: u64) -> u64 {
        if self.is_flapped(k) {
            self.flapped_bucket_ns
        } else {
            self.bucket_ns
        }
    }

    /// Duration of every burst of step `k`.
    pub(crate) fn bucket_duration(&self, k: u64) -> u128 {
        let d = i128::from(self.base_ns(k)) + self.g(k + 1) - self.g(k);
        d.max(0) as u128
    }

    /// Start of burst `i` of step `k`.
    pub(crate) fn bucket_start(&self, k: u64, i: u64) -> u128 {
        let s = i128::from(k) * i128::from(self.period_ns)
            + i128::from(self.first_ns)
            + self.e(k + 1)
            + i128::from(i) * i128::from(self.spacing_ns);
        s.max(0) as u128
    }

    /// The bursts of step `k`, `[start, end)` each.
    pub(crate) fn bursts(&self, k: u64) -> impl Iterator<Item = (u128, u128)> + '_ {
        let d = self.bucket_duration(k);
        (0..self.buckets).map(move |i| {
            let s = self.bucket_start(k, i);
            (s, s + d)
        })
    }

    /// Bytes a flow moving `b` bytes in step `k` has moved of them by `t`.
    fn bytes_in_step(&self, k: u64, b: u64, t: u128) -> u128 {
        let b = u128::from(b);
        let n = u128::from(self.buckets);
        let d = self.bucket_duration(k);
        let mut done = 0;
        for (i, (start, end)) in self.bursts(k).enumerate() {
            if t < start {
                break;
            }
            let i = i as u128;
            let share = b * (i + 1) / n - b * i / n;
            done += if d == 0 || t >= end {
                share
            } else {
                share * (t - start) / d
            };
        }
        done
    }

    /// Bytes moved by `t` by a flow that moves `up` bytes in every step, `flapped` in a step where the
    /// flapping port is down.
    pub(crate) fn bytes_at(&self, t: u128, up: u64, flapped: u64) -> u128 {
        if up == 0 && flapped == 0 {
            return 0;
        }
        let k = self.step_at(t);
        let down = self.flapped_before(k);
        let b = if self.is_flapped(k) { flapped } else { up };
        u128::from(k - down) * u128::from(up)
            + u128::from(down) * u128::from(flapped)
            + self.bytes_in_step(k, b, t)
    }

    /// Nanoseconds spent in bursts by `t` by a flow active (moving bytes) in normal steps if `up`, in
    /// flapped steps if `flapped`.
    pub(crate) fn active_ns_at(&self, t: u128, up: bool, flapped: bool) -> u128 {
        if !up && !flapped {
            return 0;
        }
        let k = self.step_at(t);
        let downs = self.flapped_before(k);
        // Σ over steps j < k of g(j+1) − g(j) telescopes to g(k); over the flapped steps alone to g(k) if
        // k is inside a down run (g is 0 at its start), else to 0.
        let all = self.g(k);
        let in_down = if self.is_flapped(k) { all } else { 0 };
        let mut total: i128 = 0;
        if up {
            total += i128::from(k - downs) * i128::from(self.bucket_ns) + all - in_down;
        }
        if flapped {
            total += i128::from(downs) * i128::from(self.flapped_bucket_ns) + in_down;
        }
        let mut done = total.max(0) as u128 * u128::from(self.buckets);
        if (self.is_flapped(k) && flapped) || (!self.is_flapped(k) && up) {
            let d = self.bucket_duration(k);
            done += self
                .bursts(k)
                .map(|(s, _)| t.saturating_sub(s).min(d))
                .sum::<u128>();
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute_active(c: &StepClock, t: u128, up: bool, flapped: bool) -> u128 {
        let mut total = 0;
        for k in 0..=c.step_at(t) {
            if (c.is_flapped(k) && flapped) || (!c.is_flapped(k) && up) {
                total += c
                    .bursts(k)
                    .map(|(s, e)| t.min(e).saturating_sub(s))
                    .sum::<u128>();
            }
        }
        total
    }

    #[test]
    fn jittered_flapping_buckets_are_consistent_with_a_step_by_step_sum() {
        let c = StepClock {
            period_ns: 1_000_000,
            first_ns: 400_000,
            buckets: 3,
            spacing_ns: 150_000,
            bucket_ns: 100_000,
            flapped_bucket_ns: 130_000,
            jitter: Some(Jitter::new(7, 0, 25_000, 1_500)),
            flap: Some(FlapCycle { every: 5, down: 2 }),
        };
        let mut prev = 0;
        for t in (0..40_000_000u128).step_by(13_337) {
            let k = c.step_at(t);
            assert!(c.step_start(k) <= t && t < c.step_start(k + 1));
            for (_, e) in c.bursts(k) {
                assert!(e <= c.step_start(k + 1));
            }
            let b = c.bytes_at(t, 3_000, 4_000);
            assert!(b >= prev);
            prev = b;
            for (up, fl) in [(true, true), (true, false), (false, true)] {
                assert_eq!(
                    c.active_ns_at(t, up, fl),
                    brute_active(&c, t, up, fl),
                    "{t}"
                );
            }
        }
        // Whole steps: 3 000 B in a normal step, 4 000 in a flapped one.
        let s = |k| c.step_start(k);
        assert_eq!(
            c.bytes_at(s(3), 3_000, 4_000) - c.bytes_at(s(2), 3_000, 4_000),
            3_000
        );
        assert_eq!(
            c.bytes_at(s(4), 3_000, 4_000) - c.bytes_at(s(3), 3_000, 4_000),
            4_000
        );
    }
}
