//! The `processes` source: training processes under `--procfs-root`, grouped into jobs with their ranks, GPUs,
//! Kubernetes pod and NCCL settings. No series; the jobs travel in the inventory ([`Source::jobs`]).
//!
//! Found by: NVML's compute process list (where a GPU backend answers), and environment markers (`RANK`,
//! `LOCAL_RANK`, `OMPI_COMM_WORLD_RANK`, `SLURM_PROCID`). From a process environment **only the keys of
//! [`is_allowed`] are kept**, and they are kept at the moment `environ` is split: every other entry is dropped
//! unread (its bytes are never copied, logged, stored or sent). Processes that vanish or deny access are
//! skipped quietly (a debug count, no content).
//!
//! Job id ([`job_id`]), in order: `COMMWATCH_JOB`, `SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`,
//! `MASTER_ADDR:MASTER_PORT`, `pod-<uid>` (the Kubernetes pod), else `session-<sid>` (the session of the
//! launcher) for a process with rank markers and `pid-<pid>` for a lone GPU process. The step-marker client
//! (`commwatch_steps`) names a job by the same rule, so markers and processes file one job under one id; the
//! two are tested against one table (`clients/python/tests/job_ids.json`). Processes forked by a rank
//! (data-loader workers) inherit its environment: of several processes with the same job and rank, the one on
//! a GPU is kept, else the oldest.
//!
//! Cost: a full scan lists `/proc` and reads `stat` of every process; `environ` and `cgroup` are read once
//! per process image (keyed by pid, start time and the image's code and stack addresses, so an `exec` under
//! the same pid is read anew). The first discovery scans, then one in [`FULL_WALK_EVERY`] (every minute at the
//! default discovery period); the others read NVML's process list again (a process it lists that was not read
//! yet is read) and look as a refresh does. Between discoveries, at each slow tick ([`Source::refresh_jobs`]), `/proc` is
//! looked at only when a process may have started or ended (its link count or `loadavg`'s last pid moved: one
//! `statx` and one `pread` otherwise): a pid not known before is read (so a new rank is known within a slow
//! period), one gone is dropped, and a pid listed for less than [`RECHECK_YOUNG`] has its `stat` read again
//! (its `exec` may follow its launcher's `fork`); nothing else is read, and NVML's process list is the last
//! discovery's. On the agent's own procfs, when few pids were handed out since the last look ([`PROBE_MAX`]),
//! those pids are read one by one instead of listing `/proc` (whose listing costs the kernel a lookup per
//! process), and the processes that claim a rank are checked for their end. Each file of a pid is read in
//! three system calls on procfs, five elsewhere ([`PidFiles`]). A
//! process caught half-way through an `exec` (its environment not yet placed) is read again at the next
//! look. The jobs' CPU cgroups are handed to the `cgroup` source at each look that changes a job.
//!
//! [`FULL_WALK_EVERY`]: super::dir_mark::FULL_WALK_EVERY

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use commwatch_model::{Job, Link, LinkClass, NcclConflict, Rank};

use super::attr_file::AttrFile;
use super::cgroup::{parse_proc_cgroup, CpuCgroup, SharedJobCgroups};
use super::dir_mark::Rewalk;
use super::fsroot::FsRoot;
use super::gpu::{GpuProcess, SharedGpu};
use super::pid_files::PidFiles;
use super::{Inventory, ReadReport, Source, SourceError, Tier, Value};

/// Environment keys read besides the NCCL settings of [`NCCL_KEYS`].
pub const ALLOWED_KEYS: &[&str] = &[
    "COMMWATCH_JOB",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "TORCHELASTIC_RUN_ID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "CUDA_VISIBLE_DEVICES",
];

/// Longest value kept; longer ones are cut (NCCL settings are short).
pub const MAX_VALUE_BYTES: usize = 256;

/// The NCCL settings read, by name: those the project checks (`NCCL_SOCKET_IFNAME`, `NCCL_IB_HCA`,
/// `NCCL_IB_DISABLE`, `NCCL_NET`), NCCL's documented tuning and transport settings, and the four that enable NCCL
/// Inspector and name its output (`NCCL_PROFILER_PLUGIN`, `NCCL_INSPECTOR_ENABLE`, `NCCL_INSPECTOR_DUMP_DIR`,
/// `NCCL_INSPECTOR_PROM_DUMP`: the `inspector` follower reads them). Sorted. There is no
/// `NCCL_*` wildcard: a plugin's or a site's own `NCCL_` variables may carry credentials or addresses, and
/// are never read. Left out on purpose: `NCCL_COMM_ID` (the address of the job's bootstrap root), `NCCL_HOSTID`,
/// `NCCL_RAS_ADDR`, and the file paths `NCCL_CONF_FILE`, `NCCL_DEBUG_FILE`, `NCCL_TOPO_DUMP_FILE`.
pub const NCCL_KEYS: &[&str] = &[
    "NCCL_ALGO",
    "NCCL_ALLOC_P2P_NET_LL_BUFFERS",
    "NCCL_BUFFSIZE",
    "NCCL_CGA_CLUSTER_SIZE",
    "NCCL_CHECKS_DISABLE",
    "NCCL_CHECK_POINTERS",
    "NCCL_COLLNET_ENABLE",
    "NCCL_COLLNET_NODE_THRESHOLD",
    "NCCL_COMM_BLOCKING",
    "NCCL_CROSS_NIC",
    "NCCL_CUMEM_ENABLE",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DMABUF_ENABLE",
    "NCCL_GRAPH_MIXING_SUPPORT",
    "NCCL_GRAPH_REGISTER",
    "NCCL_IBEXT_DISABLE",
    "NCCL_IB_ADAPTIVE_ROUTING",
    "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_ADDR_RANGE",
    "NCCL_IB_AR_THRESHOLD",
    "NCCL_IB_CUDA_SUPPORT",
    "NCCL_IB_DISABLE",
    "NCCL_IB_ECE_ENABLE",
    "NCCL_IB_FIFO_TC",
    "NCCL_IB_GDR_LEVEL",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_HCA",
    "NCCL_IB_MERGE_NICS",
    "NCCL_IB_PCI_RELAXED_ORDERING",
    "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_IB_RETRY_CNT",
    "NCCL_IB_RETURN_ASYNC_EVENTS",
    "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_SL",
    "NCCL_IB_SPLIT_DATA_ON_QPS",
    "NCCL_IB_TC",
    "NCCL_IB_TIMEOUT",
    "NCCL_IGNORE_CPU_AFFINITY",
    "NCCL_INSPECTOR_DUMP_DIR",
    "NCCL_INSPECTOR_ENABLE",
    "NCCL_INSPECTOR_PROM_DUMP",
    "NCCL_LAUNCH_MODE",
    "NCCL_LL128_NTHREADS",
    "NCCL_LL_THRESHOLD",
    "NCCL_LOCAL_REGISTER",
    "NCCL_MAX_CTAS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MAX_NRINGS",
    "NCCL_MIN_CTAS",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MIN_NRINGS",
    "NCCL_MNNVL_ENABLE",
    "NCCL_NCHANNELS_PER_NET_PEER",
    "NCCL_NET",
    "NCCL_NET_GDR_C2C",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ",
    "NCCL_NET_PLUGIN",
    "NCCL_NET_SHARED_BUFFERS",
    "NCCL_NET_SHARED_COMMS",
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_NTHREADS",
    "NCCL_NVB_DISABLE",
    "NCCL_NVLS_ENABLE",
    "NCCL_NVLS_NCHANNELS",
    "NCCL_P2P_DIRECT_DISABLE",
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_P2P_LL_THRESHOLD",
    "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_NVL_CHUNKSIZE",
    "NCCL_P2P_PCI_CHUNKSIZE",
    "NCCL_P2P_PXN_LEVEL",
    "NCCL_PROFILER_PLUGIN",
    "NCCL_PROTO",
    "NCCL_PXN_DISABLE",
    "NCCL_RUNTIME_CONNECT",
    "NCCL_SHM_DISABLE",
    "NCCL_SINGLE_RING_THRESHOLD",
    "NCCL_SOCKET_FAMILY",
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_NTHREADS",
    "NCCL_TOPO_FILE",
    "NCCL_TREE_THRESHOLD",
    "NCCL_TUNER_PLUGIN",
];

/// Parts of a name that say its value may be a secret. A key holding one has its value replaced by
/// [`REDACTED`] even when it is allowed: an allowlist grows, and a name that says "token" is taken at its word.
pub const SECRET_MARKERS: &[&str] = &["TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"];

/// The value kept in place of a secret-looking one.
pub const REDACTED: &str = "<redacted>";

/// Whether an environment key is read at all: [`ALLOWED_KEYS`] and [`NCCL_KEYS`], by exact name.
pub fn is_allowed(key: &str) -> bool {
    ALLOWED_KEYS.contains(&key) || NCCL_KEYS.binary_search(&key).is_ok()
}

/// Whether `key` names something that looks secret (see [`SECRET_MARKERS`]; any case).
pub fn looks_secret(key: &str) -> bool {
    let upper = key.to_ascii_uppercase();
    SECRET_MARKERS.iter().any(|m| upper.contains(m))
}

/// Splits `/proc/<pid>/environ` and keeps only allowed keys ([`is_allowed`]); everything else is dropped on
/// the spot.
pub fn parse_environ(raw: &[u8]) -> BTreeMap<String, String> {
    parse_environ_with(raw, is_allowed)
}

/// [`parse_environ`] with another allowlist. A kept value is cut at [`MAX_VALUE_BYTES`] (whole characters),
/// loses its control characters, and is [`REDACTED`] when its key [`looks_secret`]; a value that is not UTF-8
/// is dropped.
pub fn parse_environ_with(raw: &[u8], allowed: impl Fn(&str) -> bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in raw.split(|b| *b == 0) {
        let Some(eq) = entry.iter().position(|b| *b == b'=') else {
            continue;
        };
        let Ok(key) = std::str::from_utf8(&entry[..eq]) else {
            continue;
        };
        if !allowed(key) {
            continue;
        }
        if looks_secret(key) {
            out.insert(key.to_string(), REDACTED.to_string());
            continue;
        }
        let value = &entry[eq + 1..];
        let cut = &value[..value.len().min(MAX_VALUE_BYTES)];
        // A cut inside a multi-byte character keeps the whole characters before it.
        let text = match std::str::from_utf8(cut) {
            Ok(v) => Some(v),
            Err(e) if e.error_len().is_none() => std::str::from_utf8(&cut[..e.valid_up_to()]).ok(),
            Err(_) => None,
        };
        if let Some(v) = text {
            out.insert(
                key.to_string(),
                v.chars().filter(|c| !c.is_control()).collect(),
            );
        }
    }
    out
}

/// Kubernetes identity of a process from `/proc/<pid>/cgroup`: `(pod UID, container id)`.
///
/// Handles cgroup v1 (`.../kubepods/burstable/pod<uid>/<container>`), cgroup v2 with the systemd driver
/// (`.../kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope`, also `docker-` and
/// `crio-`).
pub fn parse_cgroup(text: &str) -> (Option<String>, Option<String>) {
    let mut pod = None;
    let mut container = None;
    for line in text.lines() {
        let path = line.splitn(3, ':').nth(2).unwrap_or(line);
        if !path.contains("kubepods") {
            continue;
        }
        for part in path.split('/') {
            let part = part.trim();
            if let Some(i) = part.rfind("pod") {
                let rest = &part[i + 3..];
                let rest = rest.strip_suffix(".slice").unwrap_or(rest);
                let uid = rest.replace('_', "-");
                if is_uid(&uid) {
                    pod = Some(uid);
                    continue;
                }
            }
            let id = part
                .strip_suffix(".scope")
                .map(|p| p.rsplit('-').next().unwrap_or(p))
                .unwrap_or(part);
            if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                container = Some(id.to_string());
            }
        }
        if pod.is_some() {
            break;
        }
    }
    (pod, container)
}

fn is_uid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| {
            if [8, 13, 18, 23].contains(&i) {
                b == b'-'
            } else {
                b.is_ascii_hexdigit()
            }
        })
}

/// What `/proc/<pid>/stat` tells of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Session id (field 6).
    pub session: u32,
    /// Start time since boot, in clock ticks (field 22); an `exec` keeps it, as it keeps the pid.
    pub start: u64,
    /// The running image: start and end of its code, start of its stack (fields 26–28, addresses). A new
    /// image (`exec`) has new ones (the stack's at least, under address randomisation); zero for a kernel
    /// thread, for a process half-way through an `exec`, and where the kernel's line stops short of them.
    pub image: [u64; 3],
    /// `PF_KTHREAD` in the flags (field 9): a kernel thread, never a rank, never with an environment.
    pub kernel_thread: bool,
    /// A thread that does not lead its process (`exit_signal`, field 38, is -1): `<pid>/stat` of a thread's
    /// id answers though the root lists only processes.
    pub thread: bool,
}

/// The kernel's `PF_KTHREAD` process flag.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Parses `/proc/<pid>/stat`; `None` when the session or start time is missing or not a number.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    // After ')': state(3) ppid(4) pgrp(5) session(6) ... flags(9) ... starttime(22) ... startcode(26)
    // endcode(27) startstack(28).
    Some(ProcStat {
        session: f.get(3)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
        image: [num(23), num(24), num(25)],
        kernel_thread: num(6) & PF_KTHREAD != 0,
        thread: f.get(35).and_then(|s| s.parse::<i64>().ok()) == Some(-1),
    })
}

/// [`Rank::found_by`] of a process on a GPU (NVML's compute process list).
pub const FOUND_BY_NVML: &str = "nvml";
/// [`Rank::found_by`] of a process found by its environment markers alone.
pub const FOUND_BY_ENVIRONMENT: &str = "environment";

/// Environment keys that mark a process as a rank of a training job.
const RANK_MARKERS: &[&str] = &["RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"];

/// Environment keys that name a job, in order of precedence; after them come `MASTER_ADDR:MASTER_PORT`, the
/// pod and the session (see [`job_id`]).
pub const JOB_ID_KEYS: &[&str] = &["COMMWATCH_JOB", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"];

/// Environment keys holding a process's global rank, in order of precedence.
pub const RANK_KEYS: &[&str] = &["RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"];

/// Longest job id, in bytes (what the collector and the marker listener accept); longer ones are cut.
pub const MAX_JOB_ID_BYTES: usize = 128;

/// How long after a pid first appears its `stat` is read again at each [`ProcessesSource::refresh`]: a
/// process caught between its launcher's `fork` and its own `exec` shows the launcher's image and environment
/// (no rank yet), and the `exec` that brings the rank keeps the pid (it follows the `fork` within
/// milliseconds as launchers start workers). Past this, an `exec` under an old pid is found by the next full
/// scan.
pub const RECHECK_YOUNG: Duration = Duration::from_secs(3);

/// Most pids handed out since the last look that a refresh reads one by one (a `stat` each, most of them
/// gone already or threads) instead of listing the root; more, and the root is listed. Below this, at most
/// one pid per [`PROBE_SHARE`] processes known (a listing costs the kernel a lookup per process, a pid read
/// one by one several system calls), and at least [`PROBE_MIN`].
pub const PROBE_MAX: u32 = 64;
/// See [`PROBE_MAX`].
pub const PROBE_SHARE: u32 = 8;
/// See [`PROBE_MAX`].
pub const PROBE_MIN: u32 = 4;

/// What tells, without listing the root, whether a process may have started or ended since the last look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    /// The root's link count: on procfs, its fixed entries plus the number of processes (in every pid
    /// namespace); in a plain directory tree, its sub-directories.
    links: u64,
    /// The last pid the kernel handed out (`loadavg`'s last field, in the reader's pid namespace); `None`
    /// where the root has no `loadavg`.
    last_pid: Option<u32>,
}

/// The last pid handed out, from the text of `/proc/loadavg` (`0.44 1.27 2.14 2/345 12345`).
pub fn parse_last_pid(loadavg: &str) -> Option<u32> {
    loadavg.split_whitespace().nth(4)?.parse().ok()
}

/// What was learnt about a process, cached by pid while its start time and image stay.
#[derive(Debug, Clone)]
struct Seen {
    start: u64,
    image: [u64; 3],
    env: Option<BTreeMap<String, String>>,
    pod: Option<String>,
    container: Option<String>,
    /// Its CPU cgroup (for the `cgroup` source).
    cpu_cgroup: Option<CpuCgroup>,
    session: u32,
}

/// A pid listed under the root, and what is known of it.
#[derive(Debug)]
struct Entry {
    /// What the process is; `None` when its `stat` could not be read or parsed.
    seen: Option<Seen>,
    /// `false` for a process caught half-way through an `exec` (its environment not placed yet): it is read
    /// again at the next look, refresh or scan.
    settled: bool,
    /// When the pid was first listed (see [`RECHECK_YOUNG`]).
    first_listed: Instant,
}

impl Entry {
    /// Whether a refresh at `now` reads this process again, when pids are young for `young`.
    fn recheck(&self, now: Instant, young: Duration) -> bool {
        !self.settled || now.saturating_duration_since(self.first_listed) < young
    }
}

/// Finds training processes. See the module documentation.
pub struct ProcessesSource {
    procfs_root: FsRoot,
    /// Reads the files of each pid under the root.
    files: PidFiles,
    gpu: Option<SharedGpu>,
    node_links: Vec<Link>,
    inventory: Inventory,
    jobs: Vec<Job>,
    /// Every pid listed at the last look (scan or refresh), with what it is.
    cache: HashMap<u32, Entry>,
    /// NVML's compute processes at the last scan: pid → GPU indices.
    gpus_of: BTreeMap<u32, Vec<String>>,
    /// Where each scan leaves the jobs' CPU cgroups for the `cgroup` source; `None`: nobody reads them.
    cgroups: Option<SharedJobCgroups>,
    /// Only these pids are looked at (tests); `None`: every process.
    only: Option<Vec<u32>>,
    /// [`RECHECK_YOUNG`], or another span (tests).
    recheck_young: Duration,
    /// The mark of the last listing of the root; `None` before the first or where it cannot be read.
    mark: Option<Mark>,
    /// `<root>/loadavg`, kept open once found.
    loadavg: Option<AttrFile>,
    /// Reused for each `stat` and `cgroup` read.
    buf: Vec<u8>,
    /// Whether the root is procfs of the agent's own pid namespace (its `self` names this process), where
    /// `loadavg`'s last pid counts the root's pids; `None` before the first look.
    own_namespace: Option<bool>,
    /// Which discoveries scan in full (no mark: the first, then one in
    /// [`FULL_WALK_EVERY`](super::dir_mark::FULL_WALK_EVERY)).
    scans: Rewalk,
}

fn first_u32(env: &BTreeMap<String, String>, keys: &[&str]) -> Option<u32> {
    keys.iter()
        .find_map(|k| env.get(*k).and_then(|v| v.trim().parse().ok()))
}

impl ProcessesSource {
    /// Looks under `procfs_root`; `gpu` gives NVML's compute process list where present.
    pub fn new(procfs_root: PathBuf, gpu: Option<SharedGpu>) -> ProcessesSource {
        ProcessesSource {
            files: PidFiles::new(&procfs_root),
            procfs_root: FsRoot::new(procfs_root),
            gpu,
            node_links: Vec::new(),
            inventory: Inventory::default(),
            jobs: Vec::new(),
            cache: HashMap::new(),
            gpus_of: BTreeMap::new(),
            cgroups: None,
            only: None,
            recheck_young: RECHECK_YOUNG,
            mark: None,
            loadavg: None,
            buf: Vec::new(),
            scans: Rewalk::default(),
            own_namespace: None,
        }
    }

    /// Reads the `stat` of a pid again at each refresh for `span` after it is first listed, instead of
    /// [`RECHECK_YOUNG`] (tests).
    pub fn recheck_young(mut self, span: Duration) -> ProcessesSource {
        self.recheck_young = span;
        self
    }

    /// Leaves each scan's jobs' CPU cgroups in `cgroups` (read by the `cgroup` source).
    pub fn with_cgroups(mut self, cgroups: SharedJobCgroups) -> ProcessesSource {
        self.cgroups = Some(cgroups);
        self
    }

    /// Restricts the scan to these pids (for tests on a live `/proc`).
    pub fn only_pids(mut self, pids: Vec<u32>) -> ProcessesSource {
        self.only = Some(pids);
        self
    }

    /// The pids listed under the root now: its sub-directories (not links) whose names are numbers (one
    /// `getdents` pass, no file read).
    fn pids(&self) -> Vec<u32> {
        let root = self.procfs_root.path();
        if let Some(o) = &self.only {
            let is_dir = |pid: &u32| {
                std::fs::symlink_metadata(root.join(pid.to_string())).is_ok_and(|m| m.is_dir())
            };
            return o.iter().copied().filter(is_dir).collect();
        }
        let Ok(dir) = std::fs::read_dir(root) else {
            return Vec::new();
        };
        // Directories only, never links (the entry's own type, from the listing): the files read under a
        // pid then lie inside the root (see [`PidFiles`]).
        dir.filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
            .collect()
    }

    /// The root's [`Mark`] now (one `statx`, one `pread` of `loadavg`); `None` when its link count cannot be
    /// read.
    fn mark(&mut self) -> Option<Mark> {
        let links = std::fs::metadata(self.procfs_root.path()).ok()?.nlink();
        if self.loadavg.is_none() {
            self.loadavg = AttrFile::open(&self.procfs_root, self.procfs_root.join("loadavg")).ok();
        }
        let last_pid = match &mut self.loadavg {
            Some(f) => f.read().ok().and_then(parse_last_pid),
            None => None,
        };
        Some(Mark { links, last_pid })
    }

    /// Reads what process `pid` is, or recalls it when its start time and image are those cached and its
    /// reading settled; the entry is left in the cache. Returns whether the entry is new or changed.
    fn look(&mut self, pid: u32, now: Instant) -> bool {
        let stat = self.read_stat(pid);
        self.take_in(pid, stat, now)
    }

    /// `<root>/<pid>/stat`, parsed; `None` when it cannot be read or parsed.
    fn read_stat(&mut self, pid: u32) -> Option<ProcStat> {
        read_pid_text(&mut self.files, pid, "stat", &mut self.buf).and_then(|s| parse_stat(&s))
    }

    /// [`ProcessesSource::look`] with the `stat` already read.
    fn take_in(&mut self, pid: u32, stat: Option<ProcStat>, now: Instant) -> bool {
        let prev = self.cache.get(&pid);
        let first_listed = prev.map_or(now, |e| e.first_listed);
        let Some(stat) = stat else {
            let changed = prev.is_none_or(|e| e.seen.is_some());
            let entry = Entry {
                seen: None,
                settled: true,
                first_listed,
            };
            self.cache.insert(pid, entry);
            return changed;
        };
        if let Some(Entry {
            seen: Some(s),
            settled: true,
            ..
        }) = prev
        {
            if s.start == stat.start && s.image == stat.image {
                return false;
            }
        }
        // A kernel thread has neither environment nor cgroup of its own to read.
        let env = (!stat.kernel_thread)
            .then(|| read_environ(&mut self.files, pid))
            .flatten();
        let cgroup = (!stat.kernel_thread)
            .then(|| read_pid_text(&mut self.files, pid, "cgroup", &mut self.buf))
            .flatten()
            .filter(|t| !t.is_empty());
        let (pod, container) = cgroup.as_deref().map(parse_cgroup).unwrap_or((None, None));
        let cpu_cgroup = cgroup.as_deref().and_then(parse_proc_cgroup);
        // A process half-way through an `exec` shows an empty environment (the new image's is not placed
        // yet) under its old pid and start time: such a reading is used once and read again next look.
        let settled = stat.kernel_thread || env.as_ref().is_none_or(|e| !e.raw_empty);
        let seen = Seen {
            start: stat.start,
            image: stat.image,
            env: env.map(|e| e.vars),
            pod,
            container,
            cpu_cgroup,
            session: stat.session,
        };
        let entry = Entry {
            seen: Some(seen),
            settled,
            first_listed,
        };
        self.cache.insert(pid, entry);
        true
    }

    fn gpu_processes(&self) -> Vec<GpuProcess> {
        let Some(g) = &self.gpu else {
            return Vec::new();
        };
        let mut b = match g.lock() {
            Ok(b) => b,
            Err(p) => p.into_inner(),
        };
        b.compute_processes().unwrap_or_default()
    }

    /// Reads NVML's compute process list into `gpus_of`.
    fn read_gpus_of(&mut self) {
        self.gpus_of.clear();
        for p in self.gpu_processes() {
            self.gpus_of
                .entry(p.pid)
                .or_default()
                .push(p.gpu.to_string());
        }
    }

    /// Scans the processes now: NVML's process list, and every listed process's `stat` (its environment and
    /// cgroup only for a process not seen before, or with a new image); returns the jobs found.
    pub fn scan(&mut self) -> Vec<Job> {
        self.files.recheck_root();
        self.read_gpus_of();
        let now = Instant::now();
        self.mark = self.mark();
        let pids = self.pids();
        for &pid in &pids {
            self.look(pid, now);
        }
        self.forget_unlisted(&pids);
        let unreadable = self.cache.values().filter(|e| e.seen.is_none()).count();
        if unreadable > 0 {
            tracing::debug!(
                unreadable,
                "processes source: some processes vanished or could not be read"
            );
        }
        self.assemble()
    }

    /// Looks for processes started or ended since the last look, without a full scan. Nothing is read but
    /// the [`Mark`] unless it moved (a process or thread was created, or a process reaped); then, where the
    /// root is the agent's own procfs and few pids were handed out since ([`PROBE_MAX`]), each of those pids
    /// is read (a process taken in, a thread or a pid gone already left out) and the processes that claim a
    /// rank are checked for their end, else the root is listed: the processes not known yet are read and
    /// those gone dropped. Read again in any case: processes whose reading did not settle, and those
    /// listed for less than [`RECHECK_YOUNG`] (`stat` only, unless their image changed). NVML's process list
    /// stays the last scan's. Returns the jobs when a process came, went or changed, `None` when nothing did.
    ///
    /// Missed until the next scan: a process started in the same slow period as an older one ended, where
    /// the root is not in the reader's pid namespace (the count is unchanged and `loadavg` does not see the
    /// new pid); an `exec` under a pid older than [`RECHECK_YOUNG`].
    pub fn refresh(&mut self) -> Option<Vec<Job>> {
        let now = Instant::now();
        let mark = self.mark();
        let before = std::mem::replace(&mut self.mark, mark);
        let moved = mark.is_none() || mark != before;
        let changed = if !moved {
            self.recheck(now)
        } else if let Some(new) = self.probe_range(before, mark) {
            let mut changed = self.drop_ended_claimants();
            for pid in new {
                changed |= self.probe(pid, now);
            }
            changed | self.recheck(now)
        } else {
            self.relist(now)
        };
        changed.then(|| self.assemble())
    }

    /// The pids handed out between two marks, when a refresh may read them one by one instead of listing the
    /// root: both marks have a last pid, in the agent's own pid namespace, it did not wrap, and few were
    /// handed out (see [`PROBE_MAX`]). Never with [`ProcessesSource::only_pids`].
    fn probe_range(
        &mut self,
        before: Option<Mark>,
        now: Option<Mark>,
    ) -> Option<std::ops::RangeInclusive<u32>> {
        let (from, to) = (before?.last_pid?, now?.last_pid?);
        let known = u32::try_from(self.cache.len()).unwrap_or(u32::MAX);
        let most = (known / PROBE_SHARE).clamp(PROBE_MIN, PROBE_MAX);
        if self.only.is_some() || to < from || to - from > most {
            return None;
        }
        let root = self.procfs_root.path();
        let own = *self.own_namespace.get_or_insert_with(|| {
            std::fs::read_link(root.join("self"))
                .is_ok_and(|l| l.to_str() == Some(std::process::id().to_string().as_str()))
        });
        own.then(|| from.saturating_add(1)..=to)
    }

    /// Reads pid `pid`, handed out since the last look: a process is taken in as a listing would; a thread,
    /// or a pid gone already, is not kept. Returns whether the cache changed.
    fn probe(&mut self, pid: u32, now: Instant) -> bool {
        match self.read_stat(pid) {
            Some(stat) if !stat.thread => self.take_in(pid, Some(stat), now),
            _ => self.cache.remove(&pid).is_some(),
        }
    }

    /// Drops the cached processes that claim a rank (or are on a GPU) and are gone (one `lstat` of each's
    /// directory: a handful on a training node); others gone are dropped at the next listing. Returns
    /// whether one was.
    fn drop_ended_claimants(&mut self) -> bool {
        let root = self.procfs_root.path();
        let ended: Vec<u32> = self
            .cache
            .iter()
            .filter(|(pid, e)| {
                e.seen
                    .as_ref()
                    .is_some_and(|s| claims(**pid, s, &self.gpus_of))
            })
            .map(|(pid, _)| *pid)
            .filter(|pid| {
                std::fs::symlink_metadata(root.join(pid.to_string()))
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            })
            .collect();
        for pid in &ended {
            self.cache.remove(pid);
        }
        !ended.is_empty()
    }

    /// A discovery between two scans: NVML's process list read again, a process it lists that was not read
    /// yet read, then a [`ProcessesSource::refresh`]; returns the jobs.
    fn between_scans(&mut self) -> Vec<Job> {
        self.read_gpus_of();
        let now = Instant::now();
        let unread: Vec<u32> = self
            .gpus_of
            .keys()
            .filter(|pid| !self.cache.contains_key(pid))
            .copied()
            .collect();
        for pid in unread {
            self.look(pid, now);
        }
        // The refresh's own jobs (when it saw a change) are assembled again here with NVML's new list.
        let _ = self.refresh();
        self.assemble()
    }

    /// Reads again the cached processes a refresh at `now` must (see [`Entry::recheck`]); returns whether
    /// any changed.
    fn recheck(&mut self, now: Instant) -> bool {
        let young = self.recheck_young;
        let due: Vec<u32> = self
            .cache
            .iter()
            .filter(|(_, e)| e.recheck(now, young))
            .map(|(pid, _)| *pid)
            .collect();
        let mut changed = false;
        for pid in due {
            changed |= self.look(pid, now);
        }
        changed
    }

    /// Lists the root: reads the pids not cached and those due a recheck, drops those gone; returns whether
    /// any came, went or changed.
    fn relist(&mut self, now: Instant) -> bool {
        let pids = self.pids();
        let before = self.cache.len();
        let mut known = 0;
        let mut changed = false;
        for &pid in &pids {
            if let Some(e) = self.cache.get(&pid) {
                known += 1;
                if !e.recheck(now, self.recheck_young) {
                    continue;
                }
            }
            changed |= self.look(pid, now);
        }
        // `pids` holds each pid once: fewer of them known than cached means some are gone.
        if known < before {
            self.forget_unlisted(&pids);
            changed = true;
        }
        changed
    }

    /// Drops the cached processes that are not in `listed`.
    fn forget_unlisted(&mut self, listed: &[u32]) {
        let listed: HashSet<u32> = listed.iter().copied().collect();
        self.cache.retain(|pid, _| listed.contains(pid));
    }

    /// The jobs of the cached processes; their CPU cgroups are left for the `cgroup` source.
    fn assemble(&self) -> Vec<Job> {
        // Of the processes claiming one (job, rank), the best so far; a process without a rank number is
        // keyed by its pid (never merged with another).
        let mut ranks: BTreeMap<(String, i64), Candidate> = BTreeMap::new();
        let mut cgroups: BTreeMap<String, BTreeSet<CpuCgroup>> = BTreeMap::new();
        for (&pid, entry) in &self.cache {
            let Some(seen) = &entry.seen else {
                continue;
            };
            let Some((id, c)) = candidate(pid, seen, self.gpus_of.get(&pid)) else {
                continue;
            };
            if let Some(cg) = &seen.cpu_cgroup {
                cgroups.entry(id.clone()).or_default().insert(cg.clone());
            }
            let key = (id, c.rank.rank.map(i64::from).unwrap_or(-i64::from(pid)));
            if ranks.get(&key).is_none_or(|prev| c.better_than(prev)) {
                ranks.insert(key, c);
            }
        }
        if let Some(shared) = &self.cgroups {
            *shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = cgroups;
        }
        let mut jobs: BTreeMap<String, Vec<Rank>> = BTreeMap::new();
        for ((id, _), c) in ranks {
            jobs.entry(id).or_default().push(c.rank);
        }
        jobs.into_iter()
            .map(|(id, ranks)| job(id, ranks, &self.node_links))
            .collect()
    }
}

/// A process that claims a rank of a job, with its start time (which of two claimants is kept).
struct Candidate {
    rank: Rank,
    start_ticks: u64,
}

impl Candidate {
    /// Of two processes claiming the same rank: the one on a GPU, else the older one.
    fn better_than(&self, other: &Candidate) -> bool {
        let (a, b) = (
            self.rank.found_by == FOUND_BY_NVML,
            other.rank.found_by == FOUND_BY_NVML,
        );
        match (a, b) {
            (true, false) => true,
            (false, true) => false,
            _ => (self.start_ticks, self.rank.pid) < (other.start_ticks, other.rank.pid),
        }
    }
}

/// Whether process `pid` claims a rank: marked as one by its environment, or on a GPU.
fn claims(pid: u32, seen: &Seen, gpus_of: &BTreeMap<u32, Vec<String>>) -> bool {
    gpus_of.contains_key(&pid)
        || seen
            .env
            .as_ref()
            .is_some_and(|env| RANK_MARKERS.iter().any(|k| env.contains_key(*k)))
}

/// The job id and rank of process `pid`, or `None` when it is neither marked as a rank nor on a GPU.
fn candidate(pid: u32, seen: &Seen, on_gpu: Option<&Vec<String>>) -> Option<(String, Candidate)> {
    let empty = BTreeMap::new();
    let env = seen.env.as_ref().unwrap_or(&empty);
    let marked = RANK_MARKERS.iter().any(|k| env.contains_key(*k));
    if !marked && on_gpu.is_none() {
        return None;
    }
    let id = job_id(env, seen.pod.as_deref(), seen.session, pid);
    let gpus = match on_gpu {
        Some(g) => g.clone(),
        None => env
            .get("CUDA_VISIBLE_DEVICES")
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default(),
    };
    let rank = Rank {
        pid,
        rank: rank_of(env),
        local_rank: first_u32(
            env,
            &["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"],
        ),
        world_size: first_u32(env, &["WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"]),
        gpus,
        pod_uid: seen.pod.clone(),
        container_id: seen.container.clone(),
        nccl: env
            .iter()
            .filter(|(k, _)| k.starts_with("NCCL_"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        found_by: if on_gpu.is_some() {
            FOUND_BY_NVML
        } else {
            FOUND_BY_ENVIRONMENT
        }
        .to_string(),
    };
    Some((
        id,
        Candidate {
            rank,
            start_ticks: seen.start,
        },
    ))
}

/// A job of `ranks` (sorted by rank, then pid) with the NCCL conflicts of all their settings on a node with
/// `links`, each conflict once.
fn job(id: String, mut ranks: Vec<Rank>, links: &[Link]) -> Job {
    ranks.sort_by_key(|r| (r.rank, r.pid));
    let mut conflicts: Vec<NcclConflict> = Vec::new();
    for r in &ranks {
        for c in crate::nccl::conflicts(&r.nccl, links) {
            if !conflicts.contains(&c) {
                conflicts.push(c);
            }
        }
    }
    Job {
        id,
        ranks,
        conflicts,
    }
}

/// The job id of a process with environment `env` (already filtered by [`parse_environ`]), Kubernetes pod
/// `pod`, session `session` and pid `pid`.
///
/// The rule, shared with the step-marker client: the first of [`JOB_ID_KEYS`] that is set, else
/// `MASTER_ADDR:MASTER_PORT` when both are set, else `pod-<uid>`, else `session-<sid>` when the process carries
/// a rank marker (`RANK`, `LOCAL_RANK`, `OMPI_COMM_WORLD_RANK`, `SLURM_PROCID`), else `pid-<pid>`. Control
/// characters are dropped from every value, a value left empty counts as unset, and the id is cut to
/// [`MAX_JOB_ID_BYTES`] at a character boundary.
pub fn job_id(env: &BTreeMap<String, String>, pod: Option<&str>, session: u32, pid: u32) -> String {
    let get = |key: &str| env.get(key).map(|v| clean(v)).filter(|v| !v.is_empty());
    let marked = RANK_MARKERS.iter().any(|k| env.contains_key(*k));
    let id = JOB_ID_KEYS
        .iter()
        .find_map(|k| get(k))
        .or_else(|| match (get("MASTER_ADDR"), get("MASTER_PORT")) {
            (Some(a), Some(p)) => Some(format!("{a}:{p}")),
            _ => None,
        })
        .or_else(|| {
            pod.map(clean)
                .filter(|p| !p.is_empty())
                .map(|p| format!("pod-{p}"))
        })
        .unwrap_or_else(|| {
            if marked {
                format!("session-{session}")
            } else {
                format!("pid-{pid}")
            }
        });
    cut_at_char(id, MAX_JOB_ID_BYTES)
}

/// The global rank of a process with environment `env`: the first of [`RANK_KEYS`] that parses as an
/// unsigned 32-bit integer (surrounding whitespace allowed).
pub fn rank_of(env: &BTreeMap<String, String>) -> Option<u32> {
    first_u32(env, RANK_KEYS)
}

/// `v` without control characters.
fn clean(v: &str) -> String {
    v.chars().filter(|c| !c.is_control()).collect()
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut_at_char(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Most of an `environ` read: the kernel caps a process's arguments and environment together at a quarter of
/// its stack limit, 2 MiB by default.
const MAX_ENVIRON_BYTES: usize = 8 << 20;

/// A process's environment as read: the allowlisted variables, and whether `environ` held no byte at all.
struct Environ {
    vars: BTreeMap<String, String>,
    raw_empty: bool,
}

/// Reads and filters `environ`; `None` when it cannot be read (vanished, denied, refused). The raw bytes are
/// dropped before this returns. An environment cut at [`MAX_ENVIRON_BYTES`] loses its last, partial entry.
fn read_environ(files: &mut PidFiles, pid: u32) -> Option<Environ> {
    let mut raw = Vec::new();
    files
        .read(pid, "environ", MAX_ENVIRON_BYTES, &mut raw)
        .ok()?;
    if raw.len() == MAX_ENVIRON_BYTES {
        let end = raw.iter().rposition(|b| *b == 0).unwrap_or(0);
        raw.truncate(end);
    }
    Some(Environ {
        raw_empty: raw.is_empty(),
        vars: parse_environ(&raw),
    })
}

/// Most of a `stat` or `cgroup` read (a `stat` line is a few hundred bytes).
const MAX_SMALL_PID_FILE: usize = 64 * 1024;

/// The text of a small file of process `pid` (`stat`, `cgroup`), read through `buf`; `None` when it cannot
/// be read. Bytes that are not UTF-8 (a command name may hold any) are replaced, not refused.
fn read_pid_text(files: &mut PidFiles, pid: u32, name: &str, buf: &mut Vec<u8>) -> Option<String> {
    match files.read(pid, name, MAX_SMALL_PID_FILE, buf) {
        Ok(()) => Some(String::from_utf8_lossy(buf).trim().to_string()),
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!(pid, file = name, error = %e, "process file not read");
            }
            None
        }
    }
}

impl Source for ProcessesSource {
    fn name(&self) -> &'static str {
        "processes"
    }

    fn node_links(&mut self, links: &[Link]) {
        self.node_links = links
            .iter()
            .filter(|l| l.key.class != LinkClass::Nvlink)
            .cloned()
            .collect();
    }

    fn discover(&mut self) -> Result<bool, SourceError> {
        // No mark to compare: only the first discovery and the bound scan in full.
        let jobs = if self.scans.full(Some(0)) {
            self.scan()
        } else {
            self.between_scans()
        };
        let changed = jobs != self.jobs;
        self.jobs = jobs;
        Ok(changed)
    }

    fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    fn sample(&mut self, _tier: Tier, _sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
        ReadReport::default()
    }

    fn jobs(&self) -> Option<&[Job]> {
        Some(&self.jobs)
    }

    fn refresh_jobs(&mut self) -> Result<bool, SourceError> {
        let Some(jobs) = self.refresh() else {
            return Ok(false);
        };
        let changed = jobs != self.jobs;
        self.jobs = jobs;
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_cut_inside_a_character_keeps_the_characters_before_it() {
        // 255 ASCII bytes, then a 2-byte character straddling the 256-byte cut.
        let mut raw = b"NCCL_SOCKET_IFNAME=".to_vec();
        raw.extend(std::iter::repeat_n(b'a', 255));
        raw.extend("é".as_bytes());
        raw.push(0);
        let env = parse_environ(&raw);
        assert_eq!(env["NCCL_SOCKET_IFNAME"], "a".repeat(255));
        // Invalid UTF-8 inside the kept part still drops the value.
        let env = parse_environ(b"NCCL_IB_HCA=\xff\xfe\0");
        assert!(!env.contains_key("NCCL_IB_HCA"));
    }

    #[test]
    fn environ_keeps_only_the_allowlist() {
        let raw = b"PATH=/usr/bin\0RANK=3\0AWS_SECRET_ACCESS_KEY=hunter2\0NCCL_SOCKET_IFNAME=eth0\0NCCL_COMM_ID=10.0.0.1:1234\0WORLD_SIZE=16\0garbage\0=x\0\xff\xfe=1\0";
        let env = parse_environ(raw);
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(keys, vec!["NCCL_SOCKET_IFNAME", "RANK", "WORLD_SIZE"]);
        assert_eq!(env["RANK"], "3");
        assert!(!format!("{env:?}").contains("hunter2"));
        assert!(!is_allowed("NCCL_secret") && !is_allowed("nccl_x") && is_allowed("NCCL_IB_HCA"));
    }

    #[test]
    fn nccl_settings_are_named_one_by_one_and_secret_looking_names_are_redacted() {
        let raw = b"NCCL_IB_HCA=mlx5_0\0NCCL_NET_PLUGIN=aws-ofi\0NCCL_DEBUG=INFO\n\0NCCL_PLUGIN_ACCESS_TOKEN=tok-123\0NCCL_COMM_ID=10.0.0.1:1234\0NCCL_RAS_ADDR=10.0.0.2\0NCCL_DEBUG_FILE=/home/alice/n.%h\0";
        let env = parse_environ(raw);
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(keys, ["NCCL_DEBUG", "NCCL_IB_HCA", "NCCL_NET_PLUGIN"]);
        // Control characters never travel.
        assert_eq!(env["NCCL_DEBUG"], "INFO");
        assert!(!format!("{env:?}").contains("tok-123"));
        // A secret-looking name is redacted even when an allowlist lets it through.
        let all = parse_environ_with(
            b"NCCL_PLUGIN_ACCESS_TOKEN=tok-123\0db_password=pw\0NCCL_IB_HCA=mlx5_0\0",
            |_| true,
        );
        assert_eq!(all["NCCL_PLUGIN_ACCESS_TOKEN"], REDACTED);
        assert_eq!(all["db_password"], REDACTED);
        assert_eq!(all["NCCL_IB_HCA"], "mlx5_0");
    }

    #[test]
    fn the_nccl_list_is_sorted_unique_and_holds_nothing_secret_looking() {
        assert!(NCCL_KEYS.windows(2).all(|w| w[0] < w[1]), "sorted, unique");
        for k in NCCL_KEYS.iter().chain(ALLOWED_KEYS) {
            assert!(!looks_secret(k), "{k}");
            assert!(is_allowed(k), "{k}");
        }
        for k in [
            "NCCL_SOCKET_IFNAME",
            "NCCL_IB_HCA",
            "NCCL_IB_DISABLE",
            "NCCL_NET",
        ] {
            assert!(NCCL_KEYS.contains(&k), "{k}: the project's checks read it");
        }
        assert!(!is_allowed("NCCL_COMM_ID") && !is_allowed("NCCL_"));
    }

    #[test]
    fn cgroup_patterns() {
        let v1 = "12:memory:/kubepods/burstable/pod0f5d6a43-1b2c-4d5e-8f90-123456789abc/3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100\n";
        assert_eq!(
            parse_cgroup(v1),
            (
                Some("0f5d6a43-1b2c-4d5e-8f90-123456789abc".into()),
                Some("3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100".into())
            )
        );
        let v2 = "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0f5d6a43_1b2c_4d5e_8f90_123456789abc.slice/cri-containerd-3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100.scope\n";
        assert_eq!(
            parse_cgroup(v2),
            (
                Some("0f5d6a43-1b2c-4d5e-8f90-123456789abc".into()),
                Some("3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100".into())
            )
        );
        assert_eq!(
            parse_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n"),
            (None, None)
        );
    }

    #[test]
    fn stat_fields() {
        // A real line (`sleep`), with a command name holding spaces and parentheses put in.
        let s = "2931 (sl (x) y) S 2930 2931 1200 34816 2931 4194560 96 0 0 0 0 0 0 0 20 0 1 0 987654 \
                 8470528 384 18446744073709551615 94558460162048 94558460178409 140727564617008 0 0 0 0 0 0 0 0 \
                 0 17 3 0 0 0 0 0 94558460190256 94558460191912 94558470684672 140727564621395 \
                 140727564621404 140727564621404 140727564623853 0";
        assert_eq!(
            parse_stat(s),
            Some(ProcStat {
                session: 1200,
                start: 987654,
                image: [94558460162048, 94558460178409, 140727564617008],
                kernel_thread: false,
                thread: false,
            })
        );
        // A kernel thread (kthreadd's flags); a line that stops before the image fields.
        let k = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0 18446744073709551615 0 0 0";
        assert!(parse_stat(k).unwrap().kernel_thread);
        let short = "1 (init) S 0 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 5";
        assert_eq!(parse_stat(short).unwrap().image, [0, 0, 0]);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn the_last_pid_of_loadavg() {
        assert_eq!(parse_last_pid("0.44 1.27 2.14 2/345 12345\n"), Some(12345));
        assert_eq!(parse_last_pid("0.44 1.27 2.14 2/345"), None);
        assert_eq!(parse_last_pid("0.44 1.27 2.14 2/345 -1"), None);
        assert_eq!(parse_last_pid(""), None);
    }

    #[test]
    fn job_ids_in_order() {
        let env = |p: &[(&str, &str)]| -> BTreeMap<String, String> {
            p.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let rank = [("RANK", "0")];
        assert_eq!(
            job_id(
                &env(&[("SLURM_JOB_ID", "42"), ("TORCHELASTIC_RUN_ID", "x")]),
                None,
                1,
                2,
            ),
            "42"
        );
        assert_eq!(
            job_id(
                &env(&[("COMMWATCH_JOB", "llama"), ("SLURM_JOB_ID", "42")]),
                None,
                1,
                2,
            ),
            "llama"
        );
        assert_eq!(
            job_id(
                &env(&[("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500")]),
                None,
                1,
                2,
            ),
            "10.0.0.1:29500"
        );
        assert_eq!(job_id(&env(&rank), Some("u"), 7, 2), "pod-u");
        assert_eq!(job_id(&env(&rank), None, 7, 2), "session-7");
        assert_eq!(job_id(&env(&[]), None, 7, 2), "pid-2");
        // An empty (or all-control) value counts as unset.
        assert_eq!(
            job_id(
                &env(&[("COMMWATCH_JOB", "\u{7}"), ("SLURM_JOB_ID", "42")]),
                None,
                1,
                2
            ),
            "42"
        );
    }
}
