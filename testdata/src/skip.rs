//! Tests that cannot run here say so where a person sees it: a loud line on stderr (past the harness's output
//! capture, which swallows what passing tests print) and a line appended to the run's skip log, which `.ci/run`
//! prints by name at the end of the run (the harness itself shows a skipped test as `ok`).
//!
//! The skip log is `$COMMWATCH_SKIP_LOG` when set, else `commwatch-skipped-tests.txt` in the profile folder of
//! the target directory the test binary was built in (`target/debug/`, beside the `deps/` folder that holds
//! test binaries). Each line is `<test>: <reason>`.

use std::fs::OpenOptions;
use std::io::Write;
use std::panic::Location;
use std::path::{Path, PathBuf};

use crate::locate::Env;

/// Overrides where skipped tests are recorded.
pub const SKIP_LOG_VAR: &str = "COMMWATCH_SKIP_LOG";
/// The skip log's file name in the target directory's profile folder.
pub const SKIP_LOG_NAME: &str = "commwatch-skipped-tests.txt";

/// The calling test cannot run here for `reason` (say what is missing and how to get it, e.g. "promtool is
/// not installed (apt-get install prometheus)"). Under `CI=true` it panics with the reason, since CI installs
/// everything the tests need; elsewhere it [`skip`]s. The caller returns early after it.
#[track_caller]
pub fn unavailable(reason: &str) {
    let test = test_name(Location::caller());
    assert!(
        !Env::from_process().ci,
        "{test}: {reason} (required when CI=true)"
    );
    record(&test, reason);
}

/// The calling test skips, for `reason`, whether or not under CI (for what CI machines may lack too, such as
/// an RDMA device): says so loudly and records it in the skip log. The caller returns early after it.
#[track_caller]
pub fn skip(reason: &str) {
    record(&test_name(Location::caller()), reason);
}

/// Writes the loud line for `test` to stderr and appends `<test>: <reason>` to the skip log. Neither can fail
/// the test: a skip log that cannot be written is said on stderr.
pub fn record(test: &str, reason: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{}", loud_line(test, reason));
    let Some(log) = log_path(
        std::env::var_os(SKIP_LOG_VAR).map(PathBuf::from),
        std::env::current_exe().ok().as_deref(),
    ) else {
        return;
    };
    let appended = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        // One write of one short line: appends from parallel tests do not interleave.
        .and_then(|mut f| f.write_all(log_line(test, reason).as_bytes()));
    if let Err(e) = appended {
        let _ = writeln!(err, "could not record the skip in {}: {e}", log.display());
    }
}

/// `*** SKIPPED <test>: <reason> ***`.
pub fn loud_line(test: &str, reason: &str) -> String {
    format!("*** SKIPPED {test}: {reason} ***")
}

/// The skip log's line: `<test>: <reason>` and a newline, the reason on one line.
pub fn log_line(test: &str, reason: &str) -> String {
    format!("{test}: {}\n", reason.replace('\n', " "))
}

/// Where the skip log is: `var` (the value of [`SKIP_LOG_VAR`]) when set and not empty; else beside the
/// `deps/` folder holding the test binary `exe` (or beside `exe` where it is not in one); `None` when neither
/// is known.
pub fn log_path(var: Option<PathBuf>, exe: Option<&Path>) -> Option<PathBuf> {
    if let Some(v) = var.filter(|v| !v.as_os_str().is_empty()) {
        return Some(v);
    }
    let dir = exe?.parent()?;
    let profile = match dir.file_name() {
        Some(name) if name == "deps" => dir.parent()?,
        _ => dir,
    };
    Some(profile.join(SKIP_LOG_NAME))
}

/// The running test's name: the test harness names each test's thread after it. Outside a named thread
/// (a bench's `main`, `--test-threads=1` on some harnesses) the caller's file and line stand in.
pub fn test_name(caller: &Location<'_>) -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => format!("{}:{}", caller.file(), caller.line()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_beside_deps_unless_the_variable_says_otherwise() {
        let exe = Path::new("/t/target/debug/deps/page-0123abcd");
        assert_eq!(
            log_path(None, Some(exe)),
            Some(PathBuf::from("/t/target/debug/commwatch-skipped-tests.txt"))
        );
        assert_eq!(
            log_path(Some("".into()), Some(Path::new("/t/target/debug/bench"))),
            Some(PathBuf::from("/t/target/debug/commwatch-skipped-tests.txt"))
        );
        assert_eq!(
            log_path(Some("/l/skips.txt".into()), Some(exe)),
            Some(PathBuf::from("/l/skips.txt"))
        );
        assert_eq!(log_path(None, None), None);
    }

    #[test]
    fn lines_name_the_test_and_the_reason_on_one_line() {
        assert_eq!(
            loud_line("page::t", "chromium not found"),
            "*** SKIPPED page::t: chromium not found ***"
        );
        assert_eq!(log_line("t", "a\nb"), "t: a b\n");
    }
}
