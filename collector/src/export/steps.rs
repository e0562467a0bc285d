//! Steps in the API and in `/metrics`.
//!
//! `GET /api/v1/steps?node=NAME[&limit=N]` → `{"node", "source": "markers"|"inferred", "steps": [...]}` and
//! `GET /api/v1/steps?job=ID[&limit=N]` → `{"job", "source": "markers"|"inferred", "steps": [...]}`
//! (a contract: keys are added, never renamed): marker steps of every node aligned by step number, or — when the job sends no markers — the
//! inferred steps of its nodes, one node step each. A step:
//! `index`, `start_unix_s`, `end_unix_s`, `duration_s`, `confidence`, `confident`, `samples`, `job`, and
//! `links` [`class`, `device`, `port`, `role`, (`gpu`, `link` on NVLink), `tx_bytes`, `rx_bytes`, `active_s`,
//! `achieved_bytes_per_second` (null when idle), `average_bytes_per_second`, `capacity_bytes_per_second`,
//! `utilization`, `capped`, `confident`]. Job steps add `nodes`, a `node` key on each link, and `aggregates`
//! per link class (`achieved_bytes_per_second` / `utilization`: `min`, `median`, `max`, `min_node`,
//! `max_node`; `capped`). No utilisation is above 1 ([`super::capped`]).
//! `limit` defaults to [`DEFAULT_LIMIT`], at most [`history::STEPS_PER_NODE`](crate::steps::history::STEPS_PER_NODE).
//! A bad query is a 400 with `{"error": "..."}`; an unknown node or job a 404 with the same shape.
//!
//! `/metrics` (rendered from the [`StepStore`] at scrape time; names in [`names`]):
//! `commwatch_step_duration_seconds{node,training_job}`, `commwatch_step_link_bandwidth_bytes_per_second{link labels}`,
//! `commwatch_link_utilization_ratio{link labels}` (a GPU's NVLinks as one with `nvlink_detail = "gpu"`),
//! `commwatch_steps_total{node,source}`, `commwatch_step_samples_per_second{training_job}`. Labels are bounded: one job per node for the duration, and at most
//! [`MAX_JOBS_EXPORTED`] jobs for the throughput.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use commwatch_model::clock::unix_now_ns;
use commwatch_model::{Link, LinkClass, LinkKey};
use prometheus::core::{Collector, Desc};
use prometheus::proto::{LabelPair, MetricFamily, MetricType};
use serde_json::{json, Value};

use super::names;
use super::proto::{family, label, metric};
use crate::config::NvlinkDetail;
use crate::steps::history::STEPS_PER_NODE;
use crate::steps::{JobStep, NodeStep, StepLink, StepSource, StepStore};

/// Steps returned when the query names no `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// Most jobs exported in `commwatch_step_samples_per_second`.
pub const MAX_JOBS_EXPORTED: usize = 100;
/// How far back (steps per node) `/metrics` looks for a link's latest confident figure.
const LINK_LOOKBACK: usize = 20;

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(json!({ "error": msg.into() }))).into_response()
}

fn secs(ns: i64) -> f64 {
    ns as f64 / 1e9
}

/// JSON of one link of a step; `node` set in job views. An achieved rate above the capacity is shown at the
/// capacity with `capped: true` ([`super::capped`]).
pub fn link_json(l: &StepLink, node: Option<&str>) -> Value {
    let shown = super::capped::within_capacity(
        l.achieved_bytes_per_second,
        l.capacity_bytes_per_second,
        l.utilization,
    );
    let mut v = json!({
        "class": l.link.key.class.as_str(),
        "device": l.link.key.device,
        "port": l.link.key.port,
        "role": l.link.role.as_str(),
        "tx_bytes": l.tx_bytes,
        "rx_bytes": l.rx_bytes,
        "active_s": l.active_s,
        "achieved_bytes_per_second": shown.achieved_bytes_per_second,
        "average_bytes_per_second": l.average_bytes_per_second,
        "capacity_bytes_per_second": l.capacity_bytes_per_second,
        "utilization": shown.utilization,
        "capped": shown.capped,
        "confident": l.confident,
    });
    if let Some(m) = v.as_object_mut() {
        if let Some(g) = &l.link.gpu {
            m.insert("gpu".into(), json!(g));
        }
        if let Some(k) = &l.link.link {
            m.insert("link".into(), json!(k));
        }
        if let Some(n) = node {
            m.insert("node".into(), json!(n));
        }
    }
    v
}

/// JSON of one node step.
pub fn node_step_json(s: &NodeStep) -> Value {
    json!({
        "index": s.index,
        "job": s.job,
        "start_unix_s": secs(s.start_unix_ns),
        "end_unix_s": secs(s.end_unix_ns),
        "duration_s": s.duration_s(),
        "confidence": s.confidence,
        "confident": s.confident(),
        "samples": s.samples,
        "links": s.links.iter().map(|l| link_json(l, None)).collect::<Vec<_>>(),
    })
}

/// JSON of one job step (node edges are on each node's agent clock: start is the earliest, end the latest).
pub fn job_step_json(s: &JobStep) -> Value {
    let start = s.nodes.iter().map(|n| n.start_unix_ns).min().unwrap_or(0);
    let end = s.nodes.iter().map(|n| n.end_unix_ns).max().unwrap_or(0);
    json!({
        "index": s.index,
        "job": s.job,
        "start_unix_s": secs(start),
        "end_unix_s": secs(end),
        "duration_s": s.duration_s(),
        "confidence": s.confidence(),
        "confident": s.nodes.iter().all(NodeStep::confident),
        "samples": s.samples(),
        "nodes": s.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(),
        "links": s.nodes.iter()
            .flat_map(|n| n.links.iter().map(|l| link_json(l, Some(&n.node))))
            .collect::<Vec<_>>(),
        "aggregates": aggregates_json(&s.classes),
    })
}

/// A job step's per-class aggregates, no utilisation above 1: a class whose spread of utilisation goes above
/// its capacity (a sampling artefact, see [`super::capped`]) has those figures at 1 and `capped: true`; its
/// achieved spread is as measured.
fn aggregates_json(classes: &[crate::steps::ClassAggregate]) -> Value {
    let list = classes
        .iter()
        .map(|c| {
            let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
            let mut capped = false;
            if let Some(u) = v.get_mut("utilization").and_then(Value::as_object_mut) {
                for k in ["min", "median", "max"] {
                    if let Some(x) = u.get(k).and_then(Value::as_f64) {
                        let (shown, over) = super::capped::ratio_within(x);
                        capped |= over;
                        u.insert(k.into(), json!(shown));
                    }
                }
            }
            if let Some(o) = v.as_object_mut() {
                o.insert("capped".into(), json!(capped));
            }
            v
        })
        .collect();
    Value::Array(list)
}

/// Routes of the steps API (merged into the collector's HTTP router).
pub fn router(steps: Arc<StepStore>) -> Router {
    Router::new()
        .route("/api/v1/steps", get(list))
        .with_state(steps)
}

/// `GET /api/v1/steps`.
async fn list(State(steps): State<Arc<StepStore>>, uri: Uri) -> Response {
    let params = match Query::<Vec<(String, String)>>::try_from_uri(&uri) {
        Ok(Query(p)) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad query: {e}")),
    };
    let mut node = None;
    let mut job = None;
    let mut limit = DEFAULT_LIMIT;
    for (k, v) in params {
        match k.as_str() {
            "node" if node.is_none() => node = Some(v),
            "job" if job.is_none() => job = Some(v),
            "limit" => match v.parse::<usize>() {
                Ok(n) if (1..=STEPS_PER_NODE).contains(&n) => limit = n,
                _ => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("limit must be an integer from 1 to {STEPS_PER_NODE}, got {v:?}"),
                    )
                }
            },
            "node" | "job" => {
                return error(StatusCode::BAD_REQUEST, format!("{k} given more than once"))
            }
            other => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("unknown parameter {other:?} (expected node or job, and limit)"),
                )
            }
        }
    }
    match (node, job) {
        (Some(n), None) if !n.is_empty() => node_response(&steps, &n, limit),
        (None, Some(j)) if !j.is_empty() => job_response(&steps, &j, limit),
        (Some(_), Some(_)) => error(StatusCode::BAD_REQUEST, "give node or job, not both"),
        _ => error(
            StatusCode::BAD_REQUEST,
            "give node=NAME or job=ID (non-empty), and optionally limit=N",
        ),
    }
}

fn node_response(steps: &StepStore, node: &str, limit: usize) -> Response {
    let Some(v) = steps.node_steps(node, limit) else {
        return error(StatusCode::NOT_FOUND, format!("no node {node:?}"));
    };
    let source = v.last().map_or(StepSource::Inferred, |s| s.source);
    Json(json!({
        "node": node,
        "source": source.as_str(),
        "steps": v.iter().map(node_step_json).collect::<Vec<_>>(),
    }))
    .into_response()
}

fn job_response(steps: &StepStore, job: &str, limit: usize) -> Response {
    // Marker steps align every node by step number; without markers, the job's nodes' inferred steps.
    let (source, v) = match steps.job_steps(job, limit) {
        Some(v) => (StepSource::Markers, v),
        None => match steps.job_inferred_steps(job, limit) {
            Some(v) => (StepSource::Inferred, v),
            None => return error(StatusCode::NOT_FOUND, format!("no steps of job {job:?}")),
        },
    };
    Json(json!({
        "job": job,
        "source": source.as_str(),
        "steps": v.iter().map(job_step_json).collect::<Vec<_>>(),
    }))
    .into_response()
}

/// Samples per second of a job: the newest of its last few steps that every node reported, samples summed over
/// nodes ÷ median duration. `None` without samples.
pub fn job_throughput(steps: &[JobStep]) -> Option<f64> {
    let most = steps.iter().map(|s| s.nodes.len()).max()?;
    let s = steps.iter().rev().find(|s| s.nodes.len() == most)?;
    let d = s.duration_s();
    (d > 0.0).then_some(s.samples()? as f64 / d)
}

struct Fam {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
}

const FAMILIES: &[Fam] = &[
    Fam {
        name: names::STEP_DURATION_SECONDS,
        help: "Duration of the node's latest training step.",
        kind: MetricType::GAUGE,
    },
    Fam {
        name: names::STEP_LINK_BANDWIDTH_BYTES_PER_SECOND,
        help: "Achieved bandwidth of the link (bytes / active time) in its latest step with a confident figure.",
        kind: MetricType::GAUGE,
    },
    Fam {
        name: names::LINK_UTILIZATION_RATIO,
        help: "Achieved bandwidth / capacity of the link in its latest step with a confident figure.",
        kind: MetricType::GAUGE,
    },
    Fam {
        name: names::STEPS_TOTAL,
        help: "Training steps found for the node since the collector started, by source.",
        kind: MetricType::COUNTER,
    },
    Fam {
        name: names::STEP_SAMPLES_PER_SECOND,
        help: "Training throughput of the job (samples per step over all nodes / step duration), from markers.",
        kind: MetricType::GAUGE,
    },
    Fam {
        name: names::COLLECTOR_STEPS_AGE_SECONDS,
        help: "Seconds since the start of the step engine's last completed pass: how old the newest data its steps were cut from is.",
        kind: MetricType::GAUGE,
    },
];

fn link_labels(node: &str, l: &StepLink) -> Vec<LabelPair> {
    let mut v = vec![
        label("node", node),
        label("class", l.link.key.class.as_str()),
        label("device", &l.link.key.device),
        label("port", &l.link.key.port),
        label("role", l.link.role.as_str()),
    ];
    if l.link.key.class == LinkClass::Nvlink {
        v.push(label("gpu", l.link.gpu.as_deref().unwrap_or("")));
        v.push(label("link", l.link.link.as_deref().unwrap_or("")));
    }
    v
}

/// A place in a step's list of links: the link there, and whether its key was figured ([`link_figures`]).
type Place = (*const Link, bool);

/// Per link of a node: the newest confident, active figure of its last [`LINK_LOOKBACK`] steps (`steps`: oldest
/// first), as (labels, achieved bytes/s, utilization). With [`NvlinkDetail::Gpu`] a GPU's NVLinks are one figure
/// (labels `node`, `class`, `device`, `role`, `gpu`, as `/metrics` writes a GPU's folded links): their achieved
/// rates summed, and the utilization of those with a capacity, their rates over their capacities.
fn link_figures<'a>(
    node: &str,
    steps: impl DoubleEndedIterator<Item = &'a NodeStep>,
    detail: NvlinkDetail,
) -> Vec<(Vec<LabelPair>, f64, Option<f64>)> {
    let mut out = Vec::new();
    // Per GPU (device, gpu): achieved sum, and the achieved and capacity sums of the links with a capacity.
    let mut gpus: Vec<(&StepLink, f64, f64, f64)> = Vec::new();
    // Links already figured, sorted (a node has hundreds: a linear search was most of a scrape).
    let mut done: Vec<&LinkKey> = Vec::new();
    // Per place in the step visited last, its link and whether that link's key is in `done`: a node's steps
    // list the store's same shared links in the same order, so a link at the place where the newer step had
    // it, already figured, is known by its pointer, without a search of the keys (which compared their names:
    // most of the step families' time in a scrape).
    let (mut newer, mut this): (Vec<Place>, Vec<Place>) = (vec![], vec![]);
    for s in steps.rev().take(LINK_LOOKBACK) {
        this.clear();
        for (i, l) in s.links.iter().enumerate() {
            let ptr = Arc::as_ptr(&l.link);
            let known = newer.get(i).is_some_and(|&(p, done)| done && p == ptr);
            this.push((ptr, known));
            if known || !l.confident {
                continue;
            }
            let Some(a) = l.achieved_bytes_per_second else {
                continue;
            };
            this[i].1 = true;
            match done.binary_search(&&l.link.key) {
                Ok(_) => continue,
                Err(at) => done.insert(at, &l.link.key),
            }
            if (detail == NvlinkDetail::Link && !l.link.is_gpu_nvlinks())
                || l.link.key.class != LinkClass::Nvlink
            {
                out.push((link_labels(node, l), a, l.utilization));
                continue;
            }
            let same = |g: &&mut (&StepLink, f64, f64, f64)| {
                g.0.link.key.device == l.link.key.device && g.0.link.gpu == l.link.gpu
            };
            let (with_cap, cap) = match l.capacity_bytes_per_second {
                Some(c) if c > 0.0 => (a, c),
                _ => (0.0, 0.0),
            };
            match gpus.iter_mut().find(same) {
                Some(g) => (g.1, g.2, g.3) = (g.1 + a, g.2 + with_cap, g.3 + cap),
                None => gpus.push((l, a, with_cap, cap)),
            }
        }
        std::mem::swap(&mut newer, &mut this);
    }
    for (l, achieved, with_cap, cap) in gpus {
        let labels = vec![
            label("node", node),
            label("class", l.link.key.class.as_str()),
            label("device", &l.link.key.device),
            label("role", l.link.role.as_str()),
            label("gpu", l.link.gpu.as_deref().unwrap_or("")),
        ];
        out.push((labels, achieved, (cap > 0.0).then(|| with_cap / cap)));
    }
    out
}

/// Renders the step families from the [`StepStore`] at scrape time.
pub struct StepCollector {
    steps: Arc<StepStore>,
    nvlink_detail: NvlinkDetail,
    descs: Vec<Desc>,
}

impl StepCollector {
    /// NVLink figures per GPU or per link as `detail` says ([`link_figures`]).
    pub fn new(
        steps: Arc<StepStore>,
        nvlink_detail: NvlinkDetail,
    ) -> Result<StepCollector, prometheus::Error> {
        let descs = FAMILIES
            .iter()
            .map(|f| Desc::new(f.name.into(), f.help.into(), vec![], HashMap::new()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StepCollector {
            steps,
            nvlink_detail,
            descs,
        })
    }
}

/// The step families, built node by node ([`StepFamilies::node`]) and job by job (pure; used by the
/// collector and by tests).
pub struct StepFamilies {
    fams: BTreeMap<&'static str, MetricFamily>,
    detail: NvlinkDetail,
}

impl StepFamilies {
    /// NVLink figures per GPU or per link as `detail` says ([`link_figures`]).
    pub fn new(detail: NvlinkDetail) -> StepFamilies {
        StepFamilies {
            fams: BTreeMap::new(),
            detail,
        }
    }

    fn add(&mut self, name: &'static str, labels: Vec<LabelPair>, value: f64) {
        let Some(f) = FAMILIES.iter().find(|f| f.name == name) else {
            return;
        };
        self.fams
            .entry(name)
            .or_insert_with(|| family(name, f.help, f.kind))
            .mut_metric()
            .push(metric(f.kind, labels, value));
    }

    /// A node's figures from its recent steps (oldest first) and its step totals (from markers, inferred).
    pub fn node<'a>(
        &mut self,
        node: &str,
        steps: impl DoubleEndedIterator<Item = &'a NodeStep> + Clone,
        (markers, inferred): (u64, u64),
    ) {
        if let Some(last) = steps.clone().next_back() {
            self.add(
                names::STEP_DURATION_SECONDS,
                vec![
                    label("node", node),
                    label("training_job", last.job.as_deref().unwrap_or("")),
                ],
                last.duration_s(),
            );
        }
        for (labels, mut achieved, utilization) in link_figures(node, steps, self.detail) {
            if let Some(u) = utilization {
                // Above the capacity is a sampling artefact: exported at the capacity ([`super::capped`]).
                let (shown, capped) = super::capped::ratio_within(u);
                if capped {
                    achieved /= u;
                }
                self.add(names::LINK_UTILIZATION_RATIO, labels.clone(), shown);
            }
            self.add(
                names::STEP_LINK_BANDWIDTH_BYTES_PER_SECOND,
                labels,
                achieved,
            );
        }
        for (source, n) in [
            (StepSource::Markers, markers),
            (StepSource::Inferred, inferred),
        ] {
            if n > 0 {
                self.add(
                    names::STEPS_TOTAL,
                    vec![label("node", node), label("source", source.as_str())],
                    n as f64,
                );
            }
        }
    }

    /// A job's training throughput (samples per second).
    pub fn throughput(&mut self, job: &str, samples_per_second: f64) {
        self.add(
            names::STEP_SAMPLES_PER_SECOND,
            vec![label("training_job", job)],
            samples_per_second,
        );
    }

    /// The families, by name.
    pub fn finish(self) -> Vec<MetricFamily> {
        self.fams.into_values().collect()
    }
}

impl Collector for StepCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut fams = StepFamilies::new(self.nvlink_detail);
        self.steps
            .visit_recent(LINK_LOOKBACK, |node, steps, totals| {
                fams.node(node, steps.map(|s| &**s), totals)
            });
        let mut jobs = self.steps.jobs();
        jobs.truncate(MAX_JOBS_EXPORTED);
        for j in jobs {
            if let Some(v) = self.steps.job_steps(&j, 4).and_then(|s| job_throughput(&s)) {
                fams.throughput(&j, v);
            }
        }
        if let Some(age) = self.steps.cut_age_s(unix_now_ns()) {
            fams.add(names::COLLECTOR_STEPS_AGE_SECONDS, Vec::new(), age);
        }
        fams.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::Spread;
    use commwatch_model::{Endpoint, LinkRole};

    fn link(
        class: LinkClass,
        device: &str,
        n: &str,
        gpu: Option<&str>,
        a: f64,
        cap: Option<f64>,
    ) -> StepLink {
        StepLink {
            link: Arc::new(commwatch_model::Link {
                key: LinkKey::new(class, device, n),
                endpoint: Endpoint::legacy(class, device, n),
                role: LinkRole::Fabric,
                capacity_bytes_per_second: cap,
                state: "ACTIVE".into(),
                attributes: Default::default(),
                gpu: gpu.map(str::to_string),
                link: gpu.map(|_| n.to_string()),
            }),
            tx_bytes: 1,
            rx_bytes: 1,
            active_s: 1.0,
            achieved_bytes_per_second: Some(a),
            average_bytes_per_second: a,
            capacity_bytes_per_second: cap,
            utilization: cap.map(|c| a / c),
            confident: true,
        }
    }

    fn step() -> NodeStep {
        NodeStep {
            fabric: Default::default(),
            node: "n1".into(),
            job: None,
            index: 1,
            start_unix_ns: 0,
            end_unix_ns: 1_000_000_000,
            source: StepSource::Inferred,
            confidence: 1.0,
            samples: None,
            links: vec![
                link(LinkClass::Nvlink, "gpu0", "0", Some("0"), 10.0, Some(40.0)),
                link(LinkClass::Nvlink, "gpu0", "1", Some("0"), 20.0, None),
                link(LinkClass::Infiniband, "mlx5_0", "1", None, 5.0, Some(50.0)),
                link(LinkClass::Nvlink, "gpu1", "0", Some("1"), 30.0, Some(60.0)),
            ],
        }
    }

    /// `commwatch_collector_steps_age_seconds`: absent while no engine runs over the store, one unlabelled
    /// sample from the engine's start on, and from its last pass's start after that.
    #[test]
    fn the_steps_age_is_exported_while_an_engine_runs() {
        let steps = Arc::new(StepStore::new());
        let c = StepCollector::new(steps.clone(), NvlinkDetail::default()).expect("descs");
        let age = |c: &StepCollector| {
            c.collect()
                .into_iter()
                .find(|f| f.name() == names::COLLECTOR_STEPS_AGE_SECONDS)
                .map(|f| {
                    assert_eq!(f.get_metric().len(), 1);
                    assert!(f.get_metric()[0].get_label().is_empty());
                    f.get_metric()[0].get_gauge().value()
                })
        };
        assert_eq!(age(&c), None);
        let now = unix_now_ns();
        steps.engine_started(now - 30_000_000_000);
        let before_a_pass = age(&c).expect("exported once an engine runs");
        assert!((30.0..60.0).contains(&before_a_pass), "{before_a_pass}");
        steps.pass_done(now);
        let after = age(&c).expect("exported");
        assert!((0.0..30.0).contains(&after), "{after}");
    }

    fn shown(figures: &[(Vec<LabelPair>, f64, Option<f64>)]) -> Vec<(String, f64, Option<f64>)> {
        figures
            .iter()
            .map(|(labels, a, u)| {
                let l: Vec<String> = labels
                    .iter()
                    .map(|p| format!("{}={}", p.name(), p.value()))
                    .collect();
                (l.join(","), *a, *u)
            })
            .collect()
    }

    #[test]
    fn nvlink_figures_per_gpu_or_per_link() {
        let steps = [step()];
        assert_eq!(
            shown(&link_figures("n1", steps.iter(), NvlinkDetail::Gpu)),
            [
                (
                    "node=n1,class=infiniband,device=mlx5_0,port=1,role=fabric".into(),
                    5.0,
                    Some(0.1)
                ),
                (
                    "node=n1,class=nvlink,device=gpu0,role=fabric,gpu=0".into(),
                    30.0,
                    Some(0.25)
                ),
                (
                    "node=n1,class=nvlink,device=gpu1,role=fabric,gpu=1".into(),
                    30.0,
                    Some(0.5)
                ),
            ]
        );
        let per_link = link_figures("n1", steps.iter(), NvlinkDetail::Link);
        assert_eq!(per_link.len(), 4);
        assert_eq!(
            shown(&per_link)[1].0,
            "node=n1,class=nvlink,device=gpu0,port=1,role=fabric,gpu=0,link=1"
        );
    }

    #[test]
    fn each_link_takes_its_newest_confident_figure() {
        let older = step();
        let mut newer = step();
        newer.links[0].achieved_bytes_per_second = Some(11.0);
        newer.links[2].confident = false;
        newer.links[3].achieved_bytes_per_second = None;
        let steps = [older, newer];
        let per_link = shown(&link_figures("n1", steps.iter(), NvlinkDetail::Link));
        let value = |port_gpu: &str| {
            per_link
                .iter()
                .find(|f| f.0.contains(port_gpu))
                .map(|f| f.1)
        };
        assert_eq!(per_link.len(), 4, "{per_link:?}");
        assert_eq!(value("device=gpu0,port=0,"), Some(11.0));
        assert_eq!(value("device=gpu0,port=1,"), Some(20.0));
        assert_eq!(value("device=mlx5_0,port=1,"), Some(5.0));
        assert_eq!(value("device=gpu1,port=0,"), Some(30.0));
        let mut fams = StepFamilies::new(NvlinkDetail::Gpu);
        fams.node("n1", steps.iter(), (0, 2));
        fams.throughput("j", 3.0);
        let fams = fams.finish();
        let names: Vec<&str> = fams.iter().map(|f| f.name()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert_eq!(names.len(), 5);
    }

    #[test]
    fn steps_sharing_the_stores_links_take_each_links_newest_confident_figure() {
        // As the engine builds them: every step of a node lists the store's same links, in the same order.
        let oldest = step();
        let mut older = oldest.clone();
        let mut newer = oldest.clone();
        newer.links[0].achieved_bytes_per_second = Some(11.0);
        newer.links[2].confident = false;
        older.links[2].achieved_bytes_per_second = Some(6.0);
        newer.links[3].achieved_bytes_per_second = None;
        older.links[3].confident = false;
        // The newest step lists its links in another order: found by their keys, not their places.
        newer.links.swap(0, 1);
        let steps = [oldest, older, newer];
        let per_link = shown(&link_figures("n1", steps.iter(), NvlinkDetail::Link));
        let value = |port_gpu: &str| {
            let found = per_link.iter().filter(|f| f.0.contains(port_gpu));
            found.map(|f| f.1).collect::<Vec<_>>()
        };
        assert_eq!(per_link.len(), 4, "{per_link:?}");
        assert_eq!(value("device=gpu0,port=0,"), [11.0]);
        assert_eq!(value("device=gpu0,port=1,"), [20.0]);
        assert_eq!(value("device=mlx5_0,port=1,"), [6.0], "the older step's");
        assert_eq!(value("device=gpu1,port=0,"), [30.0], "the oldest step's");
    }

    #[test]
    fn no_utilisation_above_one_in_the_steps_api() {
        // 17.03 GB/s "achieved" on a 12.5 GB/s link: shown at the capacity, marked.
        let l = link(
            LinkClass::Ethernet,
            "eth0",
            "eth0",
            None,
            17.03e9,
            Some(12.5e9),
        );
        let v = link_json(&l, None);
        assert_eq!(v["achieved_bytes_per_second"], json!(12.5e9));
        assert_eq!(v["utilization"], json!(1.0));
        assert_eq!(v["capped"], json!(true));
        let within = link_json(
            &link(LinkClass::Infiniband, "mlx5_0", "1", None, 5e9, Some(25e9)),
            None,
        );
        assert_eq!(within["utilization"], json!(0.2));
        assert_eq!(within["capped"], json!(false));
        let spread = |min: f64, median: f64, max: f64| Spread {
            min,
            median,
            max,
            min_node: "a".into(),
            max_node: "b".into(),
        };
        let agg = crate::steps::ClassAggregate {
            class: LinkClass::Ethernet,
            nodes: 2,
            achieved_bytes_per_second: spread(5e9, 9e9, 17e9),
            utilization: Some(spread(0.4, 0.72, 1.36)),
        };
        let v = aggregates_json(&[agg]);
        assert_eq!(v[0]["utilization"]["max"], json!(1.0));
        assert_eq!(v[0]["utilization"]["median"], json!(0.72));
        assert_eq!(v[0]["capped"], json!(true));
    }
}
