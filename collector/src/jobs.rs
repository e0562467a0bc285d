//! Fleet jobs: every agent reports its node's complete job list; here the lists of the nodes seen within
//! `node_expiry` are merged by job id, so a job spanning nodes is one [`FleetJob`] with the ranks and NCCL
//! conflicts of all of them.
//!
//! The one merge every reader shares: the analysis rules read [`fleet_jobs`] at each evaluation, and the jobs
//! API builds its JSON view from the same list plus the analysis's figures. Only what the agent's allowlist
//! let through is held: the `NCCL_*` settings of each rank, never any other environment variable (the ingest
//! edge refuses other keys).

use std::collections::BTreeMap;

use commwatch_model::ConflictKind;
use serde::Serialize;

use crate::store::Store;

/// One process (rank) of a fleet job, with the node it runs on.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FleetRank {
    pub node: String,
    pub pid: u32,
    /// Global rank; `None` when the process carried no rank marker (a lone GPU process).
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    /// GPU indexes (NVML) or `CUDA_VISIBLE_DEVICES` entries of the process.
    pub gpus: Vec<String>,
    /// Kubernetes pod UID; `None` outside Kubernetes.
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
    /// Allowlisted `NCCL_*` settings.
    pub nccl: BTreeMap<String, String>,
    /// `nvml` (on a GPU) or `environment` (rank markers).
    pub found_by: String,
}

/// An NCCL setting of a job that contradicts a node's hardware, as that node's agent reported it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetConflict {
    pub node: String,
    pub setting: String,
    pub value: String,
    /// `management_interface`, `missing_interface`, `ib_disabled`, `hca_excluded`.
    pub kind: ConflictKind,
    pub reason: String,
}

/// A training job across the fleet.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FleetJob {
    pub id: String,
    /// Nodes whose job list names the job, sorted (a node may list it with no rank).
    pub listed_by: Vec<String>,
    /// Sorted by global rank (ranks without one last), then node and pid.
    pub ranks: Vec<FleetRank>,
    /// In node order, each node's in the order its agent sent them.
    pub conflicts: Vec<FleetConflict>,
}

impl FleetJob {
    /// Nodes running ranks of the job (each once, in rank order).
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        let mut seen: Vec<&str> = Vec::new();
        for r in &self.ranks {
            if !seen.contains(&r.node.as_str()) {
                seen.push(&r.node);
            }
        }
        seen.into_iter()
    }

    /// GPUs of the job: its ranks (one GPU per rank).
    pub fn gpus(&self) -> usize {
        self.ranks.len()
    }

    /// The NCCL setting `key` as the ranks on `node` have it (the first rank's).
    pub fn nccl_on(&self, node: &str, key: &str) -> Option<&str> {
        self.ranks
            .iter()
            .filter(|r| r.node == node)
            .find_map(|r| r.nccl.get(key).map(String::as_str))
    }
}

/// Every job of the nodes seen within `node_expiry` at `now_unix_ns`, merged by id and sorted by id.
pub fn fleet_jobs(store: &Store, now_unix_ns: i64) -> Vec<FleetJob> {
    let mut by_id: BTreeMap<String, FleetJob> = BTreeMap::new();
    for (node, list) in store.node_jobs(now_unix_ns) {
        for j in &list.jobs {
            let job = by_id.entry(j.id.clone()).or_insert_with(|| FleetJob {
                id: j.id.clone(),
                ..Default::default()
            });
            if !job.listed_by.contains(&node) {
                job.listed_by.push(node.clone());
            }
            job.ranks.extend(j.ranks.iter().map(|r| FleetRank {
                node: node.clone(),
                pid: r.pid,
                rank: r.rank,
                local_rank: r.local_rank,
                world_size: r.world_size,
                gpus: r.gpus.clone(),
                pod_uid: r.pod_uid.clone(),
                container_id: r.container_id.clone(),
                nccl: r.nccl.clone(),
                found_by: r.found_by.clone(),
            }));
            job.conflicts
                .extend(j.conflicts.iter().map(|c| FleetConflict {
                    node: node.clone(),
                    setting: c.setting.clone(),
                    value: c.value.clone(),
                    kind: c.kind.clone(),
                    reason: c.reason.clone(),
                }));
        }
    }
    by_id
        .into_values()
        .map(|mut job| {
            job.listed_by.sort();
            job.ranks.sort_by(|a, b| {
                (a.rank.is_none(), a.rank, &a.node, a.pid).cmp(&(
                    b.rank.is_none(),
                    b.rank,
                    &b.node,
                    b.pid,
                ))
            });
            job
        })
        .collect()
}
