//! The `flapping` fault variant: one HCA port goes down and up every few seconds while its traffic
//! reroutes over the node's other rails.
//!
//! The port is `fault_hca` of the fault node. Its job's steps run in flap cycles of
//! `every = max(2, round(4 s / P))` steps, the last `down = clamp(round(1 s / P), 1, every − 1)` of them
//! with the port down (defaults: 13-step cycles of 4.03 s, down for steps 10–12 of each, 0.93 s). The state
//! changes at step starts, so a step is either wholly up or wholly down:
//!
//! - `ports/1/state` reads `1: DOWN` and `phys_state` `2: Polling` while down (`4: ACTIVE`, `5: LinkUp`
//!   otherwise); the port's IPoIB netdev reads `operstate` `down` and `carrier` `0`.
//! - `link_downed` rises by one at each down transition (saturating at 255, its 8-bit PMA width).
//! - In a down step the port moves no AllReduce bytes; its share is split over the node's other rails
//!   (`reroute`), so their burst takes longer and the whole ring waits (defaults: 495 000 000 B per other
//!   rail, 22.5 ms instead of 19.6875 ms; the nominal step leaves room for it).
//! - Background and multicast traffic are counted throughout (a simplification: tens of kB/s).

use std::time::Duration;

/// `state` of a port that is up / down.
pub const STATE_UP: &str = "4: ACTIVE";
/// `state` of a port that is down.
pub const STATE_DOWN: &str = "1: DOWN";
/// `phys_state` of a port that is up.
pub const PHYS_STATE_UP: &str = "5: LinkUp";
/// `phys_state` of a port that is down (training again).
pub const PHYS_STATE_DOWN: &str = "2: Polling";
/// How often the port flaps, roughly.
pub const FLAP_EVERY: Duration = Duration::from_secs(4);
/// How long it stays down each time, roughly.
pub const FLAP_DOWN: Duration = Duration::from_secs(1);

/// The flap cycle, in steps of the port's job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlapCycle {
    /// Steps per cycle.
    pub(crate) every: u64,
    /// Down steps at the end of each cycle.
    pub(crate) down: u64,
}

impl FlapCycle {
    /// The cycle for steps of nominal length `period_ns` ([`FLAP_EVERY`], [`FLAP_DOWN`] in whole steps).
    pub(crate) fn for_period(period_ns: u64) -> FlapCycle {
        let steps = |d: Duration| {
            let p = u128::from(period_ns.max(1));
            ((d.as_nanos() + p / 2) / p) as u64
        };
        let every = steps(FLAP_EVERY).max(2);
        let down = steps(FLAP_DOWN).clamp(1, every - 1);
        FlapCycle { every, down }
    }

    /// Whether the port is down during step `k`.
    pub(crate) fn is_down(&self, k: u64) -> bool {
        k % self.every >= self.every - self.down
    }

    /// Down steps among steps `0..k`.
    pub(crate) fn downs_before(&self, k: u64) -> u64 {
        (k / self.every) * self.down + (k % self.every).saturating_sub(self.every - self.down)
    }

    /// Whether the state changes at the start of step `k` (or `k` starts a cycle).
    pub(crate) fn is_boundary(&self, k: u64) -> bool {
        let r = k % self.every;
        r == 0 || r == self.every - self.down
    }

    /// Down transitions up to and including the start of step `k`.
    pub(crate) fn transitions_by(&self, k: u64) -> u64 {
        k / self.every + u64::from(self.is_down(k))
    }
}

/// The bytes per rail of a step in which rail `port` is down: its bytes split over the other rails (floor,
/// the remainder one byte each to the lowest), `port` itself at 0. With a single rail nothing moves.
pub(crate) fn reroute(rails: &[u64], port: usize) -> Vec<u64> {
    let mut out = rails.to_vec();
    let others = rails.len().saturating_sub(1) as u64;
    let Some(moved) = out.get_mut(port).map(std::mem::take) else {
        return out;
    };
    if others == 0 {
        return out;
    }
    let (each, extra) = (moved / others, moved % others);
    for (i, r) in (0..rails.len()).filter(|&r| r != port).enumerate() {
        out[r] += each + u64::from((i as u64) < extra);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycle_counts_down_steps_and_transitions() {
        let f = FlapCycle::for_period(309_687_500);
        assert_eq!((f.every, f.down), (13, 3));
        let downs: Vec<u64> = (0..26).filter(|&k| f.is_down(k)).collect();
        assert_eq!(downs, vec![10, 11, 12, 23, 24, 25]);
        for k in 0..40 {
            assert_eq!(
                f.downs_before(k),
                (0..k).filter(|&j| f.is_down(j)).count() as u64
            );
        }
        assert_eq!(f.transitions_by(9), 0);
        assert_eq!(f.transitions_by(10), 1);
        assert_eq!(f.transitions_by(13), 1);
        assert_eq!(f.transitions_by(23), 2);
        assert!(f.is_boundary(0) && f.is_boundary(10) && f.is_boundary(13) && !f.is_boundary(11));
        // Very long steps: at least one up and one down step.
        let f = FlapCycle::for_period(10_000_000_000);
        assert_eq!((f.every, f.down), (2, 1));
    }

    #[test]
    fn reroute_keeps_the_node_total() {
        let r = reroute(&[10, 10, 10, 10], 1);
        assert_eq!(r, vec![14, 0, 13, 13]);
        assert_eq!(r.iter().sum::<u64>(), 40);
        assert_eq!(reroute(&[7], 0), vec![0]);
    }
}
