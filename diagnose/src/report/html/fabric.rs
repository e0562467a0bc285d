//! How the page names the fabric the baselines are held against: where the link rate and the NIC count come
//! from, and the capacity line of step 1's chart.

use crate::link::LinkInfo;

/// Where the link rate came from, for people.
pub fn rate_source(source: Option<&str>) -> &str {
    match source {
        Some("flag") => "--link-rate",
        Some("collector") => "the collector's inventory",
        Some(other) => other,
        None => "unknown",
    }
}

/// Where the NICs per node came from, for people.
pub fn nics_source(source: &str) -> &str {
    match source {
        "flag" => "--nics-per-node",
        "collector" => "the collector's inventory",
        "log" => "the NCCL log's devices",
        "assumed" => "assumed: give --nics-per-node",
        other => other,
    }
}

/// The capacity line of a node, GB/s, and its label: `link 50.0 GB/s` for one NIC (or an unknown count),
/// `fabric 400.0 GB/s per node (8 × 50.0)` for more; `None` without a link rate.
pub fn capacity(link: &LinkInfo) -> Option<(f64, String)> {
    let rate = link.rate_gbps?;
    let (nics, _) = link.nics();
    let gbps = link.capacity_gbps()?;
    let label = if nics > 1 {
        format!("fabric {gbps:.1} GB/s per node ({nics} × {rate:.1})")
    } else {
        format!("link {rate:.1} GB/s")
    };
    Some((gbps, label))
}

/// Where the capacity line comes from: the rate's source, and the NIC count's when it is more than one.
pub fn capacity_sources(link: &LinkInfo) -> String {
    let (nics, source) = link.nics();
    let rate = rate_source(link.source);
    if nics > 1 {
        format!(
            "rate from {rate}, {nics} NICs per node from {}",
            nics_source(source)
        )
    } else {
        format!("from {rate}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;

    #[test]
    fn one_nic_is_the_link_more_are_the_fabric() {
        let one = fixtures::link(Some(50.0));
        assert_eq!(capacity(&one), Some((50.0, "link 50.0 GB/s".to_string())));
        assert_eq!(capacity_sources(&one), "from --link-rate");
        let eight = fixtures::link(Some(50.0)).with_nics(None, Some(8));
        assert_eq!(
            capacity(&eight),
            Some((400.0, "fabric 400.0 GB/s per node (8 × 50.0)".to_string()))
        );
        assert_eq!(
            capacity_sources(&eight),
            "rate from --link-rate, 8 NICs per node from the NCCL log's devices"
        );
        assert_eq!(capacity(&fixtures::link(None)), None);
    }
}
