//! The writer task: the one owner of the database connection. It gathers what ingest queues for
//! [`COMMIT_INTERVAL`] (or [`COMMIT_MAX_ITEMS`]), commits it in one transaction, and only then marks the batches
//! durable — the moment acks may carry them.
//!
//! When a commit fails (a full disk, a file-size limit, I/O errors) nothing of it is marked durable: the items
//! stay with the writer, in order, and the whole set is committed again — with what arrived meanwhile — after a
//! pause that doubles from [`RETRY_MIN`] to [`RETRY_MAX`]. While that lasts the collector is *degraded*
//! (`commwatch_collector_persist_degraded` 1, `/healthz` says so, the log says it at the start, every
//! [`STILL_DEGRADED_EVERY`] and at the end): ingest goes on applying batches to memory, so the live view stays
//! fresh, but agents are not acknowledged and keep the batches in their resend buffers. What the writer holds is
//! bounded by the queue's byte budget; once it is spent, streams wait for the disk. A batch is acknowledged only
//! once it is on disk, so a collector killed while degraded loses nothing it acknowledged.
//!
//! The commit goes through a [`Sink`] (the SQLite connection; in tests one whose disk can be filled).

use std::path::PathBuf;
use std::time::Duration;

use commwatch_model::clock::unix_now_ns;
use rusqlite::Connection;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::{mark_durable, partition, schema, CommitTimes, Item};
use crate::telemetry::throttle::LogThrottle;
use crate::telemetry::Health;

pub const COMMIT_INTERVAL: Duration = Duration::from_millis(100);
pub const COMMIT_MAX_ITEMS: usize = 20_000;
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(10);
/// First pause after a failed commit; it doubles with each failure up to [`RETRY_MAX`].
pub const RETRY_MIN: Duration = Duration::from_millis(100);
pub const RETRY_MAX: Duration = Duration::from_secs(5);
/// While degraded, the log says so again at most this often.
pub const STILL_DEGRADED_EVERY: Duration = Duration::from_secs(60);

/// Where the writer commits: one transaction per call, all or nothing.
pub(crate) trait Sink: Send + 'static {
    /// Commits `items`, batches in partitions of `span_s` seconds.
    fn commit(&mut self, items: &[Item], span_s: i64) -> Result<CommitTimes, rusqlite::Error>;
    /// Deletes rows past `retention`; how many.
    fn prune(&mut self, retention: Duration) -> Result<usize, rusqlite::Error>;
}

impl Sink for Connection {
    fn commit(&mut self, items: &[Item], span_s: i64) -> Result<CommitTimes, rusqlite::Error> {
        schema::commit(self, items, span_s)
    }

    fn prune(&mut self, retention: Duration) -> Result<usize, rusqlite::Error> {
        schema::prune(self, retention, unix_now_ns())
    }
}

type Queued = (Item, OwnedSemaphorePermit);

/// The writer's state between commits.
struct Writer<S> {
    /// `None` only while a commit runs on the blocking pool.
    sink: Option<S>,
    path: PathBuf,
    retention: Duration,
    health: Health,
    /// Items not committed yet, in arrival order, with the queue budget they hold.
    pending: Vec<Queued>,
    last_prune: Instant,
    /// Since when commits fail, and the pause before the next attempt.
    degraded_since: Option<Instant>,
    retry: Duration,
    still: LogThrottle,
}

/// Starts the writer on `rx`. It ends when every sender is dropped and what it holds is committed — or, the
/// disk still failing then, after one more attempt (what it held was not acknowledged: agents resend it).
pub(crate) fn spawn<S: Sink>(
    sink: S,
    path: PathBuf,
    retention: Duration,
    health: Health,
    rx: mpsc::Receiver<Queued>,
) -> JoinHandle<()> {
    let writer = Writer {
        sink: Some(sink),
        path,
        retention,
        health,
        pending: Vec::new(),
        last_prune: Instant::now(),
        degraded_since: None,
        retry: RETRY_MIN,
        still: LogThrottle::new(STILL_DEGRADED_EVERY),
    };
    tokio::spawn(writer.run(rx))
}

impl<S: Sink> Writer<S> {
    async fn run(mut self, mut rx: mpsc::Receiver<Queued>) {
        let mut open = true;
        loop {
            if self.pending.is_empty() {
                match rx.recv().await {
                    Some(q) => self.pending.push(q),
                    None => break,
                }
            }
            if open {
                let wait = match self.degraded_since {
                    Some(_) => self.retry,
                    None => COMMIT_INTERVAL,
                };
                open = self.gather(&mut rx, Instant::now() + wait).await;
            }
            if !self.commit_pending().await && !open {
                error!(path = %self.path.display(), items = self.pending.len(),
                    "stopping with items the state directory could not take; they were not acknowledged, \
                     agents resend them to the next collector");
                break;
            }
            if !open && self.pending.is_empty() {
                break;
            }
        }
    }

    /// Takes what arrives until `deadline` (or [`COMMIT_MAX_ITEMS`] are pending); `false` once every sender
    /// is gone.
    async fn gather(&mut self, rx: &mut mpsc::Receiver<Queued>, deadline: Instant) -> bool {
        while self.pending.len() < COMMIT_MAX_ITEMS {
            tokio::select! {
                q = rx.recv() => match q {
                    Some(q) => self.pending.push(q),
                    None => return false,
                },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        true
    }

    /// Commits everything pending (pruning too, when due and the disk is healthy); whether it worked.
    async fn commit_pending(&mut self) -> bool {
        let Some(mut sink) = self.sink.take() else {
            return false;
        };
        let (items, permits): (Vec<Item>, Vec<OwnedSemaphorePermit>) =
            std::mem::take(&mut self.pending).into_iter().unzip();
        let do_prune = self.degraded_since.is_none() && self.last_prune.elapsed() >= PRUNE_INTERVAL;
        let retention = self.retention;
        let span_s = partition::span_s(retention);
        let joined = tokio::task::spawn_blocking(move || {
            let committed = sink.commit(&items, span_s);
            let pruned = (committed.is_ok() && do_prune).then(|| {
                let t0 = std::time::Instant::now();
                (sink.prune(retention), t0.elapsed())
            });
            (sink, items, committed, pruned)
        })
        .await;
        let Ok((sink, items, committed, pruned)) = joined else {
            // The blocking task panicked: the connection is gone with it, and nothing was marked durable.
            error!(path = %self.path.display(), "persistence writer failed; batches are no longer acknowledged");
            self.health.persist_errors.inc();
            self.health.persist_degraded.set(1);
            return false;
        };
        self.sink = Some(sink);
        if let Some((p, took)) = pruned {
            self.last_prune = Instant::now();
            let h = &self.health.persist_commit_seconds;
            h.with_label_values(&["prune"]).observe(took.as_secs_f64());
            self.pruned(p);
        }
        match committed {
            Ok(times) => {
                self.health.persist_commits.inc();
                times.observe(&self.health.persist_commit_seconds);
                for it in &items {
                    if let Item::Batch { durable, seq, .. } = it {
                        mark_durable(durable, *seq);
                    }
                }
                drop(permits);
                self.recovered(items.len());
                true
            }
            Err(e) => {
                self.pending = items.into_iter().zip(permits).collect();
                self.failed(&e);
                false
            }
        }
    }

    fn failed(&mut self, e: &rusqlite::Error) {
        self.health.persist_errors.inc();
        let held = self.pending.len();
        match self.degraded_since {
            None => {
                self.degraded_since = Some(Instant::now());
                self.health.persist_degraded.set(1);
                error!(path = %self.path.display(), items = held, error = %e,
                    "sqlite commit failed; batches are not acknowledged until the state directory can be written \
                     (agents keep them in their buffers); retrying");
            }
            Some(since) => {
                self.retry = (self.retry * 2).min(RETRY_MAX);
                if let Some(n) = self.still.allow("degraded", std::time::Instant::now()) {
                    error!(path = %self.path.display(), items = held, error = %e, failed_commits = n + 1,
                        for_s = since.elapsed().as_secs(),
                        "sqlite commit failed; batches are not acknowledged until the state directory can be written \
                         (agents keep them in their buffers); retrying");
                }
            }
        }
    }

    fn recovered(&mut self, items: usize) {
        if let Some(since) = self.degraded_since.take() {
            self.health.persist_degraded.set(0);
            self.retry = RETRY_MIN;
            info!(path = %self.path.display(), items, after_s = since.elapsed().as_secs_f64(),
                "state directory written again; acknowledgements resume");
        }
    }

    fn pruned(&self, p: Result<usize, rusqlite::Error>) {
        match p {
            Ok(n) if n > 0 => info!(rows = n, "pruned persisted rows past retention"),
            Ok(_) => {}
            Err(e) => {
                self.health.persist_errors.inc();
                warn!(error = %e, "sqlite prune failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use commwatch_model::clock::unix_now_ns;
    use tokio::sync::watch;

    use super::*;
    use crate::persist::{spawn_writer, DB_FILE};

    /// The real database on a disk that fills on demand: while `full` is set, SQLite may not grow the file
    /// (`max_page_count`), so a commit fails with SQLite's own "database or disk is full".
    struct FillableDisk {
        conn: Connection,
        full: Arc<AtomicBool>,
    }

    impl Sink for FillableDisk {
        fn commit(&mut self, items: &[Item], span_s: i64) -> Result<CommitTimes, rusqlite::Error> {
            let pages: i64 = if self.full.load(Ordering::SeqCst) {
                self.conn.query_row("PRAGMA page_count", [], |r| r.get(0))?
            } else {
                1 << 30
            };
            self.conn.pragma_update(None, "max_page_count", pages)?;
            schema::commit(&mut self.conn, items, span_s)
        }

        fn prune(&mut self, retention: Duration) -> Result<usize, rusqlite::Error> {
            schema::prune(&self.conn, retention, unix_now_ns())
        }
    }

    struct Rig {
        dir: tempfile::TempDir,
        full: Arc<AtomicBool>,
        health: Health,
        handle: crate::persist::PersistHandle,
        task: JoinHandle<()>,
        durable: Arc<watch::Sender<u64>>,
    }

    fn rig() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE);
        let conn = schema::open(&path).unwrap();
        let full = Arc::new(AtomicBool::new(false));
        let health = Health::new().unwrap();
        let disk = FillableDisk {
            conn,
            full: full.clone(),
        };
        let retention = Duration::from_secs(600);
        let (handle, task) = spawn_writer(disk, path, retention, health.clone());
        Rig {
            dir,
            full,
            health,
            handle,
            task,
            durable: Arc::new(watch::channel(0).0),
        }
    }

    impl Rig {
        async fn batch(&self, seq: u64) {
            // Larger than a page, so that a full disk refuses it.
            let payload = vec![seq as u8; 2 * schema::PAGE_SIZE as usize];
            let (now, durable) = (unix_now_ns(), self.durable.clone());
            self.handle.batch("n1", 7, seq, now, payload, durable).await;
        }

        async fn durable_reaches(&self, seq: u64) {
            let mut rx = self.durable.subscribe();
            let reached = rx.wait_for(|s| *s >= seq);
            tokio::time::timeout(Duration::from_secs(10), reached)
                .await
                .expect("durable in time")
                .unwrap();
        }

        /// Every stored batch's sequence number, partitions oldest first, each in commit order.
        fn stored_seqs(&self) -> Vec<i64> {
            let conn = Connection::open(self.dir.path().join(DB_FILE)).unwrap();
            let mut seqs = Vec::new();
            for p in partition::list(&conn).unwrap() {
                let sql = format!("SELECT seq FROM {} ORDER BY rowid", p.table());
                let mut st = conn.prepare(&sql).unwrap();
                let rows = st.query_map([], |r| r.get::<_, i64>(0)).unwrap();
                seqs.extend(rows.map(Result::unwrap));
            }
            seqs
        }
    }

    /// Failure 5 of the hostile test: acks went on while commits failed, and a restart lost those batches.
    #[tokio::test]
    async fn while_commits_fail_nothing_is_acknowledged_and_all_of_it_is_committed_once_after() {
        let r = rig();
        r.batch(1).await;
        r.durable_reaches(1).await;
        r.full.store(true, Ordering::SeqCst);
        r.batch(2).await;
        r.batch(3).await;
        let degraded = async {
            while r.health.persist_degraded.get() == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), degraded)
            .await
            .expect("degraded");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(*r.durable.borrow(), 1, "nothing acknowledged while full");
        assert!(r.health.persist_errors.get() >= 2, "retried");
        r.full.store(false, Ordering::SeqCst);
        r.durable_reaches(3).await;
        assert_eq!(r.health.persist_degraded.get(), 0);
        assert_eq!(r.stored_seqs(), vec![1, 2, 3], "each once");
        let all = r.health.persist_commit_seconds.with_label_values(&["all"]);
        assert_eq!(all.get_sample_count(), r.health.persist_commits.get());
        drop(r.handle);
        r.task.await.unwrap();
    }

    #[tokio::test]
    async fn a_writer_stopped_while_the_disk_is_full_ends_without_acknowledging() {
        let r = rig();
        r.full.store(true, Ordering::SeqCst);
        r.batch(1).await;
        drop(r.handle);
        tokio::time::timeout(Duration::from_secs(10), r.task)
            .await
            .expect("the writer ends")
            .unwrap();
        assert_eq!(*r.durable.borrow(), 0);
        assert_eq!(r.health.persist_degraded.get(), 1);
    }
}
