//! Wrong probe tokens, throttled per peer address (pure: every call takes the time). An address may try
//! [`AUTH_BURST`] wrong tokens at once, then one more per [`AUTH_REFILL`]; past that its `hello` is refused
//! without the token being compared. A guesser then gets about one guess a second per address instead of
//! thousands, and an operator who mistyped a token a few times is not held up.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong tokens an address may send at once before it is throttled.
pub const AUTH_BURST: u32 = 5;
/// One more wrong token is allowed per this interval once the burst is spent.
pub const AUTH_REFILL: Duration = Duration::from_secs(1);
/// Most addresses remembered; past it, those whose burst is whole again are forgotten first, then all.
pub const MAX_PEERS_TRACKED: usize = 4096;

/// One address's tries left, as of `at`.
#[derive(Debug, Clone, Copy)]
struct Tries {
    left: f64,
    at: Instant,
}

impl Tries {
    /// The tries left at `now`, the refill since `at` added (never above the burst).
    fn at(self, now: Instant) -> f64 {
        let refill =
            now.saturating_duration_since(self.at).as_secs_f64() / AUTH_REFILL.as_secs_f64();
        (self.left + refill).min(f64::from(AUTH_BURST))
    }
}

/// The wrong-token budget of every address. Share it; every method locks briefly.
#[derive(Debug, Default)]
pub struct AuthThrottle {
    peers: Mutex<HashMap<IpAddr, Tries>>,
}

impl AuthThrottle {
    /// Whether `peer` may have its token compared at `now`; `Err(wait)` with the time until it may.
    pub fn may_try(&self, peer: IpAddr, now: Instant) -> Result<(), Duration> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let Some(left) = peers.get(&peer).map(|t| t.at(now)) else {
            return Ok(());
        };
        if left >= 1.0 {
            return Ok(());
        }
        Err(AUTH_REFILL.mul_f64(1.0 - left))
    }

    /// Records a wrong token from `peer` at `now`.
    pub fn failed(&self, peer: IpAddr, now: Instant) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if peers.len() >= MAX_PEERS_TRACKED && !peers.contains_key(&peer) {
            let burst = f64::from(AUTH_BURST);
            peers.retain(|_, t| t.at(now) < burst);
            if peers.len() >= MAX_PEERS_TRACKED {
                peers.clear();
            }
        }
        let left = peers
            .get(&peer)
            .map_or(f64::from(AUTH_BURST), |t| t.at(now));
        peers.insert(
            peer,
            Tries {
                left: (left - 1.0).max(0.0),
                at: now,
            },
        );
    }

    /// Addresses remembered now.
    pub fn tracked(&self) -> usize {
        self.peers.lock().map_or(0, |p| p.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_a_second_per_address() {
        let t = AuthThrottle::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..AUTH_BURST {
            assert_eq!(t.may_try(a, t0), Ok(()));
            t.failed(a, t0);
        }
        let wait = t.may_try(a, t0).unwrap_err();
        assert!(wait <= AUTH_REFILL && wait > Duration::ZERO, "{wait:?}");
        // Another address is not held up.
        assert_eq!(t.may_try(b, t0), Ok(()));
        // Half a second later: still waiting; a second later one more try.
        assert!(t.may_try(a, t0 + AUTH_REFILL / 2).is_err());
        let t1 = t0 + AUTH_REFILL;
        assert_eq!(t.may_try(a, t1), Ok(()));
        t.failed(a, t1);
        assert!(t.may_try(a, t1).is_err());
        // Long quiet: the whole burst again, never more.
        let later = t1 + AUTH_REFILL * 100;
        for _ in 0..AUTH_BURST {
            assert_eq!(t.may_try(a, later), Ok(()));
            t.failed(a, later);
        }
        assert!(t.may_try(a, later).is_err());
    }

    #[test]
    fn the_addresses_remembered_are_bounded() {
        let t = AuthThrottle::default();
        let t0 = Instant::now();
        for i in 0..(MAX_PEERS_TRACKED as u32 + 10) {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            t.failed(ip, t0);
        }
        assert!(t.tracked() <= MAX_PEERS_TRACKED, "{}", t.tracked());
    }
}
