//! The bare multi-node baseline does not reach what the nodes' fabric carries for it (NICs per node × link
//! rate, scaled for the collective and the scale): the link, the NIC binding or the algorithm. Only complete
//! runs across known nodes are compared.

use super::{r2, Context, Finding, Severity};
use crate::link::fabric::{compare, FabricVerdict};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.tests
        .iter()
        .filter_map(|t| {
            let c = compare(&t.test, &t.summary, ctx.link)?;
            if c.verdict != FabricVerdict::Below {
                return None;
            }
            let (peak, share, ceiling) = (c.peak_busbw_gbps?, c.share_of_ceiling?, c.ceiling_busbw_gbps?);
            Some(
                Finding::new(
                    "link_underutilized",
                    if share < 0.5 { Severity::Critical } else { Severity::Warning },
                    format!(
                        "bare {} peaks at {:.2} GB/s bus bandwidth, {:.0} % of the {:.2} GB/s the fabric carries for it \
                         ({} x {:.2} GB/s per node)",
                        t.test.collective, peak, share * 100.0, ceiling, c.nics_per_node, c.link_rate_gbps
                    ),
                    "verify the link (rate, errors), the NIC binding (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, GPU-NIC affinity) \
                     and the algorithm (NCCL_ALGO/PROTO, channels) with NCCL_DEBUG=INFO",
                )
                .subject("file", &t.file)
                .subject("collective", &t.test.collective)
                .evidence("peak_busbw_gbps", peak)
                .evidence("link_rate_gbps", c.link_rate_gbps)
                .evidence("share_of_link", r2(peak / c.link_rate_gbps))
                .evidence("nics_per_node", c.nics_per_node)
                .evidence("ceiling_busbw_gbps", r2(ceiling))
                .evidence("share_of_ceiling", r2(share)),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{on_tests, rank_list, table, tests};
    use crate::link::LinkInfo;

    const MARKER: &str = "# Collective test starting: all_reduce_perf\n";

    #[test]
    fn below_the_fabric_of_two_nodes() {
        // 16 ranks on 2 nodes of 8 x 25 GB/s: the ceiling is 375 GB/s; 150 GB/s is 40 % of it.
        let text = format!(
            "{MARKER}{}{}",
            rank_list(2, 8),
            table(&[(1 << 30, 150.0, 149.0)])
        );
        let link = LinkInfo::new(Some(25.0), None).with_nics(Some(8), None);
        let f = on_tests(check, &tests(&text), &link);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].summary,
            "bare all_reduce_perf peaks at 150.00 GB/s bus bandwidth, 40 % of the 375.00 GB/s the fabric carries \
             for it (8 x 25.00 GB/s per node)"
        );
        assert_eq!(f[0].evidence["share_of_ceiling"], 0.4);
        // 340 GB/s meets it; a single node or no link rate is not compared.
        let meets = text.replace("150.00", "340.00");
        assert!(on_tests(check, &tests(&meets), &link).is_empty());
        let single = format!(
            "{MARKER}{}{}",
            rank_list(1, 8),
            table(&[(1 << 30, 150.0, 149.0)])
        );
        assert!(on_tests(check, &tests(&single), &link).is_empty());
        assert!(on_tests(check, &tests(&text), &LinkInfo::default()).is_empty());
    }
}
