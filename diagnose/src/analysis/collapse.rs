//! A bandwidth collapse: bus bandwidth that falls far below what smaller sizes reached and stays there over
//! a range of sizes (34 GB/s at 16 MiB, then 0.9 to 7 GB/s up to 1 GiB). The curve of a healthy run rises
//! and saturates; a fall like this at the sizes training uses points at a protocol, buffer or fabric
//! problem, not at the link's rate.

use serde::Serialize;

use crate::nccl_tests::NcclTest;

/// Bus bandwidth below this share of the best a smaller size reached counts as collapsed.
pub const COLLAPSE_SHARE: f64 = 1.0 / 3.0;
/// Below this best bus bandwidth, GB/s, small sizes are too slow to tell a collapse from noise.
pub const MIN_BEFORE_GBPS: f64 = 1.0;

/// The first collapse of one placement's curve. Sizes in bytes, bandwidths in GB/s.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Collapse {
    /// Whether it is the in-place curve.
    pub in_place: bool,
    /// The size with the best bus bandwidth before the collapse, and that bandwidth.
    pub before_bytes: u64,
    pub before_busbw_gbps: f64,
    /// The first and last sizes below [`COLLAPSE_SHARE`] of it, in a row.
    pub collapsed_from_bytes: u64,
    pub collapsed_to_bytes: u64,
    /// The lowest bus bandwidth in the collapse and its size.
    pub lowest_busbw_gbps: f64,
    pub lowest_at_bytes: u64,
    /// The first size back above the share; `None` when the curve ends collapsed.
    pub recovered_at_bytes: Option<u64>,
}

/// The first collapse of the out-of-place (`in_place` false) or in-place curve, if any.
pub fn collapse(test: &NcclTest, in_place: bool) -> Option<Collapse> {
    let mut points: Vec<(u64, f64)> = test
        .rows
        .iter()
        .filter(|r| r.size_bytes > 0)
        .filter_map(|r| {
            let p = if in_place {
                r.in_place.as_ref()
            } else {
                r.out_of_place.as_ref()
            };
            Some((r.size_bytes, p?.busbw_gbps))
        })
        .collect();
    points.sort_by_key(|p| p.0);
    let mut best: Option<(u64, f64)> = None;
    let mut found: Option<Collapse> = None;
    for (size, busbw) in points {
        if let Some(c) = found.as_mut() {
            if busbw >= COLLAPSE_SHARE * c.before_busbw_gbps {
                c.recovered_at_bytes = Some(size);
                break;
            }
            c.collapsed_to_bytes = size;
            if busbw < c.lowest_busbw_gbps {
                (c.lowest_busbw_gbps, c.lowest_at_bytes) = (busbw, size);
            }
            continue;
        }
        match best {
            Some((at, top)) if top >= MIN_BEFORE_GBPS && busbw < COLLAPSE_SHARE * top => {
                found = Some(Collapse {
                    in_place,
                    before_bytes: at,
                    before_busbw_gbps: top,
                    collapsed_from_bytes: size,
                    collapsed_to_bytes: size,
                    lowest_busbw_gbps: busbw,
                    lowest_at_bytes: size,
                    recovered_at_bytes: None,
                });
            }
            Some((_, top)) if busbw <= top => {}
            _ => best = Some((size, busbw)),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl_tests::{Placement, Row};

    /// Rows of (size, out-of-place busbw, in-place busbw).
    fn test(points: &[(u64, f64, f64)]) -> NcclTest {
        let p = |busbw_gbps| Placement {
            time_us: 1.0,
            algbw_gbps: busbw_gbps,
            busbw_gbps,
            wrong: None,
        };
        let mut t = NcclTest::new(1);
        t.rows = points
            .iter()
            .map(|(size, oop, ip)| Row {
                size_bytes: *size,
                count: size / 4,
                dtype: "float".to_string(),
                redop: Some("none".to_string()),
                root: Some(-1),
                out_of_place: Some(p(*oop)),
                in_place: Some(p(*ip)),
                line: 1,
            })
            .collect();
        t
    }

    #[test]
    fn a_mid_size_collapse_and_its_recovery() {
        const M: u64 = 1 << 20;
        let t = test(&[
            (8 * M, 29.92, 30.12),
            (16 * M, 34.26, 0.22),
            (32 * M, 0.90, 0.39),
            (64 * M, 1.18, 0.86),
            (1024 * M, 7.25, 6.62),
            (2048 * M, 13.90, 14.43),
            (8192 * M, 37.31, 39.13),
        ]);
        let oop = collapse(&t, false).unwrap();
        assert_eq!((oop.before_bytes, oop.before_busbw_gbps), (16 * M, 34.26));
        assert_eq!(
            (oop.collapsed_from_bytes, oop.collapsed_to_bytes),
            (32 * M, 1024 * M)
        );
        assert_eq!((oop.lowest_busbw_gbps, oop.lowest_at_bytes), (0.90, 32 * M));
        // 13.90 is past a third of 34.26.
        assert_eq!(oop.recovered_at_bytes, Some(2048 * M));
        let ip = collapse(&t, true).unwrap();
        assert_eq!(
            (
                ip.before_bytes,
                ip.collapsed_from_bytes,
                ip.lowest_busbw_gbps
            ),
            (8 * M, 16 * M, 0.22)
        );
    }

    #[test]
    fn dips_and_slow_small_sizes_are_no_collapse() {
        // A protocol switch dips by a fifth; tiny sizes fall from 0.03 to 0.00.
        let t = test(&[
            (8, 0.03, 0.03),
            (16, 0.0, 0.0),
            (1 << 20, 10.52, 10.52),
            (2 << 20, 9.57, 9.57),
            (4 << 20, 11.0, 11.0),
        ]);
        assert_eq!(collapse(&t, false), None);
        assert_eq!(collapse(&t, true), None);
        // A collapse at the end of the curve has no recovery.
        let t = test(&[(1 << 20, 10.0, 10.0), (2 << 20, 1.0, 1.0)]);
        assert_eq!(collapse(&t, false).unwrap().recovered_at_bytes, None);
    }
}
