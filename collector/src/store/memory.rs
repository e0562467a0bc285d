//! What a node's series hold, summed as the store's memory figures report it ([`SeriesMemory`]), kept up to
//! date as the rings change instead of walked at every scrape.
//!
//! Why: the walk read every ring of every node at each scrape, a cache miss or two a series (1,485 a demo node):
//! `NodeState::memory` was 6 % of the render thread at 400 demo nodes. The rings change only where the node
//! moves samples into them (a head's flush), drops their old chunks or resizes them (an inventory), and those
//! places read the ring's state anyway: each takes the ring's [`footprint`] before and after.

use super::ring::Ring;
use super::series::{Series, SeriesKey};

/// A ring's samples and the bytes it allocates ([`Ring::heap_bytes`]), as `(samples, bytes)`.
#[inline]
pub(super) fn footprint(r: &Ring) -> (usize, usize) {
    (r.len(), r.heap_bytes())
}

/// Bytes a series costs besides its ring's samples: its state, its ring's, its key's and the node's index entry
/// for it (an estimate of the allocations, fixed while the series exists).
fn fixed_bytes(s: &Series) -> usize {
    std::mem::size_of::<Series>()
        + std::mem::size_of::<Ring>()
        + std::mem::size_of::<SeriesKey>()
        + s.key.metric.capacity()
        + s
            .key
            .labels
            .iter()
            .map(|(k, v)| k.capacity() + v.capacity() + 48)
            .sum::<usize>()
        // The node's `by_key` entry.
        + 32
}

/// The sums over a node's series. Contract: equal to [`SeriesMemory::walk`] over the node's series whenever
/// every change to them went through [`SeriesMemory::add`] (a series taken in), [`SeriesMemory::track`] (a
/// ring changed) or a reset to the default (every series let go).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct SeriesMemory {
    pub(super) series: usize,
    /// Samples in the rings.
    pub(super) samples: usize,
    /// Bytes the rings allocate for samples.
    pub(super) ring_bytes: usize,
    /// Bytes of the series besides their samples ([`fixed_bytes`]).
    pub(super) fixed_bytes: usize,
}

impl SeriesMemory {
    /// The sums, from a walk over every series (what the kept ones are checked against).
    #[cfg(test)]
    pub(super) fn walk(series: &[Series]) -> SeriesMemory {
        let mut m = SeriesMemory::default();
        for s in series {
            m.add(s);
        }
        m
    }

    /// Counts a series taken in, with what its ring holds.
    pub(super) fn add(&mut self, s: &Series) {
        self.series += 1;
        self.fixed_bytes += fixed_bytes(s);
        self.track((0, 0), footprint(&s.ring));
    }

    /// Takes a ring's change: its [`footprint`] `before` and `after` it.
    #[inline]
    pub(super) fn track(&mut self, before: (usize, usize), after: (usize, usize)) {
        // Added first: the sums hold `before`, so they never go below zero on the way.
        self.samples = self.samples + after.0 - before.0;
        self.ring_bytes = self.ring_bytes + after.1 - before.1;
    }
}
