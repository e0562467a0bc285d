//! An interface on Docker's default bridge (172.17.0.0/16, a container's `eth0`): a container without host
//! networking. Traffic to other nodes then goes over TCP through the bridge and NAT, never RDMA. A warning
//! when data crosses nodes over it, `info` otherwise (the run stayed on one node, the bridge did not matter).

use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.logs
        .iter()
        .filter_map(|l| {
            let iface = l.log.interfaces.iter().find(|i| {
                i.detail
                    .as_deref()
                    .is_some_and(|a| a.starts_with("172.17."))
            })?;
            let crosses = l.log.network_carries_data == Some(true);
            let severity = if crosses {
                Severity::Warning
            } else {
                Severity::Info
            };
            let addr = iface.detail.clone().unwrap_or_default();
            let addr = addr.split('<').next().unwrap_or("").to_string();
            Some(
                Finding::new(
                    "nccl_misconfiguration",
                    severity,
                    format!(
                        "{} has the address {addr}, on Docker's default bridge: the ranks run in a container without \
                         host networking, and traffic to other nodes would go over TCP through the bridge",
                        iface.name
                    ),
                    "run the container with host networking (--network=host) and the RDMA devices and libraries \
                     (libibverbs) mapped in",
                )
                .subject("file", &l.file)
                .subject("interface", &iface.name)
                .evidence("address", addr)
                .evidence("crosses_nodes", crosses)
                .cite(l.log.cited("interfaces")),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{log, on_logs};

    #[test]
    fn a_bridge_address_inside_one_node_is_info() {
        let l = log(
            "c:91:91 [0] NCCL INFO NET : Using interface eth0:172.17.0.4<0>\n\
                     c:91:91 [0] NCCL INFO rank 0 nranks 1\n",
        );
        let f = on_logs(check, &[l]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Info);
        assert_eq!(f[0].subject["interface"], "eth0");
        assert!(f[0].summary.contains("172.17.0.4"));
    }
}
