//! The step engine's cost per step of a demo-shaped node: allocations and thread CPU time of
//! `Engine::tick`, per step found and node.
//!
//! `cargo bench -p commwatch-collector --bench steps` (environment: `NODES` (20), `SECS` (60) simulated
//! seconds, `PERIOD_MS` (1000) step period, `NVLINK_BYTES` (`link`)). Each node has the demo node's 161 links —
//! 8 InfiniBand HCA ports, their 8 IPoIB interfaces, `eth0` and 8 GPUs × 18 NVLinks — each with its byte
//! counters, applied through the collector's edge validation (`ingest::direct`) on a virtual clock. With
//! `NVLINK_BYTES=link` every link's counters are read at 20 Hz (322 fast series); with `NVLINK_BYTES=gpu` as
//! the demo agent ships them by default: each GPU's NVLinks summed at 20 Hz (8 more links), the NVLinks' own
//! counters at 1 Hz on ticks of their own. The traffic is a square wave: an all-reduce burst of 40 % of each
//! step on the HCAs and NVLinks, a trickle otherwise. The engine runs every 500 ms of simulated time, as in a
//! collector. Two phases are reported apart: the first pass after the whole span (every step the samples hold:
//! a pass after a pause) and the steady passes of a second span.
//!
//! With `TAPE=FILE` (written by `loadgen --dump-tape FILE`: a real demo agent's `Hello` and batches) the nodes
//! are `NODES` copies of that agent instead, its batches applied in their order on its own clock, the first
//! half of the tape without passes (then one pass) and the second half with a pass every 500 ms of its clock
//! (`PASS_MS`: another interval, to part a pass's fixed cost per node from its cost per sample; the steps
//! found change with it).
//!
//! With `TAPE` and `BEHIND=1,10,60` (seconds), the engine's cost per node and second of data for one pass
//! after each of those gaps without passes, the tape looped (`main_behind`): a pass far behind should cost
//! no more per second of data than one that keeps up.
//!
//! `NVLINK_DETAIL` (`gpu`, the collector's default, or `link`) is the engine's NVLink figures: one per GPU, or
//! one per NVLink (`Engine::with_nvlink_detail`).
//!
//! The steady span also times the ingest's in-process part per node and second of data: decoding each batch
//! from its protobuf encoding (as the gRPC stream's codec does, `commwatch_proto::codec`), and applying it
//! (`DirectAgent::batch`: the edge's validation and the store's apply, head flushes included), thread CPU and
//! allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use commwatch_collector::config::NvlinkDetail;
use commwatch_collector::ingest::direct::DirectAgent;
use commwatch_collector::steps::engine::Engine;
use commwatch_collector::steps::StepStore;
use commwatch_collector::telemetry::Passes;
use commwatch_collector::{CollectorConfig, Store};
use commwatch_proto::v1 as pb;
use prost::Message;

mod common;

/// The system allocator, counting allocations (and reallocations) while `COUNTING` is on.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const TICK_NS: i64 = 50_000_000;
const GPUS: u32 = 8;
const NVLINKS: u32 = 18;
const HCAS: u32 = 8;

/// One link of the demo node and its traffic.
struct Shape {
    link: pb::Link,
    /// Read at 20 Hz (else on the 1 Hz ticks).
    fast: bool,
    /// Bytes per second during the burst, and otherwise.
    burst: f64,
    idle: f64,
}

/// The demo node's links; with `gpu_sums`, each GPU's NVLinks also summed as one link (read at 20 Hz, the
/// NVLinks themselves at 1 Hz), as the agent ships them with `nvlink_bytes = "gpu"`.
fn shapes(gpu_sums: bool) -> Vec<Shape> {
    let mut v = Vec::new();
    let link =
        |class: pb::LinkClass, endpoint: pb::LinkEndpoint, device: String, port: String| pb::Link {
            class: class as i32,
            endpoint: endpoint as i32,
            role: pb::LinkRole::Fabric as i32,
            device,
            port,
            state: "ACTIVE".into(),
            ..Default::default()
        };
    for h in 0..HCAS {
        let mut l = link(
            pb::LinkClass::Infiniband,
            pb::LinkEndpoint::HcaPort,
            format!("mlx5_{h}"),
            "1".into(),
        );
        l.capacity_bytes_per_second = 50e9;
        v.push(Shape {
            link: l,
            fast: true,
            burst: 22e9,
            idle: 2e5,
        });
        let ib = format!("ib{h}");
        v.push(Shape {
            link: link(
                pb::LinkClass::Infiniband,
                pb::LinkEndpoint::Interface,
                ib.clone(),
                ib,
            ),
            fast: true,
            burst: 0.0,
            idle: 1e4,
        });
    }
    let mut eth = link(
        pb::LinkClass::Ethernet,
        pb::LinkEndpoint::Interface,
        "eth0".into(),
        "eth0".into(),
    );
    eth.role = pb::LinkRole::Management as i32;
    eth.capacity_bytes_per_second = 3.125e9;
    v.push(Shape {
        link: eth,
        fast: true,
        burst: 0.0,
        idle: 1e5,
    });
    for g in 0..GPUS {
        for n in 0..NVLINKS {
            let mut l = link(
                pb::LinkClass::Nvlink,
                pb::LinkEndpoint::GpuLink,
                format!("gpu{g}"),
                n.to_string(),
            );
            l.gpu = g.to_string();
            l.link = n.to_string();
            l.capacity_bytes_per_second = 26.562e9;
            v.push(Shape {
                link: l,
                fast: !gpu_sums,
                burst: 12e9,
                idle: 0.0,
            });
        }
        if gpu_sums {
            let mut l = link(
                pb::LinkClass::Nvlink,
                pb::LinkEndpoint::GpuLink,
                format!("gpu{g}"),
                String::new(),
            );
            l.gpu = g.to_string();
            l.capacity_bytes_per_second = 26.562e9 * f64::from(NVLINKS);
            v.push(Shape {
                link: l,
                fast: true,
                burst: 12e9 * f64::from(NVLINKS),
                idle: 0.0,
            });
        }
    }
    for (i, s) in v.iter_mut().enumerate() {
        s.link.id = i as u32 + 1;
    }
    v
}

fn hello(node: &str, shapes: &[Shape]) -> pb::Hello {
    let series = shapes
        .iter()
        .flat_map(|s| {
            ["tx_bytes", "rx_bytes"]
                .into_iter()
                .enumerate()
                .map(move |(d, m)| pb::SeriesDescriptor {
                    id: (s.link.id - 1) * 2 + d as u32 + 1,
                    metric: m.into(),
                    kind: pb::SeriesKind::Counter as i32,
                    link_id: s.link.id,
                    tier: if s.fast {
                        pb::Tier::Fast as i32
                    } else {
                        pb::Tier::Slow as i32
                    },
                    ..Default::default()
                })
        })
        .collect();
    pb::Hello {
        node: node.into(),
        agent_version: "bench".into(),
        boot_id: "b".into(),
        instance_id: 1,
        inventory: Some(pb::Inventory {
            links: shapes.iter().map(|s| s.link.clone()).collect(),
            series,
        }),
        fast_period_ms: 50,
        slow_period_ms: 1000,
        blind: Vec::new(),
    }
}

/// A node's counters and the batches it sends.
struct Node {
    agent: DirectAgent,
    acc: Vec<f64>,
    seq: u64,
    /// The node's phase in its step, ns (nodes are not in lockstep).
    offset: i64,
}

impl Node {
    /// A batch of the ticks `[from, to)` (tick numbers), stamped on the virtual clock.
    fn batch(&mut self, shapes: &[Shape], from: i64, to: i64, period_ns: i64) -> pb::SampleBatch {
        self.seq += 1;
        let mut b = pb::SampleBatch {
            seq: self.seq,
            ..Default::default()
        };
        for t in from..to {
            let at = t * TICK_NS;
            let phase = (at + self.offset).rem_euclid(period_ns);
            let busy = phase >= period_ns * 6 / 10;
            for (i, s) in shapes.iter().enumerate() {
                let rate = if busy { s.burst.max(s.idle) } else { s.idle };
                for d in 0..2 {
                    self.acc[2 * i + d] += rate * TICK_NS as f64 / 1e9;
                }
            }
            // The fast series at every tick; the slow ones once a second, on a tick of their own 1 ms later.
            let slow_tick = t % (1_000_000_000 / TICK_NS) == 0;
            for (fast, at) in [(true, at), (false, at + 1_000_000)] {
                if !fast && !slow_tick {
                    continue;
                }
                let before = b.series_ids.len();
                for (i, _) in shapes.iter().enumerate().filter(|(_, s)| s.fast == fast) {
                    for d in 0..2 {
                        let k = 2 * i + d;
                        b.series_ids.push(k as u32 + 1);
                        b.values.push(self.acc[k] as u64);
                    }
                }
                if b.series_ids.len() > before {
                    b.timestamps_unix_ns.push(at);
                    b.tick_lengths.push((b.series_ids.len() - before) as u32);
                }
            }
        }
        b
    }
}

/// A batch decoded as the collector's gRPC codec decodes it (`commwatch_proto::codec`: its fast path, else
/// prost).
fn decode(encoded: &[u8]) -> pb::SampleBatch {
    commwatch_proto::codec::fast_batch(encoded)
        .unwrap_or_else(|| pb::SampleBatch::decode(encoded).expect("its own encoding"))
}

/// Thread CPU and allocations spent in one part of a run.
#[derive(Debug, Default, Clone, Copy)]
struct Cost {
    cpu_ns: u64,
    allocs: u64,
}

impl Cost {
    /// Runs `f`, adding what it spent.
    fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let (c0, a0) = (cpu_ns(), ALLOCS.load(Ordering::Relaxed));
        let out = f();
        self.cpu_ns += cpu_ns() - c0;
        self.allocs += ALLOCS.load(Ordering::Relaxed) - a0;
        out
    }
}

/// What a run of [`run`] spent: steps added, and the engine's, the decoding's and the apply's costs.
#[derive(Debug, Default)]
struct Spent {
    steps: usize,
    samples: u64,
    engine: Cost,
    decode: Cost,
    apply: Cost,
}

/// Applies `[from, to)` ticks to every node, 5 ticks a batch (each decoded from its encoding first), and runs
/// the engine every 10 ticks.
fn run(
    nodes: &mut [Node],
    shapes: &[Shape],
    engine: &mut Engine,
    (from, to): (i64, i64),
    tick_engine: bool,
    period_ns: i64,
) -> Spent {
    let mut spent = Spent::default();
    let mut t = from;
    let mut encoded: Vec<Vec<u8>> = vec![Vec::new(); nodes.len()];
    let mut decoded: Vec<pb::SampleBatch> = Vec::with_capacity(nodes.len());
    while t < to {
        let end = (t + 5).min(to);
        for (n, e) in nodes.iter_mut().zip(encoded.iter_mut()) {
            e.clear();
            n.batch(shapes, t, end, period_ns)
                .encode(e)
                .expect("a vector grows");
        }
        spent
            .decode
            .time(|| decoded.extend(encoded.iter().map(|e| decode(e))));
        spent.apply.time(|| {
            for (n, b) in nodes.iter_mut().zip(decoded.drain(..)) {
                let counts = n
                    .agent
                    .batch(b, end * TICK_NS)
                    .expect("a valid batch")
                    .expect("applied once");
                spent.samples += counts.samples;
            }
        });
        t = end;
        if tick_engine && t % 10 == 0 {
            spent.steps += spent.engine.time(|| engine.tick(t * TICK_NS));
        }
    }
    spent
}

fn cpu_ns() -> u64 {
    commwatch_collector::pace::thread_cpu_ns().unwrap_or(0)
}

/// A tape `loadgen --dump-tape` wrote: its `Hello` and its batches, each with its encoding.
fn read_tape(path: &str) -> (pb::Hello, Vec<(pb::SampleBatch, Vec<u8>)>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("TAPE={path}: {e}"));
    let mut buf = &bytes[..];
    let mut hello = None;
    let mut batches = Vec::new();
    while !buf.is_empty() {
        let m = pb::AgentMessage::decode_length_delimited(&mut buf)
            .unwrap_or_else(|e| panic!("TAPE={path}: not a length-delimited message: {e}"));
        match m.msg {
            Some(pb::agent_message::Msg::Hello(h)) => hello = Some(h),
            Some(pb::agent_message::Msg::Batch(b)) => {
                let encoded = b.encode_to_vec();
                batches.push((b, encoded));
            }
            _ => {}
        }
    }
    let hello = hello.unwrap_or_else(|| panic!("TAPE={path}: no Hello"));
    (hello, batches)
}

/// The tape's batches applied to every node of `agents` (each decoded from its encoding first), the engine
/// run every 500 ms of the tape's clock when `tick_engine`.
/// The first timestamp of the tape's batches (Unix ns).
fn tape_start(batches: &[(pb::SampleBatch, Vec<u8>)]) -> i64 {
    batches
        .iter()
        .find_map(|(b, _)| b.timestamps_unix_ns.first().copied())
        .expect("the tape holds a batch")
}

/// `nodes_n` agents of the tape's node (`node-000`, …) said hello to `store` at `t0` (Unix ns).
fn tape_agents(store: &Arc<Store>, hello: &pb::Hello, nodes_n: usize, t0: i64) -> Vec<DirectAgent> {
    (0..nodes_n)
        .map(|i| {
            let mut h = hello.clone();
            h.node = format!("node-{i:03}");
            DirectAgent::hello(store.clone(), h, t0).expect("a valid hello")
        })
        .collect()
}

fn run_tape(
    agents: &mut [DirectAgent],
    batches: &[(pb::SampleBatch, Vec<u8>)],
    engine: &mut Engine,
    tick_engine: bool,
) -> Spent {
    let mut spent = Spent::default();
    let mut next_pass = i64::MIN;
    let pass_ns = common::env("PASS_MS", 500) as i64 * 1_000_000;
    let mut decoded: Vec<pb::SampleBatch> = Vec::with_capacity(agents.len());
    for (b, encoded) in batches {
        let Some(&now) = b.timestamps_unix_ns.iter().max() else {
            continue;
        };
        spent
            .decode
            .time(|| decoded.extend(agents.iter().map(|_| decode(encoded))));
        spent.apply.time(|| {
            for (a, b) in agents.iter_mut().zip(decoded.drain(..)) {
                if let Some(counts) = a.batch(b, now).expect("a valid batch") {
                    spent.samples += counts.samples;
                }
            }
        });
        if tick_engine && now >= next_pass {
            if next_pass != i64::MIN {
                spent.steps += spent.engine.time(|| engine.tick(now));
            }
            next_pass = now + pass_ns;
        }
    }
    spent
}

/// `TAPE` mode: `nodes_n` copies of the tape's agent.
fn main_tape(path: &str, nodes_n: usize) {
    let (hello, batches) = read_tape(path);
    let config = CollectorConfig::default();
    let store = Arc::new(Store::new(
        config.retention,
        config.node_expiry,
        config.limits.clone(),
    ));
    let steps = Arc::new(StepStore::new());
    let passes = Passes::new().expect("pass metrics");
    let mut engine = Engine::new(store.clone(), steps.clone(), passes).with_nvlink_detail(detail());
    let t0 = tape_start(&batches);
    let mut agents = tape_agents(&store, &hello, nodes_n, t0);
    let half = batches.len() / 2;
    run_tape(&mut agents, &batches[..half], &mut engine, false);
    let end = |bs: &[(pb::SampleBatch, Vec<u8>)]| {
        bs.iter()
            .filter_map(|(b, _)| b.timestamps_unix_ns.iter().max().copied())
            .max()
            .unwrap_or(t0)
    };
    let mut first = Cost::default();
    let first_steps = first.time(|| engine.tick(end(&batches[..half])));
    let steady = run_tape(&mut agents, &batches[half..], &mut engine, true);
    let span_s = (end(&batches[half..]) - end(&batches[..half])) as f64 / 1e9;
    let series = hello.inventory.as_ref().map_or(0, |i| i.series.len());
    println!(
        "step engine, {nodes_n} copies of the tape's node ({series} series), {} batches, {span_s:.0} s measured",
        batches.len()
    );
    report(&steps, nodes_n, (first_steps, first), &steady, span_s);
    print_walks(&engine);
}

/// The tape's batches again and again, each round's timestamps (and sequence numbers, step numbers of its
/// markers) moved past the previous round's, so that a store takes them as new: `(now, batch)` in order.
struct Looped<'a> {
    batches: &'a [(pb::SampleBatch, Vec<u8>)],
    span_ns: i64,
    seqs: u64,
    steps: u64,
    at: usize,
}

impl<'a> Looped<'a> {
    fn new(batches: &'a [(pb::SampleBatch, Vec<u8>)]) -> Looped<'a> {
        let times = || {
            batches
                .iter()
                .flat_map(|(b, _)| b.timestamps_unix_ns.iter().copied())
        };
        let (first, last) = (times().min().unwrap_or(0), times().max().unwrap_or(0));
        Looped {
            batches,
            // One batch interval past the end.
            span_ns: last - first + 250_000_000,
            seqs: batches.iter().map(|(b, _)| b.seq).max().unwrap_or(0) + 1,
            steps: batches
                .iter()
                .flat_map(|(b, _)| b.markers.iter().map(|m| m.step))
                .max()
                .unwrap_or(0)
                + 1,
            at: 0,
        }
    }

    /// The next batch and its newest timestamp.
    fn next(&mut self) -> (i64, pb::SampleBatch) {
        let (round, k) = (self.at / self.batches.len(), self.at % self.batches.len());
        self.at += 1;
        let mut b = self.batches[k].0.clone();
        let r = round as i64;
        for t in &mut b.timestamps_unix_ns {
            *t += r * self.span_ns;
        }
        b.seq += round as u64 * self.seqs;
        for m in &mut b.markers {
            m.step += round as u64 * self.steps;
            m.sent_unix_ns += r * self.span_ns;
            m.received_unix_ns += r * self.span_ns;
        }
        if round > 0 {
            b.collectives.clear();
        }
        let now = b.timestamps_unix_ns.iter().copied().max().unwrap_or(0);
        (now, b)
    }
}

/// `BEHIND` mode: the engine's thread CPU per node and second of data for one pass after each gap of
/// `BEHIND` seconds of the tape without a pass (a list, `1,10,60`), after `WARM` seconds (30) with a pass
/// every 500 ms; `ROUNDS` (3) times over the list, the tape looped, a store of `RETENTION` seconds (120).
fn main_behind(path: &str, nodes_n: usize, gaps: &[f64]) {
    let (hello, batches) = read_tape(path);
    let retention = std::time::Duration::from_secs(common::env("RETENTION", 120));
    let config = CollectorConfig::default();
    let store = Arc::new(Store::new(
        retention,
        config.node_expiry,
        config.limits.clone(),
    ));
    let mut tape = Looped::new(&batches);
    let mut now = tape_start(&batches);
    let mut agents = tape_agents(&store, &hello, nodes_n, now);
    let steps = Arc::new(StepStore::new());
    let passes = Passes::new().expect("pass metrics");
    let mut engine =
        Engine::new(store.clone(), steps.clone(), passes.clone()).with_nvlink_detail(detail());
    // Applies the tape up to `until` (its clock); returns the newest time applied.
    let mut feed = |until: i64, agents: &mut [DirectAgent]| -> i64 {
        loop {
            let (t, b) = tape.next();
            for a in agents.iter_mut() {
                a.batch(b.clone(), t).expect("a valid batch");
            }
            if t >= until {
                return t;
            }
        }
    };
    let end = now + common::env("WARM", 30) as i64 * 1_000_000_000;
    while now < end {
        now = feed(now + 500_000_000, &mut agents);
        engine.tick(now);
    }
    println!(
        "step engine behind: {nodes_n} copies of the tape's node, retention {retention:?}: thread CPU of one \
         pass after each gap without passes, per node and second of data"
    );
    let rounds = common::env("ROUNDS", 3);
    let mut sums = vec![0u64; gaps.len()];
    for round in 0..rounds {
        for (g, &gap) in gaps.iter().enumerate() {
            now = feed(now + (gap * 1e9) as i64, &mut agents);
            let c0 = cpu_ns();
            let added = engine.tick(now);
            let cpu = cpu_ns() - c0;
            sums[g] += cpu;
            println!(
                "  round {round}, gap {gap:>5.1} s: {:8.1} us per node-second; {added} steps",
                cpu as f64 / 1e3 / (nodes_n as f64 * gap)
            );
        }
    }
    for (g, &gap) in gaps.iter().enumerate() {
        println!(
            "gap {gap:>5.1} s: {:.1} us per node-second",
            sums[g] as f64 / 1e3 / (nodes_n as f64 * gap * rounds as f64)
        );
    }
    println!(
        "skipped far behind: {:.1} s of node traffic",
        passes.steps_skipped_seconds.get()
    );
    print_walks(&engine);
}

/// How many of the engine's walks back through a series' samples ran over the samples it keeps, and how many
/// over the store's.
fn print_walks(engine: &Engine) {
    let w = engine.walks();
    println!(
        "walks back through samples: {} over the engine's tails, {} over the store",
        w.tails, w.store
    );
}

/// Prints what the engine found (a digest) and the costs of the first pass and of the steady span
/// (`span_s` seconds of data).
fn report(steps: &StepStore, nodes_n: usize, first: (usize, Cost), steady: &Spent, span_s: f64) {
    // What the engine found, as a digest of every node's held steps (the same on two builds: the same figures).
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    for i in 0..nodes_n {
        let held = steps.node_steps_since(&format!("node-{i:03}"), usize::MAX, i64::MIN);
        let json = serde_json::to_string(&held).expect("steps serialize");
        std::hash::Hash::hash(&json, &mut digest);
    }
    let links = steps
        .node_steps_since("node-000", 1, i64::MIN)
        .and_then(|s| s.last().map(|s| s.links.len()))
        .unwrap_or(0);
    println!(
        "steps held: digest {:016x}; {links} link figures per step",
        std::hash::Hasher::finish(&digest)
    );
    let per = |steps: usize, c: Cost| {
        let s = steps.max(1) as f64;
        format!(
            "{steps} steps: {:.1} us of thread CPU and {:.1} allocations per step of a node",
            c.cpu_ns as f64 / 1e3 / s,
            c.allocs as f64 / s
        )
    };
    println!("first pass: {}", per(first.0, first.1));
    println!(
        "steady passes (every 500 ms): {}",
        per(steady.steps, steady.engine)
    );
    // Per node and second of data in the steady span.
    let node_s = (nodes_n as f64 * span_s).max(1.0);
    let rate = |c: Cost| {
        format!(
            "{:.1} us and {:.1} allocations",
            c.cpu_ns as f64 / 1e3 / node_s,
            c.allocs as f64 / node_s
        )
    };
    println!(
        "per node and second ({:.0} samples): steps {}; decode {}; apply {}",
        steady.samples as f64 / node_s,
        rate(steady.engine),
        rate(steady.decode),
        rate(steady.apply)
    );
}

/// The engine's NVLink detail, from `NVLINK_DETAIL` (the collector's default when unset).
fn detail() -> NvlinkDetail {
    match std::env::var("NVLINK_DETAIL") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|e| panic!("NVLINK_DETAIL={v}: {e}")),
        Err(_) => NvlinkDetail::default(),
    }
}

fn main() {
    let nodes_n = common::env("NODES", 20) as usize;
    if let Ok(path) = std::env::var("TAPE") {
        if let Ok(gaps) = std::env::var("BEHIND") {
            let gaps: Vec<f64> = gaps
                .split(',')
                .map(|g| g.parse().unwrap_or_else(|e| panic!("BEHIND={gaps}: {e}")))
                .collect();
            return main_behind(&path, nodes_n, &gaps);
        }
        return main_tape(&path, nodes_n);
    }
    let secs = common::env("SECS", 60) as i64;
    let period_ns = common::env("PERIOD_MS", 1000) as i64 * 1_000_000;
    let gpu_sums = match std::env::var("NVLINK_BYTES").as_deref() {
        Ok("gpu") => true,
        Ok("link") | Err(_) => false,
        Ok(other) => panic!("NVLINK_BYTES={other}: `gpu` or `link`"),
    };
    let config = CollectorConfig::default();
    let store = Arc::new(Store::new(
        config.retention,
        config.node_expiry,
        config.limits.clone(),
    ));
    let steps = Arc::new(StepStore::new());
    let passes = Passes::new().expect("pass metrics");
    let mut engine = Engine::new(store.clone(), steps.clone(), passes).with_nvlink_detail(detail());
    let shapes = shapes(gpu_sums);
    let mut nodes: Vec<Node> = (0..nodes_n)
        .map(|i| Node {
            agent: DirectAgent::hello(store.clone(), hello(&format!("node-{i:03}"), &shapes), 0)
                .expect("a valid hello"),
            acc: vec![0.0; shapes.len() * 2],
            seq: 0,
            offset: i as i64 * 37_000_000,
        })
        .collect();
    let ticks = secs * 1_000_000_000 / TICK_NS;
    // The first span without passes, then one pass: every step the samples hold.
    run(
        &mut nodes,
        &shapes,
        &mut engine,
        (1, ticks),
        false,
        period_ns,
    );
    let mut first = Cost::default();
    let first_steps = first.time(|| engine.tick(ticks * TICK_NS));
    // Then passes every 500 ms, as a collector runs them.
    let steady = run(
        &mut nodes,
        &shapes,
        &mut engine,
        (ticks, 2 * ticks),
        true,
        period_ns,
    );
    let fast = shapes.iter().filter(|s| s.fast).count() * 2;
    println!(
        "step engine, {nodes_n} nodes of {} links ({fast} byte series at 20 Hz, {} at 1 Hz), {secs} s spans, \
         steps of {} ms",
        shapes.len(),
        shapes.len() * 2 - fast,
        period_ns / 1_000_000
    );
    report(&steps, nodes_n, (first_steps, first), &steady, secs as f64);
    print_walks(&engine);
}
