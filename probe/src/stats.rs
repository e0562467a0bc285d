//! Result maths (pure): bandwidth of a phase and quantiles of round-trip times.

use std::time::Duration;

/// Bytes per second of `bytes` moved in `seconds`; 0 when no time passed.
pub fn bandwidth(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 && seconds.is_finite() {
        bytes as f64 / seconds
    } else {
        0.0
    }
}

/// Quantiles of a latency run, in seconds (round trip of one small message).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct LatencySummary {
    /// Number of round trips measured.
    pub samples: u64,
    pub p50_seconds: f64,
    pub p99_seconds: f64,
    pub max_seconds: f64,
}

/// The `q`-quantile (0..=1) of sorted values by the nearest-rank method; `None` when empty.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Summarises round-trip times; all zero when there are none.
pub fn summarise(rtts: &[Duration]) -> LatencySummary {
    let mut v: Vec<f64> = rtts.iter().map(Duration::as_secs_f64).collect();
    v.sort_by(f64::total_cmp);
    LatencySummary {
        samples: v.len() as u64,
        p50_seconds: quantile(&v, 0.5).unwrap_or(0.0),
        p99_seconds: quantile(&v, 0.99).unwrap_or(0.0),
        max_seconds: v.last().copied().unwrap_or(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_is_bytes_over_seconds() {
        assert_eq!(bandwidth(1_000_000, 2.0), 500_000.0);
        assert_eq!(bandwidth(5, 0.0), 0.0);
        assert_eq!(bandwidth(5, f64::NAN), 0.0);
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(50.0));
        assert_eq!(quantile(&v, 0.99), Some(99.0));
        assert_eq!(quantile(&v, 1.0), Some(100.0));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&[], 0.5), None);
        let rtts: Vec<Duration> = [30u64, 10, 20]
            .iter()
            .map(|&u| Duration::from_micros(u))
            .collect();
        let s = summarise(&rtts);
        assert_eq!(s.samples, 3);
        assert!((s.p50_seconds - 20e-6).abs() < 1e-12);
        assert!((s.p99_seconds - 30e-6).abs() < 1e-12);
        assert!((s.max_seconds - 30e-6).abs() < 1e-12);
        assert_eq!(summarise(&[]), LatencySummary::default());
    }
}
