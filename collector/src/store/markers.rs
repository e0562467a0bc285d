//! A node's step markers, kept in the order they were applied and read incrementally by the step engine
//! (a [`SeqLog`]).

use super::seq_log::{Logged, SeqLog};
use super::Marker;

/// Most step markers one node keeps (at 2 markers per step and rank, 8 ranks and 3 steps/s: ~6 minutes).
pub const MAX_MARKERS_PER_NODE: usize = 16_384;

/// A node's step markers in the order they were applied (batch order, then arrival order within a batch).
pub type MarkerLog = SeqLog<Marker, MAX_MARKERS_PER_NODE>;

impl Logged for Marker {
    fn received_unix_ns(&self) -> i64 {
        self.received_unix_ns
    }

    fn heap_extra(&self) -> usize {
        self.job.capacity()
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
