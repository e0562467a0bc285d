//! A link's busy time: the one definition behind a step's `active_s` ([`super::bandwidth`]), a link's activity
//! and busy share over the analysis window (`analysis::activity`) and the scaling figures built on it.
//!
//! Input: the consecutive sampling intervals of a stretch of time (a step, an analysis window), each with its
//! length and the bytes the link moved in it (the larger direction).
//!
//! - **Floor.** An interval below the activity floor — the larger of [`ACTIVE_FLOOR_BYTES_PER_SECOND`] and
//!   [`ACTIVE_FLOOR_CAPACITY_FRACTION`] × capacity — carries background or control traffic and counts nothing.
//! - **Runs.** Consecutive intervals at or above the floor form a *run*: a burst as the samples see it.
//! - **Burst rate.** Per run, the median rate of its *full* intervals, those at or above [`FULL_RATE_FRACTION`]
//!   × the run's peak interval rate.
//! - **Active time.** A full interval counts its whole length; another interval of a run counts
//!   `rate ÷ burst rate` of its length (the link carried its bytes at the burst rate for part of it: what a
//!   burst's edges look like when it does not start or end on a sample).
//!
//! Everything is per run, so a stretch's busy time is the sum of its runs': the steps of a window and the
//! window itself give the same figure on the same samples.
//! - **Resolution.** A run's rate is *measured* only where the run has an interior: intervals on both sides of
//!   which the link was also busy, so fully inside the burst. That needs a run of at least [`RESOLVED_INTERVALS`]
//!   intervals whose interior lasts at least half a sampling period (a sliver of an interval at a step's edge
//!   does not count). The stretch is `resolved` when the runs with an interior carry at least
//!   [`RESOLVED_BYTES_SHARE`] of the bytes moved above the floor, or when the link was idle (confidently idle).
//!   A burst shorter than a few samples is smeared over the intervals around it: its bytes are exact, its rate
//!   and its active time are not (the active time is then an upper bound and the rate a lower bound), and no
//!   rule may call the link slow — or its communication long — from them.

/// Below this rate (bytes/s) no interval counts as active, whatever the link: background and control traffic.
pub const ACTIVE_FLOOR_BYTES_PER_SECOND: f64 = 10e6;
/// The activity floor is at least this share of the link's capacity (0.2%: 50 MB/s on a 25 GB/s port).
pub const ACTIVE_FLOOR_CAPACITY_FRACTION: f64 = 0.002;
/// An interval at or above this share of the stretch's peak interval rate is fully active.
pub const FULL_RATE_FRACTION: f64 = 0.75;
/// Sampling intervals a run must span for its rate to be measured (its first and last are partial).
pub const RESOLVED_INTERVALS: usize = 3;
/// Share of the bytes moved above the floor that resolved runs must carry for the stretch to be resolved.
pub const RESOLVED_BYTES_SHARE: f64 = 0.9;

/// The activity floor of a link, bytes per second.
pub fn active_floor(capacity_bytes_per_second: Option<f64>) -> f64 {
    capacity_bytes_per_second
        .map_or(0.0, |c| c * ACTIVE_FLOOR_CAPACITY_FRACTION)
        .max(ACTIVE_FLOOR_BYTES_PER_SECOND)
}

/// One sampling interval: its length and the bytes moved in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub len_s: f64,
    pub bytes: f64,
}

impl Interval {
    /// Bytes per second over the interval (0 for an empty one).
    pub fn rate(&self) -> f64 {
        if self.len_s > 0.0 {
            self.bytes / self.len_s
        } else {
            0.0
        }
    }
}

/// One run of intervals at or above the floor: `intervals[first..end]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    pub first: usize,
    /// One past the last interval.
    pub end: usize,
    pub bytes: f64,
    /// Active seconds of the run's intervals.
    pub active_s: f64,
    /// Whether the run has an interior (its rate is measured).
    pub resolved: bool,
}

impl Run {
    pub fn intervals(&self) -> usize {
        self.end - self.first
    }
}

/// A stretch's busy time and what the samples can resolve of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Busy {
    /// Seconds the link carried traffic (see the module documentation).
    pub active_s: f64,
    pub runs: Vec<Run>,
    /// Median rate of the resolved runs' interior intervals, bytes/s: the link's measured rate while busy;
    /// `None` without a resolved run.
    pub interior_rate: Option<f64>,
    /// Whether the busy time and rate are measurements (see the module documentation).
    pub resolved: bool,
}

/// The busy time of a link over `intervals` (consecutive, oldest first), with activity `floor` (bytes/s, see
/// [`active_floor`]) and the sampling period `sample_period_s`.
pub fn busy_time(intervals: &[Interval], floor: f64, sample_period_s: f64) -> Busy {
    let mut buffers = BusyBuffers::default();
    let rate = |i: usize| intervals[i].rate();
    let (active_s, interior_rate, resolved) =
        busy_time_in(intervals, rate, floor, sample_period_s, &mut buffers);
    Busy {
        active_s,
        runs: buffers.runs,
        interior_rate,
        resolved,
    }
}

/// Buffers [`busy_time_in`] works in; `runs` holds the runs of its last call (the rest is scratch). A caller
/// that figures many stretches keeps them, so that a stretch costs no allocation.
#[derive(Debug, Default)]
pub struct BusyBuffers {
    pub runs: Vec<Run>,
    rates: Vec<f64>,
    interior: Vec<f64>,
}

/// [`busy_time`] into `buffers` (its runs left in `buffers.runs`): `(active_s, interior_rate, resolved)`, the
/// same figures bit for bit (the medians by selection give the sort's values). `rate(i)` must be
/// `intervals[i].rate()`: a caller that has the rates already worked out gives them (the scan and each run
/// ask an interval's rate up to five times; a division each).
pub fn busy_time_in(
    intervals: &[Interval],
    rate: impl Fn(usize) -> f64,
    floor: f64,
    sample_period_s: f64,
    buffers: &mut BusyBuffers,
) -> (f64, Option<f64>, bool) {
    let BusyBuffers {
        runs,
        rates,
        interior,
    } = buffers;
    runs.clear();
    for_each_run(intervals, &rate, floor, sample_period_s, rates, |r| {
        runs.push(r)
    });
    interior.clear();
    interior.extend(
        runs.iter()
            .filter(|r| r.resolved)
            .flat_map(|r| (r.first + 1..r.end - 1).map(&rate)),
    );
    let moved: f64 = runs.iter().map(|r| r.bytes).sum();
    let measured: f64 = runs.iter().filter(|r| r.resolved).map(|r| r.bytes).sum();
    (
        runs.iter().map(|r| r.active_s).sum(),
        median_select(interior),
        moved <= 0.0 || measured >= RESOLVED_BYTES_SHARE * moved,
    )
}

/// [`commwatch_model::stats::median`] by selection instead of a sort (linear time, `v` left in
/// no particular order): the same value, bit for bit — the middle element in `f64::total_cmp`'s order, or
/// the mean of the two middle ones.
pub fn median_select(v: &mut [f64]) -> Option<f64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let (below, &mut hi, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    if n % 2 == 1 {
        return Some(hi);
    }
    let lo = below.iter().copied().max_by(f64::total_cmp).unwrap_or(hi);
    Some((lo + hi) / 2.0)
}

/// A stretch's busy time and whether it is resolved, as [`busy_time`] gives them, without its runs and
/// interior rate: what a step's figures need. `rate(i)` must be `intervals[i].rate()` (as for
/// [`busy_time_in`]: a caller that has the rates worked out gives them); `full` is a buffer the caller keeps
/// across calls (its content is scratch), so a step's links cost no allocation.
pub fn busy_summary(
    intervals: &[Interval],
    rate: impl Fn(usize) -> f64,
    floor: f64,
    sample_period_s: f64,
    full: &mut Vec<f64>,
) -> (f64, bool) {
    let (mut active_s, mut moved, mut measured) = (0.0, 0.0, 0.0);
    for_each_run(intervals, &rate, floor, sample_period_s, full, |r| {
        active_s += r.active_s;
        moved += r.bytes;
        if r.resolved {
            measured += r.bytes;
        }
    });
    (
        active_s,
        moved <= 0.0 || measured >= RESOLVED_BYTES_SHARE * moved,
    )
}

/// Active seconds of the run `intervals[first..end]` (every interval at or above the floor; `rate(i)` is
/// `intervals[i].rate()`): full intervals whole, the others at their share of the run's burst rate. `full`
/// is scratch for the median of the full intervals' rates.
fn run_active_s(
    intervals: &[Interval],
    (first, end): (usize, usize),
    rate: &impl Fn(usize) -> f64,
    full: &mut Vec<f64>,
) -> f64 {
    let peak = (first..end).map(rate).fold(0.0, f64::max);
    let full_at = FULL_RATE_FRACTION * peak;
    full.clear();
    full.extend((first..end).map(rate).filter(|r| *r >= full_at));
    let burst_rate = median_select(full).unwrap_or(peak).max(f64::MIN_POSITIVE);
    (first..end)
        .map(|k| {
            let (len_s, rate) = (intervals[k].len_s, rate(k));
            if rate >= full_at {
                len_s
            } else {
                len_s * (rate / burst_rate).min(1.0)
            }
        })
        .sum()
}

/// Calls `f` with each run of intervals at or above `floor`, oldest first, with its active time (`rate(i)`:
/// `intervals[i].rate()`; `full`: scratch for [`run_active_s`]).
fn for_each_run(
    intervals: &[Interval],
    rate: &impl Fn(usize) -> f64,
    floor: f64,
    sample_period_s: f64,
    full: &mut Vec<f64>,
    mut f: impl FnMut(Run),
) {
    let mut i = 0;
    while i < intervals.len() {
        if rate(i) < floor {
            i += 1;
            continue;
        }
        let first = i;
        while i < intervals.len() && rate(i) >= floor {
            i += 1;
        }
        let run = &intervals[first..i];
        let interior_s: f64 = match run.len() {
            n if n >= RESOLVED_INTERVALS => run[1..n - 1].iter().map(|x| x.len_s).sum(),
            _ => 0.0,
        };
        f(Run {
            first,
            end: i,
            bytes: run.iter().map(|x| x.bytes).sum(),
            active_s: run_active_s(intervals, (first, i), rate, full),
            resolved: interior_s > 0.0 && interior_s >= 0.5 * sample_period_s,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 50 ms intervals with the given bytes.
    fn iv(bytes: &[f64]) -> Vec<Interval> {
        bytes
            .iter()
            .map(|&b| Interval {
                len_s: 0.05,
                bytes: b,
            })
            .collect()
    }

    #[test]
    fn a_long_burst_is_measured_and_its_edges_count_in_part() {
        // 10 GB/s from 30 ms into the second interval to 25 ms into the sixth: 195 ms.
        let i = iv(&[0.0, 0.2e9, 0.5e9, 0.5e9, 0.5e9, 0.25e9, 0.0]);
        let b = busy_time(&i, 50e6, 0.05);
        assert!((b.active_s - 0.195).abs() < 1e-9, "{}", b.active_s);
        assert_eq!(b.interior_rate, Some(10e9));
        assert!(b.resolved);
        assert_eq!(b.runs.len(), 1);
        assert_eq!((b.runs[0].first, b.runs[0].end), (1, 6));
    }

    #[test]
    fn a_burst_shorter_than_a_few_samples_is_not_resolved() {
        // 19.7 ms at 22 GB/s straddling two intervals: its bytes are exact, its rate is not.
        let i = iv(&[0.0, 0.22e9, 0.2134e9, 0.0]);
        let b = busy_time(&i, 50e6, 0.05);
        assert!(!b.resolved);
        assert_eq!(b.interior_rate, None);
        assert!((b.runs[0].bytes - 0.4334e9).abs() < 1.0);
        // Both intervals are within 75 % of the run's peak: 100 ms, an upper bound of the 19.7 ms.
        assert!((b.active_s - 0.1).abs() < 1e-9);
    }

    #[test]
    fn idle_is_resolved_and_background_counts_nothing() {
        let i = iv(&[50_000.0; 10]);
        let b = busy_time(&i, 10e6, 0.05);
        assert_eq!(b.active_s, 0.0);
        assert!(b.resolved);
        assert!(b.runs.is_empty());
        assert_eq!(b.interior_rate, None);
    }

    #[test]
    fn a_sliver_at_an_edge_gives_no_interior() {
        // A run of a 5 ms sliver, a 1 ms sliver and a full interval: three intervals but no measured interior.
        let i = vec![
            Interval {
                len_s: 0.005,
                bytes: 0.05e9,
            },
            Interval {
                len_s: 0.001,
                bytes: 0.01e9,
            },
            Interval {
                len_s: 0.05,
                bytes: 0.5e9,
            },
        ];
        assert!(!busy_time(&i, 50e6, 0.05).resolved);
    }

    #[test]
    fn the_summary_is_the_busy_time_and_resolution() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(5);
        let mut rates = Vec::new();
        for _ in 0..500 {
            let n = r.random_range(0..40);
            let i: Vec<Interval> = (0..n)
                .map(|_| Interval {
                    len_s: r.random_range(0.001..0.1),
                    bytes: if r.random_bool(0.4) {
                        0.0
                    } else {
                        r.random_range(0.0..1e9)
                    },
                })
                .collect();
            let b = busy_time(&i, 50e6, 0.05);
            assert_eq!(
                busy_summary(&i, |k| i[k].rate(), 50e6, 0.05, &mut rates),
                (b.active_s, b.resolved),
                "{i:?}"
            );
        }
    }

    #[test]
    fn floor_follows_capacity() {
        assert_eq!(active_floor(None), 10e6);
        assert_eq!(active_floor(Some(25e9)), 50e6);
        assert_eq!(active_floor(Some(1e9)), 10e6);
    }
}
