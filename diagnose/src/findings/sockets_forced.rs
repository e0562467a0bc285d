//! A setting forces NCCL onto TCP sockets (`NCCL_IB_DISABLE=1`, `NCCL_NET=Socket`): inter-node data then goes
//! over TCP even where InfiniBand or RoCE is there, on IPoIB at best. The finding names the setting.

use super::network::{forcing_setting, on_sockets, rdma_present, socket_interfaces};
use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.logs
        .iter()
        .filter_map(|l| {
            let log = &l.log;
            let (setting, value) = forcing_setting(log)?;
            // On one node no byte crosses the network, whatever carries it.
            if log.network_carries_data == Some(false)
                || !(on_sockets(log) || log.network.is_none())
            {
                return None;
            }
            let ifaces: Vec<&str> = socket_interfaces(log)
                .iter()
                .map(|i| i.name.as_str())
                .collect();
            let over = if ifaces.is_empty() {
                String::new()
            } else {
                format!(" on {}", ifaces.join(", "))
            };
            let rdma = rdma_present(log, ctx.link);
            let summary = match &rdma {
                Some(why) => format!(
                    "{setting}={value} forces NCCL onto TCP sockets{over} while InfiniBand is there ({why}): \
                     inter-node data goes over TCP{} instead of RDMA",
                    if why.starts_with("IPoIB") { " on IPoIB" } else { "" }
                ),
                None => format!(
                    "{setting}={value} forces NCCL onto TCP sockets{over}: where the nodes have InfiniBand or \
                     RoCE, inter-node data does not use it"
                ),
            };
            let mut f = Finding::new(
                "nccl_misconfiguration",
                if rdma.is_some() { Severity::Critical } else { Severity::Warning },
                summary,
                "remove the setting (unset NCCL_IB_DISABLE, NCCL_NET=IB or the RDMA plugin's name) so NCCL uses \
                 RDMA, then confirm `Using network IB` and `via NET/IB/…/GDRDMA` in the log",
            )
            .subject("file", &l.file)
            .subject("setting", setting)
            .evidence(setting, value)
            .evidence("network", log.network.clone().unwrap_or_default())
            .evidence("socket_interfaces", ifaces.join(","));
            if let Some(v) = log.settings.get("NCCL_IBEXT_DISABLE") {
                f = f.evidence("NCCL_IBEXT_DISABLE", v.clone());
            }
            if let Some(why) = rdma {
                f = f.evidence("rdma_present", why);
            }
            Some(f)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{log, on_logs};

    #[test]
    fn ib_disabled_over_ipoib_names_the_setting() {
        let l = log(
            "u:1:2 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
u:1:2 [0] NCCL INFO NET/Socket : Using [0]ibs85f0:192.168.1.14<0> [1]ib0:192.168.1.15<0>
u:1:2 [0] NCCL INFO Using network Socket
",
        );
        let f = on_logs(check, &[l]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(f[0].subject["setting"], "NCCL_IB_DISABLE");
        assert_eq!(
            f[0].summary,
            "NCCL_IB_DISABLE=1 forces NCCL onto TCP sockets on ibs85f0, ib0 while InfiniBand is there (IPoIB \
             interfaces ibs85f0, ib0): inter-node data goes over TCP on IPoIB instead of RDMA"
        );
    }

    #[test]
    fn without_a_fabric_in_sight_it_is_a_warning() {
        let l = log(
            "a:1:2 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
a:1:2 [0] NCCL INFO NCCL_IBEXT_DISABLE set by environment to 1.
a:1:2 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
a:1:2 [0] NCCL INFO Using network Socket
",
        );
        let f = on_logs(check, &[l]);
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(f[0].evidence["NCCL_IBEXT_DISABLE"], "1");
        // NCCL_NET=Socket is named the same way.
        let l = log("a:1:2 [0] NCCL INFO NCCL_NET set by environment to Socket\na:1:2 [0] NCCL INFO Using network Socket\n");
        assert_eq!(on_logs(check, &[l])[0].subject["setting"], "NCCL_NET");
    }

    #[test]
    fn nothing_on_one_node_or_with_ib_left_on() {
        let one_node = log("#  Rank 0 Group 0 Pid 1 on a device 0 [0x01] GPU
a:1:2 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
a:1:2 [0] NCCL INFO Using network Socket
");
        assert!(on_logs(check, &[one_node]).is_empty());
        let on = log("a:1:2 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.\na:1:2 [0] NCCL INFO Using network IB\n");
        assert!(on_logs(check, &[on]).is_empty());
    }
}
