//! `/metrics`: the store's families are written straight into the exposition text at scrape time (bounded work
//! per scrape, nothing per sample on the ingest path). Each node is copied under its own lock
//! ([`Store::snapshot`]) and formatted outside it.
//!
//! [`Exposition::render`] writes the text format 0.0.4 into one buffer sized from the previous scrape: the
//! collector's own families (the health `Registry`: health, steps, findings, jobs; few series) are encoded by
//! the prometheus crate's `TextEncoder`, the store's families (nodes, links, GPUs, store size: hundreds of
//! thousands of series in a large fleet) by [`write_exposition`], which takes label values straight from the
//! snapshot's strings: no `MetricFamily`, no owned label per series. Both sets are interleaved by family name,
//! and within a family the samples are ordered by label count, then by label values, as `Registry::gather`
//! orders them, so the text is byte for byte what `gather` and `TextEncoder` make of the same store (label
//! values escaped as the format requires, values printed as `TextEncoder` prints an `f64`). The previous path
//! is kept in [`reference`]: the tests compare the two, and `benches/exposition.rs` times both.
//!
//! The store's family names are still registered in the health registry ([`StoreDescs`], no samples of its
//! own), so a collector registering a family of the same name is refused at start, as before.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};

use super::health::Health;
use super::names::{self, link_counter_family, LinkCounterFamily};
use crate::ingest::domain::{LinkClass, SeriesKind};
use crate::store::{now_unix_ns, LinkSnapshot, NodeSnapshot, SeriesSnapshot, Store, StoreMemory};

/// Link labels, in exposition order (NVLink adds `gpu` and `link`).
const LINK_LABELS: &[&str] = &["node", "class", "device", "port", "role"];

struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
}

const FAMILIES: &[Family] = &[
    Family {
        name: names::LINK_TRANSMIT_BYTES_TOTAL,
        help: "Bytes transmitted on the link, raw counter as read by the agent.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_RECEIVE_BYTES_TOTAL,
        help: "Bytes received on the link, raw counter as read by the agent.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_TRANSMIT_BYTES_PER_SECOND,
        help: "Transmit rate over the last second of samples (resets and saturation handled).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::LINK_RECEIVE_BYTES_PER_SECOND,
        help: "Receive rate over the last second of samples (resets and saturation handled).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::LINK_CAPACITY_BYTES_PER_SECOND,
        help: "Link capacity per direction.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::LINK_UP,
        help: "1 when the link state is up/active, else 0; the state text is in the state label.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::LINK_TRANSMIT_PACKETS_TOTAL,
        help: "Packets transmitted on the link.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_RECEIVE_PACKETS_TOTAL,
        help: "Packets received on the link.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_ERRORS_TOTAL,
        help: "Error counters of the link, by agent counter name.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_CONGESTION_TOTAL,
        help: "Congestion counters of the link (CNP, ECN, out of sequence).",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_XMIT_WAIT_TICKS_TOTAL,
        help: "Ticks the port had data to send but no credits.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_EVENTS_TOTAL,
        help: "Other counters of the link, by agent counter name.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::NODE_UP,
        help: "1 while the node's agent stream is open, else 0.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::NODE_LAST_SEEN_TIMESTAMP_SECONDS,
        help: "Time of the last message from the node's agent.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::NODE_CPU_UTILIZATION_RATIO,
        help: "CPU utilisation (0..1); per core with the cpu label.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::NODE_MEMORY_USED_BYTES,
        help: "Memory used on the node.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::NODE_MEMORY_TOTAL_BYTES,
        help: "Memory installed on the node.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::NODE_AGENT_DROPPED_BATCHES_TOTAL,
        help: "Batches the agent dropped because its resend buffer overflowed.",
        kind: MetricType::COUNTER,
    },
    // GPU series of the agent's nvml source (`names::gpu_family`); labels `node`, `gpu`.
    Family {
        name: names::GPU_UTILIZATION_RATIO,
        help: "GPU utilisation: share of time a kernel was running (0..1).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_MEMORY_UTILIZATION_RATIO,
        help: "GPU memory controller utilisation (0..1).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_SM_ACTIVITY_RATIO,
        help: "Share of SMs active (0..1).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_MEMORY_USED_BYTES,
        help: "GPU memory in use.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_TRANSMIT_BYTES_PER_SECOND,
        help: "PCIe transmit rate of the GPU.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_RECEIVE_BYTES_PER_SECOND,
        help: "PCIe receive rate of the GPU.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_NVLINK_TRANSMIT_BYTES_PER_SECOND,
        help: "NVLink transmit rate of the GPU, all links.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_NVLINK_RECEIVE_BYTES_PER_SECOND,
        help: "NVLink receive rate of the GPU, all links.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_LINK_GENERATION,
        help: "Current PCIe link generation of the GPU.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_LINK_GENERATION_MAX,
        help: "Maximum PCIe link generation of the GPU.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_LINK_WIDTH,
        help: "Current PCIe link width of the GPU (lanes).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_LINK_WIDTH_MAX,
        help: "Maximum PCIe link width of the GPU (lanes).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_REPLAY_ERRORS_TOTAL,
        help: "PCIe replay errors of the GPU.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::GPU_POWER_WATTS,
        help: "GPU power draw.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_SM_CLOCK_HERTZ,
        help: "GPU SM clock.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::COLLECTOR_NODES,
        help: "Nodes held by the store.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::COLLECTOR_SERIES,
        help: "Series held by the store.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::COLLECTOR_STORE_SAMPLES,
        help: "Samples held in the store's windows.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::COLLECTOR_STORE_BYTES,
        help: "The store's own estimate of its memory use.",
        kind: MetricType::GAUGE,
    },
];

/// Index of the store family `name` in [`FAMILIES`].
fn family_index(name: &str) -> Option<usize> {
    FAMILIES.iter().position(|f| f.name == name)
}

/// The store families' descriptors, registered in the health registry so that it refuses another collector's
/// family of the same name. `collect` yields nothing: [`Exposition::render`] writes these families itself.
pub struct StoreDescs {
    descs: Vec<Desc>,
}

impl StoreDescs {
    pub fn new() -> Result<StoreDescs, prometheus::Error> {
        let descs = FAMILIES
            .iter()
            .map(|f| {
                Desc::new(
                    f.name.to_string(),
                    f.help.to_string(),
                    vec![],
                    HashMap::new(),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StoreDescs { descs })
    }
}

impl Collector for StoreDescs {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        Vec::new()
    }
}

/// Renders `/metrics` for one collector: its store and the length of the previous text (the next buffer's size).
pub struct Exposition {
    store: Arc<Store>,
    last_len: AtomicUsize,
}

impl Exposition {
    pub fn new(store: Arc<Store>) -> Exposition {
        Exposition {
            store,
            last_len: AtomicUsize::new(0),
        }
    }

    /// The whole `/metrics` text (store families and the registry's). CPU-bound: call it off the async
    /// workers (`spawn_blocking`) for large fleets. Observes `scrape_seconds`.
    pub fn render(&self, health: &Health) -> Result<String, prometheus::Error> {
        let started = Instant::now();
        let registered = health.registry.gather();
        let nodes = self.store.snapshot(now_unix_ns());
        let memory = self.store.memory();
        let last = self.last_len.load(Ordering::Relaxed);
        let mut out = String::with_capacity((last + last / 16).max(64 * 1024));
        write_exposition(&registered, &nodes, Some(&memory), &mut out)?;
        self.last_len.store(out.len(), Ordering::Relaxed);
        health
            .scrape_seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(out)
    }
}

/// The `Content-Type` of [`Exposition::render`]'s output.
pub fn content_type() -> String {
    TextEncoder::new().format_type().to_string()
}

/// One sample of a store family. Its labels, in order: `node` and the link's (`class`, `device`, `port`,
/// `role`, and `gpu`, `link` for NVLink), written once per node or link into [`Samples::prefixes`]; then
/// `state` (link up), `counter` (the series' agent name) and the series' own labels, borrowed from the
/// snapshot.
#[derive(Clone, Copy)]
struct Sample<'a> {
    /// `Samples::prefixes[prefix..prefix + prefix_len]`: `{node="…"` and the link's labels, escaped.
    prefix: usize,
    prefix_len: u32,
    /// Number of labels (`gather` orders by it first).
    count: u32,
    /// Rank of the link among the node's links by label values (0 for node-level samples).
    rank: u32,
    /// The `state` label's link (link up).
    state: Option<&'a LinkSnapshot>,
    series: Option<&'a SeriesSnapshot>,
    /// The `counter` label, from `series`.
    counter: bool,
    value: f64,
}

impl<'a> Sample<'a> {
    /// A sample without labels.
    fn bare(value: f64) -> Sample<'a> {
        Sample {
            prefix: 0,
            prefix_len: 0,
            count: 0,
            rank: 0,
            state: None,
            series: None,
            counter: false,
            value,
        }
    }

    /// Label values after `node` and the link's, in exposition order.
    fn tail(self) -> impl Iterator<Item = &'a str> {
        let state = self.state.map(|l| l.state.as_str());
        let counter = self
            .series
            .filter(|_| self.counter)
            .map(|s| s.key.metric.as_str());
        let extra = self
            .series
            .into_iter()
            .flat_map(|s| s.key.labels.iter().map(|(_, v)| v.as_str()));
        state.into_iter().chain(counter).chain(extra)
    }

    /// `Registry::gather`'s order for two samples of one node (or of nodes of one name): label count, then
    /// label values pair by pair (names are not compared). The node is the same; links of one class have as
    /// many labels and links of two classes differ at `class`, so the link's rank decides unless the link
    /// labels are equal, and the tail's values are then compared at the same positions.
    fn same_node_cmp(&self, other: &Sample<'_>) -> std::cmp::Ordering {
        self.count
            .cmp(&other.count)
            .then(self.rank.cmp(&other.rank))
            .then_with(|| self.tail().cmp(other.tail()))
    }

    fn write(&self, name: &str, prefixes: &str, out: &mut String) {
        out.push_str(name);
        if self.count > 0 {
            let end = self.prefix + self.prefix_len as usize;
            out.push_str(prefixes.get(self.prefix..end).unwrap_or_default());
            if let Some(l) = self.state {
                push_label(out, ',', "state", &l.state);
            }
            if let Some(s) = self.series {
                if self.counter {
                    push_label(out, ',', "counter", &s.key.metric);
                }
                for (k, v) in &s.key.labels {
                    push_label(out, ',', k, v);
                }
            }
            out.push('}');
        }
        out.push(' ');
        push_value(out, self.value);
        out.push('\n');
    }
}

/// Appends `sep`, then `name="value"` with the value escaped.
fn push_label(out: &mut String, sep: char, name: &str, value: &str) {
    out.push(sep);
    out.push_str(name);
    out.push_str("=\"");
    push_escaped(out, value, true);
    out.push('"');
}

/// `gpu` and `link` of an NVLink link.
fn nvlink_values(l: &LinkSnapshot) -> Option<[&str; 2]> {
    (l.class == LinkClass::Nvlink).then(|| {
        [
            l.gpu.as_deref().unwrap_or(""),
            l.link.as_deref().unwrap_or(""),
        ]
    })
}

/// The link's label values after `node`, in exposition order, compared pair by pair.
fn link_values_cmp(a: &LinkSnapshot, b: &LinkSnapshot) -> std::cmp::Ordering {
    a.class
        .as_str()
        .cmp(b.class.as_str())
        .then_with(|| a.device.cmp(&b.device))
        .then_with(|| a.port.cmp(&b.port))
        .then_with(|| a.role.as_str().cmp(b.role.as_str()))
        .then_with(|| nvlink_values(a).cmp(&nvlink_values(b)))
}

fn label_count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// `value` as `TextEncoder` prints it (`f64`'s `Display`: `NaN`, `inf`, `-inf`, `-0`, no exponent). Integers
/// below 2^53 (most counters) are printed by hand: the same digits, without the float formatting.
fn push_value(out: &mut String, value: f64) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if value.fract() == 0.0 && value.abs() < EXACT && !(value == 0.0 && value.is_sign_negative()) {
        let n = value as i64;
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut m = n.unsigned_abs();
        loop {
            i -= 1;
            digits[i] = b'0' + (m % 10) as u8;
            m /= 10;
            if m == 0 {
                break;
            }
        }
        if n < 0 {
            out.push('-');
        }
        out.push_str(std::str::from_utf8(&digits[i..]).unwrap_or_default());
    } else {
        let _ = write!(out, "{value}");
    }
}

/// Text format 0.0.4 escaping: `\` → `\\`, newline → `\n`, and `"` → `\"` in label values (`quote`).
fn push_escaped(out: &mut String, value: &str, quote: bool) {
    let special = |b: u8| b == b'\\' || b == b'\n' || (quote && b == b'"');
    if !value.bytes().any(special) {
        out.push_str(value);
        return;
    }
    let mut from = 0;
    for (i, b) in value.bytes().enumerate() {
        if special(b) {
            out.push_str(&value[from..i]);
            out.push_str(match b {
                b'\\' => "\\\\",
                b'\n' => "\\n",
                _ => "\\\"",
            });
            from = i + 1;
        }
    }
    out.push_str(&value[from..]);
}

/// Index in [`FAMILIES`] of every family a sample may go to, resolved once per render.
struct Ix {
    node_up: usize,
    last_seen: usize,
    dropped: usize,
    cpu: usize,
    memory_used: usize,
    memory_total: usize,
    tx_total: usize,
    rx_total: usize,
    tx_rate: usize,
    rx_rate: usize,
    capacity: usize,
    up: usize,
    tx_packets: usize,
    rx_packets: usize,
    xmit_wait: usize,
    errors: usize,
    congestion: usize,
    events: usize,
    /// Every family by name (GPU series).
    by_name: HashMap<&'static str, usize>,
}

impl Ix {
    fn new() -> Option<Ix> {
        let by_name: HashMap<&'static str, usize> = FAMILIES
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name, i))
            .collect();
        let ix = |name: &str| by_name.get(name).copied();
        Some(Ix {
            node_up: ix(names::NODE_UP)?,
            last_seen: ix(names::NODE_LAST_SEEN_TIMESTAMP_SECONDS)?,
            dropped: ix(names::NODE_AGENT_DROPPED_BATCHES_TOTAL)?,
            cpu: ix(names::NODE_CPU_UTILIZATION_RATIO)?,
            memory_used: ix(names::NODE_MEMORY_USED_BYTES)?,
            memory_total: ix(names::NODE_MEMORY_TOTAL_BYTES)?,
            tx_total: ix(names::LINK_TRANSMIT_BYTES_TOTAL)?,
            rx_total: ix(names::LINK_RECEIVE_BYTES_TOTAL)?,
            tx_rate: ix(names::LINK_TRANSMIT_BYTES_PER_SECOND)?,
            rx_rate: ix(names::LINK_RECEIVE_BYTES_PER_SECOND)?,
            capacity: ix(names::LINK_CAPACITY_BYTES_PER_SECOND)?,
            up: ix(names::LINK_UP)?,
            tx_packets: ix(names::LINK_TRANSMIT_PACKETS_TOTAL)?,
            rx_packets: ix(names::LINK_RECEIVE_PACKETS_TOTAL)?,
            xmit_wait: ix(names::LINK_XMIT_WAIT_TICKS_TOTAL)?,
            errors: ix(names::LINK_ERRORS_TOTAL)?,
            congestion: ix(names::LINK_CONGESTION_TOTAL)?,
            events: ix(names::LINK_EVENTS_TOTAL)?,
            by_name,
        })
    }

    /// The family of a node-level series, if it is exported.
    fn node_series(&self, s: &SeriesSnapshot) -> Option<usize> {
        match (s.key.metric.as_str(), s.kind) {
            ("cpu_utilization_ratio", SeriesKind::Gauge) => Some(self.cpu),
            ("memory_used_bytes", SeriesKind::Gauge) => Some(self.memory_used),
            ("memory_total_bytes", SeriesKind::Gauge) => Some(self.memory_total),
            // GPU series; other node series are kept in the store for the analysis but not exported.
            (m, _) => names::gpu_family(m).and_then(|f| self.by_name.get(f).copied()),
        }
    }

    /// The family of a link series and whether it carries the `counter` label; `None`: not exported (link
    /// gauges stay in the store for the analysis).
    fn link_series(&self, s: &SeriesSnapshot) -> Option<(usize, bool)> {
        if !matches!(s.kind, SeriesKind::Counter { .. }) {
            return None;
        }
        Some(match link_counter_family(&s.key.metric) {
            LinkCounterFamily::TransmitPackets => (self.tx_packets, false),
            LinkCounterFamily::ReceivePackets => (self.rx_packets, false),
            LinkCounterFamily::XmitWait => (self.xmit_wait, false),
            LinkCounterFamily::Errors => (self.errors, true),
            LinkCounterFamily::Congestion => (self.congestion, true),
            LinkCounterFamily::TransmitBytes
            | LinkCounterFamily::ReceiveBytes
            | LinkCounterFamily::Other => (self.events, true),
        })
    }
}

fn is_up(state: &str) -> bool {
    let s = state.to_ascii_lowercase();
    (s.contains("active") && !s.contains("inactive")) || s == "up" || s.contains("linkup")
}

/// Agent labels of a series.
type Labels<'a> = &'a [(String, String)];

/// Samples of every store family (by index in [`FAMILIES`]), the label prefixes they share, and the scratch
/// `add_group` reuses from one node to the next.
struct Samples<'a> {
    fams: Vec<Vec<Sample<'a>>>,
    /// `{node="…"` and `{node="…",class="…",…` of every node and link, escaped, back to back.
    prefixes: String,
    /// (family, agent labels) already exported for a node.
    node_seen: HashSet<(usize, Labels<'a>)>,
    /// (family, counter label, agent labels) already exported for a link.
    link_seen: HashSet<(usize, &'a str, Labels<'a>)>,
    /// The group's links, sorted by label values, with their rank.
    links: Vec<(&'a LinkSnapshot, u32)>,
}

/// Appends the samples of `group` (nodes of one name; one node from a store), with the previous builder's
/// rules: a node series, or a link counter, whose family and labels were already exported for the node or
/// link is skipped (the first wins: two agent names mapping to one family and label set make no duplicate
/// sample). Links are taken in label order (stable), so that each family's part comes nearly sorted.
fn add_group<'a>(b: &mut Samples<'a>, ix: &Ix, group: &[&'a NodeSnapshot]) {
    let Some(first) = group.first() else {
        return;
    };
    let node_prefix = b.prefixes.len();
    push_label(&mut b.prefixes, '{', "node", &first.name);
    let node_prefix_len = label_count(b.prefixes.len() - node_prefix);
    let node_sample = |value: f64, series: Option<&'a SeriesSnapshot>| Sample {
        prefix: node_prefix,
        prefix_len: node_prefix_len,
        count: label_count(1 + series.map_or(0, |s| s.key.labels.len())),
        series,
        ..Sample::bare(value)
    };
    for n in group {
        b.fams[ix.node_up].push(node_sample(if n.connected { 1.0 } else { 0.0 }, None));
        b.fams[ix.last_seen].push(node_sample(n.last_seen_unix_ns as f64 / 1e9, None));
        b.fams[ix.dropped].push(node_sample(n.agent_dropped_batches_total as f64, None));
        b.node_seen.clear();
        for s in &n.series {
            let Some(fam) = ix.node_series(s) else {
                continue;
            };
            if !b.node_seen.insert((fam, &s.key.labels)) {
                continue;
            }
            b.fams[fam].push(node_sample(s.value, Some(s)));
        }
    }
    b.links.clear();
    b.links
        .extend(group.iter().flat_map(|n| n.links.iter()).map(|l| (l, 0)));
    b.links.sort_by(|x, y| link_values_cmp(x.0, y.0));
    let mut rank = 0u32;
    for i in 1..b.links.len() {
        if link_values_cmp(b.links[i - 1].0, b.links[i].0).is_ne() {
            rank = rank.saturating_add(1);
        }
        b.links[i].1 = rank;
    }
    for &(l, rank) in &b.links {
        let prefix = b.prefixes.len();
        push_label(&mut b.prefixes, '{', "node", &first.name);
        push_label(&mut b.prefixes, ',', "class", l.class.as_str());
        push_label(&mut b.prefixes, ',', "device", &l.device);
        push_label(&mut b.prefixes, ',', "port", &l.port);
        push_label(&mut b.prefixes, ',', "role", l.role.as_str());
        let mut count = 5;
        if l.class == LinkClass::Nvlink {
            push_label(&mut b.prefixes, ',', "gpu", l.gpu.as_deref().unwrap_or(""));
            push_label(
                &mut b.prefixes,
                ',',
                "link",
                l.link.as_deref().unwrap_or(""),
            );
            count = 7;
        }
        let sample = Sample {
            prefix,
            prefix_len: label_count(b.prefixes.len() - prefix),
            count,
            rank,
            ..Sample::bare(0.0)
        };
        if let Some(v) = l.tx_bytes_total {
            b.fams[ix.tx_total].push(Sample {
                value: v as f64,
                ..sample
            });
        }
        if let Some(v) = l.rx_bytes_total {
            b.fams[ix.rx_total].push(Sample {
                value: v as f64,
                ..sample
            });
        }
        if let Some(value) = l.tx_bytes_per_second {
            b.fams[ix.tx_rate].push(Sample { value, ..sample });
        }
        if let Some(value) = l.rx_bytes_per_second {
            b.fams[ix.rx_rate].push(Sample { value, ..sample });
        }
        if let Some(value) = l.capacity_bytes_per_second {
            b.fams[ix.capacity].push(Sample { value, ..sample });
        }
        b.fams[ix.up].push(Sample {
            count: count + 1,
            state: Some(l),
            value: if is_up(&l.state) { 1.0 } else { 0.0 },
            ..sample
        });
        b.link_seen.clear();
        for s in &l.series {
            let Some((fam, with_counter)) = ix.link_series(s) else {
                continue;
            };
            let counter = if with_counter {
                s.key.metric.as_str()
            } else {
                ""
            };
            if !b.link_seen.insert((fam, counter, &s.key.labels)) {
                continue;
            }
            b.fams[fam].push(Sample {
                count: label_count(count as usize + usize::from(with_counter) + s.key.labels.len()),
                series: Some(s),
                counter: with_counter,
                value: s.value,
                ..sample
            });
        }
    }
}

/// Writes the exposition: the families of `registered` (as `Registry::gather` returns them: sorted by name) and
/// the store's families for `nodes` (and its size gauges with `memory`), interleaved by family name; each
/// family's samples in `gather`'s order. Byte for byte what `gather` and `TextEncoder` would write with the
/// store's families collected into the registry.
pub fn write_exposition(
    registered: &[MetricFamily],
    nodes: &[NodeSnapshot],
    memory: Option<&StoreMemory>,
    out: &mut String,
) -> Result<(), prometheus::Error> {
    let mut b = Samples {
        fams: vec![Vec::new(); FAMILIES.len()],
        prefixes: String::new(),
        node_seen: HashSet::new(),
        link_seen: HashSet::new(),
        links: Vec::new(),
    };
    if let Some(ix) = Ix::new() {
        // Within a family, `gather` orders samples by label count, then label values; the first label is
        // `node`. So: nodes by name (a store's come sorted, each name once), each node's samples sorted, then
        // each family stably by label count.
        let mut order: Vec<&NodeSnapshot> = nodes.iter().collect();
        if !nodes.windows(2).all(|w| w[0].name < w[1].name) {
            order.sort_by(|x, y| x.name.cmp(&y.name));
        }
        let mut starts = vec![0usize; FAMILIES.len()];
        for group in order.chunk_by(|x, y| x.name == y.name) {
            for (s, f) in starts.iter_mut().zip(&b.fams) {
                *s = f.len();
            }
            add_group(&mut b, &ix, group);
            for (s, f) in starts.iter().zip(b.fams.iter_mut()) {
                if let Some(part) = f.get_mut(*s..) {
                    part.sort_by(|x, y| x.same_node_cmp(y));
                }
            }
        }
        for f in &mut b.fams {
            f.sort_by_key(|s| s.count);
        }
    }
    if let Some(m) = memory {
        for (name, value) in [
            (names::COLLECTOR_NODES, m.nodes),
            (names::COLLECTOR_SERIES, m.series),
            (names::COLLECTOR_STORE_SAMPLES, m.samples),
            (names::COLLECTOR_STORE_BYTES, m.bytes),
        ] {
            if let Some(i) = family_index(name) {
                b.fams[i].push(Sample::bare(value as f64));
            }
        }
    }
    let mut order: Vec<usize> = (0..FAMILIES.len())
        .filter(|&i| !b.fams[i].is_empty())
        .collect();
    order.sort_by_key(|&i| FAMILIES[i].name);
    let encoder = TextEncoder::new();
    let mut registered = registered.iter().peekable();
    for i in order {
        let f = &FAMILIES[i];
        while let Some(mf) = registered.next_if(|mf| mf.name() < f.name) {
            encoder.encode_utf8(std::slice::from_ref(mf), out)?;
        }
        out.push_str("# HELP ");
        out.push_str(f.name);
        out.push(' ');
        push_escaped(out, f.help, false);
        out.push_str("\n# TYPE ");
        out.push_str(f.name);
        out.push(' ');
        out.push_str(&format!("{:?}", f.kind).to_lowercase());
        out.push('\n');
        for s in &b.fams[i] {
            s.write(f.name, &b.prefixes, out);
        }
    }
    for mf in registered {
        encoder.encode_utf8(std::slice::from_ref(mf), out)?;
    }
    Ok(())
}

/// The previous path, `MetricFamily` values gathered by a `Registry` and encoded by `TextEncoder`: one
/// `Metric` and owned `LabelPair`s per series. Not used to serve `/metrics`; kept as the reference the tests
/// compare [`write_exposition`] with and that `benches/exposition.rs` times.
#[doc(hidden)]
pub mod reference {
    use std::collections::{HashMap, HashSet};
    use std::sync::Arc;

    use prometheus::core::{Collector, Desc};
    use prometheus::proto::{LabelPair, MetricFamily};

    use super::{is_up, FAMILIES, LINK_LABELS};
    use crate::export::names::{self, link_counter_family, LinkCounterFamily};
    use crate::export::proto::{family, label, metric};
    use crate::ingest::domain::{LinkClass, SeriesKind};
    use crate::store::{now_unix_ns, LinkSnapshot, NodeSnapshot, Store, StoreMemory};

    /// The store's families as a `prometheus` collector (as registered before [`super::Exposition`]).
    pub struct StoreCollector {
        store: Arc<Store>,
        descs: super::StoreDescs,
    }

    impl StoreCollector {
        pub fn new(store: Arc<Store>) -> Result<StoreCollector, prometheus::Error> {
            Ok(StoreCollector {
                store,
                descs: super::StoreDescs::new()?,
            })
        }
    }

    impl Collector for StoreCollector {
        fn desc(&self) -> Vec<&Desc> {
            self.descs.desc()
        }

        fn collect(&self) -> Vec<MetricFamily> {
            let nodes = self.store.snapshot(now_unix_ns());
            store_families(&nodes, Some(&self.store.memory()))
        }
    }

    /// Families being built, keyed by name.
    struct Builder {
        fams: HashMap<&'static str, MetricFamily>,
    }

    impl Builder {
        fn new() -> Builder {
            let fams = FAMILIES
                .iter()
                .map(|f| (f.name, family(f.name, f.help, f.kind)))
                .collect();
            Builder { fams }
        }

        fn add(&mut self, name: &'static str, labels: Vec<LabelPair>, value: f64) {
            let Some(mf) = self.fams.get_mut(name) else {
                return;
            };
            let m = metric(mf.get_field_type(), labels, value);
            mf.mut_metric().push(m);
        }

        fn finish(self) -> Vec<MetricFamily> {
            self.fams
                .into_values()
                .filter(|f| !f.get_metric().is_empty())
                .collect()
        }
    }

    fn link_labels(node: &str, l: &LinkSnapshot) -> Vec<LabelPair> {
        let mut v: Vec<LabelPair> = LINK_LABELS
            .iter()
            .zip([node, l.class.as_str(), &l.device, &l.port, l.role.as_str()])
            .map(|(n, v)| label(n, v))
            .collect();
        if l.class == LinkClass::Nvlink {
            v.push(label("gpu", l.gpu.as_deref().unwrap_or("")));
            v.push(label("link", l.link.as_deref().unwrap_or("")));
        }
        v
    }

    /// (family, counter label, agent labels) already exported for a link.
    type SeenKey<'a> = (&'static str, &'a str, &'a [(String, String)]);

    /// Appends one node's metrics.
    fn add_node(b: &mut Builder, n: &NodeSnapshot) {
        let node = [label("node", &n.name)];
        b.add(
            names::NODE_UP,
            node.to_vec(),
            if n.connected { 1.0 } else { 0.0 },
        );
        b.add(
            names::NODE_LAST_SEEN_TIMESTAMP_SECONDS,
            node.to_vec(),
            n.last_seen_unix_ns as f64 / 1e9,
        );
        b.add(
            names::NODE_AGENT_DROPPED_BATCHES_TOTAL,
            node.to_vec(),
            n.agent_dropped_batches_total as f64,
        );
        let mut seen: HashSet<(&'static str, Vec<(String, String)>)> = HashSet::new();
        for s in &n.series {
            let fam = match (s.key.metric.as_str(), s.kind) {
                ("cpu_utilization_ratio", SeriesKind::Gauge) => names::NODE_CPU_UTILIZATION_RATIO,
                ("memory_used_bytes", SeriesKind::Gauge) => names::NODE_MEMORY_USED_BYTES,
                ("memory_total_bytes", SeriesKind::Gauge) => names::NODE_MEMORY_TOTAL_BYTES,
                (m, _) => match names::gpu_family(m) {
                    Some(f) => f,
                    None => continue,
                },
            };
            if !seen.insert((fam, s.key.labels.clone())) {
                continue;
            }
            let mut labels = node.to_vec();
            labels.extend(s.key.labels.iter().map(|(k, v)| label(k, v)));
            b.add(fam, labels, s.value);
        }
        for l in &n.links {
            let base = link_labels(&n.name, l);
            if let Some(v) = l.tx_bytes_total {
                b.add(names::LINK_TRANSMIT_BYTES_TOTAL, base.clone(), v as f64);
            }
            if let Some(v) = l.rx_bytes_total {
                b.add(names::LINK_RECEIVE_BYTES_TOTAL, base.clone(), v as f64);
            }
            if let Some(v) = l.tx_bytes_per_second {
                b.add(names::LINK_TRANSMIT_BYTES_PER_SECOND, base.clone(), v);
            }
            if let Some(v) = l.rx_bytes_per_second {
                b.add(names::LINK_RECEIVE_BYTES_PER_SECOND, base.clone(), v);
            }
            if let Some(v) = l.capacity_bytes_per_second {
                b.add(names::LINK_CAPACITY_BYTES_PER_SECOND, base.clone(), v);
            }
            let mut up = base.clone();
            up.push(label("state", &l.state));
            b.add(names::LINK_UP, up, if is_up(&l.state) { 1.0 } else { 0.0 });
            let mut seen: HashSet<SeenKey<'_>> = HashSet::new();
            for s in &l.series {
                if !matches!(s.kind, SeriesKind::Counter { .. }) {
                    continue;
                }
                let metric = s.key.metric.as_str();
                let (fam, with_counter) = match link_counter_family(metric) {
                    LinkCounterFamily::TransmitPackets => {
                        (names::LINK_TRANSMIT_PACKETS_TOTAL, false)
                    }
                    LinkCounterFamily::ReceivePackets => (names::LINK_RECEIVE_PACKETS_TOTAL, false),
                    LinkCounterFamily::XmitWait => (names::LINK_XMIT_WAIT_TICKS_TOTAL, false),
                    LinkCounterFamily::Errors => (names::LINK_ERRORS_TOTAL, true),
                    LinkCounterFamily::Congestion => (names::LINK_CONGESTION_TOTAL, true),
                    LinkCounterFamily::TransmitBytes
                    | LinkCounterFamily::ReceiveBytes
                    | LinkCounterFamily::Other => (names::LINK_EVENTS_TOTAL, true),
                };
                if !seen.insert((fam, if with_counter { metric } else { "" }, &s.key.labels)) {
                    continue;
                }
                let mut labels = base.clone();
                if with_counter {
                    labels.push(label("counter", metric));
                }
                labels.extend(s.key.labels.iter().map(|(k, v)| label(k, v)));
                b.add(fam, labels, s.value);
            }
        }
    }

    /// The store's metric families for `nodes` (and the size gauges with `memory`), unsorted as a collector
    /// returns them.
    pub fn store_families(
        nodes: &[NodeSnapshot],
        memory: Option<&StoreMemory>,
    ) -> Vec<MetricFamily> {
        let mut b = Builder::new();
        for n in nodes {
            add_node(&mut b, n);
        }
        if let Some(m) = memory {
            b.add(names::COLLECTOR_NODES, vec![], m.nodes as f64);
            b.add(names::COLLECTOR_SERIES, vec![], m.series as f64);
            b.add(names::COLLECTOR_STORE_SAMPLES, vec![], m.samples as f64);
            b.add(names::COLLECTOR_STORE_BYTES, vec![], m.bytes as f64);
        }
        b.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::domain::{
        Batch, Hello, Inventory, JobList, LinkInfo, LinkKey, LinkRole, SeriesDesc,
    };
    use crate::store::SeriesKey;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn every_gpu_family_is_registered() {
        // An unregistered family is dropped silently.
        for n in names::ALL
            .iter()
            .filter(|n| n.starts_with("commwatch_gpu_"))
        {
            assert!(FAMILIES.iter().any(|f| f.name == *n), "{n} not in FAMILIES");
        }
        assert!(Ix::new().is_some(), "a family of Ix is not in FAMILIES");
    }

    #[test]
    fn link_up_states() {
        assert!(is_up("ACTIVE"));
        assert!(is_up("4: ACTIVE"));
        assert!(is_up("up"));
        assert!(!is_up("DOWN"));
        assert!(!is_up("INACTIVE"));
        assert!(!is_up(""));
    }

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

    fn series(
        metric: &str,
        kind: SeriesKind,
        labels: &[(&str, &str)],
        value: f64,
    ) -> SeriesSnapshot {
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
            class,
            device: device.to_string(),
            port: port.to_string(),
            role: LinkRole::Fabric,
            gpu: gpu.map(str::to_string),
            link: link.map(str::to_string),
            capacity_bytes_per_second: Some(25e9),
            state: state.to_string(),
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

    #[test]
    fn values_print_as_text_encoder_prints_them() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut values = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.1,
            1.5e-7,
            1e300,
            -1e300,
            5e-324,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::MIN,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            9_007_199_254_740_991.0,
            9_007_199_254_740_992.0,
            9_007_199_254_740_994.0,
            -9_007_199_254_740_991.0,
            u64::MAX as f64,
            i64::MIN as f64,
            1_712_345_678.123_456_7,
        ];
        for _ in 0..100_000 {
            values.push(f64::from_bits(rng.random()));
            let shift = rng.random_range(0..64);
            values.push(rng.random_range(0..u64::MAX >> shift) as f64);
            values.push(-(rng.random_range(0..1u64 << 53) as f64));
        }
        let mut out = String::new();
        for v in values {
            out.clear();
            push_value(&mut out, v);
            assert_eq!(out, v.to_string(), "{v:?}");
        }
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
        let classes = [
            LinkClass::Infiniband,
            LinkClass::Roce,
            LinkClass::Ethernet,
            LinkClass::Nvlink,
            LinkClass::Unknown,
        ];
        let roles = [LinkRole::Fabric, LinkRole::Management, LinkRole::Unknown];
        let opt = |rng: &mut StdRng| rng.random_bool(0.7).then(|| pick(rng, TRICKY).to_string());
        let mut nodes: Vec<NodeSnapshot> = (0..rng.random_range(0..6))
            .map(|_| {
                let links = (0..rng.random_range(0..5))
                    .map(|_| LinkSnapshot {
                        class: classes[rng.random_range(0..classes.len())],
                        device: pick(rng, TRICKY).to_string(),
                        port: pick(rng, TRICKY).to_string(),
                        role: roles[rng.random_range(0..roles.len())],
                        gpu: opt(rng),
                        link: opt(rng),
                        capacity_bytes_per_second: rng.random_bool(0.5).then(|| random_value(rng)),
                        state: pick(rng, &["ACTIVE", "INACTIVE", "up", "DOWN", "", "a\"b"])
                            .to_string(),
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

    /// Through a real store and `Exposition::render`, against the previous collector registered beside the
    /// health metrics.
    #[test]
    fn render_matches_the_previous_registry_path() {
        let store = Arc::new(Store::new(
            std::time::Duration::from_secs(600),
            std::time::Duration::from_secs(600),
            crate::Limits::default(),
        ));
        let now = now_unix_ns();
        let desc =
            |id: u32, metric: &str, kind: SeriesKind, link_id: u32, labels: &[(&str, &str)]| {
                SeriesDesc {
                    id,
                    metric: metric.to_string(),
                    kind: Some(kind),
                    link_id,
                    labels: labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    tier: 1,
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
                            key: LinkKey {
                                class: LinkClass::Infiniband,
                                device: "mlx5_10".into(),
                                port: "1".into(),
                            },
                            role: LinkRole::Fabric,
                            capacity_bytes_per_second: Some(25e9),
                            state: "ACTIVE".into(),
                            gpu: None,
                            link: None,
                            attributes: Default::default(),
                        },
                        LinkInfo {
                            id: 2,
                            key: LinkKey {
                                class: LinkClass::Nvlink,
                                device: "nvidia0".into(),
                                port: "".into(),
                            },
                            role: LinkRole::Fabric,
                            capacity_bytes_per_second: None,
                            state: "Active".into(),
                            gpu: Some("0".into()),
                            link: Some("1\"".into()),
                            attributes: Default::default(),
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
                },
                fast_period_ms: 50,
                slow_period_ms: 1000,
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
        // A family of the store's names cannot be registered by anyone else.
        let clash = prometheus::IntGauge::new(names::LINK_UP, "x").expect("gauge");
        assert!(health.registry.register(Box::new(clash)).is_err());
    }

    #[test]
    fn escaping() {
        let mut out = String::new();
        push_escaped(&mut out, "a\\b\"c\nd ü", true);
        assert_eq!(out, r#"a\\b\"c\nd ü"#);
        out.clear();
        push_escaped(&mut out, "a\\b\"c\nd", false);
        assert_eq!(out, r#"a\\b"c\nd"#);
    }
}
