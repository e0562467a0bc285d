//! Timed example (issue #34, item 7): a state database after node churn — 40,000 findings and their raise and
//! clear events, cleared over the last 60 days, 2,000 still active — and what a collector's start does with it:
//! before retention (every finding loaded and restored), and with it (only what the tracker keeps loaded; the
//! history's thread then prunes to the default retention), then a second start on the pruned database.
//!
//! ```text
//! cargo run -p commwatch-collector --example history_prune -- [FINDINGS]
//! ```
//! Prints the database's size and each start's time; figures depend on the build profile and the machine
//! (report both).

use std::path::Path;
use std::time::Instant;

use commwatch_collector::analysis::history::{History, Retention, Upkeep};
use commwatch_collector::analysis::tracker::{Change, Tracker};
use commwatch_collector::analysis::{Evidence, Finding, FindingKind, Severity, Subject};

const DAY: f64 = 86_400.0;
/// Findings still active (never pruned).
const ACTIVE: usize = 2_000;

/// A finding shaped like the collector's (a link's errors on one node), `i` its index.
fn finding(i: usize, last_seen: f64, active: bool) -> Finding {
    let node = format!("node-{i:05}");
    Finding {
        id: format!("link_errors:{node}:mlx5_{}:1", i % 8),
        kind: FindingKind::LinkErrors,
        severity: Severity::Critical,
        subject: Subject {
            node: node.clone(),
            device: Some(format!("mlx5_{}", i % 8)),
            port: Some("1".into()),
            ..Default::default()
        },
        summary: format!(
            "{node} mlx5_{} port 1: symbol and link-recovery errors rising ({} per second over the last 30 s), \
             the link retrained twice; NCCL traffic on this rail is slowed for every rank of the job",
            i % 8,
            1 + i % 50
        ),
        evidence: Evidence::new(1.0 + (i % 50) as f64, "errors_per_second").expected(0.0),
        action: "Check the cable and transceiver of this port (reseat, then replace); if errors persist, \
                 drain the node and run the vendor's link diagnostics before returning it to the pool."
            .into(),
        first_seen_unix_s: last_seen - 600.0,
        last_seen_unix_s: last_seen,
        active,
        root: true,
        caused_by: None,
        consequences: vec![],
    }
}

/// Writes `n` findings: `n - ACTIVE` raised and cleared at ages spread over 60 days, then `ACTIVE` raised.
fn build(dir: &Path, n: usize, now: f64) {
    let mut h = History::open(dir).expect("open the history");
    let cleared = n.saturating_sub(ACTIVE);
    for chunk in (0..cleared).collect::<Vec<_>>().chunks(1000) {
        let mut raised = Vec::new();
        let mut gone = Vec::new();
        for &i in chunk {
            let seen = now - 60.0 * DAY * (i as f64 / cleared as f64);
            let mut f = finding(i, seen, true);
            raised.push(Change::Raised(f.clone()));
            f.active = false;
            gone.push(Change::Cleared(f));
        }
        let at = now - 60.0 * DAY * (chunk[0] as f64 / cleared as f64);
        h.record(&raised, at - 600.0).expect("write raises");
        h.record(&gone, at).expect("write clears");
    }
    let active: Vec<Change> = (cleared..n)
        .map(|i| Change::Raised(finding(i, now, true)))
        .collect();
    h.record(&active, now).expect("write the active ones");
}

fn rows(dir: &Path) -> (i64, i64, u64, i64) {
    let path = dir.join(commwatch_collector::analysis::history::HISTORY_FILE);
    let conn = rusqlite::Connection::open(&path).expect("open the database");
    // The WAL's pages into the file first, so that its size is what it holds.
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .expect("checkpoint");
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).expect(sql) };
    let findings = count("SELECT COUNT(*) FROM analysis_findings");
    let events = count("SELECT COUNT(*) FROM analysis_finding_events");
    let free = count("PRAGMA freelist_count") * count("PRAGMA page_size");
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    (findings, events, size, free)
}

fn report(what: &str, dir: &Path) {
    let (f, e, size, free) = rows(dir);
    println!(
        "{what}: {f} findings, {e} events, file {:.1} MB ({:.1} MB of it free pages)",
        size as f64 / 1e6,
        free as f64 / 1e6
    );
}

/// The start before retention: every stored finding loaded and restored.
fn start_before(dir: &Path) -> (f64, usize) {
    let t = Instant::now();
    let h = History::open(dir).expect("open");
    let all = h.load_recent_findings(usize::MAX, None).expect("load");
    let n = all.len();
    Tracker::new().restore(all);
    (t.elapsed().as_secs_f64(), n)
}

/// The start with retention: only what the tracker keeps loaded (the history's thread prunes after it).
fn start_after(dir: &Path) -> (f64, usize) {
    let t = Instant::now();
    let h = History::open(dir).expect("open");
    let kept = h
        .load_kept_findings(&Retention::default(), commwatch_model::clock::unix_now_s())
        .expect("load");
    let n = kept.len();
    Tracker::new().restore(kept);
    (t.elapsed().as_secs_f64(), n)
}

/// One prune as the history's thread does it; seconds and rows.
fn prune(dir: &Path) -> (f64, u64, u64) {
    let t = Instant::now();
    let mut h = History::open(dir).expect("open");
    let p = Upkeep::new(Retention::default(), None).prune(&mut h);
    (t.elapsed().as_secs_f64(), p.findings, p.events)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(40_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let now = commwatch_model::clock::unix_now_s();
    let t = Instant::now();
    build(dir.path(), n, now);
    println!("built {n} findings in {:.1} s", t.elapsed().as_secs_f64());
    report("before", dir.path());
    let (s, loaded) = start_before(dir.path());
    println!("start before retention: {s:.3} s, {loaded} findings loaded");
    let (s, loaded) = start_after(dir.path());
    println!("start with retention: {s:.3} s, {loaded} findings loaded");
    let (s, f, e) = prune(dir.path());
    println!(
        "first prune (history thread, after the start): {s:.3} s, {f} findings and {e} events"
    );
    report("after", dir.path());
    let (s, loaded) = start_after(dir.path());
    println!("next start: {s:.3} s, {loaded} findings loaded");
    let (s, f, e) = prune(dir.path());
    println!("next prune: {s:.3} s, {f} findings and {e} events");
    let conn = rusqlite::Connection::open(
        dir.path()
            .join(commwatch_collector::analysis::history::HISTORY_FILE),
    )
    .expect("open");
    conn.execute_batch("VACUUM;").expect("vacuum");
    drop(conn);
    report("after VACUUM (collector stopped)", dir.path());
}
