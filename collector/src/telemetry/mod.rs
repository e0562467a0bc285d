//! The collector's own health metrics, registered in one `Registry` and updated once per batch or stream, never
//! per sample. Every stage that has something to count (ingest, persistence, the HTTP server) takes a
//! [`Health`] handle; the exporters render its registry with `/metrics`. Metric names: [`names`].

pub mod names;

use prometheus::{
    Counter, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};

/// Label values of the per-batch counters, resolved at start so that ingest does no label lookup.
#[derive(Debug, Clone)]
pub struct HotCounters {
    pub batches_accepted: IntCounter,
    pub batches_duplicate: IntCounter,
    pub batches_rejected: IntCounter,
    pub markers_accepted: IntCounter,
    pub markers_invalid: IntCounter,
}

/// Health counters shared by ingest, persistence and export.
#[derive(Debug, Clone)]
pub struct Health {
    pub registry: Registry,
    /// `result` = `accepted` | `duplicate` | `rejected`.
    pub batches: IntCounterVec,
    pub samples: IntCounter,
    pub streams: IntGauge,
    /// `reason` = `invalid_argument` | `decode` | `max_series` | `max_batch_bytes` | `label_len`.
    pub rejected_streams: IntCounterVec,
    pub superseded_streams: IntCounter,
    pub gap_batches: IntCounter,
    pub implausible_rates: IntCounter,
    pub counter_resets: IntCounter,
    pub refused_samples: IntCounter,
    pub out_of_order_samples: IntCounter,
    pub ingest_seconds: Histogram,
    pub scrape_seconds: Histogram,
    pub persist_errors: IntCounter,
    pub persist_commits: IntCounter,
    pub expired_nodes: IntCounter,
    /// Rate limit (`limits.max_samples_per_second`): batches after which a stream paused, and seconds paused.
    pub throttled_batches: IntCounter,
    pub throttled_seconds: Counter,
    /// Step markers in accepted batches, `result` = `accepted` | `invalid` (failed validation, dropped).
    pub step_markers: IntCounterVec,
    /// Handles of `batches` and `step_markers` resolved once (the ingest path counts every batch).
    pub hot: HotCounters,
    /// HTTP connections open now, and those closed at accept because `limits.max_http_connections` were
    /// open (the HTTP server counts them).
    pub http_connections: IntGauge,
    pub http_connections_refused: IntCounter,
}

/// Bounded values of the `reason` label of `commwatch_collector_rejected_streams_total`.
pub const REJECT_REASONS: &[&str] = &[
    "invalid_argument",
    "decode",
    "max_series",
    "max_batch_bytes",
    "label_len",
    // Missing or wrong bearer token (`token_file`).
    "unauthenticated",
    // Mutual TLS: the client certificate does not name the node the agent reports as.
    "identity",
];

impl Health {
    pub fn new() -> Result<Health, prometheus::Error> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| -> Result<IntCounter, prometheus::Error> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let batches = IntCounterVec::new(
            Opts::new(
                names::COLLECTOR_BATCHES_TOTAL,
                "Sample batches received, by result.",
            ),
            &["result"],
        )?;
        registry.register(Box::new(batches.clone()))?;
        for r in ["accepted", "duplicate", "rejected"] {
            batches.with_label_values(&[r]);
        }
        let rejected_streams = IntCounterVec::new(
            Opts::new(
                names::COLLECTOR_REJECTED_STREAMS_TOTAL,
                "Agent streams failed by the collector, by reason.",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(rejected_streams.clone()))?;
        for r in REJECT_REASONS {
            rejected_streams.with_label_values(&[r]);
        }
        let streams = IntGauge::new(names::COLLECTOR_STREAMS, "Agent streams open now.")?;
        registry.register(Box::new(streams.clone()))?;
        let ingest_seconds = Histogram::with_opts(
            HistogramOpts::new(
                names::COLLECTOR_INGEST_SECONDS,
                "Time to validate and apply one sample batch to the store.",
            )
            .buckets(vec![1e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2]),
        )?;
        registry.register(Box::new(ingest_seconds.clone()))?;
        let scrape_seconds = Histogram::with_opts(
            HistogramOpts::new(
                names::COLLECTOR_SCRAPE_SECONDS,
                "Time to render /metrics (previous scrapes).",
            )
            .buckets(vec![1e-4, 1e-3, 1e-2, 0.05, 0.1, 0.5, 1.0, 5.0]),
        )?;
        registry.register(Box::new(scrape_seconds.clone()))?;
        let step_markers = IntCounterVec::new(
            Opts::new(
                names::COLLECTOR_STEP_MARKERS_TOTAL,
                "Step markers received in batches, by result (invalid ones are dropped).",
            ),
            &["result"],
        )?;
        registry.register(Box::new(step_markers.clone()))?;
        let hot = HotCounters {
            batches_accepted: batches.with_label_values(&["accepted"]),
            batches_duplicate: batches.with_label_values(&["duplicate"]),
            batches_rejected: batches.with_label_values(&["rejected"]),
            markers_accepted: step_markers.with_label_values(&["accepted"]),
            markers_invalid: step_markers.with_label_values(&["invalid"]),
        };
        let throttled_seconds = Counter::new(
            names::COLLECTOR_THROTTLED_SECONDS_TOTAL,
            "Seconds agent streams were not read because they exceeded limits.max_samples_per_second.",
        )?;
        registry.register(Box::new(throttled_seconds.clone()))?;
        let http_connections = IntGauge::new(
            names::COLLECTOR_HTTP_CONNECTIONS,
            "HTTP connections (/metrics, /api, /healthz) open now.",
        )?;
        registry.register(Box::new(http_connections.clone()))?;
        Ok(Health {
            hot,
            http_connections,
            http_connections_refused: counter(
                names::COLLECTOR_HTTP_CONNECTIONS_REFUSED_TOTAL,
                "HTTP connections closed at accept because limits.max_http_connections were open.",
            )?,
            throttled_batches: counter(
                names::COLLECTOR_THROTTLED_BATCHES_TOTAL,
                "Batches after which an agent stream was paused by limits.max_samples_per_second.",
            )?,
            throttled_seconds,
            step_markers,
            batches,
            samples: counter(names::COLLECTOR_SAMPLES_TOTAL, "Samples applied to the store.")?,
            streams,
            rejected_streams,
            superseded_streams: counter(
                names::COLLECTOR_SUPERSEDED_STREAMS_TOTAL,
                "Agent streams closed because a newer stream claimed the same node.",
            )?,
            gap_batches: counter(
                names::COLLECTOR_GAP_BATCHES_TOTAL,
                "Batches missing between received sequence numbers (lost by agents).",
            )?,
            implausible_rates: counter(
                names::COLLECTOR_IMPLAUSIBLE_RATES_TOTAL,
                "Counter deltas dropped as faster than 4x the link capacity (10 TB/s when unknown).",
            )?,
            counter_resets: counter(names::COLLECTOR_SERIES_RESETS_TOTAL, "Counter resets seen.")?,
            refused_samples: counter(
                names::COLLECTOR_REFUSED_SAMPLES_TOTAL,
                "Samples of series of a kind this collector does not know, skipped.",
            )?,
            out_of_order_samples: counter(
                names::COLLECTOR_OUT_OF_ORDER_SAMPLES_TOTAL,
                "Samples not newer than their series' previous sample, skipped.",
            )?,
            ingest_seconds,
            scrape_seconds,
            persist_errors: counter(
                names::COLLECTOR_PERSIST_ERRORS_TOTAL,
                "SQLite errors; the collector keeps serving from memory.",
            )?,
            persist_commits: counter(names::COLLECTOR_PERSIST_COMMITS_TOTAL, "SQLite transactions committed.")?,
            expired_nodes: counter(
                names::COLLECTOR_EXPIRED_NODES_TOTAL,
                "Nodes removed after no message for node_expiry.",
            )?,
            registry,
        })
    }

    /// A copy of the ingest counters.
    pub fn ingest_stats(&self) -> IngestStats {
        let b = |r: &str| self.batches.with_label_values(&[r]).get();
        IngestStats {
            batches_accepted: b("accepted"),
            batches_duplicate: b("duplicate"),
            batches_rejected: b("rejected"),
            samples: self.samples.get(),
            gap_batches: self.gap_batches.get(),
            rejected_streams: REJECT_REASONS
                .iter()
                .map(|r| self.rejected_streams.with_label_values(&[r]).get())
                .sum(),
            superseded_streams: self.superseded_streams.get(),
            implausible_rates: self.implausible_rates.get(),
            counter_resets: self.counter_resets.get(),
            streams: self.streams.get(),
            persist_errors: self.persist_errors.get(),
        }
    }
}

/// Ingest counters since the collector started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IngestStats {
    pub batches_accepted: u64,
    /// Resent batches (sequence number already held): acked, not applied again.
    pub batches_duplicate: u64,
    /// Batches that failed validation (their stream was failed).
    pub batches_rejected: u64,
    pub samples: u64,
    pub gap_batches: u64,
    /// Streams failed with `INVALID_ARGUMENT` or `RESOURCE_EXHAUSTED`.
    pub rejected_streams: u64,
    pub superseded_streams: u64,
    pub implausible_rates: u64,
    pub counter_resets: u64,
    /// Streams open now.
    pub streams: i64,
    pub persist_errors: u64,
}
