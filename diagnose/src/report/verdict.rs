//! The key judgment: is the fabric link at fault, or how training uses it?
//!
//! A bare baseline that meets the link while in-training communication does not points at overlap,
//! synchronisation or contention, not the link; a bare baseline below the link points at the link, the NIC
//! binding or the algorithm. Without both sides of that comparison the verdict names what is missing.

use super::model::Conclusion;
use super::units::human_bytes;
use crate::analysed::{TestReport, TraceReport};
use crate::analysis::bandwidth::busbw_at;
use crate::findings::{Context, Finding};
use crate::link::BASELINE_MEETS_LINK;

/// In-training bus bandwidth below this share of the bare baseline (same size) is "not meeting" it.
pub const TRAINING_MEETS_BASELINE: f64 = 0.6;
/// Fewer traced steps than this make a conclusion tentative (one un-warmed sample proves nothing).
pub const MIN_STEPS_FOR_CONFIDENCE: usize = 3;

/// The judgment over the analysed inputs and the findings the rules raised on them.
pub fn conclude(ctx: &Context, findings: &[Finding]) -> Conclusion {
    let steps = ctx
        .traces
        .iter()
        .map(|t| t.analysis.steps.len())
        .max()
        .unwrap_or(0);
    let confident = ctx.traces.is_empty() || steps >= MIN_STEPS_FOR_CONFIDENCE;
    let facts = Facts::gather(ctx, findings);
    let Judgment {
        verdict,
        mut summary,
        action,
    } = decide(&facts);
    if !confident {
        summary.push_str(&format!(
            " Tentative: only {steps} step(s) traced; trace at least {MIN_STEPS_FOR_CONFIDENCE} warmed-up steps."
        ));
    }
    Conclusion {
        verdict,
        evidence: facts.evidence(ctx),
        summary,
        action,
        confident,
    }
}

/// The bare baseline the judgment uses: the inter-node test with the highest peak, all-reduce preferred.
pub fn baseline<'a>(tests: &'a [TestReport]) -> Option<&'a TestReport> {
    let inter: Vec<&TestReport> = tests.iter().filter(|t| t.inter_node()).collect();
    let pick = |v: &[&'a TestReport]| {
        v.iter().copied().max_by(|a, b| {
            let pa = a.summary.peak_busbw_gbps.unwrap_or(0.0);
            let pb = b.summary.peak_busbw_gbps.unwrap_or(0.0);
            pa.total_cmp(&pb)
        })
    };
    let allreduce: Vec<&TestReport> = inter
        .iter()
        .copied()
        .filter(|t| t.test.collective.contains("all_reduce"))
        .collect();
    pick(&allreduce).or_else(|| pick(&inter))
}

/// The costliest collective with a known size over all ranks, as trained: (collective, size in bytes, bus
/// bandwidth in GB/s).
pub fn training_busbw(traces: &[TraceReport]) -> Option<(String, u64, f64)> {
    traces
        .iter()
        .flat_map(|t| t.analysis.top_collectives.iter())
        .filter(|c| c.size_bytes.is_some() && c.busbw_gbps.is_some())
        .max_by(|a, b| a.total_time_us.total_cmp(&b.total_time_us))
        .map(|c| {
            (
                c.collective.clone(),
                c.size_bytes.unwrap_or(0),
                c.busbw_gbps.unwrap_or(0.0),
            )
        })
}

/// What the judgment weighs, gathered once.
struct Facts<'a> {
    /// See [`baseline`].
    base: Option<&'a TestReport>,
    /// Link rate, GB/s.
    rate: Option<f64>,
    /// See [`training_busbw`].
    training: Option<(String, u64, f64)>,
    exposed: Option<&'a Finding>,
    cpu_bound: Option<&'a Finding>,
    /// Findings that blame the NIC binding or the link, in report order.
    binding: Vec<&'a Finding>,
    management_traffic: bool,
    misconfiguration: bool,
    traced: bool,
}

impl<'a> Facts<'a> {
    fn gather(ctx: &Context<'a>, findings: &'a [Finding]) -> Facts<'a> {
        let first = |kind: &str| findings.iter().find(|f| f.kind == kind);
        Facts {
            base: baseline(ctx.tests),
            rate: ctx.link.rate_gbps,
            training: training_busbw(ctx.traces),
            exposed: first("exposed_communication"),
            cpu_bound: first("cpu_bound"),
            binding: findings
                .iter()
                .filter(|f| {
                    matches!(
                        f.kind,
                        "nccl_misconfiguration"
                            | "management_network_traffic"
                            | "link_underutilized"
                    )
                })
                .collect(),
            management_traffic: first("management_network_traffic").is_some(),
            misconfiguration: first("nccl_misconfiguration").is_some(),
            traced: !ctx.traces.is_empty(),
        }
    }

    /// Whether the bare baseline's peak reaches the link; `None` without both.
    fn meets(&self) -> Option<bool> {
        match (self.base.and_then(|b| b.summary.peak_busbw_gbps), self.rate) {
            (Some(p), Some(r)) => Some(p >= BASELINE_MEETS_LINK * r),
            _ => None,
        }
    }

    /// Whether training falls short of the bare baseline at its own message size (the peak where the baseline
    /// did not measure that size); `None` without both.
    fn training_short(&self) -> Option<bool> {
        match (&self.training, self.base) {
            (Some((_, size, bw)), Some(b)) => busbw_at(&b.test, *size)
                .or(b.summary.peak_busbw_gbps)
                .map(|bare| *bw < TRAINING_MEETS_BASELINE * bare),
            _ => None,
        }
    }

    /// The lines that back the verdict: baseline, link, training, then the findings it weighs.
    fn evidence(&self, ctx: &Context) -> Vec<String> {
        let mut evidence = Vec::new();
        if let Some(b) = self.base {
            if let Some(p) = b.summary.peak_busbw_gbps {
                evidence.push(format!(
                    "bare {} ({} ranks): peak bus bandwidth {:.2} GB/s ({})",
                    b.test.collective,
                    b.test.nranks().map_or("?".to_string(), |n| n.to_string()),
                    p,
                    b.file
                ));
            }
        }
        if let Some(r) = self.rate {
            evidence.push(format!(
                "link rate {:.2} GB/s (from {})",
                r,
                ctx.link.source.unwrap_or("?")
            ));
        }
        if let Some((c, size, bw)) = &self.training {
            evidence.push(format!(
                "in training: {c} of {} reaches {bw:.2} GB/s bus bandwidth",
                human_bytes(*size)
            ));
        }
        if let Some(f) = self.exposed {
            evidence.push(f.summary.clone());
        }
        for f in &self.binding {
            evidence.push(f.summary.clone());
        }
        evidence
    }
}

/// A verdict with its one-paragraph summary and the next action.
#[derive(Debug, PartialEq)]
struct Judgment {
    verdict: &'static str,
    summary: String,
    action: String,
}

impl Judgment {
    fn new(verdict: &'static str, summary: &str, action: String) -> Judgment {
        Judgment {
            verdict,
            summary: summary.to_string(),
            action,
        }
    }
}

/// The decision, first match wins: the link (or binding) before overlap, the host before unproven exposure.
fn decide(f: &Facts) -> Judgment {
    let meets = f.meets();
    if meets == Some(false)
        || (meets.is_none() && (f.management_traffic || f.misconfiguration && f.base.is_some()))
        || (f.base.is_none() && f.management_traffic)
    {
        Judgment::new(
            "link_or_binding",
            "The bare baseline does not reach the link: the cause is the link, the NIC binding or the algorithm, \
             not the training job.",
            f.binding.first().map(|b| b.action.clone()).unwrap_or_else(|| {
                "verify the link (rate, errors), the NIC binding (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) and the \
                 algorithm with NCCL_DEBUG=INFO, then re-run the baseline"
                    .to_string()
            }),
        )
    } else if meets == Some(true) && (f.training_short() == Some(true) || f.exposed.is_some()) {
        Judgment::new(
            "not_the_link",
            "The bare baseline meets the link but communication during training does not: the cause is overlap, \
             synchronisation or contention, not the link.",
            f.exposed.map(|e| e.action.clone()).unwrap_or_else(|| {
                "look for ranks that arrive late (stragglers), collectives serialised behind compute, and other \
                 traffic sharing the link"
                    .to_string()
            }),
        )
    } else if let Some(cpu) = f.cpu_bound {
        Judgment::new(
            "cpu_bound",
            "The GPU mostly waits on the host, not on communication: tuning NCCL will not help.",
            cpu.action.clone(),
        )
    } else if let Some(e) = f.exposed {
        Judgment::new(
            "exposed_communication",
            "Communication is exposed on the timeline; without a bare baseline against the link rate it is not yet \
             known whether the link or the overlap is at fault.",
            format!(
                "run all_reduce_perf across the same nodes and pass it with --nccl-tests and the fabric rate with \
                 --link-rate; meanwhile: {}",
                e.action
            ),
        )
    } else if meets == Some(true) && f.traced {
        Judgment::new(
            "healthy",
            "The bare baseline meets the link and training communication is hidden behind computation.",
            "nothing to fix in communication; look at computation for further speed-up".to_string(),
        )
    } else if meets == Some(true) {
        Judgment::new(
            "baseline_meets_link",
            "The bare baseline meets the link. Whether training communication does is not known without a trace.",
            "profile a few training steps (torch.profiler with ProfilerStep, or nsys) and pass the traces with --trace \
             or --nsys"
                .to_string(),
        )
    } else {
        let missing = match (f.base.is_some(), f.rate.is_some()) {
            (false, _) => "a multi-node nccl-tests baseline (--nccl-tests)",
            (true, false) => "the link rate (--link-rate or --collector)",
            _ => "a training trace (--trace or --nsys)",
        };
        Judgment {
            verdict: "insufficient_evidence",
            summary: format!("Not enough evidence for the key judgment: missing {missing}."),
            action: format!("add {missing} and run again"),
        }
    }
}

#[cfg(test)]
mod tests {
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
    fn management_traffic_blames_the_binding_even_without_a_baseline() {
        let c = Case::new(None, None)
            .found("management_network_traffic")
            .conclude();
        assert_eq!(c.verdict, "link_or_binding");
        assert_eq!(c.action, "fix management_network_traffic");
        // A misconfiguration needs a baseline to be read against, when the link rate is unknown…
        let c = Case::new(Some(40.0), None)
            .found("nccl_misconfiguration")
            .conclude();
        assert_eq!(c.verdict, "link_or_binding");
        // …and without one the evidence is insufficient.
        let c = Case::new(None, None)
            .found("nccl_misconfiguration")
            .conclude();
        assert_eq!(c.verdict, "insufficient_evidence");
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
}
