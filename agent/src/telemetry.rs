//! The agent's own health, exported on its `/metrics`: per-source read durations and errors, the resend
//! buffer's fill, drops and resends, connection state. Names follow Prometheus conventions (base units,
//! `_total` for counters) under `commwatch_agent_`; and `commwatch_build_info{version,revision}`, named like
//! the collector's so that one query covers both.

use std::sync::OnceLock;

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
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
    "commwatch_agent_source_stalled",
    "commwatch_agent_blind",
    "commwatch_agent_setup_warnings",
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
    "commwatch_agent_inspector_records_total",
    "commwatch_agent_inspector_dropped_total",
    "commwatch_agent_inspector_unknown_fields_total",
    "commwatch_agent_inspector_skipped_bytes_total",
    "commwatch_agent_inspector_file_resets_total",
    "commwatch_agent_inspector_files",
    "commwatch_agent_http_connections_refused_total",
    "commwatch_agent_http_writes_refused_total",
    "commwatch_agent_http_connections",
    "commwatch_agent_probe_connections",
    "commwatch_agent_probe_connections_refused_total",
    "commwatch_agent_probe_handshake_timeouts_total",
    "commwatch_agent_probe_auth_failures_total",
    "commwatch_agent_collector_info",
    "commwatch_agent_collector_shards",
    "commwatch_agent_collector_moves_total",
    "commwatch_agent_discovery_resolves_total",
    "commwatch_agent_discovery_last_success_unix_seconds",
    "commwatch_build_info",
];

/// The version and revision exported in `commwatch_build_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: &'static str,
    pub revision: &'static str,
}

static BUILD_INFO: OnceLock<BuildInfo> = OnceLock::new();

/// Sets the version and revision exported by every [`AgentMetrics`] this process creates afterwards: the
/// revision is known to the binary's build only, so the binary hands it over at start. Returns `false` (and
/// changes nothing) when it was already set.
pub fn set_build_info(version: &'static str, revision: &'static str) -> bool {
    BUILD_INFO.set(BuildInfo { version, revision }).is_ok()
}

/// What [`set_build_info`] set; else this crate's version and revision `unknown` (tests, benches).
pub fn build_info() -> BuildInfo {
    BUILD_INFO.get().copied().unwrap_or(BuildInfo {
        version: env!("CARGO_PKG_VERSION"),
        revision: "unknown",
    })
}

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
    /// 1 while a source's call has not returned within its deadline (`source::watchdog`), by source.
    pub source_stalled: IntGaugeVec,
    /// What the agent cannot see, set once at start ([`CoverageMetrics`]).
    coverage: CoverageMetrics,
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
    /// The NCCL Inspector follower's counts ([`InspectorMetrics`]).
    pub inspector: InspectorMetrics,
    /// HTTP connections closed at accept because `http::MAX_HTTP_CONNECTIONS` were open.
    pub http_connections_refused: IntCounter,
    /// State-changing HTTP requests refused by the cross-site guard, by `reason` (`commwatch_httpd::csrf`).
    pub http_writes_refused: IntCounterVec,
    /// HTTP connections open now.
    pub http_connections: IntGauge,
    /// The probe server's connections, handshake timeouts and wrong tokens (`[probe]`; zero while off).
    pub probe: commwatch_probe::ServerMetrics,
    /// The collector shard in use, the moves between shards and the DNS discovery ([`ShardMetrics`]).
    pub shards: ShardMetrics,
    /// `commwatch_build_info`, its one series at 1 ([`build_info`]).
    pub build_info: IntGaugeVec,
}

/// `commwatch_build_info{version,revision}`, named like the collector's.
fn build_info_gauge() -> IntGaugeVec {
    gauge_vec(
        "commwatch_build_info",
        "Always 1; the labels say which version and git revision of commwatch is running.",
        &["version", "revision"],
    )
}

impl AgentMetrics {
    pub fn new() -> AgentMetrics {
        let m = AgentMetrics {
            registry: Registry::new(),
            read_seconds: histogram_vec(
                "commwatch_agent_source_read_duration_seconds",
                "Wall time of one read of all series of a tier by one source.",
                DUR_BUCKETS.to_vec(),
                &["source", "tier"],
            ),
            read_errors: counter_vec(
                "commwatch_agent_source_read_errors_total",
                "Series a source could not read or parse.",
                &["source"],
            ),
            samples: counter_vec(
                "commwatch_agent_source_samples_total",
                "Values read by a source.",
                &["source"],
            ),
            series: gauge_vec(
                "commwatch_agent_source_series",
                "Series in a source's inventory.",
                &["source"],
            ),
            links: gauge_vec(
                "commwatch_agent_source_links",
                "Links in a source's inventory.",
                &["source"],
            ),
            discover_errors: counter_vec(
                "commwatch_agent_source_discover_errors_total",
                "Failed hardware rescans by source.",
                &["source"],
            ),
            source_stalled: gauge_vec(
                "commwatch_agent_source_stalled",
                "1 while a source has not answered within its deadline; its series stop meanwhile.",
                &["source"],
            ),
            coverage: CoverageMetrics::new(),
            tick_overruns: counter_vec(
                "commwatch_agent_tick_overruns_total",
                "Ticks that started more than one period late.",
                &["tier"],
            ),
            tick_seconds: histogram_vec(
                "commwatch_agent_tick_duration_seconds",
                "Wall time of one tick over all sources.",
                DUR_BUCKETS.to_vec(),
                &["tier"],
            ),
            handoff_drops: counter(
                "commwatch_agent_handoff_dropped_batches_total",
                "Batches the sampler could not hand to the shipper because its queue was full.",
            ),
            buffer_bytes: gauge(
                "commwatch_agent_buffer_bytes",
                "Bytes of unacknowledged batches held for resend.",
            ),
            buffer_capacity_bytes: gauge(
                "commwatch_agent_buffer_capacity_bytes",
                "Capacity of the resend buffer in bytes.",
            ),
            buffer_batches: gauge(
                "commwatch_agent_buffer_batches",
                "Unacknowledged batches held for resend.",
            ),
            dropped_batches: counter(
                "commwatch_agent_dropped_batches_total",
                "Oldest unacknowledged batches dropped because the resend buffer was full.",
            ),
            resent_batches: counter(
                "commwatch_agent_resent_batches_total",
                "Batches sent again after a reconnect.",
            ),
            sent_batches: counter("commwatch_agent_sent_batches_total", "Batches sent."),
            acked_seq: gauge(
                "commwatch_agent_acked_sequence",
                "Highest batch sequence number acknowledged by the collector.",
            ),
            connected: gauge(
                "commwatch_agent_connected",
                "1 while a stream to the collector is open.",
            ),
            connects: counter_vec(
                "commwatch_agent_connects_total",
                "Connection attempts by result.",
                &["result"],
            ),
            disconnects: counter_vec(
                "commwatch_agent_disconnects_total",
                "Streams closed, by cause.",
                &["cause"],
            ),
            batch_bytes: histogram(
                "commwatch_agent_batch_size_bytes",
                "Encoded size of shipped batches.",
                prometheus::exponential_buckets(256.0, 4.0, 8).expect("valid buckets"),
            ),
            markers_received: counter_vec(
                "commwatch_agent_step_markers_total",
                "Step markers accepted, by transport.",
                &["transport"],
            ),
            markers_dropped: counter_vec(
                "commwatch_agent_step_markers_dropped_total",
                "Step-marker datagrams dropped, by reason.",
                &["reason"],
            ),
            nvml_call_seconds: histogram_vec(
                "commwatch_agent_nvml_call_duration_seconds",
                "Wall time of one NVML call made by the agent, by call.",
                dur_buckets_nvml(),
                &["call"],
            ),
            nvml_field_latency_seconds: histogram(
                "commwatch_agent_nvml_field_latency_seconds",
                "NVML's reported latency of each field read (latencyUsec).",
                dur_buckets_nvml(),
            ),
            jobs: gauge(
                "commwatch_agent_jobs",
                "Training jobs the processes source sees on the node.",
            ),
            inspector: InspectorMetrics::new(),
            http_connections_refused: counter(
                "commwatch_agent_http_connections_refused_total",
                "HTTP connections closed at accept because the agent's connection limit was reached.",
            ),
            http_writes_refused: http_writes_refused(),
            http_connections: gauge(
                "commwatch_agent_http_connections",
                "HTTP connections (/metrics, /healthz) open now.",
            ),
            probe: commwatch_probe::ServerMetrics::unregistered("commwatch_agent_probe"),
            shards: ShardMetrics::new(),
            build_info: build_info_gauge(),
        };
        let b = build_info();
        m.build_info
            .with_label_values(&[b.version, b.revision])
            .set(1);
        for c in m.collectors() {
            m.registry.register(c).expect("metric names are unique");
        }
        m
    }

    /// Every metric handle, once: what `new` registers (and what [`METRIC_NAMES`] is checked against).
    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        let own: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.read_seconds.clone()),
            Box::new(self.read_errors.clone()),
            Box::new(self.samples.clone()),
            Box::new(self.series.clone()),
            Box::new(self.links.clone()),
            Box::new(self.discover_errors.clone()),
            Box::new(self.source_stalled.clone()),
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
            Box::new(self.http_writes_refused.clone()),
            Box::new(self.http_connections.clone()),
            Box::new(self.probe.connections.open.clone()),
            Box::new(self.probe.connections.refused.clone()),
            Box::new(self.probe.handshake_timeouts.clone()),
            Box::new(self.probe.auth_failures.clone()),
            Box::new(self.build_info.clone()),
        ];
        own.into_iter()
            .chain(self.coverage.collectors())
            .chain(self.inspector.collectors())
            .chain(self.shards.collectors())
            .collect()
    }

    /// Records what the agent is blind to ([`CoverageMetrics::set_blind`]).
    pub fn set_blind(&self, blind: &[(&str, &str, &str)]) {
        self.coverage.set_blind(blind);
    }

    /// Records the start's warnings ([`CoverageMetrics::set_setup_warnings`]).
    pub fn set_setup_warnings(&self, warnings: &[(&str, &str)]) {
        self.coverage.set_setup_warnings(warnings);
    }

    /// What [`set_blind`](Self::set_blind) recorded, one sentence each.
    pub fn blind_reasons(&self) -> Vec<String> {
        self.coverage.blind_reasons()
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

/// What the agent cannot see, recorded once at start (`commwatch_agent_blind`, `commwatch_agent_setup_warnings`)
/// and said by `/healthz`.
pub struct CoverageMetrics {
    /// 1 for each thing the agent is blind to (`what`: `gpu`, `fabric`; `code`: `no_nvml`, `no_fabric`).
    blind: IntGaugeVec,
    /// What the agent cannot see, counted by warning `code` and `level`: the `warnings` of `agent --once`.
    setup_warnings: IntGaugeVec,
    /// The sentences of what the agent is blind to, for `/healthz`.
    blind_reasons: std::sync::Mutex<Vec<String>>,
}

impl CoverageMetrics {
    fn new() -> CoverageMetrics {
        CoverageMetrics {
            blind: gauge_vec(
                "commwatch_agent_blind",
                "1 for each thing the agent cannot see though a GPU node must have it (what: gpu or fabric); \
                 see its /healthz.",
                &["what", "code"],
            ),
            setup_warnings: gauge_vec(
                "commwatch_agent_setup_warnings",
                "Warnings the agent gave at start about what it cannot see, by code and level (as agent --once \
                 lists them; e.g. no_byte_counters for an RDMA port without byte counters).",
                &["code", "level"],
            ),
            blind_reasons: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.blind.clone()),
            Box::new(self.setup_warnings.clone()),
        ]
    }

    /// Records what the agent is blind to: each `(what, code, reason)` sets `commwatch_agent_blind` and is
    /// said by `/healthz`. Replaces what was set before.
    pub fn set_blind(&self, blind: &[(&str, &str, &str)]) {
        self.blind.reset();
        for (what, code, _) in blind {
            self.blind.with_label_values(&[what, code]).set(1);
        }
        let reasons = blind
            .iter()
            .map(|(what, _, reason)| format!("blind to {what}: {reason}"))
            .collect();
        *self
            .blind_reasons
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = reasons;
    }

    /// Records the start's warnings, each `(code, level)`: `commwatch_agent_setup_warnings` counts them by
    /// code and level. Replaces what was set before.
    pub fn set_setup_warnings(&self, warnings: &[(&str, &str)]) {
        self.setup_warnings.reset();
        for (code, level) in warnings {
            self.setup_warnings.with_label_values(&[code, level]).inc();
        }
    }

    /// What [`set_blind`](Self::set_blind) recorded, one sentence each.
    pub fn blind_reasons(&self) -> Vec<String> {
        self.blind_reasons
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// What the NCCL Inspector follower counts (`commwatch_agent_inspector_*`).
#[derive(Clone)]
pub struct InspectorMetrics {
    /// NCCL Inspector records read and sent on (`inspector`).
    pub records: IntCounter,
    /// Inspector lines, files or directories dropped, by reason (`malformed`, `unknown_version`,
    /// `not_collective`, `too_long`, `rate_limit`, `too_many_files`, `unattributed`, `queue_full`, and the
    /// refused paths of [`crate::inspector::confine::Refusal`]: `symlink`, `outside_root`, `not_regular`,
    /// `foreign_owner`).
    pub dropped: IntCounterVec,
    /// Fields of Inspector records this agent does not know (ignored).
    pub unknown_fields: IntCounter,
    /// Bytes of Inspector backlog skipped (further behind a file's end than the follower keeps).
    pub skipped_bytes: IntCounter,
    /// Inspector files rotated or truncated under the follower, by `kind`.
    pub file_resets: IntCounterVec,
    /// Inspector dump files followed now.
    pub files: IntGauge,
}

impl InspectorMetrics {
    fn new() -> InspectorMetrics {
        InspectorMetrics {
            records: counter(
                "commwatch_agent_inspector_records_total",
                "NCCL Inspector records read from the training processes' dump files and sent.",
            ),
            dropped: counter_vec(
                "commwatch_agent_inspector_dropped_total",
                "NCCL Inspector lines or files dropped, by reason.",
                &["reason"],
            ),
            unknown_fields: counter(
                "commwatch_agent_inspector_unknown_fields_total",
                "Fields of NCCL Inspector records this agent does not know (ignored).",
            ),
            skipped_bytes: counter(
                "commwatch_agent_inspector_skipped_bytes_total",
                "Bytes of NCCL Inspector backlog skipped to stay within the follower's bounds.",
            ),
            file_resets: counter_vec(
                "commwatch_agent_inspector_file_resets_total",
                "NCCL Inspector dump files rotated or truncated while followed.",
                &["kind"],
            ),
            files: gauge(
                "commwatch_agent_inspector_files",
                "NCCL Inspector dump files followed now.",
            ),
        }
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.records.clone()),
            Box::new(self.dropped.clone()),
            Box::new(self.unknown_fields.clone()),
            Box::new(self.skipped_bytes.clone()),
            Box::new(self.file_resets.clone()),
            Box::new(self.files.clone()),
        ]
    }
}

/// Why the stream moved to another collector shard: the `reason` label of `commwatch_agent_collector_moves_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveReason {
    /// The node's job list gave it another preferred shard.
    JobChanged,
    /// The collector in use could not be reached (connect, stream open or first ack failed): the next in the
    /// order was tried.
    Unreachable,
    /// A DNS answer changed the set of shards: the one in use is gone, or the preferred one changed.
    ShardSetChanged,
    /// After `shard_retry` on a fallback, back to the preferred shard.
    RetryPreferred,
}

impl MoveReason {
    /// Every reason, in the order of the docs.
    pub const ALL: [MoveReason; 4] = [
        MoveReason::JobChanged,
        MoveReason::Unreachable,
        MoveReason::ShardSetChanged,
        MoveReason::RetryPreferred,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            MoveReason::JobChanged => "job_changed",
            MoveReason::Unreachable => "unreachable",
            MoveReason::ShardSetChanged => "shard_set_changed",
            MoveReason::RetryPreferred => "retry_preferred",
        }
    }
}

/// How one lookup of a `dns+` collector name ended: the `result` label of
/// `commwatch_agent_discovery_resolves_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolveResult {
    /// At least one address.
    Ok,
    /// The lookup succeeded with no address.
    Empty,
    /// The resolver failed (no such name, no answer, a resolver error).
    Error,
    /// No answer within the lookup timeout (5 s).
    Timeout,
}

impl ResolveResult {
    /// Every result, in the order of the docs.
    pub const ALL: [ResolveResult; 4] = [
        ResolveResult::Ok,
        ResolveResult::Empty,
        ResolveResult::Error,
        ResolveResult::Timeout,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ResolveResult::Ok => "ok",
            ResolveResult::Empty => "empty",
            ResolveResult::Error => "error",
            ResolveResult::Timeout => "timeout",
        }
    }
}

/// Which collector shard the agent streams to, how often it moved, and how its DNS discovery fares
/// (`commwatch_agent_collector_*`, `commwatch_agent_discovery_*`). Cheap to clone: the discovery task holds a
/// copy.
#[derive(Clone)]
pub struct ShardMetrics {
    /// 1 for the collector the open stream goes to, label `collector`: its URL as configured (or as resolved
    /// from a `dns+` name), without user, password, query or fragment. No series while no stream is open;
    /// never more than one.
    pub collector_info: IntGaugeVec,
    /// Collector shards known now: the configured URLs plus the addresses the `dns+` names last resolved to.
    pub shards: IntGauge,
    /// Streams opened on another collector than the previous stream's, by [`MoveReason`] (why the agent left
    /// the previous one).
    pub moves: IntCounterVec,
    /// Lookups of `dns+` collector names, by [`ResolveResult`].
    pub resolves: IntCounterVec,
    /// Unix time, seconds, of the end of the last round of lookups in which every `dns+` name answered at
    /// least one address; 0 before (and always without `dns+` names).
    pub discovery_last_success: Gauge,
}

impl ShardMetrics {
    fn new() -> ShardMetrics {
        let m = ShardMetrics {
            collector_info: gauge_vec(
                "commwatch_agent_collector_info",
                "1 for the collector (shard) the open stream goes to, by URL without credentials; \
                 no series while no stream is open.",
                &["collector"],
            ),
            shards: gauge(
                "commwatch_agent_collector_shards",
                "Collector shards known now: configured URLs plus the addresses dns+ names last resolved to.",
            ),
            moves: counter_vec(
                "commwatch_agent_collector_moves_total",
                "Streams opened on another collector than the previous stream's, by why the agent left it.",
                &["reason"],
            ),
            resolves: counter_vec(
                "commwatch_agent_discovery_resolves_total",
                "Lookups of dns+ collector names, by result.",
                &["result"],
            ),
            discovery_last_success: Gauge::new(
                "commwatch_agent_discovery_last_success_unix_seconds",
                "Unix time in seconds of the last round in which every dns+ collector name resolved to an \
                 address; 0 before.",
            )
            .expect("valid metric"),
        };
        // Every label value exported from the start (at 0), so rates and alerts see a series before the event.
        for r in MoveReason::ALL {
            m.moves.with_label_values(&[r.as_str()]);
        }
        for r in ResolveResult::ALL {
            m.resolves.with_label_values(&[r.as_str()]);
        }
        m
    }

    /// Says that the open stream goes to `collector` (already without credentials): its one series at 1.
    pub fn set_collector(&self, collector: &str) {
        self.collector_info.reset();
        self.collector_info.with_label_values(&[collector]).set(1);
    }

    /// No stream open: no `commwatch_agent_collector_info` series.
    pub fn clear_collector(&self) {
        self.collector_info.reset();
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.collector_info.clone()),
            Box::new(self.shards.clone()),
            Box::new(self.moves.clone()),
            Box::new(self.resolves.clone()),
            Box::new(self.discovery_last_success.clone()),
        ]
    }
}

/// Buckets for one source's read or one tick: 10 µs to 0.5 s.
const DUR_BUCKETS: &[f64] = &[
    0.000_01, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.5,
];

// Constructors of one metric each. The names and help texts are constants of this file, so a failure is a
// programming error caught by every test that builds the metrics.

fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::new(name, help).expect("valid metric")
}

/// `commwatch_agent_http_writes_refused_total{reason}` (`commwatch_httpd::csrf`).
fn http_writes_refused() -> IntCounterVec {
    counter_vec(
        "commwatch_agent_http_writes_refused_total",
        "State-changing HTTP requests refused: a foreign origin or not a JSON body, by reason.",
        &["reason"],
    )
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).expect("valid metric")
}

fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn histogram(name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("valid metric")
}

fn histogram_vec(name: &str, help: &str, buckets: Vec<f64>, labels: &[&str]) -> HistogramVec {
    HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .expect("valid metric")
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

    #[test]
    fn setup_warnings_are_counted_by_code_and_level() {
        let m = AgentMetrics::new();
        m.set_setup_warnings(&[("speed_unknown", "info")]);
        m.set_setup_warnings(&[
            ("no_byte_counters", "warn"),
            ("no_byte_counters", "warn"),
            ("interfaces_left_out", "info"),
        ]);
        let text = m.render();
        let mut lines = lines_of(&text, "commwatch_agent_setup_warnings");
        lines.sort();
        assert_eq!(
            lines,
            [
                "commwatch_agent_setup_warnings{code=\"interfaces_left_out\",level=\"info\"} 1",
                "commwatch_agent_setup_warnings{code=\"no_byte_counters\",level=\"warn\"} 2",
            ]
        );
    }

    #[test]
    fn build_info_is_one_series_at_one() {
        let text = AgentMetrics::new().render();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("commwatch_build_info"))
            .collect();
        // No one set it in this test binary: the crate's version, revision unknown.
        let want = format!(
            "commwatch_build_info{{revision=\"unknown\",version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(lines, [want.as_str()]);
        assert!(text.contains("# TYPE commwatch_build_info gauge"), "{text}");
    }

    fn lines_of<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|r| r.starts_with(['{', ' ']))
            })
            .collect()
    }

    #[test]
    fn the_collector_info_is_one_escaped_series_and_none_without_a_stream() {
        let m = AgentMetrics::new();
        let info = "commwatch_agent_collector_info";
        assert!(lines_of(&m.render(), info).is_empty(), "no stream yet");
        m.shards.set_collector("http://10.0.0.9:7070");
        // A value with a quote, a backslash and a newline (nothing a URL should hold) stays one escaped line.
        m.shards.set_collector("http://a\"b\\c\nd:1");
        let text = m.render();
        assert_eq!(
            lines_of(&text, info),
            [r#"commwatch_agent_collector_info{collector="http://a\"b\\c\nd:1"} 1"#]
        );
        m.shards.clear_collector();
        assert!(lines_of(&m.render(), info).is_empty());
    }

    #[test]
    fn every_move_reason_and_resolve_result_is_exported_from_the_start() {
        let text = AgentMetrics::new().render();
        let moves = lines_of(&text, "commwatch_agent_collector_moves_total");
        for r in MoveReason::ALL {
            let want = format!(
                "commwatch_agent_collector_moves_total{{reason=\"{}\"}} 0",
                r.as_str()
            );
            assert!(moves.contains(&want.as_str()), "{moves:?}");
        }
        let resolves = lines_of(&text, "commwatch_agent_discovery_resolves_total");
        assert_eq!(resolves.len(), ResolveResult::ALL.len(), "{resolves:?}");
        assert_eq!(
            lines_of(&text, "commwatch_agent_discovery_last_success_unix_seconds"),
            ["commwatch_agent_discovery_last_success_unix_seconds 0"]
        );
        assert!(text.contains(
            "# HELP commwatch_agent_discovery_last_success_unix_seconds Unix time in seconds"
        ));
        let ours: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.contains("commwatch_agent_collector_") || l.contains("commwatch_agent_discovery_")
            })
            .collect();
        let samples = ours.iter().filter(|l| !l.starts_with('#')).count();
        let bytes: usize = ours.iter().map(|l| l.len() + 1).sum();
        eprintln!("shard families on /metrics before a stream opens: {samples} series, {bytes} bytes (with HELP and TYPE)");
    }
}
