//! The reference encoder: the store's families built the slow way, as `MetricFamily` values with one `Metric`
//! and owned `LabelPair`s per series, for a `Registry` to gather and `TextEncoder` to encode (the path
//! `/metrics` took before the writer). The tests compare the writer's text with it byte for byte, and
//! `benches/exposition.rs` times both; the library never serves it.
//!
//! Compiled twice from this one file: as a test module of the library, and into the bench with `#[path]`. It
//! names the library's items by `crate::` paths, which the bench makes resolve by importing the library's
//! `export`, `ingest` and `store` modules at its root; so it uses only their public items.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use commwatch_model::clock::unix_now_ns;
use commwatch_model::SeriesKind;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};

use crate::export::exposition::nvlink::link_labels as link_label_pairs;
use crate::export::exposition::{apply_export_detail, ExportDetail, StoreDescs, FAMILIES};
use crate::export::names::{self, link_counter_family, LinkCounterFamily};
use crate::store::{LinkSnapshot, NodeSnapshot, Store, StoreMemory};

/// The store's families as a `prometheus` collector (as registered before the writer served `/metrics`), with
/// the default detail applied to the store's view as `Exposition::new` applies it.
pub struct StoreCollector {
    store: Arc<Store>,
    descs: StoreDescs,
}

impl StoreCollector {
    pub fn new(store: Arc<Store>) -> Result<StoreCollector, prometheus::Error> {
        Ok(StoreCollector {
            store,
            descs: StoreDescs::new()?,
        })
    }
}

impl Collector for StoreCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut nodes = self.store.snapshot(unix_now_ns());
        apply_export_detail(&mut nodes, ExportDetail::default());
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

/// `node` and the link's labels, in exposition order (the library's own list of them: a GPU's folded NVLinks
/// have fewer).
fn link_labels(node: &str, l: &LinkSnapshot) -> Vec<LabelPair> {
    let mut v = vec![label("node", node)];
    v.extend(
        link_label_pairs(&l.link)
            .pairs()
            .iter()
            .map(|(n, x)| label(n, x)),
    );
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
        add_link(b, &n.name, l);
    }
}

/// Appends one link's metrics.
fn add_link(b: &mut Builder, node: &str, l: &LinkSnapshot) {
    let base = link_labels(node, l);
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
    if let Some(v) = l.link.capacity_bytes_per_second {
        b.add(names::LINK_CAPACITY_BYTES_PER_SECOND, base.clone(), v);
    }
    let mut up = base.clone();
    up.push(label("state", &l.link.state));
    b.add(names::LINK_UP, up, if l.link.is_up() { 1.0 } else { 0.0 });
    let mut seen: HashSet<SeenKey<'_>> = HashSet::new();
    for s in &l.series {
        if !matches!(s.kind, SeriesKind::Counter { .. }) {
            continue;
        }
        let metric = s.key.metric.as_str();
        let summed = names::summed_counter_family(metric);
        let (fam, with_counter) = match link_counter_family(metric) {
            // A family's counters summed (counter_detail = "family"): named after it, no `counter` label.
            _ if summed.is_some() => (summed.unwrap_or_default(), false),
            LinkCounterFamily::TransmitPackets => (names::LINK_TRANSMIT_PACKETS_TOTAL, false),
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

/// The store's metric families for `nodes` (and the size gauges with `memory`), unsorted as a collector
/// returns them.
pub fn store_families(nodes: &[NodeSnapshot], memory: Option<&StoreMemory>) -> Vec<MetricFamily> {
    let mut b = Builder::new();
    for n in nodes {
        add_node(&mut b, n);
    }
    if let Some(m) = memory {
        b.add(names::COLLECTOR_NODES, vec![], m.nodes as f64);
        b.add(names::COLLECTOR_SERIES, vec![], m.series as f64);
        b.add(names::COLLECTOR_STORE_SAMPLES, vec![], m.samples as f64);
        b.add(names::COLLECTOR_STORE_BYTES, vec![], m.bytes as f64);
        b.add(
            names::COLLECTOR_STORE_SAMPLE_BYTES,
            vec![],
            m.sample_bytes as f64,
        );
    }
    b.finish()
}

/// One label pair.
fn label(name: &str, value: &str) -> LabelPair {
    let mut l = LabelPair::default();
    l.set_name(name.to_string());
    l.set_value(value.to_string());
    l
}

/// An empty family with its name, help and type.
fn family(name: &str, help: &str, kind: MetricType) -> MetricFamily {
    let mut mf = MetricFamily::default();
    mf.set_name(name.to_string());
    mf.set_help(help.to_string());
    mf.set_field_type(kind);
    mf
}

/// One sample: a counter value for a `COUNTER` family, a gauge value otherwise.
fn metric(kind: MetricType, labels: Vec<LabelPair>, value: f64) -> Metric {
    let mut m = Metric::default();
    m.set_label(labels);
    if kind == MetricType::COUNTER {
        let mut c = Counter::default();
        c.set_value(value);
        m.set_counter(c);
    } else {
        let mut g = Gauge::default();
        g.set_value(value);
        m.set_gauge(g);
    }
    m
}
