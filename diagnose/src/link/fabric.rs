//! One nccl-tests run against the nodes' fabric: the most bus bandwidth the network can carry for that
//! collective at that scale, and whether the run meets it, falls below it, or claims more than any network
//! could (then it did not measure the network).
//!
//! A node's capacity is NICs × link rate. What that allows in bus bandwidth depends on the collective and
//! the scale, because bus bandwidth counts the traffic of every rank while only inter-node bytes cross the
//! NICs. With `n` ranks on `N` nodes, each node must move at least (N-1)/N of an all-gather's output and twice
//! (N-1)/N of an all-reduce's buffer through its NICs (reduce-scatter and all-gather among nodes), so:
//! - all-reduce, all-gather, reduce-scatter: ceiling = capacity × N/(N-1) × (n-1)/n;
//! - all-to-all: each rank sends (N-1)/N of its buffer off-node, n/N ranks per node: ceiling = capacity ×
//!   N²/(n (N-1)) × (n-1)/n;
//! - broadcast, reduce, send/receive and the others (busbw = algbw): ceiling = capacity.
//!
//! In-network reduction (SHARP, NVLS across nodes) halves what an all-reduce moves for large N, so above the
//! ceiling is not yet impossible: an all-reduce is impossible over the network only above capacity × 2(n-1)/n,
//! any other collective above its ceiling (2 % is left for the table's rounding).

use serde::Serialize;

use super::{LinkInfo, BASELINE_MEETS_LINK};
use crate::analysis::bandwidth::CurveSummary;
use crate::nccl_tests::NcclTest;

/// A bus bandwidth above the impossible bound by more than this factor is impossible (rounding margin).
const ROUNDING: f64 = 1.02;

/// What the comparison concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FabricVerdict {
    /// The peak reaches [`BASELINE_MEETS_LINK`] of the ceiling.
    Meets,
    /// The peak stays below it: the link, the NIC binding or the algorithm.
    Below,
    /// The peak is more than the network can carry: the run did not measure the network.
    Impossible,
    /// Not compared; `reason` says why.
    NotCompared,
}

/// One run against the fabric. Bandwidths in GB/s (1e9 bytes/s).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FabricComparison {
    /// Rate of one link.
    pub link_rate_gbps: f64,
    /// NICs per node used, and where the count comes from (`flag`, `collector`, `log`, `assumed`).
    pub nics_per_node: u32,
    pub nics_source: &'static str,
    /// NICs per node × link rate.
    pub capacity_gbps: f64,
    /// The most bus bandwidth the network carries for this collective and scale; `None` when the scale is
    /// unknown.
    pub ceiling_busbw_gbps: Option<f64>,
    /// Above this bus bandwidth no network can have carried the run.
    pub impossible_above_gbps: f64,
    /// The run's peak bus bandwidth and its share of the ceiling.
    pub peak_busbw_gbps: Option<f64>,
    pub share_of_ceiling: Option<f64>,
    pub verdict: FabricVerdict,
    /// The comparison in plain words.
    pub reason: String,
}

/// How the bus bandwidth of a collective scales from what crosses a node's NICs: the factor of the ceiling
/// over the capacity, for `n` ranks on `nodes` nodes (see the module's text).
fn ceiling_factor(collective: &str, n: f64, nodes: f64) -> Option<f64> {
    let spread = nodes / (nodes - 1.0);
    let c = collective.trim_end_matches("_perf");
    match c {
        "all_reduce" | "all_gather" | "reduce_scatter" => Some(spread * (n - 1.0) / n),
        "alltoall" => Some(spread * nodes / n * (n - 1.0) / n),
        "unknown" => None,
        _ => Some(1.0),
    }
}

/// Whether a run's numbers can be a baseline: it completed, and validation found no wrong results.
pub fn trustworthy(test: &NcclTest, summary: &CurveSummary) -> bool {
    test.complete() && summary.wrong_total == 0.0 && test.out_of_bounds.unwrap_or(0) == 0
}

/// Compares a run with the fabric; `None` without a link rate.
pub fn compare(
    test: &NcclTest,
    summary: &CurveSummary,
    link: &LinkInfo,
) -> Option<FabricComparison> {
    let rate = link.rate_gbps?;
    let (nics, nics_source) = link.nics();
    let capacity = f64::from(nics) * rate;
    let peak = summary.peak_busbw_gbps;
    let n = test.nranks().map(f64::from);
    let nodes = test.nnodes();
    let all_reduce = test.collective.starts_with("all_reduce");
    // The ceiling where the scale is known; the impossible bound from what is known (2 x capacity at most).
    let ceiling = match (n, nodes) {
        (Some(n), Some(nodes)) if nodes > 1 => {
            ceiling_factor(&test.collective, n, f64::from(nodes)).map(|f| f * capacity)
        }
        _ => None,
    };
    let sharp = 2.0 * capacity * n.map_or(1.0, |n| (n - 1.0) / n);
    let impossible_above = match ceiling {
        Some(c) if !all_reduce => c,
        Some(c) => c.max(sharp),
        None => 2.0 * capacity,
    };
    let mut c = FabricComparison {
        link_rate_gbps: rate,
        nics_per_node: nics,
        nics_source,
        capacity_gbps: capacity,
        ceiling_busbw_gbps: ceiling,
        impossible_above_gbps: impossible_above,
        peak_busbw_gbps: peak,
        share_of_ceiling: None,
        verdict: FabricVerdict::NotCompared,
        reason: String::new(),
    };
    c.reason = judge(&mut c, test, summary);
    Some(c)
}

/// Sets the verdict and share; returns the reason in plain words.
fn judge(c: &mut FabricComparison, test: &NcclTest, summary: &CurveSummary) -> String {
    let single_node = test.nnodes() == Some(1) || test.nranks() == Some(1);
    let Some(peak) = summary.peak_busbw_gbps.filter(|_| !single_node) else {
        return if single_node {
            "single node: intra-node bandwidth, not compared with the fabric".to_string()
        } else {
            "no measurement to compare".to_string()
        };
    };
    if !test.complete() {
        return "the run did not complete: its table is no baseline".to_string();
    }
    if !trustworthy(test, summary) {
        return "the run returned wrong results: its numbers are no baseline".to_string();
    }
    let nics = match c.nics_source {
        "assumed" => "1 NIC per node assumed (--nics-per-node)".to_string(),
        src => format!("{} NIC(s) per node from the {src}", c.nics_per_node),
    };
    if peak > c.impossible_above_gbps * ROUNDING {
        c.verdict = FabricVerdict::Impossible;
        let why = if test.nnodes().is_none() {
            "the test most likely ran within one node (NVLink), not across the network"
        } else {
            "NVLink carried it (within a node or a multi-node NVLink domain), or the nodes have more NICs than \
             counted"
        };
        return format!(
            "{peak:.2} GB/s is more than the network can carry ({:.2} GB/s at most with {nics} at {:.2} GB/s): \
             {why}",
            c.impossible_above_gbps, c.link_rate_gbps
        );
    }
    let Some(ceiling) = c.ceiling_busbw_gbps else {
        return "the node count is unknown: not compared with the fabric".to_string();
    };
    let share = peak / ceiling;
    c.share_of_ceiling = Some(share);
    c.verdict = if share >= BASELINE_MEETS_LINK {
        FabricVerdict::Meets
    } else {
        FabricVerdict::Below
    };
    format!(
        "{:.0} % of the {ceiling:.2} GB/s the network carries for this test ({nics})",
        share * 100.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::bandwidth::summarize;
    use crate::nccl_tests::{Placement, RankDevice, Row};

    /// A complete run of `collective` on `per_node` ranks on each of `nodes` hosts (none listed when 0),
    /// peaking at `peak` GB/s.
    fn run(collective: &str, nodes: u32, per_node: u32, peak: f64) -> (NcclTest, CurveSummary) {
        let mut t = NcclTest::new(1);
        t.collective = collective.to_string();
        t.ranks = (0..nodes * per_node)
            .map(|rank| RankDevice {
                rank,
                host: format!("h{}", rank / per_node),
                device: Some(rank % per_node),
                bus: None,
                line: 0,
            })
            .collect();
        let p = Placement {
            time_us: 1.0,
            algbw_gbps: peak,
            busbw_gbps: peak,
            wrong: Some(0.0),
        };
        t.rows.push(Row {
            size_bytes: 1 << 30,
            count: 1 << 28,
            dtype: "float".to_string(),
            redop: Some("sum".to_string()),
            root: Some(-1),
            out_of_place: Some(p.clone()),
            in_place: Some(p),
            line: 1,
        });
        let s = summarize(&t);
        (t, s)
    }

    fn link(rate: f64, nics: Option<u32>) -> LinkInfo {
        LinkInfo::new(Some(rate), None).with_nics(nics, None)
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-6)
    }

    #[test]
    fn one_gpu_per_node_meets_a_single_nic() {
        // 10 ranks on 10 nodes: the ceiling is the link itself.
        let (t, s) = run("all_reduce_perf", 10, 1, 48.89);
        let c = compare(&t, &s, &link(50.0, None)).unwrap();
        assert!(close(c.ceiling_busbw_gbps, 50.0));
        assert_eq!(c.verdict, FabricVerdict::Meets);
        assert_eq!(c.nics_source, "assumed");
        assert!(
            c.reason.starts_with("98 % of the 50.00 GB/s"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn eight_nics_of_two_nodes_carry_more_bus_bandwidth_than_their_sum() {
        // 16 ranks on 2 nodes with 8 x 25 GB/s: 200 x 2 x 15/16 = 375 GB/s; 338.82 is 90 % of it.
        let (t, s) = run("all_reduce_perf", 2, 8, 338.82);
        let c = compare(&t, &s, &link(25.0, Some(8))).unwrap();
        assert!(close(c.ceiling_busbw_gbps, 375.0));
        assert_eq!(c.verdict, FabricVerdict::Meets);
        // With one NIC assumed, 338.82 GB/s cannot have crossed a 25 GB/s link: impossible, not "1355 %".
        let c = compare(&t, &s, &link(25.0, None)).unwrap();
        assert_eq!(c.verdict, FabricVerdict::Impossible);
        assert_eq!(c.share_of_ceiling, None);
        assert!(c.reason.contains("more NICs than counted"), "{}", c.reason);
        // Far below the ceiling.
        let (t, s) = run("all_reduce_perf", 2, 8, 40.0);
        assert_eq!(
            compare(&t, &s, &link(25.0, Some(8))).unwrap().verdict,
            FabricVerdict::Below
        );
    }

    #[test]
    fn alltoall_and_rooted_collectives_have_their_own_ceilings() {
        // All-to-all, 16 ranks on 2 nodes: 400 x 4/16 x 15/16 = 93.75 GB/s.
        let (t, s) = run("alltoall_perf", 2, 8, 37.31);
        let c = compare(&t, &s, &link(50.0, Some(8))).unwrap();
        assert!(close(c.ceiling_busbw_gbps, 93.75));
        assert_eq!(c.verdict, FabricVerdict::Below);
        let (t, s) = run("broadcast_perf", 2, 1, 12.0);
        let c = compare(&t, &s, &link(12.5, Some(1))).unwrap();
        assert!(close(c.ceiling_busbw_gbps, 12.5));
        assert_eq!(c.verdict, FabricVerdict::Meets);
    }

    #[test]
    fn single_node_unknown_scale_and_incomplete_runs_are_not_compared() {
        let (t, s) = run("all_reduce_perf", 1, 8, 479.93);
        let c = compare(&t, &s, &link(50.0, None)).unwrap();
        assert_eq!(c.verdict, FabricVerdict::NotCompared);
        assert!(c.reason.starts_with("single node"));
        // No rank list: compared only with what no network carries (2 x capacity).
        let (t, s) = run("sendrecv_perf", 0, 0, 195.1);
        let c = compare(&t, &s, &link(25.0, None)).unwrap();
        assert_eq!(c.verdict, FabricVerdict::Impossible);
        assert!(c.reason.contains("within one node"), "{}", c.reason);
        let (t, s) = run("all_reduce_perf", 0, 0, 40.0);
        let c = compare(&t, &s, &link(25.0, None)).unwrap();
        assert_eq!(c.verdict, FabricVerdict::NotCompared);
        assert!(c.reason.starts_with("the node count is unknown"));
        let (mut t, mut s) = run("all_reduce_perf", 2, 1, 20.0);
        s.wrong_total = 4.0;
        let c = compare(&t, &s, &link(25.0, None)).unwrap();
        assert_eq!(c.verdict, FabricVerdict::NotCompared);
        assert!(c.reason.contains("wrong results"));
        t.failure = Some(Default::default());
        let c = compare(&t, &s, &link(25.0, None)).unwrap();
        assert_eq!(c.verdict, FabricVerdict::NotCompared);
        assert!(compare(&t, &s, &LinkInfo::default()).is_none());
    }
}
