//! The open part of a ring: the samples after its sealed chunks and before its uncompressed tail, appended one
//! at a time in a byte code that is read forward in one pass ([`Open`]). It holds fewer than `CHUNK` samples;
//! the ring seals them into a chunk when there are `CHUNK`.
//!
//! Code of one sample, against the sample before it (the previous one appended, or the state the part started
//! from): one header byte, then the timestamp's delta of delta (the gap minus the previous gap, zigzag, in 0,
//! 1, 2, 3, 4, 5, 6 or 8 little-endian bytes: header bits 5–7), then the value (header bits 0–3: 0 to 8 bytes;
//! bit 4: the value XOR the previous one, otherwise the zigzag of their difference), whichever of the two is
//! shorter. A strict period costs no timestamp byte, an unchanged value no value byte; all arithmetic wraps,
//! so any `i64` timestamps and `u64` values round-trip exactly.
//!
//! Evicting the oldest sample of the part moves a front cursor (one sample decoded); the bytes behind it stay
//! until the part is sealed (at most `CHUNK - 1` samples) or compacted ([`Open::compact`]). A ring's run hides
//! samples by count instead ([`Open::hide`]): the cursor catches up when the first visible sample is read.

use super::chunk::CHUNK;

/// Length code of a delta of delta of `n` significant bytes.
const DOD_CODE: [u8; 9] = [0, 1, 2, 3, 4, 5, 6, 7, 7];
/// Header bit of a value written as an XOR.
const XOR: u8 = 0x10;
/// Most bytes one sample takes.
const MAX_SAMPLE: usize = 1 + 8 + 8;

/// Where a reader of the code stands: the sample before the next one, and the gap before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct State {
    pub(super) t: i64,
    pub(super) v: u64,
    gap: i64,
}

impl State {
    /// Reads the sample at byte `pos` of `b` (returns the byte after it) and moves onto it. Always inlined: as a
    /// call, the decoding loops read the state back from memory as one 16-byte pair right after the call wrote
    /// it as 8-byte fields, and that read waited on the writes (three quarters of a seal's time besides its
    /// encoding).
    #[inline(always)]
    fn step(&mut self, b: &[u8], pos: usize) -> usize {
        let h = b[pos];
        let mut p = pos + 1;
        let dn = dod_len(h >> 5);
        let dod = read_le(b, p, dn);
        p += dn;
        let vn = usize::from(h & 15);
        let x = read_le(b, p, vn);
        p += vn;
        self.gap = self.gap.wrapping_add(unzigzag(dod));
        self.t = self.t.wrapping_add(self.gap);
        self.v = if h & XOR != 0 {
            self.v ^ x
        } else {
            self.v.wrapping_add(unzigzag(x) as u64)
        };
        p
    }
}

/// Samples after the sealed chunks, before the tail.
#[derive(Debug, Clone, Default)]
pub(super) struct Open {
    bytes: Vec<u8>,
    /// Samples written (hidden ones included), fewer than `CHUNK`.
    n: u16,
    /// Samples at the front already evicted.
    skip: u16,
    /// Byte of the sample after `front` (below `CHUNK * MAX_SAMPLE`, 4,352).
    pos: u16,
    /// Hidden samples (counted in `skip`) that `front` and `pos` are still before: [`Open::hide`] counts them
    /// without reading their bytes, a reader steps over them ([`Open::seek`]).
    lag: u16,
    /// The part was cleared: its code goes on from a sample before it, so its hidden samples cannot be read
    /// from its first byte (a part never cleared starts from the default state).
    cleared: bool,
    /// State before the first visible sample (before the `lag` samples ahead of it).
    front: State,
    /// State after the last sample.
    back: State,
}

impl Open {
    /// Samples written, hidden ones included.
    #[inline]
    pub(super) fn written(&self) -> usize {
        usize::from(self.n)
    }

    /// Samples evicted from the front but still written.
    pub(super) fn hidden(&self) -> usize {
        usize::from(self.skip)
    }

    /// Samples visible.
    #[inline]
    pub(super) fn len(&self) -> usize {
        usize::from(self.n - self.skip)
    }

    /// Bytes allocated.
    pub(super) fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
    }

    /// Asks for the bytes the next sample is appended to (a hint: see `store::prefetch`).
    #[inline]
    pub(super) fn prefetch_end(&self) {
        let end = self.bytes.as_ptr().wrapping_add(self.bytes.len());
        crate::store::prefetch::prefetch(end, MAX_SAMPLE);
    }

    /// Appends a sample.
    #[inline]
    pub(super) fn push(&mut self, t: i64, v: u64) {
        debug_assert!(self.written() < CHUNK);
        let mut b = self.back;
        self.append(&mut b, t, v);
        self.back = b;
        self.n += 1;
    }

    /// Appends the samples of `run` until the part holds `CHUNK` samples; returns how many it took. The same
    /// code as [`Open::push`] one by one, with the code's state kept in registers through the run (a call per
    /// sample stored and reloaded it, and saved and restored the registers: with a run at a time, a demo
    /// node's tape applies in 0.96× the time, in process), coded into a buffer of the thread's and appended
    /// to the part's bytes in one copy (written into the part sample by sample, each sample reloaded the
    /// part's length and checked its room after the writes before it).
    pub(super) fn extend(&mut self, run: &[(i64, u64)]) -> usize {
        let take = run.len().min(CHUNK - self.written());
        RUN.with_borrow_mut(|buf| {
            let mut b = self.back;
            let mut p = 0;
            for &(t, v) in &run[..take] {
                let (code, last, len) = code(&mut b, t, v);
                buf[p..p + 16].copy_from_slice(&code.to_le_bytes());
                buf[p + 16] = last;
                p += len;
            }
            self.back = b;
            if self.bytes.capacity() - self.bytes.len() < p {
                self.grow(p);
            }
            self.bytes.extend_from_slice(&buf[..p]);
        });
        self.n += take as u16;
        take
    }

    /// Appends the code of `(t, v)` against `b`, the sample before it, and moves `b` onto it.
    #[inline(always)]
    fn append(&mut self, b: &mut State, t: i64, v: u64) {
        let (code, last, len) = code(b, t, v);
        let at = self.bytes.len();
        if self.bytes.capacity() - at < MAX_SAMPLE {
            self.grow(MAX_SAMPLE);
        }
        // Appended as two whole words (no call to copy a length only known here), then the length cut to the
        // bytes that count. Only a sample of 8 bytes of timestamp and 8 of value has a 17th byte.
        self.bytes.extend_from_slice(&(code as u64).to_le_bytes());
        self.bytes
            .extend_from_slice(&((code >> 64) as u64).to_le_bytes());
        if len == MAX_SAMPLE {
            self.bytes.push(last);
        }
        self.bytes.truncate(at + len);
    }

    /// Room for at least `more` more bytes: grows by half, from 48 bytes (a part keeps its allocation when
    /// cleared, or gives half of it back: [`Open::release`]).
    #[inline(never)]
    fn grow(&mut self, more: usize) {
        let cap = self.bytes.capacity();
        let want = (cap + cap / 2).max(48).max(self.bytes.len() + more);
        self.bytes.reserve_exact(want - self.bytes.len());
    }

    /// The state before the first visible sample and that sample's byte: `front` and `pos` past the lagging
    /// hidden samples.
    #[inline]
    fn seek(&self) -> (State, usize) {
        let mut s = self.front;
        let mut p = self.pos as usize;
        for _ in 0..self.lag {
            p = s.step(&self.bytes, p);
        }
        (s, p)
    }

    /// Moves `front` and `pos` past the lagging hidden samples.
    fn settle(&mut self) {
        if self.lag > 0 {
            let (s, p) = self.seek();
            (self.front, self.pos, self.lag) = (s, p as u16, 0);
        }
    }

    /// The oldest visible sample.
    #[inline]
    pub(super) fn first(&self) -> Option<(i64, u64)> {
        if self.n == self.skip {
            return None;
        }
        let (mut s, p) = self.seek();
        s.step(&self.bytes, p);
        Some((s.t, s.v))
    }

    /// The newest visible sample: the state the code ends in (nothing to decode).
    #[inline]
    pub(super) fn last(&self) -> Option<(i64, u64)> {
        (self.n > self.skip).then_some((self.back.t, self.back.v))
    }

    /// Hides the oldest visible sample; empties the part once none is visible.
    #[inline]
    pub(super) fn pop_front(&mut self) {
        if self.n == self.skip {
            return;
        }
        self.settle();
        self.pos = self.front.step(&self.bytes, self.pos as usize) as u16;
        self.skip += 1;
        if self.skip == self.n {
            self.clear();
        }
    }

    /// Hides the `k` oldest visible samples (all of them when fewer), as [`Open::pop_front`] `k` times, without
    /// reading their bytes: a ring that drops its oldest samples at every run (a series read once a second,
    /// whose ring has no chunk) touches only its part's end, not its cold front as well.
    pub(super) fn hide(&mut self, k: usize) {
        let k = k.min(self.len()) as u16;
        if k == 0 {
            return;
        }
        self.skip += k;
        self.lag += k;
        if self.skip == self.n {
            self.clear();
        }
    }

    /// Drops the hidden samples' bytes: the visible samples' code is the bytes after theirs, against the state
    /// before the first visible one (`front`), so it is moved, not coded again. The part goes on as a cleared
    /// one ([`Open::decode_written_into`]). Why: a ring of fewer than `CHUNK` samples drops one of its part's
    /// samples for each it takes; without this its part fills up with hidden ones and is sealed into a chunk
    /// (`CHUNK` samples decoded and coded again) that holds no more than the ring's visible few.
    pub(super) fn compact(&mut self) {
        if self.skip == 0 {
            return;
        }
        self.settle();
        self.bytes.drain(..usize::from(self.pos));
        self.n -= self.skip;
        (self.skip, self.pos, self.cleared) = (0, 0, true);
    }

    /// Drops every sample; the code goes on from the newest one written.
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.n = 0;
        self.skip = 0;
        self.pos = 0;
        self.lag = 0;
        self.front = self.back;
        self.cleared = true;
    }

    /// The visible samples, oldest first, into the first [`Open::len`] slots of `out`.
    pub(super) fn decode_into(&self, out: &mut [(i64, u64)]) {
        let (mut s, mut p) = self.seek();
        for o in &mut out[..self.len()] {
            p = s.step(&self.bytes, p);
            *o = (s.t, s.v);
        }
    }

    /// Every sample written, hidden ones included, oldest first, into the first [`Open::written`] slots of
    /// `out`, as a seal takes them: the hidden ones as written when the part was never cleared (its code starts
    /// from the default state), otherwise as copies of the first visible one. `newest`: the newest samples
    /// written, visible ones, as appended (the run [`Open::extend`] took last, or none): they are copied, and
    /// only the samples before them decoded. Why: a ring fed by runs is sealed within the run that fills its
    /// part, and decoding what that run had just coded was over a third of the seals' decoding (instructions,
    /// a demo agent's tape).
    pub(super) fn decode_written_into(&self, out: &mut [(i64, u64)], newest: &[(i64, u64)]) {
        let (n, hidden) = (self.written(), self.hidden());
        let m = n - newest.len();
        debug_assert!(hidden <= m, "the newest samples are visible");
        out[m..n].copy_from_slice(newest);
        if self.cleared {
            let (mut s, mut p) = self.seek();
            for o in &mut out[hidden..m] {
                p = s.step(&self.bytes, p);
                *o = (s.t, s.v);
            }
            let first = out[hidden];
            out[..hidden].fill(first);
            return;
        }
        let mut s = State::default();
        let mut p = 0;
        for o in &mut out[..m] {
            p = s.step(&self.bytes, p);
            *o = (s.t, s.v);
        }
    }

    /// Drops every sample, as [`Open::clear`], and cuts the allocation to half the bytes written: a part kept at
    /// its peak for good holds about twice what it holds on average; cut to half, it grows twice a chunk.
    pub(super) fn release(&mut self) {
        let half = self.bytes.len() / 2;
        self.clear();
        self.bytes.shrink_to(half);
    }

    /// Frees the allocation when nothing is written, or what is over twice the bytes written (after a cap
    /// shrank).
    pub(super) fn shrink(&mut self) {
        if self.n == 0 {
            self.bytes = Vec::new();
        } else if self.bytes.capacity() > 2 * self.bytes.len() {
            self.bytes.shrink_to(self.bytes.len());
        }
    }
}

thread_local! {
    /// A run's code, before it is appended to its part's bytes ([`Open::extend`]): room for `CHUNK` samples.
    static RUN: std::cell::RefCell<Box<[u8; CHUNK * MAX_SAMPLE]>> =
        std::cell::RefCell::new(Box::new([0; CHUNK * MAX_SAMPLE]));
}

/// The code of `(t, v)` against `b`, the sample before it: its first 16 bytes as a number (least significant
/// first), its 17th, and its length in bytes; moves `b` onto it. Assembled in registers, it is written as whole
/// words (built in a byte buffer on the stack and copied from there, the copy's 16-byte read waited on the
/// smaller writes before it: two thirds of the append's time).
#[inline(always)]
fn code(b: &mut State, t: i64, v: u64) -> (u128, u8, usize) {
    let gap = t.wrapping_sub(b.t);
    let dod = zigzag(gap.wrapping_sub(b.gap));
    let d = zigzag(v.wrapping_sub(b.v) as i64);
    let x = v ^ b.v;
    let (val, tag) = if byte_len(x) < byte_len(d) {
        (x, XOR)
    } else {
        (d, 0)
    };
    let dcode = DOD_CODE[byte_len(dod)];
    let dn = dod_len(dcode);
    let vn = byte_len(val);
    *b = State { t, v, gap };
    let header = u128::from(dcode << 5 | tag | vn as u8);
    let lo = header | u128::from(dod) << 8 | u128::from(val) << (8 * (1 + dn));
    // The 17th byte, of a sample of 8 bytes of timestamp and 8 of value.
    (lo, (val >> 56) as u8, 1 + dn + vn)
}

/// Bytes of a delta of delta of the 3-bit length code `code`: 0 to 6 bytes for codes 0 to 6, 8 for 7. Worked out,
/// not read from a table: a reader finds each sample's bytes from the one before it, and a table's load in
/// that chain made the open part's decoding (a seal's, an iterator's) wait for it at every sample.
#[inline(always)]
fn dod_len(code: u8) -> usize {
    let c = usize::from(code & 7);
    c + usize::from(c == 7)
}

/// Bytes of `x` up to its highest set one (0 for 0).
#[inline]
fn byte_len(x: u64) -> usize {
    (64 - x.leading_zeros() as usize).div_ceil(8)
}

/// `n` (≤ 8) little-endian bytes of `b` from `pos`.
#[inline]
fn read_le(b: &[u8], pos: usize, n: usize) -> u64 {
    // A whole word masked to `n` bytes, `n` = 0 included, without a branch on `n`: which fields of a sample
    // are empty varies from sample to sample, and a branch on it was mispredicted in the decoding loops.
    if let Some(w) = b.get(pos..pos + 8) {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        return w & ((1u128 << (8 * n)) - 1) as u64;
    }
    let mut w = [0u8; 8];
    w[..n].copy_from_slice(&b[pos..pos + n]);
    u64::from_le_bytes(w)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng as _, SeedableRng};

    fn written(o: &Open) -> Vec<(i64, u64)> {
        let mut v = vec![(0, 0); o.len()];
        o.decode_into(&mut v);
        v
    }

    #[test]
    fn any_samples_round_trip_and_pop_from_the_front() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut o = Open::default();
        let mut model = std::collections::VecDeque::new();
        for i in 0..20_000u64 {
            if o.written() == CHUNK - 1 {
                o.clear();
                model.clear();
            }
            let t = match i % 5 {
                0 => rng.random::<u64>() as i64,
                _ => model.back().map_or(0, |s: &(i64, u64)| s.0) + 50,
            };
            let v = match i % 3 {
                0 => rng.random::<u64>(),
                1 => 42.5f64.to_bits(),
                _ => i * 1_000,
            };
            o.push(t, v);
            model.push_back((t, v));
            if rng.random_range(0u32..4) == 0 {
                assert_eq!(o.first(), model.front().copied());
                o.pop_front();
                model.pop_front();
            }
            assert_eq!(o.len(), model.len());
            if i % 37 == 0 {
                assert_eq!(written(&o), model.iter().copied().collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn samples_hidden_by_count_or_compacted_away_read_as_popped_ones() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut o = Open::default();
        let mut model = std::collections::VecDeque::new();
        let (mut hid, mut compacted) = (0, 0);
        for i in 0..20_000u64 {
            if o.written() == CHUNK - 1 {
                o.clear();
                model.clear();
            }
            let t = model.back().map_or(0, |s: &(i64, u64)| s.0) + rng.random_range(-10i64..90);
            let v = match i % 3 {
                0 => rng.random::<u64>() >> rng.random_range(0u32..64),
                1 => 42.5f64.to_bits(),
                _ => i * 1_000,
            };
            o.push(t, v);
            model.push_back((t, v));
            match rng.random_range(0u32..12) {
                0 | 1 => {
                    let k = rng.random_range(0usize..=6);
                    o.hide(k);
                    for _ in 0..k.min(model.len()) {
                        model.pop_front();
                    }
                    hid += usize::from(o.lag > 0);
                }
                2 => {
                    o.pop_front();
                    model.pop_front();
                }
                3 => {
                    let (len, bytes, hidden) = (o.len(), o.bytes.len(), o.hidden());
                    o.compact();
                    assert_eq!((o.len(), o.hidden(), o.written()), (len, 0, len));
                    assert!(hidden == 0 || o.bytes.len() < bytes);
                    compacted += usize::from(hidden > 0);
                }
                _ => {}
            }
            assert_eq!(o.len(), model.len());
            assert_eq!(o.first(), model.front().copied());
            assert_eq!(o.last(), model.back().copied());
            if i % 7 == 0 && o.len() > 0 {
                let want: Vec<_> = model.iter().copied().collect();
                assert_eq!(written(&o), want, "at {i}");
                // As a seal reads it: the hidden samples first, then the visible ones.
                let mut all = vec![(0, 0); o.written()];
                o.decode_written_into(&mut all, &[]);
                assert_eq!(all[o.hidden()..], want[..], "at {i}");
                // With the newest samples given, not decoded: the same, whichever of them are given.
                for k in [1, o.len() / 2, o.len()] {
                    let mut with = vec![(0, 0); o.written()];
                    o.decode_written_into(&mut with, &want[want.len() - k..]);
                    assert_eq!(with, all, "at {i}, {k} given");
                }
            }
        }
        assert!(hid > 1_000 && compacted > 1_000, "{hid} {compacted}");
    }

    #[test]
    fn a_run_is_coded_as_its_samples_one_by_one() {
        let mut rng = StdRng::seed_from_u64(11);
        let run: Vec<(i64, u64)> = (0..600i64)
            .map(|k| {
                let t = k * 50_000_000 + rng.random_range(0..1_000_000);
                let v = match k % 4 {
                    0 => rng.random(),
                    1 => 42.5f64.to_bits(),
                    _ => k as u64 * 1_000,
                };
                (t, v)
            })
            .collect();
        let (mut one, mut many) = (Open::default(), Open::default());
        // A part that holds samples already, and one hidden: the code goes on from its state.
        for o in [&mut one, &mut many] {
            o.push(-5, 9);
            o.push(-3, 7);
            o.pop_front();
        }
        for &(t, v) in &run[..CHUNK - 2] {
            one.push(t, v);
        }
        assert_eq!(many.extend(&run), CHUNK - 2);
        assert_eq!(many.written(), CHUNK);
        assert_eq!(
            (many.bytes.as_slice(), many.back),
            (one.bytes.as_slice(), one.back)
        );
        assert_eq!(written(&many), written(&one));
        // Full: it takes nothing more; cleared, it takes the next from where the code stopped.
        let next = &run[CHUNK - 2..CHUNK + 98];
        assert_eq!(many.extend(next), 0);
        one.clear();
        many.clear();
        for &(t, v) in next {
            one.push(t, v);
        }
        assert_eq!(many.extend(next), next.len());
        assert_eq!(
            (many.bytes.as_slice(), many.n),
            (one.bytes.as_slice(), one.n)
        );
        assert_eq!(written(&many), next.to_vec());
    }

    #[test]
    fn fields_are_read_at_every_length_anywhere() {
        let b: Vec<u8> = (1..=20u8).collect();
        for pos in 0..b.len() {
            for n in 0..=8.min(b.len() - pos) {
                let want = b[pos..pos + n]
                    .iter()
                    .rev()
                    .fold(0u64, |acc, &x| acc << 8 | u64::from(x));
                assert_eq!(read_le(&b, pos, n), want, "{n} bytes at {pos}");
            }
        }
        let lens: Vec<usize> = (0..8).map(dod_len).collect();
        assert_eq!(lens, [0, 1, 2, 3, 4, 5, 6, 8]);
        assert!((0..=8).all(|n| dod_len(DOD_CODE[n]) >= n));
    }

    #[test]
    fn a_strict_period_and_an_idle_value_take_one_byte() {
        let mut o = Open::default();
        for k in 0..100i64 {
            o.push(1_000 + k * 7, 5);
        }
        // The first sample's gap from 0 and its value, then header bytes only (the second one's gap is new).
        assert!(o.bytes.len() <= 100 + 2 + 2 + 2, "{}", o.bytes.len());
        assert_eq!(o.first(), Some((1_000, 5)));
        for _ in 0..100 {
            o.pop_front();
        }
        assert_eq!((o.len(), o.written(), o.bytes.len()), (0, 0, 0));
        // The code goes on from the last sample written.
        o.push(1_000 + 100 * 7, 5);
        assert_eq!(o.bytes.len(), 1);
        assert_eq!(written(&o), vec![(1_700, 5)]);
    }
}
