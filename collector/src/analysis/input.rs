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
        // A job lists a node when one of its ranks runs there (asked of the ranks in place: the job's
        // node list is built anew at each call, and every rule asks this of every node).
        self.jobs
            .iter()
            .find(|j| j.ranks.iter().any(|r| r.node == node))
    }

    /// The probe that stands as `node`'s bare link figure (a peer in its job when it has one; see
    /// [`super::link_probes::for_node`]), with why it may not be used (`None`: usable).
    pub fn link_probe(
        &self,
        node: &str,
        job: Option<&str>,
    ) -> Option<(&super::link_probes::ProbeBaseline, Option<&'static str>)> {
        if self.probes.is_empty() {
            // Nothing to pick from (most evaluations): no peers listed, no index built.
            return None;
        }
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
        // The first AllReduce one in the list's order, else the first one (no list built per call).
        let pick = |want_job: Option<&str>| {
            self.bare_baselines
                .iter()
                .filter(|b| b.job.as_deref() == want_job)
                .min_by_key(|b| !b.collective.to_ascii_lowercase().contains("all_reduce"))
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

/// Where [`node_input_from`] reads a node's series from: a window of `(timestamp_ns, value)` samples, values as
/// [`NodeState::samples`] gives them. [`StoreWindows`] reads the store's rings (the whole window every time);
/// the kept windows (the `windows` module beside this one) keep each window from pass to pass and read only
/// what is new. Both must give the same samples: the rules' input is the same either way (that module's
/// tests compare them).
pub trait Windows {
    /// `s`'s samples stamped at or after `since_ns`, newest first.
    fn newest_first<'a>(
        &'a self,
        s: &'a crate::store::Series,
        since_ns: i64,
    ) -> impl Iterator<Item = (i64, u64)> + 'a;

    /// The values of [`Windows::newest_first`]'s samples, in that order: what a gauge's mean or low reads.
    fn values_newest_first<'a>(
        &'a self,
        s: &'a crate::store::Series,
        since_ns: i64,
    ) -> impl Iterator<Item = u64> + 'a {
        self.newest_first(s, since_ns).map(|(_, v)| v)
    }

    /// The newest and the oldest of `s`'s samples stamped at or after `since_ns` (`None`: none): what a
    /// counter's window ([`CounterWindow`]) reads of it.
    fn ends(&self, s: &crate::store::Series, since_ns: i64) -> Option<((i64, u64), (i64, u64))> {
        let mut window = self.newest_first(s, since_ns);
        let newest = window.next()?;
        Some((newest, window.last().unwrap_or(newest)))
    }

    /// The slots of the node's series whose windows may hold samples, ascending, among those [`reads_window`]
    /// marks (`None`: any of them may). [`node_input_into`] passes over the others: a window without samples
    /// puts no counter's window and no gauge's mean or low, as a build finds them. A reader that knows which
    /// windows are empty (the kept windows) spares the build a look at each of those series.
    fn held_slots(&self) -> Option<&[usize]> {
        None
    }

    /// A value of no meaning read from every cache line of `s`'s window, where the reader holds it in memory
    /// (0: it does not): a build loads the windows it reads whole (a gauge's mean or low) ahead, all of them
    /// in one loop of loads independent of one another, so that their cache misses overlap.
    fn touch(&self, _s: &crate::store::Series) -> u64 {
        0
    }

    /// The activity of link `link` (its index in the node's links) whose byte counters are the series in
    /// `slots` (transmit, receive), over their windows from `since_ns` on, into `out` (the previous build's,
    /// whose allocations a reader may reuse): [`activity::analyse`] on those windows (copied into `scratch`'s
    /// buffers), unless the reader keeps the link's sampling intervals. The link's capacity (its activity
    /// floor) and role (whether its peaks are found) are the node's link's.
    fn activity(
        &self,
        n: &NodeState,
        (link, slots): (usize, (Option<usize>, Option<usize>)),
        since_ns: i64,
        scratch: &mut Scratch,
        out: &mut Option<Activity>,
    ) {
        *out = copied_activity(self, n, (link, slots), since_ns, scratch);
    }
}

/// [`activity::analyse`] on the byte windows of the series in `slots` (transmit, receive) of link `link` (its
/// index in `n`'s links, whose capacity gives the activity floor; its peaks found where a rule reads them,
/// [`reads_peaks`]) from `since_ns` on as `w` reads them, copied into `scratch`'s buffers:
/// [`Windows::activity`] where the reader keeps nothing more.
pub(crate) fn copied_activity<W: Windows + ?Sized>(
    w: &W,
    n: &NodeState,
    (link, slots): (usize, (Option<usize>, Option<usize>)),
    since_ns: i64,
    scratch: &mut Scratch,
) -> Option<Activity> {
    let series = n.series();
    let window = |slot: Option<usize>| {
        slot.and_then(|i| series.get(i))
            .map(|s| w.newest_first(s, since_ns))
    };
    window_into(&mut scratch.tx, window(slots.0));
    window_into(&mut scratch.rx, window(slots.1));
    let state = n.links().get(link);
    let peaks = state.is_some_and(|l| reads_peaks(&l.link));
    let capacity = state.and_then(|l| l.link.capacity_bytes_per_second);
    activity::analyse_with(&scratch.tx, &scratch.rx, capacity, peaks)
}

/// A node's windows read from its store state: every evaluation decodes each window anew (the oracle, and the
/// whole-fleet evaluation's way).
pub struct StoreWindows<'n>(pub &'n NodeState);

impl Windows for StoreWindows<'_> {
    fn newest_first<'a>(
        &'a self,
        s: &'a crate::store::Series,
        since_ns: i64,
    ) -> impl Iterator<Item = (i64, u64)> + 'a {
        self.0
            .samples(s)
            .iter()
            .rev()
            .take_while(move |(t, _)| *t >= since_ns)
    }
}

/// `window` (newest first) into `buf` oldest first (cleared first; left empty without samples), keeping its
/// allocation.
fn window_into(buf: &mut Samples, window: Option<impl Iterator<Item = (i64, u64)>>) {
    buf.clear();
    if let Some(window) = window {
        buf.extend(window);
        buf.reverse();
    }
}

/// Where a node counter's window starts: `since_ns`, or for a counter read over its newest
/// [`RECENT_WINDOW_NS`] only (`recent`), that long before its newest sample (a sample older than the window
/// leaves it empty either way).
fn counter_since<W: Windows>(w: &W, s: &crate::store::Series, since_ns: i64, recent: bool) -> i64 {
    if !recent {
        return since_ns;
    }
    w.newest_first(s, since_ns)
        .next()
        .map_or(since_ns, |(newest, _)| {
            since_ns.max(newest - RECENT_WINDOW_NS)
        })
}

/// Increase of a counter over its window, whose newest and oldest samples are `ends` ([`Windows::ends`]).
#[cfg(test)]
fn counter_window(
    s: &crate::store::Series,
    ends: Option<((i64, u64), (i64, u64))>,
    max_value: u64,
) -> Option<CounterWindow> {
    let mut v = Vec::new();
    put_counter(&mut v, &mut 0, s, ends, max_value);
    v.pop()
}

/// Puts the window of counter `s`, whose newest and oldest samples are `ends` ([`Windows::ends`]), at
/// position `*at` of `v` and moves `at` past it (nothing without samples). Where that position already holds
/// the same counter (an input built into its previous build's allocations), its figures are overwritten: its
/// key is not taken again (each take and release of the shared key is an atomic write to memory no other
/// part of the evaluation reads).
fn put_counter(
    v: &mut Vec<CounterWindow>,
    at: &mut u32,
    s: &crate::store::Series,
    ends: Option<((i64, u64), (i64, u64))>,
    max_value: u64,
) {
    let Some((last, first)) = ends else { return };
    let raw = s.last_raw().map_or(0, |r| r.1);
    let (increase, window_s) = (
        last.1.saturating_sub(first.1),
        (last.0 - first.0) as f64 / 1e9,
    );
    let saturated = raw >= max_value;
    match v.get_mut(*at as usize) {
        Some(c) if Arc::ptr_eq(&c.key.0, s.key()) => {
            (c.increase, c.window_s, c.saturated, c.raw) = (increase, window_s, saturated, raw);
        }
        slot => {
            let c = CounterWindow {
                key: CounterKey(s.key().clone()),
                increase,
                window_s,
                saturated,
                raw,
            };
            match slot {
                Some(old) => *old = c,
                None => v.push(c),
            }
        }
    }
    *at += 1;
}

/// Lowest finite positive value of a gauge's `window` (its values, newest first).
fn gauge_lowest_positive(window: impl Iterator<Item = u64>) -> Option<f64> {
    window
        .map(f64::from_bits)
        .filter(|v| v.is_finite() && *v > 0.0)
        .reduce(f64::min)
}

/// Mean of a gauge's finite values over its `window` (its values, newest first, summed in that order), and how
/// many it rests on (`None` without any).
fn gauge_mean_of(window: impl Iterator<Item = u64>) -> Option<(f64, usize)> {
    let (sum, n) = window
        .map(f64::from_bits)
        .filter(|v| v.is_finite())
        .fold((0.0, 0usize), |(sum, n), v| (sum + v, n + 1));
    (n > 0).then(|| (sum / n as f64, n))
}

/// Mean of a gauge's finite values over its `window` (its values, newest first).
fn gauge_mean(window: impl Iterator<Item = u64>) -> Option<f64> {
    gauge_mean_of(window).map(|(mean, _)| mean)
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

/// Whether a rule reads the peaks of `link`'s activity ([`activity::Activity::peaks`]): the management NICs'
/// (the management rule tells storage traffic from a job's by them). Found for the others too, the peaks were a
/// twentieth of the analysis thread at 400 demo nodes (issue 35). A rule that comes to read another link's peaks
/// must widen this first.
pub fn reads_peaks(link: &Link) -> bool {
    link.role == LinkRole::Management
}

/// Copies one node's windows (under its lock; the caller holds it only for this call), each decoded from the
/// store ([`StoreWindows`]).
pub fn node_input(n: &NodeState, since_ns: i64) -> NodeInput {
    node_input_from(n, since_ns, &StoreWindows(n))
}

/// Whether [`node_input_from`] reads a window of `s` (one of `n`'s series), not only its last reading: what a
/// reader that keeps windows between evaluations ([`super::windows`]) keeps. Link counters (the byte counters
/// of the links whose activity a rule reads, [`reads_activity`]), [`MEAN_GAUGES`] and [`LOW_GAUGES`], the
/// host CPU, every GPU counter and the GPU gauges the input averages, and the node's own counters.
pub fn reads_window(n: &NodeState, s: &crate::store::Series) -> bool {
    let key = s.key();
    let counter = matches!(s.kind(), SeriesKind::Counter { .. });
    match (&key.link, s.link_index().and_then(|i| n.links().get(i))) {
        (Some(_), None) => false,
        (Some(_), Some(l)) => match key.metric.as_str() {
            "tx_bytes" | "rx_bytes" if counter => reads_activity(&l.link),
            _ if counter => true,
            m => MEAN_GAUGES.contains(&m) || LOW_GAUGES.contains(&m),
        },
        (None, _) if counter => true,
        (None, _) if key.labels.iter().any(|(k, _)| k == "gpu") => {
            GPU_MEANS.contains(&key.metric.as_str())
        }
        (None, _) => key.metric == "cpu_utilization_ratio" && key.labels.is_empty(),
    }
}

/// GPU gauges whose window mean a [`GpuInput`] holds.
const GPU_MEANS: &[&str] = &[
    "gpu_utilization_ratio",
    "gpu_sm_activity_ratio",
    "gpu_pcie_link_gen",
    "gpu_pcie_link_gen_max",
    "gpu_pcie_link_width",
    "gpu_pcie_link_width_max",
];

/// Buffers one node's input is built with, kept by a caller that builds many ([`node_input_into`]).
#[derive(Debug, Default)]
pub struct Scratch {
    /// What the input reads of each of the node's series, made once per layout.
    plan: Plan,
    /// One link's byte windows, oldest first.
    tx: Samples,
    rx: Samples,
    /// What a link's activity is analysed in ([`activity::of_intervals`]).
    pub(crate) activity: activity::Buffers,
    /// Counters' windows put so far: by link, then by GPU, then the node's own ([`put_counter`]).
    counted: Vec<u32>,
    /// The address of each link (its `Arc`) the input the latest build gave holds, by index: a build into
    /// that input (its spare) replaces only the links whose address changed, without a look at the others'
    /// inputs (a demo node has 161 links, 344 B each).
    links_at: Vec<usize>,
    /// The slots a build visits, ascending ([`Plan::read_slots`], or those of them the reader's
    /// [`Windows::held_slots`] leaves).
    visit: Vec<usize>,
    /// By slot, the last reading of each link gauge as the latest build put it into its link's
    /// [`LinkInput::gauges`] (`None`: not put), valid for the input that build gave: a build into that input
    /// (given back as its spare, under the same layout) puts only the readings that changed.
    gauge_bits: Vec<Option<u64>>,
}

/// What [`node_input_into`] reads of one series (by slot), decided once per layout from its key and kind
/// instead of from its strings at every build.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Read {
    /// Nothing: a byte counter (its link's activity reads it), a gauge no field holds.
    Skip,
    /// A counter of link `.0`: its window.
    LinkCounter(u32),
    /// A gauge of link `link`: its last reading, and its window mean ([`MEAN_GAUGES`], `mean`) and low
    /// ([`LOW_GAUGES`], `low`) where it is one of those; `alone`: no other series of the link is a gauge of
    /// the same metric (whose last reading would go under the same name).
    LinkGauge {
        link: u32,
        mean: bool,
        low: bool,
        alone: bool,
    },
    /// The host CPU: its window mean.
    Cpu,
    /// A counter of GPU `.0` (its position in the plan's GPUs): its window.
    GpuCounter(u32),
    /// A gauge of GPU `.0` averaged into the field `.1` of [`GPU_MEANS`].
    GpuMean(u32, u8),
    /// The node's own counter (over its newest seconds when `.0`, [`RECENT_COUNTERS`]).
    NodeCounter(bool),
}

impl Read {
    /// Whether the series' whole window is read (a gauge's mean or low), not its ends or last reading only.
    fn reads_whole(&self) -> bool {
        match *self {
            Read::LinkGauge { mean, low, .. } => mean || low,
            Read::Cpu | Read::GpuMean(..) => true,
            _ => false,
        }
    }
}

/// A node's series as [`node_input_into`] reads them, made from the node's state under one layout
/// ([`NodeState::layout`]).
#[derive(Debug, Default)]
struct Plan {
    /// The layout it was made under (`None`: not made yet).
    layout: Option<u64>,
    /// By slot.
    reads: Vec<Read>,
    /// The slots of the series read (not [`Read::Skip`]), ascending.
    read_slots: Vec<usize>,
    /// Those of `read_slots` whose windows [`reads_window`] does not mark (link gauges read for their last
    /// reading only): visited whatever a reader's [`Windows::held_slots`] says.
    unwindowed: Vec<usize>,
    /// The GPUs' indexes, sorted (as GPU inputs are listed).
    gpus: Vec<String>,
    /// Slots of each link's byte counters (by link index): the last transmit and receive series of each, as
    /// the series come.
    bytes: Vec<(Option<usize>, Option<usize>)>,
    /// The links whose activity a rule reads ([`reads_activity`]), by index: a link's role and class change
    /// only with an inventory, which makes a new layout.
    activity_links: Vec<usize>,
    /// The links with a gauge of [`MEAN_GAUGES`] or [`LOW_GAUGES`] (whose [`LinkInput::gauge_means`] and
    /// [`LinkInput::gauge_lows`] a build fills), by index, ascending, each once.
    gauge_links: Vec<usize>,
}

impl Plan {
    /// Made anew for `n` unless it was made under `n`'s layout.
    fn update(&mut self, n: &NodeState) {
        if self.layout == Some(n.layout()) {
            return;
        }
        self.layout = Some(n.layout());
        self.gpus.clear();
        for s in n.series() {
            if s.key().link.is_none() {
                if let Some((_, g)) = s.key().labels.iter().find(|(k, _)| k == "gpu") {
                    if let Err(i) = self.gpus.binary_search(g) {
                        self.gpus.insert(i, g.clone());
                    }
                }
            }
        }
        self.bytes.clear();
        self.bytes.resize(n.links().len(), (None, None));
        self.activity_links.clear();
        let read = n.links().iter().map(|l| reads_activity(&l.link));
        self.activity_links
            .extend(read.enumerate().filter(|(_, r)| *r).map(|(i, _)| i));
        self.reads.clear();
        self.read_slots.clear();
        self.unwindowed.clear();
        self.gauge_links.clear();
        for (slot, s) in n.series().iter().enumerate() {
            let read = self.read_of(n, s);
            self.reads.push(read);
            if let Read::LinkGauge {
                link, mean, low, ..
            } = read
            {
                if (mean || low) && self.gauge_links.last() != Some(&(link as usize)) {
                    self.gauge_links.push(link as usize);
                }
            }
            if read != Read::Skip {
                self.read_slots.push(slot);
                if !reads_window(n, s) {
                    self.unwindowed.push(slot);
                }
            }
        }
        self.gauge_links.sort_unstable();
        self.gauge_links.dedup();
        self.mark_shared_gauges(n);
    }

    /// Marks the link gauges that share their link and metric with another series as not `alone`.
    fn mark_shared_gauges(&mut self, n: &NodeState) {
        let mut gauges: Vec<(u32, &str, usize)> = Vec::new();
        for (slot, (read, s)) in self.reads.iter().zip(n.series()).enumerate() {
            if let Read::LinkGauge { link, .. } = read {
                gauges.push((*link, s.key().metric.as_str(), slot));
            }
        }
        gauges.sort_unstable();
        for pair in gauges.windows(2) {
            if (pair[0].0, pair[0].1) == (pair[1].0, pair[1].1) {
                for &(_, _, slot) in pair {
                    if let Some(Read::LinkGauge { alone, .. }) = self.reads.get_mut(slot) {
                        *alone = false;
                    }
                }
            }
        }
    }

    /// What is read of `s` (noting a byte counter's slot in `bytes`).
    fn read_of(&mut self, n: &NodeState, s: &crate::store::Series) -> Read {
        let key = s.key();
        let counter = matches!(s.kind(), SeriesKind::Counter { .. });
        let m = key.metric.as_str();
        if key.link.is_some() {
            let Some(i) = s.link_index().filter(|&i| i < n.links().len()) else {
                return Read::Skip;
            };
            return match (m, counter) {
                ("tx_bytes", true) => {
                    self.bytes[i].0 = Some(s.slot());
                    Read::Skip
                }
                ("rx_bytes", true) => {
                    self.bytes[i].1 = Some(s.slot());
                    Read::Skip
                }
                (_, true) => Read::LinkCounter(i as u32),
                _ => Read::LinkGauge {
                    link: i as u32,
                    mean: MEAN_GAUGES.contains(&m),
                    low: LOW_GAUGES.contains(&m),
                    alone: true,
                },
            };
        }
        match key.labels.iter().find(|(k, _)| k == "gpu") {
            Some((_, g)) => {
                let gpu = self.gpus.binary_search(g).unwrap_or_default() as u32;
                match GPU_MEANS.iter().position(|x| *x == m) {
                    _ if counter => Read::GpuCounter(gpu),
                    Some(field) => Read::GpuMean(gpu, field as u8),
                    None => Read::Skip,
                }
            }
            None if counter => Read::NodeCounter(RECENT_COUNTERS.contains(&m)),
            None if m == "cpu_utilization_ratio" && key.labels.is_empty() => Read::Cpu,
            None => Read::Skip,
        }
    }
}

/// One node's input from its state `n` (under its lock) and its series' windows from `since_ns` on as `w`
/// reads them.
pub fn node_input_from<W: Windows>(n: &NodeState, since_ns: i64, w: &W) -> NodeInput {
    node_input_into(n, since_ns, w, None, &mut Scratch::default())
}

/// [`node_input_from`] into `spare`'s allocations, and `scratch`'s: `spare` is the input of the same node this
/// function built last with `scratch`, given back after its evaluation, unchanged (under another layout,
/// [`NodeState::layout`], it is not reused).
/// What it gives is what a fresh build gives: every field is set anew, but for a link's last gauge readings,
/// which are updated in place (under one layout a gauge, once read, always has a last reading), the
/// counters' windows, overwritten in place and cut to those put (`put_counter`), and the steps, which are
/// `spare`'s (a fresh build has none): the caller sets them, as [`build_nodes`] does.
pub fn node_input_into<W: Windows>(
    n: &NodeState,
    since_ns: i64,
    w: &W,
    spare: Option<NodeInput>,
    scratch: &mut Scratch,
) -> NodeInput {
    // The spare was built with this scratch (its plan's layout is the spare's): under another layout its links'
    // gauges and activities are not this build's to update in place.
    let layout = scratch.plan.layout == Some(n.layout());
    let reused = layout
        && matches!(&spare, Some(x) if x.links.len() == n.links().len() && x.name == n.name());
    let mut out = match spare {
        Some(spare) if reused => spare.reset(n, &scratch.plan, &mut scratch.links_at),
        _ => {
            scratch.links_at.clear();
            let at = n.links().iter().map(|l| Arc::as_ptr(&l.link) as usize);
            scratch.links_at.extend(at);
            NodeInput::bare(n)
        }
    };
    scratch.plan.update(n);
    let plan = &scratch.plan;
    if out.gpus.len() != plan.gpus.len()
        || out.gpus.iter().zip(&plan.gpus).any(|(e, g)| e.index != *g)
    {
        out.gpus = plan
            .gpus
            .iter()
            .map(|g| GpuInput {
                index: g.clone(),
                ..Default::default()
            })
            .collect();
    }
    let (links, gpus) = (out.links.len(), out.gpus.len());
    scratch.counted.clear();
    scratch.counted.resize(links + gpus + 1, 0);
    // The gauges' readings put by the previous build hold for `out` only where it is that build's input.
    if !reused {
        scratch.gauge_bits.clear();
    }
    scratch.gauge_bits.resize(n.series().len(), None);
    visit_slots(plan, w.held_slots(), &mut scratch.visit);
    let series = n.series();
    // Each visited series' state loaded first, in a loop of loads independent of one another: their cache
    // misses overlap here instead of waiting one by one at the start of each series' part below (the first
    // load of a counter's state was a fifth of the walk's own time).
    let touched = scratch
        .visit
        .iter()
        .filter_map(|&i| series.get(i))
        .fold(0u64, |acc, s| {
            let max = match s.kind() {
                SeriesKind::Counter { max_value } => max_value,
                SeriesKind::Gauge => 0,
            };
            acc ^ max ^ s.last_raw().map_or(0, |r| r.1)
        });
    std::hint::black_box(touched);
    // The windows read whole (the gauges' means and lows) loaded ahead in the same way: each was read sample
    // by sample, its lines missed one after another.
    let whole = |i: &&usize| plan.reads.get(**i).is_some_and(Read::reads_whole);
    let touched = scratch
        .visit
        .iter()
        .filter(whole)
        .filter_map(|&i| series.get(i))
        .fold(0u64, |acc, s| acc ^ w.touch(s));
    std::hint::black_box(touched);
    for &i in &scratch.visit {
        let (Some(s), Some(&read), Some(put)) = (
            series.get(i),
            plan.reads.get(i),
            scratch.gauge_bits.get_mut(i),
        ) else {
            continue;
        };
        series_input(
            &mut out,
            read,
            s,
            (since_ns, w),
            (&mut scratch.counted, put),
        );
    }
    // What the previous build had beyond the counters put now.
    let counted = |i: usize| scratch.counted.get(i).copied().unwrap_or(0) as usize;
    for (i, l) in out.links.iter_mut().enumerate() {
        l.counters.truncate(counted(i));
    }
    for (i, g) in out.gpus.iter_mut().enumerate() {
        g.counters.truncate(counted(links + i));
    }
    out.counters.truncate(counted(links + gpus));
    link_activity(n, &mut out.links, since_ns, w, scratch);
    out
}

/// The slots a build visits into `visit` (cleared first), ascending: every series `plan` reads, or where the
/// reader says which windows may hold samples (`held`, [`Windows::held_slots`]), those of them `plan` reads
/// and the series read without a window.
fn visit_slots(plan: &Plan, held: Option<&[usize]>, visit: &mut Vec<usize>) {
    visit.clear();
    let Some(held) = held else {
        visit.extend_from_slice(&plan.read_slots);
        return;
    };
    let read = |i: &usize| plan.reads.get(*i).is_some_and(|r| *r != Read::Skip);
    let mut held = held.iter().filter(|i| read(i)).peekable();
    let mut rest = plan.unwindowed.iter().peekable();
    // A merge of two ascending lists (disjoint: a slot with a window and one without; one slot taken once
    // were they not).
    loop {
        let next = match (held.peek().copied(), rest.peek().copied()) {
            (Some(&a), Some(&b)) => {
                if a <= b {
                    held.next();
                }
                if b <= a {
                    rest.next();
                }
                a.min(b)
            }
            (Some(&a), None) => {
                held.next();
                a
            }
            (None, Some(&b)) => {
                rest.next();
                b
            }
            (None, None) => break,
        };
        visit.push(next);
    }
}

/// What `read` says of series `s` into `out`, its windows from `since_ns` on as `w` reads them; `counted`:
/// the counters' windows put so far into each link's, GPU's and the node's list, in that order; `put`: the
/// last reading of `s` a link gauge's map of `out` holds (`Scratch::gauge_bits`).
fn series_input<W: Windows>(
    out: &mut NodeInput,
    read: Read,
    s: &crate::store::Series,
    (since_ns, w): (i64, &W),
    (counted, put): (&mut [u32], &mut Option<u64>),
) {
    // Read only where a counter's window is put: a series read for nothing is not touched.
    let max_value = || match s.kind() {
        SeriesKind::Counter { max_value } => max_value,
        SeriesKind::Gauge => u64::MAX,
    };
    let links = out.links.len();
    match read {
        Read::Skip => {}
        Read::LinkCounter(i) => {
            let i = i as usize;
            if let (Some(l), Some(at)) = (out.links.get_mut(i), counted.get_mut(i)) {
                put_counter(&mut l.counters, at, s, w.ends(s, since_ns), max_value());
            }
        }
        Read::LinkGauge {
            link,
            mean,
            low,
            alone,
        } => {
            if let Some(l) = out.links.get_mut(link as usize) {
                link_gauge(l, s, (mean, low), (since_ns, w), (alone, put));
            }
        }
        Read::Cpu => out.cpu_utilization = gauge_mean(w.values_newest_first(s, since_ns)),
        Read::GpuCounter(g) => {
            let g = g as usize;
            if let (Some(e), Some(at)) = (out.gpus.get_mut(g), counted.get_mut(links + g)) {
                put_counter(&mut e.counters, at, s, w.ends(s, since_ns), max_value());
            }
        }
        Read::GpuMean(g, field) => {
            if let Some(e) = out.gpus.get_mut(g as usize) {
                let mean = gauge_mean(w.values_newest_first(s, since_ns));
                match field {
                    0 => e.busy_share = mean,
                    1 => e.sm_activity = mean,
                    2 => e.pcie_gen = mean,
                    3 => e.pcie_gen_max = mean,
                    4 => e.pcie_width = mean,
                    _ => e.pcie_width_max = mean,
                }
            }
        }
        Read::NodeCounter(recent) => {
            let since = counter_since(w, s, since_ns, recent);
            if let Some(at) = counted.last_mut() {
                put_counter(&mut out.counters, at, s, w.ends(s, since), max_value());
            }
        }
    }
}

/// The input as it was built before [`Plan`]: each series' part decided from its metric and labels as it is
/// read, every window read from the rings. The reference the plan's input is compared with
/// (`windows::tests`).
#[cfg(test)]
pub(crate) fn node_input_by_keys(n: &NodeState, since_ns: i64) -> NodeInput {
    let w = &StoreWindows(n);
    let mut out = NodeInput::bare(n);
    let mut bytes = vec![(None, None); out.links.len()];
    for s in n.series() {
        let key = s.key();
        let (m, kind) = (key.metric.as_str(), s.kind());
        let max_value = match kind {
            SeriesKind::Counter { max_value } => max_value,
            SeriesKind::Gauge => u64::MAX,
        };
        let counter = || counter_window(s, w.ends(s, since_ns), max_value);
        if key.link.is_some() {
            let Some(i) = s.link_index().filter(|&i| i < out.links.len()) else {
                continue;
            };
            match (m, kind) {
                ("tx_bytes", SeriesKind::Counter { .. }) => bytes[i].0 = Some(s.slot()),
                ("rx_bytes", SeriesKind::Counter { .. }) => bytes[i].1 = Some(s.slot()),
                (_, SeriesKind::Counter { .. }) => out.links[i].counters.extend(counter()),
                _ => {
                    let flags = (MEAN_GAUGES.contains(&m), LOW_GAUGES.contains(&m));
                    link_gauge(
                        &mut out.links[i],
                        s,
                        flags,
                        (since_ns, w),
                        (false, &mut None),
                    );
                }
            }
            continue;
        }
        let mean = || gauge_mean(w.values_newest_first(s, since_ns));
        match (key.labels.iter().find(|(k, _)| k == "gpu"), kind) {
            (None, SeriesKind::Gauge) => {
                if m == "cpu_utilization_ratio" && key.labels.is_empty() {
                    out.cpu_utilization = mean();
                }
            }
            (Some((_, g)), _) => {
                let i = match out.gpus.binary_search_by(|e| e.index.as_str().cmp(g)) {
                    Ok(i) => i,
                    Err(i) => {
                        let index = g.clone();
                        out.gpus.insert(
                            i,
                            GpuInput {
                                index,
                                ..Default::default()
                            },
                        );
                        i
                    }
                };
                let e = &mut out.gpus[i];
                match (m, kind) {
                    (_, SeriesKind::Counter { .. }) => e.counters.extend(counter()),
                    ("gpu_utilization_ratio", _) => e.busy_share = mean(),
                    ("gpu_sm_activity_ratio", _) => e.sm_activity = mean(),
                    ("gpu_pcie_link_gen", _) => e.pcie_gen = mean(),
                    ("gpu_pcie_link_gen_max", _) => e.pcie_gen_max = mean(),
                    ("gpu_pcie_link_width", _) => e.pcie_width = mean(),
                    ("gpu_pcie_link_width_max", _) => e.pcie_width_max = mean(),
                    _ => {}
                }
            }
            (None, SeriesKind::Counter { .. }) => {
                let since = counter_since(w, s, since_ns, RECENT_COUNTERS.contains(&m));
                out.counters
                    .extend(counter_window(s, w.ends(s, since), max_value));
            }
        }
    }
    let mut scratch = Scratch::default();
    for (i, l) in out.links.iter_mut().enumerate() {
        if reads_activity(&l.link) {
            l.activity = copied_activity(w, n, (i, bytes[i]), since_ns, &mut scratch);
        }
    }
    out
}

/// Each link's activity from its byte counters' windows (the links a rule reads it of, [`reads_activity`]).
fn link_activity<W: Windows>(
    n: &NodeState,
    links: &mut [LinkInput],
    since_ns: i64,
    w: &W,
    scratch: &mut Scratch,
) {
    for k in 0..scratch.plan.activity_links.len() {
        let i = scratch.plan.activity_links[k];
        let Some(l) = links.get_mut(i) else { continue };
        let slots = scratch.plan.bytes.get(i).copied().unwrap_or_default();
        w.activity(n, (i, slots), since_ns, scratch, &mut l.activity);
    }
}

impl NodeInput {
    /// Node `n`'s input before anything is read: its name and its links, each without figures.
    fn bare(n: &NodeState) -> NodeInput {
        NodeInput {
            name: n.name().to_string(),
            links: n
                .links()
                .iter()
                .map(|l| LinkInput::from_link(l.link.clone()))
                .collect(),
            ..Default::default()
        }
    }

    /// This input of `n` emptied for a build under the same layout ([`node_input_into`]): its allocations
    /// kept, every field that build sets anew cleared (a link's last gauge readings are updated in place, its
    /// counters' windows overwritten in place and the rest cut off after the build: [`put_counter`]; the
    /// activity of a link a rule reads it of is set anew, into its lists' allocations). `plan` is the
    /// build's, `links_at` the addresses of this input's links (`Scratch::links_at`), brought up to `n`'s.
    fn reset(mut self, n: &NodeState, plan: &Plan, links_at: &mut [usize]) -> NodeInput {
        // A link whose `Arc` the node still holds at the address this input's holds is the same link: the
        // input's is not looked at (`Scratch::links_at`).
        for ((state, at), l) in n.links().iter().zip(links_at).zip(&mut self.links) {
            let now = Arc::as_ptr(&state.link) as usize;
            if *at != now {
                l.link = state.link.clone();
                *at = now;
            }
        }
        // A read link's activity is set anew by the build, into the allocations of this one's; under the
        // same layout the others' stay `None` (not asked of each link: a look at every link's facts, one
        // cache miss each). The gauges' means and lows are only on the links with such gauges.
        for &i in &plan.gauge_links {
            if let Some(l) = self.links.get_mut(i) {
                l.gauge_means.clear();
                l.gauge_lows.clear();
            }
        }
        // A GPU gauge's mean is put only where its window is visited: one whose window emptied (a reader's
        // [`Windows::held_slots`] leaves it out) has none, as a fresh build finds it.
        for g in &mut self.gpus {
            (g.busy_share, g.sm_activity) = (None, None);
            (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) = (None, None, None, None);
        }
        // The steps are left for the caller to replace ([`build_nodes`]): dropped there, after the new list
        // took its counts on the same steps, their counts are written while in cache (cleared here, each of
        // the 64 steps' counts was a cache miss, under the node's lock).
        self.cpu_utilization = None;
        self
    }
}

/// Gauge `s` of link `l`: its last reading (updated in place), and its window mean and low where `(mean, low)`
/// say it is one of [`MEAN_GAUGES`] and [`LOW_GAUGES`]. `put` is the reading `l`'s map holds for `s` (`None`:
/// unknown): one that did not change is not put again (the map's look-up by the metric's name, the key's
/// strings read, was most of a gauge's cost), unless another series of the link has the same metric (not
/// `alone`: the map holds the last one's reading in slot order, as a fresh build puts them).
fn link_gauge<W: Windows>(
    l: &mut LinkInput,
    s: &crate::store::Series,
    (mean, low): (bool, bool),
    (since_ns, w): (i64, &W),
    (alone, put): (bool, &mut Option<u64>),
) {
    let last = s.last_raw().map(|(_, raw)| raw);
    let unchanged = alone && last.is_some() && last == *put;
    if unchanged && !mean && !low {
        return;
    }
    let m = s.key().metric.as_str();
    if let (Some(raw), false) = (last, unchanged) {
        let v = f64::from_bits(raw);
        match l.gauges.get_mut(m) {
            Some(g) => *g = v,
            None => {
                l.gauges.insert(m.to_string(), v);
            }
        }
    }
    *put = if alone { last } else { None };
    if mean {
        if let Some((mean, _)) = gauge_mean_of(w.values_newest_first(s, since_ns))
            .filter(|&(_, k)| k >= MIN_MEAN_SAMPLES)
        {
            l.gauge_means.insert(m.to_string(), mean);
        }
    }
    if low {
        if let Some(low) = gauge_lowest_positive(w.values_newest_first(s, since_ns)) {
            l.gauge_lows.insert(m.to_string(), low);
        }
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
        node_input,
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
/// `now_unix_ns` as `read(node, since_ns)` gives them under the node's lock ([`node_input`], or kept
/// windows), each with its steps of that window (of its [`STEPS_READ`] newest); timed in `passes` as
/// `pass="analysis_input"`.
pub fn build_nodes(
    store: &Store,
    steps: &StepStore,
    passes: &Passes,
    now_unix_ns: i64,
    names: &[String],
    mut read: impl FnMut(&NodeState, i64) -> NodeInput,
) -> Vec<NodeInput> {
    let since = now_unix_ns - WINDOW_NS;
    let timer = passes.timer("analysis_input");
    let nodes: Vec<NodeInput> = names
        .iter()
        .filter_map(|name| {
            let mut n = store.with_node(name, |n| read(n, since))?;
            // The previous steps (a reused input's, `node_input_into`) dropped once the new ones are taken.
            n.steps = steps
                .node_steps_since(name, STEPS_READ, since)
                .unwrap_or_default();
            Some(n)
        })
        .collect();
    timer.done(nodes.len());
    nodes
}

/// The figures of `link` in step `s`: found by the shared link first (a step and the input hold the store's
/// own `Arc`: a pointer compare, not a compare of the key's strings, per step and link read), else by its key
/// (a link announced again since the step). A node's links have distinct keys, so both find the same one.
pub fn step_figure<'s>(s: &'s NodeStep, link: &Arc<Link>) -> Option<&'s crate::steps::StepLink> {
    s.links
        .iter()
        .find(|x| Arc::ptr_eq(&x.link, link))
        .or_else(|| s.links.iter().find(|x| x.link.key == link.key))
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
            // Each step's fabric figures in brief (every link the test below may take is among them).
            self.steps
                .iter()
                .flat_map(|s| s.fabric())
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
        crate::steps::busy::median_select(&mut v)
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
        findings_with(keep, |_| true)
    }

    /// The rules' findings on a node whose links in `keep` have an activity, with peaks where `peaks`.
    fn findings_with(
        keep: impl Fn(&Link) -> bool,
        peaks: impl Fn(&Link) -> bool,
    ) -> Vec<super::super::Candidate> {
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
                l.activity = activity::analyse_with(&window, &window, Some(25e9), peaks(&l.link));
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
    fn no_rule_reads_the_peaks_of_links_left_without() {
        let every = findings_with(|_| true, |_| true);
        // The management NIC's peaks are what the management rule acts on: without any the findings differ.
        assert_ne!(every, findings_with(|_| true, |_| false), "{every:#?}");
        assert_eq!(
            findings_with(|_| true, reads_peaks),
            every,
            "a rule reads the peaks of a link that node_input leaves without them: widen reads_peaks"
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
