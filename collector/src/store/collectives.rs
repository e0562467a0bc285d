//! A node's NCCL Inspector records (one collective of one communicator on one rank), kept in the order they were
//! applied and read incrementally by the collectives stage (`crate::collectives`), as the step engine reads
//! markers. Bounded by [`MAX_COLLECTIVES_PER_NODE`] and by the retention; only applied batches add records, so a
//! resent batch adds nothing.

use std::collections::VecDeque;

use commwatch_model::inspector::CollectiveRecord;

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

/// A node's records, each with a sequence number (0, 1, 2, … per node, never reused).
#[derive(Debug, Default)]
pub struct CollectiveLog {
    buf: VecDeque<CollectiveEntry>,
    next_seq: u64,
}

impl CollectiveLog {
    pub(super) fn push(&mut self, e: CollectiveEntry, retention_ns: i64) {
        let horizon = e.received_unix_ns.saturating_sub(retention_ns);
        while let Some(front) = self.buf.front() {
            if self.buf.len() >= MAX_COLLECTIVES_PER_NODE || front.received_unix_ns < horizon {
                self.buf.pop_front();
            } else {
                break;
            }
        }
        self.buf.push_back(e);
        self.next_seq += 1;
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Sequence number the next record will get (= records ever appended).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Copies of the records with sequence number ≥ `from`, oldest first, and how many of those were already
    /// evicted (lost to the reader).
    pub fn since(&self, from: u64) -> (Vec<CollectiveEntry>, u64) {
        let first = self.next_seq - self.buf.len() as u64;
        let lost = first.saturating_sub(from);
        let skip = from.saturating_sub(first) as usize;
        (self.buf.iter().skip(skip).cloned().collect(), lost)
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.buf.capacity() * std::mem::size_of::<CollectiveEntry>()
            + self
                .buf
                .iter()
                .map(|e| {
                    e.job.capacity()
                        + e.record.comm_id.capacity()
                        + e.record.collective.capacity()
                        + e.record.hostname.capacity()
                })
                .sum::<usize>()
    }
}
