//! Per-agent rate limit on samples: a token bucket per stream.
//!
//! The excess is pushed back, not refused: when an agent has sent more than `max_samples_per_second` allows
//! (with one second of burst), its stream is not read again until the bucket has refilled. HTTP/2 flow control
//! then holds the agent's sends, its batches wait in its resend buffer, and the collector spends no more than
//! the limit on it. Refusing instead would cut off honest agents exactly when they resend a backlog after a
//! collector restart (minutes of batches at once); throttling lets them catch up at the limit. Throttled batches
//! and the time waited are counted (`commwatch_collector_throttled_batches_total`,
//! `commwatch_collector_throttled_seconds_total`).

use std::time::{Duration, Instant};

/// Longest single wait; a batch larger than that much budget is paid over several reads.
pub const MAX_WAIT: Duration = Duration::from_secs(5);

/// A token bucket of samples; capacity one second of the rate.
#[derive(Debug)]
pub struct SampleBucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl SampleBucket {
    /// `per_second` = 0 means no limit.
    pub fn new(per_second: u64, now: Instant) -> SampleBucket {
        SampleBucket {
            rate: per_second as f64,
            tokens: per_second as f64,
            last: now,
        }
    }

    /// Takes `samples` tokens at `now` and returns how long the stream must wait before its next read
    /// (zero while within the limit). Tokens may go negative: the debt is the wait.
    pub fn take(&mut self, samples: u64, now: Instant) -> Duration {
        if self.rate <= 0.0 {
            return Duration::ZERO;
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        self.tokens -= samples as f64;
        if self.tokens >= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(-self.tokens / self.rate).min(MAX_WAIT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_the_rate_never_waits() {
        let t0 = Instant::now();
        let mut b = SampleBucket::new(1000, t0);
        // 100 samples every 100 ms = exactly 1000/s, for 10 s.
        for i in 1..=100u64 {
            assert_eq!(
                b.take(100, t0 + Duration::from_millis(100 * i)),
                Duration::ZERO
            );
        }
    }

    #[test]
    fn excess_waits_for_its_debt() {
        let t0 = Instant::now();
        let mut b = SampleBucket::new(1000, t0);
        // One second of burst is free; 500 more samples cost half a second.
        assert_eq!(b.take(1000, t0), Duration::ZERO);
        assert_eq!(b.take(500, t0), Duration::from_millis(500));
        // After waiting it out, the bucket is empty, not in credit.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(b.take(0, t1), Duration::ZERO);
        assert_eq!(b.take(100, t1), Duration::from_millis(100));
    }

    #[test]
    fn idle_time_refills_only_one_second() {
        let t0 = Instant::now();
        let mut b = SampleBucket::new(1000, t0);
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(b.take(1000, later), Duration::ZERO);
        assert_eq!(b.take(1000, later), Duration::from_secs(1));
    }

    #[test]
    fn waits_are_capped_and_zero_rate_is_unlimited() {
        let t0 = Instant::now();
        let mut b = SampleBucket::new(10, t0);
        assert_eq!(b.take(1_000_000, t0), MAX_WAIT);
        let mut off = SampleBucket::new(0, t0);
        assert_eq!(off.take(u64::MAX, t0), Duration::ZERO);
    }
}
