//! GPU Direct RDMA off on an RDMA network: the NIC cannot read and write GPU memory, so network data is
//! staged through host memory. The log says so (`GPU Direct RDMA Disabled for HCA …`, the OFI plugin's
//! `disabling GDR`, `use ring … GDR 0`), or its network connections go without `/GDRDMA`. On TCP it cannot
//! exist, and on one node nothing crosses the network, so it says nothing there.

use super::{Context, Finding, Severity};
use crate::nccl_log::is_tcp;

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.logs
        .iter()
        .filter(|l| {
            l.log.gdr == Some(false)
                && l.log.network.as_deref().is_some_and(|n| !is_tcp(n))
                && l.log.network_carries_data != Some(false)
        })
        .map(|l| {
            let log = &l.log;
            let network = log.network.clone().unwrap_or_default();
            let shown = log.gdr_evidence.first().cloned().unwrap_or_default();
            let summary = if !log.gdr_disabled_hcas.is_empty() {
                format!(
                    "GPU Direct RDMA is disabled for {}: network data is staged through host memory",
                    log.gdr_disabled_hcas.join(", ")
                )
            } else if shown.starts_with("via ") {
                format!(
                    "GPU Direct RDMA is not used on {network}: the network connections carry no GDRDMA \
                     (`{shown}`), so network data is staged through host memory"
                )
            } else {
                format!(
                    "GPU Direct RDMA is off on {network} (`{shown}`): network data is staged through host memory"
                )
            };
            let mut f = Finding::new(
                "nccl_misconfiguration",
                Severity::Warning,
                summary,
                "load nvidia-peermem (or use DMA-BUF), check NCCL_NET_GDR_LEVEL and that GPU and NIC share a PCIe \
                 switch (nvidia-smi topo -m); with the OFI plugin, check its GDR/HMEM support for this platform",
            )
            .subject("file", &l.file)
            .evidence("hcas", log.gdr_disabled_hcas.join(","))
            .evidence("network", network)
            .evidence("gdr_evidence", log.gdr_evidence.join(" | "));
            if let Some(p) = log.settings.get("NCCL_PROTO") {
                f = f.evidence("NCCL_PROTO", p.clone());
            }
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{log, on_logs};

    #[test]
    fn ib_connections_without_gdrdma() {
        let l = log(
            " [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB br0:10.137.141.16<0>
 [0] NCCL INFO Ring 00 : 15[41000] -> 0[1b000] [receive] via NET/IB/0
",
        );
        let f = on_logs(check, &[l]);
        assert_eq!(
            f[0].summary,
            "GPU Direct RDMA is not used on IB: the network connections carry no GDRDMA (`via NET/IB/0 (no \
             GDRDMA)`), so network data is staged through host memory"
        );
    }

    #[test]
    fn the_ofi_plugin_disabling_it() {
        let l = log(
            "g:1:1 [0] NCCL INFO NET/OFI Could not disable CUDA API usage for HMEM, disabling GDR
g:1:1 [0] NCCL INFO NCCL_PROTO set by environment to simple
g:1:1 [0] NCCL INFO Using network Libfabric
",
        );
        let f = on_logs(check, &[l]);
        assert!(f[0].summary.contains("disabling GDR"), "{}", f[0].summary);
        assert_eq!(f[0].evidence["NCCL_PROTO"], "simple");
    }

    #[test]
    fn nothing_on_sockets() {
        let l = log(
            "a:1:1 [0] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'lo'
a:1:1 [0] NCCL INFO Using network Socket
",
        );
        assert!(on_logs(check, &[l]).is_empty());
    }
}
