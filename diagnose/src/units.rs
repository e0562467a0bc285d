//! How quantities are written for people, in findings and reports alike.

/// A byte count in binary units: `8 B`, `4 KiB`, `2.5 MiB`, `8 GiB` (one decimal unless whole).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::human_bytes;

    #[test]
    fn bytes_in_binary_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(8), "8 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(4096), "4 KiB");
        assert_eq!(human_bytes(2_621_440), "2.5 MiB");
        assert_eq!(human_bytes(8 << 30), "8 GiB");
        assert_eq!(human_bytes(3 << 50), "3072 TiB");
    }
}
