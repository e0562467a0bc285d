//! The database's tables and the SQL over them: [`open`] (creating the tables), [`load`] and [`load_jobs`] for
//! replay, [`commit`] of the writer's items in one transaction, and [`prune`] past retention.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{params, CachedStatement, Connection, Transaction, TransactionBehavior};

use super::partition::{self, Partition};
use super::{CommitTimes, Item, PersistError, PersistedJobs, Replay};

/// Page size of a database created here, bytes. An encoded batch of a demo node (~4 KiB) does not fit in
/// SQLite's default 4 KiB page: each took most of a page plus an overflow page. In 64 KiB pages batches sit side
/// by side. A database created with another size keeps it (only a `VACUUM` could change it).
pub(crate) const PAGE_SIZE: u32 = 65_536;

/// The rollback journal's file is kept between commits (`journal_mode = PERSIST`: its header zeroed and
/// fsynced at the end of each) and cut back to this size when a transaction made it larger, bytes.
pub(crate) const JOURNAL_LIMIT_BYTES: i64 = 64 << 20;

/// The writer's page cache, KiB. SQLite's default (2,000 KiB) holds 31 pages of [`PAGE_SIZE`]: fewer than the
/// Hellos of a few hundred nodes (a demo node's fills a page of its own), so the prune's look-ups per node read
/// every one of them from the file again, for seconds, while acks waited.
const CACHE_KIB: i64 = 32 * 1024;

/// Opens the database at `path` (creating it when missing, with [`PAGE_SIZE`]) with a rollback journal kept
/// between commits (`journal_mode = PERSIST`, see [`super`] for why not the WAL) and `synchronous = FULL`, and
/// creates the tables it lacks. A database an older collector left in WAL mode is switched (SQLite copies what
/// its WAL holds into it and removes the WAL); should another connection hold it in WAL mode, it stays in it,
/// which works as well (SQLite then checkpoints within the commits), and the log says so. A file that is not a
/// database fails here; damage deeper in it fails at [`load`].
///
/// Batches go to partitions by receive time ([`partition`]), tables without an index: rows are appended in
/// commit order, replay reads each table in rowid order, the prune drops whole partitions, and which instances
/// still have batches is read from `seqs`. `batches`, where older collectors kept every batch, is read and
/// pruned (by rowid prefix) until it is empty. The two indexes that they kept on it (`batches_received`,
/// `batches_instance`: two more B-tree writes per batch, the second a random page per node and commit) are
/// dropped; an older collector that opens the database again creates them again (and sees only `batches`).
pub(crate) fn open(path: &Path) -> Result<Connection, PersistError> {
    let sql = |error| PersistError::Sqlite {
        path: path.to_owned(),
        error,
    };
    let conn = Connection::open(path).map_err(sql)?;
    conn.busy_timeout(Duration::from_secs(5)).map_err(sql)?;
    // Only a database without pages yet takes it.
    conn.pragma_update(None, "page_size", PAGE_SIZE)
        .map_err(sql)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "PERSIST", |r| r.get(0))
        .map_err(sql)?;
    if !mode.eq_ignore_ascii_case("persist") {
        tracing::warn!(path = %path.display(), journal_mode = mode,
            "the state database stays in its journal mode: another connection holds it (another collector on the \
             same state directory?)");
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(sql)?;
    conn.pragma_update(None, "journal_size_limit", JOURNAL_LIMIT_BYTES)
        .map_err(sql)?;
    conn.pragma_update(None, "cache_size", -CACHE_KIB)
        .map_err(sql)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS hellos(
             node TEXT NOT NULL, instance_id INTEGER NOT NULL, received_unix_ns INTEGER NOT NULL,
             payload BLOB NOT NULL);
         CREATE INDEX IF NOT EXISTS hellos_received ON hellos(received_unix_ns);
         CREATE INDEX IF NOT EXISTS hellos_instance ON hellos(node, instance_id);
         CREATE TABLE IF NOT EXISTS batches(
             node TEXT NOT NULL, instance_id INTEGER NOT NULL, seq INTEGER NOT NULL,
             received_unix_ns INTEGER NOT NULL, payload BLOB NOT NULL);
         DROP INDEX IF EXISTS batches_received;
         DROP INDEX IF EXISTS batches_instance;
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

/// Everything to replay at `now_unix_ns`: Hellos, and batches received within `retention` in the order they
/// were committed (each node's in the order they were applied), merged by receive time (a Hello before batches
/// received at the same instant), and the highest sequence number per instance.
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
    let batches = load_batches(conn, cutoff, &mut skipped).map_err(sql)?;
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

/// The batches received since `cutoff` (ns), in the order a start replays them: those of `batches` (where older
/// collectors kept every batch), then each partition's, oldest first, each table's in commit order.
fn load_batches(
    conn: &Connection,
    cutoff: i64,
    skipped: &mut u64,
) -> rusqlite::Result<Vec<Replay>> {
    let mut tables = vec!["batches".to_string()];
    tables.extend(
        partition::list(conn)?
            .into_iter()
            .filter(|p| !p.before(cutoff))
            .map(|p| p.table()),
    );
    let mut out = Vec::new();
    for table in tables {
        let mut st = conn.prepare(&format!(
            "SELECT node, instance_id, received_unix_ns, payload FROM {table} WHERE received_unix_ns >= ?1
             ORDER BY rowid"
        ))?;
        let rows = st.query_map([cutoff], |r| {
            Ok(Replay::Batch {
                node: r.get(0)?,
                instance_id: r.get::<_, i64>(1)? as u64,
                received_unix_ns: r.get(2)?,
                payload: r.get(3)?,
            })
        })?;
        out.extend(readable(rows, &table, skipped)?);
    }
    Ok(out)
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

/// Commits `items` in one transaction: each Hello, batch and job list a row (a batch in the partition of its
/// receive time, partitions spanning `span_s` seconds, created when missing), and each instance's highest
/// sequence number (with the receive time of its newest batch) once per commit, not once per batch.
/// Returns how long each phase took.
pub(crate) fn commit(
    conn: &mut Connection,
    items: &[Item],
    span_s: i64,
) -> Result<CommitTimes, rusqlite::Error> {
    // The write lock at once (waiting up to the busy timeout): a transaction that began reading (a partition's
    // `CREATE TABLE IF NOT EXISTS`) could not take it after another connection to the file wrote meanwhile,
    // and would fail at once with "database is locked".
    let t0 = Instant::now();
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let t1 = Instant::now();
    write_items(&tx, items, span_s)?;
    let t2 = Instant::now();
    tx.commit()?;
    Ok(CommitTimes {
        lock_wait: t1 - t0,
        write: t2 - t1,
        sync: t2.elapsed(),
    })
}

/// The statements of a commit (see [`commit`]).
fn write_items(tx: &Transaction, items: &[Item], span_s: i64) -> Result<(), rusqlite::Error> {
    {
        let mut hello = tx.prepare_cached(
            "INSERT INTO hellos(node, instance_id, received_unix_ns, payload) VALUES (?1, ?2, ?3, ?4)",
        )?;
        // The partition the previous batch went to (a commit's batches nearly always share one) and its insert,
        // held across them: taken from the statement cache and handed back once per partition, not per batch
        // (the cache's look-up hashes and compares the statement's text).
        let mut part: Option<(Partition, CachedStatement<'_>)> = None;
        let mut jobs = tx.prepare_cached(
            "INSERT OR REPLACE INTO jobs(node, instance_id, received_unix_ns, payload) VALUES (?1, ?2, ?3, ?4)",
        )?;
        // (node, instance) → (highest seq, newest receive time) of this commit's batches.
        let mut highest: HashMap<(&str, u64), (u64, i64)> = HashMap::new();
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
                    let p = Partition::of(*received_unix_ns, span_s);
                    let insert = match &mut part {
                        Some((q, insert)) if *q == p => insert,
                        _ => {
                            // The previous partition's insert goes back to the cache first.
                            part = None;
                            tx.execute(&p.create_sql(), [])?;
                            let sql = format!(
                                "INSERT INTO {}(node, instance_id, seq, received_unix_ns, payload)
                                 VALUES (?1, ?2, ?3, ?4, ?5)",
                                p.table()
                            );
                            let insert = tx.prepare_cached(&sql)?;
                            &mut part.insert((p, insert)).1
                        }
                    };
                    insert.execute(params![
                        node,
                        *instance_id as i64,
                        *seq as i64,
                        received_unix_ns,
                        payload
                    ])?;
                    let h = highest
                        .entry((node.as_str(), *instance_id))
                        .or_insert((*seq, *received_unix_ns));
                    *h = (h.0.max(*seq), h.1.max(*received_unix_ns));
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
        let mut seq_up = tx.prepare_cached(
            "INSERT INTO seqs(node, instance_id, highest_seq, updated_unix_ns) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(node, instance_id) DO UPDATE SET
               highest_seq = max(highest_seq, excluded.highest_seq),
               updated_unix_ns = max(updated_unix_ns, excluded.updated_unix_ns)",
        )?;
        for ((node, instance_id), (seq, received_unix_ns)) in highest {
            seq_up.execute(params![
                node,
                instance_id as i64,
                seq as i64,
                received_unix_ns
            ])?;
        }
    }
    Ok(())
}

/// The receive time before which rows are past `retention` at `now_unix_ns`.
fn cutoff(retention: Duration, now_unix_ns: i64) -> i64 {
    now_unix_ns.saturating_sub(i64::try_from(retention.as_nanos()).unwrap_or(i64::MAX))
}

/// Deletes, in one transaction, what is past `retention` at `now_unix_ns`: the partitions whose batches were all
/// received before the cutoff (dropped whole), and in `batches` (older collectors') the prefix of rowids before
/// the first batch received since (rows are appended in commit order); Hellos received before the cutoff unless
/// one is its instance's newest and the instance has a batch since (`seqs` keeps the receive time of each
/// instance's newest batch); sequence numbers a day older still; and job lists of nodes without a Hello.
/// Returns how many rows (a dropped partition counts its rows).
pub(crate) fn prune(
    conn: &Connection,
    retention: Duration,
    now_unix_ns: i64,
) -> Result<usize, rusqlite::Error> {
    let cutoff = cutoff(retention, now_unix_ns);
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    // Without a batch received since the cutoff, every batch goes.
    let mut n = tx.execute(
        "DELETE FROM batches WHERE rowid < coalesce(
           (SELECT rowid FROM batches WHERE received_unix_ns >= ?1 ORDER BY rowid LIMIT 1),
           (SELECT max(rowid) + 1 FROM batches))",
        [cutoff],
    )?;
    for p in partition::list(&tx)?
        .into_iter()
        .filter(|p| p.before(cutoff))
    {
        let table = p.table();
        // Rows are only appended to a partition: its highest rowid is its count, without reading every page.
        let rows: i64 = tx.query_row(
            &format!("SELECT coalesce(max(rowid), 0) FROM {table}"),
            [],
            |r| r.get(0),
        )?;
        tx.execute(&format!("DROP TABLE {table}"), [])?;
        n += usize::try_from(rows).unwrap_or(0);
    }
    n += tx.execute(
        "DELETE FROM hellos WHERE received_unix_ns < ?1
           AND (rowid NOT IN (SELECT max(rowid) FROM hellos GROUP BY node, instance_id)
                OR NOT EXISTS (SELECT 1 FROM seqs s
                               WHERE s.node = hellos.node AND s.instance_id = hellos.instance_id
                                 AND s.updated_unix_ns >= ?1))",
        [cutoff],
    )?;
    // Dedup state outlives the batches by a day: late resends of a long-gone instance are still recognised.
    let seq_cutoff = cutoff.saturating_sub(86_400 * 1_000_000_000);
    n += tx.execute("DELETE FROM seqs WHERE updated_unix_ns < ?1", [seq_cutoff])?;
    // A job list lives as long as some Hello of its node (without one the node is not replayed).
    n += tx.execute(
        "DELETE FROM jobs WHERE NOT EXISTS (SELECT 1 FROM hellos h WHERE h.node = jobs.node)",
        [],
    )?;
    tx.commit()?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::watch;

    use super::*;

    const S: i64 = 1_000_000_000;
    const T0: i64 = 1_800_000_000 * S;
    /// Seconds a partition spans in these tests.
    const SPAN: i64 = 2;

    fn batch(node: &str, instance_id: u64, seq: u64, at_s: i64) -> Item {
        Item::Batch {
            node: node.into(),
            instance_id,
            seq,
            received_unix_ns: T0 + at_s * S,
            payload: vec![seq as u8; 5_000],
            durable: Arc::new(watch::channel(0).0),
        }
    }

    fn hello(node: &str, instance_id: u64, at_s: i64) -> Item {
        Item::Hello {
            node: node.into(),
            instance_id,
            received_unix_ns: T0 + at_s * S,
            payload: vec![1, 2, 3],
        }
    }

    fn fresh() -> (tempfile::TempDir, std::path::PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let conn = open(&path).unwrap();
        (dir, path, conn)
    }

    /// What a start at `now_s` would replay: (kind, node, instance, receive second) in replay order.
    fn replayed(conn: &Connection, path: &Path, now_s: i64) -> Vec<(char, String, u64, i64)> {
        let l = load(conn, path, Duration::from_secs(10), T0 + now_s * S).unwrap();
        l.items
            .into_iter()
            .map(|r| match r {
                Replay::Hello {
                    node,
                    instance_id,
                    received_unix_ns,
                    ..
                } => ('h', node, instance_id, (received_unix_ns - T0) / S),
                Replay::Batch {
                    node,
                    instance_id,
                    received_unix_ns,
                    ..
                } => ('b', node, instance_id, (received_unix_ns - T0) / S),
            })
            .collect()
    }

    fn seqs(conn: &Connection) -> Vec<(String, i64, i64, i64)> {
        let mut st = conn
            .prepare("SELECT node, instance_id, highest_seq, updated_unix_ns FROM seqs ORDER BY node, instance_id")
            .unwrap();
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    (r.get::<_, i64>(3)? - T0) / S,
                ))
            })
            .unwrap();
        rows.map(Result::unwrap).collect()
    }

    /// Rows of `batches` and of every partition.
    fn batch_rows(conn: &Connection) -> i64 {
        let mut tables = vec!["batches".to_string()];
        tables.extend(partition::list(conn).unwrap().iter().map(Partition::table));
        tables
            .iter()
            .map(|t| {
                conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| {
                    r.get::<_, i64>(0)
                })
                .unwrap()
            })
            .sum()
    }

    fn indexes(conn: &Connection) -> Vec<String> {
        let mut st = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'batches'")
            .unwrap();
        let rows = st.query_map([], |r| r.get(0)).unwrap();
        rows.map(Result::unwrap).collect()
    }

    #[test]
    fn each_instances_highest_sequence_number_is_kept_once_per_commit() {
        let (_dir, _path, mut conn) = fresh();
        let items = [
            batch("n1", 1, 3, 1),
            batch("n2", 1, 1, 1),
            batch("n1", 1, 5, 3),
            batch("n1", 1, 4, 2),
            batch("n1", 2, 1, 2),
        ];
        commit(&mut conn, &items, SPAN).unwrap();
        assert_eq!(
            seqs(&conn),
            [
                ("n1".into(), 1, 5, 3),
                ("n1".into(), 2, 1, 2),
                ("n2".into(), 1, 1, 1)
            ]
        );
        // A later commit never lowers what is held.
        commit(
            &mut conn,
            &[batch("n1", 1, 2, 4), batch("n2", 1, 9, 4)],
            SPAN,
        )
        .unwrap();
        assert_eq!(
            seqs(&conn),
            [
                ("n1".into(), 1, 5, 4),
                ("n1".into(), 2, 1, 2),
                ("n2".into(), 1, 9, 4)
            ]
        );
        assert_eq!(batch_rows(&conn), 7, "every batch a row");
    }

    #[test]
    fn the_prune_deletes_batches_past_retention_and_hellos_of_instances_without_batches() {
        let (_dir, path, mut conn) = fresh();
        commit(&mut conn, &[hello("n1", 1, 0), hello("n2", 1, 0)], SPAN).unwrap();
        // n2's only batch is old; n1 sends every second, one of its batches committed late (a straggler).
        let mut items: Vec<Item> = (1..=12).map(|s| batch("n1", 1, s as u64, s)).collect();
        items.insert(9, batch("n1", 1, 13, 1));
        items.insert(0, batch("n2", 1, 1, 1));
        commit(&mut conn, &items, SPAN).unwrap();
        // At 15 s with 10 s kept: the partitions of 0-2 s and 2-4 s go whole (the straggler with them); 4-6 s
        // stays, its batch of 4 s not replayed.
        let pruned = prune(&conn, Duration::from_secs(10), T0 + 15 * S).unwrap();
        let got = replayed(&conn, &path, 15);
        let mut want = vec![('h', "n1".to_string(), 1, 0)];
        want.extend((5..=12).map(|s| ('b', "n1".to_string(), 1, s)));
        assert_eq!(got, want);
        // n2: its 1 batch, its Hello; n1: batches 1..=3 and the straggler.
        assert_eq!(pruned, 6);
        assert_eq!(batch_rows(&conn), 9);
        // Later, nothing received since the cutoff: every batch goes, and the Hellos with them.
        prune(&conn, Duration::from_secs(10), T0 + 60 * S).unwrap();
        assert!(replayed(&conn, &path, 60).is_empty());
        assert_eq!(batch_rows(&conn), 0);
        assert!(partition::list(&conn).unwrap().is_empty(), "dropped");
        // Dedup state stays.
        assert_eq!(seqs(&conn).len(), 2);
    }

    #[test]
    fn replay_takes_each_partition_in_commit_order_with_each_hello_before_its_batches() {
        let (_dir, path, mut conn) = fresh();
        commit(&mut conn, &[hello("n1", 1, 0), batch("n1", 1, 1, 1)], SPAN).unwrap();
        // Received at 3 s, committed after a batch received at 4 s, in another partition: each partition's in
        // commit order, partitions oldest first.
        commit(
            &mut conn,
            &[batch("n1", 1, 2, 4), batch("n3", 1, 1, 3)],
            SPAN,
        )
        .unwrap();
        commit(&mut conn, &[hello("n2", 7, 5), batch("n2", 7, 1, 5)], SPAN).unwrap();
        assert_eq!(
            replayed(&conn, &path, 6),
            [
                ('h', "n1".into(), 1, 0),
                ('b', "n1".into(), 1, 1),
                ('b', "n3".into(), 1, 3),
                ('b', "n1".into(), 1, 4),
                ('h', "n2".into(), 7, 5),
                ('b', "n2".into(), 7, 5),
            ]
        );
    }

    /// Another connection to the file (the findings' history) writing while a commit begins: the commit waits
    /// for its lock and goes through, where one that began reading failed at once ("database is locked").
    #[test]
    fn a_commit_waits_for_another_connections_write() {
        let (_dir, path, mut conn) = fresh();
        commit(&mut conn, &[batch("n1", 1, 1, 1)], SPAN).unwrap();
        let other = open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let (locked_tx, locked) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            other.execute("CREATE TABLE history(x)", []).unwrap();
            locked_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            other.execute_batch("COMMIT").unwrap();
        });
        locked.recv().unwrap();
        commit(&mut conn, &[batch("n1", 1, 2, 1)], SPAN).unwrap();
        prune(&conn, Duration::from_secs(10), T0 + 2 * S).unwrap();
        writer.join().unwrap();
        assert_eq!(batch_rows(&conn), 2);
    }

    /// The prune finds each job list's node, and each Hello's instance, through an index: a scan of `hellos` per
    /// job list read every Hello (a page each) once per node, for seconds, while acks waited.
    #[test]
    fn the_prunes_lookups_in_hellos_go_through_an_index() {
        let (_dir, _path, conn) = fresh();
        let plan = |sql: &str| -> String {
            let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let rows = st.query_map([], |r| r.get::<_, String>(3)).unwrap();
            rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
        };
        let jobs = plan(
            "DELETE FROM jobs WHERE NOT EXISTS (SELECT 1 FROM hellos h WHERE h.node = jobs.node)",
        );
        assert!(jobs.contains("INDEX hellos_instance"), "{jobs}");
        let (cache_kib,): (i64,) = conn
            .query_row("PRAGMA cache_size", [], |r| Ok((r.get(0)?,)))
            .unwrap();
        assert_eq!(cache_kib, -CACHE_KIB);
    }

    fn journal_mode(conn: &Connection) -> String {
        conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_new_database_has_large_pages_a_kept_journal_and_no_index_on_batches() {
        let (dir, _path, mut conn) = fresh();
        let page: u32 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        assert_eq!(page, PAGE_SIZE);
        assert!(indexes(&conn).is_empty());
        assert_eq!(journal_mode(&conn), "persist");
        let sync: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 2, "FULL");
        commit(&mut conn, &[batch("n1", 1, 1, 1)], SPAN).unwrap();
        // The journal stays, its header zeroed: nothing to roll back.
        let journal = std::fs::read(dir.path().join("db-journal")).unwrap();
        assert!(journal.len() >= 28 && journal[..28].iter().all(|b| *b == 0));
        assert!(!dir.path().join("db-wal").exists());
    }

    /// A database an older collector kept in the WAL, stopped with committed pages still in it (64 KiB pages, as
    /// those collectors made them): it opens with every committed row, out of the WAL, which is gone.
    #[test]
    fn a_database_left_in_the_wal_opens_with_what_its_wal_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut older = open(&path).unwrap();
        older.pragma_update(None, "journal_mode", "WAL").unwrap();
        older.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        commit(&mut older, &[hello("n1", 1, 0), batch("n1", 1, 1, 1)], SPAN).unwrap();
        commit(&mut older, &[batch("n1", 1, 2, 2)], SPAN).unwrap();
        let wal = dir.path().join("db-wal");
        assert!(std::fs::metadata(&wal).unwrap().len() > 0);
        // Copied as a kill leaves them: the database and its WAL, not checkpointed.
        let copy = dir.path().join("copy");
        std::fs::copy(&path, &copy).unwrap();
        std::fs::copy(&wal, dir.path().join("copy-wal")).unwrap();
        drop(older);
        let conn = open(&copy).unwrap();
        assert_eq!(journal_mode(&conn), "persist");
        assert!(!dir.path().join("copy-wal").exists());
        assert_eq!(
            replayed(&conn, &copy, 3),
            [
                ('h', "n1".into(), 1, 0),
                ('b', "n1".into(), 1, 1),
                ('b', "n1".into(), 1, 2)
            ]
        );
        assert_eq!(seqs(&conn), [("n1".into(), 1, 2, 2)]);
    }

    /// A state directory of an older collector: 4 KiB pages, two indexes on `batches`, one upsert of `seqs`
    /// per batch. It opens (its indexes dropped, its pages as they were), replays, takes new batches and prunes.
    #[test]
    fn a_database_of_an_older_collector_opens_replays_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let old = Connection::open(&path).unwrap();
            old.pragma_update(None, "journal_mode", "WAL").unwrap();
            old.execute_batch(
                "CREATE TABLE hellos(node TEXT NOT NULL, instance_id INTEGER NOT NULL,
                   received_unix_ns INTEGER NOT NULL, payload BLOB NOT NULL);
                 CREATE INDEX hellos_received ON hellos(received_unix_ns);
                 CREATE TABLE batches(node TEXT NOT NULL, instance_id INTEGER NOT NULL, seq INTEGER NOT NULL,
                   received_unix_ns INTEGER NOT NULL, payload BLOB NOT NULL);
                 CREATE INDEX batches_received ON batches(received_unix_ns);
                 CREATE INDEX batches_instance ON batches(node, instance_id);
                 CREATE TABLE seqs(node TEXT NOT NULL, instance_id INTEGER NOT NULL,
                   highest_seq INTEGER NOT NULL, updated_unix_ns INTEGER NOT NULL, PRIMARY KEY(node, instance_id));",
            )
            .unwrap();
            old.execute("INSERT INTO hellos VALUES ('n1', 1, ?1, x'010203')", [T0])
                .unwrap();
            for s in 1..=6i64 {
                old.execute(
                    "INSERT INTO batches VALUES ('n1', 1, ?1, ?2, x'00')",
                    [s, T0 + s * S],
                )
                .unwrap();
                old.execute(
                    "INSERT INTO seqs VALUES ('n1', 1, ?1, ?2) ON CONFLICT(node, instance_id) DO UPDATE SET
                       highest_seq = max(highest_seq, excluded.highest_seq), updated_unix_ns = excluded.updated_unix_ns",
                    [s, T0 + s * S],
                )
                .unwrap();
            }
        }
        let mut conn = open(&path).unwrap();
        assert_eq!(journal_mode(&conn), "persist", "out of the WAL");
        assert!(indexes(&conn).is_empty(), "{:?}", indexes(&conn));
        let page: u32 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        assert_eq!(page, 4096, "an existing database keeps its pages");
        let l = load(&conn, &path, Duration::from_secs(10), T0 + 7 * S).unwrap();
        assert_eq!((l.items.len(), l.seqs), (7, vec![("n1".to_string(), 1, 6)]));
        commit(&mut conn, &[batch("n1", 1, 7, 7)], SPAN).unwrap();
        prune(&conn, Duration::from_secs(10), T0 + 14 * S).unwrap();
        let got = replayed(&conn, &path, 14);
        let want: Vec<_> = std::iter::once(('h', "n1".to_string(), 1, 0))
            .chain((4..=7).map(|s| ('b', "n1".to_string(), 1, s)))
            .collect();
        assert_eq!(got, want);
        assert_eq!(seqs(&conn), [("n1".into(), 1, 7, 7)]);
    }
}
