//! Fleet jobs: every agent reports its node's complete job list; here the lists of the nodes seen within
//! `node_expiry` are merged by job id, so a job spanning nodes is one [`FleetJob`] with the ranks and NCCL
//! conflicts of all of them.
//!
//! The one merge every reader shares: the analysis rules read [`fleet_jobs`] at each evaluation, and the jobs
//! API builds its JSON view from the same list plus the analysis's figures. Only what the agent's allowlist
//! let through is held: the `NCCL_*` settings of each rank, never any other environment variable (the ingest
//! edge refuses other keys).

use std::collections::BTreeMap;
use std::sync::Arc;

use commwatch_model::ConflictKind;
use serde::Serialize;

use crate::store::{JobList, Store};

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
    merge(&store.node_jobs(now_unix_ns))
}

/// Merges per-node job lists (`(node, list)`) by job id; sorted by id, each job's ranks by global rank (ranks
/// without one last), then node and pid.
pub fn merge(node_lists: &[(String, Arc<JobList>)]) -> Vec<FleetJob> {
    let mut by_id: BTreeMap<String, FleetJob> = BTreeMap::new();
    for (node, list) in node_lists {
        for j in &list.jobs {
            let job = by_id.entry(j.id.clone()).or_insert_with(|| FleetJob {
                id: j.id.clone(),
                ..Default::default()
            });
            if !job.listed_by.contains(node) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use commwatch_model::{Job, NcclConflict, Rank};

    fn rank(pid: u32, rank: Option<u32>, gpu: &str, nccl: &[(&str, &str)]) -> Rank {
        Rank {
            pid,
            rank,
            local_rank: None,
            world_size: Some(4),
            gpus: vec![gpu.into()],
            pod_uid: None,
            container_id: None,
            nccl: nccl
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            found_by: "nvml".into(),
        }
    }

    fn list(jobs: Vec<Job>) -> Arc<JobList> {
        Arc::new(JobList { jobs })
    }

    #[test]
    fn lists_merge_by_job_id_with_ranks_in_global_order() {
        let ifname = [("NCCL_SOCKET_IFNAME", "eth0")];
        let b = list(vec![
            Job {
                id: "job-1".into(),
                ranks: vec![
                    rank(20, Some(3), "1", &ifname),
                    rank(21, Some(2), "0", &ifname),
                ],
                conflicts: vec![NcclConflict {
                    setting: "NCCL_SOCKET_IFNAME".into(),
                    value: "eth0".into(),
                    kind: "management_interface".into(),
                    reason: "eth0 is a management interface".into(),
                }],
            },
            Job {
                id: "idle".into(),
                ranks: vec![],
                conflicts: vec![],
            },
        ]);
        let a = list(vec![Job {
            id: "job-1".into(),
            ranks: vec![rank(11, None, "2", &[]), rank(10, Some(0), "0", &[])],
            conflicts: vec![],
        }]);
        let jobs = merge(&[("node-b".into(), b), ("node-a".into(), a)]);
        assert_eq!(
            jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
            ["idle", "job-1"]
        );
        let idle = &jobs[0];
        assert_eq!(idle.listed_by, ["node-b"]);
        assert_eq!(idle.nodes().count(), 0);
        let j = &jobs[1];
        assert_eq!(j.listed_by, ["node-a", "node-b"]);
        let order: Vec<(&str, Option<u32>)> =
            j.ranks.iter().map(|r| (r.node.as_str(), r.rank)).collect();
        assert_eq!(
            order,
            [
                ("node-a", Some(0)),
                ("node-b", Some(2)),
                ("node-b", Some(3)),
                ("node-a", None)
            ]
        );
        assert_eq!(j.nodes().collect::<Vec<_>>(), ["node-a", "node-b"]);
        assert_eq!(j.gpus(), 4);
        assert_eq!(j.nccl_on("node-b", "NCCL_SOCKET_IFNAME"), Some("eth0"));
        assert_eq!(j.nccl_on("node-a", "NCCL_SOCKET_IFNAME"), None);
        assert_eq!(j.conflicts.len(), 1);
        assert_eq!(j.conflicts[0].node, "node-b");
        assert_eq!(j.conflicts[0].kind.as_str(), "management_interface");
    }
}
