//! NCCL's socket transport runs over the management / bootstrap NIC while the nodes have a fabric it should
//! use. Only said where something shows both: the collector's inventory calls the interface management, or
//! the log shows a fabric (RDMA devices, a net plugin) beside host Ethernet carrying the data. IPoIB is the
//! fabric itself, loopback and virtual interfaces are `virtual_interface`'s, sockets a setting forced are
//! `sockets_forced`'s, and a run on one node sends nothing over any network.

use super::network::{
    forcing_setting, is_ipoib, on_sockets, rdma_present, socket_interfaces, virtual_kind,
};
use super::{Context, Finding, Severity};

/// Interface names that are ordinary host Ethernet rather than a fabric NIC.
fn looks_like_host_ethernet(name: &str) -> bool {
    ["eth", "eno", "ens", "enp", "em", "bond"]
        .iter()
        .any(|p| name.starts_with(p))
}

pub fn check(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    for l in ctx.logs {
        let log = &l.log;
        if !on_sockets(log)
            || log.network_carries_data != Some(true)
            || forcing_setting(log).is_some()
        {
            continue;
        }
        let fabric = rdma_present(log, ctx.link);
        for iface in socket_interfaces(log) {
            if is_ipoib(&iface.name) || virtual_kind(&iface.name).is_some() {
                continue;
            }
            let role = ctx.link.role_of(&iface.name);
            let is_bootstrap = log.bootstrap_interface.as_deref() == Some(iface.name.as_str());
            let management = match role {
                Some(r) => r == "management",
                None => fabric.is_some() && (is_bootstrap || looks_like_host_ethernet(&iface.name)),
            };
            if !management {
                continue;
            }
            let basis = match role {
                Some(_) => "the collector's inventory classifies it as management".to_string(),
                None if is_bootstrap => "it is also the bootstrap interface".to_string(),
                None => "it is host Ethernet, not a fabric NIC".to_string(),
            };
            let mut f = Finding::new(
                "management_network_traffic",
                Severity::Critical,
                format!(
                    "NCCL data moves over {} ({}), the management network: {basis}",
                    iface.name,
                    iface.detail.as_deref().unwrap_or("no address")
                ),
                "bind NCCL to the fabric: NCCL_SOCKET_IFNAME only for bootstrap, NCCL_IB_HCA / the net plugin for data; \
                 if sockets must be used, point NCCL_SOCKET_IFNAME at the fast NIC, never the management one",
            )
            .subject("file", &l.file)
            .subject("interface", &iface.name)
            .evidence("bootstrap_interface", log.bootstrap_interface.clone().unwrap_or_default());
            if let Some(v) = log.settings.get("NCCL_SOCKET_IFNAME") {
                f = f.evidence("NCCL_SOCKET_IFNAME", v.clone());
            }
            if let Some(r) = role {
                f = f.evidence("inventory_role", r.to_string());
            }
            out.push(f);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{log, on_logs, run};
    use crate::link::LinkInfo;

    const GKE: &str = "g:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.128.0.52<0>
g:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin IBext_v8
g:1:1 [0] NCCL INFO NET/IB : No device found.
g:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.128.0.52<0>
g:1:1 [0] NCCL INFO Using network Socket
g:1:1 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Socket/0
";

    #[test]
    fn host_ethernet_beside_a_fabric_plugin() {
        let f = on_logs(check, &[log(GKE)]);
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].summary,
            "NCCL data moves over eth0 (10.128.0.52<0>), the management network: it is also the bootstrap interface"
        );
    }

    #[test]
    fn no_fabric_in_sight_no_management_claim() {
        // The only NIC of a cloud VM: sockets, but no sign of another network.
        let aws = GKE.replace(
            "g:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin IBext_v8\n",
            "",
        );
        assert!(on_logs(check, &[log(&aws)]).is_empty());
        // The inventory decides where it knows the interface.
        let mut link = LinkInfo::default();
        link.roles
            .push(("eth0".to_string(), "management".to_string()));
        let f = run(check, &[], &[log(&aws)], &[], &link);
        assert_eq!(f[0].evidence["inventory_role"], "management");
    }

    #[test]
    fn ipoib_loopback_and_single_nodes_are_not_management() {
        let ipoib = GKE.replace("eth0", "ibs85f0");
        assert!(on_logs(check, &[log(&ipoib)]).is_empty());
        let single = format!(
            "#  Rank 0 Group 0 Pid 1 on g device 0 [0x01] GPU\n{}",
            GKE.replace(
                "g:1:1 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Socket/0\n",
                ""
            )
        );
        assert!(on_logs(check, &[log(&single)]).is_empty());
    }
}
