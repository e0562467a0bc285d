//! NCCL settings against the node's hardware: a pure function of a job's `NCCL_*` settings and the links the
//! sources found. The results travel with the job in the inventory; the collector's `nccl_misconfiguration`
//! finding is built on them.
//!
//! Checked:
//! - `NCCL_SOCKET_IFNAME` selecting no interface of the node ([`ConflictKind::MissingInterface`]), or only
//!   management interfaces ([`ConflictKind::ManagementInterface`]: the socket transport and bootstrap would
//!   run on the management network; with InfiniBand off or failing, so would the training traffic).
//! - `NCCL_IB_DISABLE=1`, or `NCCL_NET=Socket`, on a node with active InfiniBand/RoCE ports
//!   ([`ConflictKind::IbDisabled`]).
//! - `NCCL_IB_HCA` leaving active ports out ([`ConflictKind::HcaExcluded`]).
//!
//! NCCL's list syntax is the shared model's [`NcclList`].

use std::collections::BTreeMap;

use commwatch_model::nccl::{IB_DISABLE, IB_HCA, NET, SOCKET_IFNAME};
use commwatch_model::{ConflictKind, Link, LinkRole, NcclConflict, NcclList};

/// Interfaces NCCL itself never uses for sockets unless named.
fn ignored_interface(name: &str) -> bool {
    name == "lo" || name.starts_with("docker") || name.starts_with("veth")
}

/// The RDMA ports (not their netdevs) that are up.
fn active_ib(links: &[Link]) -> Vec<&Link> {
    links
        .iter()
        .filter(|l| l.key.class.is_rdma() && !l.is_interface() && l.is_up())
        .collect()
}

/// `device:port` of each port, comma-separated.
fn port_names<'a>(ports: impl IntoIterator<Item = &'a &'a Link>) -> Vec<String> {
    ports
        .into_iter()
        .map(|l| format!("{}:{}", l.key.device, l.key.port))
        .collect()
}

fn conflict(setting: &str, value: &str, kind: ConflictKind, reason: String) -> NcclConflict {
    NcclConflict {
        setting: setting.to_string(),
        value: value.to_string(),
        kind,
        reason,
    }
}

/// The conflicts of one job's settings on a node with `links` (every link the sources found).
pub fn conflicts(settings: &BTreeMap<String, String>, links: &[Link]) -> Vec<NcclConflict> {
    let mut out = Vec::new();
    if let Some(v) = settings.get(SOCKET_IFNAME) {
        out.extend(socket_ifname(v, links));
    }
    let active = active_ib(links);
    if !active.is_empty() {
        if let Some(v) = settings.get(IB_DISABLE).filter(|v| v.trim() == "1") {
            out.push(conflict(
                IB_DISABLE,
                v,
                ConflictKind::IbDisabled,
                format!(
                    "NCCL_IB_DISABLE=1 makes NCCL use sockets although InfiniBand ports are active ({})",
                    port_names(&active).join(", ")
                ),
            ));
        }
        if let Some(v) = settings
            .get(NET)
            .filter(|v| v.trim().eq_ignore_ascii_case("socket"))
        {
            out.push(conflict(
                NET,
                v,
                ConflictKind::IbDisabled,
                format!(
                    "NCCL_NET={v} forces the socket transport although InfiniBand ports are active ({})",
                    port_names(&active).join(", ")
                ),
            ));
        }
        if let Some(v) = settings.get(IB_HCA) {
            out.extend(ib_hca(v, &active));
        }
    }
    out
}

/// `NCCL_SOCKET_IFNAME=v` on a node with `links`: a conflict when it selects no interface, or only management
/// ones.
fn socket_ifname(v: &str, links: &[Link]) -> Option<NcclConflict> {
    let list = NcclList::parse(v);
    let ifaces: Vec<&Link> = links.iter().filter(|l| l.is_interface()).collect();
    let selected: Vec<&Link> = ifaces
        .iter()
        .copied()
        .filter(|l| list.selects(&l.key.device, None))
        .filter(|l| !list.exclude || !ignored_interface(&l.key.device))
        .collect();
    let names = |ls: &[&Link]| -> Vec<String> { ls.iter().map(|l| l.key.device.clone()).collect() };
    if selected.is_empty() {
        return Some(conflict(
            SOCKET_IFNAME,
            v,
            ConflictKind::MissingInterface,
            format!(
                "NCCL_SOCKET_IFNAME={v} selects no interface of this node (it has {})",
                names(&ifaces).join(", ")
            ),
        ));
    }
    if !selected.iter().all(|l| l.role == LinkRole::Management) {
        return None;
    }
    let fabric: Vec<&Link> = ifaces
        .iter()
        .copied()
        .filter(|l| l.role == LinkRole::Fabric)
        .collect();
    Some(conflict(
        SOCKET_IFNAME,
        v,
        ConflictKind::ManagementInterface,
        format!(
            "NCCL_SOCKET_IFNAME={v} selects only the management interface(s) {}{}",
            names(&selected).join(", "),
            if fabric.is_empty() {
                String::new()
            } else {
                format!("; the fabric interfaces are {}", names(&fabric).join(", "))
            }
        ),
    ))
}

/// `NCCL_IB_HCA=v` with `active` ports up: a conflict when it leaves some of them out.
fn ib_hca(v: &str, active: &[&Link]) -> Option<NcclConflict> {
    let list = NcclList::parse(v);
    let left_out = port_names(
        active
            .iter()
            .filter(|l| !list.selects(&l.key.device, Some(&l.key.port))),
    );
    if left_out.is_empty() {
        return None;
    }
    let reason = if left_out.len() == active.len() {
        format!(
            "NCCL_IB_HCA={v} selects none of the active InfiniBand ports ({})",
            left_out.join(", ")
        )
    } else {
        format!(
            "NCCL_IB_HCA={v} leaves active InfiniBand ports unused: {}",
            left_out.join(", ")
        )
    };
    Some(conflict(IB_HCA, v, ConflictKind::HcaExcluded, reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use commwatch_model::{Endpoint, LinkClass, LinkKey};

    /// An interface when `device == port` (as the netdev source keys them), else an HCA port.
    fn link(class: LinkClass, device: &str, port: &str, role: LinkRole, state: &str) -> Link {
        Link {
            key: LinkKey::new(class, device, port),
            endpoint: if device == port {
                Endpoint::Interface
            } else {
                Endpoint::HcaPort
            },
            role,
            capacity_bytes_per_second: None,
            state: state.into(),
            attributes: BTreeMap::new(),
            gpu: None,
            link: None,
        }
    }

    /// eth0 management, ib0 IPoIB (fabric), two active HCAs.
    fn node() -> Vec<Link> {
        vec![
            link(
                LinkClass::Ethernet,
                "eth0",
                "eth0",
                LinkRole::Management,
                "up",
            ),
            link(LinkClass::Infiniband, "ib0", "ib0", LinkRole::Fabric, "up"),
            link(
                LinkClass::Ethernet,
                "lo",
                "lo",
                LinkRole::Management,
                "unknown",
            ),
            link(
                LinkClass::Infiniband,
                "mlx5_0",
                "1",
                LinkRole::Fabric,
                "ACTIVE",
            ),
            link(
                LinkClass::Infiniband,
                "mlx5_1",
                "1",
                LinkRole::Fabric,
                "ACTIVE",
            ),
            link(
                LinkClass::Infiniband,
                "mlx5_2",
                "1",
                LinkRole::Fabric,
                "DOWN",
            ),
        ]
    }

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn kinds(c: &[NcclConflict]) -> Vec<(&str, &str)> {
        c.iter()
            .map(|c| (c.setting.as_str(), c.kind.as_str()))
            .collect()
    }

    #[test]
    fn socket_ifname_on_management_nic_is_reported_and_ipoib_is_not() {
        let c = conflicts(&set(&[("NCCL_SOCKET_IFNAME", "eth0")]), &node());
        assert_eq!(
            kinds(&c),
            vec![("NCCL_SOCKET_IFNAME", "management_interface")]
        );
        assert!(
            c[0].reason.contains("eth0") && c[0].reason.contains("ib0"),
            "{}",
            c[0].reason
        );
        assert!(conflicts(&set(&[("NCCL_SOCKET_IFNAME", "ib0")]), &node()).is_empty());
        assert!(conflicts(&set(&[("NCCL_SOCKET_IFNAME", "ib")]), &node()).is_empty());
        // Excluding the IPoIB interface leaves only management.
        let c = conflicts(&set(&[("NCCL_SOCKET_IFNAME", "^ib,lo,docker")]), &node());
        assert_eq!(
            kinds(&c),
            vec![("NCCL_SOCKET_IFNAME", "management_interface")]
        );
        // Exclusion that keeps ib0 is fine.
        assert!(conflicts(&set(&[("NCCL_SOCKET_IFNAME", "^docker,lo")]), &node()).is_empty());
    }

    #[test]
    fn missing_interface() {
        let c = conflicts(&set(&[("NCCL_SOCKET_IFNAME", "=ens5")]), &node());
        assert_eq!(kinds(&c), vec![("NCCL_SOCKET_IFNAME", "missing_interface")]);
        // `=eth` is exact: eth0 does not match.
        let c = conflicts(&set(&[("NCCL_SOCKET_IFNAME", "=eth")]), &node());
        assert_eq!(kinds(&c), vec![("NCCL_SOCKET_IFNAME", "missing_interface")]);
    }

    #[test]
    fn ib_disabled_and_socket_net_only_with_active_ib() {
        let c = conflicts(
            &set(&[("NCCL_IB_DISABLE", "1"), ("NCCL_NET", "Socket")]),
            &node(),
        );
        assert_eq!(
            kinds(&c),
            vec![
                ("NCCL_IB_DISABLE", "ib_disabled"),
                ("NCCL_NET", "ib_disabled")
            ]
        );
        assert!(
            c[0].reason.contains("mlx5_0:1, mlx5_1:1"),
            "{}",
            c[0].reason
        );
        assert!(conflicts(
            &set(&[("NCCL_IB_DISABLE", "0"), ("NCCL_NET", "IB")]),
            &node()
        )
        .is_empty());
        let no_ib: Vec<Link> = node().into_iter().filter(|l| l.is_interface()).collect();
        assert!(conflicts(&set(&[("NCCL_IB_DISABLE", "1")]), &no_ib).is_empty());
    }

    #[test]
    fn ib_hca_excluding_active_ports() {
        let c = conflicts(&set(&[("NCCL_IB_HCA", "mlx5_0")]), &node());
        assert_eq!(kinds(&c), vec![("NCCL_IB_HCA", "hca_excluded")]);
        assert!(c[0].reason.ends_with("mlx5_1:1"), "{}", c[0].reason);
        // The down port mlx5_2 does not matter.
        assert!(conflicts(&set(&[("NCCL_IB_HCA", "mlx5_0,mlx5_1")]), &node()).is_empty());
        assert!(conflicts(&set(&[("NCCL_IB_HCA", "mlx5")]), &node()).is_empty());
        assert!(conflicts(&set(&[("NCCL_IB_HCA", "^mlx5_2")]), &node()).is_empty());
        let c = conflicts(&set(&[("NCCL_IB_HCA", "^mlx5_1")]), &node());
        assert!(c[0].reason.contains("unused: mlx5_1:1"), "{}", c[0].reason);
        let c = conflicts(&set(&[("NCCL_IB_HCA", "=mlx5_0:2")]), &node());
        assert!(
            c[0].reason.contains("none of the active"),
            "{}",
            c[0].reason
        );
    }
}
