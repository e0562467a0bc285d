//! Findings history and baselines in SQLite, in the collector's state directory: a database file of its own,
//! [`HISTORY_FILE`], apart from the persistence's (`persist.rs`) so that neither waits for the other's write
//! lock, WAL or checkpoints. Older collectors kept these tables in the persistence's file: they are moved on
//! open ([`History::open`]).
//!
//! Tables:
//! - `analysis_findings(id PRIMARY KEY, json, active, first_seen_unix_s, last_seen_unix_s)`: the latest state
//!   of every finding ever raised (the JSON is the `/api/v1/findings` element).
//! - `analysis_finding_events(at_unix_s, id, event, severity, summary)`: one row per raise and clear.
//! - `analysis_baselines(key PRIMARY KEY, kind, json, set_unix_s)`: bare (`bare`) and throughput
//!   (`throughput`) baselines, set by operators or learned from history.
//!
//! After a restart, findings come back inactive (the collector re-raises what is still true after its hysteresis),
//! with their `first_seen`: only what the tracker keeps of what the retention keeps
//! ([`History::load_kept_findings`]: the findings active when the collector stopped, then the most recently
//! seen, [`super::tracker::MAX_INACTIVE`] in all); baselines come
//! back as they were. A row that cannot be read (a number stored as `null` by an older collector, a newer
//! collector's format) or is out of the API's bounds is skipped, logged and counted ([`History::skipped`]),
//! never fatal; a number JSON cannot hold is never written.
//!
//! Retention ([`History::prune`], on the history's thread right after the start and every [`PRUNE_INTERVAL`]
//! after it, so the start does not wait for it; [`Upkeep`]): cleared findings last seen longer
//! ago than [`Retention::max_age`] and beyond the newest [`Retention::max_cleared`], with their events; events
//! older than `max_age` and beyond the newest [`Retention::max_events`]. A finding active when it was last
//! written, and its events, are never pruned. Pruned rows are counted
//! (`commwatch_collector_history_pruned_total{record}`); the file keeps its size (SQLite reuses the freed
//! pages for later rows; `VACUUM` with the collector stopped gives them back).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use prometheus::{IntCounterVec, Opts, Registry};
use rusqlite::{params, Connection};
use tracing::{info, warn};

use super::baselines::{check_bare, check_throughput};
use super::input::{BareBaseline, ThroughputBaseline};
use super::tracker::Change;
use super::Finding;

/// Errors of the history database. Each message says its cause itself (none is also a `source()`, so a
/// printed chain says it once).
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("sqlite error on {path}: {error}")]
    Sqlite {
        path: PathBuf,
        error: rusqlite::Error,
    },
    #[error("cannot encode a record for the history: {0}")]
    Json(serde_json::Error),
    /// A record with a number SQLite and JSON cannot hold (infinite, NaN) is never written.
    #[error("refusing to store {key}: {reason}")]
    Unstorable { key: String, reason: String },
    #[error("the analysis history thread: {0}")]
    Thread(String),
    /// The history's database file cannot be prepared (created, made private).
    #[error(transparent)]
    File(crate::persist::PersistError),
}

/// How often the history thread prunes (besides once at start).
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(600);

/// The history's database file in the state directory.
pub const HISTORY_FILE: &str = "history.sqlite3";

/// How much findings history the state database keeps (`findings_retention`, `findings_max_cleared`,
/// `findings_max_events` in the collector's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Cleared findings last seen longer ago than this are pruned with their events, and so are older events
    /// of the findings kept (those of active findings never).
    pub max_age: Duration,
    /// Cleared findings kept at most: the most recently seen.
    pub max_cleared: usize,
    /// Events (raises and clears) kept at most: the newest. Those of active findings are never pruned, and
    /// count.
    pub max_events: usize,
}

impl Default for Retention {
    /// The collector's defaults (`crate::config`).
    fn default() -> Self {
        Retention {
            max_age: crate::config::DEFAULT_FINDINGS_RETENTION,
            max_cleared: crate::config::DEFAULT_FINDINGS_MAX_CLEARED,
            max_events: crate::config::DEFAULT_FINDINGS_MAX_EVENTS,
        }
    }
}

/// Rows one [`History::prune`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub findings: u64,
    pub events: u64,
}

/// The counter of pruned rows, registered in `registry`, both label values present from the start.
pub fn pruned_counter(registry: &Registry) -> Result<IntCounterVec, prometheus::Error> {
    let c = IntCounterVec::new(
        Opts::new(
            crate::telemetry::names::COLLECTOR_HISTORY_PRUNED_TOTAL,
            "Rows of the findings history pruned from the state database (retention), by record.",
        ),
        &["record"],
    )?;
    registry.register(Box::new(c.clone()))?;
    for v in ["finding", "event"] {
        c.with_label_values(&[v]);
    }
    Ok(c)
}

impl Pruned {
    /// Adds these counts to `counter` ([`pruned_counter`]).
    pub fn count(&self, counter: &IntCounterVec) {
        counter
            .with_label_values(&["finding"])
            .inc_by(self.findings);
        counter.with_label_values(&["event"]).inc_by(self.events);
    }
}

/// The history's retention in force: what it keeps, where prunes are counted, when the next one is due.
#[derive(Debug)]
pub struct Upkeep {
    retention: Retention,
    counter: Option<IntCounterVec>,
    next: Instant,
}

impl Upkeep {
    /// Keeps what `retention` says, counting prunes in `counter` ([`pruned_counter`]) when given; the first
    /// prune is due at once.
    pub fn new(retention: Retention, counter: Option<IntCounterVec>) -> Upkeep {
        Upkeep {
            retention,
            counter,
            next: Instant::now(),
        }
    }

    /// What it keeps.
    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// Time until the next prune is due (zero when it is).
    pub fn due_in(&self) -> Duration {
        self.next.saturating_duration_since(Instant::now())
    }

    /// Prunes `hist` now (counted, and logged when it removed rows); the next prune is due
    /// [`PRUNE_INTERVAL`] later. A failure is logged and prunes nothing: the history goes on.
    pub fn prune(&mut self, hist: &mut History) -> Pruned {
        self.next = Instant::now() + PRUNE_INTERVAL;
        let started = Instant::now();
        match hist.prune(&self.retention, commwatch_model::clock::unix_now_s()) {
            Ok(p) => {
                if let Some(c) = &self.counter {
                    p.count(c);
                }
                if p != Pruned::default() {
                    info!(
                        findings = p.findings,
                        events = p.events,
                        seconds = started.elapsed().as_secs_f64(),
                        "pruned findings history past retention"
                    );
                }
                p
            }
            Err(e) => {
                warn!(error = %e, "pruning the findings history failed");
                Pruned::default()
            }
        }
    }
}

impl From<serde_json::Error> for HistoryError {
    fn from(e: serde_json::Error) -> Self {
        HistoryError::Json(e)
    }
}

/// The history's tables and indexes, created where missing when it opens (older collectors created the same in
/// the state database, `collector.sqlite3`).
#[doc(hidden)]
pub const TABLES: &str = "
    CREATE TABLE IF NOT EXISTS analysis_findings (
        id TEXT PRIMARY KEY, json TEXT NOT NULL, active INTEGER NOT NULL,
        first_seen_unix_s REAL NOT NULL, last_seen_unix_s REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS analysis_finding_events (
        at_unix_s REAL NOT NULL, id TEXT NOT NULL, event TEXT NOT NULL,
        severity TEXT NOT NULL, summary TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS analysis_baselines (
        key TEXT PRIMARY KEY, kind TEXT NOT NULL, json TEXT NOT NULL, set_unix_s REAL NOT NULL);
    CREATE INDEX IF NOT EXISTS analysis_findings_by_seen ON analysis_findings (active, last_seen_unix_s);
    CREATE INDEX IF NOT EXISTS analysis_finding_events_by_id ON analysis_finding_events (id);
    CREATE INDEX IF NOT EXISTS analysis_finding_events_by_time ON analysis_finding_events (at_unix_s);";

/// An open history database.
pub struct History {
    conn: Connection,
    path: PathBuf,
    /// Stored records the loads skipped (unreadable or out of bounds).
    skipped: Cell<u64>,
}

impl History {
    /// Opens (creating, mode 0600) the tables in `<dir>/`[`HISTORY_FILE`], and moves there what an older
    /// collector kept in `<dir>/collector.sqlite3` ([`move_from_state`]). `dir` must exist.
    pub fn open(dir: &Path) -> Result<History, HistoryError> {
        let path = dir.join(HISTORY_FILE);
        let err = |error| HistoryError::Sqlite {
            path: path.clone(),
            error,
        };
        crate::persist::files::prepare_db_file(&path).map_err(HistoryError::File)?;
        let conn = Connection::open(&path).map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.execute_batch(TABLES).map_err(err)?;
        let state = dir.join(crate::persist::DB_FILE);
        if state.exists() {
            // Never fatal: the persistence deals with a damaged file of its own (moving it aside), and what was
            // not moved stays where it was for the next start to move.
            match move_from_state(&conn, &state) {
                Ok(0) => {}
                Ok(rows) => info!(from = %state.display(), to = %path.display(), rows,
                    "moved the findings history and baselines to their own file"),
                Err(e) => warn!(from = %state.display(), error = %e,
                    "cannot move the findings history an older collector kept in the state database; \
                     starting without it, the next start tries again"),
            }
        }
        Ok(History {
            conn,
            path,
            skipped: Cell::new(0),
        })
    }

    fn err(&self, error: rusqlite::Error) -> HistoryError {
        HistoryError::Sqlite {
            path: self.path.clone(),
            error,
        }
    }

    /// Stored records the loads so far skipped: rows that do not decode (a value written as `null`, a newer
    /// collector's format) or are out of the bounds the API now holds them to. Each is logged with its key.
    pub fn skipped(&self) -> u64 {
        self.skipped.get()
    }

    fn skip(&self, what: &str, key: &str, error: &dyn std::fmt::Display) {
        self.skipped.set(self.skipped.get() + 1);
        warn!(what, key, error = %error, "skipping a stored record that cannot be used");
    }

    /// Writes raises, clears and refreshed findings in one transaction.
    pub fn record(&mut self, changes: &[Change], at_unix_s: f64) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let err = |error| HistoryError::Sqlite {
            path: path.clone(),
            error,
        };
        let tx = self.conn.transaction().map_err(err)?;
        for ch in changes {
            let (f, event) = match ch {
                Change::Raised(f) => (f, Some("raised")),
                Change::Cleared(f) => (f, Some("cleared")),
                Change::Updated(f) => (f.as_ref(), None),
            };
            let json = serde_json::to_string(f)?;
            tx.execute(
                "INSERT INTO analysis_findings (id, json, active, first_seen_unix_s, last_seen_unix_s)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(id) DO UPDATE SET json = ?2, active = ?3, first_seen_unix_s = ?4,
                     last_seen_unix_s = ?5",
                params![f.id, json, f.active, f.first_seen_unix_s, f.last_seen_unix_s],
            )
            .map_err(err)?;
            if let Some(ev) = event {
                tx.execute(
                    "INSERT INTO analysis_finding_events (at_unix_s, id, event, severity, summary)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![at_unix_s, f.id, ev, f.severity.as_str(), f.summary],
                )
                .map_err(err)?;
            }
        }
        tx.commit().map_err(err)
    }

    /// What the tracker keeps of the stored findings, marked inactive (see the module doc), sorted by id: those
    /// active when last written, then the most recently seen, [`super::tracker::MAX_INACTIVE`] in all.
    pub fn load_findings(&self) -> Result<Vec<Finding>, HistoryError> {
        self.load_recent_findings(super::tracker::MAX_INACTIVE, None)
    }

    /// What the tracker keeps of the findings `retention` keeps at `now_unix_s` (what the next
    /// [`History::prune`] leaves), marked inactive, sorted by id: what a start restores.
    pub fn load_kept_findings(
        &self,
        retention: &Retention,
        now_unix_s: f64,
    ) -> Result<Vec<Finding>, HistoryError> {
        let keep = (retention, now_unix_s - retention.max_age.as_secs_f64());
        self.load_recent_findings(super::tracker::MAX_INACTIVE, Some(keep))
    }

    /// At most `max` stored findings (those active when last written first, then by `last_seen`, newest
    /// first), marked inactive, sorted by id; with `keep`, only what that retention keeps, given its cutoff.
    pub fn load_recent_findings(
        &self,
        max: usize,
        keep: Option<(&Retention, f64)>,
    ) -> Result<Vec<Finding>, HistoryError> {
        let (cutoff, mut cleared_left) =
            keep.map_or((f64::NEG_INFINITY, usize::MAX), |(r, c)| (c, r.max_cleared));
        let mut st = self
            .conn
            .prepare(
                "SELECT id, json, active FROM analysis_findings
                 WHERE active = 1 OR last_seen_unix_s >= ?2
                 ORDER BY active DESC, last_seen_unix_s DESC LIMIT ?1",
            )
            .map_err(|e| self.err(e))?;
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let rows = st
            .query_map(params![limit, cutoff], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, bool>(2)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for r in rows {
            let (id, json, active) = r.map_err(|e| self.err(e))?;
            if !active {
                if cleared_left == 0 {
                    break;
                }
                cleared_left -= 1;
            }
            match serde_json::from_str::<Finding>(&json) {
                Ok(mut f) => {
                    f.active = false;
                    out.push(f);
                }
                // A row written by a newer collector, or with a number stored as `null`: skipped, not fatal.
                Err(e) => self.skip("finding", &id, &e),
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Prunes what `retention` does not keep at `now_unix_s`, in one transaction (see the module doc).
    pub fn prune(
        &mut self,
        retention: &Retention,
        now_unix_s: f64,
    ) -> Result<Pruned, HistoryError> {
        let path = self.path.clone();
        let err = |error| HistoryError::Sqlite {
            path: path.clone(),
            error,
        };
        let cutoff = now_unix_s - retention.max_age.as_secs_f64();
        let max_cleared = i64::try_from(retention.max_cleared).unwrap_or(i64::MAX);
        let tx = self.conn.transaction().map_err(err)?;
        let mut findings = tx
            .execute(
                "DELETE FROM analysis_findings WHERE active = 0 AND last_seen_unix_s < ?1",
                [cutoff],
            )
            .map_err(err)?;
        findings += tx
            .execute(
                "DELETE FROM analysis_findings WHERE rowid IN (
                     SELECT rowid FROM analysis_findings WHERE active = 0
                     ORDER BY last_seen_unix_s DESC LIMIT -1 OFFSET ?1)",
                [max_cleared],
            )
            .map_err(err)?;
        let events = prune_events(&tx, retention, cutoff).map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(Pruned {
            findings: findings as u64,
            events: events as u64,
        })
    }

    /// `(at_unix_s, event)` of one finding, oldest first.
    pub fn events(&self, id: &str) -> Result<Vec<(f64, String)>, HistoryError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT at_unix_s, event FROM analysis_finding_events WHERE id = ?1 ORDER BY rowid",
            )
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    pub fn save_throughput(
        &self,
        b: &ThroughputBaseline,
        at_unix_s: f64,
    ) -> Result<(), HistoryError> {
        let (key, json) = throughput_row(b)?;
        save(&self.conn, &key, "throughput", &json, at_unix_s).map_err(|e| self.err(e))
    }

    /// Writes an operator's baselines in one transaction (one commit for a whole request).
    pub fn save_baselines(
        &mut self,
        bare: &[BareBaseline],
        throughput: &[ThroughputBaseline],
        at_unix_s: f64,
    ) -> Result<(), HistoryError> {
        let mut rows = Vec::with_capacity(bare.len() + throughput.len());
        for b in bare {
            let (key, json) = bare_row(b)?;
            rows.push((key, "bare", json));
        }
        for b in throughput {
            let (key, json) = throughput_row(b)?;
            rows.push((key, "throughput", json));
        }
        let path = self.path.clone();
        let err = |error| HistoryError::Sqlite {
            path: path.clone(),
            error,
        };
        let tx = self.conn.transaction().map_err(err)?;
        for (key, kind, json) in &rows {
            save(&tx, key, kind, json, at_unix_s).map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// Stored baselines: bare and throughput, by key. A row that does not decode or is out of bounds is
    /// skipped ([`History::skipped`]).
    pub fn load_baselines(
        &self,
    ) -> Result<(Vec<BareBaseline>, Vec<ThroughputBaseline>), HistoryError> {
        let mut st = self
            .conn
            .prepare("SELECT key, kind, json FROM analysis_baselines ORDER BY key")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let (mut bare, mut thr) = (Vec::new(), Vec::new());
        for r in rows {
            let (key, kind, json) = r.map_err(|e| self.err(e))?;
            let used = match kind.as_str() {
                "bare" => serde_json::from_str(&json)
                    .map_err(|e| e.to_string())
                    .and_then(|b| check_bare(&b).map(|()| b).map_err(|e| e.to_string()))
                    .map(|b| bare.push(b)),
                "throughput" => serde_json::from_str(&json)
                    .map_err(|e| e.to_string())
                    .and_then(|b| check_throughput(&b).map(|()| b).map_err(|e| e.to_string()))
                    .map(|b| thr.push(b)),
                other => Err(format!("unknown kind {other:?}")),
            };
            if let Err(e) = used {
                self.skip("baseline", &key, &e);
            }
        }
        Ok((bare, thr))
    }
}

/// Key and JSON of a bare baseline; a number JSON cannot hold is refused (it would be stored as `null`).
fn bare_row(b: &BareBaseline) -> Result<(String, String), HistoryError> {
    let key = format!("bare:{}:{}", b.job.as_deref().unwrap_or("*"), b.collective);
    finite(&key, b.busbw_bytes_per_second)?;
    let json = serde_json::to_string(b)?;
    Ok((key, json))
}

fn throughput_row(b: &ThroughputBaseline) -> Result<(String, String), HistoryError> {
    let key = format!("throughput:{}:{}:{}", b.source, b.job, b.gpus);
    finite(&key, b.samples_per_second_per_gpu)?;
    let json = serde_json::to_string(b)?;
    Ok((key, json))
}

/// How a row of each of the history's tables is copied from an older collector's file (`state`) into the
/// history's own (`main`): findings and baselines by key, the own file's row winning; an event unless the same
/// one (time, finding, event) is there already. Copying twice adds nothing.
const MOVES: [(&str, &str); 3] = [
    (
        "analysis_findings",
        "INSERT OR IGNORE INTO main.analysis_findings
             (id, json, active, first_seen_unix_s, last_seen_unix_s)
         SELECT id, json, active, first_seen_unix_s, last_seen_unix_s FROM state.analysis_findings",
    ),
    (
        "analysis_finding_events",
        "INSERT INTO main.analysis_finding_events (at_unix_s, id, event, severity, summary)
         SELECT s.at_unix_s, s.id, s.event, s.severity, s.summary FROM state.analysis_finding_events s
         WHERE NOT EXISTS (SELECT 1 FROM main.analysis_finding_events e
                           WHERE e.id = s.id AND e.at_unix_s = s.at_unix_s AND e.event = s.event)",
    ),
    (
        "analysis_baselines",
        "INSERT OR IGNORE INTO main.analysis_baselines (key, kind, json, set_unix_s)
         SELECT key, kind, json, set_unix_s FROM state.analysis_baselines",
    ),
];

/// Moves the history's tables an older collector kept in the persistence's database `state` into `conn`'s
/// (the history's own): copied in one transaction ([`MOVES`]: copying again adds nothing), then dropped from
/// `state` in another. A stop between the two copies again at the next open, adding nothing, and drops them;
/// a stop before the copy's commit leaves both files as they were. Returns the rows copied.
fn move_from_state(conn: &Connection, state: &Path) -> rusqlite::Result<usize> {
    conn.execute("ATTACH DATABASE ?1 AS state", [state.to_string_lossy()])?;
    let moved = copy_and_drop(conn);
    let detached = conn.execute_batch("DETACH DATABASE state");
    let moved = moved?;
    detached?;
    Ok(moved)
}

fn copy_and_drop(conn: &Connection) -> rusqlite::Result<usize> {
    let mut present = Vec::new();
    for (table, copy) in MOVES {
        let n: i64 = conn.query_row(
            "SELECT count(*) FROM state.sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )?;
        if n > 0 {
            present.push((table, copy));
        }
    }
    if present.is_empty() {
        return Ok(0);
    }
    let mut copied = 0;
    let tx = conn.unchecked_transaction()?;
    for (_, copy) in &present {
        copied += tx.execute(copy, [])?;
    }
    tx.commit()?;
    let tx = conn.unchecked_transaction()?;
    for (table, _) in &present {
        tx.execute_batch(&format!("DROP TABLE state.{table}"))?;
    }
    tx.commit()?;
    Ok(copied)
}

fn finite(key: &str, v: f64) -> Result<(), HistoryError> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(HistoryError::Unstorable {
            key: key.to_string(),
            reason: format!("{v} is not a finite number"),
        })
    }
}

/// The events of findings no longer stored, those older than `cutoff`, and the oldest beyond
/// `retention.max_events`; never those of an active finding. Returns how many.
fn prune_events(conn: &Connection, retention: &Retention, cutoff: f64) -> rusqlite::Result<usize> {
    let mut n = conn.execute(
        "DELETE FROM analysis_finding_events WHERE id NOT IN (SELECT id FROM analysis_findings)",
        [],
    )?;
    n += conn.execute(
        "DELETE FROM analysis_finding_events WHERE at_unix_s < ?1
             AND id NOT IN (SELECT id FROM analysis_findings WHERE active = 1)",
        [cutoff],
    )?;
    let of_active: i64 = conn.query_row(
        "SELECT COUNT(*) FROM analysis_finding_events
             WHERE id IN (SELECT id FROM analysis_findings WHERE active = 1)",
        [],
        |r| r.get(0),
    )?;
    let room = i64::try_from(retention.max_events)
        .unwrap_or(i64::MAX)
        .saturating_sub(of_active)
        .max(0);
    n += conn.execute(
        "DELETE FROM analysis_finding_events WHERE rowid IN (
             SELECT rowid FROM analysis_finding_events
             WHERE id NOT IN (SELECT id FROM analysis_findings WHERE active = 1)
             ORDER BY rowid DESC LIMIT -1 OFFSET ?1)",
        [room],
    )?;
    Ok(n)
}

fn save(conn: &Connection, key: &str, kind: &str, json: &str, at: f64) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO analysis_baselines (key, kind, json, set_unix_s) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(key) DO UPDATE SET json = ?3, set_unix_s = ?4",
        params![key, kind, json, at],
    )
    .map(|_| ())
}
