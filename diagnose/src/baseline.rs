//! A bare-communication baseline from a nccl-tests result, in the form `commwatch baseline import FILE
//! --collector URL` sends to a collector so that live findings compare in-training bandwidth with it. A run
//! that crashed, stopped early or returned wrong results is never sent as a baseline.

use std::path::Path;

use serde::Serialize;

use crate::analysis::bandwidth::{summarize, CurveSummary};
use crate::link::fabric::trustworthy;
use crate::nccl_tests::{parse_file, NcclTest, NcclTestsError};

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
    /// The runs usable as a baseline.
    pub tests: Vec<BaselineTest>,
    /// Why the other runs are not: a crash, a table cut short, wrong results.
    pub rejected: Vec<String>,
}

/// Why a run is no baseline, if it is not.
fn rejection(t: &NcclTest, s: &CurveSummary) -> Option<String> {
    if let Some(f) = &t.failure {
        return Some(format!("{} failed: {}", t.collective, f.message));
    }
    if t.cut_short() {
        return Some(format!(
            "{}'s table stops before its last size",
            t.collective
        ));
    }
    if t.rows.is_empty() {
        return Some(format!("{} has no measurement", t.collective));
    }
    (!trustworthy(t, s)).then(|| format!("{} returned wrong results", t.collective))
}

/// Reads a nccl-tests result (any format generation) as a baseline: every run that completed with valid
/// results; the others are listed in `rejected`, never taken as a baseline.
pub fn parse_baseline(path: &Path) -> Result<Baseline, NcclTestsError> {
    let parsed = parse_file(path)?;
    let mut rejected = Vec::new();
    let tests = parsed
        .tests
        .iter()
        .filter(|t| match rejection(t, &summarize(t)) {
            Some(why) => {
                rejected.push(why);
                false
            }
            None => true,
        })
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
        rejected,
    })
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Parse(#[from] NcclTestsError),
    #[error("{0} holds no nccl-tests result")]
    Empty(String),
    #[error("{file} holds no run usable as a baseline: {}", reasons.join("; "))]
    Unusable { file: String, reasons: Vec<String> },
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
/// the collector `client` talks to (`POST /api/v1/baselines`, with its token and TLS settings), which keeps it so
/// live findings compare in-training bandwidth with the bare baseline. Returns what the collector stored (its
/// JSON answer).
pub fn import(
    path: &Path,
    client: &crate::collector::Client,
    job: Option<&str>,
) -> Result<serde_json::Value, ImportError> {
    let baseline = parse_baseline(path)?;
    if baseline.tests.is_empty() && !baseline.rejected.is_empty() {
        return Err(ImportError::Unusable {
            file: path.display().to_string(),
            reasons: baseline.rejected,
        });
    }
    if baseline.tests.is_empty() {
        return Err(ImportError::Empty(path.display().to_string()));
    }
    let body = import_body(&baseline, job);
    client
        .post_json("/api/v1/baselines", &body)
        .map_err(|e| ImportError::Send {
            url: client.url("/api/v1/baselines"),
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector::{Client, ClientOptions};

    const HEADER: &str = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";

    fn write(dir: &Path, text: &str) -> std::path::PathBuf {
        let p = dir.join("out.txt");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn a_crashed_run_is_never_a_baseline() {
        let dir = tempfile::tempdir().unwrap();
        let crashed = format!(
            "./build/all_reduce_perf\n{HEADER}  8589934592  2147483648  float  sum  -1  47078  182.46  364.57  0  46939  183.00  365.65  0\n\
             HCA-1: Test NCCL failure common.cu:1204 'unhandled cuda error'\n"
        );
        let path = write(dir.path(), &crashed);
        let b = parse_baseline(&path).unwrap();
        assert!(b.tests.is_empty());
        assert_eq!(
            b.rejected,
            ["all_reduce_perf failed: Test NCCL failure common.cu:1204 'unhandled cuda error'"]
        );
        // import refuses before it sends anything (nothing listens at the collector's address).
        let client = Client::new("http://127.0.0.1:9", &ClientOptions::default()).unwrap();
        match import(&path, &client, None) {
            Err(e @ ImportError::Unusable { .. }) => {
                assert!(
                    e.to_string().contains("holds no run usable as a baseline"),
                    "{e}"
                )
            }
            other => panic!("{other:?}"),
        }
        // Wrong results are no baseline either; a clean run is.
        let wrong = format!("./build/all_reduce_perf\n{HEADER}  1048576  262144  float  sum  -1  100.0  10.0  10.0  4  100.0  10.0  10.0  4\n");
        assert_eq!(
            parse_baseline(&write(dir.path(), &wrong)).unwrap().rejected,
            ["all_reduce_perf returned wrong results"]
        );
        let clean = wrong.replace("  4  ", "  0  ").replace("  4\n", "  0\n");
        let b = parse_baseline(&write(dir.path(), &clean)).unwrap();
        assert_eq!((b.tests.len(), b.rejected.len()), (1, 0));
    }
}
