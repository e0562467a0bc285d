//! A job's aligned collectives per training step: each collective is placed in the step whose time window
//! contains it, and each step gets the per-collective summaries of [`super::summary`] and, per collective and
//! size class, every rank's figures. Pure: the caller gives the instances and the job's steps
//! ([`crate::steps::StepStore::job_steps`], or `job_inferred_steps` where the job sends no markers).
//!
//! Placing: a rank's record is timed at the collective's estimated midpoint, `dump_timestamp_us` − half of
//! `coll_exec_time_us` (the plugin dumps after the collective ends, so the dump thread's lag shifts it later),
//! on the clock of the rank's node. A rank votes for the step whose window *on its own node* holds that time
//! (`start ≤ t < end`: a collective on a boundary belongs to the step it starts); the collective goes to the
//! step most of its ranks voted for (a tie: the earlier step). A collective no rank places — before the first
//! held step, after the last, between steps, on a node without steps, or without a dump time — is counted
//! apart in [`ByStep::outside_steps`], never dropped.

use std::collections::HashMap;

use commwatch_model::stats::median;
use serde::Serialize;

use super::summary::{summarize, CollectiveSummary, Instance};
use crate::steps::{JobStep, StepSource};

/// One rank's figures for one collective and size class within one step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankStepFigure {
    pub rank: u32,
    pub node: String,
    /// Median over the step's collectives of the class, bytes/s.
    pub bus_bandwidth_bytes_per_second: f64,
    /// The rank's execution time summed over those collectives, seconds.
    pub time_s: f64,
}

/// One collective and size class within one step: the job-level element's keys plus `per_rank`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepCollective {
    #[serde(flatten)]
    pub summary: CollectiveSummary,
    /// Every rank, ordered by rank.
    pub per_rank: Vec<RankStepFigure>,
}

/// One step of the job with the collectives placed in it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepCollectives {
    /// The step number (markers), or the node's inferred step number.
    pub index: u64,
    pub source: StepSource,
    /// Earliest start and latest end over the step's nodes (each on its node's clock), ns since the epoch.
    pub start_unix_ns: i64,
    pub end_unix_ns: i64,
    /// The nodes with this step, sorted.
    pub nodes: Vec<String>,
    /// Costliest first; empty when none of the held collectives fell in the step.
    pub collectives: Vec<StepCollective>,
}

/// The collectives no step holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OutsideSteps {
    /// Collectives (distinct communicator and sequence number).
    pub count: u64,
    pub collectives: Vec<CollectiveSummary>,
}

/// A job's collectives per step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ByStep {
    /// The newest `limit` steps, oldest first.
    pub steps: Vec<StepCollectives>,
    pub outside_steps: OutsideSteps,
}

/// Places `instances` in `steps` (oldest first, every held step: placing against only the newest would call
/// the older ones' collectives outside) and summarises the newest `limit` steps.
pub fn by_step<'a>(
    instances: impl Iterator<Item = &'a Instance>,
    steps: &[JobStep],
    limit: usize,
    capacity: &dyn Fn(&str) -> Option<f64>,
) -> ByStep {
    let windows = node_windows(steps);
    let mut placed: Vec<Vec<&Instance>> = vec![Vec::new(); steps.len()];
    let mut outside: Vec<&Instance> = Vec::new();
    for inst in instances {
        match place(inst, &windows) {
            Some(i) => placed[i].push(inst),
            None => outside.push(inst),
        }
    }
    let first = steps.len().saturating_sub(limit);
    let steps = steps
        .iter()
        .zip(placed)
        .skip(first)
        .map(|(step, group)| step_collectives(step, &group, capacity))
        .collect();
    ByStep {
        steps,
        outside_steps: OutsideSteps {
            count: outside.len() as u64,
            collectives: summarize(outside.into_iter(), capacity),
        },
    }
}

/// Per node, its windows `(start, end, step position)`.
type Windows<'a> = HashMap<&'a str, Vec<(i64, i64, usize)>>;

fn node_windows(steps: &[JobStep]) -> Windows<'_> {
    let mut w: Windows = HashMap::new();
    for (i, s) in steps.iter().enumerate() {
        for n in &s.nodes {
            w.entry(n.node.as_str())
                .or_default()
                .push((n.start_unix_ns, n.end_unix_ns, i));
        }
    }
    w
}

/// The position of the step most of the instance's ranks fall in; `None` when no rank falls in any.
fn place(inst: &Instance, windows: &Windows) -> Option<usize> {
    let mut votes: HashMap<usize, usize> = HashMap::new();
    for r in &inst.ranks {
        let (Some(t), Some(w)) = (r.time_unix_ns, windows.get(r.node.as_str())) else {
            continue;
        };
        if let Some(&(_, _, i)) = w.iter().find(|(s, e, _)| *s <= t && t < *e) {
            *votes.entry(i).or_default() += 1;
        }
    }
    votes
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(i, _)| i)
}

fn step_collectives(
    step: &JobStep,
    group: &[&Instance],
    capacity: &dyn Fn(&str) -> Option<f64>,
) -> StepCollectives {
    let collectives = summarize(group.iter().copied(), capacity)
        .into_iter()
        .map(|summary| {
            let per_rank = per_rank(
                group
                    .iter()
                    .filter(|i| {
                        i.collective == summary.collective
                            && commwatch_model::inspector::size_class(i.size_bytes)
                                == summary.size_class
                    })
                    .copied(),
            );
            StepCollective { summary, per_rank }
        })
        .collect();
    let mut nodes: Vec<String> = step.nodes.iter().map(|n| n.node.clone()).collect();
    nodes.sort();
    StepCollectives {
        index: step.index,
        source: step.nodes.first().map_or(StepSource::Markers, |n| n.source),
        start_unix_ns: step
            .nodes
            .iter()
            .map(|n| n.start_unix_ns)
            .min()
            .unwrap_or(0),
        end_unix_ns: step.nodes.iter().map(|n| n.end_unix_ns).max().unwrap_or(0),
        nodes,
        collectives,
    }
}

/// Per rank: median bus bandwidth and summed execution time over `group`, ordered by rank.
fn per_rank<'a>(group: impl Iterator<Item = &'a Instance>) -> Vec<RankStepFigure> {
    let mut by_rank: HashMap<u32, (String, Vec<f64>, f64)> = HashMap::new();
    for i in group {
        for r in &i.ranks {
            let e = by_rank
                .entry(r.rank)
                .or_insert_with(|| (r.node.clone(), Vec::new(), 0.0));
            e.1.push(r.bus_bandwidth_bytes_per_second);
            e.2 += r.exec_time_us / 1e6;
        }
    }
    let mut out: Vec<RankStepFigure> = by_rank
        .into_iter()
        .map(|(rank, (node, mut bw, time_s))| RankStepFigure {
            rank,
            node,
            bus_bandwidth_bytes_per_second: median(&mut bw).unwrap_or(0.0),
            time_s,
        })
        .collect();
    out.sort_by_key(|r| r.rank);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectives::RankFigure;
    use crate::steps::{history::aggregate, NodeStep};

    const S: i64 = 1_000_000_000;

    fn node_step(node: &str, index: u64, start: i64, end: i64) -> NodeStep {
        NodeStep {
            fabric: Default::default(),
            node: node.into(),
            job: Some("j".into()),
            index,
            start_unix_ns: start,
            end_unix_ns: end,
            source: StepSource::Markers,
            confidence: 1.0,
            samples: None,
            links: vec![],
        }
    }

    /// Two steps, [10 s, 11 s) and [11 s, 12 s), on nodes a and b.
    fn steps() -> Vec<JobStep> {
        (0..2)
            .map(|k| {
                let (s, e) = ((10 + k) * S, (11 + k) * S);
                aggregate(
                    "j",
                    7 + k as u64,
                    vec![
                        node_step("a", 7 + k as u64, s, e),
                        node_step("b", 7 + k as u64, s, e),
                    ],
                )
            })
            .collect()
    }

    /// An AllReduce of 220 MB whose ranks 0, 1 (node a) and 2, 3 (node b) are timed at `t` with bus bandwidth
    /// `bw[rank]`.
    fn instance(t: Option<i64>, bw: [f64; 4]) -> Instance {
        Instance {
            collective: "AllReduce".into(),
            size_bytes: 220_000_000,
            n_ranks: 4,
            n_nodes: 2,
            first_received_unix_ns: 0,
            ranks: (0..4u32)
                .map(|rank| RankFigure {
                    rank,
                    node: if rank < 2 { "a" } else { "b" }.into(),
                    bus_bandwidth_bytes_per_second: bw[rank as usize],
                    exec_time_us: 220e6 / (bw[rank as usize] / 1.5) * 1e6,
                    time_unix_ns: t,
                })
                .collect(),
        }
    }

    #[test]
    fn collectives_on_both_sides_of_a_step_boundary() {
        let slow = [9.9e9, 9.8e9, 9.8e9, 9.3e9];
        let fast = [22e9, 21.9e9, 21.5e9, 22e9];
        let inst = [
            instance(Some(10 * S + 400_000_000), slow),
            instance(Some(11 * S - 1), slow),
            // On the boundary: the later step.
            instance(Some(11 * S), fast),
            instance(Some(11 * S + 600_000_000), fast),
            // Before the first step, and without a dump time: outside, counted.
            instance(Some(9 * S), fast),
            instance(None, fast),
        ];
        let b = by_step(inst.iter(), &steps(), 10, &|_| Some(25e9));
        assert_eq!(b.steps.len(), 2);
        let (s0, s1) = (&b.steps[0], &b.steps[1]);
        assert_eq!((s0.index, s1.index), (7, 8));
        assert_eq!((s0.start_unix_ns, s0.end_unix_ns), (10 * S, 11 * S));
        assert_eq!(s0.nodes, ["a", "b"]);
        let c0 = &s0.collectives[0];
        assert_eq!((c0.summary.count, c0.summary.bytes), (2, 440_000_000));
        assert!((c0.summary.bus_bandwidth_bytes_per_second - 9.8e9).abs() < 1.0);
        assert_eq!(c0.summary.slowest_rank, Some(3));
        assert_eq!(c0.per_rank.len(), 4);
        assert_eq!(
            (c0.per_rank[3].rank, c0.per_rank[3].node.as_str()),
            (3, "b")
        );
        assert_eq!(c0.per_rank[3].bus_bandwidth_bytes_per_second, 9.3e9);
        assert!((c0.per_rank[3].time_s - 2.0 * 220e6 / 6.2e9).abs() < 1e-9);
        let c1 = &s1.collectives[0];
        assert_eq!(c1.summary.count, 2);
        assert_eq!(c1.summary.slowest_rank, Some(2));
        assert!(c1.summary.bus_bandwidth_bytes_per_second > 21e9);
        assert_eq!(b.outside_steps.count, 2);
        assert_eq!(b.outside_steps.collectives[0].count, 2);
        // The newest step only; the older step's collectives are not called outside.
        let b = by_step(inst.iter(), &steps(), 1, &|_| None);
        assert_eq!((b.steps.len(), b.steps[0].index), (1, 8));
        assert_eq!(b.outside_steps.count, 2);
    }

    #[test]
    fn ranks_vote_on_their_own_nodes_clock() {
        // Node b's clock runs 0.5 s behind a's: its steps and its ranks' times are both earlier, and each
        // rank is held against its own node's windows.
        let mut steps = steps();
        for s in &mut steps {
            for n in s.nodes.iter_mut().filter(|n| n.node == "b") {
                n.start_unix_ns -= S / 2;
                n.end_unix_ns -= S / 2;
            }
        }
        let mut i = instance(Some(11 * S + S / 4), [1e9; 4]);
        for r in i.ranks.iter_mut().filter(|r| r.node == "b") {
            r.time_unix_ns = Some(11 * S + S / 4 - S / 2);
        }
        let b = by_step(std::iter::once(&i), &steps, 10, &|_| None);
        assert_eq!(
            b.steps[1].collectives.len(),
            1,
            "both nodes place it in step 8"
        );
        let mut i = instance(Some(11 * S - S / 4), [1e9; 4]);
        i.ranks[2].time_unix_ns = Some(11 * S + S / 4);
        i.ranks[3].time_unix_ns = Some(11 * S + S / 4);
        let b = by_step(std::iter::once(&i), &steps, 10, &|_| None);
        // a: 10.75 s → step 7; b: 11.25 s on b's clock → step 8 (b's step 8 is [10.5, 11.5)): a tie.
        assert_eq!(
            b.steps[0].collectives.len(),
            1,
            "a tie goes to the earlier step"
        );
        assert!(b.steps[1].collectives.is_empty());
    }
}
