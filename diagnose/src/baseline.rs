//! A bare-communication baseline from a nccl-tests result, in the form `commwatch baseline import FILE
//! --collector URL` sends to a collector so that live findings compare in-training bandwidth with it. A run
//! that crashed, stopped early or returned wrong results is never sent as a baseline.

use std::path::Path;

use commwatch_model::baseline as bounds;
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
    /// A figure or name the collector would refuse (`commwatch_model::baseline`'s bounds), said before sending.
    #[error("{file} cannot be sent as a baseline: {reason}")]
    OutOfBounds { file: String, reason: String },
    #[error("cannot send the baseline to {url}: {message}")]
    Send { url: String, message: String },
}

/// A number as a person reads it: in scientific notation when huge (`1e300`, not 301 digits).
fn shown(v: f64) -> String {
    if v.is_finite() && v.abs() < 1e9 {
        v.to_string()
    } else {
        format!("{v:e}")
    }
}

/// Checks `baseline` (and `job`) against the bounds the collector holds a baseline to: at most
/// [`bounds::MAX_TESTS_PER_REQUEST`] tests, bus bandwidths finite and at most [`bounds::MAX_BUSBW_GBPS`],
/// rank counts and names bounded. The error names the test and the field.
pub fn check_bounds(baseline: &Baseline, job: Option<&str>) -> Result<(), String> {
    if baseline.tests.len() > bounds::MAX_TESTS_PER_REQUEST {
        return Err(format!(
            "it holds {} tests; a collector takes at most {} in one request",
            baseline.tests.len(),
            bounds::MAX_TESTS_PER_REQUEST
        ));
    }
    if let Some(j) = job {
        bounds::check_name(j, bounds::MAX_NAME_LEN).map_err(|e| format!("--job {e}"))?;
    }
    for t in &baseline.tests {
        let c = &t.collective;
        bounds::check_name(c, bounds::MAX_NAME_LEN)
            .map_err(|e| format!("collective {c:?}: {e}"))?;
        if let Some(n) = t.nranks {
            bounds::check_ranks(n).map_err(|e| format!("{c}: nranks {n} {e}"))?;
        }
        for (field, v) in [
            ("avg_busbw_gbps", t.avg_busbw_gbps),
            ("peak_busbw_gbps", t.peak_busbw_gbps),
        ] {
            if let Some(g) = v {
                bounds::check_busbw_gbps(g)
                    .map_err(|e| format!("{c}: {field} {} {e} (GB/s)", shown(g)))?;
            }
        }
    }
    Ok(())
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
    check_bounds(&baseline, job).map_err(|reason| ImportError::OutOfBounds {
        file: path.display().to_string(),
        reason,
    })?;
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

    #[test]
    fn figures_the_collector_would_refuse_are_refused_before_sending() {
        let test = |peak: f64| BaselineTest {
            collective: "all_reduce_perf".into(),
            nranks: Some(8),
            nnodes: None,
            hosts: vec![],
            nccl_version: None,
            avg_busbw_gbps: None,
            peak_busbw_gbps: Some(peak),
            saturation_bytes: None,
            latency_us: None,
            points: vec![],
        };
        let baseline = |tests| Baseline {
            source_file: "x.txt".into(),
            tests,
            rejected: vec![],
        };
        assert_eq!(
            check_bounds(&baseline(vec![test(48.89)]), Some("llm-7")),
            Ok(())
        );
        let e = check_bounds(&baseline(vec![test(1e300)]), None).unwrap_err();
        assert_eq!(
            e,
            "all_reduce_perf: peak_busbw_gbps 1e300 must be at most 10000 (GB/s)"
        );
        assert!(check_bounds(&baseline(vec![test(f64::INFINITY)]), None).is_err());
        assert!(check_bounds(&baseline(vec![test(48.0)]), Some("")).is_err());
        let many = vec![test(1.0); bounds::MAX_TESTS_PER_REQUEST + 1];
        let e = check_bounds(&baseline(many), None).unwrap_err();
        assert!(e.contains("at most 256"), "{e}");
        // import says so naming the file, before sending (nothing listens at the collector's address).
        let dir = tempfile::tempdir().unwrap();
        let huge = format!("./build/all_reduce_perf\n{HEADER}  8589934592  2147483648  float  sum  -1  47078  182.46  1e300  0  46939  183.00  1e300  0\n");
        let path = write(dir.path(), &huge);
        let client = Client::new("http://127.0.0.1:9", &ClientOptions::default()).unwrap();
        match import(&path, &client, None) {
            Err(e @ ImportError::OutOfBounds { .. }) => {
                assert!(
                    e.to_string()
                        .contains("out.txt cannot be sent as a baseline"),
                    "{e}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
