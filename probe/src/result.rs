//! A probe's result, as JSON (`--format json`) and as text.

use serde::{Deserialize, Serialize};

use crate::session::Outcome;
use crate::stats::{bandwidth, summarise};
use crate::wire::TransportKind;

/// One probe between this host and a target. Bandwidths in bytes/s, latency as the round trip of one small
/// message in seconds (half of it is what perftest's `ib_send_lat` prints).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    pub target: String,
    pub transport: TransportKind,
    /// Bytes per message of the bulk phases.
    pub size_bytes: u64,
    /// This host → target.
    pub tx_bytes_per_second: f64,
    /// Target → this host.
    pub rx_bytes_per_second: f64,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub latency_samples: u64,
    pub latency_p50_seconds: f64,
    pub latency_p99_seconds: f64,
    pub latency_max_seconds: f64,
}

impl ProbeResult {
    pub fn new(target: &str, transport: TransportKind, size: u64, o: &Outcome) -> ProbeResult {
        let l = summarise(&o.rtts);
        ProbeResult {
            target: target.to_string(),
            transport,
            size_bytes: size,
            tx_bytes_per_second: bandwidth(o.upload.bytes, o.upload.seconds),
            rx_bytes_per_second: bandwidth(o.download.bytes, o.download.seconds),
            tx_bytes: o.upload.bytes,
            rx_bytes: o.download.bytes,
            latency_samples: l.samples,
            latency_p50_seconds: l.p50_seconds,
            latency_p99_seconds: l.p99_seconds,
            latency_max_seconds: l.max_seconds,
        }
    }

    /// The text report, a few aligned lines.
    pub fn to_text(&self) -> String {
        let bw = |b: f64| format!("{:>9.3} GB/s  ({:.2} Gb/s)", b / 1e9, b * 8.0 / 1e9);
        let us = |s: f64| format!("{:.1} µs", s * 1e6);
        format!(
            "probe {} over {} ({} B messages)\n  bandwidth to target    {}\n  bandwidth from target  {}\n  \
             latency (round trip)   p50 {}  p99 {}  max {}  ({} samples)\n",
            self.target.escape_debug(),
            self.transport.as_str(),
            self.size_bytes,
            bw(self.tx_bytes_per_second),
            bw(self.rx_bytes_per_second),
            us(self.latency_p50_seconds),
            us(self.latency_p99_seconds),
            us(self.latency_max_seconds),
            self.latency_samples
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Measure;
    use std::time::Duration;

    #[test]
    fn result_from_an_outcome() {
        let o = Outcome {
            upload: Measure {
                bytes: 2_000_000_000,
                seconds: 2.0,
            },
            download: Measure {
                bytes: 500_000_000,
                seconds: 1.0,
            },
            rtts: vec![Duration::from_micros(10), Duration::from_micros(20)],
        };
        let r = ProbeResult::new("h:1", TransportKind::Tcp, 4096, &o);
        assert_eq!(r.tx_bytes_per_second, 1e9);
        assert_eq!(r.rx_bytes_per_second, 5e8);
        assert_eq!(r.latency_samples, 2);
        let t = r.to_text();
        assert!(
            t.contains("bandwidth to target        1.000 GB/s  (8.00 Gb/s)"),
            "{t}"
        );
        assert!(
            t.contains("p50 10.0 µs  p99 20.0 µs  max 20.0 µs  (2 samples)"),
            "{t}"
        );
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["transport"], "tcp");
        assert_eq!(j["rx_bytes_per_second"], 5e8);
    }
}
