//! Naming a run that does not say which collective it measured: from the binary its command line names,
//! then the ratio of bus to algorithm bandwidth nccl-tests applies per collective. The file's name is never
//! read: it is no evidence of what ran.

use super::NcclTest;

/// Names a test from the binary the file names, else from its numbers.
pub fn name_test(test: &mut NcclTest) {
    if let Some(c) = test
        .command_binary
        .as_deref()
        .and_then(collective_from_name)
    {
        test.collective = c.to_string();
        test.collective_source = "command_line";
        return;
    }
    if let Some(name) = infer_collective(test) {
        test.collective = name.to_string();
        test.collective_source = "inferred";
        return;
    }
    test.collective = "unknown".to_string();
    test.collective_source = "unknown";
}

/// Maps a file or program name (`all_reduce_perf`, `nccl_allgather.log`, `AllReduce`) to the nccl-tests
/// binary name.
pub fn collective_from_name(name: &str) -> Option<&'static str> {
    let lower: String = name
        .to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    const NAMES: [(&str, &str); 9] = [
        ("allreduce", "all_reduce_perf"),
        ("allgather", "all_gather_perf"),
        ("reducescatter", "reduce_scatter_perf"),
        ("alltoall", "alltoall_perf"),
        ("broadcast", "broadcast_perf"),
        ("sendrecv", "sendrecv_perf"),
        ("hypercube", "hypercube_perf"),
        ("scatter", "scatter_perf"),
        ("gather", "gather_perf"),
    ];
    NAMES
        .iter()
        .find(|(k, _)| lower.contains(k))
        .map(|(_, v)| *v)
        .or_else(|| {
            // `reduce` must come after `allreduce` and `reducescatter`.
            lower.contains("reduce").then_some("reduce_perf")
        })
}

/// busbw/algbw of the largest row measured at 1 GB/s or more (smaller values are rounded too coarsely).
fn bandwidth_ratio(test: &NcclTest) -> Option<f64> {
    test.rows
        .iter()
        .rev()
        .filter_map(|r| r.out_of_place.as_ref().or(r.in_place.as_ref()))
        .find(|p| p.algbw_gbps >= 1.0)
        .map(|p| p.busbw_gbps / p.algbw_gbps)
}

/// Infers the collective from busbw/algbw, which nccl-tests sets per collective: 2(n-1)/n for all-reduce,
/// (n-1)/n for all-gather, reduce-scatter and all-to-all (reduce-scatter told apart by the `redop` column,
/// all-gather and all-to-all not at all, so neither is named), 1 for the rooted
/// ones. Without a known rank count, a ratio between 1 and 2 is all-reduce when 2/(2-ratio) is a whole rank
/// count no lower than the ranks listed (72 ranks give 1.972).
fn infer_collective(test: &NcclTest) -> Option<&'static str> {
    let ratio = bandwidth_ratio(test)?;
    let close = |x: f64| (ratio - x).abs() < 0.02 * x;
    let has_redop = test
        .rows
        .first()
        .is_some_and(|r| r.redop.as_deref().is_some_and(|o| o != "none"));
    let has_root = test
        .rows
        .first()
        .is_some_and(|r| r.root.is_some_and(|x| x >= 0));
    let Some(n) = test.nranks().map(f64::from) else {
        let n = 2.0 / (2.0 - ratio);
        let whole = (n - n.round()).abs() < 0.05 * n.max(1.0) && n.round() >= 3.0;
        let listed = f64::from(test.nranks_at_least().unwrap_or(0));
        return (ratio > 1.05 && ratio < 2.0 && whole && n.round() >= listed && has_redop)
            .then_some("all_reduce_perf");
    };
    if n < 2.0 {
        return None;
    }
    if close(2.0 * (n - 1.0) / n) {
        Some("all_reduce_perf")
    } else if close((n - 1.0) / n) {
        // Without a reduction the ratio is all-gather's and all-to-all's alike: no name then.
        has_redop.then_some("reduce_scatter_perf")
    } else if close(1.0) && has_root {
        Some(if has_redop {
            "reduce_perf"
        } else {
            "broadcast_perf"
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl_tests::{Placement, RankDevice, Row};

    fn test_with(ranks: &[u32], algbw: f64, busbw: f64) -> NcclTest {
        let mut t = NcclTest::new(1);
        t.ranks = ranks
            .iter()
            .map(|r| RankDevice {
                rank: *r,
                host: "h".to_string(),
                device: None,
                bus: None,
                line: 0,
            })
            .collect();
        let p = Placement {
            time_us: 10.0,
            algbw_gbps: algbw,
            busbw_gbps: busbw,
            wrong: Some(0.0),
        };
        t.rows.push(Row {
            size_bytes: 1 << 30,
            count: 1 << 28,
            dtype: "float".to_string(),
            redop: Some("sum".to_string()),
            root: Some(-1),
            out_of_place: Some(p.clone()),
            in_place: Some(p),
            line: 1,
        });
        t
    }

    #[test]
    fn names_from_file_names() {
        assert_eq!(
            collective_from_name("nccl_allgather.log"),
            Some("all_gather_perf")
        );
        assert_eq!(
            collective_from_name("all_reduce_8gpu.txt"),
            Some("all_reduce_perf")
        );
        assert_eq!(
            collective_from_name("reduce_scatter.txt"),
            Some("reduce_scatter_perf")
        );
        assert_eq!(collective_from_name("reduce.txt"), Some("reduce_perf"));
        assert_eq!(collective_from_name("AllReduce"), Some("all_reduce_perf"));
        assert_eq!(collective_from_name("run.txt"), None);
    }

    #[test]
    fn the_binary_the_file_names_comes_before_the_numbers() {
        let mut t = test_with(&[0, 1], 10.0, 10.0);
        t.command_binary = Some("sendrecv_perf".to_string());
        name_test(&mut t);
        assert_eq!(
            (t.collective.as_str(), t.collective_source),
            ("sendrecv_perf", "command_line")
        );
    }

    #[test]
    fn all_reduce_from_the_ratio_with_or_without_a_rank_count() {
        // 4 ranks: 2 * 3/4 = 1.5.
        let mut t = test_with(&[0, 1, 2, 3], 6.27, 9.40);
        name_test(&mut t);
        assert_eq!(
            (t.collective.as_str(), t.collective_source),
            ("all_reduce_perf", "inferred")
        );
        // Only rank 71 listed: 834.57 / 423.16 = 1.972 = 2 * 71/72.
        let mut t = test_with(&[71], 423.16, 834.57);
        name_test(&mut t);
        assert_eq!(t.collective, "all_reduce_perf");
        // No list: 187.91 / 100.22 = 1.875 = 2 * 15/16.
        let mut t = test_with(&[], 100.22, 187.91);
        name_test(&mut t);
        assert_eq!(t.collective, "all_reduce_perf");
        // A ratio of 1.2 is no whole rank count (2/0.8 = 2.5); a ratio of 1 without ranks says nothing.
        let mut t = test_with(&[], 10.0, 12.0);
        name_test(&mut t);
        assert_eq!(t.collective, "unknown");
        let mut t = test_with(&[], 10.0, 10.0);
        name_test(&mut t);
        assert_eq!(t.collective_source, "unknown");
    }
}
