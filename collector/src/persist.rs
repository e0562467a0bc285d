//! SQLite persistence (`state_dir` set): every accepted Hello and batch, as its encoded protobuf, so that a
//! collector killed at any point and restarted holds every acknowledged batch exactly once and resumes dedup.
//!
//! - One writer task ([`writer`]) owns the connection; items arrive over a bounded channel (ingest waits when
//!   it is full: backpressure, not loss) and are committed in one transaction every [`COMMIT_INTERVAL`] (or
//!   [`COMMIT_MAX_ITEMS`]). Only after the commit is a batch marked durable, so acks carry it only then.
//! - A rollback journal kept between commits (`journal_mode = PERSIST`) and `synchronous = FULL`: a committed
//!   transaction survives a process kill and a power loss (the journal, the database and the journal's zeroed
//!   header are each fsynced before `COMMIT` returns; a journal left by a kill is rolled back at the next open).
//!   A batch's bytes are written once, into the database: SQLite journals only the pages that held data when
//!   the transaction began (a partition's last page, `seqs`, the B-trees' inner pages), never those appended to
//!   the file or taken from its free list.
//! - Why not the WAL, which older collectors used: there each batch was written twice, appended to the WAL by
//!   the commit and copied into the database by a checkpoint, and the copy is the dear one — writing file pages
//!   the kernel does not cache (a growing database, or pages freed by the prune minutes before) costs several
//!   times the WAL's append into pages it reuses. A checkpoint beside the writer did not spare the commits
//!   either: the WAL starts over only when a transaction begins with all of it copied, and the writer committed
//!   while each checkpoint ran, so the WAL grew past SQLite's backstop and the commits checkpointed too. What
//!   the WAL gave and the journal does not: one fsync a commit instead of four (a commit takes some 15 ms more
//!   at 2,000 nodes, and acks wait for it), and readers beside the writer — here a connection reading the file
//!   (an operator's `sqlite3`) holds the commits off while it reads, up to the busy timeout (5 s), after which
//!   they fail, the collector is degraded and they are retried. The collector itself reads it only at start.
//! - Tables ([`schema`]): `hellos(node, instance_id, received_unix_ns, payload)` (an `InventoryUpdate` is stored
//!   as a new Hello row carrying the merged inventory), batches in one table per span of receive time
//!   (`batches_<start>_<end>(node, instance_id, seq, received_unix_ns, payload)`, [`partition`]; older
//!   collectors kept them all in `batches`, still read), `seqs(node, instance_id, highest_seq,
//!   updated_unix_ns)` so dedup survives the pruning of old batches, and `jobs(node PRIMARY KEY, instance_id,
//!   received_unix_ns, payload)`: each node's latest job list
//!   (an encoded `JobInventory`, already validated, so only allowlisted `NCCL_*` settings), replayed onto the
//!   node when its current instance is the one that sent it. Older state directories get the table on open;
//!   older collectors ignore it.
//! - Rows older than `retention` are pruned every [`PRUNE_INTERVAL`] (a Hello stays while its instance has
//!   batches, and the newest Hello of each instance stays for `retention`).
//! - At start ([`open_and_replay`]) the directory and database are made private ([`files`]: 0700, 0600), a
//!   damaged database is moved aside and replaced by an empty one (counted, logged), the rows within
//!   `retention` are replayed into the store in receive order, dedup state is restored, and the writer takes
//!   over.
//! - Disk errors after start (a full disk, a file-size limit, I/O errors) are counted
//!   (`commwatch_collector_persist_errors_total`) and make the collector *degraded* until a commit succeeds
//!   again: nothing is acknowledged meanwhile, agents keep their batches, and ingest still applies them to
//!   memory so the live view stays fresh ([`writer`] says how it retries).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;

use crate::telemetry::Health;

#[doc(hidden)]
pub mod bench;
pub mod files;
mod partition;
mod replay;
pub(crate) mod schema;
pub(crate) mod writer;

pub(crate) use replay::open_and_replay;
pub use writer::{COMMIT_INTERVAL, COMMIT_MAX_ITEMS, PRUNE_INTERVAL};

const CHANNEL_CAPACITY: usize = 65_536;
/// Most payload bytes waiting for the writer (in KiB permits), including what a degraded writer holds. A stream
/// whose batch does not fit waits: a slow or full disk slows ingest (agents buffer) instead of growing the
/// collector's memory without bound.
const QUEUE_KIB: usize = 256 * 1024;
/// The database file inside `state_dir`.
pub const DB_FILE: &str = "collector.sqlite3";

/// Raises an agent instance's durable sequence number to `seq` (never lowers it): acks may now carry `seq`.
/// Called once a batch is committed (or at once when there is no state directory), and for what replay
/// restores.
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

/// Wall time of one commit of the writer, by phase (what `commwatch_collector_persist_commit_seconds`
/// observes): what an operator reads to tell a slow disk (`sync`) from a lock held by another connection
/// (`lock_wait`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CommitTimes {
    /// From `BEGIN IMMEDIATE` until the transaction held the database's write lock.
    pub lock_wait: Duration,
    /// The transaction's statements (the inserts and upserts).
    pub write: Duration,
    /// `COMMIT`: the journal written and fsynced, the database written and fsynced, the journal's header
    /// zeroed and fsynced.
    pub sync: Duration,
}

impl CommitTimes {
    /// The whole commit: lock wait, statements and sync.
    pub fn all(&self) -> Duration {
        self.lock_wait + self.write + self.sync
    }

    /// Observes each phase in `h` (labelled by `telemetry::names::PERSIST_COMMIT_PHASES`).
    pub(crate) fn observe(&self, h: &prometheus::HistogramVec) {
        let phases = [self.all(), self.lock_wait, self.write, self.sync];
        for (name, d) in crate::telemetry::names::PERSIST_COMMIT_PHASES
            .iter()
            .zip(phases)
        {
            h.with_label_values(&[name]).observe(d.as_secs_f64());
        }
    }
}

/// Persistence errors. Each message says its cause itself (none is repeated as a `source()`).
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("cannot create state directory {path}: {error}")]
    CreateDir {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("state file {path}: {error}")]
    File {
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
    tx: mpsc::Sender<(Item, tokio::sync::OwnedSemaphorePermit)>,
    /// Payload KiB the queue may still take.
    budget: Arc<Semaphore>,
    health: Health,
}

impl PersistHandle {
    /// Queues an item for the writer, waiting while the queue holds [`QUEUE_KIB`] of payload. When the writer
    /// is gone (it failed) the item is lost and, being a batch, never acknowledged: the error is counted and the
    /// collector stays degraded.
    async fn enqueue(&self, item: Item) {
        let kib = (item.payload_len() / 1024 + 1).min(QUEUE_KIB) as u32;
        let sent = match self.budget.clone().acquire_many_owned(kib).await {
            Ok(permit) => self.tx.send((item, permit)).await.is_ok(),
            Err(_) => false,
        };
        if !sent {
            self.health.persist_errors.inc();
            self.health.persist_degraded.set(1);
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

/// Starts the writer on `sink` (the database at `path`); it ends, after committing what it holds, once every
/// [`PersistHandle`] is dropped.
pub(crate) fn spawn_writer<S: writer::Sink>(
    sink: S,
    path: PathBuf,
    retention: Duration,
    health: Health,
) -> (PersistHandle, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
    let handle = PersistHandle {
        tx,
        budget: Arc::new(Semaphore::new(QUEUE_KIB)),
        health: health.clone(),
    };
    (handle, writer::spawn(sink, path, retention, health, rx))
}
