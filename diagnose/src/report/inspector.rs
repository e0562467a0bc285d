//! The NCCL Inspector part of the report (`--nccl-inspector`): step 3 ranks the collectives by the time the job
//! waited for them, step 4 holds the costliest one's bus bandwidth against one fabric link (a rank's rail) and the
//! bare baseline. JSON key `nccl_inspector` (bandwidths `_gbps` in GB/s, times `_us` in µs); the text and HTML
//! renderers call [`text_step3`], [`text_step4`] and `html::inspector::body`.

use std::fmt::Write as _;

use serde::Serialize;

use crate::analysed::TestReport;
use crate::inspector::{summarize, CollectiveSummary, FileRead, InspectorRead};
use crate::link::LinkInfo;
use crate::nccl_tests::collective_from_name;

use super::units::human_bytes;

/// What the Inspector files said.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InspectorSection {
    pub files: Vec<FileRead>,
    /// Costliest first.
    pub collectives: Vec<CollectiveSummary>,
    /// The costliest collective against the link, when there is one.
    pub link: Option<LinkFigures>,
}

/// The costliest collective's bus bandwidth against the fabric and the bare baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkFigures {
    pub collective: String,
    pub size_bytes: u64,
    pub bus_bandwidth_gbps: f64,
    /// Whether its communicator spans nodes (only then does the fabric bound it).
    pub inter_node: bool,
    /// One fabric link's rate (the rail a rank's traffic leaves on), GB/s.
    pub fabric_capacity_gbps: Option<f64>,
    pub fabric_share: Option<f64>,
    /// The best inter-node nccl-tests peak of the same collective, GB/s.
    pub baseline_gbps: Option<f64>,
    pub baseline_share: Option<f64>,
}

/// The section from what was read; `None` when nothing was given.
pub fn build(
    reads: &[InspectorRead],
    link: &LinkInfo,
    tests: &[TestReport],
) -> Option<InspectorSection> {
    if reads.is_empty() {
        return None;
    }
    let files = reads.iter().flat_map(|r| r.files.iter().cloned()).collect();
    let records: Vec<_> = reads
        .iter()
        .flat_map(|r| r.records.iter().cloned())
        .collect();
    let collectives = summarize(&records);
    let link = collectives.first().map(|c| figures(c, link, tests));
    Some(InspectorSection {
        files,
        collectives,
        link,
    })
}

fn figures(c: &CollectiveSummary, link: &LinkInfo, tests: &[TestReport]) -> LinkFigures {
    let name = collective_from_name(&c.collective);
    let baseline = tests
        .iter()
        .filter(|t| t.inter_node() && Some(t.test.collective.as_str()) == name)
        .filter_map(|t| t.summary.peak_busbw_gbps)
        .max_by(f64::total_cmp);
    // Bus bandwidth is per rank: held against one link, the rail a rank's traffic leaves on.
    let capacity = link.rate_gbps;
    let share = |of: Option<f64>| of.filter(|v| *v > 0.0).map(|v| c.bus_bandwidth_gbps / v);
    LinkFigures {
        collective: c.collective.clone(),
        size_bytes: c.size_bytes,
        bus_bandwidth_gbps: c.bus_bandwidth_gbps,
        inter_node: c.nodes > 1,
        fabric_capacity_gbps: capacity,
        fabric_share: share(capacity),
        baseline_gbps: baseline,
        baseline_share: share(baseline),
    }
}

/// Step 3 lines: each collective and size class, costliest first, with its slowest rank.
pub fn text_step3(o: &mut String, s: &InspectorSection) {
    let _ = writeln!(o, "  NCCL Inspector ({} files, every rank)", s.files.len());
    for c in &s.collectives {
        let slowest = match (
            c.slowest_rank,
            &c.slowest_host,
            c.slowest_bus_bandwidth_gbps,
        ) {
            (Some(rank), Some(host), Some(bw)) => {
                format!("  slowest rank {rank} ({host}) {bw:.2} GB/s")
            }
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "    {:<16} {:>10} x{:<6} total {:>10.1} ms  busbw {:.2} GB/s  {} ranks on {} nodes{}",
            c.collective,
            human_bytes(c.size_bytes),
            c.count,
            c.total_time_us / 1000.0,
            c.bus_bandwidth_gbps,
            c.ranks,
            c.nodes,
            slowest
        );
    }
    let dropped: u64 = s.files.iter().map(|f| f.counts.dropped()).sum();
    if dropped > 0 {
        let _ = writeln!(o, "    {dropped} lines gave no record (see the inputs)");
    }
}

/// Step 4 line: the costliest collective against the fabric and the baseline.
pub fn text_step4(o: &mut String, s: &InspectorSection) {
    let Some(f) = &s.link else {
        return;
    };
    let against = |what: &str, v: Option<f64>, share: Option<f64>| match (v, share) {
        (Some(v), Some(sh)) => format!("{:.0} % of the {what} ({v:.2} GB/s)", sh * 100.0),
        _ => format!("{what} unknown"),
    };
    let _ = writeln!(
        o,
        "  Inspector: {} of {} at {:.2} GB/s bus bandwidth: {}, {}{}",
        f.collective,
        human_bytes(f.size_bytes),
        f.bus_bandwidth_gbps,
        against("fabric", f.fabric_capacity_gbps, f.fabric_share),
        against("bare baseline", f.baseline_gbps, f.baseline_share),
        if f.inter_node {
            ""
        } else {
            " (within one node: the fabric does not bound it)"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn section(rate: Option<f64>) -> InspectorSection {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/data/inspector");
        let read = crate::inspector::read_path(&dir).unwrap();
        let link = LinkInfo::new(rate, None);
        build(&[read], &link, &[]).unwrap()
    }

    #[test]
    fn step4_holds_the_costliest_collective_against_the_fabric() {
        let s = section(Some(25.0));
        let f = s.link.as_ref().unwrap();
        assert_eq!(
            (f.collective.as_str(), f.size_bytes, f.inter_node),
            ("AllReduce", 220_000_000, true)
        );
        assert!((f.fabric_share.unwrap() - 9.8 / 25.0).abs() < 1e-9);
        let mut o = String::new();
        text_step4(&mut o, &s);
        assert!(o.contains("AllReduce of 209.8 MiB at 9.80 GB/s bus bandwidth: 39 % of the fabric (25.00 GB/s)"), "{o}");
        assert!(o.contains("bare baseline unknown"), "{o}");
    }

    #[test]
    fn the_whole_report_carries_the_section_in_every_format() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/data/inspector");
        let inputs = crate::report::Inputs {
            nccl_inspector: vec![dir],
            link_rate_gbps: Some(22.0),
            ..Default::default()
        };
        let r = crate::Report::build(&inputs, &crate::progress::Progress::hidden());
        let json = crate::render_json(&r);
        let c = &json["nccl_inspector"]["collectives"][0];
        assert_eq!(c["collective"], "AllReduce");
        assert_eq!(c["slowest_rank"], 3);
        assert_eq!(json["inputs"][0]["status"], "partial");
        assert_eq!(json["inputs"][0]["skipped"], 2);
        let text = crate::render_text(&r);
        assert!(text.contains("45 % of the fabric (22.00 GB/s)"), "{text}");
        assert!(crate::report::html::render_html(&r).contains("NCCL Inspector: every collective"));
    }

    #[test]
    fn step3_names_the_slowest_rank_and_the_drops() {
        let s = section(None);
        let mut o = String::new();
        text_step3(&mut o, &s);
        assert!(o.contains("slowest rank 3 (node-b) 9.30 GB/s"), "{o}");
        assert!(o.contains("2 lines gave no record"), "{o}");
        let html = crate::report::html::inspector::body(&s);
        assert!(
            html.contains("AllReduce") && html.contains("3 (node-b)"),
            "{html}"
        );
    }
}
