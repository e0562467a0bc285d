//! The one connection cap of every TCP listener commwatch runs (the collector's and the agent's HTTP, the
//! probe servers of `probe serve` and the agent): at most `max` connections held at once; one accepted beyond
//! that is closed at once by its listener and counted, so a flood costs a bounded number of file descriptors
//! and the process's other listeners keep theirs.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntCounter, IntGauge};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most connections a listener holds at once whatever it is configured with (the validation bound of
/// `limits.max_http_connections`).
pub const MAX_CONNECTIONS_BOUND: usize = 1_000_000;

/// Where a listener counts its connections.
#[derive(Debug, Clone)]
pub struct ConnectionMetrics {
    /// Connections open now.
    pub open: IntGauge,
    /// Connections closed at accept because the cap's connections were open.
    pub refused: IntCounter,
}

impl ConnectionMetrics {
    /// Metrics registered nowhere (a listener whose owner exports none, and tests); `prefix` names them.
    pub fn unregistered(prefix: &str) -> ConnectionMetrics {
        let gauge = IntGauge::new(format!("{prefix}_connections"), "Connections open now.");
        let counter = IntCounter::new(
            format!("{prefix}_connections_refused_total"),
            "Connections closed at accept because the listener's connection limit was reached.",
        );
        ConnectionMetrics {
            // Both names are valid by construction for a valid prefix; fall back to fixed names otherwise.
            open: gauge
                .unwrap_or_else(|_| IntGauge::new("connections", "open").expect("valid name")),
            refused: counter.unwrap_or_else(|_| {
                IntCounter::new("refused_total", "refused").expect("valid name")
            }),
        }
    }
}

/// A listener's cap. Clones share the slots and the metrics.
#[derive(Debug, Clone)]
pub struct ConnectionCap {
    slots: Arc<Semaphore>,
    max: usize,
    metrics: ConnectionMetrics,
}

/// An admitted connection's slot: returns the slot and lowers the gauge when dropped, however the connection
/// ends.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    open: IntGauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl ConnectionCap {
    /// A cap of `max` connections, clamped to `1..=`[`MAX_CONNECTIONS_BOUND`].
    pub fn new(max: usize, metrics: ConnectionMetrics) -> ConnectionCap {
        let max = max.clamp(1, MAX_CONNECTIONS_BOUND);
        ConnectionCap {
            slots: Arc::new(Semaphore::new(max)),
            max,
            metrics,
        }
    }

    /// The cap after clamping.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A slot for a connection just accepted, or `None` when `max` are open: the caller closes it, and the
    /// refusal is counted here.
    pub fn admit(&self) -> Option<Slot> {
        match self.slots.clone().try_acquire_owned() {
            Ok(permit) => {
                self.metrics.open.inc();
                Some(Slot {
                    _permit: permit,
                    open: self.metrics.open.clone(),
                })
            }
            Err(_) => {
                self.metrics.refused.inc();
                None
            }
        }
    }

    /// Connections holding a slot now.
    pub fn open(&self) -> usize {
        self.max - self.slots.available_permits()
    }

    /// Waits until every slot is back (every connection ended), at most `within`; the number still open
    /// when it gave up.
    pub async fn drained(&self, within: Duration) -> Result<(), usize> {
        let all = u32::try_from(self.max).unwrap_or(u32::MAX);
        match tokio::time::timeout(within, self.slots.acquire_many(all)).await {
            Ok(_) => Ok(()),
            Err(_) => Err(self.open()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn admits_up_to_the_cap_counts_the_rest_and_frees_on_drop() {
        let m = ConnectionMetrics::unregistered("t");
        let cap = ConnectionCap::new(2, m.clone());
        let a = cap.admit().unwrap();
        let b = cap.admit().unwrap();
        assert!(cap.admit().is_none());
        assert!(cap.admit().is_none());
        assert_eq!((m.open.get(), m.refused.get(), cap.open()), (2, 2, 2));
        drop(a);
        assert_eq!(m.open.get(), 1);
        let c = cap.admit().unwrap();
        assert_eq!(
            cap.drained(Duration::from_millis(20)).await,
            Err(2),
            "two still open"
        );
        drop((b, c));
        assert_eq!(cap.drained(Duration::from_secs(1)).await, Ok(()));
        assert_eq!(ConnectionCap::new(0, m).max(), 1);
    }
}
