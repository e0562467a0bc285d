//! The lines that say a run failed: nccl-tests' own (`HOST: Test NCCL failure common.cu:392 'unhandled cuda
//! error …'`, `HOST: Test CUDA failure …`, ` .. HOST pid 4766: Test failure common.cu:590`), the launcher's
//! (`mpirun noticed that process rank 3 … exited on signal 11`, `Exit code: 3`).

/// How many `NCCL WARN` messages before a failure are kept as its likely cause.
pub const WARNINGS_KEPT: usize = 3;

/// A line that reports a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureLine {
    /// The host that printed it, when the line names one.
    pub host: Option<String>,
    /// The line from the failure on (`Test NCCL failure common.cu:392 '…'`).
    pub message: String,
    /// A first-hand report (the failing call or signal) rather than a stack-trace line (` .. Test failure`).
    pub primary: bool,
}

/// The failure a line reports, if any.
pub fn failure_line(line: &str) -> Option<FailureLine> {
    let line = line.trim();
    for (marker, primary) in [
        ("Test NCCL failure", true),
        ("Test CUDA failure", true),
        ("Test failure", false),
        // nccl-tests of the NCCL 1.x era: `NCCL failure all_reduce.cu:95 'unhandled cuda error'`.
        ("NCCL failure ", true),
        ("CUDA failure ", true),
        // A framework's (`RuntimeError: NCCL error in: …, unhandled system error`) and the system's.
        ("NCCL error in:", true),
        ("Segmentation fault", true),
        ("Caught signal", true),
        ("core dumped", true),
    ] {
        if let Some(pos) = line.find(marker) {
            return Some(FailureLine {
                host: host_before(&line[..pos]),
                message: line[pos..].trim().to_string(),
                primary,
            });
        }
    }
    if line.contains("exited on signal") {
        return Some(FailureLine {
            host: None,
            message: line.to_string(),
            primary: true,
        });
    }
    // The launcher's word that a rank failed: `srun: error: node-3: task 5: Exited with exit code 1`, `mpirun
    // detected that one or more processes exited with non-zero status`: a failure whose cause is elsewhere.
    for marker in [
        "Exited with exit code",
        "exited with non-zero status",
        "returned a non-zero exit code",
    ] {
        if line.contains(marker) {
            return Some(FailureLine {
                host: None,
                message: line.to_string(),
                primary: false,
            });
        }
    }
    None
}

/// The host in what precedes a failure marker: `HCA-128: ` or ` .. HCA-128 pid 757466: `.
fn host_before(prefix: &str) -> Option<String> {
    let prefix = prefix.trim().trim_end_matches(':').trim();
    let prefix = prefix.strip_prefix("..").unwrap_or(prefix).trim();
    let host = match prefix.find(" pid ") {
        Some(pos) => &prefix[..pos],
        None => prefix,
    };
    let host = host.split_whitespace().last()?;
    Some(host.to_string())
}

/// The launcher's exit code: `  Exit code:    3` (Open MPI's summary of the first failed process).
pub fn exit_code(line: &str) -> Option<i32> {
    line.trim()
        .strip_prefix("Exit code:")
        .and_then(|v| v.trim().parse().ok())
}

/// The exit code a failure line names: srun's `… Exited with exit code 1`.
pub fn exit_code_in(message: &str) -> Option<i32> {
    let (_, rest) = message.split_once("exit code")?;
    rest.split_whitespace()
        .next()?
        .trim_end_matches('.')
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_tests_failure_lines() {
        let f = failure_line(
            "HCA-128: Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '",
        )
        .unwrap();
        assert_eq!(f.host.as_deref(), Some("HCA-128"));
        assert!(f.primary);
        assert_eq!(
            f.message,
            "Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '"
        );
        let t = failure_line(" .. GENOA-06 pid 4766: Test failure common.cu:590").unwrap();
        assert_eq!(
            (t.host.as_deref(), t.primary, t.message.as_str()),
            (Some("GENOA-06"), false, "Test failure common.cu:590")
        );
        assert!(failure_line("# Out of bounds values : 0 OK").is_none());
        let s = failure_line(
            "mpirun noticed that process rank 3 with PID 0 on node n1 exited on signal 11",
        )
        .unwrap();
        assert_eq!((s.host, s.primary), (None, true));
    }

    #[test]
    fn launchers_say_a_rank_failed() {
        let f = failure_line("srun: error: node-3: task 5: Exited with exit code 1").unwrap();
        assert!(!f.primary);
        assert_eq!(exit_code_in(&f.message), Some(1));
        assert!(failure_line(
            "mpirun detected that one or more processes exited with non-zero status, thus causing"
        )
        .is_some());
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code("  Exit code:    3"), Some(3));
        assert_eq!(exit_code("Exit code: x"), None);
        assert_eq!(exit_code("  Process name: [[44912,1],251]"), None);
    }
}
