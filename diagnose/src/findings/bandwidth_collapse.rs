//! Bus bandwidth that collapses at mid sizes (34 GB/s at 16 MiB, then 0.9 to 7 GB/s up to 1 GiB): the sizes
//! training moves most run far slower than small ones. The link's rate is not the cause; a protocol or
//! buffer switch, congestion control, or a fabric that drops under load is.

use super::{Context, Finding, Severity};
use crate::analysis::collapse::{collapse, Collapse};
use crate::units::human_bytes;

/// A collapse to below this share of the bandwidth before it is critical.
pub const CRITICAL_SHARE: f64 = 0.1;

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.tests
        .iter()
        .filter_map(|t| {
            let oop = collapse(&t.test, false);
            let ip = collapse(&t.test, true);
            let (main, other) = match (oop, ip) {
                (Some(o), ip) => (o, ip),
                (None, Some(i)) => (i, None),
                (None, None) => return None,
            };
            let share = main.lowest_busbw_gbps / main.before_busbw_gbps;
            let mut f = Finding::new(
                "bandwidth_collapse",
                if share < CRITICAL_SHARE { Severity::Critical } else { Severity::Warning },
                summary(&t.test.collective, &main, other.as_ref()),
                "find what changes at that size: the protocol and algorithm NCCL picks (NCCL_DEBUG_SUBSYS=TUNING, \
                 try NCCL_PROTO/NCCL_ALGO), buffer and chunk sizes (NCCL_BUFFSIZE), congestion control and \
                 adaptive routing on the fabric, PCIe/NIC errors under load",
            )
            .subject("file", &t.file)
            .subject("collective", &t.test.collective)
            .evidence("placement", if main.in_place { "in_place" } else { "out_of_place" })
            .evidence("before_bytes", main.before_bytes)
            .evidence("before_busbw_gbps", main.before_busbw_gbps)
            .evidence("collapsed_from_bytes", main.collapsed_from_bytes)
            .evidence("collapsed_to_bytes", main.collapsed_to_bytes)
            .evidence("lowest_busbw_gbps", main.lowest_busbw_gbps)
            .evidence("lowest_at_bytes", main.lowest_at_bytes);
            if let Some(r) = main.recovered_at_bytes {
                f = f.evidence("recovered_at_bytes", r);
            }
            if let Some(o) = other {
                f = f
                    .evidence("in_place_collapsed_from_bytes", o.collapsed_from_bytes)
                    .evidence("in_place_lowest_busbw_gbps", o.lowest_busbw_gbps);
            }
            Some(f)
        })
        .collect()
}

fn summary(collective: &str, c: &Collapse, other: Option<&Collapse>) -> String {
    let placement = if c.in_place { "in-place " } else { "" };
    let recovery = match c.recovered_at_bytes {
        Some(r) => format!(", recovering from {}", human_bytes(r)),
        None => " to the largest size".to_string(),
    };
    let also = other
        .map(|o| {
            format!(
                " (in place already from {}: {:.2} GB/s)",
                human_bytes(o.collapsed_from_bytes),
                o.lowest_busbw_gbps
            )
        })
        .unwrap_or_default();
    format!(
        "{collective}: {placement}bus bandwidth collapses from {:.2} GB/s at {} to {:.2} GB/s at {} and stays \
         below a third of it up to {}{recovery}{also}",
        c.before_busbw_gbps,
        human_bytes(c.before_bytes),
        c.lowest_busbw_gbps,
        human_bytes(c.lowest_at_bytes),
        human_bytes(c.collapsed_to_bytes),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{on_tests, table, tests};
    use crate::link::LinkInfo;

    #[test]
    fn a_mid_size_collapse() {
        const M: u64 = 1 << 20;
        let text = table(&[
            (8 * M, 29.92, 30.12),
            (16 * M, 34.26, 0.22),
            (32 * M, 0.90, 0.39),
            (1024 * M, 7.25, 6.62),
            (2048 * M, 13.90, 14.43),
        ]);
        let f = on_tests(check, &tests(&text), &LinkInfo::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].summary,
            "unknown: bus bandwidth collapses from 34.26 GB/s at 16 MiB to 0.90 GB/s at 32 MiB and stays below a \
             third of it up to 1 GiB, recovering from 2 GiB (in place already from 16 MiB: 0.22 GB/s)"
        );
        assert_eq!(f[0].evidence["collapsed_to_bytes"], 1024 * M);
        assert_eq!(f[0].evidence["in_place_collapsed_from_bytes"], 16 * M);
    }

    #[test]
    fn a_rising_curve_is_fine() {
        let text = table(&[
            (1 << 20, 5.0, 5.0),
            (2 << 20, 9.0, 9.0),
            (4 << 20, 8.5, 8.6),
        ]);
        assert!(on_tests(check, &tests(&text), &LinkInfo::default()).is_empty());
    }
}
