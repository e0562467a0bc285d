//! SQLite persistence (`state_dir` set): every accepted Hello and batch, as its encoded protobuf, so that a
//! collector killed at any point and restarted holds every batch exactly once and resumes dedup.
//!
//! - One writer task owns the connection; items arrive over a bounded channel (ingest waits when it is full:
//!   backpressure, not loss) and are committed in one transaction every [`COMMIT_INTERVAL`] (or
//!   [`COMMIT_MAX_ITEMS`]). Only after the commit is a batch marked durable, so acks carry it only then.
//! - WAL mode, `synchronous = FULL`: a committed transaction survives a process kill and a power loss.
//! - Tables: `hellos(node, instance_id, received_unix_ns, payload)` (an `InventoryUpdate` is stored as a new Hello
//!   row carrying the merged inventory), `batches(node, instance_id, seq, received_unix_ns, payload)`, and
//!   `seqs(node, instance_id, highest_seq, updated_unix_ns)` so dedup survives the pruning of old batches, and
//!   `jobs(node PRIMARY KEY, instance_id, received_unix_ns, payload)`: each node's latest job list (an encoded
//!   `JobInventory`, already validated, so only allowlisted `NCCL_*` settings), replayed onto the node when its
//!   current instance is the one that sent it. Older state directories get the table on open; older collectors
//!   ignore it.
//! - Rows older than `retention` are pruned every [`PRUNE_INTERVAL`] (a Hello stays while its instance has
//!   batches, and the newest Hello of each instance stays for `retention`).
//! - At start ([`open_and_replay`]) the rows within `retention` are replayed into the store in receive order,
//!   dedup state is restored, and the writer takes over.
//! - Disk errors after start are logged and counted (`commwatch_collector_persist_errors_total`); the collector
//!   keeps serving from memory and marks the items durable anyway: acks then mean "held in memory" until the
//!   disk works again. Losing acks would make every agent's buffer overflow, which is worse.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use commwatch_model::clock::unix_now_ns;
use rusqlite::{params, Connection};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::telemetry::Health;

mod replay;

pub(crate) use replay::open_and_replay;

pub const COMMIT_INTERVAL: Duration = Duration::from_millis(100);
pub const COMMIT_MAX_ITEMS: usize = 20_000;
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(10);
const CHANNEL_CAPACITY: usize = 65_536;
/// Most payload bytes waiting for the writer (in KiB permits). A stream whose batch does not fit waits: a
/// slow disk slows ingest (agents buffer) instead of growing the collector's memory without bound.
const QUEUE_KIB: usize = 256 * 1024;
/// The database file inside `state_dir`.
pub const DB_FILE: &str = "collector.sqlite3";

/// Raises an agent instance's durable sequence number to `seq` (never lowers it): acks may now carry `seq`.
/// Called once a batch is committed (or held in memory only, when there is no disk or it failed), and for
/// what replay restores.
pub(crate) fn mark_durable(durable: &watch::Sender<u64>, seq: u64) {
    durable.send_if_modified(|v| {
        if seq > *v {
            *v = seq;
            true
        } else {
            false
        }
    });
}

/// Persistence errors. Each message says its cause itself (none is repeated as a `source()`).
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("cannot create state directory {path}: {error}")]
    CreateDir {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("sqlite error on {path}: {error}")]
    Sqlite {
        path: PathBuf,
        error: rusqlite::Error,
    },
}

pub(crate) enum Item {
    Hello {
        node: String,
        instance_id: u64,
        received_unix_ns: i64,
        payload: Vec<u8>,
    },
    Batch {
        node: String,
        instance_id: u64,
        seq: u64,
        received_unix_ns: i64,
        payload: Vec<u8>,
        durable: Arc<watch::Sender<u64>>,
    },
    /// A node's complete job list (replaces the stored one).
    Jobs {
        node: String,
        instance_id: u64,
        received_unix_ns: i64,
        payload: Vec<u8>,
    },
}

/// A node's persisted job list, for replay at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PersistedJobs {
    pub node: String,
    pub instance_id: u64,
    pub received_unix_ns: i64,
    /// Encoded `commwatch.v1.JobInventory`.
    pub payload: Vec<u8>,
}

/// Ingest's side of the writer.
#[derive(Clone)]
pub(crate) struct PersistHandle {
    tx: mpsc::Sender<(Item, OwnedSemaphorePermit)>,
    /// Payload KiB the queue may still take.
    budget: Arc<Semaphore>,
    health: Health,
}

impl PersistHandle {
    /// Queues an item for the writer, waiting while the queue holds [`QUEUE_KIB`] of payload. When the
    /// writer is gone (shutting down) the error is counted and a batch is marked durable from memory.
    async fn enqueue(&self, item: Item) {
        let kib = (item.payload_len() / 1024 + 1).min(QUEUE_KIB) as u32;
        let permit = match self.budget.clone().acquire_many_owned(kib).await {
            Ok(p) => p,
            Err(_) => {
                self.health.persist_errors.inc();
                return;
            }
        };
        if let Err(mpsc::error::SendError((item, _))) = self.tx.send((item, permit)).await {
            self.health.persist_errors.inc();
            if let Item::Batch { durable, seq, .. } = item {
                mark_durable(&durable, seq);
            }
        }
    }

    /// Queues a `Hello` (or an inventory update stored as the merged `Hello`).
    pub async fn hello(
        &self,
        node: &str,
        instance_id: u64,
        received_unix_ns: i64,
        payload: Vec<u8>,
    ) {
        self.enqueue(Item::Hello {
            node: node.to_string(),
            instance_id,
            received_unix_ns,
            payload,
        })
        .await
    }

    /// Queues a node's complete job list (encoded `JobInventory`); it replaces the stored one.
    pub async fn jobs(
        &self,
        node: &str,
        instance_id: u64,
        received_unix_ns: i64,
        payload: Vec<u8>,
    ) {
        self.enqueue(Item::Jobs {
            node: node.to_string(),
            instance_id,
            received_unix_ns,
            payload,
        })
        .await
    }

    /// Queues a batch; `durable` is raised to `seq` once it is committed.
    pub async fn batch(
        &self,
        node: &str,
        instance_id: u64,
        seq: u64,
        received_unix_ns: i64,
        payload: Vec<u8>,
        durable: Arc<watch::Sender<u64>>,
    ) {
        self.enqueue(Item::Batch {
            node: node.to_string(),
            instance_id,
            seq,
            received_unix_ns,
            payload,
            durable,
        })
        .await
    }
}

impl Item {
    fn payload_len(&self) -> usize {
        match self {
            Item::Hello { payload, .. }
            | Item::Batch { payload, .. }
            | Item::Jobs { payload, .. } => payload.len(),
        }
    }
}

/// One stored message, in receive order, for replay at start.
#[derive(Debug)]
pub(crate) enum Replay {
    Hello {
        node: String,
        instance_id: u64,
        received_unix_ns: i64,
        payload: Vec<u8>,
    },
    Batch {
        node: String,
        instance_id: u64,
        received_unix_ns: i64,
        payload: Vec<u8>,
    },
}

/// Opens (creating if needed) the database in `dir`.
pub(crate) fn open(dir: &Path) -> Result<(Connection, PathBuf), PersistError> {
    std::fs::create_dir_all(dir).map_err(|error| PersistError::CreateDir {
        path: dir.to_owned(),
        error,
    })?;
    let path = dir.join(DB_FILE);
    let sql = |error| PersistError::Sqlite {
        path: path.clone(),
        error,
    };
    let conn = Connection::open(&path).map_err(sql)?;
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
    Ok((conn, path))
}

/// Everything to replay: Hellos and batches received within `retention`, merged in receive order (a Hello
/// before batches received at the same instant), and the highest sequence number per instance.
#[allow(clippy::type_complexity)]
pub(crate) fn load(
    conn: &Connection,
    path: &Path,
    retention: Duration,
) -> Result<(Vec<Replay>, Vec<(String, u64, u64)>), PersistError> {
    let sql = |error| PersistError::Sqlite {
        path: path.to_owned(),
        error,
    };
    let cutoff =
        unix_now_ns().saturating_sub(i64::try_from(retention.as_nanos()).unwrap_or(i64::MAX));
    let mut hellos: Vec<Replay> = Vec::new();
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
        for r in rows {
            hellos.push(r.map_err(sql)?);
        }
    }
    let mut batches: Vec<Replay> = Vec::new();
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
        for r in rows {
            batches.push(r.map_err(sql)?);
        }
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
    let mut seqs = Vec::new();
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
        for r in rows {
            seqs.push(r.map_err(sql)?);
        }
    }
    Ok((merged, seqs))
}

/// Every node's persisted job list (one row per node: the latest).
pub(crate) fn load_jobs(
    conn: &Connection,
    path: &Path,
) -> Result<Vec<PersistedJobs>, PersistError> {
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
    rows.collect::<Result<Vec<_>, _>>().map_err(sql)
}

fn commit(conn: &mut Connection, items: &[Item]) -> Result<(), rusqlite::Error> {
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

fn prune(conn: &Connection, retention: Duration) -> Result<usize, rusqlite::Error> {
    let cutoff =
        unix_now_ns().saturating_sub(i64::try_from(retention.as_nanos()).unwrap_or(i64::MAX));
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

/// Starts the writer task. It ends (after a final commit) when every [`PersistHandle`] is dropped.
pub(crate) fn spawn_writer(
    conn: Connection,
    path: PathBuf,
    retention: Duration,
    health: Health,
) -> (PersistHandle, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<(Item, OwnedSemaphorePermit)>(CHANNEL_CAPACITY);
    let handle = PersistHandle {
        tx,
        budget: Arc::new(Semaphore::new(QUEUE_KIB)),
        health: health.clone(),
    };
    let task = tokio::spawn(async move {
        let mut conn = Some(conn);
        let mut last_prune = tokio::time::Instant::now();
        let mut open = true;
        while open {
            let Some((first, permit)) = rx.recv().await else {
                break;
            };
            let mut items = vec![first];
            // Queue budget is returned once the items are committed (or failed).
            let mut permits = vec![permit];
            let deadline = tokio::time::Instant::now() + COMMIT_INTERVAL;
            while items.len() < COMMIT_MAX_ITEMS {
                tokio::select! {
                    it = rx.recv() => match it {
                        Some((it, permit)) => {
                            items.push(it);
                            permits.push(permit);
                        }
                        None => { open = false; break; }
                    },
                    _ = tokio::time::sleep_until(deadline) => break,
                }
            }
            let Some(mut c) = conn.take() else { break };
            let do_prune = last_prune.elapsed() >= PRUNE_INTERVAL;
            let joined = tokio::task::spawn_blocking(move || {
                let r = commit(&mut c, &items);
                let p = if do_prune {
                    Some(prune(&c, retention))
                } else {
                    None
                };
                (c, items, r, p)
            })
            .await;
            let (c, items, result, pruned) = match joined {
                Ok(x) => x,
                Err(e) => {
                    error!(error = %e, "persistence writer failed; continuing in memory only");
                    health.persist_errors.inc();
                    break;
                }
            };
            conn = Some(c);
            match result {
                Ok(()) => health.persist_commits.inc(),
                Err(e) => {
                    health.persist_errors.inc();
                    error!(path = %path.display(), items = items.len(), error = %e,
                        "sqlite commit failed; these batches are held in memory only");
                }
            }
            if let Some(p) = pruned {
                last_prune = tokio::time::Instant::now();
                match p {
                    Ok(n) if n > 0 => info!(rows = n, "pruned persisted rows past retention"),
                    Ok(_) => {}
                    Err(e) => {
                        health.persist_errors.inc();
                        warn!(error = %e, "sqlite prune failed");
                    }
                }
            }
            for it in &items {
                if let Item::Batch { durable, seq, .. } = it {
                    mark_durable(durable, *seq);
                }
            }
            drop(permits);
        }
    });
    (handle, task)
}
