//! Numbers as the page prints them: decimal units (GB/s is 10⁹ bytes/s, as the API's figures and nccl-tests
//! use), `–` for an unknown value.

/// Bytes per second: `12.3 GB/s`, `850 MB/s`, `3.1 kB/s`.
pub fn rate(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{}/s", scaled(v, "B")),
        _ => "–".into(),
    }
}

/// Bytes: `1.25 GB`.
pub fn bytes(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => scaled(v, "B"),
        _ => "–".into(),
    }
}

/// A ratio as a percentage: `43%` (one decimal below 10%).
pub fn percent(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() && v.abs() < 0.1 => format!("{:.1}%", v * 100.0),
        Some(v) if v.is_finite() => format!("{:.0}%", v * 100.0),
        _ => "–".into(),
    }
}

/// How a scaling efficiency was measured, in words (the figure's `method`): an operator reads "97 %
/// exposed_communication" as 97 % of the step exposed. `None` for no method; an unknown method as it is.
pub fn efficiency_method(method: Option<&str>) -> Option<String> {
    let words = match method? {
        "throughput_per_gpu" => "throughput per GPU against the job's baseline",
        "exposed_communication" => {
            "from the communication not hidden under compute; idle GPU time from other causes is not counted"
        }
        "communication_share" => "at least: from the links' busy share, overlap unseen",
        "own_history" => "against the job's own earlier steps",
        other => return Some(other.to_string()),
    };
    Some(words.to_string())
}

/// What marks a figure held to its link's capacity ([`crate::export::capped`]); [`CAPPED_NOTE`] says why.
pub const CAPPED_MARK: &str = "*";
/// The note under a table with a [`CAPPED_MARK`].
pub const CAPPED_NOTE: &str =
    "* above the link's capacity in the samples — a burst shorter than the sampling \
                               period, not a measurement — shown at the capacity";

/// A utilisation: as [`percent`], and never above 100 %: a value above is shown as `100%*` (capped, marked).
pub fn utilization(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() && v > 1.0 => format!("100%{CAPPED_MARK}"),
        _ => percent(v),
    }
}

/// An achieved rate on a link of `capacity`: as [`rate`], and never above the capacity: a rate above it is
/// shown at the capacity, marked.
pub fn rate_within(v: Option<f64>, capacity: Option<f64>) -> String {
    match (v, capacity) {
        (Some(v), Some(c)) if v.is_finite() && c > 0.0 && v > c => {
            format!("{}{CAPPED_MARK}", rate(Some(c)))
        }
        _ => rate(v),
    }
}

/// Seconds: `812 ms`, `1.42 s`.
pub fn seconds(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() && v.abs() < 1.0 => format!("{:.0} ms", v * 1e3),
        Some(v) if v.is_finite() => format!("{v:.2} s"),
        _ => "–".into(),
    }
}

/// A value in `unit` as a finding's evidence names it (`bytes_per_second`, `ratio`, `seconds`, ...).
pub fn in_unit(v: f64, unit: &str) -> String {
    match unit {
        "bytes_per_second" => rate(Some(v)),
        "bytes" => bytes(Some(v)),
        "ratio" => percent(Some(v)),
        "seconds" => seconds(Some(v)),
        _ => format!("{} {}", plain(v), unit.replace('_', " ")),
    }
}

/// A reading in the unit its metric name ends with (`_bytes_per_second`, `_bytes`, `_ratio`, `_seconds`,
/// `_watts`, `_hz`); a plain number otherwise.
pub fn by_name(metric: &str, v: f64) -> String {
    if metric.ends_with("_bytes_per_second") {
        rate(Some(v))
    } else if metric.ends_with("_bytes") {
        bytes(Some(v))
    } else if metric.ends_with("_ratio") {
        percent(Some(v))
    } else if metric.ends_with("_seconds") {
        seconds(Some(v))
    } else if metric.ends_with("_watts") {
        format!("{v:.0} W")
    } else if metric.ends_with("_hz") {
        scaled(v, "Hz")
    } else {
        plain(v)
    }
}

/// A plain number with at most three significant decimals.
pub fn plain(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn scaled(v: f64, unit: &str) -> String {
    let prefixes = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, p) in prefixes {
        if v.abs() >= scale {
            let x = v / scale;
            return if x.abs() >= 100.0 {
                format!("{x:.0} {p}{unit}")
            } else {
                format!("{x:.2} {p}{unit}")
            };
        }
    }
    format!("{v:.0} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_as_a_person_writes_them() {
        assert_eq!(rate(Some(12.34e9)), "12.34 GB/s");
        assert_eq!(rate(Some(850e6)), "850 MB/s");
        assert_eq!(rate(Some(12.0)), "12 B/s");
        assert_eq!(rate(None), "–");
        assert_eq!(rate(Some(f64::NAN)), "–");
        assert_eq!(bytes(Some(1.25e9)), "1.25 GB");
        assert_eq!(percent(Some(0.434)), "43%");
        assert_eq!(percent(Some(0.012)), "1.2%");
        assert_eq!(seconds(Some(0.8123)), "812 ms");
        assert_eq!(seconds(Some(1.417)), "1.42 s");
        assert_eq!(in_unit(3.0, "errors_per_second"), "3 errors per second");
        assert_eq!(in_unit(0.5, "ratio"), "50%");
        assert_eq!(by_name("gpu_sm_clock_hz", 1.98e9), "1.98 GHz");
        assert_eq!(by_name("gpu_power_watts", 536.1), "536 W");
        assert_eq!(by_name("gpu_memory_used_bytes", 71303168000.0), "71.30 GB");
        // No figure above its capacity: the demo's 136 % on a 12.5 GB/s link.
        assert_eq!(utilization(Some(1.36)), "100%*");
        assert_eq!(utilization(Some(0.88)), "88%");
        assert_eq!(rate_within(Some(17.03e9), Some(12.5e9)), "12.50 GB/s*");
        assert_eq!(rate_within(Some(5e9), Some(12.5e9)), "5.00 GB/s");
        assert_eq!(rate_within(Some(5e9), None), "5.00 GB/s");
    }
}

#[cfg(test)]
mod method_tests {
    #[test]
    fn efficiency_methods_read_as_words() {
        let w = super::efficiency_method(Some("exposed_communication")).unwrap();
        assert!(w.starts_with("from the communication not hidden"), "{w}");
        assert!(!w.contains("exposed_communication"));
        assert_eq!(super::efficiency_method(None), None);
        assert_eq!(
            super::efficiency_method(Some("new_method")).as_deref(),
            Some("new_method")
        );
    }
}
