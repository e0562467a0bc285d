//! Steps: the training step as the unit of analysis. From step markers where the job sends them; otherwise
//! inferred from the periodicity of link traffic (the communication burst every step). For each step, node and
//! link: bytes moved, active time, achieved and average bandwidth, utilisation.
//!
//! This file holds the types the rest of the collector reads (the analysis rules, the API, the exporter);
//! the engine that produces them lives beside it (`markers.rs`, `inferred.rs`, `edges.rs`: an inferred edge
//! placed on each node's own samples, `bandwidth.rs`, `engine.rs`, and `busy.rs`: a link's busy time, the one
//! definition the analysis shares).
//!
//! Clocks: a node's step edges are on that node's agent clock (the same clock as its samples), so per-step
//! byte counts never mix clocks. Ranks and nodes are aligned by step number, never by wall-clock time.
//!
//! # Reading steps (for the analysis, the API, the exporter)
//!
//! The collector's [`StepStore`] (`CollectorHandle::steps()`) holds every node's last
//! [`history::STEPS_PER_NODE`] steps, extended every [`engine::DEFAULT_INTERVAL`] by the [`engine`]:
//! - [`StepStore::node_steps`]`(node, limit)` → the newest `limit` [`NodeStep`]s of the node, oldest first, all
//!   from the source of its newest step (`None`: unknown node; empty: no step yet);
//! - [`StepStore::job_steps`]`(job, limit)` → the newest `limit` [`JobStep`]s of a job: marker-sourced steps
//!   of every node aligned by step index, with per-class min / median / max across nodes
//!   ([`ClassAggregate`]);
//! - [`StepStore::latest_steps`]`()` → the newest step of every node;
//! - [`StepStore::visit_recent`]`(per_node, f)`, [`StepStore::node_source`], [`StepStore::jobs`],
//!   [`StepStore::inferred_period`] (the node's traffic period, also while markers are used),
//!   [`StepStore::steps_total`].
//!
//! A step appears once complete and once the node's samples cover its end, so the newest step is typically
//! 0.5–1 s behind the traffic. Link figures are computed once per step ([`bandwidth`]); a link figure with
//! `confident == false` is a lower bound (burst shorter than a few samples) and must not be called slow.
//! Inferred steps have no job and per-node indices (not aligned across nodes); job views come from markers.

pub mod bandwidth;
pub mod busy;
pub mod edges;
pub mod engine;
pub mod history;
pub mod inferred;
pub mod markers;
mod tails;

use serde::Serialize;

pub use history::{ClassAggregate, JobStep, Spread, StepStore};
pub use inferred::PeriodEstimate;

use std::sync::Arc;

use commwatch_model::Link;

/// How the edges of a step were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StepSource {
    /// From the training loop's step markers.
    Markers,
    /// From the periodicity of the node's link traffic.
    Inferred,
}

impl StepSource {
    pub fn as_str(self) -> &'static str {
        match self {
            StepSource::Markers => "markers",
            StepSource::Inferred => "inferred",
        }
    }
}

/// One link's figures over one step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepLink {
    /// Which link: the store's own (shared, not copied: a node's links cost no allocation per step), or for a
    /// GPU's NVLinks figured as one ([`engine`]'s NVLink detail) a link of that GPU with no port and no link
    /// number, their summed capacity.
    pub link: Arc<Link>,
    /// Bytes sent / received during the step (exact: counter differences at the step's edges).
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// Seconds the link carried traffic during the step, at the sampling resolution.
    pub active_s: f64,
    /// max(tx, rx) bytes ÷ active time; `None` when the link was idle.
    pub achieved_bytes_per_second: Option<f64>,
    /// max(tx, rx) bytes ÷ step duration.
    pub average_bytes_per_second: f64,
    pub capacity_bytes_per_second: Option<f64>,
    /// achieved ÷ capacity; `None` when either is unknown.
    pub utilization: Option<f64>,
    /// False when the burst was shorter than a few samples: `achieved` is then a lower bound, not a
    /// measurement, and rules must not call the link slow from it.
    pub confident: bool,
}

/// One step of one node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeStep {
    pub node: String,
    /// Job id when known (markers, or the node's single training job).
    pub job: Option<String>,
    /// Step number from the markers, or the inferred step's sequence number on this node.
    pub index: u64,
    pub start_unix_ns: i64,
    pub end_unix_ns: i64,
    pub source: StepSource,
    /// 0..1: markers 1.0 (less when ranks disagree); inferred: strength of the periodicity.
    pub confidence: f64,
    /// Samples processed in the step (sum over the node's ranks), from markers.
    pub samples: Option<u64>,
    pub links: Vec<StepLink>,
}

impl NodeStep {
    pub fn duration_s(&self) -> f64 {
        (self.end_unix_ns - self.start_unix_ns) as f64 / 1e9
    }

    /// Whether every active link's figure is confident (an idle link counts as confident).
    pub fn confident(&self) -> bool {
        self.links.iter().all(|l| l.confident)
    }
}
