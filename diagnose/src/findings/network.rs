//! What the network rules read alike from a log: the interfaces of its socket transport, the names that say
//! what an interface is (IPoIB, loopback, virtual), the setting that forces sockets, and whether the log
//! shows an RDMA fabric the job could have used.

use crate::link::LinkInfo;
use crate::nccl_log::{NcclLog, NetInterface};

/// Interfaces NCCL's socket transport lists, each name once (hosts list the same name with their own
/// address).
pub fn socket_interfaces(log: &NcclLog) -> Vec<&NetInterface> {
    let mut out: Vec<&NetInterface> = Vec::new();
    for i in log.interfaces.iter().filter(|i| i.transport == "Socket") {
        if !out.iter().any(|o| o.name == i.name) {
            out.push(i);
        }
    }
    out
}

/// IP over InfiniBand: `ib0`, `ibs85f0`, `ibp12s0` — the IB fabric itself, carrying TCP.
pub fn is_ipoib(name: &str) -> bool {
    name.strip_prefix("ib")
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit() || c == 's' || c == 'p'))
}

/// What a loopback or virtual interface is, by its name: `lo`, `virbr*` (libvirt bridge), `docker*`, `tunl*`
/// (IP-in-IP tunnel), `veth*` (a container's end of a pair); `None` for any other interface.
pub fn virtual_kind(name: &str) -> Option<&'static str> {
    if name == "lo" {
        return Some("loopback");
    }
    [
        ("virbr", "libvirt bridge"),
        ("docker", "Docker bridge"),
        ("tunl", "IP tunnel"),
        ("veth", "virtual Ethernet pair"),
    ]
    .iter()
    .find(|(prefix, _)| name.starts_with(prefix))
    .map(|(_, kind)| *kind)
}

/// The setting that forces NCCL onto sockets, with its value: `NCCL_IB_DISABLE=1` or `NCCL_NET=Socket`.
pub fn forcing_setting(log: &NcclLog) -> Option<(&'static str, &str)> {
    if let Some(v) = log.settings.get("NCCL_IB_DISABLE").filter(|v| *v == "1") {
        return Some(("NCCL_IB_DISABLE", v));
    }
    log.settings
        .get("NCCL_NET")
        .filter(|v| v.eq_ignore_ascii_case("socket"))
        .map(|v| ("NCCL_NET", v.as_str()))
}

/// Whether the log runs on TCP sockets (chosen, or its connections show them).
pub fn on_sockets(log: &NcclLog) -> bool {
    log.network.as_deref() == Some("Socket")
        || log.transports.get("NET/Socket").copied().unwrap_or(0) > 0
}

/// The evidence that an RDMA fabric is there, in words, when there is some: IB devices or queue pairs in
/// the log, IPoIB interfaces, a net plugin that was loaded, RDMA links in the collector's inventory.
pub fn rdma_present(log: &NcclLog, link: &LinkInfo) -> Option<String> {
    let ipoib: Vec<&str> = log
        .interfaces
        .iter()
        .map(|i| i.name.as_str())
        .filter(|n| is_ipoib(n))
        .collect();
    let mut ipoib = ipoib;
    ipoib.dedup();
    if log.interfaces.iter().any(|i| i.transport == "IB") || log.ib_queue_pairs {
        Some("the log lists InfiniBand/RoCE devices".to_string())
    } else if !ipoib.is_empty() {
        Some(format!("IPoIB interfaces {}", ipoib.join(", ")))
    } else if link.fabric_rdma_links > 0 {
        Some("the collector's inventory lists RDMA fabric links".to_string())
    } else {
        log.net_plugin
            .as_ref()
            .map(|_| "an RDMA net plugin was loaded".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names() {
        for ib in ["ib0", "ibs85f0", "ibp12s0"] {
            assert!(is_ipoib(ib), "{ib}");
        }
        for not in ["ibmveth0", "eth0", "enp41s0f1", "i"] {
            assert!(!is_ipoib(not), "{not}");
        }
        assert_eq!(virtual_kind("lo"), Some("loopback"));
        assert_eq!(virtual_kind("virbr0"), Some("libvirt bridge"));
        assert_eq!(virtual_kind("tunl0"), Some("IP tunnel"));
        assert_eq!(virtual_kind("veth12ab"), Some("virtual Ethernet pair"));
        assert_eq!(virtual_kind("docker0"), Some("Docker bridge"));
        assert_eq!(virtual_kind("log0"), None);
        assert_eq!(virtual_kind("enp41s0f1"), None);
    }

    #[test]
    fn settings_that_force_sockets() {
        let mut log = NcclLog::default();
        assert_eq!(forcing_setting(&log), None);
        log.settings.insert("NCCL_IB_DISABLE".into(), "0".into());
        assert_eq!(forcing_setting(&log), None);
        log.settings.insert("NCCL_NET".into(), "Socket".into());
        assert_eq!(forcing_setting(&log), Some(("NCCL_NET", "Socket")));
        log.settings.insert("NCCL_IB_DISABLE".into(), "1".into());
        assert_eq!(forcing_setting(&log), Some(("NCCL_IB_DISABLE", "1")));
    }
}
