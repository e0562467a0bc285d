//! Steps without markers: inferred from the periodicity of a node's link traffic (the communication every
//! step).
//!
//! Input: the node's *traffic total*: the cumulative bytes (tx + rx) summed over its fabric and management
//! links (NVLink excluded: it stays inside the node), as `(timestamp_ns, bytes)` on the node's sample times.
//! The tracker keeps the last [`WINDOW_NS`] of it and, from the interval rates:
//!
//! - **Activity**: an interval is busy when its rate is above `low + BUSY_LEVEL × (high − low)` (`low` the
//!   [`LOW_PERCENTILE`]th percentile rate, low enough for a node whose communication fills 85 % of the step;
//!   `high` the highest). The level is low on purpose: a node whose ring crosses a slow link moves a fast
//!   link's chunk in one sample and the slow link's for several at a tenth of the rate, and both are the step's
//!   communication.
//! - **Period**: the autocorrelation of the activity (1 busy, 0 quiet; mean removed, normalised per lag) from
//!   the window's first busy interval on (once a period is known, over the newest [`ESTIMATE_PERIODS`] periods,
//!   at least [`ESTIMATE_MIN_NS`], so that a job whose steps change speed is followed within about as many
//!   steps; a job more than twice as fast as the period followed, strong on the newest [`SPEEDUP_SPAN_NS`]
//!   alone in two estimates in a row, takes that period at once), over lags from its first fall below zero
//!   to a third of that span. Below that lag the autocorrelation only
//!   says that activity comes in runs; the chunks of one collective repeat there too, and are not the step.
//!   The period is the smallest lag whose peak reaches [`PEAK_SHARE`] of the highest peak (so a multiple of the
//!   period is never taken for it), or a half or a third of it where the peak is split over two lags there
//!   (a period that is not a whole number of samples), refined by a parabola through the peak, doubled where the
//!   bytes alternate from one period to the next ([`ALTERNATION`]: the activity of a collective paused as long
//!   as the compute repeats at half the step), then by the mean spacing of the
//!   last edges seen in the traffic when every spacing is within [`SAME_SPACING`] of their median (so that a
//!   few early cuts do not drag it down). **Strength** is the autocorrelation at the peak (0..1).
//! - **Edges**: every end of a busy run is a candidate: the sample closing its last busy interval, or the next
//!   one when that interval still carries the burst's tail (above [`TAIL_LEVEL`]), with the quiet intervals
//!   that follow it. Edges are on samples, so per-step byte counts are exact counter differences.
//! - **Steps are the period, not the bursts**: the step's gap (compute between one step's communication and
//!   the next) is the longest quiet of each period; its typical length is the median over the window's
//!   periods. From one edge, the next is the candidate with the longest quiet between [`NEAR_LO`] and
//!   [`NEAR_HI`] periods later whose quiet is at least [`GAP_SHARE`] of that typical gap (a dip inside a
//!   collective is shorter); else the first such candidate between half a period and one and a half; else
//!   the candidate with the longest quiet there; else, with none (communication filling the
//!   whole step), the sample nearest one period on, at half the confidence, as long as the node moved traffic
//!   in that period (a job that paused or ended gets no made-up steps). An edge is decided once the
//!   samples reach one and a half periods past the previous one, so a step appears about half a period after
//!   its end. The first edge is the candidate with the longest quiet in the period and a half from the
//!   window's first candidate (or the first after the last step given out).
//!   No step starts before the end of the last step given out, so a sequence found anew (after a spell
//!   without periodicity) never repeats a step.
//!   Confidence = strength × how close the step's duration is to the period (1 at the period, 0 at ±100%).
//!
//! No steps while the traffic swings less than [`MIN_SWING_BYTES_PER_SECOND`] (an idle node) or less than
//! [`MIN_SWING_SHARE`] of its highest rate (a steady stream with a ripple), while the
//! strength is below [`MIN_STRENGTH`], or before [`MIN_POINTS`] samples are held; the sequence restarts
//! (no step spans a quiet spell) when periodicity is lost.

use std::borrow::Cow;
use std::collections::VecDeque;

/// Traffic history kept per node, ns.
pub const WINDOW_NS: i64 = 30_000_000_000;
/// Samples needed before a period is estimated (6 s at 20 Hz).
pub const MIN_POINTS: usize = 120;
/// Shortest period considered, in sampling intervals.
pub const MIN_LAG: usize = 2;
/// A shorter lag's peak counts as the period when it reaches this share of the highest peak.
pub const PEAK_SHARE: f64 = 0.8;
/// Each of the two lags of a split peak reaches this share of the highest peak ([`split_peak`]).
pub const SPLIT_SHARE: f64 = 0.3;
/// Weakest periodicity that yields steps.
pub const MIN_STRENGTH: f64 = 0.3;
/// Smallest swing of the total rate (high − low) that can be a communication burst, bytes/s: 40 Mbit/s, so
/// that a job on a 100 Mbit/s management link still has steps, while the agents' own batches (tens of kB a
/// quarter second) do not make an idle node's.
pub const MIN_SWING_BYTES_PER_SECOND: f64 = 5e6;
/// Smallest swing as a share of the highest rate: a steady stream with a ripple has no steps.
pub const MIN_SWING_SHARE: f64 = 0.25;
/// Busy threshold, as a share of the swing above the low rate.
pub const BUSY_LEVEL: f64 = 0.05;
/// Share of the typical gap between steps a quiet must last to end a step.
pub const GAP_SHARE: f64 = 0.5;
/// Span after an edge, in periods, in which the next edge is sought (half a period either side of one).
pub const SEEK_LO: f64 = 0.5;
pub const SEEK_HI: f64 = 1.5;
/// Span after an edge, in periods, where the next edge is sought first (the step's own jitter).
pub const NEAR_LO: f64 = 0.7;
/// Seen edges whose spacing refines the period.
pub const REFINE_EDGES: usize = 9;
/// Most a seen edge spacing may differ from their median for the median to refine the period.
pub const SAME_SPACING: f64 = 0.3;
pub const NEAR_HI: f64 = 1.3;
/// A burst's last partly busy interval (its tail: the burst ended just after a sample) belongs to the burst
/// when its rate is above `low + TAIL_LEVEL × (high − low)`, so the edge falls after all of the burst's bytes.
/// A tail below it goes to the next step: at most `TAIL_LEVEL` of one interval at the highest rate, so at most
/// 1 % of the bytes of a burst that fills an interval (at 2 % the per-step bytes' error reached the 2 % goal).
pub const TAIL_LEVEL: f64 = 0.01;
/// Percentile of the interval rates taken as the quiet ("low") level: low enough that a node whose
/// communication fills 85 % of the step still has its quiet level there.
pub const LOW_PERCENTILE: f64 = 5.0;
/// The period is re-estimated at most this often (ns of sample time).
pub const REESTIMATE_NS: i64 = 2_000_000_000;
/// Least mean difference between the bytes of neighbouring spans of one period, as a share of a span's mean
/// bytes, for the period to be half the step ([`repeats_at_double`]).
pub const ALTERNATION: f64 = 0.4;
/// Least share of neighbouring spans' differences that change sign from one to the next (high, low, high…).
pub const ALTERNATING_TURNS: f64 = 0.8;
/// A weak estimate keeps the period followed so far while an edge was seen in the traffic this recently (ns).
pub const HOLD_NS: i64 = 4_000_000_000;
/// ... once this many edges in a row were seen (a period that the traffic has borne out, not a first guess).
pub const HOLD_EDGES: usize = 5;
/// Once a period is known it is re-estimated on the newest this many periods of traffic, ...
pub const ESTIMATE_PERIODS: f64 = 12.0;
/// ... and at least this much of it (ns).
pub const ESTIMATE_MIN_NS: i64 = 8_000_000_000;
/// A job much faster than its period (a fault over, after steps many times as long) is seen on the newest
/// this much traffic alone (ns): the [`ESTIMATE_PERIODS`] of the old pace would hold it for the whole window.
pub const SPEEDUP_SPAN_NS: i64 = 4_000_000_000;
/// ... as a period at most this share of the one followed (under a half: a period and its half are the
/// ambiguity [`ALTERNATION`] settles, not a change of pace), ...
pub const SPEEDUP_SHARE: f64 = 0.45;
/// ... at least this strong, ...
pub const SPEEDUP_STRENGTH: f64 = 0.5;
/// ... in two estimates in a row (one [`REESTIMATE_NS`] apart) within this share of each other.
pub const SPEEDUP_AGREE: f64 = 0.15;

/// A period estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeriodEstimate {
    pub period_s: f64,
    /// Autocorrelation at the period, 0..1.
    pub strength: f64,
}

/// The edges of one inferred step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InferredStep {
    pub start_unix_ns: i64,
    pub end_unix_ns: i64,
    pub confidence: f64,
}

/// Autocorrelation period of evenly spaced `rates` (interval `dt_s`). `None` without a clear peak.
pub fn estimate_period(rates: &[f64], dt_s: f64) -> Option<PeriodEstimate> {
    let n = rates.len();
    let max_lag = n / 3;
    if max_lag < MIN_LAG + 2 || dt_s <= 0.0 {
        return None;
    }
    let mean = rates.iter().sum::<f64>() / n as f64;
    let x: Vec<f64> = rates.iter().map(|r| r - mean).collect();
    let var = x.iter().map(|v| v * v).sum::<f64>() / n as f64;
    if var <= 0.0 {
        return None;
    }
    let ac: Vec<f64> = (0..=max_lag + 1)
        .map(|lag| {
            if lag == 0 {
                return 1.0;
            }
            let m = n - lag;
            let s: f64 = x[..m].iter().zip(&x[lag..]).map(|(a, b)| a * b).sum();
            s / (m as f64 * var)
        })
        .collect();
    // Below the first fall below zero the autocorrelation only measures smoothness (see the module docs).
    let first_negative = (1..=max_lag).find(|&l| ac[l] <= 0.0)?;
    let peaks: Vec<usize> = (MIN_LAG.max(first_negative)..=max_lag)
        .filter(|&l| ac[l] > ac[l - 1] && ac[l] >= ac[l + 1] && ac[l] > 0.0)
        .collect();
    let best = peaks.iter().map(|&l| ac[l]).fold(0.0, f64::max);
    let lag = *peaks.iter().find(|&&l| ac[l] >= PEAK_SHARE * best)?;
    let (a, b, c) = (ac[lag - 1], ac[lag], ac[lag + 1]);
    let denom = a - 2.0 * b + c;
    let delta = if denom < 0.0 {
        (0.5 * (a - c) / denom).clamp(-0.5, 0.5)
    } else {
        0.0
    };
    let lags = lag as f64 + delta;
    // A period that is not a whole number of samples splits its peak over two lags, each below the share,
    // while its double lands on one: the step would read twice as long (a 329 ms step sampled every 50 ms
    // read as 658 ms). A split peak at a third or a half of the lag found is the period.
    let k = [3usize, 2]
        .into_iter()
        .find(|&k| split_peak(&ac, lags / k as f64, first_negative, b))
        .unwrap_or(1);
    Some(PeriodEstimate {
        period_s: lags / k as f64 * dt_s,
        strength: b.clamp(0.0, 1.0),
    })
}

/// Whether the autocorrelation `ac` has a peak split over the two lags around `sub` (a fractional lag): the
/// pair stands above its neighbours, each of the two reaches [`SPLIT_SHARE`] of `best` and together they
/// reach [`PEAK_SHARE`] of it.
fn split_peak(ac: &[f64], sub: f64, first_negative: usize, best: f64) -> bool {
    let lo = sub.floor() as usize;
    if lo < MIN_LAG.max(first_negative) || lo + 2 >= ac.len() || best <= 0.0 {
        return false;
    }
    let (x, y) = (ac[lo], ac[lo + 1]);
    let top = x.max(y);
    x.min(y) >= SPLIT_SHARE * best
        && x + y >= PEAK_SHARE * best
        && ac[lo - 1] < top
        && ac[lo + 2] < top
}

/// The `p`th percentile of `v` by a sort of a copy: what [`RankBand`] and [`percentile_in_place`] are
/// tested against.
#[cfg(test)]
fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    percentile_of_sorted(&s, p)
}

/// The `p`th percentile of `v` by selection, in place (`v` left in no particular order): the element a sort would
/// put at the nearest rank, the same value bit for bit, without a copy or a sort.
fn percentile_in_place(v: &mut [f64], p: f64) -> f64 {
    let i = ((p / 100.0) * (v.len().saturating_sub(1)) as f64).round() as usize;
    if i >= v.len() {
        return 0.0;
    }
    *v.select_nth_unstable_by(i, f64::total_cmp).1
}

/// The `p`th percentile of `sorted` (in [`f64::total_cmp`]'s order): the value at the nearest rank (0 when
/// empty).
#[cfg(test)]
fn percentile_of_sorted(sorted: &[f64], p: f64) -> f64 {
    let i = ((p / 100.0) * (sorted.len().saturating_sub(1)) as f64).round() as usize;
    sorted.get(i).copied().unwrap_or(0.0)
}

/// Values in [`f64::total_cmp`]'s order, of which a band of consecutive ranks is kept sorted as values come
/// and go, with the counts below and above it, so that a window's percentile is read without sorting the
/// window: an insertion or a removal moves at most the band (a few dozen values) and counts the others.
/// (All of a node's ~600 intervals were kept sorted before: each point moved kilobytes in two orders, a
/// tenth of the engine's time.) A read outside the band rebuilds it around the rank read from the
/// window's values (a selection, linear); the ranks read (the 5th percentile, the median) move by about a
/// rank per value, so a rebuild is rare. The order is the sort's, so a percentile is the same value bit for
/// bit.
#[derive(Debug, Default, Clone)]
struct RankBand {
    /// The values of ranks `below..below + band.len()`, in order.
    band: Vec<f64>,
    /// How many values rank below the band (each at most its first) and above it (each at least its last).
    below: usize,
    above: usize,
    /// The band no longer stands for the values (it emptied while others remained): rebuilt at the next
    /// read.
    stale: bool,
    /// The rank read last: the band is cut back on its other side.
    target: usize,
}

/// The larger of `a` and `b` in [`f64::total_cmp`]'s order.
fn max_total(a: f64, b: f64) -> f64 {
    if b.total_cmp(&a).is_gt() {
        b
    } else {
        a
    }
}

/// Ranks a rebuilt band holds on either side of the rank read.
const BAND_HALF: usize = 24;
/// Most values a band holds: beyond it, one leaves it on the side away from the rank read.
const BAND_MAX: usize = 4 * BAND_HALF;

impl RankBand {
    fn insert(&mut self, v: f64) {
        if self.stale {
            return;
        }
        let (Some(&lo), Some(&hi)) = (self.band.first(), self.band.last()) else {
            if self.below + self.above == 0 {
                self.band.push(v);
            } else {
                self.stale = true;
            }
            return;
        };
        if v.total_cmp(&lo).is_lt() {
            self.below += 1;
        } else if v.total_cmp(&hi).is_gt() {
            self.above += 1;
        } else {
            let i = self.band.partition_point(|x| x.total_cmp(&v).is_le());
            self.band.insert(i, v);
            if self.band.len() > BAND_MAX {
                if self.target >= self.below + self.band.len() / 2 {
                    self.band.remove(0);
                    self.below += 1;
                } else {
                    self.band.pop();
                    self.above += 1;
                }
            }
        }
    }

    /// Removes one value equal to `v` (bit for bit), which the values must hold.
    fn remove(&mut self, v: f64) {
        if self.stale {
            return;
        }
        let (Some(&lo), Some(&hi)) = (self.band.first(), self.band.last()) else {
            self.stale = self.below + self.above > 0;
            return;
        };
        let counted = if v.total_cmp(&lo).is_lt() {
            &mut self.below
        } else if v.total_cmp(&hi).is_gt() {
            &mut self.above
        } else {
            let i = self.band.partition_point(|x| x.total_cmp(&v).is_lt());
            if self.band.get(i).is_some_and(|x| x.total_cmp(&v).is_eq()) {
                self.band.remove(i);
            } else {
                self.stale = true;
            }
            self.stale |= self.band.is_empty() && self.below + self.above > 0;
            return;
        };
        match counted.checked_sub(1) {
            Some(c) => *counted = c,
            None => self.stale = true,
        }
    }

    /// The `p`th percentile of the `n` values (as [`percentile_in_place`] gives it), rebuilding the band from
    /// `values` (all of them) when it does not hold that rank; `scratch` is a buffer kept by the caller.
    fn percentile(
        &mut self,
        p: f64,
        n: usize,
        values: impl Iterator<Item = f64>,
        scratch: &mut Vec<f64>,
    ) -> f64 {
        let i = ((p / 100.0) * (n.saturating_sub(1)) as f64).round() as usize;
        if i >= n {
            return 0.0;
        }
        self.target = i;
        let held = !self.stale
            && self.below + self.band.len() + self.above == n
            && i >= self.below
            && i < self.below + self.band.len();
        if !held {
            self.rebuild(values, i, scratch);
        }
        self.band
            .get(i.wrapping_sub(self.below))
            .copied()
            .unwrap_or(0.0)
    }

    /// The band of the ranks around `rank` of `values`.
    fn rebuild(&mut self, values: impl Iterator<Item = f64>, rank: usize, scratch: &mut Vec<f64>) {
        scratch.clear();
        scratch.extend(values);
        let n = scratch.len();
        let lo = rank.saturating_sub(BAND_HALF).min(n);
        let hi = (rank + BAND_HALF + 1).min(n).max(lo);
        // Ranks `lo..hi` into `scratch[lo..hi]`, in no order, then sorted.
        if lo > 0 && lo < n {
            scratch.select_nth_unstable_by(lo, f64::total_cmp);
        }
        if hi > lo && hi < n {
            scratch[lo..].select_nth_unstable_by(hi - lo, f64::total_cmp);
        }
        scratch[lo..hi].sort_unstable_by(f64::total_cmp);
        self.band.clear();
        self.band.extend_from_slice(&scratch[lo..hi]);
        (self.below, self.above, self.stale) = (lo, n - hi, false);
    }
}

/// A node's traffic window: its points, their interval rates, and the rates and intervals in order, kept as
/// points come and go ([`Window::push`], [`Window::trim`]), so that a pass reads the window's levels without
/// copying, re-deriving or sorting the whole window (the same values as [`interval_rates`] and
/// a sort over it).
#[derive(Debug, Default)]
struct Window {
    /// `(timestamp_ns, cumulative bytes)`, oldest first, strictly increasing times.
    points: VecDeque<(i64, f64)>,
    /// `rates[i]`: the rate of the interval from `points[i]` to `points[i + 1]` ([`interval_rate`]), bytes/s.
    rates: VecDeque<f64>,
    /// The rates, in order (about the low percentile's rank), and the highest (`None`: to be found again).
    by_rate: RankBand,
    high: Option<f64>,
    /// The intervals' lengths (s), in order (about the median's rank).
    by_interval: RankBand,
    scratch: Vec<f64>,
}

impl Window {
    fn newest_ns(&self) -> i64 {
        self.points.back().map_or(0, |p| p.0)
    }

    /// Appends `p` when it is newer than the newest point held (else ignores it).
    fn push(&mut self, p: (i64, f64)) {
        if p.0 <= self.newest_ns() {
            return;
        }
        if let Some(&last) = self.points.back() {
            let (rate, dt) = interval_rate(last, p);
            if self.rates.is_empty() {
                self.high = Some(rate);
            }
            self.high = self.high.map(|h| max_total(h, rate));
            self.rates.push_back(rate);
            self.by_rate.insert(rate);
            self.by_interval.insert(dt);
        }
        self.points.push_back(p);
    }

    /// Drops the points older than `span_ns` before the newest, with their intervals.
    fn trim(&mut self, span_ns: i64) {
        let horizon = self.newest_ns() - span_ns;
        while self.points.front().is_some_and(|p| p.0 < horizon) {
            let Some(first) = self.points.pop_front() else {
                break;
            };
            if let (Some(&next), Some(rate)) = (self.points.front(), self.rates.pop_front()) {
                self.by_rate.remove(rate);
                self.by_interval.remove(interval_rate(first, next).1);
                if self.high.is_some_and(|h| h.total_cmp(&rate).is_eq()) {
                    self.high = None;
                }
            }
        }
    }

    /// `(low, high, dt)`: the [`LOW_PERCENTILE`]th percentile and the highest of the interval rates (bytes/s),
    /// and the median interval (s), as a sort and a fold from 0 give them over [`interval_rates`].
    fn levels(&mut self) -> (f64, f64, f64) {
        let n = self.rates.len();
        let low = self.by_rate.percentile(
            LOW_PERCENTILE,
            n,
            self.rates.iter().copied(),
            &mut self.scratch,
        );
        let pts = &self.points;
        let dts = pts.iter().zip(pts.iter().skip(1));
        let dt = self.by_interval.percentile(
            50.0,
            n,
            dts.map(|(&a, &b)| interval_rate(a, b).1),
            &mut self.scratch,
        );
        let rates = self.rates.iter().copied();
        let high = *self
            .high
            .get_or_insert_with(|| rates.reduce(max_total).unwrap_or(0.0));
        (low, if n == 0 { 0.0 } else { high.max(0.0) }, dt)
    }
}

/// The ends of the busy runs in `busy`: `(i, quiet)` for each interval `i` that is busy and followed by a
/// quiet one, with the number of quiet intervals that follow it (to the end of `busy` when still quiet).
pub fn quiet_after(busy: &[bool]) -> Vec<(usize, usize)> {
    // At most one run end per two intervals; sized for a few dozen (a window's steps) so that it grows
    // seldom.
    let mut out = Vec::with_capacity((busy.len() / 2).min(64));
    let mut i = 0;
    while i + 1 < busy.len() {
        if busy[i] && !busy[i + 1] {
            let quiet = busy[i + 1..].iter().take_while(|b| !**b).count();
            out.push((i, quiet));
            i += quiet;
        } else {
            i += 1;
        }
    }
    out
}

/// A candidate edge: a sample time and the quiet intervals after it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate {
    pub(super) t: i64,
    pub(super) quiet: usize,
}

/// A node's traffic levels over its window, as the last inference pass read them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Levels {
    /// The quiet rate ([`LOW_PERCENTILE`]th percentile of the interval rates), bytes/s.
    pub low: f64,
    /// The highest interval rate, bytes/s.
    pub high: f64,
    /// The median sampling interval, ns.
    pub interval_ns: i64,
}

/// The typical gap between steps, in intervals: the median over the window's consecutive spans of one period
/// of the longest quiet that starts in each (0 without candidates).
fn typical_gap(cands: &[Candidate], p_ns: i64) -> usize {
    let (Some(first), Some(last)) = (cands.first(), cands.last()) else {
        return 0;
    };
    // One per span of the period.
    let spans = (last.t - first.t) / p_ns.max(1) + 1;
    let mut longest: Vec<usize> = Vec::with_capacity(usize::try_from(spans).unwrap_or(0).min(1024));
    let mut from = first.t;
    // The candidates are in time order: each span's are the stretch after the previous span's.
    let mut rest = cands;
    while from <= last.t {
        let skip = rest.partition_point(|c| c.t < from);
        rest = &rest[skip..];
        let n = rest.partition_point(|c| c.t < from + p_ns);
        if let Some(q) = rest[..n].iter().map(|c| c.quiet).max() {
            longest.push(q);
        }
        rest = &rest[n..];
        from += p_ns;
    }
    longest.sort_unstable();
    longest.get(longest.len() / 2).copied().unwrap_or(0)
}

/// The earliest edge at or after `from` that leads to `anchor` one period at a time: from the anchor back, while
/// a quiet that looks like the step's gap (at least [`GAP_SHARE`] of the typical `gap`, intervals) ends a burst
/// between [`NEAR_LO`] and [`NEAR_HI`] periods (`p_ns`) earlier, the longest such. The anchor is the longest
/// quiet of its span, not the first edge: without this walk a job's first steps before it would be lost.
fn earliest_edge(cands: &[Candidate], anchor: i64, from: i64, p_ns: i64, gap: usize) -> i64 {
    let min_quiet = ((GAP_SHARE * gap as f64).ceil() as usize).max(1);
    let mut edge = anchor;
    while let Some(c) = cands
        .iter()
        .filter(|c| c.t >= from && c.quiet >= min_quiet)
        .filter(|c| {
            c.t >= edge - (NEAR_HI * p_ns as f64) as i64
                && c.t <= edge - (NEAR_LO * p_ns as f64) as i64
        })
        .max_by_key(|c| c.quiet)
    {
        edge = c.t;
    }
    edge
}

/// The next edge after `prev` for period `p_ns` and typical gap `gap` (see the module docs), and whether it was
/// seen (`false`: predicted). With `gaps_only` (a period held through a weak estimate), a quiet shorter than the
/// step's gap is never an edge: the edge is predicted instead.
fn next_edge(
    cands: &[Candidate],
    pts: &[(i64, f64)],
    prev: i64,
    (p_ns, gap, gaps_only): (i64, usize, bool),
) -> (i64, bool) {
    let target = prev + p_ns;
    let (lo, hi) = (
        prev + (SEEK_LO * p_ns as f64) as i64,
        prev + (SEEK_HI * p_ns as f64) as i64,
    );
    // The candidates are in time order: those in `(lo, hi]` are one stretch of them.
    let span = &cands[cands.partition_point(|c| c.t <= lo)..cands.partition_point(|c| c.t <= hi)];
    let in_span = || span.iter();
    let longest = |a: &&Candidate, b: &&Candidate| {
        a.quiet
            .cmp(&b.quiet)
            .then_with(|| (b.t - target).abs().cmp(&(a.t - target).abs()))
    };
    let min_quiet = ((GAP_SHARE * gap as f64).ceil() as usize).max(1);
    // Near one period: the longest quiet that looks like the step's gap.
    let (near_lo, near_hi) = (
        prev + (NEAR_LO * p_ns as f64) as i64,
        prev + (NEAR_HI * p_ns as f64) as i64,
    );
    if let Some(c) = in_span()
        .filter(|c| c.t > near_lo && c.t <= near_hi && c.quiet >= min_quiet)
        .max_by(longest)
    {
        return (c.t, true);
    }
    // A step far from the period: the first such gap.
    if let Some(c) = in_span().find(|c| c.quiet >= min_quiet) {
        return (c.t, true);
    }
    let best = in_span().filter(|_| !gaps_only).max_by(longest);
    match best {
        Some(c) => (c.t, true),
        None => {
            let nearest = pts
                .iter()
                .map(|p| p.0)
                .filter(|&t| t > prev)
                .min_by_key(|&t| (t - target).abs())
                .unwrap_or(target);
            (nearest, false)
        }
    }
}

/// Inference state of one node.
#[derive(Debug, Default)]
pub struct InferenceTracker {
    /// The traffic of the last [`WINDOW_NS`], its interval rates and their order.
    window: Window,
    period: Option<PeriodEstimate>,
    estimated_at: i64,
    last_edge: Option<i64>,
    /// End of the last step given out: no step starts before it.
    given_until: i64,
    /// The newest edges seen in the traffic (not predicted), at most [`REFINE_EDGES`], for the period's
    /// refinement.
    seen_edges: VecDeque<i64>,
    /// The window's levels at the last pass that found it swinging.
    levels: Option<Levels>,
    /// Whether the period is held through a weak estimate ([`Self::hold`]): only the step's gaps are edges.
    held: bool,
    /// The faster period the newest traffic showed at the last estimate ([`Self::sped_up`]), to be confirmed.
    faster: Option<f64>,
}

/// What [`InferenceTracker::follow`] reads of a pass: the window's points, which intervals are busy, the
/// candidate edges, the estimate followed and its period (ns), and the typical gap (intervals).
struct Pass<'a> {
    pts: &'a [(i64, f64)],
    active: &'a [bool],
    cands: &'a [Candidate],
    est: PeriodEstimate,
    p_ns: i64,
    gap: usize,
}

impl InferenceTracker {
    /// Time of the newest point held (0 when none).
    pub fn newest_ns(&self) -> i64 {
        self.window.newest_ns()
    }

    /// Whether the tracker follows a step sequence (an edge found, periodicity not lost since).
    pub fn following(&self) -> bool {
        self.last_edge.is_some()
    }

    /// The current period estimate, when the node's traffic is periodic.
    pub fn period(&self) -> Option<PeriodEstimate> {
        self.period
    }

    /// Appends points newer than the newest held (older ones are ignored) and trims to the window.
    pub fn extend(&mut self, points: impl IntoIterator<Item = (i64, f64)>) {
        for p in points {
            self.window.push(p);
        }
        self.window.trim(WINDOW_NS);
    }

    /// Finds the steps completed by the points added since the last call. The window's rates and levels are
    /// kept as points come ([`Window`]); what a pass still reads whole is the window's activity and candidate
    /// edges (their levels move with every point), and every [`REESTIMATE_NS`] the period's autocorrelation.
    pub fn steps(&mut self) -> Vec<InferredStep> {
        let mut window = std::mem::take(&mut self.window);
        let out = self.steps_in(&mut window);
        self.window = window;
        out
    }

    /// [`Self::steps`] on `w`, the tracker's window lent to it.
    fn steps_in(&mut self, w: &mut Window) -> Vec<InferredStep> {
        if w.points.len() < MIN_POINTS {
            return Vec::new();
        }
        let (low, high, dt) = w.levels();
        let pts: &[(i64, f64)] = w.points.make_contiguous();
        let rates: &[f64] = w.rates.make_contiguous();
        let newest = pts[pts.len() - 1].0;
        if high - low < MIN_SWING_BYTES_PER_SECOND || high - low < MIN_SWING_SHARE * high {
            self.lose_periodicity();
            return Vec::new();
        }
        self.levels = Some(Levels {
            low,
            high,
            interval_ns: (dt * 1e9) as i64,
        });
        let mut active = None;
        if self.period.is_none() || newest - self.estimated_at >= REESTIMATE_NS {
            let a = active.insert(busy(rates, low, high));
            self.estimate((pts, rates, a), dt, newest);
        }
        let Some(est) = self.period.filter(|p| p.strength >= MIN_STRENGTH) else {
            self.lose_periodicity();
            return Vec::new();
        };
        let p_ns = (est.period_s * 1e9) as i64;
        if p_ns <= 0 {
            return Vec::new();
        }
        let first = pts[0].0;
        // Following an edge the points do not reach a period and a half past yet: no step completes, and the
        // pass would leave the tracker as it is but for the period's refinement ([`Self::follow`]), so the
        // window's activity and candidate edges are not read (the passes inside a step longer than a pass).
        if let Some(prev) = self.last_edge.filter(|&e| e >= first) {
            if newest < prev + (SEEK_HI * p_ns as f64) as i64 {
                self.refine(est);
                return Vec::new();
            }
        }
        let active = active.unwrap_or_else(|| busy(rates, low, high));
        let cands = candidates_of(pts, rates, &active, low, high);
        let gap = typical_gap(&cands, p_ns);
        let prev = match self.last_edge.filter(|&e| e >= first) {
            Some(e) => e,
            None => match self.first_edge(&cands, first, newest, p_ns, gap) {
                Some(e) => e,
                None => return Vec::new(),
            },
        };
        let pass = Pass {
            pts,
            active: &active,
            cands: &cands,
            est,
            p_ns,
            gap,
        };
        self.follow(&pass, prev, newest)
    }

    /// Estimates the period anew from the window's points, rates and activity (`dt`: the median interval, s;
    /// `newest`: the newest point's time, ns).
    fn estimate(
        &mut self,
        (pts, rates, active): (&[(i64, f64)], &[f64], &[bool]),
        dt: f64,
        newest: i64,
    ) {
        // Once a period is known, on the newest traffic only (a job whose steps changed speed is followed
        // within about [`ESTIMATE_PERIODS`] steps); the whole window where that span says nothing.
        let recent = self.period.and_then(|p| {
            let span = ((ESTIMATE_PERIODS * p.period_s * 1e9) as i64).max(ESTIMATE_MIN_NS);
            let from = pts.partition_point(|x| x.0 < newest - span);
            (from > 0).then(|| {
                let f = from.min(active.len());
                period_of_activity(&active[f..], &rates[f..], dt)
            })?
        });
        let fresh = recent.or_else(|| period_of_activity(active, rates, dt));
        self.period = self.hold(fresh, newest);
        self.held = self.period != fresh;
        let from = pts.partition_point(|x| x.0 < newest - SPEEDUP_SPAN_NS);
        if let Some(f) = self.sped_up(
            &active[from.min(active.len())..],
            &rates[from.min(rates.len())..],
            dt,
        ) {
            self.period = Some(f);
            self.held = false;
            self.seen_edges.clear();
        }
        self.estimated_at = newest;
    }

    /// The first edge of a new sequence: the longest quiet in the period and a half from the window's first
    /// candidate (an edge may fall just after the first period), once two periods are held, walked back to the
    /// earliest edge leading to it ([`earliest_edge`]). From the first candidate: the window may open on a
    /// spell without traffic (before the job). `None` while there is none.
    fn first_edge(
        &self,
        cands: &[Candidate],
        first: i64,
        newest: i64,
        p_ns: i64,
        gap: usize,
    ) -> Option<i64> {
        let from = cands
            .iter()
            .map(|c| c.t)
            .find(|&t| t >= first.max(self.given_until))?;
        if newest < from + 2 * p_ns {
            return None;
        }
        let anchor = cands
            .iter()
            .filter(|c| c.t >= from && c.t < from + p_ns + p_ns / 2)
            .max_by_key(|c| c.quiet)?;
        Some(earliest_edge(cands, anchor.t, from, p_ns, gap))
    }

    /// The steps from the edge `prev` on, one edge at a time while the points (up to `newest`) reach a period
    /// and a half past it (see the module docs).
    fn follow(&mut self, pass: &Pass<'_>, mut prev: i64, newest: i64) -> Vec<InferredStep> {
        let (est, p_ns) = (pass.est, pass.p_ns);
        let mut out = Vec::new();
        let mut paused = false;
        while newest >= prev + (SEEK_HI * p_ns as f64) as i64 {
            let (e, seen) = next_edge(pass.cands, pass.pts, prev, (p_ns, pass.gap, self.held));
            if e <= prev {
                break;
            }
            if !seen && !busy_between(pass.pts, pass.active, prev, e) {
                // No traffic for a whole period: the job paused or ended; no step is made up.
                paused = true;
                break;
            }
            let d = (e - prev) as f64 / 1e9;
            let regular = (1.0 - (d / est.period_s - 1.0).abs()).clamp(0.0, 1.0);
            let seen_share = if seen { 1.0 } else { 0.5 };
            if seen {
                self.seen_edges.push_back(e);
                if self.seen_edges.len() > REFINE_EDGES {
                    self.seen_edges.pop_front();
                }
            } else {
                self.seen_edges.clear();
            }
            out.push(InferredStep {
                start_unix_ns: prev,
                end_unix_ns: e,
                confidence: (est.strength * regular * seen_share).clamp(0.0, 1.0),
            });
            prev = e;
        }
        self.last_edge = (!paused).then_some(prev);
        self.refine(est);
        if let Some(last) = out.last() {
            self.given_until = last.end_unix_ns;
        }
        out
    }

    /// Refines the period by the mean spacing of the consecutive seen edges, when every spacing is within
    /// [`SAME_SPACING`] of their median (the autocorrelation's lag is a whole number of samples, and smears when the
    /// job's own steps vary).
    fn refine(&mut self, est: PeriodEstimate) {
        let e = &self.seen_edges;
        if e.len() < REFINE_EDGES {
            return;
        }
        let mut d: Vec<f64> = e
            .iter()
            .zip(e.iter().skip(1))
            .map(|(a, b)| (b - a) as f64 / 1e9)
            .collect();
        d.sort_by(f64::total_cmp);
        let m = d[d.len() / 2];
        if d.iter().all(|x| (x / m - 1.0).abs() <= SAME_SPACING) {
            // Regular: their mean, finer than any one spacing on its samples.
            self.period = Some(PeriodEstimate {
                period_s: d.iter().sum::<f64>() / d.len() as f64,
                strength: est.strength,
            });
        }
    }

    /// The window's levels at the last pass that found it swinging.
    pub fn levels(&self) -> Option<Levels> {
        self.levels
    }

    /// The points held from `from` to `to` (ns, inclusive), `None` when the window does not reach past `to`:
    /// borrowed from the window where they lie in one piece of it (as after a pass, [`Self::steps`]), else
    /// copied.
    pub fn points_between(&self, from: i64, to: i64) -> Option<Cow<'_, [(i64, f64)]>> {
        let points = &self.window.points;
        let a = points.partition_point(|p| p.0 < from);
        let b = points.partition_point(|p| p.0 <= to);
        if b >= points.len() {
            return None;
        }
        let (front, back) = points.as_slices();
        Some(if b <= front.len() {
            Cow::Borrowed(&front[a..b])
        } else if a >= front.len() {
            Cow::Borrowed(&back[a - front.len()..b - front.len()])
        } else {
            Cow::Owned(points.range(a..b).copied().collect())
        })
    }

    /// The `fresh` estimate, or the period followed so far where `fresh` is weak or none while the traffic
    /// still shows the step's gaps (the last [`HOLD_EDGES`] edges seen in the traffic, the newest within
    /// [`HOLD_NS`] of `newest`), at [`MIN_STRENGTH`]: steps
    /// made uneven by a fault (a lossy link's retransmission stalls) blur the autocorrelation, not the gaps
    /// between them.
    fn hold(&self, fresh: Option<PeriodEstimate>, newest: i64) -> Option<PeriodEstimate> {
        let weak = fresh.is_none_or(|f| f.strength < MIN_STRENGTH);
        let gaps_seen = self.seen_edges.len() >= HOLD_EDGES
            && self
                .seen_edges
                .back()
                .is_some_and(|&e| newest - e <= HOLD_NS);
        match self.period {
            Some(old) if weak && gaps_seen && self.last_edge.is_some() => Some(PeriodEstimate {
                period_s: old.period_s,
                strength: MIN_STRENGTH,
            }),
            _ => fresh,
        }
    }

    /// The newest traffic's period (`active` and `rates` of the newest [`SPEEDUP_SPAN_NS`]) when the job runs
    /// much faster than the period followed: strong, at most [`SPEEDUP_SHARE`] of it, and so at the last
    /// estimate too. After a straggler or a slow link is gone the job's steps can be a seventh as long, and
    /// the estimate on [`ESTIMATE_PERIODS`] of the old ones would cut several steps as one until the old
    /// traffic left the window.
    fn sped_up(&mut self, active: &[bool], rates: &[f64], dt: f64) -> Option<PeriodEstimate> {
        let current = self.period?;
        let short = period_of_activity(active, rates, dt).filter(|e| {
            e.strength >= SPEEDUP_STRENGTH && e.period_s <= SPEEDUP_SHARE * current.period_s
        });
        let Some(e) = short else {
            self.faster = None;
            return None;
        };
        let agreed = self
            .faster
            .is_some_and(|p| (e.period_s / p - 1.0).abs() <= SPEEDUP_AGREE);
        self.faster = (!agreed).then_some(e.period_s);
        agreed.then_some(e)
    }

    /// Forgets the step sequence (no step spans a spell without periodicity).
    fn lose_periodicity(&mut self) {
        self.period = None;
        self.held = false;
        self.faster = None;
        self.seen_edges.clear();
        self.last_edge = None;
    }
}

/// The period of an activity sequence ([`busy`]) from its first busy interval (a quiet spell before the job
/// would dilute the autocorrelation: its strength grows only as the job fills the window), doubled where the
/// bytes of `rates` (the same intervals) alternate from one period to the next ([`repeats_at_double`]).
fn period_of_activity(active: &[bool], rates: &[f64], dt: f64) -> Option<PeriodEstimate> {
    let skip = active.iter().take_while(|b| !**b).count();
    let a: Vec<f64> = active[skip..]
        .iter()
        .map(|&b| if b { 1.0 } else { 0.0 })
        .collect();
    let est = estimate_period(&a, dt)?;
    let r = &rates[skip.min(rates.len())..];
    if repeats_at_double(r, est.period_s / dt) {
        return Some(PeriodEstimate {
            period_s: 2.0 * est.period_s,
            ..est
        });
    }
    Some(est)
}

/// Whether the bytes of `rates` (evenly spaced intervals) alternate from one span of `lag` intervals to the
/// next while every other span is alike: cut into consecutive spans of `lag` (fractional: the cumulative bytes
/// interpolated) from three phases, in the phase where they alternate most, the mean difference between
/// neighbouring spans is at least [`ALTERNATION`] of a span's mean bytes and at least twice the mean difference
/// between spans two apart, and the spans go high, low, high, low ([`ALTERNATING_TURNS`]). A collective
/// through one slow link comes in chunks whose gaps can be as long as the job's compute: its activity then
/// repeats at half the step while the two halves' bytes differ (6 and 19 MB, on the bed's OpenMPI rate cut).
/// Steps alike at `lag` hold alike bytes in every span; uneven ones (a lossy link's stalls) differ at random.
fn repeats_at_double(rates: &[f64], lag: f64) -> bool {
    if lag < MIN_LAG as f64 {
        return false;
    }
    let mut cum = Vec::with_capacity(rates.len() + 1);
    cum.push(0.0);
    for r in rates {
        cum.push(cum[cum.len() - 1] + r);
    }
    let at = |x: f64| {
        let i = (x.floor() as usize).min(cum.len() - 2);
        cum[i] + (cum[i + 1] - cum[i]) * (x - i as f64).clamp(0.0, 1.0)
    };
    let end = (cum.len() - 1) as f64;
    (0..3).any(|phase| {
        let mut spans = Vec::with_capacity((end / lag) as usize + 1);
        let mut x = lag * phase as f64 / 3.0;
        while x + lag <= end {
            spans.push(at(x + lag) - at(x));
            x += lag;
        }
        if spans.len() < 6 {
            return false;
        }
        let mean = spans.iter().sum::<f64>() / spans.len() as f64;
        let diff = |k: usize| {
            spans
                .windows(k + 1)
                .map(|w| (w[k] - w[0]).abs())
                .sum::<f64>()
                / (spans.len() - k) as f64
        };
        let (next, second) = (diff(1), diff(2));
        // High, low, high, low: the turns between neighbours alternate (uneven steps turn at random).
        let turns = spans
            .windows(3)
            .filter(|w| (w[1] - w[0]) * (w[2] - w[1]) < 0.0)
            .count();
        mean > 0.0
            && next >= ALTERNATION * mean
            && next >= 2.0 * second
            && turns as f64 >= ALTERNATING_TURNS * (spans.len() - 2) as f64
    })
}

/// Interval rates of cumulative `pts` (bytes/s; a counter going back counts as zero) and the median interval,
/// seconds.
pub(super) fn interval_rates(pts: &[(i64, f64)]) -> (Vec<f64>, f64) {
    let mut rates = Vec::with_capacity(pts.len().saturating_sub(1));
    let mut dts = Vec::with_capacity(pts.len().saturating_sub(1));
    for w in pts.windows(2) {
        let (rate, dt) = interval_rate(w[0], w[1]);
        dts.push(dt);
        rates.push(rate);
    }
    (rates, percentile_in_place(&mut dts, 50.0))
}

/// The rate (bytes/s; a counter going back counts as zero) and the length (s) of the interval from `a` to `b`,
/// cumulative `(timestamp_ns, bytes)` points.
fn interval_rate(a: (i64, f64), b: (i64, f64)) -> (f64, f64) {
    let dt = (b.0 - a.0) as f64 / 1e9;
    let rate = if dt > 0.0 {
        (b.1 - a.1).max(0.0) / dt
    } else {
        0.0
    };
    (rate, dt)
}

/// Whether any interval between `from` and `to` (sample times) is busy; `active[i]` is the interval ending at
/// `pts[i + 1]`.
fn busy_between(pts: &[(i64, f64)], active: &[bool], from: i64, to: i64) -> bool {
    active
        .iter()
        .zip(pts.iter().skip(1))
        .any(|(&b, &(t, _))| b && t > from && t <= to)
}

/// Whether each interval is busy (see the module docs).
pub(super) fn busy(rates: &[f64], low: f64, high: f64) -> Vec<bool> {
    let threshold = low + BUSY_LEVEL * (high - low);
    rates.iter().map(|&r| r > threshold).collect()
}

/// The candidate edges of `pts` (see the module docs), given the quiet (`low`) and highest rates.
pub(super) fn candidates(pts: &[(i64, f64)], rates: &[f64], low: f64, high: f64) -> Vec<Candidate> {
    candidates_of(pts, rates, &busy(rates, low, high), low, high)
}

/// [`candidates`] of `pts` whose intervals' activity `active` ([`busy`] at `low` and `high`) is known.
fn candidates_of(
    pts: &[(i64, f64)],
    rates: &[f64],
    active: &[bool],
    low: f64,
    high: f64,
) -> Vec<Candidate> {
    let tail = low + TAIL_LEVEL * (high - low);
    quiet_after(active)
        .into_iter()
        .map(|(i, quiet)| {
            // The burst's tail: its last partly busy interval belongs to it.
            if rates[i + 1] > tail {
                Candidate {
                    t: pts[i + 2].0,
                    quiet: quiet - 1,
                }
            } else {
                Candidate {
                    t: pts[i + 1].0,
                    quiet,
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    /// Cumulative traffic sampled every 50 ms: background `bg` B/s plus bursts of `rate` B/s for `burst_ms`
    /// every `period_ms` (burst starting at `offset_ms` into each period).
    fn traffic(
        n: usize,
        period_ms: f64,
        burst_ms: f64,
        offset_ms: f64,
        rate: f64,
        bg: f64,
    ) -> Vec<(i64, f64)> {
        let bytes_at = |t_ms: f64| {
            let k = (t_ms / period_ms).floor();
            let tau = t_ms - k * period_ms;
            let in_burst = (tau - offset_ms).clamp(0.0, burst_ms);
            (k * burst_ms + in_burst) / 1e3 * rate + t_ms / 1e3 * bg
        };
        (0..n)
            .map(|i| {
                let t = i as f64 * 50.0;
                (1_000_000 * MS + i as i64 * 50 * MS, bytes_at(t))
            })
            .collect()
    }

    #[test]
    fn period_of_long_bursts() {
        let mut tr = InferenceTracker::default();
        tr.extend(traffic(600, 643.571, 353.571, 290.0, 9.8e9, 3e6));
        let steps = tr.steps();
        let p = tr.period().expect("periodic");
        assert!((p.period_s / 0.643571 - 1.0).abs() < 0.005, "{p:?}");
        assert!(p.strength > 0.6, "{p:?}");
        assert!(steps.len() >= 40, "{}", steps.len());
        let mean = steps
            .iter()
            .map(|s| (s.end_unix_ns - s.start_unix_ns) as f64 / 1e9)
            .sum::<f64>()
            / steps.len() as f64;
        assert!((mean / 0.643571 - 1.0).abs() < 0.01, "{mean}");
        // Nothing new: no step twice.
        assert!(tr.steps().is_empty());
    }

    #[test]
    fn period_of_short_bursts() {
        let mut tr = InferenceTracker::default();
        tr.extend(traffic(600, 309.6875, 19.6875, 290.0, 8.0 * 22e9, 2e5));
        let steps = tr.steps();
        let p = tr.period().expect("periodic");
        // Within 2 % (a parabola through the peak at 50 ms lags; the goal for the period).
        assert!((p.period_s / 0.3096875 - 1.0).abs() < 0.02, "{p:?}");
        assert!(steps.len() >= 80, "{}", steps.len());
    }

    #[test]
    fn a_burst_s_small_tail_stays_in_its_step() {
        // Every other burst ends 0.3 ms after a sample: 1.5 % of its bytes fall into the next interval. Under
        // a tail level of 2 % of the swing that tail went to the next step (one step 1.5 % short, the next
        // 1.5 % long); it belongs to its burst's step.
        let (period_ms, burst_ms, rate, bg) = (300.0, 20.0, 2e10, 2e5);
        let offset = |k: f64| if k as i64 % 2 == 0 { 30.3 } else { 25.0 };
        let bytes_at = |t_ms: f64| {
            let done: f64 = (0..=(t_ms / period_ms) as i64)
                .map(|k| {
                    let start = k as f64 * period_ms + offset(k as f64);
                    (t_ms - start).clamp(0.0, burst_ms)
                })
                .sum();
            done / 1e3 * rate + t_ms / 1e3 * bg
        };
        let pts: Vec<(i64, f64)> = (0..900)
            .map(|i| (1_000_000 * MS + i * 50 * MS, bytes_at(i as f64 * 50.0)))
            .collect();
        let mut tr = InferenceTracker::default();
        tr.extend(pts.iter().copied());
        let steps = tr.steps();
        assert!(steps.len() >= 60, "{}", steps.len());
        let at = |t: i64| {
            pts.iter()
                .find(|p| p.0 == t)
                .map(|p| p.1)
                .expect("an edge is a sample")
        };
        let burst = burst_ms / 1e3 * rate;
        for s in &steps {
            let bytes = at(s.end_unix_ns) - at(s.start_unix_ns);
            let other = (s.end_unix_ns - s.start_unix_ns) as f64 / 1e9 * bg;
            let err = (bytes - other - burst).abs() / burst;
            assert!(
                err < 0.005,
                "{s:?}: {bytes} B, burst {burst} B: {:.3} %",
                err * 100.0
            );
        }
    }

    #[test]
    fn idle_and_constant_traffic_give_no_steps() {
        let mut tr = InferenceTracker::default();
        tr.extend((0..600).map(|i| (i as i64 * 50 * MS + 1, i as f64 * 50_000.0)));
        assert!(tr.steps().is_empty());
        assert_eq!(tr.period(), None);
        // Busy but flat (a constant stream with small jitter): no periodicity.
        let mut tr = InferenceTracker::default();
        let mut acc = 0.0;
        tr.extend((0..600).map(|i| {
            acc += 1e9 * 0.05 * (1.0 + 0.01 * ((i * 7919 % 13) as f64 - 6.0) / 6.0);
            (i as i64 * 50 * MS + 1, acc)
        }));
        assert!(tr.steps().is_empty());
    }

    #[test]
    fn the_window_s_kept_levels_are_those_of_the_whole_window() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(35);
        let mut w = Window::default();
        let (mut t, mut bytes) = (1_000 * MS, 0.0);
        for pass in 0..400 {
            // A pass's new points: jittered intervals, bursts, repeated rates, a counter going back, and
            // points not newer than the newest (ignored).
            for _ in 0..r.random_range(0..25) {
                t += r.random_range(-5..60) * MS;
                bytes += match r.random_range(0..6) {
                    0 => -1e6,
                    1 | 2 => 0.0,
                    3 => 5e4,
                    _ => r.random_range(0.0..2e9),
                };
                w.push((t, bytes));
            }
            w.trim(if pass % 50 < 25 {
                WINDOW_NS
            } else {
                2_000 * MS
            });
            let pts: Vec<(i64, f64)> = w.points.iter().copied().collect();
            assert!(pts.windows(2).all(|p| p[0].0 < p[1].0));
            let (rates, dt) = interval_rates(&pts);
            assert_eq!(w.rates.iter().copied().collect::<Vec<_>>(), rates);
            let (low, high, kept_dt) = w.levels();
            let mut dts: Vec<f64> = pts
                .windows(2)
                .map(|p| interval_rate(p[0], p[1]).1)
                .collect();
            assert_eq!(dt.to_bits(), percentile(&dts, 50.0).to_bits());
            for q in [0.0, 5.0, 50.0, 100.0] {
                let sorted = percentile(&rates, q);
                let mut copy = rates.clone();
                assert_eq!(
                    percentile_in_place(&mut copy, q).to_bits(),
                    sorted.to_bits()
                );
            }
            dts.clear();
            assert_eq!(percentile_in_place(&mut dts, 50.0), 0.0);
            let (a, b) = (
                r.random_range(-100..2_000) * MS + t - WINDOW_NS,
                t - r.random_range(0..3_000) * MS,
            );
            // The points between two times, borrowed or copied, as the window holds them.
            let tr = InferenceTracker {
                window: std::mem::take(&mut w),
                ..Default::default()
            };
            let between = tr.points_between(a, b).map(|c| c.into_owned());
            let want: Vec<(i64, f64)> = pts
                .iter()
                .copied()
                .filter(|p| p.0 >= a && p.0 <= b)
                .collect();
            let reaches = pts.iter().any(|p| p.0 > b);
            assert_eq!(between, reaches.then_some(want), "pass {pass}: [{a}, {b}]");
            w = tr.window;
            let whole = (
                percentile(&rates, LOW_PERCENTILE),
                rates.iter().copied().fold(0.0, f64::max),
                dt,
            );
            assert_eq!(
                (low.to_bits(), high.to_bits(), kept_dt.to_bits()),
                (whole.0.to_bits(), whole.1.to_bits(), whole.2.to_bits()),
                "pass {pass}: {:?} against {whole:?}",
                (low, high, kept_dt)
            );
        }
    }

    #[test]
    fn quiet_after_busy_runs() {
        let b = |s: &str| s.chars().map(|c| c == '#').collect::<Vec<_>>();
        assert_eq!(quiet_after(&b("..###...###...")), vec![(4, 3), (10, 3)]);
        assert_eq!(quiet_after(&b("..##.##.....")), vec![(3, 1), (6, 5)]);
        assert_eq!(quiet_after(&b("..###...###")), vec![(4, 3)]);
    }

    /// Cumulative traffic every 50 ms of a job whose steps are `period_ms` ± `jitter_ms` long and whose
    /// all-reduce fills `comm_share` of each step at `rate` B/s, with `dips` dips of 50–150 ms inside each
    /// all-reduce (a ring paced by one slow link), and the true step ends (ns).
    fn paced_traffic(
        seconds: f64,
        period_ms: f64,
        jitter_ms: f64,
        comm_share: f64,
        dips: usize,
        seed: u64,
    ) -> (Vec<(i64, f64)>, Vec<i64>) {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(seed);
        let rate = 24e6; // a 200 Mbit/s management link
                         // Busy spans in ms.
        let (mut spans, mut ends) = (Vec::new(), Vec::new());
        let mut t = 0.0;
        while t < seconds * 1e3 {
            let step = period_ms + r.random_range(-jitter_ms..=jitter_ms);
            let comm = comm_share * step;
            let start = t + step - comm;
            let mut cuts: Vec<f64> = (0..dips)
                .map(|_| r.random_range(0.05..0.95) * comm)
                .collect();
            cuts.sort_by(f64::total_cmp);
            let mut s0 = start;
            for c in cuts {
                let dip = r.random_range(50.0..150.0);
                spans.push((s0, start + c));
                s0 = start + c + dip;
            }
            spans.push((s0, t + step));
            t += step;
            ends.push(1_000_000 * MS + (t * 1e6) as i64);
        }
        let bytes_at = |ms: f64| -> f64 {
            spans
                .iter()
                .map(|&(a, b): &(f64, f64)| (ms.min(b) - a).max(0.0))
                .sum::<f64>()
                / 1e3
                * rate
        };
        let n = (seconds * 20.0) as usize;
        let pts = (0..n)
            .map(|i| {
                (
                    1_000_000 * MS + i as i64 * 50 * MS,
                    bytes_at(i as f64 * 50.0),
                )
            })
            .collect();
        (pts, ends)
    }

    /// Feeds `pts` a second at a time (as the engine does) and returns every step found.
    fn feed(pts: &[(i64, f64)]) -> Vec<InferredStep> {
        let mut tr = InferenceTracker::default();
        let mut out = Vec::new();
        for chunk in pts.chunks(20) {
            tr.extend(chunk.iter().copied());
            out.extend(tr.steps());
        }
        out
    }

    /// Steps whose both edges are within `tol_ms` of a true step end, and the step count.
    fn matching(steps: &[InferredStep], ends: &[i64], tol_ms: i64) -> usize {
        let near = |t: i64| ends.iter().any(|&e| (e - t).abs() <= tol_ms * MS);
        steps
            .iter()
            .filter(|s| near(s.start_unix_ns) && near(s.end_unix_ns))
            .count()
    }

    #[test]
    fn dips_inside_a_slow_all_reduce_do_not_cut_the_step() {
        for seed in 0..6 {
            let (pts, ends) = paced_traffic(90.0, 3780.0, 60.0, 0.85, 4, seed);
            let steps = feed(&pts);
            let mean = steps
                .iter()
                .map(|s| (s.end_unix_ns - s.start_unix_ns) as f64 / 1e9)
                .sum::<f64>()
                / steps.len().max(1) as f64;
            assert!(
                (mean / 3.78 - 1.0).abs() < 0.05,
                "seed {seed}: mean {mean} over {} steps",
                steps.len()
            );
            // Every step from its first edge on: ~90 s less the warm-up (one window third, one period and a half).
            assert!(steps.len() >= 15, "seed {seed}: {} steps", steps.len());
            let ok = matching(&steps, &ends, 100);
            assert!(
                ok * 10 >= steps.len() * 9,
                "seed {seed}: {ok} of {} steps on the job's edges",
                steps.len()
            );
        }
    }

    #[test]
    fn communication_filling_most_of_the_step_still_has_steps() {
        for seed in 0..4 {
            let (pts, ends) = paced_traffic(60.0, 930.0, 20.0, 0.85, 0, seed);
            let steps = feed(&pts);
            assert!(steps.len() >= 40, "seed {seed}: {} steps", steps.len());
            let ok = matching(&steps, &ends, 60);
            assert!(
                ok * 10 >= steps.len() * 9,
                "seed {seed}: {ok} of {}",
                steps.len()
            );
        }
    }

    #[test]
    fn a_job_s_steps_start_at_its_first_burst_s_end() {
        // From the job's start: 330 ms of compute, then 110 ms of all-reduce, every 440 ms, for 15 s. Every
        // step's end is a burst's end; the first that traffic can show starts where the first burst ends.
        let pts = traffic(300, 440.0, 110.0, 330.0, 1e9, 0.0);
        let steps = feed(&pts);
        let start = 1_000_000 * MS;
        let first = steps.first().expect("steps").start_unix_ns - start;
        assert!(
            (first - 440 * MS).abs() <= 50 * MS,
            "first step from {} ms",
            first / MS
        );
        // Consecutive from there to the newest burst's end that a period and a half of data follows.
        assert!(
            steps
                .windows(2)
                .all(|w| w[0].end_unix_ns == w[1].start_unix_ns),
            "{steps:?}"
        );
        assert!(steps.len() >= 30, "{} steps", steps.len());
    }

    #[test]
    fn a_job_after_an_idle_spell_has_steps_within_a_few_periods() {
        // 20 s idle (the agents start before the job), then 1.5 s steps.
        let (job, ends) = paced_traffic(60.0, 1500.0, 30.0, 0.6, 2, 7);
        let offset = 20 * 1_000 * MS;
        let mut pts: Vec<(i64, f64)> = (0..400)
            .map(|i| (1_000_000 * MS + i * 50 * MS, 0.0))
            .collect();
        pts.extend(job.iter().map(|&(t, b)| (t + offset, b)));
        let mut tr = InferenceTracker::default();
        let mut first_at = None;
        let mut steps = Vec::new();
        for chunk in pts.chunks(20) {
            tr.extend(chunk.iter().copied());
            let new = tr.steps();
            if first_at.is_none() && !new.is_empty() {
                first_at = Some(tr.newest_ns());
            }
            steps.extend(new);
        }
        let start = 1_000_000 * MS + offset;
        let delay_s = (first_at.expect("steps") - start) as f64 / 1e9;
        assert!(
            delay_s < 12.0,
            "first steps {delay_s} s after the job started"
        );
        // And they are the job's steps from its start (the first ones rest on a period of three steps, so a
        // few of those may be cut off the job's edges).
        let shifted: Vec<i64> = ends.iter().map(|e| e + offset).collect();
        let ok = matching(&steps, &shifted, 100);
        assert!(
            ok * 20 >= steps.len() * 17 && steps.len() >= 30,
            "{ok} of {}",
            steps.len()
        );
    }

    #[test]
    fn a_collective_whose_chunks_pause_as_long_as_the_compute_is_one_step() {
        // 800 ms steps: 100 ms of compute, then a collective through a slow link in two chunks of 300 ms, 6 MB
        // and 19 MB, 100 ms apart: the activity repeats every 400 ms, only the bytes every 800.
        let spans = [(100.0, 400.0, 6e6), (500.0, 800.0, 19e6)];
        let bytes_at = |t: f64| {
            let (k, tau) = ((t / 800.0).floor(), t.rem_euclid(800.0));
            let step: f64 = spans.iter().map(|s| s.2).sum();
            k * step
                + spans
                    .iter()
                    .map(|&(a, b, n)| n * ((tau - a) / (b - a)).clamp(0.0, 1.0))
                    .sum::<f64>()
        };
        let pts: Vec<(i64, f64)> = (0..900)
            .map(|i| (1_000_000 * MS + i * 50 * MS, bytes_at(i as f64 * 50.0)))
            .collect();
        let steps = feed(&pts);
        let mut d: Vec<i64> = steps
            .iter()
            .map(|s| (s.end_unix_ns - s.start_unix_ns) / MS)
            .collect();
        d.sort_unstable();
        assert!(steps.len() >= 40, "{} steps: {d:?}", steps.len());
        assert!((d[d.len() / 2] - 800).abs() <= 50, "{d:?}");
    }

    #[test]
    fn uneven_steps_are_not_taken_for_alternating_halves() {
        // Steps of 0.45 to 1.05 s: spans of the mean period hold uneven bytes, at random, not high-low-high.
        for seed in 0..8 {
            let (pts, _) = paced_traffic(30.0, 750.0, 300.0, 0.3, 0, seed);
            let (rates, _) = interval_rates(&pts);
            assert!(!repeats_at_double(&rates, 15.0), "seed {seed}");
        }
        // Two unequal chunks a step do alternate.
        let rates: Vec<f64> = (0..600)
            .map(|i| match i % 16 {
                2..=7 => 20e6,
                10..=15 => 80e6,
                _ => 0.0,
            })
            .collect();
        assert!(repeats_at_double(&rates, 8.0));
    }

    #[test]
    fn uneven_steps_with_clear_gaps_are_followed() {
        // 15 s of even 750 ms steps, then 45 s of 0.4 to 1.1 s steps (a lossy link's retransmission stalls),
        // a gap of compute in each.
        for (comm, seed) in [(0.3, 12), (0.5, 14), (0.4, 17)] {
            let (even, even_ends) = paced_traffic(15.0, 750.0, 30.0, comm, 0, seed);
            let (uneven, uneven_ends) = paced_traffic(45.0, 750.0, 350.0, comm, 0, seed + 1);
            let (t0, b0) = *even.last().unwrap();
            let shift = t0 + 50 * MS - uneven[0].0;
            let mut pts = even.clone();
            pts.extend(uneven.iter().map(|&(t, b)| (t + shift, b + b0)));
            let steps = feed(&pts);
            let ends: Vec<i64> = uneven_ends.iter().map(|e| e + shift).collect();
            let ok = matching(&steps, &ends, 60);
            assert!(
                ok * 10 >= ends.len() * 7,
                "comm {comm}: {ok} of {} uneven steps found ({} given, {} even ones)",
                ends.len(),
                steps.len(),
                even_ends.len()
            );
        }
    }

    /// The durations (ms) of the steps found from `settle_ms` after traffic `slow` turns into `fast` (each
    /// from [`traffic`], `fast` continued from where `slow` ends), and how many are within 10 % of `period_ms`.
    fn after_a_change(
        slow: &[(i64, f64)],
        fast: &[(i64, f64)],
        settle_ms: i64,
        period_ms: f64,
    ) -> (Vec<f64>, usize) {
        let (t_end, b_end) = *slow.last().unwrap();
        let mut pts = slow.to_vec();
        pts.extend(
            fast.iter()
                .skip(1)
                .map(|&(t, b)| (t - fast[0].0 + t_end, b + b_end)),
        );
        let settled: Vec<f64> = feed(&pts)
            .iter()
            .filter(|s| s.start_unix_ns >= t_end + settle_ms * MS)
            .map(|s| (s.end_unix_ns - s.start_unix_ns) as f64 / 1e6)
            .collect();
        let right = settled
            .iter()
            .filter(|d| (**d / period_ms - 1.0).abs() <= 0.1)
            .count();
        (settled, right)
    }

    #[test]
    fn a_job_whose_steps_speed_up_is_followed_within_a_dozen_steps() {
        // 25 s of 800 ms steps (a fault), then 25 s of 450 ms steps (the fault over).
        let (settled, right) = after_a_change(
            &traffic(500, 800.0, 250.0, 500.0, 1e9, 0.0),
            &traffic(500, 450.0, 120.0, 300.0, 1e9, 0.0),
            6_000,
            450.0,
        );
        assert!(
            settled.len() >= 30 && right * 10 >= settled.len() * 9,
            "{right} of {} steps at 450 ms: {settled:?}",
            settled.len()
        );
    }

    #[test]
    fn a_job_much_faster_after_a_straggler_is_followed_within_seconds() {
        // 30 s of 2.4 s steps (a straggler holds every rank back), then 12 s of 320 ms steps: the estimate's
        // span, 12 of the old periods, would hold the old pace for the whole 30 s window.
        let (settled, right) = after_a_change(
            &traffic(600, 2400.0, 300.0, 2000.0, 1e9, 0.0),
            &traffic(240, 320.0, 120.0, 150.0, 1e9, 0.0),
            6_000,
            320.0,
        );
        assert!(
            settled.len() >= 12 && right * 10 >= settled.len() * 9,
            "{right} of {} steps at 320 ms: {settled:?}",
            settled.len()
        );
    }

    #[test]
    fn a_period_between_two_sample_lags_is_not_read_as_its_double() {
        // The demo's degraded-link step: 329.375 ms, a 39.375 ms burst, sampled every 50 ms.
        let mut tr = InferenceTracker::default();
        tr.extend(traffic(600, 329.375, 39.375, 290.0, 11e9, 2e5));
        let steps = tr.steps();
        let p = tr.period().expect("periodic");
        assert!((p.period_s / 0.329375 - 1.0).abs() < 0.02, "{p:?}");
        let mean = steps
            .iter()
            .map(|s| (s.end_unix_ns - s.start_unix_ns) as f64 / 1e9)
            .sum::<f64>()
            / steps.len().max(1) as f64;
        assert!(
            (mean / 0.329375 - 1.0).abs() < 0.02,
            "{mean} over {} steps",
            steps.len()
        );
    }
}
