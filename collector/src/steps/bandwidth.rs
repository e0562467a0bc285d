//! Per-step link figures, pure: from a link's cumulative byte samples and a step's edges to bytes, active time,
//! achieved and average bandwidth and utilisation.
//!
//! Input samples are `(timestamp_ns, acc)` oldest first, where `acc` is the store's reset-corrected cumulative
//! byte count (see `store::rate`): a byte count over any interval is a difference of two `acc`, never negative,
//! and a counter reset inside a step costs nothing but the bytes the agent could not see.
//!
//! **Bytes** are `acc(end) − acc(start)`, `acc` interpolated linearly between the samples around an edge (exact
//! when an edge falls on a sample, as inferred edges' counting times do: see `edges.rs`).
//!
//! **Active time** and **confidence** are the link's busy time over the step's sampling intervals (the samples
//! inside it, plus its two edges), as [`super::busy`] defines it for every reader: an interval's rate is
//! `max(tx, rx)` bytes ÷ its length; intervals below the activity floor count nothing, full ones their whole
//! length, a burst's partly busy edges their share. A step is `confident` when its bursts span enough samples
//! for their rate to be measured (or the link was idle): a burst shorter than a few samples gives exact bytes
//! and an achieved bandwidth that is only a lower bound.

use std::sync::Arc;

use commwatch_model::Link;

use super::busy::{active_floor, busy_summary, Interval};
use crate::steps::StepLink;

/// A cumulative counter value at `t`: the integer part of the sample at or before `t` and the interpolated
/// fraction towards the next one. `None` when `t` is outside the samples.
pub(crate) fn acc_at(samples: &[(i64, u64)], t: i64) -> Option<(u64, f64)> {
    let (first, last) = (samples.first()?, samples.last()?);
    if t < first.0 || t > last.0 {
        return None;
    }
    // First sample with ts > t.
    let i = samples.partition_point(|s| s.0 <= t);
    Some(acc_between(samples[i - 1], samples.get(i).copied(), t))
}

/// [`acc_at`]'s answer at `t` once the samples around it are found: `before`, the last sample at or before
/// `t`, and `after`, the next one (`None`: `before` is the newest). Its whole bytes, and the fraction
/// interpolated towards `after` (0 at `before`'s own time).
#[inline(always)]
pub(crate) fn acc_between((t0, a0): (i64, u64), after: Option<(i64, u64)>, t: i64) -> (u64, f64) {
    match after {
        Some((t1, a1)) if t0 != t => {
            let frac = (t - t0) as f64 / (t1 - t0) as f64;
            (a0, a1.saturating_sub(a0) as f64 * frac)
        }
        _ => (a0, 0.0),
    }
}

/// Interpolated cumulative value at `t` (f64), `None` outside the samples.
pub fn interpolate(samples: &[(i64, u64)], t: i64) -> Option<f64> {
    acc_at(samples, t).map(|(a, f)| a as f64 + f)
}

/// [`acc_at`] at each of `times`, by one walk over `samples` (oldest first) while the times ascend instead of
/// a search per time — the same values; a time earlier than its predecessor is searched for.
pub(crate) fn acc_at_ascending(samples: &[(i64, u64)], times: &[i64]) -> Vec<Option<(u64, f64)>> {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return vec![None; times.len()];
    };
    // `next`: the first sample with ts > the previous time (as `acc_at`'s partition point); searched for the
    // first time (the samples may cover many steps before it: a walk from the oldest cost a pass over them per
    // step and link, the step engine's largest cost).
    let mut next = times
        .first()
        .map_or(0, |&t| samples.partition_point(|s| s.0 <= t));
    times
        .iter()
        .map(|&t| {
            if t < first.0 || t > last.0 {
                return None;
            }
            if next > 0 && samples[next - 1].0 > t {
                next = samples.partition_point(|s| s.0 <= t);
            }
            while next < samples.len() && samples[next].0 <= t {
                next += 1;
            }
            Some(acc_between(
                samples[next - 1],
                samples.get(next).copied(),
                t,
            ))
        })
        .collect()
}

/// Bytes between `start` and `end` (`start < end`), `None` when the samples do not cover both edges.
pub fn bytes_between(samples: &[(i64, u64)], start: i64, end: i64) -> Option<u64> {
    let (a0, f0) = acc_at(samples, start)?;
    let (a1, f1) = acc_at(samples, end)?;
    let whole = a1.saturating_sub(a0) as f64;
    Some((whole + f1 - f0).max(0.0).round() as u64)
}

/// One link's cumulative byte samples, `(timestamp_ns, acc)` oldest first, per direction (either may be empty
/// when the agent does not count that direction).
pub type Directions<'a> = (&'a [(i64, u64)], &'a [(i64, u64)]);

/// Buffers the link figures keep between links and steps (their content is scratch), so that a node's links
/// cost no allocation per link and step ([`step_link_with`]).
#[derive(Debug, Default)]
pub struct LinkScratch {
    points: Vec<i64>,
    /// Bytes per grid interval and direction, summed over the parts of a link.
    tx: Vec<f64>,
    rx: Vec<f64>,
    intervals: Vec<Interval>,
    /// Each interval's rate ([`Interval::rate`]), worked out once.
    rates: Vec<f64>,
    /// Scratch of the busy time's medians.
    full: Vec<f64>,
}

/// The figures of one link over the step `[start_ns, end_ns]`. `tx` / `rx` are the link's cumulative byte
/// samples (either may be empty when the agent does not count that direction); `sample_period_s` is the node's
/// fast sampling period (what a burst must outlast for its rate to be measured). `None` when neither direction's
/// samples cover both edges, or the step is empty. ([`step_link_with`] without a caller's buffers.)
pub fn step_link(
    link: &Arc<Link>,
    tx: &[(i64, u64)],
    rx: &[(i64, u64)],
    start_ns: i64,
    end_ns: i64,
    sample_period_s: f64,
) -> Option<StepLink> {
    let mut scratch = LinkScratch::default();
    step_link_with(
        link,
        &[(tx, rx)],
        (start_ns, end_ns),
        sample_period_s,
        &mut scratch,
    )
}

/// The figures over the step `[start_ns, end_ns]` of `link` made of `parts` (one for a link as the agent
/// sent it; a GPU's NVLinks for the GPU's figure, `link` then carrying their summed capacity): bytes are the
/// parts' sums, and each sampling interval's bytes (on the grid of the first part that covers the step) the sum
/// of the parts' interpolated bytes in it, so that the busy time is the summed traffic's. A part whose samples
/// cover neither edge in either direction counts nothing; `None` when no part covers the step, or the step is
/// empty. Allocates nothing but what `scratch` grows to (and nothing once it has). A link whose counters grew
/// too little over the samples read for any interval to reach the activity floor has its bytes counted and
/// no interval worked out (a node's idle links: a third of the demo node's figures).
pub fn step_link_with(
    link: &Arc<Link>,
    parts: &[Directions<'_>],
    (start_ns, end_ns): (i64, i64),
    sample_period_s: f64,
    scratch: &mut LinkScratch,
) -> Option<StepLink> {
    if end_ns <= start_ns {
        return None;
    }
    // Each direction's counter growth over the samples read, summed over the parts (at least its bytes in any
    // grid interval: the counters never go back), and the largest counter value read.
    let (mut growth, mut largest, mut covered) = ((0u64, 0u64), 0u64, false);
    for &(tx, rx) in parts {
        let (t, r) = (covers(tx, start_ns, end_ns), covers(rx, start_ns, end_ns));
        if !t && !r {
            continue;
        }
        if !covered {
            // Interval grid: the edges and the samples strictly inside (of whichever direction covers the
            // step), from the first part that covers it.
            let grid_src = if t { tx } else { rx };
            grid(grid_src, start_ns, end_ns, &mut scratch.points);
            covered = true;
        }
        let grew = |s: &[(i64, u64)]| match (s.first(), s.last()) {
            (Some(f), Some(l)) => l.1.saturating_sub(f.1),
            _ => 0,
        };
        growth = (
            growth.0.saturating_add(grew(tx)),
            growth.1.saturating_add(grew(rx)),
        );
        largest = [tx.last(), rx.last()]
            .into_iter()
            .flatten()
            .fold(largest, |m, s| m.max(s.1));
    }
    if !covered {
        return None;
    }
    let floor = active_floor(link.capacity_bytes_per_second);
    let most = idle_bound(
        growth.0.max(growth.1),
        largest,
        parts.len(),
        &scratch.points,
    );
    let shortest = scratch
        .points
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1e9)
        .filter(|&l| l > 0.0)
        .fold(f64::INFINITY, f64::min);
    let ((tx_bytes, rx_bytes), active_s, confident) = if most / shortest < floor {
        // No interval reaches the floor: no run, nothing active, and confidently idle (what the busy time
        // finds without a run); only the step's bytes to count.
        let bytes = |s: &[(i64, u64)]| bytes_between(s, start_ns, end_ns).unwrap_or(0);
        let sums = parts
            .iter()
            .fold((0, 0), |(t, r), &(tx, rx)| (t + bytes(tx), r + bytes(rx)));
        (sums, 0.0, true)
    } else {
        busy_of(parts, sample_period_s, floor, scratch)
    };
    let moved = tx_bytes.max(rx_bytes) as f64;
    let duration_s = (end_ns - start_ns) as f64 / 1e9;
    let achieved = (active_s > 0.0).then(|| moved / active_s);
    let utilization = match (achieved, link.capacity_bytes_per_second) {
        (Some(a), Some(c)) if c > 0.0 => Some(a / c),
        _ => None,
    };
    Some(StepLink {
        link: link.clone(),
        tx_bytes,
        rx_bytes,
        active_s,
        achieved_bytes_per_second: achieved,
        average_bytes_per_second: moved / duration_s,
        capacity_bytes_per_second: link.capacity_bytes_per_second,
        utilization,
        confident,
    })
}

/// The step's bytes per direction, busy time and confidence over the grid in `scratch.points` (its first and
/// last points the step's edges) of the summed traffic of `parts`: each direction's interpolated bytes per
/// grid interval ([`add_interval_bytes`], the parts' summed), the larger direction's per interval,
/// [`busy_summary`] of those. A part whose samples cover neither edge in either direction counts nothing.
fn busy_of(
    parts: &[Directions<'_>],
    sample_period_s: f64,
    floor: f64,
    scratch: &mut LinkScratch,
) -> ((u64, u64), f64, bool) {
    let n = scratch.points.len() - 1;
    let (start, end) = (scratch.points[0], scratch.points[n]);
    scratch.tx.clear();
    scratch.tx.resize(n, 0.0);
    scratch.rx.clear();
    scratch.rx.resize(n, 0.0);
    let (mut tx_bytes, mut rx_bytes) = (0u64, 0u64);
    for &(tx, rx) in parts {
        if !covers(tx, start, end) && !covers(rx, start, end) {
            continue;
        }
        // Both directions at every grid point, each by one walk (the grid ascends), which also gives the
        // step's bytes.
        tx_bytes += add_interval_bytes(tx, &scratch.points, &mut scratch.tx).unwrap_or(0);
        rx_bytes += add_interval_bytes(rx, &scratch.points, &mut scratch.rx).unwrap_or(0);
    }
    scratch.intervals.clear();
    scratch.rates.clear();
    for (j, w) in scratch.points.windows(2).enumerate() {
        let len_s = (w[1] - w[0]) as f64 / 1e9;
        if len_s <= 0.0 {
            continue;
        }
        let interval = Interval {
            len_s,
            bytes: scratch.tx[j].max(scratch.rx[j]),
        };
        scratch.intervals.push(interval);
        scratch.rates.push(interval.rate());
    }
    let rates = &scratch.rates;
    let (active_s, confident) = busy_summary(
        &scratch.intervals,
        |i| rates[i],
        floor,
        sample_period_s,
        &mut scratch.full,
    );
    ((tx_bytes, rx_bytes), active_s, confident)
}

/// At least the bytes of any one grid interval of `points` as [`busy_of`] works them out: `growth` (the larger
/// direction's counter growth over the samples read, summed over `parts` parts: an interval's bytes are a
/// difference of two counter values interpolated between those samples) with room for the floating point of
/// the interpolation and the sums (values up to `largest`, a few units in the last place per point).
fn idle_bound(growth: u64, largest: u64, parts: usize, points: &[i64]) -> f64 {
    let ulps = 8.0 * (parts * points.len()) as f64 * f64::EPSILON * largest as f64;
    (growth as f64 + 1.0) * (1.0 + 1e-9) + ulps
}

/// The step's interval grid into `points`: `start`, the times of `samples` strictly inside, `end`.
fn grid(samples: &[(i64, u64)], start: i64, end: i64, points: &mut Vec<i64>) {
    points.clear();
    points.push(start);
    let from = samples.partition_point(|s| s.0 <= start);
    points.extend(samples[from..].iter().map(|s| s.0).take_while(|&t| t < end));
    points.push(end);
}

/// Whether `samples` (oldest first) cover both `start` and `end` (`start < end`): where [`bytes_between`] is
/// `Some`.
fn covers(samples: &[(i64, u64)], start: i64, end: i64) -> bool {
    match (samples.first(), samples.last()) {
        (Some(f), Some(l)) => f.0 <= start && end <= l.0,
        _ => false,
    }
}

/// Adds to `bytes[j]` what `samples` moved over the grid interval `[points[j], points[j + 1]]` (0 where the
/// samples do not reach both of its ends), and returns the bytes between the grid's first and last points
/// ([`bytes_between`]'s answer). `points` ascend (at least two); one walk over the samples, the values
/// [`interpolate`]'s at each point, bit for bit.
/// (Before: the values into a buffer, a second loop over it, and two searches for the step's bytes: a fifth of
/// the step engine's instructions.)
fn add_interval_bytes(samples: &[(i64, u64)], points: &[i64], bytes: &mut [f64]) -> Option<u64> {
    let (Some(&(first, _)), Some(&(last, _)), Some(&t0)) =
        (samples.first(), samples.last(), points.first())
    else {
        return None;
    };
    // The first sample stamped after the point before (as `acc_at`'s partition point): searched for once.
    let mut next = samples.partition_point(|s| s.0 <= t0);
    let mut before: Option<f64> = None;
    let mut edges: [Option<(u64, f64)>; 2] = [None, None];
    let end = points.len() - 1;
    for (j, &t) in points.iter().enumerate() {
        let here = if t < first || t > last {
            None
        } else {
            while next < samples.len() && samples[next].0 <= t {
                next += 1;
            }
            let (a, f) = acc_between(samples[next - 1], samples.get(next).copied(), t);
            if j == 0 {
                edges[0] = Some((a, f));
            } else if j == end {
                edges[1] = Some((a, f));
            }
            Some(a as f64 + f)
        };
        if let (Some(a), Some(z), Some(b)) = (before, here, bytes.get_mut(j.wrapping_sub(1))) {
            *b += (z - a).max(0.0);
        }
        before = here;
    }
    let ((a0, f0), (a1, f1)) = (edges[0]?, edges[1]?);
    let whole = a1.saturating_sub(a0) as f64;
    Some((whole + f1 - f0).max(0.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use commwatch_model::{Endpoint, LinkClass, LinkKey, LinkRole};

    const MS: i64 = 1_000_000;
    const S: i64 = 1_000_000_000;

    /// An InfiniBand HCA port of `capacity` bytes/s.
    fn hca(capacity: Option<f64>) -> Arc<Link> {
        Arc::new(Link {
            key: LinkKey::new(LinkClass::Infiniband, "mlx5_0", "1"),
            endpoint: Endpoint::HcaPort,
            role: LinkRole::Fabric,
            capacity_bytes_per_second: capacity,
            state: "ACTIVE".into(),
            attributes: Default::default(),
            gpu: None,
            link: None,
        })
    }

    /// 50 ms samples from t = 0 over `n` ticks; `per_tick(i)` bytes in the interval ending at tick i.
    fn ring(n: i64, per_tick: impl Fn(i64) -> u64) -> Vec<(i64, u64)> {
        let mut acc = 0u64;
        let mut v = vec![(0, 0)];
        for i in 1..n {
            acc += per_tick(i);
            v.push((i * 50 * MS, acc));
        }
        v
    }

    #[test]
    fn exact_bytes_at_sample_edges_and_interpolated_between() {
        let s = ring(21, |_| 1_000_000);
        assert_eq!(bytes_between(&s, 0, S), Some(20_000_000));
        assert_eq!(bytes_between(&s, 100 * MS, 300 * MS), Some(4_000_000));
        // Halfway into intervals: linear interpolation.
        assert_eq!(bytes_between(&s, 25 * MS, 125 * MS), Some(2_000_000));
        assert_eq!(bytes_between(&s, 10 * MS, 20 * MS), Some(200_000));
        assert_eq!(bytes_between(&s, -1, 100 * MS), None);
        assert_eq!(bytes_between(&s, 0, S + 1), None);
    }

    #[test]
    fn long_burst_active_time_and_achieved_bandwidth() {
        // 1 s step at 20 Hz; a burst of 10 GB/s from 200 ms to 575 ms (375 ms: 7.5 intervals), background
        // 1 MB/s. Interval i covers [(i-1)·50, i·50) ms.
        let burst = |i: i64| -> u64 {
            let (a, b) = ((i - 1) * 50, i * 50);
            let overlap = (b.min(575) - a.max(200)).max(0) as u64;
            overlap * 10_000_000 + 50_000
        };
        let tx = ring(21, burst);
        let rx = ring(21, |_| 50_000);
        let l = step_link(&hca(Some(25e9)), &tx, &rx, 0, S, 0.05).expect("covered");
        assert_eq!(l.tx_bytes, 3_750_000_000 + 20 * 50_000);
        assert_eq!(l.rx_bytes, 1_000_000);
        assert!((l.active_s - 0.375).abs() < 1e-3, "{}", l.active_s);
        let achieved = l.achieved_bytes_per_second.expect("active");
        // 3.751 GB over the 375 ms of the burst (+ background inside it).
        assert!((achieved / 10.0e9 - 1.0).abs() < 0.005, "{achieved}");
        assert!((l.average_bytes_per_second - 3.751e9).abs() < 1.0);
        assert!((l.utilization.expect("capacity known") - achieved / 25e9).abs() < 1e-12);
        assert!(l.confident);
    }

    #[test]
    fn short_burst_is_not_confident() {
        // 20 ms at 22 GB/s inside one 50 ms interval: the interval rate is 8.8 GB/s, a lower bound.
        let tx = ring(11, |i| if i == 4 { 440_000_000 } else { 0 });
        let l = step_link(&hca(Some(25e9)), &tx, &[], 0, 500 * MS, 0.05).expect("covered");
        assert_eq!(l.tx_bytes, 440_000_000);
        assert_eq!(l.rx_bytes, 0);
        assert!((l.active_s - 0.05).abs() < 1e-9);
        assert_eq!(l.achieved_bytes_per_second, Some(8.8e9));
        assert!(!l.confident);
    }

    #[test]
    fn idle_link_has_no_achieved_bandwidth() {
        let tx = ring(21, |_| 50_000); // 1 MB/s
        let l = step_link(&hca(None), &tx, &tx, 0, S, 0.05).expect("covered");
        assert_eq!(l.active_s, 0.0);
        assert_eq!(l.achieved_bytes_per_second, None);
        assert_eq!(l.utilization, None);
        assert_eq!(l.average_bytes_per_second, 1e6);
        assert!(l.confident);
    }

    /// Random cumulative samples: strictly increasing times with uneven gaps, counters that may stall.
    fn random_samples(r: &mut impl rand::Rng, n: usize) -> Vec<(i64, u64)> {
        let (mut t, mut acc) = (r.random_range(0..100 * MS), 0u64);
        (0..n)
            .map(|_| {
                t += r.random_range(1..120 * MS);
                acc += if r.random_bool(0.3) {
                    0
                } else {
                    r.random_range(0..1u64 << 34)
                };
                (t, acc)
            })
            .collect()
    }

    #[test]
    fn acc_at_ascending_equals_a_search_per_time() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(17);
        for round in 0..500 {
            let n = r.random_range(0..40);
            let s = random_samples(&mut r, n);
            let span = s.last().map_or(S, |l| l.0 + 200 * MS);
            let k = r.random_range(0..60);
            let mut times: Vec<i64> = (0..k).map(|_| r.random_range(-50 * MS..span)).collect();
            // Sample times themselves (exact hits), then ascending; every fourth round left unordered.
            times.extend(s.iter().step_by(3).map(|x| x.0));
            if round % 4 != 0 {
                times.sort_unstable();
            }
            let walked = acc_at_ascending(&s, &times);
            let searched: Vec<Option<(u64, f64)>> = times.iter().map(|&t| acc_at(&s, t)).collect();
            assert_eq!(walked, searched, "samples {s:?} times {times:?}");
        }
    }

    /// The interval bytes and the step's bytes of one walk are those of a search per point, bit for bit,
    /// wherever the grid lies against the samples (inside, across either end, beyond both).
    #[test]
    fn interval_bytes_by_one_walk_equal_a_search_per_point() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(23);
        let (mut inside, mut across) = (0, 0);
        for _ in 0..2_000 {
            let n = r.random_range(0..30);
            let s = random_samples(&mut r, n);
            let span = s.last().map_or(S, |l| l.0 + 200 * MS);
            let start = r.random_range(-100 * MS..span);
            let end = start + r.random_range(1..2 * S);
            // A grid as the figures make it: the edges and strictly inside them, a sample's time or another.
            let mut points = vec![start];
            let mut inner: Vec<i64> = s
                .iter()
                .map(|x| x.0)
                .filter(|&t| t > start && t < end)
                .collect();
            inner.extend((0..r.random_range(0..4)).map(|_| r.random_range(start + 1..end)));
            inner.sort_unstable();
            inner.dedup();
            points.extend(inner);
            points.push(end);
            let mut walked = vec![0.5; points.len() - 1];
            let got = add_interval_bytes(&s, &points, &mut walked);
            let mut searched = vec![0.5; points.len() - 1];
            for (j, w) in points.windows(2).enumerate() {
                if let (Some(a), Some(z)) = (interpolate(&s, w[0]), interpolate(&s, w[1])) {
                    searched[j] += (z - a).max(0.0);
                }
            }
            assert_eq!(walked, searched, "samples {s:?} points {points:?}");
            assert_eq!(got, bytes_between(&s, start, end), "{s:?} {start} {end}");
            assert_eq!(got.is_some(), covers(&s, start, end));
            match got {
                Some(_) => inside += 1,
                None if walked.iter().any(|&b| b != 0.5) => across += 1,
                None => {}
            }
        }
        assert!(inside > 200 && across > 200, "{inside} {across}");
    }

    /// A link's figures are those worked out interval by interval, each value searched for: over parts that
    /// cover the step, reach only part of it, or have no samples; idle, near the activity floor, or busy.
    #[test]
    fn figures_equal_those_of_each_interval_searched() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(29);
        let (mut idle, mut busy) = (0, 0);
        let mut scratch = LinkScratch::default();
        for _ in 0..3_000 {
            let rate: f64 = [1e4, 1e6, 5e7, 1e9, 2e10][r.random_range(0..5)];
            let capacity = r.random_bool(0.7).then_some(25e9);
            let series = |r: &mut rand::rngs::StdRng| -> Vec<(i64, u64)> {
                let from = r.random_range(-300 * MS..0);
                let to = if r.random_bool(0.8) { 2 * S } else { S };
                let (mut t, mut acc) = (from, r.random_range(0..1u64 << 50));
                let mut v = Vec::new();
                while t < to && !r.random_bool(0.03) {
                    v.push((t, acc));
                    let dt = r.random_range(1..80) * MS;
                    let busy = r.random_bool(0.4);
                    acc += (rate * dt as f64 / 1e9 * if busy { 1.0 } else { 0.01 }) as u64;
                    t += dt;
                }
                v
            };
            let parts_n = r.random_range(1..4);
            type Owned = (Vec<(i64, u64)>, Vec<(i64, u64)>);
            let owned: Vec<Owned> = (0..parts_n)
                .map(|_| (series(&mut r), series(&mut r)))
                .collect();
            let parts: Vec<Directions> = owned.iter().map(|(t, x)| (&t[..], &x[..])).collect();
            let (start, end) = (r.random_range(0..S / 2), r.random_range(S / 2..2 * S));
            let got = step_link_with(&hca(capacity), &parts, (start, end), 0.05, &mut scratch);
            let want = searched(&hca(capacity), &parts, (start, end));
            assert_eq!(got, want, "{parts:?} {start} {end}");
            match got {
                Some(l) if l.active_s == 0.0 => idle += 1,
                Some(_) => busy += 1,
                None => {}
            }
        }
        assert!(idle > 300 && busy > 300, "{idle} idle, {busy} busy");
    }

    /// [`step_link_with`]'s figures, each interval's bytes from values searched for ([`interpolate`]) and the
    /// busy time from [`super::super::busy::busy_time`].
    fn searched(
        link: &Arc<Link>,
        parts: &[Directions<'_>],
        (start, end): (i64, i64),
    ) -> Option<StepLink> {
        let cover = |s: &[(i64, u64)]| bytes_between(s, start, end);
        let read: Vec<&Directions> = parts
            .iter()
            .filter(|p| cover(p.0).is_some() || cover(p.1).is_some())
            .collect();
        let &&(tx, rx) = read.first()?;
        let src = if cover(tx).is_some() { tx } else { rx };
        let mut points = vec![start];
        points.extend(src.iter().map(|s| s.0).filter(|&t| t > start && t < end));
        points.push(end);
        let between =
            |s: &[(i64, u64)], a: i64, z: i64| match (interpolate(s, a), interpolate(s, z)) {
                (Some(a), Some(z)) => (z - a).max(0.0),
                _ => 0.0,
            };
        let intervals: Vec<Interval> = points
            .windows(2)
            .map(|w| {
                let (mut t, mut x) = (0.0, 0.0);
                for p in &read {
                    t += between(p.0, w[0], w[1]);
                    x += between(p.1, w[0], w[1]);
                }
                Interval {
                    len_s: (w[1] - w[0]) as f64 / 1e9,
                    bytes: f64::max(t, x),
                }
            })
            .collect();
        let busy = super::super::busy::busy_time(
            &intervals,
            active_floor(link.capacity_bytes_per_second),
            0.05,
        );
        let tx_bytes: u64 = read.iter().map(|p| cover(p.0).unwrap_or(0)).sum();
        let rx_bytes: u64 = read.iter().map(|p| cover(p.1).unwrap_or(0)).sum();
        let moved = tx_bytes.max(rx_bytes) as f64;
        let achieved = (busy.active_s > 0.0).then(|| moved / busy.active_s);
        Some(StepLink {
            link: link.clone(),
            tx_bytes,
            rx_bytes,
            active_s: busy.active_s,
            achieved_bytes_per_second: achieved,
            average_bytes_per_second: moved / ((end - start) as f64 / 1e9),
            capacity_bytes_per_second: link.capacity_bytes_per_second,
            utilization: achieved
                .zip(link.capacity_bytes_per_second)
                .map(|(a, c)| a / c),
            confident: busy.resolved,
        })
    }

    #[test]
    fn uncovered_step_is_none() {
        let tx = ring(5, |_| 1);
        assert!(step_link(&hca(None), &tx, &[], 0, S, 0.05).is_none());
        assert!(step_link(&hca(None), &tx, &[], 100 * MS, 100 * MS, 0.05).is_none());
        assert!(step_link(&hca(None), &[], &[], 0, 1, 0.05).is_none());
    }

    #[test]
    fn overlapped_buckets_are_not_confident_however_long_their_sum() {
        // Five 30 ms buckets at 3.2 GB/s, one per 100 ms: 250 ms of activity at the samples' resolution (more
        // than three sample periods in all), but each bucket lies within one interval: no rate is measured.
        let tx = ring(11, |i| if i % 2 == 0 { 96_000_000 } else { 0 });
        let l = step_link(&hca(Some(25e9)), &tx, &[], 0, 500 * MS, 0.05).expect("covered");
        assert_eq!(l.tx_bytes, 5 * 96_000_000);
        assert!((l.active_s - 0.25).abs() < 1e-9, "{}", l.active_s);
        assert!(!l.confident);
    }
}
