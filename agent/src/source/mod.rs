//! Hardware sources. One file per source, each behind [`Source`]; the explicit list ([`list`]) builds the
//! enabled ones from plain [`SourceSettings`]. The link, series and tier vocabulary is the shared model's
//! (re-exported here).
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

pub mod gpu;
pub mod gpu_recorded;
pub mod host;
pub mod infiniband;
pub mod list;
pub mod netdev;
pub mod nvml;
pub mod nvml_lib;
pub mod processes;
pub mod sysfs;

pub use commwatch_model::{
    Endpoint, Job, Link, LinkClass, LinkKey, LinkRole, Rank, SeriesKind, Tier,
};
pub use list::{build_sources, build_sources_with, SourceExtras, SourceSettings, SOURCE_NAMES};

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
    fn jobs(&self) -> Option<&[Job]> {
        None
    }
}
