//! A sealed chunk: [`CHUNK`] samples compressed as the ring's module documentation describes (timestamps as
//! bit-packed residuals from the chunk's line or as steps, values as frame-of-reference deltas, deltas of deltas
//! or XOR, whichever is smallest). Encoding and decoding are exact for any `i64` timestamps and `u64` values:
//! all arithmetic wraps.

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
/// Value tag of frame-of-reference deltas that share trailing zero bits: a tag byte, the bits shifted out,
/// then the width of what is left and the deltas as for the plain tag (a counter in KiB or 4-byte words read
/// as bytes).
const TAG_SHIFTED: u8 = 0x82;
/// Flag of the timestamp width byte: the residuals are steps from the previous timestamp (a node's tick numbers
/// for a series read in some of its ticks), not distances from the chunk's line.
const TS_DELTAS: u8 = 0x80;
/// Flag of the timestamp width byte, with [`TS_DELTAS`] (whose widths stay below 64): the steps after the
/// first are a 0 bit for the chunk's most common step, else a 1 bit and the residual (two thirds of the bits
/// for a series in two of every two or three of its node's ticks).
const TS_COMMON: u8 = 0x40;
/// Most bytes of an XOR stream: 2 + 5 + 6 + 64 bits per value.
const XOR_MAX: usize = (CHUNK - 1) * 77 / 8 + 1;

/// `CHUNK` compressed samples, in one allocation of their bytes (16 B in the ring's chunk list).
///
/// `data`: `[timestamp width | TS_DELTAS when coded as steps | TS_COMMON with the one-bit common step]` the
/// header as zigzag varints: `base`, `step`, and the largest timestamp (the last one when timestamps increase)
/// minus `base` ([`Stamps`]), then for [`TS_COMMON`] `varint(common residual)` `varint(residual bytes)`;
/// `[residuals]` ([`TsCode`]) `[value tag]` then, for deltas, (`shift` and `width` for [`TAG_SHIFTED`]) `varint(v_0)`
/// `varint(zigzag(min_delta))` and `CHUNK - 1` packed deltas (less `min_delta`, shifted right by `shift`); for
/// XOR, `v_0` as 8 bytes and the XOR stream; for deltas of deltas, `varint(v_0)`, `varint(zigzag(d_1))` and
/// the fields.
#[derive(Debug, Clone)]
pub(super) struct Chunk {
    data: Box<[u8]>,
}

/// How a chunk's timestamp residuals are coded (one concept for the encoder's [`Stamps`] and the reader's
/// [`Header`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TsCode {
    /// From the line `base + k * step`: `r_k = t_k - base - k * step`, `CHUNK` fields, each read in O(1).
    Line,
    /// As steps: `t_0 = base`, `r_k = t_k - t_{k-1} - step` (`step` the smallest), `CHUNK` fields (`r_0 = 0`).
    Steps,
    /// As steps after the first, each a 0 bit for this residual ([`TS_COMMON`]), else a 1 bit and the field.
    Common(u64),
}

/// A chunk's timestamps as coded, whichever [`TsCode`] needs the fewest bytes: the code's fields, found
/// without writing the residuals (the chunk's assembly computes them from the samples as it writes them; two
/// 2 KiB arrays of residuals, one per trial, were a seal's largest copies).
struct Stamps {
    code: TsCode,
    /// Bits per residual field.
    wt: u32,
    base: i64,
    step: i64,
    max_ts: i64,
    /// Bytes of the residuals as coded.
    len: usize,
}

impl Stamps {
    /// The line code of `s`: `step` its mean period, `base` moved so that every residual is ≥ 0.
    fn line(s: &[(i64, u64)]) -> Stamps {
        let t0 = s[0].0;
        let t_last = s[CHUNK - 1].0;
        let step = match t_last.checked_sub(t0) {
            Some(span) => span / (CHUNK as i64 - 1),
            None => ((i128::from(t_last) - i128::from(t0)) / (CHUNK as i128 - 1)) as i64,
        };
        let (mut emin, mut emax, mut max_ts) = (i64::MAX, i64::MIN, i64::MIN);
        let mut line = t0;
        for &(t, _) in s {
            let e = t.wrapping_sub(line);
            line = line.wrapping_add(step);
            emin = emin.min(e);
            emax = emax.max(e);
            max_ts = max_ts.max(t);
        }
        let wt = width(emax.wrapping_sub(emin) as u64);
        Stamps {
            code: TsCode::Line,
            wt,
            base: t0.wrapping_add(emin),
            step,
            max_ts,
            len: (CHUNK * wt as usize).div_ceil(8),
        }
    }

    /// The step code of `s` (with the common step as one bit when shorter); `None` when a timestamp goes
    /// backwards (the line codes those).
    fn deltas(s: &[(i64, u64)]) -> Option<Stamps> {
        let (mut dmin, mut dmax) = (i64::MAX, 0i64);
        for w in s.windows(2) {
            let d = w[1].0.checked_sub(w[0].0).filter(|&d| d >= 0)?;
            dmin = dmin.min(d);
            dmax = dmax.max(d);
        }
        let wt = width((dmax - dmin) as u64);
        let (code, len) = match common_residual(step_residuals(s, dmin), wt) {
            Some((c, bits)) => (TsCode::Common(c), bits.div_ceil(8)),
            None => (TsCode::Steps, (CHUNK * wt as usize).div_ceil(8)),
        };
        Some(Stamps {
            code,
            wt,
            base: s[0].0,
            step: dmin,
            max_ts: s[CHUNK - 1].0,
            len,
        })
    }

    /// Writes the residual fields of `s` (the samples these were found from).
    fn write(&self, s: &[(i64, u64)], bw: &mut BitWriter<'_>) {
        match self.code {
            TsCode::Line => {
                let mut line = self.base;
                for &(t, _) in s {
                    bw.put(t.wrapping_sub(line) as u64, self.wt);
                    line = line.wrapping_add(self.step);
                }
            }
            TsCode::Steps => {
                bw.put(0, self.wt);
                step_residuals(s, self.step).for_each(|r| bw.put(r, self.wt));
            }
            TsCode::Common(c) => {
                for r in step_residuals(s, self.step) {
                    if r == c {
                        bw.put(0, 1);
                    } else {
                        bw.put(1 | r << 1, 1 + self.wt);
                    }
                }
            }
        }
    }
}

/// `t_k - t_{k-1} - step` for `k` ≥ 1: steps of timestamps that never go backwards, less the smallest.
fn step_residuals(s: &[(i64, u64)], step: i64) -> impl ExactSizeIterator<Item = u64> + '_ {
    s.windows(2).map(move |w| (w[1].0 - w[0].0 - step) as u64)
}

/// The most common of `res` (`wt`-bit residuals) and the bits of the code that writes it as one bit, when
/// that takes fewer bits than `wt` bits each; tried for widths 2 to 6 (a series' steps through its node's
/// ticks).
fn common_residual(res: impl ExactSizeIterator<Item = u64>, wt: u32) -> Option<(u64, usize)> {
    if !(2..=6).contains(&wt) {
        return None;
    }
    let len = res.len();
    let mut counts = [0u16; 64];
    for r in res {
        counts[r as usize] += 1;
    }
    let (c, &n) = counts.iter().enumerate().max_by_key(|&(_, n)| *n)?;
    let bits = len + (len - usize::from(n)) * wt as usize;
    // Against `wt` bits each, with two header varints more (at most 3 bytes).
    (bits + 24 < len * wt as usize).then_some((c as u64, bits))
}

/// A chunk's header, read from its bytes.
struct Header {
    /// Bits per timestamp residual field.
    wt: u32,
    code: TsCode,
    base: i64,
    step: i64,
    max_ts: i64,
    /// Byte where the residuals start.
    at: usize,
    /// Byte after them: the value tag.
    values_at: usize,
}

impl Chunk {
    /// Encodes `s` (`CHUNK` samples).
    pub(super) fn encode(s: &[(i64, u64)]) -> Chunk {
        debug_assert_eq!(s.len(), CHUNK);
        let line = Stamps::line(s);
        // A strict line (0 bits) is as narrow as timestamps get.
        let stamps = match (line.wt > 0).then(|| Stamps::deltas(s)).flatten() {
            Some(d) if d.len < line.len => d,
            _ => line,
        };
        SCRATCH.with_borrow_mut(|(values, xor, deltas)| {
            encode_values(s, values, xor, deltas);
            Chunk::assemble(s, &stamps, values)
        })
    }

    /// A chunk's bytes from its samples' timestamps as `st` codes them and the values' bytes.
    fn assemble(s: &[(i64, u64)], st: &Stamps, values: &[u8]) -> Chunk {
        let ts_len = st.len;
        let mut head = [
            zigzag(st.base),
            zigzag(st.step),
            zigzag(st.max_ts.wrapping_sub(st.base)),
            0,
            0,
        ];
        let (flags, fields) = match st.code {
            TsCode::Line => (0, 3),
            TsCode::Steps => (TS_DELTAS, 3),
            TsCode::Common(c) => {
                head[3..].copy_from_slice(&[c, ts_len as u64]);
                (TS_DELTAS | TS_COMMON, 5)
            }
        };
        let head = &head[..fields];
        let at = 1 + head.iter().map(|&h| varint_len(h)).sum::<usize>();
        // Allocated at its final length and zeroed only where fields are written into it (a zeroed allocation
        // of the whole chunk, values included, was a `calloc` per seal: 2 % of the in-process ingest).
        let mut data = Vec::with_capacity(at + ts_len + values.len());
        data.resize(at + ts_len, 0);
        data[0] = st.wt as u8 | flags;
        let mut pos = 1;
        for &h in head {
            put_varint(&mut data, &mut pos, h);
        }
        let mut bw = BitWriter::new(&mut data[at..at + ts_len]);
        st.write(s, &mut bw);
        bw.finish();
        data.extend_from_slice(values);
        Chunk {
            data: data.into_boxed_slice(),
        }
    }

    /// The header fields.
    #[inline]
    fn header(&self) -> Header {
        let d = &self.data;
        let mut pos = 1;
        let base = unzigzag(get_varint(d, &mut pos));
        let step = unzigzag(get_varint(d, &mut pos));
        let max_ts = base.wrapping_add(unzigzag(get_varint(d, &mut pos)));
        let (code, wt) = match d[0] & (TS_DELTAS | TS_COMMON) {
            TS_DELTAS => (TsCode::Steps, d[0] & !TS_DELTAS),
            f if f == TS_DELTAS | TS_COMMON => (
                TsCode::Common(get_varint(d, &mut pos)),
                d[0] & !(TS_DELTAS | TS_COMMON),
            ),
            // A line's width may be 64 (0x40): only the step codes use the flag bits.
            _ => (TsCode::Line, d[0]),
        };
        let wt = u32::from(wt);
        let ts_len = match code {
            TsCode::Common(_) => get_varint(d, &mut pos) as usize,
            _ => (CHUNK * wt as usize).div_ceil(8),
        };
        Header {
            wt,
            code,
            base,
            step,
            max_ts,
            at: pos,
            values_at: pos + ts_len,
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

    /// Timestamps of samples `k..k + out.len()` into `out` (in O(1) from the line; from the chunk's first
    /// sample on when its timestamps are coded as steps).
    pub(super) fn timestamps(&self, k: usize, out: &mut [i64]) {
        let h = self.header();
        let wt = h.wt as usize;
        if h.code != TsCode::Line {
            return self.steps(&h, k, out);
        }
        let mut t = h.base.wrapping_add((k as i64).wrapping_mul(h.step));
        let mut bit = h.at * 8 + k * wt;
        for o in out {
            *o = t.wrapping_add(bits(&self.data, bit, h.wt) as i64);
            t = t.wrapping_add(h.step);
            bit += wt;
        }
    }

    /// [`timestamps`](Self::timestamps) of a chunk coded as steps: summed from its first sample.
    fn steps(&self, h: &Header, k: usize, out: &mut [i64]) {
        let (d, wt) = (&self.data, h.wt as usize);
        // Plain steps keep a field for the first sample; the one-bit code starts with the second.
        let mut bit = h.at * 8 + if h.code == TsCode::Steps { wt } else { 0 };
        let mut t = h.base;
        for j in 0..k + out.len() {
            if j > 0 {
                let (r, used) = match h.code {
                    TsCode::Common(c) if bits(d, bit, 1) == 0 => (c, 1),
                    TsCode::Common(_) => (bits(d, bit + 1, h.wt), 1 + wt),
                    _ => (bits(d, bit, h.wt), wt),
                };
                bit += used;
                t = t.wrapping_add(h.step).wrapping_add(r as i64);
            }
            if let Some(o) = j.checked_sub(k).and_then(|i| out.get_mut(i)) {
                *o = t;
            }
        }
    }

    /// All `CHUNK` samples into `out`.
    pub(super) fn decode(&self, out: &mut [(i64, u64)]) {
        let d = &self.data;
        let h = self.header();
        let mut ts = [0i64; CHUNK];
        self.timestamps(0, &mut ts);
        for (o, t) in out.iter_mut().zip(ts) {
            o.0 = t;
        }
        let mut pos = h.values_at;
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
            let (shift, wv) = if tag == TAG_SHIFTED {
                pos += 2;
                (u32::from(d[pos - 2]), u32::from(d[pos - 1]))
            } else {
                (0, u32::from(tag))
            };
            let mut v = get_varint(d, &mut pos);
            let dmin = unzigzag(get_varint(d, &mut pos)) as u64;
            let mut bit = pos * 8;
            out[0].1 = v;
            for o in &mut out[1..] {
                v = v.wrapping_add(dmin).wrapping_add(bits(d, bit, wv) << shift);
                o.1 = v;
                bit += wv as usize;
            }
        }
    }
}

thread_local! {
    /// A seal's value bytes and its XOR trial, reused: a chunk is encoded every `CHUNK` samples of every series,
    /// and each seal took two fresh buffers (one of them zeroed, 2.4 KiB). Less allocator work; no gain in time
    /// above the noise of the in-process bench (`measure::apply_cost`). And the values' deltas: a fresh array
    /// was 2 KiB set to zeros at every seal (with the flush's buffer, 2.6 % of the apply's instructions).
    static SCRATCH: RefCell<Scratch> = RefCell::new((Vec::new(), Vec::new(), Box::new([0; CHUNK])));
}

/// A seal's scratch space: the values' bytes, the XOR trial's, the values' deltas.
type Scratch = (Vec<u8>, Vec<u8>, Box<[i64; CHUNK]>);

/// The values' bytes, tag first, into `out`, in whichever of frame-of-reference deltas, XOR and delta of delta
/// takes the fewest (deltas of deltas tried for deltas of more than 1 bit, XOR for more than 8); `xor` and
/// `deltas` are scratch space (`deltas[1..]` written before they are read, `deltas[0]` never read).
fn encode_values(
    s: &[(i64, u64)],
    out: &mut Vec<u8>,
    xor: &mut Vec<u8>,
    deltas: &mut [i64; CHUNK],
) {
    let (mut dmin, mut dmax) = (i64::MAX, i64::MIN);
    for (d, w) in deltas[1..].iter_mut().zip(s.windows(2)) {
        *d = w[1].1.wrapping_sub(w[0].1) as i64;
        dmin = dmin.min(*d);
        dmax = dmax.max(*d);
    }
    // Bits every delta shares at the bottom (above `dmin`): a counter read in KiB or words as bytes.
    let spread = deltas[1..]
        .iter()
        .fold(0u64, |acc, &d| acc | (d as u64).wrapping_sub(dmin as u64));
    let shift = if spread == 0 {
        0
    } else {
        spread.trailing_zeros()
    };
    let wv = width(dmax.wrapping_sub(dmin) as u64 >> shift);
    let v0 = s[0].1;
    let head = if shift > 0 { 3 } else { 1 };
    let delta_len =
        head + varint_len(v0) + varint_len(zigzag(dmin)) + ((CHUNK - 1) * wv as usize).div_ceil(8);
    out.clear();
    if wv > 1 {
        let dod_len = dod_len(v0, deltas);
        let limit = dod_len.min(delta_len);
        if let Some(len) = (wv > 8)
            .then(|| xor_if_smaller(s, limit - 1, xor))
            .flatten()
        {
            out.push(TAG_XOR);
            out.extend_from_slice(&v0.to_le_bytes());
            out.extend_from_slice(&xor[..len]);
            return;
        }
        if dod_len < delta_len {
            return write_dod(v0, deltas, dod_len, out);
        }
    }
    out.resize(delta_len, 0);
    let mut pos = if shift > 0 {
        out[..3].copy_from_slice(&[TAG_SHIFTED, shift as u8, wv as u8]);
        3
    } else {
        out[0] = wv as u8;
        1
    };
    put_varint(out, &mut pos, v0);
    put_varint(out, &mut pos, zigzag(dmin));
    let mut bw = BitWriter::new(&mut out[pos..]);
    for &d in &deltas[1..] {
        bw.put((d as u64).wrapping_sub(dmin as u64) >> shift, wv);
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
        let h = c.header();
        h.values_at - h.at
    }

    /// The value tag byte of `c`.
    fn tag(c: &Chunk) -> u8 {
        c.data[c.header().values_at]
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
    fn tick_numbers_of_a_series_read_in_some_ticks_take_steps() {
        // A node's tick numbers for a series in two of every 2–3 ticks (the node's reads split over ticks),
        // now and then 8 apart: from the line they wander by tens (6 bits), as steps they take 3 bits, and
        // with the most common step (2) as one bit, 1 bit for it and 4 for the others.
        let ticks: Vec<_> = (0..CHUNK as i64)
            .scan(1_000, |t, k| {
                *t += if k % 37 == 0 {
                    8
                } else {
                    2 + (k * 7 % 5 == 0) as i64
                };
                Some((*t, k as u64 * 3))
            })
            .collect();
        let c = round_trip(&ticks);
        assert_eq!(c.data[0], TS_DELTAS | TS_COMMON | 3);
        let others = ticks.windows(2).filter(|w| w[1].0 - w[0].0 != 2).count();
        assert_eq!(ts_len(&c), (CHUNK - 1 + others * 3).div_ceil(8));
        assert!(ts_len(&c) < CHUNK * 3 / 8 * 2 / 3, "{} bytes", ts_len(&c));
        // Steps with no common one (1 to 4 in turn) keep the plain width (2 bits each).
        let even: Vec<_> = (0..CHUNK as i64)
            .scan(0, |t, k| {
                *t += 1 + k % 4;
                Some((*t, 0))
            })
            .collect();
        let c = round_trip(&even);
        assert_eq!((c.data[0], ts_len(&c)), (TS_DELTAS | 2, CHUNK * 2 / 8));
        // Every width the common step is tried at, the common one being the largest residual or 0, with
        // others of every size: exact.
        for wt in 2..=7u32 {
            for common in [0, (1i64 << wt) - 1] {
                let mut x = 0x2545_F491_4F6C_DD1Du64;
                let steps: Vec<_> = (0..CHUNK as i64)
                    .scan(-7, |t, _| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let r = if x.is_multiple_of(4) {
                            (x >> 8) as i64 & ((1 << wt) - 1)
                        } else {
                            common
                        };
                        *t += 5 + r;
                        Some((*t, x))
                    })
                    .collect();
                let c = round_trip(&steps);
                assert_eq!(c.data[0] & TS_COMMON != 0, wt <= 6, "width {wt}");
            }
        }
        let line = Stamps::line(&ticks);
        assert!(line.wt > 3, "the line takes {} bits", line.wt);
        // Consecutive numbers stay on the line (0 bits, every timestamp in O(1)); so does one going backwards.
        let strict: Vec<_> = (0..CHUNK as i64).map(|k| (k + 5, 0)).collect();
        assert_eq!(round_trip(&strict).data[0], 0);
        let mut back = ticks.clone();
        back[100].0 = back[99].0 - 1;
        assert_eq!(round_trip(&back).data[0] & TS_DELTAS, 0);
        // Equal timestamps are steps of 0.
        let mut same = ticks;
        same[10].0 = same[9].0;
        assert_ne!(round_trip(&same).data[0] & TS_DELTAS, 0);
    }

    #[test]
    fn deltas_sharing_low_zero_bits_are_shifted() {
        // A busy link counted in KiB and read as bytes: every delta a multiple of 1024, 10 bits dropped.
        let kib = round_trip(&samples(|k| {
            ((1 << 30) + k * 4_000_000 + (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52)) * 1024
        }));
        assert_eq!(tag(&kib), TAG_SHIFTED);
        let at = kib.header().at + ts_len(&kib);
        assert_eq!(kib.data[at + 1..at + 3], [10, 13]);
        // The same counter with noise in its low bits too: 13 bits of noise plus the 10 the shift saved.
        let bytes = round_trip(&samples(|k| {
            (1 << 40) + k * 4_096_000_000 + (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 42)
        }));
        assert_eq!(tag(&bytes), 23);
        assert!(values_len(&kib) + (CHUNK - 1) * 10 / 8 <= values_len(&bytes) + 2);
        // Shifted deltas at any shift and width round-trip, wrapping included.
        for shift in [1u32, 2, 31, 63] {
            round_trip(&samples(|k| {
                (u64::MAX - 7).wrapping_add((k.wrapping_mul(0x9E37_79B9) % 5) << shift)
            }));
        }
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
