//! `management_network_traffic`: step-periodic training traffic on a management NIC — the classic case
//! (`NCCL_SOCKET_IFNAME` not bound to the fabric, NCCL falls back to sockets over the front-end network).
//!
//! A management NIC also carries storage reads, checkpoint writes and image pulls, in chunks that can look
//! periodic over a window. Training traffic differs in three ways, all required:
//! - **its own level**: the NIC's bursts at its own level ([`super::activity::Activity::peaks`], so that a
//!   lower storage load underneath does not merge them) — at least [`MIN_BURSTS`] complete ones of at least
//!   [`MIN_BURST_BYTES`], regularly spaced (coefficient of variation at most [`MAX_PERIOD_CV`]) and of one
//!   size (at most [`MAX_BYTES_CV`]): each step moves the same gradients;
//! - **the job's step period**: their spacing within [`PERIOD_MATCH`] of the step period of the node's job
//!   (its nodes' steps, else their fabric ports' burst period). A node that runs no job while jobs are known
//!   carries no training traffic. Without a step period anywhere in the job, the bursts must match another
//!   node's NIC bursts of the job (a ring moves the same bytes on every node at once);
//! - **the node's fabric**: either it carries nothing while the NIC bursts (NCCL left the fabric), or at
//!   least [`COINCIDE_SHARE`] of the NIC's bursts coincide with the node's fabric bursts (NCCL splits the
//!   step's traffic between them).
//!
//! Severity critical: the whole ring runs at this NIC's pace. When the job's settings on the node explain
//! it (`NCCL_SOCKET_IFNAME` naming the interface, `NCCL_IB_DISABLE=1`, `NCCL_NET=Socket`, or the agent's
//! conflict report), the summary says so and the action names the fix.
//!
//! **Who causes it, from traffic alone.** One node bound to its management network moves its ring
//! neighbours' traffic too: a peer sending to that node's management address sends on its own management NIC,
//! and the node's replies reach a peer's management NIC. The direction of the NIC's bytes over the node's
//! steps ([`Direction`]) tells them apart: the node whose NIC both sends and receives the step's traffic is
//! the cause (its setting or route); where none does, the node whose NIC receives it (peers address it
//! there). The others of the job are its neighbours (`ring_role` `neighbour`): still critical on the wire,
//! and filed under the cause (`super::causes`). Without steps the direction is unknown and the NIC is its own
//! cause, as before.

use commwatch_model::nccl::{self, NcclList};
use commwatch_model::{ConflictKind, FabricData, LinkClass, LinkRole};

use super::activity::{Activity, Burst};
use super::input::{AnalysisInput, LinkInput, NodeInput};
use super::scaling::step_time;
use super::straggler::groups;
use super::{gbs, median, r4, Candidate, Evidence, FindingKind, Severity, Subject};

/// Complete bursts needed in the window.
pub const MIN_BURSTS: usize = 4;
/// Bytes per burst that count as training traffic (10 MB).
pub const MIN_BURST_BYTES: f64 = 10e6;
/// Most irregular burst spacing still called step-periodic.
pub const MAX_PERIOD_CV: f64 = 0.25;
/// Most irregular burst size still called one step's traffic.
pub const MAX_BYTES_CV: f64 = 0.25;
/// How far the bursts' spacing may stray from the job's step period (share of the period).
pub const PERIOD_MATCH: f64 = 0.15;
/// Share of the NIC's bursts that must coincide with the node's fabric bursts when the fabric is busy.
pub const COINCIDE_SHARE: f64 = 0.8;
/// The smaller direction's share of the larger above which a NIC both sends and receives the step's traffic
/// (TCP's acknowledgements alone are a few per cent).
pub const BOTH_WAYS_SHARE: f64 = 0.25;

/// Which way a management NIC moved the training traffic over the node's steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Both,
    Sends,
    Receives,
    /// No step of the node covers the NIC: the direction is not known.
    Unknown,
}

impl Direction {
    /// From the bytes sent and received over the node's steps.
    pub fn of(tx: u64, rx: u64) -> Direction {
        let (lo, hi) = (tx.min(rx) as f64, tx.max(rx) as f64);
        if hi <= 0.0 {
            Direction::Unknown
        } else if lo >= BOTH_WAYS_SHARE * hi {
            Direction::Both
        } else if tx > rx {
            Direction::Sends
        } else {
            Direction::Receives
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Direction::Both => "sends and receives",
            Direction::Sends => "sends",
            Direction::Receives => "receives",
            Direction::Unknown => "carries",
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Direction::Both => "both",
            Direction::Sends => "sends",
            Direction::Receives => "receives",
            Direction::Unknown => "unknown",
        }
    }
}

/// Bytes the management link `l` sent and received over the node's steps, as [`Direction`].
fn direction(n: &NodeInput, l: &LinkInput) -> Direction {
    let (tx, rx) = n
        .steps
        .iter()
        .filter_map(|s| s.links.iter().find(|x| x.key == l.link.key))
        .fold((0u64, 0u64), |(t, r), x| {
            (t.saturating_add(x.tx_bytes), r.saturating_add(x.rx_bytes))
        });
    Direction::of(tx, rx)
}

/// Whether a NIC moving the job's traffic `dir` is its cause, among the job's NICs moving it `all` (see the
/// module documentation).
fn is_cause(dir: Direction, all: &[Direction]) -> bool {
    match dir {
        Direction::Unknown | Direction::Both => true,
        _ if all.contains(&Direction::Both) => false,
        Direction::Receives => true,
        Direction::Sends => !all.contains(&Direction::Receives),
    }
}

/// The NIC's traffic, when it is training traffic: its bursts at its own level and what they match.
struct Training<'a> {
    activity: &'a Activity,
    /// Complete bursts of at least [`MIN_BURST_BYTES`].
    big: usize,
    /// The job's step period the bursts match (`None`: matched another node's NIC instead).
    step_period_s: Option<f64>,
    /// Whether the node's fabric carried nothing during the bursts.
    fabric_idle: bool,
}

/// Whether two bursts overlap in time.
fn overlap(a: &Burst, b: &Burst) -> bool {
    a.start_unix_ns < b.end_unix_ns && b.start_unix_ns < a.end_unix_ns
}

/// Whether `period` is within [`PERIOD_MATCH`] of `reference`.
fn same_period(period: f64, reference: f64) -> bool {
    reference > 0.0 && (period - reference).abs() <= PERIOD_MATCH * reference
}

/// The management link's activity when it is training traffic (see the module documentation); `nodes` are
/// the nodes of `n`'s job.
fn training<'a>(n: &NodeInput, nodes: &[&NodeInput], l: &'a LinkInput) -> Option<Training<'a>> {
    let a = l.activity.as_ref()?;
    let p = &a.peaks;
    let big = p
        .complete()
        .filter(|b| b.bytes as f64 >= MIN_BURST_BYTES)
        .count();
    let regular = p.period_cv.is_some_and(|cv| cv <= MAX_PERIOD_CV)
        && p.bytes_cv.is_some_and(|cv| cv <= MAX_BYTES_CV);
    let period = p.period_s?;
    if big < MIN_BURSTS || !regular {
        return None;
    }
    let fabric: Vec<&Burst> = n
        .fabric_links()
        .filter_map(|x| x.activity.as_ref())
        .flat_map(|x| x.bursts.iter())
        // Background (a few small bursts on ports NCCL left) is not the fabric carrying the step.
        .filter(|b| b.bytes as f64 >= MIN_BURST_BYTES)
        .collect();
    let nic: Vec<&Burst> = p.complete().collect();
    let coinciding = nic
        .iter()
        .filter(|b| fabric.iter().any(|f| overlap(b, f)))
        .count();
    let fabric_idle = coinciding == 0;
    if !fabric_idle && (coinciding as f64) < COINCIDE_SHARE * nic.len() as f64 {
        return None;
    }
    let step_period_s = step_time(nodes).0;
    let matched = match step_period_s {
        Some(step) => same_period(period, step),
        // No step period in the job: another node's NIC must burst alike, and this node's fabric be idle.
        None => {
            fabric_idle
                && nodes.iter().filter(|m| m.name != n.name).any(|m| {
                    m.links
                        .iter()
                        .filter(|x| x.link.role == LinkRole::Management)
                        .filter_map(|x| x.activity.as_ref()?.peaks.period_s)
                        .any(|q| same_period(q, period))
                })
        }
    };
    matched.then_some(Training {
        activity: a,
        big,
        step_period_s,
        fabric_idle,
    })
}

/// What explains the traffic, from the job's settings on the node: `(setting=value, why)`.
fn explanation(input: &AnalysisInput, node: &str, interface: &str) -> Option<(String, String)> {
    let job = input.job_of(node)?;
    let mut on_node = job
        .conflicts
        .iter()
        .filter(|fc| fc.node == node)
        .map(|fc| &fc.conflict);
    if let Some(c) = on_node.find(|c| {
        matches!(
            c.kind,
            ConflictKind::ManagementInterface | ConflictKind::IbDisabled
        )
    }) {
        return Some((format!("{}={}", c.setting, c.value), c.reason.clone()));
    }
    if let Some(v) = job.nccl_on(node, nccl::IB_DISABLE) {
        if v.trim() == "1" {
            return Some((
                format!("{}={v}", nccl::IB_DISABLE),
                "InfiniBand is disabled for NCCL, so it uses sockets".into(),
            ));
        }
    }
    if let Some(v) = job.nccl_on(node, nccl::NET) {
        if v.trim().eq_ignore_ascii_case("socket") {
            return Some((
                format!("{}={v}", nccl::NET),
                "NCCL is forced onto its socket transport".into(),
            ));
        }
    }
    if let Some(v) = job.nccl_on(node, nccl::SOCKET_IFNAME) {
        if NcclList::parse(v).selects(interface, None) {
            return Some((
                format!("{}={v}", nccl::SOCKET_IFNAME),
                format!("it selects the management interface {interface}"),
            ));
        }
    }
    None
}

/// The node's fabric interface to name in the fix: an IPoIB netdev (`ib*`), else its first fabric network
/// interface.
fn fabric_interface(n: &NodeInput) -> Option<String> {
    let fabric_if = |l: &&LinkInput| {
        l.link.role == LinkRole::Fabric
            && l.link.key.class != LinkClass::Nvlink
            && l.link.is_interface()
    };
    n.links
        .iter()
        .filter(fabric_if)
        .find(|l| l.link.key.device.starts_with("ib"))
        .or_else(|| n.links.iter().find(fabric_if))
        .map(|l| l.link.key.device.clone())
}

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    let mut out = Vec::new();
    // Every job's nodes (all nodes when no job is known); a node in none runs no training traffic.
    for (_, nodes) in groups(input) {
        let mut found = Vec::new();
        for n in &nodes {
            for l in n
                .links
                .iter()
                .filter(|l| l.link.role == LinkRole::Management)
            {
                if let Some(t) = training(n, &nodes, l) {
                    found.push((*n, l, t, direction(n, l)));
                }
            }
        }
        let all: Vec<Direction> = found.iter().map(|f| f.3).collect();
        for (n, l, t, dir) in &found {
            let cause = is_cause(*dir, &all);
            out.push(candidate(input, n, &nodes, l, t, (*dir, cause)));
        }
    }
    out
}

/// The finding for training traffic `t` on management link `l` of node `n`, whose job runs on `nodes`.
fn candidate(
    input: &AnalysisInput,
    n: &NodeInput,
    nodes: &[&NodeInput],
    l: &LinkInput,
    t: &Training,
    (dir, cause): (Direction, bool),
) -> Candidate {
    let (a, p) = (t.activity, &t.activity.peaks);
    let per_burst = p.bytes_per_burst.unwrap_or(0.0);
    let period = p.period_s.unwrap_or(0.0);
    let rate = p
        .rate_bytes_per_second
        .unwrap_or(per_burst / a.sample_period_s.max(1e-9));
    // What one fabric port of the node could carry, and what the job's other nodes' fabric achieves.
    let mut caps: Vec<f64> = n
        .fabric_links()
        .filter_map(|x| x.link.capacity_bytes_per_second)
        .collect();
    let fabric_ports = caps.len();
    let port_capacity = median(&mut caps);
    let mut peers: Vec<f64> = nodes
        .iter()
        .filter(|m| m.name != n.name)
        .flat_map(|m| m.fabric_links())
        .filter_map(|x| x.activity.as_ref()?.burst_rate_bytes_per_second)
        .collect();
    let peer_rate = median(&mut peers);
    let why = explanation(input, &n.name, &l.link.key.device);
    let mut c = Candidate::new(
        FindingKind::ManagementNetworkTraffic,
        Severity::Critical,
        Subject::link(&n.name, &l.link),
    );
    if let Some(j) = input.job_of(&n.name) {
        c.subject.job = Some(j.id.clone());
    }
    let fd = n.fabric_data();
    let mut s = format!(
        "{} {} training traffic over management NIC {}: {:.2} GB per step at {} every {:.3} s ({} steps)",
        n.name,
        dir.verb(),
        l.link.key.device,
        per_burst / 1e9,
        gbs(rate),
        period,
        t.big
    );
    if let Some(cap) = port_capacity {
        let noun = match fd {
            FabricData::RdmaPorts => "InfiniBand port(s)",
            FabricData::Interfaces => "fabric interface(s)",
        };
        s.push_str(&format!(
            " instead of its {fabric_ports} {noun} of {} each",
            gbs(cap)
        ));
    }
    if let Some(p) = peer_rate {
        let noun = match fd {
            FabricData::RdmaPorts => "InfiniBand",
            FabricData::Interfaces => "fabric",
        };
        s.push_str(&format!(
            "; the other nodes' {noun} achieves only {} during communication",
            gbs(p)
        ));
    }
    match &why {
        Some((setting, reason)) => s.push_str(&format!("; explained by {setting}: {reason}.")),
        None if !cause => s.push_str(
            "; a ring neighbour of a node whose training traffic uses its management network: the fix is there.",
        ),
        None => s.push('.'),
    }
    c.summary = s;
    c.action = if cause || why.is_some() {
        action(n, fd, why.as_ref().map(|w| w.0.as_str()))
    } else {
        format!(
            "Nothing to change on {}: fix the node this finding is filed under (caused_by), whose job traffic uses its management network; this NIC's traffic stops with it.",
            n.name
        )
    };
    let mut e = Evidence::new(r4(rate), "bytes_per_second")
        .steps(t.big)
        .seconds(r4(a.window_s))
        .detail("bytes_per_step", r4(per_burst))
        .detail("step_period_s", r4(period))
        .detail("period_cv", r4(p.period_cv.unwrap_or(0.0)))
        .detail("bytes_cv", r4(p.bytes_cv.unwrap_or(0.0)))
        .detail("busy_share", r4(a.busy_share()))
        .detail("fabric_idle", t.fabric_idle)
        .detail("direction", dir.as_str())
        .detail(RING_ROLE, if cause { CAUSE } else { NEIGHBOUR });
    if let Some(step) = t.step_period_s {
        e = e.detail("job_step_period_s", r4(step));
    }
    if let Some(cap) = port_capacity {
        e = e.expected(cap).detail("fabric_ports", fabric_ports as u64);
    }
    if let Some(p) = peer_rate {
        e = e.detail("peer_fabric_bytes_per_second", r4(p));
    }
    if let Some((setting, _)) = &why {
        e = e.detail("explained_by", setting.clone());
    }
    c.evidence = e;
    c
}

/// The evidence detail that says whether the NIC's node causes the traffic ([`CAUSE`]) or is a ring
/// [`NEIGHBOUR`] of one that does.
pub const RING_ROLE: &str = "ring_role";
pub const CAUSE: &str = "cause";
pub const NEIGHBOUR: &str = "neighbour";

/// What to do on node `n`, given the setting that explains the traffic (if any).
fn action(n: &NodeInput, fd: FabricData, setting: Option<&str>) -> String {
    let fabric_if = fabric_interface(n).unwrap_or_else(|| "the fabric interface".into());
    if fd == FabricData::Interfaces && setting.is_none() {
        return format!(
            "Bind the job's sockets on {} to {fabric_if} (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME or the MPI transport's interface list), and check that the address its ranks publish (host name, rendezvous address) and its routes are on the fabric, not the management network; restart the job.",
            n.name
        );
    }
    match setting {
        Some(setting) if setting.starts_with(nccl::SOCKET_IFNAME) => format!(
            "Set NCCL_SOCKET_IFNAME={fabric_if} (or unset it) for the job's ranks on {} instead of {setting}, keep NCCL_IB_DISABLE unset, and restart the job; verify with NCCL_DEBUG=INFO that NCCL uses NET/IB.",
            n.name
        ),
        Some(setting) => format!(
            "Remove {setting} from the job's environment on {} so NCCL uses InfiniBand (NET/IB), set NCCL_SOCKET_IFNAME={fabric_if}, and restart the job.",
            n.name
        ),
        None => format!(
            "Check the job's NCCL_SOCKET_IFNAME, NCCL_IB_HCA and NCCL_IB_DISABLE on {} and the InfiniBand ports' state; bind NCCL to {fabric_if} (NCCL_SOCKET_IFNAME={fabric_if}) and confirm NET/IB with NCCL_DEBUG=INFO.",
            n.name
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::input::{JobInput, RankInput};
    use commwatch_model::Rank;

    /// The explanation a job whose ranks on `n1` carry `NCCL_SOCKET_IFNAME=value` gives for traffic on `eth0`.
    fn ifname_explains(value: &str) -> bool {
        let job = JobInput {
            id: "j".into(),
            ranks: vec![RankInput {
                node: "n1".into(),
                process: Rank {
                    nccl: [(nccl::SOCKET_IFNAME.to_string(), value.to_string())].into(),
                    ..Default::default()
                },
            }],
            ..Default::default()
        };
        let input = AnalysisInput {
            jobs: vec![job],
            ..Default::default()
        };
        explanation(&input, "n1", "eth0").is_some()
    }

    #[test]
    fn ifname_matching_follows_nccl() {
        assert!(ifname_explains("eth0"));
        assert!(ifname_explains("eth"));
        assert!(ifname_explains("ib,eth"));
        assert!(!ifname_explains("=eth"));
        assert!(ifname_explains("=eth0"));
        assert!(!ifname_explains("ib0"));
        assert!(!ifname_explains("^eth"));
        assert!(ifname_explains("^docker,lo"));
        // `=` applies to the whole list, as NCCL reads it.
        assert!(!ifname_explains("=eth,ib"));
        assert!(ifname_explains("^=eth"));
    }
}
