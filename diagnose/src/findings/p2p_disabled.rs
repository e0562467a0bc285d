//! Peer-to-peer between GPUs turned off (`NCCL_P2P_DISABLE=1`, or `NCCL_P2P_LEVEL` set to `LOC`): GPUs of a node
//! exchange data through host memory, far below NVLink or PCIe peer-to-peer. Often a workaround (a board
//! whose P2P hangs), so it is said at `info`, with the line that set it.

use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.logs
        .iter()
        .filter_map(|l| {
            let s = &l.log.settings;
            let (setting, value) = if s.get("NCCL_P2P_DISABLE").is_some_and(|v| v == "1") {
                ("NCCL_P2P_DISABLE", "1")
            } else if s.get("NCCL_P2P_LEVEL").is_some_and(|v| v == "LOC" || v == "0") {
                ("NCCL_P2P_LEVEL", s["NCCL_P2P_LEVEL"].as_str())
            } else {
                return None;
            };
            let cites = l.log.cited(&format!("settings.{setting}"));
            Some(
                Finding::new(
                    "nccl_misconfiguration",
                    Severity::Info,
                    format!(
                        "peer-to-peer between GPUs is off ({setting}={value}): GPUs of a node exchange data through \
                         host memory"
                    ),
                    "unless P2P is off on purpose (a board whose P2P fails), remove the setting; expect intra-node \
                     bandwidth far below NVLink or PCIe peer-to-peer while it is set",
                )
                .subject("file", &l.file)
                .subject("setting", setting)
                .evidence("value", value.to_string())
                .cite(cites)
                .cite(l.log.cited("settings.NCCL_P2P_LEVEL")),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{log, on_logs};

    #[test]
    fn p2p_off_on_the_command_line_or_by_the_environment() {
        let l = log(
            "$ NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 ./build/all_reduce_perf -g 2\n\
                     h:1:1 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to LOC\n",
        );
        let f = on_logs(check, &[l]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Info);
        assert_eq!(f[0].subject["setting"], "NCCL_P2P_DISABLE");
        assert!(f[0].cites[0].text.contains("NCCL_P2P_DISABLE=1"));
        let on = log("$ export NCCL_P2P_DISABLE=0\nh:1:1 [0] NCCL INFO Using network Socket\n");
        assert!(on_logs(check, &[on]).is_empty());
    }
}
