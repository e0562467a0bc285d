//! Reconnect delays: exponential backoff with jitter.

use std::time::Duration;

use rand::Rng;

/// Exponential backoff with jitter: each delay is uniformly random in [d/2, d], d doubling up to `max`.
#[derive(Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max,
            current: min,
        }
    }
    pub fn next_delay(&mut self) -> Duration {
        let d = self.current;
        self.current = (self.current * 2).min(self.max);
        let lo = d / 2;
        let span = d - lo;
        lo + span.mul_f64(rand::rng().random::<f64>())
    }
    pub fn reset(&mut self) {
        self.current = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_caps() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(800));
        let d: Vec<Duration> = (0..6).map(|_| b.next_delay()).collect();
        assert!(d[0] >= Duration::from_millis(50) && d[0] <= Duration::from_millis(100));
        assert!(d[3] >= Duration::from_millis(400) && d[3] <= Duration::from_millis(800));
        assert!(d[5] >= Duration::from_millis(400) && d[5] <= Duration::from_millis(800));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
