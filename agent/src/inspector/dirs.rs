//! Where a training process's NCCL Inspector writes, from its allowlisted settings (pure), and that place seen
//! from the agent (through `--procfs-root`).
//!
//! The plugin writes to `NCCL_INSPECTOR_DUMP_DIR`, else to `nccl-inspector-<SLURM_JOB_ID>` or
//! `nccl-inspector-unknown-jobid` in the process's working directory. A relative directory is resolved against
//! `<procfs-root>/<pid>/cwd`; an absolute one is looked up through `<procfs-root>/<pid>/root` first (the process's
//! own mount namespace, as in a container) and as it is otherwise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use commwatch_model::inspector::{ENV_DUMP_DIR, ENV_ENABLE, ENV_PROM_DUMP};

/// What a process's settings say about its Inspector output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DumpMode {
    /// JSON lines in these directories (the first that exists is followed), as the process names them.
    Json(Vec<PathBuf>),
    /// Prometheus-textfile snapshots (`NCCL_INSPECTOR_PROM_DUMP=1`): not followed.
    Prometheus,
    /// The plugin is not enabled.
    Off,
}

/// The mode from a process's NCCL settings; `job` is its job id (the default directory names a SLURM job).
pub fn dump_mode(nccl: &BTreeMap<String, String>, job: &str) -> DumpMode {
    let set = |k: &str| nccl.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let dir = set(ENV_DUMP_DIR);
    let enabled = set(ENV_ENABLE) == Some("1");
    if dir.is_none() && !enabled {
        return DumpMode::Off;
    }
    if set(ENV_PROM_DUMP) == Some("1") {
        return DumpMode::Prometheus;
    }
    match dir {
        Some(d) => DumpMode::Json(vec![PathBuf::from(d)]),
        None => DumpMode::Json(vec![
            PathBuf::from(format!("nccl-inspector-{job}")),
            PathBuf::from("nccl-inspector-unknown-jobid"),
        ]),
    }
}

/// The directory seen from the agent, when it exists.
pub fn resolve(procfs_root: &Path, pid: u32, dir: &Path) -> Option<PathBuf> {
    let proc = procfs_root.join(pid.to_string());
    let candidates = if dir.is_absolute() {
        let inside = dir.strip_prefix("/").unwrap_or(dir);
        vec![proc.join("root").join(inside), dir.to_path_buf()]
    } else {
        let cwd = std::fs::read_link(proc.join("cwd")).ok()?;
        vec![
            proc.join("root")
                .join(cwd.strip_prefix("/").unwrap_or(&cwd))
                .join(dir),
            cwd.join(dir),
        ]
    };
    candidates.into_iter().find(|p| p.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn modes_from_the_settings() {
        assert_eq!(dump_mode(&settings(&[]), "j"), DumpMode::Off);
        assert_eq!(
            dump_mode(&settings(&[(ENV_ENABLE, "0")]), "j"),
            DumpMode::Off
        );
        assert_eq!(
            dump_mode(&settings(&[(ENV_DUMP_DIR, "/logs/x")]), "j"),
            DumpMode::Json(vec![PathBuf::from("/logs/x")])
        );
        assert_eq!(
            dump_mode(&settings(&[(ENV_ENABLE, "1")]), "42"),
            DumpMode::Json(vec![
                PathBuf::from("nccl-inspector-42"),
                PathBuf::from("nccl-inspector-unknown-jobid")
            ])
        );
        let prom = settings(&[
            (ENV_ENABLE, "1"),
            (ENV_PROM_DUMP, "1"),
            (ENV_DUMP_DIR, "/d"),
        ]);
        assert_eq!(dump_mode(&prom, "j"), DumpMode::Prometheus);
    }

    #[test]
    fn relative_directories_resolve_against_the_working_directory() {
        let proc = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        std::fs::create_dir(work.path().join("nccl-inspector-7")).unwrap();
        std::fs::create_dir(proc.path().join("12")).unwrap();
        std::os::unix::fs::symlink(work.path(), proc.path().join("12/cwd")).unwrap();
        assert_eq!(
            resolve(proc.path(), 12, Path::new("nccl-inspector-7")),
            Some(work.path().join("nccl-inspector-7"))
        );
        assert_eq!(resolve(proc.path(), 12, Path::new("absent")), None);
        assert_eq!(
            resolve(proc.path(), 12, work.path()),
            Some(work.path().to_path_buf())
        );
        assert_eq!(
            resolve(proc.path(), 13, Path::new("nccl-inspector-7")),
            None
        );
    }
}
