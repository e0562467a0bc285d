//! The OFI (Libfabric) plugin on a TCP provider (`NET/OFI Selected Provider is tcp;ofi_rxm`): the plugin
//! exists for RDMA fabrics such as EFA, and on TCP it carries the traffic over sockets, with no GPU Direct
//! RDMA, far below the fabric.

use super::{Context, Finding, Severity};
use crate::nccl_log::is_tcp_provider;

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.logs
        .iter()
        .filter_map(|l| {
            let provider = l.log.net_provider.as_deref()?;
            if !is_tcp_provider(provider) {
                return None;
            }
            Some(
                Finding::new(
                    "nccl_misconfiguration",
                    Severity::Warning,
                    format!(
                        "the OFI net plugin selected the Libfabric provider {provider}: traffic across nodes goes \
                         over TCP sockets, not the RDMA fabric the plugin is for"
                    ),
                    "select the fabric's provider (FI_PROVIDER=efa on EFA instances) and check that its devices \
                     are present (fi_info -p efa)",
                )
                .subject("file", &l.file)
                .subject("provider", provider)
                .evidence("provider", provider.to_string())
                .evidence("network", l.log.network.clone().unwrap_or_default())
                .cite(l.log.cited("provider")),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{log, on_logs};

    #[test]
    fn a_tcp_provider_is_flagged_efa_is_not() {
        let tcp = log("h:1:1 [0] NCCL INFO NET/OFI Selected Provider is tcp;ofi_rxm\n");
        let f = on_logs(check, &[tcp]);
        assert_eq!(f.len(), 1);
        assert!(f[0].summary.contains("tcp;ofi_rxm"));
        assert_eq!(f[0].cites[0].line, Some(1));
        let efa = log("h:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)\n");
        assert!(on_logs(check, &[efa]).is_empty());
    }
}
