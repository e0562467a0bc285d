use super::*;
use crate::analysed::LogReport;
use crate::findings::Severity;
use crate::link::LinkInfo;
use crate::report::fixtures::{finding, link, test_report, trace_report};

/// The analysed inputs of one case.
struct Case {
    tests: Vec<TestReport>,
    traces: Vec<TraceReport>,
    link: LinkInfo,
    findings: Vec<Finding>,
}

impl Case {
    /// A two-node all-reduce baseline peaking at `peak` GB/s against a link of `rate` GB/s.
    fn new(peak: Option<f64>, rate: Option<f64>) -> Case {
        Case {
            tests: peak
                .map(|p| test_report("all_reduce_perf", &["a", "b"], Some(p)))
                .into_iter()
                .collect(),
            traces: Vec::new(),
            link: link(rate),
            findings: Vec::new(),
        }
    }

    /// Three traced steps whose costliest collective reaches `busbw` GB/s.
    fn trained(mut self, busbw: f64) -> Case {
        self.traces = vec![trace_report(0, 3, Some(("allreduce", 1 << 26, busbw)))];
        self
    }

    /// A finding of `kind` about this subject (`setting`, `interface`).
    fn found_about(mut self, kind: &'static str, key: &str, value: &str) -> Case {
        self = self.found(kind);
        let f = self.findings.pop().expect("just found").subject(key, value);
        self.findings.push(f);
        self
    }

    fn found(mut self, kind: &'static str) -> Case {
        let f = finding(
            kind,
            Severity::Warning,
            &format!("{kind} seen"),
            &format!("fix {kind}"),
        );
        self.findings.push(f);
        self
    }

    fn conclude(&self) -> Conclusion {
        let logs: Vec<LogReport> = Vec::new();
        let ctx = Context {
            kernels: &[],
            tests: &self.tests,
            logs: &logs,
            traces: &self.traces,
            straggler: None,
            link: &self.link,
        };
        conclude(&ctx, &self.findings)
    }
}

#[test]
fn a_baseline_below_the_link_blames_the_link_or_binding() {
    // 30 GB/s is 60 % of a 50 GB/s link, under the 75 % that meets it.
    let c = Case::new(Some(30.0), Some(50.0)).trained(25.0).conclude();
    assert_eq!(c.verdict, "link_or_binding");
    assert!(c.action.starts_with("verify the link (rate, errors)"));
    // The first finding that blames the binding gives the action.
    let c = Case::new(Some(30.0), Some(50.0))
        .found("link_underutilized")
        .found("nccl_misconfiguration")
        .conclude();
    assert_eq!(c.verdict, "link_or_binding");
    assert_eq!(c.action, "fix link_underutilized");
}

#[test]
fn without_a_comparison_a_binding_finding_is_a_misconfiguration_not_the_link() {
    // A log alone: management traffic is named, the link is not judged.
    let c = Case::new(None, None)
        .found("management_network_traffic")
        .conclude();
    assert_eq!(c.verdict, "misconfigured");
    assert_eq!(c.action, "fix management_network_traffic");
    assert!(c
        .summary
        .starts_with("NCCL is set up against the fabric: management_network_traffic seen."));
    // A baseline without the link rate compares nothing either.
    let c = Case::new(Some(40.0), None)
        .found_about("nccl_misconfiguration", "setting", "NCCL_IB_DISABLE")
        .conclude();
    assert_eq!(c.verdict, "misconfigured");
    // NCCL's own warnings are no binding: the evidence is insufficient, and the warning is in the conclusion.
    let c = Case::new(None, None)
        .found("nccl_misconfiguration")
        .conclude();
    assert_eq!(c.verdict, "insufficient_evidence");
    assert_eq!(
        c.evidence,
        vec!["most severe finding: nccl_misconfiguration seen"]
    );
}

#[test]
fn mixed_runs_failed_runs_and_impossible_bandwidth_stop_the_judgment() {
    // Two runs that disagree: not one baseline, even where one of them meets the link.
    let c = Case::new(Some(45.0), Some(50.0))
        .found("mixed_inputs")
        .found("link_underutilized")
        .conclude();
    assert_eq!(c.verdict, "mixed_inputs");
    assert_eq!(c.action, "fix mixed_inputs");
    // A crashed run and nothing else.
    let c = Case::new(None, Some(50.0)).found("test_failed").conclude();
    assert_eq!(c.verdict, "run_failed");
    assert!(c
        .summary
        .starts_with("The run gave no valid result: test_failed seen."));
    // A complete baseline beside the crashed run still decides.
    let c = Case::new(Some(45.0), Some(50.0))
        .found("test_failed")
        .conclude();
    assert_eq!(c.verdict, "baseline_meets_link");
    assert!(
        c.evidence.contains(&"test_failed seen".to_string()),
        "{:?}",
        c.evidence
    );
    // 400 GB/s across two nodes of one 50 GB/s link each: no network carried it.
    let mut case = Case::new(Some(400.0), Some(50.0));
    case.findings.push(finding(
        "impossible_bandwidth",
        Severity::Warning,
        "400 GB/s is more than the network can carry",
        "cross the network",
    ));
    let c = case.conclude();
    assert_eq!(c.verdict, "not_a_network_measurement");
    assert!(!c.summary.contains("meets"));
}

#[test]
fn a_baseline_that_meets_the_link_with_slow_training_is_not_the_link() {
    // 45 of 50 GB/s meets the link; 20 GB/s in training is under 60 % of the bare 45.
    let c = Case::new(Some(45.0), Some(50.0)).trained(20.0).conclude();
    assert_eq!(c.verdict, "not_the_link");
    assert!(c.action.starts_with("look for ranks that arrive late"));
    assert!(c.confident);
    assert_eq!(
        c.evidence,
        vec![
            "bare all_reduce_perf (2 ranks): peak bus bandwidth 45.00 GB/s (all_reduce_perf.txt)",
            "link rate 50.00 GB/s (from flag)",
            "in training: allreduce of 64 MiB reaches 20.00 GB/s bus bandwidth",
        ]
    );
    // Exposed communication alone is enough, and gives the action.
    let c = Case::new(Some(45.0), Some(50.0))
        .trained(40.0)
        .found("exposed_communication")
        .conclude();
    assert_eq!(c.verdict, "not_the_link");
    assert_eq!(c.action, "fix exposed_communication");
    assert_eq!(c.evidence.last().unwrap(), "exposed_communication seen");
}

#[test]
fn a_host_bound_gpu_comes_before_unproven_exposure() {
    let c = Case::new(None, None)
        .found("exposed_communication")
        .found("cpu_bound")
        .conclude();
    assert_eq!(c.verdict, "cpu_bound");
    assert_eq!(c.action, "fix cpu_bound");
}

#[test]
fn exposure_without_a_baseline_asks_for_one() {
    let c = Case::new(None, Some(50.0))
        .found("exposed_communication")
        .conclude();
    assert_eq!(c.verdict, "exposed_communication");
    assert!(c
        .action
        .starts_with("run all_reduce_perf across the same nodes"));
    assert!(c.action.ends_with("; meanwhile: fix exposed_communication"));
}

#[test]
fn a_baseline_that_meets_the_link_with_fast_training_is_healthy() {
    // 30 GB/s in training is at least 60 % of the bare 45.
    let c = Case::new(Some(45.0), Some(50.0)).trained(30.0).conclude();
    assert_eq!(c.verdict, "healthy");
    let c = Case::new(Some(45.0), Some(50.0)).conclude();
    assert_eq!(c.verdict, "baseline_meets_link");
    assert!(c.action.contains("--trace or --nsys"));
}

#[test]
fn missing_evidence_is_named() {
    let c = Case::new(None, Some(50.0)).conclude();
    assert_eq!(c.verdict, "insufficient_evidence");
    assert_eq!(
        c.summary,
        "Not enough evidence for the key judgment: missing a multi-node nccl-tests baseline (--nccl-tests)."
    );
    let c = Case::new(Some(45.0), None).conclude();
    assert_eq!(
        c.action,
        "add the link rate (--link-rate or --collector) and run again"
    );
    // A single-node test is no baseline for the fabric.
    let mut case = Case::new(None, Some(50.0));
    case.tests = vec![test_report("all_reduce_perf", &["a"], Some(400.0))];
    assert_eq!(case.conclude().verdict, "insufficient_evidence");
}

#[test]
fn too_few_steps_make_the_verdict_tentative() {
    let mut case = Case::new(Some(45.0), Some(50.0));
    case.traces = vec![trace_report(0, 1, Some(("allreduce", 1 << 26, 20.0)))];
    let c = case.conclude();
    assert_eq!(c.verdict, "not_the_link");
    assert!(!c.confident);
    assert!(c
        .summary
        .ends_with(" Tentative: only 1 step(s) traced; trace at least 3 warmed-up steps."));
}

#[test]
fn the_baseline_is_the_best_inter_node_all_reduce() {
    let tests = vec![
        test_report("all_gather_perf", &["a", "b"], Some(48.0)),
        test_report("all_reduce_perf", &["a", "b"], Some(40.0)),
        test_report("all_reduce_perf", &["a", "b", "c"], Some(42.0)),
        test_report("all_reduce_perf", &["a"], Some(300.0)),
    ];
    let b = baseline(&tests).unwrap();
    assert_eq!(
        (b.test.nranks(), b.summary.peak_busbw_gbps),
        (Some(3), Some(42.0))
    );
    // Without an all-reduce, the best inter-node test of any collective.
    assert_eq!(
        baseline(&tests[..1]).unwrap().test.collective,
        "all_gather_perf"
    );
    assert!(baseline(&tests[3..]).is_none());
}

#[test]
fn training_bandwidth_is_that_of_the_costliest_sized_collective() {
    let mut slow = trace_report(1, 3, Some(("allgather", 1 << 20, 5.0)));
    slow.analysis.top_collectives[0].total_time_us = 90_000.0;
    let traces = vec![trace_report(0, 3, Some(("allreduce", 1 << 26, 20.0))), slow];
    assert_eq!(
        training_busbw(&traces),
        Some(("allgather".to_string(), 1 << 20, 5.0))
    );
    assert_eq!(training_busbw(&[trace_report(0, 3, None)]), None);
}

#[test]
fn a_collapsing_baseline_does_not_meet_the_link_and_critical_findings_are_named() {
    let mut case = Case::new(Some(45.0), Some(50.0));
    case.findings.push(
        finding(
            "bandwidth_collapse",
            Severity::Critical,
            "bus bandwidth collapses at 32 MiB",
            "find what changes at that size",
        )
        .subject("file", "all_reduce_perf.txt")
        .subject("collective", "all_reduce_perf"),
    );
    let c = case.conclude();
    assert_eq!(c.verdict, "link_or_binding");
    assert!(c.summary.starts_with(
        "The bare baseline reaches the link only at some sizes: bus bandwidth collapses at 32 MiB."
    ));
    // Without a link rate the judgment waits, but names the critical finding.
    case.link = link(None);
    let c = case.conclude();
    assert_eq!(c.verdict, "insufficient_evidence");
    assert!(c.summary.ends_with(
        "The most severe finding stands without it: bus bandwidth collapses at 32 MiB."
    ));
}
