//! The bare multi-node baseline does not reach the link's rate: the link, the NIC binding or the algorithm.

use super::{r2, Context, Finding, Severity};
use crate::link::BASELINE_MEETS_LINK;

pub fn check(ctx: &Context) -> Vec<Finding> {
    let Some(rate) = ctx.link.rate_gbps else {
        return Vec::new();
    };
    ctx.tests
        .iter()
        .filter(|t| t.inter_node())
        .filter_map(|t| {
            let peak = t.summary.peak_busbw_gbps?;
            let share = peak / rate;
            if share >= BASELINE_MEETS_LINK {
                return None;
            }
            Some(
                Finding::new(
                    "link_underutilized",
                    if share < 0.5 { Severity::Critical } else { Severity::Warning },
                    format!(
                        "bare {} peaks at {:.2} GB/s bus bandwidth, {:.0} % of the {:.2} GB/s link",
                        t.test.collective,
                        peak,
                        share * 100.0,
                        rate
                    ),
                    "verify the link (rate, errors), the NIC binding (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, GPU-NIC affinity) \
                     and the algorithm (NCCL_ALGO/PROTO, channels) with NCCL_DEBUG=INFO",
                )
                .subject("file", &t.file)
                .subject("collective", &t.test.collective)
                .evidence("peak_busbw_gbps", peak)
                .evidence("link_rate_gbps", rate)
                .evidence("share_of_link", r2(share)),
            )
        })
        .collect()
}
