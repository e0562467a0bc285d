//! The newest samples of the series the step engine reads of one node, kept by the engine across passes
//! ([`Tails`]), so that a pass reads from the store only the samples new since the previous one.
//!
//! Why: each pass read every traffic series back to the inference's newest point, and each completed step
//! every figure link's series back to the step's start, through the store's `Samples` walk: a column walk
//! back through the node's head (each row's shape looked up, a cache miss a row), and where the span reached
//! past the head, a decode of the ring's open part. The same samples were walked pass after pass. Here the
//! store's new rows are read once, row-major ([`NodeState::samples_after_unmarked`]), into a small buffer per
//! read series, and the walks borrow those buffers in place ([`Tails::from`]: a contiguous slice, its start
//! guessed from the newest interval's spacing, which the step figures and the traffic sums read as they read
//! a copy of the store's samples).
//!
//! Contract: a tail is a suffix of its series' samples as [`NodeState::samples`] gives them (the same
//! `(timestamp_ns, value)`, in the same order: timestamps strictly ascending, as the store keeps them), as of
//! the latest [`Tails::read`]: samples of ticks the node no longer holds are dropped from its front as the
//! store drops them (with, where a clock went back, the samples stamped before the newest of those ticks: a
//! shorter suffix). A walk that would need a sample older than the tail holds answers `None`, and the caller
//! walks the store instead, so every answer is the store walk's. (A series whose ring drops samples by its
//! cap before their tick ages out, an agent sending much faster than it said, would break the suffix; tails
//! keep at most [`KEEP_NS`] of samples, far less than a ring holds.)

use std::collections::VecDeque;
use std::ops::Range;

use crate::store::prefetch::prefetch;
use crate::store::NodeState;

/// Most a tail keeps behind its newest sample, ns (the inference's window: no inferred step is longer).
pub const KEEP_NS: i64 = 30_000_000_000;
/// A tail keeps this long before the oldest time a walk is expected to start from ([`Tails::trim`]), ns.
pub const SLACK_NS: i64 = 2_000_000_000;
/// A tail's buffer is cut back when it is this many times larger than what it keeps (after a first read of
/// [`KEEP_NS`], or a pause): the buffer's live part moves through all of it, so its size is what a pass
/// touches.
const SHRINK_OVER: usize = 4;

/// One series' newest samples, oldest first, contiguous so that a walk borrows them: a buffer whose dropped
/// front is cut off (the kept samples moved to its start) once it is as long as what is kept, so that what
/// the tails of a node touch stays within about twice what they keep, and a drop costs a copy of about one
/// sample.
/// (Kept before in a ring buffer: a walk copied the samples it read out of it, a quarter of the engine's
/// time.)
#[derive(Debug, Default)]
#[repr(align(64))]
struct Tail {
    /// `(timestamp_ns, value)`: those from `start` on are kept, those before it dropped. (Without their tick
    /// numbers, which the store's evictions are read from ([`Tails::ticks`]): a second buffer written at each
    /// sample cost a tenth of the engine's time.)
    samples: Vec<(i64, u64)>,
    /// The newest sample's timestamp (when one is kept), and the interval between the two newest, ns (0:
    /// fewer than two read): where a walk guesses its start ([`Tail::newest_at_or_before`]) without reading
    /// the samples. (Narrow so that a tail is one cache line.)
    newest: i64,
    gap: u32,
    start: u32,
}

impl Tail {
    fn start(&self) -> usize {
        self.start as usize
    }

    /// The kept samples, oldest first.
    fn kept(&self) -> &[(i64, u64)] {
        &self.samples[self.start()..]
    }

    fn push(&mut self, t: i64, v: u64) {
        if !self.samples.is_empty() {
            self.gap = u32::try_from(t.saturating_sub(self.newest)).unwrap_or(u32::MAX);
        }
        self.newest = t;
        self.samples.push((t, v));
    }

    /// Index into `samples` of the newest kept sample stamped at or before `t` (`None`: none): from where
    /// the newest interval's spacing puts it, a step at a time to the answer. A pass's tails are out of the
    /// cache when its steps are completed: the guess touches about one cache line before the answer, where a
    /// walk back from the newest touched every sample after it (a few dozen), and a bisection's probes a line
    /// each.
    fn newest_at_or_before(&self, t: i64) -> Option<usize> {
        let mut k = self.guess(t)?;
        let (first, last) = (self.start(), self.samples.len() - 1);
        let s = &self.samples;
        if s[k].0 <= t {
            while k < last && s[k + 1].0 <= t {
                k += 1;
            }
            return Some(k);
        }
        while k > first && s[k].0 > t {
            k -= 1;
        }
        (s[k].0 <= t).then_some(k)
    }

    /// Where [`Tail::newest_at_or_before`] starts its walk to `t`: the index of a kept sample, from the newest
    /// interval's spacing (`None`: none kept).
    fn guess(&self, t: i64) -> Option<usize> {
        let last = self.samples.len().checked_sub(1)?;
        let first = self.start();
        if first > last {
            return None;
        }
        let behind = self.newest.saturating_sub(t).max(0);
        let back = match i64::from(self.gap) {
            0 => 0,
            gap => usize::try_from(behind / gap).unwrap_or(usize::MAX),
        };
        Some(last.saturating_sub(back).max(first))
    }

    /// Drops the `n` oldest kept samples (at most all).
    fn drop_front(&mut self, n: usize) {
        let start = (self.start() + n).min(self.samples.len());
        self.start = start as u32;
        if start > 0 && 2 * start >= self.samples.len() {
            self.cut();
        }
    }

    /// Moves the kept samples to the buffer's start; cuts the buffer back when much larger than they are.
    fn cut(&mut self) {
        self.samples.drain(..self.start());
        self.start = 0;
        let want = 2 * self.samples.len().max(16);
        if self.samples.capacity() > SHRINK_OVER * want {
            self.samples.shrink_to(want);
        }
    }

    /// Drops the samples stamped at or before `t`.
    fn drop_through(&mut self, t: i64) {
        if let Some(k) = self.newest_at_or_before(t) {
            self.drop_front(k + 1 - self.start());
        }
    }

    /// The oldest kept sample's timestamp (`None`: none kept).
    fn oldest_ns(&self) -> Option<i64> {
        self.kept().first().map(|s| s.0)
    }

    /// Drops samples from the front while the next one is stamped at or before `from`: a walk back from the
    /// newest to `from` or later stops at a kept sample.
    fn trim(&mut self, from: i64) {
        if let Some(k) = self.newest_at_or_before(from) {
            self.drop_front(k - self.start());
        }
        // Cut back when much larger than what it keeps.
        if self.samples.capacity() > SHRINK_OVER * 2 * self.kept().len().max(16) {
            self.cut();
        }
    }
}

/// Where the samples a walk reads lie: in a kept tail ([`Tails::from`]), valid until the tails' next
/// [`Tails::read`] or [`Tails::trim`]; or in a copy the caller made of the store's samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Held {
    /// `range` of the buffer of the tail at index `tail`.
    Tail { tail: usize, range: Range<usize> },
    /// `range` of the caller's copy.
    Copied(Range<usize>),
}

impl Held {
    /// Nothing (a series the node does not have).
    pub(super) const NONE: Held = Held::Copied(0..0);

    /// The samples, from `tails` or from the caller's `copied`.
    pub(super) fn get<'a>(&self, tails: &'a Tails, copied: &'a [(i64, u64)]) -> &'a [(i64, u64)] {
        match self {
            Held::Tail { tail, range } => &tails.tails[*tail].samples[range.clone()],
            Held::Copied(range) => &copied[range.clone()],
        }
    }
}

/// The kept samples of the series one node is read for, by slot.
#[derive(Debug, Default)]
pub(super) struct Tails {
    /// Per slot of the node: its tail's index plus one (0: the slot is not read).
    index: Vec<u32>,
    /// Per slot: whether it is read (what the store's read takes).
    wanted: Vec<bool>,
    tails: Vec<Tail>,
    /// The newest tick read (`None`: nothing read yet): the next read's start.
    after: Option<u64>,
    /// `(number, timestamp_ns)` of the ticks read whose samples a tail may still hold, ascending numbers:
    /// when the store drops ticks, the tails drop their samples stamped at or before the newest of those
    /// ticks' timestamps (all of those ticks' samples; more only where a clock went back, still a suffix).
    /// Ticks older than every tail's oldest sample are forgotten at each [`Tails::trim`].
    ticks: VecDeque<(u64, i64)>,
}

impl Tails {
    /// Reads `slots` from now on, from nothing: the next [`Tails::read`] reads all the store holds of them.
    pub(super) fn choose(&mut self, slots: impl IntoIterator<Item = usize>) {
        self.index.clear();
        self.wanted.clear();
        self.tails.clear();
        self.after = None;
        self.ticks.clear();
        for slot in slots {
            if slot >= self.index.len() {
                self.index.resize(slot + 1, 0);
                self.wanted.resize(slot + 1, false);
            }
            if self.index[slot] == 0 {
                self.tails.push(Tail::default());
                self.index[slot] = self.tails.len() as u32;
                self.wanted[slot] = true;
            }
        }
    }

    /// Appends the samples `n` took since the previous read (row-major from its head: what is new only), and
    /// drops those of ticks `n` no longer holds. `n` is the node whose layout the slots were chosen for.
    pub(super) fn read(&mut self, n: &NodeState) {
        // The first read goes back [`KEEP_NS`] only: a walk further back reads the store. So does a read
        // whose new samples begin further back than that (a pass far behind), from nothing: what it would
        // keep of them past [`KEEP_NS`] is dropped at the next trim.
        let keep_from = n.newest_byte_sample().map_or(i64::MIN, |t| t - KEEP_NS);
        // The oldest new tick stamped before that, or no longer held (not: not taken yet).
        let far = self.after.map(|a| a.saturating_add(1)).is_some_and(|a| {
            n.tick_time(a)
                .map_or(a < n.oldest_tick(), |t| t < keep_from)
        });
        if far {
            self.start_over();
        }
        let since = match self.after {
            None => keep_from,
            Some(_) => i64::MIN,
        };
        // Where each tail's next sample goes: cold, as at a walk ([`Tails::prefetch`]).
        for tail in &self.tails {
            prefetch(tail.samples.as_ptr().wrapping_add(tail.samples.len()), 1);
        }
        let (index, tails, ticks) = (&self.index, &mut self.tails, &mut self.ticks);
        let read_from = ticks.len();
        // Row-major from the head, the ticks come in order; from the rings, series after series.
        let mut in_order = true;
        let push = |slot: usize, tick: u64, t: i64, v: u64| {
            let Some(&i) = index.get(slot) else {
                return;
            };
            let Some(tail) = tails.get_mut((i as usize).wrapping_sub(1)) else {
                return;
            };
            tail.push(t, v);
            match ticks.back() {
                Some(&(k, _)) if k == tick => {}
                Some(&(k, _)) if k > tick => {
                    in_order = false;
                    ticks.push_back((tick, t));
                }
                _ => ticks.push_back((tick, t)),
            }
        };
        let newest = n.samples_after_unmarked(self.after, since, &self.wanted, push);
        if !in_order {
            // Every tick read now is newer than those read before.
            let mut new: Vec<(u64, i64)> = self.ticks.drain(read_from..).collect();
            new.sort_unstable();
            new.dedup_by_key(|k| k.0);
            self.ticks.extend(new);
        }
        if newest.is_some() {
            self.after = newest;
        }
        // The newest timestamp of the ticks the node no longer holds.
        let oldest = n.oldest_tick();
        let mut gone: Option<i64> = None;
        while let Some(&(_, t)) = self.ticks.front().filter(|f| f.0 < oldest) {
            gone = Some(gone.map_or(t, |g| g.max(t)));
            self.ticks.pop_front();
        }
        if let Some(t) = gone {
            for tail in &mut self.tails {
                tail.drop_through(t);
            }
        }
    }

    /// Drops every kept sample: the next [`Tails::read`] reads as the first did.
    fn start_over(&mut self) {
        for tail in &mut self.tails {
            tail.drop_front(tail.kept().len());
        }
        self.after = None;
        self.ticks.clear();
    }

    /// Asks for the cache line of each tail where a walk to `t` (Unix ns) starts
    /// ([`Tail::newest_at_or_before`]), ahead of the walks: a node's tails are cold when a pass comes back to
    /// it, each in memory of its own, and a walk of one tail after another waited on each miss in turn (the
    /// walks' largest cost at 200 nodes); asked for together, the misses overlap.
    pub(super) fn prefetch(&self, t: i64) {
        for tail in &self.tails {
            if let Some(k) = tail.guess(t) {
                prefetch(tail.samples.as_ptr().wrapping_add(k), 1);
            }
        }
    }

    /// Drops samples no walk from `from` (Unix ns) or later needs: of each tail, those before its last sample
    /// at or before `from` (a walk back from the newest stops there or later). Never keeps more than
    /// [`KEEP_NS`] behind a tail's newest sample.
    /// (Trimmed at every pass: trimmed only when grown by half, tails held more and a pass cost more, on the
    /// demo agent's tape and the synthetic node alike.)
    pub(super) fn trim(&mut self, from: i64) {
        self.prefetch(from);
        let mut oldest = i64::MAX;
        for tail in &mut self.tails {
            if tail.kept().is_empty() {
                continue;
            }
            tail.trim(from.max(tail.newest.saturating_sub(KEEP_NS)));
            oldest = oldest.min(tail.oldest_ns().unwrap_or(i64::MAX));
        }
        // No tail holds a sample of a tick stamped before every tail's oldest sample.
        while self.ticks.front().is_some_and(|k| k.1 < oldest) {
            self.ticks.pop_front();
        }
    }

    /// The kept samples of `slot`, oldest first (`None`: the slot is not read).
    #[cfg(test)]
    fn kept(&self, slot: usize) -> Option<&[(i64, u64)]> {
        let i = (*self.index.get(slot)? as usize).checked_sub(1)?;
        Some(self.tails[i].kept())
    }

    /// Samples kept, over all tails.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.tails.iter().map(|t| t.kept().len()).sum()
    }

    /// The tail of `slot` and its index (`None`: the slot is not read).
    fn tail(&self, slot: usize) -> Option<(usize, &Tail)> {
        let i = (*self.index.get(slot)? as usize).checked_sub(1)?;
        Some((i, self.tails.get(i)?))
    }

    /// Of `slot`'s samples, those from its last one at or before `from` to the newest, where they lie in its
    /// tail (the engine's `tail_from` over the store's samples); `None` when the tail does not reach back
    /// that far (or the slot is not read).
    pub(super) fn from(&self, slot: usize, from: i64) -> Option<Held> {
        let (i, tail) = self.tail(slot)?;
        let k = tail.newest_at_or_before(from)?;
        Some(Held::Tail {
            tail: i,
            range: k..tail.samples.len(),
        })
    }

    /// Of `slot`'s samples, those covering `[start, end]` (the last at or before `start` to the first at or
    /// after `end`: the engine's `covering` over the store's samples), where they lie in its tail; `None`
    /// when the tail does not reach back to a sample at or before `start` (or the slot is not read).
    pub(super) fn covering(&self, slot: usize, (start, end): (i64, i64)) -> Option<Held> {
        let (i, tail) = self.tail(slot)?;
        // As the store's walk back from the newest: it stops at the last sample at or before both edges.
        let k = tail.newest_at_or_before(start.min(end))?;
        // Up to the first at or after `end` (or the newest), forward over what the figures read next.
        let after = tail.samples[k..].iter().position(|s| s.0 >= end);
        let to = after.map_or(tail.samples.len(), |a| k + a + 1);
        Some(Held::Tail {
            tail: i,
            range: k..to,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::direct::DirectAgent;
    use crate::store::Store;
    use commwatch_proto::v1 as pb;
    use rand::{Rng, SeedableRng};
    use std::sync::Arc;
    use std::time::Duration;

    const TICK_NS: i64 = 50_000_000;

    /// A node of two links with byte counters: link 1's read at 20 Hz (each sample sometimes missing),
    /// link 2's once a second on a tick of their own; the store keeps `retention`.
    fn node(retention: Duration) -> (Arc<Store>, DirectAgent) {
        let store = Arc::new(Store::new(
            retention,
            Duration::from_secs(600),
            crate::config::Limits::default(),
        ));
        use super::super::fixtures::{bytes, hello_n1, link};
        let ib = pb::LinkClass::Infiniband;
        let tier = |id: u32| {
            if id <= 2 {
                pb::Tier::Fast
            } else {
                pb::Tier::Slow
            }
        };
        let hello = hello_n1(
            vec![
                link(1, ib, "mlx5_0", "1", ""),
                link(2, ib, "mlx5_1", "1", ""),
            ],
            (1..=4u32)
                .map(|id| {
                    let metric = ["tx_bytes", "rx_bytes"][id as usize % 2];
                    bytes(id, (id - 1) / 2 + 1, metric, tier(id))
                })
                .collect(),
        );
        let agent = DirectAgent::hello(store.clone(), hello, 0).expect("hello");
        (store, agent)
    }

    /// A batch of ticks `from..to`, the counters in `acc` (per series id - 1) growing at random.
    fn batch(
        r: &mut impl Rng,
        seq: u64,
        (from, to): (i64, i64),
        acc: &mut [u64],
    ) -> pb::SampleBatch {
        let mut b = pb::SampleBatch {
            seq,
            ..Default::default()
        };
        for t in from..to {
            let slow = t % 20 == 0;
            for (ids, at) in [(1..=2u32, t * TICK_NS), (3..=4, t * TICK_NS + 1_000_000)] {
                if ids.start() == &3 && !slow {
                    continue;
                }
                let before = b.series_ids.len();
                for id in ids {
                    if r.random_bool(0.1) {
                        continue;
                    }
                    acc[id as usize - 1] += r.random_range(0..1u64 << 30);
                    b.series_ids.push(id);
                    b.values.push(acc[id as usize - 1]);
                }
                if b.series_ids.len() > before {
                    b.timestamps_unix_ns.push(at);
                    b.tick_lengths.push((b.series_ids.len() - before) as u32);
                }
            }
        }
        b
    }

    /// The walk from a guessed start finds what a walk back from the newest finds, however the samples are
    /// spaced (the newest interval far shorter or longer than the others) and wherever the time lies.
    #[test]
    fn the_guessed_start_is_the_walk_backs() {
        let mut r = rand::rngs::StdRng::seed_from_u64(5);
        for _ in 0..500 {
            let mut tail = Tail::default();
            let mut t = r.random_range(-1_000..1_000i64);
            for k in 0..r.random_range(0..60u64) {
                t += if r.random_bool(0.2) {
                    r.random_range(1..500)
                } else {
                    r.random_range(1..5)
                };
                tail.push(t, k);
            }
            tail.drop_front(r.random_range(0..10));
            let walk_back = |tail: &Tail, at: i64| {
                let k = tail.kept().iter().rposition(|s| s.0 <= at)?;
                Some(tail.start() + k)
            };
            let mut times: Vec<i64> = (0..20).map(|_| r.random_range(-2_000..t + 100)).collect();
            times.extend([i64::MIN, i64::MAX, t]);
            for at in times {
                assert_eq!(
                    tail.newest_at_or_before(at),
                    walk_back(&tail, at),
                    "{at} {tail:?}"
                );
            }
        }
    }

    /// Tails read after batches of every size (a few ticks, and past the head's rows into the rings), over a
    /// store that drops old ticks, stay suffixes of the store's samples after every read and trim, and every
    /// walk they answer is the store's walk.
    #[test]
    fn tails_are_the_newest_samples_of_the_store_and_walk_as_it_does() {
        // A store that keeps less than a tail may, and one that keeps more (where a first read stops at
        // `KEEP_NS`).
        for (seed, retention_s) in [(7, 6), (8, 60)] {
            tails_follow_the_store(seed, Duration::from_secs(retention_s));
        }
    }

    fn tails_follow_the_store(seed: u64, retention: Duration) {
        let mut r = rand::rngs::StdRng::seed_from_u64(seed);
        let (store, mut agent) = node(retention);
        let mut tails = Tails::default();
        let slots: Vec<usize> = store
            .with_node("n1", |n| n.series().iter().map(|s| s.slot()).collect())
            .expect("node");
        tails.choose(slots.iter().copied());
        let (mut tick, mut acc, mut answered, mut forward, mut far) = (1i64, [0u64; 4], 0, 0, 0);
        for seq in 1..400u64 {
            if seq == 300 {
                // Chosen again (a new layout): read from nothing.
                tails.choose(slots.iter().copied());
            }
            // Now and then a gap longer than a tail keeps (a pass far behind): read from nothing.
            let k = if r.random_bool(0.02) {
                700
            } else if r.random_bool(0.05) {
                300
            } else {
                r.random_range(1..40)
            };
            let b = batch(&mut r, seq, (tick, tick + k), &mut acc);
            agent.batch(b, (tick + k) * TICK_NS).expect("batch");
            tick += k;
            store
                .with_node("n1", |n| {
                    tails.read(n);
                    let newest = (tick - 1) * TICK_NS;
                    if k == 700 {
                        // Read from nothing: no more than a tail keeps.
                        for s in n.series() {
                            let first = tails.kept(s.slot()).and_then(|k| k.first().copied());
                            assert!(first.is_none_or(|f| f.0 >= newest - KEEP_NS - TICK_NS));
                        }
                        far += 1;
                    }
                    if r.random_bool(0.5) {
                        tails.trim(newest - r.random_range(0..4_000_000_000));
                    }
                    for s in n.series() {
                        let all: Vec<(i64, u64)> = n.samples(s).iter().collect();
                        let kept = tails.kept(s.slot()).expect("read");
                        assert!(kept.len() <= all.len());
                        assert_eq!(kept, &all[all.len() - kept.len()..], "a suffix");
                        for _ in 0..8 {
                            let start = newest - r.random_range(-200_000_000..5_000_000_000);
                            let end = start + r.random_range(0..2_000_000_000);
                            // The store's forward read by time is its walk back, wherever `start` lies.
                            let far =
                                newest - r.random_range(0..retention.as_nanos() as i64 + TICK_NS);
                            for (a, b) in [(start, end), (far, far + (end - start)), (end, start)] {
                                let mut fwd = Vec::new();
                                let got = super::super::engine::covering_forward(
                                    n.samples(s).from_time(a.min(b)),
                                    a,
                                    b,
                                    &mut fwd,
                                );
                                let want =
                                    super::super::engine::covering(all.iter().copied(), a, b);
                                assert_eq!(&fwd[got], &want[..], "covering {a} {b}");
                                let mut fwd = Vec::new();
                                let got = super::super::engine::tail_from_forward(
                                    n.samples(s).from_time(a),
                                    a,
                                    &mut fwd,
                                );
                                let want = super::super::engine::tail_from(all.iter().copied(), a);
                                assert_eq!(&fwd[got], &want[..], "from {a}");
                                forward += 1;
                            }
                            let Some(held) = tails.from(s.slot(), start) else {
                                // Only when the tail does not reach back to `start`.
                                assert!(kept.first().is_none_or(|f| f.0 > start), "{start}");
                                continue;
                            };
                            let want = super::super::engine::tail_from(all.iter().copied(), start);
                            assert_eq!(held.get(&tails, &[]), &want[..]);
                            let want =
                                super::super::engine::covering(all.iter().copied(), start, end);
                            let held = tails.covering(s.slot(), (start, end)).expect("reaches");
                            assert_eq!(held.get(&tails, &[]), &want[..]);
                            answered += 1;
                        }
                    }
                })
                .expect("node");
        }
        assert!(
            answered > 1_000,
            "{answered} walks answered from the tails ({retention:?})"
        );
        assert!(tails.len() < 4 * 200, "trimmed: {}", tails.len());
        assert!(forward > 3_000, "{forward} forward reads");
        assert!(far > 2, "{far} reads after a gap longer than a tail keeps");
    }
}
