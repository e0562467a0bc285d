//! A node's NCCL Inspector records (one collective of one communicator on one rank), kept in the order they were
//! applied and read incrementally by the collectives stage (`crate::collectives`), as the step engine reads
//! markers. Bounded by [`MAX_COLLECTIVES_PER_NODE`] and by the retention; only applied batches add records, so a
//! resent batch adds nothing.

use std::sync::atomic::{AtomicU64, Ordering};

use commwatch_model::inspector::CollectiveRecord;

use super::seq_log::{Logged, SeqLog};

/// Batches with records applied to any node's log, in this process (every store's).
static APPENDED: AtomicU64 = AtomicU64::new(0);

/// How many batches with records were applied to any node's log so far: a reader that read every node's
/// new records after reading this number has nothing new to read while it stays the same (a record applied
/// meanwhile changes it). Counted for the whole process: another store's records make it move too, which costs
/// a reader one needless look, never a missed record.
pub fn appended() -> u64 {
    APPENDED.load(Ordering::Acquire)
}

/// Counts a batch whose records were just applied to a node's log ([`appended`]).
pub(super) fn note_appended() {
    APPENDED.fetch_add(1, Ordering::Release);
}

/// Most records one node keeps (8 ranks × 2 collectives per step × 3 steps/s: ~3 minutes; the collectives
/// stage reads them every few seconds).
pub const MAX_COLLECTIVES_PER_NODE: usize = 8_192;

/// One record as the collector holds it: the job and job rank of the process that wrote it, and when it came.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveEntry {
    pub job: String,
    pub job_rank: Option<u32>,
    /// `hostname` is the node's name.
    pub record: CollectiveRecord,
    pub received_unix_ns: i64,
}

/// A node's records in the order they were applied.
pub type CollectiveLog = SeqLog<CollectiveEntry, MAX_COLLECTIVES_PER_NODE>;

impl Logged for CollectiveEntry {
    fn received_unix_ns(&self) -> i64 {
        self.received_unix_ns
    }

    fn heap_extra(&self) -> usize {
        self.job.capacity()
            + self.record.comm_id.capacity()
            + self.record.collective.capacity()
            + self.record.hostname.capacity()
    }
}
