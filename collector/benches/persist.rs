//! The persistence writer's CPU per batch and per node-second: SQLite's commit of demo-sized batches, and its
//! prune, on the calling thread's CPU clock, in steady state (the database holding `RETENTION_S` of batches).
//!
//! `cargo bench -p commwatch-collector --bench persist` (environment: `NODES` (400), `RETENTION_S` (60),
//! `MEASURE_S` (30) seconds of data timed after `RETENTION_S + 30` untimed, `COMMIT_MS` (the writer's
//! `COMMIT_INTERVAL`, 100), `DIR` for the database (default: a temporary directory in `/tmp`), `TAPE=FILE` for
//! payloads from `loadgen --dump-tape` (a real demo agent's batches, as received) instead of synthetic ones
//! shaped like them: ~410 samples of 1,485 series, 5 ticks).
//!
//! The database is kept as the writer keeps it (a rollback journal, `JOURNAL=persist`, the default), or for
//! comparison in the WAL as older collectors kept it (`JOURNAL=wal`): checkpointed beside the commits
//! (`CHECKPOINT=beside`, the default: a passive checkpoint on a thread and connection of its own every second of
//! data, its CPU reported apart, and SQLite's own within a commit once the WAL holds 64 MiB, as they did), or
//! only within them as SQLite does by default (`CHECKPOINT=within`: every 1,000 pages, in the commit's CPU and
//! wall).
//!
//! `HISTORY_HZ` (0) transactions a second of the findings' history beside it, as the collector's history thread
//! writes them (`History::record`'s statements, `HISTORY_ROWS` (8) findings refreshed, one raised, per
//! transaction), on its own thread and connection, to its own file (`HISTORY_AT=own`, the default, as the
//! collector does) or to the persistence's (`HISTORY_AT=state`, as older collectors did); then the writer's
//! commits are paced in real time (a second of data a second) so that the two meet as in a collector, and the
//! lock waits are reported.
//!
//! Time is virtual: every node sends a batch every 250 ms of it (its phase its own), the writer commits every
//! `COMMIT_MS` what arrived meanwhile and prunes every `PRUNE_INTERVAL` (10 s), as in a collector
//! — only as fast as the disk takes it. The disk's own work (writeback, `fsync`) counts where the kernel does
//! it in the calling thread; what it does in its own threads does not.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_collector::analysis::history::{self, History};
use commwatch_collector::analysis::tracker::Change;
use commwatch_collector::analysis::{Evidence, Finding, FindingKind, Severity, Subject};
use commwatch_collector::persist::bench::{Db, Items};
use commwatch_collector::persist::{COMMIT_INTERVAL, DB_FILE, PRUNE_INTERVAL};
use commwatch_proto::v1 as pb;
use prost::Message;

mod common;

const BATCH_NS: i64 = 250_000_000;
const T0: i64 = 1_800_000_000_000_000_000;
/// The writer's checkpoints beside its commits: one a second at most.
const CKPT_NS: i64 = 1_000_000_000;

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

/// A finding as the rules raise them (an ordinary straggler on `node`), for the history's rows.
fn finding(id: usize, now_s: f64) -> Finding {
    Finding {
        id: format!("straggler/load-{id:05}/0"),
        kind: FindingKind::Straggler,
        severity: Severity::Warning,
        subject: Subject {
            node: format!("load-{id:05}"),
            job: Some(format!("job-{}", id / 8)),
            ..Default::default()
        },
        summary: format!("load-{id:05} is a straggler: its steps take 1.4x the job's median"),
        evidence: Evidence::new(1.4, "ratio")
            .expected(1.0)
            .steps(20)
            .seconds(20.0)
            .detail("median_step_s", 0.52)
            .detail("node_step_s", 0.73),
        action: "look at the node's GPUs and host: throttling, a slow input pipeline".into(),
        first_seen_unix_s: now_s - 60.0,
        last_seen_unix_s: now_s,
        active: true,
        root: true,
        caused_by: None,
        consequences: Vec::new(),
    }
}

/// Where the history beside the writer goes: its own file (the collector's [`History`]), or the persistence's
/// file, with the tables and statements older collectors used there.
enum HistoryDb {
    Own(History),
    State(rusqlite::Connection),
}

impl HistoryDb {
    fn open(dir: &std::path::Path, at: &str) -> HistoryDb {
        if at != "state" {
            return HistoryDb::Own(History::open(dir).expect("the history opens"));
        }
        let conn = rusqlite::Connection::open(dir.join(DB_FILE)).expect("the state database");
        conn.busy_timeout(Duration::from_secs(5))
            .expect("busy timeout");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("WAL");
        conn.execute_batch(history::TABLES)
            .expect("the history's tables");
        HistoryDb::State(conn)
    }

    /// One transaction of `changes` at `at` (`History::record`'s statements).
    fn record(&mut self, changes: &[Change], at: f64) {
        let conn = match self {
            HistoryDb::Own(h) => return h.record(changes, at).expect("a history transaction"),
            HistoryDb::State(conn) => conn,
        };
        let tx = conn.transaction().expect("a history transaction");
        for ch in changes {
            let (f, event) = match ch {
                Change::Raised(f) => (f, Some("raised")),
                Change::Cleared(f) => (f, Some("cleared")),
                Change::Updated(f) => (f.as_ref(), None),
            };
            let json = serde_json::to_string(f).expect("json");
            tx.execute(
                "INSERT INTO analysis_findings (id, json, active, first_seen_unix_s, last_seen_unix_s)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(id) DO UPDATE SET json = ?2, active = ?3, first_seen_unix_s = ?4,
                     last_seen_unix_s = ?5",
                rusqlite::params![f.id, json, f.active, f.first_seen_unix_s, f.last_seen_unix_s],
            )
            .expect("a finding");
            if let Some(ev) = event {
                tx.execute(
                    "INSERT INTO analysis_finding_events (at_unix_s, id, event, severity, summary)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    rusqlite::params![at, f.id, ev, f.severity.as_str(), f.summary],
                )
                .expect("an event");
            }
        }
        tx.commit().expect("a history commit");
    }
}

/// The findings' history beside the writer: `hz` transactions a second of `rows` refreshed findings and one
/// raised, on its own thread and connection (to the file `at` says), until `stop`; returns how many
/// transactions and their wall time.
fn history_writer(
    dir: PathBuf,
    at: String,
    hz: u64,
    rows: usize,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(u64, Duration)> {
    std::thread::spawn(move || {
        let mut hist = HistoryDb::open(&dir, &at);
        let (mut n, mut wall, every) = (0u64, Duration::ZERO, Duration::from_secs(1) / hz as u32);
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let now_s = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            let mut changes: Vec<Change> = (0..rows)
                .map(|k| Change::Updated(Arc::new(finding(k, now_s))))
                .collect();
            changes.push(Change::Raised(finding(rows + n as usize % 1000, now_s)));
            let w0 = Instant::now();
            hist.record(&changes, now_s);
            wall += w0.elapsed();
            n += 1;
            next += every;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        (n, wall)
    })
}

/// The writer's checkpoints beside its commits: a thread that runs one each time it is told to, and what they
/// cost.
struct Checkpoints {
    go: std::sync::mpsc::SyncSender<()>,
    busy: Arc<AtomicBool>,
    done: std::thread::JoinHandle<CheckpointCost>,
}

/// What the checkpoints cost: their thread's CPU, each one's wall time (µs), the largest WAL they met (frames).
#[derive(Default)]
struct CheckpointCost {
    cpu_ns: u64,
    walls_us: Vec<u64>,
    max_frames: i64,
}

impl Checkpoints {
    fn start(path: PathBuf) -> Checkpoints {
        let (go, rx) = std::sync::mpsc::sync_channel::<()>(1);
        let busy = Arc::new(AtomicBool::new(false));
        let flag = busy.clone();
        let done = std::thread::spawn(move || {
            let c = rusqlite::Connection::open(&path).expect("the checkpointer's connection");
            let mut cost = CheckpointCost::default();
            while rx.recv().is_ok() {
                let (c0, w0) = (cpu_ns(), Instant::now());
                let frames: i64 = c
                    .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
                    .expect("a checkpoint");
                cost.cpu_ns += cpu_ns() - c0;
                cost.walls_us.push(w0.elapsed().as_micros() as u64);
                cost.max_frames = cost.max_frames.max(frames);
                flag.store(false, Ordering::Release);
            }
            cost
        });
        Checkpoints { go, busy, done }
    }

    /// Starts a checkpoint unless one is running (as the writer does).
    fn kick(&self) {
        if !self.busy.swap(true, Ordering::AcqRel) {
            self.go.send(()).expect("the checkpointer");
        }
    }

    /// Stops the thread (after the checkpoint it runs); what its checkpoints cost.
    fn finish(self) -> CheckpointCost {
        drop(self.go);
        self.done.join().expect("the checkpointer")
    }
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
    /// Each commit's wait for the write lock, µs.
    locks_us: Vec<u64>,
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
    /// The checkpoints beside the commits (none: within them, or no WAL).
    checkpoints: Option<Checkpoints>,
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
        let times = self.db.commit(&self.items).expect("commit");
        let c1 = cpu_ns();
        span.walls_us.push(w0.elapsed().as_micros() as u64);
        span.locks_us.push(times.lock_wait.as_micros() as u64);
        span.commit_ns += c1 - c0;
        if let Some(c) = &self.checkpoints {
            if from.div_euclid(CKPT_NS) != to.div_euclid(CKPT_NS) {
                c.kick();
            }
        }
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
    let retention = Duration::from_secs(retention_s);
    let mut run = Run {
        db: Db::open(&path, retention).expect("open"),
        names: (0..nodes).map(|i| format!("load-{i:05}")).collect(),
        seqs: vec![0; nodes],
        payloads,
        retention,
        items: Items::default(),
        checkpoints: None,
    };
    let wal = std::env::var("JOURNAL").is_ok_and(|v| v == "wal");
    let beside = std::env::var("CHECKPOINT").map_or(true, |v| v != "within");
    if wal {
        run.db
            .wal(if beside { 1024 } else { 1000 })
            .expect("the WAL");
    }
    if wal && beside {
        run.checkpoints = Some(Checkpoints::start(path.clone()));
    }
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
    // The checkpoints of the timed span alone.
    if let Some(c) = run.checkpoints.take() {
        c.finish();
        run.checkpoints = Some(Checkpoints::start(path.clone()));
    }
    let (hz, rows) = (common::env("HISTORY_HZ", 0), common::env("HISTORY_ROWS", 8));
    let at = std::env::var("HISTORY_AT").unwrap_or_else(|_| "own".into());
    let stop = Arc::new(AtomicBool::new(false));
    let history = (hz > 0).then(|| {
        let dir = tmp.path().to_owned();
        history_writer(dir, at.clone(), hz, rows as usize, stop.clone())
    });
    let (mut span, wall) = (Span::default(), Instant::now());
    let (start, end) = (t, t + measure_s * 1_000_000_000);
    while t < end {
        if history.is_some() {
            // Real time: the data of [t, t + step) is committed once it has arrived.
            let due = Duration::from_nanos((t + step - start) as u64);
            std::thread::sleep(due.saturating_sub(wall.elapsed()));
        }
        run.commit(t, t + step, &mut span);
        t += step;
    }
    let wall = wall.elapsed();
    stop.store(true, Ordering::Relaxed);
    let history = history.map(|h| h.join().expect("the history thread"));
    let ckpt = run.checkpoints.take().map(Checkpoints::finish);
    let encode_us = reencode_us(&run.payloads);
    span.walls_us.sort_unstable();
    span.locks_us.sort_unstable();
    let q = |f: f64| span.walls_us[((span.walls_us.len() - 1) as f64 * f) as usize] as f64 / 1e3;
    let ql = |f: f64| span.locks_us[((span.locks_us.len() - 1) as f64 * f) as usize] as f64 / 1e3;
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
    println!(
        "lock wait per commit p50 / p99 / max {:.1} / {:.1} / {:.1} ms",
        ql(0.5),
        ql(0.99),
        ql(1.0)
    );
    match ckpt {
        Some(mut c) => {
            c.walls_us.sort_unstable();
            let n = c.walls_us.len();
            let p = |f: f64| {
                c.walls_us
                    .get(((n.max(1) - 1) as f64 * f) as usize)
                    .map_or(0.0, |w| *w as f64 / 1e3)
            };
            println!(
                "checkpoints beside the commits: {n}, {:.1} us per node and second (their thread's CPU), wall p50 / \
                 p99 / max {:.1} / {:.1} / {:.1} ms, largest WAL {} frames",
                c.cpu_ns as f64 / 1e3 / node_s,
                p(0.5),
                p(0.99),
                p(1.0),
                c.max_frames
            );
        }
        None if wal => println!("WAL checkpointed within the commits (every 1,000 pages)"),
        None => println!("rollback journal (kept between commits), no checkpoints"),
    }
    if let Some((n, w)) = history {
        println!(
            "history beside it ({at}): {n} transactions of {rows} refreshed findings and one raised ({hz} a second), \
             {:.1} ms each on average (wall)",
            w.as_secs_f64() * 1e3 / n.max(1) as f64
        );
    }
}
