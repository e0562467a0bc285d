//! `management_network_traffic`: step-periodic training traffic on a management NIC — the classic case
//! (`NCCL_SOCKET_IFNAME` not bound to the fabric, NCCL falls back to sockets over the front-end network).
//!
//! Fires on a management link when, over the window, it carries at least [`MIN_BURSTS`] complete bursts of at
//! least [`MIN_BURST_BYTES`] each, regularly spaced (coefficient of variation of the burst spacing at most
//! [`MAX_PERIOD_CV`]) — training communication, not a backup or an image pull. Severity critical: the whole
//! ring runs at this NIC's pace. When the job's settings on the node explain it (`NCCL_SOCKET_IFNAME` naming
//! the interface, `NCCL_IB_DISABLE=1`, `NCCL_NET=Socket`, or the agent's conflict report), the summary says so
//! and the action names the fix.

use commwatch_model::nccl::{self, NcclList};
use commwatch_model::{ConflictKind, LinkClass, LinkRole};

use super::input::{AnalysisInput, LinkInput, NodeInput};
use super::{gbs, median, r4, Candidate, Evidence, FindingKind, Severity, Subject};

/// Complete bursts needed in the window.
pub const MIN_BURSTS: usize = 4;
/// Bytes per burst that count as training traffic (10 MB).
pub const MIN_BURST_BYTES: f64 = 10e6;
/// Most irregular burst spacing still called step-periodic.
pub const MAX_PERIOD_CV: f64 = 0.25;

/// What explains the traffic, from the job's settings on the node: `(setting=value, why)`.
fn explanation(input: &AnalysisInput, node: &str, interface: &str) -> Option<(String, String)> {
    let job = input.job_of(node)?;
    if let Some(c) = job.conflicts.iter().find(|c| {
        c.node == node
            && matches!(
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
    for n in &input.nodes {
        for l in n
            .links
            .iter()
            .filter(|l| l.link.role == LinkRole::Management)
        {
            let Some(a) = &l.activity else { continue };
            let complete: Vec<f64> = a
                .bursts
                .iter()
                .filter(|b| !b.truncated)
                .map(|b| b.bytes as f64)
                .collect();
            let big = complete.iter().filter(|b| **b >= MIN_BURST_BYTES).count();
            if big < MIN_BURSTS || a.period_cv.is_none_or(|cv| cv > MAX_PERIOD_CV) {
                continue;
            }
            let per_burst = a.bytes_per_burst.unwrap_or(0.0);
            let period = a.period_s.unwrap_or(0.0);
            let rate = a
                .burst_rate_bytes_per_second
                .unwrap_or(per_burst / a.sample_period_s.max(1e-9));
            // What one fabric port of the node could carry, and what the other nodes' fabric achieves.
            let mut caps: Vec<f64> = n
                .links
                .iter()
                .filter(|x| x.link.is_fabric_rdma())
                .filter_map(|x| x.link.capacity_bytes_per_second)
                .collect();
            let fabric_ports = caps.len();
            let port_capacity = median(&mut caps);
            let mut peers: Vec<f64> = input
                .nodes
                .iter()
                .filter(|m| m.name != n.name)
                .flat_map(|m| m.links.iter())
                .filter(|x| x.link.is_fabric_rdma())
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
            let mut s = format!(
                "{} sends training traffic over management NIC {}: {:.2} GB per step at {} every {:.3} s ({} steps)",
                n.name,
                l.link.key.device,
                per_burst / 1e9,
                gbs(rate),
                period,
                big
            );
            if let Some(cap) = port_capacity {
                s.push_str(&format!(
                    " instead of its {} InfiniBand port(s) of {} each",
                    fabric_ports,
                    gbs(cap)
                ));
            }
            if let Some(p) = peer_rate {
                s.push_str(&format!(
                    "; the other nodes' InfiniBand achieves only {} during communication",
                    gbs(p)
                ));
            }
            match &why {
                Some((setting, reason)) => {
                    s.push_str(&format!("; explained by {setting}: {reason}."))
                }
                None => s.push('.'),
            }
            c.summary = s;
            let fabric_if = fabric_interface(n).unwrap_or_else(|| "the fabric interface".into());
            c.action = match &why {
                Some((setting, _)) if setting.starts_with(nccl::SOCKET_IFNAME) => format!(
                    "Set NCCL_SOCKET_IFNAME={fabric_if} (or unset it) for the job's ranks on {} instead of {setting}, keep NCCL_IB_DISABLE unset, and restart the job; verify with NCCL_DEBUG=INFO that NCCL uses NET/IB.",
                    n.name
                ),
                Some((setting, _)) => format!(
                    "Remove {setting} from the job's environment on {} so NCCL uses InfiniBand (NET/IB), set NCCL_SOCKET_IFNAME={fabric_if}, and restart the job.",
                    n.name
                ),
                None => format!(
                    "Check the job's NCCL_SOCKET_IFNAME, NCCL_IB_HCA and NCCL_IB_DISABLE on {} and the InfiniBand ports' state; bind NCCL to {fabric_if} (NCCL_SOCKET_IFNAME={fabric_if}) and confirm NET/IB with NCCL_DEBUG=INFO.",
                    n.name
                ),
            };
            let mut e = Evidence::new(r4(rate), "bytes_per_second")
                .steps(big)
                .seconds(r4(a.window_s))
                .detail("bytes_per_step", r4(per_burst))
                .detail("step_period_s", r4(period))
                .detail("period_cv", r4(a.period_cv.unwrap_or(0.0)))
                .detail("busy_share", r4(a.busy_share()));
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
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::input::{JobInput, RankInput};

    /// The explanation a job whose ranks on `n1` carry `NCCL_SOCKET_IFNAME=value` gives for traffic on `eth0`.
    fn ifname_explains(value: &str) -> bool {
        let job = JobInput {
            id: "j".into(),
            ranks: vec![RankInput {
                node: "n1".into(),
                nccl: [(nccl::SOCKET_IFNAME.to_string(), value.to_string())].into(),
                ..Default::default()
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
