//! `GET /api/v1/collectives?job=ID` and `commwatch_collective_bus_bandwidth_bytes_per_second`: per collective and
//! size class of a job, from NCCL Inspector's records (`crate::collectives`).
//!
//! The API answers `{"job": ID, "collectives": [...]}`, costliest first; an element: `collective`,
//! `size_class`, `size_bytes` (median), `count`, `bytes`, `time_s`, `bus_bandwidth_bytes_per_second` (median over
//! ranks and instances), `slowest_rank`, `slowest_rank_node`, `slowest_rank_bus_bandwidth_bytes_per_second`,
//! `ranks`, `nodes`, `fabric_capacity_bytes_per_second`, `fabric_share`. A missing, repeated or unknown parameter
//! answers 400, a job without records 404, with `{"error": "..."}`. The metric is labelled `training_job`,
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
use crate::store::Store;

/// The metric's name.
pub const BUS_BANDWIDTH: &str = "commwatch_collective_bus_bandwidth_bytes_per_second";
const BUS_BANDWIDTH_HELP: &str = "Median bus bandwidth of a job's collectives of one kind and size class over its ranks and recent instances (NCCL Inspector), bytes/s.";

#[derive(Clone)]
struct ApiState {
    store: Arc<Store>,
    stage: Arc<CollectiveStage>,
}

pub fn router(store: Arc<Store>, stage: Arc<CollectiveStage>) -> Router {
    Router::new()
        .route("/api/v1/collectives", get(list))
        .with_state(ApiState { store, stage })
}

async fn list(State(s): State<ApiState>, uri: Uri) -> Response {
    let (status, body) = match Query::<Vec<(String, String)>>::try_from_uri(&uri) {
        Ok(Query(p)) => answer(&s.store, &s.stage, p),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            serde_json::json!({ "error": format!("bad query: {e}") }),
        ),
    };
    (status, Json(body)).into_response()
}

/// The answer to a query's parameters: status and JSON body.
fn answer(
    store: &Store,
    stage: &CollectiveStage,
    params: Vec<(String, String)>,
) -> (StatusCode, serde_json::Value) {
    let bad = |msg: String| (StatusCode::BAD_REQUEST, serde_json::json!({ "error": msg }));
    let mut job = None;
    for (k, v) in params {
        match k.as_str() {
            "job" if job.is_none() => job = Some(v),
            "job" => return bad("job given more than once".into()),
            other => return bad(format!("unknown parameter {other:?} (expected job)")),
        }
    }
    let Some(job) = job.filter(|j| !j.is_empty()) else {
        return bad("give job=ID (non-empty)".into());
    };
    stage.update(store, unix_now_ns());
    let capacity = |node: &str| node_fabric_capacity(store, node);
    match stage.summaries(&job, &capacity) {
        Some(list) => (
            StatusCode::OK,
            serde_json::json!({ "job": job, "collectives": list }),
        ),
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
        let entries = (0..4u32).map(|rank| CollectiveEntry {
            job: "job-1".into(),
            job_rank: Some(rank),
            record: CollectiveRecord {
                comm_id: "0xc".into(),
                rank,
                n_ranks: 4,
                n_nodes: 2,
                hostname: format!("node-{}", rank / 2),
                pid: 1,
                dump_timestamp_us: 0,
                collective: "AllReduce".into(),
                sequence: 7,
                size_bytes: 220_000_000,
                exec_time_us: 33_673.0,
                timing_source: None,
                algorithm: None,
                algo_bandwidth_bytes_per_second: 6.5e9,
                bus_bandwidth_bytes_per_second: if rank == 3 { 9.3e9 } else { 9.8e9 },
            },
            received_unix_ns: 1,
        });
        stage.apply(entries);
        stage
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
        answer(&store(), &stage(), params)
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
