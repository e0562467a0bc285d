//! Small hand-written inputs for the rules' tests: logs and nccl-tests outputs parsed from text, run through
//! one rule.

use super::{Context, Finding, Rule};
use crate::analysed::{LogReport, TestReport, TraceReport};
use crate::analysis::bandwidth::summarize;
use crate::link::LinkInfo;

/// A log parsed from `text`, named `rank0.log`.
pub fn log(text: &str) -> LogReport {
    LogReport {
        file: "rank0.log".to_string(),
        log: crate::nccl_log::parse_str(text, "rank0.log").expect("a log"),
    }
}

/// The runs of an nccl-tests output parsed from `text`, named `out.txt`.
pub fn tests(text: &str) -> Vec<TestReport> {
    crate::nccl_tests::parse_str(text, "out.txt")
        .expect("an output")
        .tests
        .into_iter()
        .map(|test| TestReport {
            file: "out.txt".to_string(),
            summary: summarize(&test),
            test,
        })
        .collect()
}

/// A table header and rows of (size, out-of-place busbw, in-place busbw) in the 2022-2025 layout, 1 ms
/// each, `algbw` equal to `busbw`.
pub fn table(rows: &[(u64, f64, f64)]) -> String {
    let mut t = String::from(
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n",
    );
    for (size, oop, ip) in rows {
        t.push_str(&format!(
            "{size} {} float sum -1 1000.0 {oop:.2} {oop:.2} 0 1000.0 {ip:.2} {ip:.2} 0\n",
            size / 4
        ));
    }
    t
}

/// `Rank` lines for `per_node` ranks on each of `nodes` hosts.
pub fn rank_list(nodes: u32, per_node: u32) -> String {
    (0..nodes * per_node)
        .map(|r| {
            format!(
                "#  Rank {r} Group 0 Pid 1 on node{} device {} [0x01] GPU\n",
                r / per_node,
                r % per_node
            )
        })
        .collect()
}

/// What `rule` finds in these inputs.
pub fn run(
    rule: Rule,
    tests: &[TestReport],
    logs: &[LogReport],
    traces: &[TraceReport],
    link: &LinkInfo,
) -> Vec<Finding> {
    rule(&Context {
        kernels: &[],
        tests,
        logs,
        traces,
        straggler: None,
        link,
    })
}

/// What `rule` finds in these logs alone.
pub fn on_logs(rule: Rule, logs: &[LogReport]) -> Vec<Finding> {
    run(rule, &[], logs, &[], &LinkInfo::default())
}

/// What `rule` finds in these runs, against `link`.
pub fn on_tests(rule: Rule, tests: &[TestReport], link: &LinkInfo) -> Vec<Finding> {
    run(rule, tests, &[], &[], link)
}
