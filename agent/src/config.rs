//! Agent configuration: defaults in one place, a TOML file (`--config FILE`), command-line overrides, and
//! `validate()` naming the bad field.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use commwatch_model::token::exposure_warning;
use serde::Deserialize;

use crate::source::netdev::NetdevOptions;
use crate::source::{SourceSettings, SOURCE_NAMES};

/// Default fast-tier period: data byte counters at 20 Hz.
pub const DEFAULT_FAST_PERIOD: Duration = Duration::from_millis(50);
/// Default slow-tier period: errors, state, rate, host at 1 Hz.
pub const DEFAULT_SLOW_PERIOD: Duration = Duration::from_secs(1);
/// Default span the resend buffer covers at the default rates.
pub const DEFAULT_BUFFER_SPAN: Duration = Duration::from_secs(600);
/// Default loopback UDP address for step markers.
pub const DEFAULT_STEPS_UDP: &str = "127.0.0.1:9473";
/// Default unix datagram socket for step markers.
pub const DEFAULT_STEPS_SOCKET: &str = "/run/commwatch/steps.sock";
/// Default address of the agent's own `/metrics`.
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:9471";

/// Smallest resend buffer (`buffer_bytes`, `--buffer-bytes`): a few batches of a large node.
pub const MIN_BUFFER_BYTES: usize = 64 * 1024;
/// Largest resend buffer: far above an hour of batches of any node (the default holds 10 minutes, tens of
/// MiB on a large node); it bounds a typo, since the buffer is memory the agent may fill while the collector is
/// away.
pub const MAX_BUFFER_BYTES: usize = 16 * 1024 * 1024 * 1024;

/// Errors of loading or validating the configuration. Each message says its cause itself (none is repeated
/// as a `source()`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("config file {path}: {error}")]
    Parse {
        path: PathBuf,
        error: toml::de::Error,
    },
    #[error("invalid configuration: `{field}`: {reason}")]
    Invalid { field: &'static str, reason: String },
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// Netdev classification overrides (interface names; a trailing `*` matches a prefix).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NetdevConfig {
    /// When not empty, only these interfaces are read, virtual ones included (`exclude` still wins).
    pub include: Vec<String>,
    /// Interfaces to treat as fabric even if they look like management Ethernet.
    pub fabric: Vec<String>,
    /// Interfaces to treat as management even if they look like fabric.
    pub management: Vec<String>,
    /// Interfaces to ignore; `None` keeps the built-in list (`lo`, `ifb*`, `veth*`, `docker*`, ...).
    pub exclude: Option<Vec<String>>,
    /// Capacities per direction by interface pattern, for links whose nominal speed is not the truth (a
    /// shaped port, a veth): `{ "fab0" = "2Gbit/s", "ens*" = "100Gbit/s" }` ([`parse_link_rate`] units). Read
    /// in file order is not kept by TOML tables: the most specific pattern (fewest `*`, then longest) wins.
    pub capacities: BTreeMap<String, String>,
}

/// A link rate as configured: a number and a unit, `bit/s` (also `b/s`, `bps`) or `B/s` (bytes), with an
/// optional SI prefix `k`, `M`, `G`, `T` (`"2Gbit/s"`, `"400 Gb/s"`, `"12.5GB/s"`) → bytes per second.
pub fn parse_link_rate(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E'))
        .unwrap_or(t.len());
    let (num, unit) = (t[..split].trim(), t[split..].trim());
    let value: f64 = num.parse().map_err(|_| {
        format!("{text:?}: expected a number and a unit such as \"2Gbit/s\" or \"25GB/s\"")
    })?;
    let (scale, rest) = match unit.chars().next() {
        Some('k') => (1e3, &unit[1..]),
        Some('M') => (1e6, &unit[1..]),
        Some('G') => (1e9, &unit[1..]),
        Some('T') => (1e12, &unit[1..]),
        _ => (1.0, unit),
    };
    let per_unit = match rest {
        "bit/s" | "b/s" | "bps" => 1.0 / 8.0,
        "B/s" | "Bps" => 1.0,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?}; use bit/s, b/s or B/s with k, M, G or T"
            ))
        }
    };
    let bytes = value * scale * per_unit;
    if !(1.0..1e15).contains(&bytes) {
        return Err(format!("{text:?}: out of range (1 B/s to 1 PB/s)"));
    }
    Ok(bytes.round() as u64)
}

impl NetdevConfig {
    /// The configured capacities, most specific pattern first (bad values left out: [`AgentConfig::validate`]
    /// refuses them).
    fn capacities(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = self
            .capacities
            .iter()
            .filter_map(|(p, r)| Some((p.clone(), parse_link_rate(r).ok()?)))
            .collect();
        v.sort_by_key(|(p, _)| (p.matches('*').count(), std::cmp::Reverse(p.len())));
        v
    }
}

impl From<&NetdevConfig> for NetdevOptions {
    /// The overrides on top of the source's defaults (`exclude` keeps the built-in list unless set).
    fn from(c: &NetdevConfig) -> NetdevOptions {
        let defaults = NetdevOptions::default();
        NetdevOptions {
            include: c.include.clone(),
            fabric: c.fabric.clone(),
            management: c.management.clone(),
            exclude: c.exclude.clone().unwrap_or(defaults.exclude),
            capacities: c.capacities(),
        }
    }
}

/// TLS towards the collector. With an `https://` URL the collector's certificate is always verified: against
/// `ca_file` when set, else against the system's roots.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AgentTlsConfig {
    /// PEM CA bundle that signed the collector's certificate.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate and key, for mutual TLS (the certificate names this node).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Name to verify the collector's certificate against, when it differs from the URL's host.
    pub server_name: Option<String>,
}

/// The whole agent configuration.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// Node name reported to the collector; defaults to the host name.
    pub node: String,
    /// Collector URL (`https://HOST:PORT`, or `http://HOST:PORT` for plain text); `None` runs without shipping
    /// (only `/metrics` and `--once`). Several collectors (shards): their URLs separated by commas, all with
    /// the same scheme; the agent picks one by rendezvous hashing on its job id (see `shipper::shard`). An
    /// entry `dns+https://NAME:PORT` (or `dns+http://`) stands for every address `NAME` resolves to, one shard
    /// each (a Kubernetes headless Service; see `shipper::discovery`).
    pub collector: Option<String>,
    /// How often `dns+` collector names are resolved again (also at once when a collector cannot be
    /// reached); 1s to 1h.
    #[serde(with = "humantime_serde")]
    pub collector_refresh: Duration,
    /// Allows an `http://` (plain text) collector URL whose host is not this machine. Plain text to a loopback
    /// address (`localhost`, `127.0.0.0/8`, `::1`) is always allowed: nothing leaves the host. Without this a
    /// non-loopback `http://` URL is refused at start: counters, node names, job settings and any bearer token
    /// would cross the network readable and forgeable.
    pub allow_plaintext: bool,
    /// Root of sysfs (`/sys`); every sysfs path is built from it.
    pub sysfs_root: PathBuf,
    /// Root of procfs (`/proc`).
    pub procfs_root: PathBuf,
    /// Address of the agent's own `/metrics` and `/healthz`. Localhost unless configured.
    pub http_listen: SocketAddr,
    /// Fast-tier period (byte counters).
    #[serde(with = "humantime_serde")]
    pub fast_period: Duration,
    /// Slow-tier period (errors, state, rate, host).
    #[serde(with = "humantime_serde")]
    pub slow_period: Duration,
    /// How often the hardware is rescanned for new or changed devices.
    #[serde(with = "humantime_serde")]
    pub discover_period: Duration,
    /// How many samples are gathered into one batch before it is shipped.
    #[serde(with = "humantime_serde")]
    pub batch_period: Duration,
    /// Resend buffer size in bytes, [`MIN_BUFFER_BYTES`] (64 KiB) to [`MAX_BUFFER_BYTES`] (16 GiB); `None`
    /// sizes it for 10 minutes at the configured rates.
    pub buffer_bytes: Option<usize>,
    /// A connection with unacknowledged batches and no ack for this long is considered stalled and reopened.
    #[serde(with = "humantime_serde")]
    pub ack_timeout: Duration,
    /// With several collectors: how long the agent stays on a fallback shard before it tries its preferred
    /// one again (1s to 1h).
    #[serde(with = "humantime_serde")]
    pub shard_retry: Duration,
    /// Backoff bounds for reconnecting.
    #[serde(with = "humantime_serde")]
    pub backoff_min: Duration,
    #[serde(with = "humantime_serde")]
    pub backoff_max: Duration,
    pub netdev: NetdevConfig,
    /// TLS towards the collector (used with an `https://` collector URL).
    pub tls: AgentTlsConfig,
    /// File holding the bearer token sent to the collector (`authorization: Bearer …`).
    pub token_file: Option<PathBuf>,
    /// Loopback UDP address for step markers; `None` disables UDP markers (`"off"` in the file, as the flag).
    #[serde(deserialize_with = "de_steps_udp")]
    pub steps_udp: Option<SocketAddr>,
    /// Unix datagram socket for step markers; `None` disables it (`"off"` in the file, as the flag).
    #[serde(deserialize_with = "de_steps_socket")]
    pub steps_socket: Option<PathBuf>,
    /// Step markers accepted per second and transport; more are dropped and counted.
    pub steps_rate: f64,
    /// Sources to run; default all ([`SOURCE_NAMES`](crate::source::SOURCE_NAMES)).
    pub sources: Vec<String>,
    /// `nvlink_bytes = "gpu" | "link"`: NVLink byte counters per GPU at the fast rate and per link at the
    /// slow rate (the default: a GPU's 18 links are one fast series pair instead of 18), or per link at the
    /// fast rate ([`NvlinkBytes`](crate::source::nvml::NvlinkBytes)).
    pub nvlink_bytes: crate::source::nvml::NvlinkBytes,
    /// Active probes this agent answers (`[probe]`; off unless `listen` is set).
    pub probe: crate::probe::ProbeConfig,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            node: default_node_name(),
            collector: None,
            collector_refresh: Duration::from_secs(30),
            allow_plaintext: false,
            sysfs_root: PathBuf::from("/sys"),
            procfs_root: PathBuf::from("/proc"),
            http_listen: DEFAULT_HTTP_LISTEN.parse().expect("valid default address"),
            fast_period: DEFAULT_FAST_PERIOD,
            slow_period: DEFAULT_SLOW_PERIOD,
            discover_period: Duration::from_secs(10),
            batch_period: Duration::from_millis(250),
            buffer_bytes: None,
            ack_timeout: Duration::from_secs(15),
            shard_retry: Duration::from_secs(60),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(10),
            netdev: NetdevConfig::default(),
            tls: AgentTlsConfig::default(),
            token_file: None,
            steps_udp: Some(DEFAULT_STEPS_UDP.parse().expect("valid default address")),
            steps_socket: Some(PathBuf::from(DEFAULT_STEPS_SOCKET)),
            steps_rate: 2000.0,
            sources: SOURCE_NAMES.iter().map(|s| s.to_string()).collect(),
            nvlink_bytes: Default::default(),
            probe: crate::probe::ProbeConfig::default(),
        }
    }
}

/// The word that turns a step-marker transport off, in the file and on the command line alike.
pub const OFF: &str = "off";

/// `--steps-udp` / `steps_udp`: `off`, or a socket address.
pub fn parse_steps_udp(v: &str) -> Result<Option<SocketAddr>, String> {
    if v.trim() == OFF {
        return Ok(None);
    }
    v.trim()
        .parse()
        .map(Some)
        .map_err(|e| format!("{v:?} is neither `off` nor an address HOST:PORT ({e})"))
}

/// `--steps-socket` / `steps_socket`: `off`, or a path.
pub fn parse_steps_socket(v: &str) -> Option<PathBuf> {
    (v.trim() != OFF).then(|| PathBuf::from(v))
}

fn de_steps_udp<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    parse_steps_udp(&String::deserialize(d)?).map_err(serde::de::Error::custom)
}

fn de_steps_socket<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    Ok(parse_steps_socket(&String::deserialize(d)?))
}

/// The host name from `/proc/sys/kernel/hostname`, or `unknown-node`.
pub fn default_node_name() -> String {
    crate::source::FsRoot::new("/proc")
        .read_trimmed(Path::new("/proc/sys/kernel/hostname"))
        .unwrap_or_else(|| "unknown-node".to_string())
}

/// Whether the host of `url` is this machine: `localhost` or a loopback IP (`127.0.0.0/8`, `::1`). A URL that
/// does not parse, or names any other host, is not loopback.
pub fn is_loopback_url(url: &str) -> bool {
    let Ok(uri) = url.parse::<tonic::codegen::http::Uri>() else {
        return false;
    };
    let Some(host) = uri.host() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl AgentConfig {
    /// What the sources are built from: the enabled names, the roots and the netdev options.
    pub fn source_settings(&self) -> SourceSettings {
        SourceSettings {
            enabled: self.sources.clone(),
            sysfs_root: self.sysfs_root.clone(),
            procfs_root: self.procfs_root.clone(),
            netdev: NetdevOptions::from(&self.netdev),
            nvlink_bytes: self.nvlink_bytes,
        }
    }

    /// The collector URLs (one, or several shards), as the shipper parses them.
    pub fn collector_urls(&self) -> Vec<String> {
        self.collector
            .as_deref()
            .map(crate::shipper::shard::parse_list)
            .unwrap_or_default()
    }

    /// Whether the agent would send plain text across the network (an `http://` collector on another host).
    pub fn plaintext_to_remote(&self) -> bool {
        self.collector_urls()
            .iter()
            .map(|u| crate::shipper::discovery::strip_dns(u))
            .any(|u| u.starts_with("http://") && !is_loopback_url(u))
    }

    /// Reads a TOML file; missing keys keep their defaults.
    pub fn from_file(path: &Path) -> Result<AgentConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        toml::from_str(&text).map_err(|error| ConfigError::Parse {
            path: path.to_path_buf(),
            error,
        })
    }

    /// What is allowed but risky, said at every start: a `/metrics` listener reachable from other hosts, and
    /// key or token files that others on the node can read or change.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if !self.http_listen.ip().is_loopback() {
            w.push(format!(
                "--http-listen {} (http_listen) is not a loopback address: the agent's /metrics and /healthz \
                 answer anyone who can reach this node; listen on 127.0.0.1 unless a scraper elsewhere needs it",
                self.http_listen
            ));
        }
        let secrets = [
            ("TLS client key", self.tls.key_file.as_deref()),
            ("token file", self.token_file.as_deref()),
            ("probe token file", self.probe.token_file.as_deref()),
        ];
        for (what, path) in secrets {
            if let Some(w_) = path.and_then(|p| exposure_warning(what, p)) {
                w.push(w_);
            }
        }
        w
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_node()?;
        self.validate_transport()?;
        self.validate_timing()?;
        self.validate_steps_and_sources()?;
        self.probe
            .validate()
            .map_err(|(field, reason)| invalid(field, reason))
    }

    fn validate_node(&self) -> Result<(), ConfigError> {
        if self.node.is_empty() || self.node.len() > 253 {
            return Err(invalid("node", "must be 1 to 253 bytes"));
        }
        if self
            .node
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
        {
            return Err(invalid(
                "node",
                "must not contain whitespace or control characters",
            ));
        }
        Ok(())
    }

    /// The collector URL and TLS files: plain text only to this machine unless allowed explicitly.
    fn validate_transport(&self) -> Result<(), ConfigError> {
        if let Some(url) = &self.collector {
            let urls = self.collector_urls();
            if urls.is_empty() {
                return Err(invalid("collector", "no URL given"));
            }
            crate::shipper::discovery::parse_targets(&urls)
                .map_err(|e| invalid("collector", e.to_string()))?;
            let strip = crate::shipper::discovery::strip_dns;
            let tls = strip(url.trim_start()).starts_with("https://");
            for u in urls.iter().map(|u| strip(u)) {
                if !(u.starts_with("https://") || u.starts_with("http://")) {
                    return Err(invalid(
                        "collector",
                        format!("{u:?} is not an http:// or https:// URL"),
                    ));
                }
                if u.starts_with("https://") != tls {
                    return Err(invalid(
                        "collector",
                        "the collector URLs mix http:// and https://; use one scheme for every shard",
                    ));
                }
            }
            if !tls && (self.tls.ca_file.is_some() || self.tls.cert_file.is_some()) {
                return Err(invalid(
                    "collector",
                    "TLS files are configured but the URL is http://; use https://",
                ));
            }
            if !self.allow_plaintext && self.plaintext_to_remote() {
                return Err(invalid(
                    "collector",
                    format!(
                        "{url:?} is plain text to another host: use https:// with [tls], or allow it \
                         explicitly with --allow-plaintext (allow_plaintext = true)"
                    ),
                ));
            }
        }
        if self.tls.cert_file.is_some() != self.tls.key_file.is_some() {
            return Err(invalid(
                "tls",
                "cert_file and key_file go together (the client certificate for mutual TLS)",
            ));
        }
        Ok(())
    }

    /// Periods, buffer, backoff and ack timeout.
    fn validate_timing(&self) -> Result<(), ConfigError> {
        if self.fast_period < Duration::from_millis(5) || self.fast_period > Duration::from_secs(60)
        {
            return Err(invalid("fast_period", "must be between 5ms and 60s"));
        }
        if self.slow_period < self.fast_period || self.slow_period > Duration::from_secs(600) {
            return Err(invalid(
                "slow_period",
                "must be at least fast_period and at most 10m",
            ));
        }
        if self.batch_period < self.fast_period || self.batch_period > Duration::from_secs(60) {
            return Err(invalid(
                "batch_period",
                "must be at least fast_period and at most 60s",
            ));
        }
        if self.discover_period < self.slow_period {
            return Err(invalid("discover_period", "must be at least slow_period"));
        }
        if let Some(b) = self.buffer_bytes {
            if !(MIN_BUFFER_BYTES..=MAX_BUFFER_BYTES).contains(&b) {
                return Err(invalid(
                    "buffer_bytes",
                    format!(
                        "--buffer-bytes {b} is out of range: the resend buffer takes {MIN_BUFFER_BYTES} \
                         (64 KiB) to {MAX_BUFFER_BYTES} (16 GiB) bytes"
                    ),
                ));
            }
        }
        if self.backoff_min.is_zero() || self.backoff_max < self.backoff_min {
            return Err(invalid(
                "backoff_max",
                "backoff_min must be > 0 and backoff_max >= backoff_min",
            ));
        }
        if self.ack_timeout < Duration::from_secs(1) {
            return Err(invalid("ack_timeout", "must be at least 1s"));
        }
        if self.shard_retry < Duration::from_secs(1) || self.shard_retry > Duration::from_secs(3600)
        {
            return Err(invalid("shard_retry", "must be between 1s and 1h"));
        }
        let refresh = self.collector_refresh;
        if refresh < Duration::from_secs(1) || refresh > Duration::from_secs(3600) {
            return Err(invalid("collector_refresh", "must be between 1s and 1h"));
        }
        Ok(())
    }

    fn validate_steps_and_sources(&self) -> Result<(), ConfigError> {
        if let Some(a) = self.steps_udp {
            if !a.ip().is_loopback() {
                return Err(invalid(
                    "steps_udp",
                    "must be a loopback address (markers come from this node)",
                ));
            }
        }
        for (pattern, rate) in &self.netdev.capacities {
            parse_link_rate(rate)
                .map_err(|e| invalid("netdev.capacities", format!("{pattern}: {e}")))?;
        }
        if !(self.steps_rate > 0.0 && self.steps_rate <= 1e6) {
            return Err(invalid("steps_rate", "must be in (0, 1e6]"));
        }
        for s in &self.sources {
            if !SOURCE_NAMES.contains(&s.as_str()) {
                return Err(invalid(
                    "sources",
                    format!("unknown source {s:?}; known: {}", SOURCE_NAMES.join(", ")),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_in_the_file_means_what_the_flag_means() {
        let c: AgentConfig =
            toml::from_str("steps_socket = \"off\"\nsteps_udp = \"off\"\n").unwrap();
        assert_eq!((c.steps_socket, c.steps_udp), (None, None));
        let c: AgentConfig =
            toml::from_str("steps_socket = \"/tmp/s.sock\"\nsteps_udp = \"127.0.0.1:9999\"\n")
                .unwrap();
        assert_eq!(c.steps_socket, Some(PathBuf::from("/tmp/s.sock")));
        assert_eq!(c.steps_udp, Some("127.0.0.1:9999".parse().unwrap()));
        let e = toml::from_str::<AgentConfig>("steps_udp = \"nope\"\n").unwrap_err();
        assert!(e.to_string().contains("neither `off`"), "{e}");
        // Absent keys keep the defaults.
        let c: AgentConfig = toml::from_str("").unwrap();
        assert_eq!(c.steps_socket, Some(PathBuf::from(DEFAULT_STEPS_SOCKET)));
    }

    #[test]
    fn link_rates_in_bits_and_bytes() {
        assert_eq!(parse_link_rate("2Gbit/s"), Ok(250_000_000));
        assert_eq!(parse_link_rate(" 400 Gb/s "), Ok(50_000_000_000));
        assert_eq!(parse_link_rate("12.5GB/s"), Ok(12_500_000_000));
        assert_eq!(parse_link_rate("100Mbps"), Ok(12_500_000));
        assert_eq!(parse_link_rate("800B/s"), Ok(800));
        for bad in [
            "", "fast", "2 Gbit", "2Xbit/s", "-1Gbit/s", "0b/s", "1e30B/s",
        ] {
            assert!(parse_link_rate(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn capacities_most_specific_pattern_first_and_validated() {
        let c: AgentConfig = toml::from_str(
            "[netdev.capacities]\n\"fab*\" = \"10Gbit/s\"\nfab0 = \"2Gbit/s\"\n\"*\" = \"1Gbit/s\"\n",
        )
        .unwrap();
        let o = NetdevOptions::from(&c.netdev);
        assert_eq!(o.capacity_of("fab0"), Some(250_000_000));
        assert_eq!(o.capacity_of("fab1"), Some(1_250_000_000));
        assert_eq!(o.capacity_of("eth0"), Some(125_000_000));
        let mut c = AgentConfig {
            node: "n1".into(),
            ..AgentConfig::default()
        };
        c.netdev.capacities.insert("eth0".into(), "fast".into());
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("netdev.capacities") && e.contains("eth0"), "{e}");
    }

    #[test]
    fn defaults_validate() {
        let c = AgentConfig {
            node: "n1".into(),
            ..Default::default()
        };
        c.validate().unwrap();
        assert_eq!(c.fast_period, Duration::from_millis(50));
        assert_eq!(c.http_listen.ip().to_string(), "127.0.0.1");
    }

    #[test]
    fn nvlink_bytes_go_per_gpu_unless_asked() {
        use crate::source::nvml::NvlinkBytes;
        assert_eq!(AgentConfig::default().nvlink_bytes, NvlinkBytes::Gpu);
        assert_eq!(
            AgentConfig::default().source_settings().nvlink_bytes,
            NvlinkBytes::Gpu
        );
        let c: AgentConfig = toml::from_str("nvlink_bytes = \"link\"\n").unwrap();
        assert_eq!(c.source_settings().nvlink_bytes, NvlinkBytes::Link);
        let err = toml::from_str::<AgentConfig>("nvlink_bytes = \"port\"\n").unwrap_err();
        assert!(err.to_string().contains("port"), "{err}");
    }

    #[test]
    fn file_overrides_and_validation_names_field() {
        let c: AgentConfig = toml::from_str(
            r#"node = "gpu-1"
fast_period = "100ms"
[netdev]
fabric = ["eth1"]
"#,
        )
        .unwrap();
        assert_eq!(c.fast_period, Duration::from_millis(100));
        assert_eq!(c.netdev.fabric, vec!["eth1".to_string()]);
        let bad = AgentConfig {
            slow_period: Duration::from_millis(10),
            ..c
        };
        let err = bad.validate().unwrap_err().to_string();
        assert!(err.contains("`slow_period`"), "{err}");
        let bad: Result<AgentConfig, _> = toml::from_str("nod = \"x\"");
        assert!(bad.is_err());
    }

    #[test]
    fn source_settings_carry_the_roots_names_and_netdev_overrides() {
        let c: AgentConfig = toml::from_str(
            r#"node = "n1"
sysfs_root = "/host/sys"
sources = ["netdev"]
[netdev]
management = ["eth*"]
include = ["eth*", "ib*"]
"#,
        )
        .unwrap();
        let s = c.source_settings();
        assert_eq!(s.netdev.include, ["eth*", "ib*"]);
        assert_eq!(s.enabled, vec!["netdev".to_string()]);
        assert_eq!(s.sysfs_root, PathBuf::from("/host/sys"));
        assert_eq!(s.procfs_root, PathBuf::from("/proc"));
        assert_eq!(s.netdev.management, vec!["eth*".to_string()]);
        // No `exclude` keeps the source's built-in list; a configured one replaces it.
        assert_eq!(s.netdev.exclude, NetdevOptions::default().exclude);
        let c = AgentConfig {
            netdev: NetdevConfig {
                exclude: Some(vec!["bond*".into()]),
                ..NetdevConfig::default()
            },
            ..c
        };
        assert_eq!(
            c.source_settings().netdev.exclude,
            vec!["bond*".to_string()]
        );
    }

    #[test]
    fn buffer_bytes_is_bounded_and_the_error_names_the_flag() {
        let with = |b: usize| AgentConfig {
            node: "n1".into(),
            buffer_bytes: Some(b),
            ..Default::default()
        };
        with(MIN_BUFFER_BYTES).validate().unwrap();
        with(MAX_BUFFER_BYTES).validate().unwrap();
        for b in [usize::MAX, MAX_BUFFER_BYTES + 1, MIN_BUFFER_BYTES - 1, 0] {
            let err = with(b).validate().unwrap_err().to_string();
            assert!(err.contains("`buffer_bytes`"), "{err}");
            assert!(
                err.contains(&format!("--buffer-bytes {b} is out of range")),
                "{err}"
            );
            assert!(err.contains("64 KiB") && err.contains("16 GiB"), "{err}");
        }
    }

    #[test]
    fn a_remote_listener_and_loose_secret_files_are_warned_about() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        let key = dir.path().join("key.pem");
        std::fs::write(&token, "t").unwrap();
        std::fs::write(&key, "k").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = AgentConfig {
            node: "n1".into(),
            http_listen: "0.0.0.0:9471".parse().unwrap(),
            token_file: Some(token.clone()),
            tls: AgentTlsConfig {
                key_file: Some(key.clone()),
                cert_file: Some(key.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let w = c.warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("--http-listen 0.0.0.0:9471 (http_listen) is not a loopback"),
            "{w:?}"
        );
        let t = token.display();
        assert_eq!(
            w[1],
            format!("token file {t} can be read or changed by group or others (mode 0644): chmod 600 {t}")
        );
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
        let c = AgentConfig {
            http_listen: "127.0.0.1:9471".parse().unwrap(),
            ..c
        };
        let w = c.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("TLS client key ") && w[0].contains("(mode 0640)"),
            "{w:?}"
        );
        // The probe token too: a world-readable one is warned about at every start.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let probe_token = token.with_file_name("probe-token");
        std::fs::write(&probe_token, "p\n").unwrap();
        std::fs::set_permissions(&probe_token, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut c = c;
        c.probe.token_file = Some(probe_token.clone());
        let w = c.warnings();
        let p = probe_token.display();
        assert_eq!(
            w,
            [format!("probe token file {p} can be read or changed by group or others (mode 0644): chmod 600 {p}")]
        );
    }

    #[test]
    fn plain_text_to_another_host_needs_explicit_allowance() {
        let with = |url: &str, allow: bool| AgentConfig {
            node: "n1".into(),
            collector: Some(url.into()),
            allow_plaintext: allow,
            ..Default::default()
        };
        for url in [
            "http://127.0.0.1:7070",
            "http://127.3.4.5:7070",
            "http://localhost:7070",
            "http://LOCALHOST",
            "http://[::1]:7070",
            "https://collector.example:7070",
        ] {
            with(url, false).validate().unwrap();
            assert!(!with(url, false).plaintext_to_remote(), "{url}");
        }
        for url in [
            "http://collector.example:7070",
            "http://10.0.0.1:7070",
            "http://[fe80::1]:7070",
            "http://localhost.evil.example:7070",
            "http://127.0.0.1.nip.io:7070",
        ] {
            let err = with(url, false).validate().unwrap_err().to_string();
            assert!(err.contains("allow_plaintext"), "{url}: {err}");
            with(url, true).validate().unwrap();
            assert!(with(url, true).plaintext_to_remote(), "{url}");
        }
        let c: AgentConfig =
            toml::from_str("collector = \"http://c:7070\"\nallow_plaintext = true").unwrap();
        assert!(c.allow_plaintext);
    }
    #[test]
    fn several_collectors_are_a_comma_separated_list_of_one_scheme() {
        let with = |url: &str| AgentConfig {
            node: "n1".into(),
            collector: Some(url.into()),
            ..Default::default()
        };
        let c = with("http://127.0.0.1:7070, http://127.0.0.1:7071/");
        c.validate().unwrap();
        assert_eq!(
            c.collector_urls(),
            ["http://127.0.0.1:7070", "http://127.0.0.1:7071"]
        );
        // One remote plain-text shard is enough to need the allowance.
        let err = with("http://127.0.0.1:7070,http://10.0.0.2:7070")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("allow_plaintext"), "{err}");
        let err = with("https://a:7070,http://127.0.0.1:7070")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("mix http:// and https://"), "{err}");
        let err = with("https://a:7070,ftp://b")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"ftp://b\" is not an http"), "{err}");
        assert!(with(" , ").validate().is_err());
    }

    #[test]
    fn a_dns_name_stands_for_its_shards() {
        let with = |url: &str| AgentConfig {
            node: "n1".into(),
            collector: Some(url.into()),
            ..Default::default()
        };
        with("dns+https://commwatch-collector-headless.ns.svc:7070")
            .validate()
            .unwrap();
        with("dns+http://localhost:7070").validate().unwrap();
        with("dns+https://svc.ns.svc:7070,https://extra.example:7070")
            .validate()
            .unwrap();
        let err = with("dns+http://svc.ns.svc:7070").validate().unwrap_err();
        assert!(err.to_string().contains("allow_plaintext"), "{err}");
        let err = with("dns+https://svc.ns.svc").validate().unwrap_err();
        assert!(err.to_string().contains("port is required"), "{err}");
        let err = with("dns+https://svc:7070,http://127.0.0.1:1").validate();
        assert!(err.unwrap_err().to_string().contains("mix"));
        let c: AgentConfig =
            toml::from_str("collector = \"dns+https://s:7070\"\ncollector_refresh = \"5s\"")
                .unwrap();
        assert_eq!(c.collector_refresh, Duration::from_secs(5));
        let fast = AgentConfig {
            collector_refresh: Duration::from_millis(100),
            ..with("dns+https://s:7070")
        };
        let err = fast.validate().unwrap_err().to_string();
        assert!(err.contains("collector_refresh"), "{err}");
    }
}
