//! The key judgment: is the fabric link at fault, or how training uses it?
//!
//! A bare baseline that meets the fabric while in-training communication does not points at overlap,
//! synchronisation or contention, not the link; a bare baseline below the fabric points at the link, the NIC
//! binding or the algorithm. The judgment claims no comparison it did not make: without a complete
//! multi-node baseline and a link figure it never blames the link; runs or jobs that must not be read as one,
//! runs that failed, and bandwidth no network carries stop it short, each with its own verdict ([`decide`]).
//! Whatever the verdict, the most severe finding is among its evidence.

mod decide;

use super::model::Conclusion;
use super::units::human_bytes;
use crate::analysed::{TestReport, TraceReport};
use crate::analysis::bandwidth::busbw_at;
use crate::findings::{Context, Finding, Severity};
use crate::link::fabric::{compare, trustworthy, FabricComparison, FabricVerdict};

/// In-training bus bandwidth below this share of the bare baseline (same size) is "not meeting" it.
pub const TRAINING_MEETS_BASELINE: f64 = 0.6;
/// Fewer traced steps than this make a conclusion tentative (one un-warmed sample proves nothing).
pub const MIN_STEPS_FOR_CONFIDENCE: usize = 3;

/// The judgment over the analysed inputs and the findings the rules raised on them (most severe first).
pub fn conclude(ctx: &Context, findings: &[Finding]) -> Conclusion {
    let steps = ctx
        .traces
        .iter()
        .map(|t| t.analysis.steps.len())
        .max()
        .unwrap_or(0);
    let confident = ctx.traces.is_empty() || steps >= MIN_STEPS_FOR_CONFIDENCE;
    let facts = Facts::gather(ctx, findings);
    let decide::Judgment {
        verdict,
        mut summary,
        action,
    } = decide::decide(&facts);
    if !confident {
        summary.push_str(&format!(
            " Tentative: only {steps} step(s) traced; trace at least {MIN_STEPS_FOR_CONFIDENCE} warmed-up steps."
        ));
    }
    Conclusion {
        verdict,
        evidence: facts.evidence(ctx),
        cites: facts.cites(),
        summary,
        action,
        confident,
    }
}

/// The bare baseline the judgment uses: a complete test across known nodes with the highest peak, all-reduce
/// preferred. A run that failed, stopped early, returned wrong results or whose node count is unknown is no
/// baseline.
pub fn baseline<'a>(tests: &'a [TestReport]) -> Option<&'a TestReport> {
    let inter: Vec<&TestReport> = tests
        .iter()
        .filter(|t| {
            t.test
                .nnodes()
                .or(t.test.nnodes_at_least())
                .is_some_and(|n| n > 1)
                && trustworthy(&t.test, &t.summary)
        })
        .collect();
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

/// Whether a finding is about how NCCL is bound to the network: the management network, or a
/// misconfiguration of an interface, a setting or the network (not NCCL's warnings or channel counts).
fn is_binding(f: &Finding) -> bool {
    f.kind == "management_network_traffic"
        || (f.kind == "nccl_misconfiguration"
            && f.severity >= Severity::Warning
            && (f.subject.contains_key("interface")
                || f.subject.contains_key("setting")
                || f.evidence.contains_key("network")))
}

/// What the judgment weighs, gathered once.
struct Facts<'a> {
    /// See [`baseline`], and how it compares with the fabric.
    base: Option<&'a TestReport>,
    comparison: Option<FabricComparison>,
    /// Link rate, GB/s.
    rate: Option<f64>,
    /// See [`training_busbw`].
    training: Option<(String, u64, f64)>,
    exposed: Option<&'a Finding>,
    cpu_bound: Option<&'a Finding>,
    /// Inputs that must not be read as one (a warning or worse).
    mixed: Option<&'a Finding>,
    /// A run that failed or returned wrong results.
    failed: Option<&'a Finding>,
    /// A run whose bandwidth no network carries.
    impossible: Option<&'a Finding>,
    /// A collapse of the baseline's own curve at mid sizes.
    base_collapse: Option<&'a Finding>,
    /// Findings that blame the NIC binding or the link, in report order.
    binding: Vec<&'a Finding>,
    misconfigured: Option<&'a Finding>,
    /// nccl-tests runs read (whether or not one is a baseline).
    tests_given: usize,
    /// The most severe finding (the first: findings come most severe first).
    worst: Option<&'a Finding>,
    traced: bool,
}

impl<'a> Facts<'a> {
    fn gather(ctx: &Context<'a>, findings: &'a [Finding]) -> Facts<'a> {
        let first = |kind: &str| findings.iter().find(|f| f.kind == kind);
        let base = baseline(ctx.tests);
        Facts {
            base,
            comparison: base.and_then(|b| compare(&b.test, &b.summary, ctx.link)),
            rate: ctx.link.rate_gbps,
            training: training_busbw(ctx.traces),
            exposed: first("exposed_communication"),
            cpu_bound: first("cpu_bound"),
            mixed: findings
                .iter()
                .find(|f| f.kind == "mixed_inputs" && f.severity >= Severity::Warning),
            failed: first("test_failed").or_else(|| first("wrong_results")),
            impossible: first("impossible_bandwidth"),
            base_collapse: base.and_then(|b| {
                findings.iter().find(|f| {
                    f.kind == "bandwidth_collapse"
                        && f.subject.get("file") == Some(&b.file)
                        && f.subject.get("collective") == Some(&b.test.collective)
                })
            }),
            binding: findings
                .iter()
                .filter(|f| is_binding(f) || f.kind == "link_underutilized")
                .collect(),
            misconfigured: findings.iter().find(|f| is_binding(f)),
            tests_given: ctx.tests.len(),
            worst: findings.first(),
            traced: !ctx.traces.is_empty(),
        }
    }

    /// The baseline against the fabric: `Some(true)` meets it, `Some(false)` below it, `None` without a
    /// comparison (no baseline, no link rate, or a bandwidth no network carries).
    fn meets(&self) -> Option<bool> {
        match self.comparison.as_ref()?.verdict {
            FabricVerdict::Meets => Some(true),
            FabricVerdict::Below => Some(false),
            FabricVerdict::Impossible | FabricVerdict::NotCompared => None,
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

    /// The input lines the verdict rests on: the baseline's peak row and average, and those of the findings it
    /// weighs (two each), the most severe first.
    fn cites(&self) -> Vec<crate::lines::Cite> {
        let mut out: Vec<crate::lines::Cite> = Vec::new();
        let mut push = |c: &crate::lines::Cite| {
            if !out.contains(c) {
                out.push(c.clone());
            }
        };
        let weighed = [
            self.worst,
            self.mixed,
            self.failed,
            self.impossible,
            self.base_collapse,
            self.exposed,
            self.cpu_bound,
        ];
        for f in weighed
            .into_iter()
            .flatten()
            .chain(self.binding.iter().copied())
        {
            f.cites.iter().take(2).for_each(&mut push);
        }
        if let Some(b) = self.base.filter(|_| self.mixed.is_none()) {
            let peak = b.summary.peak_at_bytes.map(|p| vec![p]).unwrap_or_default();
            crate::findings::test_rows(b, &peak)
                .iter()
                .for_each(&mut push);
        }
        out
    }

    /// The lines that back the verdict: baseline, link (and the fabric when it is more than one link),
    /// training, the findings it weighs, and the most severe finding when none of these is it.
    fn evidence(&self, ctx: &Context) -> Vec<String> {
        let mut evidence = Vec::new();
        // Mixed runs are no single baseline: their finding names each.
        let base = self.base.filter(|_| self.mixed.is_none());
        if let Some(b) = base {
            if let Some(p) = b.summary.peak_busbw_gbps {
                evidence.push(format!(
                    "bare {} ({} ranks): peak bus bandwidth {:.2} GB/s ({})",
                    b.test.collective,
                    b.test.nranks().map_or_else(
                        || b.test
                            .nranks_at_least()
                            .map_or("?".to_string(), |n| format!(">= {n}")),
                        |n| n.to_string()
                    ),
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
        if let Some(c) = self.comparison.as_ref().filter(|_| base.is_some()) {
            let simple = c.verdict == FabricVerdict::Impossible
                || c.nics_per_node == 1
                    && c.ceiling_busbw_gbps
                        .is_some_and(|x| (x - c.link_rate_gbps).abs() < 1e-9 * c.link_rate_gbps);
            if !simple {
                evidence.push(format!("against the fabric: {}", c.reason));
            }
        }
        if let Some((c, size, bw)) = &self.training {
            evidence.push(format!(
                "in training: {c} of {} reaches {bw:.2} GB/s bus bandwidth",
                human_bytes(*size)
            ));
        }
        let weighed = [
            self.mixed,
            self.failed,
            self.impossible,
            self.base_collapse,
            self.exposed,
        ];
        for f in weighed
            .into_iter()
            .flatten()
            .chain(self.binding.iter().copied())
        {
            if !evidence.contains(&f.summary) {
                evidence.push(f.summary.clone());
            }
        }
        if let Some(w) = self.worst {
            if !evidence.contains(&w.summary) {
                evidence.insert(0, format!("most severe finding: {}", w.summary));
            }
        }
        evidence
    }
}

#[cfg(test)]
mod tests;
