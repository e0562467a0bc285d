//! A bare baseline whose bus bandwidth is more than the nodes' fabric can carry (NICs per node × link rate,
//! scaled for the collective): the run did not measure the network. NVLink carried it (a single node, or a
//! multi-node NVLink domain), or the nodes have more NICs than counted. Never "meets the link".

use super::{r2, Context, Finding, Severity};
use crate::link::fabric::{compare, FabricVerdict};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.tests
        .iter()
        .filter_map(|t| {
            let c = compare(&t.test, &t.summary, ctx.link)?;
            if c.verdict != FabricVerdict::Impossible {
                return None;
            }
            Some(
                Finding::new(
                    "impossible_bandwidth",
                    Severity::Warning,
                    format!("{}: {}", t.test.collective, c.reason),
                    "compare the network with a run that must cross it (one rank per node, or NCCL_P2P_DISABLE=1 \
                     NCCL_SHM_DISABLE=1 for a test), and give the NICs per node with --nics-per-node",
                )
                .subject("file", &t.file)
                .subject("collective", &t.test.collective)
                .evidence("peak_busbw_gbps", c.peak_busbw_gbps.unwrap_or(0.0))
                .evidence("impossible_above_gbps", r2(c.impossible_above_gbps))
                .evidence("capacity_gbps", r2(c.capacity_gbps))
                .evidence("nics_per_node", c.nics_per_node)
                .evidence("nics_source", c.nics_source),
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
    fn eight_gpus_of_two_nodes_against_one_nic() {
        let text = format!(
            "{MARKER}{}{}",
            rank_list(2, 8),
            table(&[(8 << 30, 338.82, 337.35)])
        );
        let one_nic = LinkInfo::new(Some(25.0), None);
        let f = on_tests(check, &tests(&text), &one_nic);
        assert_eq!(f.len(), 1);
        assert!(f[0].summary.starts_with(
            "all_reduce_perf: 338.82 GB/s is more than the network can carry (46.88 GB/s at most with 1 NIC per \
             node assumed (--nics-per-node) at 25.00 GB/s)"
        ), "{}", f[0].summary);
        // With the node's eight NICs it is possible.
        let eight = LinkInfo::new(Some(25.0), None).with_nics(Some(8), None);
        assert!(on_tests(check, &tests(&text), &eight).is_empty());
        // Without a link rate nothing is compared.
        assert!(on_tests(check, &tests(&text), &LinkInfo::default()).is_empty());
    }
}
