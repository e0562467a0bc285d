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
#[cfg(test)]
mod fixtures;
pub mod history;
pub mod inferred;
pub mod markers;
mod tails;

use serde::Serialize;

pub use history::{ClassAggregate, JobStep, Spread, StepStore};
pub use inferred::PeriodEstimate;

use std::sync::{Arc, OnceLock};

use commwatch_model::{Link, LinkClass, LinkRole};

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
    /// The figures of `links` on the fabric, in brief ([`NodeStep::fabric`]): made from `links` when first
    /// read, not written by whoever builds the step (`Default::default()`).
    #[serde(skip)]
    pub fabric: FabricBrief,
}

impl NodeStep {
    pub fn duration_s(&self) -> f64 {
        (self.end_unix_ns - self.start_unix_ns) as f64 / 1e9
    }

    /// Whether every active link's figure is confident (an idle link counts as confident).
    pub fn confident(&self) -> bool {
        self.links.iter().all(|l| l.confident)
    }

    /// The figures of the step's links on the fabric ([`FabricFigure::on_fabric`]), in the order of `links`:
    /// made once per step, at the first call (a step never changes once made, and the analysis reads each of
    /// a node's fabric links in each of its steps at every evaluation, while a demo node's steps list 161
    /// links, 8 of them on the fabric).
    pub fn fabric(&self) -> &[FabricFigure] {
        self.fabric.0.get_or_init(|| {
            self.links
                .iter()
                .filter(|l| FabricFigure::on_fabric(&l.link))
                .map(FabricFigure::of)
                .collect()
        })
    }
}

/// One link's figures in [`NodeStep::fabric`]: what the analysis reads of a fabric link in a step.
#[derive(Debug, Clone, PartialEq)]
pub struct FabricFigure {
    /// The step link's own [`StepLink::link`] (the same `Arc`).
    pub link: Arc<Link>,
    /// max(tx, rx) bytes of the step.
    pub bytes: u64,
    /// [`StepLink::achieved_bytes_per_second`] and [`StepLink::confident`].
    pub achieved_bytes_per_second: Option<f64>,
    pub confident: bool,
}

impl FabricFigure {
    /// Whether a link is on the fabric: of role fabric and not NVLink (every link that may carry a node's
    /// fabric data, [`commwatch_model::FabricData::carries`], whichever kind the node's is, and every RDMA
    /// class link of the fabric).
    pub fn on_fabric(link: &Link) -> bool {
        link.role == LinkRole::Fabric && link.key.class != LinkClass::Nvlink
    }

    fn of(l: &StepLink) -> FabricFigure {
        FabricFigure {
            link: Arc::clone(&l.link),
            bytes: l.tx_bytes.max(l.rx_bytes),
            achieved_bytes_per_second: l.achieved_bytes_per_second,
            confident: l.confident,
        }
    }
}

/// [`NodeStep::fabric`]'s figures, made on first read: a step's links must not change once they are read.
/// Equal for any two steps (the figures are a function of the step's links, which the step compares); a copy
/// starts empty (a copied step may be changed before it is read).
#[derive(Debug, Default)]
pub struct FabricBrief(OnceLock<Box<[FabricFigure]>>);

impl Clone for FabricBrief {
    fn clone(&self) -> FabricBrief {
        FabricBrief::default()
    }
}

impl PartialEq for FabricBrief {
    fn eq(&self, _: &FabricBrief) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commwatch_model::{Endpoint, FabricData, LinkKey};

    /// A link of these facts (its key made distinct by its place `k`).
    fn link(k: usize, class: LinkClass, endpoint: Endpoint, role: LinkRole) -> Arc<Link> {
        Arc::new(Link {
            key: LinkKey::new(class, format!("dev{k}"), k.to_string()),
            endpoint,
            role,
            capacity_bytes_per_second: Some(25e9),
            state: "ACTIVE".into(),
            attributes: Default::default(),
            gpu: None,
            link: None,
        })
    }

    /// Every combination of class, endpoint and role, in that order.
    fn every_kind() -> Vec<Arc<Link>> {
        use Endpoint::*;
        use LinkClass::*;
        let mut out = Vec::new();
        for class in [Infiniband, Roce, Ethernet, Nvlink, Unknown] {
            for endpoint in [HcaPort, Interface, GpuLink] {
                for role in [LinkRole::Fabric, LinkRole::Management, LinkRole::Unknown] {
                    out.push(link(out.len(), class, endpoint, role));
                }
            }
        }
        out
    }

    #[test]
    fn the_fabric_brief_holds_every_link_a_fabric_figure_reads() {
        for l in every_kind() {
            let read = FabricData::RdmaPorts.carries_link(&l)
                || FabricData::Interfaces.carries_link(&l)
                || (l.role == LinkRole::Fabric && l.key.class.is_rdma());
            assert!(!read || FabricFigure::on_fabric(&l), "{:?}", l.key);
        }
    }

    #[test]
    fn the_fabric_brief_is_the_steps_fabric_links_in_order_made_again_for_a_copy() {
        let links: Vec<StepLink> = every_kind()
            .into_iter()
            .enumerate()
            .map(|(k, link)| StepLink {
                link,
                tx_bytes: 1000 * k as u64,
                rx_bytes: 1500 * (k as u64 % 3),
                active_s: 0.1,
                achieved_bytes_per_second: (k % 4 != 1).then_some(1e9 + k as f64),
                average_bytes_per_second: 1e8,
                capacity_bytes_per_second: Some(25e9),
                utilization: None,
                confident: k % 5 != 2,
            })
            .collect();
        let mut step = NodeStep {
            node: "n".into(),
            job: None,
            index: 0,
            start_unix_ns: 0,
            end_unix_ns: 1_000_000_000,
            source: StepSource::Inferred,
            confidence: 1.0,
            samples: None,
            links,
            fabric: Default::default(),
        };
        let want: Vec<(String, u64, Option<f64>, bool)> = step
            .links
            .iter()
            .filter(|l| l.link.role == LinkRole::Fabric && l.link.key.class != LinkClass::Nvlink)
            .map(|l| {
                let bytes = l.tx_bytes.max(l.rx_bytes);
                (
                    l.link.key.port.clone(),
                    bytes,
                    l.achieved_bytes_per_second,
                    l.confident,
                )
            })
            .collect();
        let brief = |s: &NodeStep| -> Vec<(String, u64, Option<f64>, bool)> {
            s.fabric()
                .iter()
                .map(|f| {
                    (
                        f.link.key.port.clone(),
                        f.bytes,
                        f.achieved_bytes_per_second,
                        f.confident,
                    )
                })
                .collect()
        };
        // Four classes other than NVLink, on each of three endpoints.
        assert_eq!(want.len(), 12);
        assert_eq!(brief(&step), want);
        assert!(step
            .fabric()
            .iter()
            .all(|f| step.links.iter().any(|l| Arc::ptr_eq(&l.link, &f.link))));
        // A copy changed before it is read has its own brief.
        let mut copy = step.clone();
        copy.links
            .retain(|l| l.link.key.class != LinkClass::Infiniband);
        assert_eq!(brief(&copy).len(), want.len() - 3);
        assert_eq!(step.clone(), step, "the brief is not compared");
        step.links.clear();
        assert_eq!(brief(&step), want, "made once, at the first read");
    }
}
