//! The agent's own health, exported on its `/metrics`: per-source read durations and errors, the resend
//! buffer's fill, drops and resends, connection state. Names follow Prometheus conventions (base units,
//! `_total` for counters) under `commwatch_agent_`.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Every metric name the agent exports on its `/metrics` (dashboards and alert rules are checked against this
/// list; a test checks it against the registered metrics).
pub const METRIC_NAMES: &[&str] = &[
    "commwatch_agent_source_read_duration_seconds",
    "commwatch_agent_source_read_errors_total",
    "commwatch_agent_source_samples_total",
    "commwatch_agent_source_series",
    "commwatch_agent_source_links",
    "commwatch_agent_source_discover_errors_total",
    "commwatch_agent_tick_overruns_total",
    "commwatch_agent_tick_duration_seconds",
    "commwatch_agent_handoff_dropped_batches_total",
    "commwatch_agent_buffer_bytes",
    "commwatch_agent_buffer_capacity_bytes",
    "commwatch_agent_buffer_batches",
    "commwatch_agent_dropped_batches_total",
    "commwatch_agent_resent_batches_total",
    "commwatch_agent_sent_batches_total",
    "commwatch_agent_acked_sequence",
    "commwatch_agent_connected",
    "commwatch_agent_connects_total",
    "commwatch_agent_disconnects_total",
    "commwatch_agent_batch_size_bytes",
    "commwatch_agent_step_markers_total",
    "commwatch_agent_step_markers_dropped_total",
    "commwatch_agent_nvml_call_duration_seconds",
    "commwatch_agent_nvml_field_latency_seconds",
    "commwatch_agent_jobs",
    "commwatch_agent_http_connections_refused_total",
    "commwatch_agent_http_connections",
];

/// Every metric of the agent. Cheap to clone handles are taken from it by the sampler and the shipper.
pub struct AgentMetrics {
    pub registry: Registry,
    /// Wall time of one `sample()` call, by source and tier.
    pub read_seconds: HistogramVec,
    /// Series a source could not read or parse, by source.
    pub read_errors: IntCounterVec,
    /// Values read, by source.
    pub samples: IntCounterVec,
    /// Series in each source's inventory.
    pub series: IntGaugeVec,
    /// Links in each source's inventory.
    pub links: IntGaugeVec,
    /// Discovery failures by source.
    pub discover_errors: IntCounterVec,
    /// Ticks that started late by more than one period, by tier.
    pub tick_overruns: IntCounterVec,
    /// Wall time of a whole tick (all sources), by tier.
    pub tick_seconds: HistogramVec,
    /// Batches the sampler could not hand to the shipper (channel full).
    pub handoff_drops: IntCounter,
    pub buffer_bytes: IntGauge,
    pub buffer_capacity_bytes: IntGauge,
    pub buffer_batches: IntGauge,
    /// Oldest unacknowledged batches dropped because the buffer was full.
    pub dropped_batches: IntCounter,
    /// Batches sent again after a reconnect.
    pub resent_batches: IntCounter,
    pub sent_batches: IntCounter,
    pub acked_seq: IntGauge,
    pub connected: IntGauge,
    /// Connection attempts by result (`ok`, `error`).
    pub connects: IntCounterVec,
    /// Streams closed by cause (`collector`, `error`, `stalled`).
    pub disconnects: IntCounterVec,
    pub batch_bytes: Histogram,
    /// Step markers accepted, by transport.
    pub markers_received: IntCounterVec,
    /// Step-marker datagrams dropped, by reason.
    pub markers_dropped: IntCounterVec,
    /// Wall time of one NVML call made by the agent, by call (`field_values`, `utilization`, `pcie`, `gpm`, ...).
    pub nvml_call_seconds: HistogramVec,
    /// NVML's own latency of each field read (`latencyUsec` of `nvmlDeviceGetFieldValues`).
    pub nvml_field_latency_seconds: Histogram,
    /// Training jobs the processes source sees on the node.
    pub jobs: IntGauge,
    /// HTTP connections closed at accept because `http::MAX_HTTP_CONNECTIONS` were open.
    pub http_connections_refused: IntCounter,
    /// HTTP connections open now.
    pub http_connections: IntGauge,
}

impl AgentMetrics {
    pub fn new() -> AgentMetrics {
        let registry = Registry::new();
        let dur_buckets = vec![
            0.000_01, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
            0.05, 0.1, 0.5,
        ];
        let m = AgentMetrics {
            read_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "commwatch_agent_source_read_duration_seconds",
                    "Wall time of one read of all series of a tier by one source.",
                )
                .buckets(dur_buckets.clone()),
                &["source", "tier"],
            )
            .expect("valid metric"),
            read_errors: IntCounterVec::new(
                Opts::new(
                    "commwatch_agent_source_read_errors_total",
                    "Series a source could not read or parse.",
                ),
                &["source"],
            )
            .expect("valid metric"),
            samples: IntCounterVec::new(
                Opts::new(
                    "commwatch_agent_source_samples_total",
                    "Values read by a source.",
                ),
                &["source"],
            )
            .expect("valid metric"),
            series: IntGaugeVec::new(
                Opts::new(
                    "commwatch_agent_source_series",
                    "Series in a source's inventory.",
                ),
                &["source"],
            )
            .expect("valid metric"),
            links: IntGaugeVec::new(
                Opts::new(
                    "commwatch_agent_source_links",
                    "Links in a source's inventory.",
                ),
                &["source"],
            )
            .expect("valid metric"),
            discover_errors: IntCounterVec::new(
                Opts::new(
                    "commwatch_agent_source_discover_errors_total",
                    "Failed hardware rescans by source.",
                ),
                &["source"],
            )
            .expect("valid metric"),
            tick_overruns: IntCounterVec::new(
                Opts::new(
                    "commwatch_agent_tick_overruns_total",
                    "Ticks that started more than one period late.",
                ),
                &["tier"],
            )
            .expect("valid metric"),
            tick_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "commwatch_agent_tick_duration_seconds",
                    "Wall time of one tick over all sources.",
                )
                .buckets(dur_buckets),
                &["tier"],
            )
            .expect("valid metric"),
            handoff_drops: IntCounter::new(
                "commwatch_agent_handoff_dropped_batches_total",
                "Batches the sampler could not hand to the shipper because its queue was full.",
            )
            .expect("valid metric"),
            buffer_bytes: IntGauge::new(
                "commwatch_agent_buffer_bytes",
                "Bytes of unacknowledged batches held for resend.",
            )
            .expect("valid metric"),
            buffer_capacity_bytes: IntGauge::new(
                "commwatch_agent_buffer_capacity_bytes",
                "Capacity of the resend buffer in bytes.",
            )
            .expect("valid metric"),
            buffer_batches: IntGauge::new(
                "commwatch_agent_buffer_batches",
                "Unacknowledged batches held for resend.",
            )
            .expect("valid metric"),
            dropped_batches: IntCounter::new(
                "commwatch_agent_dropped_batches_total",
                "Oldest unacknowledged batches dropped because the resend buffer was full.",
            )
            .expect("valid metric"),
            resent_batches: IntCounter::new(
                "commwatch_agent_resent_batches_total",
                "Batches sent again after a reconnect.",
            )
            .expect("valid metric"),
            sent_batches: IntCounter::new("commwatch_agent_sent_batches_total", "Batches sent.")
                .expect("valid metric"),
            acked_seq: IntGauge::new(
                "commwatch_agent_acked_sequence",
                "Highest batch sequence number acknowledged by the collector.",
            )
            .expect("valid metric"),
            connected: IntGauge::new(
                "commwatch_agent_connected",
                "1 while a stream to the collector is open.",
            )
            .expect("valid metric"),
            connects: IntCounterVec::new(
                Opts::new(
                    "commwatch_agent_connects_total",
                    "Connection attempts by result.",
                ),
                &["result"],
            )
            .expect("valid metric"),
            disconnects: IntCounterVec::new(
                Opts::new(
                    "commwatch_agent_disconnects_total",
                    "Streams closed, by cause.",
                ),
                &["cause"],
            )
            .expect("valid metric"),
            batch_bytes: Histogram::with_opts(
                HistogramOpts::new(
                    "commwatch_agent_batch_size_bytes",
                    "Encoded size of shipped batches.",
                )
                .buckets(prometheus::exponential_buckets(256.0, 4.0, 8).expect("valid buckets")),
            )
            .expect("valid metric"),
            markers_received: IntCounterVec::new(
                Opts::new(
                    "commwatch_agent_step_markers_total",
                    "Step markers accepted, by transport.",
                ),
                &["transport"],
            )
            .expect("valid metric"),
            markers_dropped: IntCounterVec::new(
                Opts::new(
                    "commwatch_agent_step_markers_dropped_total",
                    "Step-marker datagrams dropped, by reason.",
                ),
                &["reason"],
            )
            .expect("valid metric"),
            nvml_call_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "commwatch_agent_nvml_call_duration_seconds",
                    "Wall time of one NVML call made by the agent, by call.",
                )
                .buckets(dur_buckets_nvml()),
                &["call"],
            )
            .expect("valid metric"),
            nvml_field_latency_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "commwatch_agent_nvml_field_latency_seconds",
                    "NVML's reported latency of each field read (latencyUsec).",
                )
                .buckets(dur_buckets_nvml()),
            )
            .expect("valid metric"),
            jobs: IntGauge::new(
                "commwatch_agent_jobs",
                "Training jobs the processes source sees on the node.",
            )
            .expect("valid metric"),
            http_connections_refused: IntCounter::new(
                "commwatch_agent_http_connections_refused_total",
                "HTTP connections closed at accept because the agent's connection limit was reached.",
            )
            .expect("valid metric"),
            http_connections: IntGauge::new(
                "commwatch_agent_http_connections",
                "HTTP connections (/metrics, /healthz) open now.",
            )
            .expect("valid metric"),
            registry,
        };
        for c in m.collectors() {
            m.registry.register(c).expect("metric names are unique");
        }
        m
    }

    /// Every metric handle, once: what `new` registers (and what [`METRIC_NAMES`] is checked against).
    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.read_seconds.clone()),
            Box::new(self.read_errors.clone()),
            Box::new(self.samples.clone()),
            Box::new(self.series.clone()),
            Box::new(self.links.clone()),
            Box::new(self.discover_errors.clone()),
            Box::new(self.tick_overruns.clone()),
            Box::new(self.tick_seconds.clone()),
            Box::new(self.handoff_drops.clone()),
            Box::new(self.buffer_bytes.clone()),
            Box::new(self.buffer_capacity_bytes.clone()),
            Box::new(self.buffer_batches.clone()),
            Box::new(self.dropped_batches.clone()),
            Box::new(self.resent_batches.clone()),
            Box::new(self.sent_batches.clone()),
            Box::new(self.acked_seq.clone()),
            Box::new(self.connected.clone()),
            Box::new(self.connects.clone()),
            Box::new(self.disconnects.clone()),
            Box::new(self.batch_bytes.clone()),
            Box::new(self.markers_received.clone()),
            Box::new(self.markers_dropped.clone()),
            Box::new(self.nvml_call_seconds.clone()),
            Box::new(self.nvml_field_latency_seconds.clone()),
            Box::new(self.jobs.clone()),
            Box::new(self.http_connections_refused.clone()),
            Box::new(self.http_connections.clone()),
        ]
    }

    /// Renders the Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let families = self.registry.gather();
        if let Err(e) = TextEncoder::new().encode(&families, &mut buf) {
            tracing::warn!(error = %e, "encoding agent metrics failed");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// Buckets for NVML calls: 1 µs to 50 ms (a PCIe throughput sample takes 20 ms).
fn dur_buckets_nvml() -> Vec<f64> {
    vec![
        0.000_001, 0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001,
        0.002_5, 0.005, 0.01, 0.025, 0.05,
    ]
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_are_the_registered_metrics() {
        let m = AgentMetrics::new();
        let mut registered: Vec<String> = m
            .collectors()
            .iter()
            .flat_map(|c| c.desc().into_iter().map(|d| d.fq_name.clone()))
            .collect();
        registered.sort();
        let mut listed: Vec<String> = METRIC_NAMES.iter().map(|n| n.to_string()).collect();
        listed.sort();
        assert_eq!(registered, listed);
    }
}
