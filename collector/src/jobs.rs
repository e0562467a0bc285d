//! Fleet jobs: every agent reports its node's complete job list; here the lists of the nodes seen within
//! `node_expiry` are merged by job id, so a job spanning nodes is one [`FleetJob`] with the ranks and NCCL
//! conflicts of all of them.
//!
//! The one merge every reader shares: the analysis rules read [`fleet_jobs`] at each evaluation, and the jobs
//! API and `commwatch_job_ranks` list [`known_jobs`]: the same jobs, plus those a node knows only from its
//! step markers (a job whose processes its agent does not list: no `processes` source, or a job id the
//! processes do not carry), each such rank [`FOUND_BY_MARKERS`]. Only what the agent's allowlist let
//! through is held: the `NCCL_*` settings of each rank, never any other environment variable (the ingest
//! edge refuses other keys).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use commwatch_model::{NcclConflict, Rank};
use serde::Serialize;

use crate::ingest::domain::{MAX_JOBS_PER_NODE, MAX_RANKS_PER_NODE};
use crate::store::{JobList, Marker, Store};

/// [`Rank::found_by`] of a rank known only from its step markers (its `pid` is 0: unknown).
pub const FOUND_BY_MARKERS: &str = "markers";
/// A node's markers received this recently (by its agent's clock, against the collector's) make their job
/// and rank known on the node; a job whose markers stopped drops out of the listing after it.
pub const MARKER_JOB_WINDOW_NS: i64 = 120_000_000_000;
/// Newest markers of a node looked at for [`known_jobs`] (two per rank and step: 1024 rank-steps), which
/// bounds what one listing costs.
pub const MARKER_SCAN: u64 = 2_048;

/// One process (rank) of a fleet job: the node it runs on and the process as that node's agent reported it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FleetRank {
    pub node: String,
    #[serde(flatten)]
    pub process: Rank,
}

impl FleetRank {
    /// A rank known only from its step markers on `node`: pid 0 (unknown), no GPUs or settings, found by
    /// [`FOUND_BY_MARKERS`].
    pub fn from_markers(node: &str, rank: u32) -> Self {
        FleetRank {
            node: node.to_string(),
            process: Rank {
                rank: Some(rank),
                found_by: FOUND_BY_MARKERS.to_string(),
                ..Default::default()
            },
        }
    }
}

/// An NCCL setting of a job that contradicts a node's hardware, as that node's agent reported it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetConflict {
    pub node: String,
    #[serde(flatten)]
    pub conflict: NcclConflict,
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
            .find_map(|r| r.process.nccl.get(key).map(String::as_str))
    }
}

/// Every job of the nodes seen within `node_expiry` at `now_unix_ns`, merged by id and sorted by id.
pub fn fleet_jobs(store: &Store, now_unix_ns: i64) -> Vec<FleetJob> {
    merge(&store.node_jobs(now_unix_ns))
}

/// [`fleet_jobs`] with the jobs and ranks the nodes know from their recent step markers
/// ([`with_marker_ranks`]): what the jobs API and `commwatch_job_ranks` list.
pub fn known_jobs(store: &Store, now_unix_ns: i64) -> Vec<FleetJob> {
    with_marker_ranks(
        fleet_jobs(store, now_unix_ns),
        &marker_jobs(store, now_unix_ns),
    )
}

/// The jobs one node's recent step markers name, each with its ranks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarkerJobs {
    pub node: String,
    pub jobs: BTreeMap<String, BTreeSet<u32>>,
}

/// For each node seen within `node_expiry` whose newest [`MARKER_SCAN`] markers include some received
/// within [`MARKER_JOB_WINDOW_NS`] of `now_unix_ns`: the jobs and ranks they name ([`ranks_by_job`]), job ids
/// longer than the store's `max_label_len` left out (a job list's are refused at the ingest edge).
pub fn marker_jobs(store: &Store, now_unix_ns: i64) -> Vec<MarkerJobs> {
    let since = now_unix_ns.saturating_sub(MARKER_JOB_WINDOW_NS);
    let max_len = store.limits().max_label_len;
    store
        .node_names(now_unix_ns)
        .into_iter()
        .filter_map(|node| {
            let recent = store.with_node(&node, |n| {
                let log = n.markers();
                log.since(log.next_seq().saturating_sub(MARKER_SCAN)).0
            })?;
            let mut jobs = ranks_by_job(&recent, since);
            jobs.retain(|id, _| id.len() <= max_len);
            (!jobs.is_empty()).then_some(MarkerJobs { node, jobs })
        })
        .collect()
}

/// The jobs and ranks of `markers` (oldest first) received at or after `since_unix_ns`. Bounded as a node's
/// job list is at the ingest edge: the newest [`MAX_JOBS_PER_NODE`] jobs and [`MAX_RANKS_PER_NODE`] ranks in
/// all (markers are rate-limited, not counted, so a node's listener could otherwise name any number of jobs).
pub fn ranks_by_job(markers: &[Marker], since_unix_ns: i64) -> BTreeMap<String, BTreeSet<u32>> {
    let mut out: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut ranks = 0usize;
    for m in markers
        .iter()
        .rev()
        .filter(|m| m.received_unix_ns >= since_unix_ns)
    {
        if ranks >= MAX_RANKS_PER_NODE {
            break;
        }
        let known = out.contains_key(&m.job);
        if !known && out.len() >= MAX_JOBS_PER_NODE {
            continue;
        }
        if out.entry(m.job.clone()).or_default().insert(m.rank) {
            ranks += 1;
        }
    }
    out
}

/// `jobs` (merged job lists) with the ranks of `markers` that a node's own job list does not cover: for each
/// node and job its markers name, unless that node lists the job, the node joins the job's `listed_by` and
/// each marker rank becomes a [`FleetRank`] found by [`FOUND_BY_MARKERS`] (pid 0, no GPUs or settings). A
/// job known only from markers becomes a job of its own. Sorted as [`merge`] sorts.
pub fn with_marker_ranks(jobs: Vec<FleetJob>, markers: &[MarkerJobs]) -> Vec<FleetJob> {
    let mut by_id: BTreeMap<String, FleetJob> =
        jobs.into_iter().map(|j| (j.id.clone(), j)).collect();
    for mj in markers {
        for (id, ranks) in &mj.jobs {
            let job = by_id.entry(id.clone()).or_insert_with(|| FleetJob {
                id: id.clone(),
                ..Default::default()
            });
            if job.listed_by.contains(&mj.node) {
                continue;
            }
            job.listed_by.push(mj.node.clone());
            job.ranks
                .extend(ranks.iter().map(|&r| FleetRank::from_markers(&mj.node, r)));
        }
    }
    by_id.into_values().map(sorted).collect()
}

/// `job` with its nodes sorted and its ranks by global rank (ranks without one last), then node and pid.
fn sorted(mut job: FleetJob) -> FleetJob {
    job.listed_by.sort();
    job.ranks.sort_by(|a, b| rank_order(a).cmp(&rank_order(b)));
    job
}

/// The order of a job's ranks: by global rank (ranks without one last), then node and pid.
fn rank_order(r: &FleetRank) -> (bool, Option<u32>, &str, u32) {
    (
        r.process.rank.is_none(),
        r.process.rank,
        &r.node,
        r.process.pid,
    )
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
                process: r.clone(),
            }));
            job.conflicts
                .extend(j.conflicts.iter().map(|c| FleetConflict {
                    node: node.clone(),
                    conflict: c.clone(),
                }));
        }
    }
    by_id.into_values().map(sorted).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use commwatch_model::Job;

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
        let order: Vec<(&str, Option<u32>)> = j
            .ranks
            .iter()
            .map(|r| (r.node.as_str(), r.process.rank))
            .collect();
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
        assert_eq!(
            j.conflicts[0].conflict.kind.as_str(),
            "management_interface"
        );
    }

    fn marker(job: &str, rank: u32, received_s: i64) -> Marker {
        Marker {
            job: job.into(),
            rank,
            step: 1,
            phase: crate::store::StepPhase::End,
            sent_unix_ns: 0,
            received_unix_ns: received_s * 1_000_000_000,
            samples: None,
        }
    }

    #[test]
    fn recent_markers_name_their_jobs_and_ranks_within_bounds() {
        let markers = vec![
            marker("old", 0, 10),
            marker("j", 1, 100),
            marker("j", 0, 101),
            marker("j", 1, 102),
            marker("k", 7, 103),
        ];
        let got = ranks_by_job(&markers, 50 * 1_000_000_000);
        let want: BTreeMap<String, BTreeSet<u32>> = [
            ("j".to_string(), BTreeSet::from([0, 1])),
            ("k".to_string(), BTreeSet::from([7])),
        ]
        .into();
        assert_eq!(got, want);
        // A flood of job ids keeps the newest MAX_JOBS_PER_NODE.
        let flood: Vec<Marker> = (0..MAX_JOBS_PER_NODE as i64 + 10)
            .map(|i| marker(&format!("job-{i:03}"), 0, 100 + i))
            .collect();
        let got = ranks_by_job(&flood, 0);
        assert_eq!(got.len(), MAX_JOBS_PER_NODE);
        assert!(
            !got.contains_key("job-000")
                && got.contains_key(&format!("job-{:03}", MAX_JOBS_PER_NODE + 9))
        );
    }

    #[test]
    fn marker_ranks_join_what_no_job_list_covers() {
        let listed = merge(&[(
            "node-a".into(),
            list(vec![Job {
                id: "j".into(),
                ranks: vec![rank(10, Some(0), "0", &[])],
                conflicts: vec![],
            }]),
        )]);
        let markers = vec![
            // node-a lists j itself: its markers add nothing to j there.
            MarkerJobs {
                node: "node-a".into(),
                jobs: [
                    ("j".to_string(), BTreeSet::from([0, 1])),
                    ("solo".to_string(), BTreeSet::from([3])),
                ]
                .into(),
            },
            MarkerJobs {
                node: "node-b".into(),
                jobs: [("j".to_string(), BTreeSet::from([2]))].into(),
            },
        ];
        let jobs = with_marker_ranks(listed, &markers);
        assert_eq!(
            jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
            ["j", "solo"]
        );
        let j = &jobs[0];
        assert_eq!(j.listed_by, ["node-a", "node-b"]);
        let ranks: Vec<(&str, Option<u32>, &str)> = j
            .ranks
            .iter()
            .map(|r| (r.node.as_str(), r.process.rank, r.process.found_by.as_str()))
            .collect();
        assert_eq!(
            ranks,
            [
                ("node-a", Some(0), "nvml"),
                ("node-b", Some(2), FOUND_BY_MARKERS)
            ]
        );
        let solo = &jobs[1];
        assert_eq!(solo.listed_by, ["node-a"]);
        assert_eq!(solo.ranks.len(), 1);
        let solo_rank = &solo.ranks[0].process;
        assert_eq!((solo_rank.pid, solo_rank.rank), (0, Some(3)));
        assert!(solo_rank.gpus.is_empty() && solo_rank.nccl.is_empty());
    }
}
