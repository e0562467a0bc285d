//! How a node's inter-node bytes are spread over its HCA rails (one per GPU, or eight with the `rails8`
//! variant): the node's share per step (GPUs × per-rank bytes) split evenly, floor, the remainder one byte
//! each to the lowest rails. With one rail per GPU every rail carries exactly the per-rank bytes.

/// Bytes per step of each of `rails` rails carrying `share` bytes per step together.
pub(crate) fn split(share: u64, rails: usize) -> Vec<u64> {
    let n = rails.max(1) as u64;
    let (each, extra) = (share / n, share % n);
    (0..n).map(|r| each + u64::from(r < extra)).collect()
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn split_is_exact() {
        assert_eq!(split(8 * 433_125_000, 8), vec![433_125_000; 8]);
        let s = split(2 * 385_000_001, 8);
        assert_eq!(s.iter().sum::<u64>(), 770_000_002);
        assert_eq!((s[0], s[1], s[2]), (96_250_001, 96_250_001, 96_250_000));
    }
}
