//! Where a training process's NCCL Inspector writes, from its allowlisted settings (pure). The place is then
//! opened inside the process's own root ([`super::confine`]).
//!
//! The plugin writes to `NCCL_INSPECTOR_DUMP_DIR`, else to `nccl-inspector-<SLURM_JOB_ID>` or
//! `nccl-inspector-unknown-jobid` in the process's working directory.

use std::collections::BTreeMap;
use std::path::PathBuf;

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
}
