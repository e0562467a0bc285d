//! nccl-tests ran with validation off (`-c 0`, `validation: 0`): wrong results would not show in `#wrong`, so
//! the run's numbers say nothing about whether the data arrived intact.

use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    let tests = ctx
        .tests
        .iter()
        .filter(|t| t.test.validation == Some(false))
        .map(|t| (&t.file, Some(t.test.collective.as_str())));
    let logs = ctx
        .logs
        .iter()
        .filter(|l| l.log.tests_validation == Some(false))
        .map(|l| (&l.file, None));
    // An output read as a run and as a log is one file.
    let mut files: Vec<(&String, Option<&str>)> = Vec::new();
    for (file, collective) in tests.chain(logs) {
        if !files.iter().any(|(f, _)| *f == file) {
            files.push((file, collective));
        }
    }
    files
        .into_iter()
        .map(|(file, collective)| {
            let mut f = Finding::new(
                "results_unvalidated",
                Severity::Info,
                "nccl-tests ran without validating its results (-c 0): wrong results would not show".to_string(),
                "run nccl-tests with validation (the default, -c 1) before trusting its numbers",
            )
            .subject("file", file);
            if let Some(c) = collective {
                f = f.subject("collective", c);
            }
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{log, on_logs, on_tests, table, tests};
    use crate::link::LinkInfo;

    #[test]
    fn validation_off_in_an_output_or_a_log() {
        let off = format!(
            "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) validation: 0\n{}",
            table(&[(8, 0.0, 0.0)])
        );
        let f = on_tests(check, &tests(&off), &LinkInfo::default());
        assert_eq!((f.len(), f[0].severity), (1, Severity::Info));
        let on = off.replace("validation: 0", "validation: 1");
        assert!(on_tests(check, &tests(&on), &LinkInfo::default()).is_empty());
        let l = log("# nThread 1 nGpus 1 minBytes 8 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20 validation: 0\nh:1:1 [0] NCCL INFO Using network IB\n");
        assert_eq!(on_logs(check, &[l]).len(), 1);
    }
}
