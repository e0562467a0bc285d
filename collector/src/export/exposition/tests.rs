//! The writer against the reference encoder, byte for byte: hand-made stores with every tricky case, random
//! stores, and a real store through [`Exposition::render`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use commwatch_model::clock::unix_now_ns;
use commwatch_model::{Endpoint, Link, LinkClass, LinkKey, LinkRole, SeriesKind, Tier};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::TextEncoder;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{
    apply_export_detail, apply_nvlink_detail, reference, write_exposition, ExportDetail,
    Exposition, Gathered, NvlinkDetail, SampleRef, StoreDescs,
};
use crate::config::{CounterDetail, CpuDetail, GpuDetail};
use crate::export::names;
use crate::store::{
    Batch, Hello, Inventory, JobList, LinkInfo, LinkSnapshot, NodeSnapshot, SeriesDesc, SeriesKey,
    SeriesSnapshot, Store, StoreMemory,
};
use crate::telemetry::Health;

/// Fixed families behind the store's descriptors, for a registry.
struct Fixed {
    descs: StoreDescs,
    fams: Vec<MetricFamily>,
}

impl Collector for Fixed {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.fams.clone()
    }
}

/// The text of the previous path: the store's families collected into a fresh health registry, gathered
/// and encoded by `TextEncoder`.
fn reference_text(nodes: &[NodeSnapshot], memory: Option<&StoreMemory>) -> String {
    let health = Health::new().expect("health");
    health
        .registry
        .register(Box::new(Fixed {
            descs: StoreDescs::new().expect("descs"),
            fams: reference::store_families(nodes, memory),
        }))
        .expect("register");
    TextEncoder::new()
        .encode_to_string(&health.registry.gather())
        .expect("encode")
}

fn writer_text(nodes: &[NodeSnapshot], memory: Option<&StoreMemory>) -> String {
    let health = Health::new().expect("health");
    let mut out = String::new();
    write_exposition(&health.registry.gather(), nodes, memory, &mut out).expect("write");
    out
}

fn series(metric: &str, kind: SeriesKind, labels: &[(&str, &str)], value: f64) -> SeriesSnapshot {
    SeriesSnapshot {
        key: Arc::new(SeriesKey {
            link: None,
            metric: metric.to_string(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }),
        kind,
        value,
        timestamp_unix_ns: 0,
    }
}

const COUNTER: SeriesKind = SeriesKind::Counter {
    max_value: u64::MAX,
};

#[allow(clippy::too_many_arguments)]
fn link(
    class: LinkClass,
    device: &str,
    port: &str,
    gpu: Option<&str>,
    link: Option<&str>,
    state: &str,
    tx: Option<u64>,
    series: Vec<SeriesSnapshot>,
) -> LinkSnapshot {
    LinkSnapshot {
        link: Arc::new(Link {
            key: LinkKey::new(class, device, port),
            endpoint: Endpoint::legacy(class, device, port),
            role: LinkRole::Fabric,
            capacity_bytes_per_second: Some(25e9),
            state: state.to_string(),
            attributes: Default::default(),
            gpu: gpu.map(str::to_string),
            link: link.map(str::to_string),
        }),
        tx_bytes_total: tx,
        rx_bytes_total: tx.map(|v| v / 2),
        tx_bytes_per_second: tx.map(|v| v as f64 / 3.0),
        rx_bytes_per_second: None,
        series,
    }
}

fn node(name: &str, links: Vec<LinkSnapshot>, series: Vec<SeriesSnapshot>) -> NodeSnapshot {
    NodeSnapshot {
        name: name.to_string(),
        agent_version: "t".into(),
        connected: true,
        last_seen_unix_ns: 1_712_345_678_123_456_789,
        agent_dropped_batches_total: 3,
        links,
        series,
        jobs: Arc::new(JobList::default()),
        blind: Default::default(),
    }
}

/// Labels with quotes, backslashes, newlines, UTF-8 and empty values; NVLink links with and without
/// `gpu`/`link`; GPU series; agent names mapping to one family (the first wins); nodes whose links sort
/// differently from their inventory order; special values.
fn tricky_nodes() -> Vec<NodeSnapshot> {
    let counters = |tag: &str| {
        vec![
            series("tx_packets", COUNTER, &[], 10.0),
            // Same family and labels as tx_packets: dropped.
            series("port_xmit_packets", COUNTER, &[], 11.0),
            series("symbol_errors", COUNTER, &[("lane", "0")], 1.0),
            series("symbol_errors", COUNTER, &[("lane", "a\"b\\c\nd")], 2.0),
            series("np_cnp_sent", COUNTER, &[], f64::NAN),
            series("port_xmit_wait", COUNTER, &[], 1e300),
            series("xmit_wait", COUNTER, &[], 5.0),
            series("weird \"counter\"\\", COUNTER, &[("tag", tag)], -0.0),
            series("tx_bytes", COUNTER, &[], 18_446_744_073_709_551_615.0),
            series("link_gauge", SeriesKind::Gauge, &[], 0.5),
        ]
    };
    vec![
        node(
            "gpu-node \"α\"\\01\n",
            vec![
                link(
                    LinkClass::Infiniband,
                    "mlx5_10",
                    "1",
                    None,
                    None,
                    "4: ACTIVE",
                    Some(1 << 40),
                    counters("ü"),
                ),
                link(
                    LinkClass::Infiniband,
                    "mlx5_2",
                    "1",
                    None,
                    None,
                    "DOWN",
                    None,
                    counters(""),
                ),
                link(
                    LinkClass::Nvlink,
                    "nvidia0",
                    "",
                    Some("0"),
                    Some("11"),
                    "up",
                    Some(7),
                    counters("nv"),
                ),
                link(
                    LinkClass::Nvlink,
                    "nvidia0",
                    "",
                    Some("0"),
                    Some("2"),
                    "",
                    Some(9_007_199_254_740_993),
                    vec![],
                ),
                link(
                    LinkClass::Nvlink,
                    "nvidia1",
                    "x\"y",
                    None,
                    None,
                    "INACTIVE",
                    None,
                    vec![],
                ),
                link(
                    LinkClass::Ethernet,
                    "eth0",
                    "",
                    None,
                    None,
                    "LinkUp",
                    Some(0),
                    vec![],
                ),
            ],
            vec![
                series("cpu_utilization_ratio", SeriesKind::Gauge, &[], 0.25),
                series(
                    "cpu_utilization_ratio",
                    SeriesKind::Gauge,
                    &[("cpu", "10")],
                    0.1,
                ),
                series(
                    "cpu_utilization_ratio",
                    SeriesKind::Gauge,
                    &[("cpu", "2")],
                    f64::INFINITY,
                ),
                // Same family and labels again: dropped.
                series("cpu_utilization_ratio", SeriesKind::Gauge, &[], 0.75),
                // A counter of a gauge's name: not exported.
                series("memory_used_bytes", COUNTER, &[], 1.0),
                series("memory_used_bytes", SeriesKind::Gauge, &[], 1.5e9),
                series("memory_total_bytes", SeriesKind::Gauge, &[], 2e9),
                series(
                    "gpu_utilization_ratio",
                    SeriesKind::Gauge,
                    &[("gpu", "1")],
                    0.5,
                ),
                series(
                    "gpu_utilization_ratio",
                    SeriesKind::Gauge,
                    &[("gpu", "0")],
                    f64::NEG_INFINITY,
                ),
                series(
                    "gpu_power_watts",
                    SeriesKind::Gauge,
                    &[("gpu", "0"), ("uuid", "GPU-\\\"\n")],
                    312.5,
                ),
                series("gpu_pcie_replay_errors", COUNTER, &[("gpu", "")], 4.0),
                series("not_exported", SeriesKind::Gauge, &[], 1.0),
            ],
        ),
        node("", vec![], vec![]),
        node(
            "n2",
            vec![
                link(
                    LinkClass::Roce,
                    "mlx5_0",
                    "1",
                    Some("ignored"),
                    None,
                    "DOWN",
                    Some(5),
                    counters("n2"),
                ),
                // The same labels again (ties keep the snapshot's order; `state` decides link up).
                link(
                    LinkClass::Roce,
                    "mlx5_0",
                    "1",
                    None,
                    None,
                    "ACTIVE",
                    Some(6),
                    counters("n2"),
                ),
            ],
            vec![series(
                "gpu_sm_clock_hz",
                SeriesKind::Gauge,
                &[("gpu", "0")],
                1.41e9,
            )],
        ),
    ]
}

fn memory() -> StoreMemory {
    StoreMemory {
        nodes: 3,
        series: 42,
        samples: 1_000_000,
        sample_bytes: 5_000_000,
        bytes: 9_000_000,
    }
}

/// The text a gzip stream decompresses to.
fn gunzip(z: &[u8]) -> String {
    use std::io::Read as _;
    let mut text = String::new();
    flate2::read::GzDecoder::new(z)
        .read_to_string(&mut text)
        .expect("a whole gzip stream of UTF-8");
    text
}

#[test]
fn writer_matches_gather_and_text_encoder_byte_for_byte() {
    let mut nodes = tricky_nodes();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let old = reference_text(&nodes, Some(&memory()));
    let new = writer_text(&nodes, Some(&memory()));
    assert!(old.contains(r#"lane="a\"b\\c\nd""#), "{old}");
    assert!(old.contains(r#",gpu="0",link="11","#), "{old}");
    assert!(old.contains("commwatch_gpu_power_watts{"), "{old}");
    assert!(
        old.contains("commwatch_collector_store_bytes 9000000\n"),
        "{old}"
    );
    assert!(
        old.contains("commwatch_collector_store_sample_bytes 5000000\n"),
        "{old}"
    );
    assert!(old.contains("commwatch_collector_batches_total{"), "{old}");
    assert_eq!(old.matches("port_xmit_packets").count(), 0, "{old}");
    assert_eq!(new, old);
    // Nodes not sorted by name (or a name twice): the writer falls back to sorting whole families.
    let mut nodes = tricky_nodes();
    nodes.push(tricky_nodes().remove(2));
    nodes.reverse();
    assert_eq!(writer_text(&nodes, None), reference_text(&nodes, None));
    assert_eq!(writer_text(&[], None), reference_text(&[], None));
}

fn pick<'a>(rng: &mut StdRng, pool: &[&'a str]) -> &'a str {
    pool[rng.random_range(0..pool.len())]
}

const TRICKY: &[&str] = &[
    "",
    "0",
    "1",
    "10",
    "2",
    "a",
    "a\"b",
    "\\",
    "back\\slash",
    "new\nline",
    "\"",
    "ü∂ñ",
    "z",
    "\\\"\n",
    "mlx5_1",
    "mlx5_10",
    "mlx5_2",
];

fn random_value(rng: &mut StdRng) -> f64 {
    match rng.random_range(0..8) {
        0 => f64::from_bits(rng.random()),
        1 => *[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0]
            .get(rng.random_range(0..5))
            .unwrap_or(&0.0),
        2 => rng.random::<f64>(),
        _ => rng.random_range(0..1u64 << 40) as f64,
    }
}

/// A link of random class, role and tricky names, as the store could hold it.
fn random_link(rng: &mut StdRng) -> Link {
    let classes = [
        LinkClass::Infiniband,
        LinkClass::Roce,
        LinkClass::Ethernet,
        LinkClass::Nvlink,
        LinkClass::Unknown,
    ];
    let roles = [LinkRole::Fabric, LinkRole::Management, LinkRole::Unknown];
    let opt = |rng: &mut StdRng| rng.random_bool(0.7).then(|| pick(rng, TRICKY).to_string());
    // Drawn in the order the fields are listed, so a seed gives the same links as before.
    let class = classes[rng.random_range(0..classes.len())];
    let (device, port) = (pick(rng, TRICKY), pick(rng, TRICKY));
    let role = roles[rng.random_range(0..roles.len())];
    let (gpu, link) = (opt(rng), opt(rng));
    Link {
        key: LinkKey::new(class, device, port),
        endpoint: Endpoint::legacy(class, device, port),
        role,
        capacity_bytes_per_second: rng.random_bool(0.5).then(|| random_value(rng)),
        state: pick(rng, &["ACTIVE", "INACTIVE", "up", "DOWN", "", "a\"b"]).to_string(),
        attributes: Default::default(),
        gpu,
        link,
    }
}

fn random_series(rng: &mut StdRng, metrics: &[&str]) -> SeriesSnapshot {
    let labels: Vec<(String, String)> = (0..rng.random_range(0..3))
        .map(|_| {
            (
                pick(rng, &["cpu", "gpu", "lane", "uuid"]).to_string(),
                pick(rng, TRICKY).to_string(),
            )
        })
        .collect();
    SeriesSnapshot {
        key: Arc::new(SeriesKey {
            link: None,
            metric: pick(rng, metrics).to_string(),
            labels,
        }),
        kind: if rng.random_bool(0.5) {
            SeriesKind::Gauge
        } else {
            COUNTER
        },
        value: random_value(rng),
        timestamp_unix_ns: 0,
    }
}

fn random_nodes(rng: &mut StdRng, sorted: bool) -> Vec<NodeSnapshot> {
    const NODE_METRICS: &[&str] = &[
        "cpu_utilization_ratio",
        "memory_used_bytes",
        "memory_total_bytes",
        "gpu_utilization_ratio",
        "gpu_power_watts",
        "gpu_pcie_replay_errors",
        "gpu_pcie_link_gen",
        "gpu_pcie_link_gen_max",
        "gpu_nvlink_tx_bytes_per_second",
        "unexported",
    ];
    const LINK_METRICS: &[&str] = &[
        "tx_packets",
        "port_xmit_packets",
        "rx_packets",
        "symbol_errors",
        "link_downed",
        "port_xmit_wait",
        "xmit_wait",
        "np_cnp_sent",
        "out_of_sequence",
        "tx_bytes",
        "rx_bytes",
        "rx_dropped",
        "odd\"name\\",
    ];
    let mut nodes: Vec<NodeSnapshot> = (0..rng.random_range(0..6))
        .map(|_| {
            let links = (0..rng.random_range(0..5))
                .map(|_| LinkSnapshot {
                    link: Arc::new(random_link(rng)),
                    tx_bytes_total: rng.random_bool(0.7).then(|| rng.random()),
                    rx_bytes_total: rng.random_bool(0.7).then(|| rng.random_range(0..1000)),
                    tx_bytes_per_second: rng.random_bool(0.5).then(|| random_value(rng)),
                    rx_bytes_per_second: rng.random_bool(0.5).then(|| random_value(rng)),
                    series: (0..rng.random_range(0..12))
                        .map(|_| random_series(rng, LINK_METRICS))
                        .collect(),
                })
                .collect();
            let series = (0..rng.random_range(0..12))
                .map(|_| random_series(rng, NODE_METRICS))
                .collect();
            NodeSnapshot {
                name: pick(rng, TRICKY).to_string(),
                agent_version: String::new(),
                connected: rng.random_bool(0.5),
                last_seen_unix_ns: rng.random(),
                agent_dropped_batches_total: rng.random(),
                links,
                series,
                jobs: Arc::new(JobList::default()),
                blind: Default::default(),
            }
        })
        .collect();
    if sorted {
        // As `Store::snapshot` returns them: sorted by name, each name once.
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        nodes.dedup_by(|a, b| a.name == b.name);
    }
    nodes
}

#[test]
fn writer_matches_the_reference_on_random_stores() {
    let mut rng = StdRng::seed_from_u64(0xC0FFEE);
    for round in 0..600 {
        let nodes = random_nodes(&mut rng, round % 3 != 0);
        let memory = rng.random_bool(0.5).then(memory);
        assert_eq!(
            writer_text(&nodes, memory.as_ref()),
            reference_text(&nodes, memory.as_ref()),
            "round {round}"
        );
    }
}

/// The view with a GPU's NVLinks folded into one (fewer labels than a link's, between links of other classes
/// and, when an agent sends NVLinks without numbers, next to links of the same class): the same text.
#[test]
fn folded_nvlinks_match_the_reference() {
    for detail in [NvlinkDetail::Gpu, NvlinkDetail::Link] {
        let mut nodes = tricky_nodes();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        apply_nvlink_detail(&mut nodes, detail);
        let old = reference_text(&nodes, Some(&memory()));
        assert_eq!(
            old.contains(r#",gpu="0",link="11","#),
            detail == NvlinkDetail::Link,
            "{old}"
        );
        assert!(old.contains("commwatch_gpu_nvlinks_up{"), "{old}");
        assert_eq!(writer_text(&nodes, Some(&memory())), old);
    }
    let mut rng = StdRng::seed_from_u64(0xF01D);
    for round in 0..300 {
        let mut nodes = random_nodes(&mut rng, round % 3 != 0);
        // Some links kept whole next to the folded ones: the agent's NVLinks without a number.
        let unfolded: Vec<Vec<LinkSnapshot>> = nodes
            .iter()
            .map(|n| {
                n.links
                    .iter()
                    .filter(|l| l.link.key.class == LinkClass::Nvlink && rng.random_bool(0.3))
                    .cloned()
                    .collect()
            })
            .collect();
        apply_nvlink_detail(&mut nodes, NvlinkDetail::Gpu);
        for (n, extra) in nodes.iter_mut().zip(unfolded) {
            n.links.extend(extra);
        }
        assert_eq!(
            writer_text(&nodes, None),
            reference_text(&nodes, None),
            "round {round}"
        );
    }
}

/// The view with a link's named counters summed per family and the CPU total only (the default detail), and
/// with every name and core: the same text as the reference, and the `counter` and `cpu` labels only with
/// the full detail.
#[test]
fn summed_counters_and_cpu_total_match_the_reference() {
    for detail in [ExportDetail::default(), ExportDetail::full()] {
        let mut nodes = tricky_nodes();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        apply_export_detail(&mut nodes, detail);
        let old = reference_text(&nodes, Some(&memory()));
        let full = detail == ExportDetail::full();
        assert_eq!(old.contains(",counter=\""), full, "{old}");
        assert_eq!(old.contains(",cpu=\""), full, "{old}");
        assert!(
            old.contains("commwatch_node_cpu_utilization_ratio{node="),
            "{old}"
        );
        if !full {
            // symbol_errors of lane 0 is alone in its family and labels: 1.
            assert!(
                old.contains(r#"port="1",role="fabric",lane="0"} 1"#),
                "{old}"
            );
        }
        assert_eq!(writer_text(&nodes, Some(&memory())), old);
    }
    let mut rng = StdRng::seed_from_u64(0xC0DE);
    for round in 0..300 {
        let mut nodes = random_nodes(&mut rng, round % 3 != 0);
        let detail = ExportDetail {
            nvlink: if round % 2 == 0 {
                NvlinkDetail::Gpu
            } else {
                NvlinkDetail::Link
            },
            counter: if round % 5 == 4 {
                CounterDetail::Name
            } else {
                CounterDetail::Family
            },
            cpu: if round % 7 == 6 {
                CpuDetail::Core
            } else {
                CpuDetail::Total
            },
            gpu: if round % 3 == 2 {
                GpuDetail::Full
            } else {
                GpuDetail::Summary
            },
        };
        apply_export_detail(&mut nodes, detail);
        assert_eq!(
            writer_text(&nodes, None),
            reference_text(&nodes, None),
            "round {round}"
        );
    }
}

/// Through a real store and `Exposition::render`, against the previous collector registered beside the
/// health metrics.
#[test]
fn render_matches_the_previous_registry_path() {
    let store = Arc::new(Store::new(
        std::time::Duration::from_secs(600),
        std::time::Duration::from_secs(600),
        crate::Limits::default(),
    ));
    let now = unix_now_ns();
    let desc = |id: u32, metric: &str, kind: SeriesKind, link_id: u32, labels: &[(&str, &str)]| {
        SeriesDesc {
            id,
            metric: metric.to_string(),
            kind: Some(kind),
            link_id,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            tier: Some(Tier::Fast),
        }
    };
    for (i, name) in ["node-b", "node-a \"q\"\\", "node-c\n"]
        .into_iter()
        .enumerate()
    {
        let hello = Hello {
            node: name.to_string(),
            agent_version: "t".into(),
            boot_id: "b".into(),
            instance_id: 1,
            inventory: Inventory {
                links: vec![
                    LinkInfo {
                        id: 1,
                        link: Link {
                            key: LinkKey::new(LinkClass::Infiniband, "mlx5_10", "1"),
                            endpoint: Endpoint::HcaPort,
                            role: LinkRole::Fabric,
                            capacity_bytes_per_second: Some(25e9),
                            state: "ACTIVE".into(),
                            attributes: Default::default(),
                            gpu: None,
                            link: None,
                        },
                    },
                    LinkInfo {
                        id: 2,
                        link: Link {
                            key: LinkKey::new(LinkClass::Nvlink, "nvidia0", ""),
                            endpoint: Endpoint::GpuLink,
                            role: LinkRole::Fabric,
                            capacity_bytes_per_second: None,
                            state: "Active".into(),
                            attributes: Default::default(),
                            gpu: Some("0".into()),
                            link: Some("1\"".into()),
                        },
                    },
                ],
                series: vec![
                    desc(1, "tx_bytes", COUNTER, 1, &[]),
                    desc(2, "symbol_errors", COUNTER, 1, &[("lane", "a\\b")]),
                    desc(3, "tx_packets", COUNTER, 2, &[]),
                    desc(4, "port_xmit_packets", COUNTER, 2, &[]),
                    desc(
                        5,
                        "gpu_utilization_ratio",
                        SeriesKind::Gauge,
                        0,
                        &[("gpu", "0")],
                    ),
                    desc(6, "cpu_utilization_ratio", SeriesKind::Gauge, 0, &[]),
                    desc(7, "rx_bytes", COUNTER, 2, &[]),
                ],
                refused: Vec::new(),
            },
            fast_period_ms: 50,
            slow_period_ms: 1000,
            blind: Vec::new(),
        };
        let out = store.hello(&hello, now, None).expect("hello");
        let mut scratch = Vec::new();
        let ticks = [now - 2_000_000_000, now - 1_000_000_000];
        let mut batch = Batch {
            seq: 1,
            timestamps_unix_ns: ticks.to_vec(),
            tick_lengths: vec![7, 7],
            series_ids: vec![],
            values: vec![],
            dropped_batches_total: i as u64,
            markers: vec![],
            invalid_markers: 0,
            collectives: vec![],
            invalid_collectives: vec![],
        };
        for t in 0..2u64 {
            for id in 1..=7u32 {
                batch.series_ids.push(id);
                batch.values.push(if id == 5 || id == 6 {
                    (0.125 * (t + 1) as f64).to_bits()
                } else {
                    t * 1_000_003 + u64::from(id)
                });
            }
        }
        out.node
            .lock()
            .apply_batch(&batch, now, &mut scratch)
            .expect("apply");
    }
    let old_health = Health::new().expect("health");
    old_health
        .registry
        .register(Box::new(
            reference::StoreCollector::new(store.clone()).expect("collector"),
        ))
        .expect("register");
    let old = TextEncoder::new()
        .encode_to_string(&old_health.registry.gather())
        .expect("encode");
    let health = Health::new().expect("health");
    health
        .registry
        .register(Box::new(StoreDescs::new().expect("descs")))
        .expect("register");
    let exposition = Exposition::new(store.clone());
    let new = exposition.render(&health).expect("render");
    assert!(
        old.contains("commwatch_link_transmit_bytes_per_second{"),
        "{old}"
    );
    assert!(old.contains(r#"node="node-a \"q\"\\""#), "{old}");
    assert_eq!(new, old);
    // The second scrape starts from a buffer of the first one's size, and says the same (but for the
    // scrape histogram, which now holds the first scrape).
    assert!(exposition.last_len.load(Ordering::Relaxed) == new.len());
    let again = exposition.render(&health).expect("render");
    let strip = |t: &str| {
        t.lines()
            .filter(|l| !l.contains(names::COLLECTOR_SCRAPE_SECONDS))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(&again), strip(&old));
    // Through the kept buffer: the same text, twice from one buffer; while a body holds it, a buffer of its own.
    let body_text = |b: &Bytes| strip(std::str::from_utf8(b).expect("utf-8"));
    let first = exposition.render_plain(&health).expect("render");
    let at = first.as_ptr();
    assert_eq!(body_text(&first), strip(&old));
    drop(first);
    let held = exposition.render_plain(&health).expect("render");
    assert_eq!(held.as_ptr(), at);
    let own = exposition.render_plain(&health).expect("render");
    assert_ne!(own.as_ptr(), at);
    assert_eq!(body_text(&own), strip(&old));
    drop((held, own));
    let again = exposition.render_plain(&health).expect("render");
    assert_eq!(again.as_ptr(), at);
    drop(again);
    // Gzip-compressed in pieces, the same text: in pieces of 256 KiB (the whole text in one) and of 1,000 bytes
    // (dozens), twice each from the kept buffers.
    assert!(old.len() > 20 * 1000, "{} bytes", old.len());
    for piece in [super::PIECE, 1000, 1000, super::PIECE] {
        let z = exposition.render_gzip_in(&health, piece).expect("render");
        let text = gunzip(&z);
        assert_eq!(strip(&text), strip(&old), "in pieces of {piece}");
        assert_eq!(exposition.last_len.load(Ordering::Relaxed), text.len());
        assert_eq!(exposition.last_gzip_len.load(Ordering::Relaxed), z.len());
        let piece_room = exposition.piece.lock().capacity();
        assert!(piece_room <= 2 * piece.max(64 * 1024), "{piece_room}");
    }
    // Each gather recorded its families' sizes for the next one's room.
    let sizes = exposition.sizes.lock().clone();
    let up = super::FAMILIES
        .iter()
        .position(|f| f.name == names::LINK_UP)
        .expect("link up");
    let up_lines = new
        .lines()
        .filter(|l| l.starts_with(&format!("{}{{", names::LINK_UP)))
        .count();
    assert!(up_lines > 0);
    assert_eq!(sizes[up], up_lines);
    // A family of the store's names cannot be registered by anyone else.
    let clash = prometheus::IntGauge::new(names::LINK_UP, "x").expect("gauge");
    assert!(health.registry.register(Box::new(clash)).is_err());
}

/// Registry families of every type the typed stage expands, with tricky label values: a counter, a gauge, a
/// histogram from the registry (its `+Inf` bucket added by the text), one with its own `+Inf` bound, a summary.
fn registry_families() -> Vec<MetricFamily> {
    use prometheus::proto::{Bucket, Metric, MetricType, Quantile, Summary};
    let registry = prometheus::Registry::new();
    let counter =
        prometheus::CounterVec::new(prometheus::Opts::new("a_total", "A \\ counter.\n"), &["k"])
            .expect("counter");
    counter.with_label_values(&["a\"b\\c\nd"]).inc_by(3.0);
    counter.with_label_values(&[""]).inc();
    let gauge = prometheus::Gauge::new("b_gauge", "A gauge.").expect("gauge");
    gauge.set(-0.0);
    let histogram = prometheus::HistogramVec::new(
        prometheus::HistogramOpts::new("c_seconds", "A histogram.").buckets(vec![0.005, 0.1, 1.5]),
        &["path"],
    )
    .expect("histogram");
    for v in [0.001, 0.2, 7.0] {
        histogram.with_label_values(&["/m\"x"]).observe(v);
    }
    registry.register(Box::new(counter)).expect("register");
    registry.register(Box::new(gauge)).expect("register");
    registry.register(Box::new(histogram)).expect("register");
    let mut fams = registry.gather();
    let family = |name: &str, kind: MetricType, m: Metric| {
        let mut mf = MetricFamily::default();
        mf.set_name(name.to_string());
        mf.set_help(format!("{name} by hand."));
        mf.set_field_type(kind);
        mf.set_metric(vec![m]);
        mf
    };
    let mut h = prometheus::proto::Histogram::default();
    let bucket = |bound: f64, count: u64| {
        let mut b = Bucket::default();
        b.set_upper_bound(bound);
        b.set_cumulative_count(count);
        b
    };
    h.set_bucket(vec![bucket(0.25, 1), bucket(f64::INFINITY, 2)]);
    h.set_sample_count(2);
    h.set_sample_sum(f64::NAN);
    let mut m = Metric::default();
    m.set_histogram(h);
    fams.push(family("d_inf", MetricType::HISTOGRAM, m));
    let mut s = Summary::default();
    s.set_quantile(
        [(0.5, 1.25), (0.99, f64::INFINITY)]
            .map(|(q, v)| {
                let mut x = Quantile::default();
                x.set_quantile(q);
                x.set_value(v);
                x
            })
            .to_vec(),
    );
    s.set_sample_count(9);
    s.set_sample_sum(12.5);
    let mut m = Metric::default();
    m.set_summary(s);
    fams.push(family("e_summary", MetricType::SUMMARY, m));
    fams
}

/// The typed stage against its own text read back: the same samples, names, labels (in order, unescaped) and
/// values, with a name filter and without; and remote write's requests made from the typed samples (as it
/// sends them) equal those made from the parsed text, byte for byte.
fn assert_typed_is_text(
    registered: &[MetricFamily],
    nodes: &[NodeSnapshot],
    memory: Option<&StoreMemory>,
    what: &str,
) {
    use crate::remote_write::encode::encode_requests;
    use crate::remote_write::parse::parse_exposition;
    use crate::remote_write::series::{GatherSeries, Previous};
    let g = Gathered::new(registered, nodes, memory);
    let mut text = String::new();
    g.write_text(&mut text).expect("text");
    let external = [("shard".to_string(), "s\"0".to_string())];
    for filtered in [false, true] {
        let keep =
            |n: &str| !filtered || !(n.ends_with("_count") || n.starts_with("commwatch_link_u"));
        let mut typed = Vec::new();
        let mut series = GatherSeries::new(&external, 17, Previous::default());
        g.for_each_sample(&mut |n| keep(n), &mut |s| {
            let labels: Vec<(String, String)> = s
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            typed.push((s.name.to_string(), labels, s.value));
            series.push(s);
        });
        let (parsed, errors) = parse_exposition(&text, keep);
        assert_eq!(errors, [], "{what}");
        assert_eq!(typed.len(), parsed.len(), "{what}");
        for ((name, labels, value), p) in typed.iter().zip(&parsed) {
            assert_eq!((name, labels), (&p.name, &p.labels), "{what}");
            let same = value.to_bits() == p.value.to_bits() || (value.is_nan() && p.value.is_nan());
            assert!(same, "{what}: {name} {value:?} vs {:?}", p.value);
        }
        let mut from_text = GatherSeries::new(&external, 17, Previous::default());
        for p in &parsed {
            let labels: Vec<(&str, &str)> = p
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            from_text.push(SampleRef {
                name: &p.name,
                labels: &labels,
                value: p.value,
            });
        }
        let (a, b) = (series.finish(), from_text.finish());
        assert_eq!((a.invalid, b.invalid), (0, 0), "{what}");
        let expected = encode_requests(b.series, 50).expect("encode");
        let (requests, previous) = a.encode(50).expect("encode");
        assert_eq!(requests, expected, "{what}");
        // The next gather of the same store takes its labels back from this one's: the same requests.
        let mut again = GatherSeries::new(&external, 17, previous);
        g.for_each_sample(&mut |n| keep(n), &mut |s| again.push(s));
        let (requests, _) = again.finish().encode(50).expect("encode");
        assert_eq!(requests, expected, "{what}: the next gather");
    }
}

#[test]
fn typed_samples_are_the_text_samples() {
    let registered = registry_families();
    let mut nodes = tricky_nodes();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    assert_typed_is_text(&registered, &nodes, Some(&memory()), "tricky");
    for detail in [NvlinkDetail::Gpu, NvlinkDetail::Link] {
        let mut nodes = nodes.clone();
        apply_nvlink_detail(&mut nodes, detail);
        assert_typed_is_text(&registered, &nodes, None, "nvlink detail");
    }
    assert_typed_is_text(&[], &[], None, "empty");
    let mut rng = StdRng::seed_from_u64(0xFEED);
    for round in 0..300 {
        let nodes = random_nodes(&mut rng, round % 3 != 0);
        let memory = rng.random_bool(0.5).then(memory);
        assert_typed_is_text(
            &registered,
            &nodes,
            memory.as_ref(),
            &format!("round {round}"),
        );
    }
}

#[test]
fn a_gather_sized_from_the_previous_one_has_its_room_and_the_same_text() {
    let registered = registry_families();
    let mut rng = StdRng::seed_from_u64(0x5123);
    let mut nodes = tricky_nodes();
    nodes.extend(random_nodes(&mut rng, true));
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let text = |g: &Gathered<'_>| {
        let mut out = String::new();
        g.write_text(&mut out).expect("text");
        out
    };
    let plain = Gathered::new(&registered, &nodes, Some(&memory()));
    let sizes = plain.sizes();
    assert_eq!(sizes.len(), super::FAMILIES.len());
    assert!(sizes.iter().filter(|&&n| n > 1).count() > 3, "{sizes:?}");
    let sized = Gathered::sized(
        &registered,
        &nodes,
        Some(&memory()),
        &sizes,
        Default::default(),
    );
    assert_eq!(sized.sizes(), sizes);
    assert_eq!(text(&sized), text(&plain));
    // Sizes of another gather (too small, too large, too few) change the room, never the samples.
    let other = [1, 1_000, 0];
    assert_eq!(
        text(&Gathered::sized(
            &registered,
            &nodes,
            Some(&memory()),
            &other,
            Default::default(),
        )),
        text(&plain)
    );
}

#[test]
fn a_gather_in_kept_buffers_has_the_fresh_text_and_keeps_its_room() {
    let registered = registry_families();
    let mut rng = StdRng::seed_from_u64(0xB0F);
    let text = |g: &Gathered<'_>| {
        let mut out = String::new();
        g.write_text(&mut out).expect("text");
        out
    };
    let mut buffers = super::samples::SampleBuffers::default();
    for round in 0..8 {
        let mut nodes = random_nodes(&mut rng, round % 3 != 0);
        if round % 2 == 0 {
            nodes.extend(tricky_nodes());
        }
        let fresh = text(&Gathered::new(&registered, &nodes, Some(&memory())));
        let g = Gathered::sized(&registered, &nodes, Some(&memory()), &[], buffers);
        assert_eq!(text(&g), fresh, "round {round}");
        buffers = g.into_buffers();
        assert!(buffers.bytes() > 0, "round {round}");
    }
    // The same store again: the room it had is enough.
    let nodes = random_nodes(&mut rng, true);
    let mut room = Vec::new();
    for _ in 0..3 {
        let g = Gathered::sized(&registered, &nodes, None, &[], buffers);
        buffers = g.into_buffers();
        room.push(buffers.bytes());
    }
    assert_eq!(room[1], room[2]);
}

#[test]
fn families_carry_name_help_and_type_in_text_order() {
    use prometheus::proto::MetricType;
    let registered = registry_families();
    let nodes = tricky_nodes();
    let g = Gathered::new(&registered, &nodes, Some(&memory()));
    let families: Vec<(String, String, MetricType)> = g
        .families()
        .map(|f| (f.name().to_string(), f.help().to_string(), f.kind()))
        .collect();
    let mut text = String::new();
    g.write_text(&mut text).expect("text");
    let in_text: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let names: Vec<&str> = families.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(names, in_text);
    assert!(families.contains(&(
        "c_seconds".into(),
        "A histogram.".into(),
        MetricType::HISTOGRAM
    )));
    let up = families
        .iter()
        .find(|f| f.0 == names::LINK_UP)
        .expect("link up");
    assert_eq!(up.2, MetricType::GAUGE);
    assert!(up.1.starts_with("1 when the link state is up"), "{}", up.1);
}
