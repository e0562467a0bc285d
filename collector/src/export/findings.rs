//! Findings export: `GET /api/v1/findings` (root causes first; filters `severity`, `kind`, `node`, `job`,
//! `active`, `root`, `limit`, validated by [`super::findings_query`]), `GET|POST /api/v1/baselines` (the POST
//! is what `commwatch baseline import` calls; it is served only on the collector's HTTP listener), and the
//! `/metrics` families `commwatch_finding_active`, `commwatch_findings_raised_total`,
//! `commwatch_scaling_efficiency_ratio`.
//!
//! `commwatch_finding_active` has a series for every active finding, consequences included, labelled
//! `root="true"` for a root cause and `root="false"` for a consequence: alerts select `root!="false"`, so they
//! fire once per root cause, while dashboards still show what each node suffers.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use prometheus::core::{Collector, Desc};
use prometheus::proto::{LabelPair, MetricFamily, MetricType};

use super::findings_query::{self, QueryError};
use super::names;
use super::proto::{family, label, metric};
use crate::analysis::engine::{BaselineError, BaselineRequest, FindingFilter};
use crate::analysis::{AnalysisHandle, Finding};

/// Routes of the findings API (merged into the collector's HTTP router).
pub fn router(analysis: AnalysisHandle) -> Router {
    Router::new()
        .route("/api/v1/findings", get(list))
        .route("/api/v1/baselines", get(baselines).post(post_baseline))
        .with_state(analysis)
}

/// `GET /api/v1/findings`: the filtered list, or 400 with `{"error": "..."}` naming a bad parameter.
async fn list(
    State(a): State<AnalysisHandle>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let parsed = match query {
        Ok(Query(pairs)) => findings_query::parse(&pairs),
        Err(e) => Err(QueryError::Malformed(e.body_text())),
    };
    match parsed {
        Ok(filter) => Json(a.findings(&filter)).into_response(),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

/// `GET /api/v1/baselines`: every baseline held (copied off the async workers).
async fn baselines(State(a): State<AnalysisHandle>) -> Response {
    match tokio::task::spawn_blocking(move || a.baselines()).await {
        Ok(b) => Json(b).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(serde_json::json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

/// Largest baseline request body accepted, in bytes (a nccl-tests result is a few KiB).
pub const MAX_BASELINE_BODY: usize = 2 << 20;
/// Time a client has to send the whole request body once its headers are in: a client that trickles a body
/// cannot hold one of the limited HTTP connections for longer.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads a whole request body within `limit` bytes and `timeout`; the error is the response to send (413 for a
/// body over the limit, 408 for one not sent in time, 400 for a broken one).
async fn read_body(
    body: axum::body::Body,
    limit: usize,
    timeout: Duration,
) -> Result<axum::body::Bytes, Response> {
    let error = |status: StatusCode, message: String| {
        (status, Json(serde_json::json!({ "error": message }))).into_response()
    };
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            format!("the request body was not sent within {timeout:?}"),
        )),
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_large {
                Err(error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the request body is larger than {limit} bytes"),
                ))
            } else {
                Err(error(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the request body: {e}"),
                ))
            }
        }
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

/// `POST /api/v1/baselines`: parsed, validated ([`crate::analysis::baselines`]: every number finite and in
/// bounds, at most `MAX_TESTS_PER_REQUEST` tests, at most `MAX_BARE_BASELINES` held), merged and written
/// to the state directory off the async workers; `200` with what was stored once it is durable, else
/// `400`/`413`/`503` with `{"error": "...", "field": "..."}` (`field` when one is at fault).
async fn post_baseline(State(a): State<AnalysisHandle>, body: axum::body::Body) -> Response {
    let body = match read_body(body, MAX_BASELINE_BODY, BODY_READ_TIMEOUT).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    let stored = tokio::task::spawn_blocking(move || {
        let stored = BaselineRequest::parse(&body)?.into_records()?;
        a.add_baselines(&stored)?;
        Ok::<_, BaselineError>(stored)
    })
    .await
    .unwrap_or_else(|e| Err(BaselineError::NotStored(e.to_string())));
    match stored {
        Ok(stored) => (StatusCode::OK, Json(stored)).into_response(),
        Err(e) => {
            let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
            let mut body = serde_json::json!({ "error": e.to_string() });
            if let Some(f) = e.field() {
                body["field"] = f.into();
            }
            (status, Json(body)).into_response()
        }
    }
}

/// The labels of `commwatch_finding_active`: `kind`, `severity`, `node`, and the subject's `device`, `port`,
/// `gpu`, `link`, `training_job` (the subject's job) where set, then `root` (`true` for a root cause,
/// `false` for a consequence; bounded: one series per active finding). A finding about an NCCL setting has it
/// as its `device` label, as it had before the subject named settings apart.
pub fn finding_labels(f: &Finding) -> Vec<LabelPair> {
    let mut v = vec![
        label("kind", f.kind.as_str()),
        label("severity", f.severity.as_str()),
        label("node", &f.subject.node),
    ];
    let device = f.subject.device.as_ref().or(f.subject.setting.as_ref());
    for (k, val) in [
        ("device", device),
        ("port", f.subject.port.as_ref()),
        ("gpu", f.subject.gpu.as_ref()),
        ("link", f.subject.link.as_ref()),
        ("training_job", f.subject.job.as_ref()),
    ] {
        if let Some(x) = val {
            v.push(label(k, x));
        }
    }
    v.push(label("root", if f.root { "true" } else { "false" }));
    v
}

/// How old each job's findings are ([`names::COLLECTOR_EVALUATION_AGE_SECONDS`]): about one interval (1 s)
/// while the analysis keeps up.
const EVALUATION_AGE_SECONDS: &str = names::COLLECTOR_EVALUATION_AGE_SECONDS;
const EVALUATION_AGE_HELP: &str = "Seconds since the end of the data each job's findings were last evaluated on (training_job=\"cluster\": nodes of no job).";

/// Renders the findings families at scrape time.
pub struct FindingsCollector {
    analysis: AnalysisHandle,
    descs: Vec<Desc>,
}

impl FindingsCollector {
    pub fn new(analysis: AnalysisHandle) -> Result<FindingsCollector, prometheus::Error> {
        let descs = [
            (
                names::FINDING_ACTIVE,
                "1 while the finding is active (root=\"false\": a consequence of another finding); absent once cleared.",
            ),
            (
                names::FINDINGS_RAISED_TOTAL,
                "Findings raised since the collector started, by kind.",
            ),
            (
                names::SCALING_EFFICIENCY_RATIO,
                "Scaling efficiency of the job (0..1); see /api/v1/jobs for the method.",
            ),
            (EVALUATION_AGE_SECONDS, EVALUATION_AGE_HELP),
        ]
        .iter()
        .map(|(n, h)| Desc::new(n.to_string(), h.to_string(), vec![], HashMap::new()))
        .collect::<Result<Vec<_>, _>>()?;
        Ok(FindingsCollector { analysis, descs })
    }
}

impl Collector for FindingsCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut active = family(
            names::FINDING_ACTIVE,
            "1 while the finding is active (root=\"false\": a consequence of another finding); absent once cleared.",
            MetricType::GAUGE,
        );
        for f in self.analysis.findings(&FindingFilter {
            active: Some(true),
            ..Default::default()
        }) {
            active
                .mut_metric()
                .push(metric(MetricType::GAUGE, finding_labels(&f), 1.0));
        }
        let mut raised = family(
            names::FINDINGS_RAISED_TOTAL,
            "Findings raised since the collector started, by kind.",
            MetricType::COUNTER,
        );
        for (k, n) in self.analysis.raised_total() {
            raised.mut_metric().push(metric(
                MetricType::COUNTER,
                vec![label("kind", k.as_str())],
                n as f64,
            ));
        }
        let mut eff = family(
            names::SCALING_EFFICIENCY_RATIO,
            "Scaling efficiency of the job (0..1); see /api/v1/jobs for the method.",
            MetricType::GAUGE,
        );
        for j in self.analysis.job_figures() {
            if let Some(e) = j.scaling_efficiency {
                eff.mut_metric().push(metric(
                    MetricType::GAUGE,
                    vec![label("training_job", &j.job)],
                    e,
                ));
            }
        }
        let mut age = family(
            EVALUATION_AGE_SECONDS,
            EVALUATION_AGE_HELP,
            MetricType::GAUGE,
        );
        let now = commwatch_model::clock::unix_now_ns();
        for (job, seconds) in self.analysis.evaluation_ages(now) {
            age.mut_metric().push(metric(
                MetricType::GAUGE,
                vec![label("training_job", &job)],
                seconds,
            ));
        }
        [active, raised, eff, age]
            .into_iter()
            .filter(|f| !f.get_metric().is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_body_not_sent_in_time_gets_408() {
        // Headers in, body never comes.
        let body = axum::body::Body::from_stream(futures::stream::pending::<
            Result<axum::body::Bytes, std::io::Error>,
        >());
        let started = tokio::time::Instant::now();
        let r = read_body(body, 1024, BODY_READ_TIMEOUT).await.unwrap_err();
        assert_eq!(r.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(started.elapsed(), BODY_READ_TIMEOUT);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_gets_413_and_a_whole_one_is_read() {
        let r = read_body(vec![b'x'; 2048].into(), 1024, BODY_READ_TIMEOUT)
            .await
            .unwrap_err();
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let b = read_body(b"{\"a\":1}".to_vec().into(), 1024, BODY_READ_TIMEOUT)
            .await
            .unwrap();
        assert_eq!(&b[..], b"{\"a\":1}");
        let broken = axum::body::Body::from_stream(futures::stream::iter([
            Ok(axum::body::Bytes::from_static(b"{")),
            Err(std::io::Error::other("connection reset")),
        ]));
        let r = read_body(broken, 1024, BODY_READ_TIMEOUT)
            .await
            .unwrap_err();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn an_nccl_finding_keeps_its_setting_as_the_device_label() {
        use crate::analysis::{Evidence, FindingKind, Severity, Subject};
        let f = Finding {
            id: "nccl_misconfiguration:node-03:NCCL_SOCKET_IFNAME:job=job-42".into(),
            kind: FindingKind::NcclMisconfiguration,
            severity: Severity::Critical,
            subject: Subject {
                node: "node-03".into(),
                job: Some("job-42".into()),
                setting: Some("NCCL_SOCKET_IFNAME".into()),
                ..Default::default()
            },
            summary: String::new(),
            evidence: Evidence::default(),
            action: String::new(),
            first_seen_unix_s: 0.0,
            last_seen_unix_s: 0.0,
            active: true,
            root: true,
            caused_by: None,
            consequences: vec![],
        };
        let pairs = finding_labels(&f);
        let labels: Vec<(&str, &str)> = pairs.iter().map(|l| (l.name(), l.value())).collect();
        assert_eq!(
            labels,
            [
                ("kind", "nccl_misconfiguration"),
                ("severity", "critical"),
                ("node", "node-03"),
                ("device", "NCCL_SOCKET_IFNAME"),
                ("training_job", "job-42"),
                ("root", "true"),
            ]
        );
    }
}
