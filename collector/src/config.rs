//! Collector configuration: defaults in one place, TOML (`--config FILE`) with humantime durations
//! (`retention = "5m"`), and [`CollectorConfig::validate`] naming the bad field.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub mod export_detail;
pub mod nvlink_detail;
pub mod remote_write;
pub use export_detail::{CounterDetail, CpuDetail, GpuDetail};
pub use nvlink_detail::NvlinkDetail;
pub use remote_write::RemoteWriteConfig;

/// Errors reading or validating a configuration. Each message says its cause itself (none is repeated as a
/// `source()`, so a printed chain says it once).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot parse config file {path}: {error}")]
    Parse {
        path: PathBuf,
        error: Box<toml::de::Error>,
    },
    /// A field holds a value the collector cannot run with; `field` is its dotted TOML path.
    #[error("invalid config field `{field}`: {reason}")]
    Invalid { field: &'static str, reason: String },
}

/// Limits. The per-agent ones (all but `max_http_connections`): exceeding one fails that agent's stream with
/// `RESOURCE_EXHAUSTED` and is counted in `commwatch_collector_rejected_streams_total{reason}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Most series one agent instance may describe.
    pub max_series: usize,
    /// Largest encoded message accepted, in bytes (also tonic's `max_decoding_message_size`).
    pub max_batch_bytes: usize,
    /// Longest metric name, label key or value, device, port, state or attribute, in bytes.
    pub max_label_len: usize,
    /// Samples per second one agent stream may send (one second of burst); 0 = no limit. The excess is not
    /// refused: the stream is read no faster than this (backpressure into the agent's resend buffer) and the
    /// throttling is counted (`ingest::rate` says why).
    pub max_samples_per_second: u64,
    /// Most HTTP connections (`/metrics`, `/api`, `/healthz`) served at once, 1..=1,000,000. One accepted
    /// beyond it is closed at once and counted in `commwatch_collector_http_connections_refused_total`
    /// (`commwatch_httpd`).
    pub max_http_connections: usize,
    /// Most gRPC connections (agents) open at once, 1..=1,000,000. One accepted beyond it is closed at once and
    /// counted in `commwatch_collector_grpc_connections_refused_total{reason="listener_limit"}`. Each costs a
    /// file descriptor: the service's descriptor limit must exceed it plus `max_http_connections` (checked, and
    /// warned about, at start).
    pub max_grpc_connections: usize,
    /// Most gRPC connections open at once from one IP address, 1..=`max_grpc_connections`
    /// (`reason="peer_limit"`). An agent needs one; raise it when agents reach the collector through a NAT or
    /// a proxy, where many share an address.
    pub max_grpc_connections_per_peer: usize,
    /// Time a new gRPC connection has to finish its TLS handshake (with TLS) and send the HTTP/2 preface; a
    /// connection that has not is closed (`reason="handshake_timeout"`). 100ms..=60s.
    #[serde(with = "humantime_serde")]
    pub grpc_handshake_timeout: Duration,
    /// Most nodes held at once (`Hello` of a new node name beyond it: `RESOURCE_EXHAUSTED`, counted as
    /// `rejected_streams{reason="max_nodes"}`). Nodes leave `node_expiry` after their last message.
    pub max_nodes: usize,
    /// Most distinct node names one gRPC connection may report as over its life (`reason="max_nodes_per_connection"`).
    /// An agent reports as one; raise it when a proxy multiplexes several agents over one connection.
    pub max_nodes_per_connection: usize,
    /// How far ahead of the collector's clock a sample's timestamp may be; samples further ahead are refused
    /// (skipped, counted in `commwatch_collector_out_of_window_samples_total`: one far-future sample would
    /// freeze its series). 1s..=1 day. Older samples are kept: an agent resending after an outage sends them.
    #[serde(with = "humantime_serde")]
    pub max_clock_skew: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_series: 100_000,
            max_batch_bytes: 4 * 1024 * 1024,
            max_label_len: 256,
            // A full node is ~10^3 series at 20 Hz (2*10^4 samples/s): 25x headroom to catch up a backlog.
            max_samples_per_second: 500_000,
            // Prometheus, dashboards and a few API clients need a handful; each costs a file descriptor.
            max_http_connections: 256,
            // One connection per agent: room for a large fleet, and with max_http_connections far below the
            // LimitNOFILE=65536 of the systemd unit.
            max_grpc_connections: 16_384,
            max_grpc_connections_per_peer: 256,
            grpc_handshake_timeout: Duration::from_secs(5),
            max_nodes: 10_000,
            max_nodes_per_connection: 16,
            // Agents' clocks drift by seconds under NTP; minutes of skew is a broken clock.
            max_clock_skew: Duration::from_secs(300),
        }
    }
}

/// TLS of the gRPC ingest listener.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain of the collector.
    pub cert_file: PathBuf,
    /// PEM private key of the collector.
    pub key_file: PathBuf,
    /// PEM CA bundle: when set, mutual TLS — only agents whose client certificate chains to it are accepted,
    /// and an agent may only report as a node named in its certificate (common name or DNS name).
    pub client_ca_file: Option<PathBuf>,
}

/// Everything `commwatch collector` runs with.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollectorConfig {
    /// gRPC ingest listener (agents connect here). Port 0 picks a free port.
    pub grpc_listen: SocketAddr,
    /// HTTP listener for `/metrics`, `/api/v1/*`, `/healthz`. Port 0 picks a free port.
    pub http_listen: SocketAddr,
    /// SQLite persistence directory; `None` keeps everything in memory only.
    pub state_dir: Option<PathBuf>,
    /// How long raw samples (and persisted batches) are kept: the raw retention.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    /// How long each node's per-step summaries are kept (at most 1000 steps a node); meant to be longer than
    /// `retention`, so the steps outlive the samples they summarise.
    #[serde(with = "humantime_serde")]
    pub step_retention: Duration,
    /// How long cleared findings and their raise and clear events stay in the state database (`state_dir`);
    /// active findings are never pruned. 1h to 366 days.
    #[serde(with = "humantime_serde")]
    pub findings_retention: Duration,
    /// Most cleared findings kept in the state database (the most recently seen), at least 1.
    pub findings_max_cleared: usize,
    /// Most finding events (raises and clears) kept in the state database (the newest; those of active
    /// findings are never pruned), at least 1.
    pub findings_max_events: usize,
    /// A node with no message for this long is removed from `/metrics` and `/api`.
    #[serde(with = "humantime_serde")]
    pub node_expiry: Duration,
    pub limits: Limits,
    /// Fast-tier sampling period sent to agents in `Config`, ms; 0 = leave agents alone.
    pub fast_period_ms: u32,
    /// Slow-tier sampling period sent to agents in `Config`, ms; 0 = leave agents alone.
    pub slow_period_ms: u32,
    /// How often the step engine extends every node's step history (`"500ms"`); `"0s"` turns steps off.
    #[serde(with = "humantime_serde")]
    pub steps_interval: Duration,
    /// The share of one core the rules' evaluation may use (0.05 to 1; [`DEFAULT_ANALYSIS_SHARE`]): its budget
    /// of CPU time, and its thread's priority against the ingest's
    /// ([`crate::pace::nice_for_share`]). The ingest has the rest.
    pub analysis_share: f64,
    /// The share of one core the step engine is guaranteed against a busy ingest (0.02 to 1;
    /// [`DEFAULT_STEPS_SHARE`]): its thread's priority ([`crate::pace::nice_for_share`]), its passes paced by
    /// their CPU time. On a core with room it takes what it needs (at most [`crate::pace::MAX_DUTY`]).
    pub steps_share: f64,
    /// The share of one core guaranteed against a busy ingest to the work someone waits for: the `/metrics`
    /// render and the remote-write gather (0.02 to 1; [`DEFAULT_EXPORT_SHARE`]): their threads' priority
    /// ([`crate::pace::nice_for_share`]). On a core with room they take what they need.
    pub export_share: f64,
    /// TLS (and optionally mutual TLS) on the gRPC listener; `None` is plain text.
    pub tls: Option<TlsConfig>,
    /// File holding the bearer token agents must present (`authorization: Bearer …`); `None` = no token.
    pub token_file: Option<PathBuf>,
    /// File holding the bearer token required for `/api/*`; `None`: reads are open and writes are accepted
    /// from loopback clients only.
    pub api_token_file: Option<PathBuf>,
    /// Marks the page's login cookie `Secure` always: the page is served over https (a TLS proxy in front).
    pub secure_cookie: bool,
    /// Addresses of reverse proxies whose `X-Forwarded-Proto: https` marks the login cookie `Secure`; the
    /// header is ignored from anyone else.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// Allows plain-text gRPC ingest on a non-loopback `grpc_listen` (no `[tls]`). Without it such a start is
    /// refused ([`CollectorConfig::check_transport`]): agents' counters, node names and bearer tokens would
    /// cross the network readable and forgeable. Plain text on a loopback address is always allowed.
    pub allow_plaintext: bool,
    /// `[remote_write]`: the derived series sent to a Prometheus remote-write receiver; off without `url`.
    pub remote_write: RemoteWriteConfig,
    /// `nvlink_detail = "gpu" | "link"`: NVLink series in `/metrics` and remote write, and NVLink step figures
    /// (the step engine, `/api/v1/steps`), per GPU (its links summed; the default, for a fleet's series count
    /// and the engine's work) or per link.
    pub nvlink_detail: NvlinkDetail,
    /// `counter_detail = "family" | "name"`: a link's error, congestion and other counters in `/metrics` and
    /// remote write summed per family (the default) or one series per agent counter name (`counter` label).
    pub counter_detail: CounterDetail,
    /// `cpu_detail = "total" | "core"`: the node's CPU utilisation in `/metrics` and remote write as its
    /// total only (the default) or also per core (`cpu` label).
    pub cpu_detail: CpuDetail,
    /// `gpu_detail = "summary" | "full"`: the GPU families in `/metrics` and remote write with the PCIe maxima
    /// as a `max` label and without the GPU's NVLink rates (its NVLink links say them; the default), or every
    /// GPU family as the agent sends it.
    pub gpu_detail: GpuDetail,
    /// `[probes]`: active probes between nodes through their agents (on request, and a sampled matrix).
    pub probes: crate::probes::ProbesConfig,
}

/// How long raw samples are kept by default (`retention`): what the analysis reads (its longest window is the
/// 2 minutes of markers that name a node's jobs; rates, steps and findings read 1–30 s) with room for late
/// markers and for `/api` readers, at about 5 MB a node of the demo's shape (BENCHMARKS.md, "Collector: raw
/// samples per node"); the per-step summaries and the exported series carry the longer history.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(300);

/// The share of a core the evaluation may use by default (`analysis_share`).
pub const DEFAULT_ANALYSIS_SHARE: f64 = 0.25;

/// The share of a core the step engine is guaranteed by default (`steps_share`): nice 10, a floor, not a cap
/// (it takes more where the ingest leaves gaps). Its passes cost 70–85 µs of CPU per demo node and second of
/// data while they keep up at 2,000 nodes on one core (0.14–0.17 of the core) and about twice that once
/// behind (BENCHMARKS.md, the fourteenth session); under `SCHED_IDLE`, as before, a full core left them
/// nothing (no pass in 30 s at 2,000 demo nodes).
pub const DEFAULT_STEPS_SHARE: f64 = 0.1;

/// The share of a core the `/metrics` render and the remote-write gather are guaranteed by default
/// (`export_share`): nice 4, a floor, not a cap. A render costs 1.4–1.9 s of CPU at 2,000 demo nodes on a full
/// core; at the lowest priority (nice 19, before) it got ~1.5 % of the core and a gzip scrape took 32–33 s
/// there, past Prometheus' default 10 s timeout, so that a saturated collector lost the very metrics that say
/// so. At a fifth (nice 6) scrapes took 6.8–12.7 s there, at 0.3 4.2–9.1 s (BENCHMARKS.md, the sixteenth
/// session).
pub const DEFAULT_EXPORT_SHARE: f64 = 0.3;

/// How long a node's per-step summaries are kept by default (`step_retention`): longer than the raw samples
/// they summarise (`retention`, 5 minutes by default), so the per-step figures outlive the samples.
pub const DEFAULT_STEP_RETENTION: Duration = Duration::from_secs(3600);

/// How long cleared findings and their events stay in the state database by default (`findings_retention`):
/// two weeks of history for `/api/v1/findings?active=false` and post-mortems.
pub const DEFAULT_FINDINGS_RETENTION: Duration = Duration::from_secs(14 * 24 * 3600);
/// Most cleared findings kept in the state database by default (`findings_max_cleared`; about 1.5 KB each).
pub const DEFAULT_FINDINGS_MAX_CLEARED: usize = 10_000;
/// Most finding events kept in the state database by default (`findings_max_events`; about 150 B each).
pub const DEFAULT_FINDINGS_MAX_EVENTS: usize = 100_000;

impl Default for CollectorConfig {
    fn default() -> Self {
        CollectorConfig {
            grpc_listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            http_listen: SocketAddr::from(([127, 0, 0, 1], 9470)),
            state_dir: None,
            retention: DEFAULT_RETENTION,
            step_retention: DEFAULT_STEP_RETENTION,
            findings_retention: DEFAULT_FINDINGS_RETENTION,
            findings_max_cleared: DEFAULT_FINDINGS_MAX_CLEARED,
            findings_max_events: DEFAULT_FINDINGS_MAX_EVENTS,
            node_expiry: Duration::from_secs(300),
            limits: Limits::default(),
            fast_period_ms: 0,
            slow_period_ms: 0,
            steps_interval: Duration::from_millis(500),
            analysis_share: DEFAULT_ANALYSIS_SHARE,
            steps_share: DEFAULT_STEPS_SHARE,
            export_share: DEFAULT_EXPORT_SHARE,
            tls: None,
            token_file: None,
            api_token_file: None,
            secure_cookie: false,
            trusted_proxies: Vec::new(),
            allow_plaintext: false,
            remote_write: RemoteWriteConfig::default(),
            nvlink_detail: NvlinkDetail::Gpu,
            counter_detail: CounterDetail::Family,
            cpu_detail: CpuDetail::Total,
            gpu_detail: GpuDetail::Summary,
            probes: crate::probes::ProbesConfig::default(),
        }
    }
}

impl CollectorConfig {
    /// Reads a TOML file; absent fields take their defaults. The result is validated.
    pub fn from_file(path: &Path) -> Result<CollectorConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        let cfg = Self::from_toml_str(&text).map_err(|e| match e {
            ConfigError::Parse { error, .. } => ConfigError::Parse {
                path: path.to_owned(),
                error,
            },
            other => other,
        })?;
        Ok(cfg)
    }

    /// Parses TOML text; absent fields take their defaults. The result is validated.
    pub fn from_toml_str(text: &str) -> Result<CollectorConfig, ConfigError> {
        let cfg: CollectorConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::from("<string>"),
            error: Box::new(e),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        fn bad(field: &'static str, reason: impl Into<String>) -> Result<(), ConfigError> {
            Err(ConfigError::Invalid {
                field,
                reason: reason.into(),
            })
        }
        if self.retention < Duration::from_secs(1) {
            return bad("retention", "must be at least 1s");
        }
        if self.retention > Duration::from_secs(7 * 24 * 3600) {
            return bad("retention", "must be at most 7 days");
        }
        if self.step_retention < Duration::from_secs(1) {
            return bad("step_retention", "must be at least 1s");
        }
        if self.step_retention > Duration::from_secs(7 * 24 * 3600) {
            return bad("step_retention", "must be at most 7 days");
        }
        self.validate_findings_history()?;
        if !self.steps_interval.is_zero() && self.steps_interval < Duration::from_millis(50) {
            return bad("steps_interval", "must be 0s (off) or at least 50ms");
        }
        if !(0.05..=1.0).contains(&self.analysis_share) {
            return bad(
                "analysis_share",
                "must be from 0.05 to 1 (a share of one core)",
            );
        }
        if !(0.02..=1.0).contains(&self.steps_share) {
            return bad(
                "steps_share",
                "must be from 0.02 to 1 (a share of one core)",
            );
        }
        if !(0.02..=1.0).contains(&self.export_share) {
            return bad(
                "export_share",
                "must be from 0.02 to 1 (a share of one core)",
            );
        }
        if self.node_expiry < Duration::from_millis(100) {
            return bad("node_expiry", "must be at least 100ms");
        }
        if self.limits.max_series == 0 {
            return bad("limits.max_series", "must be > 0");
        }
        if self.limits.max_batch_bytes < 1024 {
            return bad("limits.max_batch_bytes", "must be at least 1024");
        }
        if self.limits.max_batch_bytes > 1 << 30 {
            return bad("limits.max_batch_bytes", "must be at most 1 GiB");
        }
        if self.limits.max_label_len < 16 {
            return bad("limits.max_label_len", "must be at least 16");
        }
        if self.limits.max_http_connections == 0 {
            return bad("limits.max_http_connections", "must be at least 1");
        }
        if self.limits.max_http_connections > commwatch_httpd::MAX_CONNECTIONS_BOUND {
            return bad("limits.max_http_connections", "must be at most 1000000");
        }
        self.validate_connection_limits()?;
        self.remote_write.validate()?;
        self.probes
            .validate()
            .map_err(|(field, reason)| ConfigError::Invalid { field, reason })?;
        if self.fast_period_ms != 0 && self.fast_period_ms < 10 {
            return bad(
                "fast_period_ms",
                "must be 0 (leave agents alone) or at least 10",
            );
        }
        if self.slow_period_ms != 0 && self.slow_period_ms < 10 {
            return bad(
                "slow_period_ms",
                "must be 0 (leave agents alone) or at least 10",
            );
        }
        if let Some(dir) = &self.state_dir {
            if dir.as_os_str().is_empty() {
                return bad("state_dir", "must not be empty");
            }
        }
        if let Some(t) = &self.tls {
            if t.cert_file.as_os_str().is_empty() || t.key_file.as_os_str().is_empty() {
                return bad("tls", "cert_file and key_file are required");
            }
        }
        Ok(())
    }

    /// `findings_retention`, `findings_max_cleared`, `findings_max_events`.
    fn validate_findings_history(&self) -> Result<(), ConfigError> {
        let bad = |field: &'static str, reason: &str| {
            Err(ConfigError::Invalid {
                field,
                reason: reason.to_string(),
            })
        };
        let age = Duration::from_secs(3600)..=Duration::from_secs(366 * 24 * 3600);
        if !age.contains(&self.findings_retention) {
            return bad("findings_retention", "must be 1h to 366 days");
        }
        if self.findings_max_cleared == 0 {
            return bad("findings_max_cleared", "must be at least 1");
        }
        if self.findings_max_events == 0 {
            return bad("findings_max_events", "must be at least 1");
        }
        Ok(())
    }

    /// The `limits` of gRPC connections, nodes and clocks.
    fn validate_connection_limits(&self) -> Result<(), ConfigError> {
        let l = &self.limits;
        let bad = |field: &'static str, reason: &str| {
            Err(ConfigError::Invalid {
                field,
                reason: reason.to_string(),
            })
        };
        if !(1..=1_000_000).contains(&l.max_grpc_connections) {
            return bad("limits.max_grpc_connections", "must be 1 to 1000000");
        }
        if !(1..=l.max_grpc_connections).contains(&l.max_grpc_connections_per_peer) {
            return bad(
                "limits.max_grpc_connections_per_peer",
                "must be 1 to limits.max_grpc_connections",
            );
        }
        let handshake = Duration::from_millis(100)..=Duration::from_secs(60);
        if !handshake.contains(&l.grpc_handshake_timeout) {
            return bad("limits.grpc_handshake_timeout", "must be 100ms to 60s");
        }
        if l.max_nodes == 0 {
            return bad("limits.max_nodes", "must be at least 1");
        }
        if l.max_nodes_per_connection == 0 {
            return bad("limits.max_nodes_per_connection", "must be at least 1");
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&l.max_clock_skew) {
            return bad("limits.max_clock_skew", "must be 1s to 1 day");
        }
        Ok(())
    }

    /// The transport rule checked at start (not by [`validate`](Self::validate), so that a file and the
    /// command line can be merged first): gRPC ingest in plain text on a non-loopback address needs
    /// `allow_plaintext`. Returns whether the start goes on in plain text across the network (to warn).
    pub fn check_transport(&self) -> Result<bool, ConfigError> {
        let remote_plaintext = self.tls.is_none() && !self.grpc_listen.ip().is_loopback();
        if remote_plaintext && !self.allow_plaintext {
            return Err(ConfigError::Invalid {
                field: "grpc_listen",
                reason: format!(
                    "{} is not a loopback address and [tls] is not configured: configure tls (cert_file, \
                     key_file; client_ca_file for mutual TLS), or allow plain text explicitly with \
                     --allow-plaintext (allow_plaintext = true)",
                    self.grpc_listen
                ),
            });
        }
        Ok(remote_plaintext)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let c = CollectorConfig::default();
        c.validate().expect("defaults valid");
        assert_eq!(c.retention, Duration::from_secs(300));
        assert_eq!(c.node_expiry, Duration::from_secs(300));
        assert_eq!(c.limits.max_batch_bytes, 4 << 20);
    }

    #[test]
    fn findings_history_keeps_two_weeks_by_default_and_names_a_bad_field() {
        let c = CollectorConfig::default();
        assert_eq!(c.findings_retention, Duration::from_secs(14 * 24 * 3600));
        assert_eq!(c.findings_max_cleared, 10_000);
        let c = CollectorConfig::from_toml_str(
            "findings_retention = \"30days\"\nfindings_max_cleared = 5\nfindings_max_events = 7\n",
        )
        .unwrap();
        assert_eq!(c.findings_retention, Duration::from_secs(30 * 24 * 3600));
        assert_eq!((c.findings_max_cleared, c.findings_max_events), (5, 7));
        for bad in [
            "findings_retention = \"10m\"",
            "findings_retention = \"400days\"",
            "findings_max_cleared = 0",
            "findings_max_events = 0",
        ] {
            let err = CollectorConfig::from_toml_str(bad).unwrap_err().to_string();
            let field = bad.split(' ').next().unwrap();
            assert!(err.contains(&format!("`{field}`")), "{bad}: {err}");
        }
    }

    #[test]
    fn the_steps_share_is_a_share_of_one_core() {
        assert_eq!(CollectorConfig::default().steps_share, DEFAULT_STEPS_SHARE);
        let c = CollectorConfig::from_toml_str("steps_share = 0.2\n").expect("parses");
        assert_eq!(c.steps_share, 0.2);
        for bad in ["steps_share = 0", "steps_share = 1.01", "steps_share = nan"] {
            let err = CollectorConfig::from_toml_str(bad).unwrap_err().to_string();
            assert!(err.contains("`steps_share`"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_export_share_is_a_share_of_one_core() {
        assert_eq!(
            CollectorConfig::default().export_share,
            DEFAULT_EXPORT_SHARE
        );
        assert_eq!(crate::pace::nice_for_share(DEFAULT_EXPORT_SHARE), 4);
        let c = CollectorConfig::from_toml_str("export_share = 0.5\n").expect("parses");
        assert_eq!(c.export_share, 0.5);
        for bad in [
            "export_share = 0.01",
            "export_share = 2",
            "export_share = nan",
        ] {
            let err = CollectorConfig::from_toml_str(bad).unwrap_err().to_string();
            assert!(err.contains("`export_share`"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_analysis_share_is_a_share_of_one_core() {
        assert_eq!(
            CollectorConfig::default().analysis_share,
            DEFAULT_ANALYSIS_SHARE
        );
        let c = CollectorConfig::from_toml_str("analysis_share = 0.4\n").expect("parses");
        assert_eq!(c.analysis_share, 0.4);
        for bad in [
            "analysis_share = 0.01",
            "analysis_share = 1.5",
            "analysis_share = nan",
        ] {
            let err = CollectorConfig::from_toml_str(bad).unwrap_err().to_string();
            assert!(err.contains("`analysis_share`"), "{bad}: {err}");
        }
    }

    #[test]
    fn step_retention_is_its_own_and_outlives_the_samples_by_default() {
        let c = CollectorConfig::default();
        assert!(c.step_retention > c.retention);
        let c = CollectorConfig::from_toml_str("retention = \"2m\"\nstep_retention = \"6h\"\n")
            .expect("parses");
        assert_eq!(c.retention, Duration::from_secs(120));
        assert_eq!(c.step_retention, Duration::from_secs(6 * 3600));
        let err = CollectorConfig::from_toml_str("step_retention = \"0s\"\n").unwrap_err();
        assert!(err.to_string().contains("`step_retention`"), "{err}");
    }

    #[test]
    fn toml_with_humantime() {
        let c = CollectorConfig::from_toml_str(
            r#"
            grpc_listen = "0.0.0.0:7000"
            retention = "2m"
            node_expiry = "30s"
            fast_period_ms = 100
            [limits]
            max_series = 10
            max_samples_per_second = 1000
            "#,
        )
        .expect("parses");
        assert_eq!(c.grpc_listen.port(), 7000);
        assert_eq!(c.retention, Duration::from_secs(120));
        assert_eq!(c.node_expiry, Duration::from_secs(30));
        assert_eq!(c.limits.max_series, 10);
        assert_eq!(c.limits.max_samples_per_second, 1000);
        assert_eq!(c.limits.max_label_len, Limits::default().max_label_len);
        assert_eq!(c.fast_period_ms, 100);
        assert_eq!(c.nvlink_detail, NvlinkDetail::Gpu);
        let c = CollectorConfig::from_toml_str("nvlink_detail = \"link\"\n").expect("parses");
        assert_eq!(c.nvlink_detail, NvlinkDetail::Link);
        let err = CollectorConfig::from_toml_str("nvlink_detail = \"port\"\n").unwrap_err();
        assert!(err.to_string().contains("nvlink_detail"), "{err}");
        assert_eq!(c.counter_detail, CounterDetail::Family);
        assert_eq!(c.cpu_detail, CpuDetail::Total);
        assert_eq!(c.gpu_detail, GpuDetail::Summary);
        let toml = "counter_detail = \"name\"\ncpu_detail = \"core\"\ngpu_detail = \"full\"\n";
        let c = CollectorConfig::from_toml_str(toml).expect("parses");
        assert_eq!(
            (c.counter_detail, c.cpu_detail),
            (CounterDetail::Name, CpuDetail::Core)
        );
        assert_eq!(c.gpu_detail, GpuDetail::Full);
        for bad in [
            "counter_detail = \"names\"\n",
            "cpu_detail = \"all\"\n",
            "gpu_detail = \"gpu\"\n",
        ] {
            let err = CollectorConfig::from_toml_str(bad).unwrap_err();
            let key = bad.split(' ').next().unwrap_or_default();
            assert!(err.to_string().contains(key), "{err}");
        }
    }

    #[test]
    fn validate_names_field() {
        let err = CollectorConfig::from_toml_str("[limits]\nmax_series = 0\n").unwrap_err();
        assert!(err.to_string().contains("limits.max_series"), "{err}");
        let err = CollectorConfig::from_toml_str("retention = \"10ms\"\n").unwrap_err();
        assert!(err.to_string().contains("`retention`"), "{err}");
        let err = CollectorConfig::from_toml_str("retention = \"ten\"\n").unwrap_err();
        assert!(err.to_string().contains("retention"), "{err}");
        assert!(CollectorConfig::from_toml_str("bogus = 1\n").is_err());
    }

    #[test]
    fn max_http_connections_defaults_parses_and_is_bounded() {
        assert_eq!(Limits::default().max_http_connections, 256);
        let c = CollectorConfig::from_toml_str("[limits]\nmax_http_connections = 4\n").unwrap();
        assert_eq!(c.limits.max_http_connections, 4);
        for bad in ["0", "1000001"] {
            let err = CollectorConfig::from_toml_str(&format!(
                "[limits]\nmax_http_connections = {bad}\n"
            ))
            .unwrap_err();
            assert!(
                matches!(
                    err,
                    ConfigError::Invalid {
                        field: "limits.max_http_connections",
                        ..
                    }
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn connection_node_and_clock_limits_default_parse_and_are_bounded() {
        let d = Limits::default();
        assert_eq!(d.max_grpc_connections, 16_384);
        assert_eq!(d.max_grpc_connections_per_peer, 256);
        assert_eq!(d.grpc_handshake_timeout, Duration::from_secs(5));
        assert_eq!(d.max_nodes, 10_000);
        assert_eq!(d.max_nodes_per_connection, 16);
        assert_eq!(d.max_clock_skew, Duration::from_secs(300));
        let c = CollectorConfig::from_toml_str(
            "[limits]\nmax_grpc_connections = 100\nmax_grpc_connections_per_peer = 10\n\
             grpc_handshake_timeout = \"2s\"\nmax_nodes = 50\nmax_nodes_per_connection = 2\n\
             max_clock_skew = \"1m\"\n",
        )
        .unwrap();
        assert_eq!(c.limits.max_grpc_connections, 100);
        assert_eq!(c.limits.max_grpc_connections_per_peer, 10);
        assert_eq!(c.limits.grpc_handshake_timeout, Duration::from_secs(2));
        assert_eq!(c.limits.max_nodes, 50);
        assert_eq!(c.limits.max_nodes_per_connection, 2);
        assert_eq!(c.limits.max_clock_skew, Duration::from_secs(60));
        let bad = [
            ("max_grpc_connections = 0", "limits.max_grpc_connections"),
            (
                "max_grpc_connections = 10\nmax_grpc_connections_per_peer = 11",
                "limits.max_grpc_connections_per_peer",
            ),
            (
                "grpc_handshake_timeout = \"10ms\"",
                "limits.grpc_handshake_timeout",
            ),
            (
                "grpc_handshake_timeout = \"2m\"",
                "limits.grpc_handshake_timeout",
            ),
            ("max_nodes = 0", "limits.max_nodes"),
            (
                "max_nodes_per_connection = 0",
                "limits.max_nodes_per_connection",
            ),
            ("max_clock_skew = \"0s\"", "limits.max_clock_skew"),
        ];
        for (text, field) in bad {
            let err = CollectorConfig::from_toml_str(&format!("[limits]\n{text}\n")).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { field: f, .. } if *f == field),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn errors_say_their_cause_once() {
        use std::error::Error;
        let missing = std::path::Path::new("/nonexistent/commwatch/collector.toml");
        let errors = [
            CollectorConfig::from_file(missing).unwrap_err(),
            CollectorConfig::from_toml_str("retention = [").unwrap_err(),
        ];
        for e in errors {
            assert!(e.source().is_none(), "{e} also hands out its cause");
        }
    }

    #[test]
    fn plain_text_beyond_loopback_needs_explicit_allowance() {
        let c = CollectorConfig::default();
        assert!(!c.check_transport().unwrap(), "loopback plain text is fine");
        let c = CollectorConfig::from_toml_str("grpc_listen = \"0.0.0.0:7070\"\n").unwrap();
        let err = c.check_transport().unwrap_err().to_string();
        assert!(
            err.contains("grpc_listen") && err.contains("allow_plaintext"),
            "{err}"
        );
        let c =
            CollectorConfig::from_toml_str("grpc_listen = \"[::]:7070\"\nallow_plaintext = true\n")
                .unwrap();
        assert!(
            c.check_transport().unwrap(),
            "allowed, and reported to warn"
        );
        let c = CollectorConfig::from_toml_str(
            "grpc_listen = \"10.1.2.3:7070\"\n[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n",
        )
        .unwrap();
        assert!(!c.check_transport().unwrap(), "TLS is not plain text");
    }
}
