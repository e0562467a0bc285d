//! The store's ingest cost per sample, measured in process (no gRPC): `NODES` nodes of the demo node's shape
//! (322 series at 20 Hz, 1,147 at 1 Hz: 6,820 samples a second), batches of five fast ticks (250 ms) applied
//! round-robin over the nodes as a collector under load applies them, at a 10-minute retention (the default
//! before it became 5 minutes: the figures stay comparable with the earlier ones).
//!
//! `cargo test --release -p commwatch-collector --lib measure::apply_cost -- --ignored --nocapture`
//! (env: `NODES` (200), `SECS` simulated (60)). Prints ns per sample for the second half of the run (the first
//! fills the rings; thread CPU time, and wall time), reads of every series' newest second, and the store's
//! bytes per node. A figure, not a check: it never fails because the machine is slow.
//!
//! `tape_cost` does the same with a real agent's batches instead of generated ones: the demo node that
//! `loadgen --dump-tape FILE` recorded (`TAPE=FILE`, `NODES` (20) copies, every batch of the file, `RETENTION`
//! seconds (600)), and prints the raw sample bytes per node by part and by metric. `tape_passes` applies the
//! tape the same way (`RETENTION` (300)) and then times the periodic passes per node (`PASSES` rounds (5)): the
//! analysis input's copy of every node's windows and the step engine's pass.

use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use commwatch_model::{Endpoint, Link, LinkClass, LinkKey, LinkRole, SeriesKind, Tier};
use commwatch_proto::v1 as pb;
use prost::Message as _;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};

use crate::config::Limits;
use crate::store::{Batch, Hello, Inventory, LinkInfo, NodeRef, SeriesDesc, Store};

const FAST: u32 = 322;
const SLOW: u32 = 1_147;
const T0: i64 = 1_700_000_000_000_000_000;

fn desc(id: u32) -> SeriesDesc {
    let kind = if id.is_multiple_of(3) {
        SeriesKind::Gauge
    } else {
        SeriesKind::Counter {
            max_value: u64::MAX,
        }
    };
    SeriesDesc {
        id,
        metric: format!("m{}", id % 40),
        kind: Some(kind),
        link_id: id % 36 + 1,
        labels: vec![("i".into(), id.to_string())],
        tier: Some(if id <= FAST { Tier::Fast } else { Tier::Slow }),
    }
}

fn hello(node: usize) -> Hello {
    let links = (1..=36)
        .map(|id| LinkInfo {
            id,
            link: Link {
                key: LinkKey::new(LinkClass::Infiniband, format!("mlx5_{id}"), "1"),
                endpoint: Endpoint::HcaPort,
                role: LinkRole::Fabric,
                capacity_bytes_per_second: Some(50e9),
                state: "ACTIVE".into(),
                attributes: Default::default(),
                gpu: None,
                link: None,
            },
        })
        .collect();
    Hello {
        node: format!("load-{node}"),
        agent_version: "t".into(),
        boot_id: "b".into(),
        instance_id: 1,
        inventory: Inventory {
            links,
            series: (1..=FAST + SLOW).map(desc).collect(),
            refused: Vec::new(),
        },
        fast_period_ms: 50,
        slow_period_ms: 1000,
        blind: Vec::new(),
    }
}

/// One node's generator: counters move by a random amount (busy ones by ~1 GB a tick, others by a little or
/// not at all), gauges wander.
struct Gen {
    rng: StdRng,
    raw: Vec<u64>,
}

impl Gen {
    fn value(&mut self, id: u32) -> u64 {
        let i = id as usize;
        let v = &mut self.raw[i];
        *v = match id % 3 {
            0 => (self.rng.random_range(0.0..100.0f64)).to_bits(),
            1 => v.wrapping_add(self.rng.random_range(900_000_000..1_100_000_000)),
            _ => v.wrapping_add(u64::from(self.rng.random_ratio(1, 50))),
        };
        *v
    }

    fn batch(&mut self, seq: u64, first_tick: i64) -> Batch {
        let mut b = Batch::numbered(seq);
        for t in first_tick..first_tick + 5 {
            let ts = T0 + t * 50_000_000 + self.rng.random_range(0..500_000);
            let n = if t % 20 == 0 { FAST + SLOW } else { FAST };
            b.timestamps_unix_ns.push(ts);
            b.tick_lengths.push(n);
            for id in 1..=n {
                b.series_ids.push(id);
                let v = self.value(id);
                b.values.push(v);
            }
        }
        b
    }
}

/// CPU time of the calling thread, ns ([`crate::pace::thread_cpu_ns`]; 0 where unreadable).
pub(super) fn thread_cpu_ns() -> u64 {
    crate::pace::thread_cpu_ns().unwrap_or(0)
}

pub(super) fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "a measurement: run with --release --ignored --nocapture"]
fn apply_cost() {
    let nodes = env("NODES", 200);
    let secs = env("SECS", 60) as i64;
    let store = Store::new(
        Duration::from_secs(600),
        Duration::from_secs(3_600),
        Limits::default(),
    );
    let refs: Vec<_> = (0..nodes)
        .map(|k| store.hello(&hello(k), T0, None).expect("hello").node)
        .collect();
    let mut gens: Vec<Gen> = (0..nodes)
        .map(|k| Gen {
            rng: StdRng::seed_from_u64(k as u64),
            raw: vec![0; (FAST + SLOW + 1) as usize],
        })
        .collect();
    let mut scratch = Vec::new();
    let batches = secs * 4;
    let cpu = thread_cpu_ns;
    let (mut took, mut cpu_ns, mut samples) = (Duration::ZERO, 0u64, 0u64);
    for seq in 1..=batches {
        let first_tick = (seq - 1) * 5;
        let pre: Vec<Batch> = gens
            .iter_mut()
            .map(|g| g.batch(seq as u64, first_tick))
            .collect();
        let now = T0 + (first_tick + 5) * 50_000_000;
        let (start, cpu0) = (Instant::now(), cpu());
        for (node, b) in refs.iter().zip(&pre) {
            node.lock()
                .apply_batch(b, now, &mut scratch)
                .expect("apply");
        }
        if seq > batches / 2 {
            took += start.elapsed();
            cpu_ns += cpu() - cpu0;
            samples += pre.iter().map(|b| b.values.len() as u64).sum::<u64>();
        }
    }
    let cpu0 = cpu();
    let mut read = 0u64;
    for node in &refs {
        let n = node.lock();
        for s in n.series() {
            read += n.samples(s).iter().rev().take(21).count() as u64;
        }
    }
    let read_ns = (cpu() - cpu0) as f64 / read as f64;
    let mem = store.memory();
    println!(
        "{nodes} nodes, {secs} s: apply {:.1} ns of thread CPU per sample ({:.1} ns wall; {samples} samples \
         timed), newest-second reads {read_ns:.1} ns of CPU per sample, {:.2} MB of samples per node",
        cpu_ns as f64 / samples as f64,
        took.as_nanos() as f64 / samples as f64,
        mem.sample_bytes as f64 / nodes as f64 / 1e6,
    );
}

/// The `Hello` and batches of a file `loadgen --dump-tape` wrote.
fn read_tape(path: &str) -> (Hello, Vec<Batch>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("TAPE={path}: {e}"));
    let mut buf = &bytes[..];
    let mut msgs = Vec::new();
    while !buf.is_empty() {
        let m = pb::AgentMessage::decode_length_delimited(&mut buf)
            .expect("a length-delimited message");
        msgs.push(m.msg.expect("a message"));
    }
    let mut it = msgs.into_iter();
    let Some(pb::agent_message::Msg::Hello(h)) = it.next() else {
        panic!("{path} does not start with a Hello");
    };
    let batches = it
        .filter_map(|m| match m {
            pb::agent_message::Msg::Batch(b) => Some(Batch::try_from(b).expect("a valid batch")),
            _ => None,
        })
        .collect();
    (Hello::try_from(h).expect("a valid Hello"), batches)
}

/// A store of `retention` holding `nodes` copies of the tape's node (`TAPE`; their Hellos only), and the tape's
/// batches.
pub(super) fn tape_nodes(
    nodes: usize,
    retention: Duration,
) -> (std::sync::Arc<Store>, Vec<NodeRef>, Vec<Batch>) {
    let path = std::env::var("TAPE").expect("TAPE=FILE written by loadgen --dump-tape");
    let (hello, batches) = read_tape(&path);
    let store = std::sync::Arc::new(Store::new(
        retention,
        Duration::from_secs(3_600),
        Limits::default(),
    ));
    let t0 = batches
        .first()
        .and_then(|b| b.timestamps_unix_ns.first().copied())
        .expect("the tape holds a batch");
    let refs = (0..nodes)
        .map(|k| {
            let mut h = hello.clone();
            h.node = format!("tape-{k}");
            store.hello(&h, t0, None).expect("hello").node
        })
        .collect();
    (store, refs, batches)
}

#[test]
#[ignore = "a measurement: run with --release --ignored --nocapture and TAPE=FILE"]
fn tape_cost() {
    let nodes = env("NODES", 20);
    let retention = Duration::from_secs(env("RETENTION", 600) as u64);
    let (store, refs, batches) = tape_nodes(nodes, retention);
    let (mut scratch, mut cpu_ns, mut samples) = (Vec::new(), 0u64, 0u64);
    for (i, b) in batches.iter().enumerate() {
        let now = b.timestamps_unix_ns.last().copied().unwrap_or(0);
        let cpu0 = thread_cpu_ns();
        for node in &refs {
            node.lock()
                .apply_batch(b, now, &mut scratch)
                .expect("apply");
        }
        if i >= batches.len() / 2 {
            cpu_ns += thread_cpu_ns() - cpu0;
            samples += (b.values.len() * nodes) as u64;
        }
    }
    let mem = store.memory();
    let node = refs[0].lock();
    let (mut parts, mut by_metric) = ([0usize; 4], BTreeMap::<&str, (usize, usize, usize)>::new());
    let mut open_fast = 0;
    for s in node.series() {
        let p = s.ring().heap_parts();
        if s.tier() == Some(Tier::Fast) {
            open_fast += p[1];
        }
        for (a, b) in parts.iter_mut().zip(p) {
            *a += b;
        }
        let e = by_metric.entry(s.key().metric.as_str()).or_default();
        *e = (e.0 + 1, e.1 + s.ring().len(), e.2 + s.ring().heap_bytes());
    }
    println!(
        "{nodes} nodes, {} batches, retention {retention:?}: apply {:.1} ns of thread CPU per sample (second half); \
         {:.2} MB of samples per node ({} samples): tail {} B, open parts {} B, chunk lists {} B, chunks {} B, \
         ticks and head {} B; store {:.2} MB per node; open parts of fast series {open_fast} B",
        batches.len(),
        cpu_ns as f64 / samples as f64,
        mem.sample_bytes as f64 / nodes as f64 / 1e6,
        mem.samples / nodes,
        parts[0],
        parts[1],
        parts[2],
        parts[3],
        mem.sample_bytes / nodes - parts.iter().sum::<usize>(),
        mem.bytes as f64 / nodes as f64 / 1e6,
    );
    let mut rows: Vec<_> = by_metric.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1 .2));
    for (metric, (series, n, bytes)) in rows.iter().take(12) {
        println!(
            "  {metric:<36} {series:>4} series {n:>9} samples {bytes:>9} B ({:.2} B a sample)",
            *bytes as f64 / (*n).max(1) as f64
        );
    }
}

/// The periodic passes' cost per node on the tape's nodes (`TAPE`, `NODES`, `RETENTION` as for [`tape_cost`];
/// `PASSES` (5) rounds): the analysis input (`analysis::input::node_input`, a 20 s window of every series) and
/// the step engine's pass, each timed in thread CPU per node after the whole tape is applied.
#[test]
#[ignore = "a measurement: run with --release --ignored --nocapture and TAPE=FILE"]
fn tape_passes() {
    use crate::analysis::input::{node_input, WINDOW_NS};
    let rounds = env("PASSES", 5);
    let retention = Duration::from_secs(env("RETENTION", 300) as u64);
    let (store, refs, batches) = tape_nodes(env("NODES", 20), retention);
    let mut scratch = Vec::new();
    let mut now = 0;
    for b in &batches {
        now = b.timestamps_unix_ns.last().copied().unwrap_or(now);
        for node in &refs {
            node.lock()
                .apply_batch(b, now, &mut scratch)
                .expect("apply");
        }
    }
    let names = store.node_names(now);
    let per_node = |cpu_ns: u64| cpu_ns as f64 / (rounds * names.len()) as f64 / 1e3;
    let cpu0 = thread_cpu_ns();
    for _ in 0..rounds {
        for name in &names {
            std::hint::black_box(store.with_node(name, |n| node_input(n, now - WINDOW_NS)));
        }
    }
    let input_us = per_node(thread_cpu_ns() - cpu0);
    let steps = std::sync::Arc::new(crate::steps::StepStore::new());
    let passes = crate::telemetry::Passes::new().expect("pass metrics");
    let mut engine = crate::steps::engine::Engine::new(store.clone(), steps.clone(), passes);
    // The first pass finds every step the retained samples hold: a pass after a long pause.
    let cpu0 = thread_cpu_ns();
    engine.tick(now);
    let first_us = (thread_cpu_ns() - cpu0) as f64 / names.len() as f64 / 1e3;
    let found: usize = names
        .iter()
        .map(|n| {
            steps
                .node_steps_since(n, usize::MAX, i64::MIN)
                .map_or(0, |s| s.len())
        })
        .sum();
    let cpu0 = thread_cpu_ns();
    for r in 0..rounds {
        // Each round as if one batch period had passed: what a pass finds new is what a collector's would.
        engine.tick(now + r as i64);
    }
    let steps_us = per_node(thread_cpu_ns() - cpu0);
    println!(
        "{} nodes, {rounds} rounds: analysis input {input_us:.1} us of thread CPU per node; step engine: first \
         pass {first_us:.1} us per node ({:.1} steps a node, {:.2} us a step), then {steps_us:.1} us per node \
         (nothing new)",
        names.len(),
        found as f64 / names.len() as f64,
        first_us * names.len() as f64 / found.max(1) as f64,
    );
}
