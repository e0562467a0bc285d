//! A node's log of things read incrementally by a later stage (step markers by the step engine, NCCL Inspector
//! records by the collectives stage): kept in the order they were applied, bounded by a count and by the
//! retention, each with a sequence number (0, 1, 2, … per node, never reused) so that a reader takes only what
//! is new since its last read ([`SeqLog::since`]). Entries come only from applied batches: a resent batch is a
//! duplicate and adds nothing.

use std::collections::VecDeque;

/// What a [`SeqLog`] holds: an entry with its arrival time and the heap bytes it owns beyond its own size.
pub trait Logged: Clone {
    /// When the collector received it (ns since the Unix epoch); retention counts from it.
    fn received_unix_ns(&self) -> i64;
    /// Heap bytes the entry owns (its strings), for the store's memory accounting.
    fn heap_extra(&self) -> usize;
}

/// At most `CAP` entries of `T`, oldest first.
#[derive(Debug)]
pub struct SeqLog<T, const CAP: usize> {
    buf: VecDeque<T>,
    /// Sequence number the next entry will get.
    next_seq: u64,
}

impl<T, const CAP: usize> Default for SeqLog<T, CAP> {
    fn default() -> Self {
        SeqLog {
            buf: VecDeque::new(),
            next_seq: 0,
        }
    }
}

impl<T: Logged, const CAP: usize> SeqLog<T, CAP> {
    /// Appends `e`, first evicting what is over `CAP` or older than `retention_ns` behind it.
    pub(super) fn push(&mut self, e: T, retention_ns: i64) {
        let horizon = e.received_unix_ns().saturating_sub(retention_ns);
        while let Some(front) = self.buf.front() {
            if self.buf.len() >= CAP || front.received_unix_ns() < horizon {
                self.buf.pop_front();
            } else {
                break;
            }
        }
        self.buf.push_back(e);
        self.next_seq += 1;
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Sequence number the next entry will get (= entries ever appended).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Copies of the entries with sequence number ≥ `from`, oldest first, and how many of those were already
    /// evicted (lost to the reader).
    pub fn since(&self, from: u64) -> (Vec<T>, u64) {
        let first = self.next_seq - self.buf.len() as u64;
        let lost = first.saturating_sub(from);
        let skip = from.saturating_sub(first) as usize;
        (self.buf.iter().skip(skip).cloned().collect(), lost)
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.buf.capacity() * std::mem::size_of::<T>()
            + self.buf.iter().map(Logged::heap_extra).sum::<usize>()
    }
}
