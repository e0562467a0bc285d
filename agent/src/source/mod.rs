//! Hardware sources. One file per source, each behind [`Source`]; the explicit list is [`default_sources`]
//! (built by the agent from its configuration).
//!
//! Contract every source keeps (checked by the conformance test in `tests/sources.rs`):
//! - `inventory()` is cheap and returns the links and series found by the last `discover()`.
//! - `discover()` rescans the hardware. Absent hardware (no `class/infiniband`) is not an error: the source
//!   reports an empty inventory and logs once at debug level. It returns whether the inventory changed.
//! - `sample(tier, sink)` reads every series of that tier and pushes `(series index, value)` for each value it
//!   could read. A file that cannot be read or parsed is skipped and counted in the returned [`ReadReport`];
//!   the other series are still read (partial results, never "all or nothing").
//! - Series indices refer to `inventory().series` and are stable until the next `discover()` that returns
//!   `true`; series are never removed from the inventory (a vanished device's series simply stop producing).
//! - Sources never panic on what they read.

use std::collections::BTreeMap;
use std::fmt;

pub mod gpu;
pub mod gpu_recorded;
pub mod host;
pub mod infiniband;
pub mod netdev;
pub mod nvml;
pub mod nvml_lib;
pub mod processes;
pub mod sysfs;

/// How often a series is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Data byte counters: read every fast tick (default 20 Hz).
    Fast,
    /// Errors, state, rate, utilisation: read every slow tick (default 1 Hz).
    Slow,
}

/// Class of a link, as exported in the `class` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkClass {
    Infiniband,
    Roce,
    Ethernet,
    Nvlink,
}

impl LinkClass {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkClass::Infiniband => "infiniband",
            LinkClass::Roce => "roce",
            LinkClass::Ethernet => "ethernet",
            LinkClass::Nvlink => "nvlink",
        }
    }
}

/// Whether a link carries training traffic (`fabric`) or is the management network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkRole {
    Fabric,
    Management,
}

impl LinkRole {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkRole::Fabric => "fabric",
            LinkRole::Management => "management",
        }
    }
}

/// Identity of a link on a node: `(class, device, port)`. For netdevs `port` is the interface name and
/// `device` the interface name too; for IB ports `device` is the HCA (`mlx5_0`) and `port` the number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct LinkKey {
    pub class: LinkClass,
    pub device: String,
    pub port: String,
}

impl fmt::Display for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.class.as_str(), self.device, self.port)
    }
}

/// One port, interface or NVLink, with its inventory facts.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Link {
    pub key: LinkKey,
    pub role: LinkRole,
    /// Capacity per direction in bytes per second; `None` when unknown.
    pub capacity_bytes_per_second: Option<f64>,
    /// Human-readable state (`ACTIVE`, `DOWN`, `up`, ...).
    pub state: String,
    /// Other facts (`link_layer`, `phys_state`, `rate`, `netdev`, `mtu`, `speed_mbps`, ...).
    pub attributes: BTreeMap<String, String>,
    /// For NVLink: GPU index and link number.
    pub gpu: Option<String>,
    pub link: Option<String>,
}

/// Kind of a series value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SeriesKind {
    /// Monotonic counter; saturates at `max_value` (all ones of its width).
    Counter {
        max_value: u64,
    },
    Gauge,
}

impl SeriesKind {
    /// A 64-bit counter (saturates at `u64::MAX`).
    pub const COUNTER64: SeriesKind = SeriesKind::Counter {
        max_value: u64::MAX,
    };
    /// A 32-bit PMA counter (saturates at `u32::MAX`).
    pub const COUNTER32: SeriesKind = SeriesKind::Counter {
        max_value: u32::MAX as u64,
    };
}

/// One series a source produces.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SeriesSpec {
    /// lower_snake_case metric name in base units: `tx_bytes`, `rx_bytes`, `tx_packets`, `symbol_errors`,
    /// `xmit_wait_ticks`, `cpu_utilization_ratio`, `memory_used_bytes`, ...
    pub metric: String,
    pub kind: SeriesKind,
    pub tier: Tier,
    /// The link it measures; `None` for node-level series.
    pub link: Option<LinkKey>,
    /// Extra labels, e.g. `cpu` = `"3"`.
    pub labels: BTreeMap<String, String>,
}

impl SeriesSpec {
    /// A series of `link` with no extra labels.
    pub fn for_link(metric: &str, kind: SeriesKind, tier: Tier, link: &LinkKey) -> SeriesSpec {
        SeriesSpec {
            metric: metric.to_string(),
            kind,
            tier,
            link: Some(link.clone()),
            labels: BTreeMap::new(),
        }
    }

    /// Identity used to give a series a stable id across rediscoveries.
    pub fn identity(&self) -> String {
        let mut s = String::new();
        if let Some(l) = &self.link {
            s.push_str(&l.to_string());
        }
        s.push('|');
        s.push_str(&self.metric);
        for (k, v) in &self.labels {
            s.push('|');
            s.push_str(k);
            s.push('=');
            s.push_str(v);
        }
        s
    }
}

/// A sampled value. Counters are already in base units (IB data counters multiplied by 4).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Value {
    Counter(u64),
    Gauge(f64),
}

impl Value {
    /// The wire form: u64 for counters, f64 bits for gauges.
    pub fn to_bits(self) -> u64 {
        match self {
            Value::Counter(v) => v,
            Value::Gauge(v) => v.to_bits(),
        }
    }
}

/// What the inventory of a source is now.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Inventory {
    pub links: Vec<Link>,
    pub series: Vec<SeriesSpec>,
}

/// Outcome of one `sample()` call.
#[derive(Debug, Default)]
pub struct ReadReport {
    /// Values pushed.
    pub read: usize,
    /// Series that could not be read or parsed this time (the cause of the first few is in `errors`).
    pub failed: usize,
    /// Up to a handful of errors, for logging and the agent's error counters.
    pub errors: Vec<SourceError>,
}

impl ReadReport {
    /// Records a failure, keeping only the first few errors.
    pub fn fail(&mut self, err: SourceError) {
        self.failed += 1;
        if self.errors.len() < 4 {
            self.errors.push(err);
        }
    }
}

/// Errors of the sources.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: cannot parse {content:?}: {reason}")]
    Parse {
        path: std::path::PathBuf,
        content: String,
        reason: String,
    },
    #[error("{0}")]
    Other(String),
}

/// A hardware source. See the module documentation for the contract.
pub trait Source: Send {
    /// Short name: `infiniband`, `netdev`, `host`, `nvml`, ...
    fn name(&self) -> &'static str;
    /// Rescans the hardware; returns whether the inventory (links, their facts, or series) changed.
    fn discover(&mut self) -> Result<bool, SourceError>;
    /// Links and series found by the last `discover()`.
    fn inventory(&self) -> &Inventory;
    /// Reads every series of `tier`, calling `sink(series_index, value)` for each value read.
    fn sample(&mut self, tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport;
    /// Called once by the sampler before the first `discover()`: sources that report their own cost (NVML call
    /// latencies) keep the handle.
    fn bind_metrics(&mut self, _metrics: &std::sync::Arc<crate::telemetry::AgentMetrics>) {}
    /// Called by the sampler before each `discover()` with the links the sources before this one found (the
    /// `processes` source checks NCCL settings against them).
    fn node_links(&mut self, _links: &[Link]) {}
    /// Training jobs found by the last `discover()`, for sources that look for them (`processes`); `None` for
    /// the others. A change of the list makes `discover()` return `true`.
    fn jobs(&self) -> Option<&[processes::JobInfo]> {
        None
    }
}

/// Names of the sources, in the order they are built and sampled (`processes` last: it checks NCCL settings
/// against the links the others found).
pub const SOURCE_NAMES: &[&str] = &["infiniband", "netdev", "host", "nvml", "processes"];

/// Backends injected instead of the real hardware (the simulated cluster's GPUs and host).
#[derive(Default)]
pub struct SourceExtras {
    /// GPUs for the `nvml` and `processes` sources; `None` loads NVML.
    pub gpu: Option<Box<dyn gpu::GpuBackend>>,
    /// Host CPU and memory for the `host` source; `None` reads this machine through sysinfo.
    pub host: Option<Box<dyn host::HostBackend>>,
}

impl std::fmt::Debug for SourceExtras {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceExtras")
            .field("gpu", &self.gpu.as_ref().map(|g| g.kind()))
            .field("host", &self.host.is_some())
            .finish()
    }
}

/// The explicit list of sources: builds the enabled ones from the configuration, on the real hardware.
pub fn build_sources(config: &crate::config::AgentConfig) -> Vec<Box<dyn Source>> {
    build_sources_with(config, SourceExtras::default())
}

/// [`build_sources`] with injected backends. A new source is one new file plus one arm here.
pub fn build_sources_with(
    config: &crate::config::AgentConfig,
    extras: SourceExtras,
) -> Vec<Box<dyn Source>> {
    let SourceExtras {
        gpu: gpu_backend,
        host: mut host_backend,
    } = extras;
    let wants = |n: &str| config.sources.iter().any(|s| s == n);
    // One GPU backend shared by `nvml` and `processes`; NVML is loaded only when one of them runs.
    let gpu: Option<Result<gpu::SharedGpu, gpu::GpuError>> = if wants("nvml") || wants("processes")
    {
        Some(match gpu_backend {
            Some(b) => Ok(gpu::shared(b)),
            None => nvml_lib::NvmlBackend::init()
                .map(|b| gpu::shared(Box::new(b) as Box<dyn gpu::GpuBackend>)),
        })
    } else {
        None
    };
    let mut out: Vec<Box<dyn Source>> = Vec::new();
    for name in SOURCE_NAMES {
        if !config.sources.iter().any(|s| s == name) {
            continue;
        }
        match *name {
            "infiniband" => out.push(Box::new(infiniband::InfinibandSource::new(
                config.sysfs_root.clone(),
            ))),
            "netdev" => {
                let mut opts = netdev::NetdevOptions {
                    fabric: config.netdev.fabric.clone(),
                    management: config.netdev.management.clone(),
                    ..netdev::NetdevOptions::default()
                };
                if let Some(ex) = &config.netdev.exclude {
                    opts.exclude = ex.clone();
                }
                out.push(Box::new(netdev::NetdevSource::new(
                    config.sysfs_root.clone(),
                    opts,
                )))
            }
            "host" => out.push(Box::new(match host_backend.take() {
                Some(b) => host::HostSource::with_backend(b),
                None => host::HostSource::new(),
            })),
            "nvml" => {
                if let Some(g) = &gpu {
                    out.push(Box::new(nvml::NvmlSource::new(g.clone())));
                }
            }
            "processes" => out.push(Box::new(processes::ProcessesSource::new(
                config.procfs_root.clone(),
                gpu.as_ref().and_then(|g| g.as_ref().ok()).cloned(),
            ))),
            _ => {}
        }
    }
    out
}
