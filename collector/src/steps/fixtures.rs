//! What the step engine's tests build a node from: its agent's `Hello`, its links and their byte counters.

use commwatch_proto::v1 as pb;

/// The `Hello` of node `n1` (instance 1, ticks of 50 ms at the fast tier and 1 s at the slow) describing
/// `links` and `series`.
pub(crate) fn hello_n1(links: Vec<pb::Link>, series: Vec<pb::SeriesDescriptor>) -> pb::Hello {
    pb::Hello {
        node: "n1".into(),
        agent_version: "t".into(),
        boot_id: "b".into(),
        instance_id: 1,
        inventory: Some(pb::Inventory { links, series }),
        fast_period_ms: 50,
        slow_period_ms: 1000,
        blind: vec![],
    }
}

/// An active fabric link `id` of `class` on `device` and `port`, of 25 GB/s: an HCA's port, or with a `gpu`
/// the NVLink `port` of that GPU.
pub(crate) fn link(id: u32, class: pb::LinkClass, device: &str, port: &str, gpu: &str) -> pb::Link {
    let nvlink = class == pb::LinkClass::Nvlink;
    pb::Link {
        id,
        class: class as i32,
        endpoint: if nvlink {
            pb::LinkEndpoint::GpuLink as i32
        } else {
            pb::LinkEndpoint::HcaPort as i32
        },
        role: pb::LinkRole::Fabric as i32,
        device: device.into(),
        port: port.into(),
        gpu: gpu.into(),
        link: if gpu.is_empty() { "" } else { port }.into(),
        state: "ACTIVE".into(),
        capacity_bytes_per_second: 25e9,
        ..Default::default()
    }
}

/// The byte counter `id` (`metric`: `tx_bytes` or `rx_bytes`) of link `link_id`, read at `tier`.
pub(crate) fn bytes(id: u32, link_id: u32, metric: &str, tier: pb::Tier) -> pb::SeriesDescriptor {
    pb::SeriesDescriptor {
        id,
        metric: metric.into(),
        kind: pb::SeriesKind::Counter as i32,
        link_id,
        tier: tier as i32,
        ..Default::default()
    }
}
