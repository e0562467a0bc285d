//! The follower on a thread of its own: reading the dump files (a shared filesystem can be slow) never delays
//! a counter tick. The sampling thread publishes the node's job list ([`InspectorFeed::set_jobs`]) and takes the
//! records read since its last batch ([`InspectorFeed::take`]); the follower's thread polls every `period`.
//!
//! Bounds: at most [`InspectorFeed::capacity`] records wait for a batch; what a poll reads beyond that is
//! dropped and counted (`commwatch_agent_inspector_dropped_total{reason="queue_full"}`), oldest kept, as a
//! batch takes them in order. The thread ends within one `period` (or [`IDLE_WAIT`] while the node runs no
//! job) of the last other owner of the feed (the sampling loop) dropping it.
//!
//! While the node runs no job and a poll read nothing, the thread waits for a job list (woken as one is
//! published) or [`IDLE_WAIT`], instead of polling nothing every `period`: an idle node's agent wakes for
//! what is due.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use commwatch_model::Job;
use commwatch_proto::v1 as pb;

use super::Follower;
use crate::telemetry::AgentMetrics;

/// Records one batch carries at most (the follower's per-poll bound too).
pub const MAX_RECORDS_PER_BATCH: usize = 2048;
/// Records waiting for a batch by default: four batches' worth.
pub const DEFAULT_CAPACITY: usize = 4 * MAX_RECORDS_PER_BATCH;
/// Longest wait of the follower's thread between polls while the node runs no job.
pub const IDLE_WAIT: Duration = Duration::from_secs(5);

/// What the sampling thread and the follower's thread share.
pub struct InspectorFeed {
    jobs: Mutex<Vec<Job>>,
    /// Signalled when [`InspectorFeed::set_jobs`] changes the jobs.
    jobs_changed: Condvar,
    records: Mutex<VecDeque<pb::CollectiveRecord>>,
    capacity: usize,
    metrics: Arc<AgentMetrics>,
}

impl std::fmt::Debug for InspectorFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InspectorFeed")
            .field("waiting", &lock(&self.records).len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// A lock that a panicked holder does not poison for the others (the data is plain values).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl InspectorFeed {
    /// A feed holding at most `capacity` records, with no thread (tests drive it through [`InspectorFeed::poll_once`]).
    pub fn new(capacity: usize, metrics: Arc<AgentMetrics>) -> Arc<InspectorFeed> {
        Arc::new(InspectorFeed {
            jobs: Mutex::new(Vec::new()),
            jobs_changed: Condvar::new(),
            records: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            metrics,
        })
    }

    /// Most records waiting for a batch.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The node's jobs now (copied only when they changed).
    pub fn set_jobs(&self, jobs: &[Job]) {
        let mut held = lock(&self.jobs);
        if held.as_slice() != jobs {
            *held = jobs.to_vec();
            self.jobs_changed.notify_all();
        }
    }

    /// Waits at most `most` while the node runs no job (returns at once when it runs one, or as soon as one
    /// is published). Returns whether the node runs a job.
    pub fn wait_for_jobs(&self, most: Duration) -> bool {
        let held = lock(&self.jobs);
        let (held, _) = self
            .jobs_changed
            .wait_timeout_while(held, most, |j| j.is_empty())
            .unwrap_or_else(|p| p.into_inner());
        !held.is_empty()
    }

    /// Up to `max` waiting records, oldest first.
    pub fn take(&self, max: usize) -> Vec<pb::CollectiveRecord> {
        let mut q = lock(&self.records);
        let n = q.len().min(max);
        q.drain(..n).collect()
    }

    /// One poll of `follower` with the jobs last published; queues what it read. Returns how many records were
    /// queued.
    pub fn poll_once(&self, follower: &mut Follower) -> usize {
        let jobs = lock(&self.jobs).clone();
        let read = follower.poll(&jobs);
        let mut q = lock(&self.records);
        let room = self.capacity.saturating_sub(q.len());
        let over = read.len().saturating_sub(room);
        let queued = read.len() - over;
        q.extend(read.into_iter().take(queued));
        if over > 0 {
            self.metrics
                .inspector
                .dropped
                .with_label_values(&["queue_full"])
                .inc_by(over as u64);
        }
        queued
    }
}

/// Starts the follower's thread on `feed`, polling every `period`; it ends by itself once the feed is dropped
/// by its other owners (the handle may be dropped: the thread is detached).
pub fn spawn(
    feed: &Arc<InspectorFeed>,
    mut follower: Follower,
    period: Duration,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let weak: Weak<InspectorFeed> = Arc::downgrade(feed);
    std::thread::Builder::new()
        .name("commwatch-inspector".into())
        .spawn(move || {
            let mut idle = false;
            loop {
                if idle {
                    let Some(feed) = weak.upgrade() else { return };
                    if !feed.wait_for_jobs(IDLE_WAIT) {
                        // Still no job: poll once all the same (files of a job that just ended).
                        idle = feed.poll_once(&mut follower) == 0;
                        continue;
                    }
                }
                std::thread::sleep(period);
                let Some(feed) = weak.upgrade() else { return };
                let read = feed.poll_once(&mut follower);
                idle = read == 0 && !feed.wait_for_jobs(Duration::ZERO);
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_published_job_ends_the_idle_wait_at_once() {
        let feed = InspectorFeed::new(4, Arc::new(AgentMetrics::new()));
        assert!(!feed.wait_for_jobs(Duration::ZERO), "no job yet");
        let waiting = feed.clone();
        let waiter = std::thread::spawn(move || {
            let t = Instant::now();
            (waiting.wait_for_jobs(Duration::from_secs(60)), t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        let job = Job {
            id: "j".into(),
            ranks: Vec::new(),
            conflicts: Vec::new(),
        };
        feed.set_jobs(&[job]);
        let (runs_one, waited) = waiter.join().expect("the waiting thread");
        assert!(runs_one);
        assert!(waited < Duration::from_secs(30), "{waited:?}");
        assert!(
            feed.wait_for_jobs(Duration::from_secs(60)),
            "returns at once"
        );
    }
}
