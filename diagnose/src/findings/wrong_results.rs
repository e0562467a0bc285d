//! nccl-tests reported wrong elements or out-of-bounds values: the data is corrupt, and the run's figures are
//! no measurement. What corrupts it the file does not say; the possible causes are listed apart, at `info`,
//! as possibilities, and a cause is named only where a line of the input names it.

use super::{test_rows, Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.tests
        .iter()
        .filter(|t| t.summary.wrong_total > 0.0 || t.test.out_of_bounds.is_some_and(|n| n > 0))
        .flat_map(|t| {
            let wrong_sizes: Vec<u64> = t
                .test
                .rows
                .iter()
                .filter(|r| r.placements().any(|(_, p)| p.wrong.is_some_and(|w| w > 0.0)))
                .map(|r| r.size_bytes)
                .collect();
            let mut cites = test_rows(t, &wrong_sizes[..wrong_sizes.len().min(3)]);
            cites.retain(|c| Some(c.line) != t.test.avg_line.map(Some));
            let wrong = Finding::new(
                "wrong_results",
                Severity::Critical,
                format!(
                    "{} returned wrong results ({} wrong elements, {} out-of-bounds values): the data is corrupt and its figures are no measurement",
                    super::run_name(t),
                    t.summary.wrong_total,
                    t.test.out_of_bounds.unwrap_or(0)
                ),
                "do not use this run's bandwidth; find the corruption's cause (see the possible causes) and run again with validation",
            )
            .subject("file", &t.file)
            .subject("collective", &t.test.collective)
            .evidence("wrong_elements", t.summary.wrong_total)
            .evidence("out_of_bounds", t.test.out_of_bounds.unwrap_or(0))
            .evidence("sizes_with_wrong_bytes", wrong_sizes.clone())
            .cite(&cites);
            let causes = Finding::new(
                "possible_causes",
                Severity::Info,
                format!(
                    "the input does not show why {} returned wrong results; possible causes: link errors \
                     (symbol errors, retransmissions), GPU memory errors (ECC), a bug of the NCCL version or \
                     its protocol settings, in-network reduction (SHARP) faults",
                    super::run_name(t)
                ),
                "check the link error counters and the GPUs' ECC counters of the ranks, and run again with another \
                 NCCL version or NCCL_PROTO to tell these apart",
            )
            .subject("file", &t.file)
            .subject("collective", &t.test.collective)
            .cite(&cites);
            [wrong, causes]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{on_tests, tests};
    use crate::link::LinkInfo;

    #[test]
    fn wrong_results_cite_their_rows_and_name_no_cause() {
        let text = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
                    262144 65536 float sum -1 325.1 0.81 0.81 0 325.3 0.81 0.81 0\n\
                    524288 131072 float sum -1 663.1 0.79 0.79 237858 569.4 0.92 0.92 238038\n";
        let f = on_tests(check, &tests(text), &LinkInfo::default());
        assert_eq!(f.len(), 2);
        assert_eq!(
            (f[0].kind, f[0].severity),
            ("wrong_results", Severity::Critical)
        );
        assert_eq!(f[0].evidence["wrong_elements"], 475896.0);
        assert_eq!(f[0].cites[0].line, Some(3));
        assert!(!f[0].summary.contains("link"));
        assert_eq!(
            (f[1].kind, f[1].severity),
            ("possible_causes", Severity::Info)
        );
    }
}
