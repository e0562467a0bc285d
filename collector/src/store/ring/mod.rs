//! A bounded ring of `(timestamp_ns, value)` samples, held compressed. The store keys its series' samples by
//! their node's tick number instead of a timestamp (`super::ticks`): the ring is the same, and consecutive
//! ticks cost no bits (a strict period).
//!
//! Contract: after a push the ring holds at most `cap` samples and nothing older than `newest - retention`
//! (the oldest samples go first: a push drops from the front while the ring is full or the front sample is
//! older than the horizon). Iteration yields the samples oldest first, exactly as pushed (lossless), in either
//! direction. Timestamps are expected to increase; the ring stays exact when they do not. Runs
//! ([`Ring::extend_run`], a store's) evict by whole chunks instead: up to `CHUNK - 1` samples older than the
//! horizon stay at the front until their chunk goes, and the store's readers skip them.
//!
//! Layout, oldest to newest: sealed chunks of `CHUNK` (256) compressed samples; an open part of fewer than
//! `CHUNK` samples in a byte code appended one sample at a time (`open`: 1 byte for a strict period and an
//! unchanged value, a few more for a moving counter); and an uncompressed tail of the newest samples (at most
//! `keep`: 48 for a ring of more than 4,096 samples, as a 20 Hz series has; 8 for a smaller one, as a 1 Hz
//! series has; all of them for a ring of at most 160). A push appends to the tail; a full tail moves its older
//! half into the open part, which is sealed into a chunk when it holds `CHUNK` samples. The usual readers (a rate
//! over the newest second, a step engine's tail) walk the tail newest first without decoding anything; older
//! reads decode the open part or a chunk once per direction, forward in one pass. Eviction drops whole chunks
//! and hides the evicted part of the oldest chunk (or of the open part, when there is no chunk) behind a skip
//! count, so `len()` and iteration are exact; the hidden samples still cost memory until they are dropped
//! with their chunk (at most `CHUNK - 1` of them). A ring without chunks whose runs have hidden `COMPACT_AT` of
//! its open part's samples moves the visible ones' bytes to the part's front instead: a ring of fewer than
//! `CHUNK - COMPACT_AT` samples never seals a chunk that would hold no more than its few visible ones.
//!
//! Encoding of a chunk of `CHUNK` samples, bits packed least significant first:
//! - timestamps as residuals from a line: `t_k = base + k * step + r_k`, `step` the chunk's mean period, every
//!   `r_k ≥ 0` packed at the one width its largest needs. Independent jitter of ±j costs about
//!   `log2(2j)` bits per sample (±500 µs: 20 bits), a strict period 0 bits; any one timestamp is read in
//!   O(1). Or, when narrower, as steps (`t_k - t_{k-1}` less the smallest, the most common one as a single bit
//!   when that is shorter): a store's series read in two of every two or three of its node's ticks takes
//!   about 2 bits a sample, against 6 from the line; a timestamp is then read from the chunk's first;
//! - values, whichever is smallest for the chunk (one tag byte): frame-of-reference deltas (`v_k - v_{k-1} -
//!   min_delta`, packed at one width, less the low zero bits every one shares: a counter's steady increase
//!   costs the bits of its variation, a counter in KiB read as bytes 10 bits less, an idle counter or a
//!   constant gauge 0 bits), deltas of deltas (a counter in bursts at a steady rate: 1 bit a
//!   sample and a field per change of rate), or Gorilla-style XOR against the previous value (for gauges' f64
//!   bits: a repeated value costs 1 bit, a value sharing sign, exponent or trailing mantissa bits only the
//!   differing bits). All arithmetic wraps, so any `u64` values and `i64` timestamps round-trip exactly.
//!
//! Cost (`cargo bench -p commwatch-collector --bench ring`, figures in BENCHMARKS.md): a 20 Hz series at the
//! default retention (12,000 samples, timestamps with ±500 µs of jitter at ns precision) takes ≈6.3 B per sample
//! for a busy byte counter, ≈3.0 B for an idle counter or a constant gauge (2.5 B of it the timestamps' jitter),
//! ≈9.8 B for a gauge of random f64s, ≈0.5 B with a strict period and a constant increase; 16 B uncompressed.
//! These include the tail (768 B once full), the open part, the chunk list (16 B a chunk) and the chunks'
//! headers. A push appends to the tail and compares with one cached timestamp (≈40–80 ns over 1,000 rings,
//! with the rest amortized); every 24 pushes the tail's older half is coded into the open part; evicting reads
//! the oldest chunk once per `FRONT` (8) samples; every `CHUNK` pushes the open part is decoded and one chunk
//! encoded. An iterator walks the tail as the plain `VecDeque` it is (≈1–2 ns per sample) and decodes a chunk or
//! the open part once per direction (≈5–10 ns per sample walked).
//!
//! A store's rings take their samples in runs ([`Ring::extend_run`]): their node's head holds the newest ticks
//! row-major and hands each series its samples a few dozen at a time, straight into the open part, so their
//! tail stays empty, and the eviction compares one timestamp the ring keeps per run.
//!
//! Parts: the `chunk` module encodes and decodes a sealed chunk, the `bits` module holds the bit-level coding it
//! uses (packed fields, zigzag and varints, XOR), the `open` module the open part's byte code; this one holds
//! the ring: push, eviction and iteration.

mod bits;
mod chunk;
mod open;

use std::cell::RefCell;
use std::collections::VecDeque;

use chunk::{Chunk, CHUNK};
use open::Open;

/// Most samples the uncompressed tail holds in a ring of more than [`BIG_RING`] samples; it keeps at least
/// half of them (a rate over the newest second of a 20 Hz series reads 21).
const KEEP: usize = 48;
/// Most samples the tail holds in a smaller ring (a 1 Hz series: a rate reads 2).
const KEEP_SMALL: usize = 8;
/// Rings of more samples than this keep [`KEEP`] in their tail.
const BIG_RING: usize = 4_096;
/// Rings of at most this many samples keep them all in the tail, uncompressed.
const TAIL_ONLY: usize = CHUNK + 32;
/// Timestamps of the oldest chunk a ring keeps decoded for eviction.
const FRONT: usize = 8;
/// Hidden samples at which a ring without chunks compacts its open part when it drops its oldest samples
/// ([`Ring::drop_oldest`]): a ring of fewer than `CHUNK - COMPACT_AT` samples (a 1 Hz series at a retention
/// of a minute or two) then never seals one, and its part holds at most that many samples more than it shows.
const COMPACT_AT: usize = 32;

thread_local! {
    /// A seal's decoded samples: reused, not a fresh 4 KiB array set to zeros for every chunk.
    static SEAL: RefCell<Box<[(i64, u64); CHUNK]>> = RefCell::new(Box::new([(0, 0); CHUNK]));
}

/// One series' sample window.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    /// Sealed chunks, oldest first.
    chunks: VecDeque<Chunk>,
    /// Samples of the oldest chunk already evicted (0 without chunks).
    skip: usize,
    /// Samples after the chunks and before the tail (hidden ones only while there is no chunk).
    open: Open,
    /// The newest samples, uncompressed (at most [`Ring::keep`] after a push).
    tail: VecDeque<(i64, u64)>,
    /// Timestamps of samples `front_at..front_at + FRONT` of the oldest chunk (those it has; `front_at` =
    /// `CHUNK`: none), so that eviction reads that chunk once per `FRONT` samples evicted.
    front: [i64; FRONT],
    front_at: usize,
    /// Largest timestamp of the oldest chunk (`i64::MAX` without chunks): what [`Ring::drop_chunks_before`]
    /// compares without reading the chunk.
    front_max: i64,
    cap: usize,
    /// The chunks' encoded bytes, summed (kept at each seal and pop: a scrape reads every ring's size).
    chunk_bytes: usize,
}

impl Ring {
    /// An empty ring holding at most `cap` (≥ 2) samples.
    pub fn new(cap: usize) -> Ring {
        Ring {
            chunks: VecDeque::new(),
            skip: 0,
            open: Open::default(),
            tail: VecDeque::new(),
            front: [0; FRONT],
            front_at: CHUNK,
            front_max: i64::MAX,
            cap: cap.max(2),
            chunk_bytes: 0,
        }
    }

    /// Most samples this ring keeps.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Most samples the tail holds (it keeps at least half of them, or all when that is the cap).
    #[inline]
    fn keep(&self) -> usize {
        match self.cap {
            c if c <= TAIL_ONLY => c,
            c if c > BIG_RING => KEEP,
            _ => KEEP_SMALL,
        }
    }

    /// Most chunks a ring of `cap` samples can hold (visible ones plus a partly hidden oldest one).
    fn chunk_limit(&self) -> usize {
        self.cap / CHUNK + 2
    }

    /// Changes the bound; drops the oldest samples if it shrank.
    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap.max(2);
        self.drop_oldest(self.len().saturating_sub(self.cap));
        let tail_limit = self.keep().max(self.tail.len());
        if self.tail.capacity() > tail_limit {
            self.tail.shrink_to(tail_limit);
        }
        self.open.shrink();
        let chunk_limit = self.chunk_limit();
        if self.chunks.capacity() > chunk_limit {
            self.chunks.shrink_to(chunk_limit);
        }
    }

    /// Drops the `n` oldest samples (at most all of them), by count alone: whole chunks and the skip count
    /// without reading a timestamp, then the open part's (hidden by count, the part compacted once
    /// [`COMPACT_AT`] are hidden) and the tail's.
    fn drop_oldest(&mut self, mut n: usize) {
        while n > 0 {
            if self.chunks.is_empty() {
                let k = n.min(self.open.len());
                self.open.hide(k);
                n -= k;
                if self.open.hidden() >= COMPACT_AT {
                    self.open.compact();
                }
                let k = n.min(self.tail.len());
                self.tail.drain(..k);
                return;
            }
            let rest = CHUNK - self.skip;
            if n >= rest {
                self.pop_chunk();
                n -= rest;
            } else {
                self.skip += n;
                n = 0;
            }
        }
    }

    /// Appends a sample (timestamps are expected to increase) and evicts what fell out of `retention_ns`.
    #[inline]
    pub fn push(&mut self, ts: i64, value: u64, retention_ns: i64) {
        self.push_after(ts, value, ts.saturating_sub(retention_ns));
    }

    /// Appends a sample after evicting the samples before `horizon` (and the oldest one when full).
    #[inline]
    pub fn push_after(&mut self, ts: i64, value: u64, horizon: i64) {
        self.evict(horizon, self.cap);
        let keep = self.keep();
        if self.tail.len() >= keep {
            self.spill(keep);
        } else if self.tail.len() == self.tail.capacity() {
            // Grow geometrically but never past the tail's bound.
            let len = self.tail.len();
            let want = (len.max(4) * 2).min(keep);
            self.tail.reserve_exact(want.saturating_sub(len).max(1));
        }
        self.tail.push_back((ts, value));
    }

    /// Appends a run of samples (timestamps increasing, each at or after `horizon`) straight to the open part,
    /// after dropping the chunks older than `horizon` ([`Ring::drop_chunks_before`]) and as many of the oldest
    /// samples as the run needs room for (those chunks go even when the run is empty). For a ring whose newest
    /// samples are held elsewhere until they come in runs (a node's head): its tail stays empty, so the run goes
    /// after everything held.
    ///
    /// Unlike [`Ring::push`], this evicts by whole chunks: up to `CHUNK - 1` samples older than `horizon` stay
    /// at the front, in the oldest chunk (or the open part, while there is no chunk), until the last of
    /// their chunk is older too. They cost no memory that exact eviction would free (a chunk's bytes go with
    /// its last sample either way), and reading their timestamps is what exact eviction cost: a cache miss on
    /// the oldest chunk of every series at every run (≈13 % of the ingest at 600 demo nodes). A reader that
    /// needs the horizon drops them itself (the store's: its samples are keyed by tick number, and it skips
    /// the ticks no longer held). With a tail (samples pushed one by one), the run is pushed one by one.
    pub fn extend_run(&mut self, run: &[(i64, u64)], horizon: i64) {
        if !self.tail.is_empty() {
            self.drop_chunks_before(horizon);
            for &(t, v) in run {
                self.push_after(t, v, horizon);
            }
            return;
        }
        let run = &run[run.len().saturating_sub(self.cap)..];
        self.drop_chunks_before(horizon);
        self.drop_oldest((self.len() + run.len()).saturating_sub(self.cap));
        let mut run = run;
        while !run.is_empty() {
            let took = self.open.extend(run);
            if self.open.written() == CHUNK {
                self.seal(&run[..took]);
            }
            run = &run[took..];
        }
    }

    /// Drops the chunks whose every sample is older than `horizon`, oldest first, by the oldest one's largest
    /// timestamp (kept in the ring: no chunk's bytes are read but the next one's header when one goes).
    /// Samples before `horizon` in the chunk that stays, in the open part or in the tail stay too (see
    /// [`Ring::extend_run`]).
    #[inline]
    pub fn drop_chunks_before(&mut self, horizon: i64) {
        while !self.chunks.is_empty() && self.front_max < horizon {
            self.pop_chunk();
        }
    }

    /// Starts an empty ring that has no chunk, no open part and no tail with `first`, behind `phase % 255`
    /// hidden samples that go on the line from `second` (the series' next sample, or a guess at it) back through
    /// `first`: the ring then seals its chunks that many samples sooner, for good. Returns whether it did
    /// (`false`: the ring holds or held samples; nothing changed). The caller pushes what follows `first`.
    ///
    /// Why: series that start together (a node's, a fleet's) take samples in step, and sealing a chunk (decoding
    /// the open part, encoding `CHUNK` samples) costs microseconds a series; without a phase of their own every
    /// series of every node would seal in the same second, every `CHUNK` samples (12.8 s at 20 Hz, 256 s at
    /// 1 Hz). On the series' own line the hidden samples cost what its own samples cost in the first chunk (a
    /// constant period and increase cost nothing), and go with that chunk.
    pub fn start_staggered(&mut self, first: (i64, u64), second: (i64, u64), phase: u64) -> bool {
        if !self.chunks.is_empty() || self.open.written() > 0 || !self.tail.is_empty() {
            return false;
        }
        let k = phase % (CHUNK as u64 - 1);
        // A fresh part: its code starts from the default state, so the hidden samples seal as written.
        self.open = Open::default();
        let gap = second.0.wrapping_sub(first.0);
        let step = second.1.wrapping_sub(first.1);
        for j in (1..=k).rev() {
            let t = first.0.wrapping_sub(gap.wrapping_mul(j as i64));
            self.open
                .push(t, first.1.wrapping_sub(step.wrapping_mul(j)));
        }
        self.open.push(first.0, first.1);
        for _ in 0..k {
            self.open.pop_front();
        }
        true
    }

    /// Moves the tail's oldest samples into the open part until it holds half of `keep`, sealing the open part
    /// whenever it reaches `CHUNK` samples. Moving many at once touches the open part's bytes once for them.
    #[inline(never)]
    fn spill(&mut self, keep: usize) {
        while self.tail.len() > keep / 2 {
            let Some((t, v)) = self.tail.pop_front() else {
                return;
            };
            self.open.push(t, v);
            if self.open.written() == CHUNK {
                self.seal(&[(t, v)]);
            }
        }
    }

    /// Drops the samples older than `horizon` (none for the cap: the ring may stay full).
    #[inline]
    pub fn evict_before(&mut self, horizon: i64) {
        self.evict(horizon, self.cap + 1);
    }

    /// Drops from the front while the ring holds `keep` samples or more or the front sample is older than
    /// `horizon` (`keep` = the cap: room for one more).
    #[inline]
    fn evict(&mut self, horizon: i64, keep: usize) {
        while !self.chunks.is_empty() {
            let i = self.skip.wrapping_sub(self.front_at);
            let t = if i < FRONT {
                self.front[i]
            } else {
                match self.load_front(horizon, keep) {
                    Some(t) => t,
                    None => continue,
                }
            };
            if t >= horizon && self.len() < keep {
                return;
            }
            self.skip += 1;
            if self.skip == CHUNK {
                self.pop_chunk();
            }
        }
        if self.open.len() > 0 {
            self.evict_open(horizon, keep);
            if self.open.len() > 0 {
                return;
            }
        }
        while let Some(&(t, _)) = self.tail.front() {
            if t < horizon || self.tail.len() >= keep {
                self.tail.pop_front();
            } else {
                break;
            }
        }
    }

    /// Eviction's step through the open part, when there is no chunk.
    #[inline(never)]
    fn evict_open(&mut self, horizon: i64, keep: usize) {
        while let Some((t, _)) = self.open.first() {
            if t >= horizon && self.len() < keep {
                return;
            }
            self.open.pop_front();
        }
    }

    /// Reads the timestamps of the next [`FRONT`] samples of the oldest chunk into `front` and returns the
    /// first; or drops the rest of that chunk at once and returns `None` when all of it would go (over the cap,
    /// or older than `horizon`).
    #[inline(never)]
    fn load_front(&mut self, horizon: i64, keep: usize) -> Option<i64> {
        let c = &self.chunks[0];
        let rest = CHUNK - self.skip;
        if self.len() + 1 >= keep + rest || c.max_ts() < horizon {
            self.pop_chunk();
            return None;
        }
        let n = rest.min(FRONT);
        c.timestamps(self.skip, &mut self.front[..n]);
        self.front_at = self.skip;
        Some(self.front[0])
    }

    /// Drops the oldest chunk.
    fn pop_chunk(&mut self) {
        if let Some(c) = self.chunks.pop_front() {
            self.chunk_bytes -= c.encoded_len();
        }
        self.front_max = self.chunks.front().map_or(i64::MAX, Chunk::max_ts);
        self.skip = 0;
        self.front_at = CHUNK;
    }

    /// Seals the open part's `CHUNK` samples into a chunk. Its hidden samples (evicted while there was no
    /// chunk, or a staggered start's) become the chunk's hidden ones (`Open::decode_written_into`). `newest`:
    /// the samples appended last, as appended (they are copied, not decoded).
    #[inline(never)]
    fn seal(&mut self, newest: &[(i64, u64)]) {
        SEAL.with_borrow_mut(|s| self.seal_with(s, newest));
    }

    fn seal_with(&mut self, s: &mut [(i64, u64); CHUNK], newest: &[(i64, u64)]) {
        let hidden = self.open.hidden();
        self.open.decode_written_into(&mut s[..], newest);
        // A 20 Hz ring refills its part within seconds: it keeps the allocation (giving it back cost the
        // allocator a tenth of the ingest); a slower one holds a part for minutes, so it gives half of it back.
        if self.cap > BIG_RING {
            self.open.clear();
        } else {
            self.open.release();
        }
        if self.chunks.len() == self.chunks.capacity() {
            // Grow by an eighth (a chunk is sealed every `CHUNK` pushes: the copies are cheap), never past
            // the most the ring can hold.
            let len = self.chunks.len();
            let want = (len + len / 8).max(len + 2).min(self.chunk_limit());
            self.chunks.reserve_exact(want.saturating_sub(len).max(1));
        }
        if self.chunks.is_empty() {
            self.skip = hidden;
            self.front_at = CHUNK;
        }
        debug_assert!(hidden == 0 || self.skip == hidden);
        let chunk = Chunk::encode(s);
        if self.chunks.is_empty() {
            self.front_max = chunk.max_ts();
        }
        self.chunk_bytes += chunk.encoded_len();
        self.chunks.push_back(chunk);
    }

    /// Asks for the bytes the next run is appended to (a hint, for a walk over many rings: see
    /// `store::prefetch`).
    #[inline]
    pub(crate) fn prefetch_open(&self) {
        self.open.prefetch_end();
    }

    pub fn len(&self) -> usize {
        self.chunks.len() * CHUNK - self.skip + self.open.len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The newest sample.
    pub fn last(&self) -> Option<(i64, u64)> {
        match self.tail.back() {
            Some(&s) => Some(s),
            None => self.iter().next_back(),
        }
    }

    /// Samples oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (i64, u64)> + '_ {
        let sealed = Sealed {
            ring: self,
            front: 0,
            back: self.chunks.len() * CHUNK - self.skip + self.open.len(),
            fbuf: Decoded::default(),
            bbuf: Decoded::default(),
        };
        sealed.chain(self.tail.iter().copied())
    }

    /// Samples oldest first, forward only, from the newest whose timestamp `before` holds of (from the oldest
    /// when it holds of none): `before` is true of the oldest samples up to some one and false after it, as
    /// "stamped at or before a time" is of ascending timestamps. Found by time, not by a walk: the part that
    /// holds that sample from each part's first timestamp (a partition point over the sealed chunks, whose
    /// largest timestamp each keeps in its header; then the open part's, the tail's), that part decoded once
    /// and searched. A read from far back costs what it reads and one part's decoding, not a decoding of
    /// every chunk after it.
    pub fn iter_at(&self, before: impl Fn(i64) -> bool) -> impl Iterator<Item = (i64, u64)> + '_ {
        let p = self.seek(&before);
        let sealed = self.chunks.len() * CHUNK - self.skip + self.open.len();
        let mut front = Sealed {
            ring: self,
            front: p.min(sealed),
            back: sealed,
            fbuf: Decoded::default(),
            bbuf: Decoded::default(),
        };
        let mut tail = p.saturating_sub(sealed);
        if p < sealed {
            // The rest of the part at `p`, decoded (as the walk on would) and searched.
            let (c, k) = ((p + self.skip) / CHUNK, (p + self.skip) % CHUNK);
            front.fbuf.load(self, c);
            let rest = CHUNK.min(k + sealed - p);
            let j = front.fbuf.samples[k..rest].partition_point(|s| before(s.0));
            front.front = p + j.saturating_sub(1);
        } else {
            tail = self.tail.partition_point(|s| before(s.0)).saturating_sub(1);
        }
        front.chain(self.tail.iter().skip(tail).copied())
    }

    /// The position (0 = the oldest visible) of the first visible sample of the part that holds the newest
    /// sample `before` holds of (or of that sample, when it is the last of a chunk; 0 when `before` holds of
    /// none), from each part's first timestamp: [`Ring::iter_at`]'s start.
    fn seek(&self, before: &impl Fn(i64) -> bool) -> usize {
        let n = self.chunks.len();
        // Chunks whose every sample `before` holds of.
        let full = self.chunks.partition_point(|c| before(c.max_ts()));
        if full < n {
            let k = if full == 0 { self.skip } else { 0 };
            let mut t = [0i64; 1];
            self.chunks[full].timestamps(k, &mut t);
            let p = full * CHUNK + k - self.skip;
            return match (before(t[0]), full) {
                (true, _) => p,
                (false, 0) => 0,
                (false, _) => p - 1,
            };
        }
        let sealed = n * CHUNK - self.skip;
        let tail_at = sealed + self.open.len();
        match (self.tail.front(), self.open.first()) {
            (Some(&(t, _)), _) if before(t) => tail_at,
            (_, Some((t, _))) if before(t) => sealed,
            _ => sealed.saturating_sub(1),
        }
    }

    /// Bytes allocated for the samples: the tail, the open part, the chunk list and the chunks' encoded bytes.
    pub fn heap_bytes(&self) -> usize {
        self.heap_parts().iter().sum()
    }

    /// [`heap_bytes`](Self::heap_bytes) by part: `[tail, open part, chunk list, chunks' encoded bytes]`.
    pub fn heap_parts(&self) -> [usize; 4] {
        [
            self.tail.capacity() * std::mem::size_of::<(i64, u64)>(),
            self.open.heap_bytes(),
            self.chunks.capacity() * std::mem::size_of::<Chunk>(),
            self.chunk_bytes,
        ]
    }
}

/// One decoded chunk (or the open part), kept by an iterator for the next samples it walks.
#[derive(Default)]
struct Decoded {
    /// Index of the chunk held (the number of chunks: the open part).
    chunk: Option<usize>,
    samples: Vec<(i64, u64)>,
}

impl Decoded {
    #[inline]
    fn get(&mut self, ring: &Ring, c: usize, k: usize) -> (i64, u64) {
        if self.chunk != Some(c) {
            self.load(ring, c);
        }
        self.samples[k]
    }

    #[inline(never)]
    fn load(&mut self, ring: &Ring, c: usize) {
        self.samples.resize(CHUNK, (0, 0));
        match ring.chunks.get(c) {
            Some(chunk) => chunk.decode(&mut self.samples),
            None => ring.open.decode_into(&mut self.samples),
        }
        self.chunk = Some(c);
    }
}

/// The visible samples of the chunks and the open part, positions `front..back` (0 = the oldest visible);
/// each direction decodes its own chunk.
struct Sealed<'a> {
    ring: &'a Ring,
    front: usize,
    back: usize,
    fbuf: Decoded,
    bbuf: Decoded,
}

impl Iterator for Sealed<'_> {
    type Item = (i64, u64);

    #[inline]
    fn next(&mut self) -> Option<(i64, u64)> {
        if self.front >= self.back {
            return None;
        }
        let p = self.front + self.ring.skip;
        self.front += 1;
        Some(self.fbuf.get(self.ring, p / CHUNK, p % CHUNK))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.back - self.front;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for Sealed<'_> {
    #[inline]
    fn next_back(&mut self) -> Option<(i64, u64)> {
        if self.front >= self.back {
            return None;
        }
        self.back -= 1;
        let p = self.back + self.ring.skip;
        // The open part's newest sample is where its code ends: a walk from the newest (a rate's) starts
        // without decoding the part.
        if p + 1 == self.ring.chunks.len() * CHUNK + self.ring.open.len() {
            if let Some(last) = self.ring.open.last() {
                return Some(last);
            }
        }
        Some(self.bbuf.get(self.ring, p / CHUNK, p % CHUNK))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng as _, SeedableRng};

    #[test]
    fn bounded_by_cap_and_time() {
        let mut r = Ring::new(5);
        for i in 0..10 {
            r.push(i, i as u64, 1_000);
        }
        assert_eq!(r.len(), 5);
        assert_eq!(r.iter().next(), Some((5, 5)));
        assert!(r.heap_bytes() <= 16 * 8);
        let mut r = Ring::new(100);
        for i in 0..10 {
            r.push(i * 10, 0, 25);
        }
        // newest 90, horizon 65: keeps 70, 80, 90.
        assert_eq!(
            r.iter().map(|(t, _)| t).collect::<Vec<_>>(),
            vec![70, 80, 90]
        );
        assert_eq!(r.last(), Some((90, 0)));
    }

    #[test]
    fn capacity_never_exceeds_cap() {
        let mut r = Ring::new(1000);
        for i in 0..5000 {
            r.push(i, 0, i64::MAX);
        }
        assert_eq!(r.len(), 1000);
        assert!(r.heap_bytes() <= 1000 * 16 + 16, "{}", r.heap_bytes());
    }

    /// The uncompressed ring this one replaces, as the reference for eviction.
    struct Model {
        buf: VecDeque<(i64, u64)>,
        cap: usize,
    }

    impl Model {
        fn new(cap: usize) -> Model {
            Model {
                buf: VecDeque::new(),
                cap: cap.max(2),
            }
        }

        fn set_cap(&mut self, cap: usize) {
            self.cap = cap.max(2);
            while self.buf.len() > self.cap {
                self.buf.pop_front();
            }
        }

        fn evict_before(&mut self, horizon: i64) {
            while self.buf.front().is_some_and(|&(t, _)| t < horizon) {
                self.buf.pop_front();
            }
        }

        fn push(&mut self, ts: i64, value: u64, retention_ns: i64) {
            let horizon = ts.saturating_sub(retention_ns);
            while let Some(&(t, _)) = self.buf.front() {
                if t < horizon || self.buf.len() >= self.cap {
                    self.buf.pop_front();
                } else {
                    break;
                }
            }
            self.buf.push_back((ts, value));
        }
    }

    /// Everything observable about `r` equals `m`.
    fn check(r: &Ring, m: &Model, at: usize) {
        let sum: usize = r.chunks.iter().map(Chunk::encoded_len).sum();
        assert_eq!(r.chunk_bytes, sum, "chunk bytes at {at}");
        assert_eq!(r.len(), m.buf.len(), "len after push {at}");
        assert_eq!(r.is_empty(), m.buf.is_empty());
        assert_eq!(r.cap(), m.cap);
        assert_eq!(r.last(), m.buf.back().copied(), "last after push {at}");
        let got: Vec<_> = r.iter().collect();
        assert!(got.iter().eq(m.buf.iter()), "samples after push {at}");
        let mut back: Vec<_> = r.iter().rev().collect();
        back.reverse();
        assert_eq!(back, got, "reverse walk after push {at}");
        assert_eq!(r.iter().size_hint(), (got.len(), Some(got.len())));
    }

    /// Pushes `samples` into a ring as large as they are, with no time bound, checking it against the model
    /// after every push. Timestamps above 0 are all kept; they must come back exactly, both ways.
    fn round_trip(samples: &[(i64, u64)]) -> Ring {
        let (mut r, mut m) = (Ring::new(samples.len()), Model::new(samples.len()));
        for (i, &(t, v)) in samples.iter().enumerate() {
            r.push(t, v, i64::MAX);
            m.push(t, v, i64::MAX);
            if i % 97 == 0 {
                check(&r, &m, i);
            }
        }
        check(&r, &m, samples.len());
        if samples.iter().all(|s| s.0 >= 0) {
            assert_eq!(r.len(), samples.len());
        }
        r
    }

    /// 20 Hz timestamps with ±`jitter_ns`.
    fn jittered(rng: &mut StdRng, n: usize, jitter_ns: i64) -> Vec<i64> {
        (0..n as i64)
            .map(|i| {
                1_700_000_000_000_000_000
                    + i * 50_000_000
                    + rng.random_range(-jitter_ns..=jitter_ns)
            })
            .collect()
    }

    #[test]
    fn counters_round_trip() {
        let mut rng = StdRng::seed_from_u64(1);
        for (jitter, spread) in [
            (0, 0),
            (500, 10),
            (500_000, 1_000_000),
            (2_000_000, 1 << 40),
        ] {
            let ts = jittered(&mut rng, 3_000, jitter);
            let mut acc = 1u64 << 40;
            let s: Vec<_> = ts
                .iter()
                .map(|&t| {
                    acc += 5_000_000 + rng.random_range(0u64..spread + 1);
                    (t, acc)
                })
                .collect();
            let r = round_trip(&s);
            assert!(r.chunks.len() > 10);
        }
        // Idle, bursty (0 or 100 MB per tick), and a counter that wraps around u64.
        let ts = jittered(&mut rng, 2_000, 1_000);
        round_trip(&ts.iter().map(|&t| (t, 7)).collect::<Vec<_>>());
        let mut acc = 0u64;
        let bursty: Vec<_> = ts
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                acc += if i % 14 < 7 { 100_000_000 } else { 50_000 };
                (t, acc)
            })
            .collect();
        round_trip(&bursty);
        let mut acc = u64::MAX - 1_000_000_000;
        let wrapping: Vec<_> = ts
            .iter()
            .map(|&t| {
                acc = acc.wrapping_add(rng.random_range(0u64..10_000_000));
                (t, acc)
            })
            .collect();
        round_trip(&wrapping);
    }

    #[test]
    fn gauges_round_trip() {
        let mut rng = StdRng::seed_from_u64(2);
        let ts = jittered(&mut rng, 2_000, 300_000);
        let cases: Vec<Vec<u64>> = vec![
            // Random f64 bits, random finite f64 in a range, constants, NaNs and other special values.
            (0..2_000).map(|_| rng.random::<u64>()).collect(),
            (0..2_000)
                .map(|_| {
                    (40.0 + (rng.random::<u64>() >> 11) as f64 / (1u64 << 53) as f64 * 20.0)
                        .to_bits()
                })
                .collect(),
            vec![42.5f64.to_bits(); 2_000],
            vec![f64::NAN.to_bits(); 2_000],
            (0..2_000)
                .map(|i| match i % 7 {
                    0 => f64::NAN.to_bits(),
                    1 => 0x7FF0_0000_0000_0001, // signalling NaN
                    2 => 0xFFF8_0000_DEAD_BEEF, // negative NaN with a payload
                    3 => f64::INFINITY.to_bits(),
                    4 => (-0.0f64).to_bits(),
                    5 => f64::MIN_POSITIVE.to_bits(),
                    _ => f64::MAX.to_bits(),
                })
                .collect(),
            // Whole numbers that change now and then (a temperature), and a slow ramp.
            (0..2_000)
                .map(|i| (60.0 + (i / 97) as f64).to_bits())
                .collect(),
            (0..2_000).map(|i| (i as f64 * 0.25).to_bits()).collect(),
        ];
        for vals in cases {
            let s: Vec<_> = ts.iter().copied().zip(vals).collect();
            round_trip(&s);
        }
    }

    #[test]
    fn extreme_values_and_timestamps_round_trip() {
        let mut rng = StdRng::seed_from_u64(3);
        // Values jumping between the ends of u64, timestamps over the whole i64 range.
        let n = 1_000i64;
        let step = (i64::MAX / n) * 2;
        let s: Vec<_> = (0..n)
            .map(|i| {
                let t = (i128::from(i64::MIN) + i128::from(i) * i128::from(step)) as i64
                    + (rng.random::<u64>() % 1_000) as i64;
                let v = match i % 4 {
                    0 => 0,
                    1 => u64::MAX,
                    2 => rng.random::<u64>(),
                    _ => 1 << 63,
                };
                (t, v)
            })
            .collect();
        round_trip(&s);
        // The extreme timestamps themselves, and steps of more than i64::MAX.
        let mut s: Vec<(i64, u64)> = vec![(i64::MIN, u64::MAX), (i64::MIN + 1, 0)];
        for k in 0..300 {
            s.push((-1_000_000 + k, k as u64));
        }
        s.push((i64::MAX - 1, 1));
        s.push((i64::MAX, u64::MAX));
        round_trip(&s);
        // Random timestamps in random order: lossless whatever the order.
        let s: Vec<_> = (0..1_000)
            .map(|_| (rng.random::<u64>() as i64, rng.random::<u64>()))
            .collect();
        round_trip(&s);
    }

    #[test]
    fn eviction_matches_the_uncompressed_ring_after_every_push() {
        let mut rng = StdRng::seed_from_u64(4);
        let caps = [2, 5, 100, 160, 161, 300, 1_000];
        for scenario in 0..caps.len() * 8 {
            let cap = caps[scenario % caps.len()];
            let retention_kind = scenario / caps.len() % 4;
            let backwards = scenario / caps.len() >= 4;
            let (mut r, mut m) = (Ring::new(cap), Model::new(cap));
            let mut t = rng.random_range(0u64..1 << 40) as i64;
            for i in 0..2_500 {
                // Mostly periodic with jitter; now and then a gap, a burst of close samples, or (in half the
                // scenarios) a timestamp that goes backwards.
                t += match rng.random_range(0u64..100) {
                    0 => 5_000 + rng.random_range(0u64..50_000) as i64,
                    1..=3 => 1 + rng.random_range(0u64..5) as i64,
                    4 if backwards => -(rng.random_range(0u64..3_000) as i64),
                    _ => 100 + rng.random_range(-20..=20),
                };
                let v = match scenario % 3 {
                    0 => i as u64 * 1_000 + rng.random_range(0u64..100),
                    1 => rng.random::<u64>(),
                    _ => 3,
                };
                let retention = match retention_kind {
                    0 => i64::MAX,
                    1 => 20_000,
                    2 => 500 + rng.random_range(0u64..60_000) as i64,
                    _ => 1_000 * (1 + rng.random_range(0u64..3) as i64),
                };
                r.push(t, v, retention);
                m.push(t, v, retention);
                check(&r, &m, i);
                if rng.random_range(0u64..50) == 0 {
                    // The store's sweep: evict up to a horizon without a push (never for the cap).
                    let h = t - rng.random_range(0u64..5_000) as i64;
                    r.evict_before(h);
                    m.evict_before(h);
                    check(&r, &m, i);
                }
                if rng.random_range(0u64..400) == 0 {
                    let c = 2 + rng.random_range(0u64..1_500) as usize;
                    r.set_cap(c);
                    m.set_cap(c);
                    check(&r, &m, i);
                }
            }
        }
    }

    #[test]
    fn set_cap_shrinks_and_grows() {
        let (mut r, mut m) = (Ring::new(2_000), Model::new(2_000));
        for i in 0..1_500i64 {
            r.push(i * 10, i as u64, i64::MAX);
            m.push(i * 10, i as u64, i64::MAX);
        }
        let full = r.heap_bytes();
        // Into the middle of a chunk, onto a chunk boundary, into the head, then below the head's size.
        for cap in [1_000, 1_000 - 117, 600, 150, 40, 2] {
            r.set_cap(cap);
            m.set_cap(cap);
            check(&r, &m, 0);
            assert!(r.heap_bytes() < full);
        }
        assert!(
            r.heap_bytes() <= 16 * 2 + 2 * std::mem::size_of::<Chunk>(),
            "{}",
            r.heap_bytes()
        );
        r.set_cap(5_000);
        m.set_cap(5_000);
        for i in 1_500..4_000i64 {
            r.push(i * 10, i as u64, i64::MAX);
            m.push(i * 10, i as u64, i64::MAX);
        }
        check(&r, &m, 0);
        assert_eq!(r.len(), 2_502);
    }

    #[test]
    fn newest_first_from_runs_matches_the_samples_at_every_length() {
        // A ring fed in runs keeps no tail: its newest sample is the open part's code state, read without
        // decoding; the walk newest first must still give every sample once, in order, as the part fills, seals
        // and is evicted from, staggered or not.
        for phase in [None, Some(0), Some(7), Some(200)] {
            let mut rng = StdRng::seed_from_u64(9);
            let mut r = Ring::new(600);
            let mut all: Vec<(i64, u64)> = Vec::new();
            let mut t = 1_000;
            for round in 0..60 {
                let n = rng.random_range(1..40);
                let run: Vec<(i64, u64)> = (0..n)
                    .map(|_| {
                        t += 50;
                        (t, rng.random::<u64>() >> rng.random_range(0..64))
                    })
                    .collect();
                let mut rest = &run[..];
                if let (0, Some(p)) = (round, phase) {
                    if r.start_staggered(run[0], (run[0].0 + 50, run[0].1), p) {
                        rest = &run[1..];
                    }
                }
                r.extend_run(rest, i64::MIN);
                all.extend_from_slice(&run);
                let kept = &all[all.len().saturating_sub(600)..];
                let mut rev: Vec<_> = r.iter().rev().collect();
                rev.reverse();
                assert_eq!(rev, kept, "phase {phase:?} round {round}");
                assert_eq!(r.last(), kept.last().copied());
            }
        }
    }

    #[test]
    fn walks_both_ways_and_partly() {
        let mut rng = StdRng::seed_from_u64(5);
        let ts = jittered(&mut rng, 1_000, 1_000_000);
        let s: Vec<_> = ts.iter().map(|&t| (t, rng.random::<u64>() >> 20)).collect();
        let mut r = Ring::new(700);
        for &(t, v) in &s {
            r.push(t, v, i64::MAX);
        }
        let kept = &s[300..];
        let fwd: Vec<_> = r.iter().collect();
        assert_eq!(fwd, kept);
        let mut rev: Vec<_> = r.iter().rev().collect();
        rev.reverse();
        assert_eq!(rev, fwd);
        // Newest first until a time, as the readers walk: inside the head, across it into chunks.
        for secs in [0, 1, 2, 7, 20, 34, 40] {
            let since = kept.last().unwrap().0 - secs * 1_000_000_000;
            let mut w: Vec<_> = r.iter().rev().take_while(|s| s.0 >= since).collect();
            w.reverse();
            let want: Vec<_> = kept.iter().copied().filter(|s| s.0 >= since).collect();
            assert_eq!(w, want, "{secs} s");
        }
        // Both ends at once meet without losing or repeating a sample.
        for split in [0, 1, 69, 127, 128, 350, 699, 700] {
            let mut it = r.iter();
            let a: Vec<_> = it.by_ref().take(split).collect();
            let mut b: Vec<_> = it.rev().collect();
            b.reverse();
            assert_eq!([a, b].concat(), fwd, "split {split}");
        }
        let mut it = r.iter();
        let mut both = Vec::new();
        let mut back = Vec::new();
        loop {
            match (it.next(), it.next_back()) {
                (Some(x), Some(y)) => {
                    both.push(x);
                    back.push(y);
                }
                (Some(x), None) => both.push(x),
                (None, _) => break,
            }
        }
        back.reverse();
        both.extend(back);
        assert_eq!(both, fwd);
    }

    #[test]
    fn compressed_size_is_bounded() {
        let mut rng = StdRng::seed_from_u64(6);
        let bytes_per_sample = |ts: &[i64], vals: &mut dyn FnMut() -> u64| {
            let mut r = Ring::new(13_502);
            for &t in ts {
                r.push(t, vals(), 600_000_000_000);
            }
            assert_eq!(r.len(), 12_000);
            r.heap_bytes() as f64 / r.len() as f64
        };
        // Strictly periodic timestamps cost nothing beyond the chunk headers and the open head.
        let exact = jittered(&mut rng, 12_000, 0);
        let idle = bytes_per_sample(&exact, &mut || 12345);
        let constant = bytes_per_sample(&exact, &mut || 42.5f64.to_bits());
        let mut acc = 0u64;
        let regular = bytes_per_sample(&exact, &mut || {
            acc += 1_000_000;
            acc
        });
        assert!(
            idle < 0.8 && constant < 0.8 && regular < 0.8,
            "{idle} {constant} {regular}"
        );
        // ±500 µs of jitter at ns precision: ≈20 bits of timestamp per sample.
        let ts = jittered(&mut rng, 12_000, 500_000);
        let idle = bytes_per_sample(&ts, &mut || 12345);
        assert!(idle < 3.3, "{idle}");
        let counter = bytes_per_sample(&ts, &mut || {
            acc += 500_000_000 + rng.random_range(0u64..50_000_000);
            acc
        });
        assert!(counter < 7.0, "{counter}");
        // Incompressible values: the 8 B of the value, the timestamp's bits and a little more.
        let noisy = bytes_per_sample(&ts, &mut || rng.random::<u64>());
        assert!(noisy < 11.5, "{noisy}");
        // A small ring costs no more than uncompressed.
        let mut r = Ring::new(100);
        for i in 0..1_000 {
            r.push(i, rng.random::<u64>(), i64::MAX);
        }
        assert!(r.heap_bytes() <= 100 * 16, "{}", r.heap_bytes());
    }

    #[test]
    fn sparse_series_keep_a_short_tail_and_round_trip() {
        // A 1 Hz series keyed by its node's tick numbers (20 fast ticks a second, now and then a slow tick of
        // its own or a missed one), 10 minutes at the store's cap: a tail of 16, the rest coded.
        let mut rng = StdRng::seed_from_u64(8);
        let cap = 677;
        let (mut r, mut m) = (Ring::new(cap), Model::new(cap));
        let mut tick = 0i64;
        let mut acc = 0u64;
        for i in 0..5_000 {
            tick += 20 + rng.random_range(0i64..3) - 1;
            acc += if i % 9 == 0 {
                rng.random_range(0u64..1 << 20)
            } else {
                0
            };
            r.push(tick, acc, 12_000);
            m.push(tick, acc, 12_000);
            if i % 61 == 0 || i > 4_900 {
                check(&r, &m, i);
            }
            assert!(r.tail.len() <= KEEP_SMALL);
        }
        assert!(r.open.len() < CHUNK && !r.chunks.is_empty());
        // 600 samples: the tail, the open part and the chunks in far less than 16 B a sample.
        assert!(r.heap_bytes() < 600 * 4, "{}", r.heap_bytes());
    }

    #[test]
    fn a_read_by_time_starts_at_the_newest_sample_at_or_before_it() {
        // Rings fed one sample at a time (a tail) and by runs (none), evicted by time or by their cap, with
        // chunks or without; timestamps ascending, jittered.
        let mut rng = StdRng::seed_from_u64(17);
        for scenario in 0..16 {
            let cap = [100, 300, 2_900, 5_000][scenario % 4];
            let runs = scenario / 4 % 2 == 1;
            let span = [i64::MAX / 4, 20_000][scenario / 8];
            let mut r = Ring::new(cap);
            let mut t = rng.random_range(0i64..1 << 40);
            for round in 0..40 {
                let n = rng.random_range(1usize..=200);
                let run: Vec<(i64, u64)> = (0..n)
                    .map(|k| {
                        t += 1 + rng.random_range(0i64..20);
                        (t, (round * 1_000 + k) as u64)
                    })
                    .collect();
                let horizon = t.saturating_sub(span).min(run[0].0);
                if runs {
                    r.extend_run(&run, horizon);
                } else {
                    for &(ts, v) in &run {
                        r.push(ts, v, span);
                    }
                }
                let all: Vec<(i64, u64)> = r.iter().collect();
                let (Some(first), Some(last)) = (all.first(), all.last()) else {
                    continue;
                };
                let mut times: Vec<i64> = (0..12)
                    .map(|_| rng.random_range(first.0 - 30..last.0 + 30))
                    .collect();
                times.extend([i64::MIN, i64::MAX, first.0, last.0]);
                times.extend(all.iter().step_by(CHUNK / 2).map(|s| s.0));
                for at in times {
                    let p = r.seek(&|x| x <= at);
                    let newest = all.iter().rposition(|s| s.0 <= at).unwrap_or(0);
                    assert!(p <= newest, "scenario {scenario}: {p} after {newest}");
                    assert!(newest - p <= CHUNK, "scenario {scenario}: {p} .. {newest}");
                    assert!(
                        r.iter_at(|x| x <= at).eq(all[newest..].iter().copied()),
                        "scenario {scenario}, at {at}: from {newest}"
                    );
                }
            }
        }
    }

    #[test]
    fn runs_evict_by_whole_chunks_and_keep_what_one_by_one_keeps() {
        // A head's rings: runs of 1–120 samples, the horizon moving up, timestamps strict, jittered, or now and
        // then backwards; the cap binding in some scenarios, the horizon in others. Against a ring evicting
        // sample by sample: the same samples, after fewer than a chunk's worth of older ones; and no chunk kept
        // that exact eviction would have dropped.
        let mut rng = StdRng::seed_from_u64(11);
        for scenario in 0..24 {
            let cap = [300, 1_000, 2_900, 5_000][scenario % 4];
            let span = [i64::MAX / 4, 2_000, 40_000][scenario / 4 % 3];
            let backwards = scenario / 12 == 1;
            let (mut r, mut m) = (Ring::new(cap), Model::new(cap));
            let mut t = rng.random_range(0i64..1 << 40);
            let mut stale_seen = false;
            for round in 0..150 {
                let n = rng.random_range(1usize..=120);
                let run: Vec<(i64, u64)> = (0..n)
                    .map(|k| {
                        t += match rng.random_range(0u32..50) {
                            0 if backwards => -rng.random_range(0i64..40),
                            1 => 1 + rng.random_range(0i64..400),
                            _ if backwards => 10 + rng.random_range(-3i64..=3),
                            _ => 10,
                        };
                        (t, (round * 1_000 + k) as u64)
                    })
                    .collect();
                // Every sample of the run is at or after the horizon, as a head's are.
                let lowest = run.iter().map(|s| s.0).min().expect("a sample");
                let horizon = t.saturating_sub(span).min(lowest);
                r.extend_run(&run, horizon);
                m.evict_before(horizon);
                for &(ts, v) in &run {
                    m.push(ts, v, i64::MAX);
                }
                let got: Vec<_> = r.iter().collect();
                let want: Vec<_> = m.buf.iter().copied().collect();
                assert!(got.ends_with(&want), "scenario {scenario}, run {round}");
                let extra = got.len() - want.len();
                assert!(
                    extra < CHUNK,
                    "scenario {scenario}, run {round}: {extra} extra"
                );
                assert!(got[..extra].iter().all(|s| s.0 < horizon || backwards));
                stale_seen |= extra > 0;
                assert_eq!(r.len(), got.len());
                if let Some(c) = r.chunks.front() {
                    assert_eq!(r.front_max, c.max_ts());
                    assert!(
                        r.front_max >= horizon,
                        "a chunk older than the horizon kept"
                    );
                }
                let back: Vec<_> = r.iter().rev().collect();
                assert!(back.into_iter().rev().eq(got.iter().copied()));
            }
            if span / 10 < cap as i64 {
                // The horizon binds before the cap: stale samples wait for their chunk.
                assert!(stale_seen, "scenario {scenario} never kept a stale sample");
            }
        }
    }

    #[test]
    fn small_rings_fed_by_runs_compact_their_open_part_instead_of_sealing() {
        // A head's rings of fewer than `CHUNK` samples (a 1 Hz series at a short retention): runs of a few
        // samples, the cap binding. Against the ring evicting one by one, after every run.
        let mut rng = StdRng::seed_from_u64(12);
        for (cap, staggered) in [
            (2, false),
            (9, false),
            (69, false),
            (69, true),
            (150, true),
            (223, false),
            (240, false),
        ] {
            let (mut r, mut m) = (Ring::new(cap), Model::new(cap));
            let mut t = 1_000i64;
            if staggered {
                assert!(r.start_staggered((t, 5), (t + 50, 9), 200));
                m.push(t, 5, i64::MAX);
            }
            let mut most = 0;
            for round in 0..600 {
                let run: Vec<(i64, u64)> = (0..rng.random_range(1usize..=8))
                    .map(|_| {
                        t += 50 + rng.random_range(-3i64..=3);
                        (t, rng.random::<u64>() >> rng.random_range(0u32..64))
                    })
                    .collect();
                r.extend_run(&run, i64::MIN);
                for &(ts, v) in &run {
                    m.push(ts, v, i64::MAX);
                }
                check(&r, &m, round);
                if round >= 300 {
                    // Past a staggered start's hidden samples (sealed with the first chunk).
                    most = most.max(r.open.written());
                }
            }
            if cap + COMPACT_AT < CHUNK {
                assert!(r.chunks.is_empty() || staggered, "cap {cap}: sealed");
                assert!(most < cap + COMPACT_AT + 8, "cap {cap}: {most} written");
            }
        }
    }

    #[test]
    fn eviction_crosses_chunk_open_and_tail_boundaries() {
        // Horizons landing in the oldest chunk, on its end, in the open part, in the tail, past the newest.
        for cut in [
            0, 1, 127, 128, 129, 200, 255, 256, 300, 330, 347, 348, 360, 380,
        ] {
            let (mut r, mut m) = (Ring::new(20_000), Model::new(20_000));
            for i in 0..380i64 {
                r.push(i * 10, i as u64 * 3, i64::MAX);
                m.push(i * 10, i as u64 * 3, i64::MAX);
            }
            // 256 sealed, 80 open, 44 in the tail (it moves 24 to the open part each time it holds 48).
            assert_eq!(
                (r.chunks.len(), r.open.len(), r.tail.len()),
                (256 / CHUNK, 80, 44)
            );
            r.evict_before(cut * 10);
            m.evict_before(cut * 10);
            check(&r, &m, cut as usize);
            // Pushes after it seal the open part with whatever it hides.
            for i in 380..700i64 {
                r.push(i * 10, i as u64 * 3, i64::MAX);
                m.push(i * 10, i as u64 * 3, i64::MAX);
                if i % 13 == 0 {
                    check(&r, &m, i as usize);
                }
            }
            check(&r, &m, 700);
        }
    }

    #[test]
    fn eviction_into_the_open_part_seals_its_hidden_samples() {
        for shrink in [false, true] {
            let (mut r, mut m) = (Ring::new(1_000), Model::new(1_000));
            for i in 0..130i64 {
                r.push(i, i as u64, i64::MAX);
                m.push(i, i as u64, i64::MAX);
            }
            // No chunk yet: 124 samples in the open part, 6 in the tail (it moves 4 each time it holds 8).
            assert_eq!((r.chunks.len(), r.open.len(), r.tail.len()), (0, 124, 6));
            if shrink {
                r.set_cap(100);
                m.set_cap(100);
                check(&r, &m, 0);
                r.set_cap(1_000);
                m.set_cap(1_000);
            }
            // A horizon 40 samples back hides the open part's front; the next pushes fill it up and seal it.
            let mut sealed = false;
            for i in 130..600i64 {
                r.push(i, !(i as u64), 40);
                m.push(i, !(i as u64), 40);
                check(&r, &m, i as usize);
                if !sealed && !r.chunks.is_empty() {
                    // The first chunk hides what the open part hid.
                    assert!(r.skip > 80, "{}", r.skip);
                    sealed = true;
                }
            }
            assert!(sealed);
        }
    }

    #[test]
    fn random_pushes_match_a_vecdeque_at_every_size() {
        let mut rng = StdRng::seed_from_u64(9);
        for cap in [159, 161, 170, 677, 4_096, 4_097, 9_000] {
            let (mut r, mut m) = (Ring::new(cap), Model::new(cap));
            let mut t = 0i64;
            for i in 0..12_000usize {
                t += match rng.random_range(0u32..50) {
                    0 => -rng.random_range(0i64..100),
                    1 => rng.random_range(0i64..1 << 40),
                    _ => 1,
                };
                let v = rng.random::<u64>() >> rng.random_range(0u32..64);
                let retention = if i % 3_000 < 1_500 { i64::MAX } else { 2_000 };
                r.push(t, v, retention);
                m.push(t, v, retention);
                if i % 41 == 0 {
                    check(&r, &m, i);
                }
            }
            check(&r, &m, 12_000);
        }
    }

    #[test]
    fn a_staggered_start_seals_sooner_and_shows_only_what_was_pushed() {
        let mut rng = StdRng::seed_from_u64(11);
        for (cap, phase) in [
            (677, 0u64),
            (677, 100),
            (677, 254),
            (677, 255 + 7),
            (12_000, 200),
            (300, 3),
        ] {
            let (mut r, mut m) = (Ring::new(cap), Model::new(cap));
            let k = (phase % (CHUNK as u64 - 1)) as usize;
            assert!(r.start_staggered((1_000, 5), (1_001, 9), phase));
            m.push(1_000, 5, i64::MAX);
            check(&r, &m, 0);
            // Only once: a ring that holds a sample starts no more.
            assert!(!r.start_staggered((1_001, 6), (1_002, 7), phase));
            check(&r, &m, 0);
            // The first chunk seals with the hidden copies in it: `CHUNK - k` samples in all.
            let mut t = 1_000i64;
            let mut i = 1usize;
            while i < 3 * CHUNK {
                let n = rng.random_range(1usize..120);
                let run: Vec<(i64, u64)> = (0..n)
                    .map(|_| {
                        t += if rng.random_range(0u32..10) == 0 {
                            2
                        } else {
                            1
                        };
                        (t, rng.random::<u64>() >> rng.random_range(0u32..64))
                    })
                    .collect();
                let horizon = t - 400;
                // Runs evict by whole chunks; the rest as one by one, to compare with the model.
                r.extend_run(&run, horizon);
                r.evict_before(horizon);
                m.evict_before(horizon);
                for &(t, v) in &run {
                    m.push(t, v, i64::MAX);
                }
                m.evict_before(horizon);
                i += n;
                check(&r, &m, i);
                if i + k < CHUNK {
                    assert!(r.chunks.is_empty(), "sealed after {i} of phase {k}");
                }
            }
        }
        // Without eviction the first chunk seals exactly at the `CHUNK - k`-th sample pushed.
        for phase in [0u64, 1, 100, 254] {
            let k = phase as usize;
            let mut r = Ring::new(12_000);
            assert!(r.start_staggered((0, 9), (1, 10), phase));
            for t in 1..(CHUNK - k) as i64 {
                assert!(r.chunks.is_empty(), "phase {k}: sealed at {t}");
                r.extend_run(&[(t, 9 + t as u64)], i64::MIN);
            }
            assert_eq!((r.chunks.len(), r.len()), (1, CHUNK - k), "phase {k}");
            assert_eq!(r.iter().next(), Some((0, 9)));
            assert_eq!(
                r.last(),
                Some(((CHUNK - k - 1) as i64, (9 + CHUNK - k - 1) as u64))
            );
        }
    }

    #[test]
    fn a_staggered_start_on_the_series_line_costs_no_more_bytes() {
        // A counter at a steady rate, one tick apart: the hidden samples cost nothing more than its own.
        let run: Vec<(i64, u64)> = (0..3 * CHUNK as i64)
            .map(|t| (t, 1_000 * t as u64))
            .collect();
        let mut plain = Ring::new(12_000);
        plain.extend_run(&run, i64::MIN);
        for phase in [1u64, 100, 254] {
            let mut r = Ring::new(12_000);
            assert!(r.start_staggered(run[0], run[1], phase));
            r.extend_run(&run[1..], i64::MIN);
            assert_eq!(r.iter().collect::<Vec<_>>(), run);
            // Its first chunk (hidden samples and all) is coded as small as the plain ring's.
            // (Its header's varints may take a few bytes more: the line's start is further back.)
            let (a, b) = (r.chunks[0].encoded_len(), plain.chunks[0].encoded_len());
            assert!(a <= b + 16, "phase {phase}: {a} B staggered, {b} B plain");
        }
    }

    #[test]
    fn a_staggered_ring_emptied_before_its_first_seal_seals_what_it_holds() {
        let (mut r, mut m) = (Ring::new(12_000), Model::new(12_000));
        assert!(r.start_staggered((10, 100), (11, 110), 100));
        m.push(10, 100, i64::MAX);
        let early: Vec<(i64, u64)> = (11..20).map(|t| (t, 10 * t as u64)).collect();
        r.extend_run(&early, i64::MIN);
        early.iter().for_each(|&(t, v)| m.push(t, v, i64::MAX));
        // Everything older than 10,000 goes: the open part empties, its code restarts from its last sample.
        let late: Vec<(i64, u64)> = (10_000..10_000 + 2 * CHUNK as i64)
            .map(|t| (t, 7 * t as u64 + 3))
            .collect();
        r.evict_before(10_000);
        assert_eq!((r.len(), r.open.written()), (0, 0));
        r.extend_run(&late, 10_000);
        m.evict_before(10_000);
        late.iter().for_each(|&(t, v)| m.push(t, v, i64::MAX));
        assert!(!r.chunks.is_empty());
        check(&r, &m, late.len());
    }
}
