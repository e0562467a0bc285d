//! Warnings a peer can repeat at will (failed handshakes, refused connections, wrong tokens, unreachable
//! shards, a receiver's errors) are logged at most once per interval per kind, with the number held back
//! since: the counters say how many, the log says that it happens and what it looks like, and a flood of bad
//! peers cannot flood the log. The one throttle of the agent, the collector and the probe server.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lets one warning of each kind through per interval.
#[derive(Debug)]
pub struct LogThrottle {
    every: Duration,
    /// Per kind: when one was last let through, and how many were held back since.
    state: Mutex<HashMap<&'static str, (Instant, u64)>>,
}

impl LogThrottle {
    /// A throttle that lets one warning of each kind through every `every`.
    pub fn new(every: Duration) -> LogThrottle {
        LogThrottle {
            every,
            state: Mutex::new(HashMap::new()),
        }
    }

    /// The interval it was made with.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// Whether a warning of `kind` at `now` may be logged: `Some(held)` with the number held back since the
    /// last one let through, or `None` (held back, counted).
    pub fn allow(&self, kind: &'static str, now: Instant) -> Option<u64> {
        // A panic elsewhere while the lock was held leaves counts that are still counts.
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match state.get_mut(kind) {
            Some((last, held)) if now.duration_since(*last) < self.every => {
                *held += 1;
                None
            }
            Some((last, held)) => {
                *last = now;
                Some(std::mem::take(held))
            }
            None => {
                state.insert(kind, (now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_per_interval_per_kind_with_the_count_held_back() {
        let t = LogThrottle::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(t.allow("a", t0), Some(0));
        assert_eq!(t.allow("a", t0 + Duration::from_secs(1)), None);
        assert_eq!(t.allow("a", t0 + Duration::from_secs(9)), None);
        assert_eq!(t.allow("b", t0 + Duration::from_secs(9)), Some(0));
        assert_eq!(t.allow("a", t0 + Duration::from_secs(10)), Some(2));
        assert_eq!(t.allow("a", t0 + Duration::from_secs(11)), None);
        assert_eq!(t.every(), Duration::from_secs(10));
    }
}
