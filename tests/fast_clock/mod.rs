//! The fast-clock harness: the analysis rules driven by the simulator's model. Every link's counters are
//! computed by `commwatch_sim::JobModel` at 50 ms (bytes) and 1 s (errors, port state, GPUs, host) resolution —
//! the samples a real agent sends — turned into `AnalysisInput`s of 20 s windows, evaluated once per simulated
//! second and fed to the tracker, with the job history the engine keeps between evaluations.
//!
//! The cluster may carry any of the simulator's traffic variants (storage, overlapped buckets, idle nodes,
//! jitter, two jobs, eight rails, the design's magnitudes, a flapping port). The jobs are the ones the agents'
//! processes source reports (from the simulator's placement), unless a test asks for none; GPU and host data
//! are there unless a test asks for links only.

#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use commwatch_agent::source::gpu::GpuBackend;
use commwatch_agent::source::host::HostBackend;
use commwatch_collector::analysis::activity;
use commwatch_collector::analysis::input::{
    AnalysisInput, CounterKey, CounterWindow, GpuInput, JobInput, LinkInput, NodeInput, RankInput,
};
use commwatch_collector::analysis::scaling;
use commwatch_collector::analysis::tracker::{Change, Tracker};
use commwatch_collector::analysis::trend::JobTrends;
use commwatch_collector::analysis::{evaluate, Finding, Severity};
use commwatch_collector::model::{LinkClass, LinkRole, Rank};
use commwatch_sim::{
    ClusterSpec, JobModel, Link, PortCounter, Scenario, SimGpus, SimHost, Variant,
};

pub const FAST_NS: u64 = 50_000_000;
pub const WINDOW_S: u64 = 20;
pub const NS: u64 = 1_000_000_000;
const COUNTERS: &[(PortCounter, &str, u64)] = &[
    (PortCounter::SymbolError, "symbol_errors", 65_535),
    (PortCounter::LinkErrorRecovery, "link_error_recoveries", 255),
    (PortCounter::LinkDowned, "link_downed", 255),
    (PortCounter::PortRcvErrors, "rx_errors", 65_535),
    (
        PortCounter::PortXmitWait,
        "xmit_wait_ticks",
        u32::MAX as u64,
    ),
];

/// What the agents report besides the links' counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sources {
    /// GPU and host CPU gauges (the `gpu` and `host` sources).
    pub gpus: bool,
    /// The jobs' ranks (the `processes` source).
    pub jobs: bool,
}

/// Links only: the jobs' ranks but no GPU or host data.
pub const LINKS_ONLY: Sources = Sources {
    gpus: false,
    jobs: true,
};

impl Default for Sources {
    fn default() -> Self {
        Sources {
            gpus: true,
            jobs: true,
        }
    }
}

/// One link's rolling windows.
struct LinkFeed {
    link: Link,
    tx: VecDeque<(i64, u64)>,
    rx: VecDeque<(i64, u64)>,
    counters: Vec<VecDeque<(i64, u64)>>,
    /// `state` and `phys_state` at the last 1 s reading.
    state: (&'static str, &'static str),
}

/// A simulated cluster sampled on a fast clock. `switch` replaces the model (fault removed or added) keeping
/// every counter continuous.
pub struct Feed {
    model: JobModel,
    sources: Sources,
    nodes: Vec<Vec<LinkFeed>>,
    gpus: Vec<SimGpus>,
    hosts: Vec<SimHost>,
    /// Per-sample offsets after a model switch: (node, link) → tx, rx, counters.
    offsets: Vec<Vec<(i64, i64, Vec<i64>)>>,
    /// The jobs given to the rules (from the placement unless set).
    pub jobs: Vec<JobInput>,
    pub t_ns: u64,
}

fn links_of(model: &JobModel) -> Vec<Link> {
    let mut v: Vec<Link> = (0..model.hca_count()).map(Link::Hca).collect();
    v.push(Link::Eth0);
    v
}

/// The jobs as the agents' processes source reports them: one rank per GPU of every node of each job.
pub fn placement_jobs(model: &JobModel) -> Vec<JobInput> {
    let g = model.spec().gpus_per_node;
    model
        .jobs()
        .iter()
        .map(|j| {
            let mut job = JobInput {
                id: j.id.clone(),
                ..Default::default()
            };
            for (i, &n) in j.nodes.iter().enumerate() {
                for gpu in 0..g {
                    job.ranks.push(RankInput {
                        node: model.node_name(n).expect("name").to_string(),
                        process: Rank {
                            rank: Some((i * g + gpu) as u32),
                            world_size: Some(j.ranks as u32),
                            gpus: vec![gpu.to_string()],
                            ..Default::default()
                        },
                    });
                }
            }
            job
        })
        .collect()
}

impl Feed {
    pub fn new(spec: ClusterSpec) -> Feed {
        Feed::with_sources(spec, Sources::default())
    }

    pub fn with_sources(spec: ClusterSpec, sources: Sources) -> Feed {
        let model = JobModel::new(&spec).expect("model");
        let epoch = Instant::now();
        let n = spec.nodes;
        let nodes = (0..n)
            .map(|_| {
                links_of(&model)
                    .into_iter()
                    .map(|link| LinkFeed {
                        link,
                        tx: VecDeque::new(),
                        rx: VecDeque::new(),
                        counters: vec![VecDeque::new(); COUNTERS.len()],
                        state: ("4: ACTIVE", "5: LinkUp"),
                    })
                    .collect()
            })
            .collect();
        let offsets = (0..n)
            .map(|_| vec![(0, 0, vec![0; COUNTERS.len()]); model.hca_count() + 1])
            .collect();
        let mut feed = Feed {
            gpus: (0..n).map(|i| SimGpus::new(&model, i, epoch)).collect(),
            hosts: (0..n).map(|i| SimHost::new(&model, i, epoch)).collect(),
            jobs: if sources.jobs {
                placement_jobs(&model)
            } else {
                Vec::new()
            },
            sources,
            model,
            nodes,
            offsets,
            t_ns: 0,
        };
        // The agents run when the job starts: their first readings, fast and slow, are at t = 0.
        for node in 0..n {
            for li in 0..feed.nodes[node].len() {
                feed.sample(node, li, 0, true, 0);
            }
        }
        feed
    }

    pub fn model(&self) -> &JobModel {
        &self.model
    }

    /// The first job's nominal step, seconds.
    pub fn period_s(&self) -> f64 {
        self.model.timeline().period.as_secs_f64()
    }

    /// Steps of the first job by simulated second `second`.
    pub fn steps_at(&self, second: u64) -> f64 {
        second as f64 / self.period_s()
    }

    fn raw(&self, node: usize, link: Link, t: u64) -> (u64, u64, Vec<u64>) {
        let b = self
            .model
            .expected_link_bytes(node, link, Duration::from_nanos(t))
            .expect("bytes");
        let c = match link {
            Link::Hca(g) => COUNTERS
                .iter()
                .map(|(pc, _, _)| {
                    self.model
                        .port_counter(node, g, *pc, Duration::from_nanos(t))
                        .expect("counter")
                })
                .collect(),
            _ => vec![0; COUNTERS.len()],
        };
        (b.tx, b.rx, c)
    }

    /// Replaces the model at the current time; counters continue from their current values (the jobs stay
    /// as they are).
    pub fn switch(&mut self, spec: ClusterSpec) {
        let new = JobModel::new(&spec).expect("model");
        let t = self.t_ns;
        for node in 0..self.nodes.len() {
            for (li, link) in links_of(&self.model).into_iter().enumerate() {
                let (otx, orx, oc) = self.raw(node, link, t);
                let b = new
                    .expected_link_bytes(node, link, Duration::from_nanos(t))
                    .expect("bytes");
                let off = &mut self.offsets[node][li];
                off.0 += otx as i64 - b.tx as i64;
                off.1 += orx as i64 - b.rx as i64;
                if let Link::Hca(g) = link {
                    for (k, (pc, _, _)) in COUNTERS.iter().enumerate() {
                        let v = new
                            .port_counter(node, g, *pc, Duration::from_nanos(t))
                            .expect("counter");
                        off.2[k] += oc[k] as i64 - v as i64;
                    }
                }
            }
        }
        let epoch = Instant::now();
        self.gpus = (0..self.nodes.len())
            .map(|i| SimGpus::new(&new, i, epoch))
            .collect();
        self.hosts = (0..self.nodes.len())
            .map(|i| SimHost::new(&new, i, epoch))
            .collect();
        self.model = new;
    }

    /// Advances one second, sampling bytes at 50 ms and counters and port states at 1 s; returns the input
    /// of the window ending now.
    pub fn advance(&mut self) -> AnalysisInput {
        let end = self.t_ns + NS;
        let horizon = end.saturating_sub(WINDOW_S * NS) as i64;
        let mut t = self.t_ns + FAST_NS;
        while t <= end {
            for node in 0..self.nodes.len() {
                for li in 0..self.nodes[node].len() {
                    self.sample(node, li, t, t == end, horizon);
                }
            }
            t += FAST_NS;
        }
        self.t_ns = end;
        self.input()
    }

    fn sample(&mut self, node: usize, li: usize, t: u64, slow: bool, horizon: i64) {
        let link = self.nodes[node][li].link;
        let (tx, rx, c) = self.raw(node, link, t);
        let state = match (slow, link) {
            (true, Link::Hca(g)) => {
                let at = Duration::from_nanos(t);
                Some((
                    self.model.port_state(node, g, at).expect("state"),
                    self.model.port_phys_state(node, g, at).expect("phys"),
                ))
            }
            _ => None,
        };
        let off = &self.offsets[node][li];
        let lf = &mut self.nodes[node][li];
        lf.tx.push_back((t as i64, (tx as i64 + off.0) as u64));
        lf.rx.push_back((t as i64, (rx as i64 + off.1) as u64));
        if slow {
            for (k, v) in c.iter().enumerate() {
                lf.counters[k].push_back((t as i64, (*v as i64 + off.2[k]) as u64));
            }
        }
        if let Some(s) = state {
            lf.state = s;
        }
        for q in [&mut lf.tx, &mut lf.rx] {
            while q.front().is_some_and(|(ts, _)| *ts < horizon) {
                q.pop_front();
            }
        }
        for q in &mut lf.counters {
            while q.front().is_some_and(|(ts, _)| *ts < horizon) {
                q.pop_front();
            }
        }
    }

    fn link_input(&self, node: usize, lf: &LinkFeed) -> LinkInput {
        let lm = self.model.link(node, lf.link).expect("link");
        let (class, role, device, port) = match lf.link {
            Link::Hca(g) => (
                LinkClass::Infiniband,
                LinkRole::Fabric,
                format!("mlx5_{g}"),
                "1".to_string(),
            ),
            _ => (
                LinkClass::Ethernet,
                LinkRole::Management,
                "eth0".into(),
                "eth0".into(),
            ),
        };
        let mut l = LinkInput::new(class, &device, &port, role);
        let link = std::sync::Arc::make_mut(&mut l.link);
        link.capacity_bytes_per_second = Some(lm.capacity_bytes_per_second as f64);
        if matches!(lf.link, Link::Hca(_)) {
            link.state = lf.state.0.to_string();
            link.attributes
                .insert("phys_state".into(), lf.state.1.to_string());
        }
        let tx: Vec<_> = lf.tx.iter().copied().collect();
        let rx: Vec<_> = lf.rx.iter().copied().collect();
        l.activity = activity::analyse(&tx, &rx, l.link.capacity_bytes_per_second);
        if matches!(lf.link, Link::Hca(_)) {
            for (k, (_, metric, max)) in COUNTERS.iter().enumerate() {
                let q = &lf.counters[k];
                if let (Some(a), Some(b)) = (q.front(), q.back()) {
                    l.counters.push(CounterWindow {
                        key: CounterKey(std::sync::Arc::new(
                            commwatch_collector::store::SeriesKey {
                                link: None,
                                metric: metric.to_string(),
                                labels: vec![],
                            },
                        )),
                        increase: b.1.saturating_sub(a.1),
                        window_s: (b.0 - a.0) as f64 / 1e9,
                        saturated: b.1 >= *max,
                        raw: b.1,
                    });
                }
            }
        }
        l
    }

    /// GPUs and host: the 1 s readings of the window (`(t0, now]`), as the slow tier takes them, each the mean
    /// over the second before it.
    fn gpus_and_host(&mut self, node: usize, t0: u64) -> (Vec<GpuInput>, Option<f64>) {
        if !self.sources.gpus {
            return (Vec::new(), None);
        }
        let mut busy = Vec::new();
        let mut cpu = Vec::new();
        let mut s = t0 + NS;
        while s <= self.t_ns {
            self.gpus[node].set_time(Some(Duration::from_nanos(s)));
            busy.push(f64::from(self.gpus[node].utilization(0).expect("util").gpu_percent) / 100.0);
            self.hosts[node].set_time(Some(Duration::from_nanos(s)));
            cpu.push(f64::from(self.hosts[node].read().cpu_percent) / 100.0);
            s += NS;
        }
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let sm =
            self.gpus[node].sm_activity(Duration::from_nanos(t0), Duration::from_nanos(self.t_ns));
        let gpus = (0..self.model.spec().gpus_per_node)
            .map(|g| GpuInput {
                index: g.to_string(),
                busy_share: mean(&busy),
                sm_activity: Some(sm),
                ..Default::default()
            })
            .collect();
        (gpus, mean(cpu.get(1..).unwrap_or(&[])))
    }

    fn input(&mut self) -> AnalysisInput {
        let t0 = self.t_ns.saturating_sub(WINDOW_S * NS);
        let mut nodes = Vec::new();
        for node in 0..self.nodes.len() {
            let name = self.model.node_name(node).expect("name").to_string();
            let links = self.nodes[node]
                .iter()
                .map(|lf| self.link_input(node, lf))
                .collect();
            let (gpus, cpu_utilization) = self.gpus_and_host(node, t0);
            nodes.push(NodeInput {
                name,
                links,
                steps: vec![],
                gpus,
                cpu_utilization,
                counters: Vec::new(),
            });
        }
        AnalysisInput {
            now_unix_ns: self.t_ns as i64,
            nodes,
            jobs: self.jobs.clone(),
            ..Default::default()
        }
    }
}

/// Findings with the simulated second they changed at.
pub type Timed = Vec<(u64, Finding)>;

/// What the engine keeps between evaluations: the tracker's hysteresis and the jobs' own history.
#[derive(Default)]
pub struct Monitor {
    pub tracker: Tracker,
    pub trends: JobTrends,
    /// Episodes at warning or above: a finding id entering the set of active findings at warning or
    /// above, with the second it did.
    pub warnings: Vec<(u64, Finding)>,
    at_warning: BTreeMap<String, Severity>,
}

impl Monitor {
    pub fn new() -> Monitor {
        Monitor::default()
    }

    /// One evaluation of `input` at simulated second `now`, as the engine does it.
    pub fn evaluate(&mut self, mut input: AnalysisInput, now: u64) -> Vec<Change> {
        let now_s = now as f64;
        input.job_references = self.trends.references(now_s);
        let changes = self.tracker.update(now_s, evaluate(&input));
        self.trends.observe(&scaling::job_figures(&input), now_s);
        let active: BTreeMap<String, Finding> = self
            .tracker
            .active()
            .into_iter()
            .filter(|f| f.severity >= Severity::Warning)
            .map(|f| (f.id.clone(), f))
            .collect();
        for (id, f) in &active {
            if !self.at_warning.contains_key(id) {
                self.warnings.push((now, f.clone()));
            }
        }
        self.at_warning = active.into_iter().map(|(k, f)| (k, f.severity)).collect();
        changes
    }
}

/// Runs `secs` simulated seconds through rules and tracker; returns (second of each raise, finding) and
/// (second of each clear, finding).
pub fn run(feed: &mut Feed, monitor: &mut Monitor, secs: u64) -> (Timed, Timed) {
    let (mut raised, mut cleared) = (Vec::new(), Vec::new());
    for _ in 0..secs {
        let input = feed.advance();
        let now = feed.t_ns / NS;
        for ch in monitor.evaluate(input, now) {
            match ch {
                Change::Raised(f) => raised.push((now, f)),
                Change::Cleared(f) => cleared.push((now, f)),
                Change::Updated(_) => {}
            }
        }
    }
    (raised, cleared)
}

pub fn spec(s: Scenario) -> ClusterSpec {
    ClusterSpec::with_scenario(s)
}

pub fn spec_with(s: Scenario, variants: &[Variant]) -> ClusterSpec {
    ClusterSpec::with_variants(s, variants)
}
