//! `GET /api/v1/collectives?job=ID` and `commwatch_collective_bus_bandwidth_bytes_per_second`: per collective and
//! size class of a job, from NCCL Inspector's records (`crate::collectives`).
//!
//! The API answers `{"job": ID, "collectives": [...]}`, costliest first; an element: `collective`,
//! `size_class`, `size_bytes` (median), `count`, `bytes`, `time_s`, `bus_bandwidth_bytes_per_second` (median over
//! ranks and instances), `slowest_rank`, `slowest_rank_node`, `slowest_rank_bus_bandwidth_bytes_per_second`,
//! `ranks`, `nodes`, `fabric_capacity_bytes_per_second`, `fabric_share`.
//!
//! `GET /api/v1/collectives?job=ID&by=step[&limit=N]` answers per training step (`crate::collectives::by_step`):
//! `{"job", "by": "step", "source": "markers"|"inferred"|null, "steps": [...], "outside_steps": {"count",
//! "collectives": [...]}}`, the newest `limit` (default [`DEFAULT_STEP_LIMIT`], at most
//! [`STEPS_PER_NODE`]) steps oldest first; a step: `index`, `source`, `start_unix_ns`, `end_unix_ns`, `nodes`,
//! `collectives` (the elements above, each with `per_rank`: `rank`, `node`, `bus_bandwidth_bytes_per_second`,
//! `time_s`). A job without steps has `"steps": []` and every collective outside.
//!
//! A missing, repeated or unknown parameter, `by` other than `step`, or `limit` without `by=step` answers 400,
//! a job without records 404, with `{"error": "..."}`. The metric is labelled `training_job`,
//! `collective`, `size_class` (bounded: never by sequence number or communicator).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use commwatch_model::clock::unix_now_ns;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};

use super::proto::{family, label, metric};
use crate::collectives::{node_fabric_capacity, CollectiveStage};
use crate::steps::history::STEPS_PER_NODE;
use crate::steps::StepStore;
use crate::store::Store;

/// The metric's name.
pub const BUS_BANDWIDTH: &str = "commwatch_collective_bus_bandwidth_bytes_per_second";
const BUS_BANDWIDTH_HELP: &str = "Median bus bandwidth of a job's collectives of one kind and size class over its ranks and recent instances (NCCL Inspector), bytes/s.";

/// Steps `by=step` returns when the query names no `limit`.
pub const DEFAULT_STEP_LIMIT: usize = 20;

#[derive(Clone)]
struct ApiState {
    store: Arc<Store>,
    stage: Arc<CollectiveStage>,
    steps: Arc<StepStore>,
}

pub fn router(store: Arc<Store>, stage: Arc<CollectiveStage>, steps: Arc<StepStore>) -> Router {
    Router::new()
        .route("/api/v1/collectives", get(list))
        .with_state(ApiState {
            store,
            stage,
            steps,
        })
}

async fn list(State(s): State<ApiState>, uri: Uri) -> Response {
    let (status, body) = match Query::<Vec<(String, String)>>::try_from_uri(&uri) {
        Ok(Query(p)) => answer(&s.store, &s.stage, &s.steps, p),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            serde_json::json!({ "error": format!("bad query: {e}") }),
        ),
    };
    (status, Json(body)).into_response()
}

/// A query's parameters: the job, and the step limit when `by=step`.
struct Params {
    job: String,
    by_step: Option<usize>,
}

fn parse_params(params: Vec<(String, String)>) -> Result<Params, String> {
    let (mut job, mut by, mut limit) = (None, None, None);
    for (k, v) in params {
        let slot = match k.as_str() {
            "job" => &mut job,
            "by" => &mut by,
            "limit" => &mut limit,
            other => {
                return Err(format!(
                    "unknown parameter {other:?} (expected job, by, limit)"
                ))
            }
        };
        if slot.replace(v).is_some() {
            return Err(format!("{k} given more than once"));
        }
    }
    let job = job
        .filter(|j| !j.is_empty())
        .ok_or("give job=ID (non-empty)")?;
    let by_step = match (by.as_deref(), limit) {
        (None, None) => None,
        (None, Some(_)) => return Err("limit needs by=step".into()),
        (Some("step"), None) => Some(DEFAULT_STEP_LIMIT),
        (Some("step"), Some(l)) => match l.parse::<usize>() {
            Ok(n) if (1..=STEPS_PER_NODE).contains(&n) => Some(n),
            _ => {
                return Err(format!(
                    "limit must be an integer from 1 to {STEPS_PER_NODE}, got {l:?}"
                ))
            }
        },
        (Some(other), _) => return Err(format!("by must be step, got {other:?}")),
    };
    Ok(Params { job, by_step })
}

/// The answer to a query's parameters: status and JSON body.
fn answer(
    store: &Store,
    stage: &CollectiveStage,
    steps: &StepStore,
    params: Vec<(String, String)>,
) -> (StatusCode, serde_json::Value) {
    let Params { job, by_step } = match parse_params(params) {
        Ok(p) => p,
        Err(msg) => return (StatusCode::BAD_REQUEST, serde_json::json!({ "error": msg })),
    };
    stage.update(store, unix_now_ns());
    let capacity = |node: &str| node_fabric_capacity(store, node);
    let body = match by_step {
        None => stage
            .summaries(&job, &capacity)
            .map(|list| serde_json::json!({ "job": job, "collectives": list })),
        Some(limit) => {
            // Every held step: the collectives of steps older than the limit are placed, not called outside.
            let (source, held) = match steps.job_steps(&job, STEPS_PER_NODE) {
                Some(v) => (Some("markers"), v),
                None => match steps.job_inferred_steps(&job, STEPS_PER_NODE) {
                    Some(v) => (Some("inferred"), v),
                    None => (None, Vec::new()),
                },
            };
            stage.by_step(&job, &held, limit, &capacity).map(|b| {
                serde_json::json!({
                    "job": job, "by": "step", "source": source,
                    "steps": b.steps, "outside_steps": b.outside_steps,
                })
            })
        }
    };
    match body {
        Some(body) => (StatusCode::OK, body),
        None => (
            StatusCode::NOT_FOUND,
            serde_json::json!({ "error": format!("no collective records for job {job:?}") }),
        ),
    }
}

/// Renders the metric at scrape time, one series per job, collective and size class.
pub struct CollectivesCollector {
    store: Arc<Store>,
    stage: Arc<CollectiveStage>,
    descs: Vec<Desc>,
}

impl CollectivesCollector {
    pub fn new(
        store: Arc<Store>,
        stage: Arc<CollectiveStage>,
    ) -> Result<CollectivesCollector, prometheus::Error> {
        let desc = Desc::new(
            BUS_BANDWIDTH.to_string(),
            BUS_BANDWIDTH_HELP.to_string(),
            vec![],
            HashMap::new(),
        )?;
        Ok(CollectivesCollector {
            store,
            stage,
            descs: vec![desc],
        })
    }
}

impl Collector for CollectivesCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.stage.update(&self.store, unix_now_ns());
        let mut f = family(BUS_BANDWIDTH, BUS_BANDWIDTH_HELP, MetricType::GAUGE);
        let capacity = |_: &str| None;
        for job in self.stage.job_ids() {
            for s in self.stage.summaries(&job, &capacity).unwrap_or_default() {
                f.mut_metric().push(metric(
                    MetricType::GAUGE,
                    vec![
                        label("collective", &s.collective),
                        label("size_class", s.size_class),
                        label("training_job", &job),
                    ],
                    s.bus_bandwidth_bytes_per_second,
                ));
            }
        }
        if f.get_metric().is_empty() {
            Vec::new()
        } else {
            vec![f]
        }
    }
}

#[cfg(test)]
mod tests {
    use commwatch_model::inspector::CollectiveRecord;

    use super::*;
    use crate::store::CollectiveEntry;

    fn stage() -> Arc<CollectiveStage> {
        let stage = CollectiveStage::new();
        stage.apply(entries(7, 0));
        stage
    }

    /// Collective `sn` of job-1 on ranks 0–3 (nodes node-0 and node-1), dumped at `dump_us`.
    fn entries(sn: u64, dump_us: u64) -> impl Iterator<Item = CollectiveEntry> {
        (0..4u32).map(move |rank| CollectiveEntry {
            job: "job-1".into(),
            job_rank: Some(rank),
            record: CollectiveRecord {
                comm_id: "0xc".into(),
                rank,
                n_ranks: 4,
                n_nodes: 2,
                hostname: format!("node-{}", rank / 2),
                pid: 1,
                dump_timestamp_us: dump_us,
                collective: "AllReduce".into(),
                sequence: sn,
                size_bytes: 220_000_000,
                exec_time_us: 33_673.0,
                timing_source: None,
                algorithm: None,
                algo_bandwidth_bytes_per_second: 6.5e9,
                bus_bandwidth_bytes_per_second: if rank == 3 { 9.3e9 } else { 9.8e9 },
            },
            received_unix_ns: 1,
        })
    }

    fn store() -> Arc<Store> {
        let d = std::time::Duration::from_secs(60);
        Arc::new(Store::new(d, d, crate::config::Limits::default()))
    }

    fn get(query: &[(&str, &str)]) -> (StatusCode, serde_json::Value) {
        let params = query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        answer(&store(), &stage(), &StepStore::new(), params)
    }

    #[test]
    fn by_step_places_collectives_in_their_steps() {
        use crate::steps::{NodeStep, StepSource};
        const S: i64 = 1_000_000_000;
        let steps = StepStore::new();
        for node in ["node-0", "node-1"] {
            let step = |index: u64| NodeStep {
                fabric: Default::default(),
                node: node.into(),
                job: Some("job-1".into()),
                index,
                start_unix_ns: index as i64 * S,
                end_unix_ns: (index as i64 + 1) * S,
                source: StepSource::Markers,
                confidence: 1.0,
                samples: None,
                links: vec![],
            };
            steps.push(node, vec![step(10), step(11), step(12)]);
        }
        let stage = CollectiveStage::new();
        // Two collectives in step 10, one in step 12, one after every step (midpoint 13.48 s).
        for (sn, dump_s) in [(0, 10.2), (1, 10.9), (2, 12.5), (3, 13.5)] {
            stage.apply(entries(sn, (dump_s * 1e6) as u64));
        }
        let q = |query: &[(&str, &str)]| {
            let params = query
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            answer(&store(), &stage, &steps, params)
        };
        let (status, v) = q(&[("job", "job-1"), ("by", "step"), ("limit", "2")]);
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(
            (v["by"].as_str(), v["source"].as_str()),
            (Some("step"), Some("markers"))
        );
        let s = v["steps"].as_array().unwrap();
        assert_eq!(s.len(), 2, "the newest two of three steps");
        assert_eq!(
            (s[0]["index"].as_u64(), s[1]["index"].as_u64()),
            (Some(11), Some(12))
        );
        assert_eq!(s[0]["collectives"].as_array().unwrap().len(), 0);
        let c = &s[1]["collectives"][0];
        for key in [
            "collective",
            "size_bytes",
            "count",
            "bus_bandwidth_bytes_per_second",
            "ranks",
        ] {
            assert!(c.get(key).is_some(), "{key} in {c}");
        }
        assert_eq!(
            (c["count"].as_u64(), c["slowest_rank"].as_u64()),
            (Some(1), Some(3))
        );
        assert_eq!(c["per_rank"][3]["bus_bandwidth_bytes_per_second"], 9.3e9);
        assert_eq!(c["per_rank"][3]["node"], "node-1");
        assert_eq!(v["outside_steps"]["count"], 1);
        let (_, v) = q(&[("job", "job-1"), ("by", "step")]);
        assert_eq!(v["steps"][0]["collectives"][0]["count"], 2);
        for bad in [
            &[("job", "job-1"), ("by", "node")][..],
            &[("job", "job-1"), ("limit", "2")],
            &[("job", "job-1"), ("by", "step"), ("limit", "0")],
            &[("job", "job-1"), ("by", "step"), ("by", "step")],
        ] {
            assert_eq!(q(bad).0, StatusCode::BAD_REQUEST, "{bad:?}");
        }
        // A job without steps: every collective outside.
        let by_step = vec![("job".into(), "job-1".into()), ("by".into(), "step".into())];
        let (status, v) = answer(&store(), &stage, &StepStore::new(), by_step);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            (v["steps"].as_array().map(Vec::len), v["source"].is_null()),
            (Some(0), true)
        );
        assert_eq!(v["outside_steps"]["count"], 4);
    }

    #[test]
    fn a_job_gets_its_collectives_and_bad_queries_400() {
        let (status, v) = get(&[("job", "job-1")]);
        assert_eq!(status, StatusCode::OK);
        let c = &v["collectives"][0];
        assert_eq!(c["collective"], "AllReduce");
        assert_eq!(c["size_bytes"], 220_000_000);
        assert_eq!(c["count"], 1);
        assert_eq!(c["slowest_rank"], 3);
        assert_eq!(c["ranks"], 4);
        assert_eq!(c["bus_bandwidth_bytes_per_second"], 9.8e9);
        assert_eq!(get(&[("job", "none")]).0, StatusCode::NOT_FOUND);
        assert_eq!(get(&[]).0, StatusCode::BAD_REQUEST);
        assert_eq!(
            get(&[("job", "a"), ("job", "b")]).0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(get(&[("node", "x")]).0, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn the_metric_is_labelled_by_job_collective_and_size_class() {
        let c = CollectivesCollector::new(store(), stage()).unwrap();
        let f = c.collect();
        let m = &f[0].get_metric()[0];
        let labels: Vec<(&str, &str)> = m
            .get_label()
            .iter()
            .map(|l| (l.name(), l.value()))
            .collect();
        assert_eq!(
            labels,
            [
                ("collective", "AllReduce"),
                ("size_class", "le_256MiB"),
                ("training_job", "job-1")
            ]
        );
        assert_eq!(m.get_gauge().value(), 9.8e9);
    }
}
