//! [`StepStore`]: every node's bounded step history, written by the engine, read by the analysis, the API and
//! the exporter. Readers get copies, the lock held only while copying, except the exporter's walk over every
//! node's recent steps ([`StepStore::visit_recent`]), which reads them in place under the read lock.

use commwatch_model::stats::median;
use std::collections::{vec_deque, BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use commwatch_model::LinkClass;
use parking_lot::RwLock;
use serde::Serialize;

use super::inferred::PeriodEstimate;
use super::{NodeStep, StepSource};

/// Steps kept per node (newest last), at most.
pub const STEPS_PER_NODE: usize = 1000;
pub use crate::config::DEFAULT_STEP_RETENTION;

#[derive(Debug, Default)]
struct NodeHistory {
    /// Shared with the analysis's inputs, which read a window of them every pass (copying each step's links
    /// there took about 6 % of a collector's core at 600 demo nodes, most of it in faulting fresh pages in).
    steps: VecDeque<Arc<NodeStep>>,
    /// The largest end of `steps` and where it lies, kept as steps come and go: `(number, end)` of the steps
    /// no later step ends after (the number counts every step pushed), oldest first, so the front is the
    /// largest end held. Saves reading every held step (up to [`STEPS_PER_NODE`], each its own allocation) at
    /// every push.
    ends: VecDeque<(u64, i64)>,
    markers_total: u64,
    inferred_total: u64,
    period: Option<PeriodEstimate>,
}

impl NodeHistory {
    /// Steps ever pushed.
    fn pushed(&self) -> u64 {
        self.markers_total + self.inferred_total
    }

    /// Appends `s`.
    fn push_back(&mut self, s: NodeStep) {
        let number = self.pushed();
        while self.ends.back().is_some_and(|&(_, e)| e <= s.end_unix_ns) {
            self.ends.pop_back();
        }
        self.ends.push_back((number, s.end_unix_ns));
        match s.source {
            StepSource::Markers => self.markers_total += 1,
            StepSource::Inferred => self.inferred_total += 1,
        }
        self.steps.push_back(Arc::new(s));
    }

    /// Drops the oldest step.
    fn pop_front(&mut self) {
        if self.steps.pop_front().is_some() {
            let number = self.pushed() - self.steps.len() as u64 - 1;
            if self.ends.front().is_some_and(|&(n, _)| n == number) {
                self.ends.pop_front();
            }
        }
    }

    /// The largest end of the steps held (0: none).
    fn newest_end(&self) -> i64 {
        self.ends.front().map_or(0, |&(_, e)| e)
    }
}

/// Spread of one figure across the nodes of a job for one step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
    /// The node with the lowest / highest value.
    pub min_node: String,
    pub max_node: String,
}

/// One link class's figures across the nodes of a job for one step. A node's value is the median over its
/// links of that class that were active with a confident figure; nodes without one are left out (`nodes`
/// says how many were counted).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassAggregate {
    pub class: LinkClass,
    pub nodes: usize,
    pub achieved_bytes_per_second: Spread,
    /// `None` when no counted link knows its capacity.
    pub utilization: Option<Spread>,
}

/// One step of a job: the marker-sourced steps of the same index on every node of the job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobStep {
    pub job: String,
    pub index: u64,
    /// Per node, sorted by node name.
    pub nodes: Vec<NodeStep>,
    /// Per link class, in class order.
    pub classes: Vec<ClassAggregate>,
}

impl JobStep {
    /// Median over nodes of their step duration, seconds.
    pub fn duration_s(&self) -> f64 {
        let mut d: Vec<f64> = self.nodes.iter().map(NodeStep::duration_s).collect();
        median(&mut d).unwrap_or(0.0)
    }

    /// Lowest confidence over the nodes.
    pub fn confidence(&self) -> f64 {
        self.nodes.iter().map(|n| n.confidence).fold(1.0, f64::min)
    }

    /// Samples of the step summed over nodes; `None` when no node's markers carried samples.
    pub fn samples(&self) -> Option<u64> {
        self.nodes
            .iter()
            .filter_map(|n| n.samples)
            .reduce(|a, b| a.saturating_add(b))
    }
}

fn spread(values: &mut [(f64, &str)]) -> Option<Spread> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
    let mut v: Vec<f64> = values.iter().map(|x| x.0).collect();
    Some(Spread {
        min: values[0].0,
        median: median(&mut v).unwrap_or(0.0),
        max: values[values.len() - 1].0,
        min_node: values[0].1.to_string(),
        max_node: values[values.len() - 1].1.to_string(),
    })
}

/// Per node: (median achieved, median utilisation, node name) of one link class.
type NodeFigure<'a> = (f64, Option<f64>, &'a str);

/// Aggregates per link class across the nodes of one job step.
pub fn aggregate(job: &str, index: u64, mut nodes: Vec<NodeStep>) -> JobStep {
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    let mut per_class: BTreeMap<LinkClass, Vec<NodeFigure<'_>>> = BTreeMap::new();
    for n in &nodes {
        let mut by_class: BTreeMap<LinkClass, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
        for l in n.links.iter().filter(|l| l.confident) {
            if let Some(a) = l.achieved_bytes_per_second {
                let e = by_class.entry(l.link.key.class).or_default();
                e.0.push(a);
                if let Some(u) = l.utilization {
                    e.1.push(u);
                }
            }
        }
        for (class, (mut a, mut u)) in by_class {
            if let Some(a) = median(&mut a) {
                per_class
                    .entry(class)
                    .or_default()
                    .push((a, median(&mut u), n.node.as_str()));
            }
        }
    }
    let classes = per_class
        .into_iter()
        .filter_map(|(class, v)| {
            let mut a: Vec<(f64, &str)> = v.iter().map(|x| (x.0, x.2)).collect();
            let mut u: Vec<(f64, &str)> = v.iter().filter_map(|x| Some((x.1?, x.2))).collect();
            Some(ClassAggregate {
                class,
                nodes: v.len(),
                achieved_bytes_per_second: spread(&mut a)?,
                utilization: spread(&mut u),
            })
        })
        .collect();
    JobStep {
        job: job.to_string(),
        index,
        nodes,
        classes,
    }
}

/// Every node's step history. Cheap to share (`Arc<StepStore>`).
#[derive(Debug)]
pub struct StepStore {
    nodes: RwLock<HashMap<String, NodeHistory>>,
    /// Steps that ended more than this before the node's newest step's end are dropped.
    retention_ns: i64,
    /// When the step engine started, Unix ns; 0 while none runs ([`StepStore::engine_started`]).
    engine_since_ns: AtomicI64,
    /// The start of the engine's last completed pass (the newest data its steps were cut from), Unix ns; 0
    /// before the first ([`StepStore::pass_done`]).
    last_pass_ns: AtomicI64,
}

impl Default for StepStore {
    fn default() -> Self {
        StepStore::with_retention(DEFAULT_STEP_RETENTION)
    }
}

impl StepStore {
    /// Keeps [`DEFAULT_STEP_RETENTION`] of steps.
    pub fn new() -> StepStore {
        StepStore::default()
    }

    /// Keeps each node's steps that ended within `retention` of its newest one, at most [`STEPS_PER_NODE`].
    pub fn with_retention(retention: std::time::Duration) -> StepStore {
        StepStore {
            nodes: RwLock::default(),
            retention_ns: i64::try_from(retention.as_nanos()).unwrap_or(i64::MAX),
            engine_since_ns: AtomicI64::new(0),
            last_pass_ns: AtomicI64::new(0),
        }
    }

    /// Records that a step engine runs over this store from `now_unix_ns` on: from then on the steps have an
    /// age ([`StepStore::cut_age_s`]).
    pub(crate) fn engine_started(&self, now_unix_ns: i64) {
        self.engine_since_ns
            .store(now_unix_ns.max(1), Ordering::Relaxed);
    }

    /// Records a completed pass of the engine that started at `started_unix_ns` (it read the samples up to
    /// then).
    pub(crate) fn pass_done(&self, started_unix_ns: i64) {
        self.last_pass_ns
            .fetch_max(started_unix_ns, Ordering::Relaxed);
    }

    /// Seconds from the newest data the steps were cut from (the start of the engine's last completed pass, or
    /// the engine's own start before its first pass) to `now_unix_ns`: about the pass interval while the engine
    /// keeps up, growing while a pass waits for CPU. `None` where no engine runs.
    pub fn cut_age_s(&self, now_unix_ns: i64) -> Option<f64> {
        let since = self.engine_since_ns.load(Ordering::Relaxed);
        if since == 0 {
            return None;
        }
        let cut = self.last_pass_ns.load(Ordering::Relaxed).max(since);
        Some(now_unix_ns.saturating_sub(cut).max(0) as f64 / 1e9)
    }

    /// Appends completed steps of `node` (oldest first), keeping the newest [`STEPS_PER_NODE`] of those that
    /// ended within the retention of the newest one's end.
    pub(crate) fn push(&self, node: &str, steps: Vec<NodeStep>) {
        if steps.is_empty() {
            return;
        }
        let mut map = self.nodes.write();
        if !map.contains_key(node) {
            map.insert(node.to_string(), NodeHistory::default());
        }
        let Some(h) = map.get_mut(node) else {
            return;
        };
        for s in steps {
            if h.steps.len() >= STEPS_PER_NODE {
                h.pop_front();
            }
            h.push_back(s);
        }
        let horizon = h.newest_end().saturating_sub(self.retention_ns);
        while h.steps.front().is_some_and(|s| s.end_unix_ns < horizon) {
            h.pop_front();
        }
    }

    /// Records a node (so the API knows it before its first step) and its current period estimate.
    pub(crate) fn set_period(&self, node: &str, period: Option<PeriodEstimate>) {
        let mut map = self.nodes.write();
        match map.get_mut(node) {
            Some(h) => h.period = period,
            None => {
                map.entry(node.to_string()).or_default().period = period;
            }
        }
    }

    /// Forgets nodes not in `keep` (expired from the store).
    pub(crate) fn retain(&self, keep: &[String]) {
        let mut map = self.nodes.write();
        map.retain(|n, _| keep.binary_search(n).is_ok());
    }

    /// Whether `node` is known (held by the store when the engine last ran).
    pub fn has_node(&self, node: &str) -> bool {
        self.nodes.read().contains_key(node)
    }

    /// Names of the nodes held, sorted.
    pub fn node_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.nodes.read().keys().cloned().collect();
        v.sort();
        v
    }

    /// The source of `node`'s newest step (`None`: unknown node or no step yet).
    pub fn node_source(&self, node: &str) -> Option<StepSource> {
        self.nodes.read().get(node)?.steps.back().map(|s| s.source)
    }

    /// Up to `limit` newest steps of `node` from the source of its newest step, oldest first. `None` when the
    /// node is unknown; empty when it has no step yet.
    pub fn node_steps(&self, node: &str, limit: usize) -> Option<Vec<NodeStep>> {
        let steps = self.node_steps_since(node, limit, i64::MIN)?;
        Some(steps.into_iter().map(Arc::unwrap_or_clone).collect())
    }

    /// [`StepStore::node_steps`] of those that ended at or after `since_ns`, oldest first, shared with the
    /// history: the same steps as filtering its answer (the analysis reads a window of a few of them).
    pub fn node_steps_since(
        &self,
        node: &str,
        limit: usize,
        since_ns: i64,
    ) -> Option<Vec<Arc<NodeStep>>> {
        let map = self.nodes.read();
        let h = map.get(node)?;
        let Some(source) = h.steps.back().map(|s| s.source) else {
            return Some(Vec::new());
        };
        let mut v: Vec<Arc<NodeStep>> = h
            .steps
            .iter()
            .rev()
            .filter(|s| s.source == source)
            .take(limit)
            .filter(|s| s.end_unix_ns >= since_ns)
            .cloned()
            .collect();
        v.reverse();
        Some(v)
    }

    /// Steps (by source) found for `node` since the collector started: `(markers, inferred)`.
    pub fn steps_total(&self, node: &str) -> Option<(u64, u64)> {
        let map = self.nodes.read();
        let h = map.get(node)?;
        Some((h.markers_total, h.inferred_total))
    }

    /// The node's traffic period as inferred (refreshed by the engine, also while markers are used).
    pub fn inferred_period(&self, node: &str) -> Option<PeriodEstimate> {
        self.nodes.read().get(node)?.period
    }

    /// The newest step of every node that has one, sorted by node.
    pub fn latest_steps(&self) -> Vec<NodeStep> {
        let map = self.nodes.read();
        let mut v: Vec<NodeStep> = map
            .values()
            .filter_map(|h| h.steps.back().map(|s| NodeStep::clone(s)))
            .collect();
        v.sort_by(|a, b| a.node.cmp(&b.node));
        v
    }

    /// Calls `f(node, steps, (marker steps total, inferred steps total))` for every node in name order, with up
    /// to `per_node` of its newest steps (oldest first), for exporters that need more than the newest (the
    /// latest confident figure of each link). Under the history's read lock, in place: copying and freeing them
    /// were 23 % of a `/metrics` render at 400 demo nodes.
    pub fn visit_recent(
        &self,
        per_node: usize,
        mut f: impl FnMut(&str, vec_deque::Iter<'_, Arc<NodeStep>>, (u64, u64)),
    ) {
        let map = self.nodes.read();
        let mut order: Vec<(&String, &NodeHistory)> = map.iter().collect();
        order.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (node, h) in order {
            let k = h.steps.len().saturating_sub(per_node);
            f(
                node,
                h.steps.range(k..),
                (h.markers_total, h.inferred_total),
            );
        }
    }

    /// Job ids with marker-sourced steps held, sorted.
    pub fn jobs(&self) -> Vec<String> {
        let map = self.nodes.read();
        let ids: BTreeSet<&str> = map
            .values()
            .flat_map(|h| h.steps.iter().filter_map(|s| s.job.as_deref()))
            .collect();
        ids.into_iter().map(str::to_string).collect()
    }

    /// Up to `limit` newest steps of job `job`, oldest first: the marker-sourced steps of every node aligned by
    /// step index, with per-class aggregates. `None` when no node holds a step of the job.
    pub fn job_steps(&self, job: &str, limit: usize) -> Option<Vec<JobStep>> {
        let mut by_index: BTreeMap<u64, Vec<NodeStep>> = BTreeMap::new();
        {
            let map = self.nodes.read();
            for h in map.values() {
                for s in
                    h.steps.iter().rev().filter(|s| {
                        s.source == StepSource::Markers && s.job.as_deref() == Some(job)
                    })
                {
                    by_index
                        .entry(s.index)
                        .or_default()
                        .push(NodeStep::clone(s));
                }
            }
        }
        if by_index.is_empty() {
            return None;
        }
        let k = by_index.len().saturating_sub(limit);
        Some(
            by_index
                .into_iter()
                .skip(k)
                .map(|(index, nodes)| aggregate(job, index, nodes))
                .collect(),
        )
    }

    /// The newest `limit` inferred steps of a job's nodes (steps attributed to the job because it is the node's
    /// only one), oldest first, one [`JobStep`] per node step: inferred step numbers are per node, so steps of
    /// different nodes are not merged. `None` when no node has such a step.
    pub fn job_inferred_steps(&self, job: &str, limit: usize) -> Option<Vec<JobStep>> {
        let mut all: Vec<NodeStep> = {
            let map = self.nodes.read();
            map.values()
                .flat_map(|h| {
                    h.steps
                        .iter()
                        .rev()
                        .filter(|s| {
                            s.source == StepSource::Inferred && s.job.as_deref() == Some(job)
                        })
                        .take(limit)
                        .map(|s| NodeStep::clone(s))
                })
                .collect()
        };
        if all.is_empty() {
            return None;
        }
        all.sort_by_key(|s| (s.end_unix_ns, s.node.clone()));
        let k = all.len().saturating_sub(limit);
        Some(
            all.into_iter()
                .skip(k)
                .map(|s| aggregate(job, s.index, vec![s]))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::StepLink;
    use commwatch_model::{Endpoint, Link, LinkKey, LinkRole};

    /// The steps' age: none without an engine, from the engine's start before its first pass, then from the
    /// newest pass's start (a pass reported out of order never makes it older).
    #[test]
    fn the_steps_age_counts_from_the_newest_pass() {
        const S: i64 = 1_000_000_000;
        let t0 = 1_700_000_000 * S;
        let store = StepStore::new();
        assert_eq!(store.cut_age_s(t0), None, "no engine runs");
        store.engine_started(t0);
        assert_eq!(store.cut_age_s(t0 + 3 * S), Some(3.0));
        store.pass_done(t0 + 2 * S);
        assert_eq!(store.cut_age_s(t0 + 5 * S), Some(3.0));
        store.pass_done(t0 + S);
        assert_eq!(
            store.cut_age_s(t0 + 5 * S),
            Some(3.0),
            "an older pass changes nothing"
        );
        assert_eq!(
            store.cut_age_s(t0),
            Some(0.0),
            "a clock behind the pass reads no negative age"
        );
    }

    fn link(class: LinkClass, device: &str, achieved: Option<f64>, confident: bool) -> StepLink {
        StepLink {
            link: Arc::new(Link {
                key: LinkKey::new(class, device, "1"),
                endpoint: Endpoint::legacy(class, device, "1"),
                role: LinkRole::Fabric,
                capacity_bytes_per_second: Some(25e9),
                state: "ACTIVE".into(),
                attributes: Default::default(),
                gpu: None,
                link: None,
            }),
            tx_bytes: 1,
            rx_bytes: 1,
            active_s: 0.1,
            achieved_bytes_per_second: achieved,
            average_bytes_per_second: 1.0,
            capacity_bytes_per_second: Some(25e9),
            utilization: achieved.map(|a| a / 25e9),
            confident,
        }
    }

    fn step(node: &str, index: u64, links: Vec<StepLink>) -> NodeStep {
        NodeStep {
            fabric: Default::default(),
            node: node.into(),
            job: Some("j".into()),
            index,
            start_unix_ns: 0,
            end_unix_ns: 1_000_000_000,
            source: StepSource::Markers,
            confidence: 1.0,
            samples: Some(10),
            links,
        }
    }

    #[test]
    fn job_aggregates_across_nodes() {
        let st = StepStore::new();
        let ib = LinkClass::Infiniband;
        st.push(
            "n1",
            vec![step(
                "n1",
                4,
                vec![
                    link(ib, "a", Some(20e9), true),
                    link(ib, "b", Some(10e9), true),
                ],
            )],
        );
        st.push(
            "n2",
            vec![step("n2", 4, vec![link(ib, "a", Some(5e9), true)])],
        );
        // Not confident: left out.
        st.push(
            "n3",
            vec![step("n3", 4, vec![link(ib, "a", Some(1e9), false)])],
        );
        let js = st.job_steps("j", 10).expect("job");
        assert_eq!(js.len(), 1);
        let s = &js[0];
        assert_eq!(s.nodes.len(), 3);
        assert_eq!(s.samples(), Some(30));
        assert_eq!(s.classes.len(), 1);
        let c = &s.classes[0];
        assert_eq!(c.nodes, 2);
        assert_eq!(c.achieved_bytes_per_second.min, 5e9);
        assert_eq!(c.achieved_bytes_per_second.min_node, "n2");
        assert_eq!(c.achieved_bytes_per_second.max, 15e9);
        assert_eq!(c.achieved_bytes_per_second.median, 10e9);
        let u = c.utilization.as_ref().expect("capacity known");
        assert!((u.max - 0.6).abs() < 1e-12 && u.min == 0.2, "{u:?}");
        assert!(st.job_steps("other", 10).is_none());
    }

    #[test]
    fn a_job_without_markers_lists_its_nodes_inferred_steps() {
        let st = StepStore::new();
        let inferred = |node: &str, index: u64, end_s: i64, job: Option<&str>| NodeStep {
            fabric: Default::default(),
            source: StepSource::Inferred,
            job: job.map(str::to_string),
            samples: None,
            end_unix_ns: end_s * 1_000_000_000,
            ..step(node, index, vec![])
        };
        st.push(
            "n1",
            vec![
                inferred("n1", 0, 3, Some("j")),
                inferred("n1", 1, 5, Some("j")),
            ],
        );
        st.push(
            "n2",
            vec![inferred("n2", 7, 4, Some("j")), inferred("n2", 8, 6, None)],
        );
        // No marker steps: the marker view has nothing.
        assert!(st.job_steps("j", 10).is_none());
        let js = st.job_inferred_steps("j", 10).expect("inferred");
        let seen: Vec<(String, u64)> = js
            .iter()
            .map(|s| (s.nodes[0].node.clone(), s.index))
            .collect();
        assert_eq!(
            seen,
            vec![("n1".into(), 0), ("n2".into(), 7), ("n1".into(), 1)],
            "oldest first by end time; the step without the job is left out"
        );
        assert_eq!(st.job_inferred_steps("j", 2).map(|v| v.len()), Some(2));
        assert!(st.job_inferred_steps("other", 10).is_none());
    }

    #[test]
    fn history_is_bounded_and_read_newest_last() {
        let st = StepStore::new();
        st.push(
            "n1",
            (0..(STEPS_PER_NODE as u64 + 5))
                .map(|i| step("n1", i, vec![]))
                .collect(),
        );
        let v = st.node_steps("n1", 3).expect("node");
        assert_eq!(
            v.iter().map(|s| s.index).collect::<Vec<_>>(),
            vec![1002, 1003, 1004]
        );
        assert_eq!(
            st.node_steps("n1", 5000).map(|v| v.len()),
            Some(STEPS_PER_NODE)
        );
        assert_eq!(st.steps_total("n1"), Some((1005, 0)));
        assert!(st.node_steps("nope", 3).is_none());
        st.retain(&[]);
        assert!(!st.has_node("n1"));
    }

    #[test]
    fn steps_since_equal_the_filtered_newest_steps() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(11);
        for _ in 0..100 {
            let st = StepStore::new();
            let n = r.random_range(0..150u64);
            let mut end = 0i64;
            let steps: Vec<NodeStep> = (0..n)
                .map(|i| {
                    end += r.random_range(1..3_000_000_000);
                    NodeStep {
                        fabric: Default::default(),
                        end_unix_ns: end,
                        start_unix_ns: end - 500_000_000,
                        source: if r.random_bool(0.2) {
                            StepSource::Inferred
                        } else {
                            StepSource::Markers
                        },
                        ..step("n1", i, vec![])
                    }
                })
                .collect();
            st.push("n1", steps);
            let (limit, since) = (r.random_range(0..80), r.random_range(0..end.max(1)));
            let filtered: Option<Vec<NodeStep>> = st
                .node_steps("n1", limit)
                .map(|v| v.into_iter().filter(|s| s.end_unix_ns >= since).collect());
            let since_steps = st.node_steps_since("n1", limit, since);
            let since_steps =
                since_steps.map(|v| v.into_iter().map(Arc::unwrap_or_clone).collect());
            assert_eq!(since_steps, filtered);
        }
        assert_eq!(StepStore::new().node_steps_since("x", 5, 0), None);
    }

    #[test]
    fn the_newest_end_is_the_largest_end_held_whatever_the_order() {
        // Ends out of order (a step's end may come before an earlier-pushed one's), with steps dropped by the
        // bound: the kept largest end equals the largest end of the steps held, after every push and drop.
        let mut h = NodeHistory::default();
        let ends = [5i64, 9, 3, 9, 7, 12, 1, 12, 4, 2, 15, 6, 6, 14];
        for (i, &e) in ends.iter().enumerate() {
            h.push_back(NodeStep {
                fabric: Default::default(),
                end_unix_ns: e,
                ..step("n1", i as u64, vec![])
            });
            if h.steps.len() > 4 {
                h.pop_front();
            }
            let held = h.steps.iter().map(|s| s.end_unix_ns).max().unwrap_or(0);
            assert_eq!(h.newest_end(), held, "after {i}: {:?}", h.ends);
        }
        while !h.steps.is_empty() {
            h.pop_front();
            let held = h.steps.iter().map(|s| s.end_unix_ns).max().unwrap_or(0);
            assert_eq!(h.newest_end(), held);
        }
        assert!(h.ends.is_empty());
    }

    #[test]
    fn steps_older_than_the_retention_are_dropped() {
        let st = StepStore::with_retention(std::time::Duration::from_secs(10));
        let at = |i: u64, end_s: i64| NodeStep {
            fabric: Default::default(),
            end_unix_ns: end_s * 1_000_000_000,
            start_unix_ns: (end_s - 1) * 1_000_000_000,
            ..step("n1", i, vec![])
        };
        st.push("n1", (0..5).map(|i| at(i, 100 + i as i64)).collect());
        assert_eq!(st.node_steps("n1", 100).map(|v| v.len()), Some(5));
        // Ends at 115: steps that ended before 105 go; the one ending at 105 stays.
        st.push("n1", vec![at(5, 105), at(6, 115)]);
        let kept: Vec<u64> = st
            .node_steps("n1", 100)
            .expect("node")
            .iter()
            .map(|s| s.index)
            .collect();
        assert_eq!(kept, vec![5, 6]);
        assert_eq!(
            st.steps_total("n1"),
            Some((7, 0)),
            "totals count every step"
        );
        assert!(StepStore::new().retention_ns >= 3_600_000_000_000);
    }
}
