//! Steps without markers: inferred from the periodicity of a node's link traffic (the communication burst
//! every step).
//!
//! Input: the node's *traffic total*: the cumulative bytes (tx + rx) summed over its fabric and management
//! links (NVLink excluded: it stays inside the node), as `(timestamp_ns, bytes)` on the node's sample times.
//! The tracker keeps the last [`WINDOW_NS`] of it and, from the interval rates:
//!
//! - **Period**: the autocorrelation of the rate series (mean removed, normalised per lag) over lags of
//!   [`MIN_LAG`] intervals to a third of the window. The period is the smallest lag whose autocorrelation peak
//!   reaches [`PEAK_SHARE`] of the highest peak (so a multiple of the period is never taken for it), refined
//!   by a parabola through the peak; then, when the burst ends in the window are regular, by their mean
//!   spacing (sub-sample precision over many steps). **Strength** is the autocorrelation at the peak (0..1).
//! - **Bursts**: intervals whose rate is above `low + BURST_LEVEL × (high − low)` (`low` the
//!   [`LOW_PERCENTILE`]th percentile rate, `high` the highest), with gaps shorter than a quarter period
//!   filled. A burst *ends* at the first sample after its last busy interval — or after the interval that
//!   follows, when that one still carries the burst's tail (above [`TAIL_LEVEL`]) — once a quarter period of
//!   quiet has followed. Edges are on samples, so per-step byte counts are exact counter differences.
//! - **Steps**: from one burst end to the next. Confidence = strength × how close the step's duration is to
//!   the period (1 at the period, 0 at ±100%).
//!
//! No steps while the traffic swings less than [`MIN_SWING_BYTES_PER_SECOND`] (an idle node), while the
//! strength is below [`MIN_STRENGTH`], or before [`MIN_POINTS`] samples are held; the sequence restarts
//! (no step spans a quiet spell) when periodicity is lost.

use std::collections::VecDeque;

/// Traffic history kept per node, ns.
pub const WINDOW_NS: i64 = 30_000_000_000;
/// Samples needed before a period is estimated (6 s at 20 Hz).
pub const MIN_POINTS: usize = 120;
/// Shortest period considered, in sampling intervals.
pub const MIN_LAG: usize = 2;
/// A shorter lag's peak counts as the period when it reaches this share of the highest peak.
pub const PEAK_SHARE: f64 = 0.8;
/// Weakest periodicity that yields steps.
pub const MIN_STRENGTH: f64 = 0.3;
/// Smallest swing of the total rate (high − low) that can be a communication burst, bytes/s.
pub const MIN_SWING_BYTES_PER_SECOND: f64 = 20e6;
/// Burst threshold, as a share of the swing above the low rate.
pub const BURST_LEVEL: f64 = 0.3;
/// A burst's last partly busy interval (its tail: the burst ended just after a sample) belongs to the burst
/// when its rate is above `low + TAIL_LEVEL × (high − low)`, so the edge falls after all of the burst's bytes.
pub const TAIL_LEVEL: f64 = 0.02;
/// Percentile of the interval rates taken as the quiet ("low") level.
pub const LOW_PERCENTILE: f64 = 20.0;
/// The period is re-estimated at most this often (ns of sample time).
pub const REESTIMATE_NS: i64 = 2_000_000_000;

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
    let peaks: Vec<usize> = (MIN_LAG..=max_lag)
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
    Some(PeriodEstimate {
        period_s: (lag as f64 + delta) * dt_s,
        strength: b.clamp(0.0, 1.0),
    })
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let i = ((p / 100.0) * (s.len().saturating_sub(1)) as f64).round() as usize;
    s.get(i).copied().unwrap_or(0.0)
}

/// Indices `i` of the intervals that end a burst in `busy` (interval `i` busy, then at least `quiet` quiet
/// intervals), after filling quiet gaps shorter than `quiet`.
pub fn burst_ends(busy: &[bool], quiet: usize) -> Vec<usize> {
    let quiet = quiet.max(1);
    let mut b = busy.to_vec();
    // Fill short gaps between busy runs.
    let mut i = 0;
    while i < b.len() {
        if !b[i] {
            let start = i;
            while i < b.len() && !b[i] {
                i += 1;
            }
            if start > 0 && i < b.len() && i - start < quiet {
                b[start..i].iter_mut().for_each(|v| *v = true);
            }
        } else {
            i += 1;
        }
    }
    (0..b.len())
        .filter(|&i| b[i] && i + quiet < b.len() && b[i + 1..=i + quiet].iter().all(|v| !v))
        .collect()
}

/// Inference state of one node.
#[derive(Debug, Default)]
pub struct InferenceTracker {
    /// `(timestamp_ns, cumulative bytes)`, oldest first, at most [`WINDOW_NS`] long.
    points: VecDeque<(i64, f64)>,
    period: Option<PeriodEstimate>,
    estimated_at: i64,
    last_edge: Option<i64>,
}

impl InferenceTracker {
    /// Time of the newest point held (0 when none).
    pub fn newest_ns(&self) -> i64 {
        self.points.back().map_or(0, |p| p.0)
    }

    /// The current period estimate (refined by burst spacing), when the node's traffic is periodic.
    pub fn period(&self) -> Option<PeriodEstimate> {
        self.period
    }

    /// Appends points newer than the newest held (older ones are ignored) and trims to the window.
    pub fn extend(&mut self, points: impl IntoIterator<Item = (i64, f64)>) {
        for (t, v) in points {
            if t > self.newest_ns() {
                self.points.push_back((t, v));
            }
        }
        let newest = self.newest_ns();
        while self
            .points
            .front()
            .is_some_and(|p| p.0 < newest - WINDOW_NS)
        {
            self.points.pop_front();
        }
    }

    /// Finds the steps completed by the points added since the last call. Cheap when nothing is new.
    pub fn steps(&mut self) -> Vec<InferredStep> {
        if self.points.len() < MIN_POINTS {
            return Vec::new();
        }
        let pts: Vec<(i64, f64)> = self.points.iter().copied().collect();
        let mut rates = Vec::with_capacity(pts.len() - 1);
        let mut dts = Vec::with_capacity(pts.len() - 1);
        for w in pts.windows(2) {
            let dt = (w[1].0 - w[0].0) as f64 / 1e9;
            dts.push(dt);
            rates.push(if dt > 0.0 {
                (w[1].1 - w[0].1).max(0.0) / dt
            } else {
                0.0
            });
        }
        let dt = percentile(&dts, 50.0);
        let low = percentile(&rates, LOW_PERCENTILE);
        let high = rates.iter().copied().fold(0.0, f64::max);
        let newest = self.newest_ns();
        if high - low < MIN_SWING_BYTES_PER_SECOND {
            self.period = None;
            self.last_edge = None;
            return Vec::new();
        }
        if self.period.is_none() || newest - self.estimated_at >= REESTIMATE_NS {
            self.period = estimate_period(&rates, dt);
            self.estimated_at = newest;
        }
        let Some(est) = self.period.filter(|p| p.strength >= MIN_STRENGTH) else {
            self.last_edge = None;
            return Vec::new();
        };
        let threshold = low + BURST_LEVEL * (high - low);
        let busy: Vec<bool> = rates.iter().map(|&r| r > threshold).collect();
        let quiet = ((0.25 * est.period_s / dt).floor() as usize).max(1);
        // Edge of a burst ending at interval i: the sample closing it (pts[i + 1]), or the one closing its tail.
        let tail = low + TAIL_LEVEL * (high - low);
        let edges: Vec<i64> = burst_ends(&busy, quiet)
            .into_iter()
            .map(|i| if rates[i + 1] > tail { i + 1 } else { i })
            .map(|i| pts[i + 1].0)
            .collect();
        // Refine the period by the mean spacing of regular burst ends.
        if edges.len() >= 4 {
            let ok = edges.windows(2).all(|w| {
                let d = (w[1] - w[0]) as f64 / 1e9;
                (d / est.period_s - 1.0).abs() < 0.5
            });
            if ok {
                let span = (edges[edges.len() - 1] - edges[0]) as f64 / 1e9;
                self.period = Some(PeriodEstimate {
                    period_s: span / (edges.len() - 1) as f64,
                    strength: est.strength,
                });
            }
        }
        let period_s = self.period.map_or(est.period_s, |p| p.period_s);
        let mut out = Vec::new();
        for e in edges {
            match self.last_edge {
                None => self.last_edge = Some(e),
                Some(prev) if e > prev => {
                    let d = (e - prev) as f64 / 1e9;
                    if d < 0.5 * period_s {
                        // A second end too close to the previous one: part of the same burst.
                        continue;
                    }
                    let regular = (1.0 - (d / period_s - 1.0).abs()).clamp(0.0, 1.0);
                    out.push(InferredStep {
                        start_unix_ns: prev,
                        end_unix_ns: e,
                        confidence: (est.strength * regular).clamp(0.0, 1.0),
                    });
                    self.last_edge = Some(e);
                }
                Some(_) => {}
            }
        }
        out
    }
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
        assert!((p.period_s / 0.3096875 - 1.0).abs() < 0.01, "{p:?}");
        assert!(steps.len() >= 80, "{}", steps.len());
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
    fn burst_end_detection_fills_short_gaps() {
        let b = |s: &str| s.chars().map(|c| c == '#').collect::<Vec<_>>();
        assert_eq!(burst_ends(&b("..###...###..."), 2), vec![4, 10]);
        // A one-interval dip inside a burst is filled.
        assert_eq!(burst_ends(&b("..##.##....."), 2), vec![6]);
        // Not enough quiet after the last burst yet.
        assert_eq!(burst_ends(&b("..###...###."), 2), vec![4]);
    }
}
