//! The ring's open head: its newest samples, not yet sealed into a chunk, held compactly: each timestamp as a
//! one-byte gap from the previous sample's, each value as a varint code against the previous value.
//!
//! A gap of 0..=254 is held in its byte (consecutive tick numbers: 1; a slow series between a fast tier's
//! ticks: a few tens); a larger or negative one (wrapping) is marked [`WIDE`] and held whole, in order, in a
//! list of exceptions. A value's code is the smaller of its zigzagged difference from the previous value (a
//! counter's increase) and its XOR with it, bits reversed (a gauge's f64 whose sign, exponent or top mantissa
//! bits changed), with one bit saying which, as a LEB128 varint: a repeat costs 1 byte, a busy counter's
//! increase 4–6. The first and the last sample are held whole, so a walk starts at either end and steps by the
//! codes (forward applies one, backward undoes it; a varint's last byte is the one below 0x80, so the walk
//! back finds where the previous code starts). So a repeating sample of the store's rings (tick numbers)
//! costs 2 B instead of 16 B.

use std::collections::VecDeque;

/// Gap byte marking a gap held in the exception list.
const WIDE: u8 = u8::MAX;
/// Most bytes of one value's code (65 bits).
const CODE_MAX: usize = 10;

/// Samples `(timestamp, value)` in arrival order.
#[derive(Debug, Clone, Default)]
pub(super) struct Head {
    /// `gaps[k]`: timestamp of sample `k` minus that of sample `k - 1` (wrapping), or [`WIDE`]; `gaps[0]` is
    /// unused (0). One per sample.
    gaps: VecDeque<u8>,
    /// The gaps marked [`WIDE`], oldest first.
    wide: VecDeque<i64>,
    /// The codes of values `1..len`, each against the one before.
    codes: VecDeque<u8>,
    /// The oldest and the newest sample (when any).
    first: (i64, u64),
    last: (i64, u64),
}

/// The code of `v` after `prev`: bit 0 says which form, the rest holds it.
#[inline]
fn encode(prev: u64, v: u64) -> u128 {
    let d = zigzag(v.wrapping_sub(prev) as i64);
    let x = (v ^ prev).reverse_bits();
    if d <= x {
        u128::from(d) << 1
    } else {
        u128::from(x) << 1 | 1
    }
}

/// The value after `prev` whose code is `c`.
#[inline]
fn apply(prev: u64, c: u128) -> u64 {
    let m = (c >> 1) as u64;
    if c & 1 == 0 {
        prev.wrapping_add(unzigzag(m) as u64)
    } else {
        prev ^ m.reverse_bits()
    }
}

/// The value before `v` whose code is `c`.
#[inline]
fn undo(v: u64, c: u128) -> u64 {
    let m = (c >> 1) as u64;
    if c & 1 == 0 {
        v.wrapping_sub(unzigzag(m) as u64)
    } else {
        v ^ m.reverse_bits()
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// The varint at `*pos` of `q`; moves `*pos` past it.
#[inline]
fn read_code(q: &VecDeque<u8>, pos: &mut usize) -> u128 {
    let mut c = 0u128;
    let mut shift = 0;
    while let Some(&b) = q.get(*pos) {
        *pos += 1;
        c |= u128::from(b & 0x7f) << shift;
        if b < 0x80 {
            break;
        }
        shift += 7;
    }
    c
}

/// Where the varint ending at `end` (exclusive) of `q` starts.
#[inline]
fn code_start(q: &VecDeque<u8>, end: usize) -> usize {
    let mut s = end.saturating_sub(1);
    while s > 0 && q[s - 1] >= 0x80 {
        s -= 1;
    }
    s
}

impl Head {
    pub(super) fn len(&self) -> usize {
        self.gaps.len()
    }

    /// Appends a sample; the gap list grows geometrically up to room for `limit` samples.
    #[inline]
    pub(super) fn push(&mut self, ts: i64, value: u64, limit: usize) {
        if self.gaps.len() == self.gaps.capacity() {
            grow(&mut self.gaps, limit);
        }
        if self.gaps.is_empty() {
            self.first = (ts, value);
            self.gaps.push_back(0);
        } else {
            let gap = ts.wrapping_sub(self.last.0);
            if (0..i64::from(WIDE)).contains(&gap) {
                self.gaps.push_back(gap as u8);
            } else {
                if self.wide.len() == self.wide.capacity() {
                    grow(&mut self.wide, limit);
                }
                self.gaps.push_back(WIDE);
                self.wide.push_back(gap);
            }
            let mut c = encode(self.last.1, value);
            if self.codes.capacity() < self.codes.len() + CODE_MAX {
                let len = self.codes.len();
                self.codes.reserve_exact(len / 4 + 2 * CODE_MAX);
            }
            while c >= 0x80 {
                self.codes.push_back(c as u8 | 0x80);
                c >>= 7;
            }
            self.codes.push_back(c as u8);
        }
        self.last = (ts, value);
    }

    /// Timestamp of the oldest sample.
    #[inline]
    pub(super) fn front_ts(&self) -> Option<i64> {
        (!self.gaps.is_empty()).then_some(self.first.0)
    }

    /// The newest sample.
    pub(super) fn back(&self) -> Option<(i64, u64)> {
        (!self.gaps.is_empty()).then_some(self.last)
    }

    /// Removes and returns the oldest sample.
    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<(i64, u64)> {
        let out = self.first;
        self.gaps.pop_front()?;
        if let Some(g) = self.gaps.front_mut() {
            let gap = match *g {
                WIDE => self.wide.pop_front().unwrap_or(0),
                g => i64::from(g),
            };
            *g = 0;
            let mut pos = 0;
            let c = read_code(&self.codes, &mut pos);
            self.codes.drain(..pos);
            self.first = (out.0.wrapping_add(gap), apply(out.1, c));
        }
        Some(out)
    }

    /// Drops the oldest `n` samples (all of them when there are fewer).
    pub(super) fn drop_front(&mut self, n: usize) {
        for _ in 0..n {
            if self.pop_front().is_none() {
                break;
            }
        }
    }

    /// Gives back memory beyond room for `limit` samples.
    pub(super) fn shrink_to(&mut self, limit: usize) {
        if self.gaps.capacity() > limit {
            self.gaps.shrink_to(limit);
            self.codes.shrink_to(self.codes.len() + CODE_MAX);
        }
        if self.wide.capacity() > limit {
            self.wide.shrink_to(limit);
        }
    }

    /// Bytes allocated.
    pub(super) fn heap_bytes(&self) -> usize {
        self.gaps.capacity()
            + self.codes.capacity()
            + self.wide.capacity() * std::mem::size_of::<i64>()
    }

    /// Samples oldest first, in either direction.
    pub(super) fn iter(&self) -> Iter<'_> {
        Iter {
            head: self,
            front: 0,
            back: self.gaps.len(),
            f: self.first,
            b: self.last,
            wf: 0,
            wb: self.wide.len(),
            cf: 0,
            cb: self.codes.len(),
        }
    }
}

/// Makes room in `q` for twice its items (at least 8), at most `limit`, and always for one more.
fn grow<T>(q: &mut VecDeque<T>, limit: usize) {
    let len = q.len();
    let want = (len.max(8) * 2).min(limit);
    q.reserve_exact(want.saturating_sub(len).max(1));
}

/// A walk over the head, positions `front..back`; `f` and `b` are the samples at `front` and `back - 1`,
/// `wf` and `wb` the exceptions, `cf` and `cb` the code bytes the next steps forward and backward use.
pub(super) struct Iter<'a> {
    head: &'a Head,
    front: usize,
    back: usize,
    f: (i64, u64),
    b: (i64, u64),
    wf: usize,
    wb: usize,
    cf: usize,
    cb: usize,
}

impl Iterator for Iter<'_> {
    type Item = (i64, u64);

    #[inline]
    fn next(&mut self) -> Option<(i64, u64)> {
        if self.front >= self.back {
            return None;
        }
        let h = self.head;
        let item = self.f;
        self.front += 1;
        if self.front < self.back {
            let gap = match h.gaps[self.front] {
                WIDE => {
                    self.wf += 1;
                    h.wide[self.wf - 1]
                }
                g => i64::from(g),
            };
            let c = read_code(&h.codes, &mut self.cf);
            self.f = (self.f.0.wrapping_add(gap), apply(self.f.1, c));
        }
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.back - self.front;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    #[inline]
    fn next_back(&mut self) -> Option<(i64, u64)> {
        if self.front >= self.back {
            return None;
        }
        let h = self.head;
        self.back -= 1;
        let item = self.b;
        if self.back > self.front {
            let gap = match h.gaps[self.back] {
                WIDE => {
                    self.wb -= 1;
                    h.wide[self.wb]
                }
                g => i64::from(g),
            };
            let mut pos = code_start(&h.codes, self.cb);
            self.cb = pos;
            let c = read_code(&h.codes, &mut pos);
            self.b = (self.b.0.wrapping_sub(gap), undo(self.b.1, c));
        }
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes `ts` (values their index) and checks both walks, then pops the front one by one.
    fn check(ts: &[i64]) {
        let mut h = Head::default();
        for (i, &t) in ts.iter().enumerate() {
            h.push(t, i as u64, 1_000);
        }
        let mut want: VecDeque<(i64, u64)> =
            ts.iter().enumerate().map(|(i, &t)| (t, i as u64)).collect();
        while !want.is_empty() {
            assert_eq!(h.len(), want.len());
            assert!(h.iter().eq(want.iter().copied()));
            assert!(h.iter().rev().eq(want.iter().rev().copied()));
            assert_eq!(h.back(), want.back().copied());
            assert_eq!(h.front_ts(), want.front().map(|s| s.0));
            assert_eq!(h.pop_front(), want.pop_front());
        }
        assert_eq!(
            (h.len(), h.pop_front(), h.back(), h.front_ts()),
            (0, None, None, None)
        );
        assert_eq!(h.iter().next(), None);
    }

    #[test]
    fn consecutive_gapped_and_wide_timestamps_walk_both_ways() {
        check(&[]);
        check(&[7]);
        check(&(100..260).collect::<Vec<_>>());
        // A slow series between fast ticks, gaps of every size, backwards, and the ends of i64.
        check(&(0..50).map(|i| i * 21).collect::<Vec<_>>());
        check(&[
            5,
            6,
            260,
            261,
            1_000_000,
            999_990,
            999_991,
            i64::MAX,
            i64::MIN,
            0,
            254,
            509,
            510,
        ]);
        let jittered: Vec<i64> = (0..100)
            .map(|i| i * 50_000_000 + (i * 7919 % 1_000))
            .collect();
        check(&jittered);
    }

    #[test]
    fn walks_from_both_ends_meet() {
        let ts = [1, 2, 300, 301, 302, 10_000, 10_001, 10_300, 10_301];
        let mut h = Head::default();
        for (i, &t) in ts.iter().enumerate() {
            h.push(t, i as u64, 16);
        }
        let all: Vec<_> = h.iter().collect();
        for split in 0..=ts.len() {
            let mut it = h.iter();
            let a: Vec<_> = it.by_ref().take(split).collect();
            let mut b: Vec<_> = it.rev().collect();
            b.reverse();
            assert_eq!([a, b].concat(), all, "split {split}");
        }
    }

    #[test]
    fn repeats_cost_two_bytes_a_sample() {
        let mut h = Head::default();
        for t in 0..160 {
            h.push(t, 42, 160);
        }
        assert!(
            h.heap_bytes() <= 160 * 2 + 4 * CODE_MAX,
            "{}",
            h.heap_bytes()
        );
        h.drop_front(100);
        h.shrink_to(60);
        assert_eq!((h.len(), h.front_ts()), (60, Some(100)));
        assert!(
            h.heap_bytes() <= 60 * 2 + 2 * CODE_MAX,
            "{}",
            h.heap_bytes()
        );
    }

    #[test]
    fn values_of_every_kind_walk_both_ways() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut acc = 0u64;
        let vals: Vec<u64> = (0..400u64)
            .map(|i| match i / 50 {
                0 => 7,
                1 => {
                    acc = acc.wrapping_add(next() >> 34);
                    acc
                }
                2 => next(),
                3 => (60.0 + (i % 5) as f64).to_bits(),
                4 => [0, u64::MAX, 1 << 63, 1][i as usize % 4],
                5 => (u64::MAX - 3).wrapping_add(i),
                _ => f64::NAN.to_bits() ^ (i & 1),
            })
            .collect();
        let mut h = Head::default();
        for (i, &v) in vals.iter().enumerate() {
            h.push(i as i64 * 3, v, 400);
        }
        let want: Vec<_> = vals
            .iter()
            .enumerate()
            .map(|(i, &v)| (i as i64 * 3, v))
            .collect();
        assert!(h.iter().eq(want.iter().copied()));
        assert!(h.iter().rev().eq(want.iter().rev().copied()));
        for (k, w) in want.iter().enumerate() {
            assert_eq!(h.pop_front(), Some(*w), "{k}");
        }
    }
}
