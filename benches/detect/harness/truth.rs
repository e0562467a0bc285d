//! Per-step bytes against the simulator's truth.
//!
//! Each step the collector found (its edges on the node's clock, which here is the model's) is matched to
//! the simulated steps whose AllReduce burst lies inside it — by the burst's midpoint — and each of its links
//! that carries AllReduce bytes is compared with what that link truly moved: those steps' AllReduce bytes
//! ([`JobModel::expected_step_bytes`]) plus the background (and storage) bytes between the step's edges.
//! Whether the edges are the job's steps is counted apart: a step should hold exactly one burst; one that
//! holds none is not compared, one that holds several (a period found too long) is compared with their sum.

use commwatch_collector::model::LinkClass;
use commwatch_collector::steps::{NodeStep, StepLink};
use std::time::Duration;

use commwatch_sim::{JobModel, Link, StepTimeline};

use super::clock::model_time;

/// The error the benchmark aims below.
pub const TOLERANCE: f64 = 0.02;

/// Per-step byte errors of one or more runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ByteTally {
    /// Steps the collector found on nodes that run a job.
    pub steps: u64,
    /// Of them, steps that hold no simulated burst (not compared)...
    pub empty: u64,
    /// ... and steps that hold more than one (compared with the sum of those steps' truth).
    pub multi: u64,
    /// Link directions compared (a link of a matched step that carries AllReduce bytes, tx and rx).
    pub compared: u64,
    /// Of them, within [`TOLERANCE`] of the truth.
    pub within: u64,
    /// Largest relative error, and where.
    pub max_rel_error: f64,
    pub worst: String,
    /// The comparisons beyond [`TOLERANCE`], the first [`MISSES_KEPT`] of them, each in words.
    pub misses: Vec<String>,
}

/// Comparisons beyond the tolerance kept per tally.
pub const MISSES_KEPT: usize = 20;

/// The simulator's link for a collector link, where the model has one (HCA ports and `eth0`).
fn sim_link(l: &StepLink) -> Option<Link> {
    match l.link.key.class {
        LinkClass::Infiniband => l
            .link
            .key
            .device
            .strip_prefix("mlx5_")
            .and_then(|g| g.parse().ok())
            .map(Link::Hca),
        LinkClass::Ethernet if l.link.key.device == "eth0" => Some(Link::Eth0),
        _ => None,
    }
}

impl ByteTally {
    /// Compares one step of node `node` (model index) with the truth.
    pub fn add_step(&mut self, model: &JobModel, node: usize, step: &NodeStep) {
        let Some(tl) = model.node_timeline(node) else {
            return;
        };
        self.steps += 1;
        let (s, e) = (model_time(step.start_unix_ns), model_time(step.end_unix_ns));
        let inside: Vec<u64> = (tl.step_at(s).saturating_sub(1)..=tl.step_at(e))
            .filter(|&k| {
                let (bs, be) = tl.burst_of_step(k);
                let mid = bs + (be - bs) / 2;
                s <= mid && mid < e
            })
            .collect();
        match inside.len() {
            0 => {
                self.empty += 1;
                return;
            }
            1 => {}
            _ => self.multi += 1,
        }
        for l in &step.links {
            let Some(link) = sim_link(l) else { continue };
            let truth: Result<Vec<(u64, u64)>, _> = inside
                .iter()
                .map(|&k| model.expected_step_bytes(node, link, k))
                .collect();
            let (Ok(truth), Ok(at_s), Ok(at_e)) = (
                truth,
                model.expected_link_bytes(node, link, s),
                model.expected_link_bytes(node, link, e),
            ) else {
                continue;
            };
            let tx: u64 = truth.iter().map(|t| t.0).sum();
            let rx: u64 = truth.iter().map(|t| t.1).sum();
            let other_tx = (at_e.tx - at_s.tx) - (at_e.tx_burst - at_s.tx_burst);
            let other_rx = (at_e.rx - at_s.rx) - (at_e.rx_burst - at_s.rx_burst);
            for (dir, measured, burst, other) in [
                ("tx", l.tx_bytes, tx, other_tx),
                ("rx", l.rx_bytes, rx, other_rx),
            ] {
                if burst == 0 {
                    continue;
                }
                let truth = (burst + other) as f64;
                let rel = (measured as f64 - truth).abs() / truth;
                self.compared += 1;
                if rel <= TOLERANCE {
                    self.within += 1;
                } else if self.misses.len() < MISSES_KEPT {
                    let m = Miss {
                        link: (&step.node, &l.link.key.device, dir),
                        edges: (s, e),
                        measured,
                        truth: (burst, other),
                    };
                    self.misses.push(describe_miss(tl, &inside, &m));
                }
                if rel > self.max_rel_error {
                    self.max_rel_error = rel;
                    self.worst = format!(
                        "{} {} {dir}, simulated step {:?}: {measured} B, truth {truth} B",
                        step.node, l.link.key.device, inside
                    );
                }
            }
        }
    }

    /// Adds another tally's counts.
    pub fn merge(&mut self, o: &ByteTally) {
        self.steps += o.steps;
        self.empty += o.empty;
        self.multi += o.multi;
        self.compared += o.compared;
        self.within += o.within;
        let room = MISSES_KEPT.saturating_sub(self.misses.len());
        self.misses.extend(o.misses.iter().take(room).cloned());
        if o.max_rel_error > self.max_rel_error {
            self.max_rel_error = o.max_rel_error;
            self.worst = o.worst.clone();
        }
    }
}

/// One comparison beyond the tolerance: the link direction (node, device, `tx`/`rx`), the step's edges (model
/// time), the bytes the collector counted and the truth (the simulated steps' AllReduce bytes, and the other
/// bytes between the edges).
struct Miss<'a> {
    link: (&'a str, &'a str, &'a str),
    edges: (Duration, Duration),
    measured: u64,
    truth: (u64, u64),
}

/// A miss in words: where, the step's edges against the simulated bursts it holds, and the bytes: enough to
/// tell an edge on the wrong side of a burst's end (AllReduce bytes off) from other traffic split differently
/// (the other bytes off).
fn describe_miss(tl: &StepTimeline, inside: &[u64], m: &Miss<'_>) -> String {
    let bursts: Vec<String> = inside
        .iter()
        .map(|&k| {
            let (a, b) = tl.burst_of_step(k);
            format!("{k}: {:.4}–{:.4} s", a.as_secs_f64(), b.as_secs_f64())
        })
        .collect();
    let (node, device, dir) = m.link;
    let (burst, other) = m.truth;
    let truth = (burst + other) as f64;
    format!(
        "{node} {device} {dir}, step {:.4}–{:.4} s holding burst {}: {} B, truth {burst} B AllReduce + {other} B \
         other ({:+.3} %)",
        m.edges.0.as_secs_f64(),
        m.edges.1.as_secs_f64(),
        bursts.join(", "),
        m.measured,
        (m.measured as f64 - truth) / truth * 100.0
    )
}
