//! Jobs export: `GET /api/v1/jobs` (`?job=ID`) and the `/metrics` families `commwatch_nccl_setting_conflict`
//! and `commwatch_job_ranks`.
//!
//! The jobs are the known jobs ([`crate::jobs::known_jobs`]: every node's list merged by job id, so a job spanning
//! nodes is one element with the ranks of all of them, plus the jobs and ranks known only from step markers),
//! turned into their JSON view here. Step time,
//! throughput and scaling efficiency come from the analysis engine's last evaluation (`null` until it has
//! figures for the job). Only what the agent's allowlist let through is held: the `NCCL_*` settings of each
//! rank, never any other environment variable (the ingest edge refuses other keys).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use commwatch_model::clock::unix_now_ns;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};
use serde::{Deserialize, Serialize};

use super::names;
use super::proto::{family, label, metric};
use crate::analysis::AnalysisHandle;
use crate::jobs::{known_jobs, FleetJob};
use crate::store::Store;

/// `/api/v1/jobs` rank: one process of the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankView {
    pub node: String,
    pub pid: u32,
    /// Global rank; `null` when the process carried no rank marker (a lone GPU process).
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    /// GPU indexes (NVML) or `CUDA_VISIBLE_DEVICES` entries of the process.
    pub gpu: Vec<String>,
    /// Kubernetes pod UID; `null` outside Kubernetes.
    pub pod: Option<String>,
    pub container: Option<String>,
    /// The rank's `NCCL_*` settings (only allowlisted keys are ever read from a process).
    pub nccl: BTreeMap<String, String>,
    /// `nvml` (on a GPU), `environment` (rank variables) or `markers` (known only from its step markers; its
    /// `pid` is then 0).
    pub found_by: String,
}

/// `/api/v1/jobs` conflict: an NCCL setting of the job that contradicts a node's hardware.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobConflictView {
    pub node: String,
    pub setting: String,
    pub value: String,
    /// `management_interface`, `missing_interface`, `ib_disabled`, `hca_excluded`.
    pub kind: String,
    pub reason: String,
}

/// `/api/v1/jobs` element.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: String,
    /// Nodes the job runs on, sorted.
    pub nodes: Vec<String>,
    /// Ranks sorted by global rank (ranks without one last), then node and pid.
    pub ranks: Vec<RankView>,
    pub conflicts: Vec<JobConflictView>,
    /// Median step duration, seconds; `null` until the analysis has steps of the job.
    pub step_time_s: Option<f64>,
    /// Samples per second of the whole job; `null` without step markers carrying samples.
    pub throughput_samples_per_second: Option<f64>,
    /// Scaling efficiency, 0..1 (above 1 possible against a super-linear baseline); `null` when unknown.
    pub scaling_efficiency: Option<f64>,
    /// How the efficiency was computed (`throughput_per_gpu`, `exposed_communication`,
    /// `communication_share`); `null` with no efficiency.
    pub scaling_efficiency_method: Option<String>,
}

/// Every job of the nodes seen within `node_expiry` ([`crate::jobs::known_jobs`]: job lists and recent step
/// markers), sorted by id. `analysis` (when given) fills the figures.
pub fn job_views(store: &Store, analysis: Option<&AnalysisHandle>) -> Vec<JobView> {
    let figures: HashMap<String, _> = analysis
        .map(|a| a.job_figures())
        .unwrap_or_default()
        .into_iter()
        .map(|f| (f.job.clone(), f))
        .collect();
    known_jobs(store, unix_now_ns())
        .into_iter()
        .map(|j| {
            let mut v = job_view(j);
            if let Some(f) = figures.get(&v.id) {
                v.step_time_s = f.step_time_s;
                v.throughput_samples_per_second = f.throughput_samples_per_second;
                v.scaling_efficiency = f.scaling_efficiency;
                v.scaling_efficiency_method = f.scaling_efficiency.and(f.method.clone());
            }
            v
        })
        .collect()
}

/// The JSON view of a fleet job, without figures.
fn job_view(j: FleetJob) -> JobView {
    JobView {
        id: j.id,
        nodes: j.listed_by,
        ranks: j
            .ranks
            .into_iter()
            .map(|r| RankView {
                node: r.node,
                pid: r.process.pid,
                rank: r.process.rank,
                local_rank: r.process.local_rank,
                world_size: r.process.world_size,
                gpu: r.process.gpus,
                pod: r.process.pod_uid,
                container: r.process.container_id,
                nccl: r.process.nccl,
                found_by: r.process.found_by,
            })
            .collect(),
        conflicts: j
            .conflicts
            .into_iter()
            .map(|c| JobConflictView {
                node: c.node,
                setting: c.conflict.setting,
                value: c.conflict.value,
                kind: c.conflict.kind.to_string(),
                reason: c.conflict.reason,
            })
            .collect(),
        step_time_s: None,
        throughput_samples_per_second: None,
        scaling_efficiency: None,
        scaling_efficiency_method: None,
    }
}

#[derive(Clone)]
struct JobsState {
    store: Arc<Store>,
    analysis: AnalysisHandle,
}

/// `?job=ID`: only that job (an empty list when no node runs it).
#[derive(Debug, Default, Deserialize)]
struct JobsQuery {
    job: Option<String>,
}

/// Routes of the jobs API (merged into the collector's HTTP router).
pub fn router(store: Arc<Store>, analysis: AnalysisHandle) -> Router {
    Router::new()
        .route("/api/v1/jobs", get(list))
        .with_state(JobsState { store, analysis })
}

async fn list(State(s): State<JobsState>, Query(q): Query<JobsQuery>) -> Json<Vec<JobView>> {
    let mut v = job_views(&s.store, Some(&s.analysis));
    if let Some(id) = &q.job {
        v.retain(|j| &j.id == id);
    }
    Json(v)
}

const CONFLICT_HELP: &str =
    "1 per NCCL setting of a job that contradicts the node's hardware (kind: management_interface, missing_interface, ib_disabled, hca_excluded).";
const RANKS_HELP: &str =
    "Processes (ranks) of the job the node's agent found, or that sent it step markers recently.";

/// Renders `commwatch_nccl_setting_conflict{node,job,setting,kind}` (1 per conflict) and
/// `commwatch_job_ranks{job,node}` (per [`known_jobs`]: a node's job list, else its recent markers) at scrape
/// time. Label values are bounded by the ingest limits (at most [`crate::ingest::domain::MAX_JOBS_PER_NODE`]
/// jobs per node from each, lengths within `max_label_len`); the prometheus crate escapes them.
pub struct JobsCollector {
    store: Arc<Store>,
    descs: Vec<Desc>,
}

impl JobsCollector {
    pub fn new(store: Arc<Store>) -> Result<JobsCollector, prometheus::Error> {
        let descs = [
            (names::NCCL_SETTING_CONFLICT, CONFLICT_HELP),
            (names::JOB_RANKS, RANKS_HELP),
        ]
        .iter()
        .map(|(n, h)| Desc::new(n.to_string(), h.to_string(), vec![], HashMap::new()))
        .collect::<Result<Vec<_>, _>>()?;
        Ok(JobsCollector { store, descs })
    }
}

impl Collector for JobsCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut conflicts = family(
            names::NCCL_SETTING_CONFLICT,
            CONFLICT_HELP,
            MetricType::GAUGE,
        );
        let mut ranks = family(names::JOB_RANKS, RANKS_HELP, MetricType::GAUGE);
        let now = unix_now_ns();
        for j in known_jobs(&self.store, now) {
            for node in &j.listed_by {
                ranks.mut_metric().push(metric(
                    MetricType::GAUGE,
                    vec![label("node", node), label("training_job", &j.id)],
                    j.ranks.iter().filter(|r| &r.node == node).count() as f64,
                ));
            }
        }
        for (node, list) in self.store.node_jobs(now) {
            for j in &list.jobs {
                // One series per (setting, kind): the agent reports each setting once per job.
                let mut seen: Vec<(&str, &str)> = Vec::new();
                for c in &j.conflicts {
                    if seen.contains(&(c.setting.as_str(), c.kind.as_str())) {
                        continue;
                    }
                    seen.push((&c.setting, c.kind.as_str()));
                    conflicts.mut_metric().push(metric(
                        MetricType::GAUGE,
                        vec![
                            label("kind", c.kind.as_str()),
                            label("node", &node),
                            label("setting", &c.setting),
                            label("training_job", &j.id),
                        ],
                        1.0,
                    ));
                }
            }
        }
        [conflicts, ranks]
            .into_iter()
            .filter(|f| !f.get_metric().is_empty())
            .collect()
    }
}
