//! `link_degraded`: a link running below what it should.
//!
//! - InfiniBand/RoCE fabric port not up (`state` not ACTIVE, or `phys_state` not LinkUp): critical.
//! - Its capacity (from `rate`: lanes × lane speed) below [`CAPACITY_SHARE_BELOW`] of its peers' (the median of
//!   the same class's fabric ports on the node when it has at least three, else across all nodes): critical —
//!   a ring runs at its slowest link.
//! - NVLink link down: critical.
//! - A GPU's PCIe link width below its maximum, or its generation below maximum *while the GPU is busy*
//!   (GPUs lower the generation when idle to save power, which is not a fault): warning.

use commwatch_model::{Link, LinkClass};

use super::input::{AnalysisInput, GpuInput, NodeInput};
use super::{gbs, median_select, r4, Candidate, Evidence, FindingKind, Severity, Subject};

/// A port below this share of its peers' capacity is degraded.
pub const CAPACITY_SHARE_BELOW: f64 = 0.75;
/// A GPU counts as busy (for the PCIe generation check) above this utilisation.
pub const BUSY_FOR_PCIE_GEN: f64 = 0.5;

/// Lanes from a `rate` text such as `100 Gb/sec (2X HDR)`.
pub fn lanes_from_rate(rate: &str) -> Option<u32> {
    let open = rate.find('(')?;
    let x = rate[open + 1..].find(['X', 'x'])?;
    rate[open + 1..open + 1 + x].trim().parse().ok()
}

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    let fleet = |class: LinkClass| -> Option<f64> {
        let mut v: Vec<f64> = input
            .nodes
            .iter()
            .flat_map(|n| n.links.iter())
            .filter(|l| l.link.is_fabric_rdma() && l.link.key.class == class)
            .filter_map(|l| l.link.capacity_bytes_per_second)
            .collect();
        median_select(&mut v)
    };
    let mut out = Vec::new();
    for n in &input.nodes {
        // Each class's local reference worked out once per node, not once per port.
        let mut local: Vec<(LinkClass, Option<f64>)> = Vec::new();
        for l in &n.links {
            let c = if l.link.key.class == LinkClass::Nvlink {
                // Most are up: no candidate is made, nor an empty one moved, for those (a demo node's 144
                // NVLinks at every evaluation).
                if up(&l.link) {
                    continue;
                }
                nvlink_down(&n.name, &l.link)
            } else if l.link.is_fabric_rdma() {
                port_down(&n.name, &l.link).or_else(|| {
                    let class = l.link.key.class;
                    let local = match local.iter().find(|(c, _)| *c == class) {
                        Some((_, r)) => *r,
                        None => {
                            let r = local_reference(n, class);
                            local.push((class, r));
                            r
                        }
                    };
                    slow_port(n, &l.link, local, &fleet)
                })
            } else {
                None
            };
            out.extend(c);
        }
        out.extend(n.gpus.iter().filter_map(|g| pcie_below_max(&n.name, g)));
    }
    out
}

/// The median capacity of `n`'s fabric ports of `class` when at least three state one (a port's peers on
/// its own node), else `None` (the fleet's stands in).
fn local_reference(n: &NodeInput, class: LinkClass) -> Option<f64> {
    let mut local: Vec<f64> = n
        .links
        .iter()
        .filter(|x| x.link.is_fabric_rdma() && x.link.key.class == class)
        .filter_map(|x| x.link.capacity_bytes_per_second)
        .collect();
    if local.len() >= 3 {
        median_select(&mut local)
    } else {
        None
    }
}

/// Whether `l` is up ([`Link::is_up`]), its state compared whole first with the states agents send for an
/// up link (`up`: an NVLink's, `ACTIVE`: a port's): the same answer, without `is_up`'s case-blind scans of the
/// state for most links (a demo node's 144 NVLinks at every evaluation: a third of the rule).
fn up(l: &Link) -> bool {
    matches!(l.state.as_str(), "up" | "ACTIVE") || l.is_up()
}

/// An NVLink link that is not up.
fn nvlink_down(node: &str, l: &Link) -> Option<Candidate> {
    if up(l) {
        return None;
    }
    let mut c = Candidate::new(
        FindingKind::LinkDegraded,
        Severity::Critical,
        Subject::link(node, l),
    );
    c.summary = format!(
        "{} NVLink {} of GPU {} is {}: intra-node traffic of that GPU takes fewer links.",
        node,
        l.link.as_deref().unwrap_or(&l.key.port),
        l.gpu.as_deref().unwrap_or(&l.key.device),
        l.state
    );
    c.evidence = Evidence::new(0.0, "up")
        .expected(1.0)
        .detail("state", l.state.clone());
    c.action =
        "Drain the node and check the GPU/NVSwitch (nvidia-smi nvlink -s, field diagnostics); \
                an NVLink that does not train needs a reset or a hardware replacement."
            .into();
    Some(c)
}

/// A fabric port whose state is not up or whose physical state is not `LinkUp`.
fn port_down(node: &str, l: &Link) -> Option<Candidate> {
    let phys_down = l.attributes.get("phys_state").is_some_and(|p| {
        // "LinkUp" in any case, without a lowercased copy per port and evaluation.
        !p.as_bytes()
            .windows(6)
            .any(|w| w.eq_ignore_ascii_case(b"linkup"))
    });
    if up(l) && !phys_down {
        return None;
    }
    let mut c = Candidate::new(
        FindingKind::LinkDegraded,
        Severity::Critical,
        Subject::link(node, l),
    );
    c.summary = format!(
        "{} {} port {} is {} (not ACTIVE/LinkUp): its traffic moves to other ports or stops.",
        node, l.key.device, l.key.port, l.state
    );
    c.evidence = Evidence::new(0.0, "up")
        .expected(1.0)
        .detail("state", l.state.clone());
    c.action =
        "Check the cable and the switch port (ibstat, iblinkinfo); reseat or replace the cable/transceiver."
            .into();
    Some(c)
}

/// A fabric port whose capacity is below [`CAPACITY_SHARE_BELOW`] of its peers': the median of the node's ports
/// of its class when the node has at least three, else `fleet`'s median for the class.
fn slow_port(
    n: &NodeInput,
    l: &Link,
    local: Option<f64>,
    fleet: &dyn Fn(LinkClass) -> Option<f64>,
) -> Option<Candidate> {
    let cap = l.capacity_bytes_per_second.filter(|c| *c > 0.0)?;
    let reference = local.or_else(|| fleet(l.key.class))?;
    if cap >= CAPACITY_SHARE_BELOW * reference {
        return None;
    }
    let lanes = l.attributes.get("rate").and_then(|r| lanes_from_rate(r));
    let mut c = Candidate::new(
        FindingKind::LinkDegraded,
        Severity::Critical,
        Subject::link(&n.name, l),
    );
    c.summary = format!(
        "{} {} port {} runs at {} per direction, {:.0}% of its peers' {}{}: the job's ring runs at this port's pace.",
        n.name,
        l.key.device,
        l.key.port,
        gbs(cap),
        cap / reference * 100.0,
        gbs(reference),
        lanes.map(|x| format!(" ({x}X link width)")).unwrap_or_default()
    );
    let mut e = Evidence::new(cap, "bytes_per_second")
        .expected(reference)
        .detail("capacity_share", r4(cap / reference));
    if let Some(x) = lanes {
        e = e.detail("lanes", u64::from(x));
    }
    c.evidence = e;
    c.action = "The port trained at reduced width or speed: check the cable/transceiver and switch port \
                (ibstat, mlxlink), reseat or replace, then reset the port; drain the node meanwhile."
        .into();
    Some(c)
}

/// A GPU's PCIe link below its maximum width, or below its maximum generation while the GPU is busy.
fn pcie_below_max(node: &str, g: &GpuInput) -> Option<Candidate> {
    let width_low = matches!((g.pcie_width, g.pcie_width_max), (Some(w), Some(m)) if w < m);
    let busy = g.busy_share.is_some_and(|b| b > BUSY_FOR_PCIE_GEN);
    let gen_low = busy && matches!((g.pcie_gen, g.pcie_gen_max), (Some(x), Some(m)) if x < m);
    if !width_low && !gen_low {
        return None;
    }
    let mut subject = Subject::node(node);
    subject.gpu = Some(g.index.clone());
    subject.device = Some("pcie".into());
    let mut c = Candidate::new(FindingKind::LinkDegraded, Severity::Warning, subject);
    c.summary = format!(
        "{} GPU {} PCIe link runs at gen {} x{} of gen {} x{}{}.",
        node,
        g.index,
        g.pcie_gen.unwrap_or(0.0),
        g.pcie_width.unwrap_or(0.0),
        g.pcie_gen_max.unwrap_or(0.0),
        g.pcie_width_max.unwrap_or(0.0),
        if gen_low {
            " while the GPU is busy"
        } else {
            ""
        }
    );
    let (m, x, unit) = if width_low {
        (
            g.pcie_width.unwrap_or(0.0),
            g.pcie_width_max.unwrap_or(0.0),
            "lanes",
        )
    } else {
        (
            g.pcie_gen.unwrap_or(0.0),
            g.pcie_gen_max.unwrap_or(0.0),
            "generation",
        )
    };
    c.evidence = Evidence::new(m, unit).expected(x);
    c.action = "Check the GPU's seating and riser/retimer; a PCIe link below its width slows GPU-NIC transfers (GPUDirect RDMA)."
        .into();
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes() {
        assert_eq!(lanes_from_rate("100 Gb/sec (2X HDR)"), Some(2));
        assert_eq!(lanes_from_rate("200 Gb/sec (4X HDR)"), Some(4));
        assert_eq!(lanes_from_rate("25 Gb/sec"), None);
    }

    #[test]
    fn the_states_compared_whole_are_up_as_is_up_says() {
        let mut l = crate::analysis::input::LinkInput::new(
            LinkClass::Nvlink,
            "0",
            "0",
            commwatch_model::LinkRole::Unknown,
        )
        .link;
        let states = [
            "up",
            "ACTIVE",
            "4: ACTIVE",
            "Active",
            "down",
            "INACTIVE",
            "",
            "UP",
        ];
        for state in states {
            std::sync::Arc::make_mut(&mut l).state = state.into();
            assert_eq!(up(&l), l.is_up(), "{state}");
        }
        std::sync::Arc::make_mut(&mut l).state = "up".into();
        assert!(up(&l) && nvlink_down("n1", &l).is_none());
        std::sync::Arc::make_mut(&mut l).state = "down".into();
        assert!(!up(&l) && nvlink_down("n1", &l).is_some());
    }
}
