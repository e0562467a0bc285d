//! Loopback or virtual interfaces in NCCL's socket list (`lo`, `virbr*`, `docker*`, `tunl*`, `veth*`):
//! loopback cannot reach another node, and a bridge, tunnel or container pair is not the fabric. NCCL picks
//! from this list for socket traffic and its bootstrap; `NCCL_SOCKET_IFNAME` should leave them out. On one
//! node nothing crosses the network, so there it is only noted.

use super::network::{on_sockets, socket_interfaces, virtual_kind};
use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    for l in ctx.logs {
        let log = &l.log;
        for iface in socket_interfaces(log) {
            let Some(kind) = virtual_kind(&iface.name) else {
                continue;
            };
            let loopback = iface.name == "lo";
            let (severity, consequence) = match (log.network_carries_data, on_sockets(log)) {
                (Some(false), _) => (
                    Severity::Info,
                    "harmless on this single node, but a run across nodes would try it",
                ),
                (Some(true), true) if loopback => (
                    Severity::Critical,
                    "loopback cannot carry inter-node traffic, yet NCCL sends its data over sockets",
                ),
                (_, true) if loopback => (
                    Severity::Warning,
                    "loopback cannot carry inter-node traffic: a run across nodes cannot work over it",
                ),
                (_, true) => (
                    Severity::Warning,
                    "NCCL sends its data over sockets and may pick it instead of the fabric NIC",
                ),
                (_, false) => (
                    Severity::Warning,
                    "data goes over RDMA, but sockets for the bootstrap and any fallback may pick it",
                ),
            };
            let mut f = Finding::new(
                "nccl_misconfiguration",
                severity,
                format!(
                    "NCCL's socket interfaces include {} ({kind}): {consequence}",
                    iface.name
                ),
                "set NCCL_SOCKET_IFNAME to the fabric or host NIC that reaches the other nodes (e.g. \
                 NCCL_SOCKET_IFNAME=eth0, or ^lo,docker,virbr,tunl,veth to exclude), then check the `NET/Socket \
                 : Using` line",
            )
            .subject("file", &l.file)
            .subject("interface", &iface.name)
            .evidence("interface_kind", kind)
            .evidence("network", log.network.clone().unwrap_or_default());
            if let Some(v) = log.settings.get("NCCL_SOCKET_IFNAME") {
                f = f.evidence("NCCL_SOCKET_IFNAME", v.clone());
            }
            out.push(f);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{log, on_logs};

    #[test]
    fn virbr0_beside_an_ib_network() {
        let l = log(
            "s3:1:1 [7] NCCL INFO NET/Socket : Using [0]enp41s0f1:<0> [1]virbr0:<0>
s3:1:1 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB enp41s0f1:<0>
s1:2:2 [7] NCCL INFO NET/IB : Using [0]mlx5_1:1/IB ; OOB enp41s0f1:<0>
",
        );
        let f = on_logs(check, &[l]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].subject["interface"], "virbr0");
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(f[0]
            .summary
            .contains("(libvirt bridge): data goes over RDMA"));
    }

    #[test]
    fn loopback_set_by_ifname_with_sockets() {
        let l = log("a:1:2 [0] NCCL INFO NCCL_SOCKET_IFNAME set to lo
a:1:2 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
a:1:2 [0] NCCL INFO Using network Socket
");
        let f = on_logs(check, &[l]);
        assert_eq!(
            (f[0].severity, f[0].evidence["NCCL_SOCKET_IFNAME"].as_str()),
            (Severity::Warning, Some("lo"))
        );
        // Two nodes: loopback cannot work.
        let two = log("a:1:2 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
a:1:2 [0] NCCL INFO Using network Socket
b:1:2 [0] NCCL INFO Using network Socket
");
        assert_eq!(on_logs(check, &[two])[0].severity, Severity::Critical);
    }

    #[test]
    fn on_one_node_it_is_only_noted() {
        let l = log("#   Rank  0 Pid  1 on a device  0 [0x86] Tesla T4
#   Rank  1 Pid  1 on a device  1 [0xaf] Tesla T4
a:1:1 [0] NCCL INFO NET/Socket : Using [0]em1:10.193.84.3<0> [1]tunl0:10.227.47.12<0>
a:1:1 [0] NCCL INFO Using network Socket
");
        let f = on_logs(check, &[l]);
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].subject["interface"].as_str(), f[0].severity),
            ("tunl0", Severity::Info)
        );
    }
}
