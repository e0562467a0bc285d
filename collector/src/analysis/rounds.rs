//! Evaluation by scope, on arrival, within a budget: the analysis thread cuts the fleet into scopes
//! ([`super::super::scope`]: the parts the rules never compare across, in practice each job with its nodes;
//! again every quarter of the interval, or at once when a node's job list changed), wakes when the next scope
//! falls due (at most [`WAKES_PER_INTERVAL`] times an interval), and evaluates each scope whose last
//! evaluation is an interval old — those whose nodes brought data since first, oldest first — on an input of
//! that scope's nodes only. A fleet's findings are then each as old as their own job's last evaluation, not
//! the whole fleet's pass.
//!
//! The evaluation's share of the CPU is guaranteed, not what the ingest leaves: the configuration's
//! `analysis_share` of a core ([`crate::config::DEFAULT_ANALYSIS_SHARE`] by default). The thread runs at the
//! nice value whose scheduler weight gives it that share against one busy ingest thread at nice 0
//! ([`crate::pace::nice_for_share`]: nice 5 for a quarter) and is held to that share by a budget of CPU time
//! ([`Budget`]); the ingest has the rest, and comes first when both want the core (at the ingest's own priority, the analysis's
//! bursts delayed acks: at 100 demo nodes on a loaded machine ack p99 went from 0.25–0.59 s to 1.1–1.4 s). Under `SCHED_IDLE` a busy ingest starved the rules (at 800 demo nodes on one core, no
//! evaluation in 90 s: BENCHMARKS.md, "Fresh findings under load"). A collector that cannot evaluate its fleet
//! within that share says so: `commwatch_collector_evaluation_age_seconds` per job, a warning in its log (at
//! start when the nodes it restored already cannot fit, then whenever a job's findings fall two intervals
//! behind), and the `CommwatchCollectorAnalysisLagging` alert.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_model::clock::unix_now_ns;
use tokio::sync::watch;
use tracing::{info, warn};

use super::super::input::{self, JobInput, WINDOW_NS};
use super::super::scope::{self, Scope};
use super::super::windows::WindowCache;
use super::AnalysisHandle;
use crate::pace::{nice_for_share, thread_cpu_ns, Budget, PassThread, Yield};
use crate::store::Store;

/// CPU time of one node's evaluation assumed before any was measured, for the warning at start: the demo
/// node's with its rule inputs kept between evaluations, 0.87–1.01 ms at 400 demo nodes (BENCHMARKS.md, "Rule
/// inputs kept as samples arrive").
pub const ASSUMED_NODE_COST: Duration = Duration::from_micros(1_000);
/// A job's findings this many intervals old (or more) means the evaluation does not keep up: warned.
pub const LAGGING_INTERVALS: f64 = 2.0;
/// Warnings that the evaluation does not keep up come at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);
/// The fleet is partitioned again (and the scopes gone are swept) this many times an interval, and the thread
/// wakes at least as often.
const ROUNDS_PER_INTERVAL: u32 = 4;
/// The thread wakes for a scope falling due at most this many times an interval: the scopes due within one
/// such slice are evaluated in one round. A job's findings are then at most the gap (seven eighths of the
/// interval) and a slice older than the interval is, plus its evaluation's own time, where a fixed wake every
/// quarter left them up to 1.1 s old at the default 1 s (p99 of the age 1.01–1.09 s at 400 demo nodes).
const WAKES_PER_INTERVAL: u32 = 32;

/// When one scope was last evaluated.
#[derive(Debug, Clone, Copy)]
struct Evaluated {
    /// The evaluation's time (the end of its windows), Unix ns.
    at_ns: i64,
    /// The newest data of the scope's nodes then (their last batch's receipt), Unix ns.
    data_ns: i64,
}

/// The analysis thread's view of the fleet between rounds.
pub(super) struct Rounds {
    jobs_changed: watch::Receiver<u64>,
    /// The nodes and fleet jobs of the last round: the jobs are merged again only when a node's job list
    /// changed ([`Store::jobs_changed`]) or the nodes did.
    names: Vec<String>,
    jobs: Arc<Vec<JobInput>>,
    version: Option<u64>,
    last: HashMap<String, Evaluated>,
    /// CPU time of a node's evaluation (input, rules, tracker), smoothed over the scopes evaluated, ns.
    node_cost_ns: Option<f64>,
    warned: Option<Instant>,
    /// Each node's windows kept from one evaluation to the next: an evaluation reads only what is new.
    windows: WindowCache,
    /// The fleet as last partitioned, reused by the rounds between two partitions.
    view: Option<View>,
    /// Whether a scope was evaluated since the last sweep of gone scopes (the jobs' references are then
    /// renewed).
    evaluated: bool,
    /// Whether the nodes changed since the kept windows were last swept of the nodes gone.
    names_changed: bool,
    /// A number for `names`, changed whenever they do (the collectives stage's walk over them is skipped while
    /// it and the records applied stay the same: `CollectiveStage::update_listed`).
    names_version: u64,
    /// Each scope's jobs as its input carries them ([`scope::scope_jobs`]), by label: cut again only when the
    /// fleet jobs or the scope's jobs changed, lent to each evaluation's input and taken back (a copy of every
    /// job's ranks at each evaluation, and its drop, were a fifth of the round's own cost).
    scope_jobs: HashMap<String, ScopeJobs>,
    /// Each node's held steps' jobs, mirrored from one partition to the next: a partition reads only the
    /// steps pushed since ([`scope::StepJobs`]).
    step_jobs: scope::StepJobs,
}

/// One scope's jobs as its input carries them, and what they were cut from.
struct ScopeJobs {
    /// The fleet jobs they were cut from (compared by pointer: merged again means changed).
    fleet: Arc<Vec<JobInput>>,
    /// The scope's fleet jobs and kind then.
    jobs: Vec<String>,
    cluster: bool,
    /// The input's jobs; empty while lent to an evaluation.
    input: Vec<JobInput>,
}

/// The fleet's nodes, jobs and scopes as partitioned at `at_ns`: a round on arrival partitions again only
/// when the view is a [`ROUNDS_PER_INTERVAL`]th of an interval old or the nodes' job lists changed (a partition reads
/// every node's recent steps: done every time, it would cost as much as the evaluations between them).
struct View {
    at_ns: i64,
    jobs: Arc<Vec<JobInput>>,
    scopes: Vec<Scope>,
}

/// What every scope's input of one round shares, lent to each scope's input in turn (moved in and taken back,
/// not copied); the collectives of a job go to its scope's input for good (a round evaluates a scope once).
struct Fleet {
    extras: input::Extras,
    collectives: Vec<crate::collectives::JobCollectives>,
    probes: Vec<super::super::link_probes::ProbeBaseline>,
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RoundReport {
    /// Scopes evaluated, and their nodes.
    pub scopes: usize,
    pub nodes: usize,
    /// Scopes due but left for a later round (the budget was spent).
    pub left: usize,
    /// The oldest evaluation among the fleet's scopes after the round, seconds before `now`.
    pub oldest_age_s: f64,
    /// Nodes in the fleet.
    pub fleet_nodes: usize,
    /// When the next scope falls due on arrival, Unix ns (`i64::MIN`: one is due now; `i64::MAX`: none).
    pub next_due_unix_ns: i64,
    /// CPU time of the scopes' evaluations (each one's input, rules and tracker), summed: the rest of the
    /// round's own time is what it costs to cut the fleet and lend the scopes what they share.
    pub scopes_cpu: Duration,
}

impl Rounds {
    pub(super) fn new(store: &Store) -> Rounds {
        Rounds {
            jobs_changed: store.jobs_changed(),
            names: Vec::new(),
            jobs: Arc::new(Vec::new()),
            version: None,
            last: HashMap::new(),
            node_cost_ns: None,
            warned: None,
            windows: WindowCache::default(),
            view: None,
            evaluated: false,
            names_changed: true,
            names_version: 0,
            scope_jobs: HashMap::new(),
            step_jobs: scope::StepJobs::default(),
        }
    }

    /// Whether `view` must be partitioned again at `now_unix_ns`: `every_ns` old, or a node's job list changed.
    fn view_stale(&self, view: &View, now_unix_ns: i64, every_ns: i64) -> bool {
        now_unix_ns - view.at_ns >= every_ns || self.jobs_changed.has_changed().unwrap_or(true)
    }

    /// The fleet jobs for `names` at `now_unix_ns`, merged again only when needed.
    fn jobs(&mut self, store: &Store, names: &[String], now_unix_ns: i64) -> Arc<Vec<JobInput>> {
        let version = *self.jobs_changed.borrow_and_update();
        let names_changed = self.names != names;
        if self.version != Some(version) || names_changed {
            self.jobs = Arc::new(crate::jobs::fleet_jobs(store, now_unix_ns));
            self.version = Some(version);
        }
        if names_changed {
            self.names = names.to_vec();
            self.names_changed = true;
            self.names_version += 1;
        }
        self.jobs.clone()
    }

    /// Lends `s`'s jobs for its input ([`scope::scope_jobs`] of `fleet`), cut again only when `fleet` or the
    /// scope's jobs changed since they were cut; [`Rounds::take_back_jobs`] takes them back.
    fn lend_jobs(&mut self, s: &Scope, fleet: &Arc<Vec<JobInput>>) -> Vec<JobInput> {
        match self.scope_jobs.get_mut(&s.label) {
            Some(k)
                if Arc::ptr_eq(&k.fleet, fleet)
                    && k.cluster == s.cluster
                    && k.jobs == s.jobs
                    && !k.input.is_empty() =>
            {
                std::mem::take(&mut k.input)
            }
            _ => scope::scope_jobs(s, fleet),
        }
    }

    /// Keeps `jobs` (lent by [`Rounds::lend_jobs`] for `s`, cut from `fleet`) for the scope's next input.
    fn take_back_jobs(&mut self, s: &Scope, fleet: &Arc<Vec<JobInput>>, jobs: Vec<JobInput>) {
        match self.scope_jobs.get_mut(&s.label) {
            Some(k) => {
                if !Arc::ptr_eq(&k.fleet, fleet) {
                    k.fleet = fleet.clone();
                }
                if k.jobs != s.jobs {
                    k.jobs.clone_from(&s.jobs);
                }
                k.cluster = s.cluster;
                k.input = jobs;
            }
            None => {
                let k = ScopeJobs {
                    fleet: fleet.clone(),
                    jobs: s.jobs.clone(),
                    cluster: s.cluster,
                    input: jobs,
                };
                self.scope_jobs.insert(s.label.clone(), k);
            }
        }
    }
}

impl AnalysisHandle {
    /// One round at `now_unix_ns`: every scope due (with `budget`: data newer than its last evaluation, an
    /// interval since it, oldest first, while the budget lasts; without: every scope), then the scopes that are
    /// gone are swept and the jobs' references renewed.
    pub(crate) fn round_at(
        &self,
        now_unix_ns: i64,
        mut budget: Option<&mut Budget>,
    ) -> RoundReport {
        let inner = &self.inner;
        let mut rounds = inner.rounds.lock();
        let on_arrival = budget.is_some();
        let kept = rounds
            .view
            .take()
            .filter(|v| on_arrival && !rounds.view_stale(v, now_unix_ns, self.repartition_ns()));
        let swept = kept.is_none();
        let view = kept.unwrap_or_else(|| self.partition(&mut rounds, now_unix_ns));
        let (jobs, scopes) = (&view.jobs, &view.scopes);
        let due = self.due(&rounds, scopes, now_unix_ns, on_arrival);
        let mut report = RoundReport {
            fleet_nodes: scopes.iter().map(|s| s.nodes.len()).sum(),
            ..Default::default()
        };
        if !due.is_empty() {
            // The nodes of the view: a node newer than the partition is in no scope yet.
            let names = &rounds.names;
            let mut fleet = Fleet {
                extras: self.extras_now(),
                collectives: crate::collectives::job_summaries_of(
                    &inner.collectives,
                    &inner.store,
                    (names, rounds.names_version),
                ),
                probes: self.probe_baselines(),
            };
            for (k, (s, data_ns)) in due.iter().enumerate() {
                if budget.as_ref().is_some_and(|b| !b.available()) {
                    report.left = due.len() - k;
                    break;
                }
                // On arrival each scope is evaluated as of its own start (a round may take a while); a round
                // at a given time (the oracle, a virtual clock) evaluates every scope at that time.
                let at_ns = match budget {
                    Some(_) => unix_now_ns().max(now_unix_ns),
                    None => now_unix_ns,
                };
                let at = Evaluated {
                    at_ns,
                    data_ns: *data_ns,
                };
                let lent = rounds.lend_jobs(s, jobs);
                let (cost, lent) =
                    self.evaluate_scope(s, &mut fleet, lent, at_ns, &mut rounds.windows);
                rounds.take_back_jobs(s, jobs, lent);
                if let Some(b) = budget.as_deref_mut() {
                    b.charge(cost);
                }
                rounds.note_cost(cost, s.nodes.len());
                report.scopes_cpu += cost;
                rounds.last.insert(s.label.clone(), at);
                report.scopes += 1;
                report.nodes += s.nodes.len();
            }
        }
        rounds.evaluated |= report.scopes > 0;
        if swept {
            let evaluated = std::mem::take(&mut rounds.evaluated);
            self.end_round(&mut rounds, scopes, now_unix_ns, evaluated);
        }
        report.next_due_unix_ns = self.next_due_ns(&rounds, scopes);
        report.oldest_age_s = scopes
            .iter()
            .map(|s| {
                rounds
                    .last
                    .get(&s.label)
                    .map_or(f64::INFINITY, |e| (now_unix_ns - e.at_ns) as f64 / 1e9)
            })
            .fold(0.0, f64::max);
        rounds.view = Some(view);
        report
    }

    /// Partitions the fleet at `now_unix_ns` into the scopes evaluated on their own (reading every node's
    /// recent steps for the jobs they ran).
    fn partition(&self, rounds: &mut Rounds, now_unix_ns: i64) -> View {
        let inner = &self.inner;
        let names = inner.store.node_names(now_unix_ns);
        let since = now_unix_ns - WINDOW_NS;
        let step_jobs = rounds.step_jobs.recent(&inner.steps, &names, since);
        let jobs = rounds.jobs(&inner.store, &names, now_unix_ns);
        let scopes = scope::partition(&names, &jobs, &step_jobs);
        View {
            at_ns: now_unix_ns,
            jobs,
            scopes,
        }
    }

    /// How often the fleet is partitioned again on arrival, ns.
    fn repartition_ns(&self) -> i64 {
        (self.inner.interval / ROUNDS_PER_INTERVAL).as_nanos() as i64
    }

    /// Time after its last evaluation at which a scope falls due on arrival: the interval less an eighth
    /// (so that a round a little late does not push it a whole interval), ns.
    fn gap_ns(&self) -> i64 {
        self.inner.interval.as_nanos() as i64 * 7 / 8
    }

    /// When the first of `scopes` falls due on arrival, Unix ns: `i64::MIN` when one never was evaluated,
    /// `i64::MAX` without scopes.
    fn next_due_ns(&self, rounds: &Rounds, scopes: &[Scope]) -> i64 {
        let gap = self.gap_ns();
        scopes
            .iter()
            .map(|s| {
                rounds
                    .last
                    .get(&s.label)
                    .map_or(i64::MIN, |e| e.at_ns.saturating_add(gap))
            })
            .min()
            .unwrap_or(i64::MAX)
    }

    /// Evaluates one scope at `now_unix_ns` on an input of its nodes, its `jobs` ([`scope::scope_jobs`]) and
    /// what `fleet` lends it; returns what it cost (the thread's CPU time, else the wall time) and the jobs.
    fn evaluate_scope(
        &self,
        s: &Scope,
        fleet: &mut Fleet,
        jobs: Vec<JobInput>,
        now_unix_ns: i64,
        windows: &mut WindowCache,
    ) -> (Duration, Vec<JobInput>) {
        let inner = &self.inner;
        let (started, cpu0) = (Instant::now(), thread_cpu_ns());
        let labels = s.job_labels();
        use std::mem::take;
        let (mine, rest): (Vec<_>, Vec<_>) = take(&mut fleet.collectives)
            .into_iter()
            .partition(|c| labels.contains(&c.job.as_str()));
        fleet.collectives = rest;
        let input = input::AnalysisInput {
            now_unix_ns,
            nodes: input::build_nodes(
                &inner.store,
                &inner.steps,
                &inner.passes,
                now_unix_ns,
                &s.nodes,
                |n, since| windows.input(n, since),
            ),
            jobs,
            bare_baselines: take(&mut fleet.extras.bare_baselines),
            throughput_baselines: take(&mut fleet.extras.throughput_baselines),
            job_references: take(&mut fleet.extras.job_references),
            collectives: mine,
            probes: take(&mut fleet.probes),
            probe_index: Default::default(),
        };
        self.apply_in(&input, started, Some(s));
        windows.give_back(input.nodes);
        fleet.extras = input::Extras {
            bare_baselines: input.bare_baselines,
            throughput_baselines: input.throughput_baselines,
            job_references: input.job_references,
        };
        fleet.probes = input.probes;
        let cost = match (cpu0, thread_cpu_ns()) {
            (Some(a), Some(b)) => Duration::from_nanos(b.saturating_sub(a)),
            _ => started.elapsed(),
        };
        (cost, input.jobs)
    }

    /// The scopes to evaluate now with the newest data of their nodes; `on_arrival`: those an interval (less an
    /// eighth) since their last evaluation, the ones whose nodes brought data since first, each group oldest
    /// evaluation first.
    fn due<'a>(
        &self,
        rounds: &Rounds,
        scopes: &'a [Scope],
        now_unix_ns: i64,
        on_arrival: bool,
    ) -> Vec<(&'a Scope, i64)> {
        let gap = self.gap_ns();
        let mut due: Vec<(&Scope, i64, (bool, i64))> = scopes
            .iter()
            .filter_map(|s| {
                let last = rounds.last.get(&s.label);
                if on_arrival && last.is_some_and(|e| now_unix_ns - e.at_ns < gap) {
                    return None;
                }
                let data = s
                    .nodes
                    .iter()
                    .filter_map(|n| self.inner.store.with_node(n, |n| n.last_seen_unix_ns()))
                    .max()
                    .unwrap_or(0);
                // New data first; a scope without any is still evaluated each interval, as the whole-fleet
                // pass did: the tracker's hysteresis counts evaluations, so a finding whose nodes went quiet
                // (a job list sent once, a node that stopped sending) still raises and clears in time.
                let fresh = last.is_none_or(|e| data > e.data_ns);
                Some((s, data, (!fresh, last.map_or(i64::MIN, |e| e.at_ns))))
            })
            .collect();
        due.sort_by_key(|(_, _, order)| *order);
        due.into_iter().map(|(s, data, _)| (s, data)).collect()
    }

    /// After a round: the findings of scopes that are gone count a miss (and clear in time), what is kept per
    /// scope or job is dropped for those gone, and the jobs' references are renewed when anything was
    /// evaluated.
    fn end_round(&self, rounds: &mut Rounds, scopes: &[Scope], now_unix_ns: i64, evaluated: bool) {
        let now = now_unix_ns as f64 / 1e9;
        let live: HashSet<&str> = scopes.iter().map(|s| s.label.as_str()).collect();
        rounds.last.retain(|l, _| live.contains(l.as_str()));
        rounds.scope_jobs.retain(|l, _| live.contains(l.as_str()));
        // Every node of the view is in one of its scopes: the kept windows are swept when the nodes changed.
        if std::mem::take(&mut rounds.names_changed) {
            let Rounds { windows, names, .. } = &mut *rounds;
            windows.retain(names);
        }
        let jobs: HashSet<&str> = scopes.iter().flat_map(Scope::job_labels).collect();
        let (events, to_history) = {
            let mut st = self.inner.state.lock();
            let changes = st.tracker.sweep_scopes(now, &live);
            st.job_nodes.retain(|l, _| live.contains(l.as_str()));
            st.evaluated_at.retain(|j, _| jobs.contains(j.as_str()));
            st.figures.retain(|f| jobs.contains(f.job.as_str()));
            if evaluated {
                st.extras.job_references = st.trends.references(now);
                st.evaluations += 1;
            }
            super::events(&mut st.tracker, changes)
        };
        self.publish(events, to_history, Vec::new(), now);
    }

    /// Evaluates on arrival, scope by scope, within `share` of a core ([`Budget`]), on a thread of its own at
    /// the nice value that gives it that share against a busy ingest ([`nice_for_share`]), so the share holds
    /// while the ingest wins each contended moment. Runs until the future is dropped.
    pub async fn run(self, share: f64) {
        let nice = nice_for_share(share);
        let thread = match PassThread::start_with("commwatch-analysis", Yield::Share(share)) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                warn!(error = %e, "could not start the analysis thread; nothing is evaluated");
                return;
            }
        };
        let interval = self.inner.interval;
        self.warn_at_start(share, nice);
        let wakes = Wakes::of(interval);
        let mut budget = Budget::new(share, interval);
        loop {
            let h = self.clone();
            let round = thread
                .run(move || {
                    budget.refill(Instant::now());
                    let r = h.round_at(unix_now_ns(), Some(&mut budget));
                    (r, budget)
                })
                .await;
            let wait = match round {
                Ok((report, b)) => {
                    budget = b;
                    self.check_fit(&report, share);
                    budget
                        .wait()
                        .max(wakes.until(report.next_due_unix_ns, unix_now_ns()))
                }
                Err(e) => {
                    warn!(error = %e, "analysis evaluation failed");
                    budget = Budget::new(share, interval);
                    interval
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Warns when the nodes restored at start would already cost more than the evaluation's budget (`share` of
    /// a core) at [`ASSUMED_NODE_COST`], and says what the budget is and the thread's `nice` value.
    fn warn_at_start(&self, share: f64, nice: i32) {
        let nodes = self.inner.store.node_names(unix_now_ns()).len();
        let interval = self.inner.interval;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let fits = (interval.as_secs_f64() * share / ASSUMED_NODE_COST.as_secs_f64()) as usize;
        info!(
            share_of_a_core = share,
            nice,
            cores,
            interval_s = interval.as_secs_f64(),
            "analysis: evaluates each job on arrival within its share of a core; the ingest has the rest"
        );
        if nodes > fits {
            warn!(nodes, fits, interval_s = interval.as_secs_f64(), share_of_a_core = share,
                "analysis: the nodes restored at start cost more than the evaluation's share of a core at the \
                 cost assumed per node: findings will be older than the interval; give the collector a shard \
                 of fewer nodes (commwatch_collector_evaluation_age_seconds says how old)");
        }
    }

    /// Warns (at most every [`WARN_EVERY`]) when a round left scopes due or a job's findings are
    /// [`LAGGING_INTERVALS`] intervals old, with the measured cost per node and what would fit in `share` of
    /// a core.
    fn check_fit(&self, report: &RoundReport, share: f64) {
        let interval = self.inner.interval.as_secs_f64();
        if report.left == 0 && report.oldest_age_s < LAGGING_INTERVALS * interval {
            return;
        }
        let mut rounds = self.inner.rounds.lock();
        if rounds.warned.is_some_and(|t| t.elapsed() < WARN_EVERY) {
            return;
        }
        rounds.warned = Some(Instant::now());
        let cost_us = rounds.node_cost_ns.unwrap_or(0.0) / 1e3;
        let fits = if cost_us > 0.0 {
            (interval * share * 1e6 / cost_us) as usize
        } else {
            0
        };
        warn!(
            nodes = report.fleet_nodes,
            oldest_findings_s = report.oldest_age_s,
            left_for_later = report.left,
            cpu_us_per_node = cost_us,
            nodes_that_fit = fits,
            share_of_a_core = share,
            "analysis: the collector cannot evaluate every job within its interval and share of a core; give \
             it more CPU or fewer nodes (more shards)"
        );
    }
}

/// How long the analysis thread sleeps between rounds: until the next scope falls due, within bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Wakes {
    /// The shortest sleep: scopes falling due within it wait for one round.
    soonest: Duration,
    /// The longest: the fleet is partitioned again this often.
    latest: Duration,
}

impl Wakes {
    fn of(interval: Duration) -> Wakes {
        Wakes {
            soonest: (interval / WAKES_PER_INTERVAL).max(Duration::from_millis(5)),
            latest: (interval / ROUNDS_PER_INTERVAL).max(Duration::from_millis(10)),
        }
    }

    /// The sleep from `now_unix_ns` to `due_unix_ns` (the next scope's due time), within the bounds.
    fn until(&self, due_unix_ns: i64, now_unix_ns: i64) -> Duration {
        let ns = due_unix_ns.saturating_sub(now_unix_ns).max(0) as u64;
        Duration::from_nanos(ns).clamp(self.soonest, self.latest)
    }
}

impl Rounds {
    /// Smooths the CPU time of a node's evaluation with that of one scope of `nodes` nodes.
    fn note_cost(&mut self, cost: Duration, nodes: usize) {
        if nodes == 0 {
            return;
        }
        let per = cost.as_nanos() as f64 / nodes as f64;
        self.node_cost_ns = Some(self.node_cost_ns.map_or(per, |c| 0.9 * c + 0.1 * per));
    }
}

/// Each job's age at `now_unix_ns`: seconds since the data its findings were last evaluated on.
pub(super) fn ages(
    evaluated_at: &std::collections::BTreeMap<String, i64>,
    now_unix_ns: i64,
) -> Vec<(String, f64)> {
    evaluated_at
        .iter()
        .map(|(j, at)| (j.clone(), ((now_unix_ns - at) as f64 / 1e9).max(0.0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::AnalysisConfig;
    use crate::steps::StepStore;
    use crate::store::{Hello, Inventory};
    use crate::telemetry::Passes;

    const MS: i64 = 1_000_000;

    #[test]
    fn the_thread_sleeps_until_the_next_scope_falls_due_within_bounds() {
        let w = Wakes::of(Duration::from_secs(1));
        let (soonest, latest) = (Duration::from_micros(31_250), Duration::from_millis(250));
        assert_eq!((w.soonest, w.latest), (soonest, latest));
        let now = 1_700_000_000_000_000_000;
        assert_eq!(w.until(now + 100 * MS, now), Duration::from_millis(100));
        assert_eq!(w.until(now + 2_000 * MS, now), latest);
        assert_eq!(w.until(now + MS, now), soonest);
        // One never evaluated is due now; without scopes the thread still looks every quarter interval.
        assert_eq!(w.until(i64::MIN, now), soonest);
        assert_eq!(w.until(i64::MAX, now), latest);
        // Short intervals keep a floor.
        let w = Wakes::of(Duration::from_millis(40));
        assert_eq!(
            (w.soonest, w.latest),
            (Duration::from_millis(5), Duration::from_millis(10))
        );
    }

    fn hello(node: &str) -> Hello {
        Hello {
            node: node.into(),
            agent_version: "t".into(),
            boot_id: "b".into(),
            instance_id: 1,
            inventory: Inventory::default(),
            fast_period_ms: 50,
            slow_period_ms: 1000,
            blind: Vec::new(),
        }
    }

    /// A fleet job `id` with one rank on each of `nodes`.
    fn fleet_job(id: &str, nodes: &[&str]) -> JobInput {
        JobInput {
            id: id.into(),
            listed_by: nodes.iter().map(|n| n.to_string()).collect(),
            ranks: (0u32..)
                .zip(nodes)
                .map(|(r, n)| crate::jobs::FleetRank::from_markers(n, r))
                .collect(),
            conflicts: Vec::new(),
        }
    }

    #[test]
    fn a_scopes_jobs_are_cut_again_only_when_the_fleet_or_the_scope_changed() {
        let store = Store::new(
            Duration::from_secs(60),
            Duration::from_secs(60),
            crate::config::Limits::default(),
        );
        let mut rounds = Rounds::new(&store);
        let fleet = Arc::new(vec![fleet_job("a", &["n1", "n2"]), fleet_job("b", &["n3"])]);
        let names = ["n1", "n2", "n3", "n4"].map(String::from);
        let scopes = scope::partition(&names, &fleet, &HashMap::new());
        let (a, cluster) = (&scopes[0], &scopes[2]);
        assert!(cluster.cluster && a.label == "a");
        for s in [a, cluster] {
            let lent = rounds.lend_jobs(s, &fleet);
            assert_eq!(lent, scope::scope_jobs(s, &fleet));
            let at = lent.as_ptr();
            rounds.take_back_jobs(s, &fleet, lent);
            // Lent again as they were: the same jobs, not a copy.
            let again = rounds.lend_jobs(s, &fleet);
            assert_eq!(
                (again.as_ptr(), &again),
                (at, &scope::scope_jobs(s, &fleet))
            );
            rounds.take_back_jobs(s, &fleet, again);
        }
        // The fleet merged again (another job list): cut again from it.
        let merged = Arc::new(vec![
            fleet_job("a", &["n1", "n2", "n4"]),
            fleet_job("b", &["n3"]),
        ]);
        let scopes = scope::partition(&names, &merged, &HashMap::new());
        let lent = rounds.lend_jobs(&scopes[0], &merged);
        assert_eq!(lent, scope::scope_jobs(&scopes[0], &merged));
        assert_eq!(lent[0].ranks.len(), 3);
        rounds.take_back_jobs(&scopes[0], &merged, lent);
        // A scope under the same label with other jobs: cut again.
        let mut other = scopes[0].clone();
        other.jobs.push("b".into());
        assert_eq!(
            rounds.lend_jobs(&other, &merged),
            scope::scope_jobs(&other, &merged)
        );
    }

    #[tokio::test]
    async fn a_scope_is_evaluated_when_it_falls_due_and_the_partition_is_kept_between() {
        let store = Arc::new(Store::new(
            Duration::from_secs(600),
            Duration::from_secs(600),
            crate::config::Limits::default(),
        ));
        // An hour ahead of the wall clock: a round on arrival evaluates as of the later of the two.
        let now = unix_now_ns() + 3_600_000 * MS;
        store.hello(&hello("node-a"), now, None).unwrap();
        let config = AnalysisConfig::default();
        assert_eq!(config.interval, Duration::from_secs(1));
        let h = AnalysisHandle::open(
            store.clone(),
            Arc::new(StepStore::new()),
            Passes::new().unwrap(),
            config,
        )
        .await
        .unwrap();
        let mut budget = Budget::new(1.0, Duration::from_secs(1));
        let gap = 875 * MS;
        let r = h.round_at(now, Some(&mut budget));
        assert_eq!((r.scopes, r.nodes, r.fleet_nodes), (1, 1, 1));
        assert_eq!(r.next_due_unix_ns, now + gap);
        // Before the gap: nothing due, and the partition is kept (a node registered since is not in it yet).
        store.hello(&hello("node-b"), now, None).unwrap();
        let r = h.round_at(now + 100 * MS, Some(&mut budget));
        assert_eq!((r.scopes, r.fleet_nodes), (0, 1));
        assert_eq!(r.next_due_unix_ns, now + gap);
        // At the due time, a quarter interval after the partition: partitioned again and evaluated.
        let r = h.round_at(now + gap, Some(&mut budget));
        assert_eq!((r.scopes, r.nodes, r.fleet_nodes), (1, 2, 2));
        assert_eq!(r.next_due_unix_ns, now + 2 * gap);
        // A changed job list partitions again at once.
        store.hello(&hello("node-c"), now, None).unwrap();
        let r = h.round_at(now + gap + 10 * MS, Some(&mut budget));
        assert_eq!((r.scopes, r.fleet_nodes), (0, 2));
        store.note_jobs_changed();
        let r = h.round_at(now + gap + 20 * MS, Some(&mut budget));
        assert_eq!((r.scopes, r.fleet_nodes), (0, 3));
        // Without a budget (the oracle, a virtual clock) every round partitions and evaluates every scope.
        store.hello(&hello("node-d"), now, None).unwrap();
        let r = h.round_at(now + gap + 30 * MS, None);
        assert_eq!((r.scopes, r.nodes, r.fleet_nodes), (1, 4, 4));
    }
}
