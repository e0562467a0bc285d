//! nccl-tests reported wrong elements or out-of-bounds values: data is corrupted somewhere.

use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.tests
        .iter()
        .filter(|t| t.summary.wrong_total > 0.0 || t.test.out_of_bounds.is_some_and(|n| n > 0))
        .map(|t| {
            Finding::new(
                "link_errors",
                Severity::Critical,
                format!(
                    "{} returned wrong results ({} wrong elements, {} out-of-bounds values)",
                    t.test.collective,
                    t.summary.wrong_total,
                    t.test.out_of_bounds.unwrap_or(0)
                ),
                "check link error counters (symbol errors, link downed) and GPU memory (ECC) on the ranks of this test; \
                 do not trust bandwidth figures from it",
            )
            .subject("file", &t.file)
            .subject("collective", &t.test.collective)
            .evidence("wrong_elements", t.summary.wrong_total)
            .evidence("out_of_bounds", t.test.out_of_bounds.unwrap_or(0))
        })
        .collect()
}
