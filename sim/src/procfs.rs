//! A small procfs tree per simulated node, so that an agent's `processes` source finds the job's ranks there
//! (`--procfs-root <root>/proc/<node>`): one process per GPU with the environment a `torchrun`/Slurm launch
//! gives it, and the node's boot id.
//!
//! Per node `n` and GPU `g` (pid `1000 + g`): `<pid>/stat` (session 1000, start time `100 + g` ticks),
//! `<pid>/environ` (NUL-separated) with `RANK = n × gpus_per_node + g`, `LOCAL_RANK = g`,
//! `WORLD_SIZE = nodes × gpus_per_node`, `SLURM_JOB_ID` = [`JOB_ID`], `CUDA_VISIBLE_DEVICES = g`, and
//! `NCCL_SOCKET_IFNAME`: `ib0` (the node's first IPoIB interface, a fabric interface), except on the faulty
//! node of [`Scenario::ManagementNic`], where it is `eth0` (the management NIC: what the scenario's traffic
//! shows, and what the agent reports as an NCCL setting conflict). Plus `sys/kernel/random/boot_id`.
//! No other process is there: the tree is what an agent on that node would see of the training job only.
//!
//! With the `idle-nodes` and `two-jobs` variants ([`crate::placement`]) an idle node's tree holds only its
//! boot id, and each job's ranks carry that job's id (`1001`, `1002`), its own `RANK` (from 0 on its first
//! node) and `WORLD_SIZE` (its nodes × GPUs per node).

use std::path::{Path, PathBuf};

use crate::{Cluster, Scenario, SimError};

/// The simulated (first) job's id (`SLURM_JOB_ID` of every rank; a second job's is `1002`).
pub const JOB_ID: &str = "1001";
/// Pid of the rank on GPU 0; GPU `g` runs pid `FIRST_PID + g`.
pub const FIRST_PID: u32 = 1000;

/// The environment of the rank on GPU `gpu` of node `node` (key, value), in the order written; empty for a
/// node that runs no job.
pub fn rank_environment(
    spec: &crate::ClusterSpec,
    node: usize,
    gpu: usize,
) -> Vec<(String, String)> {
    let placement = spec.placement();
    let (Some(job), Some(index)) = (placement.job_of(node), placement.index_in_job(node)) else {
        return Vec::new();
    };
    let job = &placement.jobs()[job];
    let ifname = if spec.scenario == Scenario::ManagementNic && node == spec.resolved_fault_node() {
        "eth0"
    } else {
        "ib0"
    };
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("SLURM_JOB_ID".into(), job.id.clone()),
        (
            "RANK".into(),
            (index * spec.gpus_per_node + gpu).to_string(),
        ),
        ("LOCAL_RANK".into(), gpu.to_string()),
        (
            "WORLD_SIZE".into(),
            (job.nodes.len() * spec.gpus_per_node).to_string(),
        ),
        ("CUDA_VISIBLE_DEVICES".into(), gpu.to_string()),
        ("NCCL_SOCKET_IFNAME".into(), ifname.into()),
    ]
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), SimError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| SimError::io("create dir", dir, e))?;
    }
    std::fs::write(path, bytes).map_err(|e| SimError::io("write", path, e))
}

impl Cluster {
    /// Writes the procfs tree of every node under `<root>/proc/<node>/` (overwriting what is there) and
    /// returns `(node name, procfs root)` in node order; pass the path as an agent's `--procfs-root`.
    pub fn write_procfs_trees(&self) -> Result<Vec<(String, PathBuf)>, SimError> {
        let spec = self.spec();
        let mut out = Vec::with_capacity(spec.nodes);
        for (node, (name, _)) in self.node_roots().into_iter().enumerate() {
            let root = self.root().join("proc").join(&name);
            let gpus = if self.model().job_of(node).is_some() {
                spec.gpus_per_node
            } else {
                0
            };
            for gpu in 0..gpus {
                let pid = FIRST_PID + gpu as u32;
                let dir = root.join(pid.to_string());
                // Fields after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt
                // cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime ...
                let stat = format!(
                    "{pid} (python) S 1 {FIRST_PID} {FIRST_PID} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0\n",
                    100 + gpu
                );
                write(&dir.join("stat"), stat.as_bytes())?;
                let mut environ = Vec::new();
                let inspector = crate::inspector::environment(self.root(), &name);
                for (k, v) in rank_environment(spec, node, gpu)
                    .into_iter()
                    .chain(inspector)
                {
                    environ.extend_from_slice(k.as_bytes());
                    environ.push(b'=');
                    environ.extend_from_slice(v.as_bytes());
                    environ.push(0);
                }
                write(&dir.join("environ"), &environ)?;
                write(&dir.join("cgroup"), b"0::/user.slice/session-1.scope\n")?;
            }
            let boot_id = format!(
                "{:08x}-0000-4000-8000-{:012x}\n",
                spec.seed as u32, node as u64
            );
            write(&root.join("sys/kernel/random/boot_id"), boot_id.as_bytes())?;
            out.push((name, root));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClusterSpec;

    #[test]
    fn the_faulty_node_of_management_nic_names_eth0() {
        let spec = ClusterSpec {
            nodes: 4,
            gpus_per_node: 2,
            ..ClusterSpec::with_scenario(Scenario::ManagementNic)
        };
        let if_of = |s: &ClusterSpec, n| {
            rank_environment(s, n, 1)
                .into_iter()
                .find(|(k, _)| k == "NCCL_SOCKET_IFNAME")
                .map(|(_, v)| v)
        };
        assert_eq!(if_of(&spec, 3).as_deref(), Some("eth0"));
        assert_eq!(if_of(&spec, 0).as_deref(), Some("ib0"));
        let env = rank_environment(&spec, 2, 1);
        let get = |k: &str| env.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
        assert_eq!(get("RANK"), Some("5"));
        assert_eq!(get("WORLD_SIZE"), Some("8"));
        assert_eq!(get("SLURM_JOB_ID"), Some(JOB_ID));
        let healthy = ClusterSpec {
            nodes: 4,
            gpus_per_node: 2,
            ..ClusterSpec::default()
        };
        assert_eq!(if_of(&healthy, 3).as_deref(), Some("ib0"));
    }

    #[test]
    fn trees_are_written_per_node() {
        let dir = tempfile::tempdir().unwrap();
        let spec = ClusterSpec {
            nodes: 2,
            gpus_per_node: 2,
            ..ClusterSpec::default()
        };
        let cluster = Cluster::create(dir.path(), spec).unwrap();
        let roots = cluster.write_procfs_trees().unwrap();
        assert_eq!(roots.len(), 2);
        let (name, root) = &roots[1];
        assert_eq!(name, "node-01");
        let environ = std::fs::read(root.join("1001/environ")).unwrap();
        let entries: Vec<&[u8]> = environ
            .split(|b| *b == 0)
            .filter(|e| !e.is_empty())
            .collect();
        assert!(entries.contains(&b"RANK=3".as_slice()));
        assert!(entries.contains(&b"LOCAL_RANK=1".as_slice()));
        let stat = std::fs::read_to_string(root.join("1000/stat")).unwrap();
        let after: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .collect();
        assert_eq!((after[3], after[19]), ("1000", "100"));
        assert!(root.join("sys/kernel/random/boot_id").is_file());
    }
}
