//! Inter-node traffic over TCP sockets (`NET/Socket`) where the job should use RDMA: NCCL found no RDMA device
//! (`NET/IB : No device found`) and fell back, or its connections show sockets. Sockets a setting forced are
//! `sockets_forced`'s, and a run on one node sends nothing over any network. Where no line (and no inventory)
//! shows that the cluster has RDMA at all, sockets may be all it has: the finding says so, at `info`, as a
//! possibility rather than a misconfiguration.

use super::network::{forcing_setting, on_sockets, socket_interfaces};
use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.logs
        .iter()
        .filter_map(|l| {
            let log = &l.log;
            if !on_sockets(log)
                || log.network_carries_data != Some(true)
                || forcing_setting(log).is_some()
            {
                return None;
            }
            let socket_conns = log.transports.get("NET/Socket").copied().unwrap_or(0);
            let ifaces: Vec<&str> = socket_interfaces(log)
                .iter()
                .map(|i| i.name.as_str())
                .collect();
            let ib_listed = log.interfaces.iter().any(|i| i.transport == "IB");
            let rdma_expected = log.ib_no_device
                || log.net_plugin.is_some()
                || ib_listed
                || ctx.link.fabric_rdma_links > 0;
            let why = if log.ib_no_device {
                "NCCL found no InfiniBand device (`NET/IB : No device found`)"
            } else if ib_listed {
                "NCCL lists RDMA devices (`NET/IB : Using …`) yet sends over sockets"
            } else if ctx.link.fabric_rdma_links > 0 {
                "the collector's inventory lists RDMA fabric links"
            } else {
                "the input shows no RDMA device: if the cluster has one (InfiniBand, RoCE, EFA), NCCL did not use it"
            };
            let how = if socket_conns > 0 {
                format!("NET/Socket, {socket_conns} connections")
            } else {
                format!("NET/Socket on {}", ifaces.join(", "))
            };
            let mut f = Finding::new(
                "nccl_misconfiguration",
                if rdma_expected { Severity::Critical } else { Severity::Info },
                if rdma_expected {
                    format!("inter-node NCCL traffic goes over TCP sockets ({how}) instead of RDMA: {why}")
                } else {
                    format!("inter-node NCCL traffic goes over TCP sockets ({how}); {why}")
                },
                "make the RDMA devices visible to the job (device plugin / --device /dev/infiniband, NCCL_IB_HCA, the net \
                 plugin's libraries), check that NCCL_NET is not forcing Socket, then confirm `Using network IB` and \
                 `via NET/IB/…/GDRDMA` in the log",
            )
            .subject("file", &l.file)
            .evidence("network", log.network.clone().unwrap_or_default())
            .evidence("socket_connections", socket_conns)
            .evidence("socket_interfaces", ifaces.join(","))
            .evidence("ib_no_device", log.ib_no_device)
            .cite(log.cited("network"))
            .cite(log.cited("connections").iter().take(2))
            .cite(log.cited("interfaces").iter().take(2));
            if let Some(n) = log.nnodes {
                f = f.evidence("nnodes", n);
            }
            if let Some(v) = log.settings.get("NCCL_SOCKET_IFNAME") {
                f = f.evidence("NCCL_SOCKET_IFNAME", v.clone());
            }
            Some(f)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{log, on_logs};

    const NO_IB: &str = "a:1:1 [0] NCCL INFO NET/IB : No device found.
a:1:1 [0] NCCL INFO NET/Socket : Using [0]ens3:172.31.10.182<0>
b:2:2 [0] NCCL INFO NET/Socket : Using [0]ens3:172.31.15.113<0>
";

    #[test]
    fn sockets_after_no_ib_device_across_hosts() {
        let f = on_logs(check, &[log(NO_IB)]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].summary,
            "inter-node NCCL traffic goes over TCP sockets (NET/Socket on ens3) instead of RDMA: NCCL found no \
             InfiniBand device (`NET/IB : No device found`)"
        );
        // Connections on a socket, without a word about RDMA: the cluster may have none; info, as a possibility.
        let conns =
            log("c:1:1 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3\n");
        let f = on_logs(check, &[conns]);
        assert_eq!(f[0].severity, Severity::Info);
        assert!(f[0].summary.contains("if the cluster has one"));
        assert_eq!(f[0].evidence["socket_connections"], 1);
    }

    #[test]
    fn not_on_one_node_nor_when_a_setting_forced_it() {
        let one_node = format!(
            "#  Rank 0 Group 0 Pid 1 on a device 0 [0x01] GPU\n{}",
            &NO_IB[..NO_IB.find("b:2").unwrap()]
        );
        assert!(on_logs(check, &[log(&one_node)]).is_empty());
        let forced =
            format!("a:1:1 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n{NO_IB}");
        assert!(on_logs(check, &[log(&forced)]).is_empty());
    }
}
