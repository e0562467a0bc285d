//! A sealed chunk: [`CHUNK`] samples compressed as the ring's module documentation describes (timestamps as
//! bit-packed residuals from the chunk's line, values as frame-of-reference deltas or XOR, whichever is
//! smaller). Encoding and decoding are exact for any `i64` timestamps and `u64` values: all arithmetic wraps.

use std::cell::RefCell;

use super::bits::{
    bits, dod_decode, dod_fields, get_varint, put_varint, unzigzag, varint_len, width, xor_decode,
    xor_fields, zigzag, BitWriter,
};

/// Samples per sealed chunk.
pub(super) const CHUNK: usize = 256;
/// Value tag of an XOR-encoded chunk (otherwise the tag byte is the delta width, 0..=64).
const TAG_XOR: u8 = 0x80;
/// Value tag of a chunk coded as deltas of deltas.
const TAG_DOD: u8 = 0x81;
/// Most bytes of an XOR stream: 2 + 5 + 6 + 64 bits per value.
const XOR_MAX: usize = (CHUNK - 1) * 77 / 8 + 1;

/// `CHUNK` compressed samples, in one allocation of their bytes (16 B in the ring's chunk list).
///
/// `data`: `[timestamp width]` the header as zigzag varints: `base`, `step`, and the largest timestamp (the
/// last one when timestamps increase) minus `base`; `[CHUNK residuals]` `[value tag]` then, for deltas,
/// `varint(v_0)` `varint(zigzag(min_delta))` and `CHUNK - 1` packed deltas; for XOR, `v_0` as 8 bytes and the
/// XOR stream.
#[derive(Debug, Clone)]
pub(super) struct Chunk {
    data: Box<[u8]>,
}

/// A chunk's header, read from its bytes.
struct Header {
    /// Bits per timestamp residual.
    wt: u32,
    base: i64,
    step: i64,
    max_ts: i64,
    /// Byte where the residuals start.
    at: usize,
}

impl Chunk {
    /// Encodes `s` (`CHUNK` samples).
    pub(super) fn encode(s: &[(i64, u64)]) -> Chunk {
        debug_assert_eq!(s.len(), CHUNK);
        let t0 = s[0].0;
        let t_last = s[CHUNK - 1].0;
        let step = match t_last.checked_sub(t0) {
            Some(span) => span / (CHUNK as i64 - 1),
            None => ((i128::from(t_last) - i128::from(t0)) / (CHUNK as i128 - 1)) as i64,
        };
        // Timestamp residuals from the line, then deltas of the values.
        let mut res = [0u64; CHUNK];
        let (mut emin, mut emax, mut max_ts) = (i64::MAX, i64::MIN, i64::MIN);
        let mut line = t0;
        for (r, &(t, _)) in res.iter_mut().zip(s) {
            let e = t.wrapping_sub(line);
            line = line.wrapping_add(step);
            *r = e as u64;
            emin = emin.min(e);
            emax = emax.max(e);
            max_ts = max_ts.max(t);
        }
        let wt = width(emax.wrapping_sub(emin) as u64);
        SCRATCH.with_borrow_mut(|(values, xor)| {
            encode_values(s, values, xor);
            Chunk::assemble(t0, step, (emin, max_ts), wt, &res, values)
        })
    }

    /// A chunk's bytes from its parts: the timestamps' line (`t0`, `step`), their residuals (`res`, `wt` bits
    /// each above `emin`), the largest timestamp, and the values' bytes.
    fn assemble(
        t0: i64,
        step: i64,
        (emin, max_ts): (i64, i64),
        wt: u32,
        res: &[u64; CHUNK],
        values: &[u8],
    ) -> Chunk {
        let ts_len = (CHUNK * wt as usize).div_ceil(8);
        let base = t0.wrapping_add(emin);
        let head = [
            zigzag(base),
            zigzag(step),
            zigzag(max_ts.wrapping_sub(base)),
        ];
        let at = 1 + head.iter().map(|&h| varint_len(h)).sum::<usize>();
        let mut data = vec![0u8; at + ts_len + values.len()].into_boxed_slice();
        data[0] = wt as u8;
        let mut pos = 1;
        for h in head {
            put_varint(&mut data, &mut pos, h);
        }
        let mut bw = BitWriter::new(&mut data[at..at + ts_len]);
        for &r in res {
            bw.put(r.wrapping_sub(emin as u64), wt);
        }
        bw.finish();
        data[at + ts_len..].copy_from_slice(values);
        Chunk { data }
    }

    /// The header fields.
    #[inline]
    fn header(&self) -> Header {
        let d = &self.data;
        let mut pos = 1;
        let base = unzigzag(get_varint(d, &mut pos));
        let step = unzigzag(get_varint(d, &mut pos));
        let max_ts = base.wrapping_add(unzigzag(get_varint(d, &mut pos)));
        Header {
            wt: u32::from(d[0]),
            base,
            step,
            max_ts,
            at: pos,
        }
    }

    /// Largest timestamp in the chunk (the last one when timestamps increase).
    pub(super) fn max_ts(&self) -> i64 {
        self.header().max_ts
    }

    /// Bytes allocated for the encoded samples.
    pub(super) fn encoded_len(&self) -> usize {
        self.data.len()
    }

    /// Timestamps of samples `k..k + out.len()` into `out`.
    pub(super) fn timestamps(&self, k: usize, out: &mut [i64]) {
        let h = self.header();
        let mut t = h.base.wrapping_add((k as i64).wrapping_mul(h.step));
        let mut bit = h.at * 8 + k * h.wt as usize;
        for o in out {
            *o = t.wrapping_add(bits(&self.data, bit, h.wt) as i64);
            t = t.wrapping_add(h.step);
            bit += h.wt as usize;
        }
    }

    /// All `CHUNK` samples into `out`.
    pub(super) fn decode(&self, out: &mut [(i64, u64)]) {
        let d = &self.data;
        let h = self.header();
        let (wt, mut t) = (h.wt, h.base);
        let mut bit = h.at * 8;
        for o in out.iter_mut() {
            o.0 = t.wrapping_add(bits(d, bit, wt) as i64);
            t = t.wrapping_add(h.step);
            bit += wt as usize;
        }
        let mut pos = h.at + (CHUNK * wt as usize).div_ceil(8);
        let tag = d[pos];
        pos += 1;
        if tag == TAG_DOD {
            let mut v = get_varint(d, &mut pos);
            let d1 = unzigzag(get_varint(d, &mut pos));
            let mut deltas = [0i64; CHUNK];
            deltas[1] = d1;
            dod_decode(d, pos * 8, d1, deltas[2..].iter_mut());
            out[0].1 = v;
            for (o, &dk) in out[1..].iter_mut().zip(&deltas[1..]) {
                v = v.wrapping_add(dk as u64);
                o.1 = v;
            }
        } else if tag == TAG_XOR {
            let v0 = u64::from_le_bytes(d[pos..pos + 8].try_into().expect("8 bytes"));
            out[0].1 = v0;
            xor_decode(d, (pos + 8) * 8, v0, out[1..].iter_mut().map(|o| &mut o.1));
        } else {
            let wv = u32::from(tag);
            let mut v = get_varint(d, &mut pos);
            let dmin = unzigzag(get_varint(d, &mut pos)) as u64;
            let mut bit = pos * 8;
            out[0].1 = v;
            for o in &mut out[1..] {
                v = v.wrapping_add(dmin).wrapping_add(bits(d, bit, wv));
                o.1 = v;
                bit += wv as usize;
            }
        }
    }
}

thread_local! {
    /// A seal's value bytes and its XOR trial, reused: a chunk is encoded every `CHUNK` samples of every series,
    /// and each seal took two fresh buffers (one of them zeroed, 2.4 KiB). Less allocator work; no gain in time
    /// above the noise of the in-process bench (`store::apply_cost`).
    static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The values' bytes, tag first, into `out`, in whichever of frame-of-reference deltas, XOR and delta of delta
/// takes the fewest (the other two only tried for deltas of more than 8 bits); `xor` is scratch space.
fn encode_values(s: &[(i64, u64)], out: &mut Vec<u8>, xor: &mut Vec<u8>) {
    let mut deltas = [0i64; CHUNK];
    let (mut dmin, mut dmax) = (i64::MAX, i64::MIN);
    for (d, w) in deltas[1..].iter_mut().zip(s.windows(2)) {
        *d = w[1].1.wrapping_sub(w[0].1) as i64;
        dmin = dmin.min(*d);
        dmax = dmax.max(*d);
    }
    let wv = width(dmax.wrapping_sub(dmin) as u64);
    let v0 = s[0].1;
    let delta_len =
        1 + varint_len(v0) + varint_len(zigzag(dmin)) + ((CHUNK - 1) * wv as usize).div_ceil(8);
    out.clear();
    if wv > 8 {
        let dod_len = dod_len(v0, &deltas);
        let limit = dod_len.min(delta_len);
        if let Some(len) = xor_if_smaller(s, limit - 1, xor) {
            out.push(TAG_XOR);
            out.extend_from_slice(&v0.to_le_bytes());
            out.extend_from_slice(&xor[..len]);
            return;
        }
        if dod_len < delta_len {
            return write_dod(v0, &deltas, dod_len, out);
        }
    }
    out.resize(delta_len, 0);
    out[0] = wv as u8;
    let mut pos = 1;
    put_varint(out, &mut pos, v0);
    put_varint(out, &mut pos, zigzag(dmin));
    let mut bw = BitWriter::new(&mut out[pos..]);
    for &d in &deltas[1..] {
        bw.put((d as u64).wrapping_sub(dmin as u64), wv);
    }
    bw.finish();
}

/// Bytes of the values as `[TAG_DOD]` `varint(v_0)` `varint(zigzag(d_1))` and the delta-of-delta fields of
/// `d_2..`.
fn dod_len(v0: u64, deltas: &[i64; CHUNK]) -> usize {
    let mut n = 0usize;
    dod_fields(deltas[1], deltas[2..].iter().copied(), |_, w| {
        n += w as usize
    });
    1 + varint_len(v0) + varint_len(zigzag(deltas[1])) + n.div_ceil(8)
}

/// Writes the values in delta-of-delta code ([`dod_len`] bytes: `len`) into `out`.
fn write_dod(v0: u64, deltas: &[i64; CHUNK], len: usize, out: &mut Vec<u8>) {
    out.resize(len, 0);
    out[0] = TAG_DOD;
    let mut pos = 1;
    put_varint(out, &mut pos, v0);
    put_varint(out, &mut pos, zigzag(deltas[1]));
    let mut bw = BitWriter::new(&mut out[pos..]);
    dod_fields(deltas[1], deltas[2..].iter().copied(), |v, w| bw.put(v, w));
    bw.finish();
}

/// The XOR stream of `s`'s values after the first into `buf`, and its length, if it and the first value's 8
/// bytes take fewer than the `delta_len` bytes of the delta encoding. It is encoded only where a lower bound of
/// its size (every field in a fresh window, as narrow as it can be) says it may win; the caller asks only for
/// deltas of more than 8 bits (below that XOR cannot win by much).
fn xor_if_smaller(s: &[(i64, u64)], delta_len: usize, buf: &mut Vec<u8>) -> Option<usize> {
    let mut bound = 0u32;
    for w in s.windows(2) {
        let x = w[1].1 ^ w[0].1;
        let sig = if x == 0 {
            0
        } else {
            2 + 64 - x.leading_zeros().min(31) - x.trailing_zeros()
        };
        bound += 1 + sig;
    }
    if 8 + (bound as usize).div_ceil(8) >= delta_len {
        return None;
    }
    // The writer overwrites whole words: the buffer needs its length, not zeroes.
    if buf.len() < XOR_MAX {
        buf.resize(XOR_MAX, 0);
    }
    let mut bw = BitWriter::new(buf);
    xor_fields(s[0].1, s[1..].iter().map(|p| p.1), |v, w| bw.put(v, w));
    let len = bw.finish();
    (8 + len < delta_len).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CHUNK` samples at a 50 ms period with a little jitter, values from `value(k)`.
    fn samples(value: impl Fn(u64) -> u64) -> Vec<(i64, u64)> {
        (0..CHUNK as u64)
            .map(|k| {
                (
                    1_000 + k as i64 * 50_000_000 + (k * 7919 % 1_000) as i64,
                    value(k),
                )
            })
            .collect()
    }

    /// Bytes of `c`'s packed timestamps.
    fn ts_len(c: &Chunk) -> usize {
        (CHUNK * usize::from(c.data[0])).div_ceil(8)
    }

    /// The value tag byte of `c`.
    fn tag(c: &Chunk) -> u8 {
        c.data[c.header().at + ts_len(c)]
    }

    /// Bytes of `c`'s values after the tag.
    fn values_len(c: &Chunk) -> usize {
        c.encoded_len() - 1 - c.header().at - ts_len(c)
    }

    fn round_trip(s: &[(i64, u64)]) -> Chunk {
        let c = Chunk::encode(s);
        let mut out = vec![(0, 0); CHUNK];
        c.decode(&mut out);
        assert_eq!(out, s);
        for k in [0, 1, 57, CHUNK - 3] {
            let mut ts = [0i64; 3];
            c.timestamps(k, &mut ts);
            assert_eq!(
                ts[..],
                s[k..k + 3].iter().map(|p| p.0).collect::<Vec<_>>()[..]
            );
        }
        assert_eq!(c.max_ts(), s.iter().map(|p| p.0).max().unwrap_or(i64::MIN));
        c
    }

    #[test]
    fn counters_take_deltas_and_repeating_gauges_xor() {
        // A steady counter with noise: deltas of 11 bits, smaller than XOR or deltas of deltas (12 bits).
        let counter = round_trip(&samples(|k| {
            (1 << 40) + k * 5_000_000 + (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54)
        }));
        assert_eq!(tag(&counter), 11);
        // Without the noise's jumps (a steady 31 more a tick, now and then 969 less) deltas of deltas win.
        let steady = round_trip(&samples(|k| (1 << 40) + k * 5_000_000 + (k * 31 % 1_000)));
        assert_eq!(tag(&steady), TAG_DOD);
        // A gauge repeating one f64 now and then changing: XOR's 1 bit per repeat beats 64-bit deltas.
        let gauge = round_trip(&samples(|k| (20.0 + (k / 16) as f64 * 0.1).to_bits()));
        assert_eq!(tag(&gauge), TAG_XOR);
        assert!(values_len(&gauge) < CHUNK, "{}", values_len(&gauge));
        // A constant: 0 bits per value and, with a strict period, 0 bits per timestamp (the values' part is
        // the first value and the zero delta as varints).
        let strict: Vec<_> = (0..CHUNK as i64).map(|k| (k * 10, 7)).collect();
        let constant = round_trip(&strict);
        assert_eq!((constant.data[0], tag(&constant)), (0, 0));
        assert_eq!(values_len(&constant), 2);
    }

    #[test]
    fn bursts_at_a_steady_rate_take_deltas_of_deltas() {
        // 5 GB a tick for 7 ticks, then idle for 7: 33-bit deltas, XOR as wide, 1 bit a tick as deltas of
        // deltas.
        let bursty = round_trip(&samples(|k| {
            (1u64 << 45) + (k / 14 * 7 + (k % 14).min(7)) * 5_000_000_000
        }));
        assert_eq!(tag(&bursty), TAG_DOD);
        // About 6 bits a sample (deltas or XOR would take 33 or more).
        assert!(
            values_len(&bursty) < CHUNK * 7 / 8,
            "{}",
            values_len(&bursty)
        );
        // Extreme deltas of deltas still round-trip.
        round_trip(&samples(|k| match k % 4 {
            0 => 0,
            1 => u64::MAX,
            2 => 1 << 63,
            _ => k * 3,
        }));
    }

    #[test]
    fn wrapping_values_and_timestamps_round_trip() {
        round_trip(&samples(|k| (u64::MAX - 1_000).wrapping_add(k * 16)));
        let extremes: Vec<_> = (0..CHUNK)
            .map(|k| match k % 3 {
                0 => (i64::MIN + k as i64, 0),
                1 => (i64::MAX - k as i64, u64::MAX),
                _ => (-(k as i64), 1 << 63),
            })
            .collect();
        round_trip(&extremes);
    }
}
