//! How the bare bus bandwidth holds up as a collective runs on more ranks.

use crate::analysed::TestReport;

/// Peak bus bandwidth per collective and scale, with efficiency against the smallest scale measured for that
/// collective: (collective, ranks, peak GB/s, efficiency as a share), by collective then ranks. Tests without a
/// known rank count or peak are left out, and so are scales measured more than once (repeated runs are
/// judged one by one, not set against each other as scales).
pub fn scaling_table(tests: &[TestReport]) -> Vec<(String, u32, f64, f64)> {
    let rows: Vec<(String, u32, f64)> = tests
        .iter()
        .filter_map(|t| {
            Some((
                t.test.collective.clone(),
                t.test.nranks()?,
                t.summary.peak_busbw_gbps?,
            ))
        })
        .collect();
    let repeated = |c: &str, n: u32| rows.iter().filter(|r| r.0 == c && r.1 == n).count() > 1;
    let mut rows: Vec<(String, u32, f64)> = rows
        .iter()
        .filter(|r| !repeated(&r.0, r.1))
        .cloned()
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut out = Vec::new();
    for (c, n, p) in &rows {
        let first = rows.iter().find(|r| r.0 == *c).map(|r| r.2).unwrap_or(*p);
        out.push((c.clone(), *n, *p, if first > 0.0 { p / first } else { 0.0 }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::scaling_table;
    use crate::report::fixtures::test_report;

    #[test]
    fn efficiency_against_the_smallest_scale_of_each_collective() {
        let tests = vec![
            test_report("all_reduce_perf", &["a", "b", "c", "d"], Some(40.0)),
            test_report("all_gather_perf", &["a", "b"], Some(30.0)),
            test_report("all_reduce_perf", &["a", "b"], Some(50.0)),
            test_report("all_reduce_perf", &[], Some(45.0)),
            test_report("all_gather_perf", &["a", "b", "c"], None),
            // Two runs of one scale: neither is a scale of its own.
            test_report("reduce_scatter_perf", &["a", "b"], Some(20.0)),
            test_report("reduce_scatter_perf", &["a", "b"], Some(2.0)),
        ];
        assert_eq!(
            scaling_table(&tests),
            vec![
                ("all_gather_perf".to_string(), 2, 30.0, 1.0),
                ("all_reduce_perf".to_string(), 2, 50.0, 1.0),
                ("all_reduce_perf".to_string(), 4, 40.0, 0.8),
            ]
        );
    }
}
