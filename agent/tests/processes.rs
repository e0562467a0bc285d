//! The `processes` source on real processes (children of this test, under the real `/proc`) and on a procfs
//! tree built here: jobs and ranks found, NCCL settings reported and checked against the node's links, only
//! allowlisted environment kept, Kubernetes pods from cgroups, vanished and unreadable processes skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use commwatch_agent::source::dir_mark::FULL_WALK_EVERY;
use commwatch_agent::source::infiniband::InfinibandSource;
use commwatch_agent::source::netdev::{NetdevOptions, NetdevSource};
use commwatch_agent::source::processes::ProcessesSource;
use commwatch_agent::source::{Link, Source};
use commwatch_model::ConflictKind;
use commwatch_testdata::gpud_h100_sysfs;

const SECRET: &str = "hunter2-secret-value";

/// A child killed on drop.
struct Sleeper(Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sleeper(env: &[(&str, &str)]) -> Sleeper {
    let mut c = Command::new("sleep");
    c.arg("30");
    for (k, v) in env {
        c.env(k, v);
    }
    Sleeper(c.spawn().expect("spawn sleep"))
}

/// The links of the H100 tree (the shared gpud capture with the project's additions): eth0 management, ib0/ib1
/// IPoIB (fabric), active ConnectX-7 ports. `None` after a loud skip when the shared capture is absent.
#[track_caller]
fn h100_links() -> Option<Vec<Link>> {
    let h100 = gpud_h100_sysfs!()?;
    let root = h100.path().to_path_buf();
    let mut ib = InfinibandSource::new(root.clone());
    ib.discover().unwrap();
    let mut nd = NetdevSource::new(root, NetdevOptions::default());
    nd.discover().unwrap();
    let mut links = ib.inventory().links.clone();
    links.extend(nd.inventory().links.iter().cloned());
    Some(links)
}

/// `None` when the H100 links are (see [`h100_links`]). A child just spawned can be caught half-way through
/// its `exec` (no environment yet), as the agent's next discovery would read it again: with `until_found`,
/// scans again for up to 5 s until a job appears.
#[track_caller]
fn scan(pids: Vec<u32>, root: PathBuf, until_found: bool) -> Option<ProcessesSource> {
    let links = h100_links()?;
    let mut src = ProcessesSource::new(root, None).only_pids(pids);
    src.node_links(&links);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    src.discover().unwrap();
    while until_found && src.jobs().unwrap().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        src.discover().unwrap();
    }
    Some(src)
}

#[test]
fn a_real_rank_is_found_with_its_nccl_setting_and_the_secret_is_dropped() {
    let child = sleeper(&[
        ("RANK", "3"),
        ("WORLD_SIZE", "16"),
        ("LOCAL_RANK", "3"),
        ("NCCL_SOCKET_IFNAME", "eth0"),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
    ]);
    let pid = child.0.id();
    let Some(src) = scan(vec![pid], PathBuf::from("/proc"), true) else {
        return;
    };
    let jobs = src.jobs().unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job = &jobs[0];
    // No SLURM/torchelastic/master id: the launcher's session.
    assert!(job.id.starts_with("session-"), "{}", job.id);
    assert_eq!(job.ranks.len(), 1);
    let r = &job.ranks[0];
    assert_eq!(r.pid, pid);
    assert_eq!(
        (r.rank, r.local_rank, r.world_size),
        (Some(3), Some(3), Some(16))
    );
    assert_eq!(r.found_by, "environment");
    assert_eq!(
        r.nccl,
        BTreeMap::from([("NCCL_SOCKET_IFNAME".to_string(), "eth0".to_string())])
    );
    // eth0 is the management NIC of this node and its InfiniBand is active.
    assert_eq!(job.conflicts.len(), 1, "{:?}", job.conflicts);
    assert_eq!(job.conflicts[0].kind, ConflictKind::ManagementInterface);
    assert!(
        job.conflicts[0].reason.contains("ib0"),
        "{}",
        job.conflicts[0].reason
    );
    // Nothing else of the environment survives, in any form.
    let dump = format!("{jobs:?}{}", serde_json::to_string(jobs).unwrap());
    assert!(
        !dump.contains(SECRET) && !dump.contains("AWS_SECRET"),
        "{dump}"
    );
}

#[test]
fn naming_the_ipoib_interface_is_no_conflict() {
    let child = sleeper(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("NCCL_SOCKET_IFNAME", "ib0"),
    ]);
    let Some(src) = scan(vec![child.0.id()], PathBuf::from("/proc"), true) else {
        return;
    };
    let jobs = src.jobs().unwrap();
    assert_eq!(jobs.len(), 1);
    assert!(jobs[0].conflicts.is_empty(), "{:?}", jobs[0].conflicts);
}

#[test]
fn processes_without_markers_are_not_jobs_and_vanished_ones_are_skipped() {
    let plain = sleeper(&[("AWS_SECRET_ACCESS_KEY", SECRET)]);
    let mut gone = sleeper(&[("RANK", "1")]);
    let gone_pid = gone.0.id();
    let _ = gone.0.kill();
    let _ = gone.0.wait();
    let Some(src) = scan(
        vec![plain.0.id(), gone_pid, u32::MAX - 1],
        PathBuf::from("/proc"),
        false,
    ) else {
        return;
    };
    assert_eq!(src.jobs().unwrap().len(), 0);
}

fn write(dir: &Path, name: &str, content: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), content).unwrap();
}

/// A `stat` line of a settled process (any image) in session `session`.
fn stat(pid: u32, session: u32, start: u64) -> Vec<u8> {
    stat_with_image(pid, session, start, [0x5500_0000, 0x5500_4000, 0x7ffc_0000])
}

/// A `stat` line as the kernel writes it, with the image's code and stack addresses (fields 26–28).
fn stat_with_image(pid: u32, session: u32, start: u64, image: [u64; 3]) -> Vec<u8> {
    let [code, end, stack] = image;
    format!(
        "{pid} (python3) S 1 {pid} {session} 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 8 0 {start} 1000 100 \
         18446744073709551615 {code} {end} {stack} 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n"
    )
    .into_bytes()
}

#[test]
fn procfs_tree_pods_slurm_jobs_dataloader_workers_and_unreadable_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let pod = "0f5d6a43-1b2c-4d5e-8f90-123456789abc";
    let cid = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100";
    let cgroup = format!(
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{cid}.scope\n",
        pod.replace('-', "_")
    );
    // Rank 0 and 1 of a Slurm job in a pod; pid 101 is rank 0's data-loader worker (same env, started later).
    for (pid, rank, start) in [(100u32, 0u32, 5000u64), (101, 0, 6000), (102, 1, 5001)] {
        let d = root.join(pid.to_string());
        write(&d, "stat", &stat(pid, 90, start));
        write(
            &d,
            "environ",
            format!(
                "SLURM_JOB_ID=4711\0SLURM_PROCID={rank}\0SLURM_LOCALID={rank}\0SLURM_NTASKS=64\0CUDA_VISIBLE_DEVICES={rank}\0NCCL_IB_HCA=mlx5_0\0NCCL_DEBUG=INFO\0HF_TOKEN={SECRET}\0"
            )
            .as_bytes(),
        );
        write(&d, "cgroup", cgroup.as_bytes());
    }
    // A process whose environ cannot be read (a directory stands in for EACCES) and one with garbage stat.
    let d = root.join("200");
    write(&d, "stat", &stat(200, 1, 1));
    std::fs::create_dir_all(d.join("environ")).unwrap();
    write(&root.join("201"), "stat", b"garbage");
    write(&root.join("self"), "stat", b"not a pid dir");

    let mut src = ProcessesSource::new(root.to_path_buf(), None);
    let Some(links) = h100_links() else {
        return;
    };
    src.node_links(&links);
    assert!(src.discover().unwrap());
    let jobs = src.jobs().unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let j = &jobs[0];
    assert_eq!(j.id, "4711");
    let pids: Vec<u32> = j.ranks.iter().map(|r| r.pid).collect();
    assert_eq!(
        pids,
        vec![100, 102],
        "the worker (101) is folded into its rank"
    );
    let r0 = &j.ranks[0];
    assert_eq!(
        (r0.rank, r0.local_rank, r0.world_size),
        (Some(0), Some(0), Some(64))
    );
    assert_eq!(r0.gpus, vec!["0".to_string()]);
    assert_eq!(r0.pod_uid.as_deref(), Some(pod));
    assert_eq!(r0.container_id.as_deref(), Some(cid));
    assert_eq!(r0.nccl.len(), 2);
    // NCCL_IB_HCA=mlx5_0 leaves the other seven active ConnectX-7 ports unused.
    assert_eq!(j.conflicts.len(), 1);
    assert_eq!(j.conflicts[0].kind, ConflictKind::HcaExcluded);
    assert!(!format!("{jobs:?}").contains(SECRET));
    // Nothing changed: no change reported.
    assert!(!src.discover().unwrap());
    // A rank ends: the job list changes.
    std::fs::remove_dir_all(root.join("102")).unwrap();
    assert!(src.discover().unwrap());
    assert_eq!(src.jobs().unwrap()[0].ranks.len(), 1);
}

#[test]
fn a_process_read_half_way_through_exec_or_exec_ing_anew_is_read_again() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("300");
    // Caught between the two halves of an exec: the new image's environment is not placed yet.
    write(&d, "stat", &stat_with_image(300, 90, 7000, [0, 0, 0]));
    write(&d, "environ", b"");
    let mut src = ProcessesSource::new(tmp.path().to_path_buf(), None);
    src.discover().unwrap();
    assert!(src.jobs().unwrap().is_empty());
    // The exec completes: same pid and start time, the environment now there.
    write(
        &d,
        "stat",
        &stat_with_image(300, 90, 7000, [0x5600_0000, 0x5600_4000, 0x7ffd_1000]),
    );
    write(&d, "environ", b"COMMWATCH_JOB=a\0RANK=2\0");
    assert!(src.discover().unwrap(), "the rank appears at the next scan");
    assert_eq!(src.jobs().unwrap()[0].ranks[0].rank, Some(2));
    // A launcher script that sets its rank and execs its trainer (`exec python ...`) under the same pid:
    // the new image's environment is read anew.
    write(
        &d,
        "stat",
        &stat_with_image(300, 90, 7000, [0x5700_0000, 0x5700_8000, 0x7ffe_2000]),
    );
    write(&d, "environ", b"COMMWATCH_JOB=b\0RANK=5\0");
    assert!(src.discover().unwrap());
    let jobs = src.jobs().unwrap();
    assert_eq!((jobs[0].id.as_str(), jobs[0].ranks[0].rank), ("b", Some(5)));
    // An unchanged image is recalled, not read again: what a process later writes over its environment's
    // memory (as `setproctitle` does) is not taken for its environment.
    write(&d, "environ", b"COMMWATCH_JOB=c\0RANK=6\0");
    assert!(!src.discover().unwrap());
}

/// A rank's process files under `root`: `stat` (start time `start`) and `environ` holding `env` (NUL-separated
/// `KEY=value` entries).
fn rank_dir(root: &Path, pid: u32, start: u64, env: &str) {
    let d = root.join(pid.to_string());
    write(&d, "stat", &stat(pid, 90, start));
    write(&d, "environ", env.replace(' ', "\0").as_bytes());
}

fn ranks(src: &ProcessesSource) -> Vec<(String, Option<u32>, u32)> {
    src.jobs()
        .unwrap()
        .iter()
        .flat_map(|j| j.ranks.iter().map(|r| (j.id.clone(), r.rank, r.pid)))
        .collect()
}

#[test]
fn a_refresh_picks_up_new_and_ended_ranks_without_a_scan() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    rank_dir(root, 100, 5000, "COMMWATCH_JOB=a RANK=0 ");
    write(&root.join("1"), "stat", &stat(1, 1, 1));
    let mut src = ProcessesSource::new(root.to_path_buf(), None).recheck_young(Duration::ZERO);
    assert!(src.discover().unwrap());
    assert_eq!(ranks(&src), [("a".into(), Some(0), 100)]);
    // Nothing started or ended: nothing to report.
    assert!(!src.refresh_jobs().unwrap());
    // A second rank starts: known at the next refresh.
    rank_dir(root, 101, 5100, "COMMWATCH_JOB=a RANK=1 ");
    assert!(src.refresh_jobs().unwrap());
    assert_eq!(
        ranks(&src),
        [("a".into(), Some(0), 100), ("a".into(), Some(1), 101)]
    );
    // A known pid is not read again by a refresh (past its young span): a new image under pid 100 waits for
    // the next scan, which finds it.
    write(
        &root.join("100"),
        "stat",
        &stat_with_image(100, 90, 5000, [0x5800_0000, 0x5800_4000, 0x7ffe_0000]),
    );
    write(&root.join("100"), "environ", b"COMMWATCH_JOB=b\0RANK=0\0");
    assert!(!src.refresh_jobs().unwrap());
    // The next full scan: within `FULL_WALK_EVERY` discoveries (the first one scanned).
    let found = (1..=FULL_WALK_EVERY).find(|_| src.discover().unwrap());
    assert_eq!(
        found,
        Some(FULL_WALK_EVERY),
        "found by the scan, not before"
    );
    assert_eq!(
        ranks(&src),
        [("a".into(), Some(1), 101), ("b".into(), Some(0), 100)]
    );
    // A rank ends: gone at the next refresh.
    std::fs::remove_dir_all(root.join("101")).unwrap();
    assert!(src.refresh_jobs().unwrap());
    assert_eq!(ranks(&src), [("b".into(), Some(0), 100)]);
    assert!(!src.discover().unwrap(), "the refresh left nothing to find");
}

/// On the agent's own procfs (its `self` names this process) a refresh that finds a few pids handed out
/// reads those pids instead of listing the root: a new rank is found, a thread with a rank's environment is
/// not taken for a process, a pid below the range is left to the next listing, and a rank that ended is
/// dropped by its own directory; more pids than `PROBE_MAX` and the root is listed.
#[test]
fn a_refresh_reads_the_pids_handed_out_instead_of_listing_the_root() {
    use commwatch_agent::source::processes::PROBE_MAX;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::os::unix::fs::symlink(std::process::id().to_string(), root.join("self")).unwrap();
    let loadavg = |last: u32| {
        write(
            root,
            "loadavg",
            format!("0.1 0.2 0.3 1/99 {last}\n").as_bytes(),
        )
    };
    loadavg(200);
    rank_dir(root, 150, 5000, "COMMWATCH_JOB=a RANK=0 ");
    let mut src = ProcessesSource::new(root.to_path_buf(), None).recheck_young(Duration::ZERO);
    assert!(src.discover().unwrap());
    assert_eq!(ranks(&src), [("a".into(), Some(0), 150)]);

    rank_dir(root, 50, 4000, "COMMWATCH_JOB=a RANK=9 ");
    rank_dir(root, 201, 5100, "COMMWATCH_JOB=a RANK=1 ");
    rank_dir(root, 202, 5101, "COMMWATCH_JOB=a RANK=2 ");
    let thread = String::from_utf8(stat(202, 90, 5101))
        .unwrap()
        .replace(" 17 3 ", " -1 3 ");
    write(&root.join("202"), "stat", thread.as_bytes());
    loadavg(203);
    assert!(src.refresh_jobs().unwrap());
    assert_eq!(
        ranks(&src),
        [("a".into(), Some(0), 150), ("a".into(), Some(1), 201)],
        "201 read; 202 a thread; 50 not handed out since"
    );

    std::fs::remove_dir_all(root.join("150")).unwrap();
    assert!(
        src.refresh_jobs().unwrap(),
        "no pid handed out, a rank ended"
    );
    assert_eq!(ranks(&src), [("a".into(), Some(1), 201)]);

    // A real listing shows no thread.
    std::fs::remove_dir_all(root.join("202")).unwrap();
    loadavg(203 + PROBE_MAX + 1);
    assert!(
        src.refresh_jobs().unwrap(),
        "too many pids: the root is listed"
    );
    assert_eq!(
        ranks(&src),
        [("a".into(), Some(1), 201), ("a".into(), Some(9), 50)]
    );
}

#[test]
fn a_refresh_reads_a_young_pid_again_for_the_exec_after_its_fork() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut src =
        ProcessesSource::new(root.to_path_buf(), None).recheck_young(Duration::from_secs(3600));
    assert!(!src.discover().unwrap());
    // Caught between the launcher's fork and the worker's exec: the launcher's image and environment.
    rank_dir(root, 200, 9000, "COMMWATCH_JOB=a ");
    assert!(!src.refresh_jobs().unwrap(), "no rank marker: no job");
    // The exec under the same pid brings the rank: the young pid's `stat` is read again.
    write(
        &root.join("200"),
        "stat",
        &stat_with_image(200, 90, 9000, [0x5900_0000, 0x5900_4000, 0x7ffd_0000]),
    );
    write(&root.join("200"), "environ", b"COMMWATCH_JOB=a\0RANK=4\0");
    assert!(src.refresh_jobs().unwrap());
    assert_eq!(ranks(&src), [("a".into(), Some(4), 200)]);
    // Half-way through an exec (empty environment): read again at each refresh until it settles.
    rank_dir(root, 201, 9100, "");
    assert!(!src.refresh_jobs().unwrap());
    write(&root.join("201"), "environ", b"COMMWATCH_JOB=a\0RANK=5\0");
    assert!(src.refresh_jobs().unwrap());
    assert_eq!(ranks(&src).len(), 2);
}

#[test]
fn the_sampler_hands_over_a_job_found_by_a_refresh_through_the_watchdog() {
    use commwatch_agent::sampler::Sampler;
    use commwatch_agent::source::watchdog::watch;
    use commwatch_agent::telemetry::AgentMetrics;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let src = ProcessesSource::new(root.to_path_buf(), None);
    let mut sampler = Sampler::new(vec![watch(Box::new(src))], AgentMetrics::new().into());
    sampler.discover();
    assert!(sampler.jobs().is_empty());
    assert!(!sampler.refresh_jobs());
    rank_dir(root, 300, 7000, "SLURM_JOB_ID=77 SLURM_PROCID=2 ");
    assert!(sampler.refresh_jobs());
    let update = sampler
        .take_jobs_update()
        .expect("the new job list is queued");
    assert_eq!(update.jobs.len(), 1);
    assert_eq!(sampler.jobs()[0].id, "77");
    assert_eq!(sampler.jobs()[0].ranks[0].pid, 300);
    // It ends: the list goes empty at the next refresh.
    std::fs::remove_dir_all(root.join("300")).unwrap();
    assert!(sampler.refresh_jobs());
    assert!(sampler.jobs().is_empty());
}

#[test]
fn a_refresh_finds_a_rank_started_under_the_real_proc() {
    let mut src = ProcessesSource::new(PathBuf::from("/proc"), None);
    src.discover().unwrap();
    let job = format!("refresh-{}", std::process::id());
    let child = sleeper(&[("COMMWATCH_JOB", job.as_str()), ("RANK", "0")]);
    // The child may be read half-way through its exec, then again at the next refresh.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut found = false;
    while !found && std::time::Instant::now() < deadline {
        src.refresh_jobs().unwrap();
        found = src
            .jobs()
            .unwrap()
            .iter()
            .any(|j| j.id == job && j.ranks.iter().any(|r| r.pid == child.0.id()));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(found, "{:?}", src.jobs());
    drop(child);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while src.jobs().unwrap().iter().any(|j| j.id == job) && std::time::Instant::now() < deadline {
        src.refresh_jobs().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !src.jobs().unwrap().iter().any(|j| j.id == job),
        "the ended rank is dropped"
    );
}

#[test]
fn process_files_out_of_the_root_or_not_regular_are_never_read() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // 400: a FIFO as `stat` (an open would block without O_NONBLOCK; it is never opened).
    std::fs::create_dir_all(root.join("400")).unwrap();
    let fifo = std::ffi::CString::new(root.join("400/stat").to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    // 401: `environ` links out of the root, to a rank's environment.
    write(outside.path(), "environ", b"COMMWATCH_JOB=x\0RANK=1\0");
    write(&root.join("401"), "stat", &stat(401, 90, 10));
    std::os::unix::fs::symlink(outside.path().join("environ"), root.join("401/environ")).unwrap();
    // 402: the pid directory itself links out of the root.
    write(outside.path(), "stat", &stat(402, 90, 11));
    std::os::unix::fs::symlink(outside.path(), root.join("402")).unwrap();
    // 403: a rank whose command name is not UTF-8.
    let mut odd =
        b"403 (py\xff\xfe) S 1 403 90 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 8 0 12 1000 100 ".to_vec();
    odd.extend_from_slice(b"18446744073709551615 1 2 3 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n");
    write(&root.join("403"), "stat", &odd);
    write(&root.join("403"), "environ", b"COMMWATCH_JOB=y\0RANK=3\0");
    let mut src = ProcessesSource::new(root.to_path_buf(), None);
    assert!(src.discover().unwrap());
    assert_eq!(ranks(&src), [("y".into(), Some(3), 403)]);
    assert!(!src.refresh_jobs().unwrap());
}
