//! The persistence writer's CPU per batch and per node-second: SQLite's commit of demo-sized batches, and its
//! prune, on the calling thread's CPU clock, in steady state (the database holding `RETENTION_S` of batches).
//!
//! `cargo bench -p commwatch-collector --bench persist` (environment: `NODES` (400), `RETENTION_S` (60),
//! `MEASURE_S` (30) seconds of data timed after `RETENTION_S + 30` untimed, `COMMIT_MS` (the writer's
//! `COMMIT_INTERVAL`, 100), `DIR` for the database (default: a temporary directory in `/tmp`), `TAPE=FILE` for
//! payloads from `loadgen --dump-tape` (a real demo agent's batches, as received) instead of synthetic ones
//! shaped like them: ~410 samples of 1,485 series, 5 ticks).
//!
//! Time is virtual: every node sends a batch every 250 ms of it (its phase its own), the writer commits every
//! `COMMIT_MS` what arrived meanwhile and prunes every `PRUNE_INTERVAL` (10 s), as in a collector
//! — only as fast as the disk takes it. The disk's own work (writeback, `fsync`) counts where the kernel does
//! it in the calling thread; what it does in its own threads does not.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use commwatch_collector::persist::bench::{Db, Items};
use commwatch_collector::persist::{COMMIT_INTERVAL, DB_FILE, PRUNE_INTERVAL};
use commwatch_proto::v1 as pb;
use prost::Message;

mod common;

const BATCH_NS: i64 = 250_000_000;
const T0: i64 = 1_800_000_000_000_000_000;

/// Batches of a demo-shaped node: 5 ticks of 82 series each (of 1,485), counters rising by varied steps.
fn synthetic() -> Vec<Vec<u8>> {
    (0..64u64)
        .map(|b| {
            let mut m = pb::SampleBatch {
                seq: b + 1,
                ..Default::default()
            };
            for t in 0..5u64 {
                let tick = b * 5 + t;
                m.timestamps_unix_ns.push(T0 + tick as i64 * 50_000_000);
                m.tick_lengths.push(82);
                for k in 0..82u64 {
                    let id = 1 + (k * 18 + tick % 18) % 1485;
                    m.series_ids.push(id as u32);
                    m.values
                        .push(tick * 1_000_003 * (k + 1) + (tick * 7919 + k * 104_729) % 65_536);
                }
            }
            m.encode_to_vec()
        })
        .collect()
}

/// The batches of a tape `loadgen --dump-tape` wrote (length-delimited `AgentMessage`s), as encoded.
fn tape(path: &str) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("TAPE={path}: {e}"));
    let mut buf = &bytes[..];
    let mut out = Vec::new();
    while !buf.is_empty() {
        let m = pb::AgentMessage::decode_length_delimited(&mut buf)
            .unwrap_or_else(|e| panic!("TAPE={path}: not a length-delimited message: {e}"));
        if let Some(pb::agent_message::Msg::Batch(b)) = m.msg {
            out.push(b.encode_to_vec());
        }
    }
    assert!(!out.is_empty(), "TAPE={path}: no batch");
    out
}

/// Thread CPU of encoding a batch again after decoding it (what a stream did to persist a batch), µs per
/// batch, over 20 rounds of `payloads`.
fn reencode_us(payloads: &[Vec<u8>]) -> f64 {
    let decoded: Vec<pb::SampleBatch> = payloads
        .iter()
        .map(|p| pb::SampleBatch::decode(p.as_slice()).expect("a batch"))
        .collect();
    let c0 = cpu_ns();
    let mut bytes = 0;
    for _ in 0..20 {
        for b in &decoded {
            bytes += std::hint::black_box(b.encode_to_vec()).len();
        }
    }
    assert!(bytes > 0);
    (cpu_ns() - c0) as f64 / 1e3 / (20 * decoded.len()) as f64
}

/// CPU and what a span of commits wrote.
#[derive(Default)]
struct Span {
    commit_ns: u64,
    prune_ns: u64,
    batches: u64,
    bytes: u64,
    commits: u64,
    /// Each commit's wall time (the prune's apart), µs.
    walls_us: Vec<u64>,
}

fn cpu_ns() -> u64 {
    commwatch_collector::pace::thread_cpu_ns().unwrap_or(0)
}

/// The writer's run over virtual time.
struct Run {
    db: Db,
    names: Vec<String>,
    seqs: Vec<u64>,
    payloads: Vec<Vec<u8>>,
    retention: Duration,
    items: Items,
}

impl Run {
    /// Commits the batches sent in `[from, to)` (ns) and prunes when a prune falls due in it.
    fn commit(&mut self, from: i64, to: i64, span: &mut Span) {
        self.items.clear();
        for (i, name) in self.names.iter().enumerate() {
            let phase = (i as i64 * 37_000_000) % BATCH_NS;
            let (a, b) = (
                (from - phase).div_euclid(BATCH_NS),
                (to - phase).div_euclid(BATCH_NS),
            );
            for k in a..b {
                let seq = &mut self.seqs[i];
                *seq += 1;
                let p = &self.payloads[*seq as usize % self.payloads.len()];
                span.bytes += p.len() as u64;
                let at = (k + 1) * BATCH_NS + phase;
                self.items.batch(name, 1, *seq, at, p.clone());
            }
        }
        span.batches += self.items.len() as u64;
        span.commits += 1;
        let (c0, w0) = (cpu_ns(), Instant::now());
        self.db.commit(&self.items).expect("commit");
        let c1 = cpu_ns();
        span.walls_us.push(w0.elapsed().as_micros() as u64);
        span.commit_ns += c1 - c0;
        let every = PRUNE_INTERVAL.as_nanos() as i64;
        if from.div_euclid(every) != to.div_euclid(every) {
            self.db.prune(self.retention, to).expect("prune");
            span.prune_ns += cpu_ns() - c1;
        }
    }
}

fn main() {
    let nodes = common::env("NODES", 400) as usize;
    let retention_s = common::env("RETENTION_S", 60);
    let measure_s = common::env("MEASURE_S", 30) as i64;
    let payloads = match std::env::var("TAPE") {
        Ok(path) => tape(&path),
        Err(_) => synthetic(),
    };
    let mean = payloads.iter().map(Vec::len).sum::<usize>() / payloads.len();
    let tmp = tempfile::tempdir_in(std::env::var("DIR").unwrap_or_else(|_| "/tmp".into()))
        .expect("a temporary directory");
    let path: PathBuf = tmp.path().join(DB_FILE);
    let mut run = Run {
        db: Db::open(&path).expect("open"),
        names: (0..nodes).map(|i| format!("load-{i:05}")).collect(),
        seqs: vec![0; nodes],
        payloads,
        retention: Duration::from_secs(retention_s),
        items: Items::default(),
    };
    let mut hellos = Items::default();
    for name in &run.names {
        hellos.hello(name, 1, T0, vec![0x0a; 2_000]);
    }
    run.db.commit(&hellos).expect("hellos");
    let step = common::env("COMMIT_MS", COMMIT_INTERVAL.as_millis() as u64) as i64 * 1_000_000;
    let warm_ns = (retention_s as i64 + 30) * 1_000_000_000;
    let mut t = T0;
    let mut warm = Span::default();
    while t < T0 + warm_ns {
        run.commit(t, t + step, &mut warm);
        t += step;
    }
    let (mut span, wall) = (Span::default(), Instant::now());
    let end = t + measure_s * 1_000_000_000;
    while t < end {
        run.commit(t, t + step, &mut span);
        t += step;
    }
    let wall = wall.elapsed();
    let encode_us = reencode_us(&run.payloads);
    span.walls_us.sort_unstable();
    let q = |f: f64| span.walls_us[((span.walls_us.len() - 1) as f64 * f) as usize] as f64 / 1e3;
    let c0 = cpu_ns();
    let (items, seqs) = run.db.load(&path, run.retention, t).expect("load");
    let load_ms = (cpu_ns() - c0) as f64 / 1e6;
    let node_s = (nodes as i64 * measure_s) as f64;
    let size =
        |name: &str| std::fs::metadata(tmp.path().join(name)).map_or(0, |m| m.len()) as f64 / 1e6;
    println!(
        "persistence writer, {nodes} nodes, batches of {mean} bytes, {retention_s} s retention; {measure_s} s \
         timed ({} batches, {} commits, {:.0} MB):",
        span.batches,
        span.commits,
        span.bytes as f64 / 1e6
    );
    println!(
        "commit {:.2} us per batch, {:.1} us per node and second (wall per commit p50 / p99 / max {:.1} / {:.1} / \
         {:.1} ms); prune {:.1} us per node and second; wall {:.1} s; database {:.0} MB, WAL {:.0} MB; a start's \
         load: {items} rows, {seqs} instances, {load_ms:.0} ms; encoding a decoded batch again {encode_us:.2} us",
        span.commit_ns as f64 / 1e3 / span.batches.max(1) as f64,
        span.commit_ns as f64 / 1e3 / node_s,
        q(0.5),
        q(0.99),
        q(1.0),
        span.prune_ns as f64 / 1e3 / node_s,
        wall.as_secs_f64(),
        size(DB_FILE),
        size(&format!("{DB_FILE}-wal")),
    );
}
