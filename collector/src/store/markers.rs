//! A node's step markers, kept in the order they were applied and read incrementally by the step engine.

use std::collections::VecDeque;

use super::Marker;

/// Most step markers one node keeps (at 2 markers per step and rank, 8 ranks and 3 steps/s: ~6 minutes).
pub const MAX_MARKERS_PER_NODE: usize = 16_384;

/// A node's step markers in the order they were applied (batch order, then arrival order within a batch),
/// bounded by [`MAX_MARKERS_PER_NODE`] and by the retention. Every marker gets a sequence number (0, 1, 2, ...
/// per node, never reused), so a reader can take only what is new since its last read ([`MarkerLog::since`]).
/// Markers come only from applied batches: a resent batch is a duplicate and adds nothing.
#[derive(Debug, Default)]
pub struct MarkerLog {
    buf: VecDeque<Marker>,
    /// Sequence number the next marker will get.
    next_seq: u64,
}

impl MarkerLog {
    pub(super) fn push(&mut self, m: Marker, retention_ns: i64) {
        let horizon = m.received_unix_ns.saturating_sub(retention_ns);
        while let Some(front) = self.buf.front() {
            if self.buf.len() >= MAX_MARKERS_PER_NODE || front.received_unix_ns < horizon {
                self.buf.pop_front();
            } else {
                break;
            }
        }
        self.buf.push_back(m);
        self.next_seq += 1;
    }

    /// Markers held.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Sequence number the next marker will get (= markers ever appended).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Copies of the markers with sequence number ≥ `from`, oldest first, and how many of those were already
    /// evicted (lost to the reader).
    pub fn since(&self, from: u64) -> (Vec<Marker>, u64) {
        let first = self.next_seq - self.buf.len() as u64;
        let lost = first.saturating_sub(from);
        let skip = from.saturating_sub(first) as usize;
        (self.buf.iter().skip(skip).cloned().collect(), lost)
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.buf.capacity() * std::mem::size_of::<Marker>()
            + self.buf.iter().map(|m| m.job.capacity()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StepPhase;

    const S: i64 = 1_000_000_000;

    fn marker(step: u64, t: i64) -> Marker {
        Marker {
            job: "j".into(),
            rank: 0,
            step,
            phase: StepPhase::End,
            sent_unix_ns: 0,
            received_unix_ns: t,
            samples: None,
        }
    }

    #[test]
    fn marker_log_is_bounded() {
        let mut log = MarkerLog::default();
        for i in 0..(MAX_MARKERS_PER_NODE as u64 + 10) {
            log.push(marker(i, S + i as i64), 600 * S);
        }
        assert_eq!(log.len(), MAX_MARKERS_PER_NODE);
        let (v, lost) = log.since(0);
        assert_eq!(lost, 10);
        assert_eq!(v[0].step, 10);
        // Older than the retention behind the newest: evicted.
        log.push(marker(99_999, 1_000 * S), 600 * S);
        assert_eq!(log.len(), 1);
    }
}
