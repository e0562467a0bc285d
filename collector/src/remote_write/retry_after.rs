//! The `Retry-After` header of a 429 or 5xx answer (RFC 9110 §10.2.3): `delay-seconds` (a non-negative
//! integer) or an HTTP date. Pure: the current time is passed in.
//!
//! Contract: the wait the receiver asks for, `None` when the header is absent or unreadable (the sender's own
//! backoff applies then). A date in the past is a wait of zero. The sender waits the longer of this and its
//! own backoff step, and gives the request up (counted failed) when the wait would end after `retry_for`.

use std::time::{Duration, SystemTime};

/// The longest wait read from the header: a year. Longer values (or absurd integers) are read as this, and
/// `retry_for` (at most hours) makes the sender give the request up.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(365 * 24 * 3600);

/// The wait `value` asks for, relative to `now`.
pub fn parse(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Digits only: delay-seconds. Too many digits for a u64 is still "a very long time".
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_RETRY_AFTER),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_dates_and_garbage() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
        assert_eq!(parse("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(parse("99999999999999999999999", now), Some(MAX_RETRY_AFTER));
        assert_eq!(
            parse("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        // The obsolete forms RFC 9110 says a recipient must read.
        assert_eq!(
            parse("Wednesday, 21-Oct-15 07:29:00 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse("Wed Oct 21 07:28:05 2015", now),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            parse("Tue, 20 Oct 2015 07:28:00 GMT", now),
            Some(Duration::ZERO),
            "a past date: no wait"
        );
        for bad in ["", "-5", "1.5", "soon", "Wed, 32 Oct 2015 07:28:00 GMT"] {
            assert_eq!(parse(bad, now), None, "{bad:?}");
        }
    }
}
