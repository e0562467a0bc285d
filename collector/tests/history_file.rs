//! The findings' history in a file of its own (`history.sqlite3`), apart from the persistence's
//! (`collector.sqlite3`): a state directory of an older collector, which kept the history's tables in the
//! persistence's file, opens with its history, baselines and events, moved once; a move cut short between its
//! copy and its drop adds nothing when done again; a damaged persistence file does not stop the history.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use commwatch_collector::analysis::history::{History, HISTORY_FILE};
use commwatch_collector::persist::DB_FILE;

/// The history's tables as an older collector created them in `collector.sqlite3`, with one finding (active,
/// raised at 1,000 s), its raise event and an operator's bare baseline.
fn old_layout(dir: &Path) {
    let conn = rusqlite::Connection::open(dir.join(DB_FILE)).unwrap();
    conn.execute_batch(
        r#"PRAGMA journal_mode = WAL;
           CREATE TABLE batches(node TEXT NOT NULL, instance_id INTEGER NOT NULL, seq INTEGER NOT NULL,
             received_unix_ns INTEGER NOT NULL, payload BLOB NOT NULL);
           CREATE TABLE IF NOT EXISTS analysis_findings (
             id TEXT PRIMARY KEY, json TEXT NOT NULL, active INTEGER NOT NULL,
             first_seen_unix_s REAL NOT NULL, last_seen_unix_s REAL NOT NULL);
           CREATE TABLE IF NOT EXISTS analysis_finding_events (
             at_unix_s REAL NOT NULL, id TEXT NOT NULL, event TEXT NOT NULL,
             severity TEXT NOT NULL, summary TEXT NOT NULL);
           CREATE TABLE IF NOT EXISTS analysis_baselines (
             key TEXT PRIMARY KEY, kind TEXT NOT NULL, json TEXT NOT NULL, set_unix_s REAL NOT NULL);
           CREATE INDEX IF NOT EXISTS analysis_finding_events_by_id ON analysis_finding_events (id);
           INSERT INTO batches VALUES ('n1', 1, 1, 5, x'00');"#,
    )
    .unwrap();
    let finding = serde_json::json!({
        "id": "link_errors:node-03:mlx5_0:1", "kind": "link_errors", "severity": "critical",
        "subject": {"node": "node-03", "device": "mlx5_0", "port": "1"},
        "summary": "node-03 mlx5_0 port 1 error counters rising",
        "evidence": {"measured": 52.7, "expected": 0.0, "unit": "errors_per_second"},
        "action": "reseat", "first_seen_unix_s": 1000.0, "last_seen_unix_s": 1010.0, "active": true,
        "root": true, "caused_by": null, "consequences": []
    });
    conn.execute(
        "INSERT INTO analysis_findings VALUES ('link_errors:node-03:mlx5_0:1', ?1, 1, 1000.0, 1010.0)",
        [finding.to_string()],
    )
    .unwrap();
    conn.execute_batch(
        r#"INSERT INTO analysis_finding_events VALUES
             (1000.0, 'link_errors:node-03:mlx5_0:1', 'raised', 'critical', 'rising');
           INSERT INTO analysis_baselines VALUES ('bare:job-42:all_reduce', 'bare',
             '{"job":"job-42","collective":"all_reduce","busbw_bytes_per_second":18500000000.0,"nranks":64,"source":"operator"}',
             1000.0);"#,
    )
    .unwrap();
}

/// The history's tables left in `collector.sqlite3`.
fn tables_left(dir: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(dir.join(DB_FILE)).unwrap();
    let mut st = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    let names = st.query_map([], |r| r.get::<_, String>(0)).unwrap();
    names.map(Result::unwrap).collect()
}

#[test]
fn an_older_state_directory_keeps_its_history_moved_to_its_own_file() {
    let dir = tempfile::tempdir().unwrap();
    old_layout(dir.path());
    let h = History::open(dir.path()).unwrap();
    let found = h.load_findings().unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, "link_errors:node-03:mlx5_0:1");
    assert_eq!(found[0].first_seen_unix_s, 1000.0);
    let events = h.events("link_errors:node-03:mlx5_0:1").unwrap();
    assert_eq!(events, vec![(1000.0, "raised".to_string())]);
    let (bare, _) = h.load_baselines().unwrap();
    assert_eq!(bare.len(), 1, "{bare:?}");
    assert_eq!(h.skipped(), 0);
    drop(h);
    // Moved, not copied: the persistence's file keeps its own tables only.
    assert_eq!(tables_left(dir.path()), vec!["batches".to_string()]);
    let mode = std::fs::metadata(dir.path().join(HISTORY_FILE))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // And a second open finds it where it was moved.
    let h = History::open(dir.path()).unwrap();
    assert_eq!(h.load_findings().unwrap().len(), 1);
    assert_eq!(h.events("link_errors:node-03:mlx5_0:1").unwrap().len(), 1);
}

#[test]
fn a_move_cut_short_after_its_copy_adds_nothing_when_done_again() {
    let dir = tempfile::tempdir().unwrap();
    old_layout(dir.path());
    drop(History::open(dir.path()).unwrap());
    // A stop after the copy's commit, before the drop: the old tables are there again with the same rows.
    std::fs::remove_file(dir.path().join(DB_FILE)).unwrap();
    for companion in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.path().join(format!("{DB_FILE}{companion}")));
    }
    old_layout(dir.path());
    let h = History::open(dir.path()).unwrap();
    assert_eq!(h.load_findings().unwrap().len(), 1);
    assert_eq!(h.events("link_errors:node-03:mlx5_0:1").unwrap().len(), 1);
    assert_eq!(h.load_baselines().unwrap().0.len(), 1);
    assert_eq!(tables_left(dir.path()), vec!["batches".to_string()]);
}

#[test]
fn a_damaged_persistence_file_does_not_stop_the_history() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(DB_FILE), b"not an SQLite database at all").unwrap();
    let h = History::open(dir.path()).unwrap();
    assert!(h.load_findings().unwrap().is_empty());
    // Left as it was, for the persistence to move aside.
    assert_eq!(
        std::fs::read(dir.path().join(DB_FILE)).unwrap(),
        b"not an SQLite database at all"
    );
}
