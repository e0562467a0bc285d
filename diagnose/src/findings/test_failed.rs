//! A run that did not finish: it crashed (nccl-tests printed `Test NCCL failure …`, or an NCCL log shows an
//! error returned through init or bootstrap), its table stops before the last size it announced without the
//! footer, or it stops without a footer at all (a hang, or a cut paste), or a log stops before `Init
//! COMPLETE`. Its numbers are no baseline, and a run that failed before its first size has none at all: the
//! report says why instead. Failures come first, whatever else parses.

use super::{Context, Finding, Severity};
use crate::analysed::{LogReport, TestReport};
use crate::units::human_bytes;

pub fn check(ctx: &Context) -> Vec<Finding> {
    let tests = ctx.tests.iter().filter_map(|t| {
        if t.test.failure.is_some() {
            Some(failed(t))
        } else if t.test.cut_short() {
            Some(cut_short(t))
        } else if !t.test.footer && !t.test.rows.is_empty() {
            Some(no_footer(t))
        } else {
            None
        }
    });
    let logs = ctx.logs.iter().filter_map(|l| {
        if l.log.failure.is_some() {
            Some(log_failed(l))
        } else if l.log.init_complete == Some(false) {
            Some(log_stopped(l))
        } else {
            None
        }
    });
    tests.chain(logs).collect()
}

/// The log shows an error NCCL returned up through its init or bootstrap, or a failure line.
fn log_failed(l: &LogReport) -> Finding {
    let f = l.log.failure.as_ref().expect("checked by the caller");
    Finding::new(
        "test_failed",
        Severity::Critical,
        format!("the run failed: {}", f.message),
        "fix what the failing line names (an unreachable peer: the interface NCCL binds to, a firewall, the route), then run again",
    )
    .subject("file", &l.file)
    .evidence("failure", f.message.clone())
    .evidence("failure_line", f.line as u64)
    .cite(l.log.cited("failure"))
}

/// Init began and the log stops before any communicator finished it, without an error.
fn log_stopped(l: &LogReport) -> Finding {
    Finding::new(
        "results_incomplete",
        Severity::Info,
        "the log stops before Init COMPLETE and shows no results: the run hung in its init, or the log was cut there"
            .to_string(),
        "if the run hung, take a stack of the hung ranks (py-spy dump, gdb) and run with NCCL_DEBUG=INFO          NCCL_DEBUG_SUBSYS=INIT,NET; else pass the whole log",
    )
    .subject("file", &l.file)
    .cite(l.log.cited("last_line"))
}

/// Rows without a footer: the run stopped (a hang, a kill) or the paste was cut; which, the file does not say.
fn no_footer(t: &TestReport) -> Finding {
    let last = t.test.largest_size_bytes().unwrap_or(0);
    let last_row = t
        .test
        .rows
        .iter()
        .filter(|r| r.line > 0)
        .max_by_key(|r| r.line);
    let mut f = Finding::new(
        "results_incomplete",
        Severity::Info,
        format!(
            "{}'s table ends at {} without its footer (no average line): the run stopped there or the output was cut",
            super::run_name(t),
            human_bytes(last)
        ),
        "pass the whole output; if the run hung, take a stack of the hung ranks",
    )
    .subject("file", &t.file)
    .subject("collective", &t.test.collective)
    .evidence("last_size_bytes", last);
    if let Some(r) = last_row {
        f = f.cite_line(&t.file, r.line);
    }
    f
}

/// The run crashed: where, how, and the NCCL warning before it.
fn failed(t: &TestReport) -> Finding {
    let f = t.test.failure.as_ref().expect("checked by the caller");
    let when = match f.after_bytes {
        Some(b) => format!("after its {} row", human_bytes(b)),
        None => "before its first size".to_string(),
    };
    let warn = f
        .nccl_warnings
        .last()
        .map(|w| format!(" after NCCL WARN {w}"))
        .unwrap_or_default();
    let hosts = match f.hosts {
        0 | 1 => String::new(),
        n => format!(" on {n} hosts"),
    };
    let mut finding = Finding::new(
        "test_failed",
        Severity::Critical,
        format!("{} failed {when}: {}{warn}{hosts}", super::run_name(t), f.message),
        "read the NCCL WARN lines before the failure (NCCL_DEBUG=INFO) and fix their cause; the run's table is \
         partial and no baseline: re-run it to the end",
    )
    .subject("file", &t.file)
    .subject("collective", &t.test.collective)
    .evidence("failure", f.message.clone())
    .evidence("failure_line", f.line as u64)
    .evidence("rows", t.test.rows.len() as u64)
    .evidence("hosts", u64::from(f.hosts))
    .cite_line(&t.file, f.line);
    if let Some(b) = f.after_bytes {
        finding = finding.evidence("after_bytes", b);
    }
    if !f.nccl_warnings.is_empty() {
        finding = finding.evidence("nccl_warnings", f.nccl_warnings.join(" | "));
    }
    if let Some(code) = f.exit_code {
        finding = finding.evidence("exit_code", code);
    }
    finding
}

/// The table ends before its last size, without a footer: the output was cut (or the run killed).
fn cut_short(t: &TestReport) -> Finding {
    let last = t.test.largest_size_bytes().unwrap_or(0);
    let max = t.test.max_bytes.unwrap_or(0);
    Finding::new(
        "results_incomplete",
        Severity::Warning,
        format!(
            "{}'s table stops at {} of the {} it announced, without its footer: the output was cut or the run \
             stopped",
            super::run_name(t),
            human_bytes(last),
            human_bytes(max)
        ),
        "pass the whole output; a partial table is no baseline",
    )
    .subject("file", &t.file)
    .subject("collective", &t.test.collective)
    .evidence("last_size_bytes", last)
    .evidence("max_bytes", max)
    .cite(&super::test_rows(t, &[last]))
    .cite_line(&t.file, t.test.header_line.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{log, on_logs, on_tests, table, tests};
    use crate::link::LinkInfo;

    #[test]
    fn a_crash_midway_and_one_before_the_first_row() {
        let text = format!(
            "# nThread 1 nGpus 1 minBytes 8589934592 maxBytes 34359738368 step: 2(factor) validation: 1\n{}\
             h1:1:1 [0] enqueue.cc:1500 NCCL WARN Cuda failure 1 'invalid argument'\n\
             HCA-1: Test NCCL failure common.cu:1204 'unhandled cuda error'\n\
             HCA-2: Test NCCL failure common.cu:1204 'unhandled cuda error'\n  Exit code:    3\n",
            table(&[(8 << 30, 364.57, 365.65), (16 << 30, 367.29, 367.44)])
        );
        let f = on_tests(check, &tests(&text), &LinkInfo::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, "test_failed");
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].summary,
            "the run failed after its 16 GiB row: Test NCCL failure common.cu:1204 'unhandled cuda error' after \
             NCCL WARN Cuda failure 1 'invalid argument' on 2 hosts"
        );
        assert_eq!(f[0].evidence["after_bytes"], 16u64 << 30);
        assert_eq!(f[0].evidence["exit_code"], 3);
        let before = "./build/all_reduce_perf -g 2\n# nThread 1 nGpus 2 minBytes 8 maxBytes 128 step: 2(factor)\n\
                      G: Test NCCL failure common.cu:392 'unhandled cuda error'\n";
        let f = on_tests(check, &tests(before), &LinkInfo::default());
        assert_eq!(
            f[0].summary,
            "all_reduce_perf failed before its first size: Test NCCL failure common.cu:392 'unhandled cuda error'"
        );
        assert_eq!(f[0].evidence["rows"], 0);
    }

    #[test]
    fn a_log_that_failed_and_one_that_stopped() {
        let failed = log("h:1:2 [0] include/socket.h:361 NCCL WARN Call to connect timeout : Connection refused\n\
                          h:1:2 [0] NCCL INFO bootstrap.cu:19 -> 2\n\
                          h:1:2 [0] NCCL INFO init.cu:420 -> 2\n");
        let f = on_logs(check, &[failed]);
        assert_eq!(
            (f[0].kind, f[0].severity),
            ("test_failed", Severity::Critical)
        );
        assert!(f[0].summary.contains("Connection refused"));
        let lines: Vec<Option<usize>> = f[0].cites.iter().map(|c| c.line).collect();
        assert_eq!(lines, [Some(1), Some(2)]);
        let stopped = log(
            "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init START\n\
                           h:1:2 [0] NCCL INFO P2P Chunksize set to 131072\n",
        );
        let f = on_logs(check, &[stopped]);
        assert_eq!(
            (f[0].kind, f[0].severity),
            ("results_incomplete", Severity::Info)
        );
        assert!(f[0].cites[0].text.contains("P2P Chunksize"));
        let done = log(
            "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n",
        );
        assert!(on_logs(check, &[done]).is_empty());
    }

    #[test]
    fn a_cut_table_is_incomplete_a_whole_one_is_not() {
        let header =
            "# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 2(factor) validation: 1\n";
        let cut = format!("{header}{}", table(&[(8, 0.0, 0.0), (16, 0.0, 0.0)]));
        let f = on_tests(check, &tests(&cut), &LinkInfo::default());
        assert_eq!(
            (f[0].kind, f[0].severity),
            ("results_incomplete", Severity::Warning)
        );
        assert!(f[0]
            .summary
            .contains("stops at 16 B of the 1 MiB it announced"));
        let whole = format!("{cut}# Avg bus bandwidth    : 0\n");
        assert!(on_tests(check, &tests(&whole), &LinkInfo::default()).is_empty());
        // Rows without a header's sizes and without a footer: stopped or cut, said at info.
        let bare = table(&[(8, 0.0, 0.0), (16, 0.0, 0.0)]);
        let f = on_tests(check, &tests(&bare), &LinkInfo::default());
        assert_eq!(
            (f[0].kind, f[0].severity),
            ("results_incomplete", Severity::Info)
        );
        assert_eq!(f[0].cites[0].line, Some(3));
    }
}
