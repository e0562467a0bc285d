//! Scopes of evaluation: the fleet cut into parts that the rules never compare across, so that each part can
//! be evaluated on its own input, when its own nodes bring new data, and its findings are exactly those a
//! whole-fleet evaluation would give for it.
//!
//! What the rules compare across nodes is always within a job: a job's ranks and the nodes that list it (its
//! NCCL conflicts), a ring's neighbours, the job's median node, the roll-up of a kind over the job's nodes
//! (which falls back to the job of a node's steps). So a scope is a connected part of the graph whose edges
//! join a node to every job it takes part in (as a rank, in its job list, in a conflict, or in its steps'
//! job): nodes that share a job, directly or through others, are in one scope.
//!
//! The nodes of no fleet job (idle nodes, and nodes whose only job is one their steps name) are one scope
//! together, the *cluster* scope: the rules compare them with each other where no job is known. Its input keeps
//! the fleet jobs' ranks (without their conflicts), because some rules decide by the fleet's jobs, not the
//! scope's: with a job known anywhere, nodes of no job form no group to compare (`straggler::groups`), and a
//! node outside a job is not "in" it (`causes`). With no fleet job at all, every node is in the cluster scope:
//! the whole fleet is one group then.
//!
//! [`split`] cuts a whole-fleet [`AnalysisInput`] into the scopes' inputs: the oracle's way of checking that the
//! evaluations of the scopes add up to the whole-fleet one (`tests::scopes_add_up_to_the_fleet`, the detection
//! benchmark's comparison).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use super::input::{AnalysisInput, JobInput, NodeInput, STEPS_READ};
use super::scaling::CLUSTER_JOB;
use super::Finding;
use crate::steps::{NodeStep, StepSource, StepStore};

/// One part of the fleet evaluated on its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Stable name while the scope's jobs do not change: its first fleet job id, or [`CLUSTER_JOB`] for the
    /// cluster scope (see [`Scope::cluster`]).
    pub label: String,
    /// Whether this is the cluster scope (nodes of no fleet job).
    pub cluster: bool,
    /// The fleet jobs of the scope, sorted.
    pub jobs: Vec<String>,
    /// The scope's nodes, sorted.
    pub nodes: Vec<String>,
}

impl Scope {
    /// The job names this scope's findings and figures are reported under
    /// (`commwatch_collector_evaluation_age_seconds{training_job}`): its fleet jobs, and [`CLUSTER_JOB`] for
    /// the cluster scope.
    pub fn job_labels(&self) -> Vec<&str> {
        if self.cluster {
            vec![CLUSTER_JOB]
        } else {
            self.jobs.iter().map(String::as_str).collect()
        }
    }
}

/// A small union-find over indices.
struct Sets(Vec<usize>);

impl Sets {
    fn new(n: usize) -> Sets {
        Sets((0..n).collect())
    }

    fn find(&mut self, mut i: usize) -> usize {
        while self.0[i] != i {
            self.0[i] = self.0[self.0[i]];
            i = self.0[i];
        }
        i
    }

    fn join(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.0[ra.max(rb)] = ra.min(rb);
        }
    }
}

/// Each of `names` with the jobs its steps of the window name: of its newest [`STEPS_READ`] steps of its
/// newest source, those that ended at or after `since_ns` (the steps an evaluation reads,
/// [`super::input::build_nodes`]); an empty set for a node without steps. Read in place under the step
/// history's lock, each job id copied once per node: a round asks this of every node four times a second.
pub fn recent_step_jobs(
    steps: &StepStore,
    names: &[String],
    since_ns: i64,
) -> HashMap<String, BTreeSet<String>> {
    let mut out: HashMap<String, BTreeSet<String>> =
        names.iter().map(|n| (n.clone(), BTreeSet::new())).collect();
    steps.visit_recent(usize::MAX, |node, recent, _| {
        let Some(jobs) = out.get_mut(node) else {
            return;
        };
        let Some(source) = recent.clone().next_back().map(|s| s.source) else {
            return;
        };
        let read = recent
            .rev()
            .filter(|s| s.source == source)
            .take(STEPS_READ)
            .filter(|s| s.end_unix_ns >= since_ns);
        for job in read.filter_map(|s| s.job.as_ref()) {
            if !jobs.contains(job) {
                jobs.insert(job.clone());
            }
        }
    });
    out
}

/// [`recent_step_jobs`] kept from one round to the next: each node's held steps mirrored as their end, source
/// and job, brought up to date from the steps pushed and dropped since the last round. A node's history only
/// grows at its back and shrinks at its front, so the steps after the newest one mirrored are all that is new:
/// a round reads those (a demo node pushes about three a second, a round comes four times a second) and the
/// mirror's few bytes a step, not each of every node's 64 newest steps (each its own allocation, its job
/// another: at 1,000 demo nodes, reading them was 5 % of the analysis thread).
#[derive(Debug, Default)]
pub struct StepJobs {
    nodes: HashMap<String, Mirror>,
}

/// One node's held steps, as [`StepJobs`] reads them.
#[derive(Debug)]
struct Mirror {
    /// The newest step mirrored, held: no step pushed later can have its address.
    back: std::sync::Arc<NodeStep>,
    /// Each held step's end (Unix ns), source and job (a place in `jobs`), oldest first.
    steps: VecDeque<(i64, StepSource, Option<u32>)>,
    /// The jobs the mirrored steps name (and maybe some of steps dropped since).
    jobs: Vec<String>,
}

/// Jobs a mirror keeps before it is made again from the node's steps (most nodes name one or two).
const MIRROR_JOBS: usize = 64;

impl Mirror {
    /// The mirror of a node's held steps `held` (oldest first; `None` without steps).
    fn of(held: std::collections::vec_deque::Iter<'_, std::sync::Arc<NodeStep>>) -> Option<Mirror> {
        let back = held.clone().next_back()?.clone();
        let mut m = Mirror {
            back,
            steps: VecDeque::with_capacity(held.len()),
            jobs: Vec::new(),
        };
        for s in held {
            m.push(s);
        }
        Some(m)
    }

    fn push(&mut self, s: &NodeStep) {
        let job = s
            .job
            .as_ref()
            .map(|j| match self.jobs.iter().position(|x| x == j) {
                Some(k) => k as u32,
                None => {
                    self.jobs.push(j.clone());
                    (self.jobs.len() - 1) as u32
                }
            });
        self.steps.push_back((s.end_unix_ns, s.source, job));
    }

    /// Brings the mirror up to the node's held steps `held`: `false` when it cannot (its newest step is no
    /// longer held, or the node's steps are not those it mirrored), and it must be made again.
    fn update(
        &mut self,
        held: std::collections::vec_deque::Iter<'_, std::sync::Arc<NodeStep>>,
    ) -> bool {
        // Pointers compared, no step read: the steps after the mirrored newest one are new.
        let Some(new) = held
            .clone()
            .rev()
            .position(|s| std::sync::Arc::ptr_eq(s, &self.back))
        else {
            return false;
        };
        let old = held.len() - new;
        if old > self.steps.len() || self.jobs.len() > MIRROR_JOBS {
            return false;
        }
        self.steps.drain(..self.steps.len() - old);
        for s in held.clone().skip(old) {
            self.push(s);
        }
        if let Some(b) = held.clone().next_back() {
            self.back = b.clone();
        }
        true
    }

    /// The jobs of the steps an evaluation reads since `since_ns` ([`recent_step_jobs`]).
    fn read(&self, since_ns: i64) -> BTreeSet<String> {
        let mut jobs = BTreeSet::new();
        let Some(&(_, source, _)) = self.steps.back() else {
            return jobs;
        };
        let read = self
            .steps
            .iter()
            .rev()
            .filter(|s| s.1 == source)
            .take(STEPS_READ)
            .filter(|s| s.0 >= since_ns);
        let mut last = None;
        for k in read.filter_map(|s| s.2) {
            if last != Some(k) {
                last = Some(k);
                if let Some(j) = self.jobs.get(k as usize) {
                    if !jobs.contains(j) {
                        jobs.insert(j.clone());
                    }
                }
            }
        }
        jobs
    }
}

impl StepJobs {
    /// [`recent_step_jobs`]`(steps, names, since_ns)`, read from the mirrors (made or brought up to date
    /// first). Mirrors of nodes not among `names` or without steps are dropped.
    pub fn recent(
        &mut self,
        steps: &StepStore,
        names: &[String],
        since_ns: i64,
    ) -> HashMap<String, BTreeSet<String>> {
        let mut out: HashMap<String, BTreeSet<String>> =
            names.iter().map(|n| (n.clone(), BTreeSet::new())).collect();
        let mut kept = HashMap::with_capacity(self.nodes.len());
        steps.visit_recent(usize::MAX, |node, held, _| {
            let Some(jobs) = out.get_mut(node) else {
                return;
            };
            let mirror = match self.nodes.remove_entry(node) {
                Some((name, mut m)) => match m.update(held.clone()) {
                    true => Some((name, m)),
                    false => Mirror::of(held).map(|m| (name, m)),
                },
                None => Mirror::of(held).map(|m| (node.to_string(), m)),
            };
            if let Some((name, m)) = mirror {
                *jobs = m.read(since_ns);
                kept.insert(name, m);
            }
        });
        self.nodes = kept;
        out
    }
}

/// The scopes of a fleet: `nodes` (the names evaluated), the fleet `jobs` ([`crate::jobs::fleet_jobs`]) and
/// `step_jobs` (for each node, the jobs its steps name). Every node is in exactly one scope; scopes come sorted
/// by label, the cluster scope (if any) last.
pub fn partition(
    nodes: &[String],
    jobs: &[JobInput],
    step_jobs: &HashMap<String, BTreeSet<String>>,
) -> Vec<Scope> {
    if jobs.is_empty() {
        let mut all = nodes.to_vec();
        all.sort();
        return if all.is_empty() {
            Vec::new()
        } else {
            vec![Scope {
                label: CLUSTER_JOB.to_string(),
                cluster: true,
                jobs: Vec::new(),
                nodes: all,
            }]
        };
    }
    let index: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    // Elements: the nodes, then the fleet jobs, then the jobs only steps name.
    let mut job_index: BTreeMap<&str, usize> = BTreeMap::new();
    for j in jobs {
        let next = nodes.len() + job_index.len();
        job_index.entry(j.id.as_str()).or_insert(next);
    }
    let fleet_jobs = job_index.len();
    for names in step_jobs.values() {
        for j in names {
            let next = nodes.len() + job_index.len();
            job_index.entry(j.as_str()).or_insert(next);
        }
    }
    let mut sets = Sets::new(nodes.len() + job_index.len());
    for j in jobs {
        let ji = job_index[j.id.as_str()];
        let members = j
            .ranks
            .iter()
            .map(|r| r.node.as_str())
            .chain(j.listed_by.iter().map(String::as_str))
            .chain(j.conflicts.iter().map(|c| c.node.as_str()));
        for n in members {
            if let Some(&ni) = index.get(n) {
                sets.join(ji, ni);
            }
        }
    }
    for (node, names) in step_jobs {
        let Some(&ni) = index.get(node.as_str()) else {
            continue;
        };
        for j in names {
            sets.join(job_index[j.as_str()], ni);
        }
    }
    // Components holding a fleet job are scopes; every other node goes to the cluster scope.
    let is_fleet = |i: usize| i >= nodes.len() && i < nodes.len() + fleet_jobs;
    let mut by_root: BTreeMap<usize, Scope> = BTreeMap::new();
    for (id, &ji) in &job_index {
        if is_fleet(ji) {
            let root = sets.find(ji);
            by_root.entry(root).or_default().jobs.push(id.to_string());
        }
    }
    let mut cluster = Scope {
        label: CLUSTER_JOB.to_string(),
        cluster: true,
        ..Default::default()
    };
    for (i, n) in nodes.iter().enumerate() {
        let root = sets.find(i);
        match by_root.get_mut(&root) {
            Some(s) => s.nodes.push(n.clone()),
            None => cluster.nodes.push(n.clone()),
        }
    }
    let mut out: Vec<Scope> = by_root
        .into_values()
        .filter(|s| !s.nodes.is_empty())
        .map(|mut s| {
            s.jobs.sort();
            s.nodes.sort();
            s.label = s.jobs[0].clone();
            s
        })
        .collect();
    out.sort_by(|a, b| a.label.cmp(&b.label));
    if !cluster.nodes.is_empty() {
        cluster.nodes.sort();
        out.push(cluster);
    }
    out
}

/// The jobs a scope's input carries: its own fleet jobs; for the cluster scope of a fleet that has jobs, every
/// fleet job with its ranks but without its NCCL conflicts (they are findings of the job's own scope).
pub fn scope_jobs(scope: &Scope, fleet: &[JobInput]) -> Vec<JobInput> {
    if scope.cluster {
        fleet
            .iter()
            .map(|j| JobInput {
                id: j.id.clone(),
                listed_by: j.listed_by.clone(),
                ranks: j.ranks.clone(),
                conflicts: Vec::new(),
            })
            .collect()
    } else {
        fleet
            .iter()
            .filter(|j| scope.jobs.binary_search(&j.id).is_ok())
            .cloned()
            .collect()
    }
}

/// The jobs each node's steps name (what a roll-up falls back to for a node of no fleet job).
pub fn step_jobs(nodes: &[NodeInput]) -> HashMap<String, BTreeSet<String>> {
    nodes
        .iter()
        .map(|n| {
            let jobs = n.steps.iter().filter_map(|s| s.job.clone()).collect();
            (n.name.clone(), jobs)
        })
        .collect()
}

/// Cuts a whole-fleet input into one input per scope of [`partition`] (nodes moved, not copied), each with
/// the jobs of [`scope_jobs`] and the fleet-wide rest (baselines, references, collectives, probes) as it is.
pub fn split(input: AnalysisInput) -> Vec<(Scope, AnalysisInput)> {
    let names: Vec<String> = input.nodes.iter().map(|n| n.name.clone()).collect();
    let scopes = partition(&names, &input.jobs, &step_jobs(&input.nodes));
    let mut nodes: HashMap<String, NodeInput> = input
        .nodes
        .into_iter()
        .map(|n| (n.name.clone(), n))
        .collect();
    scopes
        .into_iter()
        .map(|s| {
            let part = AnalysisInput {
                now_unix_ns: input.now_unix_ns,
                nodes: s.nodes.iter().filter_map(|n| nodes.remove(n)).collect(),
                jobs: scope_jobs(&s, &input.jobs),
                bare_baselines: input.bare_baselines.clone(),
                throughput_baselines: input.throughput_baselines.clone(),
                job_references: input.job_references.clone(),
                collectives: input.collectives.clone(),
                probes: input.probes.clone(),
                probe_index: Default::default(),
            };
            (s, part)
        })
        .collect()
}

/// Whether a finding is about something of `scope`: its subject's node is one of the scope's, or (a job-level
/// finding) its job is one of the scope's jobs ([`CLUSTER_JOB`] and jobs only steps name belong to the cluster
/// scope, or to the scope whose nodes' steps name them).
pub fn owns(scope: &Scope, f: &Finding) -> bool {
    if !f.subject.node.is_empty() {
        return scope.nodes.binary_search(&f.subject.node).is_ok();
    }
    match &f.subject.job {
        Some(j) => scope.jobs.binary_search(j).is_ok() || (scope.cluster && j == CLUSTER_JOB),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::{FleetConflict, FleetRank};

    fn job(id: &str, nodes: &[&str]) -> JobInput {
        JobInput {
            id: id.into(),
            listed_by: nodes.iter().map(|n| n.to_string()).collect(),
            ranks: nodes
                .iter()
                .enumerate()
                .map(|(r, n)| FleetRank {
                    node: n.to_string(),
                    process: commwatch_model::Rank {
                        rank: Some(r as u32),
                        ..Default::default()
                    },
                })
                .collect(),
            conflicts: Vec::new(),
        }
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn recent_step_jobs_read_in_place_are_those_of_the_steps_an_evaluation_reads() {
        use crate::analysis::test_support::{hca_step, periodic, HcaFigures};
        use crate::steps::StepSource;
        let steps = StepStore::new();
        let step = |node: &str, i: u64, job: Option<&str>, source: StepSource| {
            let mut s = hca_step(
                node,
                i,
                periodic(i, 1_000_000_000),
                HcaFigures::short_burst(true),
            );
            (s.job, s.source) = (job.map(str::to_string), source);
            s
        };
        // a: more steps than an evaluation reads, its older ones of another job; b: its newest source
        // (markers) names one job, its older inferred steps another; c: steps that ended before the window;
        // d: a node with no steps; e: steps of a node not asked about.
        let a = (0..100).map(|i| {
            step(
                "a",
                i,
                Some(if i < 30 { "old" } else { "j1" }),
                StepSource::Inferred,
            )
        });
        steps.push("a", a.collect());
        let b = (0..20).map(|i| {
            let (job, source) = match i < 10 {
                true => ("j2", StepSource::Inferred),
                false => ("j3", StepSource::Markers),
            };
            step("b", i, Some(job), source)
        });
        steps.push("b", b.collect());
        steps.push(
            "c",
            (0..5)
                .map(|i| step("c", i, Some("j4"), StepSource::Inferred))
                .collect(),
        );
        steps.push("e", vec![step("e", 0, Some("j5"), StepSource::Inferred)]);
        let nodes = names(&["a", "b", "c", "d"]);
        for since in [0, 3_000_000_000, 40_000_000_000, 90_000_000_000] {
            // What each round built before: a copy of each node's steps an evaluation reads.
            let copied: HashMap<String, BTreeSet<String>> = nodes
                .iter()
                .map(|n| {
                    let s = steps.node_steps_since(n, STEPS_READ, since);
                    let jobs = s.iter().flatten().filter_map(|s| s.job.clone()).collect();
                    (n.clone(), jobs)
                })
                .collect();
            assert_eq!(
                recent_step_jobs(&steps, &nodes, since),
                copied,
                "since {since}"
            );
        }
        let jobs = recent_step_jobs(&steps, &nodes, 0);
        assert_eq!(jobs["a"], BTreeSet::from(["j1".to_string()]));
        assert_eq!(jobs["b"], BTreeSet::from(["j3".to_string()]));
        assert!(jobs["d"].is_empty() && !jobs.contains_key("e"));
    }

    /// Nodes pushing steps a few at a time (sources switching, jobs changing, ends out of order now and
    /// then), dropping old ones (more than a node holds, and past the retention), gone and back again: the
    /// mirrors' jobs are [`recent_step_jobs`]'s at every round, whatever the window.
    #[test]
    fn step_jobs_kept_from_round_to_round_are_recent_step_jobs() {
        use crate::analysis::test_support::{hca_step, HcaFigures};
        use crate::steps::StepSource;
        let steps = StepStore::with_retention(std::time::Duration::from_secs(900));
        let all = names(&["a", "b", "c", "d"]);
        let mut kept = StepJobs::default();
        let (mut seed, mut index, mut checked) = (11u64, 0u64, 0usize);
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for round in 0..1500i64 {
            let now = round * 500_000_000;
            for (k, node) in all.iter().enumerate() {
                let batch: Vec<NodeStep> = (0..next(4) + u64::from(k == 0) * 2)
                    .map(|_| {
                        index += 1;
                        let end = now - next(3) as i64 * 400_000_000;
                        let mut s = hca_step(
                            node,
                            index,
                            (end - 300_000_000, end),
                            HcaFigures::short_burst(true),
                        );
                        s.job = match next(10) {
                            0 => None,
                            j => Some(format!("j{}", (round / 200 + j as i64 / 4) % 5)),
                        };
                        s.source = match (round / 300 + next(20) as i64 / 19) % 2 {
                            0 => StepSource::Inferred,
                            _ => StepSource::Markers,
                        };
                        s
                    })
                    .collect();
                steps.push(node, batch);
            }
            if round % 400 == 399 {
                steps.retain(&names(&["a", "b", "d"]));
            }
            let asked: Vec<String> = all
                .iter()
                .filter(|n| round % 7 != 3 || n.as_str() != "c")
                .cloned()
                .collect();
            for since in [now - 20_000_000_000, now - 2_000_000_000, 0] {
                let want = recent_step_jobs(&steps, &asked, since);
                assert_eq!(kept.recent(&steps, &asked, since), want, "round {round}");
                checked += want.values().map(BTreeSet::len).sum::<usize>();
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    #[test]
    fn jobs_sharing_a_node_are_one_scope_and_idle_nodes_the_cluster() {
        let nodes = names(&["a", "b", "c", "d", "e", "f"]);
        let jobs = vec![
            job("j1", &["a", "b"]),
            job("j2", &["b", "c"]),
            job("j3", &["d"]),
        ];
        let scopes = partition(&nodes, &jobs, &HashMap::new());
        let got: Vec<(&str, Vec<&str>, Vec<&str>, bool)> = scopes
            .iter()
            .map(|s| {
                (
                    s.label.as_str(),
                    s.jobs.iter().map(String::as_str).collect(),
                    s.nodes.iter().map(String::as_str).collect(),
                    s.cluster,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("j1", vec!["j1", "j2"], vec!["a", "b", "c"], false),
                ("j3", vec!["j3"], vec!["d"], false),
                (CLUSTER_JOB, vec![], vec!["e", "f"], true),
            ]
        );
    }

    #[test]
    fn a_conflict_or_a_step_job_joins_a_node_to_its_job() {
        let nodes = names(&["a", "b", "c"]);
        let mut j = job("j1", &["a"]);
        j.conflicts.push(FleetConflict {
            node: "b".into(),
            conflict: commwatch_model::NcclConflict {
                kind: commwatch_model::ConflictKind::MissingInterface,
                setting: "NCCL_SOCKET_IFNAME".into(),
                value: "ib9".into(),
                reason: "no such interface".into(),
            },
        });
        let mut steps = HashMap::new();
        steps.insert("c".to_string(), BTreeSet::from(["j1".to_string()]));
        let scopes = partition(&nodes, &[j], &steps);
        assert_eq!(scopes.len(), 1);
        assert_eq!(scopes[0].nodes, names(&["a", "b", "c"]));
        // A job only steps name does not make a scope of its own: its nodes stay in the cluster scope.
        let mut steps = HashMap::new();
        steps.insert("c".to_string(), BTreeSet::from(["j9".to_string()]));
        let scopes = partition(&nodes, &[job("j1", &["a"])], &steps);
        assert_eq!(scopes.len(), 2);
        assert!(scopes[1].cluster);
        assert_eq!(scopes[1].nodes, names(&["b", "c"]));
    }

    #[test]
    fn without_fleet_jobs_every_node_is_in_the_cluster_scope() {
        let scopes = partition(&names(&["b", "a"]), &[], &HashMap::new());
        assert_eq!(scopes.len(), 1);
        assert!(scopes[0].cluster);
        assert_eq!(scopes[0].nodes, names(&["a", "b"]));
        assert!(partition(&[], &[], &HashMap::new()).is_empty());
    }

    #[test]
    fn the_cluster_scope_keeps_the_fleet_jobs_ranks_but_not_their_conflicts() {
        let mut j = job("j1", &["a"]);
        j.conflicts.push(FleetConflict {
            node: "a".into(),
            conflict: commwatch_model::NcclConflict {
                kind: commwatch_model::ConflictKind::MissingInterface,
                setting: "NCCL_SOCKET_IFNAME".into(),
                value: "ib9".into(),
                reason: "no such interface".into(),
            },
        });
        let fleet = vec![j, job("j2", &["b"])];
        let scopes = partition(&names(&["a", "b", "c"]), &fleet, &HashMap::new());
        let cluster = scopes.iter().find(|s| s.cluster).expect("cluster");
        let jobs = scope_jobs(cluster, &fleet);
        assert_eq!(jobs.len(), 2);
        assert!(jobs
            .iter()
            .all(|j| j.conflicts.is_empty() && !j.ranks.is_empty()));
        let first = scopes.iter().find(|s| s.label == "j1").expect("j1");
        assert_eq!(scope_jobs(first, &fleet), vec![fleet[0].clone()]);
    }

    /// A node whose one GPU runs kernels `busy` of the time.
    fn busy_node(name: &str, busy: f64) -> NodeInput {
        NodeInput {
            name: name.into(),
            gpus: vec![crate::analysis::input::GpuInput {
                busy_share: Some(busy),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// Every candidate of `input`'s whole-fleet evaluation, and those of its scopes' evaluations, by id.
    fn both_ways(
        input: &AnalysisInput,
    ) -> (Vec<super::super::Candidate>, Vec<super::super::Candidate>) {
        let full = super::super::evaluate(input);
        let mut parts: Vec<super::super::Candidate> = split(input.clone())
            .iter()
            .flat_map(|(_, part)| super::super::evaluate(part))
            .collect();
        parts.sort_by_cached_key(|c| c.id());
        (full, parts)
    }

    #[test]
    fn scopes_add_up_to_the_fleet() {
        // Two jobs with a slow node each, a node only listing job 2 with a conflict, and two idle nodes of
        // which one is busy (with jobs known, nodes of no job form no group to compare).
        let mut j2 = job("j2", &["n4", "n5"]);
        j2.listed_by.push("n8".into());
        j2.conflicts.push(FleetConflict {
            node: "n8".into(),
            conflict: commwatch_model::NcclConflict {
                kind: commwatch_model::ConflictKind::ManagementInterface,
                setting: "NCCL_SOCKET_IFNAME".into(),
                value: "eth0".into(),
                reason: "eth0 is the management interface".into(),
            },
        });
        let busy = [
            ("n1", 0.5),
            ("n2", 0.5),
            ("n3", 0.9),
            ("n4", 0.4),
            ("n5", 0.8),
            ("n6", 0.2),
            ("n7", 0.9),
            ("n8", 0.4),
        ];
        let input = AnalysisInput {
            now_unix_ns: 20_000_000_000,
            nodes: busy.iter().map(|(n, b)| busy_node(n, *b)).collect(),
            jobs: vec![job("j1", &["n1", "n2", "n3"]), j2],
            ..Default::default()
        };
        let scopes = split(input.clone());
        assert_eq!(
            scopes
                .iter()
                .map(|(s, _)| s.label.as_str())
                .collect::<Vec<_>>(),
            ["j1", "j2", CLUSTER_JOB]
        );
        let (full, parts) = both_ways(&input);
        assert!(
            full.iter()
                .any(|c| c.kind == super::super::FindingKind::Straggler)
                && full
                    .iter()
                    .any(|c| c.kind == super::super::FindingKind::NcclMisconfiguration),
            "the fixture finds stragglers and a conflict: {full:#?}"
        );
        assert_eq!(parts, full);
        // With no job known the whole fleet is one group (and one scope).
        let jobless = AnalysisInput {
            jobs: Vec::new(),
            ..input
        };
        let (full, parts) = both_ways(&jobless);
        assert!(!full.is_empty());
        assert_eq!(parts, full);
    }
}
