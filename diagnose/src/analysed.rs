//! The analysed inputs: each input file with what the analyses made of it. Findings judge these, the verdict
//! weighs them and the report shows them, so they sit below all three.

use serde::Serialize;

use crate::analysis::bandwidth::CurveSummary;
use crate::analysis::overlap::TraceAnalysis;
use crate::nccl_log::NcclLog;
use crate::nccl_tests::NcclTest;

/// One nccl-tests result (one program run) and the summary of its bandwidth curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestReport {
    /// The file it was read from, as given.
    pub file: String,
    pub test: NcclTest,
    pub summary: CurveSummary,
}

impl TestReport {
    /// Whether the test crossed nodes (unknown counts as yes: a test without a rank list is usually a cluster
    /// run cut from a larger log).
    pub fn inter_node(&self) -> bool {
        self.test.nnodes().is_none_or(|n| n > 1)
    }
}

/// One NCCL debug log as read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogReport {
    pub file: String,
    pub log: NcclLog,
}

/// One rank's trace and its overlap analysis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceReport {
    pub file: String,
    /// `kineto` or `nsys`.
    pub source: &'static str,
    /// The NCCL version the trace records.
    pub nccl_version: Option<String>,
    pub analysis: TraceAnalysis,
}
