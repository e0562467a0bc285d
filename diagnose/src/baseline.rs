//! A bare-communication baseline from a nccl-tests result, in the form `commwatch baseline import FILE
//! --collector URL` sends to a collector so that live findings compare in-training bandwidth with it.

use std::path::Path;

use serde::Serialize;

use crate::analysis::bandwidth::summarize;
use crate::nccl_tests::{parse_file, NcclTestsError};

/// One point of the curve: message size and the better of the out-of-place/in-place bus bandwidths.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselinePoint {
    pub size_bytes: u64,
    pub busbw_gbps: f64,
    pub time_us: f64,
}

/// One test's baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineTest {
    pub collective: String,
    pub nranks: Option<u32>,
    pub nnodes: Option<u32>,
    pub hosts: Vec<String>,
    pub nccl_version: Option<String>,
    pub avg_busbw_gbps: Option<f64>,
    pub peak_busbw_gbps: Option<f64>,
    pub saturation_bytes: Option<u64>,
    pub latency_us: Option<f64>,
    pub points: Vec<BaselinePoint>,
}

/// Everything in one file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    pub source_file: String,
    pub tests: Vec<BaselineTest>,
}

/// Reads a nccl-tests result (any format generation) as a baseline.
pub fn parse_baseline(path: &Path) -> Result<Baseline, NcclTestsError> {
    let parsed = parse_file(path)?;
    let tests = parsed
        .tests
        .iter()
        .map(|t| {
            let s = summarize(t);
            let mut hosts: Vec<String> = t.ranks.iter().map(|r| r.host.clone()).collect();
            hosts.sort();
            hosts.dedup();
            BaselineTest {
                collective: t.collective.clone(),
                nranks: t.nranks(),
                nnodes: t.nnodes(),
                hosts,
                nccl_version: t.nccl_version.clone(),
                avg_busbw_gbps: t.avg_busbw_gbps.or(s.avg_busbw_computed_gbps),
                peak_busbw_gbps: s.peak_busbw_gbps,
                saturation_bytes: s.saturation_bytes,
                latency_us: s.latency_us,
                points: t
                    .rows
                    .iter()
                    .filter(|r| r.size_bytes > 0)
                    .filter_map(|r| {
                        Some(BaselinePoint {
                            size_bytes: r.size_bytes,
                            busbw_gbps: r.best_busbw_gbps()?,
                            time_us: r.best_time_us()?,
                        })
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(Baseline {
        source_file: path.display().to_string(),
        tests,
    })
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Parse(#[from] NcclTestsError),
    #[error("{0} holds no nccl-tests result")]
    Empty(String),
    #[error("cannot send the baseline to {url}: {message}")]
    Send { url: String, message: String },
}

/// The JSON body of `POST /api/v1/baselines` for a bare baseline: the parsed file plus the job it is for
/// (`None`: the fabric's baseline, used for every job).
pub fn import_body(baseline: &Baseline, job: Option<&str>) -> serde_json::Value {
    let mut v = serde_json::to_value(baseline).unwrap_or(serde_json::Value::Null);
    if let (Some(obj), Some(job)) = (v.as_object_mut(), job) {
        obj.insert("job".into(), serde_json::Value::String(job.to_string()));
    }
    v
}

/// `commwatch baseline import FILE --collector URL [--job ID]`: parses the nccl-tests result and sends it to
/// the collector, which keeps it so live findings compare in-training bandwidth with the bare baseline.
/// Returns what the collector stored (its JSON answer).
/// `token` is the collector's API token (`api_token_file`), when it has one.
pub fn import(
    path: &Path,
    collector: &str,
    job: Option<&str>,
    token: Option<&str>,
) -> Result<serde_json::Value, ImportError> {
    let baseline = parse_baseline(path)?;
    if baseline.tests.is_empty() {
        return Err(ImportError::Empty(path.display().to_string()));
    }
    let url = format!("{}/api/v1/baselines", collector.trim_end_matches('/'));
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(std::time::Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .new_agent();
    let body = import_body(&baseline, job).to_string();
    let send_err = |message: String| ImportError::Send {
        url: url.clone(),
        message,
    };
    let mut req = agent.post(&url).header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", &format!("Bearer {t}"));
    }
    let mut resp = req
        .send(body.as_bytes())
        .map_err(|e| send_err(e.to_string()))?;
    let status = resp.status().as_u16();
    let text = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| send_err(e.to_string()))?;
    if !(200..300).contains(&status) {
        return Err(send_err(format!("HTTP {status}: {text}")));
    }
    serde_json::from_str(&text).map_err(|e| send_err(format!("unreadable answer: {e}")))
}
