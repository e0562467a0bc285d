//! Step 1's table: one row per nccl-tests run, with who ran it, whether it ran to the end, its curve's
//! summary, and how its peak compares with what the fabric can carry.

use super::super::model::{Report, ReportJson, TestJson};
use super::super::units::human_bytes;
use super::markup::{code, duration, esc, file, num, pct, text, unbroken, Align, Table, UNKNOWN};
use crate::analysed::TestReport;
use crate::link::fabric::FabricVerdict;

/// "16 ranks on 2 nodes", "8 ranks", "at least 72 ranks" or "ranks unknown": never a zero standing for
/// "unknown".
pub fn ranks_phrase(nranks: Option<u32>, at_least: Option<u32>, nnodes: Option<u32>) -> String {
    let plural = |n: u32, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    match (nranks, at_least, nnodes) {
        (Some(r), _, Some(n)) => format!(
            "{} on {}",
            plural(r, "rank", "ranks"),
            plural(n, "node", "nodes")
        ),
        (Some(r), _, None) => plural(r, "rank", "ranks"),
        (None, Some(r), _) => format!("at least {}", plural(r, "rank", "ranks")),
        (None, None, _) => "ranks unknown".to_string(),
    }
}

/// A run's ranks in words.
pub fn ranks_of(t: &TestReport) -> String {
    ranks_phrase(t.test.nranks(), t.test.nranks_at_least(), t.test.nnodes())
}

/// How the run went, marked when it is no baseline: it failed, stopped short, or returned wrong results.
pub fn run_status(t: &TestReport) -> Option<String> {
    if let Some(f) = &t.test.failure {
        return Some(match f.after_bytes {
            Some(b) => format!("failed after {}", human_bytes(b)),
            None => "failed before the first row".to_string(),
        });
    }
    if t.test.cut_short() {
        return Some("stops before its last size".to_string());
    }
    if t.summary.wrong_total > 0.0 || t.test.out_of_bounds.unwrap_or(0) > 0 {
        return Some("wrong results".to_string());
    }
    None
}

/// The table.
pub fn table(r: &Report) -> String {
    let view = ReportJson::from(r);
    let mut t = Table::new(
        "results",
        &[
            ("result", Align::Text),
            ("ranks", Align::Text),
            ("NCCL", Align::Text),
            ("sizes", Align::Text),
            ("run", Align::Text),
            ("avg bus bw, file (GB/s)", Align::Num),
            ("peak bus bw (GB/s)", Align::Num),
            ("peak at", Align::Num),
            ("latency", Align::Num),
            ("peak vs fabric", Align::Text),
        ],
    );
    for (test, json) in r.nccl_tests.iter().zip(&view.nccl_tests) {
        let s = &test.summary;
        t.row(&[
            format!("{}<br>{}", code(&test.test.collective), file(&test.file)),
            esc(&ranks_of(test)),
            test.test
                .nccl_version
                .as_deref()
                .map_or(UNKNOWN.to_string(), unbroken),
            esc(&sizes(test)),
            run_status(test).map_or("complete".to_string(), |s| {
                format!("<span class=\"bad\">{}</span>", esc(&s))
            }),
            num(test.test.avg_busbw_gbps, 2),
            num(s.peak_busbw_gbps, 2),
            s.peak_at_bytes
                .map_or(UNKNOWN.to_string(), |b| esc(&human_bytes(b))),
            s.latency_us.map_or(UNKNOWN.to_string(), duration),
            vs_fabric(json),
        ]);
    }
    t.finish()
}

/// The sizes a run measured: `8 B – 16 GiB (32 rows)`.
fn sizes(t: &TestReport) -> String {
    let rows = &t.test.rows;
    match (
        rows.iter().map(|r| r.size_bytes).min(),
        rows.iter().map(|r| r.size_bytes).max(),
    ) {
        (Some(a), Some(b)) if a == b => format!("{} (1 row)", human_bytes(a)),
        (Some(a), Some(b)) => format!(
            "{} – {} ({} rows)",
            human_bytes(a),
            human_bytes(b),
            rows.len()
        ),
        _ => "no rows".to_string(),
    }
}

/// The peak against the most the fabric carries for this run: its share of that ceiling and the verdict, or
/// why it was not compared.
fn vs_fabric(json: &TestJson) -> String {
    let Some(c) = &json.fabric_comparison else {
        return format!("{UNKNOWN} <span class=\"note\">link rate unknown</span>");
    };
    let of = |share: Option<f64>| match (share, c.ceiling_busbw_gbps) {
        (Some(s), Some(ceiling)) => format!("{} of {ceiling:.1} GB/s", pct(Some(s))),
        _ => String::new(),
    };
    match c.verdict {
        FabricVerdict::Meets => format!(
            "<span class=\"good\">meets</span> {}",
            esc(&of(c.share_of_ceiling))
        ),
        FabricVerdict::Below => format!(
            "<span class=\"bad\">below</span> {}",
            esc(&of(c.share_of_ceiling))
        ),
        FabricVerdict::Impossible => format!(
            "<span class=\"bad\">more than the network carries</span> <span class=\"note\">(above {:.1} GB/s)</span>",
            c.impossible_above_gbps
        ),
        FabricVerdict::NotCompared => format!("<span class=\"note\">{}</span>", text(&c.reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl_tests::Failure;
    use crate::report::fixtures;
    use crate::report::html::markup::without_labels;

    #[test]
    fn ranks_are_counted_or_said_unknown() {
        assert_eq!(ranks_phrase(Some(16), None, Some(2)), "16 ranks on 2 nodes");
        assert_eq!(ranks_phrase(Some(1), None, Some(1)), "1 rank on 1 node");
        assert_eq!(ranks_phrase(Some(8), None, None), "8 ranks");
        assert_eq!(ranks_phrase(None, Some(72), None), "at least 72 ranks");
        assert_eq!(ranks_phrase(None, None, Some(2)), "ranks unknown");
    }

    #[test]
    fn a_failed_run_says_where_it_stopped() {
        let mut t = fixtures::test_report("all_reduce_perf", &["a", "b"], Some(40.0));
        assert_eq!(run_status(&t), None);
        t.test.failure = Some(Failure {
            after_bytes: Some(16 << 30),
            ..Failure::default()
        });
        assert_eq!(run_status(&t).as_deref(), Some("failed after 16 GiB"));
        t.test.failure = Some(Failure::default());
        assert_eq!(
            run_status(&t).as_deref(),
            Some("failed before the first row")
        );
    }

    #[test]
    fn each_run_against_the_fabric() {
        let html = without_labels(&table(&fixtures::report()));
        assert!(html.contains("1 MiB – 1 GiB (2 rows)"));
        assert!(html.contains("<td>complete</td>"));
        assert!(html.contains("<td class=\"num\">45.00</td>"));
        // The single-node run is not held against the fabric, and says why.
        assert!(html.contains("single node: intra-node bandwidth, not compared with the fabric"));
        assert!(!html.contains("(0 ranks)"));
    }
}
