//! NCCL settings against the node's hardware: a pure function of a job's `NCCL_*` settings and the links the
//! sources found. The results travel with the job in the inventory; the collector's `nccl_misconfiguration`
//! finding is built on them.
//!
//! Checked:
//! - `NCCL_SOCKET_IFNAME` selecting no interface of the node (`missing_interface`), or only management
//!   interfaces (`management_interface`: the socket transport and bootstrap would run on the management
//!   network; with InfiniBand off or failing, so would the training traffic).
//! - `NCCL_IB_DISABLE=1`, or `NCCL_NET=Socket`, on a node with active InfiniBand/RoCE ports (`ib_disabled`).
//! - `NCCL_IB_HCA` leaving active ports out (`hca_excluded`).
//!
//! NCCL's list syntax (`NCCL_SOCKET_IFNAME`, `NCCL_IB_HCA`): comma-separated entries, matched as prefixes; a
//! leading `^` excludes the listed entries instead; a leading `=` makes matches exact. `NCCL_IB_HCA` entries may
//! name a port (`mlx5_0:1`).

use std::collections::BTreeMap;

use crate::source::{Link, LinkClass, LinkRole};

/// One contradiction between a setting and the hardware.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NcclConflict {
    pub setting: String,
    pub value: String,
    /// `management_interface`, `missing_interface`, `ib_disabled`, `hca_excluded`.
    pub kind: String,
    pub reason: String,
}

/// A parsed NCCL list: entries, whether it excludes, whether matches are exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclList {
    pub exclude: bool,
    pub exact: bool,
    /// `(name, port)`; the port only in `NCCL_IB_HCA` entries.
    pub entries: Vec<(String, Option<String>)>,
}

/// Parses NCCL's list syntax (`^` exclude, `=` exact, `name[:port]` entries).
pub fn parse_list(value: &str) -> NcclList {
    let mut v = value.trim();
    let mut exclude = false;
    let mut exact = false;
    // NCCL accepts `^` and `=` in either order.
    for _ in 0..2 {
        if let Some(rest) = v.strip_prefix('^') {
            exclude = true;
            v = rest;
        } else if let Some(rest) = v.strip_prefix('=') {
            exact = true;
            v = rest;
        }
    }
    let entries = v
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once(':') {
            Some((name, port)) => (name.to_string(), Some(port.to_string())),
            None => (e.to_string(), None),
        })
        .collect();
    NcclList {
        exclude,
        exact,
        entries,
    }
}

impl NcclList {
    /// Whether `name` (and `port`, where the entry names one) is selected by the list.
    pub fn selects(&self, name: &str, port: Option<&str>) -> bool {
        let hit = self.entries.iter().any(|(n, p)| {
            let name_ok = if self.exact {
                name == n
            } else {
                name.starts_with(n.as_str())
            };
            let port_ok = match (p, port) {
                (Some(p), Some(port)) => p == port,
                _ => true,
            };
            name_ok && port_ok
        });
        hit != self.exclude
    }
}

/// Interfaces NCCL itself never uses for sockets unless named.
fn ignored_interface(name: &str) -> bool {
    name == "lo" || name.starts_with("docker") || name.starts_with("veth")
}

/// A network interface (netdev source: device and port are the interface name; IPoIB has class
/// `infiniband`, other interfaces `ethernet`).
fn is_interface(l: &Link) -> bool {
    matches!(l.key.class, LinkClass::Ethernet | LinkClass::Infiniband) && l.key.device == l.key.port
}

fn active_ib(links: &[Link]) -> Vec<&Link> {
    links
        .iter()
        .filter(|l| matches!(l.key.class, LinkClass::Infiniband | LinkClass::Roce))
        .filter(|l| !is_interface(l))
        .filter(|l| l.state.eq_ignore_ascii_case("active") || l.state.ends_with("ACTIVE"))
        .collect()
}

/// The conflicts of one job's settings on a node with `links` (every link the sources found).
pub fn conflicts(settings: &BTreeMap<String, String>, links: &[Link]) -> Vec<NcclConflict> {
    let mut out = Vec::new();
    let active = active_ib(links);
    let ib_names = || {
        active
            .iter()
            .map(|l| format!("{}:{}", l.key.device, l.key.port))
            .collect::<Vec<_>>()
            .join(", ")
    };

    if let Some(v) = settings.get("NCCL_SOCKET_IFNAME") {
        let list = parse_list(v);
        let ifaces: Vec<&Link> = links.iter().filter(|l| is_interface(l)).collect();
        let selected: Vec<&Link> = ifaces
            .iter()
            .copied()
            .filter(|l| list.selects(&l.key.device, None))
            .filter(|l| !list.exclude || !ignored_interface(&l.key.device))
            .collect();
        if selected.is_empty() {
            out.push(NcclConflict {
                setting: "NCCL_SOCKET_IFNAME".into(),
                value: v.clone(),
                kind: "missing_interface".into(),
                reason: format!(
                    "NCCL_SOCKET_IFNAME={v} selects no interface of this node (it has {})",
                    ifaces
                        .iter()
                        .map(|l| l.key.device.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        } else if selected.iter().all(|l| l.role == LinkRole::Management) {
            let names: Vec<&str> = selected.iter().map(|l| l.key.device.as_str()).collect();
            let fabric: Vec<&str> = ifaces
                .iter()
                .filter(|l| l.role == LinkRole::Fabric)
                .map(|l| l.key.device.as_str())
                .collect();
            out.push(NcclConflict {
                setting: "NCCL_SOCKET_IFNAME".into(),
                value: v.clone(),
                kind: "management_interface".into(),
                reason: format!(
                    "NCCL_SOCKET_IFNAME={v} selects only the management interface(s) {}{}",
                    names.join(", "),
                    if fabric.is_empty() {
                        String::new()
                    } else {
                        format!("; the fabric interfaces are {}", fabric.join(", "))
                    }
                ),
            });
        }
    }

    if !active.is_empty() {
        if let Some(v) = settings.get("NCCL_IB_DISABLE") {
            if v.trim() == "1" {
                out.push(NcclConflict {
                    setting: "NCCL_IB_DISABLE".into(),
                    value: v.clone(),
                    kind: "ib_disabled".into(),
                    reason: format!(
                        "NCCL_IB_DISABLE=1 makes NCCL use sockets although InfiniBand ports are active ({})",
                        ib_names()
                    ),
                });
            }
        }
        if let Some(v) = settings.get("NCCL_NET") {
            if v.trim().eq_ignore_ascii_case("socket") {
                out.push(NcclConflict {
                    setting: "NCCL_NET".into(),
                    value: v.clone(),
                    kind: "ib_disabled".into(),
                    reason: format!(
                        "NCCL_NET={v} forces the socket transport although InfiniBand ports are active ({})",
                        ib_names()
                    ),
                });
            }
        }
        if let Some(v) = settings.get("NCCL_IB_HCA") {
            let list = parse_list(v);
            let left_out: Vec<String> = active
                .iter()
                .filter(|l| !list.selects(&l.key.device, Some(&l.key.port)))
                .map(|l| format!("{}:{}", l.key.device, l.key.port))
                .collect();
            if !left_out.is_empty() {
                let none = left_out.len() == active.len();
                out.push(NcclConflict {
                    setting: "NCCL_IB_HCA".into(),
                    value: v.clone(),
                    kind: "hca_excluded".into(),
                    reason: if none {
                        format!(
                            "NCCL_IB_HCA={v} selects none of the active InfiniBand ports ({})",
                            left_out.join(", ")
                        )
                    } else {
                        format!(
                            "NCCL_IB_HCA={v} leaves active InfiniBand ports unused: {}",
                            left_out.join(", ")
                        )
                    },
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::LinkKey;

    fn link(class: LinkClass, device: &str, port: &str, role: LinkRole, state: &str) -> Link {
        Link {
            key: LinkKey {
                class,
                device: device.into(),
                port: port.into(),
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
    fn list_syntax() {
        let l = parse_list("^docker,lo");
        assert!(l.exclude && !l.exact);
        assert!(!l.selects("docker0", None) && !l.selects("lo", None));
        assert!(l.selects("eth0", None));
        let l = parse_list("=eth0");
        assert!(l.selects("eth0", None) && !l.selects("eth00", None));
        let l = parse_list("eth");
        assert!(l.selects("eth0", None) && l.selects("eth1", None) && !l.selects("ib0", None));
        let l = parse_list("mlx5_0:1,mlx5_1");
        assert!(l.selects("mlx5_0", Some("1")) && !l.selects("mlx5_0", Some("2")));
        assert!(l.selects("mlx5_1", Some("2")));
        let l = parse_list("^=mlx5_1");
        assert!(l.exclude && l.exact && !l.selects("mlx5_1", Some("1")));
        assert!(l.selects("mlx5_10", Some("1")));
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
        let no_ib: Vec<Link> = node()
            .into_iter()
            .filter(|l| l.key.device == l.key.port)
            .collect();
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
