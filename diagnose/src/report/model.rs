//! The report's data and its JSON shape.
//!
//! [`Report`] holds what was read, analysed, found and concluded. The JSON document is the serde form of
//! [`ReportJson`], a borrowed view of a report: its keys are part of the command line's contract (add keys
//! freely, never rename or remove one), and [`SCHEMA_VERSION`] says which shape it has. Key order in the
//! document is alphabetical, as `serde_json` orders an object. Every figure carries its unit in its key
//! (`_gbps` GB/s, `_us` microseconds, `_bytes` bytes, `_share`/`_ratio` a fraction) or is a count.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::analysed::{LogReport, TestReport, TraceReport};
use crate::analysis::overlap::{CollectiveStats, StepStats};
use crate::analysis::straggler::StragglerAnalysis;
use crate::findings::{Finding, Severity};
use crate::link::fabric::{compare, FabricComparison};
use crate::link::LinkInfo;
use crate::nccl_log::NetInterface;
use crate::nccl_tests::{Failure, Generation, Row};

/// The version of the JSON document's shape: raised when a key is renamed or removed or changes its meaning
/// or unit, never for an added key. 1: the first version that carries it. 2: findings and the conclusion
/// carry `cites` (the input lines they rest on); wrong results are the kind `wrong_results` (no longer
/// `link_errors`, a cause the input does not show), their possible causes a `possible_causes` finding;
/// `gdr` is null where no data crosses a network.
pub const SCHEMA_VERSION: u32 = 2;

/// One input file and how reading it went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InputRecord {
    pub path: String,
    /// `nccl_tests`, `nccl_log`, `trace`, `nsys`.
    pub kind: &'static str,
    /// `ok`, `partial` (read with warnings or cut short), `error` (nothing usable).
    pub status: &'static str,
    pub warnings: Vec<String>,
    /// Lines, events or rows that could not be used.
    pub skipped: u64,
}

impl InputRecord {
    /// A file read in full.
    pub fn ok(path: &Path, kind: &'static str) -> InputRecord {
        InputRecord {
            path: path.display().to_string(),
            kind,
            status: "ok",
            warnings: Vec::new(),
            skipped: 0,
        }
    }

    /// A file that gave nothing usable, and why.
    pub fn failed(path: &Path, kind: &'static str, err: impl std::fmt::Display) -> InputRecord {
        InputRecord {
            status: "error",
            warnings: vec![err.to_string()],
            ..InputRecord::ok(path, kind)
        }
    }
}

/// The key judgment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conclusion {
    /// `not_the_link`, `link_or_binding`, `cpu_bound`, `exposed_communication`, `healthy`, `baseline_meets_link`,
    /// `insufficient_evidence`, and the verdicts that stop short of the link: `mixed_inputs` (runs or jobs
    /// that must not be read as one), `run_failed` (the baseline run crashed or returned wrong results),
    /// `not_a_network_measurement` (the baseline's bandwidth is more than the network can carry),
    /// `misconfigured` (NCCL is set up against the fabric; the link itself is not judged).
    pub verdict: &'static str,
    pub summary: String,
    pub evidence: Vec<String>,
    pub action: String,
    /// `false` when too few steps were traced to rule out warm-up effects.
    pub confident: bool,
    /// The input lines the conclusion rests on: those of the findings it weighs and of the baseline's rows.
    pub cites: Vec<crate::lines::Cite>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub inputs: Vec<InputRecord>,
    pub link: LinkInfo,
    pub nccl_tests: Vec<TestReport>,
    pub nccl_logs: Vec<LogReport>,
    pub traces: Vec<TraceReport>,
    pub straggler: Option<StragglerAnalysis>,
    pub findings: Vec<Finding>,
    pub conclusion: Conclusion,
    /// What NCCL Inspector's files said (`--nccl-inspector`).
    pub nccl_inspector: Option<super::inspector::InspectorSection>,
    /// Bare links from the collector's probes (`--collector`).
    pub bare_links: Option<crate::collector::probes::BareLinks>,
    /// Kernel time by kernel: `nsys stats` tables given with `--nsys`, and each trace's timeline.
    pub kernel_summaries: Vec<crate::kernels::KernelSummary>,
}

impl Report {
    /// Whether any input could not be read at all.
    pub fn has_input_errors(&self) -> bool {
        self.inputs.iter().any(|i| i.status == "error")
    }
}

/// Severity of the worst finding.
pub fn worst_severity(r: &Report) -> Option<Severity> {
    r.findings.iter().map(|f| f.severity).max()
}

/// The report for machines: the serde form of [`ReportJson`].
pub fn render_json(r: &Report) -> Value {
    // Every map in the view has string keys, the one way serialising to a `Value` can fail.
    serde_json::to_value(ReportJson::from(r)).expect("the report's JSON view has string keys only")
}

/// The JSON document.
#[derive(Debug, Serialize)]
pub struct ReportJson<'a> {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    pub inputs: &'a [InputRecord],
    pub link: &'a LinkInfo,
    pub nccl_tests: Vec<TestJson<'a>>,
    pub nccl_logs: Vec<LogJson<'a>>,
    pub traces: Vec<TraceJson<'a>>,
    pub straggler: Option<&'a StragglerAnalysis>,
    /// `kind`, `severity`, `subject`, `summary`, `evidence`, `action`: a finding's own fields.
    pub findings: &'a [Finding],
    pub conclusion: &'a Conclusion,
    /// Per collective and size class from NCCL Inspector, costliest first, and the costliest against the link.
    pub nccl_inspector: Option<&'a super::inspector::InspectorSection>,
    /// Step 1's bare links from the collector's probes: `links` (usable first), `warning`; null without
    /// `--collector`.
    pub bare_links: Option<&'a crate::collector::probes::BareLinks>,
    /// Kernel time by kernel (`file`, `source`, `kernel_time_us`, `nccl_kernel_time_us`, `nccl_time_share`,
    /// `nccl_kernels` and `other_comm_kernels` [`name`, `instances`, `total_time_us`, `time_share`, `cite`]).
    pub kernel_summaries: &'a [crate::kernels::KernelSummary],
}

impl<'a> From<&'a Report> for ReportJson<'a> {
    fn from(r: &'a Report) -> ReportJson<'a> {
        ReportJson {
            schema_version: SCHEMA_VERSION,
            inputs: &r.inputs,
            link: &r.link,
            nccl_tests: r
                .nccl_tests
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let run = r.nccl_tests[..=i]
                        .iter()
                        .filter(|o| o.file == t.file)
                        .count();
                    TestJson::new(t, &r.link, run)
                })
                .collect(),
            nccl_logs: r.nccl_logs.iter().map(LogJson::from).collect(),
            traces: r.traces.iter().map(TraceJson::from).collect(),
            straggler: r.straggler.as_ref(),
            findings: &r.findings,
            conclusion: &r.conclusion,
            nccl_inspector: r.nccl_inspector.as_ref(),
            bare_links: r.bare_links.as_ref(),
            kernel_summaries: &r.kernel_summaries,
        }
    }
}

/// One nccl-tests result: the test, its curve summary and its share of the link. Bandwidths in GB/s
/// (1e9 bytes/s), as nccl-tests prints them.
#[derive(Debug, Serialize)]
pub struct TestJson<'a> {
    pub file: &'a str,
    /// 1-based place of this run among the runs of its file.
    pub run_in_file: usize,
    pub collective: &'a str,
    pub collective_source: &'static str,
    pub format: Generation,
    pub nccl_version: Option<&'a str>,
    pub tests_version: Option<&'a str>,
    /// Ranks, when the file shows them all (else null, and `nranks_at_least` a lower bound).
    pub nranks: Option<u32>,
    pub nranks_at_least: Option<u32>,
    pub nnodes: Option<u32>,
    /// A lower bound on the nodes when `nnodes` is unknown: the distinct hosts listed.
    pub nnodes_at_least: Option<u32>,
    pub rows: Vec<RowJson<'a>>,
    /// False when the run failed or its table stops before the last size it announced: no baseline then.
    pub complete: bool,
    /// Whether the run's footer was printed (false: the run stopped or the output was cut).
    pub footer: bool,
    /// How the run failed, when it did: `message`, `line`, `hosts`, `nccl_warnings`, `after_bytes`,
    /// `exit_code`.
    pub failure: Option<&'a Failure>,
    /// Whether results were validated (`validation: 1`), when the header says.
    pub validation: Option<bool>,
    /// The file's own average line.
    pub avg_busbw_gbps: Option<f64>,
    pub avg_busbw_computed_gbps: Option<f64>,
    pub peak_busbw_gbps: Option<f64>,
    pub peak_at_bytes: Option<u64>,
    pub saturation_bytes: Option<u64>,
    pub latency_us: Option<f64>,
    pub latency_bound_below_bytes: Option<u64>,
    pub wrong_total: f64,
    pub out_of_bounds: Option<u64>,
    /// Peak over the rate of one link, for inter-node tests against a known rate.
    pub link_share: Option<f64>,
    /// The run against the nodes' fabric (NICs per node × link rate), with a known link rate.
    pub fabric_comparison: Option<FabricComparison>,
}

impl<'a> TestJson<'a> {
    fn new(t: &'a TestReport, link: &LinkInfo, run_in_file: usize) -> TestJson<'a> {
        let s = &t.summary;
        TestJson {
            file: &t.file,
            run_in_file,
            collective: &t.test.collective,
            collective_source: t.test.collective_source,
            format: t.test.generation,
            nccl_version: t.test.nccl_version.as_deref(),
            tests_version: t.test.tests_version.as_deref(),
            nranks: t.test.nranks(),
            nranks_at_least: t.test.nranks_at_least(),
            nnodes: t.test.nnodes(),
            nnodes_at_least: t.test.nnodes_at_least(),
            rows: t.test.rows.iter().flat_map(RowJson::placements).collect(),
            complete: t.test.complete(),
            footer: t.test.footer,
            failure: t.test.failure.as_ref(),
            validation: t.test.validation,
            avg_busbw_gbps: t.test.avg_busbw_gbps,
            avg_busbw_computed_gbps: s.avg_busbw_computed_gbps,
            peak_busbw_gbps: s.peak_busbw_gbps,
            peak_at_bytes: s.peak_at_bytes,
            saturation_bytes: s.saturation_bytes,
            latency_us: s.latency_us,
            latency_bound_below_bytes: s.latency_bound_below_bytes,
            wrong_total: s.wrong_total,
            out_of_bounds: t.test.out_of_bounds,
            link_share: match (link.rate_gbps, s.peak_busbw_gbps) {
                (Some(rate), Some(p)) if t.inter_node() && rate > 0.0 => Some(p / rate),
                _ => None,
            },
            fabric_comparison: compare(&t.test, s, link),
        }
    }
}

/// One measurement: a table row's out-of-place or in-place half.
#[derive(Debug, Serialize)]
pub struct RowJson<'a> {
    pub size_bytes: u64,
    pub count: u64,
    #[serde(rename = "type")]
    pub dtype: &'a str,
    pub redop: Option<&'a str>,
    pub root: Option<i64>,
    pub time_us: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    pub wrong: Option<f64>,
    pub in_place: bool,
}

impl<'a> RowJson<'a> {
    /// The row's placements, out-of-place first.
    fn placements(row: &'a Row) -> impl Iterator<Item = RowJson<'a>> {
        row.placements().map(move |(in_place, p)| RowJson {
            size_bytes: row.size_bytes,
            count: row.count,
            dtype: &row.dtype,
            redop: row.redop.as_deref(),
            root: row.root,
            time_us: p.time_us,
            algbw_gbps: p.algbw_gbps,
            busbw_gbps: p.busbw_gbps,
            wrong: p.wrong,
            in_place,
        })
    }
}

/// What one NCCL log says about the network, the transports and the channels.
#[derive(Debug, Serialize)]
pub struct LogJson<'a> {
    pub file: &'a str,
    /// `NCCL` or `RCCL`.
    pub library: &'static str,
    pub version: Option<&'a str>,
    pub nranks: Option<u32>,
    /// A lower bound on the ranks when `nranks` is unknown.
    pub nranks_at_least: Option<u32>,
    pub nnodes: Option<u32>,
    /// A lower bound on the nodes when `nnodes` is unknown.
    pub nnodes_at_least: Option<u32>,
    pub local_ranks: Option<u32>,
    /// True when a communicator finished its init or results follow; false when init began and the log
    /// stops before it finished, without a failure; null when the log shows neither.
    pub init_complete: Option<bool>,
    /// How the run failed (`message`, `line`), when the log shows it.
    pub failure: Option<&'a crate::nccl_log::LogFailure>,
    /// A net plugin that failed and the network used instead (`plugin`, `network`).
    pub plugin_fallback: Option<&'a crate::nccl_log::PluginFallback>,
    /// Hosts that wrote lines into the log.
    pub hosts: &'a [String],
    /// The network NCCL used across nodes, however the log shows it.
    pub network: Option<&'a str>,
    /// Whether data crossed a network (false: every rank on one node); null when the log does not show.
    pub network_carries_data: Option<bool>,
    /// The Libfabric provider of the OFI plugin (`efa`).
    pub net_provider: Option<&'a str>,
    pub interfaces: &'a [NetInterface],
    pub bootstrap_interface: Option<&'a str>,
    /// Network devices NCCL uses per node.
    pub nics_per_node: Option<u32>,
    /// Device indexes of the network connections (`via NET/IB/5`: 5).
    pub net_device_indexes: &'a [u32],
    pub transports: &'a std::collections::BTreeMap<String, u64>,
    pub net_connections_gdr: u64,
    /// The most retries a net plugin needed to connect.
    pub connect_retries_max: Option<u32>,
    /// Whether GPUs of a node reach each other peer to peer (`intraNodeP2pSupport`).
    pub intra_node_p2p: Option<bool>,
    pub channels: Option<u32>,
    pub coll_channels: Option<u32>,
    pub nvls_channels: Option<u32>,
    pub nvls: bool,
    /// How many rings the log printed.
    pub rings: usize,
    pub trees: usize,
    pub gdr: Option<bool>,
    /// HCAs NCCL disabled GPU Direct RDMA for, and the lines that decided `gdr`.
    pub gdr_disabled_hcas: &'a [String],
    pub gdr_evidence: &'a [String],
    pub ib_no_device: bool,
    pub settings: &'a std::collections::BTreeMap<String, String>,
    /// Whether the nccl-tests run in the log validated its results.
    pub tests_validation: Option<bool>,
    pub warnings: &'a [String],
    pub warning_count: usize,
}

impl<'a> From<&'a LogReport> for LogJson<'a> {
    fn from(l: &'a LogReport) -> LogJson<'a> {
        let g = &l.log;
        LogJson {
            file: &l.file,
            library: g.library,
            version: g.version.as_deref(),
            nranks: g.nranks,
            nranks_at_least: g.nranks_at_least,
            nnodes: g.nnodes,
            nnodes_at_least: g.nnodes_at_least,
            local_ranks: g.local_ranks,
            init_complete: g.init_complete,
            failure: g.failure.as_ref(),
            plugin_fallback: g.plugin_fallback.as_ref(),
            hosts: &g.hosts,
            network: g.network.as_deref(),
            network_carries_data: g.network_carries_data,
            net_provider: g.net_provider.as_deref(),
            interfaces: &g.interfaces,
            bootstrap_interface: g.bootstrap_interface.as_deref(),
            nics_per_node: g.nics_per_node,
            net_device_indexes: &g.net_device_indexes,
            transports: &g.transports,
            net_connections_gdr: g.net_connections_gdr,
            connect_retries_max: g.connect_retries_max,
            intra_node_p2p: g.intra_node_p2p,
            channels: g.channels,
            coll_channels: g.coll_channels,
            nvls_channels: g.nvls_channels,
            nvls: g.nvls,
            rings: g.rings.len(),
            trees: g.trees,
            gdr: g.gdr,
            gdr_disabled_hcas: &g.gdr_disabled_hcas,
            gdr_evidence: &g.gdr_evidence,
            ib_no_device: g.ib_no_device,
            settings: &g.settings,
            tests_validation: g.tests_validation,
            warnings: &g.warnings,
            warning_count: g.warning_count,
        }
    }
}

/// One rank's timeline: communication against computation, per step, and the costly collectives. Times in
/// microseconds.
#[derive(Debug, Serialize)]
pub struct TraceJson<'a> {
    pub file: &'a str,
    pub source: &'static str,
    pub rank: u32,
    pub world_size: Option<u32>,
    /// The NCCL version the trace records.
    pub nccl_version: Option<&'a str>,
    pub comm_time_us: f64,
    pub compute_time_us: f64,
    pub memory_time_us: f64,
    pub idle_time_us: f64,
    pub span_us: f64,
    pub overlap_ratio: Option<f64>,
    pub exposed_comm_us: f64,
    pub gpu_events: usize,
    pub gpu_events_counted: usize,
    pub nccl_kernels: usize,
    pub last_step_excluded: bool,
    pub steps: &'a [StepStats],
    pub top_collectives: &'a [CollectiveStats],
}

impl<'a> From<&'a TraceReport> for TraceJson<'a> {
    fn from(t: &'a TraceReport) -> TraceJson<'a> {
        let a = &t.analysis;
        TraceJson {
            file: &t.file,
            source: t.source,
            rank: a.rank,
            world_size: a.world_size,
            nccl_version: t.nccl_version.as_deref(),
            comm_time_us: a.comm_time_us,
            compute_time_us: a.compute_time_us,
            memory_time_us: a.memory_time_us,
            idle_time_us: a.idle_time_us,
            span_us: a.span_us,
            overlap_ratio: a.overlap_ratio,
            exposed_comm_us: a.exposed_comm_us,
            gpu_events: a.gpu_events,
            gpu_events_counted: a.gpu_events_counted,
            nccl_kernels: a.nccl_kernels,
            last_step_excluded: a.last_step_excluded,
            steps: &a.steps,
            top_collectives: &a.top_collectives,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::report::fixtures;

    #[test]
    fn the_document_has_the_report_sections() {
        let v = render_json(&fixtures::report());
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "bare_links",
                "conclusion",
                "findings",
                "inputs",
                "kernel_summaries",
                "link",
                "nccl_inspector",
                "nccl_logs",
                "nccl_tests",
                "schema_version",
                "straggler",
                "traces"
            ]
        );
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(
            v["inputs"][1],
            json!({"path": "gone.log", "kind": "nccl_log", "status": "error",
                   "warnings": ["gone.log: not found"], "skipped": 0})
        );
        assert_eq!(
            v["link"],
            json!({"rate_gbps": 50.0, "source": "flag", "nics_per_node": null, "nics_source": null,
                   "fabric_rdma_links": 0, "roles": [], "warning": null})
        );
        assert_eq!(v["straggler"], Value::Null);
        assert_eq!(v["conclusion"]["verdict"], "not_the_link");
        assert_eq!(v["conclusion"]["confident"], false);
    }

    #[test]
    fn a_test_flattens_its_summary_and_rows() {
        let v = render_json(&fixtures::report());
        let t = &v["nccl_tests"][0];
        assert_eq!(t["collective"], "all_reduce_perf");
        assert_eq!(t["collective_source"], "marker");
        assert_eq!(t["format"], "versioned");
        assert_eq!(
            (t["nranks"].clone(), t["nnodes"].clone()),
            (json!(2), json!(2))
        );
        assert_eq!(t["peak_busbw_gbps"], 45.0);
        assert_eq!(t["link_share"], 0.9);
        // Each row gives its out-of-place measurement, then its in-place one.
        let rows = t["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(
            rows[1],
            json!({"size_bytes": 1 << 20, "count": 1 << 18, "type": "float", "redop": "sum", "root": -1,
                   "time_us": 1000.0, "algbw_gbps": 10.75, "busbw_gbps": 21.5, "wrong": 0.0, "in_place": true})
        );
        assert_eq!(rows[0]["in_place"], false);
        // A single-node test is not compared with the fabric link.
        assert_eq!(v["nccl_tests"][1]["link_share"], Value::Null);
    }

    #[test]
    fn a_failed_run_and_the_fabric_comparison() {
        let mut r = fixtures::report();
        r.link = r.link.clone().with_nics(Some(2), None);
        r.nccl_tests[0].test.failure = Some(Failure {
            message: "Test NCCL failure common.cu:392 'unhandled cuda error'".to_string(),
            line: 40,
            hosts: 1,
            nccl_warnings: vec!["Cuda failure 1 'invalid argument'".to_string()],
            after_bytes: Some(1 << 30),
            exit_code: Some(3),
        });
        let v = render_json(&r);
        let t = &v["nccl_tests"][0];
        assert_eq!(
            (t["complete"].clone(), t["run_in_file"].clone()),
            (json!(false), json!(1))
        );
        assert_eq!(
            t["failure"],
            json!({"message": "Test NCCL failure common.cu:392 'unhandled cuda error'", "line": 40, "hosts": 1,
                   "nccl_warnings": ["Cuda failure 1 'invalid argument'"], "after_bytes": 1u64 << 30,
                   "exit_code": 3})
        );
        // An incomplete run is no baseline: compared with nothing.
        assert_eq!(t["fabric_comparison"]["verdict"], "not_compared");
        r.nccl_tests[0].test.failure = None;
        let c = &render_json(&r)["nccl_tests"][0]["fabric_comparison"];
        // 2 ranks on 2 nodes: the ceiling is the node's 2 x 50 GB/s; 45 GB/s is 45 % of it.
        assert_eq!(
            (
                c["capacity_gbps"].clone(),
                c["ceiling_busbw_gbps"].clone(),
                c["share_of_ceiling"].clone()
            ),
            (json!(100.0), json!(100.0), json!(0.45))
        );
        assert_eq!(
            (c["nics_per_node"].clone(), c["nics_source"].clone()),
            (json!(2), json!("flag"))
        );
        assert_eq!(c["verdict"], "below");
        // The single-node run is not compared.
        assert_eq!(
            render_json(&r)["nccl_tests"][1]["fabric_comparison"]["verdict"],
            "not_compared"
        );
    }

    #[test]
    fn logs_traces_and_findings() {
        let v = render_json(&fixtures::report());
        let l = &v["nccl_logs"][0];
        assert_eq!(l["rings"], 2);
        assert_eq!(l["transports"], json!({"NET/Socket": 7}));
        assert_eq!(
            l["interfaces"],
            json!([{"transport": "Socket", "name": "eth0", "detail": "10.0.0.1<0>"}])
        );
        assert_eq!(l["gdr"], false);
        for key in [
            "nranks_at_least",
            "hosts",
            "network_carries_data",
            "net_provider",
            "nics_per_node",
            "net_device_indexes",
            "connect_retries_max",
            "intra_node_p2p",
            "gdr_disabled_hcas",
            "gdr_evidence",
            "tests_validation",
        ] {
            assert!(l.get(key).is_some(), "log key {key}");
        }
        let t = &v["traces"][0];
        assert_eq!(
            (t["rank"].clone(), t["source"].clone()),
            (json!(0), json!("kineto"))
        );
        assert_eq!(t["steps"][0]["exposed_comm_us"], 20_000.0);
        assert_eq!(t["top_collectives"][0]["busbw_gbps"], 12.5);
        assert_eq!(
            v["findings"][0],
            json!({"kind": "management_network_traffic", "severity": "critical", "cites": [],
                   "subject": {"interface": "eth0"}, "summary": "NCCL data moves over eth0 <management>",
                   "evidence": {"socket_connections": 7}, "action": "bind NCCL to the fabric & retry"})
        );
    }

    #[test]
    fn input_errors_and_the_worst_severity() {
        let mut r = fixtures::report();
        assert!(r.has_input_errors());
        assert_eq!(worst_severity(&r), Some(Severity::Critical));
        r.inputs.truncate(1);
        r.findings.clear();
        assert!(!r.has_input_errors());
        assert_eq!(worst_severity(&r), None);
    }
}
