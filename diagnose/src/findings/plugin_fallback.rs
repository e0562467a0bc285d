//! A net plugin that loaded, failed, and left NCCL on another network (`NET/Plugin: Loaded net plugin AWS
//! Libfabric`, `plugin/net.cc:118 -> 2`, `Using network IB`): the run works, but the plugin set for the
//! cluster is not the one it needs, and every start pays for its failure.

use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.logs
        .iter()
        .filter_map(|l| {
            let fb = l.log.plugin_fallback.as_ref()?;
            let mut f = Finding::new(
                "net_plugin_fallback",
                Severity::Warning,
                format!(
                    "the net plugin {} failed to initialise and NCCL fell back to {}",
                    fb.plugin, fb.network
                ),
                "remove the plugin from this cluster's environment (NCCL_NET_PLUGIN, libnccl-net.so on the \
                 library path) or install the one its fabric needs",
            )
            .subject("file", &l.file)
            .subject("plugin", &fb.plugin)
            .evidence("plugin", fb.plugin.clone())
            .evidence("network", fb.network.clone())
            .cite(l.log.cited("plugin"))
            .cite(l.log.cited("network"));
            if let Some(setting) = l.log.cited("settings.NCCL_NET_PLUGIN").first() {
                f = f.cite([setting]);
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
    fn a_plugin_that_failed_and_the_network_used_instead() {
        let l = log("h:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v6)\n\
                     h:1:1 [0] NCCL INFO plugin/net.cc:118 -> 2\n\
                     h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n\
                     h:1:1 [0] NCCL INFO Using network IB\n");
        let f = on_logs(check, &[l]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, "net_plugin_fallback");
        assert!(f[0].summary.contains("AWS Libfabric") && f[0].summary.ends_with("IB"));
        let lines: Vec<Option<usize>> = f[0].cites.iter().map(|c| c.line).collect();
        assert_eq!(lines, [Some(1), Some(2), Some(4)]);
        // A plugin that works is no fallback.
        let ok = log(
            "h:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v6)\n\
                      h:1:1 [0] NCCL INFO Using network AWS Libfabric\n",
        );
        assert!(on_logs(check, &[ok]).is_empty());
    }
}
