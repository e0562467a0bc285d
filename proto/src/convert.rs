//! Conversions between the wire enums and the shared vocabulary (`commwatch-model`), written once for both
//! ends of the stream. Unknown or unspecified wire values map to the model's `Unknown` (or `None` where the
//! model has no such value); the compatibility rules are in the `.proto` file.

use commwatch_model::inspector::CollectiveRecord;
use commwatch_model::{Endpoint, LinkClass, LinkRole, Tier};

use crate::v1 as pb;

impl From<LinkClass> for pb::LinkClass {
    fn from(c: LinkClass) -> Self {
        match c {
            LinkClass::Infiniband => pb::LinkClass::Infiniband,
            LinkClass::Roce => pb::LinkClass::Roce,
            LinkClass::Ethernet => pb::LinkClass::Ethernet,
            LinkClass::Nvlink => pb::LinkClass::Nvlink,
            LinkClass::Unknown => pb::LinkClass::Unspecified,
        }
    }
}

/// The model's class of a wire value (`Unknown` for unspecified or newer values).
pub fn link_class(v: i32) -> LinkClass {
    match pb::LinkClass::try_from(v) {
        Ok(pb::LinkClass::Infiniband) => LinkClass::Infiniband,
        Ok(pb::LinkClass::Roce) => LinkClass::Roce,
        Ok(pb::LinkClass::Ethernet) => LinkClass::Ethernet,
        Ok(pb::LinkClass::Nvlink) => LinkClass::Nvlink,
        Ok(pb::LinkClass::Unspecified) | Err(_) => LinkClass::Unknown,
    }
}

impl From<LinkRole> for pb::LinkRole {
    fn from(r: LinkRole) -> Self {
        match r {
            LinkRole::Fabric => pb::LinkRole::Fabric,
            LinkRole::Management => pb::LinkRole::Management,
            LinkRole::Unknown => pb::LinkRole::Unspecified,
        }
    }
}

/// The model's role of a wire value (`Unknown` for unspecified or newer values).
pub fn link_role(v: i32) -> LinkRole {
    match pb::LinkRole::try_from(v) {
        Ok(pb::LinkRole::Fabric) => LinkRole::Fabric,
        Ok(pb::LinkRole::Management) => LinkRole::Management,
        Ok(pb::LinkRole::Unspecified) | Err(_) => LinkRole::Unknown,
    }
}

impl From<Endpoint> for pb::LinkEndpoint {
    fn from(e: Endpoint) -> Self {
        match e {
            Endpoint::HcaPort => pb::LinkEndpoint::HcaPort,
            Endpoint::Interface => pb::LinkEndpoint::Interface,
            Endpoint::GpuLink => pb::LinkEndpoint::GpuLink,
        }
    }
}

/// The endpoint a wire link names; for an unspecified or unknown value (older agents), the legacy rule
/// [`Endpoint::legacy`] applied to its class, device and port.
pub fn endpoint(v: i32, class: LinkClass, device: &str, port: &str) -> Endpoint {
    match pb::LinkEndpoint::try_from(v) {
        Ok(pb::LinkEndpoint::HcaPort) => Endpoint::HcaPort,
        Ok(pb::LinkEndpoint::Interface) => Endpoint::Interface,
        Ok(pb::LinkEndpoint::GpuLink) => Endpoint::GpuLink,
        Ok(pb::LinkEndpoint::Unspecified) | Err(_) => Endpoint::legacy(class, device, port),
    }
}

impl From<Tier> for pb::Tier {
    fn from(t: Tier) -> Self {
        match t {
            Tier::Fast => pb::Tier::Fast,
            Tier::Slow => pb::Tier::Slow,
        }
    }
}

/// The tier a wire value names; `None` when unspecified or unknown (the field is informational).
pub fn tier(v: i32) -> Option<Tier> {
    match pb::Tier::try_from(v) {
        Ok(pb::Tier::Fast) => Some(Tier::Fast),
        Ok(pb::Tier::Slow) => Some(Tier::Slow),
        Ok(pb::Tier::Unspecified) | Err(_) => None,
    }
}

/// An NCCL Inspector record on the wire, with the job id and job rank of the process that wrote it.
pub fn collective_to_pb(
    job: &str,
    job_rank: Option<u32>,
    r: &CollectiveRecord,
) -> pb::CollectiveRecord {
    pb::CollectiveRecord {
        job: job.to_string(),
        job_rank,
        comm_id: r.comm_id.clone(),
        rank: r.rank,
        n_ranks: r.n_ranks,
        n_nodes: r.n_nodes,
        pid: r.pid,
        dump_timestamp_us: r.dump_timestamp_us,
        collective: r.collective.clone(),
        sequence: r.sequence,
        size_bytes: r.size_bytes,
        exec_time_us: r.exec_time_us,
        timing_source: r.timing_source.clone().unwrap_or_default(),
        algorithm: r.algorithm.clone().unwrap_or_default(),
        algo_bandwidth_bytes_per_second: r.algo_bandwidth_bytes_per_second,
        bus_bandwidth_bytes_per_second: r.bus_bandwidth_bytes_per_second,
    }
}

/// The record of a wire message, the host being `node` (the agent's node); empty optional strings become
/// `None`. Validation (finite numbers, bounded strings) is the receiver's.
pub fn collective_from_pb(m: &pb::CollectiveRecord, node: &str) -> CollectiveRecord {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    CollectiveRecord {
        comm_id: m.comm_id.clone(),
        rank: m.rank,
        n_ranks: m.n_ranks,
        n_nodes: m.n_nodes,
        hostname: node.to_string(),
        pid: m.pid,
        dump_timestamp_us: m.dump_timestamp_us,
        collective: m.collective.clone(),
        sequence: m.sequence,
        size_bytes: m.size_bytes,
        exec_time_us: m.exec_time_us,
        timing_source: opt(&m.timing_source),
        algorithm: opt(&m.algorithm),
        algo_bandwidth_bytes_per_second: m.algo_bandwidth_bytes_per_second,
        bus_bandwidth_bytes_per_second: m.bus_bandwidth_bytes_per_second,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_round_trip_and_unknowns_degrade() {
        for c in [
            LinkClass::Infiniband,
            LinkClass::Roce,
            LinkClass::Ethernet,
            LinkClass::Nvlink,
            LinkClass::Unknown,
        ] {
            assert_eq!(link_class(pb::LinkClass::from(c) as i32), c);
        }
        assert_eq!(link_class(99), LinkClass::Unknown);
        for r in [LinkRole::Fabric, LinkRole::Management, LinkRole::Unknown] {
            assert_eq!(link_role(pb::LinkRole::from(r) as i32), r);
        }
        for t in Tier::ALL {
            assert_eq!(tier(pb::Tier::from(t) as i32), Some(t));
        }
        assert_eq!(tier(0), None);
        // The old `uint32 tier` numbers are the enum's.
        assert_eq!(pb::Tier::Fast as i32, 1);
        assert_eq!(pb::Tier::Slow as i32, 2);
        for e in [Endpoint::HcaPort, Endpoint::Interface, Endpoint::GpuLink] {
            assert_eq!(
                endpoint(
                    pb::LinkEndpoint::from(e) as i32,
                    LinkClass::Infiniband,
                    "x",
                    "y"
                ),
                e
            );
        }
        assert_eq!(
            endpoint(0, LinkClass::Infiniband, "ib0", "ib0"),
            Endpoint::Interface
        );
        assert_eq!(
            endpoint(0, LinkClass::Infiniband, "mlx5_0", "1"),
            Endpoint::HcaPort
        );
        assert_eq!(
            endpoint(7, LinkClass::Nvlink, "gpu0", "3"),
            Endpoint::GpuLink
        );
    }

    #[test]
    fn collective_records_cross_the_wire_unchanged() {
        let r = CollectiveRecord {
            comm_id: "0x5eed".into(),
            rank: 3,
            n_ranks: 4,
            n_nodes: 2,
            hostname: "node-b".into(),
            pid: 2002,
            dump_timestamp_us: 1_764_614_400_000_000,
            collective: "AllReduce".into(),
            sequence: 103,
            size_bytes: 220_000_000,
            exec_time_us: 35_484.0,
            timing_source: Some("kernel_gpu".into()),
            algorithm: None,
            algo_bandwidth_bytes_per_second: 6.2e9,
            bus_bandwidth_bytes_per_second: 9.3e9,
        };
        let m = collective_to_pb("job-1", Some(7), &r);
        assert_eq!(
            (m.job.as_str(), m.job_rank, m.algorithm.as_str()),
            ("job-1", Some(7), "")
        );
        assert_eq!(collective_from_pb(&m, "node-b"), r);
    }
}
