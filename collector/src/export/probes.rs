//! `GET /api/v1/probes` (the latest result of every probed pair) and `POST /api/v1/probes` (probe now: `nodes`,
//! a `job`'s nodes, or explicit `pairs`), and the probes' series in `/metrics`:
//! `commwatch_probe_bandwidth_bytes_per_second{node,peer,direction}` (`tx`: node → peer),
//! `commwatch_probe_latency_seconds{node,peer,quantile}` (round trip; `0.5`, `0.99`, `1`) and
//! `commwatch_probes_total{outcome}`. At most `[probes] max_pairs` pairs, so the series are bounded.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use commwatch_model::clock::unix_now_ns;
use commwatch_probe::{Params, TransportKind};
use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};
use serde::Deserialize;

use super::proto::{family, label, metric};
use crate::probes::{all_pairs, Prober, MAX_PAIRS_PER_REQUEST};
use crate::store::Store;

pub const PROBE_BANDWIDTH: &str = "commwatch_probe_bandwidth_bytes_per_second";
pub const PROBE_LATENCY: &str = "commwatch_probe_latency_seconds";
pub const PROBES_TOTAL: &str = "commwatch_probes_total";
const BANDWIDTH_HELP: &str =
    "Bare bandwidth of the latest active probe between two nodes, bytes/s (direction tx: node to peer).";
const LATENCY_HELP: &str =
    "Round trip of one small message in the latest active probe between two nodes, seconds.";
const TOTAL_HELP: &str = "Active probes run by the collector, by outcome (ok, declined, failed).";

/// Largest `POST /api/v1/probes` body.
const MAX_BODY: usize = 64 * 1024;

#[derive(Clone)]
struct ProbesState {
    prober: Arc<Prober>,
    store: Arc<Store>,
}

pub fn router(prober: Arc<Prober>, store: Arc<Store>) -> Router {
    Router::new()
        .route("/api/v1/probes", get(list).post(schedule))
        .with_state(ProbesState { prober, store })
}

async fn list(State(s): State<ProbesState>) -> Response {
    Json(serde_json::json!({
        "running": s.prober.is_running(),
        "probes": s.prober.book.list(),
    }))
    .into_response()
}

/// The body of `POST /api/v1/probes`: one of `nodes`, `job`, `pairs`; the rest override `[probes]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeRequest {
    pub nodes: Vec<String>,
    pub job: Option<String>,
    pub pairs: Vec<(String, String)>,
    pub transport: Option<TransportKind>,
    pub duration_s: Option<f64>,
    pub size_bytes: Option<u64>,
}

/// Why a request is refused: status, the field at fault, the message.
type Refusal = (StatusCode, &'static str, String);

fn bad(status: StatusCode, field: &str, message: String) -> Response {
    (
        status,
        Json(serde_json::json!({ "error": message, "field": field })),
    )
        .into_response()
}

impl ProbeRequest {
    /// The pairs to probe and the parameters, or the response naming what is wrong.
    fn plan(&self, s: &ProbesState) -> Result<(Vec<(String, String)>, Params), Refusal> {
        let mut params = s.prober.params();
        if let Some(t) = self.transport {
            params.transport = t;
        }
        if let Some(d) = self.duration_s {
            if !(d.is_finite() && d > 0.0 && d <= 60.0) {
                return Err((
                    StatusCode::BAD_REQUEST,
                    "duration_s",
                    "must be above 0 and at most 60".into(),
                ));
            }
            params.duration = Duration::from_secs_f64(d);
        }
        if let Some(n) = self.size_bytes {
            if n == 0 || n > u64::from(commwatch_probe::wire::MAX_DATA_BYTES) {
                return Err((StatusCode::BAD_REQUEST, "size_bytes", "out of range".into()));
            }
            params.size = n;
        }
        let mut nodes = self.nodes.clone();
        if let Some(job) = &self.job {
            for (node, list) in s.store.node_jobs(unix_now_ns()) {
                if list.jobs.iter().any(|j| &j.id == job) {
                    nodes.push(node);
                }
            }
            if nodes.is_empty() {
                return Err((
                    StatusCode::NOT_FOUND,
                    "job",
                    format!("no live node runs job {job:?}"),
                ));
            }
        }
        let mut pairs = self.pairs.clone();
        pairs.extend(all_pairs(&nodes, MAX_PAIRS_PER_REQUEST + 1));
        if pairs.is_empty() {
            return Err((
                StatusCode::BAD_REQUEST,
                "nodes",
                "name two nodes, a job, or pairs".into(),
            ));
        }
        if pairs.len() > MAX_PAIRS_PER_REQUEST {
            return Err((
                StatusCode::BAD_REQUEST,
                "pairs",
                format!("at most {MAX_PAIRS_PER_REQUEST} pairs a request"),
            ));
        }
        if let Some(n) = pairs
            .iter()
            .flat_map(|(a, b)| [a, b])
            .find(|n| s.prober.address_of(n).is_none())
        {
            return Err((
                StatusCode::BAD_REQUEST,
                "nodes",
                format!(
                    "node {n:?} has no probe address: not in [probes] addresses, and its agent advertised none"
                ),
            ));
        }
        Ok((pairs, params))
    }
}

/// `202` with the pairs scheduled; `400`/`404` naming the field; `409` while a run is going.
async fn schedule(State(s): State<ProbesState>, body: axum::body::Body) -> Response {
    let body = match tokio::time::timeout(
        Duration::from_secs(30),
        axum::body::to_bytes(body, MAX_BODY),
    )
    .await
    {
        Ok(Ok(b)) => b,
        _ => {
            return bad(
                StatusCode::BAD_REQUEST,
                "body",
                format!("no body of at most {MAX_BODY} bytes"),
            )
        }
    };
    let req: ProbeRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return bad(
                StatusCode::BAD_REQUEST,
                "body",
                format!("invalid probe request: {e}"),
            )
        }
    };
    let (pairs, params) = match req.plan(&s) {
        Ok(p) => p,
        Err((status, field, message)) => return bad(status, field, message),
    };
    if !s.prober.start(pairs.clone(), params) {
        return bad(
            StatusCode::CONFLICT,
            "",
            "a probe run is in progress".into(),
        );
    }
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "scheduled": pairs })),
    )
        .into_response()
}

/// The probes' series at scrape time.
pub struct ProbesCollector {
    prober: Arc<Prober>,
    descs: Vec<Desc>,
}

impl ProbesCollector {
    pub fn new(prober: Arc<Prober>) -> Result<ProbesCollector, prometheus::Error> {
        let descs = [
            (PROBE_BANDWIDTH, BANDWIDTH_HELP),
            (PROBE_LATENCY, LATENCY_HELP),
            (PROBES_TOTAL, TOTAL_HELP),
        ]
        .iter()
        .map(|(n, h)| Desc::new(n.to_string(), h.to_string(), vec![], HashMap::new()))
        .collect::<Result<Vec<_>, _>>()?;
        Ok(ProbesCollector { prober, descs })
    }
}

impl Collector for ProbesCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut bw = family(PROBE_BANDWIDTH, BANDWIDTH_HELP, MetricType::GAUGE);
        let mut lat = family(PROBE_LATENCY, LATENCY_HELP, MetricType::GAUGE);
        let mut total = family(PROBES_TOTAL, TOTAL_HELP, MetricType::COUNTER);
        for r in self.prober.book.list().iter().filter(|r| r.outcome == "ok") {
            let pair =
                |k: &str, v: &str| vec![label("node", &r.from), label("peer", &r.to), label(k, v)];
            for (dir, v) in [("tx", r.tx_bytes_per_second), ("rx", r.rx_bytes_per_second)] {
                if let Some(v) = v {
                    bw.mut_metric()
                        .push(metric(MetricType::GAUGE, pair("direction", dir), v));
                }
            }
            let qs = [
                ("0.5", r.latency_p50_seconds),
                ("0.99", r.latency_p99_seconds),
                ("1", r.latency_max_seconds),
            ];
            for (q, v) in qs {
                if let Some(v) = v {
                    lat.mut_metric()
                        .push(metric(MetricType::GAUGE, pair("quantile", q), v));
                }
            }
        }
        for (i, outcome) in ["ok", "declined", "failed"].iter().enumerate() {
            let n = self.prober.book.counts[i].load(Ordering::Relaxed) as f64;
            total.mut_metric().push(metric(
                MetricType::COUNTER,
                vec![label("outcome", outcome)],
                n,
            ));
        }
        [bw, lat, total]
            .into_iter()
            .filter(|f| !f.get_metric().is_empty())
            .collect()
    }
}
