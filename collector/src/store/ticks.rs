//! The timestamps of one node's ticks, held once and shared by its series ([`Ticks`]), and a series' samples
//! read through them ([`Samples`]).
//!
//! Every series of a tick was read at the tick's one timestamp, so a node keeps each tick's timestamp here,
//! numbered in arrival order, and a series' ring holds `(tick number, value)`. Consecutive tick numbers cost
//! no bits in a sealed chunk (a strict line), where a timestamp at ns precision with the sampler's jitter cost
//! about 20 bits per sample and series.
//!
//! Contract: after [`Ticks::push`] the node holds at most `cap` ticks and none stamped before `newest -
//! retention` (dropped from the front, oldest first, as a ring drops samples; timestamps are expected to
//! increase, and a tick that goes backwards is held in arrival order). Tick numbers start at 0 and never
//! repeat for the life of the node. A series' sample whose tick is no longer held is evicted with it
//! ([`Ticks::first`] is every ring's eviction horizon), so every held sample has its timestamp.

use std::collections::VecDeque;

use super::head::Head;
use super::ring::Ring;

/// The node's tick timestamps, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Ticks {
    /// Number of the tick `times[0]` (of the next tick when empty).
    first: u64,
    /// Unix ns of ticks `first..first + len`, in arrival order.
    times: VecDeque<i64>,
    cap: usize,
}

impl Ticks {
    /// No ticks yet; at most `cap` (≥ 2) held.
    pub fn new(cap: usize) -> Ticks {
        Ticks {
            first: 0,
            times: VecDeque::new(),
            cap: cap.max(2),
        }
    }

    /// Appends a tick stamped `ts` (Unix ns), drops the ticks stamped before `ts - retention_ns` and those over
    /// the cap, and returns the new tick's number.
    pub fn push(&mut self, ts: i64, retention_ns: i64) -> u64 {
        let horizon = ts.saturating_sub(retention_ns);
        while let Some(&t) = self.times.front() {
            if t < horizon || self.times.len() >= self.cap {
                self.times.pop_front();
                self.first += 1;
            } else {
                break;
            }
        }
        self.times.push_back(ts);
        self.next() - 1
    }

    /// Number of the oldest tick held: every series' samples of older ticks are evicted.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// Number the next tick will get.
    pub fn next(&self) -> u64 {
        self.first + self.times.len() as u64
    }

    /// The timestamp of tick `n`; `None` when it is not held.
    #[inline]
    pub fn time(&self, n: u64) -> Option<i64> {
        let i = usize::try_from(n.checked_sub(self.first)?).ok()?;
        self.times.get(i).copied()
    }

    /// Ticks held.
    pub fn len(&self) -> usize {
        self.times.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }

    /// Changes the bound; drops the oldest ticks if it shrank.
    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap.max(2);
        while self.times.len() > self.cap {
            self.times.pop_front();
            self.first += 1;
        }
        if self.times.capacity() > self.cap.saturating_mul(2) {
            self.times.shrink_to(self.cap);
        }
    }

    /// Bytes allocated for the timestamps.
    pub fn heap_bytes(&self) -> usize {
        self.times.capacity() * std::mem::size_of::<i64>()
    }
}

/// One series' samples as `(timestamp_ns, value)`, oldest first: its ring's `(tick, value)`, then its column
/// of the node's [`Head`] (the newest ticks), read through the node's [`Ticks`]. Values: reset-corrected
/// cumulative increase for counters, f64 bits for gauges.
#[derive(Clone, Copy)]
pub struct Samples<'a> {
    ring: &'a Ring,
    head: &'a Head,
    /// The series' slot in its node (its head column).
    slot: usize,
    ticks: &'a Ticks,
}

impl<'a> Samples<'a> {
    pub(super) fn new(
        ring: &'a Ring,
        head: &'a Head,
        slot: usize,
        ticks: &'a Ticks,
    ) -> Samples<'a> {
        Samples {
            ring,
            head,
            slot,
            ticks,
        }
    }

    /// Samples oldest first, in either direction.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (i64, u64)> + 'a {
        let ticks = self.ticks;
        self.ring
            .iter()
            .chain(self.head.column(self.slot))
            .filter_map(move |(n, v)| Some((ticks.time(n as u64)?, v)))
    }

    /// Samples oldest first, forward only, from one at or before the newest stamped at or before `t_ns` (from
    /// the oldest when none is): a read of the samples from time `t_ns` on, found by time (the head's first
    /// sample, then [`Ring::iter_at`]), so that its cost is the samples from
    /// there on and at most one part of the ring decoded before them, however far back `t_ns` lies. A
    /// series' timestamps ascend (the store keeps a sample only when newer than the series' previous one).
    pub fn from_time(&self, t_ns: i64) -> impl Iterator<Item = (i64, u64)> + 'a {
        let ticks = self.ticks;
        // Samples of ticks no longer held are older than any held.
        let before = move |n: i64| ticks.time(n as u64).is_none_or(|t| t <= t_ns);
        // The head's column found once (a slow series' first sample there may be many rows in).
        let mut head = self.head.column(self.slot).peekable();
        let in_head = head.peek().is_some_and(|s| before(s.0));
        let ring = (!in_head).then(|| self.ring.iter_at(before));
        ring.into_iter()
            .flatten()
            .chain(head)
            .filter_map(move |(n, v)| Some((ticks.time(n as u64)?, v)))
    }

    /// The newest sample.
    pub fn last(&self) -> Option<(i64, u64)> {
        self.iter().next_back()
    }

    /// Samples held (those of ticks no longer held among them, [`Samples::iter`] skips them: until the node's
    /// next flush of its head, and up to a chunk's worth per ring that its runs evict by whole chunks, see
    /// `Ring::extend_run`).
    pub fn len(&self) -> usize {
        self.ring.len() + self.head.column(self.slot).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Most samples the series keeps.
    pub fn cap(&self) -> usize {
        self.ring.cap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_numbered_and_bounded_by_time_and_cap() {
        let mut t = Ticks::new(4);
        assert_eq!((t.first(), t.next(), t.len()), (0, 0, 0));
        for (i, ts) in [10, 20, 30].into_iter().enumerate() {
            assert_eq!(t.push(ts, 100), i as u64);
        }
        assert_eq!(t.time(0), Some(10));
        assert_eq!(t.time(2), Some(30));
        assert_eq!(t.time(3), None);
        // Retention 15 at 40: 10 and 20 are older than 25.
        assert_eq!(t.push(40, 15), 3);
        assert_eq!((t.first(), t.len()), (2, 2));
        assert_eq!(t.time(1), None);
        assert_eq!(t.time(2), Some(30));
        // The cap keeps the newest four.
        for ts in 50..60 {
            t.push(ts, i64::MAX);
        }
        assert_eq!((t.first(), t.next(), t.len()), (10, 14, 4));
        assert_eq!(t.time(13), Some(59));
        t.set_cap(2);
        assert_eq!((t.first(), t.len()), (12, 2));
        assert!(t.heap_bytes() >= 2 * 8);
    }

    #[test]
    fn a_tick_going_backwards_is_kept_in_arrival_order() {
        let mut t = Ticks::new(100);
        t.push(1_000, 500);
        t.push(900, 500);
        t.push(1_100, 500);
        assert_eq!((t.first(), t.len()), (0, 3));
        // 1_600 - 500 = 1_100: the front (1_000) goes, then 900, which now leads.
        t.push(1_600, 500);
        assert_eq!(
            (t.first(), t.time(2), t.time(3)),
            (2, Some(1_100), Some(1_600))
        );
    }

    #[test]
    fn samples_read_their_ticks_times() {
        let mut t = Ticks::new(100);
        let mut r = Ring::new(100);
        for i in 0..300i64 {
            let n = t.push(1_000_000 + i * 50, 1_000);
            // The series misses every seventh tick.
            if i % 7 != 3 {
                r.push(n as i64, i as u64 * 10, i64::MAX);
            }
            r.evict_before(t.first() as i64);
        }
        let head = Head::default();
        let s = Samples::new(&r, &head, 0, &t);
        let got: Vec<_> = s.iter().collect();
        let want: Vec<_> = (0..300i64)
            .filter(|i| i % 7 != 3)
            .map(|i| (1_000_000 + i * 50, i as u64 * 10))
            .filter(|&(ts, _)| ts >= 1_000_000 + 299 * 50 - 1_000)
            .collect();
        assert_eq!(got, want);
        assert_eq!(s.len(), want.len());
        assert_eq!(s.last(), want.last().copied());
        let mut back: Vec<_> = s.iter().rev().collect();
        back.reverse();
        assert_eq!(back, want);
    }
}
