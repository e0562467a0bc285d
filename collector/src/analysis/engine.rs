//! The analysis task: every [`AnalysisConfig::interval`] it copies the store's windows ([`input::build`], each
//! node's lock held only while its windows are copied), the fleet jobs ([`crate::jobs`]) and each node's recent
//! steps (the step engine's [`StepStore`], handed over at [`AnalysisHandle::open`]), runs the rules off the async workers
//! (`spawn_blocking`), applies the tracker's hysteresis, publishes raises and clears ([`FindingEvent`]) and
//! hands them to the history thread (SQLite writes never run on the evaluation path). Ingest never waits for
//! it: the task only takes node locks for short copies, like a scrape.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_model::baseline as bounds;
use commwatch_model::clock::{unix_now_ns, unix_now_s};
use parking_lot::Mutex;
use tokio::sync::broadcast;
use tracing::{info, warn};

use super::baselines;
use super::history::{History, HistoryError, Retention, Upkeep};
use super::input::{self, Extras, ThroughputBaseline};
use super::scaling::{self, JobFigures};
use super::scope::Scope;
use super::tracker::{Change, Published, Tracker};
use super::trend::JobTrends;
use super::{Finding, FindingKind, Severity};
use crate::steps::StepStore;
use crate::store::Store;
use crate::telemetry::Passes;

pub use super::DEFAULT_INTERVAL;

#[path = "rounds.rs"]
mod rounds;
pub use rounds::RoundReport;
/// An active finding's refreshed numbers are written to SQLite at most this often.
pub const HISTORY_REFRESH: Duration = Duration::from_secs(30);
/// A learned throughput figure is written at most this often per job and scale.
pub const THROUGHPUT_REFRESH: Duration = Duration::from_secs(60);

/// Settings of the analysis engine.
#[derive(Debug, Clone)]
pub struct AnalysisConfig {
    /// Evaluation period; longer when one evaluation takes more than [`crate::pace::MAX_DUTY`] of it.
    pub interval: Duration,
    /// Where the history lives (the collector's `state_dir`); `None`: memory only.
    pub state_dir: Option<PathBuf>,
    /// What the history keeps (pruned at start and every [`super::history::PRUNE_INTERVAL`]).
    pub history_retention: Retention,
    /// Where pruned history rows are counted ([`super::history::pruned_counter`]); `None`: nowhere.
    pub history_pruned: Option<prometheus::IntCounterVec>,
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        AnalysisConfig {
            interval: DEFAULT_INTERVAL,
            state_dir: None,
            history_retention: Retention::default(),
            history_pruned: None,
        }
    }
}

/// A finding raised, changed or cleared (what the demo prints). A cause's events come before those of the
/// consequences raised with it.
#[derive(Debug, Clone, PartialEq)]
pub enum FindingEvent {
    Raised(Finding),
    Cleared(Finding),
    /// An active finding whose severity or cause changed since it was last published (a link's errors now
    /// include a retrain, a root cause found for it, its cause gone): the finding now, and what it was.
    Changed {
        finding: Finding,
        severity_was: Severity,
        caused_by_was: Option<String>,
    },
}

/// Filters of `GET /api/v1/findings`, already validated; `None` or an empty list filters nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FindingFilter {
    /// Only active (`true`) or only cleared (`false`) findings.
    pub active: Option<bool>,
    /// Only findings whose subject's node is this one.
    pub node: Option<String>,
    /// Only findings of one of these kinds.
    pub kinds: Vec<FindingKind>,
    /// Only findings of one of these severities.
    pub severities: Vec<Severity>,
    /// Only findings of this job: its subject's job, or, for a finding that names no job, a node of the job
    /// (as the last evaluation saw the jobs).
    pub job: Option<String>,
    /// Only root causes (`true`) or only consequences (`false`).
    pub root: Option<bool>,
    /// At most this many, the first in the list's order.
    pub limit: Option<usize>,
}

impl FindingFilter {
    /// Whether `f` passes every filter but `limit`; `job_nodes` maps each job to its nodes.
    fn matches(&self, f: &Finding, job_nodes: &BTreeMap<String, BTreeSet<String>>) -> bool {
        let in_job = |j: &String| match &f.subject.job {
            Some(fj) => fj == j,
            None => job_nodes
                .get(j)
                .is_some_and(|n| n.contains(&f.subject.node)),
        };
        self.active.is_none_or(|a| f.active == a)
            && self.node.as_ref().is_none_or(|n| &f.subject.node == n)
            && (self.kinds.is_empty() || self.kinds.contains(&f.kind))
            && (self.severities.is_empty() || self.severities.contains(&f.severity))
            && self.job.as_ref().is_none_or(in_job)
            && self.root.is_none_or(|r| f.root == r)
    }
}

/// The order of `GET /api/v1/findings`: root causes first, then the most severe, then the most recently seen
/// (then by id, so that the order is stable).
pub fn list_order(a: &Finding, b: &Finding) -> std::cmp::Ordering {
    b.root
        .cmp(&a.root)
        .then(b.severity.cmp(&a.severity))
        .then(b.last_seen_unix_s.total_cmp(&a.last_seen_unix_s))
        .then(a.id.cmp(&b.id))
}

/// Each job's nodes as an evaluation's input lists them; the nodes no job lists form the scaling rule's
/// [`scaling::CLUSTER_JOB`] (all of them when no job is known), as in the findings about that job.
fn job_nodes(input: &input::AnalysisInput) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for j in &input.jobs {
        out.entry(j.id.clone())
            .or_default()
            .extend(j.nodes().map(str::to_string));
    }
    for n in &input.nodes {
        if input.job_of(&n.name).is_none() {
            out.entry(scaling::CLUSTER_JOB.to_string())
                .or_default()
                .insert(n.name.clone());
        }
    }
    out
}

pub use super::baselines::{BareTest, BaselineError, BaselineRequest, StoredBaselines};

/// The events of one evaluation's changes, in their order — raises and clears, and the refreshed findings
/// whose severity or cause differ from what was last published of them ([`Published`], kept beside each
/// finding in `tracker`) —, and the changes the history should write now: every raise and clear, and a
/// refresh of an active finding at most every [`HISTORY_REFRESH`] since it was last handed to the history.
/// What is published is kept up to date; each change's id is looked up once.
fn events(tracker: &mut Tracker, changes: Vec<Change>) -> (Vec<FindingEvent>, Vec<Change>) {
    let (mut out, mut to_history) = (Vec::new(), Vec::new());
    // One clock read for the evaluation's changes (a refresh per active finding).
    let now = Instant::now();
    for ch in changes {
        match ch {
            Change::Raised(f) => {
                to_history.push(Change::Raised(f.clone()));
                if let Some(p) = tracker.published_mut(&f.id) {
                    *p = Some(Published::of(&f, now));
                }
                out.push(FindingEvent::Raised(f));
            }
            Change::Cleared(f) => {
                to_history.push(Change::Cleared(f.clone()));
                if let Some(p) = tracker.published_mut(&f.id) {
                    *p = None;
                }
                out.push(FindingEvent::Cleared(f));
            }
            Change::Updated(f) => {
                let Some(slot) = tracker.published_mut(&f.id) else {
                    to_history.push(Change::Updated(f));
                    continue;
                };
                if slot.is_none() {
                    // Not published (not raised through this engine): written, and published from now on.
                    *slot = Some(Published::of(&f, now));
                    to_history.push(Change::Updated(f));
                    continue;
                }
                let Some(p) = slot.as_mut() else { continue };
                if now.saturating_duration_since(p.written) >= HISTORY_REFRESH {
                    p.written = now;
                    to_history.push(Change::Updated(Arc::clone(&f)));
                }
                // Most refreshes change neither: compared in place, nothing copied.
                if (p.severity, &p.caused_by) == (f.severity, &f.caused_by) {
                    continue;
                }
                let severity_was = std::mem::replace(&mut p.severity, f.severity);
                let caused_by_was = std::mem::replace(&mut p.caused_by, f.caused_by.clone());
                out.push(FindingEvent::Changed {
                    finding: Arc::unwrap_or_clone(f),
                    severity_was,
                    caused_by_was,
                });
            }
        }
    }
    (out, to_history)
}

/// `events` and `to_history` (of one update's changes, [`events`]) with the summaries and evidence of their
/// refreshed findings written: a refresh leaves them to be written when read ([`Tracker::written`]), and only
/// these few of its changes are.
fn written(
    tracker: &mut Tracker,
    events: &mut [FindingEvent],
    to_history: Vec<Change>,
) -> Vec<Change> {
    // The events' copies first: writing a change's finding below writes the tracker's, which then no longer
    // lags.
    for ev in events.iter_mut() {
        if let FindingEvent::Changed { finding, .. } = ev {
            tracker.write_words(finding);
        }
    }
    to_history
        .into_iter()
        .map(|ch| match ch {
            Change::Updated(f) => Change::Updated(tracker.written(f)),
            other => other,
        })
        .collect()
}

enum HistoryMsg {
    Record(Vec<Change>, f64),
    Throughput(ThroughputBaseline),
    /// An operator's baselines, written in one transaction; the outcome is sent back.
    Baselines(
        StoredBaselines,
        std::sync::mpsc::SyncSender<Result<(), String>>,
    ),
}

/// Each job's figures from its last evaluation, by job: a scope's evaluation replaces its own jobs' figures
/// (the fleet's list was filtered and sorted again at every scope's, a few hundred jobs each time).
#[derive(Default)]
struct Figures(BTreeMap<String, Vec<JobFigures>>);

impl Figures {
    /// Every job's figures, in job order (a job's in the order they were found).
    fn all(&self) -> Vec<JobFigures> {
        self.0.values().flatten().cloned().collect()
    }

    /// Drops the figures of `jobs` and adds `figures` (each to its job's, after those it has).
    fn replace(&mut self, jobs: &[&str], figures: Vec<JobFigures>) {
        for j in jobs {
            self.0.remove(*j);
        }
        for f in figures {
            match self.0.get_mut(&f.job) {
                Some(v) => v.push(f),
                None => {
                    self.0.insert(f.job.clone(), vec![f]);
                }
            }
        }
    }

    /// Keeps the figures `keep` says to.
    fn retain(&mut self, keep: impl Fn(&JobFigures) -> bool) {
        for v in self.0.values_mut() {
            v.retain(&keep);
        }
        self.0.retain(|_, v| !v.is_empty());
    }
}

struct State {
    tracker: Tracker,
    extras: Extras,
    figures: Figures,
    /// Each job's recent figures: the next evaluation's references ([`Extras::job_references`]).
    trends: JobTrends,
    /// Each job's nodes at the last evaluation (the findings list's `job` filter); by scope label when
    /// evaluated by scope ([`FULL`] for a whole-fleet evaluation).
    job_nodes: HashMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// For each job (and [`super::scaling::CLUSTER_JOB`]), the time its findings were last evaluated at
    /// (the end of the windows read), Unix ns: `commwatch_collector_evaluation_age_seconds`.
    evaluated_at: BTreeMap<String, i64>,
    /// When each learned throughput (`throughput:<job>:<gpus>`) was last handed to the history.
    written: HashMap<String, Instant>,
    evaluations: u64,
    last_eval_seconds: f64,
}

impl State {
    /// Learns each job's throughput per GPU at its scale for later, larger runs of the same job; returns the
    /// figures due to be written (at most every [`THROUGHPUT_REFRESH`] per job and scale).
    fn learn_throughput(&mut self, figures: &[JobFigures]) -> Vec<ThroughputBaseline> {
        let mut learned = Vec::new();
        for f in figures {
            let (Some(p), Some(g)) = (f.samples_per_second_per_gpu, f.gpus) else {
                continue;
            };
            let b = ThroughputBaseline {
                job: f.job.clone(),
                gpus: g,
                samples_per_second_per_gpu: p,
                source: "history".into(),
            };
            let list = &mut self.extras.throughput_baselines;
            match list
                .iter_mut()
                .find(|x| x.source == "history" && x.job == b.job && x.gpus == g)
            {
                Some(x) => x.samples_per_second_per_gpu = p,
                None => list.push(b.clone()),
            }
            let key = format!("throughput:{}:{}", b.job, g);
            if self
                .written
                .get(&key)
                .is_none_or(|t| t.elapsed() >= THROUGHPUT_REFRESH)
            {
                self.written.insert(key, Instant::now());
                learned.push(b);
            }
        }
        learned
    }
}

struct Inner {
    state: Mutex<State>,
    store: Arc<Store>,
    /// The nominal evaluation period (the pacing may stretch it).
    interval: Duration,
    /// The step engine's history, handed over at construction: the rules read each node's recent steps.
    steps: Arc<StepStore>,
    /// The collector's pass metrics: each input build is timed there (`pass="analysis_input"`).
    passes: Passes,
    events: broadcast::Sender<FindingEvent>,
    history: Option<std::sync::mpsc::Sender<HistoryMsg>>,
    /// Stored records the start could not read (skipped; see [`AnalysisHandle::skipped_records`]).
    skipped_records: u64,
    /// NCCL Inspector records per job; the rules read its summaries, the exporters share it.
    collectives: Arc<crate::collectives::CollectiveStage>,
    /// The prober's results, once the collector hands them over ([`AnalysisHandle::use_probes`]).
    probes: std::sync::OnceLock<Arc<crate::probes::ProbeBook>>,
    /// The fleet's jobs and scopes as the last round cut them, and when each scope was evaluated
    /// ([`rounds`]); used by the analysis thread only.
    rounds: Mutex<rounds::Rounds>,
}

/// The scope label of a whole-fleet evaluation ([`AnalysisHandle::evaluate_full_at`]).
const FULL: &str = "";

/// Shared handle to the engine (cheap to clone).
#[derive(Clone)]
pub struct AnalysisHandle {
    inner: Arc<Inner>,
}

/// Opens the history in `dir`, restores its findings into `tracker` and its baselines into `extras`, and
/// starts the thread that writes it and prunes it (`upkeep`: at once, then periodically; SQLite writes never
/// run on the evaluation path, and the start does not wait for the first prune). A stored record that
/// cannot be read (or is out of bounds) is skipped, logged and counted, never fatal: returns how many.
async fn open_history(
    dir: PathBuf,
    upkeep: Upkeep,
    tracker: &mut Tracker,
    extras: &mut Extras,
) -> Result<(std::sync::mpsc::Sender<HistoryMsg>, u64), HistoryError> {
    let keep = upkeep.retention();
    let opened = tokio::task::spawn_blocking(move || {
        let h = History::open(&dir)?;
        let f = h.load_kept_findings(&keep, unix_now_s())?;
        let b = h.load_baselines()?;
        Ok::<_, HistoryError>((h, f, b))
    })
    .await
    .map_err(|e| HistoryError::Thread(e.to_string()))??;
    let (hist, findings, (mut bare, thr)) = opened;
    let skipped = hist.skipped();
    if bare.len() > bounds::MAX_BARE_BASELINES {
        warn!(stored = bare.len(), kept = bounds::MAX_BARE_BASELINES,
            "more bare baselines stored than the collector holds (an older collector kept them): the rest are not used");
        bare.truncate(bounds::MAX_BARE_BASELINES);
    }
    info!(
        findings = findings.len(),
        bare = bare.len(),
        throughput = thr.len(),
        skipped,
        "restored analysis history"
    );
    tracker.restore(findings);
    extras.bare_baselines = bare;
    extras.throughput_baselines = thr;
    let (tx, rx) = std::sync::mpsc::channel::<HistoryMsg>();
    std::thread::Builder::new()
        .name("analysis-history".into())
        .spawn(move || write_history(hist, rx, upkeep))
        .map_err(|e| HistoryError::Thread(e.to_string()))?;
    Ok((tx, skipped))
}

/// The history thread: writes what the engine and the baselines API send, in their order, and prunes the
/// history when `upkeep` says; ends when every sender is gone.
fn write_history(mut hist: History, rx: std::sync::mpsc::Receiver<HistoryMsg>, mut upkeep: Upkeep) {
    loop {
        let m = match rx.recv_timeout(upkeep.due_in()) {
            Ok(m) => m,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                upkeep.prune(&mut hist);
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let r = match m {
            HistoryMsg::Record(ch, at) => hist.record(&ch, at),
            HistoryMsg::Throughput(b) => hist.save_throughput(&b, unix_now_s()),
            HistoryMsg::Baselines(b, reply) => {
                let r = hist.save_baselines(&b.bare, &b.throughput, unix_now_s());
                let _ = reply.send(r.as_ref().map(|_| ()).map_err(|e| e.to_string()));
                r
            }
        };
        if let Err(e) = r {
            warn!(error = %e, "writing analysis history failed");
        }
    }
}

impl AnalysisHandle {
    /// Opens the history (when a state directory is set) and restores findings and baselines from it. The
    /// rules read the `store`'s windows, the fleet jobs merged from it, and each node's recent steps from the
    /// step engine's `steps`; each input build is timed in `passes` (the collector's own,
    /// [`crate::telemetry::Health::passes`]). Nothing is evaluated until [`AnalysisHandle::run`].
    pub async fn open(
        store: Arc<Store>,
        steps: Arc<StepStore>,
        passes: Passes,
        config: AnalysisConfig,
    ) -> Result<AnalysisHandle, HistoryError> {
        let mut tracker = Tracker::with_interval(config.interval);
        let mut extras = Extras::default();
        let history = match config.state_dir.clone() {
            Some(dir) => {
                let upkeep = Upkeep::new(config.history_retention, config.history_pruned.clone());
                Some(open_history(dir, upkeep, &mut tracker, &mut extras).await?)
            }
            None => None,
        };
        let (history, skipped_records) = match history {
            Some((tx, skipped)) => (Some(tx), skipped),
            None => (None, 0),
        };
        let (events, _) = broadcast::channel(1024);
        let store_for_rounds = store.clone();
        Ok(AnalysisHandle {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    tracker,
                    extras,
                    figures: Figures::default(),
                    trends: JobTrends::new(),
                    job_nodes: HashMap::new(),
                    evaluated_at: BTreeMap::new(),
                    written: HashMap::new(),
                    evaluations: 0,
                    last_eval_seconds: 0.0,
                }),
                store,
                steps,
                passes,
                interval: config.interval,
                events,
                history,
                skipped_records,
                collectives: crate::collectives::CollectiveStage::new(),
                probes: std::sync::OnceLock::new(),
                rounds: Mutex::new(rounds::Rounds::new(&store_for_rounds)),
            }),
        })
    }

    /// The probe results the rules read as bare link figures (set once; later calls are ignored).
    pub fn use_probes(&self, book: Arc<crate::probes::ProbeBook>) {
        let _ = self.inner.probes.set(book);
    }

    /// The collectives stage the rules read (shared with `/api/v1/collectives` and `/metrics`).
    pub fn collectives(&self) -> Arc<crate::collectives::CollectiveStage> {
        self.inner.collectives.clone()
    }

    /// One evaluation now (the task calls it every interval; tests may call it directly).
    pub fn evaluate_once(&self) {
        self.evaluate_at(unix_now_ns());
    }

    /// One evaluation as of `now_unix_ns` (the collector's clock): what [`AnalysisHandle::evaluate_once`]
    /// does, at a time the caller gives — for runs on a virtual clock (the detection benchmark). Every scope
    /// of the fleet ([`super::scope`]) is evaluated on its own input, then the scopes that are gone are swept.
    pub fn evaluate_at(&self, now_unix_ns: i64) {
        self.round_at(now_unix_ns, None);
    }

    /// The whole fleet in one evaluation as of `now_unix_ns`: one input of every node, every rule, the tracker
    /// over every finding. The oracle the scoped evaluation ([`AnalysisHandle::evaluate_at`]) is checked
    /// against (a test and the detection benchmark run both on the same data and compare their findings).
    pub fn evaluate_full_at(&self, now_unix_ns: i64) {
        let started = Instant::now();
        let extras = self.extras_now();
        let inner = &self.inner;
        let mut input = input::build(
            &inner.store,
            &inner.steps,
            &inner.passes,
            now_unix_ns,
            &extras,
        );
        input.collectives = crate::collectives::job_summaries(
            &self.inner.collectives,
            &self.inner.store,
            now_unix_ns,
        );
        input.probes = self.probe_baselines();
        self.apply(&input, started);
    }

    /// The engine's baselines and references as an evaluation reads them (one bare baseline per job: the
    /// rules look one up per link).
    fn extras_now(&self) -> Extras {
        let mut extras = self.inner.state.lock().extras.clone();
        extras.bare_baselines = baselines::effective_bare(&extras.bare_baselines);
        extras
    }

    /// The prober's results as the rules read them (none before the collector hands the prober over).
    fn probe_baselines(&self) -> Vec<super::link_probes::ProbeBaseline> {
        self.inner.probes.get().map_or_else(Vec::new, |book| {
            book.list()
                .iter()
                .map(super::link_probes::ProbeBaseline::from_record)
                .collect()
        })
    }

    /// Evaluates a prepared whole-fleet input (used by [`AnalysisHandle::evaluate_full_at`] and by tests).
    pub fn apply(&self, input: &input::AnalysisInput, started: Instant) {
        self.apply_in(input, started, None);
    }

    /// Evaluates `input`: the whole fleet's (`scope` `None`), or one scope's, whose findings alone it
    /// updates; publishes the changes and hands them to the history.
    fn apply_in(&self, input: &input::AnalysisInput, started: Instant, scope: Option<&Scope>) {
        let (cands, figures) = super::evaluate_keyed_with_figures(input);
        let now = input.now_unix_ns as f64 / 1e9;
        let (events, to_history, learned) = {
            let mut st = self.inner.state.lock();
            let changes = match scope {
                None => st.tracker.update_keyed(now, cands),
                Some(s) => st.tracker.update_scope_keyed(now, &s.label, cands),
            };
            let learned = st.learn_throughput(&figures);
            // The jobs' own history, for the next evaluation's drop check.
            st.trends.observe(&figures, now);
            let nodes = job_nodes(input);
            match scope {
                None => {
                    st.extras.job_references = st.trends.references(now);
                    st.evaluated_at = nodes
                        .keys()
                        .map(|j| (j.clone(), input.now_unix_ns))
                        .collect();
                    st.figures = Figures::default();
                    st.figures.replace(&[], figures);
                    st.job_nodes = HashMap::from([(FULL.to_string(), nodes)]);
                    st.evaluations += 1;
                    st.last_eval_seconds = started.elapsed().as_secs_f64();
                }
                Some(s) => {
                    let labels = s.job_labels();
                    st.figures.replace(&labels, figures);
                    st.job_nodes.insert(s.label.clone(), nodes);
                    for j in labels {
                        match st.evaluated_at.get_mut(j) {
                            Some(at) => *at = input.now_unix_ns,
                            None => {
                                st.evaluated_at.insert(j.to_string(), input.now_unix_ns);
                            }
                        }
                    }
                }
            }
            let (mut events, to_history) = events(&mut st.tracker, changes);
            let to_history = written(&mut st.tracker, &mut events, to_history);
            (events, to_history, learned)
        };
        self.publish(events, to_history, learned, now);
    }

    /// Sends `events` to the subscribers and the history's changes and learned throughputs to its thread.
    fn publish(
        &self,
        events: Vec<FindingEvent>,
        to_history: Vec<Change>,
        learned: Vec<ThroughputBaseline>,
        now: f64,
    ) {
        for ev in events {
            let _ = self.inner.events.send(ev);
        }
        if let Some(tx) = &self.inner.history {
            if !to_history.is_empty() {
                let _ = tx.send(HistoryMsg::Record(to_history, now));
            }
            for b in learned {
                let _ = tx.send(HistoryMsg::Throughput(b));
            }
        }
    }

    /// Findings (active and cleared), filtered, in the list's order ([`list_order`]), at most `limit`.
    pub fn findings(&self, filter: &FindingFilter) -> Vec<Finding> {
        let st = self.inner.state.lock();
        let mut job_nodes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (job, nodes) in st.job_nodes.values().flatten() {
            job_nodes
                .entry(job.clone())
                .or_default()
                .extend(nodes.iter().cloned());
        }
        let mut out: Vec<Finding> = st
            .tracker
            .findings()
            .into_iter()
            .filter(|f| filter.matches(f, &job_nodes))
            .collect();
        drop(st);
        out.sort_by(list_order);
        if let Some(n) = filter.limit {
            out.truncate(n);
        }
        out
    }

    /// Raises, changes and clears as they happen.
    pub fn subscribe(&self) -> broadcast::Receiver<FindingEvent> {
        self.inner.events.subscribe()
    }

    /// Findings raised since start, per kind (every kind present).
    pub fn raised_total(&self) -> Vec<(FindingKind, u64)> {
        let st = self.inner.state.lock();
        FindingKind::ALL
            .iter()
            .map(|k| (*k, st.tracker.raised_total().get(k).copied().unwrap_or(0)))
            .collect()
    }

    /// Step time, throughput and scaling efficiency per job, from the last evaluation.
    pub fn job_figures(&self) -> Vec<JobFigures> {
        self.inner.state.lock().figures.all()
    }

    /// Each job's evaluation age at `now_unix_ns` (the collector's clock): seconds since the end of the
    /// windows its findings were last evaluated on; [`super::scaling::CLUSTER_JOB`] for the nodes of no job.
    /// `commwatch_collector_evaluation_age_seconds{training_job}`.
    pub fn evaluation_ages(&self, now_unix_ns: i64) -> Vec<(String, f64)> {
        rounds::ages(&self.inner.state.lock().evaluated_at, now_unix_ns)
    }

    /// Evaluations run and the last one's duration in seconds.
    pub fn evaluations(&self) -> (u64, f64) {
        let st = self.inner.state.lock();
        (st.evaluations, st.last_eval_seconds)
    }

    /// Stores an operator's baselines: merged into those held (replacing one of the same job and collective,
    /// bare, or job and scale, throughput) within the bounds of [`super::baselines`] — linear, under the
    /// engine's lock for that merge only — then written to SQLite in one transaction, waited for: when this
    /// returns `Ok` they survive a restart. Blocks: call it off the async workers (`spawn_blocking`).
    pub fn add_baselines(&self, b: &StoredBaselines) -> Result<(), BaselineError> {
        {
            let mut st = self.inner.state.lock();
            let ex = &mut st.extras;
            baselines::merge_stored(&mut ex.bare_baselines, &mut ex.throughput_baselines, b)?;
        }
        let Some(tx) = &self.inner.history else {
            return Ok(());
        };
        let (reply, outcome) = std::sync::mpsc::sync_channel(1);
        let gone = || BaselineError::NotStored("the history writer has stopped".into());
        tx.send(HistoryMsg::Baselines(b.clone(), reply))
            .map_err(|_| gone())?;
        outcome
            .recv()
            .map_err(|_| gone())?
            .map_err(BaselineError::NotStored)
    }

    /// Stored records (findings, baselines) the start skipped because they could not be read or were out of
    /// bounds; the collector counts them in `commwatch_collector_persist_errors_total`.
    pub fn skipped_records(&self) -> u64 {
        self.inner.skipped_records
    }

    /// Baselines held now.
    pub fn baselines(&self) -> StoredBaselines {
        let st = self.inner.state.lock();
        StoredBaselines {
            bare: st.extras.bare_baselines.clone(),
            throughput: st.extras.throughput_baselines.clone(),
        }
    }
}
