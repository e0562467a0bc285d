//! The wire forms of what the sources found: links under their agent-local ids, series descriptors, and
//! the node's jobs. Enum conversions are the protocol crate's (`From<model enum>`).

use commwatch_model::{Job, Link, LinkKey, SeriesKind};
use commwatch_proto::v1 as pb;

use crate::source::SeriesSpec;

/// The wire form of a link under its agent-local id.
pub(super) fn link_to_pb(id: u32, l: &Link) -> pb::Link {
    pb::Link {
        id,
        class: pb::LinkClass::from(l.key.class) as i32,
        role: pb::LinkRole::from(l.role) as i32,
        device: l.key.device.clone(),
        port: l.key.port.clone(),
        capacity_bytes_per_second: l.capacity_bytes_per_second.unwrap_or(0.0),
        state: l.state.clone(),
        attributes: l.attributes.clone().into_iter().collect(),
        gpu: l.gpu.clone().unwrap_or_default(),
        link: l.link.clone().unwrap_or_default(),
        endpoint: pb::LinkEndpoint::from(l.endpoint) as i32,
        gone: false,
    }
}

/// The wire form of a link its source no longer lists: the one last sent, flagged `gone` (the collector marks it
/// gone; it stays described, so the series on it stay valid).
pub(super) fn gone_link_to_pb(last: &pb::Link) -> pb::Link {
    pb::Link {
        gone: true,
        ..last.clone()
    }
}

/// The wire form of a node's jobs.
pub fn jobs_to_pb(jobs: &[Job]) -> pb::JobInventory {
    pb::JobInventory {
        jobs: jobs
            .iter()
            .map(|j| pb::Job {
                id: j.id.clone(),
                ranks: j
                    .ranks
                    .iter()
                    .map(|r| pb::Rank {
                        pid: r.pid,
                        rank: r.rank,
                        local_rank: r.local_rank,
                        world_size: r.world_size,
                        gpus: r.gpus.clone(),
                        pod_uid: r.pod_uid.clone().unwrap_or_default(),
                        container_id: r.container_id.clone().unwrap_or_default(),
                        nccl: r.nccl.clone().into_iter().collect(),
                        found_by: r.found_by.clone(),
                    })
                    .collect(),
                conflicts: j
                    .conflicts
                    .iter()
                    .map(|c| pb::NcclConflict {
                        setting: c.setting.clone(),
                        value: c.value.clone(),
                        kind: c.kind.to_string(),
                        reason: c.reason.clone(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The wire form of a link that only a series names (the source did not list it): its endpoint and role
/// are unknown, so they are left unspecified.
pub(super) fn bare_link_to_pb(id: u32, k: &LinkKey) -> pb::Link {
    pb::Link {
        id,
        class: pb::LinkClass::from(k.class) as i32,
        role: pb::LinkRole::Unspecified as i32,
        device: k.device.clone(),
        port: k.port.clone(),
        ..Default::default()
    }
}

/// The descriptor of series `spec` under agent-local id `id`, on link `link_id` (0: node-level). A 64-bit
/// counter's `max_value` is 0 on the wire (the default saturation).
pub(super) fn series_to_pb(id: u32, spec: &SeriesSpec, link_id: u32) -> pb::SeriesDescriptor {
    let (kind, max_value) = match spec.kind {
        SeriesKind::Counter { max_value } => (pb::SeriesKind::Counter, max_value),
        SeriesKind::Gauge => (pb::SeriesKind::Gauge, 0),
    };
    pb::SeriesDescriptor {
        id,
        metric: spec.metric.clone(),
        kind: kind as i32,
        link_id,
        labels: spec.labels.clone().into_iter().collect(),
        max_value: if max_value == u64::MAX { 0 } else { max_value },
        tier: pb::Tier::from(spec.tier) as i32,
    }
}
