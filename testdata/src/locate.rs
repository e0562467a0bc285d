//! Where the shared test data is: pure functions of the environment's values, so tests pass their own.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Overrides the shared test data's location (a directory holding `sysfs/`, `nccl/`, `kineto/`, ...). Give it
/// absolute: a relative one is taken from the test's working directory (its crate's root under `cargo test`).
pub const SHARED_VAR: &str = "COMMWATCH_SHARED_TESTDATA";
/// `CI=true` turns absent shared data into a test failure.
pub const CI_VAR: &str = "CI";

/// The part of the process environment the lookup depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Env {
    /// `$COMMWATCH_SHARED_TESTDATA`; unset or empty means the default location.
    pub shared_dir: Option<PathBuf>,
    /// `$CI` is exactly `true` (as CI services set it).
    pub ci: bool,
}

impl Env {
    /// Reads `COMMWATCH_SHARED_TESTDATA` and `CI` from this process.
    pub fn from_process() -> Env {
        Env::from_values(std::env::var_os(SHARED_VAR), std::env::var_os(CI_VAR))
    }

    /// The same from given values of the two variables.
    pub fn from_values(shared_dir: Option<OsString>, ci: Option<OsString>) -> Env {
        Env {
            shared_dir: shared_dir.filter(|v| !v.is_empty()).map(PathBuf::from),
            ci: ci.is_some_and(|v| v == "true"),
        }
    }
}

/// The answer of [`lookup`]: the path either way, so a message can name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    Found(PathBuf),
    Missing(PathBuf),
}

/// The workspace root above `manifest_dir`: the nearest directory (itself included) whose `Cargo.toml` has a
/// `[workspace]` table; `manifest_dir` itself when none does.
pub fn workspace_root(manifest_dir: &Path) -> PathBuf {
    manifest_dir
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|toml| toml.lines().any(|l| l.trim() == "[workspace]"))
        })
        .unwrap_or(manifest_dir)
        .to_path_buf()
}

/// The shared test data folder: the variable's value, or else `<workspace root>/../shared/testdata`.
pub fn shared_root(env: &Env, manifest_dir: &Path) -> PathBuf {
    match &env.shared_dir {
        Some(dir) => dir.clone(),
        None => workspace_root(manifest_dir).join("../shared/testdata"),
    }
}

/// `<shared root>/<rel>` (the root itself for an empty `rel`), made absolute and free of `..` when it exists
/// so that messages and reports show one stable spelling of it.
pub fn lookup(env: &Env, manifest_dir: &Path, rel: &str) -> Lookup {
    let root = shared_root(env, manifest_dir);
    let path = if rel.is_empty() { root } else { root.join(rel) };
    match path.canonicalize() {
        Ok(found) => Lookup::Found(found),
        Err(_) => Lookup::Missing(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    #[test]
    fn env_values() {
        assert_eq!(Env::from_values(None, None), Env::default());
        let env = Env::from_values(Some("/data".into()), Some("true".into()));
        assert_eq!(env.shared_dir.as_deref(), Some(Path::new("/data")));
        assert!(env.ci);
        // Only `true` means CI; an empty override means the default location.
        assert!(!Env::from_values(None, Some("1".into())).ci);
        assert!(!Env::from_values(None, Some("false".into())).ci);
        assert_eq!(Env::from_values(Some("".into()), None).shared_dir, None);
    }

    #[test]
    fn the_workspace_root_is_above_a_member_crate() {
        let root = workspace_root(manifest());
        assert_eq!(root, manifest().parent().unwrap());
        assert_eq!(workspace_root(&root), root);
    }

    #[test]
    fn the_default_location_is_beside_the_workspace_root() {
        let root = shared_root(&Env::default(), manifest());
        assert_eq!(
            root,
            manifest().parent().unwrap().join("../shared/testdata")
        );
    }

    #[test]
    fn the_variable_overrides_the_location() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("nccl")).unwrap();
        std::fs::write(dir.path().join("nccl/log.txt"), "x").unwrap();
        let env = Env {
            shared_dir: Some(dir.path().to_path_buf()),
            ci: false,
        };
        let canonical = dir.path().canonicalize().unwrap();
        assert_eq!(
            lookup(&env, manifest(), "nccl/log.txt"),
            Lookup::Found(canonical.join("nccl/log.txt"))
        );
        assert_eq!(lookup(&env, manifest(), ""), Lookup::Found(canonical));
        assert_eq!(
            lookup(&env, manifest(), "nccl/absent.txt"),
            Lookup::Missing(dir.path().join("nccl/absent.txt"))
        );
    }

    #[test]
    fn an_absent_folder_is_missing_with_its_path() {
        let env = Env {
            shared_dir: Some("/nonexistent/commwatch-testdata".into()),
            ci: true,
        };
        assert_eq!(
            lookup(&env, manifest(), "sysfs/gpud_h100"),
            Lookup::Missing("/nonexistent/commwatch-testdata/sysfs/gpud_h100".into())
        );
    }
}
