//! [`AnalysisInput`]: everything the rules look at, copied out of the store in one short pass per node (each
//! node's lock is held only while its windows are copied), or built by tests from synthetic values.

use std::collections::BTreeMap;
use std::sync::Arc;

use commwatch_model::{Endpoint, FabricData, Link, LinkClass, LinkKey, LinkRole, SeriesKind};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use super::activity::{self, Activity};
use crate::steps::{NodeStep, StepStore};
use crate::store::{NodeState, SeriesKey, Store};
use crate::telemetry::Passes;

/// How much history one evaluation reads from the store, nanoseconds (20 s: ~30 steps of the classic case,
/// 20 slow-tier samples).
pub const WINDOW_NS: i64 = 20_000_000_000;

/// A counter's increase over the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterWindow {
    /// The series: its agent metric name (`symbol_errors`, `xmit_wait_ticks`, `hw_np_cnp_sent`,
    /// `crc_flit_errors`, ...) and labels.
    #[serde(flatten)]
    pub key: CounterKey,
    /// Reset-corrected increase between the window's first and last samples.
    pub increase: u64,
    /// Seconds between those samples (0 with fewer than two).
    pub window_s: f64,
    /// Whether the last reading sits at the counter's saturation value (PMA counters stop there): the
    /// increase since is unknown.
    pub saturated: bool,
    /// The last raw reading.
    pub raw: u64,
}

/// A counter's identity as the rules read it: the store's own key, shared (an evaluation takes a reference,
/// not a copy of its strings); serialized as its `metric` and `labels`.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterKey(pub Arc<SeriesKey>);

impl Serialize for CounterKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("CounterKey", 2)?;
        st.serialize_field("metric", &self.0.metric)?;
        st.serialize_field("labels", &self.0.labels)?;
        st.end()
    }
}

impl CounterWindow {
    /// The agent's metric name.
    pub fn metric(&self) -> &str {
        &self.key.0.metric
    }

    /// Increase per second over the window; `None` when the window is empty.
    pub fn rate(&self) -> Option<f64> {
        (self.window_s > 0.0).then(|| self.increase as f64 / self.window_s)
    }
}

/// One link of a node: the link as its inventory describes it, and what it did over the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkInput {
    /// The link, shared with the store (a pointer copied under the node's lock: copying every link's strings
    /// and attributes was a tenth of the input's cost).
    pub link: Arc<Link>,
    /// What the byte counters did over the window: only for the links a rule reads it of
    /// ([`reads_activity`]), `None` for the others.
    pub activity: Option<Activity>,
    /// Every other counter of the link.
    pub counters: Vec<CounterWindow>,
    /// Latest gauges of the link (`state_code`, `phys_state_code`, ...).
    pub gauges: BTreeMap<String, f64>,
    /// Window means of the gauges a rule reads as a level over time ([`MEAN_GAUGES`]: a queue's backlog,
    /// which a single reading catches full or empty by chance).
    pub gauge_means: BTreeMap<String, f64>,
    /// The lowest positive reading over the window of the limits a rule compares with what the window's traffic
    /// did ([`LOW_GAUGES`]: a shaper's rate, 0 when none is set), so that a limit lifted a moment ago is still
    /// seen while the window holds the traffic it slowed.
    pub gauge_lows: BTreeMap<String, f64>,
}

/// Node counters read over their newest [`RECENT_WINDOW_NS`] only, not the whole window: TCP's segment
/// counters, whose share of retransmitted or out-of-order segments must stand out while a loss lasts a few
/// steps, not be diluted by the window's clean traffic before it (2 % loss for 10 steps of 0.55 s read as
/// 0.6 % over 20 s).
pub const RECENT_COUNTERS: &[&str] = &[
    "tcp_out_segments_total",
    "tcp_retransmitted_segments_total",
    "tcp_in_segments_total",
    "tcp_out_of_order_packets_total",
];
/// Span of [`RECENT_COUNTERS`]' windows before their newest sample, nanoseconds (6 s: 6 slow-tier samples).
pub const RECENT_WINDOW_NS: i64 = 6_000_000_000;

/// Link gauges whose window mean [`node_input`] also computes ([`LinkInput::gauge_means`]).
pub const MEAN_GAUGES: &[&str] = &["qdisc_backlog_bytes"];

/// Fewest readings a gauge's window mean rests on (10 s of slow-tier readings): a queue's length read once or
/// twice is a moment, not a level, and gives no mean.
pub const MIN_MEAN_SAMPLES: usize = 10;

/// Link gauges whose lowest positive reading over the window [`node_input`] also keeps
/// ([`LinkInput::gauge_lows`]).
pub const LOW_GAUGES: &[&str] = &["qdisc_rate_limit_bytes_per_second"];

impl LinkInput {
    /// `link` with no traffic and no counters yet.
    pub fn from_link(link: Arc<Link>) -> LinkInput {
        LinkInput {
            link,
            activity: None,
            counters: Vec::new(),
            gauges: BTreeMap::new(),
            gauge_means: BTreeMap::new(),
            gauge_lows: BTreeMap::new(),
        }
    }

    /// A link named by its class, device and port the way agents named links before they stated the endpoint
    /// kind ([`Endpoint::legacy`]), `ACTIVE`, with no capacity, traffic or counters (tests and synthetic inputs
    /// fill in what they need).
    pub fn new(class: LinkClass, device: &str, port: &str, role: LinkRole) -> LinkInput {
        LinkInput::from_link(Arc::new(Link {
            key: LinkKey::new(class, device, port),
            endpoint: Endpoint::legacy(class, device, port),
            role,
            capacity_bytes_per_second: None,
            state: "ACTIVE".into(),
            attributes: BTreeMap::new(),
            gpu: None,
            link: None,
        }))
    }

    pub fn counter(&self, metric: &str) -> Option<&CounterWindow> {
        self.counters.iter().find(|c| c.metric() == metric)
    }
}

/// One GPU of a node: window means of its gauges.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GpuInput {
    pub index: String,
    /// Share of time a kernel ran (`gpu_utilization_ratio`), 0..1, mean over the window.
    pub busy_share: Option<f64>,
    /// Mean SM activity (`gpu_sm_activity_ratio`), 0..1.
    pub sm_activity: Option<f64>,
    pub pcie_gen: Option<f64>,
    pub pcie_gen_max: Option<f64>,
    pub pcie_width: Option<f64>,
    pub pcie_width_max: Option<f64>,
    /// GPU counters (`gpu_pcie_replay_errors`).
    pub counters: Vec<CounterWindow>,
}

/// One node.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeInput {
    pub name: String,
    pub links: Vec<LinkInput>,
    /// Recent steps of the node, oldest first (from the steps engine).
    pub steps: Vec<Arc<NodeStep>>,
    pub gpus: Vec<GpuInput>,
    /// Mean host CPU utilisation over the window, 0..1.
    pub cpu_utilization: Option<f64>,
    /// The node's own counters over the window (no link, no GPU: `tcp_out_segments_total`,
    /// `tcp_retransmitted_segments_total`, ...; [`RECENT_COUNTERS`] over their newest seconds only).
    pub counters: Vec<CounterWindow>,
}

/// The jobs as the rules see them: the fleet jobs merged once for every reader ([`crate::jobs`]), under the
/// names the rules' inputs are built with.
pub use crate::jobs::{
    FleetConflict as ConflictInput, FleetJob as JobInput, FleetRank as RankInput,
};

/// A bare-communication baseline (nccl-tests bus bandwidth), job-specific or fleet-wide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BareBaseline {
    /// `None`: applies to every job.
    pub job: Option<String>,
    pub collective: String,
    /// Bus bandwidth at large messages, bytes/s per rank (what one rail link should reach).
    pub busbw_bytes_per_second: f64,
    pub nranks: Option<u32>,
    pub source: String,
}

/// A job's reference from its own recent history: the median of its figures over the last minutes (kept by
/// [`super::trend::JobTrends`]), what `scaling_efficiency_drop` measures a drop against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobReference {
    pub job: String,
    /// Median step time, seconds.
    pub step_time_s: Option<f64>,
    /// Median throughput per GPU, samples/s (markers with samples).
    pub samples_per_second_per_gpu: Option<f64>,
    /// Seconds of history the reference rests on.
    pub over_seconds: f64,
    /// The step source of the history's segment (the history restarts when it changes).
    #[serde(skip)]
    pub step_source: Option<crate::steps::StepSource>,
    /// Median fabric bytes per second ([`super::scaling::JobFigures::fabric_bytes_per_second`]).
    #[serde(default)]
    pub fabric_bytes_per_second: Option<f64>,
    /// The earlier run of the same shape (another job id) the reference comes from, when the job's own
    /// history is too short ([`super::trend`]); `None`: the job's own history.
    #[serde(default)]
    pub earlier_run: Option<String>,
}

/// Throughput per GPU of a job at a scale: from history, or set by an operator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputBaseline {
    pub job: String,
    pub gpus: u32,
    pub samples_per_second_per_gpu: f64,
    /// `operator` or `history`.
    pub source: String,
}

/// Everything one evaluation reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AnalysisInput {
    pub now_unix_ns: i64,
    pub nodes: Vec<NodeInput>,
    pub jobs: Vec<JobInput>,
    pub bare_baselines: Vec<BareBaseline>,
    pub throughput_baselines: Vec<ThroughputBaseline>,
    /// Each job's own recent history (what `scaling_efficiency_drop` measures a drop against).
    pub job_references: Vec<JobReference>,
    /// Per job, its collectives from NCCL Inspector's records (`crate::collectives`), costliest first.
    pub collectives: Vec<crate::collectives::JobCollectives>,
    /// Bare link figures from commwatch's own probes, per probed pair ([`super::link_probes`]).
    pub probes: Vec<super::link_probes::ProbeBaseline>,
    /// `probes` by node, built on first use ([`super::link_probes::ProbeIndex`]).
    #[serde(skip)]
    pub probe_index: super::link_probes::ProbeIndex,
}

impl AnalysisInput {
    pub fn node(&self, name: &str) -> Option<&NodeInput> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The job's collectives from NCCL Inspector, costliest first (empty without records).
    pub fn collectives_of(&self, job: Option<&str>) -> &[crate::collectives::CollectiveSummary] {
        job.and_then(|j| self.collectives.iter().find(|c| c.job == j))
            .map_or(&[], |c| c.summaries.as_slice())
    }

    /// The job `node` runs (the first that lists it).
    pub fn job_of(&self, node: &str) -> Option<&JobInput> {
        self.jobs.iter().find(|j| j.nodes().any(|n| n == node))
    }

    /// The probe that stands as `node`'s bare link figure (a peer in its job when it has one; see
    /// [`super::link_probes::for_node`]), with why it may not be used (`None`: usable).
    pub fn link_probe(
        &self,
        node: &str,
        job: Option<&str>,
    ) -> Option<(&super::link_probes::ProbeBaseline, Option<&'static str>)> {
        let peers: Vec<&str> = job
            .and_then(|j| self.jobs.iter().find(|x| x.id == j))
            .map(|j| j.nodes().filter(|n| *n != node).collect())
            .unwrap_or_default();
        let now = self.now_unix_ns as f64 / 1e9;
        let mine = self.probe_index.of(&self.probes, node);
        super::link_probes::pick(mine, node, &peers, now)
    }

    /// The bare baseline for `job` (a job-specific one first, else a fleet-wide one; AllReduce preferred).
    pub fn bare_baseline(&self, job: Option<&str>) -> Option<&BareBaseline> {
        let pick = |want_job: Option<&str>| {
            let mut c: Vec<&BareBaseline> = self
                .bare_baselines
                .iter()
                .filter(|b| b.job.as_deref() == want_job)
                .collect();
            c.sort_by_key(|b| !b.collective.to_ascii_lowercase().contains("all_reduce"));
            c.first().copied()
        };
        job.and_then(|j| pick(Some(j))).or_else(|| pick(None))
    }
}

/// Newest steps per node the rules read from the step history (more than a [`WINDOW_NS`] holds at the
/// classic step period).
pub const STEPS_READ: usize = 64;

/// Baselines and history the engine holds (not in the store's windows).
#[derive(Debug, Clone, Default)]
pub struct Extras {
    pub bare_baselines: Vec<BareBaseline>,
    pub throughput_baselines: Vec<ThroughputBaseline>,
    /// The jobs' references from their recent history ([`super::trend::JobTrends::references`]).
    pub job_references: Vec<JobReference>,
}

/// `(timestamp_ns, value)` samples, oldest first.
type Samples = Vec<(i64, u64)>;

/// `(ts, value)` of a series' samples from `since_ns` on, oldest first, into `buf` (cleared first; left empty
/// without samples), keeping its allocation.
fn window_into(buf: &mut Samples, samples: Option<crate::store::Samples<'_>>, since_ns: i64) {
    buf.clear();
    if let Some(samples) = samples {
        buf.extend(samples.iter().rev().take_while(|(t, _)| *t >= since_ns));
        buf.reverse();
    }
}

/// Increase of a counter over its samples from `since_ns` on (first and last of the window only: nothing is
/// copied).
fn counter_window(
    s: &crate::store::Series,
    samples: crate::store::Samples<'_>,
    max_value: u64,
    since_ns: i64,
) -> Option<CounterWindow> {
    let mut in_window = samples.iter().rev().take_while(|(t, _)| *t >= since_ns);
    let last = in_window.next()?;
    let first = in_window.last().unwrap_or(last);
    let raw = s.last_raw().map_or(0, |r| r.1);
    Some(CounterWindow {
        key: CounterKey(s.key().clone()),
        increase: last.1.saturating_sub(first.1),
        window_s: (last.0 - first.0) as f64 / 1e9,
        saturated: raw >= max_value,
        raw,
    })
}

/// Lowest finite positive value of a gauge from `since_ns` on.
fn gauge_lowest_positive(samples: crate::store::Samples<'_>, since_ns: i64) -> Option<f64> {
    samples
        .iter()
        .rev()
        .take_while(|(t, _)| *t >= since_ns)
        .map(|(_, b)| f64::from_bits(b))
        .filter(|v| v.is_finite() && *v > 0.0)
        .reduce(f64::min)
}

/// Mean of a gauge's finite values from `since_ns` on, and how many it rests on (`None` without any).
fn gauge_mean_of(samples: crate::store::Samples<'_>, since_ns: i64) -> Option<(f64, usize)> {
    let (sum, n) = samples
        .iter()
        .rev()
        .take_while(|(t, _)| *t >= since_ns)
        .map(|(_, b)| f64::from_bits(b))
        .filter(|v| v.is_finite())
        .fold((0.0, 0usize), |(sum, n), v| (sum + v, n + 1));
    (n > 0).then(|| (sum / n as f64, n))
}

/// Mean of a gauge's finite values from `since_ns` on.
fn gauge_mean(samples: crate::store::Samples<'_>, since_ns: i64) -> Option<f64> {
    gauge_mean_of(samples, since_ns).map(|(mean, _)| mean)
}

/// Whether a rule reads `link`'s [`LinkInput::activity`]: the fabric's network links, RDMA ports and, on a TCP
/// fabric, its interfaces ([`commwatch_model::FabricData`]) (congestion,
/// underutilization, the scaling bound, [`NodeInput::fabric_busy_share`] and
/// [`NodeInput::fabric_burst_rate`], the management rule's check that the fabric was idle) and the management
/// NICs (the management rule). [`node_input`] copies and analyses the byte windows of those links only; the
/// others' activity stays `None`. 144 of the demo node's 161 links are NVLinks: analysing every link
/// took about 9 ms of CPU per node and pass, most of the analysis input's cost (BENCHMARKS.md, "Fresh
/// findings under load"). A rule that comes to read another link's activity must widen this first
/// (`tests::no_rule_reads_the_activity_of_links_left_out`).
pub fn reads_activity(link: &Link) -> bool {
    (link.role == LinkRole::Fabric && link.key.class != LinkClass::Nvlink)
        || link.role == LinkRole::Management
}

/// Copies one node's windows (under its lock; the caller holds it only for this call).
pub fn node_input(n: &NodeState, since_ns: i64) -> NodeInput {
    let mut links: Vec<LinkInput> = n
        .links()
        .iter()
        .map(|l| LinkInput::from_link(l.link.clone()))
        .collect();
    // Each link's byte counters (the last of each direction, as the loop meets them), windowed after it.
    let mut bytes: Vec<(Option<&crate::store::Series>, Option<&crate::store::Series>)> =
        vec![(None, None); links.len()];
    let mut gpus: BTreeMap<String, GpuInput> = BTreeMap::new();
    let mut cpu = None;
    let mut counters = Vec::new();
    for s in n.series() {
        let key = s.key();
        match &key.link {
            Some(_) => {
                let Some(i) = s.link_index().filter(|&i| i < links.len()) else {
                    continue;
                };
                match (key.metric.as_str(), s.kind()) {
                    ("tx_bytes", SeriesKind::Counter { .. }) => bytes[i].0 = Some(s),
                    ("rx_bytes", SeriesKind::Counter { .. }) => bytes[i].1 = Some(s),
                    (_, SeriesKind::Counter { max_value }) => {
                        if let Some(c) = counter_window(s, n.samples(s), max_value, since_ns) {
                            links[i].counters.push(c);
                        }
                    }
                    (m, SeriesKind::Gauge) => {
                        if let Some((_, raw)) = s.last_raw() {
                            links[i].gauges.insert(m.to_string(), f64::from_bits(raw));
                        }
                        if MEAN_GAUGES.contains(&m) {
                            if let Some((mean, _)) = gauge_mean_of(n.samples(s), since_ns)
                                .filter(|&(_, k)| k >= MIN_MEAN_SAMPLES)
                            {
                                links[i].gauge_means.insert(m.to_string(), mean);
                            }
                        }
                        if LOW_GAUGES.contains(&m) {
                            if let Some(low) = gauge_lowest_positive(n.samples(s), since_ns) {
                                links[i].gauge_lows.insert(m.to_string(), low);
                            }
                        }
                    }
                }
            }
            None => {
                let gpu = key
                    .labels
                    .iter()
                    .find(|(k, _)| k == "gpu")
                    .map(|(_, v)| v.clone());
                match (gpu, s.kind()) {
                    (None, SeriesKind::Gauge) => {
                        if key.metric == "cpu_utilization_ratio" && key.labels.is_empty() {
                            cpu = gauge_mean(n.samples(s), since_ns);
                        }
                    }
                    (Some(g), kind) => {
                        let e = gpus.entry(g.clone()).or_insert_with(|| GpuInput {
                            index: g,
                            ..Default::default()
                        });
                        match (key.metric.as_str(), kind) {
                            (_, SeriesKind::Counter { max_value }) => {
                                if let Some(c) =
                                    counter_window(s, n.samples(s), max_value, since_ns)
                                {
                                    e.counters.push(c);
                                }
                            }
                            ("gpu_utilization_ratio", _) => {
                                e.busy_share = gauge_mean(n.samples(s), since_ns)
                            }
                            ("gpu_sm_activity_ratio", _) => {
                                e.sm_activity = gauge_mean(n.samples(s), since_ns)
                            }
                            ("gpu_pcie_link_gen", _) => {
                                e.pcie_gen = gauge_mean(n.samples(s), since_ns)
                            }
                            ("gpu_pcie_link_gen_max", _) => {
                                e.pcie_gen_max = gauge_mean(n.samples(s), since_ns)
                            }
                            ("gpu_pcie_link_width", _) => {
                                e.pcie_width = gauge_mean(n.samples(s), since_ns)
                            }
                            ("gpu_pcie_link_width_max", _) => {
                                e.pcie_width_max = gauge_mean(n.samples(s), since_ns)
                            }
                            _ => {}
                        }
                    }
                    (None, SeriesKind::Counter { max_value }) => {
                        let since = if RECENT_COUNTERS.contains(&key.metric.as_str()) {
                            let newest = n.samples(s).last().map_or(0, |(t, _)| t);
                            since_ns.max(newest - RECENT_WINDOW_NS)
                        } else {
                            since_ns
                        };
                        if let Some(c) = counter_window(s, n.samples(s), max_value, since) {
                            counters.push(c);
                        }
                    }
                }
            }
        }
    }
    // Two window buffers reused link after link: no allocation (and no fresh pages) per link.
    let (mut tx, mut rx): (Samples, Samples) = Default::default();
    for (l, (tx_s, rx_s)) in links.iter_mut().zip(bytes) {
        if !reads_activity(&l.link) {
            continue;
        }
        window_into(&mut tx, tx_s.map(|s| n.samples(s)), since_ns);
        window_into(&mut rx, rx_s.map(|s| n.samples(s)), since_ns);
        l.activity = activity::analyse(&tx, &rx, l.link.capacity_bytes_per_second);
    }
    NodeInput {
        name: n.name().to_string(),
        links,
        steps: Vec::new(),
        gpus: gpus.into_values().collect(),
        cpu_utilization: cpu,
        counters,
    }
}

/// Builds the input from the store: every node seen within its expiry, windows of [`WINDOW_NS`] before
/// `now_unix_ns`, each node's steps of that window (of its [`STEPS_READ`] newest), the fleet jobs, plus the
/// engine's baselines and the jobs' references. The nodes' part is timed in `passes`
/// (`commwatch_collector_pass_seconds{pass="analysis_input"}` of the collector that owns them).
pub fn build(
    store: &Store,
    steps: &StepStore,
    passes: &Passes,
    now_unix_ns: i64,
    extras: &Extras,
) -> AnalysisInput {
    let nodes = build_nodes(
        store,
        steps,
        passes,
        now_unix_ns,
        &store.node_names(now_unix_ns),
    );
    AnalysisInput {
        now_unix_ns,
        nodes,
        jobs: crate::jobs::fleet_jobs(store, now_unix_ns),
        bare_baselines: extras.bare_baselines.clone(),
        throughput_baselines: extras.throughput_baselines.clone(),
        job_references: extras.job_references.clone(),
        collectives: Vec::new(),
        probes: Vec::new(),
        probe_index: Default::default(),
    }
}

/// The inputs of the nodes `names` (those the store still holds), windows of [`WINDOW_NS`] before
/// `now_unix_ns`, each with its steps of that window (of its [`STEPS_READ`] newest); timed in `passes` as
/// `pass="analysis_input"`.
pub fn build_nodes(
    store: &Store,
    steps: &StepStore,
    passes: &Passes,
    now_unix_ns: i64,
    names: &[String],
) -> Vec<NodeInput> {
    let since = now_unix_ns - WINDOW_NS;
    let timer = passes.timer("analysis_input");
    let nodes: Vec<NodeInput> = names
        .iter()
        .filter_map(|name| {
            let mut n = store.with_node(name, |n| node_input(n, since))?;
            n.steps = steps
                .node_steps_since(name, STEPS_READ, since)
                .unwrap_or_default();
            Some(n)
        })
        .collect();
    timer.done(nodes.len());
    nodes
}

impl NodeInput {
    /// Which of the node's links carry its fabric data (RDMA ports, or on a TCP fabric its fabric interfaces).
    pub fn fabric_data(&self) -> FabricData {
        let steps_rdma = || {
            self.steps
                .iter()
                .rev()
                .take(1)
                .any(|s| s.links.iter().any(|l| l.link.is_fabric_rdma()))
        };
        match FabricData::of(self.links.iter().map(|l| l.link.as_ref())) {
            FabricData::Interfaces if steps_rdma() => FabricData::RdmaPorts,
            fd => fd,
        }
    }

    /// The links that carry the node's fabric data ([`FabricData`]).
    pub fn fabric_links(&self) -> impl Iterator<Item = &LinkInput> {
        let fd = self.fabric_data();
        self.links.iter().filter(move |l| fd.carries_link(&l.link))
    }

    /// Whether a link of these facts is one the node's fabric figures read: an RDMA class link on the fabric
    /// (ports and IPoIB), or, on a TCP fabric, a fabric interface.
    fn fabric_figure_link(
        fd: FabricData,
        class: LinkClass,
        endpoint: Endpoint,
        role: LinkRole,
    ) -> bool {
        (role == LinkRole::Fabric && class.is_rdma())
            || (fd == FabricData::Interfaces && fd.carries(class, endpoint, role))
    }

    /// The node's own counter `metric` over the window.
    pub fn counter(&self, metric: &str) -> Option<&CounterWindow> {
        self.counters.iter().find(|c| c.metric() == metric)
    }

    /// Mean over the node's GPUs of the kernel-running share (`gpu_utilization_ratio`).
    pub fn gpu_busy_share(&self) -> Option<f64> {
        let v: Vec<f64> = self.gpus.iter().filter_map(|g| g.busy_share).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// Mean over the node's GPUs of SM activity.
    pub fn gpu_sm_activity(&self) -> Option<f64> {
        let v: Vec<f64> = self.gpus.iter().filter_map(|g| g.sm_activity).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// The busiest fabric port's busy share over the window (0 when none moved traffic; `None` without data).
    pub fn fabric_busy_share(&self) -> Option<f64> {
        let fd = self.fabric_data();
        self.links
            .iter()
            .filter(|l| {
                Self::fabric_figure_link(fd, l.link.key.class, l.link.endpoint, l.link.role)
            })
            .filter_map(|l| l.activity.as_ref().map(|a| a.busy_share()))
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    }

    /// Median achieved burst rate over the node's fabric ports, bytes/s (resolved bursts or confident steps).
    pub fn fabric_burst_rate(&self) -> Option<f64> {
        let fd = self.fabric_data();
        let mut v: Vec<f64> = if self.steps.is_empty() {
            self.links
                .iter()
                .filter(|l| {
                    Self::fabric_figure_link(fd, l.link.key.class, l.link.endpoint, l.link.role)
                })
                .filter_map(|l| {
                    let a = l.activity.as_ref()?;
                    a.resolved
                        .then_some(a.burst_rate_bytes_per_second)
                        .flatten()
                })
                .collect()
        } else {
            self.steps
                .iter()
                .flat_map(|s| s.links.iter())
                .filter(|l| {
                    l.confident
                        && Self::fabric_figure_link(
                            fd,
                            l.link.key.class,
                            l.link.endpoint,
                            l.link.role,
                        )
                })
                .filter_map(|l| l.achieved_bytes_per_second)
                .collect()
        };
        super::median(&mut v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 20 s of cumulative bytes at 20 Hz: a 200 ms burst every second at `rate` bytes/s, idle between.
    fn bursty(rate: f64) -> Samples {
        let mut total = 0u64;
        (0..400i64)
            .map(|k| {
                if k % 20 < 4 {
                    total += (rate / 20.0) as u64;
                }
                (k * 50_000_000, total)
            })
            .collect()
    }

    /// One node with a link of every class and role, each with byte windows that carry slow periodic bursts
    /// (5 % of a 25 GB/s capacity), and the rules' findings with `keep(link)` deciding whose activity stays.
    fn findings_keeping(keep: impl Fn(&Link) -> bool) -> Vec<super::super::Candidate> {
        let window = bursty(1.25e9);
        let mut links = vec![
            LinkInput::new(LinkClass::Nvlink, "gpu0", "0", LinkRole::Fabric),
            LinkInput::new(LinkClass::Nvlink, "gpu1", "3", LinkRole::Unknown),
            LinkInput::new(LinkClass::Infiniband, "mlx5_0", "1", LinkRole::Fabric),
            LinkInput::new(LinkClass::Roce, "mlx5_1", "1", LinkRole::Fabric),
            LinkInput::new(LinkClass::Ethernet, "eth1", "eth1", LinkRole::Fabric),
            LinkInput::new(LinkClass::Ethernet, "eth2", "eth2", LinkRole::Unknown),
            LinkInput::new(LinkClass::Ethernet, "eth0", "eth0", LinkRole::Management),
        ];
        for l in &mut links {
            Arc::make_mut(&mut l.link).capacity_bytes_per_second = Some(25e9);
            if keep(&l.link) {
                l.activity = activity::analyse(&window, &window, Some(25e9));
            }
        }
        let node = NodeInput {
            name: "node-00".into(),
            links,
            ..Default::default()
        };
        super::super::evaluate(&AnalysisInput {
            now_unix_ns: 20_000_000_000,
            nodes: vec![node],
            ..Default::default()
        })
    }

    #[test]
    fn no_rule_reads_the_activity_of_links_left_out() {
        let every = findings_keeping(|_| true);
        // The fixture's bursts are what the rules act on: without any activity the findings differ.
        assert_ne!(every, findings_keeping(|_| false), "{every:#?}");
        assert_eq!(
            findings_keeping(reads_activity),
            every,
            "a rule reads the activity of a link that node_input leaves without it: widen reads_activity"
        );
    }

    #[test]
    fn reads_activity_keeps_rdma_fabric_ports_and_management_nics() {
        let nvlink = LinkInput::new(LinkClass::Nvlink, "gpu0", "0", LinkRole::Fabric).link;
        let hca = LinkInput::new(LinkClass::Infiniband, "mlx5_0", "1", LinkRole::Fabric).link;
        let roce = LinkInput::new(LinkClass::Roce, "mlx5_1", "1", LinkRole::Fabric).link;
        let mgmt = LinkInput::new(LinkClass::Ethernet, "eth0", "eth0", LinkRole::Management).link;
        let other = LinkInput::new(LinkClass::Ethernet, "eth2", "eth2", LinkRole::Unknown).link;
        assert!(!reads_activity(&nvlink) && !reads_activity(&other));
        assert!(reads_activity(&hca) && reads_activity(&roce) && reads_activity(&mgmt));
    }

    #[test]
    fn a_counter_window_serializes_its_metric_and_labels_as_fields() {
        let c = CounterWindow {
            key: CounterKey(Arc::new(SeriesKey {
                link: None,
                metric: "symbol_errors".into(),
                labels: vec![("lane".into(), "2".into())],
            })),
            increase: 7,
            window_s: 20.0,
            saturated: false,
            raw: 107,
        };
        assert_eq!(c.metric(), "symbol_errors");
        assert_eq!(
            serde_json::to_value(&c).expect("json"),
            serde_json::json!({"metric": "symbol_errors", "labels": [["lane", "2"]], "increase": 7,
                "window_s": 20.0, "saturated": false, "raw": 107})
        );
    }
}
