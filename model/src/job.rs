//! A training job as one node sees it: its processes (ranks) and what the node's hardware says about their
//! NCCL settings. The agent builds it from the process list; the collector keeps each node's list and merges
//! them into fleet-wide jobs.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::nccl::NcclConflict;

/// One process of a job on a node. The default is an empty record (pid 0: unknown) to fill in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Rank {
    pub pid: u32,
    /// From `RANK`, `SLURM_PROCID` or `OMPI_COMM_WORLD_RANK`.
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    /// GPU indexes (NVML) the process runs on, or its `CUDA_VISIBLE_DEVICES` entries.
    pub gpus: Vec<String>,
    /// Kubernetes pod UID from the process's cgroup; `None` outside Kubernetes.
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
    /// `NCCL_*` settings only (the environment allowlist never lets anything else through).
    pub nccl: BTreeMap<String, String>,
    /// How the process was found: `nvml` or `environment` (free text from newer agents).
    pub found_by: String,
}

/// One training job as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Job {
    /// `SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`, `MASTER_ADDR:MASTER_PORT`, or `pid-<pid>` for a lone GPU
    /// process. Non-empty, at most 128 bytes.
    pub id: String,
    pub ranks: Vec<Rank>,
    pub conflicts: Vec<NcclConflict>,
}
