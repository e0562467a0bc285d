//! The step engine's cost per step of a demo-shaped node: allocations and thread CPU time of
//! `Engine::tick`, per step found and node.
//!
//! `cargo bench -p commwatch-collector --bench steps` (environment: `NODES` (20), `SECS` (60) simulated
//! seconds, `PERIOD_MS` (1000) step period). Each node has the demo node's 161 links — 8 InfiniBand HCA ports,
//! their 8 IPoIB interfaces, `eth0` and 8 GPUs × 18 NVLinks — each with its byte counters read at 20 Hz (322
//! fast series), applied through the collector's edge validation (`ingest::direct`) on a virtual clock. The
//! traffic is a square wave: an all-reduce burst of 40 % of each step on the HCAs and NVLinks, a trickle
//! otherwise. The engine runs every 500 ms of simulated time, as in a collector. Two phases are reported
//! apart: the first pass after the whole span (every step the samples hold: a pass after a pause) and the
//! steady passes of a second span.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use commwatch_collector::ingest::direct::DirectAgent;
use commwatch_collector::steps::engine::Engine;
use commwatch_collector::steps::StepStore;
use commwatch_collector::telemetry::Passes;
use commwatch_collector::{CollectorConfig, Store};
use commwatch_proto::v1 as pb;

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

/// One link of the demo node: (class, endpoint, role, device, port, gpu, link, capacity, bursts).
struct Shape {
    link: pb::Link,
    /// Bytes per second during the burst, and otherwise.
    burst: f64,
    idle: f64,
}

fn shapes() -> Vec<Shape> {
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
                burst: 12e9,
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
                    tier: pb::Tier::Fast as i32,
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
            b.timestamps_unix_ns.push(at);
            b.tick_lengths.push(self.acc.len() as u32);
            for (i, s) in shapes.iter().enumerate() {
                let rate = if busy { s.burst.max(s.idle) } else { s.idle };
                for d in 0..2 {
                    let k = 2 * i + d;
                    self.acc[k] += rate * TICK_NS as f64 / 1e9;
                    b.series_ids.push(k as u32 + 1);
                    b.values.push(self.acc[k] as u64);
                }
            }
        }
        b
    }
}

/// Applies `[from, to)` ticks to every node, 5 ticks a batch, and runs the engine every 10 ticks; returns
/// (steps added, thread CPU ns in the engine, allocations in the engine).
fn run(
    nodes: &mut [Node],
    shapes: &[Shape],
    engine: &mut Engine,
    (from, to): (i64, i64),
    tick_engine: bool,
    period_ns: i64,
) -> (usize, u64, u64) {
    let (mut steps, mut cpu, mut allocs) = (0, 0, 0);
    let mut t = from;
    while t < to {
        let end = (t + 5).min(to);
        for n in nodes.iter_mut() {
            let b = n.batch(shapes, t, end, period_ns);
            n.agent
                .batch(b, end * TICK_NS)
                .expect("a valid batch")
                .expect("applied once");
        }
        t = end;
        if tick_engine && t % 10 == 0 {
            let (c0, a0) = (cpu_ns(), ALLOCS.load(Ordering::Relaxed));
            steps += engine.tick(t * TICK_NS);
            cpu += cpu_ns() - c0;
            allocs += ALLOCS.load(Ordering::Relaxed) - a0;
        }
    }
    (steps, cpu, allocs)
}

fn cpu_ns() -> u64 {
    commwatch_collector::pace::thread_cpu_ns().unwrap_or(0)
}

fn main() {
    let nodes_n = common::env("NODES", 20) as usize;
    let secs = common::env("SECS", 60) as i64;
    let period_ns = common::env("PERIOD_MS", 1000) as i64 * 1_000_000;
    let config = CollectorConfig::default();
    let store = Arc::new(Store::new(
        config.retention,
        config.node_expiry,
        config.limits.clone(),
    ));
    let steps = Arc::new(StepStore::new());
    let passes = Passes::new().expect("pass metrics");
    let mut engine = Engine::new(store.clone(), steps.clone(), passes);
    let shapes = shapes();
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
    let (c0, a0) = (cpu_ns(), ALLOCS.load(Ordering::Relaxed));
    let first = engine.tick(ticks * TICK_NS);
    let (first_cpu, first_allocs) = (cpu_ns() - c0, ALLOCS.load(Ordering::Relaxed) - a0);
    // Then passes every 500 ms, as a collector runs them.
    let (steady, cpu, allocs) = run(
        &mut nodes,
        &shapes,
        &mut engine,
        (ticks, 2 * ticks),
        true,
        period_ns,
    );
    let links = steps
        .node_steps_since("node-000", 1, i64::MIN)
        .and_then(|s| s.last().map(|s| s.links.len()))
        .unwrap_or(0);
    println!(
        "step engine, {nodes_n} nodes of {} links ({} fast byte series), {secs} s spans, steps of {} ms; \
         {links} link figures per step",
        shapes.len(),
        shapes.len() * 2,
        period_ns / 1_000_000
    );
    let per = |steps: usize, cpu: u64, allocs: u64| {
        let s = steps.max(1) as f64;
        format!(
            "{steps} steps: {:.1} us of thread CPU and {:.1} allocations per step of a node",
            cpu as f64 / 1e3 / s,
            allocs as f64 / s
        )
    };
    println!(
        "first pass (after {secs} s): {}",
        per(first, first_cpu, first_allocs)
    );
    println!("steady passes (every 500 ms): {}", per(steady, cpu, allocs));
}
