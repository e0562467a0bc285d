//! Inter-node traffic over TCP sockets (`NET/Socket`) where the job should use RDMA.

use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.logs
        .iter()
        .filter_map(|l| {
            let log = &l.log;
            let socket_conns = log.transports.get("NET/Socket").copied().unwrap_or(0);
            let on_socket = log.network.as_deref() == Some("Socket") || socket_conns > 0;
            let multi_node = log.nnodes.is_some_and(|n| n > 1) || socket_conns > 0;
            if !(on_socket && multi_node) {
                return None;
            }
            let rdma_expected = log.ib_no_device
                || log.net_plugin.is_some()
                || ctx.link.fabric_rdma_links > 0;
            let why = if log.ib_no_device {
                "NCCL found no InfiniBand device (`NET/IB : No device found`)"
            } else if ctx.link.fabric_rdma_links > 0 {
                "the collector's inventory lists RDMA fabric links"
            } else {
                "no RDMA transport was selected"
            };
            let mut f = Finding::new(
                "nccl_misconfiguration",
                if rdma_expected { Severity::Critical } else { Severity::Warning },
                format!(
                    "inter-node NCCL traffic goes over TCP sockets (NET/Socket, {socket_conns} connections) instead of RDMA: {why}"
                ),
                "make the RDMA devices visible to the job (device plugin / --device /dev/infiniband, NCCL_IB_HCA, the net \
                 plugin's libraries), check that NCCL_NET is not forcing Socket, then confirm `Using network IB` and \
                 `via NET/IB/…/GDRDMA` in the log",
            )
            .subject("file", &l.file)
            .evidence("network", log.network.clone().unwrap_or_default())
            .evidence("socket_connections", socket_conns)
            .evidence("ib_no_device", log.ib_no_device);
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
