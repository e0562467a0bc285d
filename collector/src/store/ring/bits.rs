//! Bit-level coding of a chunk's fields: fields packed least significant bit first ([`BitWriter`], read back by
//! [`bits`]), zigzag and LEB128 for the two signed/unbounded header numbers, and Gorilla-style XOR coding of a
//! run of `u64` values ([`xor_fields`], [`xor_decode`]).
//!
//! Readers take the buffer as it is, with no bounds on the fields they read beyond the slice's own: a field is
//! read with one unaligned 8-byte load (and at most one more byte), or byte by byte within the last 8 bytes.

/// Bits needed to write `x`.
pub(super) fn width(x: u64) -> u32 {
    64 - x.leading_zeros()
}

/// `w` (≤ 64) bits at bit `pos` of `buf`; bits past the end of `buf` read as zeros.
#[inline]
pub(super) fn bits(buf: &[u8], pos: usize, w: u32) -> u64 {
    let byte = pos >> 3;
    let shift = (pos & 7) as u32;
    let word = match buf.get(byte..byte + 8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => tail_word(buf, byte),
    };
    let mut v = word >> shift;
    if shift + w > 64 {
        v |= u64::from(buf.get(byte + 8).copied().unwrap_or(0)) << (64 - shift);
    }
    v & u64::MAX.checked_shr(64 - w).unwrap_or(0)
}

/// The bytes of `buf` from `byte` on (fewer than 8), zero-extended.
#[inline(never)]
fn tail_word(buf: &[u8], byte: usize) -> u64 {
    let rest = buf.get(byte..).unwrap_or(&[]);
    let mut w = [0u8; 8];
    w[..rest.len()].copy_from_slice(rest);
    u64::from_le_bytes(w)
}

/// Packs bit fields, least significant first, into a byte slice sized for them.
pub(super) struct BitWriter<'a> {
    out: &'a mut [u8],
    /// Next byte of `out` to write.
    byte: usize,
    /// Bits not yet written, `n` of them.
    acc: u64,
    n: u32,
}

impl<'a> BitWriter<'a> {
    pub(super) fn new(out: &'a mut [u8]) -> BitWriter<'a> {
        BitWriter {
            out,
            byte: 0,
            acc: 0,
            n: 0,
        }
    }

    /// Appends the `w` (≤ 64) low bits of `v` (whose other bits are zero).
    #[inline]
    pub(super) fn put(&mut self, v: u64, w: u32) {
        debug_assert!(w == 64 || v >> w == 0);
        self.acc |= v << self.n;
        let n = self.n + w;
        if n >= 64 {
            self.out[self.byte..self.byte + 8].copy_from_slice(&self.acc.to_le_bytes());
            self.byte += 8;
            self.acc = if self.n == 0 { 0 } else { v >> (64 - self.n) };
            self.n = n - 64;
        } else {
            self.n = n;
        }
    }

    /// Writes the bits still held; returns the bytes used.
    pub(super) fn finish(self) -> usize {
        let k = self.n.div_ceil(8) as usize;
        self.out[self.byte..self.byte + k].copy_from_slice(&self.acc.to_le_bytes()[..k]);
        self.byte + k
    }
}

pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(super) fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

pub(super) fn varint_len(v: u64) -> usize {
    (width(v | 1) as usize).div_ceil(7)
}

/// LEB128.
pub(super) fn put_varint(buf: &mut [u8], pos: &mut usize, mut v: u64) {
    while v >= 0x80 {
        buf[*pos] = v as u8 | 0x80;
        *pos += 1;
        v >>= 7;
    }
    buf[*pos] = v as u8;
    *pos += 1;
}

pub(super) fn get_varint(buf: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = buf[*pos];
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

/// Gorilla-style XOR of each value against the previous one, as `(bits, width)` fields: `0` for a repeat;
/// otherwise `1`, then `0` and the differing bits inside the previous window of meaningful bits, or `1`,
/// 5 bits of leading zeros, 6 bits of meaningful width (64 as 0) and the meaningful bits.
#[inline]
pub(super) fn xor_fields(
    first: u64,
    rest: impl Iterator<Item = u64>,
    mut emit: impl FnMut(u64, u32),
) {
    let mut prev = first;
    let (mut lead, mut trail) = (u32::MAX, 0u32);
    for v in rest {
        let x = v ^ prev;
        prev = v;
        if x == 0 {
            emit(0, 1);
            continue;
        }
        let lz = x.leading_zeros().min(31);
        let tz = x.trailing_zeros();
        if lead != u32::MAX && lz >= lead && tz >= trail {
            emit(0b01, 2);
            emit(x >> trail, 64 - lead - trail);
        } else {
            let sig = 64 - lz - tz;
            emit(0b11, 2);
            emit(u64::from(lz), 5);
            emit(u64::from(sig & 63), 6);
            emit(x >> tz, sig);
            (lead, trail) = (lz, tz);
        }
    }
}

/// Reads the fields [`xor_fields`] wrote from bit `bit` of `buf`, one value per slot of `out`, `first` being
/// the value before them.
#[inline]
pub(super) fn xor_decode<'a>(
    buf: &[u8],
    mut bit: usize,
    first: u64,
    out: impl Iterator<Item = &'a mut u64>,
) {
    let mut v = first;
    let (mut lead, mut trail) = (0u32, 0u32);
    for o in out {
        // The two control bits, and the window's 11 bits after them.
        let head = bits(buf, bit, 13);
        if head & 1 != 0 {
            if head & 2 != 0 {
                lead = (head >> 2) as u32 & 31;
                let sig = match (head >> 7) as u32 & 63 {
                    0 => 64,
                    s => s,
                };
                trail = 64 - lead - sig;
                bit += 11;
            }
            bit += 2;
            let sig = 64 - lead - trail;
            v ^= bits(buf, bit, sig) << trail;
            bit += sig as usize;
        } else {
            bit += 1;
        }
        *o = v;
    }
}

/// Delta-of-delta coding of a run of values' deltas (`d_k = v_k - v_{k-1}`, wrapping), each against the one
/// before it, as `(bits, width)` fields: `0` for the same delta; otherwise `1`, then `0` and the zigzag of the
/// difference in the previous width, or `1`, 6 bits of a new width (64 as 0) and the zigzag in it. A counter
/// at a steady rate, idle, or in bursts of a steady rate costs 1 bit per value and a field per change of rate.
#[inline]
pub(super) fn dod_fields(
    first: i64,
    rest: impl Iterator<Item = i64>,
    mut emit: impl FnMut(u64, u32),
) {
    let mut prev = first;
    let mut pw = 0u32;
    for d in rest {
        let z = zigzag(d.wrapping_sub(prev));
        prev = d;
        if z == 0 {
            emit(0, 1);
            continue;
        }
        let w = width(z);
        if w <= pw {
            emit(0b01, 2);
            emit(z, pw);
        } else {
            emit(0b11, 2);
            emit(u64::from(w & 63), 6);
            emit(z, w);
            pw = w;
        }
    }
}

/// Reads the fields [`dod_fields`] wrote from bit `bit` of `buf`: one delta per slot of `out`, `first` being
/// the delta before them.
#[inline]
pub(super) fn dod_decode<'a>(
    buf: &[u8],
    mut bit: usize,
    first: i64,
    out: impl Iterator<Item = &'a mut i64>,
) {
    let mut d = first;
    let mut pw = 0u32;
    for o in out {
        let head = bits(buf, bit, 8);
        if head & 1 != 0 {
            if head & 2 != 0 {
                pw = match (head >> 2) as u32 & 63 {
                    0 => 64,
                    w => w,
                };
                bit += 6;
            }
            bit += 2;
            d = d.wrapping_add(unzigzag(bits(buf, bit, pw)));
            bit += pw as usize;
        } else {
            bit += 1;
        }
        *o = d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_back_at_any_width_and_offset() {
        let fields: Vec<(u64, u32)> = (0..=64u32)
            .flat_map(|w| {
                let max = u64::MAX.checked_shr(64 - w).unwrap_or(0);
                [(0, w), (max, w), (0x5555_5555_5555_5555 & max, w)]
            })
            .collect();
        let total: usize = fields.iter().map(|&(_, w)| w as usize).sum();
        let mut buf = vec![0u8; total.div_ceil(8) + 8];
        let mut bw = BitWriter::new(&mut buf);
        for &(v, w) in &fields {
            bw.put(v, w);
        }
        assert_eq!(bw.finish(), total.div_ceil(8));
        // With the spare bytes and without them (the end of a chunk's bytes).
        for buf in [&buf[..], &buf[..total.div_ceil(8)]] {
            let mut pos = 0;
            for &(v, w) in &fields {
                assert_eq!(bits(buf, pos, w), v, "width {w} at bit {pos}");
                pos += w as usize;
            }
        }
    }

    #[test]
    fn zigzag_and_varints_round_trip() {
        for v in [0, 1, -1, 63, -64, 64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!((zigzag(0), zigzag(-1), zigzag(1)), (0, 1, 2));
        let mut buf = [0u8; 10];
        for v in [0, 1, 127, 128, 16_383, 16_384, u64::MAX] {
            let mut pos = 0;
            put_varint(&mut buf, &mut pos, v);
            assert_eq!(pos, varint_len(v), "{v}");
            let mut at = 0;
            assert_eq!(get_varint(&buf, &mut at), v);
            assert_eq!(at, pos);
        }
    }

    #[test]
    fn dod_costs_one_bit_per_steady_delta_and_round_trips() {
        // Idle, a burst at a steady rate, idle again: 1 bit a delta plus two fields.
        let deltas: Vec<i64> = [0i64; 20]
            .into_iter()
            .chain([5_000_000_000; 30])
            .chain([0; 20])
            .collect();
        let mut n = 0;
        dod_fields(0, deltas.iter().copied(), |_, w| n += w);
        // The burst's start opens a 34-bit width, its end (-5e9, zigzag 1e10 - 1) fits in it.
        assert_eq!(n, 70 - 2 + (2 + 6 + 34) + (2 + 34));
        let wild = [i64::MIN, i64::MAX, 0, -1, 1, i64::MIN, 7, 7, 6, i64::MAX];
        for ds in [&deltas[..], &wild[..]] {
            let mut buf = vec![0u8; ds.len() * 10];
            let mut bw = BitWriter::new(&mut buf);
            dod_fields(3, ds.iter().copied(), |v, w| bw.put(v, w));
            let len = bw.finish();
            let mut got = vec![0i64; ds.len()];
            dod_decode(&buf[..len], 0, 3, got.iter_mut());
            assert_eq!(got, ds);
        }
    }

    #[test]
    fn xor_costs_one_bit_per_repeat_and_round_trips() {
        let values = [
            42.5f64.to_bits(),
            42.5f64.to_bits(),
            43.0f64.to_bits(),
            f64::NAN.to_bits(),
            0,
            u64::MAX,
            1,
            1 << 63,
        ];
        let mut n = 0;
        xor_fields(values[0], [values[0]; 10].into_iter(), |_, w| n += w);
        assert_eq!(n, 10);
        let mut buf = vec![0u8; values.len() * 10 + 8];
        let mut bw = BitWriter::new(&mut buf);
        xor_fields(values[0], values[1..].iter().copied(), |v, w| bw.put(v, w));
        bw.finish();
        let mut got = vec![0u64; values.len() - 1];
        xor_decode(&buf, 0, values[0], got.iter_mut());
        assert_eq!(got, values[1..]);
    }
}
