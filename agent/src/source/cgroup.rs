//! The `cgroup` source: CPU bandwidth throttling of the training jobs' cgroups, from the cgroup file system
//! under `<sysfs_root>/fs/cgroup` (cgroup v2, or v1's `cpu` hierarchy). Node-level series (no link); no links.
//!
//! Series, per training job on the node (label `job_id` = the job's id; `training_job` is a label the collector
//! sets itself and refuses from agents), slow-tier 64-bit counters, the sums over the job's cgroups on the
//! node, as cAdvisor counts them per container:
//! - `cpu_cfs_periods_total` (`cpu.stat`: `nr_periods`): enforcement periods in which the cgroup could run;
//! - `cpu_cfs_throttled_periods_total` (`nr_throttled`): of those, the periods in which it used up its quota
//!   and was stopped until the next one.
//!
//! A CPU limit (a container's `limits.cpu`, a Slurm or systemd `CPUQuota`) that a rank's data loading, its
//! framework's host work or its communication threads outgrow stops the rank for the rest of each period
//! while every other rank waits for it at the step's collective: the `straggler` rule compares the
//! throttled share of periods between a job's nodes. Without a limit the kernel counts no period, and the
//! counters stay at zero (no figure, nothing raised).
//!
//! Which cgroups: the `processes` source hands over, at each of its scans, each job's ranks' cgroups as
//! `/proc/<pid>/cgroup` names them ([`SharedJobCgroups`]); at discovery this source picks for each the
//! nearest cgroup on its path to the root that has a quota (a limit set on a pod's cgroup rather than its
//! container's), else the rank's own. A path with `..` (the agent in a cgroup namespace of its own that does
//! not contain the ranks: run it in the host's) or with no `cpu.stat` under the root is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use procfs_core::{FromRead as _, ProcessCGroups};

use super::fsroot::FsRoot;
use super::{Inventory, ReadReport, SeriesKind, SeriesSpec, Source, SourceError, Tier, Value};

/// The metrics of the two series of a job, in the order [`CpuStat`] holds them.
pub const METRICS: [&str; 2] = ["cpu_cfs_periods_total", "cpu_cfs_throttled_periods_total"];
/// The label naming the training job of a series.
pub const JOB_LABEL: &str = "job_id";

/// A process's CPU cgroup as `/proc/<pid>/cgroup` names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CpuCgroup {
    /// cgroup v2: the unified hierarchy's path (`0::<path>`).
    V2(String),
    /// cgroup v1: the hierarchy holding the `cpu` controller (its controllers as listed, e.g. `cpu,cpuacct`)
    /// and the path in it.
    V1 { controllers: String, path: String },
}

/// Each training job's CPU cgroups on the node, by job id: written by the `processes` source at each scan,
/// read by this source at discovery.
pub type SharedJobCgroups = Arc<Mutex<BTreeMap<String, BTreeSet<CpuCgroup>>>>;

/// A new, empty [`SharedJobCgroups`].
pub fn shared_job_cgroups() -> SharedJobCgroups {
    Arc::new(Mutex::new(BTreeMap::new()))
}

/// The CPU cgroup in a `/proc/<pid>/cgroup` text (read by procfs-core's [`ProcessCGroups`]): v1's line whose
/// controllers include `cpu`, else v2's `0::` line. `None` for the root cgroup (no limit applies there), for a
/// path with `..` (outside the reader's cgroup namespace), and for a text that is not of that format.
pub fn parse_proc_cgroup(text: &str) -> Option<CpuCgroup> {
    let groups = ProcessCGroups::from_read(text.as_bytes()).ok()?;
    let mut v2 = None;
    for g in groups {
        let path = g.pathname.trim();
        if path == "/" || !path.starts_with('/') || path.split('/').any(|p| p == "..") {
            continue;
        }
        if g.hierarchy == 0 && g.controllers.is_empty() {
            v2 = Some(CpuCgroup::V2(path.to_string()));
        } else if g.controllers.iter().any(|c| c == "cpu") {
            return Some(CpuCgroup::V1 {
                controllers: g.controllers.join(","),
                path: path.to_string(),
            });
        }
    }
    v2
}

/// The CFS bandwidth counts of a cgroup's `cpu.stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuStat {
    pub periods: u64,
    pub throttled_periods: u64,
}

/// Parses `cpu.stat` (`name value` lines, v1 and v2 alike): `nr_periods` and `nr_throttled`.
pub fn parse_cpu_stat(text: &str) -> Result<CpuStat, String> {
    let field = |name: &str| -> Result<u64, String> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(name).filter(|r| r.starts_with(' ')))
            .ok_or_else(|| format!("no {name}"))?;
        line.trim()
            .parse()
            .map_err(|_| format!("{name} = {:?} is not a count", line.trim()))
    };
    Ok(CpuStat {
        periods: field("nr_periods")?,
        throttled_periods: field("nr_throttled")?,
    })
}

/// Whether a cgroup's quota file says a limit is set: v2 `cpu.max` (`<quota> <period>`, `max` for none), v1
/// `cpu.cfs_quota_us` (`-1` for none).
pub fn has_quota(text: &str) -> bool {
    match text.split_whitespace().next() {
        Some("max") | Some("-1") | None => false,
        Some(q) => q.parse::<u64>().is_ok_and(|q| q > 0),
    }
}

/// Reads the training jobs' cgroups' CPU throttling.
pub struct CgroupSource {
    root: FsRoot,
    jobs: SharedJobCgroups,
    inventory: Inventory,
    /// The `cpu.stat` files of each job, in the order of the inventory's pairs of series.
    files: Vec<Vec<PathBuf>>,
}

impl CgroupSource {
    /// A source reading under `<sysfs_root>/fs/cgroup` the cgroups that `jobs` names.
    pub fn new(sysfs_root: PathBuf, jobs: SharedJobCgroups) -> Self {
        CgroupSource {
            root: FsRoot::new(sysfs_root.join("fs/cgroup")),
            jobs,
            inventory: Inventory::default(),
            files: Vec::new(),
        }
    }

    /// The directory of a cgroup: v2 under the root (or `unified/` on a hybrid layout), v1 under its
    /// hierarchy's mount (named by its controllers, or `cpu`); `None` when no `cpu.stat` is there.
    fn dir_of(&self, cg: &CpuCgroup) -> Option<PathBuf> {
        let (bases, path): (Vec<String>, &str) = match cg {
            CpuCgroup::V2(p) => (vec![String::new(), "unified".into()], p),
            CpuCgroup::V1 { controllers, path } => (
                vec![controllers.clone(), "cpu".into(), "cpu,cpuacct".into()],
                path,
            ),
        };
        let rel = path.trim_start_matches('/');
        bases
            .iter()
            .map(|b| self.root.join(b).join(rel))
            .find(|d| self.root.read_trimmed(&d.join("cpu.stat")).is_some())
    }

    /// The cgroup on `dir`'s path to the hierarchy's root, nearest first, that has a quota; else `dir`.
    fn limited(&self, dir: PathBuf) -> PathBuf {
        let top = self.root.path();
        let mut at = Some(dir.as_path());
        while let Some(d) = at.filter(|d| d.starts_with(top) && *d != top) {
            let quota = ["cpu.max", "cpu.cfs_quota_us"]
                .iter()
                .find_map(|f| self.root.read_trimmed(&d.join(f)));
            if quota.as_deref().is_some_and(has_quota) {
                return d.to_path_buf();
            }
            at = d.parent();
        }
        dir
    }

    fn read(&self, file: &Path) -> Result<CpuStat, SourceError> {
        let bytes = self.root.read(file, super::fsroot::MAX_SMALL_FILE)?;
        parse_cpu_stat(&String::from_utf8_lossy(&bytes)).map_err(|reason| SourceError::Parse {
            path: file.to_path_buf(),
            bytes: bytes.len(),
            reason,
        })
    }
}

impl Source for CgroupSource {
    fn name(&self) -> &'static str {
        "cgroup"
    }

    fn discover(&mut self) -> Result<bool, SourceError> {
        let jobs = match self.jobs.lock() {
            Ok(j) => j.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let mut series = Vec::new();
        let mut files = Vec::new();
        for (job, cgroups) in jobs {
            let dirs: BTreeSet<PathBuf> = cgroups
                .iter()
                .filter_map(|c| self.dir_of(c))
                .map(|d| self.limited(d))
                .collect();
            if dirs.is_empty() {
                continue;
            }
            for m in METRICS {
                series.push(SeriesSpec {
                    metric: m.to_string(),
                    kind: SeriesKind::COUNTER64,
                    tier: Tier::Slow,
                    link: None,
                    labels: BTreeMap::from([(JOB_LABEL.to_string(), job.clone())]),
                });
            }
            files.push(dirs.into_iter().map(|d| d.join("cpu.stat")).collect());
        }
        let changed = series != self.inventory.series || files != self.files;
        self.inventory.series = series;
        self.files = files;
        Ok(changed)
    }

    fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    fn sample(&mut self, tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
        let mut report = ReadReport::default();
        if tier != Tier::Slow {
            return report;
        }
        for (j, files) in self.files.iter().enumerate() {
            let mut sum = CpuStat::default();
            let mut ok = true;
            for f in files {
                match self.read(f) {
                    Ok(s) => {
                        sum.periods += s.periods;
                        sum.throttled_periods += s.throttled_periods;
                    }
                    Err(e) => {
                        report.fail(e);
                        ok = false;
                    }
                }
            }
            // A job whose cgroup went away (its rank ended) is left out until the next discovery; a partial
            // sum would read as a counter reset.
            if ok {
                sink(2 * j, Value::Counter(sum.periods));
                sink(2 * j + 1, Value::Counter(sum.throttled_periods));
                report.read += 2;
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cpu_cgroup_of_each_layout() {
        assert_eq!(
            parse_proc_cgroup("0::/kubepods.slice/pod1.slice/cri-containerd-ab.scope\n"),
            Some(CpuCgroup::V2(
                "/kubepods.slice/pod1.slice/cri-containerd-ab.scope".into()
            ))
        );
        assert_eq!(
            parse_proc_cgroup("4:memory:/x\n3:cpu,cpuacct:/slurm/uid_1/job_7/step_0\n0::/\n"),
            Some(CpuCgroup::V1 {
                controllers: "cpu,cpuacct".into(),
                path: "/slurm/uid_1/job_7/step_0".into()
            })
        );
        assert_eq!(
            parse_proc_cgroup("2:cpuacct:/\n1:cpu:/bed/node3\n0::/\n"),
            Some(CpuCgroup::V1 {
                controllers: "cpu".into(),
                path: "/bed/node3".into()
            })
        );
        // The root cgroup, another namespace's cgroup, garbage: nothing.
        assert_eq!(parse_proc_cgroup("0::/\n"), None);
        assert_eq!(parse_proc_cgroup("0::/../../kubepods.slice/x\n"), None);
        assert_eq!(parse_proc_cgroup("garbage\n\n::\n"), None);
    }

    #[test]
    fn reads_cpu_stat_and_quota_files() {
        let v2 = "usage_usec 100\nuser_usec 60\nsystem_usec 40\nnr_periods 50\nnr_throttled 45\n\
                  throttled_usec 900000\nnr_bursts 0\n";
        assert_eq!(
            parse_cpu_stat(v2),
            Ok(CpuStat {
                periods: 50,
                throttled_periods: 45
            })
        );
        let v1 = "nr_periods 7\nnr_throttled 0\nthrottled_time 0\n";
        assert_eq!(parse_cpu_stat(v1).unwrap().periods, 7);
        assert!(parse_cpu_stat("usage_usec 5\n")
            .unwrap_err()
            .contains("no nr_periods"));
        assert!(parse_cpu_stat("nr_periods x\nnr_throttled 1\n")
            .unwrap_err()
            .contains("not a count"));
        assert!(has_quota("5000 100000"));
        assert!(has_quota("5000"));
        assert!(!has_quota("max 100000"));
        assert!(!has_quota("-1"));
        assert!(!has_quota(""));
    }

    fn write(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn sums_each_job_s_cgroups_at_the_limited_level() {
        let sys = tempfile::tempdir().unwrap();
        let cg = sys.path().join("fs/cgroup");
        // Job a: two ranks' containers in one pod whose limit is on the pod's cgroup.
        write(&cg.join("pods/p1/cpu.max"), "200000 100000\n");
        write(
            &cg.join("pods/p1/cpu.stat"),
            "nr_periods 100\nnr_throttled 40\n",
        );
        for c in ["c1", "c2"] {
            write(&cg.join(format!("pods/p1/{c}/cpu.max")), "max 100000\n");
            write(
                &cg.join(format!("pods/p1/{c}/cpu.stat")),
                "nr_periods 0\nnr_throttled 0\n",
            );
        }
        // Job b: its own limited cgroup; job c: a cgroup that does not exist here.
        write(&cg.join("b/cpu.max"), "5000 100000\n");
        write(&cg.join("b/cpu.stat"), "nr_periods 10\nnr_throttled 9\n");
        let jobs = shared_job_cgroups();
        jobs.lock().unwrap().extend([
            (
                "a".to_string(),
                BTreeSet::from([
                    CpuCgroup::V2("/pods/p1/c1".into()),
                    CpuCgroup::V2("/pods/p1/c2".into()),
                ]),
            ),
            (
                "b".to_string(),
                BTreeSet::from([CpuCgroup::V2("/b".into())]),
            ),
            (
                "c".to_string(),
                BTreeSet::from([CpuCgroup::V2("/gone".into())]),
            ),
        ]);
        let mut src = CgroupSource::new(sys.path().to_path_buf(), jobs.clone());
        assert!(src.discover().unwrap());
        let labels: Vec<(&str, &str)> = src
            .inventory()
            .series
            .iter()
            .map(|s| (s.metric.as_str(), s.labels[JOB_LABEL].as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("cpu_cfs_periods_total", "a"),
                ("cpu_cfs_throttled_periods_total", "a"),
                ("cpu_cfs_periods_total", "b"),
                ("cpu_cfs_throttled_periods_total", "b"),
            ]
        );
        let mut got = Vec::new();
        let report = src.sample(Tier::Slow, &mut |i, v| got.push((i, v)));
        assert_eq!(report.failed, 0);
        // The pod's cgroup counted once for both containers.
        assert_eq!(
            got,
            [
                (0, Value::Counter(100)),
                (1, Value::Counter(40)),
                (2, Value::Counter(10)),
                (3, Value::Counter(9)),
            ]
        );
        assert!(!src.discover().unwrap(), "nothing changed");
        // A job's cgroup removed: its pair is skipped and the failure counted, the other job still read.
        std::fs::remove_dir_all(cg.join("b")).unwrap();
        got.clear();
        let report = src.sample(Tier::Slow, &mut |i, v| got.push((i, v)));
        assert_eq!(report.failed, 1);
        assert_eq!(got.len(), 2);
        assert!(src.sample(Tier::Fast, &mut |_, _| panic!("fast tier")).read == 0);
    }

    #[test]
    fn no_jobs_or_no_cgroup_file_system_means_no_series() {
        let sys = tempfile::tempdir().unwrap();
        let jobs = shared_job_cgroups();
        let mut src = CgroupSource::new(sys.path().to_path_buf(), jobs.clone());
        assert!(!src.discover().unwrap());
        jobs.lock()
            .unwrap()
            .insert("a".into(), BTreeSet::from([CpuCgroup::V2("/x".into())]));
        assert!(!src.discover().unwrap());
        assert!(src.inventory().series.is_empty());
    }
}
