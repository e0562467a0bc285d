//! NCCL Inspector records for the simulated jobs, so that the agents' Inspector followers find what a real job
//! with the plugin would write: per node `<root>/inspector/<node>/<node>-pid<PID>.log`, one JSON line (output
//! format v4.0, `commwatch_model::inspector`) per rank per step's AllReduce, appended once the step's AllReduce
//! has ended. The ranks' environment names the directory ([`environment`]), as `NCCL_INSPECTOR_DUMP_DIR` would.
//!
//! Figures: the AllReduce of the job's `allreduce_bytes` (communicator `0x5eed<job id>`, sequence number = the
//! step), its execution time the step's span from the first burst to the end of the last (set by the ring's
//! slowest link), bus bandwidth `S / t × 2(n−1)/n` for `n` ranks — what nccl-tests and Inspector compute.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::model::JobModel;
use crate::SimError;

/// The dump directories' parent under the cluster's root.
pub const DIR: &str = "inspector";

/// Node `name`'s dump directory.
pub fn dump_dir(root: &Path, name: &str) -> PathBuf {
    root.join(DIR).join(name)
}

/// The Inspector settings of a rank on node `name` (absolute directory, so an agent finds it from anywhere).
pub fn environment(root: &Path, name: &str) -> Vec<(String, String)> {
    let dir = std::path::absolute(dump_dir(root, name)).unwrap_or_else(|_| dump_dir(root, name));
    vec![
        ("NCCL_INSPECTOR_ENABLE".into(), "1".into()),
        ("NCCL_INSPECTOR_DUMP_DIR".into(), dir.display().to_string()),
    ]
}

/// Bus bandwidth of an AllReduce of `bytes` over `ranks` ranks taking `t`, bytes/s.
pub fn allreduce_bus_bandwidth(bytes: u64, ranks: usize, t: Duration) -> f64 {
    if t.is_zero() || ranks == 0 {
        return 0.0;
    }
    let n = ranks as f64;
    bytes as f64 / t.as_secs_f64() * 2.0 * (n - 1.0) / n
}

/// One rank's record of one AllReduce.
#[derive(Debug, Clone, PartialEq)]
pub struct RankRecord<'a> {
    pub job: &'a str,
    pub host: &'a str,
    pub pid: u32,
    pub rank: usize,
    pub ranks: usize,
    pub nodes: usize,
    pub step: u64,
    pub bytes: u64,
    pub exec: Duration,
    pub dump_timestamp_us: u64,
}

/// The JSON line of a record (without its newline).
pub fn record_line(r: &RankRecord<'_>) -> String {
    let bus = allreduce_bus_bandwidth(r.bytes, r.ranks, r.exec);
    let alg = if r.exec.is_zero() {
        0.0
    } else {
        r.bytes as f64 / r.exec.as_secs_f64()
    };
    serde_json::json!({
        "header": {"id": format!("0x5eed{}", r.job), "rank": r.rank, "n_ranks": r.ranks, "nnodes": r.nodes},
        "metadata": {
            "inspector_output_format_version": "v4.0",
            "git_rev": "commwatch-sim",
            "rec_mechanism": "nccl_profiler_interface",
            "dump_timestamp_us": r.dump_timestamp_us,
            "hostname": r.host,
            "pid": r.pid,
        },
        "coll_perf": {
            "coll": "AllReduce",
            "coll_sn": r.step,
            "coll_msg_size_bytes": r.bytes,
            "coll_exec_time_us": r.exec.as_micros() as u64,
            "coll_timing_source": "kernel_gpu",
            "coll_algobw_gbs": alg / 1e9,
            "coll_busbw_gbs": bus / 1e9,
        },
    })
    .to_string()
}

/// Appends the records of every step whose AllReduce ended, per node.
#[derive(Debug)]
pub struct InspectorWriter {
    root: PathBuf,
    /// Per node, the next step to write.
    next_step: Vec<u64>,
    /// Wall clock of the model's `t = 0`, µs since the Unix epoch.
    epoch_unix_us: u64,
    /// Pid of the rank on GPU 0 (`crate::procfs::FIRST_PID` in a cluster).
    first_pid: u32,
}

impl InspectorWriter {
    pub fn new(root: &Path, nodes: usize, epoch_unix_us: u64, first_pid: u32) -> InspectorWriter {
        InspectorWriter {
            root: root.to_path_buf(),
            next_step: vec![0; nodes],
            epoch_unix_us,
            first_pid,
        }
    }

    /// Writes what ended by `t`; returns the records written. At most 64 steps per node per call (a long gap
    /// writes its latest steps only).
    pub fn write(&mut self, model: &JobModel, t: Duration) -> Result<usize, SimError> {
        let mut written = 0;
        for node in 0..self.next_step.len() {
            let (Some(job), Ok(name)) = (model.job_of(node), model.node_name(node)) else {
                continue;
            };
            let index = model.placement().index_in_job(node).unwrap_or(0);
            let gpus = model.spec().gpus_per_node;
            let current = job.timeline.step_at(t);
            let mut lines = Vec::new();
            let first = self.next_step[node].max(current.saturating_sub(64));
            for k in first..=current {
                let (start, end) = job.timeline.burst_of_step(k);
                if end > t {
                    break;
                }
                self.next_step[node] = k + 1;
                for g in 0..gpus {
                    let rank = RankRecord {
                        job: &job.id,
                        host: name,
                        pid: self.first_pid + g as u32,
                        rank: index * gpus + g,
                        ranks: job.ranks,
                        nodes: job.nodes.len(),
                        step: k,
                        bytes: job.allreduce_bytes,
                        exec: end.saturating_sub(start),
                        dump_timestamp_us: self.epoch_unix_us + end.as_micros() as u64,
                    };
                    lines.push((g, record_line(&rank)));
                }
            }
            written += lines.len();
            self.append(name, gpus, lines)?;
        }
        Ok(written)
    }

    fn append(&self, name: &str, gpus: usize, lines: Vec<(usize, String)>) -> Result<(), SimError> {
        if lines.is_empty() {
            return Ok(());
        }
        let dir = dump_dir(&self.root, name);
        std::fs::create_dir_all(&dir).map_err(|e| SimError::io("create dir", &dir, e))?;
        for g in 0..gpus {
            let path = dir.join(format!("{name}-pid{}.log", self.first_pid + g as u32));
            let mut text = String::new();
            for (_, l) in lines.iter().filter(|(x, _)| *x == g) {
                text.push_str(l);
                text.push('\n');
            }
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| SimError::io("open", &path, e))?;
            f.write_all(text.as_bytes())
                .map_err(|e| SimError::io("write", &path, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use commwatch_model::inspector::parse_line;

    use super::*;
    use crate::{Cluster, ClusterSpec, Scenario};

    fn records(scenario: Scenario) -> Vec<commwatch_model::inspector::CollectiveRecord> {
        records_of(ClusterSpec {
            nodes: 4,
            gpus_per_node: 2,
            scenario,
            ..ClusterSpec::default()
        })
    }

    fn records_of(spec: ClusterSpec) -> Vec<commwatch_model::inspector::CollectiveRecord> {
        let dir = tempfile::tempdir().unwrap();
        let nodes = spec.nodes;
        let cluster = Cluster::create(dir.path(), spec).unwrap();
        let mut w = InspectorWriter::new(dir.path(), nodes, 1_764_614_400_000_000, 1000);
        let t = cluster.step_period() * 5;
        assert!(w.write(cluster.model(), t).unwrap() > 0);
        let name = cluster.model().node_name(0).unwrap().to_string();
        let text = std::fs::read_to_string(
            dump_dir(dir.path(), &name).join(format!("{name}-pid1000.log")),
        )
        .unwrap();
        text.lines()
            .map(|l| parse_line(l).unwrap().record)
            .collect()
    }

    #[test]
    fn every_ended_step_is_one_record_per_rank_in_the_documented_format() {
        let recs = records(Scenario::Healthy);
        let steps: Vec<u64> = recs.iter().map(|r| r.sequence).collect();
        assert_eq!(steps, (0..steps.len() as u64).collect::<Vec<_>>());
        assert!(steps.len() >= 4, "{steps:?}");
        let r = &recs[0];
        assert_eq!(
            (r.rank, r.n_ranks, r.n_nodes, r.collective.as_str()),
            (0, 8, 4, "AllReduce")
        );
        let expected = allreduce_bus_bandwidth(
            r.size_bytes,
            8,
            Duration::from_micros(r.exec_time_us as u64),
        );
        assert!((r.bus_bandwidth_bytes_per_second - expected).abs() / expected < 1e-3);
    }

    #[test]
    fn the_seed_scale_management_nic_case_against_the_healthy_fabric() {
        let at = |scenario| {
            records_of(ClusterSpec {
                scenario,
                ..ClusterSpec::default()
            })[0]
                .bus_bandwidth_bytes_per_second
        };
        let (healthy, mgmt) = (at(Scenario::Healthy), at(Scenario::ManagementNic));
        eprintln!(
            "8x8, 220 MB AllReduce bus bandwidth: healthy {:.2} GB/s, management-nic {:.2} GB/s",
            healthy / 1e9,
            mgmt / 1e9
        );
        assert!((healthy / 1e9 - 22.0).abs() < 0.5, "{healthy}");
        assert!(mgmt < 0.7 * healthy, "{mgmt} vs {healthy}");
    }
}
