//! Pure derivations over one job's aligned collectives: per collective and size class the count, bytes, time,
//! median bus bandwidth over ranks and instances, the slowest rank, and the share of the nodes' fabric.

use std::collections::{BTreeMap, HashMap};

use commwatch_model::inspector::size_class;
use commwatch_model::stats::median;
use serde::Serialize;

/// One rank's figures in one instance of a collective.
#[derive(Debug, Clone, PartialEq)]
pub struct RankFigure {
    /// The rank in the job when the agent knew it, else the rank in the communicator.
    pub rank: u32,
    pub node: String,
    pub bus_bandwidth_bytes_per_second: f64,
    pub exec_time_us: f64,
    /// The collective's estimated midpoint on the rank's node clock (dump time − half the execution time), ns
    /// since the Unix epoch; `None` without a dump time. Places the collective in a step ([`super::by_step`]).
    pub time_unix_ns: Option<i64>,
}

/// One collective (one communicator's sequence number) with every rank that reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    pub collective: String,
    pub size_bytes: u64,
    pub n_ranks: u32,
    pub n_nodes: u32,
    /// When the collector first received a rank of it, ns since the Unix epoch.
    pub first_received_unix_ns: i64,
    pub ranks: Vec<RankFigure>,
}

/// Per collective and size class (the `/api/v1/collectives` element). Bandwidths in bytes/s, times in seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveSummary {
    pub collective: String,
    /// `le_64KiB`, `le_1MiB`, `le_16MiB`, `le_256MiB`, `gt_256MiB`.
    pub size_class: &'static str,
    /// Median message size of the class, bytes.
    pub size_bytes: u64,
    /// Instances (distinct communicator and sequence number).
    pub count: u64,
    /// Bytes of the instances (message size summed).
    pub bytes: u64,
    /// Sum over instances of the slowest rank's execution time, seconds.
    pub time_s: f64,
    /// Median over ranks and instances.
    pub bus_bandwidth_bytes_per_second: f64,
    /// The rank with the lowest median bus bandwidth, its node and that median (null with one rank, or when
    /// the ranks' medians are within 1 % of each other).
    pub slowest_rank: Option<u32>,
    pub slowest_rank_node: Option<String>,
    pub slowest_rank_bus_bandwidth_bytes_per_second: Option<f64>,
    /// The rank with the highest median bus bandwidth: its collectives ran shortest because it came last and
    /// the others had waited for it inside the collective, so a compute straggler shows here, not as
    /// `slowest_rank` (which a slow link or an early rank shows). Null with one rank.
    pub latest_rank: Option<u32>,
    pub latest_rank_node: Option<String>,
    pub latest_rank_bus_bandwidth_bytes_per_second: Option<f64>,
    /// Most ranks seen in one instance, and the nodes its communicator spans.
    pub ranks: u32,
    pub nodes: u32,
    /// The smallest among the ranks' nodes of one fabric link's capacity (a rank's rail; see
    /// [`crate::collectives::node_fabric_capacity`]); null within one node or when unknown. `fabric_share` = bus
    /// bandwidth ÷ it.
    pub fabric_capacity_bytes_per_second: Option<f64>,
    pub fabric_share: Option<f64>,
}

/// Summaries of `instances`, the costliest (most time) first. `capacity` gives a node's fabric capacity.
pub fn summarize<'a>(
    instances: impl Iterator<Item = &'a Instance>,
    capacity: &dyn Fn(&str) -> Option<f64>,
) -> Vec<CollectiveSummary> {
    let mut groups: BTreeMap<(String, &'static str), Vec<&Instance>> = BTreeMap::new();
    for i in instances {
        groups
            .entry((i.collective.clone(), size_class(i.size_bytes)))
            .or_default()
            .push(i);
    }
    let mut out: Vec<CollectiveSummary> = groups
        .into_iter()
        .map(|((collective, class), group)| summarize_group(collective, class, &group, capacity))
        .collect();
    out.sort_by(|a, b| b.time_s.total_cmp(&a.time_s));
    out
}

fn summarize_group(
    collective: String,
    size_class: &'static str,
    group: &[&Instance],
    capacity: &dyn Fn(&str) -> Option<f64>,
) -> CollectiveSummary {
    let mut sizes: Vec<f64> = group.iter().map(|i| i.size_bytes as f64).collect();
    let mut all: Vec<f64> = Vec::new();
    let mut per_rank: HashMap<u32, (Vec<f64>, &str)> = HashMap::new();
    let mut time_s = 0.0;
    for i in group {
        time_s += i.ranks.iter().map(|r| r.exec_time_us).fold(0.0, f64::max) / 1e6;
        for r in &i.ranks {
            all.push(r.bus_bandwidth_bytes_per_second);
            per_rank
                .entry(r.rank)
                .or_insert_with(|| (Vec::new(), r.node.as_str()))
                .0
                .push(r.bus_bandwidth_bytes_per_second);
        }
    }
    let medians: Vec<(u32, String, f64)> = per_rank
        .iter_mut()
        .filter_map(|(rank, (v, node))| median(v).map(|m| (*rank, node.to_string(), m)))
        .collect();
    let by_bw =
        |a: &&(u32, String, f64), b: &&(u32, String, f64)| a.2.total_cmp(&b.2).then(b.0.cmp(&a.0));
    // A rank is named only when the ranks differ: more than 1 % between the lowest and the highest median.
    let spread = |f: fn(f64, f64) -> f64, init| medians.iter().map(|m| m.2).fold(init, f);
    let several =
        medians.len() > 1 && spread(f64::max, 0.0) > 1.01 * spread(f64::min, f64::INFINITY);
    let slowest = medians.iter().min_by(by_bw).filter(|_| several).cloned();
    let latest = medians.iter().max_by(by_bw).filter(|_| several).cloned();
    let nodes = group.iter().map(|i| i.n_nodes).max().unwrap_or(1);
    let bus = median(&mut all).unwrap_or(0.0);
    let fabric = (nodes > 1)
        .then(|| {
            per_rank
                .values()
                .filter_map(|(_, node)| capacity(node))
                .filter(|c| *c > 0.0)
                .min_by(f64::total_cmp)
        })
        .flatten();
    CollectiveSummary {
        collective,
        size_class,
        size_bytes: median(&mut sizes).unwrap_or(0.0) as u64,
        count: group.len() as u64,
        bytes: group.iter().map(|i| i.size_bytes).sum(),
        time_s,
        bus_bandwidth_bytes_per_second: bus,
        slowest_rank: slowest.as_ref().map(|s| s.0),
        slowest_rank_node: slowest.as_ref().map(|s| s.1.clone()),
        slowest_rank_bus_bandwidth_bytes_per_second: slowest.as_ref().map(|s| s.2),
        latest_rank: latest.as_ref().map(|s| s.0),
        latest_rank_node: latest.as_ref().map(|s| s.1.clone()),
        latest_rank_bus_bandwidth_bytes_per_second: latest.as_ref().map(|s| s.2),
        ranks: group
            .iter()
            .map(|i| i.ranks.len() as u32)
            .max()
            .unwrap_or(0),
        nodes,
        fabric_capacity_bytes_per_second: fabric,
        fabric_share: fabric.map(|c| bus / c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(sn_bw: &[(u32, &str, f64)], size: u64) -> Instance {
        Instance {
            collective: "AllReduce".into(),
            size_bytes: size,
            n_ranks: sn_bw.len() as u32,
            n_nodes: 2,
            first_received_unix_ns: 1,
            ranks: sn_bw
                .iter()
                .map(|(rank, node, bw)| RankFigure {
                    rank: *rank,
                    node: node.to_string(),
                    bus_bandwidth_bytes_per_second: *bw,
                    // AllReduce on 4 ranks: time = size / (busbw / 1.5).
                    exec_time_us: size as f64 / (bw / 1.5) * 1e6,
                    time_unix_ns: None,
                })
                .collect(),
        }
    }

    #[test]
    fn the_management_nic_case_by_the_numbers() {
        let ranks = [
            (0, "a", 9.9e9),
            (1, "a", 9.8e9),
            (2, "b", 9.8e9),
            (3, "b", 9.3e9),
        ];
        let inst: Vec<Instance> = (0..4).map(|_| instance(&ranks, 220_000_000)).collect();
        let cap = |n: &str| (n == "a" || n == "b").then_some(25e9);
        let s = summarize(inst.iter(), &cap);
        assert_eq!(s.len(), 1);
        let s = &s[0];
        assert_eq!(
            (s.size_class, s.size_bytes, s.count, s.ranks, s.nodes),
            ("le_256MiB", 220_000_000, 4, 4, 2)
        );
        assert_eq!(s.bytes, 880_000_000);
        assert!((s.bus_bandwidth_bytes_per_second - 9.8e9).abs() < 1.0);
        assert_eq!(
            (s.slowest_rank, s.slowest_rank_node.as_deref()),
            (Some(3), Some("b"))
        );
        assert_eq!(
            (s.latest_rank, s.latest_rank_node.as_deref()),
            (Some(0), Some("a"))
        );
        assert_eq!(s.fabric_capacity_bytes_per_second, Some(25e9));
        assert!((s.fabric_share.unwrap() - 0.392).abs() < 1e-9);
        // Each instance waits for rank 3: 220 MB at 9.3/1.5 GB/s.
        assert!((s.time_s - 4.0 * 220e6 / (9.3e9 / 1.5)).abs() < 1e-9);
    }

    #[test]
    fn one_rank_has_no_slowest_and_one_node_no_fabric() {
        let mut i = instance(&[(0, "a", 100e9)], 1 << 20);
        i.n_nodes = 1;
        let s = summarize(std::iter::once(&i), &|_| Some(25e9));
        assert_eq!((s[0].slowest_rank, s[0].fabric_share), (None, None));
        assert_eq!(s[0].size_class, "le_1MiB");
    }
}
