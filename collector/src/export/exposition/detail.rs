//! The exported view's detail ([`ExportDetail`]): NVLink per GPU or per link ([`super::apply_nvlink_detail`]),
//! a link's named counters per family or per name ([`apply_counter_detail`]), a node's CPU as its total or per
//! core ([`apply_cpu_detail`]), the GPU families as a summary or in full ([`apply_gpu_detail`]).
//! [`apply_export_detail`] applies them all to the store's snapshot before it is
//! written (`/metrics`) or sent (remote write, which renders through the same [`super::Exposition`]), so both
//! export the same series. The store, the findings and `/api` keep every link, name and core.
//!
//! Summing a family's counters: each part is a raw counter, so the sum only grows while none of them resets;
//! a reset of one part is a reset of the sum to `rate()`, as a part's reset was before. A counter name first
//! seen after the link's others (an agent that starts reading one later) raises the sum by its whole value at
//! once: `counter_detail = "name"` avoids that for agents whose counter sets change.

use std::sync::Arc;

use commwatch_model::SeriesKind;

use super::nvlink::apply_nvlink_detail;
use crate::config::{CounterDetail, CpuDetail, GpuDetail, NvlinkDetail};
use crate::export::names::{link_counter_family, summed_counter_family};
use crate::store::{LinkSnapshot, NodeSnapshot, SeriesKey, SeriesSnapshot};

/// A series' agent labels, in order.
type Labels = Vec<(String, String)>;

/// The agent's metric name of the node's CPU utilisation (the total without labels, a core with `cpu`).
const CPU_METRIC: &str = "cpu_utilization_ratio";

/// The agent's PCIe series of a GPU, each with the series of its maximum (a hardware constant).
const PCIE_WITH_MAX: [(&str, &str); 2] = [
    ("gpu_pcie_link_gen", "gpu_pcie_link_gen_max"),
    ("gpu_pcie_link_width", "gpu_pcie_link_width_max"),
];
/// The agent's GPU NVLink rates (GPM): with the GPU summary, the GPU's NVLink links' rates say it.
const GPU_NVLINK_RATES: [&str; 2] = [
    "gpu_nvlink_tx_bytes_per_second",
    "gpu_nvlink_rx_bytes_per_second",
];

/// How finely the store's view is exported (`nvlink_detail`, `counter_detail`, `cpu_detail`, `gpu_detail`); the
/// default is the fleet's: per GPU, per family, the total, the GPU summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportDetail {
    pub nvlink: NvlinkDetail,
    pub counter: CounterDetail,
    pub cpu: CpuDetail,
    pub gpu: GpuDetail,
}

impl ExportDetail {
    /// Every link, counter name and core.
    pub fn full() -> ExportDetail {
        ExportDetail {
            nvlink: NvlinkDetail::Link,
            counter: CounterDetail::Name,
            cpu: CpuDetail::Core,
            gpu: GpuDetail::Full,
        }
    }
}

/// Turns the store's view into the exported one for `detail`: NVLink first (a GPU's folded links then have
/// their counters summed per family like any link), then the counters, then the CPU.
pub fn apply_export_detail(nodes: &mut [NodeSnapshot], detail: ExportDetail) {
    apply_nvlink_detail(nodes, detail.nvlink);
    apply_counter_detail(nodes, detail.counter);
    apply_cpu_detail(nodes, detail.cpu);
    apply_gpu_detail(nodes, detail.gpu);
}

/// With [`CounterDetail::Family`], every link's counters of a family that carries the `counter` label
/// ([`crate::export::names::NAMED_COUNTER_FAMILIES`]) become one counter per family and agent labels, named
/// after the family ([`summed_counter_family`]): the values summed, the newest time, at the place of the
/// first. The link's other series stay as they are, in their order. [`CounterDetail::Name`] changes nothing.
pub fn apply_counter_detail(nodes: &mut [NodeSnapshot], detail: CounterDetail) {
    if detail == CounterDetail::Name {
        return;
    }
    let mut scratch = SumScratch::default();
    for l in nodes.iter_mut().flat_map(|n| n.links.iter_mut()) {
        sum_per_family(l, &mut scratch);
    }
}

/// What [`sum_per_family`] reuses from one link to the next.
#[derive(Default)]
struct SumScratch {
    /// The family each of the link's series is summed into ([`summed_family`]).
    families: Vec<Option<&'static str>>,
    /// The positions of the sums made.
    sums: Vec<usize>,
    /// The counter name at each position of the links seen before and the family it is summed into: links of
    /// one kind carry the same names in one order, so a name is mostly looked up once per node, not per link.
    names: Vec<(String, Option<&'static str>)>,
}

impl SumScratch {
    /// [`summed_family`] of `s`, the `j`-th series of its link.
    fn family(&mut self, j: usize, s: &SeriesSnapshot) -> Option<&'static str> {
        if !matches!(s.kind, SeriesKind::Counter { .. }) {
            return None;
        }
        let metric = s.key.metric.as_str();
        match self.names.get_mut(j) {
            Some((name, family)) if name == metric => *family,
            Some((name, family)) => {
                name.clear();
                name.push_str(metric);
                *family = summed_family(s);
                *family
            }
            None => {
                let family = summed_family(s);
                self.names.push((metric.to_string(), family));
                family
            }
        }
    }
}

/// The family a link series is summed into, if it is a counter of a family with the `counter` label.
fn summed_family(s: &SeriesSnapshot) -> Option<&'static str> {
    if !matches!(s.kind, SeriesKind::Counter { .. })
        || summed_counter_family(&s.key.metric).is_some()
    {
        return None;
    }
    match link_counter_family(&s.key.metric).exported() {
        (family, true) => Some(family),
        (_, false) => None,
    }
}

/// Sums `l`'s counters per family and agent labels in place, as [`apply_counter_detail`] says.
fn sum_per_family(l: &mut LinkSnapshot, scratch: &mut SumScratch) {
    let mut families = std::mem::take(&mut scratch.families);
    families.clear();
    for (j, s) in l.series.iter().enumerate() {
        families.push(scratch.family(j, s));
    }
    if let Some(first) = families.iter().position(Option::is_some) {
        scratch.sums.clear();
        sum_from(&mut l.series, &families, first, &mut scratch.sums);
    }
    scratch.families = families;
}

/// The summing of [`sum_per_family`] from the first counter summed (`first`), `families[i]` the family of
/// `series[i]`; `sums` empty, filled with the positions of the sums made.
fn sum_from(
    series: &mut Vec<SeriesSnapshot>,
    families: &[Option<&'static str>],
    first: usize,
    sums: &mut Vec<usize>,
) {
    // Compacted as `Vec::retain` does: `series[..kept]` holds what stays, in order; a counter summed into an
    // earlier sum is left behind and cut off at the end.
    let mut kept = first;
    for i in first..series.len() {
        let Some(family) = families.get(i).copied().flatten() else {
            series.swap(kept, i);
            kept += 1;
            continue;
        };
        let same = |j: &usize| {
            let k = &series[*j].key;
            k.metric == family && k.labels == series[i].key.labels
        };
        match sums.iter().copied().find(same) {
            Some(j) => {
                let (value, at) = (series[i].value, series[i].timestamp_unix_ns);
                let sum = &mut series[j];
                sum.value += value;
                sum.timestamp_unix_ns = sum.timestamp_unix_ns.max(at);
            }
            None => {
                let s = &mut series[i];
                s.key = Arc::new(SeriesKey {
                    link: s.key.link.clone(),
                    metric: family.to_string(),
                    labels: s.key.labels.clone(),
                });
                series.swap(kept, i);
                sums.push(kept);
                kept += 1;
            }
        }
    }
    series.truncate(kept);
}

/// With [`CpuDetail::Total`], a node's per-core CPU series (those with a `cpu` label) are left out; the total
/// (no labels) stays. [`CpuDetail::Core`] changes nothing.
pub fn apply_cpu_detail(nodes: &mut [NodeSnapshot], detail: CpuDetail) {
    if detail == CpuDetail::Core {
        return;
    }
    for n in nodes {
        n.series.retain(|s| {
            s.key.metric != CPU_METRIC || !s.key.labels.iter().any(|(k, _)| k == "cpu")
        });
    }
}

/// With [`GpuDetail::Summary`], a GPU's PCIe maxima become the `max` label of its current PCIe generation and
/// width (same agent labels; the value as an integer where it is one) and their own series are left out, and
/// so are the GPU's NVLink rates ([`GPU_NVLINK_RATES`]). A current value without a known maximum, or with a
/// `max` label of its own, is left as it is. [`GpuDetail::Full`] changes nothing.
pub fn apply_gpu_detail(nodes: &mut [NodeSnapshot], detail: GpuDetail) {
    if detail == GpuDetail::Full {
        return;
    }
    for n in nodes {
        let left_out =
            |m: &str| PCIE_WITH_MAX.iter().any(|p| p.1 == m) || GPU_NVLINK_RATES.contains(&m);
        if !n.series.iter().any(|s| left_out(&s.key.metric)) {
            continue;
        }
        // (current series' name, agent labels, maximum as a label value); the last of equal keys counts.
        let maxima: Vec<(&str, Labels, String)> = n
            .series
            .iter()
            .filter_map(|s| {
                let (current, _) = PCIE_WITH_MAX.iter().find(|p| p.1 == s.key.metric)?;
                Some((*current, s.key.labels.clone(), label_number(s.value)))
            })
            .collect();
        n.series.retain(|s| !left_out(&s.key.metric));
        for s in &mut n.series {
            let m = s.key.metric.as_str();
            let Some((_, _, max)) = maxima
                .iter()
                .rev()
                .find(|(current, labels, _)| *current == m && *labels == s.key.labels)
            else {
                continue;
            };
            if !s.key.labels.iter().any(|(k, _)| k == "max") {
                let mut key = SeriesKey::clone(&s.key);
                key.labels.push(("max".to_string(), max.clone()));
                s.key = Arc::new(key);
            }
        }
    }
}

/// A label value for a gauge's value: `5` for 5.0, else as Rust prints the number.
fn label_number(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commwatch_model::{Endpoint, Link, LinkClass, LinkKey, LinkRole};

    const COUNTER: SeriesKind = SeriesKind::Counter {
        max_value: u64::MAX,
    };

    fn series(
        metric: &str,
        kind: SeriesKind,
        labels: &[(&str, &str)],
        v: f64,
        at: i64,
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
            value: v,
            timestamp_unix_ns: at,
        }
    }

    fn port() -> LinkSnapshot {
        LinkSnapshot {
            link: Arc::new(Link {
                key: LinkKey::new(LinkClass::Infiniband, "mlx5_0", "1"),
                endpoint: Endpoint::HcaPort,
                role: LinkRole::Fabric,
                capacity_bytes_per_second: Some(50e9),
                state: "ACTIVE".into(),
                attributes: Default::default(),
                gpu: None,
                link: None,
            }),
            tx_bytes_total: Some(7),
            rx_bytes_total: Some(8),
            tx_bytes_per_second: None,
            rx_bytes_per_second: None,
            series: vec![
                series("port_xmit_packets", COUNTER, &[], 100.0, 1),
                series("symbol_errors", COUNTER, &[], 2.0, 5),
                series("np_cnp_sent", COUNTER, &[], 3.0, 1),
                series("link_downed", COUNTER, &[], 1.0, 9),
                series("symbol_errors", COUNTER, &[("lane", "1")], 4.0, 1),
                series("multicast_xmit_packets", COUNTER, &[], 6.0, 1),
                series("port_rcv_errors_ratio", SeriesKind::Gauge, &[], 0.5, 1),
                series("unicast_xmit_packets", COUNTER, &[], 10.0, 3),
            ],
        }
    }

    fn node() -> NodeSnapshot {
        NodeSnapshot {
            name: "n1".into(),
            agent_version: "t".into(),
            connected: true,
            last_seen_unix_ns: 42,
            agent_dropped_batches_total: 0,
            links: vec![port()],
            series: vec![
                series(CPU_METRIC, SeriesKind::Gauge, &[], 0.5, 1),
                series(CPU_METRIC, SeriesKind::Gauge, &[("cpu", "0")], 0.25, 1),
                series("memory_used_bytes", SeriesKind::Gauge, &[], 1.0, 1),
                series(CPU_METRIC, SeriesKind::Gauge, &[("cpu", "1")], 0.75, 1),
                series(
                    "gpu_pcie_link_gen",
                    SeriesKind::Gauge,
                    &[("gpu", "0")],
                    4.0,
                    1,
                ),
                series(
                    "gpu_pcie_link_gen_max",
                    SeriesKind::Gauge,
                    &[("gpu", "0")],
                    5.0,
                    1,
                ),
                series(
                    "gpu_pcie_link_width",
                    SeriesKind::Gauge,
                    &[("gpu", "0")],
                    16.0,
                    1,
                ),
                series(
                    "gpu_pcie_link_width",
                    SeriesKind::Gauge,
                    &[("gpu", "1")],
                    8.0,
                    1,
                ),
                series(
                    "gpu_pcie_link_width_max",
                    SeriesKind::Gauge,
                    &[("gpu", "0")],
                    16.0,
                    1,
                ),
                series(
                    "gpu_nvlink_tx_bytes_per_second",
                    SeriesKind::Gauge,
                    &[("gpu", "0")],
                    1e9,
                    1,
                ),
                series(
                    "gpu_power_watts",
                    SeriesKind::Gauge,
                    &[("gpu", "0")],
                    300.5,
                    1,
                ),
            ],
            jobs: Default::default(),
            blind: Default::default(),
        }
    }

    fn shown(l: &LinkSnapshot) -> Vec<(String, usize, f64, i64)> {
        l.series
            .iter()
            .map(|s| {
                (
                    s.key.metric.clone(),
                    s.key.labels.len(),
                    s.value,
                    s.timestamp_unix_ns,
                )
            })
            .collect()
    }

    #[test]
    fn per_family_sums_each_family_per_agent_labels() {
        let mut nodes = vec![node()];
        apply_counter_detail(&mut nodes, CounterDetail::Family);
        let want = [
            ("port_xmit_packets", 0, 100.0, 1),
            ("commwatch_link_errors_total", 0, 3.0, 9),
            ("commwatch_link_congestion_total", 0, 3.0, 1),
            ("commwatch_link_errors_total", 1, 4.0, 1),
            ("commwatch_link_events_total", 0, 16.0, 3),
            ("port_rcv_errors_ratio", 0, 0.5, 1),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|&(m, n, v, t)| (m.to_string(), n, v, t))
            .collect();
        assert_eq!(shown(&nodes[0].links[0]), want);
        // Applied twice: the sums are left as they are.
        apply_counter_detail(&mut nodes, CounterDetail::Family);
        assert_eq!(shown(&nodes[0].links[0]), want);
    }

    #[test]
    fn a_link_with_other_names_than_the_link_before_is_summed_as_alone() {
        let (a, mut b, mut c) = (port(), port(), port());
        b.series.reverse();
        // The name the link before had at this position, but a gauge: not summed.
        c.series[1].kind = SeriesKind::Gauge;
        let alone = |l: &LinkSnapshot| {
            let mut n = vec![NodeSnapshot {
                links: vec![l.clone()],
                ..node()
            }];
            apply_counter_detail(&mut n, CounterDetail::Family);
            shown(&n[0].links[0])
        };
        let mut nodes = vec![NodeSnapshot {
            links: vec![a.clone(), b.clone(), a.clone(), c.clone()],
            ..node()
        }];
        apply_counter_detail(&mut nodes, CounterDetail::Family);
        let links = &nodes[0].links;
        assert_eq!(shown(&links[0]), alone(&a));
        assert_eq!(shown(&links[1]), alone(&b));
        assert_eq!(shown(&links[2]), alone(&a));
        assert_eq!(shown(&links[3]), alone(&c));
        assert_ne!(alone(&a), alone(&b));
        assert_ne!(alone(&a), alone(&c));
    }

    #[test]
    fn per_name_and_per_core_change_nothing() {
        let mut nodes = vec![node()];
        apply_counter_detail(&mut nodes, CounterDetail::Name);
        apply_cpu_detail(&mut nodes, CpuDetail::Core);
        assert_eq!(shown(&nodes[0].links[0]), shown(&port()));
        assert_eq!(nodes[0].series.len(), 11);
    }

    #[test]
    fn gpu_summary_labels_the_pcie_maxima_and_leaves_out_the_nvlink_rates() {
        let mut nodes = vec![node()];
        apply_gpu_detail(&mut nodes, GpuDetail::Full);
        assert_eq!(nodes[0].series.len(), 11);
        apply_gpu_detail(&mut nodes, GpuDetail::Summary);
        type Shown<'a> = (&'a str, Vec<(&'a str, &'a str)>, f64);
        let left: Vec<Shown<'_>> = nodes[0]
            .series
            .iter()
            .filter(|s| s.key.metric.starts_with("gpu_"))
            .map(|s| {
                let labels = s.key.labels.iter().map(|(k, v)| (k.as_str(), v.as_str()));
                (s.key.metric.as_str(), labels.collect(), s.value)
            })
            .collect();
        assert_eq!(
            left,
            [
                ("gpu_pcie_link_gen", vec![("gpu", "0"), ("max", "5")], 4.0),
                (
                    "gpu_pcie_link_width",
                    vec![("gpu", "0"), ("max", "16")],
                    16.0
                ),
                // No maximum known for GPU 1: as it was.
                ("gpu_pcie_link_width", vec![("gpu", "1")], 8.0),
                ("gpu_power_watts", vec![("gpu", "0")], 300.5),
            ]
        );
        assert_eq!(label_number(2.5), "2.5");
        assert_eq!(label_number(f64::NAN), "NaN");
    }

    #[test]
    fn total_keeps_the_total_and_other_series() {
        let mut nodes = vec![node()];
        apply_cpu_detail(&mut nodes, CpuDetail::Total);
        let left: Vec<(&str, usize)> = nodes[0]
            .series
            .iter()
            .map(|s| (s.key.metric.as_str(), s.key.labels.len()))
            .collect();
        assert_eq!(left[..2], [(CPU_METRIC, 0), ("memory_used_bytes", 0)]);
        assert_eq!(left.len(), 9);
    }

    #[test]
    fn the_default_is_the_fleets_and_full_is_everything() {
        let d = ExportDetail::default();
        assert_eq!(
            (d.nvlink, d.counter, d.cpu),
            (NvlinkDetail::Gpu, CounterDetail::Family, CpuDetail::Total)
        );
        assert_eq!(d.gpu, GpuDetail::Summary);
        let mut nodes = vec![node()];
        apply_export_detail(&mut nodes, ExportDetail::full());
        assert_eq!(shown(&nodes[0].links[0]), shown(&port()));
        assert_eq!(nodes[0].series.len(), 11);
    }
}
