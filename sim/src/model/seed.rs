//! Seeded, deterministic numbers: every value that varies between links, nodes, steps or chunks is a mix of
//! the spec's seed with a key naming what it is for, so equal specs give equal values.

/// splitmix64: a deterministic mix of the seed with a key.
pub(crate) fn mix(seed: u64, key: u64) -> u64 {
    let mut z = seed ^ key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key of a per-node, per-device value: `node << 32 ^ dev << 16 ^ what`.
fn key(node: usize, dev: u64, what: u64) -> u64 {
    ((node as u64) << 32) ^ (dev << 16) ^ what
}

/// A seeded value in `[lo, lo + span)`.
pub(crate) fn seeded(seed: u64, node: usize, dev: u64, what: u64, lo: u64, span: u64) -> u64 {
    lo + mix(seed, key(node, dev, what)) % span.max(1)
}

/// Seeded, deterministic values that differ per node and device (GUIDs, addresses).
pub(crate) fn seeded_u64(seed: u64, node: usize, dev: u64, what: u64) -> u64 {
    mix(seed, key(node, dev, what))
}

/// The key of a stream of seeded values (jitter per step): a mix of its own, so that the stream never
/// meets the per-device keys above.
pub(crate) fn stream_key(seed: u64, stream: u64) -> u64 {
    mix(seed, stream)
}

/// A seeded value in `[-amplitude, amplitude]` for item `index` of the stream keyed `key`
/// ([`stream_key`]).
pub(crate) fn seeded_signed(key: u64, index: u64, amplitude: u64) -> i128 {
    if amplitude == 0 {
        return 0;
    }
    let v = mix(key, index) % (2 * amplitude + 1);
    i128::from(v) - i128::from(amplitude)
}
