//! NCCL Inspector records, followed live: the dump directories of the training processes the `processes` source
//! sees, their JSON-lines files as they grow, each line parsed (`commwatch_model::inspector`) into a wire
//! record that rides on the next batch.
//!
//! - [`dirs`]: where a process's Inspector writes (its allowlisted `NCCL_INSPECTOR_*` settings and its working
//!   directory);
//! - [`tail`]: one growing file followed through rotation, truncation and partial lines, in bounded memory;
//! - this module: the [`Follower`];
//! - [`feed`]: the follower on its own thread, and the queue its records wait in for the sampling thread's
//!   next batch.
//!
//! Bounds: at most [`FollowerSettings::max_files`] files, [`tail::TailLimits`] per file, and
//! [`FollowerSettings::max_records_per_poll`] records per poll (per batch); what is over is dropped and counted
//! in the agent's `/metrics` (`commwatch_agent_inspector_dropped_total{reason}`, `..._skipped_bytes_total`).
//! Records are attributed to a job by the pid the plugin wrote, else to the job whose process named the
//! directory.

pub mod dirs;
pub mod feed;
pub mod tail;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use commwatch_model::inspector::{parse_line, InspectorError};
use commwatch_model::Job;
use commwatch_proto::convert::collective_to_pb;
use commwatch_proto::v1 as pb;

use self::dirs::DumpMode;
use self::tail::{FileTail, TailCounts, TailLimits};
use crate::telemetry::AgentMetrics;

/// Bounds and roots of the follower.
#[derive(Debug, Clone)]
pub struct FollowerSettings {
    pub procfs_root: PathBuf,
    pub limits: TailLimits,
    /// Records handed on per poll; more are dropped (`rate_limit`).
    pub max_records_per_poll: usize,
    /// Files followed at once; more are not followed (`too_many_files`, once per file per poll).
    pub max_files: usize,
}

impl FollowerSettings {
    pub fn new(procfs_root: &Path) -> FollowerSettings {
        FollowerSettings {
            procfs_root: procfs_root.to_path_buf(),
            limits: TailLimits::default(),
            max_records_per_poll: 2048,
            max_files: 256,
        }
    }
}

/// Who a directory or a pid belongs to: (job id, rank in the job).
type Owner = (String, Option<u32>);

/// Follows every Inspector dump file of the node's training processes.
pub struct Follower {
    settings: FollowerSettings,
    metrics: Arc<AgentMetrics>,
    tails: BTreeMap<PathBuf, FileTail>,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("files", &self.tails.len())
            .finish()
    }
}

/// Whether a file in a dump directory is one the plugin writes to (rotated parts are followed through the
/// handle of the file they were, never as new files).
pub fn is_live_dump_file(name: &str) -> bool {
    name.ends_with(".log") || name.ends_with(".jsonl")
}

impl Follower {
    pub fn new(settings: FollowerSettings, metrics: Arc<AgentMetrics>) -> Follower {
        Follower {
            settings,
            metrics,
            tails: BTreeMap::new(),
        }
    }

    /// Reads what the processes of `jobs` appended since the last poll.
    pub fn poll(&mut self, jobs: &[Job]) -> Vec<pb::CollectiveRecord> {
        let (dirs, pids) = self.directories(jobs);
        self.discover_files(&dirs);
        let mut counts = TailCounts::default();
        let mut out = Vec::new();
        let limits = self.settings.limits;
        let mut tails = std::mem::take(&mut self.tails);
        for (path, tail) in tails.iter_mut() {
            let owner = dirs.get(path.parent().unwrap_or(Path::new(""))).cloned();
            for line in tail.poll(&limits, &mut counts) {
                if let Some(rec) = self.parse(&line, owner.as_ref(), &pids) {
                    if out.len() < self.settings.max_records_per_poll {
                        out.push(rec);
                    } else {
                        self.drop_one("rate_limit");
                    }
                }
            }
        }
        tails.retain(|_, t| t.alive());
        self.tails = tails;
        self.count(&counts, out.len());
        out
    }

    /// Dump directories (as the agent sees them) with the job that named them, and every pid's job.
    fn directories(&self, jobs: &[Job]) -> (HashMap<PathBuf, Owner>, HashMap<u32, Owner>) {
        let mut dirs = HashMap::new();
        let mut pids = HashMap::new();
        for job in jobs {
            for rank in &job.ranks {
                let owner = (job.id.clone(), rank.rank);
                pids.insert(rank.pid, owner.clone());
                let DumpMode::Json(candidates) = dirs::dump_mode(&rank.nccl, &job.id) else {
                    continue;
                };
                let found = candidates
                    .iter()
                    .find_map(|d| dirs::resolve(&self.settings.procfs_root, rank.pid, d));
                if let Some(dir) = found {
                    dirs.entry(dir).or_insert(owner);
                }
            }
        }
        (dirs, pids)
    }

    /// Starts following the dump files of `dirs` not followed yet, up to the file bound.
    fn discover_files(&mut self, dirs: &HashMap<PathBuf, Owner>) {
        for dir in dirs.keys() {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
                let live = path
                    .file_name()
                    .is_some_and(|n| is_live_dump_file(&n.to_string_lossy()));
                if !live || self.tails.contains_key(&path) {
                    continue;
                }
                if self.tails.len() >= self.settings.max_files {
                    self.drop_one("too_many_files");
                    continue;
                }
                self.tails.insert(path.clone(), FileTail::new(&path));
            }
        }
        self.metrics.inspector.files.set(self.tails.len() as i64);
    }

    /// One line to a wire record, or counted.
    fn parse(
        &self,
        line: &str,
        dir_owner: Option<&Owner>,
        pids: &HashMap<u32, Owner>,
    ) -> Option<pb::CollectiveRecord> {
        if line.trim().is_empty() {
            return None;
        }
        match parse_line(line) {
            Ok(parsed) => {
                self.metrics
                    .inspector
                    .unknown_fields
                    .inc_by(u64::from(parsed.unknown_fields));
                let r = parsed.record;
                let Some((job, job_rank)) = pids.get(&r.pid).or(dir_owner) else {
                    self.drop_one("unattributed");
                    return None;
                };
                Some(collective_to_pb(job, *job_rank, &r))
            }
            Err(e) => {
                self.drop_one(match e {
                    InspectorError::Version(_) => "unknown_version",
                    InspectorError::NotCollective => "not_collective",
                    InspectorError::Json(_) | InspectorError::Field(_) => "malformed",
                });
                None
            }
        }
    }

    fn drop_one(&self, reason: &str) {
        self.metrics
            .inspector
            .dropped
            .with_label_values(&[reason])
            .inc();
    }

    fn count(&self, c: &TailCounts, records: usize) {
        let m = &self.metrics;
        m.inspector.records.inc_by(records as u64);
        m.inspector.skipped_bytes.inc_by(c.skipped_bytes);
        m.inspector
            .dropped
            .with_label_values(&["too_long"])
            .inc_by(c.long_lines);
        m.inspector
            .file_resets
            .with_label_values(&["rotated"])
            .inc_by(c.rotations);
        m.inspector
            .file_resets
            .with_label_values(&["truncated"])
            .inc_by(c.truncations);
    }
}

/// Attaches the records waiting in `feed` (at most the follower's per-poll bound) to a batch; a batch is made
/// for records alone when there are no samples.
pub fn attach(
    batch: Option<pb::SampleBatch>,
    feed: Option<&feed::InspectorFeed>,
    max_records: usize,
) -> Option<pb::SampleBatch> {
    let records = feed.map(|f| f.take(max_records)).unwrap_or_default();
    match batch {
        Some(mut b) => {
            b.collectives = records;
            Some(b)
        }
        None if !records.is_empty() => Some(pb::SampleBatch {
            collectives: records,
            ..Default::default()
        }),
        None => None,
    }
}

#[cfg(test)]
mod tests;
