//! Findings history and baselines in SQLite, in the collector's state directory (the same database file as
//! `persist.rs`, its own tables, its own connection; WAL lets both write).
//!
//! Tables:
//! - `analysis_findings(id PRIMARY KEY, json, active, first_seen_unix_s, last_seen_unix_s)`: the latest state
//!   of every finding ever raised (the JSON is the `/api/v1/findings` element).
//! - `analysis_finding_events(at_unix_s, id, event, severity, summary)`: one row per raise and clear.
//! - `analysis_baselines(key PRIMARY KEY, kind, json, set_unix_s)`: bare (`bare`) and throughput
//!   (`throughput`) baselines, set by operators or learned from history.
//!
//! After a restart, findings come back inactive (the collector re-raises what is still true after its hysteresis),
//! with their `first_seen`; baselines come back as they were.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection};

use super::input::{BareBaseline, ThroughputBaseline};
use super::tracker::Change;
use super::Finding;

/// Errors of the history database.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("sqlite error on {path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot encode or decode a stored record: {0}")]
    Json(#[from] serde_json::Error),
}

/// An open history database.
pub struct History {
    conn: Connection,
    path: PathBuf,
}

impl History {
    /// Opens (creating) the tables in `<dir>/collector.sqlite3`. `dir` must exist.
    pub fn open(dir: &Path) -> Result<History, HistoryError> {
        let path = dir.join(crate::persist::DB_FILE);
        let err = |source| HistoryError::Sqlite {
            path: path.clone(),
            source,
        };
        let conn = Connection::open(&path).map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS analysis_findings (
                 id TEXT PRIMARY KEY, json TEXT NOT NULL, active INTEGER NOT NULL,
                 first_seen_unix_s REAL NOT NULL, last_seen_unix_s REAL NOT NULL);
             CREATE TABLE IF NOT EXISTS analysis_finding_events (
                 at_unix_s REAL NOT NULL, id TEXT NOT NULL, event TEXT NOT NULL,
                 severity TEXT NOT NULL, summary TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS analysis_baselines (
                 key TEXT PRIMARY KEY, kind TEXT NOT NULL, json TEXT NOT NULL, set_unix_s REAL NOT NULL);",
        )
        .map_err(err)?;
        Ok(History { conn, path })
    }

    fn err(&self, source: rusqlite::Error) -> HistoryError {
        HistoryError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Writes raises, clears and refreshed findings in one transaction.
    pub fn record(&mut self, changes: &[Change], at_unix_s: f64) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let err = |source| HistoryError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(err)?;
        for ch in changes {
            let (f, event) = match ch {
                Change::Raised(f) => (f, Some("raised")),
                Change::Cleared(f) => (f, Some("cleared")),
                Change::Updated(f) => (f, None),
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

    /// Every stored finding, marked inactive (see the module doc), sorted by id.
    pub fn load_findings(&self) -> Result<Vec<Finding>, HistoryError> {
        let mut st = self
            .conn
            .prepare("SELECT json FROM analysis_findings ORDER BY id")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for r in rows {
            let json = r.map_err(|e| self.err(e))?;
            match serde_json::from_str::<Finding>(&json) {
                Ok(mut f) => {
                    f.active = false;
                    out.push(f);
                }
                // A row written by a newer collector: skipped, not fatal.
                Err(e) => tracing::warn!(error = %e, "skipping unreadable stored finding"),
            }
        }
        Ok(out)
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

    pub fn save_bare(&self, b: &BareBaseline, at_unix_s: f64) -> Result<(), HistoryError> {
        let key = format!("bare:{}:{}", b.job.as_deref().unwrap_or("*"), b.collective);
        self.save(&key, "bare", &serde_json::to_string(b)?, at_unix_s)
    }

    pub fn save_throughput(
        &self,
        b: &ThroughputBaseline,
        at_unix_s: f64,
    ) -> Result<(), HistoryError> {
        let key = format!("throughput:{}:{}:{}", b.source, b.job, b.gpus);
        self.save(&key, "throughput", &serde_json::to_string(b)?, at_unix_s)
    }

    fn save(&self, key: &str, kind: &str, json: &str, at: f64) -> Result<(), HistoryError> {
        self.conn
            .execute(
                "INSERT INTO analysis_baselines (key, kind, json, set_unix_s) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(key) DO UPDATE SET json = ?3, set_unix_s = ?4",
                params![key, kind, json, at],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Stored baselines: bare and throughput.
    pub fn load_baselines(
        &self,
    ) -> Result<(Vec<BareBaseline>, Vec<ThroughputBaseline>), HistoryError> {
        let mut st = self
            .conn
            .prepare("SELECT kind, json FROM analysis_baselines ORDER BY key")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.err(e))?;
        let (mut bare, mut thr) = (Vec::new(), Vec::new());
        for r in rows {
            let (kind, json) = r.map_err(|e| self.err(e))?;
            match kind.as_str() {
                "bare" => bare.push(serde_json::from_str(&json)?),
                "throughput" => thr.push(serde_json::from_str(&json)?),
                _ => {}
            }
        }
        Ok((bare, thr))
    }
}
