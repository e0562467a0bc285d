//! The analysis task: every [`AnalysisConfig::interval`] it copies the store's windows ([`input::build`], each
//! node's lock held only while its windows are copied), the fleet jobs ([`crate::jobs`]) and each node's recent
//! steps (the step engine's [`StepStore`], handed over at [`AnalysisHandle::open`]), runs the rules off the async workers
//! (`spawn_blocking`), applies the tracker's hysteresis, publishes raises and clears ([`FindingEvent`]) and
//! hands them to the history thread (SQLite writes never run on the evaluation path). Ingest never waits for
//! it: the task only takes node locks for short copies, like a scrape.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_model::clock::{unix_now_ns, unix_now_s};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tracing::{info, warn};

use super::history::{History, HistoryError};
use super::input::{self, BareBaseline, Extras, ThroughputBaseline};
use super::scaling::{self, JobFigures};
use super::tracker::{Change, Tracker};
use super::trend::JobTrends;
use super::{evaluate, Finding, FindingKind};
use crate::steps::StepStore;
use crate::store::Store;

pub use super::DEFAULT_INTERVAL;
/// An active finding's refreshed numbers are written to SQLite at most this often.
pub const HISTORY_REFRESH: Duration = Duration::from_secs(30);
/// A learned throughput figure is written at most this often per job and scale.
pub const THROUGHPUT_REFRESH: Duration = Duration::from_secs(60);

/// Settings of the analysis engine.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalysisConfig {
    /// Evaluation period; longer when one evaluation takes more than [`crate::pace::MAX_DUTY`] of it.
    pub interval: Duration,
    /// Where the history lives (the collector's `state_dir`); `None`: memory only.
    pub state_dir: Option<PathBuf>,
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        AnalysisConfig {
            interval: DEFAULT_INTERVAL,
            state_dir: None,
        }
    }
}

/// A finding raised or cleared (what the demo prints).
#[derive(Debug, Clone, PartialEq)]
pub enum FindingEvent {
    Raised(Finding),
    Cleared(Finding),
}

/// Filters of `GET /api/v1/findings`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct FindingFilter {
    pub active: Option<bool>,
    pub node: Option<String>,
    pub kind: Option<String>,
}

/// `POST /api/v1/baselines` body: a bare-communication baseline (the `commwatch diagnose` baseline of a
/// nccl-tests file, optionally for one job) or a throughput baseline.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum BaselineRequest {
    Throughput {
        job: String,
        gpus: u32,
        samples_per_second_per_gpu: f64,
    },
    Bare {
        #[serde(default)]
        job: Option<String>,
        #[serde(default)]
        source_file: Option<String>,
        tests: Vec<BareTest>,
    },
}

/// One nccl-tests test of a bare baseline (the fields used; others are ignored).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BareTest {
    pub collective: String,
    #[serde(default)]
    pub nranks: Option<u32>,
    #[serde(default)]
    pub avg_busbw_gbps: Option<f64>,
    #[serde(default)]
    pub peak_busbw_gbps: Option<f64>,
}

/// Why a baseline was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BaselineError {
    #[error("invalid baseline field `{field}`: {reason}")]
    Invalid { field: &'static str, reason: String },
}

/// What was stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StoredBaselines {
    pub bare: Vec<BareBaseline>,
    pub throughput: Vec<ThroughputBaseline>,
}

impl BaselineRequest {
    /// Validates and converts (nccl-tests GB/s are 1e9 bytes/s; the peak bus bandwidth is the large-message
    /// figure a rail link should reach, the average is used when no peak is given).
    pub fn into_records(self) -> Result<StoredBaselines, BaselineError> {
        let bad = |field, reason: &str| BaselineError::Invalid {
            field,
            reason: reason.to_string(),
        };
        match self {
            BaselineRequest::Throughput {
                job,
                gpus,
                samples_per_second_per_gpu,
            } => {
                if job.is_empty() || job.len() > 128 {
                    return Err(bad("job", "must be 1 to 128 bytes"));
                }
                if gpus == 0 {
                    return Err(bad("gpus", "must be at least 1"));
                }
                if !(samples_per_second_per_gpu.is_finite() && samples_per_second_per_gpu > 0.0) {
                    return Err(bad(
                        "samples_per_second_per_gpu",
                        "must be a positive number",
                    ));
                }
                Ok(StoredBaselines {
                    bare: vec![],
                    throughput: vec![ThroughputBaseline {
                        job,
                        gpus,
                        samples_per_second_per_gpu,
                        source: "operator".into(),
                    }],
                })
            }
            BaselineRequest::Bare {
                job,
                source_file,
                tests,
            } => {
                if job.as_ref().is_some_and(|j| j.is_empty() || j.len() > 128) {
                    return Err(bad("job", "must be 1 to 128 bytes"));
                }
                let mut bare = Vec::new();
                for t in tests {
                    let Some(g) = t.peak_busbw_gbps.or(t.avg_busbw_gbps) else {
                        continue;
                    };
                    if !(g.is_finite() && g > 0.0) {
                        return Err(bad("tests[].peak_busbw_gbps", "must be a positive number"));
                    }
                    bare.push(BareBaseline {
                        job: job.clone(),
                        collective: t.collective,
                        busbw_bytes_per_second: g * 1e9,
                        nranks: t.nranks,
                        source: source_file.clone().unwrap_or_else(|| "operator".into()),
                    });
                }
                if bare.is_empty() {
                    return Err(bad("tests", "no test with a bus bandwidth"));
                }
                Ok(StoredBaselines {
                    bare,
                    throughput: vec![],
                })
            }
        }
    }
}

enum HistoryMsg {
    Record(Vec<Change>, f64),
    Bare(BareBaseline),
    Throughput(ThroughputBaseline),
}

struct State {
    tracker: Tracker,
    extras: Extras,
    figures: Vec<JobFigures>,
    /// Each job's recent figures: the next evaluation's references ([`Extras::job_references`]).
    trends: JobTrends,
    written: HashMap<String, Instant>,
    evaluations: u64,
    last_eval_seconds: f64,
}

struct Inner {
    state: Mutex<State>,
    store: Arc<Store>,
    /// The nominal evaluation period (the pacing may stretch it).
    interval: Duration,
    /// The step engine's history, handed over at construction: the rules read each node's recent steps.
    steps: Arc<StepStore>,
    events: broadcast::Sender<FindingEvent>,
    history: Option<std::sync::mpsc::Sender<HistoryMsg>>,
}

/// Shared handle to the engine (cheap to clone).
#[derive(Clone)]
pub struct AnalysisHandle {
    inner: Arc<Inner>,
}

/// Opens the history in `dir`, restores its findings into `tracker` and its baselines into `extras`, and
/// starts the thread that writes it (SQLite writes never run on the evaluation path).
async fn open_history(
    dir: PathBuf,
    tracker: &mut Tracker,
    extras: &mut Extras,
) -> Result<std::sync::mpsc::Sender<HistoryMsg>, HistoryError> {
    let opened = tokio::task::spawn_blocking(move || {
        let h = History::open(&dir)?;
        let f = h.load_findings()?;
        let b = h.load_baselines()?;
        Ok::<_, HistoryError>((h, f, b))
    })
    .await
    .map_err(|e| {
        HistoryError::Json(serde_json::Error::io(std::io::Error::other(e.to_string())))
    })??;
    let (mut hist, findings, (bare, thr)) = opened;
    info!(
        findings = findings.len(),
        bare = bare.len(),
        throughput = thr.len(),
        "restored analysis history"
    );
    tracker.restore(findings);
    extras.bare_baselines = bare;
    extras.throughput_baselines = thr;
    let (tx, rx) = std::sync::mpsc::channel::<HistoryMsg>();
    std::thread::Builder::new()
        .name("analysis-history".into())
        .spawn(move || {
            for m in rx {
                let r = match m {
                    HistoryMsg::Record(ch, at) => hist.record(&ch, at),
                    HistoryMsg::Bare(b) => hist.save_bare(&b, unix_now_s()),
                    HistoryMsg::Throughput(b) => hist.save_throughput(&b, unix_now_s()),
                };
                if let Err(e) = r {
                    warn!(error = %e, "writing analysis history failed");
                }
            }
        })
        .map_err(|e| HistoryError::Json(serde_json::Error::io(e)))?;
    Ok(tx)
}

impl AnalysisHandle {
    /// Opens the history (when a state directory is set) and restores findings and baselines from it. The
    /// rules read the `store`'s windows, the fleet jobs merged from it, and each node's recent steps from the
    /// step engine's `steps`. Nothing is evaluated until [`AnalysisHandle::run`].
    pub async fn open(
        store: Arc<Store>,
        steps: Arc<StepStore>,
        config: AnalysisConfig,
    ) -> Result<AnalysisHandle, HistoryError> {
        let mut tracker = Tracker::with_interval(config.interval);
        let mut extras = Extras::default();
        let history = match config.state_dir.clone() {
            Some(dir) => Some(open_history(dir, &mut tracker, &mut extras).await?),
            None => None,
        };
        let (events, _) = broadcast::channel(1024);
        Ok(AnalysisHandle {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    tracker,
                    extras,
                    figures: Vec::new(),
                    trends: JobTrends::new(),
                    written: HashMap::new(),
                    evaluations: 0,
                    last_eval_seconds: 0.0,
                }),
                store,
                steps,
                interval: config.interval,
                events,
                history,
            }),
        })
    }

    /// Evaluates every interval, or less often when an evaluation of a large fleet is costly
    /// ([`crate::pace`]), on the blocking pool. Runs until the future is dropped.
    pub async fn run(self) {
        crate::pace::run_paced(self.inner.interval, move || {
            let h = self.clone();
            async move {
                if let Err(e) = tokio::task::spawn_blocking(move || h.evaluate_once()).await {
                    warn!(error = %e, "analysis evaluation failed");
                }
                true
            }
        })
        .await
    }

    /// One evaluation now (the task calls it every interval; tests may call it directly).
    pub fn evaluate_once(&self) {
        self.evaluate_at(unix_now_ns());
    }

    /// One evaluation as of `now_unix_ns` (the collector's clock): what [`AnalysisHandle::evaluate_once`]
    /// does, at a time the caller gives — for runs on a virtual clock (the detection benchmark).
    pub fn evaluate_at(&self, now_unix_ns: i64) {
        let started = Instant::now();
        let extras = self.inner.state.lock().extras.clone();
        let input = input::build(&self.inner.store, &self.inner.steps, now_unix_ns, &extras);
        self.apply(&input, started);
    }

    /// Evaluates a prepared input (used by [`AnalysisHandle::evaluate_once`] and by tests).
    pub fn apply(&self, input: &input::AnalysisInput, started: Instant) {
        let cands = evaluate(input);
        let figures = scaling::job_figures(input);
        let now = input.now_unix_ns as f64 / 1e9;
        let mut to_history = Vec::new();
        let mut learned = Vec::new();
        let changes = {
            let mut st = self.inner.state.lock();
            let changes = st.tracker.update(now, cands);
            for ch in &changes {
                match ch {
                    Change::Raised(f) | Change::Cleared(f) => {
                        st.written.insert(f.id.clone(), Instant::now());
                        to_history.push(ch.clone());
                    }
                    Change::Updated(f) => {
                        let due = st
                            .written
                            .get(&f.id)
                            .is_none_or(|t| t.elapsed() >= HISTORY_REFRESH);
                        if due {
                            st.written.insert(f.id.clone(), Instant::now());
                            to_history.push(ch.clone());
                        }
                    }
                }
            }
            // Learn this scale's throughput per GPU for later, larger runs of the same job.
            for f in &figures {
                if let (Some(p), Some(g)) = (f.samples_per_second_per_gpu, f.gpus) {
                    let b = ThroughputBaseline {
                        job: f.job.clone(),
                        gpus: g,
                        samples_per_second_per_gpu: p,
                        source: "history".into(),
                    };
                    let list = &mut st.extras.throughput_baselines;
                    match list
                        .iter_mut()
                        .find(|x| x.source == "history" && x.job == b.job && x.gpus == g)
                    {
                        Some(x) => x.samples_per_second_per_gpu = p,
                        None => list.push(b.clone()),
                    }
                    let key = format!("throughput:{}:{}", b.job, g);
                    if st
                        .written
                        .get(&key)
                        .is_none_or(|t| t.elapsed() >= THROUGHPUT_REFRESH)
                    {
                        st.written.insert(key, Instant::now());
                        learned.push(b);
                    }
                }
            }
            // The jobs' own history, for the next evaluation's drop check.
            st.trends.observe(&figures, now);
            st.extras.job_references = st.trends.references(now);
            st.figures = figures;
            st.evaluations += 1;
            st.last_eval_seconds = started.elapsed().as_secs_f64();
            changes
        };
        for ch in changes {
            let ev = match ch {
                Change::Raised(f) => FindingEvent::Raised(f),
                Change::Cleared(f) => FindingEvent::Cleared(f),
                Change::Updated(_) => continue,
            };
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

    /// Findings (active and cleared), filtered, sorted by id.
    pub fn findings(&self, filter: &FindingFilter) -> Vec<Finding> {
        let kind = filter.kind.as_deref().map(FindingKind::parse);
        self.inner
            .state
            .lock()
            .tracker
            .findings()
            .into_iter()
            .filter(|f| filter.active.is_none_or(|a| f.active == a))
            .filter(|f| filter.node.as_ref().is_none_or(|n| &f.subject.node == n))
            .filter(|f| match kind {
                None => true,
                Some(Some(k)) => f.kind == k,
                // An unknown kind matches nothing.
                Some(None) => false,
            })
            .collect()
    }

    /// Raises and clears as they happen.
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
        self.inner.state.lock().figures.clone()
    }

    /// Evaluations run and the last one's duration in seconds.
    pub fn evaluations(&self) -> (u64, f64) {
        let st = self.inner.state.lock();
        (st.evaluations, st.last_eval_seconds)
    }

    /// Stores baselines (in memory now, in SQLite through the history thread). Replaces an earlier baseline of
    /// the same job and collective (bare) or job and scale (throughput).
    pub fn add_baselines(&self, b: &StoredBaselines) {
        let mut st = self.inner.state.lock();
        for x in &b.bare {
            st.extras
                .bare_baselines
                .retain(|y| !(y.job == x.job && y.collective == x.collective));
            st.extras.bare_baselines.push(x.clone());
            if let Some(tx) = &self.inner.history {
                let _ = tx.send(HistoryMsg::Bare(x.clone()));
            }
        }
        for x in &b.throughput {
            st.extras
                .throughput_baselines
                .retain(|y| !(y.source == x.source && y.job == x.job && y.gpus == x.gpus));
            st.extras.throughput_baselines.push(x.clone());
            if let Some(tx) = &self.inner.history {
                let _ = tx.send(HistoryMsg::Throughput(x.clone()));
            }
        }
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
