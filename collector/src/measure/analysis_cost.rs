//! One node's evaluation, measured in process on a real agent's tape (`loadgen --dump-tape FILE`): the analysis
//! input rebuilt from the store's rings (`analysis::input::node_input`, the whole-fleet oracle's way) against the
//! windows kept from one evaluation to the next (`analysis::windows`, the per-job rounds' way), the rules on
//! each scope's input (`analysis::evaluate` and the jobs' figures, as a round's `apply_in`), and the tracker's
//! update of that scope, all in thread CPU per node and evaluation.
//!
//! `TAPE=FILE cargo test --release -p commwatch-collector --lib measure::analysis_cost -- --ignored --nocapture`
//! (env: `NODES` (20) copies of the tape's node, `PER_JOB` (8) nodes to a job, as `loadgen` groups them, each
//! node with one rank per GPU of its inventory; `RETENTION` seconds (300), `WARM` seconds of tape applied before
//! the first timed evaluation (60)). The tape's batches are applied in order, every node's each in turn, and
//! every 4 batches (one second of data) the step engine takes a pass (not timed) and each scope of the fleet
//! (`analysis::scope`: in practice each job with its nodes) is evaluated: each node's input both ways,
//! alternately first, and the two inputs compared (a difference fails the run: the tape is one more oracle
//! check), then the rules and the tracker on the scope's input from kept windows; `FULL=0` leaves the
//! rebuild and the comparison out (to profile the kept windows alone), `RULES=1` times each rule apart as well
//! (once more, on the same input: not in the other figures), `KEPT=0` the kept windows (then the
//! head's flush waits for no reader: the store's apply as without them). It also prints the store's apply in
//! thread CPU per sample over the same span. A figure, not a check of speed: it never fails because the
//! machine is slow.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use commwatch_proto::v1 as pb;

use super::apply_cost::{env, tape_nodes, thread_cpu_ns};
use crate::analysis::input::{node_input, AnalysisInput, NodeInput, STEPS_READ, WINDOW_NS};
use crate::analysis::scope::{self, Scope};
use crate::analysis::tracker::Tracker;
use crate::analysis::windows::WindowCache;
use crate::steps::engine::Engine;
use crate::steps::StepStore;
use crate::store::{JobList, NodeRef, Store};

/// Thread CPU, ns, of `f`, and what it returned.
fn timed<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let cpu0 = thread_cpu_ns();
    let r = f();
    (thread_cpu_ns() - cpu0, r)
}

/// Gives the nodes jobs as `loadgen` does: `per_job` nodes to a job, each node one rank per GPU of its
/// inventory (8 where it lists none), ranks numbered across the job.
pub(super) fn give_jobs(store: &Store, refs: &[NodeRef], per_job: usize) {
    for (i, node) in refs.iter().enumerate() {
        let gpus: BTreeSet<String> = node
            .lock()
            .links()
            .iter()
            .filter_map(|l| l.link.gpu.clone())
            .collect();
        let gpus: Vec<String> = if gpus.is_empty() {
            (0..8).map(|g| g.to_string()).collect()
        } else {
            gpus.into_iter().collect()
        };
        let per_node = gpus.len() as u32;
        let offset = (i % per_job) as u32 * per_node;
        let ranks = gpus
            .iter()
            .enumerate()
            .map(|(k, g)| pb::Rank {
                pid: 1000 + k as u32,
                rank: Some(offset + k as u32),
                local_rank: Some(k as u32),
                world_size: Some(per_node * per_job as u32),
                gpus: vec![g.clone()],
                found_by: "environment".into(),
                ..Default::default()
            })
            .collect();
        let inv = pb::JobInventory {
            jobs: vec![pb::Job {
                id: format!("tape-job-{:03}", i / per_job),
                ranks,
                conflicts: Vec::new(),
            }],
        };
        let list = JobList::validated(inv, store.limits()).expect("a valid job list");
        store.set_jobs(node, list);
    }
}

/// The fleet's scopes at `now`, cut as a round cuts them from the fleet `jobs` (which a round merges again
/// only when a job list changed, and whose nodes' step jobs it keeps in `step_jobs`), and the thread CPU, ns,
/// of the cut.
fn scopes_at(
    store: &Store,
    steps: &StepStore,
    step_jobs: &mut scope::StepJobs,
    jobs: &[crate::jobs::FleetJob],
    now: i64,
) -> (u64, Vec<Scope>) {
    let names = store.node_names(now);
    timed(|| {
        let step_jobs = step_jobs.recent(steps, &names, now - WINDOW_NS);
        scope::partition(&names, jobs, &step_jobs)
    })
}

/// Thread CPU, ns, summed over the timed evaluations.
#[derive(Default)]
struct Spent {
    full: u64,
    kept: u64,
    rules: u64,
    tracker: u64,
    /// The rounds' cuts of the fleet into scopes (each node's jobs from its steps, the partition).
    scopes: u64,
    /// Node evaluations timed, and the candidates and changes they gave.
    nodes: u64,
    candidates: u64,
    changes: u64,
    /// With `RULES=1`: each rule's own thread CPU (run once more on each scope's input, apart), and the
    /// candidates it gave.
    by_rule: Vec<(u64, u64)>,
}

/// Whether to build each node's input from the rings (the oracle) and from the kept windows.
#[derive(Clone, Copy)]
struct Ways {
    full: bool,
    kept: bool,
    /// Each rule timed apart too (`RULES=1`).
    by_rule: bool,
}

/// One scope's evaluation at `now`: each node's input both ways (compared), the rules, the tracker.
#[allow(clippy::too_many_arguments)]
fn evaluate_scope(
    refs: &HashMap<String, NodeRef>,
    steps: &StepStore,
    s: &Scope,
    jobs: &[crate::jobs::FleetJob],
    now: i64,
    ways: Ways,
    cache: &mut WindowCache,
    tracker: &mut Tracker,
    mut spent: Option<&mut Spent>,
) {
    let since = now - WINDOW_NS;
    let (mut full_ns, mut kept_ns) = (0, 0);
    let mut nodes: Vec<NodeInput> = Vec::with_capacity(s.nodes.len());
    for (k, name) in s.nodes.iter().enumerate() {
        let Some(node) = refs.get(name) else { continue };
        let n = node.lock();
        let full = || ways.full.then(|| node_input(&n, since));
        let kept = || {
            ways.kept.then(|| {
                let mut i = cache.input(&n, since);
                i.steps = steps
                    .node_steps_since(name, STEPS_READ, since)
                    .unwrap_or_default();
                i
            })
        };
        let ((f, full), (kn, kept)) = if k % 2 == 0 {
            let full = timed(full);
            (full, timed(kept))
        } else {
            let kept = timed(kept);
            (timed(full), kept)
        };
        let full = full.map(|mut i| {
            i.steps = steps
                .node_steps_since(name, STEPS_READ, since)
                .unwrap_or_default();
            i
        });
        if let (Some(kept), Some(full)) = (&kept, &full) {
            assert_eq!(kept, full, "{name}: the inputs differ at {now}");
        }
        (full_ns, kept_ns) = (full_ns + f, kept_ns + kn);
        nodes.extend(kept.or(full));
    }
    let input = AnalysisInput {
        now_unix_ns: now,
        nodes,
        jobs: scope::scope_jobs(s, jobs),
        ..Default::default()
    };
    let (r, cands) = timed(|| {
        let figures = crate::analysis::scaling::job_figures(&input);
        (crate::analysis::evaluate_keyed(&input), figures)
    });
    let candidates = cands.0.len() as u64;
    if let Some(sp) = spent.as_deref_mut().filter(|_| ways.by_rule) {
        sp.by_rule.resize(crate::analysis::RULES.len(), (0, 0));
        for (k, (_, rule)) in crate::analysis::RULES.iter().enumerate() {
            let (ns, found) = timed(|| rule(&input));
            sp.by_rule[k].0 += ns;
            sp.by_rule[k].1 += found.len() as u64;
        }
    }
    let (t, changes) = timed(|| tracker.update_scope_keyed(now as f64 / 1e9, &s.label, cands.0));
    if let Some(sp) = spent {
        sp.full += full_ns;
        sp.kept += kept_ns;
        sp.rules += r;
        sp.tracker += t;
        sp.nodes += input.nodes.len() as u64;
        sp.candidates += candidates;
        sp.changes += changes.len() as u64;
    }
    // As the rounds do: the next inputs are built into these ones' allocations.
    cache.give_back(input.nodes);
}

#[test]
#[ignore = "a measurement: run with --release --ignored --nocapture and TAPE=FILE"]
fn analysis_cost() {
    let retention = Duration::from_secs(env("RETENTION", 300) as u64);
    let warm_ns = env("WARM", 60) as i64 * 1_000_000_000;
    let (store, refs, batches) = tape_nodes(env("NODES", 20), retention);
    give_jobs(&store, &refs, env("PER_JOB", 8).max(1));
    let t0 = batches[0].timestamps_unix_ns[0];
    let ways = Ways {
        full: env("FULL", 1) != 0,
        kept: env("KEPT", 1) != 0,
        by_rule: env("RULES", 0) != 0,
    };
    let by_name: HashMap<String, NodeRef> = refs
        .iter()
        .map(|r| (r.lock().name().to_string(), r.clone()))
        .collect();
    let steps = Arc::new(StepStore::new());
    let passes = crate::telemetry::Passes::new().expect("pass metrics");
    let mut engine = Engine::new(store.clone(), steps.clone(), passes);
    let (mut cache, mut tracker) = (WindowCache::default(), Tracker::new());
    let (mut scratch, mut spent, mut evaluations) = (Vec::new(), Spent::default(), 0u64);
    let (mut apply_ns, mut samples) = (0u64, 0u64);
    let mut step_jobs = scope::StepJobs::default();
    for (i, b) in batches.iter().enumerate() {
        let now = b.timestamps_unix_ns.last().copied().unwrap_or(0);
        let (ns, _) = timed(|| {
            for node in &refs {
                node.lock()
                    .apply_batch(b, now, &mut scratch)
                    .expect("apply");
            }
        });
        let timing = now - t0 >= warm_ns;
        if timing {
            apply_ns += ns;
            samples += (b.values.len() * refs.len()) as u64;
        }
        if i % 4 != 3 {
            continue;
        }
        engine.tick(now);
        let jobs = crate::jobs::fleet_jobs(&store, now);
        let (cut, scopes) = scopes_at(&store, &steps, &mut step_jobs, &jobs, now);
        if timing {
            spent.scopes += cut;
        }
        for s in &scopes {
            let sp = timing.then_some(&mut spent);
            evaluate_scope(
                &by_name,
                &steps,
                s,
                &jobs,
                now,
                ways,
                &mut cache,
                &mut tracker,
                sp,
            );
        }
        evaluations += u64::from(timing);
    }
    report(
        &spent,
        evaluations,
        warm_ns,
        &cache,
        &tracker,
        apply_ns,
        samples,
    );
}

/// Prints the figures of a run.
fn report(
    spent: &Spent,
    evaluations: u64,
    warm_ns: i64,
    cache: &WindowCache,
    tracker: &Tracker,
    apply_ns: u64,
    samples: u64,
) {
    let per = |ns: u64| ns as f64 / spent.nodes.max(1) as f64 / 1e3;
    let (kept_samples, bytes) = cache.memory();
    let (derived, copied) = cache.link_derivations();
    let (periods, shared) = cache.link_periods();
    let nodes = (spent.nodes / evaluations.max(1)).max(1);
    println!(
        "{nodes} nodes, {evaluations} evaluations of each after {} s of tape: input from the rings {:.1} us of \
         thread CPU per node, from kept windows {:.1} us ({:.1}x less); the rules {:.1} us per node, the \
         tracker {:.1} us; kept input + rules + tracker {:.1} us per node; the round's cut into scopes {:.1} us \
         per node; {:.1} candidates and {:.1} changes \
         per node evaluated, {} findings active at the end; windows kept: {} samples, {:.1} KB per node; links' \
         intervals kept {derived} times, copied {copied} times, their median interval worked out \
         {periods} times, taken from a link of the same ticks {shared} times; the store's apply {:.1} ns per \
         sample",
        warm_ns / 1_000_000_000,
        per(spent.full),
        per(spent.kept),
        spent.full as f64 / spent.kept.max(1) as f64,
        per(spent.rules),
        per(spent.tracker),
        per(spent.kept + spent.rules + spent.tracker),
        per(spent.scopes),
        spent.candidates as f64 / spent.nodes.max(1) as f64,
        spent.changes as f64 / spent.nodes.max(1) as f64,
        tracker.active().len(),
        kept_samples / nodes as usize,
        bytes as f64 / nodes as f64 / 1e3,
        apply_ns as f64 / samples.max(1) as f64,
    );
    for ((name, _), (ns, found)) in crate::analysis::RULES.iter().zip(&spent.by_rule) {
        println!(
            "  rule {name}: {:.1} us per node, {:.2} candidates per node",
            per(*ns),
            *found as f64 / spent.nodes.max(1) as f64
        );
    }
}
