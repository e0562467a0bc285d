//! The writer's SQLite work without its task, for `benches/persist.rs` (not part of the collector's API): the
//! database opened as [`super::open_and_replay`] opens it, batches committed as the writer commits them, the
//! prune as the writer runs it, and the load that replay reads, all on the calling thread so that its CPU
//! clock times them.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::watch;

use super::{partition, schema, CommitTimes, Item, PersistError};

/// The writer's items for one commit, built apart from the commit that is timed.
pub struct Items {
    items: Vec<Item>,
    durable: Arc<watch::Sender<u64>>,
}

impl Default for Items {
    fn default() -> Self {
        Items {
            items: Vec::new(),
            durable: Arc::new(watch::channel(0).0),
        }
    }
}

impl Items {
    /// Adds a batch: `payload` is its encoded `SampleBatch`, `received_unix_ns` its receive time.
    pub fn batch(
        &mut self,
        node: &str,
        instance_id: u64,
        seq: u64,
        received_unix_ns: i64,
        payload: Vec<u8>,
    ) {
        self.items.push(Item::Batch {
            node: node.to_string(),
            instance_id,
            seq,
            received_unix_ns,
            payload,
            durable: self.durable.clone(),
        });
    }

    /// Adds a Hello (`payload`: its encoded `Hello`).
    pub fn hello(&mut self, node: &str, instance_id: u64, received_unix_ns: i64, payload: Vec<u8>) {
        self.items.push(Item::Hello {
            node: node.to_string(),
            instance_id,
            received_unix_ns,
            payload,
        });
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn clear(&mut self) {
        self.items.clear();
    }
}

/// The state database, as the writer holds it.
pub struct Db {
    conn: Connection,
    /// Seconds a partition of batches spans (under the retention the database was opened for).
    span_s: i64,
}

impl Db {
    /// Opens (creating) the database at `path` as the collector does at start, for `retention`.
    pub fn open(path: &Path, retention: Duration) -> Result<Db, PersistError> {
        Ok(Db {
            conn: schema::open(path)?,
            span_s: partition::span_s(retention),
        })
    }

    /// Commits `items` in one transaction, as the writer does every `COMMIT_INTERVAL`.
    pub fn commit(&mut self, items: &Items) -> Result<CommitTimes, rusqlite::Error> {
        schema::commit(&mut self.conn, &items.items, self.span_s)
    }

    /// Deletes what is past `retention` at `now_unix_ns`, as the writer does every `PRUNE_INTERVAL`; how many
    /// rows.
    pub fn prune(
        &mut self,
        retention: Duration,
        now_unix_ns: i64,
    ) -> Result<usize, rusqlite::Error> {
        schema::prune(&self.conn, retention, now_unix_ns)
    }

    /// Switches the database to the WAL, as collectors before the rollback journal kept it (for comparison):
    /// SQLite checkpoints within a commit once the WAL holds `autocheckpoint_pages` (they set 64 MiB of pages,
    /// 1,024, and checkpointed beside the commits too) and cuts the WAL's file back to 64 MiB after it starts
    /// over.
    pub fn wal(&self, autocheckpoint_pages: i64) -> Result<(), rusqlite::Error> {
        let mode: String = self
            .conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        assert_eq!(mode, "wal", "the database switched to the WAL");
        self.conn
            .pragma_update(None, "wal_autocheckpoint", autocheckpoint_pages)?;
        self.conn
            .pragma_update(None, "journal_size_limit", 64i64 << 20)
    }

    /// What a start would replay at `now_unix_ns`: Hellos and batches within `retention`, and instances with
    /// a highest sequence number.
    pub fn load(
        &self,
        path: &Path,
        retention: Duration,
        now_unix_ns: i64,
    ) -> Result<(usize, usize), PersistError> {
        let l = schema::load(&self.conn, path, retention, now_unix_ns)?;
        Ok((l.items.len(), l.seqs.len()))
    }
}
