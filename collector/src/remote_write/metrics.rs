//! Remote write's own health, in the collector's registry (and so in `/metrics` and in what it sends):
//! samples sent, failed and dropped, requests sent, retried and failed, bytes sent, samples queued.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::telemetry::names;

/// Handles resolved once at start.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub samples_sent: IntCounter,
    /// Refused by the receiver (a status other than 2xx, 5xx, 429) or retried for longer than `retry_for`.
    pub samples_failed: IntCounter,
    /// Evicted from the full queue, or still queued when the flush at stop ran out of time.
    pub samples_dropped: IntCounter,
    pub requests_sent: IntCounter,
    /// Attempts that failed with 5xx, 429 or a network error and were tried again.
    pub requests_retried: IntCounter,
    pub requests_failed: IntCounter,
    /// Compressed request bodies accepted by the receiver, bytes.
    pub bytes_sent: IntCounter,
    pub queue_samples: IntGauge,
}

impl Metrics {
    /// Registers the families in `registry` (every `result` present from the start, at 0).
    pub fn register(registry: &Registry) -> Result<Metrics, prometheus::Error> {
        let samples = IntCounterVec::new(
            Opts::new(
                names::COLLECTOR_REMOTE_WRITE_SAMPLES_TOTAL,
                "Samples handed to remote write, by result (sent, failed, dropped).",
            ),
            &["result"],
        )?;
        registry.register(Box::new(samples.clone()))?;
        let requests = IntCounterVec::new(
            Opts::new(
                names::COLLECTOR_REMOTE_WRITE_REQUESTS_TOTAL,
                "Remote-write requests, by result (sent, retried, failed).",
            ),
            &["result"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        let bytes_sent = IntCounter::new(
            names::COLLECTOR_REMOTE_WRITE_BYTES_TOTAL,
            "Compressed remote-write request bytes accepted by the receiver.",
        )?;
        registry.register(Box::new(bytes_sent.clone()))?;
        let queue_samples = IntGauge::new(
            names::COLLECTOR_REMOTE_WRITE_QUEUE_SAMPLES,
            "Samples waiting in the remote-write queue.",
        )?;
        registry.register(Box::new(queue_samples.clone()))?;
        Ok(Metrics {
            samples_sent: samples.with_label_values(&["sent"]),
            samples_failed: samples.with_label_values(&["failed"]),
            samples_dropped: samples.with_label_values(&["dropped"]),
            requests_sent: requests.with_label_values(&["sent"]),
            requests_retried: requests.with_label_values(&["retried"]),
            requests_failed: requests.with_label_values(&["failed"]),
            bytes_sent,
            queue_samples,
        })
    }
}
