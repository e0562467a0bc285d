//! The NVLink detail of the exported view ([`apply_nvlink_detail`]), applied to the store's snapshot before it
//! is written (`/metrics`) or sent (remote write), and the link labels every exporter writes ([`link_labels`]).
//!
//! Per GPU (`nvlink_detail = "gpu"`, the default), a node's NVLink links of one GPU become one link: labels
//! `class="nvlink"`, `device` (`gpuN`), `role`, `gpu`, with no `port` and no `link`
//! ([`is_gpu_aggregate`]); byte counters, rates, capacities and counter series summed over its links (a sum is
//! known when one of its parts is); up when every link is up, its `state` then the first link's, else the
//! first down link's. Where the agent ships a GPU's NVLink bytes as sums (a link of the GPU with no port and
//! no link number, [`Link::is_gpu_nvlinks`]: its byte counters at the fast rate, the links' at the slow one),
//! the GPU's bytes, rates and capacity are the sums link's alone (never added to its links'), and per link the
//! sums link is left out where the GPU's links carry byte counters of their own. Per link (`"link"`) the links
//! otherwise stay as the agent sent them. Either way each GPU with
//! NVLinks gets the node series `gpu_nvlinks_up` and `gpu_nvlinks` (exported as `commwatch_gpu_nvlinks_up` and
//! `commwatch_gpu_nvlinks`), so a "links up per GPU" panel reads the same in both.

use std::sync::Arc;

use commwatch_model::{Link, LinkClass, LinkKey, SeriesKind};

pub use crate::config::NvlinkDetail;
use crate::store::{LinkSnapshot, NodeSnapshot, SeriesKey, SeriesSnapshot};

/// Agent-style metric names of the per-GPU NVLink counts added to a node's series.
pub const NVLINKS_UP_METRIC: &str = "gpu_nvlinks_up";
pub const NVLINKS_METRIC: &str = "gpu_nvlinks";

/// Turns the store's view into the exported one for `detail`: the NVLink counts per GPU added to every node's
/// series, and with [`NvlinkDetail::Gpu`] every node's NVLink links folded into one link per GPU. Other links
/// and series are left as they are, in their order (the folded GPUs come after the node's other links).
pub fn apply_nvlink_detail(nodes: &mut [NodeSnapshot], detail: NvlinkDetail) {
    for n in nodes {
        if !n
            .links
            .iter()
            .any(|l| l.link.key.class == LinkClass::Nvlink)
        {
            continue;
        }
        add_link_counts(n);
        match detail {
            NvlinkDetail::Gpu => fold_per_gpu(n),
            NvlinkDetail::Link => drop_sums_beside_links(n),
        }
    }
}

/// Whether `link` is a GPU's NVLinks folded into one (it has no link number and no port).
pub fn is_gpu_aggregate(link: &Link) -> bool {
    link.is_gpu_nvlinks()
}

/// The labels of a link after `node`, in exposition order: `class`, `device`, `port`, `role`, and for an
/// NVLink `gpu` and `link`; for a GPU's folded NVLinks ([`is_gpu_aggregate`]) `class`, `device`, `role`,
/// `gpu`.
pub fn link_labels(link: &Link) -> LinkLabels<'_> {
    let class = ("class", link.key.class.as_str());
    let device = ("device", link.key.device.as_str());
    let port = ("port", link.key.port.as_str());
    let role = ("role", link.role.as_str());
    let gpu = ("gpu", link.gpu.as_deref().unwrap_or(""));
    let number = ("link", link.link.as_deref().unwrap_or(""));
    let (pairs, len) = if link.key.class != LinkClass::Nvlink {
        ([class, device, port, role, role, role], 4)
    } else if is_gpu_aggregate(link) {
        ([class, device, role, gpu, gpu, gpu], 4)
    } else {
        ([class, device, port, role, gpu, number], 6)
    };
    LinkLabels { pairs, len }
}

/// A link's labels after `node` ([`link_labels`]): up to six (name, value) pairs.
#[derive(Clone, Copy)]
pub struct LinkLabels<'a> {
    pairs: [(&'static str, &'a str); 6],
    len: usize,
}

impl<'a> LinkLabels<'a> {
    pub fn pairs(&self) -> &[(&'static str, &'a str)] {
        &self.pairs[..self.len]
    }

    /// The values alone, in order.
    pub fn values(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.pairs().iter().map(|(_, v)| *v)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Adds `gpu_nvlinks_up` and `gpu_nvlinks` (labels `gpu`) for every GPU with NVLink links, in the order the
/// GPUs first appear.
fn add_link_counts(n: &mut NodeSnapshot) {
    let mut counts: Vec<(&str, u32, u32)> = Vec::new();
    for l in n
        .links
        .iter()
        .filter(|l| l.link.key.class == LinkClass::Nvlink && !l.link.is_gpu_nvlinks())
    {
        let gpu = l.link.gpu.as_deref().unwrap_or("");
        let i = match counts.iter().position(|c| c.0 == gpu) {
            Some(i) => i,
            None => {
                counts.push((gpu, 0, 0));
                counts.len() - 1
            }
        };
        counts[i].1 += u32::from(l.link.is_up());
        counts[i].2 += 1;
    }
    let at = n.last_seen_unix_ns;
    let added: Vec<SeriesSnapshot> = counts
        .iter()
        .flat_map(|&(gpu, up, all)| {
            [(NVLINKS_UP_METRIC, up), (NVLINKS_METRIC, all)]
                .map(|(metric, v)| gauge(metric, gpu, f64::from(v), at))
        })
        .collect();
    n.series.extend(added);
}

fn gauge(metric: &str, gpu: &str, value: f64, at: i64) -> SeriesSnapshot {
    SeriesSnapshot {
        key: Arc::new(SeriesKey {
            link: None,
            metric: metric.to_string(),
            labels: vec![("gpu".to_string(), gpu.to_string())],
        }),
        kind: SeriesKind::Gauge,
        value,
        timestamp_unix_ns: at,
    }
}

/// The (device, GPU) of each sums link of the node's ([`Link::is_gpu_nvlinks`]).
fn gpus_with_sums(n: &NodeSnapshot) -> Vec<(String, Option<String>)> {
    n.links
        .iter()
        .filter(|l| l.link.is_gpu_nvlinks())
        .map(|l| (l.link.key.device.clone(), l.link.gpu.clone()))
        .collect()
}

/// Per link: leaves out the sums link of each GPU whose links carry byte counters themselves.
fn drop_sums_beside_links(n: &mut NodeSnapshot) {
    let with_sums = gpus_with_sums(n);
    if with_sums.is_empty() {
        return;
    }
    let counted: Vec<(String, Option<String>)> = n
        .links
        .iter()
        .filter(|l| l.link.key.class == LinkClass::Nvlink && !l.link.is_gpu_nvlinks())
        .filter(|l| l.tx_bytes_total.is_some() || l.rx_bytes_total.is_some())
        .map(|l| (l.link.key.device.clone(), l.link.gpu.clone()))
        .collect();
    n.links.retain(|l| {
        !l.link.is_gpu_nvlinks()
            || !counted
                .iter()
                .any(|c| c.0 == l.link.key.device && c.1 == l.link.gpu)
    });
}

/// A GPU's NVLinks: their `device` and `gpu`.
type GpuKey<'a> = (&'a str, Option<&'a str>);

fn gpu_key(l: &Link) -> GpuKey<'_> {
    (l.key.device.as_str(), l.gpu.as_deref())
}

/// Replaces the node's NVLink links by one link per GPU (by `device` and `gpu`), after its other links.
fn fold_per_gpu(n: &mut NodeSnapshot) {
    let links = std::mem::take(&mut n.links);
    let mut gpus: Vec<GpuFold<'_>> = Vec::new();
    // A GPU's links mostly come one after another: the previous link's GPU is tried first.
    let mut last = 0;
    for l in links
        .iter()
        .filter(|l| l.link.key.class == LinkClass::Nvlink)
    {
        let key = gpu_key(&l.link);
        let at = match gpus.get(last).filter(|g| g.key == key) {
            Some(_) => Some(last),
            None => gpus.iter().position(|g| g.key == key),
        };
        match at {
            Some(i) => {
                gpus[i].add(l);
                last = i;
            }
            None => {
                let sums = links
                    .iter()
                    .any(|x| x.link.is_gpu_nvlinks() && gpu_key(&x.link) == key);
                last = gpus.len();
                gpus.push(GpuFold::new(l, key, sums));
            }
        }
    }
    let folded: Vec<LinkSnapshot> = gpus.into_iter().map(GpuFold::finish).collect();
    let mut kept: Vec<LinkSnapshot> = links
        .into_iter()
        .filter(|l| l.link.key.class != LinkClass::Nvlink)
        .collect();
    kept.extend(folded);
    n.links = kept;
}

/// One GPU's NVLinks being summed; borrows the node's links.
struct GpuFold<'a> {
    key: GpuKey<'a>,
    snapshot: LinkSnapshot,
    /// The state of the first link that is down, if any.
    down_state: Option<String>,
    /// The (counter name, agent labels) of each of `snapshot.series`, at the same position.
    series_keys: Vec<(&'a str, &'a [(String, String)])>,
    /// Whether the GPU has a sums link: its bytes and capacity are then that link's alone.
    sums: bool,
}

impl<'a> GpuFold<'a> {
    fn new(first: &'a LinkSnapshot, key: GpuKey<'a>, sums: bool) -> GpuFold<'a> {
        let l = &first.link;
        let link = Link {
            key: LinkKey::new(LinkClass::Nvlink, l.key.device.clone(), String::new()),
            endpoint: l.endpoint,
            role: l.role,
            capacity_bytes_per_second: None,
            state: l.state.clone(),
            attributes: Default::default(),
            gpu: Some(l.gpu.clone().unwrap_or_default()),
            link: None,
        };
        let mut fold = GpuFold {
            key,
            snapshot: LinkSnapshot {
                link: Arc::new(link),
                tx_bytes_total: None,
                rx_bytes_total: None,
                tx_bytes_per_second: None,
                rx_bytes_per_second: None,
                series: Vec::new(),
            },
            down_state: None,
            series_keys: Vec::new(),
            sums,
        };
        fold.add(first);
        fold
    }

    fn add(&mut self, l: &'a LinkSnapshot) {
        let s = &mut self.snapshot;
        // With a sums link, the bytes and capacity are its own; the links add their other counters.
        let bytes = !self.sums || l.link.is_gpu_nvlinks();
        if bytes {
            add_f64(
                &mut Arc::make_mut(&mut s.link).capacity_bytes_per_second,
                l.link.capacity_bytes_per_second,
            );
            add_u64(&mut s.tx_bytes_total, l.tx_bytes_total);
            add_u64(&mut s.rx_bytes_total, l.rx_bytes_total);
            add_f64(&mut s.tx_bytes_per_second, l.tx_bytes_per_second);
            add_f64(&mut s.rx_bytes_per_second, l.rx_bytes_per_second);
        }
        if self.down_state.is_none() && !l.link.is_up() && !l.link.is_gpu_nvlinks() {
            self.down_state = Some(l.link.state.clone());
        }
        // Only counters are exported for a link; gauges stay per link in the store.
        let counters = l
            .series
            .iter()
            .filter(|x| matches!(x.kind, SeriesKind::Counter { .. }))
            .filter(|x| bytes || !matches!(x.key.metric.as_str(), "tx_bytes" | "rx_bytes"));
        for (j, series) in counters.enumerate() {
            // The GPU's links mostly carry the same counters in the same order: the j-th sum is tried first.
            let key = (series.key.metric.as_str(), series.key.labels.as_slice());
            let at = match self.series_keys.get(j).filter(|k| **k == key) {
                Some(_) => Some(j),
                None => self.series_keys.iter().position(|k| *k == key),
            };
            match at {
                Some(i) => {
                    let sum = &mut s.series[i];
                    sum.value += series.value;
                    sum.timestamp_unix_ns = sum.timestamp_unix_ns.max(series.timestamp_unix_ns);
                }
                None => {
                    self.series_keys.push(key);
                    s.series.push(SeriesSnapshot {
                        key: Arc::new(SeriesKey {
                            link: Some(s.link.key.clone()),
                            metric: series.key.metric.clone(),
                            labels: series.key.labels.clone(),
                        }),
                        ..series.clone()
                    });
                }
            }
        }
    }

    fn finish(mut self) -> LinkSnapshot {
        if let Some(state) = self.down_state {
            Arc::make_mut(&mut self.snapshot.link).state = state;
        }
        self.snapshot
    }
}

fn add_f64(sum: &mut Option<f64>, part: Option<f64>) {
    if let Some(v) = part {
        *sum = Some(sum.unwrap_or(0.0) + v);
    }
}

fn add_u64(sum: &mut Option<u64>, part: Option<u64>) {
    if let Some(v) = part {
        *sum = Some(sum.unwrap_or(0).saturating_add(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commwatch_model::{Endpoint, LinkRole};

    const COUNTER: SeriesKind = SeriesKind::Counter {
        max_value: u64::MAX,
    };

    fn series(metric: &str, kind: SeriesKind, value: f64, at: i64) -> SeriesSnapshot {
        SeriesSnapshot {
            key: Arc::new(SeriesKey {
                link: None,
                metric: metric.to_string(),
                labels: vec![],
            }),
            kind,
            value,
            timestamp_unix_ns: at,
        }
    }

    fn nvlink(gpu: u32, n: u32, state: &str, tx: u64, rate: Option<f64>) -> LinkSnapshot {
        LinkSnapshot {
            link: Arc::new(Link {
                key: LinkKey::new(LinkClass::Nvlink, format!("gpu{gpu}"), n.to_string()),
                endpoint: Endpoint::GpuLink,
                role: LinkRole::Fabric,
                capacity_bytes_per_second: Some(25e9),
                state: state.to_string(),
                attributes: Default::default(),
                gpu: Some(gpu.to_string()),
                link: Some(n.to_string()),
            }),
            tx_bytes_total: Some(tx),
            rx_bytes_total: None,
            tx_bytes_per_second: rate,
            rx_bytes_per_second: None,
            series: vec![
                series("nvlink_crc_errors", COUNTER, f64::from(n), i64::from(n)),
                series("nvlink_throughput_ratio", SeriesKind::Gauge, 0.5, 0),
            ],
        }
    }

    fn ib() -> LinkSnapshot {
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
            tx_bytes_per_second: Some(1.0),
            rx_bytes_per_second: None,
            series: vec![],
        }
    }

    /// GPU 0: three links up; GPU 1: two links, the second down; an InfiniBand port between them.
    fn node() -> NodeSnapshot {
        NodeSnapshot {
            name: "n1".into(),
            agent_version: "t".into(),
            connected: true,
            last_seen_unix_ns: 42,
            agent_dropped_batches_total: 0,
            links: vec![
                nvlink(0, 0, "Active", 100, Some(1e9)),
                nvlink(0, 1, "Active", 200, None),
                ib(),
                nvlink(1, 0, "Active", 10, None),
                nvlink(1, 1, "Inactive", 20, None),
                nvlink(0, 2, "Active", 300, Some(2e9)),
            ],
            series: vec![],
            jobs: Default::default(),
            blind: Default::default(),
        }
    }

    fn counts(n: &NodeSnapshot) -> Vec<(String, String, f64)> {
        n.series
            .iter()
            .map(|s| (s.key.metric.clone(), s.key.labels[0].1.clone(), s.value))
            .collect()
    }

    #[test]
    fn per_gpu_sums_each_gpus_links() {
        let mut nodes = vec![node()];
        apply_nvlink_detail(&mut nodes, NvlinkDetail::Gpu);
        let n = &nodes[0];
        assert_eq!(n.links.len(), 3, "the port and one link per GPU");
        assert_eq!(n.links[0].link.key.device, "mlx5_0");
        let (g0, g1) = (&n.links[1], &n.links[2]);
        assert!(is_gpu_aggregate(&g0.link));
        assert_eq!(g0.link.key, LinkKey::new(LinkClass::Nvlink, "gpu0", ""));
        assert_eq!(
            (g0.link.gpu.as_deref(), g0.link.link.as_deref()),
            (Some("0"), None)
        );
        assert_eq!(g0.tx_bytes_total, Some(600));
        assert_eq!(g0.rx_bytes_total, None, "no part known");
        assert_eq!(g0.tx_bytes_per_second, Some(3e9), "the known parts");
        assert_eq!(g0.link.capacity_bytes_per_second, Some(75e9));
        assert_eq!(g0.link.state, "Active");
        assert!(g0.link.is_up());
        // Counters summed, newest time; gauges left out.
        assert_eq!(g0.series.len(), 1);
        assert_eq!(g0.series[0].key.metric, "nvlink_crc_errors");
        assert_eq!(g0.series[0].value, 3.0);
        assert_eq!(g0.series[0].timestamp_unix_ns, 2);
        assert_eq!(g0.series[0].key.link.as_ref(), Some(&g0.link.key));
        // A GPU with a link down is down, with that link's state.
        assert_eq!(g1.link.state, "Inactive");
        assert!(!g1.link.is_up());
        assert_eq!(g1.tx_bytes_total, Some(30));
        assert_eq!(
            counts(n),
            [
                ("gpu_nvlinks_up".into(), "0".into(), 3.0),
                ("gpu_nvlinks".into(), "0".into(), 3.0),
                ("gpu_nvlinks_up".into(), "1".into(), 1.0),
                ("gpu_nvlinks".into(), "1".into(), 2.0),
            ]
        );
    }

    #[test]
    fn per_link_keeps_the_links_and_counts_them() {
        let mut nodes = vec![node()];
        apply_nvlink_detail(&mut nodes, NvlinkDetail::Link);
        let n = &nodes[0];
        let want = node();
        assert_eq!(n.links.len(), want.links.len());
        for (a, b) in n.links.iter().zip(&want.links) {
            assert_eq!(a.link, b.link);
        }
        assert_eq!(counts(n).len(), 4);
    }

    /// The node with the agent's sums link for GPU 0 (its bytes at the fast rate: 650 B, 3.5 GB/s).
    fn node_with_sums() -> NodeSnapshot {
        let mut n = node();
        let mut sums = nvlink(0, 0, "up", 650, Some(3.5e9));
        let l = Arc::make_mut(&mut sums.link);
        l.key.port.clear();
        l.link = None;
        l.capacity_bytes_per_second = Some(75e9);
        sums.series = vec![series("tx_bytes", COUNTER, 650.0, 9)];
        n.links.push(sums);
        n
    }

    #[test]
    fn an_agents_sums_are_the_gpus_bytes_never_added_to_its_links() {
        let mut nodes = vec![node_with_sums()];
        apply_nvlink_detail(&mut nodes, NvlinkDetail::Gpu);
        let n = &nodes[0];
        assert_eq!(n.links.len(), 3, "the port and one link per GPU");
        let g0 = &n.links[1];
        assert_eq!(g0.link.key, LinkKey::new(LinkClass::Nvlink, "gpu0", ""));
        assert_eq!(g0.tx_bytes_total, Some(650), "the sums' alone");
        assert_eq!(g0.tx_bytes_per_second, Some(3.5e9));
        assert_eq!(g0.link.capacity_bytes_per_second, Some(75e9));
        let metrics: Vec<(&str, f64)> = g0
            .series
            .iter()
            .map(|s| (s.key.metric.as_str(), s.value))
            .collect();
        assert_eq!(metrics, [("nvlink_crc_errors", 3.0), ("tx_bytes", 650.0)]);
        // The links are counted, the sums link is not a link of its own.
        assert_eq!(
            counts(n)[..2],
            counts(&{
                let mut m = vec![node()];
                apply_nvlink_detail(&mut m, NvlinkDetail::Gpu);
                m.remove(0)
            })[..2]
        );
        // GPU 1 has no sums: its links summed as before.
        assert_eq!(n.links[2].tx_bytes_total, Some(30));
        // Per link: the links with their own byte counters, the sums left out.
        let mut nodes = vec![node_with_sums()];
        apply_nvlink_detail(&mut nodes, NvlinkDetail::Link);
        assert_eq!(nodes[0].links.len(), node().links.len());
        assert!(nodes[0].links.iter().all(|l| !l.link.is_gpu_nvlinks()));
    }

    #[test]
    fn a_node_without_nvlink_is_left_alone() {
        let mut n = node();
        n.links.retain(|l| l.link.key.class != LinkClass::Nvlink);
        let mut nodes = vec![n];
        apply_nvlink_detail(&mut nodes, NvlinkDetail::Gpu);
        assert_eq!(nodes[0].links.len(), 1);
        assert!(nodes[0].series.is_empty());
    }

    #[test]
    fn labels_per_shape() {
        let names =
            |l: &Link| -> Vec<&str> { link_labels(l).pairs().iter().map(|p| p.0).collect() };
        assert_eq!(names(&ib().link), ["class", "device", "port", "role"]);
        let mut n = node();
        assert_eq!(
            names(&n.links[0].link),
            ["class", "device", "port", "role", "gpu", "link"]
        );
        apply_nvlink_detail(std::slice::from_mut(&mut n), NvlinkDetail::Gpu);
        assert_eq!(names(&n.links[1].link), ["class", "device", "role", "gpu"]);
        let values: Vec<&str> = link_labels(&n.links[1].link).values().collect();
        assert_eq!(values, ["nvlink", "gpu0", "fabric", "0"]);
    }
}
