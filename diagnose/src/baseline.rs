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
