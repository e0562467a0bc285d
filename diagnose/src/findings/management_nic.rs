//! NCCL's socket transport runs over the management / bootstrap NIC.

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
        if log.transports.get("NET/Socket").copied().unwrap_or(0) == 0
            && log.network.as_deref() != Some("Socket")
        {
            continue;
        }
        for iface in log.interfaces.iter().filter(|i| i.transport == "Socket") {
            let role = ctx.link.role_of(&iface.name);
            let is_bootstrap = log.bootstrap_interface.as_deref() == Some(iface.name.as_str());
            let management = match role {
                Some(r) => r == "management",
                None => is_bootstrap || looks_like_host_ethernet(&iface.name),
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
