//! The sampling periods, shared between the sampling thread (which reads them every tick) and the shipper
//! (which applies the collector's `Config`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Sampling periods, changeable at run time (the collector's `Config`).
#[derive(Debug)]
pub struct Periods {
    fast_ms: AtomicU64,
    slow_ms: AtomicU64,
}

impl Periods {
    pub fn new(fast: Duration, slow: Duration) -> Arc<Periods> {
        Arc::new(Periods {
            fast_ms: AtomicU64::new(fast.as_millis() as u64),
            slow_ms: AtomicU64::new(slow.as_millis() as u64),
        })
    }
    pub fn fast(&self) -> Duration {
        Duration::from_millis(self.fast_ms.load(Ordering::Relaxed))
    }
    pub fn slow(&self) -> Duration {
        Duration::from_millis(self.slow_ms.load(Ordering::Relaxed))
    }
    /// Applies a requested change, clamped to 5 ms..60 s (fast) and fast..10 min (slow); 0 keeps a period.
    pub fn apply(&self, fast_ms: u32, slow_ms: u32) {
        if fast_ms > 0 {
            self.fast_ms
                .store(u64::from(fast_ms).clamp(5, 60_000), Ordering::Relaxed);
        }
        // The slow tier never runs faster than the fast one, whichever of the two changed.
        let fast = self.fast_ms.load(Ordering::Relaxed);
        let slow = match slow_ms {
            0 => self.slow_ms.load(Ordering::Relaxed),
            v => u64::from(v),
        };
        self.slow_ms
            .store(slow.clamp(fast, 600_000), Ordering::Relaxed);
    }
}

impl crate::source::Cadence for Periods {
    fn period(&self, tier: commwatch_model::Tier) -> Duration {
        match tier {
            commwatch_model::Tier::Fast => self.fast(),
            commwatch_model::Tier::Slow => self.slow(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_clamp() {
        let p = Periods::new(Duration::from_millis(50), Duration::from_secs(1));
        p.apply(1, 0);
        assert_eq!(p.fast(), Duration::from_millis(5));
        p.apply(0, 2);
        assert_eq!(p.slow(), Duration::from_millis(5));
        p.apply(100, 2000);
        assert_eq!(
            (p.fast(), p.slow()),
            (Duration::from_millis(100), Duration::from_secs(2))
        );
        // A slower fast tier alone never leaves the slow tier below it.
        p.apply(5000, 0);
        assert_eq!(
            (p.fast(), p.slow()),
            (Duration::from_secs(5), Duration::from_secs(5))
        );
    }
}
