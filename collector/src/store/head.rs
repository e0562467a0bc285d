//! The newest ticks of one node, row-major ([`Head`]): what a batch's ticks write in one place before they reach
//! their series' rings.
//!
//! Why: a tick carries a sample of hundreds of series. Pushing each into its series' ring touches every ring's
//! state once per tick (cache misses per sample at a few hundred nodes); writing the tick as one row and moving
//! rows into the rings later, series by series, touches each ring once per `FLUSH - KEEP_ROWS` (352) rows:
//! what it costs to reach its cold state and open bytes is shared by the run.
//!
//! A row is a tick's accepted samples: its tick number, its *shape* (the series slots in the order the values
//! come, shared by the rows with the same slots: a node's fast ticks all have one, its slow ticks another) and
//! its values. Rows are oldest first; [`Head::flush`] hands the oldest ones over to the caller, series by series,
//! in tick order, and drops them.
//!
//! Contract: every sample a row holds is newer (a higher tick number) than every sample of its series in the
//! rings, so a series' samples are its ring's followed by its head column ([`Head::column`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::OnceLock;

use super::prefetch::prefetch;

/// Rows that make the head flush (19.2 s of 20 Hz ticks; 6.9 s of a demo agent's 56 ticks a second, each
/// source stamping its own): a series' ring then takes the samples of 352 rows in one run, and what it costs
/// to reach its state and its open part's bytes, cold by then, is shared by as many. That reach is most of
/// what a run costs: most of a demo node's 1,485 series are read once a second and take 6 to 7 samples from
/// 352 rows, every series visited every 6.3 s. At 256 rows the store's apply of a demo agent's tape costs
/// 0.84× a sample of what it cost at 128 (medians; 0.78–0.91 in pairs, `measure::apply_cost`, BENCHMARKS.md);
/// at 384, 0.90× of what it cost at 256 (medians of 4, 60 s retention, alternated in one process), for 70 KB
/// more per node (1.65 to 1.72 MB: a larger head, and its rows' shapes). At 512, about 0.80×, for 134 KB more.
/// At 400 demo nodes the ingest stage's CPU per node and second was 0.81× of the base's with 384 rows, the
/// rings' compaction and fast rings keeping their open parts (that last since undone: it held the memory, not
/// the flush); the store's bytes there, read 45 s after start, were those of 256 rows within the runs' spread.
pub(super) const FLUSH: usize = 384;
/// Rows a flush keeps: the newest 1.6 s stay row-major, where a rate over the newest second reads them.
pub(super) const KEEP_ROWS: usize = 32;
/// Most rows a head holds while its flush waits for a reader of new samples (`NodeState::samples_after`):
/// about 14 s of a demo agent's 56 ticks a second.
pub(super) const HOLD_ROWS: usize = 2 * FLUSH;
/// Column of a slot a shape does not have.
const NONE: u32 = u32::MAX;
/// The hash of a shape no row holds ([`Head::hashes`]): a held one's has its low bit set.
const FREE: u64 = 0;
/// Rows a search for the first row after a tick walks back from the newest before it bisects: a reader of new
/// samples reads what came since its last read, the newest rows (about 28 of a demo agent's in a step engine's
/// half second), where a bisection of the held rows (up to [`HOLD_ROWS`]) misses the cache at each probe.
const WALK_BACK: usize = 64;

/// The hash of a row's slots after `slot` follows those hashed in `h` (0 before the first): one multiply a
/// sample, as the row's samples are pushed.
#[inline(always)]
fn hash_step(h: u64, slot: u32) -> u64 {
    (h ^ u64::from(slot)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A flush's regrouping: where each slot's samples start, and the samples by slot.
type Regrouped = (Vec<usize>, Vec<(i64, u64)>);

thread_local! {
    static SCRATCH: RefCell<Regrouped> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The series slots of a row, in the order of its values, and each slot's column.
///
/// A node's rows need not share shapes: an agent leaves out what it could not read, and the demo's agents send
/// a tick's samples in a set of their own nearly every tick (≈110 shapes held per node). So a shape costs the
/// ingest only its slots (taken over from the open row, not copied); the column by slot, a table as long as
/// the node's slots, is built by the first reader of the shape ([`Shape::col`]). Built on every new shape, that
/// table's zeroing and filling were 7 % of the collector at 600 demo nodes.
#[derive(Debug, Default)]
struct Shape {
    slots: Vec<u32>,
    /// Largest slot plus one (0: no slot).
    end: usize,
    /// Column by slot ([`NONE`]: not in this shape), built when first read.
    col: OnceLock<Vec<u32>>,
    /// Rows of this shape held.
    rows: usize,
}

impl Shape {
    /// A copy of `slots`, in its own buffer, cut back when it is more than twice as large as they need.
    /// (Taking the open row's buffer passed buffers sized for a node's largest tick around every shape: 0.27 MB
    /// of a demo node's head; a fresh buffer for each new shape, nearly every row of a demo node, cost an
    /// allocation and a free per row.)
    fn set(&mut self, slots: &[u32]) {
        self.slots.clear();
        self.slots.extend_from_slice(slots);
        if self.slots.capacity() > 2 * self.slots.len() + 64 {
            self.slots.shrink_to_fit();
        }
        self.end = self.slots.iter().max().map_or(0, |&m| m as usize + 1);
        self.col = OnceLock::new();
    }

    #[inline]
    fn col(&self, slot: usize) -> Option<usize> {
        let col = self.col.get_or_init(|| {
            let mut col = vec![NONE; self.end];
            for (c, &s) in self.slots.iter().enumerate() {
                col[s as usize] = c as u32;
            }
            col
        });
        match col.get(slot) {
            Some(&c) if c != NONE => Some(c as usize),
            _ => None,
        }
    }
}

/// The shape a row is guessed to have, and where its slots were when it was last seen: a hint for the
/// processor's cache only (a stale address is asked for in vain, never read).
#[derive(Debug, Clone, Copy)]
struct Guess {
    shape: u32,
    len: u32,
    slots: usize,
}

#[derive(Debug, Clone, Copy)]
struct Row {
    tick: i64,
    shape: u32,
    /// Index of its first value in `values`.
    start: usize,
}

/// One node's newest ticks, row-major.
#[derive(Debug, Default)]
pub(super) struct Head {
    rows: VecDeque<Row>,
    values: Vec<u64>,
    shapes: Vec<Shape>,
    /// The hash of each shape's slots ([`hash_step`], its low bit set), by shape ([`FREE`] for a shape no row
    /// holds): what a new row's shape is looked up by, in one compact array, before a shape's slots are
    /// compared, and where a new shape finds a free entry.
    hashes: Vec<u64>,
    /// By shape, the shape of the row that followed its latest row: the guess at the next row's.
    next: Vec<Option<Guess>>,
    /// The open row's tick and slots (values go straight to `values`), and the slots' hash.
    open: Option<i64>,
    open_slots: Vec<u32>,
    open_hash: u64,
    /// Shape of the latest row.
    last_shape: usize,
}

impl Head {
    /// Starts the row of tick `tick` (newer than every row held).
    ///
    /// The shape the row is guessed to have (the one that followed the latest row's shape last time: a demo
    /// agent's sources stamp their ticks in a cycle, and 7 rows in 10 follow as they did) and its slots are
    /// asked for from the memory now: when the row ends, its shape's look-up finds them in the cache. Each was
    /// a cache miss of its own, one after the other (the shape, then its slots), at every row.
    #[inline]
    pub(super) fn begin(&mut self, tick: i64) {
        debug_assert!(self.open.is_none());
        self.open = Some(tick);
        self.open_slots.clear();
        self.open_hash = 0;
        if let Some(Some(g)) = self.next.get(self.last_shape) {
            prefetch(
                self.shapes.as_ptr().wrapping_add(g.shape as usize),
                size_of::<Shape>(),
            );
            prefetch(g.slots as *const u32, 4 * g.len as usize);
        }
    }

    /// Appends a sample to the open row.
    #[inline]
    pub(super) fn push(&mut self, slot: u32, value: u64) {
        self.open_slots.push(slot);
        self.open_hash = hash_step(self.open_hash, slot);
        if self.values.len() == self.values.capacity() {
            self.grow();
        }
        self.values.push(value);
    }

    /// Room for more values: an eighth more (at least 1,024), not twice as many. The head's values peak at
    /// [`FLUSH`] rows and a few more, then stay there: doubling would leave up to twice that allocated for good
    /// (0.5 MB of a demo node's 5).
    #[inline(never)]
    fn grow(&mut self) {
        let len = self.values.len();
        self.values.reserve_exact((len / 8).max(1_024));
    }

    /// Closes the open row.
    pub(super) fn end(&mut self) {
        let Some(tick) = self.open.take() else {
            return;
        };
        let start = self.values.len() - self.open_slots.len();
        let shape = self.shape_of_open();
        self.shapes[shape].rows += 1;
        if let Some(n) = self.next.get_mut(self.last_shape) {
            let slots = &self.shapes[shape].slots;
            *n = Some(Guess {
                shape: shape as u32,
                len: slots.len() as u32,
                slots: slots.as_ptr() as usize,
            });
        }
        self.last_shape = shape;
        self.rows.push_back(Row {
            tick,
            shape: shape as u32,
            start,
        });
    }

    /// The shape of the open row's slots: the latest row's, another held one, or a new one. Shapes are looked up
    /// by their slots' hash first: a demo node's rows come in ≈110 shapes, nearly every row in another one than
    /// the row before, and comparing the slots of each held shape in turn (a cold shape each, and its slots)
    /// made closing a row cost a tenth of the store's apply (with the hash, a demo node's tape applies in 0.95×
    /// the time, in process).
    ///
    /// A held shape's hash is never [`FREE`], so the look-up reads no shape but those whose slots it compares.
    fn shape_of_open(&mut self) -> usize {
        let h = self.open_hash | 1;
        let same = |i: usize| self.shapes[i].slots == self.open_slots;
        let last = self.last_shape;
        if self.hashes.get(last) == Some(&h) && same(last) {
            return last;
        }
        let mut held = self.hashes.iter().enumerate().filter(|&(_, &x)| x == h);
        if let Some((i, _)) = held.find(|&(i, _)| same(i)) {
            return i;
        }
        let i = match self.hashes.iter().position(|&x| x == FREE) {
            Some(i) => i,
            None => {
                self.shapes.push(Shape::default());
                self.hashes.push(FREE);
                self.next.push(None);
                self.shapes.len() - 1
            }
        };
        self.shapes[i].set(&self.open_slots);
        self.hashes[i] = h;
        self.next[i] = None;
        i
    }

    /// Samples held.
    pub(super) fn samples(&self) -> usize {
        self.values.len()
    }

    /// Rows held.
    pub(super) fn rows(&self) -> usize {
        self.rows.len()
    }

    /// Tick of the oldest row held (`None`: no rows). Every sample in a series' ring is of an older tick.
    pub(super) fn first_tick(&self) -> Option<i64> {
        self.rows.front().map(|r| r.tick)
    }

    /// Rows of ticks up to `tick` (included).
    pub(super) fn rows_through(&self, tick: i64) -> usize {
        self.rows.partition_point(|r| r.tick <= tick)
    }

    /// Index of the first row of a tick after `after` ([`Head::rows_through`]), searched back from the newest
    /// row first ([`WALK_BACK`] rows), as a reader of new samples asks.
    fn first_after(&self, after: i64) -> usize {
        let n = self.rows.len();
        let mut back = self.rows.iter().rev().take(WALK_BACK);
        match back.position(|r| r.tick <= after) {
            Some(k) => n - k,
            None if n <= WALK_BACK => 0,
            None => self.rows.partition_point(|r| r.tick <= after),
        }
    }

    /// Hands each row of a tick after `after` to `to(tick, slots, values)`, oldest first (`values[k]` is
    /// `slots[k]`'s sample): a reader of what is new reads it row-major, without a walk per series.
    ///
    /// Each row's shape and every cache line of its slots are loaded first, in a loop of loads independent of
    /// one another: a demo node's rows come in ≈110 shapes, each in its own allocation and cold when a node is
    /// read once a second, and walked row by row each row waited on its shape's miss and then its slots'
    /// (the reader's largest cost in a profile at 2,000 demo nodes: issue 35). Overlapped here, the walk
    /// below finds them in cache.
    pub(super) fn rows_after(&self, after: i64, mut to: impl FnMut(i64, &[u32], &[u64])) {
        let rows = self.rows.range(self.first_after(after)..);
        let mut touched = 0u32;
        for r in rows.clone() {
            if let Some(s) = self.shapes.get(r.shape as usize) {
                // One slot a line (4 B a slot), and the last.
                touched = s.slots.iter().step_by(16).fold(touched, |t, &x| t ^ x);
                touched ^= s.slots.last().copied().unwrap_or(0);
            }
        }
        std::hint::black_box(touched);
        for r in rows {
            let slots = &self.shapes[r.shape as usize].slots;
            to(r.tick, slots, &self.values[r.start..r.start + slots.len()]);
        }
    }

    /// Hands the rows to `to(tick, slots, values)` newest first, as [`Head::rows_after`] does oldest first,
    /// until `to` returns `false`.
    pub(super) fn rows_newest_first(&self, mut to: impl FnMut(i64, &[u32], &[u64]) -> bool) {
        for r in self.rows.iter().rev() {
            let slots = &self.shapes[r.shape as usize].slots;
            if !to(r.tick, slots, &self.values[r.start..r.start + slots.len()]) {
                return;
            }
        }
    }

    /// The samples of `slot` in the rows, oldest first: `(tick, value)`.
    pub(super) fn column(&self, slot: usize) -> impl DoubleEndedIterator<Item = (i64, u64)> + '_ {
        self.rows.iter().filter_map(move |r| {
            let c = self.shapes[r.shape as usize].col(slot)?;
            Some((r.tick, self.values[r.start + c]))
        })
    }

    /// Hands the oldest `n` rows to `to(slot, samples)`, once per slot with samples in them (ascending slots,
    /// samples in tick order), and drops them. The rows are regrouped by slot in one counting pass and one
    /// scattering pass over their samples (a buffer per thread, reused).
    pub(super) fn flush(&mut self, n: usize, mut to: impl FnMut(usize, &[(i64, u64)])) {
        let n = n.min(self.rows.len());
        if n == 0 {
            return;
        }
        SCRATCH.with_borrow_mut(|(at, buf)| {
            let slots = self
                .rows
                .iter()
                .take(n)
                .map(|r| self.shapes[r.shape as usize].end);
            at.clear();
            at.resize(slots.max().unwrap_or(0) + 1, 0);
            // Counted by shape: rows that share one (an agent sending every series each tick) add its slots once.
            let mut counts = vec![0usize; self.shapes.len()];
            for r in self.rows.iter().take(n) {
                counts[r.shape as usize] += 1;
            }
            for (shape, &rows) in self.shapes.iter().zip(counts.iter()) {
                if rows > 0 {
                    for &s in &shape.slots {
                        at[s as usize + 1] += rows;
                    }
                }
            }
            for i in 1..at.len() {
                at[i] += at[i - 1];
            }
            // Every sample of the rows is written below: the buffer is grown, never cleared and filled with
            // zeros first (16 B a sample, a flush's largest write besides the samples').
            let total = at[at.len() - 1];
            if buf.len() < total {
                buf.resize(total, (0, 0));
            }
            let buf = &mut buf[..total];
            // `at[s]` is where slot `s` starts; as a cursor it ends where `s` ends, i.e. where `s + 1` starts.
            for r in self.rows.iter().take(n) {
                let shape = &self.shapes[r.shape as usize];
                let values = &self.values[r.start..r.start + shape.slots.len()];
                for (&s, &v) in shape.slots.iter().zip(values) {
                    buf[at[s as usize]] = (r.tick, v);
                    at[s as usize] += 1;
                }
            }
            let mut start = 0;
            for (slot, &end) in at.iter().enumerate().take(at.len() - 1) {
                if start < end {
                    to(slot, &buf[start..end]);
                }
                start = end;
            }
        });
        self.drop_front(n);
    }

    /// Drops the oldest `n` rows.
    fn drop_front(&mut self, n: usize) {
        for r in self.rows.drain(..n) {
            let shape = &mut self.shapes[r.shape as usize];
            shape.rows -= 1;
            if shape.rows == 0 {
                // Held by no row: its column table (as long as the node's slots) is freed; the entry and its
                // slots' buffer are reused by the next new shape.
                shape.col = OnceLock::new();
                self.hashes[r.shape as usize] = FREE;
            }
        }
        let cut = self.rows.front().map_or(self.values.len(), |r| r.start);
        self.values.drain(..cut);
        for r in &mut self.rows {
            r.start -= cut;
        }
    }

    /// Bytes allocated.
    pub(super) fn heap_bytes(&self) -> usize {
        self.rows.capacity() * std::mem::size_of::<Row>()
            + self.values.capacity() * 8
            + self.open_slots.capacity() * 4
            + self.hashes.capacity() * 8
            + self.next.capacity() * size_of::<Option<Guess>>()
            + self
                .shapes
                .iter()
                .map(|s| (s.slots.capacity() + s.col.get().map_or(0, Vec::capacity)) * 4)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(h: &mut Head, tick: i64, samples: &[(u32, u64)]) {
        h.begin(tick);
        for &(s, v) in samples {
            h.push(s, v);
        }
        h.end();
    }

    #[test]
    fn columns_and_flush_follow_the_rows() {
        let mut h = Head::default();
        row(&mut h, 0, &[(0, 10), (1, 11)]);
        row(&mut h, 1, &[(0, 20), (1, 21), (2, 22)]);
        row(&mut h, 2, &[(0, 30), (1, 31)]);
        row(&mut h, 3, &[(1, 41), (0, 40)]);
        assert_eq!(h.rows(), 4);
        // Rows 0 and 2 share a shape; row 3 has the same slots in another order: its own.
        assert_eq!(h.shapes.len(), 3);
        assert_eq!(
            h.column(0).collect::<Vec<_>>(),
            [(0, 10), (1, 20), (2, 30), (3, 40)]
        );
        assert_eq!(h.column(2).collect::<Vec<_>>(), [(1, 22)]);
        assert_eq!(h.column(1).next_back(), Some((3, 41)));
        assert_eq!(h.column(7).count(), 0);
        let mut got = Vec::new();
        h.flush(2, |slot, run| got.push((slot, run.to_vec())));
        assert_eq!(
            got,
            [
                (0, vec![(0, 10), (1, 20)]),
                (1, vec![(0, 11), (1, 21)]),
                (2, vec![(1, 22)])
            ]
        );
        assert_eq!(h.rows(), 2);
        assert_eq!(h.column(0).collect::<Vec<_>>(), [(2, 30), (3, 40)]);
        assert_eq!(h.values, [30, 31, 41, 40]);
        // The shape of row 1 is free again (no look-up finds it) and is reused by a new one.
        assert_eq!(h.hashes[1], FREE);
        assert_eq!(h.hashes.iter().filter(|&&x| x != FREE).count(), 2);
        row(&mut h, 4, &[(5, 50)]);
        assert_eq!(h.shapes.len(), 3);
        assert_eq!(h.column(5).collect::<Vec<_>>(), [(4, 50)]);
        // Its column table was built for row 1's slots when slot 2 was read: the new slots get a new one.
        assert_eq!(h.column(2).count(), 0);
        let mut n = 0;
        h.flush(h.rows(), |_, run| n += run.len());
        assert_eq!((n, h.rows(), h.values.len()), (5, 0, 0));
        assert!(h.heap_bytes() > 0);
    }

    #[test]
    fn rows_find_their_shapes_among_many() {
        use rand::rngs::StdRng;
        use rand::{Rng as _, SeedableRng};
        let mut rng = StdRng::seed_from_u64(3);
        // Twelve shapes: the same slots in other orders, subsets, an empty one.
        let pool: Vec<Vec<u32>> = (0..12u32)
            .map(|k| match k % 4 {
                0 => (0..k).collect(),
                1 => (0..k).rev().collect(),
                2 => (0..k).filter(|s| s % 2 == 0).collect(),
                _ => vec![k, 1, k + 7],
            })
            .collect();
        let mut h = Head::default();
        let mut model: VecDeque<(i64, Vec<(u32, u64)>)> = VecDeque::new();
        for tick in 0..2_000i64 {
            let slots = &pool[rng.random_range(0..pool.len())];
            let samples: Vec<(u32, u64)> = slots.iter().map(|&s| (s, rng.random())).collect();
            row(&mut h, tick, &samples);
            model.push_back((tick, samples));
            if rng.random_range(0..50) == 0 {
                let n = rng.random_range(0..=model.len());
                let mut got = Vec::new();
                h.flush(n, |slot, run| got.push((slot, run.to_vec())));
                let mut want: Vec<(usize, Vec<(i64, u64)>)> = Vec::new();
                for slot in 0..20u32 {
                    let run: Vec<_> = model
                        .iter()
                        .take(n)
                        .flat_map(|(t, r)| r.iter().filter(|x| x.0 == slot).map(|x| (*t, x.1)))
                        .collect();
                    if !run.is_empty() {
                        want.push((slot as usize, run));
                    }
                }
                assert_eq!(got, want, "flush of {n} at tick {tick}");
                model.drain(..n);
            }
            // Every row's slots and values as pushed, whichever shape holds them.
            let mut rows = Vec::new();
            h.rows_after(-1, |t, s, v| {
                rows.push((
                    t,
                    s.iter().copied().zip(v.iter().copied()).collect::<Vec<_>>(),
                ))
            });
            assert!(rows.iter().eq(model.iter()), "rows at tick {tick}");
            assert!(h.shapes.len() <= pool.len());
        }
    }

    #[test]
    fn rows_after_a_tick_are_the_newer_ones_row_major() {
        let mut h = Head::default();
        assert_eq!(h.first_tick(), None);
        row(&mut h, 3, &[(0, 30), (1, 31)]);
        row(&mut h, 5, &[(1, 51)]);
        row(&mut h, 6, &[(2, 62), (0, 60)]);
        assert_eq!(h.first_tick(), Some(3));
        let after = |t: i64| {
            let mut got = Vec::new();
            h.rows_after(t, |tick, slots, values| {
                got.push((tick, slots.to_vec(), values.to_vec()))
            });
            got
        };
        assert_eq!(
            after(4),
            [(5, vec![1], vec![51]), (6, vec![2, 0], vec![62, 60])]
        );
        assert_eq!(after(-1).len(), 3);
        assert!(after(6).is_empty());
        h.flush(1, |_, _| {});
        assert_eq!(h.first_tick(), Some(5));
    }

    #[test]
    fn the_first_row_after_a_tick_is_found_from_either_end() {
        let mut h = Head::default();
        assert_eq!(h.first_after(0), 0);
        // Ticks 0, 3, 6, ...: more rows than a walk back from the newest covers.
        for k in 0..3 * WALK_BACK as i64 {
            row(&mut h, 3 * k, &[(0, k as u64)]);
        }
        h.flush(5, |_, _| {});
        for after in -2..9 * WALK_BACK as i64 + 2 {
            let want = h.rows.iter().filter(|r| r.tick <= after).count();
            assert_eq!(h.first_after(after), want, "after {after}");
            assert_eq!(h.rows_through(after), want, "after {after}");
        }
    }

    #[test]
    fn an_empty_row_is_a_row_without_samples() {
        let mut h = Head::default();
        row(&mut h, 0, &[]);
        assert_eq!(h.rows(), 1);
        assert_eq!(h.column(0).count(), 0);
        let mut calls = 0;
        h.flush(1, |_, _| calls += 1);
        assert_eq!((calls, h.rows()), (0, 0));
    }
}
