//! Whether the node's fabric is busy: a probe declines rather than compete with training for the link.

/// Answers whether the node is too busy to be probed now. The agent implements it from its own recent fabric
/// counters; `probe serve` run by hand never declines.
pub trait BusyCheck: Send + Sync {
    /// `Some(why)` (e.g. "mlx5_0 port 1 moved 12.3 GB/s in the last 10 s") while busy; `None` when idle.
    fn busy(&self) -> Option<String>;
}

/// Never busy.
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverBusy;

impl BusyCheck for NeverBusy {
    fn busy(&self) -> Option<String> {
        None
    }
}

/// Busy when a fabric link's recent rate is over a fraction of its capacity (pure; the agent feeds it).
///
/// `links` are `(name, recent bytes/s, capacity bytes/s)`; a link with unknown capacity (0) counts as busy above
/// `floor` bytes/s.
pub fn busy_from_rates(links: &[(String, f64, f64)], fraction: f64, floor: f64) -> Option<String> {
    links.iter().find_map(|(name, rate, capacity)| {
        let limit = if *capacity > 0.0 {
            capacity * fraction
        } else {
            floor
        };
        (*rate > limit).then(|| {
            format!(
                "{name} carries {:.3} GB/s (over {:.3} GB/s)",
                rate / 1e9,
                limit / 1e9
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_above_the_fraction_of_capacity() {
        let links = vec![
            ("mlx5_0/1".to_string(), 1e9, 25e9),
            ("ib0".to_string(), 6e9, 25e9),
        ];
        assert!(busy_from_rates(&links, 0.5, 1e8).is_none());
        let why = busy_from_rates(&links, 0.2, 1e8).unwrap();
        assert!(why.starts_with("ib0 carries 6.000 GB/s"), "{why}");
        let unknown = vec![("eth9".to_string(), 2e8, 0.0)];
        assert!(busy_from_rates(&unknown, 0.5, 1e8).is_some());
        assert!(NeverBusy.busy().is_none());
    }
}
