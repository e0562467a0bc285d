//! The bus-bandwidth curve of one nccl-tests run: average, peak, where it saturates, and its latency where the
//! sizes measured show one.

use serde::Serialize;

use crate::nccl_tests::NcclTest;

/// A size counts as saturated once its bus bandwidth reaches this share of the peak.
pub const SATURATION_SHARE: f64 = 0.9;
/// Time "stays flat" while it is within this factor of the smallest time (the latency floor).
pub const FLAT_TIME_FACTOR: f64 = 1.5;
/// Latency shows only in the time of small messages: sizes up to this one, bytes (64 KiB). A run whose
/// smallest size is larger (a 10 GiB-only run) measures no latency.
pub const LATENCY_MAX_BYTES: u64 = 64 << 10;

/// Summary of one test's curve. Bandwidths in GB/s (1e9 bytes/s), times in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurveSummary {
    /// Rows with a positive size (zero-size rows measure nothing).
    pub measured_rows: usize,
    /// Mean of every busbw value, out-of-place and in-place, as nccl-tests computes its average line (its own
    /// line is rounded by `%g`; this one is from the two-decimal table values).
    pub avg_busbw_computed_gbps: Option<f64>,
    pub peak_busbw_gbps: Option<f64>,
    pub peak_at_bytes: Option<u64>,
    /// Smallest size whose busbw reaches 90 % of the peak.
    pub saturation_bytes: Option<u64>,
    /// Smallest time of one collective among sizes up to [`LATENCY_MAX_BYTES`]: the latency floor; `None`
    /// when the run measured no such size.
    pub latency_us: Option<f64>,
    /// Sizes below this one stay within 1.5x the latency floor (latency-bound); `None` when every size does
    /// or when the latency is unknown.
    pub latency_bound_below_bytes: Option<u64>,
    /// Sum of `#wrong` over all rows (legacy `error` columns are not counts and are left out).
    pub wrong_total: f64,
}

/// Summarises a test's rows.
pub fn summarize(test: &NcclTest) -> CurveSummary {
    let measured: Vec<_> = test.rows.iter().filter(|r| r.size_bytes > 0).collect();
    let all_busbw: Vec<f64> = test
        .rows
        .iter()
        .flat_map(|r| r.placements().map(|(_, p)| p.busbw_gbps))
        .collect();
    let avg =
        (!all_busbw.is_empty()).then(|| all_busbw.iter().sum::<f64>() / all_busbw.len() as f64);
    let peak = measured
        .iter()
        .filter_map(|r| r.best_busbw_gbps().map(|b| (b, r.size_bytes)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let saturation_bytes = peak.and_then(|(p, _)| {
        measured
            .iter()
            .find(|r| {
                r.best_busbw_gbps()
                    .is_some_and(|b| b >= SATURATION_SHARE * p)
            })
            .map(|r| r.size_bytes)
    });
    let latency = measured
        .iter()
        .filter(|r| r.size_bytes <= LATENCY_MAX_BYTES)
        .filter_map(|r| r.best_time_us())
        .reduce(f64::min);
    let latency_bound_below_bytes = latency.and_then(|floor| {
        measured
            .iter()
            .find(|r| {
                r.best_time_us()
                    .is_some_and(|t| t > FLAT_TIME_FACTOR * floor)
            })
            .map(|r| r.size_bytes)
    });
    let legacy = test.generation == crate::nccl_tests::Generation::Legacy;
    let wrong_total = if legacy {
        0.0
    } else {
        // Folded from +0.0: an empty sum of f64 is -0.0, which JSON would show.
        test.rows
            .iter()
            .flat_map(|r| r.placements().filter_map(|(_, p)| p.wrong))
            .fold(0.0, |a, b| a + b)
    };
    CurveSummary {
        measured_rows: measured.len(),
        avg_busbw_computed_gbps: avg,
        peak_busbw_gbps: peak.map(|p| p.0),
        peak_at_bytes: peak.map(|p| p.1),
        saturation_bytes,
        latency_us: latency,
        latency_bound_below_bytes,
        wrong_total,
    }
}

/// Bus bandwidth of the test at a message size, interpolated linearly in log2(size) between measured sizes;
/// `None` outside the measured range.
pub fn busbw_at(test: &NcclTest, size_bytes: u64) -> Option<f64> {
    let pts: Vec<(f64, f64)> = test
        .rows
        .iter()
        .filter(|r| r.size_bytes > 0)
        .filter_map(|r| Some(((r.size_bytes as f64).log2(), r.best_busbw_gbps()?)))
        .collect();
    let x = (size_bytes as f64).log2();
    pts.windows(2).find_map(|w| {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if x >= x0 && x <= x1 {
            if x1 == x0 {
                Some(y0)
            } else {
                Some(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
            }
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl_tests::{Placement, Row};

    /// A test whose rows take `time_us` at `size_bytes`, with a bus bandwidth of 1 GB/s per MiB.
    fn test(points: &[(u64, f64)]) -> NcclTest {
        let mut t = NcclTest::new(1);
        t.rows = points
            .iter()
            .map(|(size, time)| {
                let p = Placement {
                    time_us: *time,
                    algbw_gbps: 0.0,
                    busbw_gbps: (*size >> 20) as f64,
                    wrong: Some(0.0),
                };
                Row {
                    size_bytes: *size,
                    count: size / 4,
                    dtype: "float".to_string(),
                    redop: Some("sum".to_string()),
                    root: Some(-1),
                    out_of_place: Some(p.clone()),
                    in_place: Some(p),
                    line: 1,
                }
            })
            .collect();
        t
    }

    #[test]
    fn latency_only_from_small_messages() {
        let s = summarize(&test(&[
            (8, 20.0),
            (64 << 10, 25.0),
            (1 << 20, 40.0),
            (1 << 30, 9000.0),
        ]));
        assert_eq!(s.latency_us, Some(20.0));
        // 40 us at 1 MiB is past 1.5 x 20 us.
        assert_eq!(s.latency_bound_below_bytes, Some(1 << 20));
        assert_eq!(s.peak_busbw_gbps, Some(1024.0));
        // A run of large messages only shows no latency, and no latency-bound range.
        let s = summarize(&test(&[(10 << 30, 90_330.0)]));
        assert_eq!((s.latency_us, s.latency_bound_below_bytes), (None, None));
        // No rows: no wrong elements, and a plain zero.
        assert_eq!(
            summarize(&NcclTest::new(1)).wrong_total.to_bits(),
            0.0f64.to_bits()
        );
    }
}
