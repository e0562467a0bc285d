//! The analysis rules driven by the simulator's model on a fast clock: every link's counters are computed by
//! `commwatch_sim::JobModel` at 50 ms (bytes) and 1 s (errors, GPUs, host) resolution — the samples a real agent
//! would send — turned into `AnalysisInput`s of 20 s windows, evaluated once per simulated second and fed to the
//! tracker. Asserts which findings are raised, on which subject, with which numbers, after how many steps; that
//! they clear after the fault is removed; and that `healthy` raises nothing at warning or above for ten minutes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use commwatch_agent::source::gpu::GpuBackend;
use commwatch_agent::source::host::HostBackend;
use commwatch_collector::analysis::activity;
use commwatch_collector::analysis::input::{
    AnalysisInput, ConflictInput, CounterWindow, GpuInput, JobInput, LinkInput, NodeInput,
    RankInput,
};
use commwatch_collector::analysis::tracker::{Change, Tracker, CLEAR_AFTER, RAISE_AFTER};
use commwatch_collector::analysis::{evaluate, Finding, FindingKind, Severity};
use commwatch_collector::model::{LinkClass, LinkRole};
use commwatch_sim::{ClusterSpec, JobModel, Link, PortCounter, Scenario, SimGpus, SimHost};

const FAST_NS: u64 = 50_000_000;
const WINDOW_S: u64 = 20;
const NS: u64 = 1_000_000_000;
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

/// One link's rolling windows.
struct LinkFeed {
    link: Link,
    tx: VecDeque<(i64, u64)>,
    rx: VecDeque<(i64, u64)>,
    counters: Vec<VecDeque<(i64, u64)>>,
}

/// A simulated cluster sampled on a fast clock. `switch` replaces the model (fault removed) keeping every
/// counter continuous.
struct Feed {
    model: JobModel,
    nodes: Vec<Vec<LinkFeed>>,
    gpus: Vec<SimGpus>,
    hosts: Vec<SimHost>,
    /// Per-sample offsets after a model switch: (node, link) → tx, rx, counters.
    offsets: Vec<Vec<(i64, i64, Vec<i64>)>>,
    jobs: Vec<JobInput>,
    t_ns: u64,
}

fn links_of(model: &JobModel) -> Vec<Link> {
    let g = model.spec().gpus_per_node;
    let mut v: Vec<Link> = (0..g).map(Link::Hca).collect();
    v.push(Link::Eth0);
    v
}

impl Feed {
    fn new(spec: ClusterSpec) -> Feed {
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
                    })
                    .collect()
            })
            .collect();
        let offsets = (0..n)
            .map(|_| vec![(0, 0, vec![0; COUNTERS.len()]); spec.gpus_per_node + 1])
            .collect();
        Feed {
            gpus: (0..n).map(|i| SimGpus::new(&model, i, epoch)).collect(),
            hosts: (0..n).map(|i| SimHost::new(&model, i, epoch)).collect(),
            model,
            nodes,
            offsets,
            jobs: Vec::new(),
            t_ns: 0,
        }
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

    /// Replaces the model at the current time; counters continue from their current values.
    fn switch(&mut self, spec: ClusterSpec) {
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

    /// Advances one second, sampling bytes at 50 ms and counters at 1 s; returns the input of the window ending
    /// now.
    fn advance(&mut self) -> AnalysisInput {
        let end = self.t_ns + NS;
        let horizon = end.saturating_sub(WINDOW_S * NS) as i64;
        let mut t = self.t_ns + FAST_NS;
        while t <= end {
            for node in 0..self.nodes.len() {
                for li in 0..self.nodes[node].len() {
                    let link = self.nodes[node][li].link;
                    let (tx, rx, c) = self.raw(node, link, t);
                    let off = &self.offsets[node][li];
                    let lf = &mut self.nodes[node][li];
                    lf.tx.push_back((t as i64, (tx as i64 + off.0) as u64));
                    lf.rx.push_back((t as i64, (rx as i64 + off.1) as u64));
                    if t == end {
                        for (k, v) in c.iter().enumerate() {
                            lf.counters[k].push_back((t as i64, (*v as i64 + off.2[k]) as u64));
                        }
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
            }
            t += FAST_NS;
        }
        self.t_ns = end;
        self.input()
    }

    fn input(&mut self) -> AnalysisInput {
        let t0 = self.t_ns.saturating_sub(WINDOW_S * NS).max(NS);
        let mut nodes = Vec::new();
        for node in 0..self.nodes.len() {
            let name = self.model.node_name(node).expect("name").to_string();
            let mut links = Vec::new();
            for lf in &self.nodes[node] {
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
                l.link.capacity_bytes_per_second = Some(lm.capacity_bytes_per_second as f64);
                let tx: Vec<_> = lf.tx.iter().copied().collect();
                let rx: Vec<_> = lf.rx.iter().copied().collect();
                l.activity = activity::analyse(&tx, &rx, l.link.capacity_bytes_per_second);
                for (k, (_, metric, max)) in COUNTERS.iter().enumerate() {
                    let q = &lf.counters[k];
                    if let (Some(a), Some(b)) = (q.front(), q.back()) {
                        if matches!(lf.link, Link::Hca(_)) {
                            l.counters.push(CounterWindow {
                                metric: metric.to_string(),
                                labels: vec![],
                                increase: b.1.saturating_sub(a.1),
                                window_s: (b.0 - a.0) as f64 / 1e9,
                                saturated: b.1 >= *max,
                                raw: b.1,
                            });
                        }
                    }
                }
                links.push(l);
            }
            // GPUs and host: 1 s readings over the window, as the slow tier takes them.
            let mut busy = Vec::new();
            let mut cpu = Vec::new();
            let mut s = t0 + NS;
            while s <= self.t_ns {
                self.gpus[node].set_time(Some(Duration::from_nanos(s)));
                busy.push(
                    f64::from(self.gpus[node].utilization(0).expect("util").gpu_percent) / 100.0,
                );
                self.hosts[node].set_time(Some(Duration::from_nanos(s)));
                cpu.push(f64::from(self.hosts[node].read().cpu_percent) / 100.0);
                s += NS;
            }
            let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
            let sm = self.gpus[node]
                .sm_activity(Duration::from_nanos(t0), Duration::from_nanos(self.t_ns));
            let gpus = (0..self.model.spec().gpus_per_node)
                .map(|g| GpuInput {
                    index: g.to_string(),
                    busy_share: mean(&busy),
                    sm_activity: Some(sm),
                    ..Default::default()
                })
                .collect();
            nodes.push(NodeInput {
                name,
                links,
                steps: vec![],
                gpus,
                cpu_utilization: mean(cpu.get(1..).unwrap_or(&[])),
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
type Timed = Vec<(u64, Finding)>;

/// Runs `secs` simulated seconds through rules and tracker; returns (second of each raise, finding).
fn run(feed: &mut Feed, tracker: &mut Tracker, secs: u64) -> (Timed, Timed) {
    let (mut raised, mut cleared) = (Vec::new(), Vec::new());
    for _ in 0..secs {
        let input = feed.advance();
        let now = feed.t_ns / NS;
        for ch in tracker.update(now as f64, evaluate(&input)) {
            match ch {
                Change::Raised(f) => raised.push((now, f)),
                Change::Cleared(f) => cleared.push((now, f)),
                Change::Updated(_) => {}
            }
        }
    }
    (raised, cleared)
}

fn spec(s: Scenario) -> ClusterSpec {
    ClusterSpec::with_scenario(s)
}

fn steps_at(feed: &Feed, second: u64) -> f64 {
    second as f64 / feed.model.timeline().period.as_secs_f64()
}

#[test]
fn healthy_ten_minutes_raises_nothing_at_warning_or_above() {
    let mut feed = Feed::new(spec(Scenario::Healthy));
    let mut tr = Tracker::new();
    let (raised, _) = run(&mut feed, &mut tr, 600);
    let bad: Vec<_> = raised
        .iter()
        .filter(|(_, f)| f.severity >= Severity::Warning)
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
    assert!(raised.is_empty(), "{raised:#?}");
}

#[test]
fn management_nic_classic_case_with_root_cause() {
    let mut feed = Feed::new(spec(Scenario::ManagementNic));
    // The job: 8 ranks per node; node-03's ranks carry NCCL_SOCKET_IFNAME=eth0 and the agent's conflict.
    let mut job = JobInput {
        id: "job-42".into(),
        ..Default::default()
    };
    for n in 0..8 {
        for g in 0..8 {
            let mut r = RankInput {
                node: format!("node-{n:02}"),
                rank: Some(n * 8 + g),
                world_size: Some(64),
                gpus: vec![g.to_string()],
                ..Default::default()
            };
            if n == 3 {
                r.nccl.insert("NCCL_SOCKET_IFNAME".into(), "eth0".into());
            }
            job.ranks.push(r);
        }
    }
    job.conflicts.push(ConflictInput {
        node: "node-03".into(),
        setting: "NCCL_SOCKET_IFNAME".into(),
        value: "eth0".into(),
        kind: "management_interface".into(),
        reason: "eth0 is a management interface while InfiniBand ports are active".into(),
    });
    feed.jobs = vec![job];
    let mut tr = Tracker::new();
    let (raised, _) = run(&mut feed, &mut tr, 15);
    let mgmt = raised
        .iter()
        .find(|(_, f)| f.kind == FindingKind::ManagementNetworkTraffic)
        .expect("management finding");
    let f = &mgmt.1;
    assert_eq!(f.subject.node, "node-03");
    assert_eq!(f.subject.interface.as_deref(), Some("eth0"));
    assert_eq!(f.severity, Severity::Critical);
    // 9.8e9 B/s on eth0 (+ its 1–5 MB/s background), 3 465 000 000 B per step, every 0.6436 s.
    let rate = f.evidence.measured;
    assert!((rate - 9.8e9).abs() < 0.01 * 9.8e9, "{rate}");
    let per_step = f.evidence.details["bytes_per_step"].as_f64().unwrap();
    assert!((per_step - 3.465e9).abs() < 0.02 * 3.465e9, "{per_step}");
    let period = f.evidence.details["step_period_s"].as_f64().unwrap();
    assert!((period - 0.6436).abs() < 0.03, "{period}");
    assert_eq!(f.evidence.expected, Some(25e9));
    assert_eq!(
        f.evidence.details["explained_by"],
        "NCCL_SOCKET_IFNAME=eth0"
    );
    assert!(f.action.contains("NCCL_SOCKET_IFNAME="), "{}", f.action);
    assert_eq!(
        f.caused_by.as_deref(),
        Some("nccl_misconfiguration:node-03:NCCL_SOCKET_IFNAME:job=job-42")
    );
    // Detection delay: the raise needs MIN_BURSTS complete bursts then RAISE_AFTER evaluations.
    let delay_steps = steps_at(&feed, mgmt.0);
    eprintln!(
        "management_network_traffic detection delay: {} s = {:.1} steps",
        mgmt.0, delay_steps
    );
    assert!(delay_steps <= 12.0, "{delay_steps}");
    // Every other node's HCAs look underutilised (1.225e9 B/s of 25e9): one job-level finding lists the 7
    // nodes and points to the root cause; the 56 links are its consequences, all at info.
    let under: Vec<_> = raised
        .iter()
        .filter(|(_, f)| f.kind == FindingKind::LinkUnderutilized && !f.is_rollup())
        .collect();
    assert_eq!(
        under.len(),
        7 * 8,
        "{:#?}",
        under.iter().map(|u| &u.1.id).collect::<Vec<_>>()
    );
    let (rollup_at, rollup) = raised
        .iter()
        .find(|(_, f)| f.kind == FindingKind::LinkUnderutilized && f.is_rollup())
        .expect("job-level link_underutilized");
    assert_eq!(rollup.id, "link_underutilized:job=job-42");
    assert_eq!(rollup.caused_by.as_deref(), Some(f.id.as_str()));
    assert!(!rollup.root);
    assert_eq!(rollup.severity, Severity::Info);
    // A cause lists the findings raised under it (as they are now, not as they were at its raise).
    let listed = |id: &str| -> Vec<String> {
        let all = tr.findings();
        all.into_iter()
            .find(|x| x.id == id)
            .expect("listed")
            .consequences
    };
    assert!(listed(&f.id).contains(&rollup.id));
    let nodes: Vec<String> = (0..8)
        .filter(|n| *n != 3)
        .map(|n| format!("node-{n:02}"))
        .collect();
    assert_eq!(
        rollup.evidence.details["nodes"],
        serde_json::json!(nodes),
        "{:#?}",
        rollup.evidence
    );
    assert_eq!(rollup.evidence.details["findings"], 56);
    for (at, u) in &under {
        assert_ne!(u.subject.node, "node-03");
        assert_eq!(u.severity, Severity::Info);
        assert!(!u.root);
        assert_eq!(u.caused_by.as_deref(), Some(rollup.id.as_str()));
        assert!(
            (u.evidence.measured - 1.225e9).abs() < 0.02 * 1.225e9,
            "{}",
            u.evidence.measured
        );
        // Never raised before its cause, which is never raised before its own.
        assert!(*at >= *rollup_at && *rollup_at >= mgmt.0);
    }
    // The per-link figures' range is the roll-up's.
    let lo = rollup.evidence.details["min"].as_f64().unwrap();
    let hi = rollup.evidence.details["max"].as_f64().unwrap();
    assert!(
        lo <= hi && (lo - 1.225e9).abs() < 0.02 * 1.225e9,
        "{lo} {hi}"
    );
    let nccl = raised
        .iter()
        .find(|(_, f)| f.kind == FindingKind::NcclMisconfiguration)
        .expect("nccl");
    assert!(listed(&nccl.1.id).contains(&f.id));
    assert!(nccl.1.root && !f.root);
    assert!(nccl.0 <= mgmt.0);
    // Exactly one root cause: the setting. Everything else leads up to it.
    let roots: Vec<String> = tr
        .active()
        .into_iter()
        .filter(|f| f.root)
        .map(|f| f.id)
        .collect();
    assert_eq!(roots, std::slice::from_ref(&nccl.1.id));
    // Scaling (GPU data: exposed communication): 343.6 ms of 643.6 ms exposed → ≈ 0.47, a consequence.
    let sc = raised
        .iter()
        .find(|(_, f)| f.kind == FindingKind::ScalingEfficiencyDrop)
        .expect("scaling");
    assert_eq!(sc.1.evidence.details["method"], "exposed_communication");
    assert!(
        (sc.1.evidence.measured - 0.47).abs() < 0.05,
        "{}",
        sc.1.evidence.measured
    );
    assert_eq!(sc.1.severity, Severity::Info);
    // Fault removed (NCCL bound to the fabric): everything clears.
    feed.switch(spec(Scenario::Healthy));
    let (again, cleared) = run(&mut feed, &mut tr, WINDOW_S + CLEAR_AFTER as u64 + 3);
    assert!(again.is_empty(), "{again:#?}");
    assert!(
        tr.active()
            .iter()
            .all(|f| f.kind == FindingKind::NcclMisconfiguration),
        "{:#?}",
        tr.active()
    );
    assert!(cleared.iter().any(|(_, c)| c.id == f.id));
}

#[test]
fn degraded_link_congestion_and_clear() {
    let mut feed = Feed::new(spec(Scenario::DegradedLink));
    let mut tr = Tracker::new();
    let (raised, _) = run(&mut feed, &mut tr, 12);
    let d = raised
        .iter()
        .find(|(_, f)| f.kind == FindingKind::LinkDegraded)
        .expect("degraded");
    assert_eq!(
        (d.1.subject.node.as_str(), d.1.subject.device.as_deref()),
        ("node-03", Some("mlx5_0"))
    );
    assert_eq!(d.1.evidence.measured, 12.5e9);
    assert_eq!(d.1.evidence.expected, Some(25e9));
    eprintln!(
        "link_degraded detection delay: {} s = {:.1} steps",
        d.0,
        steps_at(&feed, d.0)
    );
    assert_eq!(d.0, RAISE_AFTER as u64);
    let c = raised
        .iter()
        .find(|(_, f)| f.kind == FindingKind::Congestion)
        .expect("congestion");
    assert_eq!(
        (c.1.subject.node.as_str(), c.1.subject.device.as_deref()),
        ("node-03", Some("mlx5_0"))
    );
    assert_eq!(c.1.caused_by.as_deref(), Some(d.1.id.as_str()));
    // 40% of the 39.4 ms burst waiting; at 50 ms sampling a burst straddles one or two intervals, so the busy
    // time is over-counted and the share reads between the threshold (0.10) and 0.40.
    assert!(
        c.1.evidence.measured > 0.10 && c.1.evidence.measured <= 0.40,
        "{}",
        c.1.evidence.measured
    );
    eprintln!(
        "congestion detection delay: {} s = {:.1} steps",
        c.0,
        steps_at(&feed, c.0)
    );
    assert!(!raised
        .iter()
        .any(|(_, f)| f.kind == FindingKind::Congestion
            && f.subject.device.as_deref() != Some("mlx5_0")));
    feed.switch(spec(Scenario::Healthy));
    let (_, cleared) = run(&mut feed, &mut tr, WINDOW_S + CLEAR_AFTER as u64 + 3);
    assert!(cleared.iter().any(|(_, f)| f.id == d.1.id));
    assert!(tr.active().is_empty(), "{:#?}", tr.active());
}

#[test]
fn link_errors_rates_then_clear() {
    let mut feed = Feed::new(spec(Scenario::LinkErrors));
    let mut tr = Tracker::new();
    let (raised, _) = run(&mut feed, &mut tr, 10);
    assert_eq!(raised.len(), 1, "{raised:#?}");
    let (at, f) = &raised[0];
    assert_eq!(f.kind, FindingKind::LinkErrors);
    assert_eq!(
        (
            f.subject.node.as_str(),
            f.subject.device.as_deref(),
            f.subject.port.as_deref()
        ),
        ("node-03", Some("mlx5_0"), Some("1"))
    );
    assert_eq!(f.severity, Severity::Critical, "link_error_recoveries rise");
    // One symbol error every 25 ms, one port_rcv_error every 80 ms.
    let sym = f.evidence.details["symbol_errors_per_second"]
        .as_f64()
        .unwrap();
    let rcv = f.evidence.details["rx_errors_per_second"].as_f64().unwrap();
    assert!((sym - 40.0).abs() < 1.0, "{sym}");
    assert!((rcv - 12.5).abs() < 0.5, "{rcv}");
    eprintln!(
        "link_errors detection delay: {at} s = {:.1} steps",
        steps_at(&feed, *at)
    );
    feed.switch(spec(Scenario::Healthy));
    let (_, cleared) = run(&mut feed, &mut tr, WINDOW_S + CLEAR_AFTER as u64 + 2);
    assert_eq!(cleared.len(), 1);
    assert!(tr.active().is_empty());
}

#[test]
fn straggler_node_found_from_gpu_busy_share() {
    let mut feed = Feed::new(spec(Scenario::Straggler));
    let mut tr = Tracker::new();
    let (raised, _) = run(&mut feed, &mut tr, 25);
    let s: Vec<_> = raised
        .iter()
        .filter(|(_, f)| f.kind == FindingKind::Straggler)
        .collect();
    assert_eq!(s.len(), 1, "{raised:#?}");
    assert_eq!(s[0].1.subject.node, "node-03");
    // node-03 computes 390 ms of 399.7 ms (+ its burst share); the others 300 + 19.7.
    assert!(
        (s[0].1.evidence.measured - 1.0).abs() < 0.03,
        "{}",
        s[0].1.evidence.measured
    );
    assert!((s[0].1.evidence.expected.unwrap() - 0.80).abs() < 0.03);
    eprintln!(
        "straggler detection delay: {} s = {:.1} steps",
        s[0].0,
        steps_at(&feed, s[0].0)
    );
    assert!(
        !raised
            .iter()
            .any(|(_, f)| f.severity >= Severity::Warning && f.kind != FindingKind::Straggler),
        "{raised:#?}"
    );
}

#[test]
fn no_overlap_is_exposed_communication() {
    let mut feed = Feed::new(spec(Scenario::NoOverlap));
    let mut tr = Tracker::new();
    let (raised, _) = run(&mut feed, &mut tr, 25);
    let e: Vec<_> = raised
        .iter()
        .filter(|(_, f)| f.kind == FindingKind::ExposedCommunication && !f.is_rollup())
        .collect();
    assert_eq!(e.len(), 8, "{raised:#?}");
    // One problem of the job: the nodes' findings roll up into one about the job.
    let job = job_finding(&raised, FindingKind::ExposedCommunication);
    rolled_up(&raised, &tr.findings(), job);
    assert!(job.summary.contains("8 nodes spend"), "{}", job.summary);
    // 19.6875 ms of 319.6875 ms exposed = 0.0616.
    for (_, f) in &e {
        assert!(
            (f.evidence.measured - 0.0616).abs() < 0.01,
            "{}",
            f.evidence.measured
        );
    }
    eprintln!(
        "exposed_communication detection delay: {} s = {:.1} steps",
        e[0].0,
        steps_at(&feed, e[0].0)
    );
    assert!(!raised.iter().any(|(_, f)| f.kind == FindingKind::CpuBound));
}

#[test]
fn cpu_bound_not_blamed_on_nccl() {
    let mut feed = Feed::new(spec(Scenario::CpuBound));
    let mut tr = Tracker::new();
    let (raised, _) = run(&mut feed, &mut tr, 25);
    let c: Vec<_> = raised
        .iter()
        .filter(|(_, f)| f.kind == FindingKind::CpuBound && !f.is_rollup())
        .collect();
    assert_eq!(c.len(), 8, "{raised:#?}");
    let job = job_finding(&raised, FindingKind::CpuBound);
    rolled_up(&raised, &tr.findings(), job);
    assert!(job.summary.contains("GPUs of 8 nodes"), "{}", job.summary);
    // GPUs idle 250 of 559.6875 ms = 0.4467.
    for (_, f) in &c {
        assert!(
            (f.evidence.measured - 0.4467).abs() < 0.03,
            "{}",
            f.evidence.measured
        );
    }
    eprintln!(
        "cpu_bound detection delay: {} s = {:.1} steps",
        c[0].0,
        steps_at(&feed, c[0].0)
    );
    assert!(
        !raised.iter().any(|(_, f)| matches!(
            f.kind,
            FindingKind::ExposedCommunication | FindingKind::LinkUnderutilized
        )),
        "{raised:#?}"
    );
}

/// The job-level finding of `kind` among `raised` (a roll-up).
fn job_finding(raised: &Timed, kind: FindingKind) -> &Finding {
    &raised
        .iter()
        .find(|(_, f)| f.kind == kind && f.is_rollup())
        .unwrap_or_else(|| panic!("no job-level {kind:?}: {raised:#?}"))
        .1
}

/// Checks the roll-up `job` of an 8-node scenario: a root cause, the only finding at warning or above, raised
/// no later than the nodes' findings of its kind; its evidence lists every node and the range of their
/// figures; the nodes' findings are its consequences at info (`now`: the findings as they are at the end).
fn rolled_up(raised: &Timed, now: &[Finding], job: &Finding) {
    assert!(job.root && job.caused_by.is_none(), "{job:#?}");
    let at = raised.iter().find(|(_, f)| f.id == job.id).unwrap().0;
    let nodes: Vec<&(u64, Finding)> = raised
        .iter()
        .filter(|(_, f)| f.kind == job.kind && !f.is_rollup())
        .collect();
    let names: Vec<String> = (0..8).map(|n| format!("node-{n:02}")).collect();
    assert_eq!(job.evidence.details["nodes"], serde_json::json!(names));
    assert_eq!(job.evidence.details["findings"], 8);
    let figures: Vec<f64> = nodes.iter().map(|(_, f)| f.evidence.measured).collect();
    let lo = figures.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = figures.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert!(job.evidence.details["min"].as_f64().unwrap() <= lo + 1e-4);
    assert!(job.evidence.details["max"].as_f64().unwrap() >= hi - 1e-4);
    let listed = &now.iter().find(|f| f.id == job.id).unwrap().consequences;
    assert_eq!(listed.len(), 8);
    for (node_at, f) in &nodes {
        assert_eq!(f.caused_by.as_deref(), Some(job.id.as_str()));
        assert_eq!(f.severity, Severity::Info);
        assert!(!f.root && listed.contains(&f.id));
        assert!(*node_at >= at, "{} raised before its roll-up", f.id);
    }
    // One warning for the job, not one per node.
    let warnings: Vec<&str> = raised
        .iter()
        .filter(|(_, f)| f.severity >= Severity::Warning)
        .map(|(_, f)| f.id.as_str())
        .collect();
    assert_eq!(warnings, [job.id.as_str()]);
}
