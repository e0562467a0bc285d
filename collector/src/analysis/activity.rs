//! Link activity over a window of cumulative byte samples: when the link was busy, its bursts, their period
//! and the rate while busy. The rules use it where no steps are known for a node (and the management rule
//! always, since a management NIC is not part of the steps' fabric view).
//!
//! Resolution: an interval between two samples is *active* when its rate exceeds [`active_threshold`]. The
//! rate during bursts is the median over the burst-interior intervals (a burst's first and last intervals are
//! partly idle); a burst shorter than [`RESOLVED_INTERVALS`] sample intervals has no interior, and the
//! activity is then `resolved = false`: its rate is a lower bound and must not be called slow.

use serde::Serialize;

use super::median;

/// Absolute floor of the active threshold, bytes/s (background management traffic is ~1–5 MB/s).
pub const ACTIVE_FLOOR_BYTES_PER_SECOND: f64 = 50e6;
/// Share of capacity above which an interval is active (when the capacity is known).
pub const ACTIVE_CAPACITY_SHARE: f64 = 0.01;
/// Sample intervals a burst must span for its rate to be measured (first and last are partial).
pub const RESOLVED_INTERVALS: usize = 3;

/// The rate above which an interval counts as carrying traffic: max(50 MB/s, 1% of capacity).
pub fn active_threshold(capacity_bytes_per_second: Option<f64>) -> f64 {
    capacity_bytes_per_second
        .filter(|c| *c > 0.0)
        .map_or(ACTIVE_FLOOR_BYTES_PER_SECOND, |c| {
            (c * ACTIVE_CAPACITY_SHARE).max(ACTIVE_FLOOR_BYTES_PER_SECOND)
        })
}

/// One burst: a run of active sample intervals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Burst {
    pub start_unix_ns: i64,
    pub end_unix_ns: i64,
    /// Bytes moved in the burst's intervals (dominant direction).
    pub bytes: u64,
    pub intervals: usize,
    /// Whether it is cut by the window's edge (its bytes and length are then partial).
    pub truncated: bool,
}

/// What a link did over the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Activity {
    pub window_s: f64,
    /// Median sample interval, seconds.
    pub sample_period_s: f64,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// Seconds of active intervals.
    pub busy_s: f64,
    pub bursts: Vec<Burst>,
    /// Median rate of burst-interior intervals, bytes/s; `None` without a resolved burst.
    pub burst_rate_bytes_per_second: Option<f64>,
    /// Median interval between burst starts, seconds (needs three bursts).
    pub period_s: Option<f64>,
    /// Coefficient of variation of the intervals between burst starts (0 = perfectly periodic).
    pub period_cv: Option<f64>,
    /// Median bytes per complete (non-truncated) burst.
    pub bytes_per_burst: Option<f64>,
    /// Whether the median complete burst spans at least [`RESOLVED_INTERVALS`] intervals.
    pub resolved: bool,
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

/// Analyses two cumulative byte windows (`(timestamp_ns, cumulative bytes)`, oldest first, same ticks or
/// not). The direction with more bytes drives the burst detection. `None` with fewer than 3 samples.
pub fn analyse(
    tx: &[(i64, u64)],
    rx: &[(i64, u64)],
    capacity_bytes_per_second: Option<f64>,
) -> Option<Activity> {
    let total = |w: &[(i64, u64)]| match (w.first(), w.last()) {
        (Some(a), Some(b)) => b.1.saturating_sub(a.1),
        _ => 0,
    };
    let (tx_bytes, rx_bytes) = (total(tx), total(rx));
    let w = if tx_bytes >= rx_bytes && tx.len() >= 3 {
        tx
    } else if rx.len() >= 3 {
        rx
    } else if tx.len() >= 3 {
        tx
    } else {
        return None;
    };
    let threshold = active_threshold(capacity_bytes_per_second);
    let (t0, t1) = (w[0].0, w[w.len() - 1].0);
    let window_s = (t1 - t0) as f64 / 1e9;
    if window_s <= 0.0 {
        return None;
    }
    let mut dts: Vec<f64> = Vec::with_capacity(w.len());
    // (dt_s, bytes, active)
    let mut iv: Vec<(i64, i64, u64, bool)> = Vec::with_capacity(w.len());
    for p in w.windows(2) {
        let dt = p[1].0 - p[0].0;
        if dt <= 0 {
            continue;
        }
        let bytes = p[1].1.saturating_sub(p[0].1);
        let rate = bytes as f64 / (dt as f64 / 1e9);
        dts.push(dt as f64 / 1e9);
        iv.push((p[0].0, p[1].0, bytes, rate > threshold));
    }
    let sample_period_s = median(&mut dts).unwrap_or(0.0);
    let mut bursts = Vec::new();
    let mut interior_rates = Vec::new();
    let mut busy_s = 0.0;
    let mut i = 0;
    while i < iv.len() {
        if !iv[i].3 {
            i += 1;
            continue;
        }
        let start = i;
        while i < iv.len() && iv[i].3 {
            busy_s += (iv[i].1 - iv[i].0) as f64 / 1e9;
            i += 1;
        }
        let end = i; // exclusive
        let run = &iv[start..end];
        if run.len() >= RESOLVED_INTERVALS {
            for x in &run[1..run.len() - 1] {
                interior_rates.push(x.2 as f64 / ((x.1 - x.0) as f64 / 1e9));
            }
        }
        bursts.push(Burst {
            start_unix_ns: run[0].0,
            end_unix_ns: run[run.len() - 1].1,
            bytes: run.iter().map(|x| x.2).sum(),
            intervals: run.len(),
            truncated: start == 0 || end == iv.len(),
        });
    }
    let starts: Vec<i64> = bursts
        .iter()
        .filter(|b| !b.truncated)
        .map(|b| b.start_unix_ns)
        .collect();
    let mut gaps: Vec<f64> = starts
        .windows(2)
        .map(|s| (s[1] - s[0]) as f64 / 1e9)
        .collect();
    let (period_s, period_cv) = if gaps.len() >= 2 {
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        let cv = if mean > 0.0 { var.sqrt() / mean } else { 0.0 };
        (median(&mut gaps), Some(cv))
    } else {
        (None, None)
    };
    let mut per_burst: Vec<f64> = bursts
        .iter()
        .filter(|b| !b.truncated)
        .map(|b| b.bytes as f64)
        .collect();
    let mut lens: Vec<f64> = bursts
        .iter()
        .filter(|b| !b.truncated)
        .map(|b| b.intervals as f64)
        .collect();
    let resolved = median(&mut lens).is_some_and(|l| l >= RESOLVED_INTERVALS as f64);
    Some(Activity {
        window_s,
        sample_period_s,
        tx_bytes,
        rx_bytes,
        busy_s,
        bursts,
        burst_rate_bytes_per_second: median(&mut interior_rates),
        period_s,
        period_cv,
        bytes_per_burst: median(&mut per_burst),
        resolved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples every 50 ms for `secs`: bursts of `burst_ms` at `rate` every `period_ms`, plus 2 MB/s.
    pub(crate) fn bursty(secs: f64, period_ms: i64, burst_ms: i64, rate: f64) -> Vec<(i64, u64)> {
        let ms = 1_000_000i64;
        let bytes_at = |t_ns: i64| -> u64 {
            let k = t_ns / (period_ms * ms);
            let tau = t_ns - k * period_ms * ms;
            let per = rate * burst_ms as f64 / 1e3;
            let part = (tau.min(burst_ms * ms) as f64 / (burst_ms * ms) as f64) * per;
            (k as f64 * per + part + 2e6 * t_ns as f64 / 1e9) as u64
        };
        (0..=((secs * 20.0) as i64))
            .map(|i| {
                let t = 1_000 * ms + i * 50 * ms;
                (t, bytes_at(t))
            })
            .collect()
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
        assert!(analyse(&idle[..2], &[], None).is_none());
    }
}
