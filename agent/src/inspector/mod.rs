//! NCCL Inspector records, followed live: the dump directories of the training processes the `processes` source
//! sees, their JSON-lines files as they grow, each line parsed (`commwatch_model::inspector`) into a wire
//! record that rides on the next batch.
//!
//! - [`dirs`]: where a process's Inspector writes (its allowlisted `NCCL_INSPECTOR_*` settings and its working
//!   directory);
//! - [`confine`]: that directory opened inside the process's own root (`<procfs-root>/<pid>/root`), never
//!   through a link, and its files opened without following one;
//! - [`quota`]: each job's share of the files followed;
//! - [`tail`]: one growing file followed through rotation, truncation and partial lines, in bounded memory;
//! - this module: the [`Follower`];
//! - [`feed`]: the follower on its own thread, and the queue its records wait in for the sampling thread's
//!   next batch.
//!
//! Bounds: at most [`FollowerSettings::max_files`] files on the node, each job at most its fair share of them
//! ([`quota::shares`], never more than [`FollowerSettings::max_files_per_job`]), [`tail::TailLimits`] per file,
//! [`FollowerSettings::max_entries_per_dir`] directory entries looked at per poll, and
//! [`FollowerSettings::max_records_per_poll`] records per poll (per batch); what is over is dropped and counted
//! in the agent's `/metrics` (`commwatch_agent_inspector_dropped_total{reason}`, `..._skipped_bytes_total`).
//! A record belongs to the job whose process named its directory: to the rank of the pid it names when that
//! pid is one of the job's, else to the rank whose process named the directory; a record naming a pid of
//! another job is dropped (`unattributed`).

pub mod confine;
pub mod dirs;
pub mod feed;
pub mod quota;
pub mod tail;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use commwatch_model::inspector::{parse_line, InspectorError};
use commwatch_model::Job;
use commwatch_proto::convert::collective_to_pb;
use commwatch_proto::v1 as pb;
use tracing::{debug, warn};

use self::confine::{ConfineError, DumpDir, Refusal};
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
    /// Files followed at once on the node, every job together; a file over a job's share is not followed
    /// (`too_many_files`, once per file per poll).
    pub max_files: usize,
    /// Files one job may have followed at once (its fair share of `max_files` may be smaller).
    pub max_files_per_job: usize,
    /// Entries of one dump directory looked at per poll (the rest is not; said once in the log).
    pub max_entries_per_dir: usize,
}

impl FollowerSettings {
    pub fn new(procfs_root: &Path) -> FollowerSettings {
        FollowerSettings {
            procfs_root: procfs_root.to_path_buf(),
            limits: TailLimits::default(),
            max_records_per_poll: 2048,
            max_files: 256,
            max_files_per_job: 128,
            max_entries_per_dir: 4096,
        }
    }
}

/// Who a directory or a pid belongs to: the job, and the rank in the job of the process.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    job: String,
    rank: Option<u32>,
}

/// A dump directory found in this poll, with the job (and rank) whose process named it first.
struct Found {
    dir: DumpDir,
    owner: Owner,
}

/// A file followed: its tail, the job its directory belongs to, and when it was admitted (the newest go first
/// when a job is over its share).
struct Followed {
    tail: FileTail,
    owner: Owner,
    admitted: u64,
}

/// A followed file: its directory (device, inode) and its name there.
type FileKey = ((u64, u64), OsString);

/// Follows every Inspector dump file of the node's training processes.
pub struct Follower {
    settings: FollowerSettings,
    metrics: Arc<AgentMetrics>,
    tails: BTreeMap<FileKey, Followed>,
    admissions: u64,
    /// What was said in the log and still holds (a refusal, a job over its share): said once while it lasts.
    said: HashSet<String>,
    said_now: HashSet<String>,
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
            admissions: 0,
            said: HashSet::new(),
            said_now: HashSet::new(),
        }
    }

    /// Reads what the processes of `jobs` appended since the last poll.
    pub fn poll(&mut self, jobs: &[Job]) -> Vec<pb::CollectiveRecord> {
        let found = self.directories(jobs);
        self.admit(&found);
        let pids = pid_owners(jobs);
        let mut counts = TailCounts::default();
        let mut out = Vec::new();
        let limits = self.settings.limits;
        let mut tails = std::mem::take(&mut self.tails);
        for ((dir_id, _), f) in tails.iter_mut() {
            let dir = found.get(dir_id).map(|x| &x.dir);
            for line in f.tail.poll(dir, &limits, &mut counts) {
                let Some(rec) = self.parse(&line, &f.owner, &pids) else {
                    continue;
                };
                if out.len() < self.settings.max_records_per_poll {
                    out.push(rec);
                } else {
                    self.drop_one("rate_limit");
                }
            }
        }
        tails.retain(|_, f| f.tail.alive());
        self.tails = tails;
        self.count(&counts, out.len());
        self.said = std::mem::take(&mut self.said_now);
        out
    }

    /// The dump directories of `jobs`' processes that open inside their roots, by identity, each with the
    /// first job (and rank) that named it; refusals counted.
    fn directories(&mut self, jobs: &[Job]) -> BTreeMap<(u64, u64), Found> {
        let mut found = BTreeMap::new();
        for job in jobs {
            for rank in &job.ranks {
                let DumpMode::Json(candidates) = dirs::dump_mode(&rank.nccl, &job.id) else {
                    continue;
                };
                let owner = Owner {
                    job: job.id.clone(),
                    rank: rank.rank,
                };
                for d in &candidates {
                    match confine::open_dump_dir(&self.settings.procfs_root, rank.pid, d) {
                        Ok(dir) => {
                            found.entry(dir.identity()).or_insert(Found { dir, owner });
                            break;
                        }
                        Err(ConfineError::Absent { .. }) => {}
                        Err(ConfineError::Refused { path, why }) => {
                            self.refuse(why, &job.id, &path);
                        }
                        Err(e @ ConfineError::Io { .. }) => {
                            debug!(job = ?job.id, error = %e, "inspector dump directory not opened");
                        }
                    }
                }
            }
        }
        found
    }

    /// Starts following the new dump files of `found`, each job within its share of the node's bound; a job
    /// over its share loses its newest files first. What is left out is counted (`too_many_files`).
    fn admit(&mut self, found: &BTreeMap<(u64, u64), Found>) {
        let candidates = self.candidates(found);
        let mut demand: BTreeMap<String, usize> = BTreeMap::new();
        for f in self.tails.values() {
            *demand.entry(f.owner.job.clone()).or_default() += 1;
        }
        for (job, files) in &candidates {
            *demand.entry(job.clone()).or_default() += files.len();
        }
        let s = &self.settings;
        let shares = quota::shares(&demand, s.max_files, s.max_files_per_job);
        for (job, share) in &shares {
            let kept = self.evict(job, *share);
            let new = candidates.get(job).map(Vec::as_slice).unwrap_or_default();
            let left_out = self.follow(new, share.saturating_sub(kept), found);
            if left_out > 0 {
                self.over_share(job, demand.get(job).copied().unwrap_or(0), *share, left_out);
            }
        }
        self.metrics.inspector.files.set(self.tails.len() as i64);
    }

    /// Starts following the files of `new` in their order, up to `room` of them: each only once it is found
    /// a regular file of its process's user (a refusal is counted and takes no room). Returns how many were
    /// left out for want of room (not looked at).
    fn follow(
        &mut self,
        new: &[(FileKey, Owner)],
        room: usize,
        found: &BTreeMap<(u64, u64), Found>,
    ) -> usize {
        let mut admitted = 0;
        for (i, (key, owner)) in new.iter().enumerate() {
            if admitted == room {
                return new.len() - i;
            }
            let Some(f) = found.get(&key.0) else {
                continue;
            };
            match f.dir.identity_of(&key.1) {
                Ok(Some(_)) => {}
                Ok(None) => continue,
                Err(why) => {
                    self.refuse(why, &owner.job, &f.dir.shown().join(&key.1));
                    continue;
                }
            }
            self.admissions += 1;
            let followed = Followed {
                tail: FileTail::new(&key.1),
                owner: owner.clone(),
                admitted: self.admissions,
            };
            self.tails.insert(key.clone(), followed);
            admitted += 1;
        }
        0
    }

    /// Each job's files in `found` named like dump files and not followed yet, sorted by name (not checked
    /// yet: [`Follower::follow`] does, for those it has room for).
    fn candidates(
        &mut self,
        found: &BTreeMap<(u64, u64), Found>,
    ) -> BTreeMap<String, Vec<(FileKey, Owner)>> {
        let mut out: BTreeMap<String, Vec<(FileKey, Owner)>> = BTreeMap::new();
        for (id, f) in found {
            let (names, more) = f.dir.names(self.settings.max_entries_per_dir);
            if more {
                let key = format!("entries:{}", f.dir.shown().display());
                if self.say(key) {
                    warn!(job = ?f.owner.job, dir = ?f.dir.shown(), looked_at = names.len(),
                        "inspector dump directory has more entries than the follower looks at; the rest are not followed");
                }
            }
            let mut live: Vec<OsString> = names
                .into_iter()
                .filter(|n| is_live_dump_file(&n.to_string_lossy()))
                .filter(|n| !self.tails.contains_key(&(*id, n.clone())))
                .collect();
            live.sort();
            let mine = out.entry(f.owner.job.clone()).or_default();
            mine.extend(live.into_iter().map(|n| ((*id, n), f.owner.clone())));
        }
        out
    }

    /// Stops following `job`'s newest files beyond `share` (counted `too_many_files`); returns how many it
    /// keeps.
    fn evict(&mut self, job: &str, share: usize) -> usize {
        let mut mine: Vec<(u64, FileKey)> = self
            .tails
            .iter()
            .filter(|(_, f)| f.owner.job == job)
            .map(|(k, f)| (f.admitted, k.clone()))
            .collect();
        if mine.len() <= share {
            return mine.len();
        }
        mine.sort();
        for (_, key) in mine.drain(share..) {
            self.tails.remove(&key);
            self.drop_one("too_many_files");
        }
        share
    }

    /// Counts the files of `job` left out this poll, and says once that it is over its share.
    fn over_share(&mut self, job: &str, files: usize, share: usize, left_out: usize) {
        self.metrics
            .inspector
            .dropped
            .with_label_values(&["too_many_files"])
            .inc_by(left_out as u64);
        if self.say(format!("share:{job}")) {
            warn!(job = ?job, files, followed = share,
                "a job has more inspector dump files than its share of the node's bound; the rest are not followed");
        }
    }

    /// Counts a refused directory or file, and says it once while it lasts.
    fn refuse(&mut self, why: Refusal, job: &str, path: &Path) {
        self.drop_one(why.reason());
        if self.say(format!("{}:{}", why.reason(), path.display())) {
            warn!(job = ?job, path = ?path, reason = why.reason(), "inspector dump path refused");
        }
    }

    /// Whether `key` is new to the log (it was not said in the previous poll); it counts as said in this one.
    fn say(&mut self, key: String) -> bool {
        let new = !self.said.contains(&key);
        self.said_now.insert(key);
        new
    }

    /// One line to a wire record of the directory's job `owner`, or counted.
    fn parse(
        &self,
        line: &str,
        owner: &Owner,
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
                let rank = match pids.get(&r.pid) {
                    Some(p) if p.job == owner.job => p.rank,
                    // A pid of another job in this job's directory: not this job's to claim.
                    Some(_) => {
                        self.drop_one("unattributed");
                        return None;
                    }
                    None => owner.rank,
                };
                Some(collective_to_pb(&owner.job, rank, &r))
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
        for why in &c.refused {
            self.drop_one(why.reason());
        }
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

/// Every pid of `jobs` with its job and rank.
fn pid_owners(jobs: &[Job]) -> HashMap<u32, Owner> {
    let mut pids = HashMap::new();
    for job in jobs {
        for rank in &job.ranks {
            let owner = Owner {
                job: job.id.clone(),
                rank: rank.rank,
            };
            pids.insert(rank.pid, owner);
        }
    }
    pids
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
