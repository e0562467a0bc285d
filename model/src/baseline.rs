//! Bounds of the baselines an operator gives the collector (`POST /api/v1/baselines`, which
//! `commwatch baseline import` calls): one definition for the collector, which refuses what is out of bounds
//! with `400`/`413` naming the field or the limit, and for `baseline import`, which refuses the same input
//! before sending it. A number out of bounds used to be stored (`1e300` GB/s is infinite in bytes/s, stored
//! as `null`) and stopped every later start of the collector.

/// Largest plausible bus bandwidth of one rank, GB/s (1e9 bytes/s): ten times the fastest GPU interconnect
/// today (NVLink 5, 900 GB/s each way). A figure above it is a unit mistake or garbage, never a measurement.
pub const MAX_BUSBW_GBPS: f64 = 10_000.0;
/// Largest plausible throughput of one GPU, samples/s.
pub const MAX_SAMPLES_PER_SECOND_PER_GPU: f64 = 1e9;
/// Most ranks (and GPUs) a baseline may name.
pub const MAX_RANKS: u32 = 1 << 20;
/// Longest job, collective or source file name, bytes.
pub const MAX_NAME_LEN: usize = 128;
/// Longest `source_file`, bytes (a path).
pub const MAX_SOURCE_LEN: usize = 4096;
/// Most tests (collectives) one request may carry; a nccl-tests file holds a handful. Beyond it the
/// collector answers `413`.
pub const MAX_TESTS_PER_REQUEST: usize = 256;
/// Most bare baselines (one per job and collective) a collector holds; a request that would add more is
/// refused (`400`). Replacing one (same job and collective) is always possible.
pub const MAX_BARE_BASELINES: usize = 4096;
/// Most throughput baselines set by operators (one per job and scale) a collector holds.
pub const MAX_OPERATOR_THROUGHPUT_BASELINES: usize = 4096;

/// Why a number or a name is out of bounds (the caller names the field).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BoundError {
    #[error("must be a finite number")]
    NotFinite,
    #[error("must be above 0")]
    NotPositive,
    #[error("must be at most {max}")]
    TooLarge { max: f64 },
    #[error("must be 1 to {max} bytes")]
    Length { max: usize },
    #[error("must not hold control characters")]
    Control,
}

/// A positive, finite number no larger than `max`.
pub fn check_positive(value: f64, max: f64) -> Result<f64, BoundError> {
    if !value.is_finite() {
        Err(BoundError::NotFinite)
    } else if value <= 0.0 {
        Err(BoundError::NotPositive)
    } else if value > max {
        Err(BoundError::TooLarge { max })
    } else {
        Ok(value)
    }
}

/// A bus bandwidth in GB/s ([`MAX_BUSBW_GBPS`]).
pub fn check_busbw_gbps(value: f64) -> Result<f64, BoundError> {
    check_positive(value, MAX_BUSBW_GBPS)
}

/// A rank or GPU count: 1 to [`MAX_RANKS`].
pub fn check_ranks(value: u32) -> Result<u32, BoundError> {
    check_positive(f64::from(value), f64::from(MAX_RANKS)).map(|_| value)
}

/// A name of 1 to `max` bytes without control characters.
pub fn check_name(value: &str, max: usize) -> Result<&str, BoundError> {
    if value.is_empty() || value.len() > max {
        Err(BoundError::Length { max })
    } else if value.chars().any(char::is_control) {
        Err(BoundError::Control)
    } else {
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_out_of_bounds_are_refused_with_the_bound() {
        assert_eq!(check_busbw_gbps(48.89), Ok(48.89));
        assert_eq!(check_busbw_gbps(MAX_BUSBW_GBPS), Ok(MAX_BUSBW_GBPS));
        assert_eq!(check_busbw_gbps(f64::INFINITY), Err(BoundError::NotFinite));
        assert_eq!(check_busbw_gbps(f64::NAN), Err(BoundError::NotFinite));
        assert_eq!(check_busbw_gbps(0.0), Err(BoundError::NotPositive));
        assert_eq!(check_busbw_gbps(-1.0), Err(BoundError::NotPositive));
        let e = check_busbw_gbps(1e300).unwrap_err();
        assert_eq!(e.to_string(), "must be at most 10000");
        assert_eq!(check_ranks(0), Err(BoundError::NotPositive));
        assert_eq!(check_ranks(8), Ok(8));
        assert!(check_ranks(u32::MAX).is_err());
    }

    #[test]
    fn names_are_bounded_and_free_of_control_characters() {
        assert_eq!(check_name("all_reduce", MAX_NAME_LEN), Ok("all_reduce"));
        assert!(check_name("", MAX_NAME_LEN).is_err());
        assert!(check_name(&"x".repeat(MAX_NAME_LEN + 1), MAX_NAME_LEN).is_err());
        assert_eq!(check_name("a\nb", MAX_NAME_LEN), Err(BoundError::Control));
    }
}
