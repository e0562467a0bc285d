//! A probe's parameters, a server's limits, and the decision to accept or refuse (pure).

use std::time::Duration;

use crate::wire::{Refusal, TransportKind};

/// Default bytes per DATA frame or RDMA WRITE (`--size`).
pub const DEFAULT_SIZE: u64 = 1024 * 1024;
/// Default whole-session duration (`--duration`).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(5);
/// Payload of a latency ping in bytes (perftest's `ib_send_lat` uses 2; 8 carries a sequence number).
pub const PING_BYTES: usize = 8;
/// At most this many pings per latency phase, however long it is.
pub const MAX_PINGS: usize = 200_000;

/// What a client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub transport: TransportKind,
    /// Bytes per DATA frame or RDMA WRITE.
    pub size: u64,
    /// The whole session: upload, download and latency.
    pub duration: Duration,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            transport: TransportKind::Tcp,
            size: DEFAULT_SIZE,
            duration: DEFAULT_DURATION,
        }
    }
}

/// How long each phase lasts: 40% of the session for each bulk direction, 20% for latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spans {
    pub upload: Duration,
    pub download: Duration,
    pub latency: Duration,
}

impl Params {
    pub fn spans(&self) -> Spans {
        let bulk = self.duration.mul_f64(0.4);
        Spans {
            upload: bulk,
            download: bulk,
            latency: self.duration.saturating_sub(bulk * 2),
        }
    }
}

/// A server's limits: a probe never competes with training for long or with much memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest `size` accepted, in bytes.
    pub max_size: u64,
    /// Longest `duration` accepted.
    pub max_duration: Duration,
    /// Shortest time between the starts of two accepted probes (zero: no pacing beyond one at a time).
    pub min_interval: Duration,
}

impl Default for Limits {
    /// The defaults of `probe serve`: 16 MiB, 30 s, no pacing.
    fn default() -> Self {
        Limits {
            max_size: 16 * 1024 * 1024,
            max_duration: Duration::from_secs(30),
            min_interval: Duration::ZERO,
        }
    }
}

/// Compares two tokens in time independent of where they differ.
pub fn token_matches(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// Checks a request against the token and the limits; the refusal and its words when declined.
pub fn check(
    expected_token: Option<&str>,
    given_token: &str,
    params: &Params,
    limits: &Limits,
) -> Result<(), (Refusal, String)> {
    if let Some(t) = expected_token {
        if !token_matches(t, given_token) {
            return Err((Refusal::Token, "the probe token is wrong".into()));
        }
    }
    if params.size == 0 || params.size > limits.max_size {
        return Err((
            Refusal::Limits,
            format!(
                "size {} bytes is outside 1..={} bytes",
                params.size, limits.max_size
            ),
        ));
    }
    if params.duration.is_zero() || params.duration > limits.max_duration {
        return Err((
            Refusal::Limits,
            format!(
                "duration {:.3} s is outside (0, {:.3}] s",
                params.duration.as_secs_f64(),
                limits.max_duration.as_secs_f64()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(token_matches("abc", "abc"));
        assert!(!token_matches("abc", "abd"));
        assert!(!token_matches("abc", "ab"));
        assert!(!token_matches("abc", "abcd"));
        assert!(!token_matches("abc", ""));
    }

    #[test]
    fn check_names_the_refusal() {
        let l = Limits::default();
        let p = Params::default();
        assert_eq!(check(Some("s"), "s", &p, &l), Ok(()));
        assert_eq!(check(None, "", &p, &l), Ok(()));
        assert_eq!(check(Some("s"), "x", &p, &l).unwrap_err().0, Refusal::Token);
        let big = Params {
            size: l.max_size + 1,
            ..p
        };
        let (r, why) = check(None, "", &big, &l).unwrap_err();
        assert_eq!(r, Refusal::Limits);
        assert!(why.contains("16777217"), "{why}");
        let long = Params {
            duration: Duration::from_secs(31),
            ..p
        };
        assert_eq!(check(None, "", &long, &l).unwrap_err().0, Refusal::Limits);
        let zero = Params { size: 0, ..p };
        assert_eq!(check(None, "", &zero, &l).unwrap_err().0, Refusal::Limits);
    }

    #[test]
    fn spans_add_up_to_the_duration() {
        let s = Params::default().spans();
        assert_eq!(s.upload, Duration::from_secs(2));
        assert_eq!(s.download, Duration::from_secs(2));
        assert_eq!(s.latency, Duration::from_secs(1));
    }
}
