//! How much a bulk phase keeps in flight and how long it waits, from the rate measured so far (pure).
//!
//! A fixed window of large messages outlasts a fixed deadline on a slow path: 128 RDMA WRITEs of 1 MiB take
//! 11 s at 12 MB/s. So the window holds what the path moves in [`DRAIN_TARGET`] at the measured rate, and a
//! wait lasts [`SLACK`] times what the messages it waits for take at that rate, never less than the floor the
//! caller gives (the protocol's grace). A slow path then gives a slow figure, and a stalled one still fails.

use std::time::Duration;

/// The writes in flight take this long to complete at the measured rate (at least one write is in flight).
pub const DRAIN_TARGET: Duration = Duration::from_millis(250);
/// A wait lasts this many times what the awaited bytes take at the measured rate.
pub const SLACK: f64 = 4.0;
/// Bytes a TCP sender can have queued beyond the receiver at the end of its span: Linux's largest default
/// send buffer (`tcp_wmem` max, 4 MiB) and receive buffer (`tcp_rmem` max, 6 MiB).
pub const TCP_BACKLOG_BYTES: u64 = 10 * 1024 * 1024;

/// Bytes moved over seconds, as counted so far in a phase.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rate {
    pub bytes: u64,
    pub seconds: f64,
}

impl Rate {
    /// Bytes per second; `None` until something moved in a measurable time.
    pub fn bytes_per_second(&self) -> Option<f64> {
        (self.bytes > 0 && self.seconds > 0.0 && self.seconds.is_finite())
            .then(|| self.bytes as f64 / self.seconds)
    }
}

/// Messages of `size` bytes to keep in flight: what moves in [`DRAIN_TARGET`] at `rate`, between 1 and
/// `cap`. One until a rate is measured, so the first completion measures the path.
pub fn window(rate: Rate, size: u64, cap: u64) -> u64 {
    let cap = cap.max(1);
    let Some(bps) = rate.bytes_per_second() else {
        return 1;
    };
    let n = (bps * DRAIN_TARGET.as_secs_f64() / size.max(1) as f64).ceil();
    if n >= cap as f64 {
        cap
    } else {
        (n as u64).max(1)
    }
}

/// How long to wait for `bytes` more at `rate`: [`SLACK`] times their time at that rate, at least `floor`;
/// `floor` alone until a rate is measured.
pub fn wait_for(rate: Rate, bytes: u64, floor: Duration) -> Duration {
    let Some(bps) = rate.bytes_per_second() else {
        return floor;
    };
    let secs = SLACK * bytes as f64 / bps;
    // Far beyond any probe's limits: the floor's caller bounds the session anyway.
    let secs = secs.min(86_400.0);
    floor.max(Duration::from_secs_f64(secs))
}

/// How long a TCP bulk phase may run in all: its span, then what the sender may still have queued
/// ([`TCP_BACKLOG_BYTES`]) at the measured rate with [`SLACK`], at least `floor` beyond the span.
pub fn tcp_phase_limit(span: Duration, rate: Rate, floor: Duration) -> Duration {
    span + wait_for(rate, TCP_BACKLOG_BYTES, floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;
    const GRACE: Duration = Duration::from_secs(10);

    fn rate(bytes: u64, seconds: f64) -> Rate {
        Rate { bytes, seconds }
    }

    #[test]
    fn no_rate_until_bytes_moved_in_measurable_time() {
        assert_eq!(Rate::default().bytes_per_second(), None);
        assert_eq!(rate(10, 0.0).bytes_per_second(), None);
        assert_eq!(rate(0, 1.0).bytes_per_second(), None);
        assert_eq!(rate(10, f64::INFINITY).bytes_per_second(), None);
        assert_eq!(rate(1000, 2.0).bytes_per_second(), Some(500.0));
    }

    #[test]
    fn the_window_holds_a_quarter_second_at_the_measured_rate() {
        // Before any completion: one write, whatever the size.
        assert_eq!(window(Rate::default(), MIB, 128), 1);
        // 12 MB/s with 1 MiB writes: 3 MB in a quarter second is 2.86 writes, so 3.
        assert_eq!(window(rate(12_000_000, 1.0), MIB, 128), 3);
        // A path slower than one write per quarter second keeps one write in flight.
        assert_eq!(window(rate(1_000_000, 1.0), MIB, 128), 1);
        // 25 MB/s with 64 KiB writes: 95.4, so 96.
        assert_eq!(window(rate(25_000_000, 1.0), 64 * 1024, 128), 96);
        // A fast path reaches the cap (perftest's depth).
        assert_eq!(window(rate(12_000_000_000, 1.0), MIB, 128), 128);
        assert_eq!(window(rate(12_000_000_000, 1.0), 0, 128), 128);
        assert_eq!(window(rate(1, 1.0), MIB, 0), 1);
    }

    #[test]
    fn in_flight_bytes_drain_in_about_the_target_at_any_rate() {
        for bps in [200_000u64, 1_000_000, 12_000_000, 100_000_000] {
            let r = rate(bps, 1.0);
            let w = window(r, MIB, 128);
            let drain = (w * MIB) as f64 / bps as f64;
            // One write at least; above that, no more than the target plus one write.
            assert!(
                w == 1 || drain <= DRAIN_TARGET.as_secs_f64() + MIB as f64 / bps as f64,
                "{bps} B/s: {w} writes drain in {drain} s"
            );
        }
    }

    #[test]
    fn waits_follow_the_rate_above_the_floor() {
        assert_eq!(wait_for(Rate::default(), MIB, GRACE), GRACE);
        // 1 MiB at 12 MB/s is 87 ms; four times that is under the floor.
        assert_eq!(wait_for(rate(12_000_000, 1.0), MIB, GRACE), GRACE);
        // 1 MiB at 200 kB/s is 5.24 s; four times that is 20.97 s.
        let w = wait_for(rate(200_000, 1.0), MIB, GRACE);
        assert!((w.as_secs_f64() - 20.971_52).abs() < 1e-6, "{w:?}");
        // A rate that is nearly nothing is bounded, not an overflow.
        assert_eq!(
            wait_for(rate(1, 1e12), MIB, GRACE),
            Duration::from_secs(86_400)
        );
    }

    #[test]
    fn a_tcp_phase_may_outlast_its_span_by_the_sender_backlog_at_the_rate() {
        let span = Duration::from_secs(2);
        assert_eq!(tcp_phase_limit(span, Rate::default(), GRACE), span + GRACE);
        assert_eq!(
            tcp_phase_limit(span, rate(100_000_000, 1.0), GRACE),
            span + GRACE
        );
        // 10 MiB at 1 MB/s is 10.49 s; four times that is 41.94 s.
        let l = tcp_phase_limit(span, rate(1_000_000, 1.0), GRACE);
        assert!((l.as_secs_f64() - 43.943_04).abs() < 1e-6, "{l:?}");
    }
}
