//! GPU Direct RDMA disabled on an RDMA network (on sockets it cannot exist, so it says nothing there).

use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.logs
        .iter()
        .filter(|l| l.log.gdr == Some(false) && l.log.network.as_deref().is_some_and(|n| n != "Socket"))
        .map(|l| {
            Finding::new(
                "nccl_misconfiguration",
                Severity::Warning,
                format!(
                    "GPU Direct RDMA is disabled for {}: network data is staged through host memory",
                    l.log.gdr_disabled_hcas.join(", ")
                ),
                "load nvidia-peermem (or use DMA-BUF), check NCCL_NET_GDR_LEVEL and that GPU and NIC share a PCIe \
                 switch (nvidia-smi topo -m)",
            )
            .subject("file", &l.file)
            .evidence("hcas", l.log.gdr_disabled_hcas.join(","))
            .evidence("network", l.log.network.clone().unwrap_or_default())
        })
        .collect()
}
