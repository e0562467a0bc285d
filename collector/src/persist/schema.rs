//! The database's tables and the SQL over them: [`open`] (creating the tables), [`load`] and [`load_jobs`] for
//! replay, [`commit`] of the writer's items in one transaction, and [`prune`] past retention.

use std::path::Path;
use std::time::Duration;

use rusqlite::{params, Connection};

use super::{Item, PersistError, PersistedJobs, Replay};

/// Opens the database at `path` (creating it when missing), in WAL mode with `synchronous = FULL`, and creates
/// the tables it lacks. A file that is not a database fails here; damage deeper in it fails at [`load`].
pub(crate) fn open(path: &Path) -> Result<Connection, PersistError> {
    let sql = |error| PersistError::Sqlite {
        path: path.to_owned(),
        error,
    };
    let conn = Connection::open(path).map_err(sql)?;
    conn.busy_timeout(Duration::from_secs(5)).map_err(sql)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(sql)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(sql)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS hellos(
             node TEXT NOT NULL, instance_id INTEGER NOT NULL, received_unix_ns INTEGER NOT NULL,
             payload BLOB NOT NULL);
         CREATE INDEX IF NOT EXISTS hellos_received ON hellos(received_unix_ns);
         CREATE TABLE IF NOT EXISTS batches(
             node TEXT NOT NULL, instance_id INTEGER NOT NULL, seq INTEGER NOT NULL,
             received_unix_ns INTEGER NOT NULL, payload BLOB NOT NULL);
         CREATE INDEX IF NOT EXISTS batches_received ON batches(received_unix_ns);
         CREATE INDEX IF NOT EXISTS batches_instance ON batches(node, instance_id);
         CREATE TABLE IF NOT EXISTS seqs(
             node TEXT NOT NULL, instance_id INTEGER NOT NULL, highest_seq INTEGER NOT NULL,
             updated_unix_ns INTEGER NOT NULL, PRIMARY KEY(node, instance_id));
         CREATE TABLE IF NOT EXISTS jobs(
             node TEXT NOT NULL PRIMARY KEY, instance_id INTEGER NOT NULL, received_unix_ns INTEGER NOT NULL,
             payload BLOB NOT NULL);",
    )
    .map_err(sql)?;
    Ok(conn)
}

/// Whether SQLite says the file is damaged or not a database at all (as opposed to unreadable for a reason
/// outside it: permissions, a lock, I/O).
pub(crate) fn is_corruption(e: &PersistError) -> bool {
    let PersistError::Sqlite { error, .. } = e else {
        return false;
    };
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// Everything to replay at `now_unix_ns`: Hellos and batches received within `retention`, merged in receive order (a Hello
/// before batches received at the same instant), and the highest sequence number per instance.
#[allow(clippy::type_complexity)]
pub(crate) fn load(
    conn: &Connection,
    path: &Path,
    retention: Duration,
    now_unix_ns: i64,
) -> Result<Loaded, PersistError> {
    let sql = |error| PersistError::Sqlite {
        path: path.to_owned(),
        error,
    };
    let cutoff = cutoff(retention, now_unix_ns);
    let mut skipped = 0u64;
    let hellos: Vec<Replay>;
    {
        let mut st = conn
            .prepare("SELECT node, instance_id, received_unix_ns, payload FROM hellos ORDER BY received_unix_ns, rowid")
            .map_err(sql)?;
        let rows = st
            .query_map([], |r| {
                Ok(Replay::Hello {
                    node: r.get(0)?,
                    instance_id: r.get::<_, i64>(1)? as u64,
                    received_unix_ns: r.get(2)?,
                    payload: r.get(3)?,
                })
            })
            .map_err(sql)?;
        hellos = readable(rows, "hellos", &mut skipped).map_err(sql)?;
    }
    let batches: Vec<Replay>;
    {
        let mut st = conn
            .prepare(
                "SELECT node, instance_id, received_unix_ns, payload FROM batches WHERE received_unix_ns >= ?1
                 ORDER BY received_unix_ns, rowid",
            )
            .map_err(sql)?;
        let rows = st
            .query_map([cutoff], |r| {
                Ok(Replay::Batch {
                    node: r.get(0)?,
                    instance_id: r.get::<_, i64>(1)? as u64,
                    received_unix_ns: r.get(2)?,
                    payload: r.get(3)?,
                })
            })
            .map_err(sql)?;
        batches = readable(rows, "batches", &mut skipped).map_err(sql)?;
    }
    let t = |r: &Replay| match r {
        Replay::Hello {
            received_unix_ns, ..
        }
        | Replay::Batch {
            received_unix_ns, ..
        } => *received_unix_ns,
    };
    let mut merged = Vec::with_capacity(hellos.len() + batches.len());
    let (mut h, mut b) = (
        hellos.into_iter().peekable(),
        batches.into_iter().peekable(),
    );
    loop {
        let take_hello = match (h.peek(), b.peek()) {
            (Some(x), Some(y)) => t(x) <= t(y),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_hello { h.next() } else { b.next() };
        merged.extend(next);
    }
    let seqs;
    {
        let mut st = conn
            .prepare("SELECT node, instance_id, highest_seq FROM seqs")
            .map_err(sql)?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)? as u64,
                    r.get::<_, i64>(2)? as u64,
                ))
            })
            .map_err(sql)?;
        seqs = readable(rows, "seqs", &mut skipped).map_err(sql)?;
    }
    Ok(Loaded {
        items: merged,
        seqs,
        skipped,
    })
}

/// What [`load`] read: the Hellos and batches in receive order, each instance's highest sequence number, and
/// how many rows were skipped because their values cannot be read.
pub(crate) struct Loaded {
    pub items: Vec<Replay>,
    pub seqs: Vec<(String, u64, u64)>,
    pub skipped: u64,
}

/// The rows of a query, leaving out (logged, counted in `skipped`) a row whose values do not convert — a
/// value of the wrong type, written by hand or damaged — rather than failing the start on it. Other errors
/// fail.
fn readable<T>(
    rows: impl Iterator<Item = rusqlite::Result<T>>,
    table: &str,
    skipped: &mut u64,
) -> rusqlite::Result<Vec<T>> {
    let mut out = Vec::new();
    for r in rows {
        match r {
            Ok(x) => out.push(x),
            Err(
                e @ (rusqlite::Error::InvalidColumnType(..)
                | rusqlite::Error::FromSqlConversionFailure(..)
                | rusqlite::Error::IntegralValueOutOfRange(..)),
            ) => {
                *skipped += 1;
                tracing::warn!(table, error = %e, "skipping a stored row whose values cannot be read");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Every node's persisted job list (one row per node: the latest), and how many rows were skipped because their
/// values cannot be read.
pub(crate) fn load_jobs(
    conn: &Connection,
    path: &Path,
) -> Result<(Vec<PersistedJobs>, u64), PersistError> {
    let sql = |error| PersistError::Sqlite {
        path: path.to_owned(),
        error,
    };
    let mut st = conn
        .prepare("SELECT node, instance_id, received_unix_ns, payload FROM jobs ORDER BY node")
        .map_err(sql)?;
    let rows = st
        .query_map([], |r| {
            Ok(PersistedJobs {
                node: r.get(0)?,
                instance_id: r.get::<_, i64>(1)? as u64,
                received_unix_ns: r.get(2)?,
                payload: r.get(3)?,
            })
        })
        .map_err(sql)?;
    let mut skipped = 0;
    let jobs = readable(rows, "jobs", &mut skipped).map_err(sql)?;
    Ok((jobs, skipped))
}

pub(crate) fn commit(conn: &mut Connection, items: &[Item]) -> Result<(), rusqlite::Error> {
    let tx = conn.transaction()?;
    {
        let mut hello = tx.prepare_cached(
            "INSERT INTO hellos(node, instance_id, received_unix_ns, payload) VALUES (?1, ?2, ?3, ?4)",
        )?;
        let mut batch = tx.prepare_cached(
            "INSERT INTO batches(node, instance_id, seq, received_unix_ns, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let mut seq_up = tx.prepare_cached(
            "INSERT INTO seqs(node, instance_id, highest_seq, updated_unix_ns) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(node, instance_id) DO UPDATE SET
               highest_seq = max(highest_seq, excluded.highest_seq), updated_unix_ns = excluded.updated_unix_ns",
        )?;
        let mut jobs = tx.prepare_cached(
            "INSERT OR REPLACE INTO jobs(node, instance_id, received_unix_ns, payload) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for it in items {
            match it {
                Item::Hello {
                    node,
                    instance_id,
                    received_unix_ns,
                    payload,
                } => {
                    hello.execute(params![
                        node,
                        *instance_id as i64,
                        received_unix_ns,
                        payload
                    ])?;
                }
                Item::Batch {
                    node,
                    instance_id,
                    seq,
                    received_unix_ns,
                    payload,
                    ..
                } => {
                    batch.execute(params![
                        node,
                        *instance_id as i64,
                        *seq as i64,
                        received_unix_ns,
                        payload
                    ])?;
                    seq_up.execute(params![
                        node,
                        *instance_id as i64,
                        *seq as i64,
                        received_unix_ns
                    ])?;
                }
                Item::Jobs {
                    node,
                    instance_id,
                    received_unix_ns,
                    payload,
                } => {
                    jobs.execute(params![
                        node,
                        *instance_id as i64,
                        received_unix_ns,
                        payload
                    ])?;
                }
            }
        }
    }
    tx.commit()
}

/// The receive time before which rows are past `retention` at `now_unix_ns`.
fn cutoff(retention: Duration, now_unix_ns: i64) -> i64 {
    now_unix_ns.saturating_sub(i64::try_from(retention.as_nanos()).unwrap_or(i64::MAX))
}

pub(crate) fn prune(
    conn: &Connection,
    retention: Duration,
    now_unix_ns: i64,
) -> Result<usize, rusqlite::Error> {
    let cutoff = cutoff(retention, now_unix_ns);
    let mut n = conn.execute("DELETE FROM batches WHERE received_unix_ns < ?1", [cutoff])?;
    n += conn.execute(
        "DELETE FROM hellos WHERE received_unix_ns < ?1
           AND (rowid NOT IN (SELECT max(rowid) FROM hellos GROUP BY node, instance_id)
                OR NOT EXISTS (SELECT 1 FROM batches b
                               WHERE b.node = hellos.node AND b.instance_id = hellos.instance_id))",
        [cutoff],
    )?;
    // Dedup state outlives the batches by a day: late resends of a long-gone instance are still recognised.
    let seq_cutoff = cutoff.saturating_sub(86_400 * 1_000_000_000);
    n += conn.execute("DELETE FROM seqs WHERE updated_unix_ns < ?1", [seq_cutoff])?;
    // A job list lives as long as some Hello of its node (without one the node is not replayed).
    n += conn.execute(
        "DELETE FROM jobs WHERE NOT EXISTS (SELECT 1 FROM hellos h WHERE h.node = jobs.node)",
        [],
    )?;
    Ok(n)
}
