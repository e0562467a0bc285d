//! `management_network_traffic`: step-periodic training traffic on a management NIC — the classic case
//! (`NCCL_SOCKET_IFNAME` not bound to the fabric, NCCL falls back to sockets over the front-end network).
//!
//! A management NIC also carries storage reads, checkpoint writes and image pulls, in chunks that can look
//! periodic over a window. Training traffic differs in three ways, all required:
//! - **its own level**: the NIC's bursts at its own level ([`super::activity::Activity::peaks`], so that a
//!   lower storage load underneath does not merge them) — at least [`MIN_BURSTS`] complete ones of at least
//!   [`MIN_BURST_BYTES`], regularly spaced (coefficient of variation at most [`MAX_PERIOD_CV`]) and of one
//!   size (at most [`MAX_BYTES_CV`]): each step moves the same gradients; or, where a collective paced by
//!   the slow NIC comes in chunks with pauses, **its bytes in the node's steps** ([`from_steps`]): the same
//!   amount step after step in one direction (a checkpoint written in some steps and storage read in others
//!   is not), the NIC not busy all the time;
//! - **the job's step period**: their spacing within [`PERIOD_MATCH`] of the step period of the node's job
//!   (its nodes' steps, else their fabric ports' burst period). A node that runs no job while jobs are known
//!   carries no training traffic. Without a step period anywhere in the job, the bursts must match another
//!   node's NIC bursts of the job (a ring moves the same bytes on every node at once);
//! - **the node's fabric**: either it carries nothing while the NIC bursts (NCCL left the fabric), or at
//!   least [`COINCIDE_SHARE`] of the NIC's bytes move while the node's fabric bursts (NCCL splits the step's
//!   traffic between them; storage reads move theirs through compute as well).
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

use super::activity::Burst;
use super::input::{AnalysisInput, LinkInput, NodeInput};
use super::scaling::step_time;
use super::straggler::groups;
use super::{
    gbs, median, median_select, r4, Candidate, Evidence, FindingKind, Severity, Subject, CAUSE,
    NEIGHBOUR, RING_ROLE,
};

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
/// Share of the NIC's bytes that must move while the node's fabric bursts, when the fabric is busy.
pub const COINCIDE_SHARE: f64 = 0.8;
/// Steps of the node the per-step path needs, and the share of them that must carry the traffic.
pub const MIN_STEPS: usize = 4;
/// Inferred steps cut a little off the job's own now and then (a stall inside a collective as long as its
/// gap): three in five steps carrying the traffic alike is the job's, and keeps the finding raised.
pub const STEPS_SHARE: f64 = 0.6;
/// How far a step's bytes may stray from the median of the steps' and still be the same traffic: inferred
/// steps cut now and then a little off the job's own edges (the bed's OpenMPI fault: 18–36 MB for 25.2).
pub const MAX_STEP_BYTES_SPREAD: f64 = 0.4;
/// Most of its steps a NIC may be busy and still carry step traffic (a steady stream fills them).
pub const MAX_STEP_BUSY_SHARE: f64 = 0.9;
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
    let mut figures = super::StepFigures::default();
    let (tx, rx) = n
        .steps
        .iter()
        .filter_map(|s| figures.of(s, &l.link))
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

/// The NIC's traffic, when it is training traffic: its figures and what they match.
struct Training {
    /// What the figures rest on: `bursts` (the NIC's own bursts at its level) or `steps` (its bytes in the
    /// node's steps).
    basis: &'static str,
    /// Complete bursts, or steps, that carried at least [`MIN_BURST_BYTES`].
    big: usize,
    bytes_per_step: f64,
    /// Spacing of the bursts, or the steps' median duration, seconds.
    period_s: f64,
    /// Rate while busy, bytes/s (`None` when not measured).
    rate: Option<f64>,
    period_cv: Option<f64>,
    bytes_cv: Option<f64>,
    busy_share: f64,
    /// The job's step period the traffic matches (`None`: matched another node's NIC instead).
    step_period_s: Option<f64>,
    /// Whether the node's fabric carried nothing while the NIC was busy.
    fabric_idle: bool,
}

/// Whether `period` is within [`PERIOD_MATCH`] of `reference`.
fn same_period(period: f64, reference: f64) -> bool {
    reference > 0.0 && (period - reference).abs() <= PERIOD_MATCH * reference
}

/// Whether the NIC's bursts `nic` are the step's communication as far as the node's fabric tells:
/// `Some(true)` when the fabric carried nothing while they ran (NCCL left it), `Some(false)` when at least
/// [`COINCIDE_SHARE`] of their bytes moved while the fabric burst (the step's traffic split between them),
/// `None` otherwise (traffic of its own, such as a data loader's reads during compute). Bytes, not bursts: a
/// storage read longer than a step overlaps some fabric burst whenever it runs, but moves most of its bytes
/// while the fabric computes.
fn with_fabric(n: &NodeInput, nic: &[&Burst]) -> Option<bool> {
    let mut fabric: Vec<(i64, i64)> = n
        .fabric_links()
        .filter_map(|x| x.activity.as_ref())
        .flat_map(|x| x.bursts.iter())
        // Background (a few small bursts on ports NCCL left) is not the fabric carrying the step.
        .filter(|b| b.bytes as f64 >= MIN_BURST_BYTES)
        .map(|b| (b.start_unix_ns, b.end_unix_ns))
        .collect();
    let busy = union(&mut fabric);
    let (mut total, mut during) = (0.0, 0.0);
    for b in nic {
        let span = (b.end_unix_ns - b.start_unix_ns).max(1) as f64;
        let overlap: i64 = busy
            .iter()
            .map(|&(s, e)| (e.min(b.end_unix_ns) - s.max(b.start_unix_ns)).max(0))
            .sum();
        total += b.bytes as f64;
        // A burst's bytes spread evenly over its time.
        during += b.bytes as f64 * (overlap as f64 / span).min(1.0);
    }
    if nic.iter().all(|b| {
        !busy
            .iter()
            .any(|&(s, e)| b.start_unix_ns < e && s < b.end_unix_ns)
    }) {
        Some(true)
    } else {
        (total > 0.0 && during >= COINCIDE_SHARE * total).then_some(false)
    }
}

/// The union of time intervals `(start, end)`, sorted, as disjoint intervals (`v` is sorted in place).
fn union(v: &mut [(i64, i64)]) -> Vec<(i64, i64)> {
    v.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(v.len());
    for &(s, e) in v.iter() {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The step period of a job's nodes ([`step_time`]), worked out once per job and only when a management link's
/// traffic needs it (most have none to judge).
type StepPeriod = std::cell::OnceCell<Option<f64>>;

/// The management link's traffic when it is training traffic (see the module documentation): from its own
/// bursts, else from its bytes in the node's steps; `nodes` are the nodes of `n`'s job, `period` their step
/// period.
fn training(
    n: &NodeInput,
    nodes: &[&NodeInput],
    l: &LinkInput,
    period: &StepPeriod,
) -> Option<Training> {
    let step_period_s = || *period.get_or_init(|| step_time(nodes).0);
    let t = from_bursts(n, nodes, l, step_period_s).or_else(|| from_steps(n, l, step_period_s))?;
    // With the fabric idle, the traffic must be a job's exchange between nodes: a job on one node has none.
    (!t.fabric_idle || nodes.len() > 1).then_some(t)
}

/// [`training`] from the NIC's bursts at its own level: regular, of one size, at the job's step period.
fn from_bursts(
    n: &NodeInput,
    nodes: &[&NodeInput],
    l: &LinkInput,
    step_period_s: impl Fn() -> Option<f64>,
) -> Option<Training> {
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
    let nic: Vec<&Burst> = p.complete().collect();
    let fabric_idle = with_fabric(n, &nic)?;
    let step_period_s = step_period_s();
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
    let per_burst = p.bytes_per_burst.unwrap_or(0.0);
    matched.then_some(Training {
        basis: "bursts",
        big,
        bytes_per_step: per_burst,
        period_s: period,
        rate: p.rate_bytes_per_second,
        period_cv: p.period_cv,
        bytes_cv: p.bytes_cv,
        busy_share: a.busy_share(),
        step_period_s,
        fabric_idle,
    })
}

/// [`training`] from the NIC's bytes in the node's steps: a collective paced by a slow link comes in chunks
/// with pauses, so its bursts are neither one per step nor of one size, but every step moves the same
/// gradients the same way. At least [`MIN_STEPS`] steps, [`STEPS_SHARE`] of them moving at least
/// [`MIN_BURST_BYTES`] on the NIC in one direction and within [`MAX_STEP_BYTES_SPREAD`] of their median
/// ([`alike`], each direction judged on its own), the NIC busy at most [`MAX_STEP_BUSY_SHARE`] of the steps (a
/// steady stream fills them), and its bursts the step's communication ([`with_fabric`]).
fn from_steps(
    n: &NodeInput,
    l: &LinkInput,
    step_period_s: impl Fn() -> Option<f64>,
) -> Option<Training> {
    // (tx bytes, rx bytes, active seconds, step seconds) of each step.
    let mut figures = super::StepFigures::default();
    let per: Vec<(f64, f64, f64, f64)> = n
        .steps
        .iter()
        .filter_map(|s| {
            let x = figures.of(s, &l.link)?;
            Some((
                x.tx_bytes as f64,
                x.rx_bytes as f64,
                x.active_s,
                s.duration_s(),
            ))
        })
        .collect();
    if per.len() < MIN_STEPS {
        return None;
    }
    // The same traffic step after step moves its bytes the same way in every step: storage writing a
    // checkpoint in some steps and reading in others moves as much per step, but not one step's traffic.
    let tx: Vec<f64> = per.iter().map(|p| p.0).collect();
    let rx: Vec<f64> = per.iter().map(|p| p.1).collect();
    let (bytes, typical, big) = [(&tx, alike(&tx)), (&rx, alike(&rx))]
        .into_iter()
        .filter_map(|(b, a)| a.map(|(t, big)| (b, t, big)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let bytes_cv = super::activity::cv(&big);
    let (active, span): (f64, f64) = per.iter().fold((0.0, 0.0), |(a, d), p| (a + p.2, d + p.3));
    let busy_share = if span > 0.0 { active / span } else { 1.0 };
    if busy_share > MAX_STEP_BUSY_SHARE {
        return None;
    }
    let nic: Vec<&Burst> = l.activity.as_ref()?.bursts.iter().collect();
    let fabric_idle = with_fabric(n, &nic)?;
    let mut durations: Vec<f64> = per.iter().map(|p| p.3).collect();
    let mut rates: Vec<f64> = per
        .iter()
        .zip(bytes)
        .filter(|(p, b)| p.2 > 0.0 && **b >= MIN_BURST_BYTES)
        .map(|(p, b)| b / p.2)
        .collect();
    Some(Training {
        basis: "steps",
        big: big.len(),
        bytes_per_step: typical,
        period_s: median(&mut durations).unwrap_or(0.0),
        rate: median(&mut rates),
        period_cv: super::activity::cv(&durations),
        bytes_cv,
        busy_share,
        step_period_s: step_period_s(),
        fabric_idle,
    })
}

/// Whether one direction's bytes in each step (`per_step`) are one step's traffic: at least [`STEPS_SHARE`] of
/// the steps move at least [`MIN_BURST_BYTES`] within [`MAX_STEP_BYTES_SPREAD`] of the median of those (a
/// job's first step, with its connections' set-up, or a step cut by the window may differ; the rest move the
/// same gradients). Returns that median and the steps' bytes of at least [`MIN_BURST_BYTES`].
fn alike(per_step: &[f64]) -> Option<(f64, Vec<f64>)> {
    let mut big: Vec<f64> = per_step
        .iter()
        .copied()
        .filter(|b| *b >= MIN_BURST_BYTES)
        .collect();
    let typical = median(&mut big)?;
    let alike = big
        .iter()
        .filter(|b| (*b / typical - 1.0).abs() <= MAX_STEP_BYTES_SPREAD)
        .count();
    ((alike as f64) >= STEPS_SHARE * per_step.len() as f64).then_some((typical, big))
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
        let period = StepPeriod::new();
        for n in &nodes {
            for l in n
                .links
                .iter()
                .filter(|l| l.link.role == LinkRole::Management)
            {
                if let Some(t) = training(n, &nodes, l, &period) {
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
    let per_burst = t.bytes_per_step;
    let period = t.period_s;
    let sample_period_s = l.activity.as_ref().map_or(0.05, |a| a.sample_period_s);
    let window_s = l.activity.as_ref().map_or(0.0, |a| a.window_s);
    let rate = t.rate.unwrap_or(per_burst / sample_period_s.max(1e-9));
    // What one fabric port of the node could carry, and what the job's other nodes' fabric achieves.
    let mut caps: Vec<f64> = n
        .fabric_links()
        .filter_map(|x| x.link.capacity_bytes_per_second)
        .collect();
    let fabric_ports = caps.len();
    let port_capacity = median_select(&mut caps);
    let mut peers: Vec<f64> = nodes
        .iter()
        .filter(|m| m.name != n.name)
        .flat_map(|m| m.fabric_links())
        .filter_map(|x| x.activity.as_ref()?.burst_rate_bytes_per_second)
        .collect();
    let peer_rate = median_select(&mut peers);
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
        action(n, fd, why.as_ref().map(|w| w.0.as_str())).into()
    } else {
        format!(
            "Nothing to change on {}: fix the node this finding is filed under (caused_by), whose job traffic uses its management network; this NIC's traffic stops with it.",
            n.name
        )
        .into()
    };
    let mut e = Evidence::new(r4(rate), "bytes_per_second")
        .steps(t.big)
        .seconds(r4(window_s))
        .detail("bytes_per_step", r4(per_burst))
        .detail("step_period_s", r4(period))
        .detail("period_cv", r4(t.period_cv.unwrap_or(0.0)))
        .detail("bytes_cv", r4(t.bytes_cv.unwrap_or(0.0)))
        .detail("busy_share", r4(t.busy_share))
        .detail("basis", t.basis)
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

    const MS: i64 = 1_000_000;

    /// Cumulative bytes every 50 ms over `steps` steps of 1.6 s: from 0.4 s into each step, six chunks of
    /// `chunk` bytes, each moved at 25 MB/s (a 200 Mbit/s link) with a 100 ms pause after it.
    fn chunked(steps: i64, chunk: f64) -> Vec<(i64, u64)> {
        let bytes_at = |t: i64| -> f64 {
            let (k, tau) = (t / (1600 * MS), t % (1600 * MS));
            let per_step = 6.0 * chunk;
            let mut done = 0.0;
            for c in 0..6 {
                let start = 400 * MS + c * (chunk / 25e6 * 1e9) as i64 + c * 100 * MS;
                let len = (chunk / 25e6 * 1e9) as i64;
                done += chunk * ((tau - start).clamp(0, len) as f64 / len as f64);
            }
            k as f64 * per_step + done
        };
        (0..steps * 32)
            .map(|i| (i * 50 * MS, bytes_at(i * 50 * MS) as u64))
            .collect()
    }

    /// A node whose management link `mgmt0` sends `tx` and receives `rx` (cumulative samples), with `steps`
    /// 1.6 s steps holding those links' figures, and an idle fabric link.
    fn node(name: &str, tx: &[(i64, u64)], rx: &[(i64, u64)], steps: i64) -> NodeInput {
        use crate::steps::bandwidth::step_link;
        use crate::steps::{NodeStep, StepSource};
        use commwatch_model::{Endpoint, Link, LinkKey};
        let mgmt = Link {
            key: LinkKey::new(LinkClass::Ethernet, "mgmt0", "mgmt0"),
            endpoint: Endpoint::Interface,
            role: LinkRole::Management,
            capacity_bytes_per_second: Some(25e6),
            state: "up".into(),
            attributes: Default::default(),
            gpu: None,
            link: None,
        };
        let fab = Link {
            key: LinkKey::new(LinkClass::Ethernet, "fab0", "fab0"),
            role: LinkRole::Fabric,
            capacity_bytes_per_second: Some(250e6),
            ..mgmt.clone()
        };
        let flat: Vec<(i64, u64)> = tx.iter().map(|s| (s.0, 0)).collect();
        let mut m = LinkInput::from_link(std::sync::Arc::new(mgmt.clone()));
        m.activity = crate::analysis::activity::analyse(tx, rx, Some(25e6));
        let mut f = LinkInput::from_link(std::sync::Arc::new(fab.clone()));
        f.activity = crate::analysis::activity::analyse(&flat, &flat, Some(250e6));
        let steps = (0..steps)
            .map(|k| {
                let (start, end) = (k * 1600 * MS, (k + 1) * 1600 * MS);
                let links = [(&m.link, tx, rx), (&f.link, &flat[..], &flat[..])]
                    .into_iter()
                    .filter_map(|(l, t, r)| step_link(l, t, r, start, end, 0.05))
                    .collect();
                std::sync::Arc::new(NodeStep {
                    fabric: Default::default(),
                    node: name.into(),
                    job: None,
                    index: k as u64,
                    start_unix_ns: start,
                    end_unix_ns: end,
                    source: StepSource::Inferred,
                    confidence: 0.8,
                    samples: None,
                    links,
                })
            })
            .collect();
        NodeInput {
            name: name.into(),
            links: vec![m, f],
            steps,
            ..NodeInput::default()
        }
    }

    #[test]
    fn chunked_traffic_is_found_from_steps_and_the_receiver_is_the_cause() {
        // 12 steps of 1.6 s: node-1's management NIC receives 6 chunks of 4.2 MB a step (peers address it
        // there); node-0 sends them; node-2's stays idle. No chunk is 10 MB: the bursts alone find nothing.
        let data = chunked(12, 4.2e6);
        let idle: Vec<(i64, u64)> = data.iter().map(|s| (s.0, 0)).collect();
        let input = AnalysisInput {
            nodes: vec![
                node("node-0", &data, &idle, 12),
                node("node-1", &idle, &data, 12),
                node("node-2", &idle, &idle, 12),
            ],
            ..AnalysisInput::default()
        };
        let c = evaluate(&input);
        assert_eq!(c.len(), 2, "{c:#?}");
        let by = |n: &str| c.iter().find(|x| x.subject.node == n).expect(n);
        let (cause, neighbour) = (by("node-1"), by("node-0"));
        assert_eq!(cause.evidence.details[RING_ROLE], CAUSE);
        assert_eq!(cause.evidence.details["direction"], "receives");
        assert_eq!(cause.evidence.details["basis"], "steps");
        assert!(
            cause
                .summary
                .starts_with("node-1 receives training traffic"),
            "{}",
            cause.summary
        );
        let per_step = cause.evidence.details["bytes_per_step"].as_f64().unwrap();
        assert!((per_step / 25.2e6 - 1.0).abs() < 0.01, "{per_step}");
        assert_eq!(neighbour.evidence.details[RING_ROLE], NEIGHBOUR);
        assert!(
            neighbour
                .summary
                .starts_with("node-0 sends training traffic"),
            "{}",
            neighbour.summary
        );
        assert!(
            neighbour.action.starts_with("Nothing to change on node-0"),
            "{}",
            neighbour.action
        );
        // The cause explains its neighbour's finding; the neighbour explains nothing.
        let mut linked = c.clone();
        crate::analysis::causes::link_causes(&input, &mut linked);
        let n0 = linked.iter().find(|x| x.subject.node == "node-0").unwrap();
        assert_eq!(n0.caused_by.as_deref(), Some(cause.id().as_str()));
        let n1 = linked.iter().find(|x| x.subject.node == "node-1").unwrap();
        assert_eq!(n1.caused_by, None);
    }

    /// `data` (cumulative samples) with only the increases of steps `from..to` (1.6 s steps) kept.
    fn only_steps(data: &[(i64, u64)], from: i64, to: i64) -> Vec<(i64, u64)> {
        let mut total = 0;
        let mut out = vec![(data[0].0, 0)];
        for w in data.windows(2) {
            if (from * 1600 * MS..to * 1600 * MS).contains(&w[0].0) {
                total += w[1].1 - w[0].1;
            }
            out.push((w[1].0, total));
        }
        out
    }

    #[test]
    fn writes_in_some_steps_and_reads_in_the_others_are_not_one_steps_traffic() {
        // The same 25.2 MB a step in chunks, sent in steps 0-4 (a checkpoint) and received in steps 5-11
        // (storage reads): as much every step, but not the same traffic each step.
        let data = chunked(12, 4.2e6);
        let (sent, received) = (only_steps(&data, 0, 5), only_steps(&data, 5, 12));
        let idle: Vec<(i64, u64)> = data.iter().map(|s| (s.0, 0)).collect();
        let input = AnalysisInput {
            nodes: vec![
                node("node-0", &sent, &received, 12),
                node("node-1", &idle, &idle, 12),
            ],
            ..AnalysisInput::default()
        };
        assert!(evaluate(&input).is_empty(), "{:#?}", evaluate(&input));
        // The same bytes sent in every step are.
        let input = AnalysisInput {
            nodes: vec![
                node("node-0", &data, &idle, 12),
                node("node-1", &idle, &idle, 12),
            ],
            ..AnalysisInput::default()
        };
        assert_eq!(evaluate(&input).len(), 1, "{:#?}", evaluate(&input));
    }

    /// Cumulative bytes every 50 ms for 20 s: `rate` bytes/s while `busy(t_ms)`, idle otherwise.
    fn shaped(rate: f64, busy: impl Fn(i64) -> bool) -> Vec<(i64, u64)> {
        let mut total = 0.0;
        (0..400)
            .map(|i| {
                if i > 0 && busy((i - 1) * 50) {
                    total += rate * 0.05;
                }
                (i * 50 * MS, total as u64)
            })
            .collect()
    }

    #[test]
    fn the_nics_bytes_must_move_while_the_fabric_bursts() {
        // The fabric bursts for 300 ms of every 1 s step.
        let fabric = shaped(200e6, |t| t % 1000 < 300);
        let with = |tx: &[(i64, u64)]| {
            let mut n = node("node-0", tx, tx, 0);
            n.links[1].activity = crate::analysis::activity::analyse(&fabric, &fabric, Some(250e6));
            let nic = n.links[0].activity.clone().expect("activity");
            let bursts: Vec<&Burst> = nic.bursts.iter().collect();
            with_fabric(&n, &bursts)
        };
        // Within the fabric's bursts: the step's traffic split between them.
        assert_eq!(with(&shaped(20e6, |t| t % 1000 < 250)), Some(false));
        // Only while the fabric computes: NCCL left the fabric.
        assert_eq!(
            with(&shaped(20e6, |t| (400..900).contains(&(t % 1000)))),
            Some(true)
        );
        // Reads of 1.3 s with 0.4 s gaps: every read overlaps a fabric burst, but most of its bytes move
        // while the fabric computes.
        assert_eq!(with(&shaped(20e6, |t| t % 1700 < 1300)), None);
    }

    #[test]
    fn a_steady_stream_or_too_few_bytes_is_not_training_traffic() {
        // 30 MB/s of storage reads all the time: the NIC is busy through every step.
        let steady: Vec<(i64, u64)> = (0..12 * 32)
            .map(|i| (i * 50 * MS, (i * 1_500_000) as u64))
            .collect();
        let idle: Vec<(i64, u64)> = steady.iter().map(|s| (s.0, 0)).collect();
        let small = chunked(12, 1.0e6);
        let input = AnalysisInput {
            nodes: vec![
                node("node-0", &idle, &steady, 12),
                node("node-1", &idle, &small, 12),
            ],
            ..AnalysisInput::default()
        };
        assert!(evaluate(&input).is_empty(), "{:#?}", evaluate(&input));
    }
}
