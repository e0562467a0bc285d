//! Link activity over a window of cumulative byte samples: when the link was busy, its bursts, their period
//! and the rate while busy. The rules use it where no steps are known for a node (and the management rule
//! always, since a management NIC is not part of the steps' fabric view).
//!
//! Busy time, bursts and resolution are the steps' own definition ([`crate::steps::busy`]), applied to the
//! window's sampling intervals: an interval's bytes are the larger direction's, a burst is a run of intervals
//! above the activity floor, the busy time counts a burst's partly busy edges in part, and the rate while
//! busy is measured only inside bursts that span enough samples (`resolved`). A burst shorter than a few
//! sample intervals gives exact bytes and `resolved = false`: its rate is a lower bound and must not be
//! called slow, its busy time an upper bound.
//!
//! Besides the bursts above the floor, [`Activity::peaks`] holds the bursts at the link's own level (above
//! half its peak rate): on a link that carries a lower continuous load as well — storage reads on a management
//! NIC — the floor merges everything into one long burst, while the peaks still separate the big periodic
//! transfers.

use std::cell::Cell;
use std::collections::VecDeque;
use std::ops::{Index, Range};

use serde::Serialize;

use super::near_median;
use crate::steps::bandwidth::acc_at_ascending;
use crate::steps::busy::{self, median_select as median_by_select, Interval, Run};

/// Sample intervals a burst must span for its rate to be measured (first and last are partial).
pub const RESOLVED_INTERVALS: usize = busy::RESOLVED_INTERVALS;
/// Share of the window's peak interval rate above which an interval belongs to a peak.
pub const PEAK_LEVEL: f64 = 0.5;

/// One burst: a run of active sample intervals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Burst {
    pub start_unix_ns: i64,
    pub end_unix_ns: i64,
    /// Bytes moved in the burst's intervals (the larger direction of each interval).
    pub bytes: u64,
    pub intervals: usize,
    /// Whether it is cut by the window's edge (its bytes and length are then partial).
    pub truncated: bool,
}

/// A series of bursts and its regularity.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Bursts {
    pub bursts: Vec<Burst>,
    /// Median interval between the starts of complete bursts, seconds (needs three complete bursts).
    pub period_s: Option<f64>,
    /// Coefficient of variation of the intervals between burst starts (0 = perfectly periodic).
    pub period_cv: Option<f64>,
    /// Median bytes per complete (non-truncated) burst.
    pub bytes_per_burst: Option<f64>,
    /// Coefficient of variation of the complete bursts' bytes (0 = every burst the same size; needs two).
    pub bytes_cv: Option<f64>,
    /// Median rate of the bursts' interior intervals (bursts of at least [`RESOLVED_INTERVALS`]), bytes/s.
    pub rate_bytes_per_second: Option<f64>,
}

/// Coefficient of variation of `v` (`None` with fewer than two values or a zero mean).
pub(crate) fn cv(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / v.len() as f64;
    (mean > 0.0).then(|| var.sqrt() / mean)
}

/// The figures of a list of bursts ([`Bursts`]' besides the list and the rate).
struct BurstFigures {
    period_s: Option<f64>,
    period_cv: Option<f64>,
    bytes_per_burst: Option<f64>,
    bytes_cv: Option<f64>,
}

/// [`median_by_select`]'s value of `v`, looked for near `hint` (the median of a list like it a moment ago:
/// [`near_median::middles_near`]) before it is selected (`v` then left in no particular order).
fn median_near(v: &mut [f64], hint: Option<f64>) -> Option<f64> {
    let n = v.len();
    let keys = || v.iter().map(|x| near_median::f64_key(*x));
    let near = hint.and_then(|p| near_median::middles_near(keys, n, near_median::f64_key(p)));
    let of_key = near_median::f64_of_key;
    match near {
        // As `median_by_select` combines the two middle ones (in `total_cmp`'s order).
        Some((lo, hi)) if n.is_multiple_of(2) => Some((of_key(lo) + of_key(hi)) / 2.0),
        Some((_, hi)) => Some(of_key(hi)),
        None => median_by_select(v),
    }
}

impl BurstFigures {
    /// Of `bursts`, worked out in `gaps` (scratch): the intervals between the complete bursts' starts, then
    /// their bytes (each coefficient of variation taken before its median reorders the values). `hints`: the
    /// median gap and bytes of the same link's bursts at the last evaluation, where each median is looked
    /// for first (a window that slid by a second keeps most of its bursts; selected, the two medians were
    /// 7.6 % of the kept input's instructions in `measure::round_cost`). Hints only: any value gives the
    /// same figures.
    fn of(
        bursts: &[Burst],
        gaps: &mut Vec<f64>,
        (period_hint, bytes_hint): (Option<f64>, Option<f64>),
    ) -> BurstFigures {
        let complete = || bursts.iter().filter(|b| !b.truncated);
        gaps.clear();
        gaps.extend(
            complete()
                .zip(complete().skip(1))
                .map(|(a, b)| (b.start_unix_ns - a.start_unix_ns) as f64 / 1e9),
        );
        let (period_cv, period_s) = if gaps.len() >= 2 {
            (cv(gaps).or(Some(0.0)), median_near(gaps, period_hint))
        } else {
            (None, None)
        };
        gaps.clear();
        gaps.extend(complete().map(|b| b.bytes as f64));
        BurstFigures {
            period_s,
            period_cv,
            bytes_cv: cv(gaps),
            bytes_per_burst: median_near(gaps, bytes_hint),
        }
    }
}

impl Bursts {
    /// Bursts `bursts` of rate `rate_bytes_per_second` with their figures, as a new value.
    #[cfg(test)]
    fn of(bursts: Vec<Burst>, rate_bytes_per_second: Option<f64>) -> Bursts {
        let mut out = Bursts {
            bursts,
            ..Default::default()
        };
        out.settle(rate_bytes_per_second, &mut Vec::new());
        out
    }

    /// Works the figures of [`Bursts::bursts`] out (their rate is `rate_bytes_per_second`), in `gaps` (scratch),
    /// into this value's fields.
    fn settle(&mut self, rate_bytes_per_second: Option<f64>, gaps: &mut Vec<f64>) {
        let hints = (self.period_s, self.bytes_per_burst);
        let f = BurstFigures::of(&self.bursts, gaps, hints);
        (self.period_s, self.period_cv) = (f.period_s, f.period_cv);
        (self.bytes_per_burst, self.bytes_cv) = (f.bytes_per_burst, f.bytes_cv);
        self.rate_bytes_per_second = rate_bytes_per_second;
    }

    /// Complete bursts (not cut by the window's edges).
    pub fn complete(&self) -> impl Iterator<Item = &Burst> {
        self.bursts.iter().filter(|b| !b.truncated)
    }
}

/// What a link did over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Activity {
    pub window_s: f64,
    /// Median sample interval, seconds.
    pub sample_period_s: f64,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// Seconds the link was busy ([`crate::steps::busy`]).
    pub busy_s: f64,
    /// Runs of intervals above the activity floor.
    pub bursts: Vec<Burst>,
    /// Median rate of the resolved bursts' interior intervals, bytes/s; `None` without a resolved burst.
    pub burst_rate_bytes_per_second: Option<f64>,
    /// Median interval between burst starts, seconds (needs three complete bursts).
    pub period_s: Option<f64>,
    /// Coefficient of variation of the intervals between burst starts (0 = perfectly periodic).
    pub period_cv: Option<f64>,
    /// Median bytes per complete (non-truncated) burst.
    pub bytes_per_burst: Option<f64>,
    /// Whether the busy time and the rate while busy are measured (bursts long enough; or an idle link).
    pub resolved: bool,
    /// The bursts at the link's own level: runs of intervals above [`PEAK_LEVEL`] × the window's peak
    /// interval rate, each with the partly busy interval on either side. Found only where asked for (the
    /// links whose peaks a rule reads, [`super::input::reads_peaks`]); none otherwise, as on an idle window.
    pub peaks: Bursts,
}

impl Activity {
    /// Complete bursts (not cut by the window's edges).
    pub fn complete_bursts(&self) -> usize {
        self.bursts.iter().filter(|b| !b.truncated).count()
    }

    /// Share of the window the link was busy.
    pub fn busy_share(&self) -> f64 {
        if self.window_s > 0.0 {
            self.busy_s / self.window_s
        } else {
            0.0
        }
    }
}

/// A list held as two slices, read as one: the first, then the second (a ring's two parts,
/// [`VecDeque::as_slices`], or one slice and nothing). Indexes count from the first slice's start.
#[derive(Debug, Clone, Copy)]
pub struct Parts<'a, T>(&'a [T], &'a [T]);

impl<'a, T> Parts<'a, T> {
    /// The list `s`, in one part.
    pub fn of(s: &'a [T]) -> Parts<'a, T> {
        Parts(s, &[])
    }

    /// The items of `d`, oldest first.
    pub fn ring(d: &'a VecDeque<T>) -> Parts<'a, T> {
        let (a, b) = d.as_slices();
        Parts(a, b)
    }

    pub fn len(&self) -> usize {
        self.0.len() + self.1.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty() && self.1.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&'a T> {
        match self.0.get(i) {
            Some(x) => Some(x),
            None => self.1.get(i - self.0.len()),
        }
    }

    pub fn first(&self) -> Option<&'a T> {
        self.0.first().or(self.1.first())
    }

    pub fn last(&self) -> Option<&'a T> {
        self.1.last().or(self.0.last())
    }

    /// The items in order.
    pub fn iter(&self) -> std::iter::Chain<std::slice::Iter<'a, T>, std::slice::Iter<'a, T>> {
        self.0.iter().chain(self.1)
    }

    /// The items at `r` (cut to those held: empty where it starts past its end or past the list's).
    pub fn range(&self, r: Range<usize>) -> Parts<'a, T> {
        let end = r.end.min(self.len());
        let start = r.start.min(end);
        let n = self.0.len();
        Parts(
            &self.0[start.min(n)..end.min(n)],
            &self.1[start.saturating_sub(n)..end.saturating_sub(n)],
        )
    }

    /// The items appended to `v`, in order.
    pub fn extend_into(&self, v: &mut Vec<T>)
    where
        T: Clone,
    {
        v.extend_from_slice(self.0);
        v.extend_from_slice(self.1);
    }

    pub fn to_vec(&self) -> Vec<T>
    where
        T: Clone,
    {
        let mut v = Vec::with_capacity(self.len());
        self.extend_into(&mut v);
        v
    }
}

impl<T> Index<usize> for Parts<'_, T> {
    type Output = T;

    fn index(&self, i: usize) -> &T {
        match self.0.get(i) {
            Some(x) => x,
            None => &self.1[i - self.0.len()],
        }
    }
}

/// Bytes moved between two cumulative samples: an interval's bytes are the larger direction's `delta` (where
/// both directions were sampled at the same times; see [`analyse`]).
pub(crate) fn delta(a: u64, b: u64) -> f64 {
    b.saturating_sub(a) as f64
}

/// Bytes the other direction moved over one of the grid's intervals, from its cumulative values at the
/// interval's two ends as [`acc_at`] gives them (the whole bytes of the sample at or before each end, and the
/// fraction interpolated towards the next): the whole parts subtracted exactly, so that a counter past 2⁵³
/// loses nothing and a direction sampled at the grid's own ticks gives its [`delta`], bit for bit. 0 where an
/// end is outside its samples, or where it went back (a reset).
pub(crate) fn other_bytes(a: Option<(u64, f64)>, b: Option<(u64, f64)>) -> f64 {
    match (a, b) {
        (Some((a, fa)), Some((b, fb))) => {
            // The whole parts' difference rounded once, as the exact difference converts (an `i128`'s
            // conversion is a call into the runtime, a tenth of deriving an interval): a negative one is the
            // positive one's rounding negated (rounding to nearest is symmetric).
            let whole = match b >= a {
                true => (b - a) as f64,
                false => -((a - b) as f64),
            };
            (whole + (fb - fa)).max(0.0)
        }
        _ => 0.0,
    }
}

/// The sampling intervals of the window `(start_ns, end_ns, bytes)`, on the ticks of `grid`, each interval's
/// bytes the larger of `grid`'s and `other`'s ([`other_bytes`]: interpolated where its ticks differ — an agent
/// stamps each value with its own read time, and now and then one direction's read falls on the next tick), as
/// the steps count them.
pub(crate) fn intervals(grid: &[(i64, u64)], other: &[(i64, u64)]) -> Vec<(i64, i64, f64)> {
    let same_ticks = other.len() == grid.len() && other.iter().zip(grid).all(|(a, b)| a.0 == b.0);
    // `other` at every tick of the grid, by one walk (the grid ascends), when its ticks differ.
    let at = match same_ticks {
        true => Vec::new(),
        false => {
            let times: Vec<i64> = grid.iter().map(|p| p.0).collect();
            acc_at_ascending(other, &times)
        }
    };
    grid.windows(2)
        .enumerate()
        .filter(|(_, p)| p[1].0 > p[0].0)
        .map(|(i, p)| {
            let own = delta(p[0].1, p[1].1);
            let theirs = match same_ticks {
                true => delta(other[i].1, other[i + 1].1),
                false => other_bytes(at[i], at[i + 1]),
            };
            (p[0].0, p[1].0, own.max(theirs))
        })
        .collect()
}

/// Median length of the intervals, nanoseconds (0 without any): `commwatch_model::stats::median_i64`'s
/// value, without a sort when every interval has the same length (regular sampling).
fn median_interval(iv: Parts<(i64, i64, f64)>, dts: &mut Vec<i64>) -> i64 {
    let mut lens = iv.iter().map(|x| x.1 - x.0);
    let Some(first) = lens.next() else { return 0 };
    if lens.all(|l| l == first) {
        return first;
    }
    dts.clear();
    dts.extend(iv.iter().map(|x| x.1 - x.0));
    median_by_selection(dts).unwrap_or(0)
}

/// `commwatch_model::stats::median_i64` by selection instead of a sort (linear time): the same value — the
/// middle element, or the midpoint of the two middle ones rounded towards the lower, as `median_i64` does.
fn median_by_selection(v: &mut [i64]) -> Option<i64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let (below, &mut hi, _) = v.select_nth_unstable(n / 2);
    if n % 2 == 1 {
        return Some(hi);
    }
    let lo = below.iter().copied().max().unwrap_or(hi);
    Some(lo + ((hi as i128 - lo as i128) / 2) as i64)
}

/// A run of `iv[first..end]` (`first < end <= iv.len()`) as a [`Burst`].
fn burst(iv: Parts<(i64, i64, f64)>, first: usize, end: usize) -> Burst {
    Burst {
        start_unix_ns: iv[first].0,
        end_unix_ns: iv[end - 1].1,
        bytes: iv
            .range(first..end)
            .iter()
            .map(|x| x.2)
            .sum::<f64>()
            .round() as u64,
        intervals: end - first,
        truncated: first == 0 || end == iv.len(),
    }
}

/// The bursts at the link's own level (see [`Activity::peaks`]) into `out` (its list's allocation kept, its
/// medians those of the last evaluation's peaks: where the new ones are looked for first). `rate[i]` is
/// interval `i`'s rate, bytes/s ([`interval_rates`]); `interior` and `gaps` are scratch.
fn peaks_into(
    iv: Parts<(i64, i64, f64)>,
    floor: f64,
    rate: Parts<f64>,
    (interior, gaps): (&mut Vec<f64>, &mut Vec<f64>),
    out: &mut Bursts,
) {
    let peak = rate.iter().copied().fold(0.0, f64::max);
    let level = (PEAK_LEVEL * peak).max(floor);
    out.bursts.clear();
    interior.clear();
    let mut i = 0;
    while i < iv.len() {
        if rate[i] < level {
            i += 1;
            continue;
        }
        let mut first = i;
        while i < iv.len() && rate[i] >= level {
            i += 1;
        }
        let mut end = i;
        if first > 0 && rate[first - 1] >= floor {
            first -= 1;
        }
        if end < iv.len() && rate[end] >= floor {
            end += 1;
        }
        if end - first >= RESOLVED_INTERVALS {
            rate.range(first + 1..end - 1).extend_into(interior);
        }
        out.bursts.push(burst(iv, first, end));
        i = end;
    }
    // `out` holds the peaks of the last evaluation (or none): their rate is the hint.
    let rate = median_near(interior, out.rate_bytes_per_second);
    out.settle(rate, gaps);
}

/// The bursts at the link's own level (see [`Activity::peaks`]), as a new value.
#[cfg(test)]
fn peaks(iv: &[(i64, i64, f64)], floor: f64, rate: &[f64], interior: &mut Vec<f64>) -> Bursts {
    let mut out = Bursts::default();
    let (iv, rate) = (Parts::of(iv), Parts::of(rate));
    peaks_into(iv, floor, rate, (interior, &mut Vec::new()), &mut out);
    out
}

/// Each interval's rate, bytes/s, into `rate` (cleared first): its bytes over its length in seconds.
fn interval_rates(iv: &[(i64, i64, f64)], rate: &mut Vec<f64>) {
    rate.clear();
    rate.extend(iv.iter().map(|x| x.2 / ((x.1 - x.0) as f64 / 1e9)));
}

/// Analyses two cumulative byte windows (`(timestamp_ns, cumulative bytes)`, oldest first, same ticks or
/// not). `None` with fewer than 3 samples in both directions.
pub fn analyse(
    tx: &[(i64, u64)],
    rx: &[(i64, u64)],
    capacity_bytes_per_second: Option<f64>,
) -> Option<Activity> {
    analyse_with(tx, rx, capacity_bytes_per_second, true)
}

/// [`analyse`], with the peaks found only when `peaks` ([`Activity::peaks`]).
pub fn analyse_with(
    tx: &[(i64, u64)],
    rx: &[(i64, u64)],
    capacity_bytes_per_second: Option<f64>,
    peaks: bool,
) -> Option<Activity> {
    let total = |w: &[(i64, u64)]| match (w.first(), w.last()) {
        (Some(a), Some(b)) => b.1.saturating_sub(a.1),
        _ => 0,
    };
    let (tx_bytes, rx_bytes) = (total(tx), total(rx));
    let (grid, other) = if tx.len() >= 3 {
        (tx, rx)
    } else if rx.len() >= 3 {
        (rx, tx)
    } else {
        return None;
    };
    let window_s = (grid[grid.len() - 1].0 - grid[0].0) as f64 / 1e9;
    if window_s <= 0.0 {
        return None;
    }
    Some(of_intervals(
        &intervals(grid, other),
        window_s,
        (tx_bytes, rx_bytes),
        (capacity_bytes_per_second, peaks),
        &mut Buffers::default(),
    ))
}

/// The activity of a window whose sampling intervals are `iv` (`(start_ns, end_ns, bytes)`, consecutive, oldest
/// first, as [`analyse`] derives them), `window_s` long (its first to last sample), with `(tx, rx)` bytes moved
/// over it. [`analyse`] is this on the intervals it derives: a caller that keeps the intervals from one window
/// to the next gets the same figures without deriving them anew.
///
/// `buffers` are worked in (their content is scratch): a caller that analyses many windows keeps them. The
/// peaks are found only when `peaks` ([`Activity::peaks`]).
///
/// An idle window (every interval's rate below the activity floor: a port NCCL left, a quiet management
/// NIC, most of a node's read links at any time) has no runs, no bursts and no peaks, whatever its samples:
/// its figures are those of no intervals (the same code on an empty list), without the busy time's shape and
/// scan or the peaks' scan. Each interval's rate is worked out once, for the idle check, the busy time and
/// the peaks alike (the busy time asked an interval's rate up to five times, a division each).
pub fn of_intervals(
    iv: &[(i64, i64, f64)],
    window_s: f64,
    (tx_bytes, rx_bytes): (u64, u64),
    (capacity_bytes_per_second, peaks): (Option<f64>, bool),
    buffers: &mut Buffers,
) -> Activity {
    let sample_period_s = median_interval(Parts::of(iv), &mut buffers.lens) as f64 / 1e9;
    let floor = busy::active_floor(capacity_bytes_per_second);
    // Each rate worked out once for the busy time and the peaks (a NaN is not idle: both would count it).
    let Buffers {
        shape,
        busy: busy_buffers,
        rates,
        interior,
        gaps,
        ..
    } = buffers;
    interval_rates(iv, rates);
    let idle = rates.iter().all(|r| *r < floor);
    shape.clear();
    if !idle {
        shape.extend(iv.iter().map(|x| Interval {
            len_s: (x.1 - x.0) as f64 / 1e9,
            bytes: x.2,
        }));
    }
    // `Interval::rate`: the same division where the interval has a length.
    let shape_rate = |i: usize| if shape[i].len_s > 0.0 { rates[i] } else { 0.0 };
    let (busy_s, interior_rate, resolved) =
        busy::busy_time_in(shape, shape_rate, floor, sample_period_s, busy_buffers);
    let mut out = Activity::default();
    out.bursts.extend(
        busy_buffers
            .runs
            .iter()
            .map(|r: &Run| burst(Parts::of(iv), r.first, r.end)),
    );
    let busy = (busy_s, interior_rate, resolved);
    let window = (window_s, sample_period_s);
    compose_into(
        &mut out,
        Parts::of(iv),
        (Parts::of(rates), floor, peaks && !idle),
        window,
        (tx_bytes, rx_bytes),
        busy,
        (interior, gaps),
    );
    out
}

/// The activity of a window whose intervals are `iv` and their rates `rates`, once its busy time is known,
/// into `out`, whose [`Activity::bursts`] hold its runs above `floor` as bursts (oldest first): `busy` (the
/// busy seconds, the bursts' interior rate, whether resolved, as [`busy::busy_time_in`] gives them); the
/// peaks are found here when `peaks` (asked for, and not an idle window: every rate below the floor), into
/// `out`'s (their list's allocation kept). `interior` and `gaps` are scratch. Every other field of `out` is
/// set.
fn compose_into(
    out: &mut Activity,
    iv: Parts<(i64, i64, f64)>,
    (rates, floor, peaks): (Parts<f64>, f64, bool),
    (window_s, sample_period_s): (f64, f64),
    (tx_bytes, rx_bytes): (u64, u64),
    (busy_s, interior_rate, resolved): (f64, Option<f64>, bool),
    (interior, gaps): (&mut Vec<f64>, &mut Vec<f64>),
) {
    // `out` holds the link's activity of the last evaluation (or none: a default value): its medians are the
    // hints.
    let f = BurstFigures::of(&out.bursts, gaps, (out.period_s, out.bytes_per_burst));
    (out.window_s, out.sample_period_s) = (window_s, sample_period_s);
    (out.tx_bytes, out.rx_bytes, out.busy_s) = (tx_bytes, rx_bytes, busy_s);
    out.burst_rate_bytes_per_second = interior_rate;
    (out.period_s, out.period_cv) = (f.period_s, f.period_cv);
    out.bytes_per_burst = f.bytes_per_burst;
    out.resolved = resolved;
    if peaks {
        peaks_into(iv, floor, rates, (interior, gaps), &mut out.peaks);
    } else {
        out.peaks.bursts.clear();
        out.peaks.settle(None, gaps);
    }
}

/// Buffers [`of_intervals`] works in: the intervals' lengths, their shape as the busy time reads it, the
/// busy time's runs and rates, their rates, the peaks' interior rates.
#[derive(Debug, Default)]
pub struct Buffers {
    lens: Vec<i64>,
    shape: Vec<Interval>,
    busy: busy::BusyBuffers,
    rates: Vec<f64>,
    interior: Vec<f64>,
    /// The bursts' gaps and bytes as their figures are worked out ([`BurstFigures`]).
    gaps: Vec<f64>,
}

/// A window's sampling intervals kept from one evaluation to the next (oldest dropped, newest appended) with
/// its runs above the activity floor and each run's figures, so that an evaluation a second after the last
/// analyses what changed: the runs the window's edges cut or that grew, not every run of the window again.
///
/// Contract: [`Sliding::activity`] is [`of_intervals`] on [`Sliding::intervals`], bit for bit. Why it is: a
/// run of intervals above the floor, and its busy seconds and bytes ([`busy::busy_time_in`]), depend on its own
/// intervals only, so a run the window's slide left whole keeps its figures, and one that was cut or grew is
/// worked out again by the same code on its intervals alone; the window's figures (the busy time, the bytes
/// moved and measured, the bursts) are summed over the runs in the same order as there, and what rests on the
/// whole window (the sampling period's median, whether a run is resolved at that period, the interior rates'
/// median, the peaks) is worked out at each evaluation, as there. `tests` compare both over thousands of
/// slides.
#[derive(Debug, Default)]
pub struct Sliding {
    /// The floor the runs were found above (`None`: none found yet).
    floor: Option<f64>,
    /// The intervals `(start_ns, end_ns, bytes)`, oldest first. A ring: the oldest leave without moving the
    /// others (held in a list, they were cut off every 10 s of a 20 s window, every interval held moved
    /// each time, cold: 1.8 % of the analysis thread at 2,000 demo nodes, issue 35).
    iv: VecDeque<(i64, i64, f64)>,
    /// Each interval's rate, bytes/s, as [`of_intervals`] works it out.
    rates: VecDeque<f64>,
    /// Intervals dropped from the front since the window was last cleared: an interval's index plus this is
    /// its number, which does not change as older ones leave.
    dropped: u64,
    /// The numbers of the scanned intervals without a positive length whose rate is not below the floor,
    /// ascending (none where the intervals have a length, as the kept windows' do). With the runs, they say
    /// whether the window is idle ([`Sliding::idle`]).
    flat: VecDeque<u64>,
    /// Intervals already scanned for runs.
    scanned: usize,
    /// The runs above the floor, oldest first, indexes from the oldest interval held.
    runs: Vec<KeptRun>,
    /// The last median interval length ([`Sliding::median_interval`]) and interior rate
    /// ([`Sliding::activity_into`]) worked out: where the next ones are looked for first
    /// ([`near_median::middles_near`]). Hints only: any value gives the same medians.
    hints: Cell<(Option<i64>, Option<f64>)>,
}

/// Whether a rate counts against an idle window: not below the floor (a NaN counts, as in `of_intervals`).
fn not_below(rate: f64, floor: f64) -> bool {
    rate.partial_cmp(&floor) != Some(std::cmp::Ordering::Less)
}

/// A run of a [`Sliding`] window and its figures as [`busy::busy_time_in`] works them out.
#[derive(Debug, Clone, Copy)]
struct KeptRun {
    first: usize,
    end: usize,
    /// Bytes moved in the run, and its busy seconds.
    bytes: f64,
    active_s: f64,
    /// Seconds of its interior intervals (all but its first and last; 0 below [`RESOLVED_INTERVALS`]): it is
    /// resolved at a sampling period at most twice this.
    interior_s: f64,
    /// The start of its first interval and the end of its last, Unix ns: its burst's bounds, kept with its
    /// figures (reading them from the intervals at each evaluation was a cache miss or two a burst).
    bounds: (i64, i64),
    /// Whether its intervals changed since its figures were worked out.
    stale: bool,
}

impl Sliding {
    /// Forgets every interval.
    pub fn clear(&mut self) {
        (self.floor, self.dropped, self.scanned) = (None, 0, 0);
        self.iv.clear();
        self.rates.clear();
        self.flat.clear();
        self.runs.clear();
    }

    /// The floor the runs were found above (`None`: not settled yet).
    pub fn floor(&self) -> Option<f64> {
        self.floor
    }

    /// The intervals held, oldest first.
    pub fn intervals(&self) -> Parts<'_, (i64, i64, f64)> {
        Parts::ring(&self.iv)
    }

    fn rates(&self) -> Parts<'_, f64> {
        Parts::ring(&self.rates)
    }

    /// Whether every interval held (scanned) has a rate below the floor, as `of_intervals` finds an idle
    /// window. Above a positive floor an interval with a length is in a run exactly when its rate is not
    /// below it, and one without a length in none (its rate counts as 0 there): so the window is idle when
    /// it has no run and no such interval without a length (`flat`), and no held rate is read (the count
    /// of active intervals this replaced read the rates of those that left, cold, at every slide).
    fn idle(&self, floor: f64) -> bool {
        match floor > 0.0 {
            true => self.runs.is_empty() && self.flat.is_empty(),
            false => self.rates.iter().all(|r| !not_below(*r, floor)),
        }
    }

    /// Drops the `k` oldest intervals (all of them when fewer are held).
    pub fn drop_oldest(&mut self, k: usize) {
        let k = k.min(self.iv.len());
        self.scanned = self.scanned.saturating_sub(k);
        self.runs.retain(|r| r.end > k);
        for r in &mut self.runs {
            if r.first < k {
                (r.first, r.stale) = (k, true);
            }
            (r.first, r.end) = (r.first - k, r.end - k);
        }
        self.iv.drain(..k);
        self.rates.drain(..k);
        self.dropped += k as u64;
        while self.flat.front().is_some_and(|&n| n < self.dropped) {
            self.flat.pop_front();
        }
    }

    /// Drops the `k` newest intervals (all of them when fewer are held): those derived before the other
    /// direction's samples covered their end, derived again when they do. A run they were part of is cut
    /// (its figures worked out again at the next [`Sliding::settle`]), and grows again if the intervals
    /// pushed in their place are above the floor, as a scan of the whole window would find it.
    pub fn drop_newest(&mut self, k: usize) {
        if k == 0 {
            return;
        }
        let held = self.iv.len();
        let keep = held - k.min(held);
        self.scanned = self.scanned.min(keep);
        self.runs.retain(|r| r.first < keep);
        for r in self.runs.iter_mut().filter(|r| r.end > keep) {
            (r.end, r.stale) = (keep, true);
        }
        self.iv.truncate(keep);
        self.rates.truncate(keep);
        let end = self.dropped + keep as u64;
        while self.flat.back().is_some_and(|&n| n >= end) {
            self.flat.pop_back();
        }
    }

    /// Makes room for `n` more intervals. When it must grow, it grows at once to what a window of `window`
    /// intervals holds at most at an update ([`Sliding::room_for`]; `window`: the caller's estimate of a
    /// full window, its span over the sampling interval seen so far, 0 when it has none), so that a window
    /// fills with a reallocation or two; past that (a window longer than estimated), by an eighth of those held
    /// (a window's length changes little from one evaluation to the next: doubling left up to half of every
    /// link's room unused, and room for exactly `n` grew again, a copy of every interval, whenever a jittered
    /// window held one interval more than it ever had). Grown by an eighth alone, a 20 Hz link's window took
    /// about 17 reallocations to fill, and those and their page faults were 28 % of the analysis thread's CPU
    /// while the fleet's windows filled (issue 35).
    pub fn reserve(&mut self, n: usize, window: usize) {
        let len = self.iv.len();
        if self.iv.capacity() - len < n {
            let sized = match window {
                0 => 0,
                w => Self::room_for(w, n).saturating_sub(len),
            };
            let more = (n + len / 8).max(sized);
            self.iv.reserve_exact(more);
            self.rates.reserve_exact(more);
        }
    }

    /// Intervals there is room for without a reallocation.
    #[cfg(test)]
    pub(crate) fn room(&self) -> usize {
        self.iv.capacity()
    }

    /// The most intervals a window of `window` intervals holds at an update that appends `n` (those that
    /// left it are dropped first, [`Sliding::drop_oldest`]): the window's (a sixteenth more, and two, for a
    /// jittered one) and the new ones.
    pub fn room_for(window: usize, n: usize) -> usize {
        window + window / 16 + 2 + n
    }

    /// Appends the interval `x`, the newest.
    pub fn push(&mut self, x: (i64, i64, f64)) {
        self.iv.push_back(x);
        self.rates.push_back(x.2 / ((x.1 - x.0) as f64 / 1e9));
    }

    /// Finds the runs above `floor` among the intervals appended since the last call, and works out the
    /// figures of the runs that changed (`buffers` are scratch).
    pub fn settle(&mut self, floor: f64, buffers: &mut Buffers) {
        let Buffers { shape, busy, .. } = buffers;
        if self.floor != Some(floor) {
            (self.floor, self.scanned) = (Some(floor), 0);
            self.runs.clear();
            self.flat.clear();
        }
        let (iv, rates) = (Parts::ring(&self.iv), Parts::ring(&self.rates));
        for i in self.scanned..iv.len() {
            // `Interval::rate`: 0 where the interval has no length, as in `of_intervals`.
            let long = iv[i].1 > iv[i].0;
            if !long && not_below(rates[i], floor) {
                self.flat.push_back(self.dropped + i as u64);
            }
            let rate = if long { rates[i] } else { 0.0 };
            if rate < floor {
                continue;
            }
            match self.runs.last_mut() {
                Some(r) if r.end == i => (r.end, r.stale) = (i + 1, true),
                _ => self.runs.push(KeptRun {
                    first: i,
                    end: i + 1,
                    bytes: 0.0,
                    active_s: 0.0,
                    interior_s: 0.0,
                    bounds: (0, 0),
                    stale: true,
                }),
            }
        }
        self.scanned = iv.len();
        for r in self.runs.iter_mut().filter(|r| r.stale) {
            shape.clear();
            shape.extend(iv.range(r.first..r.end).iter().map(|x| Interval {
                len_s: (x.1 - x.0) as f64 / 1e9,
                bytes: x.2,
            }));
            let rate = |j: usize| match shape[j].len_s > 0.0 {
                true => rates[r.first + j],
                false => 0.0,
            };
            // The run alone is one run: its figures are those it has within the whole window.
            busy::busy_time_in(shape, rate, floor, 0.0, busy);
            let whole = busy.runs.first().filter(|b| b.end == shape.len());
            (r.bytes, r.active_s) = whole.map_or((f64::NAN, f64::NAN), |b| (b.bytes, b.active_s));
            let n = shape.len();
            r.interior_s = match n >= RESOLVED_INTERVALS {
                true => shape[1..n - 1].iter().map(|x| x.len_s).sum(),
                false => 0.0,
            };
            r.bounds = (iv[r.first].0, iv[r.end - 1].1);
            r.stale = false;
        }
    }

    /// The activity of the window held ([`of_intervals`] on [`Sliding::intervals`]), `window_s` long, with
    /// `moved` bytes `(tx, rx)` over it; `None` before [`Sliding::settle`] was called on what is held.
    pub fn activity(
        &self,
        window_s: f64,
        moved: (u64, u64),
        buffers: &mut Buffers,
    ) -> Option<Activity> {
        let mut out = Activity::default();
        self.activity_into(window_s, moved, (None, true), buffers, &mut out)
            .then_some(out)
    }

    /// [`Sliding::activity`] into `out` (every field set, the allocations of its lists kept); false, and `out`
    /// untouched, before [`Sliding::settle`] was called on what is held. `period_ns`: the intervals' median
    /// length, nanoseconds, where the caller has it ([`Sliding::median_interval`] of these intervals, or of
    /// intervals of the same bounds), else worked out here; `peaks`: whether the peaks are found
    /// ([`Activity::peaks`]).
    pub fn activity_into(
        &self,
        window_s: f64,
        moved: (u64, u64),
        (period_ns, peaks): (Option<i64>, bool),
        buffers: &mut Buffers,
        out: &mut Activity,
    ) -> bool {
        let Some(floor) = self.floor else {
            return false;
        };
        let (iv, rates) = (self.intervals(), self.rates());
        if self.scanned != iv.len() || self.runs.iter().any(|r| r.stale) {
            return false;
        }
        let period_ns = period_ns.unwrap_or_else(|| median_interval(iv, &mut buffers.lens));
        let sample_period_s = period_ns as f64 / 1e9;
        let Buffers {
            busy: busy_buffers,
            interior,
            gaps,
            ..
        } = buffers;
        let busy = if self.runs.is_empty() {
            // As `of_intervals` on a window without runs.
            busy::busy_time_in(&[], |_| 0.0, floor, sample_period_s, busy_buffers)
        } else {
            // `busy::busy_time_in`'s sums and median, over the kept runs in the same order.
            let resolved =
                |r: &&KeptRun| r.interior_s > 0.0 && r.interior_s >= 0.5 * sample_period_s;
            let rate = |i: usize| if iv[i].1 > iv[i].0 { rates[i] } else { 0.0 };
            // Above a positive floor a run's intervals all have a length (one without has rate 0, below it):
            // their rates are read as they are, not each interval's bounds read again (reading the bounds of
            // every busy interval of the window was a fifth of a link's activity).
            let interior_rate = match floor > 0.0 {
                true => self.interior_median(resolved, interior),
                false => {
                    interior.clear();
                    for r in self.runs.iter().filter(resolved) {
                        interior.extend((r.first + 1..r.end - 1).map(rate));
                    }
                    median_by_select(interior)
                }
            };
            let all: f64 = self.runs.iter().map(|r| r.bytes).sum();
            let measured: f64 = self.runs.iter().filter(resolved).map(|r| r.bytes).sum();
            (
                self.runs.iter().map(|r| r.active_s).sum(),
                interior_rate,
                all <= 0.0 || measured >= busy::RESOLVED_BYTES_SHARE * all,
            )
        };
        out.bursts.clear();
        out.bursts.extend(self.runs.iter().map(|r| Burst {
            start_unix_ns: r.bounds.0,
            end_unix_ns: r.bounds.1,
            // `burst`'s sum: the run's bytes in the same order.
            bytes: r.bytes.round() as u64,
            intervals: r.end - r.first,
            truncated: r.first == 0 || r.end == iv.len(),
        }));
        let window = (window_s, sample_period_s);
        let idle = self.idle(floor);
        compose_into(
            out,
            iv,
            (rates, floor, peaks && !idle),
            window,
            moved,
            busy,
            (interior, gaps),
        );
        true
    }

    /// The median length of the intervals held, nanoseconds (0 without any), as [`Sliding::activity`] takes
    /// it; `buffers` are scratch.
    pub fn median_interval(&self, buffers: &mut Buffers) -> i64 {
        let iv = self.intervals();
        let (hint, rate) = self.hints.get();
        let lens = &mut buffers.lens;
        lens.clear();
        lens.extend(iv.iter().map(|x| x.1 - x.0));
        let near =
            hint.and_then(|p| near_median::middles_near(|| lens.iter().copied(), lens.len(), p));
        let median = match near {
            // As `median_by_selection` combines the two middle ones.
            Some((lo, hi)) if iv.len().is_multiple_of(2) => {
                lo + ((hi as i128 - lo as i128) / 2) as i64
            }
            Some((_, hi)) => hi,
            None => median_interval(iv, &mut buffers.lens),
        };
        self.hints.set((Some(median), rate));
        median
    }

    /// The median of the interior rates of the runs `resolved` keeps (their intervals but the first and the
    /// last), as `busy::busy_time_in` takes it (`median_select` of them in run order), above a positive
    /// floor (every interval of a run has a length): looked for near the last one, else selected from a copy
    /// in `interior`.
    fn interior_median(
        &self,
        resolved: impl Fn(&&KeptRun) -> bool,
        interior: &mut Vec<f64>,
    ) -> Option<f64> {
        let rates = self.rates();
        interior.clear();
        for r in self.runs.iter().filter(&resolved) {
            rates.range(r.first + 1..r.end - 1).extend_into(interior);
        }
        let (lengths, hint) = self.hints.get();
        let keys = || interior.iter().map(|x| near_median::f64_key(*x));
        let n = interior.len();
        let near = hint.and_then(|p| near_median::middles_near(keys, n, near_median::f64_key(p)));
        let of_key = near_median::f64_of_key;
        let median = match near {
            // As `median_select` combines the two middle ones (in `total_cmp`'s order).
            Some((lo, hi)) if n.is_multiple_of(2) => Some((of_key(lo) + of_key(hi)) / 2.0),
            Some((_, hi)) => Some(of_key(hi)),
            None => median_by_select(interior),
        };
        self.hints.set((lengths, median.or(hint)));
        median
    }

    /// Whether the intervals held have the bounds of `other`'s, one for one (then their median lengths are
    /// the same).
    pub fn same_bounds(&self, other: &Sliding) -> bool {
        self.same_bounds_from(other, 0)
    }

    /// Whether as many intervals are held as `other` holds, and those from the `from`th on have the bounds of
    /// `other`'s (all of them when `from` is 0): [`Sliding::same_bounds`] where the caller knows the first
    /// `from` to have the same bounds.
    pub fn same_bounds_from(&self, other: &Sliding, from: usize) -> bool {
        let (a, b) = (self.intervals(), other.intervals());
        let (a_new, b_new) = (a.range(from..a.len()), b.range(from..b.len()));
        a.len() == b.len()
            && a_new
                .iter()
                .zip(b_new.iter())
                .all(|(x, y)| x.0 == y.0 && x.1 == y.1)
    }

    /// A value of no meaning read from the oldest interval held, the newest and the first run: what a
    /// slide reads first (the window's start, [`Sliding::drop_oldest`], [`Sliding::push`]), loaded ahead by
    /// a caller that slides several windows so that their cache misses overlap.
    pub fn touch(&self) -> u64 {
        let oldest = self.iv.front().map_or(0, |x| x.0 as u64);
        let newest = self.iv.back().map_or(0, |x| x.1 as u64);
        let run = self.runs.first().map_or(0, |r| r.end as u64);
        oldest ^ newest ^ run
    }

    /// Bytes allocated.
    pub fn heap_bytes(&self) -> usize {
        self.iv.capacity() * size_of::<(i64, i64, f64)>()
            + self.rates.capacity() * size_of::<f64>()
            + self.flat.capacity() * size_of::<u64>()
            + self.runs.capacity() * size_of::<KeptRun>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::bandwidth::step_link;
    use crate::steps::busy::active_floor;
    use commwatch_model::stats::median_i64;
    use commwatch_model::{Endpoint, Link, LinkClass, LinkKey, LinkRole};

    const MS: i64 = 1_000_000;

    #[test]
    fn other_bytes_rounds_the_whole_parts_as_their_exact_difference() {
        let exact = |a: u64, b: u64| (i128::from(b) - i128::from(a)) as f64;
        let big = 1u64 << 53;
        let pairs = [
            (0, u64::MAX),
            (u64::MAX, 0),
            (big, big + 1),
            (big + 3, 1),
            ((1 << 60) + 5, (1 << 60) + 3),
            (7, 7),
            (u64::MAX - 1, u64::MAX),
        ];
        for (a, b) in pairs {
            for (fa, fb) in [(0.0, 0.0), (0.25, 0.5), (0.75, 0.125)] {
                let want = (exact(a, b) + (fb - fa)).max(0.0);
                let got = other_bytes(Some((a, fa)), Some((b, fb)));
                assert_eq!(got.to_bits(), want.to_bits(), "{a} {b} {fa} {fb}");
            }
        }
        // Negative differences past 2^53 round away from the exact value the same way either sign.
        assert_eq!(exact(big + 3, 1), -((big + 2) as f64));
    }

    /// Samples every 50 ms for `secs`: bursts of `burst_ms` at `rate` every `period_ms`, plus 2 MB/s.
    pub(crate) fn bursty(secs: f64, period_ms: i64, burst_ms: i64, rate: f64) -> Vec<(i64, u64)> {
        let bytes_at = |t_ns: i64| -> u64 {
            let k = t_ns / (period_ms * MS);
            let tau = t_ns - k * period_ms * MS;
            let per = rate * burst_ms as f64 / 1e3;
            let part = (tau.min(burst_ms * MS) as f64 / (burst_ms * MS) as f64) * per;
            (k as f64 * per + part + 2e6 * t_ns as f64 / 1e9) as u64
        };
        (0..=((secs * 20.0) as i64))
            .map(|i| {
                let t = 1_000 * MS + i * 50 * MS;
                (t, bytes_at(t))
            })
            .collect()
    }

    /// The window's intervals as they were computed before the walk: a search per grid tick.
    fn intervals_by_search(grid: &[(i64, u64)], other: &[(i64, u64)]) -> Vec<(i64, i64, f64)> {
        use crate::steps::bandwidth::acc_at;
        let same = other.len() == grid.len() && other.iter().zip(grid).all(|(a, b)| a.0 == b.0);
        grid.windows(2)
            .enumerate()
            .filter(|(_, p)| p[1].0 > p[0].0)
            .map(|(i, p)| {
                let theirs = if same {
                    delta(other[i].1, other[i + 1].1)
                } else {
                    other_bytes(acc_at(other, p[0].0), acc_at(other, p[1].0))
                };
                (p[0].0, p[1].0, delta(p[0].1, p[1].1).max(theirs))
            })
            .collect()
    }

    /// `a` as it is when its peaks are not asked for: none found.
    fn without_peaks(mut a: Activity) -> Activity {
        a.peaks.bursts.clear();
        a.peaks.settle(None, &mut Vec::new());
        a
    }

    /// [`of_intervals`] as it was before idle windows skipped their shape, runs and peaks: the reference.
    fn of_intervals_whole(
        iv: &[(i64, i64, f64)],
        window_s: f64,
        moved: (u64, u64),
        cap: Option<f64>,
    ) -> Activity {
        let sample_period_s = median_interval(Parts::of(iv), &mut Vec::new()) as f64 / 1e9;
        let floor = busy::active_floor(cap);
        let shape: Vec<Interval> = iv
            .iter()
            .map(|x| Interval {
                len_s: (x.1 - x.0) as f64 / 1e9,
                bytes: x.2,
            })
            .collect();
        let b = busy::busy_time(&shape, floor, sample_period_s);
        let bursts = Bursts::of(
            b.runs
                .iter()
                .map(|r| burst(Parts::of(iv), r.first, r.end))
                .collect(),
            b.interior_rate,
        );
        Activity {
            window_s,
            sample_period_s,
            tx_bytes: moved.0,
            rx_bytes: moved.1,
            busy_s: b.active_s,
            burst_rate_bytes_per_second: b.interior_rate,
            period_s: bursts.period_s,
            period_cv: bursts.period_cv,
            bytes_per_burst: bursts.bytes_per_burst,
            bursts: bursts.bursts,
            resolved: b.resolved,
            peaks: {
                let rates: Vec<f64> = iv
                    .iter()
                    .map(|x| x.2 / ((x.1 - x.0) as f64 / 1e9))
                    .collect();
                peaks(iv, floor, &rates, &mut Vec::new())
            },
        }
    }

    #[test]
    fn idle_and_busy_windows_give_the_whole_analysis_figures() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(11);
        let mut buffers = Buffers::default();
        let (mut idle, mut busy) = (0, 0);
        for round in 0..600 {
            let n = r.random_range(0..60);
            // Rates up to 8, 80 or 800 MB/s against a floor of 10 MB/s (50 MB/s with the capacity):
            // idle windows, windows that touch the floor, busy ones.
            let top = [8e6, 80e6, 800e6][round % 3];
            let cap = (round % 2 == 0).then_some(25e9);
            let mut t = 1_000 * MS;
            let iv: Vec<(i64, i64, f64)> = (0..n)
                .map(|_| {
                    let len = r.random_range(40 * MS..60 * MS);
                    let bytes = r.random_range(0.0..top) * len as f64 / 1e9;
                    t += len;
                    (t - len, t, bytes)
                })
                .collect();
            let window_s = iv.last().map_or(0.0, |z| (z.1 - iv[0].0) as f64 / 1e9);
            let floor = busy::active_floor(cap);
            if iv.iter().all(|x| x.2 / ((x.1 - x.0) as f64 / 1e9) < floor) {
                idle += 1;
            } else {
                busy += 1;
            }
            let whole = of_intervals_whole(&iv, window_s, (7, 9), cap);
            let got = of_intervals(&iv, window_s, (7, 9), (cap, true), &mut buffers);
            assert_eq!(format!("{got:?}"), format!("{whole:?}"), "round {round}");
            // Without the peaks: every other figure the same.
            let got = of_intervals(&iv, window_s, (7, 9), (cap, false), &mut buffers);
            let whole = without_peaks(whole);
            assert_eq!(format!("{got:?}"), format!("{whole:?}"), "round {round}");
        }
        assert!(idle > 100 && busy > 100, "{idle} idle, {busy} busy");
    }

    #[test]
    fn a_sliding_window_gives_the_whole_analysis_figures() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(23);
        let (mut buffers, mut whole_buffers) = (Buffers::default(), Buffers::default());
        let (mut sliding, mut window) = (Sliding::default(), std::collections::VecDeque::new());
        let (mut t, mut cap) = (1_000 * MS, Some(25e9));
        // Starts as another window's activity: every field must be written over.
        let mut reused = Activity {
            window_s: 9.0,
            bursts: vec![Burst {
                start_unix_ns: 1,
                end_unix_ns: 2,
                bytes: 3,
                intervals: 4,
                truncated: true,
            }],
            period_s: Some(1.0),
            peaks: Bursts::of(Vec::new(), Some(2.0)),
            ..Default::default()
        };
        let (mut slides, mut idle, mut runs, mut dropped) = (0, 0, 0, 0);
        for round in 0..3_000 {
            // Quiet stretches, bursts of a few intervals and long ones, regular or jittered sampling, now and
            // then a rate exactly at the floor; the window slides by a few intervals, some rounds by none or
            // by all, and the floor changes now and then.
            let phase = (round / 200) % 4;
            let jitter = phase % 2 == 1;
            // Now and then the newest few are dropped, and others pushed in their place (provisional
            // intervals derived again).
            if r.random_range(0..4) == 0 {
                let back = r.random_range(0..4).min(window.len());
                window.truncate(window.len() - back);
                sliding.drop_newest(back);
                t = window.back().map_or(t, |x: &(i64, i64, f64)| x.1);
                dropped += back;
            }
            for _ in 0..r.random_range(0..25) {
                // Intervals have a length (the kept windows' samples rise in time).
                let len = match jitter {
                    true => r.random_range(40 * MS..60 * MS),
                    false => 50 * MS,
                };
                let floor = active_floor(cap);
                let rate = match (phase, r.random_range(0..10)) {
                    (0, _) => r.random_range(0.0..floor),
                    (_, 0) => floor,
                    (_, k) if k < 5 => r.random_range(0.0..floor * 0.5),
                    _ => r.random_range(floor..800e6),
                };
                let x = (t, t + len, rate * len as f64 / 1e9);
                t += len;
                window.push_back(x);
                sliding.push(x);
            }
            let gone = match r.random_range(0..20) {
                0 => window.len(),
                k if k < 4 => 0,
                _ => r.random_range(0..25).min(window.len()),
            };
            window.drain(..gone);
            sliding.drop_oldest(gone);
            if round % 450 == 449 {
                cap = cap.map_or(Some(25e9), |_| None);
            }
            let floor = active_floor(cap);
            sliding.settle(floor, &mut buffers);
            let iv: Vec<(i64, i64, f64)> = window.iter().copied().collect();
            assert_eq!(sliding.intervals().to_vec(), iv, "round {round}");
            let (Some(a), Some(z)) = (iv.first(), iv.last()) else {
                continue;
            };
            let window_s = (z.1 - a.0) as f64 / 1e9;
            let whole = of_intervals(&iv, window_s, (3, 4), (cap, true), &mut whole_buffers);
            let got = sliding.activity(window_s, (3, 4), &mut buffers);
            assert_eq!(
                format!("{got:?}"),
                format!("{:?}", Some(&whole)),
                "round {round}"
            );
            // Into the previous round's activity (its lists reused), with the median length given as the
            // kept windows give it: the same figures.
            // Every third round without the peaks.
            let period = sliding.median_interval(&mut buffers);
            let peaks = round % 3 != 0;
            assert!(sliding.activity_into(
                window_s,
                (3, 4),
                (Some(period), peaks),
                &mut buffers,
                &mut reused
            ));
            let expected = match peaks {
                true => whole.clone(),
                false => without_peaks(whole.clone()),
            };
            assert_eq!(
                format!("{reused:?}"),
                format!("{expected:?}"),
                "round {round}"
            );
            slides += 1;
            idle += usize::from(whole.bursts.is_empty());
            runs += whole.bursts.len();
        }
        assert!(
            slides > 2_000 && idle > 300 && runs > 10_000 && dropped > 500,
            "{slides} {idle} {runs} {dropped}"
        );
    }

    #[test]
    fn walked_intervals_and_median_equal_the_searched_and_sorted_ones() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(5);
        let series = |r: &mut rand::rngs::StdRng, regular: bool| {
            let n = r.random_range(0..50);
            let (mut t, mut acc) = (r.random_range(0..80 * MS), 0u64);
            (0..n)
                .map(|_| {
                    t += if regular {
                        50 * MS
                    } else {
                        r.random_range(1..90 * MS)
                    };
                    acc += r.random_range(0..1u64 << 33);
                    (t, acc)
                })
                .collect::<Vec<_>>()
        };
        for round in 0..400 {
            let regular = round % 2 == 0;
            let grid = series(&mut r, regular);
            let other = if round % 3 == 0 {
                grid.iter().map(|&(t, a)| (t, a / 3)).collect()
            } else {
                series(&mut r, regular)
            };
            let iv = intervals(&grid, &other);
            assert_eq!(iv, intervals_by_search(&grid, &other));
            let mut dts: Vec<i64> = iv.iter().map(|x| x.1 - x.0).collect();
            assert_eq!(
                median_interval(Parts::of(&iv), &mut Vec::new()),
                median_i64(&mut dts).unwrap_or(0)
            );
        }
        for _ in 0..2000 {
            let n = r.random_range(0..40);
            let mut v: Vec<i64> = (0..n)
                .map(|_| match r.random_range(0..3) {
                    0 => r.random_range(-5..5),
                    1 => r.random_range(i64::MIN..i64::MAX),
                    _ => 50_000_000 + r.random_range(-3_000..3_000),
                })
                .collect();
            let mut w = v.clone();
            assert_eq!(median_by_selection(&mut v), median_i64(&mut w), "{w:?}");
            // The same for rates, bit for bit (signed zeros, infinities and repeats among them).
            let mut f: Vec<f64> = w
                .iter()
                .map(|&x| match x % 7 {
                    0 => 0.0,
                    1 => -0.0,
                    2 => f64::INFINITY,
                    _ => (x % 1_000) as f64 * 1.5e6,
                })
                .collect();
            let mut g = f.clone();
            assert_eq!(
                median_by_select(&mut f).map(f64::to_bits),
                commwatch_model::stats::median(&mut g).map(f64::to_bits),
                "{g:?}"
            );
        }
    }

    #[test]
    fn periodic_bursts_resolved() {
        // 353.6 ms at 9.8 GB/s every 643.6 ms: the classic case's eth0.
        let tx = bursty(20.0, 643, 353, 9.8e9);
        let a = analyse(&tx, &[], Some(12.5e9)).expect("activity");
        assert!(a.resolved);
        let rate = a.burst_rate_bytes_per_second.expect("rate");
        assert!((rate - 9.8e9 - 2e6).abs() / 9.8e9 < 0.01, "{rate}");
        let p = a.period_s.expect("period");
        assert!((p - 0.643).abs() < 0.05, "{p}");
        assert!(a.period_cv.expect("cv") < 0.1);
        let b = a.bytes_per_burst.expect("bytes");
        assert!((b - 9.8e9 * 0.353).abs() / b < 0.05, "{b}");
        assert!(a.complete_bursts() >= 25);
        // The busy time is the bursts' length (353 of every 643 ms), not whole sample intervals.
        assert!(
            (a.busy_share() - 353.0 / 643.0).abs() < 0.01,
            "{}",
            a.busy_share()
        );
        // Alone on the link, the peaks are the bursts.
        assert_eq!(a.peaks.bursts, a.bursts);
    }

    #[test]
    fn short_bursts_not_resolved_and_idle_link() {
        // 19.7 ms bursts at 50 ms sampling: not resolved.
        let tx = bursty(10.0, 310, 20, 22e9);
        let a = analyse(&tx, &[], Some(25e9)).expect("activity");
        assert!(!a.resolved);
        assert_eq!(a.burst_rate_bytes_per_second, None);
        // Background only: no bursts.
        let idle: Vec<(i64, u64)> = (0..100)
            .map(|i| (i * 50_000_000, i as u64 * 100_000))
            .collect();
        let a = analyse(&idle, &idle, Some(12.5e9)).expect("activity");
        assert!(a.bursts.is_empty());
        assert_eq!(a.busy_s, 0.0);
        assert!(a.resolved);
        assert!(analyse(&idle[..2], &[], None).is_none());
    }

    #[test]
    fn peaks_stand_out_of_a_lower_continuous_load() {
        // 353 ms at 9.8 GB/s every 643 ms on top of a steady 600 MB/s: above the floor everything is one burst.
        let big = bursty(20.0, 643, 353, 9.8e9);
        let rx: Vec<(i64, u64)> = big
            .iter()
            .map(|&(t, b)| (t, b + (0.6e9 * (t - 1_000 * MS) as f64 / 1e9) as u64))
            .collect();
        let a = analyse(&[], &rx, Some(12.5e9)).expect("activity");
        assert_eq!(a.bursts.len(), 1);
        let p = a.peaks.period_s.expect("period");
        assert!((p - 0.643).abs() < 0.05, "{p}");
        assert!(a.peaks.period_cv.expect("cv") < 0.1);
        // Bytes per peak: the burst plus the load under it and its edges (≤ 2 intervals more).
        let b = a.peaks.bytes_per_burst.expect("bytes");
        assert!(b > 9.8e9 * 0.353 && b < 9.8e9 * 0.353 + 0.6e9 * 0.5, "{b}");
    }

    /// An InfiniBand HCA port of 25 GB/s.
    fn hca() -> Link {
        Link {
            key: LinkKey::new(LinkClass::Infiniband, "mlx5_0", "1"),
            endpoint: Endpoint::HcaPort,
            role: LinkRole::Fabric,
            capacity_bytes_per_second: Some(25e9),
            state: "ACTIVE".into(),
            attributes: Default::default(),
            gpu: None,
            link: None,
        }
    }

    /// The steps' active time and the window's busy time on the same samples: one definition, one figure.
    fn steps_and_window_agree(period_ms: i64, burst_ms: i64, rate: f64) {
        let tx = bursty(20.0, period_ms, burst_ms, rate);
        // Steps from quiet sample to quiet sample: each burst end (plus a sample) starts the next step.
        let quiet: Vec<i64> = tx
            .windows(2)
            .filter(|p| (p[1].1 - p[0].1) as f64 / 0.05 < 50e6)
            .map(|p| p[0].0)
            .collect();
        let mut edges: Vec<i64> = vec![quiet[0]];
        for &t in &quiet {
            let last = *edges.last().expect("edge");
            if t - last >= period_ms * MS * 9 / 10 {
                edges.push(t);
            }
        }
        let (from, to) = (edges[0], edges[edges.len() - 1]);
        let steps: f64 = edges
            .windows(2)
            .map(|e| {
                step_link(&std::sync::Arc::new(hca()), &tx, &[], e[0], e[1], 0.05)
                    .expect("covered")
                    .active_s
            })
            .sum();
        let window: Vec<(i64, u64)> = tx
            .iter()
            .copied()
            .filter(|s| s.0 >= from && s.0 <= to)
            .collect();
        let a = analyse(&window, &[], Some(25e9)).expect("activity");
        assert!(
            (a.busy_s - steps).abs() <= 0.005 * steps,
            "window {} s, steps {steps} s",
            a.busy_s
        );
    }

    #[test]
    fn a_sliding_window_sized_for_its_length_fills_and_slides_in_its_first_room() {
        // 60 s of a 20 Hz link evaluated every second, a 20 s window: sized for its 400 intervals, it grows
        // once (grown by an eighth at a time, 17 times while it filled).
        let mut sliding = Sliding::default();
        let (mut t, mut held, mut rooms) = (0, 0usize, Vec::new());
        for _ in 0..60 {
            sliding.reserve(20, 400);
            for _ in 0..20 {
                sliding.push((t, t + 50 * MS, 1e6));
                t += 50 * MS;
            }
            held += 20;
            sliding.drop_oldest(held.saturating_sub(400));
            held = held.min(400);
            assert_eq!(sliding.intervals().len(), held);
            if rooms.last() != Some(&sliding.iv.capacity()) {
                rooms.push(sliding.iv.capacity());
            }
        }
        assert_eq!(rooms, [Sliding::room_for(400, 20)]);
        // Without an estimate, it grows by an eighth of those held, beyond what is asked.
        let mut bare = Sliding::default();
        bare.reserve(10, 0);
        assert_eq!(bare.iv.capacity(), 10);
        for k in 0..10 {
            bare.push((k, k + 1, 0.0));
        }
        bare.reserve(1, 0);
        assert_eq!(bare.iv.capacity(), 10 + 1 + 10 / 8);
    }

    #[test]
    fn bounds_compared_from_an_interval_on() {
        let of = |bounds: &[(i64, i64)]| {
            let mut s = Sliding::default();
            for &(a, z) in bounds {
                s.push((a, z, 5.0));
            }
            s
        };
        let a = of(&[(0, 10), (10, 20), (20, 30), (30, 40)]);
        let b = of(&[(0, 10), (10, 21), (21, 30), (30, 40)]);
        assert!(!a.same_bounds(&b) && !a.same_bounds_from(&b, 1));
        assert!(a.same_bounds_from(&b, 3) && a.same_bounds(&a));
        // Lengths differ: never the same, whatever is compared.
        let c = of(&[(0, 10), (10, 20), (20, 30)]);
        assert!(!a.same_bounds_from(&c, 3) && !a.same_bounds_from(&c, 9));
    }

    #[test]
    fn an_interval_without_a_length_keeps_a_window_from_idling_as_the_whole_analysis_does() {
        // Intervals below the floor but one without a length that moved bytes: its rate is infinite, not
        // below the floor, so the window is not idle (its peaks are found: that interval alone) though no
        // run holds it; once it left, the window is idle again.
        let (mut sliding, mut buffers) = (Sliding::default(), Buffers::default());
        let (mut iv, mut t) = (Vec::new(), 0);
        for k in 0..12 {
            let (len, bytes) = if k == 5 { (0, 1e6) } else { (50 * MS, 10.0) };
            iv.push((t, t + len, bytes));
            sliding.push((t, t + len, bytes));
            t += len;
        }
        let (mut peaks, mut idle) = (0, 0);
        for gone in [0, 3, 2, 1, 4] {
            iv.drain(..gone);
            sliding.drop_oldest(gone);
            sliding.settle(active_floor(Some(25e9)), &mut buffers);
            let window_s = (iv[iv.len() - 1].1 - iv[0].0) as f64 / 1e9;
            let whole = of_intervals(
                &iv,
                window_s,
                (1, 2),
                (Some(25e9), true),
                &mut Buffers::default(),
            );
            let got = sliding.activity(window_s, (1, 2), &mut buffers);
            assert_eq!(
                format!("{got:?}"),
                format!("{:?}", Some(&whole)),
                "{} held",
                iv.len()
            );
            peaks += whole.peaks.bursts.len();
            idle += usize::from(whole.peaks.bursts.is_empty());
        }
        assert!(peaks == 3 && idle == 2, "{peaks} {idle}");
    }

    #[test]
    fn busy_share_and_step_active_time_agree() {
        // The classic case's eth0 (resolved) and the default burst (shorter than a sample).
        steps_and_window_agree(643, 353, 9.8e9);
        steps_and_window_agree(310, 20, 22e9);
    }
}
