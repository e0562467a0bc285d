//! Fixtures of the rules' tests: a step of one node whose one link is its fabric HCA port.
//!
//! One source for the collector's unit tests (`#[cfg(test)] mod test_support` in `analysis`) and for the
//! workspace's integration tests, which include this file by `#[path]`: it names only `crate::steps` (an
//! integration test brings it in with `use commwatch_collector::steps;`) and `commwatch_model`, which both
//! crates depend on.

use std::sync::Arc;

use crate::steps::{NodeStep, StepLink, StepSource};
use commwatch_model::{Endpoint, Link, LinkClass, LinkKey, LinkRole};

/// What the step's one link (InfiniBand HCA `mlx5_0` port 1, fabric) moved: `bytes` each way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HcaFigures {
    /// Bytes transmitted, and as many received.
    pub bytes: u64,
    /// Seconds the link moved traffic within the step.
    pub active_s: f64,
    /// Bytes/s while active (`None`: the burst was not measured).
    pub achieved: Option<f64>,
    /// Bytes/s over the whole step.
    pub average: f64,
    /// The port's capacity, bytes/s; the utilization is `achieved / capacity` when both are known.
    pub capacity: Option<f64>,
    /// Whether the step's figures are trusted by the rules.
    pub confident: bool,
}

impl HcaFigures {
    /// A 25 GB/s port that moved 440 MB in a 50 ms burst of a 310 ms step: achieved 8.8 GB/s (35.2 %),
    /// 1.42 GB/s on average.
    pub fn short_burst(confident: bool) -> HcaFigures {
        HcaFigures {
            bytes: 440_000_000,
            active_s: 0.05,
            achieved: Some(8.8e9),
            average: 1.42e9,
            capacity: Some(25e9),
            confident,
        }
    }
}

/// The span of step `index` of a run of steps of `period_ns` each from time 0: `(start, end)`, ns.
pub fn periodic(index: u64, period_ns: i64) -> (i64, i64) {
    let start = index as i64 * period_ns;
    (start, start + period_ns)
}

/// An inferred step (confidence 0.9, no sample count, no job) of `node` over `(start, end)` (Unix ns) whose
/// one link is the fabric HCA port `mlx5_0`/1 with the figures `f`.
pub fn hca_step(node: &str, index: u64, (start, end): (i64, i64), f: HcaFigures) -> NodeStep {
    NodeStep {
        fabric: Default::default(),
        node: node.to_string(),
        job: None,
        index,
        start_unix_ns: start,
        end_unix_ns: end,
        source: StepSource::Inferred,
        confidence: 0.9,
        samples: None,
        links: vec![StepLink {
            link: Arc::new(Link {
                key: LinkKey::new(LinkClass::Infiniband, "mlx5_0", "1"),
                endpoint: Endpoint::HcaPort,
                role: LinkRole::Fabric,
                capacity_bytes_per_second: f.capacity,
                state: "ACTIVE".into(),
                attributes: Default::default(),
                gpu: None,
                link: None,
            }),
            tx_bytes: f.bytes,
            rx_bytes: f.bytes,
            active_s: f.active_s,
            achieved_bytes_per_second: f.achieved,
            average_bytes_per_second: f.average,
            capacity_bytes_per_second: f.capacity,
            utilization: f.achieved.zip(f.capacity).map(|(a, c)| a / c),
            confident: f.confident,
        }],
    }
}
