//! Checkpoints off the commit path. A commit appends to the WAL; a checkpoint copies the WAL's pages into the
//! database file and fsyncs it, so that the WAL can start over. SQLite runs one within the commit that takes the
//! WAL past `wal_autocheckpoint` pages — the commit then waits for it, and so do the acks of its batches. Here
//! a connection of its own ([`Checkpointer`]) runs a `PASSIVE` checkpoint on the blocking pool at most every
//! [`CHECKPOINT_EVERY`], after a commit, while the writer goes on committing (a passive checkpoint never takes
//! the write lock). The writer's connection keeps SQLite's own as a backstop ([`backstop`]): should the
//! checkpoints fall behind (a disk slower than the ingest), a commit checkpoints once the WAL holds
//! [`WAL_BACKSTOP_BYTES`], so the WAL never grows without bound, and after it starts over its file is cut back
//! to that size.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::Connection;

/// A checkpoint runs at most this often (after a commit, never while one runs).
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// The WAL's size past which the writer's commit checkpoints itself, and the size its file is cut back to after
/// it starts over, bytes.
pub const WAL_BACKSTOP_BYTES: i64 = 64 << 20;

/// What a checkpoint did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checkpointed {
    pub wall: Duration,
    /// Frames (pages) in the WAL, and how many of them are now in the database.
    pub wal_frames: i64,
    pub copied: i64,
}

/// The connection that checkpoints the database.
pub(crate) struct Checkpointer {
    conn: Connection,
}

impl Checkpointer {
    /// A connection to the database at `path` (already opened, in WAL mode, by the writer).
    pub fn open(path: &Path) -> rusqlite::Result<Checkpointer> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        Ok(Checkpointer { conn })
    }

    /// Copies what the WAL holds into the database (`PASSIVE`: what it cannot copy without waiting for the
    /// writer stays for the next one).
    pub fn run(&mut self) -> rusqlite::Result<Checkpointed> {
        let t0 = Instant::now();
        let (wal_frames, copied) =
            self.conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                    Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
                })?;
        Ok(Checkpointed {
            wall: t0.elapsed(),
            wal_frames,
            copied,
        })
    }
}

/// Sets the writer's connection `conn` to checkpoint within a commit only once the WAL holds
/// [`WAL_BACKSTOP_BYTES`], and to cut the WAL's file back to that size after it starts over.
pub(crate) fn backstop(conn: &Connection) -> rusqlite::Result<()> {
    let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    conn.pragma_update(
        None,
        "wal_autocheckpoint",
        WAL_BACKSTOP_BYTES / page.max(512),
    )?;
    conn.pragma_update(None, "journal_size_limit", WAL_BACKSTOP_BYTES)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_beside_the_writer_empties_the_wal_and_the_backstop_is_set() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let w = super::super::schema::open(&path).unwrap();
        let pages: i64 = w
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .unwrap();
        let page: i64 = w.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        assert_eq!(pages * page, WAL_BACKSTOP_BYTES);
        w.execute_batch("CREATE TABLE t(x BLOB); INSERT INTO t VALUES (zeroblob(300000));")
            .unwrap();
        let mut c = Checkpointer::open(&path).unwrap();
        let done = c.run().unwrap();
        assert!(done.wal_frames > 0, "{done:?}");
        assert_eq!(done.copied, done.wal_frames, "all of it copied");
        // The next write starts the WAL over: the checkpoint after it has only its frames.
        w.execute_batch("INSERT INTO t VALUES (x'01')").unwrap();
        let next = c.run().unwrap();
        assert!(next.wal_frames < done.wal_frames, "{next:?} after {done:?}");
    }
}
