//! `transmit_queue_backlog`: a fabric link whose transmit queue holds the job's traffic back on one node while
//! its peers' do not — a shaper or policer set below the fabric's rate, or a port slower than its peers' —
//! the Ethernet counterpart of an HCA's `port_xmit_wait`.
//!
//! A ring (or tree) runs at its slowest link: every node's bytes per step and rate while busy then look alike,
//! and the slow node's own byte and error counters show nothing. Its root qdisc does (the agent's `qdisc`
//! source: the kernel's traffic-control statistics). Two signals, per fabric link, against the median of the
//! job's other nodes' fabric links (at least [`MIN_NODES`] nodes; all nodes when no job is known):
//! - **shaped below its peers**: the link's rate limit — its root qdisc's shaping rate
//!   (`qdisc_rate_limit_bytes_per_second`: a `tbf` root's rate or an `htb` root's top-level classes' ceilings;
//!   its lowest positive reading over the window: a shaper lifted a moment ago still explains the traffic the
//!   window holds, and the other rules' symptoms of it; the summary then says the rate now; 0 = none), else
//!   its capacity — is below
//!   [`LIMIT_BELOW`] × the peers' median, and its shaper held traffic back (`qdisc_overlimits_total` rose by at
//!   least [`MIN_OVERLIMITS`] over the window) while the link carried traffic. A shaper every node has (the
//!   same rate everywhere) is nobody's fault: only the comparison raises;
//! - **queue backing up**: the window mean of its queued bytes (`qdisc_backlog_bytes`, read at the slow tier)
//!   is at least [`MIN_BACKLOG_BYTES`] and [`BACKLOG_RATIO`] × the peers' median mean.
//!
//! Critical on the shaped signal: the job runs at this link's pace. The queue signal alone is info: a queue
//! four times its peers' was seen in a healthy ring under CPU load, and no rate cut on the bed backed its
//! queue up that far, so it names no bottleneck by itself. The shaped signal is raised at first sight
//! (`Candidate::raise_after` = 1: a setting and a counted increase cannot flicker). Evidence: the link's and its peers' rate limits,
//! throttles (overlimits) and drops per second, and mean backlog. The other nodes' slowness (a `straggler` of
//! a lagging rate, `link_underutilized`, the job's scaling) is filed under it (`causes.rs`).

use super::input::{AnalysisInput, LinkInput, NodeInput};
use super::{median, r4, Candidate, Evidence, FindingKind, Severity, Subject};

/// Fewest nodes to compare.
pub const MIN_NODES: usize = 2;
/// A rate limit below this share of the peers' median is the job's bottleneck.
pub const LIMIT_BELOW: f64 = 0.7;
/// Fewest times the shaper held traffic back over the window for it to count as hit.
pub const MIN_OVERLIMITS: u64 = 50;
/// Fewest mean queued bytes over the window for the queue signal (a queue of a few packets is normal).
pub const MIN_BACKLOG_BYTES: f64 = 256.0 * 1024.0;
/// Mean queued bytes at least this many times the peers' median for the queue signal.
pub const BACKLOG_RATIO: f64 = 4.0;

/// The agent's metrics (the `qdisc` source).
pub const RATE_LIMIT: &str = "qdisc_rate_limit_bytes_per_second";
pub const OVERLIMITS: &str = "qdisc_overlimits_total";
pub const DROPS: &str = "qdisc_drops_total";
pub const BACKLOG: &str = "qdisc_backlog_bytes";

/// What one fabric link's queue did over the window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct QueueFigures {
    /// The shaper's lowest rate over the window, else the link's capacity, bytes/s.
    limit: Option<f64>,
    /// Whether `limit` is the shaper's (else the capacity).
    shaped: bool,
    /// The limit now, when the shaper's rate was raised or the shaper removed since (`limit` was lower
    /// earlier in the window).
    lifted_to: Option<f64>,
    /// Seconds of traffic the figures span.
    window_s: f64,
    overlimits: Option<u64>,
    overlimits_per_second: Option<f64>,
    drops_per_second: Option<f64>,
    backlog_mean: Option<f64>,
    /// Bytes the link sent over the window.
    tx_bytes: u64,
}

impl QueueFigures {
    fn of(l: &LinkInput) -> Option<QueueFigures> {
        let overlimits = l.counter(OVERLIMITS);
        let backlog_mean = l.gauge_means.get(BACKLOG).copied();
        // No qdisc series: an agent without the source, or not a netdev.
        if overlimits.is_none() && backlog_mean.is_none() {
            return None;
        }
        let capacity = l.link.capacity_bytes_per_second;
        let latest = l.gauges.get(RATE_LIMIT).copied().filter(|r| *r > 0.0);
        // The window's lowest rate: a shaper lifted a moment ago still explains the traffic the window holds
        // (and the other rules' window-long symptoms of it).
        let shaper = l.gauge_lows.get(RATE_LIMIT).copied().or(latest);
        let now = latest.or(capacity);
        Some(QueueFigures {
            limit: shaper.or(capacity),
            shaped: shaper.is_some(),
            lifted_to: shaper
                .zip(now)
                .and_then(|(low, now)| (now > low * 1.01).then_some(now)),
            window_s: l.activity.as_ref().map_or(0.0, |a| a.window_s),
            overlimits: overlimits.map(|c| c.increase),
            overlimits_per_second: overlimits.and_then(|c| c.rate()),
            drops_per_second: l.counter(DROPS).and_then(|c| c.rate()),
            backlog_mean,
            tx_bytes: l.activity.as_ref().map_or(0, |a| a.tx_bytes),
        })
    }
}

/// Each fabric link of `n` with queue figures.
fn fabric_queues(n: &NodeInput) -> impl Iterator<Item = (&LinkInput, QueueFigures)> {
    n.fabric_links()
        .filter(|l| l.link.is_interface())
        .filter_map(|l| QueueFigures::of(l).map(|q| (l, q)))
}

/// The median over `peers`' fabric links of `f`.
fn peers_median(peers: &[&NodeInput], f: impl Fn(&QueueFigures) -> Option<f64>) -> Option<f64> {
    let mut v: Vec<f64> = peers
        .iter()
        .flat_map(|p| fabric_queues(p).filter_map(|(_, q)| f(&q)))
        .collect();
    median(&mut v)
}

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (job, nodes) in super::straggler::groups(input) {
        if nodes.len() < MIN_NODES {
            continue;
        }
        for n in &nodes {
            let peers: Vec<&NodeInput> =
                nodes.iter().filter(|p| p.name != n.name).copied().collect();
            for (l, q) in fabric_queues(n) {
                if let Some(mut c) = judge(n, l, &q, &peers) {
                    // The job is evidence, not part of the subject: a link's finding keeps its id when the
                    // job becomes known mid-fault (as `link_degraded`'s and `link_errors`' do).
                    if let Some(j) = &job {
                        c.evidence = std::mem::take(&mut c.evidence).detail("job", j.as_str());
                    }
                    out.push(c);
                }
            }
        }
    }
    out
}

/// The peers' medians a link is compared with.
#[derive(Debug, Clone, Copy)]
struct Peers {
    limit: Option<f64>,
    overlimits_per_second: Option<f64>,
    drops_per_second: Option<f64>,
    backlog_mean: Option<f64>,
    nodes: usize,
}

/// The finding on link `l` of node `n`, if either signal holds.
fn judge(
    n: &NodeInput,
    l: &LinkInput,
    q: &QueueFigures,
    peers: &[&NodeInput],
) -> Option<Candidate> {
    if q.tx_bytes == 0 {
        return None;
    }
    let p = Peers {
        limit: peers_median(peers, |x| x.limit),
        overlimits_per_second: peers_median(peers, |x| x.overlimits_per_second),
        drops_per_second: peers_median(peers, |x| x.drops_per_second),
        backlog_mean: peers_median(peers, |x| x.backlog_mean),
        nodes: peers.len(),
    };
    let shaped_low = match (q.limit, p.limit) {
        (Some(mine), Some(theirs)) => {
            mine < LIMIT_BELOW * theirs && q.overlimits.is_some_and(|o| o >= MIN_OVERLIMITS)
        }
        _ => false,
    };
    let backed_up = q.backlog_mean.is_some_and(|b| {
        b >= MIN_BACKLOG_BYTES && p.backlog_mean.is_some_and(|m| b >= BACKLOG_RATIO * m)
    });
    if !shaped_low && !backed_up {
        return None;
    }
    let signal = if shaped_low {
        "shaped_below_peers"
    } else {
        "queue_backlog"
    };
    // A queue longer than its peers' alone is a hint, not a named bottleneck: on the bed a node's queue read
    // 4.4× its peers' (267 kB) in a healthy ring under CPU load, and a real rate cut's 1.1–3× (REALITY.md).
    let severity = if shaped_low {
        Severity::Critical
    } else {
        Severity::Info
    };
    let mut c = Candidate::new(
        FindingKind::TransmitQueueBacklog,
        severity,
        Subject::link(&n.name, &l.link),
    );
    if shaped_low {
        // A shaper's rate is a setting read from the kernel, and its hits are counted over the window: the
        // evidence cannot flicker, so no streak of evaluations is waited for.
        c.raise_after = 1;
    }
    let dev = &l.link.key.device;
    c.summary = summary(&n.name, dev, q, &p, shaped_low);
    c.action = format!(
        "On {node}, look at {dev}'s transmit queue (tc -s qdisc show dev {dev}): a shaper or policer below the \
         fabric's rate (tbf, htb, a QoS policy) — remove it or give it the other nodes' rate — or a port that \
         runs slower than its peers' (ethtool {dev}: speed, pause frames). The other nodes of the job wait on \
         this link; their slowness follows from it.",
        node = n.name
    )
.into();
    let mut e = Evidence::new(r4(q.limit.unwrap_or(0.0)), "bytes_per_second")
        .detail("signal", signal)
        .detail("interface", dev.as_str())
        .detail("limit_from", if q.shaped { "qdisc" } else { "capacity" })
        .detail("peer_nodes", p.nodes as u64);
    if let Some(m) = p.limit {
        e = e.expected(r4(m));
    }
    for (k, v) in [
        ("overlimits_per_second", q.overlimits_per_second),
        ("peers_overlimits_per_second", p.overlimits_per_second),
        ("rate_limit_now_bytes_per_second", q.lifted_to),
        ("drops_per_second", q.drops_per_second),
        ("peers_drops_per_second", p.drops_per_second),
        ("backlog_bytes_mean", q.backlog_mean),
        ("peers_backlog_bytes_mean", p.backlog_mean),
    ] {
        if let Some(v) = v {
            e = e.detail(k, r4(v));
        }
    }
    c.evidence = e;
    Some(c)
}

/// `v` bytes/s as the unit link rates and shapers are set in: `2.0 Gbit/s`, `500 Mbit/s`.
fn bits(v: f64) -> String {
    let b = v * 8.0;
    if b >= 1e9 {
        format!("{:.1} Gbit/s", b / 1e9)
    } else {
        format!("{:.0} Mbit/s", b / 1e6)
    }
}

/// The operator's sentence: what the link is limited to, against what, and what its queue did.
fn summary(node: &str, dev: &str, q: &QueueFigures, p: &Peers, shaped_low: bool) -> String {
    let per_s = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0}/s"));
    let kb = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{:.0} kB", v / 1e3));
    let queue = format!(
        "its queue held traffic back {} (peers {}), {} queued on average (peers {}), drops {} (peers {})",
        per_s(q.overlimits_per_second),
        per_s(p.overlimits_per_second),
        kb(q.backlog_mean),
        kb(p.backlog_mean),
        per_s(q.drops_per_second),
        per_s(p.drops_per_second),
    );
    match (shaped_low, q.limit, p.limit) {
        (true, Some(mine), Some(theirs)) => {
            let (what, now) = match (q.shaped, q.lifted_to) {
                (true, Some(now)) => (
                    format!("its transmit queue was shaped during the last {:.0} s", q.window_s),
                    format!("; {} now", bits(now)),
                ),
                (true, None) => ("its transmit queue is shaped".to_string(), String::new()),
                (false, _) => ("it runs".to_string(), String::new()),
            };
            format!(
                "Fabric link rate-limited on {node} {dev}: {what} to {} ({:.0}% of its peers' {}{now}); \
                 {queue}. The job's ring runs at this link's pace.",
                bits(mine),
                mine / theirs * 100.0,
                bits(theirs),
            )
        }
        _ => format!(
            "Transmit queue backing up on {node} {dev}: {queue}. The job's ring runs at this link's pace."
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use commwatch_model::{LinkClass, LinkRole};

    use super::*;
    use crate::analysis::activity::Activity;
    use crate::analysis::link_errors::tests::counter;

    /// What one node's `fab0` did over a 20 s window.
    #[derive(Clone, Copy)]
    struct Fab {
        /// The root qdisc's shaping rate, bytes/s (0: none).
        rate_limit: f64,
        overlimits: u64,
        drops: u64,
        backlog_mean: f64,
        tx_bytes: u64,
    }

    /// The bed's healthy fabric: shaped to 2 Gbit/s on every node, hit by every node's bursts.
    const HEALTHY: Fab = Fab {
        rate_limit: 250e6,
        overlimits: 22_000,
        drops: 0,
        backlog_mean: 15_000.0,
        tx_bytes: 600_000_000,
    };

    fn node(name: &str, f: Fab) -> NodeInput {
        let mut l = LinkInput::new(LinkClass::Ethernet, "fab0", "fab0", LinkRole::Fabric);
        Arc::make_mut(&mut l.link).capacity_bytes_per_second = Some(250e6);
        l.activity = Some(Activity {
            window_s: 20.0,
            sample_period_s: 0.05,
            tx_bytes: f.tx_bytes,
            rx_bytes: f.tx_bytes,
            busy_s: 5.0,
            bursts: Vec::new(),
            burst_rate_bytes_per_second: None,
            period_s: None,
            period_cv: None,
            bytes_per_burst: None,
            resolved: true,
            peaks: Default::default(),
        });
        l.counters = vec![
            counter(OVERLIMITS, f.overlimits, 20.0),
            counter(DROPS, f.drops, 20.0),
        ];
        l.gauges.insert(RATE_LIMIT.into(), f.rate_limit);
        if f.rate_limit > 0.0 {
            l.gauge_lows.insert(RATE_LIMIT.into(), f.rate_limit);
        }
        l.gauge_means.insert(BACKLOG.into(), f.backlog_mean);
        NodeInput {
            name: name.into(),
            links: vec![l],
            ..NodeInput::default()
        }
    }

    /// Four nodes, `node2`'s fabric as `f`, the others healthy.
    fn ring(f: Fab) -> AnalysisInput {
        AnalysisInput {
            nodes: (0..4)
                .map(|k| node(&format!("node{k}"), if k == 2 { f } else { HEALTHY }))
                .collect(),
            ..AnalysisInput::default()
        }
    }

    #[test]
    fn a_link_shaped_to_a_quarter_of_its_peers_is_the_root_on_its_node() {
        let cut = Fab {
            rate_limit: 62.5e6,
            overlimits: 28_000,
            drops: 40,
            backlog_mean: 97_000.0,
            ..HEALTHY
        };
        let c = evaluate(&ring(cut));
        assert_eq!(c.len(), 1, "{c:?}");
        let c = &c[0];
        assert_eq!(c.kind, FindingKind::TransmitQueueBacklog);
        assert_eq!(c.severity, Severity::Critical);
        assert_eq!(
            (c.subject.node.as_str(), c.subject.interface.as_deref()),
            ("node2", Some("fab0"))
        );
        assert_eq!(c.evidence.measured, 62.5e6);
        assert_eq!(c.evidence.expected, Some(250e6));
        let d = &c.evidence.details;
        assert_eq!(d["signal"], "shaped_below_peers");
        assert_eq!(d["limit_from"], "qdisc");
        assert_eq!(d["overlimits_per_second"], 1400.0);
        assert_eq!(d["peers_overlimits_per_second"], 1100.0);
        assert_eq!(d["drops_per_second"], 2.0);
        assert_eq!(d["peers_backlog_bytes_mean"], 15_000.0);
        assert_eq!(
            c.summary,
            "Fabric link rate-limited on node2 fab0: its transmit queue is shaped to 500 Mbit/s (25% of its \
             peers' 2.0 Gbit/s); its queue held traffic back 1400/s (peers 1100/s), 97 kB queued on average \
             (peers 15 kB), drops 2/s (peers 0/s). The job's ring runs at this link's pace."
        );
        assert!(
            c.action.contains("tc -s qdisc show dev fab0"),
            "{}",
            c.action
        );
        assert_eq!(c.raise_after, 1);
    }

    #[test]
    fn the_job_is_evidence_so_the_id_holds_when_the_job_becomes_known() {
        use crate::analysis::input::{JobInput, RankInput};
        let cut = Fab {
            rate_limit: 62.5e6,
            ..HEALTHY
        };
        let before = evaluate(&ring(cut));
        let mut input = ring(cut);
        input.jobs = vec![JobInput {
            id: "main".into(),
            ranks: (0..4)
                .map(|k| RankInput {
                    node: format!("node{k}"),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }];
        let after = evaluate(&input);
        assert_eq!(before[0].id(), after[0].id());
        assert_eq!(after[0].subject.job, None);
        assert_eq!(after[0].evidence.details["job"], "main");
    }

    #[test]
    fn a_shaper_lifted_a_moment_ago_still_explains_the_window() {
        let cut = Fab {
            rate_limit: 62.5e6,
            ..HEALTHY
        };
        let mut input = ring(cut);
        // Back at the peers' rate now; the window still holds the readings at a quarter.
        input.nodes[2].links[0]
            .gauges
            .insert(RATE_LIMIT.into(), 250e6);
        let c = evaluate(&input);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].evidence.measured, 62.5e6);
        assert_eq!(
            c[0].evidence.details["rate_limit_now_bytes_per_second"],
            250e6
        );
        assert!(
            c[0].summary.starts_with(
                "Fabric link rate-limited on node2 fab0: its transmit queue was shaped during the last 20 s \
                 to 500 Mbit/s (25% of its peers' 2.0 Gbit/s; 2.0 Gbit/s now); "
            ),
            "{}",
            c[0].summary
        );
        // Once the window no longer holds the low rate, nothing.
        input.nodes[2].links[0].gauge_lows.clear();
        assert!(evaluate(&input).is_empty());
    }

    #[test]
    fn the_same_shaper_on_every_node_is_nobody_s_fault() {
        assert!(evaluate(&ring(HEALTHY)).is_empty());
        // Every node cut alike: still no single node to blame.
        let cut = Fab {
            rate_limit: 62.5e6,
            ..HEALTHY
        };
        let all = AnalysisInput {
            nodes: (0..4).map(|k| node(&format!("node{k}"), cut)).collect(),
            ..AnalysisInput::default()
        };
        assert!(evaluate(&all).is_empty());
    }

    #[test]
    fn a_low_shaper_the_traffic_never_meets_or_an_idle_link_raises_nothing() {
        let untouched = Fab {
            rate_limit: 62.5e6,
            overlimits: MIN_OVERLIMITS - 1,
            ..HEALTHY
        };
        assert!(evaluate(&ring(untouched)).is_empty());
        let idle = Fab {
            rate_limit: 62.5e6,
            tx_bytes: 0,
            ..HEALTHY
        };
        assert!(evaluate(&ring(idle)).is_empty());
        // Within 70 % of the peers' rate: not the bottleneck this rule names.
        let near = Fab {
            rate_limit: 200e6,
            ..HEALTHY
        };
        assert!(evaluate(&ring(near)).is_empty());
    }

    #[test]
    fn a_queue_backed_up_far_above_its_peers_is_found_without_a_shaper() {
        let unshaped = Fab {
            rate_limit: 0.0,
            ..HEALTHY
        };
        let slow_port = Fab {
            backlog_mean: 400_000.0,
            ..unshaped
        };
        let mut input = AnalysisInput {
            nodes: (0..4)
                .map(|k| {
                    node(
                        &format!("node{k}"),
                        if k == 1 { slow_port } else { unshaped },
                    )
                })
                .collect(),
            ..AnalysisInput::default()
        };
        let c = evaluate(&input);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].subject.node, "node1");
        assert_eq!(c[0].evidence.details["signal"], "queue_backlog");
        assert_eq!(c[0].evidence.details["limit_from"], "capacity");
        assert_eq!(
            c[0].severity,
            Severity::Info,
            "a queue alone names no bottleneck"
        );
        assert!(
            c[0].summary
                .starts_with("Transmit queue backing up on node1 fab0: "),
            "{}",
            c[0].summary
        );
        // A smaller backlog, or one the peers share, is not a finding.
        input.nodes[1].links[0]
            .gauge_means
            .insert(BACKLOG.into(), MIN_BACKLOG_BYTES - 1.0);
        assert!(evaluate(&input).is_empty());
        for n in &mut input.nodes {
            n.links[0].gauge_means.insert(BACKLOG.into(), 400_000.0);
        }
        assert!(evaluate(&input).is_empty());
    }

    #[test]
    fn one_node_or_links_without_queue_series_raise_nothing() {
        let cut = Fab {
            rate_limit: 62.5e6,
            ..HEALTHY
        };
        let alone = AnalysisInput {
            nodes: vec![node("node2", cut)],
            ..AnalysisInput::default()
        };
        assert!(evaluate(&alone).is_empty());
        // Peers whose agents have no qdisc source: nothing to compare with.
        let mut input = ring(cut);
        for n in input.nodes.iter_mut().filter(|n| n.name != "node2") {
            n.links[0].counters.clear();
            n.links[0].gauges.clear();
            n.links[0].gauge_means.clear();
        }
        assert!(evaluate(&input).is_empty());
    }

    #[test]
    fn the_ring_s_slowness_is_filed_under_it() {
        let cut = Fab {
            rate_limit: 62.5e6,
            ..HEALTHY
        };
        let input = ring(cut);
        let mut cands = evaluate(&input);
        let straggler = |node: &str, signal: &str| {
            let mut c = Candidate::new(
                FindingKind::Straggler,
                Severity::Warning,
                Subject::node(node),
            );
            c.evidence = Evidence::new(0.6, "ratio").detail("signal", signal);
            c
        };
        cands.push(straggler("node2", "fabric_rate"));
        cands.push(straggler("node3", "fabric_rate"));
        cands.push(straggler("node2", "cpu_throttled"));
        super::super::causes::link_causes(&input, &mut cands);
        let root = cands[0].id();
        assert_eq!(cands[1].caused_by.as_deref(), Some(root.as_str()));
        assert_eq!(cands[2].caused_by.as_deref(), Some(root.as_str()));
        // A CPU-limited rank on the same node is a cause of its own.
        assert_eq!(cands[3].caused_by, None);
        assert_eq!(cands[0].consequences.len(), 2);
    }
}
