//! The collector's ingest on what a hostile agent sends, without a stream: messages decoded from arbitrary bytes
//! (split at 0xff) — Hellos, inventory updates, batches — applied as a stream applies them to a store with tight
//! limits. Nothing panics; the store never holds more nodes than `max_nodes` nor more series per node than
//! `max_series`; no sample stamped beyond the clock window is held; a link the agent said is gone has no rate;
//! no string the agent sent is held with a control character (they are stored escaped, `\u001b`).
#![no_main]
use std::sync::Arc;
use std::time::Duration;

use commwatch_collector::ingest::direct::DirectAgent;
use commwatch_collector::{Limits, Store};
use commwatch_proto::v1 as pb;
use libfuzzer_sys::fuzz_target;
use prost::Message;

const NOW: i64 = 1_700_000_000_000_000_000;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_series: 64,
        max_nodes: 4,
        max_clock_skew: Duration::from_secs(300),
        ..Limits::default()
    };
    let skew_ns = limits.max_clock_skew.as_nanos() as i64;
    let store = Arc::new(Store::new(
        Duration::from_secs(60),
        Duration::from_secs(60),
        limits.clone(),
    ));
    let mut agent: Option<DirectAgent> = None;
    for chunk in data.split(|b| *b == 0xff) {
        let Ok(msg) = pb::AgentMessage::decode(chunk) else {
            continue;
        };
        match msg.msg {
            Some(pb::agent_message::Msg::Hello(h)) => {
                if let Ok(a) = DirectAgent::hello(store.clone(), h, NOW) {
                    agent = Some(a);
                }
            }
            Some(pb::agent_message::Msg::InventoryUpdate(u)) => {
                if let Some(a) = agent.as_mut() {
                    let _ = a.inventory_update(u, NOW);
                }
            }
            Some(pb::agent_message::Msg::Batch(b)) => {
                if let Some(a) = agent.as_mut() {
                    let _ = a.batch(b, NOW);
                }
            }
            _ => {}
        }
    }
    assert!(store.node_count() <= limits.max_nodes);
    for node in store.snapshot(NOW) {
        let series = node
            .links
            .iter()
            .flat_map(|l| l.series.iter())
            .chain(&node.series);
        for s in series {
            assert!(s.timestamp_unix_ns <= NOW + skew_ns, "{s:?}");
        }
        for l in &node.links {
            if l.link.state == "gone" {
                assert!(l.tx_bytes_per_second.is_none() && l.rx_bytes_per_second.is_none());
            }
        }
    }
    for node in store.snapshot(NOW) {
        no_controls(&node.agent_version);
        node.blind.iter().for_each(|b| no_controls(&b.reason));
        for l in &node.links {
            let link = &l.link;
            for s in [&link.key.device, &link.key.port, &link.state] {
                no_controls(s);
            }
            link.gpu.iter().chain(&link.link).for_each(|s| no_controls(s));
            for (k, v) in &link.attributes {
                no_controls(k);
                no_controls(v);
            }
        }
        for s in node.series.iter().chain(node.links.iter().flat_map(|l| &l.series)) {
            s.key.labels.iter().for_each(|(_, v)| no_controls(v));
        }
        for job in &node.jobs.jobs {
            for r in &job.ranks {
                r.nccl.values().chain(&r.gpus).for_each(|v| no_controls(v));
            }
            for c in &job.conflicts {
                no_controls(&c.value);
                no_controls(&c.reason);
            }
        }
    }
    let m = store.memory();
    assert!(m.series <= limits.max_nodes * limits.max_series);
});

/// A stored string holds no control character (C0, DEL, C1): what an agent sent is escaped at the edge.
fn no_controls(s: &str) {
    assert!(!s.chars().any(char::is_control), "{s:?} was stored raw");
}
