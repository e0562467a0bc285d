//! The collector's own health metrics, registered in one `Registry` and updated once per batch or stream, never
//! per sample. Every stage that has something to count (ingest, persistence, the HTTP server) takes a
//! [`Health`] handle; the exporters render its registry with `/metrics`. Metric names: [`names`]. Warnings that
//! a peer can repeat at will go through a [`throttle::LogThrottle`].

pub mod build_info;
pub mod names;
pub mod stage_cpu;
pub mod throttle;

pub use build_info::{build_info, set_build_info, BuildInfo};

use std::time::Duration;

use prometheus::{
    Counter, CounterVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry,
};

/// The periodic passes over the fleet, timed ([`names::COLLECTOR_PASS_SECONDS`]): one set per collector, held
/// by its [`Health`] (registered in its registry) and handed to the step engine and the analysis, which time
/// their passes with [`Passes::timer`]. Cheap to clone (the clones share the metrics).
#[derive(Debug, Clone)]
pub struct Passes {
    /// Seconds per pass, by `pass` (`steps`, `analysis_input`).
    pub seconds: HistogramVec,
    /// Nodes covered by the passes, by `pass`.
    pub nodes: IntCounterVec,
    /// CPU seconds of the passes' thread, by `pass` (the thread's CPU clock, `pace::thread_cpu_ns`).
    pub cpu_seconds: CounterVec,
    /// Seconds of node traffic the step engine skipped, far behind ([`names::COLLECTOR_STEPS_SKIPPED_SECONDS_TOTAL`]).
    pub steps_skipped_seconds: Counter,
}

impl Passes {
    /// New pass metrics, every `pass` of [`PASS_NAMES`] present at 0, registered nowhere (see
    /// [`Passes::register`]; [`Health::new`] does both).
    pub fn new() -> Result<Passes, prometheus::Error> {
        let seconds = HistogramVec::new(
            HistogramOpts::new(
                names::COLLECTOR_PASS_SECONDS,
                "Time of one periodic pass over the fleet, by pass (steps, analysis_input).",
            )
            .buckets(vec![
                1e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            &["pass"],
        )?;
        let nodes = IntCounterVec::new(
            Opts::new(
                names::COLLECTOR_PASS_NODES_TOTAL,
                "Nodes covered by the periodic passes, by pass: seconds_sum / nodes_total is the time per node.",
            ),
            &["pass"],
        )?;
        let cpu_seconds = CounterVec::new(
            Opts::new(
                names::COLLECTOR_PASS_CPU_SECONDS_TOTAL,
                "CPU seconds of the periodic passes' thread, by pass (not inflated by a busy machine).",
            ),
            &["pass"],
        )?;
        for p in PASS_NAMES {
            seconds.with_label_values(&[p]);
            nodes.with_label_values(&[p]);
            cpu_seconds.with_label_values(&[p]);
        }
        let steps_skipped_seconds = Counter::with_opts(Opts::new(
            names::COLLECTOR_STEPS_SKIPPED_SECONDS_TOTAL,
            "Seconds of node traffic (summed over nodes) the step engine cut no steps from, too far behind.",
        ))?;
        Ok(Passes {
            seconds,
            nodes,
            cpu_seconds,
            steps_skipped_seconds,
        })
    }

    /// Registers the four families in `registry` (fails if it holds them already).
    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.seconds.clone()))?;
        registry.register(Box::new(self.nodes.clone()))?;
        registry.register(Box::new(self.cpu_seconds.clone()))?;
        registry.register(Box::new(self.steps_skipped_seconds.clone()))?;
        Ok(())
    }

    /// New pass metrics, registered in `registry` (a collector's, by [`Health::new`]).
    pub fn registered(registry: &Registry) -> Result<Passes, prometheus::Error> {
        let p = Passes::new()?;
        p.register(registry)?;
        Ok(p)
    }

    /// Starts timing one pass `pass` (one of [`PASS_NAMES`]) on this thread; [`PassTimer::done`] records it.
    pub fn timer(&self, pass: &'static str) -> PassTimer {
        PassTimer {
            seconds: self.seconds.with_label_values(&[pass]),
            nodes: self.nodes.with_label_values(&[pass]),
            cpu_seconds: self.cpu_seconds.with_label_values(&[pass]),
            wall: std::time::Instant::now(),
            cpu_ns: crate::pace::thread_cpu_ns(),
        }
    }
}

/// Times one pass of one collector ([`Passes::timer`]): wall time, and the CPU time of the thread it runs on.
#[derive(Debug)]
pub struct PassTimer {
    seconds: Histogram,
    nodes: IntCounter,
    cpu_seconds: Counter,
    wall: std::time::Instant,
    cpu_ns: Option<u64>,
}

impl PassTimer {
    /// Records the pass, over `nodes` nodes (call on the thread that started it).
    pub fn done(self, nodes: usize) {
        let cpu = match (self.cpu_ns, crate::pace::thread_cpu_ns()) {
            (Some(a), Some(b)) => Some(Duration::from_nanos(b.saturating_sub(a))),
            _ => None,
        };
        self.seconds.observe(self.wall.elapsed().as_secs_f64());
        if let Some(cpu) = cpu {
            self.cpu_seconds.inc_by(cpu.as_secs_f64());
        }
        self.nodes.inc_by(u64::try_from(nodes).unwrap_or(u64::MAX));
    }
}

/// The `pass` label values of [`Passes`].
pub const PASS_NAMES: [&str; 2] = ["steps", "analysis_input"];

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
    /// Series refused at description (`store::RefusedSeries`); their samples count in `refused_samples`.
    pub refused_series: IntCounter,
    pub out_of_order_samples: IntCounter,
    pub ingest_seconds: Histogram,
    pub scrape_seconds: Histogram,
    pub persist_errors: IntCounter,
    pub persist_commits: IntCounter,
    /// The persistence writer's commits by `phase`: [`crate::persist::CommitTimes::observe`].
    pub persist_commit_seconds: HistogramVec,
    pub expired_nodes: IntCounter,
    /// Rate limit (`limits.max_samples_per_second`): batches after which a stream paused, and seconds paused.
    pub throttled_batches: IntCounter,
    pub throttled_seconds: Counter,
    /// Step markers in accepted batches, `result` = `accepted` | `invalid` (failed validation, dropped).
    pub step_markers: IntCounterVec,
    /// NCCL Inspector records refused at the edge, `reason` = one of [`COLLECTIVE_REFUSE_REASONS`].
    pub refused_collectives: IntCounterVec,
    /// Handles of `batches` and `step_markers` resolved once (the ingest path counts every batch).
    pub hot: HotCounters,
    /// HTTP connections open now, and those closed at accept because `limits.max_http_connections` were
    /// open (the HTTP server counts them).
    pub http_connections: IntGauge,
    pub http_connections_refused: IntCounter,
    /// State-changing requests refused as possible cross-site forgeries, by `reason` (`commwatch_httpd::csrf`).
    pub http_writes_refused: IntCounterVec,
    /// What the live page left out to stay bounded and the renderings it refused ([`PageMetrics`]).
    pub page: PageMetrics,
    /// The gRPC listener's own guard ([`GuardMetrics`]).
    pub guard: GuardMetrics,
    /// 1 while the state directory cannot be written: batches are not acknowledged (persistence sets it).
    pub persist_degraded: IntGauge,
    /// State databases moved aside at start because they could not be read.
    pub persist_corrupt_databases: IntCounter,
    /// Requests refused for their credentials, `surface` = one of [`AUTH_SURFACES`].
    pub auth_failures: IntCounterVec,
    /// Samples whose timestamp lay outside the window around the collector's clock (`limits.max_clock_skew`).
    pub out_of_window_samples: IntCounter,
    /// Streams ended by the transport (reset, broken pipe), not by the agent or the collector.
    pub dropped_streams: IntCounter,
    /// `commwatch_build_info`, its one series at 1 ([`build_info`]).
    pub build_info: IntGaugeVec,
    /// This collector's periodic passes (the step engine's, the analysis input's), registered here.
    pub passes: Passes,
}

/// Metrics of the gRPC listener's admission of connections (`ingest::connections`).
#[derive(Debug, Clone)]
pub struct GuardMetrics {
    /// Connections admitted and open now.
    pub open: IntGauge,
    /// `reason` = one of [`GRPC_REFUSE_REASONS`].
    pub refused: IntCounterVec,
    /// `reason` = one of [`TLS_FAILURE_REASONS`].
    pub tls_failures: IntCounterVec,
}

/// Bounded values of the `reason` label of `commwatch_collector_grpc_connections_refused_total`.
pub const GRPC_REFUSE_REASONS: &[&str] = &[
    // `limits.max_grpc_connections` were open.
    "listener_limit",
    // `limits.max_grpc_connections_per_peer` were open from the peer's address.
    "peer_limit",
    // No TLS handshake and HTTP/2 preface within `limits.grpc_handshake_timeout`.
    "handshake_timeout",
    // The first bytes (after TLS) were not the HTTP/2 preface.
    "not_http2",
    // The TLS handshake failed (its reason in `commwatch_collector_tls_handshake_failures_total`).
    "tls",
];

/// Bounded values of the `reason` label of `commwatch_collector_tls_handshake_failures_total`.
pub const TLS_FAILURE_REASONS: &[&str] = &[
    // Mutual TLS: the agent presented no certificate.
    "no_certificate",
    // The agent's certificate does not chain to `client_ca_file`.
    "unknown_ca",
    "expired",
    "not_yet_valid",
    // Any other fault of the agent's certificate (signature, usage, encoding, revocation).
    "bad_certificate",
    // The agent refused the collector's certificate (it sent an alert: wrong CA, name mismatch).
    "refused_by_agent",
    // The first bytes were not a TLS handshake (a plain-text client on the TLS port).
    "not_tls",
    // Any other protocol disagreement (versions, cipher suites, ALPN without h2).
    "protocol",
    // The peer closed the connection or the network failed mid-handshake.
    "closed",
];

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
    // `limits.max_nodes` nodes were held and the Hello named a new one.
    "max_nodes",
    // The connection already reported as `limits.max_nodes_per_connection` other nodes.
    "max_nodes_per_connection",
];

/// Bounded values of the `reason` label of `commwatch_collector_refused_collectives_total`: `text` (a string
/// field — job, communicator, collective, timing source, algorithm — too long or holding control characters),
/// `missing` (no job, communicator or collective), `number` (an execution time or bandwidth that is not a finite
/// non-negative number), `rank` (no ranks, or a rank not below the communicator's size).
pub const COLLECTIVE_REFUSE_REASONS: &[&str] = &["text", "missing", "number", "rank"];

/// Values of the `surface` label of `commwatch_collector_auth_failures_total`: `api` (a missing or wrong
/// bearer token under `/api/`), `page` (a wrong bearer token on the page), `login` (a wrong token at `/login`).
pub const AUTH_SURFACES: [&str; 3] = ["api", "page", "login"];
/// Refused credentials are warned about at most once per this, per surface, with the number held back.
pub const AUTH_WARN_EVERY: Duration = Duration::from_secs(60);

/// `commwatch_collector_http_writes_refused_total{reason}` (`commwatch_httpd::csrf`), registered.
fn writes_refused(registry: &Registry) -> Result<IntCounterVec, prometheus::Error> {
    counter_vec(
        registry,
        names::COLLECTOR_HTTP_WRITES_REFUSED_TOTAL,
        "State-changing HTTP requests refused: a foreign origin or not a JSON body, by reason.",
        "reason",
        &["origin", "content_type"],
    )
}

/// What the live page left out to stay bounded, by `what` (`cells`: links folded into a `+ more` cell; `rows`:
/// nodes not drawn; `links`: a node's links not listed; `findings`, `jobs`: not listed), and the renderings it
/// refused while its slots were taken (`export::page`).
#[derive(Debug, Clone)]
pub struct PageMetrics {
    pub omitted: IntCounterVec,
    pub busy: IntCounter,
}

impl PageMetrics {
    /// The families, registered in `registry`.
    pub fn new(registry: &Registry) -> Result<PageMetrics, prometheus::Error> {
        let busy = IntCounter::new(
            names::COLLECTOR_PAGE_BUSY_TOTAL,
            "Page renderings refused (503) because the page's rendering slots were all taken.",
        )?;
        registry.register(Box::new(busy.clone()))?;
        Ok(PageMetrics {
            omitted: counter_vec(
                registry,
                names::COLLECTOR_PAGE_OMITTED_TOTAL,
                "Items the live page left out to stay within its bounds, by what.",
                "what",
                &["cells", "rows", "links", "findings", "jobs"],
            )?,
            busy,
        })
    }

    /// Counts `n` items of `what` left out (nothing when `n` is 0).
    pub fn omitted(&self, what: &str, n: usize) {
        if n > 0 {
            self.omitted.with_label_values(&[what]).inc_by(n as u64);
        }
    }
}

/// `commwatch_collector_auth_failures_total{surface}`, every surface at 0 from the start.
fn auth_failures(registry: &Registry) -> Result<IntCounterVec, prometheus::Error> {
    counter_vec(
        registry,
        names::COLLECTOR_AUTH_FAILURES_TOTAL,
        "HTTP requests refused for their credentials (a missing or wrong token), by surface.",
        "surface",
        &AUTH_SURFACES,
    )
}

/// A counter family with one label, every value of `values` present from the start (at 0).
fn counter_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    label: &str,
    values: &[&str],
) -> Result<IntCounterVec, prometheus::Error> {
    let c = IntCounterVec::new(Opts::new(name, help), &[label])?;
    registry.register(Box::new(c.clone()))?;
    for v in values {
        c.with_label_values(&[v]);
    }
    Ok(c)
}

/// A histogram of `opts`, registered in `registry`.
fn histogram(registry: &Registry, opts: HistogramOpts) -> Result<Histogram, prometheus::Error> {
    let h = Histogram::with_opts(opts)?;
    registry.register(Box::new(h.clone()))?;
    Ok(h)
}

/// `commwatch_collector_persist_commit_seconds`, registered in `registry`, every phase present from the start.
fn persist_commit_seconds(registry: &Registry) -> Result<HistogramVec, prometheus::Error> {
    let h = HistogramVec::new(
        HistogramOpts::new(
            names::COLLECTOR_PERSIST_COMMIT_SECONDS,
            "Wall time of the persistence writer's commits, by phase: all (the whole transaction), lock_wait \
             (until it held the write lock), write (its statements), sync (COMMIT: the rollback journal, the \
             database and the journal's zeroed header written and fsynced), checkpoint (no longer observed: the \
             database has no WAL to copy), prune (rows past retention deleted after a commit, before its batches \
             are acknowledged).",
        )
        .buckets(vec![
            1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
        ]),
        &["phase"],
    )?;
    registry.register(Box::new(h.clone()))?;
    for p in names::PERSIST_COMMIT_PHASES {
        h.with_label_values(&[p]);
    }
    Ok(h)
}

fn gauge(registry: &Registry, name: &str, help: &str) -> Result<IntGauge, prometheus::Error> {
    let g = IntGauge::new(name, help)?;
    registry.register(Box::new(g.clone()))?;
    Ok(g)
}

impl GuardMetrics {
    fn new(registry: &Registry) -> Result<GuardMetrics, prometheus::Error> {
        Ok(GuardMetrics {
            open: gauge(
                registry,
                names::COLLECTOR_GRPC_CONNECTIONS,
                "gRPC connections (agents) admitted and open now.",
            )?,
            refused: counter_vec(
                registry,
                names::COLLECTOR_GRPC_CONNECTIONS_REFUSED_TOTAL,
                "gRPC connections closed before any stream, by reason.",
                "reason",
                GRPC_REFUSE_REASONS,
            )?,
            tls_failures: counter_vec(
                registry,
                names::COLLECTOR_TLS_HANDSHAKE_FAILURES_TOTAL,
                "Failed TLS handshakes on the gRPC listener, by reason.",
                "reason",
                TLS_FAILURE_REASONS,
            )?,
        })
    }
}

impl Health {
    pub fn new() -> Result<Health, prometheus::Error> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| -> Result<IntCounter, prometheus::Error> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let batches = counter_vec(
            &registry,
            names::COLLECTOR_BATCHES_TOTAL,
            "Sample batches received, by result.",
            "result",
            &["accepted", "duplicate", "rejected"],
        )?;
        let rejected_streams = counter_vec(
            &registry,
            names::COLLECTOR_REJECTED_STREAMS_TOTAL,
            "Agent streams failed by the collector, by reason.",
            "reason",
            REJECT_REASONS,
        )?;
        let streams = IntGauge::new(names::COLLECTOR_STREAMS, "Agent streams open now.")?;
        registry.register(Box::new(streams.clone()))?;
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
            build_info: build_info::register(&registry)?,
            passes: Passes::registered(&registry)?,
            guard: GuardMetrics::new(&registry)?,
            persist_degraded: gauge(
                &registry,
                names::COLLECTOR_PERSIST_DEGRADED,
                "1 while the state directory cannot be written: batches are not acknowledged until it can.",
            )?,
            persist_corrupt_databases: counter(
                names::COLLECTOR_PERSIST_CORRUPT_DATABASES_TOTAL,
                "State databases found unreadable at start, moved aside and replaced by an empty one.",
            )?,
            auth_failures: auth_failures(&registry)?,
            out_of_window_samples: counter(
                names::COLLECTOR_OUT_OF_WINDOW_SAMPLES_TOTAL,
                "Samples refused: stamped more than limits.max_clock_skew ahead of the collector's clock.",
            )?,
            dropped_streams: counter(
                names::COLLECTOR_DROPPED_STREAMS_TOTAL,
                "Agent streams ended by a transport failure (reset, broken pipe, keepalive timeout).",
            )?,
            hot,
            http_connections,
            http_connections_refused: counter(
                names::COLLECTOR_HTTP_CONNECTIONS_REFUSED_TOTAL,
                "HTTP connections closed at accept because limits.max_http_connections were open.",
            )?,
            http_writes_refused: writes_refused(&registry)?,
            page: PageMetrics::new(&registry)?,
            throttled_batches: counter(
                names::COLLECTOR_THROTTLED_BATCHES_TOTAL,
                "Batches after which an agent stream was paused by limits.max_samples_per_second.",
            )?,
            throttled_seconds,
            step_markers,
            refused_collectives: counter_vec(
                &registry,
                names::COLLECTOR_REFUSED_COLLECTIVES_TOTAL,
                "NCCL Inspector records refused at the edge (dropped, the batch goes on), by reason.",
                "reason",
                COLLECTIVE_REFUSE_REASONS,
            )?,
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
            refused_series: counter(
                names::COLLECTOR_REFUSED_SERIES_TOTAL,
                "Series an agent described that this collector refuses (metric or label name invalid or reserved).",
            )?,
            out_of_order_samples: counter(
                names::COLLECTOR_OUT_OF_ORDER_SAMPLES_TOTAL,
                "Samples not newer than their series' previous sample, skipped.",
            )?,
            ingest_seconds: histogram(
                &registry,
                HistogramOpts::new(
                    names::COLLECTOR_INGEST_SECONDS,
                    "Time to validate and apply one sample batch to the store.",
                )
                .buckets(vec![1e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2]),
            )?,
            scrape_seconds: histogram(
                &registry,
                HistogramOpts::new(
                    names::COLLECTOR_SCRAPE_SECONDS,
                    "Time to render /metrics, with its gzip compression on gzip scrapes (previous scrapes).",
                )
                .buckets(vec![1e-4, 1e-3, 1e-2, 0.05, 0.1, 0.5, 1.0, 5.0]),
            )?,
            persist_errors: counter(
                names::COLLECTOR_PERSIST_ERRORS_TOTAL,
                "SQLite errors; the collector keeps serving from memory.",
            )?,
            persist_commits: counter(names::COLLECTOR_PERSIST_COMMITS_TOTAL, "SQLite transactions committed.")?,
            persist_commit_seconds: persist_commit_seconds(&registry)?,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The `/metrics` lines of `h`'s pass families.
    fn pass_lines(h: &Health) -> Vec<String> {
        prometheus::TextEncoder::new()
            .encode_to_string(&h.registry.gather())
            .expect("encode")
            .lines()
            .filter(|l| l.starts_with("commwatch_collector_pass_"))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_pass_is_counted_by_its_own_collector_only() {
        let (a, b) = (
            Health::new().expect("health"),
            Health::new().expect("health"),
        );
        let untouched = pass_lines(&b);
        assert_eq!(pass_lines(&a), untouched);
        assert!(
            untouched.contains(&"commwatch_collector_pass_seconds_count{pass=\"steps\"} 0".into()),
            "{untouched:?}"
        );
        let t = a.passes.timer("steps");
        std::hint::black_box((0..100_000u64).sum::<u64>());
        t.done(7);
        let steps = |h: &Health| h.passes.nodes.with_label_values(&["steps"]).get();
        assert_eq!((steps(&a), steps(&b)), (7, 0));
        let counted = pass_lines(&a);
        for line in [
            "commwatch_collector_pass_seconds_count{pass=\"steps\"} 1",
            "commwatch_collector_pass_nodes_total{pass=\"steps\"} 7",
            "commwatch_collector_pass_seconds_count{pass=\"analysis_input\"} 0",
        ] {
            assert!(counted.contains(&line.to_string()), "{line} in {counted:?}");
        }
        // The other collector's families are as they were, byte for byte.
        assert_eq!(pass_lines(&b), untouched);
        // The same metrics cannot be registered twice in one registry.
        assert!(a.passes.register(&a.registry).is_err());
    }
}
