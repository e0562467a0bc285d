//! The step engine: a periodic pass (every [`DEFAULT_INTERVAL`] by default) that extends each node's step
//! history in the [`StepStore`] with the steps completed since the previous pass.
//!
//! Incremental: per node it keeps a marker cursor (only markers new since the last pass are read), the
//! inference tracker's traffic window (only samples newer than its newest point are read), and the edges of
//! steps found but not yet covered by samples. A step's link figures are computed once, when the node's
//! samples reach its end. Nothing is recomputed over the whole history.
//!
//! Locking: per node, two short critical sections under the node's lock — one copying new markers and the new
//! traffic samples, one copying the byte samples inside the newly completed steps — and all computation
//! outside it, so ingest of that node waits at most for a copy of a few dozen samples per link.
//!
//! Source: a node whose markers were seen within [`MARKERS_FRESH_NS`] (agent clock, against its newest sample)
//! gets marker steps; otherwise inferred steps. Inference keeps following the traffic while markers are used,
//! so the switch back is immediate.
//!
//! **Inferred steps are the job's, aligned across its nodes.** Every node of a synchronous job runs the same
//! steps, but not every node's counters show them: a ring neighbour of a slow link waits inside the collective
//! as long as it computes, and its own traffic repeats at half the step. Each node's traffic repeats at the
//! job's step or at a fraction of it, so the job's reference is the node whose period the most of its nodes
//! share, the longest on a tie ([`reference`]): its steps are every node's steps, with one index sequence per job (the same index on every node), each node's bytes counted on its
//! own samples. A node that runs no job, or the only node of its job, keeps its own steps.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use commwatch_model::clock::unix_now_ns;
use commwatch_model::{Link, LinkClass};
use tracing::debug;

use super::bandwidth::step_link;
use super::history::StepStore;
use super::inferred::InferenceTracker;
use super::markers::MarkerTracker;
use super::{NodeStep, StepSource};
use crate::store::{NodeState, Store};
use crate::telemetry::Passes;

/// How often the engine runs by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(500);
/// Markers this recent (relative to the node's newest sample) make the node's steps marker-sourced.
pub const MARKERS_FRESH_NS: i64 = 30_000_000_000;
/// Steps waiting for samples to cover them, per node; beyond it the oldest is completed with the links whose
/// samples cover it.
pub const MAX_AWAITING: usize = 64;
/// Periods within this share of each other are the same period.
pub const SAME_PERIOD: f64 = 0.12;
/// A node's own steps kept for its job.
pub const RECENT_OWN: usize = 16;
/// A reference's step starting within this share of the period of the job's last step end continues it.
pub const CONTINUES_WITHIN: f64 = 0.25;

/// Edges of a step whose link figures are not computed yet.
#[derive(Debug, Clone)]
struct Edges {
    job: Option<String>,
    index: u64,
    start: i64,
    end: i64,
    source: StepSource,
    confidence: f64,
    samples: Option<u64>,
}

#[derive(Debug, Default)]
struct NodeEngine {
    marker_cursor: u64,
    markers: MarkerTracker,
    inference: InferenceTracker,
    next_inferred: u64,
    awaiting: VecDeque<Edges>,
    /// Markers lost to the log's bound before the engine read them.
    lost_markers: u64,
    /// What this pass read of the node (set by the first phase of [`Engine::tick`]).
    newest_sample: i64,
    has_byte_series: bool,
    markers_fresh: bool,
    /// End of the last inferred step queued: no inferred step starts before it.
    inferred_until: i64,
    /// The newest steps the node's own inference found (at most [`RECENT_OWN`]), for its job when it becomes
    /// the job's reference.
    recent: VecDeque<super::inferred::InferredStep>,
}

/// One node's inference in a pass: its job and the steps its own traffic gave.
struct NodeInferred {
    node: String,
    job: Option<String>,
    /// Steps found in this pass.
    steps: Vec<super::inferred::InferredStep>,
    period: Option<super::PeriodEstimate>,
    /// Whether its inference follows a step sequence (a node still warming up cannot lead the job).
    following: bool,
}

/// A job's inferred step sequence: the next index and the end of the last step given out.
#[derive(Debug, Default)]
struct JobSequence {
    next: u64,
    until: i64,
}

/// New data of one node, copied under its lock.
struct Fresh {
    markers: Vec<crate::store::Marker>,
    lost: u64,
    next_cursor: u64,
    /// Traffic total at each new sample time.
    traffic: Vec<(i64, f64)>,
    newest_sample: i64,
    has_byte_series: bool,
    /// The node's training job when it runs exactly one (inferred steps are attributed to it).
    job: Option<String>,
}

/// Of `samples` (oldest first), those from the last one at or before `from` to the end (oldest first). Walks
/// from the newest, so the cost is the number of samples copied.
fn tail_from(samples: impl DoubleEndedIterator<Item = (i64, u64)>, from: i64) -> Vec<(i64, u64)> {
    let mut v: Vec<(i64, u64)> = Vec::new();
    for s in samples.rev() {
        v.push(s);
        if s.0 <= from {
            break;
        }
    }
    v.reverse();
    v
}

/// Of `samples` (oldest first), those covering `[start, end]`: the last at or before `start` to the first at
/// or after `end`.
fn covering(
    samples: impl DoubleEndedIterator<Item = (i64, u64)>,
    start: i64,
    end: i64,
) -> Vec<(i64, u64)> {
    let mut v: Vec<(i64, u64)> = Vec::new();
    let mut after: Option<(i64, u64)> = None;
    for s in samples.rev() {
        if s.0 > end {
            // Walking back: ends as the oldest sample after `end`.
            after = Some(s);
            continue;
        }
        v.push(s);
        if s.0 <= start {
            break;
        }
    }
    v.reverse();
    if let Some(a) = after {
        if v.last().is_none_or(|l| l.0 < end) {
            v.push(a);
        }
    }
    v
}

/// Clamped interpolation: before the first sample its value, after the last the last value (one time; the
/// engine uses [`clamped_ascending`], tested against this).
#[cfg(test)]
fn clamped(samples: &[(i64, u64)], t: i64) -> f64 {
    match (samples.first(), samples.last()) {
        (Some(f), _) if t <= f.0 => f.1 as f64,
        (_, Some(l)) if t >= l.0 => l.1 as f64,
        (Some(_), Some(_)) => super::bandwidth::interpolate(samples, t).unwrap_or(0.0),
        _ => 0.0,
    }
}

/// [`clamped`] at each of `times` (ascending: one walk over the samples), the same values.
fn clamped_ascending(samples: &[(i64, u64)], times: &[i64]) -> Vec<f64> {
    let inner = super::bandwidth::interpolate_ascending(samples, times);
    times
        .iter()
        .zip(inner)
        .map(|(&t, v)| match (samples.first(), samples.last()) {
            (Some(f), _) if t <= f.0 => f.1 as f64,
            (_, Some(l)) if t >= l.0 => l.1 as f64,
            (Some(_), Some(_)) => v.unwrap_or(0.0),
            _ => 0.0,
        })
        .collect()
}

fn copy_fresh(n: &NodeState, cursor: u64, traffic_from: i64) -> Fresh {
    let (markers, lost) = n.markers().since(cursor);
    let next_cursor = n.markers().next_seq();
    let mut newest_sample = 0i64;
    let mut has_byte_series = false;
    // Per traffic link and direction: samples from the last one at or before `traffic_from`.
    let mut series: Vec<Vec<(i64, u64)>> = Vec::new();
    for (i, l) in n.links().iter().enumerate() {
        let (tx, rx) = n.link_byte_series(i);
        for s in [tx, rx].into_iter().flatten() {
            has_byte_series = true;
            let samples = n.samples(s);
            if let Some((t, _)) = samples.last() {
                newest_sample = newest_sample.max(t);
            }
            if l.link.key.class != LinkClass::Nvlink {
                series.push(tail_from(samples.iter(), traffic_from));
            }
        }
    }
    // Sample times: those of the first traffic series newer than `traffic_from`, up to the oldest "newest
    // sample" across series (all series of a tick share its timestamp; a lagging one must not read as a drop).
    let upto = series
        .iter()
        .filter_map(|s| s.last().map(|x| x.0))
        .min()
        .unwrap_or(0);
    let times: Vec<i64> = series
        .first()
        .map(|s| {
            s.iter()
                .map(|x| x.0)
                .filter(|&t| t > traffic_from && t <= upto)
                .collect()
        })
        .unwrap_or_default();
    // Each series at every time by one walk ([`clamped_ascending`]), summed per time in series order.
    let at: Vec<Vec<f64>> = series
        .iter()
        .map(|s| clamped_ascending(s, &times))
        .collect();
    let traffic = times
        .iter()
        .enumerate()
        .map(|(j, &t)| (t, at.iter().map(|v| v[j]).sum::<f64>()))
        .collect();
    let job = match n.jobs().jobs.as_slice() {
        [only] => Some(only.id.clone()),
        _ => None,
    };
    Fresh {
        job,
        markers,
        lost,
        next_cursor,
        traffic,
        newest_sample,
        has_byte_series,
    }
}

/// The links with byte counters (shared with the store: a pointer copied under the node's lock, not the link's
/// strings and attributes) and their covering samples for the span `[start, end]`.
type Covered = (Vec<(Arc<Link>, Vec<(i64, u64)>, Vec<(i64, u64)>)>, f64);

fn copy_covering(n: &NodeState, start: i64, end: i64) -> Covered {
    let mut out = Vec::new();
    for (i, l) in n.links().iter().enumerate() {
        let (tx, rx) = n.link_byte_series(i);
        if tx.is_none() && rx.is_none() {
            continue;
        }
        let c = |s: Option<&crate::store::Series>| {
            s.map(|s| covering(n.samples(s).iter(), start, end))
                .unwrap_or_default()
        };
        out.push((l.link.clone(), c(tx), c(rx)));
    }
    (out, f64::from(n.fast_period_ms()) / 1e3)
}

/// The engine's state over all nodes. [`Engine::tick`] does one pass; [`run`] runs it periodically.
pub struct Engine {
    store: Arc<Store>,
    steps: Arc<StepStore>,
    nodes: HashMap<String, NodeEngine>,
    jobs: HashMap<String, JobSequence>,
    /// The collector's pass metrics, where each pass is timed.
    passes: Passes,
}

impl Engine {
    /// An engine reading `store` and extending `steps`, timing its passes in `passes` (the collector's own,
    /// [`crate::telemetry::Health::passes`]).
    pub fn new(store: Arc<Store>, steps: Arc<StepStore>, passes: Passes) -> Engine {
        Engine {
            store,
            steps,
            nodes: HashMap::new(),
            jobs: HashMap::new(),
            passes,
        }
    }

    /// One pass over every node the store holds as fresh at `now_unix_ns`: new steps are appended to the
    /// [`StepStore`]. Returns how many steps were added.
    /// Timed in `commwatch_collector_pass_seconds{pass="steps"}`.
    pub fn tick(&mut self, now_unix_ns: i64) -> usize {
        let timer = self.passes.timer("steps");
        let names = self.store.node_names(now_unix_ns);
        self.nodes.retain(|n, _| names.binary_search(n).is_ok());
        self.steps.retain(&names);
        let inferred: Vec<NodeInferred> = names.iter().filter_map(|n| self.read_node(n)).collect();
        self.queue_inferred(inferred);
        let mut added = 0;
        for name in &names {
            added += self.complete_node(name);
        }
        timer.done(names.len());
        added
    }

    /// First phase for one node: reads what is new, queues its marker steps and runs its inference.
    fn read_node(&mut self, name: &str) -> Option<NodeInferred> {
        let st = self.nodes.entry(name.to_string()).or_default();
        let cursor = st.marker_cursor;
        let traffic_from = st.inference.newest_ns();
        let fresh = self
            .store
            .with_node(name, |n| copy_fresh(n, cursor, traffic_from))?;
        st.marker_cursor = fresh.next_cursor;
        if fresh.lost > 0 {
            st.lost_markers += fresh.lost;
            debug!(
                node = name,
                lost = fresh.lost,
                "step markers evicted before the engine read them"
            );
        }
        for m in &fresh.markers {
            st.markers.add(m);
        }
        for s in st.markers.complete() {
            st.awaiting.push_back(Edges {
                job: Some(s.job),
                index: s.index,
                start: s.start_unix_ns,
                end: s.end_unix_ns,
                source: StepSource::Markers,
                confidence: s.confidence,
                samples: s.samples,
            });
        }
        let agent_now = fresh.newest_sample.max(st.markers.newest_unix_ns());
        st.markers.forget_idle(agent_now);
        st.inference.extend(fresh.traffic);
        let steps = st.inference.steps();
        st.recent.extend(steps.iter().copied());
        while st.recent.len() > RECENT_OWN {
            st.recent.pop_front();
        }
        st.markers_fresh = st.markers.newest_unix_ns() > 0
            && agent_now - st.markers.newest_unix_ns() <= MARKERS_FRESH_NS;
        st.newest_sample = fresh.newest_sample;
        st.has_byte_series = fresh.has_byte_series;
        let period = st.inference.period();
        self.steps.set_period(name, period);
        Some(NodeInferred {
            node: name.to_string(),
            job: fresh.job,
            steps,
            period,
            following: st.inference.following(),
        })
    }

    /// Queues the inferred steps of this pass: a job's reference steps on each of its nodes, a lone node's own
    /// (see the module documentation).
    fn queue_inferred(&mut self, inferred: Vec<NodeInferred>) {
        let mut by_job: HashMap<String, Vec<&NodeInferred>> = HashMap::new();
        for n in &inferred {
            if let Some(j) = &n.job {
                by_job.entry(j.clone()).or_default().push(n);
            }
        }
        self.jobs.retain(|j, _| by_job.contains_key(j));
        for n in &inferred {
            let group = n
                .job
                .as_ref()
                .and_then(|j| by_job.get(j))
                .filter(|g| g.len() > 1);
            let Some(group) = group else {
                let own: Vec<(u64, i64, i64, f64)> = {
                    let st = self.nodes.entry(n.node.clone()).or_default();
                    n.steps
                        .iter()
                        .map(|s| {
                            let i = st.next_inferred;
                            st.next_inferred += 1;
                            (i, s.start_unix_ns, s.end_unix_ns, s.confidence)
                        })
                        .collect()
                };
                self.queue_on(&n.node, n.job.as_ref(), &own);
                continue;
            };
            // The job's steps are queued once, from its reference, on every node of the group.
            let Some(reference) = reference(group) else {
                continue;
            };
            if reference.node != n.node {
                continue;
            }
            let job = n.job.clone().unwrap_or_default();
            // A new sequence goes on from its nodes' own (indices never go back, steps never overlap).
            let (next, until) = group
                .iter()
                .filter_map(|m| self.nodes.get(&m.node))
                .fold((0, 0), |(i, u), st| {
                    (st.next_inferred.max(i), st.inferred_until.max(u))
                });
            // The reference's newest own steps, copied once per job and pass (not every node's every pass).
            let recent: Vec<super::inferred::InferredStep> = self
                .nodes
                .get(&reference.node)
                .map(|st| st.recent.iter().copied().collect())
                .unwrap_or_default();
            let seq = self
                .jobs
                .entry(job.clone())
                .or_insert(JobSequence { next, until });
            let tol = reference
                .period
                .map_or(0, |p| (CONTINUES_WITHIN * p.period_s * 1e9) as i64);
            let mut steps = Vec::new();
            for s in &recent {
                if s.end_unix_ns <= seq.until || s.start_unix_ns < seq.until - tol {
                    continue;
                }
                // A step that starts near the last end continues it (a new reference's edges differ slightly).
                let continues = seq.until > 0 && s.start_unix_ns <= seq.until + tol;
                let start = if continues {
                    seq.until
                } else {
                    s.start_unix_ns
                };
                steps.push((seq.next, start, s.end_unix_ns, s.confidence));
                seq.next += 1;
                seq.until = s.end_unix_ns;
            }
            let next = seq.next;
            for m in group.iter() {
                self.queue_on(&m.node, Some(&job), &steps);
                if let Some(st) = self.nodes.get_mut(&m.node) {
                    st.next_inferred = st.next_inferred.max(next);
                }
            }
        }
    }

    /// Queues inferred steps `(index, start, end, confidence)` on `node`, unless its markers are fresh; none
    /// starts before the node's last inferred step ends.
    fn queue_on(&mut self, node: &str, job: Option<&String>, steps: &[(u64, i64, i64, f64)]) {
        let Some(st) = self.nodes.get_mut(node) else {
            return;
        };
        if st.markers_fresh {
            return;
        }
        for &(index, start, end, confidence) in steps {
            if start < st.inferred_until {
                continue;
            }
            st.awaiting.push_back(Edges {
                job: job.cloned(),
                index,
                start,
                end,
                source: StepSource::Inferred,
                confidence,
                samples: None,
            });
            st.inferred_until = end;
        }
    }

    /// Last phase for one node: computes the figures of the queued steps its samples now cover.
    fn complete_node(&mut self, name: &str) -> usize {
        let Some(st) = self.nodes.get_mut(name) else {
            return 0;
        };
        // Steps whose end the samples reach (or every step when the node has no byte counters, or too many wait).
        let mut ready: Vec<Edges> = Vec::new();
        while let Some(e) = st.awaiting.front() {
            let covered = !st.has_byte_series || e.end <= st.newest_sample;
            if covered || st.awaiting.len() > MAX_AWAITING {
                if let Some(e) = st.awaiting.pop_front() {
                    ready.push(e);
                }
            } else {
                break;
            }
        }
        if ready.is_empty() {
            return 0;
        }
        let span_start = ready.iter().map(|e| e.start).min().unwrap_or(0);
        let span_end = ready.iter().map(|e| e.end).max().unwrap_or(0);
        let (links, period_s) = self
            .store
            .with_node(name, |n| copy_covering(n, span_start, span_end))
            .unwrap_or_default();
        let period_s = if period_s > 0.0 { period_s } else { 0.05 };
        let steps: Vec<NodeStep> = ready
            .into_iter()
            .map(|e| NodeStep {
                node: name.to_string(),
                job: e.job,
                index: e.index,
                start_unix_ns: e.start,
                end_unix_ns: e.end,
                source: e.source,
                confidence: e.confidence,
                samples: e.samples,
                links: links
                    .iter()
                    .filter_map(|(link, tx, rx)| step_link(link, tx, rx, e.start, e.end, period_s))
                    .collect(),
            })
            .collect();
        let n = steps.len();
        self.steps.push(name, steps);
        n
    }
}

/// The reference of a job's nodes, of those whose inference follows a step sequence: the node whose period
/// the most nodes share (within [`SAME_PERIOD`]), the longest such period on a tie (each node's traffic repeats
/// at the job's step or at a fraction of it: a ring neighbour of a slow link at half of it), then the strongest.
fn reference<'a>(group: &[&'a NodeInferred]) -> Option<&'a NodeInferred> {
    let period = |n: &NodeInferred| n.period.filter(|_| n.following);
    let periods: Vec<f64> = group
        .iter()
        .filter_map(|n| period(n).map(|p| p.period_s))
        .collect();
    let support = |p: f64| periods.iter().filter(|&&q| same_period(q, p)).count();
    group
        .iter()
        .filter_map(|n| period(n).map(|p| (*n, p)))
        .max_by(|(a, pa), (b, pb)| {
            support(pa.period_s)
                .cmp(&support(pb.period_s))
                .then_with(|| pa.period_s.total_cmp(&pb.period_s))
                .then_with(|| pa.strength.total_cmp(&pb.strength))
                .then_with(|| b.node.cmp(&a.node))
        })
        .map(|(n, _)| n)
}

/// Whether two periods are the same within [`SAME_PERIOD`].
fn same_period(q: f64, p: f64) -> bool {
    q > 0.0 && (p / q - 1.0).abs() <= SAME_PERIOD
}

/// Runs [`Engine::tick`] every `every` (on the blocking pool, so the async workers that serve ingest never wait
/// for it), extending `steps`, until the future is dropped (or a pass panics: logged, the engine stops). Each
/// pass is timed in `passes`.
pub async fn run(store: Arc<Store>, steps: Arc<StepStore>, passes: Passes, every: Duration) {
    let engine = Arc::new(parking_lot::Mutex::new(Engine::new(store, steps, passes)));
    let thread = match crate::pace::PassThread::start("commwatch-steps") {
        Ok(t) => Arc::new(t),
        Err(err) => {
            tracing::error!(error = %err, "could not start the step engine's thread; the engine stops");
            return;
        }
    };
    // Every `every`, or less often when a pass over a large fleet is costly (`crate::pace`), at a priority
    // below ingest's: the engine reads only what is new since its last pass, so a longer pause costs no samples.
    crate::pace::run_paced(every, move || {
        let (engine, thread) = (engine.clone(), thread.clone());
        async move {
            match thread
                .run_charged(move || engine.lock().tick(unix_now_ns()))
                .await
            {
                Ok((_, paced)) => paced,
                Err(err) => {
                    tracing::error!(error = %err, "step engine pass failed; the engine stops");
                    crate::pace::Paced::Stop
                }
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ring::Ring;

    fn ring(samples: &[(i64, u64)]) -> Ring {
        let mut r = Ring::new(100);
        for &(t, v) in samples {
            r.push(t, v, i64::MAX);
        }
        r
    }

    #[test]
    fn covering_and_tail_copy_only_what_is_needed() {
        let r = ring(&[(10, 1), (20, 2), (30, 3), (40, 4), (50, 5)]);
        assert_eq!(covering(r.iter(), 20, 35), vec![(20, 2), (30, 3), (40, 4)]);
        assert_eq!(covering(r.iter(), 25, 30), vec![(20, 2), (30, 3)]);
        assert_eq!(covering(r.iter(), 5, 60), r.iter().collect::<Vec<_>>());
        assert_eq!(tail_from(r.iter(), 35), vec![(30, 3), (40, 4), (50, 5)]);
        assert_eq!(tail_from(r.iter(), 50), vec![(50, 5)]);
        assert_eq!(clamped(&[(10, 5), (20, 15)], 15), 10.0);
        assert_eq!(clamped(&[(10, 5), (20, 15)], 0), 5.0);
        assert_eq!(clamped(&[(10, 5), (20, 15)], 99), 15.0);
    }

    #[test]
    fn clamped_walk_equals_clamped_per_time() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..300 {
            let n = r.random_range(0..30);
            let (mut t, mut acc) = (0i64, 0u64);
            let s: Vec<(i64, u64)> = (0..n)
                .map(|_| {
                    t += r.random_range(1..100);
                    acc += r.random_range(0..1u64 << 40);
                    (t, acc)
                })
                .collect();
            let k = r.random_range(0..40);
            let mut times: Vec<i64> = (0..k).map(|_| r.random_range(-20..t + 20)).collect();
            times.sort_unstable();
            let per_time: Vec<f64> = times.iter().map(|&x| clamped(&s, x)).collect();
            assert_eq!(clamped_ascending(&s, &times), per_time, "{s:?} {times:?}");
        }
    }

    fn inferred(node: &str, period_s: f64, strength: f64) -> NodeInferred {
        NodeInferred {
            node: node.into(),
            job: Some("j".into()),
            steps: Vec::new(),
            period: Some(crate::steps::PeriodEstimate { period_s, strength }),
            following: true,
        }
    }

    #[test]
    fn the_reference_is_the_period_the_nodes_share() {
        // A neighbour at half the step, two nodes at the step, one reading two steps as one: the two agree.
        let g = [
            inferred("node0", 0.73, 0.45),
            inferred("node1", 1.50, 0.37),
            inferred("node2", 2.93, 0.6),
            inferred("node3", 1.58, 0.31),
        ];
        let group: Vec<&NodeInferred> = g.iter().collect();
        assert_eq!(reference(&group).map(|n| n.node.as_str()), Some("node3"));
        // Alone against its neighbour at half the step, the step wins.
        let g1 = [inferred("node0", 0.73, 0.45), inferred("node1", 1.50, 0.37)];
        let group: Vec<&NodeInferred> = g1.iter().collect();
        assert_eq!(reference(&group).map(|n| n.node.as_str()), Some("node1"));
        // A node still warming up cannot lead.
        let mut g2 = [inferred("node0", 1.5, 0.5), inferred("node1", 3.0, 0.9)];
        g2[0].following = false;
        let group: Vec<&NodeInferred> = g2.iter().collect();
        assert_eq!(reference(&group).map(|n| n.node.as_str()), Some("node1"));
        assert!(same_period(1.5, 1.6) && !same_period(0.75, 1.5));
    }
}
