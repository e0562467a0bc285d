//! The wall clock in the units the project uses: nanoseconds (wire and store timestamps) and seconds
//! (findings and the API). Before the Unix epoch (a badly set clock) both read 0 rather than panic.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in nanoseconds since the Unix epoch (saturating at `i64::MAX`, 0 before the epoch).
pub fn unix_now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Now, in seconds since the Unix epoch (fractional; 0 before the epoch).
pub fn unix_now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Nanoseconds since the epoch as seconds.
pub fn ns_to_s(ns: i64) -> f64 {
    ns as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_agree_and_are_after_2020() {
        let ns = unix_now_ns();
        let s = unix_now_s();
        assert!(ns > 1_577_836_800_000_000_000, "{ns}");
        assert!((ns_to_s(ns) - s).abs() < 5.0);
    }
}
