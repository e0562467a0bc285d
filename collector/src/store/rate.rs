//! Pure counter logic: one step between two counter readings (reset, saturation, plausibility) and the windowed
//! rate. The store keeps, per counter, a *reset-corrected cumulative increase* (`acc`) built from these steps, so
//! a rate over any window is `(acc(t1) - acc(t0)) / (t1 - t0)`, never negative.

/// A byte rate above this multiple of the link's capacity is implausible: dropped and counted.
pub const PLAUSIBILITY_FACTOR: f64 = 4.0;
/// Plausibility cap when the capacity is unknown (and for non-byte counters): 10 TB/s (units/s).
pub const UNKNOWN_CAPACITY_CAP_PER_SECOND: f64 = 10e12;
/// Rates are computed over the last second of samples: at 20 Hz that is 20 deltas, which smooths the jitter of
/// individual ticks while still following a step's AllReduce bursts.
pub const RATE_WINDOW_NS: i64 = 1_000_000_000;

/// What one new reading means for the counter's increase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The counter grew by this much.
    Delta(u64),
    /// No usable delta: the previous or the new reading is at the saturation value (the true increase is
    /// unknown), or the value is unchanged at saturation. The increase holds.
    Hold,
    /// The counter went down (driver reload, link reset, cleared after saturation); it counted this much
    /// since the reset.
    Reset(u64),
    /// The counter went down and the new value alone would be an implausible rate: skipped.
    ResetSkipped,
    /// The delta is faster than the plausibility cap: dropped.
    Implausible,
}

/// The plausibility cap in units per second for a counter on a link of `capacity` bytes/s.
pub fn plausibility_cap(capacity: Option<f64>) -> f64 {
    match capacity {
        Some(c) if c > 0.0 => c * PLAUSIBILITY_FACTOR,
        _ => UNKNOWN_CAPACITY_CAP_PER_SECOND,
    }
}

/// Classifies the reading `cur` that follows `prev` after `dt_ns` (> 0) nanoseconds, for a counter saturating at
/// `max_value`, with a plausibility cap of `cap_per_s` units per second.
pub fn counter_step(prev: u64, cur: u64, max_value: u64, dt_ns: i64, cap_per_s: f64) -> Step {
    let dt_s = dt_ns.max(1) as f64 / 1e9;
    let plausible = |d: u64| (d as f64) / dt_s <= cap_per_s;
    if cur >= max_value {
        // At saturation the counter stopped counting: whatever happened in this interval is unknown.
        return Step::Hold;
    }
    if prev >= max_value {
        // Cleared after saturation (PMA counters are reset by software): a reset.
        return if plausible(cur) {
            Step::Reset(cur)
        } else {
            Step::ResetSkipped
        };
    }
    if cur >= prev {
        let d = cur - prev;
        if plausible(d) {
            Step::Delta(d)
        } else {
            Step::Implausible
        }
    } else if plausible(cur) {
        Step::Reset(cur)
    } else {
        Step::ResetSkipped
    }
}

/// Rate per second over the last `window_ns` of a series of `(timestamp_ns, acc)` points, given newest first.
///
/// The start point is the newest one at least `window_ns` older than the newest (so the span covers the whole
/// window, overshooting by at most one period); when the history is shorter, the oldest point. `None` with fewer
/// than two points.
pub fn window_rate(newest_first: impl Iterator<Item = (i64, u64)>, window_ns: i64) -> Option<f64> {
    let mut it = newest_first;
    let (t1, a1) = it.next()?;
    let mut start = None;
    for (t, a) in it {
        start = Some((t, a));
        if t <= t1 - window_ns {
            break;
        }
    }
    let (t0, a0) = start?;
    if t1 <= t0 {
        return None;
    }
    Some(a1.saturating_sub(a0) as f64 / ((t1 - t0) as f64 / 1e9))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn plain_delta() {
        assert_eq!(counter_step(100, 350, u64::MAX, S, 1e9), Step::Delta(250));
        assert_eq!(counter_step(100, 100, u64::MAX, S, 1e9), Step::Delta(0));
    }

    #[test]
    fn reset_uses_new_value_if_plausible() {
        assert_eq!(
            counter_step(1_000_000, 500, u64::MAX, S, 1e9),
            Step::Reset(500)
        );
        // 2e9 in one second on a 1e9 cap: not believable as "counted since the reset".
        assert_eq!(
            counter_step(5e9 as u64, 2e9 as u64, u64::MAX, S, 1e9),
            Step::ResetSkipped
        );
    }

    #[test]
    fn saturation_holds() {
        let max = u32::MAX as u64;
        assert_eq!(counter_step(max - 10, max, max, S, 1e12), Step::Hold);
        assert_eq!(counter_step(max, max, max, S, 1e12), Step::Hold);
        // Cleared after saturation.
        assert_eq!(counter_step(max, 7, max, S, 1e12), Step::Reset(7));
    }

    #[test]
    fn implausible_delta_dropped() {
        let cap = plausibility_cap(Some(25e9));
        assert_eq!(cap, 100e9);
        assert_eq!(
            counter_step(0, 99e9 as u64, u64::MAX, S, cap),
            Step::Delta(99e9 as u64)
        );
        assert_eq!(
            counter_step(0, 101e9 as u64, u64::MAX, S, cap),
            Step::Implausible
        );
        // Half a second: the cap scales with time.
        assert_eq!(
            counter_step(0, 60e9 as u64, u64::MAX, S / 2, cap),
            Step::Implausible
        );
        assert_eq!(plausibility_cap(None), 10e12);
        assert_eq!(plausibility_cap(Some(0.0)), 10e12);
    }

    #[test]
    fn window_rate_over_one_second() {
        // 20 Hz, 1000 units per tick = 20_000/s.
        let pts: Vec<(i64, u64)> = (0..=40).map(|i| (i * S / 20, i as u64 * 1000)).collect();
        let r = window_rate(pts.iter().rev().copied(), RATE_WINDOW_NS).expect("rate");
        assert!((r - 20_000.0).abs() < 1e-9, "{r}");
        // Short history: uses what there is.
        let r = window_rate(pts[..3].iter().rev().copied(), RATE_WINDOW_NS).expect("rate");
        assert!((r - 20_000.0).abs() < 1e-9, "{r}");
        assert_eq!(
            window_rate(pts[..1].iter().rev().copied(), RATE_WINDOW_NS),
            None
        );
        assert_eq!(window_rate(std::iter::empty(), RATE_WINDOW_NS), None);
    }

    #[test]
    fn window_rate_slow_series_spans_more_than_window() {
        // 1 Hz series: the previous point is exactly one window back.
        let pts = [(0, 0u64), (S, 10), (2 * S, 30)];
        assert_eq!(
            window_rate(pts.iter().rev().copied(), RATE_WINDOW_NS),
            Some(20.0)
        );
        // A gap of 5 s (agent restart): averaged over the gap, no spike.
        let pts = [(0, 0u64), (5 * S, 50)];
        assert_eq!(
            window_rate(pts.iter().rev().copied(), RATE_WINDOW_NS),
            Some(10.0)
        );
    }
}
