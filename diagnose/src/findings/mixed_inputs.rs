//! Inputs that must not be read as one: a file with several runs of the same test (which one is the
//! baseline? results that differ several-fold say the conditions changed between them), and traces whose
//! ranks belong to different jobs (their timelines are not compared rank against rank).

use super::{r2, Context, Finding, Severity};
use crate::analysed::TestReport;
use crate::analysis::mixing::{repeated_runs, trace_jobs};

/// Repeats whose peaks differ by less than this share agree (ordinary run-to-run noise).
pub const AGREEING_SHARE: f64 = 0.8;

pub fn check(ctx: &Context) -> Vec<Finding> {
    let runs: Vec<(&str, &crate::nccl_tests::NcclTest)> = ctx
        .tests
        .iter()
        .map(|t| (t.file.as_str(), &t.test))
        .collect();
    let mut out: Vec<Finding> = repeated_runs(&runs)
        .iter()
        .map(|group| {
            let group: Vec<&TestReport> = group.iter().map(|i| &ctx.tests[*i]).collect();
            repeats(&group)
        })
        .collect();
    let jobs: Vec<(u32, Option<u32>)> = ctx
        .traces
        .iter()
        .map(|t| (t.analysis.rank, t.analysis.world_size))
        .collect();
    if let Some(m) = trace_jobs(&jobs) {
        let mut why = Vec::new();
        if m.world_sizes.len() > 1 {
            let sizes: Vec<String> = m.world_sizes.iter().map(u32::to_string).collect();
            why.push(format!("world sizes {}", sizes.join(", ")));
        }
        if !m.repeated_ranks.is_empty() {
            let ranks: Vec<String> = m.repeated_ranks.iter().map(u32::to_string).collect();
            why.push(format!("rank {} traced more than once", ranks.join(", ")));
        }
        out.push(
            Finding::new(
                "mixed_inputs",
                Severity::Warning,
                format!(
                    "the traces belong to more than one job ({}): their ranks are not compared with each other",
                    why.join("; ")
                ),
                "pass the traces of one job at a time (one directory per job)",
            )
            .subject("inputs", "traces")
            .evidence("traces", ctx.traces.len() as u64)
            .evidence(
                "world_sizes",
                m.world_sizes.iter().map(|w| u64::from(*w)).collect::<Vec<u64>>(),
            )
            .evidence(
                "repeated_ranks",
                m.repeated_ranks.iter().map(|r| u64::from(*r)).collect::<Vec<u64>>(),
            ),
        );
    }
    out
}

/// Several runs of one test in one file: how far apart their peaks are.
fn repeats(group: &[&TestReport]) -> Finding {
    let peaks: Vec<f64> = group
        .iter()
        .map(|t| t.summary.peak_busbw_gbps.unwrap_or(0.0))
        .collect();
    let fastest = peaks.iter().copied().fold(0.0, f64::max);
    let slowest = peaks.iter().copied().fold(f64::INFINITY, f64::min);
    let ratio = if fastest > 0.0 {
        slowest / fastest
    } else {
        1.0
    };
    let first = group[0];
    let ranks = first
        .test
        .nranks()
        .map_or("an unknown number of".to_string(), |n| n.to_string());
    let verdict = if ratio < AGREEING_SHARE {
        format!(
            "the slowest peaks at {slowest:.2} GB/s, {:.1}x below the fastest ({fastest:.2} GB/s): the conditions \
             changed between them, and they are judged one by one, not as one baseline",
            1.0 / ratio.max(f64::MIN_POSITIVE)
        )
    } else {
        format!("their peaks agree ({slowest:.2} to {fastest:.2} GB/s); they are judged one by one")
    };
    Finding::new(
        "mixed_inputs",
        if ratio < AGREEING_SHARE { Severity::Warning } else { Severity::Info },
        format!(
            "{} holds {} runs of {} on {ranks} ranks; {verdict}",
            first.file,
            group.len(),
            first.test.collective
        ),
        "keep one run per file, and say what changed between runs (cabling, FEC, link speed, settings) before \
         comparing them",
    )
    .subject("file", &first.file)
    .subject("collective", &first.test.collective)
    .evidence("runs", group.len() as u64)
    .evidence("peaks_gbps", peaks)
    .evidence("slowest_to_fastest_ratio", r2(ratio))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{on_tests, rank_list, run, table, tests};
    use crate::link::LinkInfo;
    use crate::report::fixtures::trace_report;

    fn two_runs(second_gbps: f64) -> String {
        let run = |gbps: f64| {
            format!(
                "# nccl-tests version 2.18.3\n# Collective test starting: all_gather_perf\n{}{}\
                 # Collective test concluded: all_gather_perf\n",
                rank_list(2, 1),
                table(&[(1 << 30, gbps, gbps)])
            )
        };
        format!("{}{}", run(22.14), run(second_gbps))
    }

    #[test]
    fn two_runs_that_disagree() {
        let f = on_tests(check, &tests(&two_runs(2.82)), &LinkInfo::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(f[0].evidence["runs"], 2);
        assert_eq!(f[0].evidence["slowest_to_fastest_ratio"], 0.13);
        assert_eq!(
            f[0].summary,
            "out.txt holds 2 runs of all_gather_perf on 2 ranks; the slowest peaks at 2.82 GB/s, 7.9x below the \
             fastest (22.14 GB/s): the conditions changed between them, and they are judged one by one, not as \
             one baseline"
        );
        let agree = on_tests(check, &tests(&two_runs(21.5)), &LinkInfo::default());
        assert_eq!(agree[0].severity, Severity::Info);
    }

    #[test]
    fn traces_of_two_jobs() {
        let mut other = trace_report(0, 3, None);
        other.analysis.world_size = Some(128);
        let traces = [trace_report(0, 3, None), trace_report(1, 3, None), other];
        let f = run(check, &[], &[], &traces, &LinkInfo::default());
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].summary,
            "the traces belong to more than one job (world sizes 2, 128; rank 0 traced more than once): their \
             ranks are not compared with each other"
        );
        assert!(run(check, &[], &[], &traces[..2], &LinkInfo::default()).is_empty());
    }
}
