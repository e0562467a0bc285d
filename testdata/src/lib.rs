//! Test data for commwatch's tests and benches, and nothing else (never a dependency of a shipped crate).
//!
//! Two kinds of data feed the tests:
//! - **Shared real data**: captures from real systems and other projects' fixtures (sysfs trees, nccl-tests
//!   outputs, NCCL logs, Kineto traces), each with its license. It is never copied into this repository; tests
//!   read it in place, at `$COMMWATCH_SHARED_TESTDATA` or else at `../shared/testdata` beside the workspace
//!   root (where CI puts it). Its README says what each folder is and where it came from.
//! - **The project's own fixtures**, in the repository next to the tests that use them (values the project
//!   recorded or wrote itself, trees composed from documented facts).
//!
//! A test that needs shared data asks for it with [`shared_testdata!`]. When the data is absent the test cannot
//! check what it is there for, so it never passes quietly: with `CI=true` it fails naming the path and the
//! variable; elsewhere a `SKIPPED` line goes straight to stderr (past the test harness's output capture) and
//! the test returns early; the skip is also recorded in the run's skip log, which `.ci/run` prints at the end
//! ([`skip`], whose [`skip::unavailable`] does the same for a missing tool):
//!
//! ```no_run
//! #[test]
//! fn socket_fallback_log() {
//!     let Some(log) = commwatch_testdata::shared_testdata!("nccl/gke-a3-socket-fallback-rank0.txt") else {
//!         return;
//!     };
//!     let text = std::fs::read_to_string(log).unwrap();
//!     assert!(text.contains("NET/Socket"));
//! }
//! ```
//!
//! [`sysfs`] composes sysfs roots from shared trees and the project's additions, in temporary directories.

pub mod compose;
pub mod locate;
pub mod policy;
pub mod skip;
pub mod sysfs;

use std::panic::Location;
use std::path::{Path, PathBuf};

pub use compose::{copy_tree, ComposeError, ComposedTree};
pub use locate::{Env, Lookup, CI_VAR, SHARED_VAR};

/// `<shared test data>/<rel>` when it exists; otherwise fails the calling test under `CI=true`, or says loudly
/// on stderr that it skipped and returns `None` (the test returns early).
///
/// `manifest_dir` is the caller's `CARGO_MANIFEST_DIR` (any crate of the workspace): the default location is
/// found from the workspace root above it. [`shared_testdata!`] passes it. An empty `rel` names the shared
/// folder itself.
#[track_caller]
pub fn shared(manifest_dir: &str, rel: &str) -> Option<PathBuf> {
    let env = Env::from_process();
    let lookup = locate::lookup(&env, Path::new(manifest_dir), rel);
    policy::found_or_skip(&env, lookup, &skip::test_name(Location::caller()))
}

/// `shared_testdata!("sysfs/gpud_h100")`: [`shared`] with the calling crate's `CARGO_MANIFEST_DIR`.
#[macro_export]
macro_rules! shared_testdata {
    ($rel:expr) => {
        $crate::shared(env!("CARGO_MANIFEST_DIR"), $rel)
    };
}

/// `gpud_h100_sysfs!()`: [`sysfs::gpud_h100`] with the calling crate's `CARGO_MANIFEST_DIR`.
#[macro_export]
macro_rules! gpud_h100_sysfs {
    () => {
        $crate::sysfs::gpud_h100(env!("CARGO_MANIFEST_DIR"))
    };
}
