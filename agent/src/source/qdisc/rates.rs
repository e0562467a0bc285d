//! Shaping rates in traffic-control messages: what a `tbf` root qdisc, or the classes of an `htb` root, limit
//! an interface's egress to (bytes/s).
//!
//! The crate keeps these kinds' `TCA_OPTIONS` undecoded (one attribute holding the nested ones, as the kernel
//! sends them), so they are read here from the kernel's structures: `struct tc_tbf_qopt` and
//! `struct tc_htb_opt`, each starting with `struct tc_ratespec`s whose `rate` (u32, bytes/s) sits after
//! `cell_log`, `linklayer`, `overhead`, `cell_align` and `mpu`; rates of 4 GB/s and more come in a 64-bit
//! attribute of their own.

use netlink_packet_core::{Nla, NlasIterator, NLA_F_NESTED};
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage, TcOption};

/// `TCA_TBF_PARMS` and `TCA_TBF_RATE64` in a `tbf` qdisc's `TCA_OPTIONS`.
pub(super) const TCA_TBF_PARMS: u16 = 1;
pub(super) const TCA_TBF_RATE64: u16 = 4;
/// Offset of `rate.rate` in `struct tc_tbf_qopt` (and of a `tc_ratespec`'s `rate`).
pub(super) const TBF_RATE_OFFSET: usize = 8;

/// `TCA_HTB_PARMS` and `TCA_HTB_CEIL64` in an `htb` class's `TCA_OPTIONS`.
pub(super) const TCA_HTB_PARMS: u16 = 1;
pub(super) const TCA_HTB_CEIL64: u16 = 7;
/// Offset of `ceil.rate` in `struct tc_htb_opt`: after its `rate` (a 12-byte `tc_ratespec`) and `ceil`'s
/// first 8 bytes.
pub(super) const HTB_CEIL_OFFSET: usize = 20;

/// The nested attributes of undecoded options, as `(kind, value)` (the nested flag cleared).
fn nested(options: &[TcOption]) -> Vec<(u16, Vec<u8>)> {
    let mut out = Vec::new();
    for o in options {
        let TcOption::Other(nla) = o else { continue };
        let mut value = vec![0u8; nla.value_len()];
        nla.emit_value(&mut value);
        for inner in NlasIterator::new(&value).flatten() {
            out.push((inner.kind() & !NLA_F_NESTED, inner.value().to_vec()));
        }
    }
    out
}

/// A u32 at `offset` of `v`, `None` when `v` is too short.
fn u32_at(v: &[u8], offset: usize) -> Option<u64> {
    let b: [u8; 4] = v.get(offset..offset + 4)?.try_into().ok()?;
    Some(u64::from(u32::from_ne_bytes(b)))
}

/// A u64 at the start of `v`, `None` when `v` is too short.
fn u64_of(v: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?))
}

/// The rate in a `tbf` qdisc's options: `TCA_TBF_RATE64` when present, else `rate.rate` of `TCA_TBF_PARMS`.
pub fn tbf_rate(options: &[TcOption]) -> Option<u64> {
    let attrs = nested(options);
    let wide = attrs.iter().find(|(k, _)| *k == TCA_TBF_RATE64);
    let parms = attrs.iter().find(|(k, _)| *k == TCA_TBF_PARMS);
    wide.and_then(|(_, v)| u64_of(v))
        .or_else(|| parms.and_then(|(_, v)| u32_at(v, TBF_RATE_OFFSET)))
}

/// The ceiling in an `htb` class's options: `TCA_HTB_CEIL64` when present, else `ceil.rate` of
/// `TCA_HTB_PARMS`.
pub fn htb_ceil(options: &[TcOption]) -> Option<u64> {
    let attrs = nested(options);
    let wide = attrs.iter().find(|(k, _)| *k == TCA_HTB_CEIL64);
    let parms = attrs.iter().find(|(k, _)| *k == TCA_HTB_PARMS);
    wide.and_then(|(_, v)| u64_of(v))
        .or_else(|| parms.and_then(|(_, v)| u32_at(v, HTB_CEIL_OFFSET)))
}

/// What an `htb` root lets through at most, from an `RTM_GETTCLASS` dump of its interface: the sum of its
/// top-level classes' ceilings (every class below one borrows within its parent's ceiling). `None` without a
/// top-level `htb` class whose ceiling can be read. Traffic that no class takes (a `default` naming no
/// class) leaves unshaped through htb's direct queue: that is not counted.
pub fn htb_limit(classes: &[TcMessage]) -> Option<u64> {
    let ceilings: Vec<u64> = classes
        .iter()
        .filter(|c| c.header.parent == TcHandle::ROOT)
        .filter(|c| {
            c.attributes
                .iter()
                .any(|a| matches!(a, TcAttribute::Kind(k) if k == "htb"))
        })
        .filter_map(|c| {
            c.attributes.iter().find_map(|a| match a {
                TcAttribute::Options(o) => htb_ceil(o),
                _ => None,
            })
        })
        .collect();
    (!ceilings.is_empty()).then(|| ceilings.iter().fold(0u64, |s, c| s.saturating_add(*c)))
}
