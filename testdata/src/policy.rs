//! What a test does when the shared data is absent: fail under CI, say so loudly elsewhere.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::locate::{Env, Lookup, SHARED_VAR};

/// The path when found. When missing: panics under `CI=true` (the message names the path and the variable);
/// otherwise writes [`skip_line`] to stderr, records the skip in the skip log ([`crate::skip`]) and returns
/// `None`.
///
/// The line is written to the process's stderr directly, not through `eprintln!`: the test harness captures
/// `eprintln!` of passing tests, which would make the skip silent.
#[track_caller]
pub fn found_or_skip(env: &Env, lookup: Lookup, test: &str) -> Option<PathBuf> {
    match lookup {
        Lookup::Missing(path) if !env.ci => {
            crate::skip::record(test, &missing_reason(&path));
            None
        }
        lookup => found_or_skip_to(env, lookup, test, &mut std::io::stderr().lock()),
    }
}

/// [`found_or_skip`] writing the skip line to `out`.
#[track_caller]
pub fn found_or_skip_to(
    env: &Env,
    lookup: Lookup,
    test: &str,
    out: &mut dyn Write,
) -> Option<PathBuf> {
    match lookup {
        Lookup::Found(path) => Some(path),
        Lookup::Missing(path) if env.ci => panic!("{}", ci_failure(test, &path)),
        Lookup::Missing(path) => {
            // Nothing useful to do if stderr is closed; the test still returns early.
            let _ = writeln!(out, "{}", skip_line(test, &path));
            None
        }
    }
}

/// `SKIPPED <test>: shared test data not found at <path>; set COMMWATCH_SHARED_TESTDATA`, framed to stand out.
pub fn skip_line(test: &str, path: &Path) -> String {
    crate::skip::loud_line(test, &missing_reason(path))
}

/// Why a test skips when the shared data is missing at `path`.
fn missing_reason(path: &Path) -> String {
    format!(
        "shared test data not found at {}; set {SHARED_VAR}",
        path.display()
    )
}

/// The panic message under CI.
pub fn ci_failure(test: &str, path: &Path) -> String {
    format!(
        "{test}: shared test data not found at {} (required when CI=true); put it there or set {SHARED_VAR}",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::Location;

    const CI: Env = Env {
        shared_dir: None,
        ci: true,
    };
    const LOCAL: Env = Env {
        shared_dir: None,
        ci: false,
    };

    #[test]
    fn found_is_returned_either_way() {
        for env in [CI, LOCAL] {
            assert_eq!(
                found_or_skip(&env, Lookup::Found("/d/x".into()), "t"),
                Some(PathBuf::from("/d/x"))
            );
        }
    }

    #[test]
    fn missing_without_ci_says_so_and_returns_none() {
        let mut out = Vec::new();
        let missing = Lookup::Missing("/nonexistent/x".into());
        assert_eq!(found_or_skip_to(&LOCAL, missing, "t", &mut out), None);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{}\n", skip_line("t", Path::new("/nonexistent/x")))
        );
    }

    #[test]
    #[should_panic(
        expected = "t: shared test data not found at /nonexistent/x (required when CI=true); \
                    put it there or set COMMWATCH_SHARED_TESTDATA"
    )]
    fn missing_under_ci_panics_naming_the_path_and_the_variable() {
        let mut out = Vec::new();
        found_or_skip_to(&CI, Lookup::Missing("/nonexistent/x".into()), "t", &mut out);
    }

    #[test]
    fn the_skip_line_names_the_test_the_path_and_the_variable() {
        assert_eq!(
            skip_line("sources::gpud", Path::new("/nonexistent/sysfs")),
            "*** SKIPPED sources::gpud: shared test data not found at /nonexistent/sysfs; \
             set COMMWATCH_SHARED_TESTDATA ***"
        );
    }

    #[test]
    fn the_test_name_is_the_harness_thread_name() {
        let name = crate::skip::test_name(Location::caller());
        assert_eq!(
            name,
            "policy::tests::the_test_name_is_the_harness_thread_name"
        );
        let outside = std::thread::Builder::new()
            .name("main".into())
            .spawn(|| crate::skip::test_name(Location::caller()))
            .unwrap()
            .join()
            .unwrap();
        assert!(outside.starts_with("testdata/src/policy.rs:"), "{outside}");
    }
}
