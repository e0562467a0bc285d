//! Fewer channels than the topology allows: a cap in the settings, or fewer channels than network devices.

use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    for l in ctx.logs {
        let log = &l.log;
        let Some(channels) = log.channels else {
            continue;
        };
        let nics = log
            .interfaces
            .iter()
            .filter(|i| i.transport != "Socket" && i.transport != "Bootstrap")
            .count() as u32;
        let cap = ["NCCL_MAX_NCHANNELS", "NCCL_MAX_NRINGS", "NCCL_MAX_CTAS"]
            .iter()
            .find_map(|k| {
                log.settings
                    .get(*k)
                    .and_then(|v| v.parse::<u32>().ok())
                    .map(|v| (*k, v))
            });
        let reason = match cap {
            Some((k, v)) if channels <= v => Some(format!("{k}={v} caps them")),
            _ if nics > 0 && channels < nics => {
                Some(format!("the node has {nics} network devices"))
            }
            _ => None,
        };
        if let Some(reason) = reason {
            let mut f = Finding::new(
                "nccl_misconfiguration",
                Severity::Warning,
                format!("NCCL runs {channels} channels but {reason}: not every NIC/NVLink gets traffic"),
                "remove the channel cap (NCCL_MAX_NCHANNELS / NCCL_MIN_NCHANNELS) or raise it to at least one channel \
                 per NIC, then re-run the baseline",
            )
            .subject("file", &l.file)
            .evidence("channels", channels)
            .evidence("network_devices", nics);
            if let Some((k, v)) = cap {
                f = f.evidence(k, v);
            }
            out.push(f);
        }
    }
    out
}
