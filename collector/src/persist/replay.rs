//! Replay at start: the state directory is made ready ([`super::files`]), its Hellos, batches and job lists are
//! applied to the store in the order they were received, dedup state is restored, and then the writer takes
//! over the connection.
//!
//! A row that cannot be decoded or validated any more (a collector that tightened a limit, a damaged file) is
//! skipped, counted (`commwatch_collector_persist_errors_total`) and logged: replay never fails the start on
//! one bad row — nor on a row whose values have the wrong type (written by hand, damaged), which the load skips
//! and counts the same way. A database SQLite calls damaged or not a database at all is moved aside, named in the log and
//! counted (`commwatch_collector_persist_corrupt_databases_total`), and the collector starts on an empty one.
//! Any other failure to read it (permissions, a lock, I/O) fails the start: moving aside a database that is
//! merely unreadable now would discard it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use commwatch_model::clock::unix_now_ns;
use commwatch_proto::v1 as pb;
use prost::Message;
use rusqlite::Connection;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use super::schema::{is_corruption, load, load_jobs, open};
use super::{
    files, mark_durable, spawn_writer, PersistError, PersistHandle, PersistedJobs, Replay, DB_FILE,
};
use crate::store::Store;
use crate::store::{Batch, Hello, JobList};
use crate::telemetry::Health;

/// What the database holds for replay.
struct Loaded {
    conn: Connection,
    items: Vec<Replay>,
    seqs: Vec<(String, u64, u64)>,
    jobs: Vec<PersistedJobs>,
    /// Rows whose values could not be read (skipped and logged by the load).
    skipped: u64,
}

/// Opens (creating if needed) the database in `dir`, replays what it holds within `retention` into `store`,
/// and starts the writer on it. Returns ingest's handle and the writer task (it ends, after a final commit,
/// once every handle is dropped).
pub(crate) async fn open_and_replay(
    dir: &Path,
    retention: Duration,
    store: &Store,
    health: &Health,
) -> Result<(PersistHandle, JoinHandle<()>), PersistError> {
    let (owned, counted) = (dir.to_path_buf(), health.clone());
    // SQLite reads block: off the async workers.
    let loaded = tokio::task::spawn_blocking(move || open_state(&owned, retention, &counted))
        .await
        .map_err(|e| PersistError::CreateDir {
            path: PathBuf::from(dir),
            error: std::io::Error::other(e.to_string()),
        })??;
    let path = dir.join(DB_FILE);
    health.persist_errors.inc_by(loaded.skipped);
    let (hellos, batches) = replay(store, loaded.items, loaded.seqs, health);
    let job_lists = replay_jobs(store, loaded.jobs, health);
    info!(path = %path.display(), hellos, batches, job_lists, "replayed persisted state");
    Ok(spawn_writer(loaded.conn, path, retention, health.clone()))
}

/// Prepares the directory and the database file, and loads the database — moving a damaged one aside and
/// starting on an empty one.
fn open_state(dir: &Path, retention: Duration, health: &Health) -> Result<Loaded, PersistError> {
    files::prepare_dir(dir)?;
    let path = dir.join(DB_FILE);
    files::prepare_db_file(&path)?;
    match load_all(&path, retention) {
        Err(e) if is_corruption(&e) => {
            let unix_s = u64::try_from(unix_now_ns() / 1_000_000_000).unwrap_or(0);
            let aside = files::move_aside(&path, unix_s)?;
            health.persist_corrupt_databases.inc();
            error!(path = %path.display(), moved_to = %aside.display(), error = %e,
                "the state database cannot be read: moved aside, starting with an empty one (what it held is                  not replayed; the file is kept for inspection)");
            files::prepare_db_file(&path)?;
            load_all(&path, retention)
        }
        other => other,
    }
}

fn load_all(path: &Path, retention: Duration) -> Result<Loaded, PersistError> {
    let conn = open(path)?;
    let loaded = load(&conn, path, retention, unix_now_ns())?;
    let (jobs, skipped_jobs) = load_jobs(&conn, path)?;
    Ok(Loaded {
        conn,
        items: loaded.items,
        seqs: loaded.seqs,
        jobs,
        skipped: loaded.skipped + skipped_jobs,
    })
}

/// Replays persisted Hellos and batches into the store (receive order) and restores dedup state from the
/// highest sequence number of each instance. Returns how many Hellos and batches were applied.
pub(crate) fn replay(
    store: &Store,
    items: Vec<Replay>,
    seqs: Vec<(String, u64, u64)>,
    health: &Health,
) -> (usize, usize) {
    let mut state = Replayer {
        store,
        health,
        hellos: HashMap::new(),
        scratch: Vec::new(),
    };
    let (mut n_hellos, mut n_batches) = (0usize, 0usize);
    for item in items {
        match item {
            Replay::Hello {
                node,
                instance_id,
                received_unix_ns,
                payload,
            } => {
                n_hellos += usize::from(state.hello(node, instance_id, received_unix_ns, &payload))
            }
            Replay::Batch {
                node,
                instance_id,
                received_unix_ns,
                payload,
            } => {
                n_batches +=
                    usize::from(state.batch(&node, instance_id, received_unix_ns, &payload))
            }
        }
    }
    for (node, instance_id, seq) in seqs {
        if let Some(n) = store.node(&node) {
            let mut n = n.lock();
            n.raise_highest(instance_id, seq);
            mark_durable(&n.durable(instance_id), seq);
        }
    }
    (n_hellos, n_batches)
}

/// Replay state: every instance's Hello, so that interleaved instances can be made current again.
struct Replayer<'a> {
    store: &'a Store,
    health: &'a Health,
    hellos: HashMap<(String, u64), Hello>,
    scratch: Vec<u32>,
}

impl Replayer<'_> {
    /// Applies one persisted Hello; whether it was applied.
    fn hello(
        &mut self,
        node: String,
        instance_id: u64,
        received_unix_ns: i64,
        payload: &[u8],
    ) -> bool {
        let h = match pb::Hello::decode(payload)
            .map_err(|e| e.to_string())
            .and_then(|h| Hello::try_from(h).map_err(|e| e.to_string()))
        {
            Ok(h) => h,
            Err(e) => {
                self.health.persist_errors.inc();
                warn!(node, instance_id, error = %e, "skipping unreadable persisted hello");
                return false;
            }
        };
        if let Err(e) = self.store.hello(&h, received_unix_ns, None) {
            warn!(node, instance_id, error = %e, "skipping persisted hello");
            return false;
        }
        self.hellos.insert((node, instance_id), h);
        true
    }

    /// Applies one persisted batch to its node (making its instance current again first when two instances'
    /// streams interleaved) and marks it durable; whether it was applied.
    fn batch(
        &mut self,
        node: &str,
        instance_id: u64,
        received_unix_ns: i64,
        payload: &[u8],
    ) -> bool {
        let b = match pb::SampleBatch::decode(payload)
            .map_err(|e| e.to_string())
            .and_then(|b| Batch::try_from(b).map_err(|e| e.to_string()))
        {
            Ok(b) => b,
            Err(e) => {
                self.health.persist_errors.inc();
                warn!(node, instance_id, error = %e, "skipping unreadable persisted batch");
                return false;
            }
        };
        let Some(n) = self.store.node(node) else {
            return false;
        };
        if n.lock().instance_id() != instance_id {
            let Some(h) = self.hellos.get(&(node.to_string(), instance_id)) else {
                return false;
            };
            if self.store.hello(h, received_unix_ns, None).is_err() {
                return false;
            }
        }
        let mut n = n.lock();
        match n.apply_batch(&b, received_unix_ns, &mut self.scratch) {
            Ok(_) => {
                mark_durable(&n.durable(instance_id), b.seq);
                true
            }
            Err(e) => {
                warn!(node, instance_id, seq = b.seq, error = %e, "skipping persisted batch");
                false
            }
        }
    }
}

/// Restores each node's persisted job list when the node's current instance (after [`replay`]) is the one
/// that sent it. Returns how many were restored.
pub(crate) fn replay_jobs(store: &Store, rows: Vec<PersistedJobs>, health: &Health) -> usize {
    let mut n = 0;
    for row in rows {
        let Some(node) = store.node(&row.node) else {
            continue;
        };
        if node.lock().instance_id() != row.instance_id {
            continue;
        }
        let list = pb::JobInventory::decode(row.payload.as_slice())
            .map_err(|e| e.to_string())
            .and_then(|j| JobList::validated(j, store.limits()).map_err(|e| e.to_string()));
        match list {
            Ok(l) => {
                store.set_jobs(&node, l);
                n += 1;
            }
            Err(e) => {
                health.persist_errors.inc();
                warn!(node = row.node, instance_id = row.instance_id, error = %e, "skipping unreadable persisted job list");
            }
        }
    }
    n
}
