//! Shared by the collector's benches (`mod common;` in each): environment knobs, clocks, process figures, and a
//! simulated node's `Hello` — InfiniBand links of ten counters each, like a real HCA port's.
#![allow(dead_code)] // each bench uses a part

use std::time::{SystemTime, UNIX_EPOCH};

use commwatch_proto::v1 as pb;

/// Counter names of a simulated link, in series-id order (ten per link).
pub const METRICS: [&str; 10] = [
    "tx_bytes",
    "rx_bytes",
    "tx_packets",
    "rx_packets",
    "symbol_errors",
    "link_downed",
    "port_xmit_wait",
    "port_rcv_errors",
    "np_cnp_sent",
    "rx_dropped",
];

/// `name` from the environment as a number, else `default`.
pub fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Now, ns since the Unix epoch.
pub fn unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Resident set size of this process, bytes.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// User + system CPU seconds in a `/proc/…/stat` line (fields 14 and 15).
pub fn stat_cpu_s(stat: &str) -> f64 {
    let Some(close) = stat.rfind(')') else {
        return 0.0;
    };
    let mut f = stat[close + 1..].split_whitespace().skip(11);
    let u: u64 = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    let s: u64 = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    (u + s) as f64 / 100.0
}

/// A simulated node: `fast` counters on tier 1 then `slow` on tier 2 (ids from 1, ten per InfiniBand link,
/// names from [`METRICS`] in turn) and, with `gauge`, a `cpu_utilization_ratio` gauge of that id.
pub fn node_hello(
    node: String,
    agent_version: &str,
    fast: u32,
    slow: u32,
    gauge: Option<u32>,
) -> pb::Hello {
    let series = fast + slow;
    let links = series.div_ceil(10);
    let mut descriptors: Vec<pb::SeriesDescriptor> = (1..=series)
        .map(|id| pb::SeriesDescriptor {
            id,
            metric: METRICS[(id as usize - 1) % 10].into(),
            kind: pb::SeriesKind::Counter as i32,
            link_id: (id - 1) / 10 + 1,
            tier: if id <= fast { 1 } else { 2 },
            ..Default::default()
        })
        .collect();
    if let Some(id) = gauge {
        descriptors.push(pb::SeriesDescriptor {
            id,
            metric: "cpu_utilization_ratio".into(),
            kind: pb::SeriesKind::Gauge as i32,
            link_id: 0,
            tier: 1,
            ..Default::default()
        });
    }
    pb::Hello {
        node,
        agent_version: agent_version.into(),
        boot_id: "b".into(),
        instance_id: 1,
        inventory: Some(pb::Inventory {
            links: (1..=links)
                .map(|id| pb::Link {
                    id,
                    class: pb::LinkClass::Infiniband as i32,
                    role: pb::LinkRole::Fabric as i32,
                    device: format!("mlx5_{id}"),
                    port: "1".into(),
                    capacity_bytes_per_second: 50e9,
                    state: "ACTIVE".into(),
                    ..Default::default()
                })
                .collect(),
            series: descriptors,
        }),
        fast_period_ms: 50,
        slow_period_ms: 1000,
        blind: Vec::new(),
    }
}
