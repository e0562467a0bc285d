//! Small hand-built reports for the unit tests of the report's parts: each value is chosen so a test can
//! state the exact line or decision it expects.

use super::model::{Conclusion, InputRecord, Report};
use crate::analysed::{LogReport, TestReport, TraceReport};
use crate::analysis::bandwidth::CurveSummary;
use crate::analysis::overlap::{CollectiveStats, StepStats, TraceAnalysis};
use crate::findings::{Finding, Severity};
use crate::link::LinkInfo;
use crate::nccl_log::{NcclLog, NetInterface};
use crate::nccl_tests::{Generation, NcclTest, Placement, RankDevice, Row};

/// A test on one rank per host named (no hosts: rank count unknown) peaking at `peak` GB/s, without rows.
pub fn test_report(collective: &str, hosts: &[&str], peak: Option<f64>) -> TestReport {
    TestReport {
        file: format!("{collective}.txt"),
        test: NcclTest {
            collective: collective.to_string(),
            collective_source: "marker",
            generation: Generation::Versioned,
            nccl_version: Some("2.23.4".to_string()),
            ranks: hosts
                .iter()
                .enumerate()
                .map(|(i, h)| RankDevice {
                    rank: i as u32,
                    host: h.to_string(),
                    device: Some(0),
                    bus: None,
                    line: 0,
                })
                .collect(),
            ..NcclTest::new(1)
        },
        summary: CurveSummary {
            measured_rows: 0,
            avg_busbw_computed_gbps: None,
            peak_busbw_gbps: peak,
            peak_at_bytes: None,
            saturation_bytes: None,
            latency_us: None,
            latency_bound_below_bytes: None,
            wrong_total: 0.0,
        },
    }
}

/// A table row measured out of place and in place, 1 ms each, with these bus bandwidths.
pub fn row(size_bytes: u64, out_of_place_gbps: f64, in_place_gbps: f64) -> Row {
    let placement = |busbw_gbps: f64| Placement {
        time_us: 1000.0,
        algbw_gbps: busbw_gbps / 2.0,
        busbw_gbps,
        wrong: Some(0.0),
    };
    Row {
        size_bytes,
        count: size_bytes / 4,
        dtype: "float".to_string(),
        redop: Some("sum".to_string()),
        root: Some(-1),
        out_of_place: Some(placement(out_of_place_gbps)),
        in_place: Some(placement(in_place_gbps)),
        line: 40,
    }
}

/// A rank with `steps` steps of 100 ms (20 ms of it exposed communication) and, when given, one costly
/// collective: (name, size in bytes, bus bandwidth GB/s).
pub fn trace_report(rank: u32, steps: usize, top: Option<(&str, u64, f64)>) -> TraceReport {
    let step = |i: usize| StepStats {
        step: i as i64,
        step_time_us: 100_000.0,
        comm_time_us: 40_000.0,
        compute_time_us: 70_000.0,
        idle_time_us: 10_000.0,
        overlap_ratio: Some(0.5),
        exposed_comm_us: 20_000.0,
        kernels: 12,
    };
    TraceReport {
        nccl_version: None,
        file: format!("rank-{rank}.json"),
        source: "kineto",
        analysis: TraceAnalysis {
            rank,
            world_size: Some(2),
            gpu_events: 120,
            gpu_events_counted: 100,
            nccl_kernels: 30,
            comm_time_us: 40_000.0 * steps as f64,
            compute_time_us: 70_000.0 * steps as f64,
            memory_time_us: 0.0,
            idle_time_us: 10_000.0 * steps as f64,
            span_us: 100_000.0 * steps as f64,
            overlap_time_us: 20_000.0 * steps as f64,
            overlap_ratio: Some(0.5),
            exposed_comm_us: 20_000.0 * steps as f64,
            last_step_excluded: false,
            steps: (0..steps).map(step).collect(),
            top_collectives: top
                .into_iter()
                .map(|(name, size, busbw)| CollectiveStats {
                    collective: name.to_string(),
                    size_bytes: Some(size),
                    dtype: Some("Float".to_string()),
                    group_size: Some(2),
                    protocol: None,
                    count: 10,
                    total_time_us: 30_000.0,
                    mean_time_us: 3_000.0,
                    max_time_us: 4_000.0,
                    busbw_gbps: Some(busbw),
                })
                .collect(),
        },
    }
}

pub fn finding(kind: &'static str, severity: Severity, summary: &str, action: &str) -> Finding {
    Finding::new(kind, severity, summary.to_string(), action)
}

/// A link of `rate` GB/s given with `--link-rate`.
pub fn link(rate: Option<f64>) -> LinkInfo {
    LinkInfo {
        rate_gbps: rate,
        source: rate.map(|_| "flag"),
        ..LinkInfo::default()
    }
}

/// A report with one of everything: two nccl-tests results (one across two nodes with two rows, one on a
/// single node), a socket-fallback NCCL log, one traced rank, one finding and a conclusion.
pub fn report() -> Report {
    let mut inter = test_report("all_reduce_perf", &["node-a", "node-b"], Some(45.0));
    inter.test.rows = vec![row(1 << 20, 20.0, 21.5), row(1 << 30, 44.0, 45.0)];
    let log = NcclLog {
        version: Some("2.21.5".to_string()),
        nranks: Some(16),
        nnodes: Some(2),
        network: Some("Socket".to_string()),
        interfaces: vec![NetInterface {
            transport: "Socket".to_string(),
            name: "eth0".to_string(),
            detail: Some("10.0.0.1<0>".to_string()),
        }],
        transports: [("NET/Socket".to_string(), 7)].into_iter().collect(),
        rings: vec![vec![0, 1], vec![1, 0]],
        gdr: Some(false),
        ..NcclLog::default()
    };
    Report {
        inputs: vec![
            InputRecord::ok("all_reduce_perf.txt".as_ref(), "nccl_tests"),
            InputRecord::failed("gone.log".as_ref(), "nccl_log", "gone.log: not found"),
        ],
        link: link(Some(50.0)),
        nccl_tests: vec![
            inter,
            test_report("all_gather_perf", &["node-a"], Some(200.0)),
        ],
        nccl_logs: vec![LogReport {
            file: "rank0.log".to_string(),
            log,
        }],
        traces: vec![trace_report(0, 1, Some(("allreduce", 64 << 20, 12.5)))],
        straggler: None,
        findings: vec![finding(
            "management_network_traffic",
            Severity::Critical,
            "NCCL data moves over eth0 <management>",
            "bind NCCL to the fabric & retry",
        )
        .subject("interface", "eth0")
        .evidence("socket_connections", 7)],
        conclusion: Conclusion {
            verdict: "not_the_link",
            summary: "The bare baseline meets the link.".to_string(),
            evidence: vec!["link rate 50.00 GB/s (from flag)".to_string()],
            action: "look for stragglers".to_string(),
            confident: false,
            cites: Vec::new(),
        },
        nccl_inspector: None,
        bare_links: None,
        kernel_summaries: Vec::new(),
    }
}
