//! NCCL Inspector followed live, end to end on the agent's side: a real child process (`sleep`) whose
//! environment enables Inspector and names a dump directory is found under the real `/proc` by the `processes`
//! source, and the records appended to its dump file come out of the follower, attributed to its job and rank,
//! through rotation and a partial last line. Of its environment only the allowlist leaves: the four Inspector
//! settings, not Inspector's other settings nor anything else.
//!
//! And the hostile job (issue #34): a real process whose dump directory is a link, and one running as another
//! user whose directory holds a file it does not own (as `/var/log` would), are refused and counted; nothing
//! of either file leaves.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;

use commwatch_agent::inspector::{Follower, FollowerSettings};
use commwatch_agent::source::processes::{is_allowed, ProcessesSource};
use commwatch_agent::source::Source;
use commwatch_agent::telemetry::AgentMetrics;

const SECRET: &str = "inspector-hunter2";

struct Sleeper(Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `sleep 30` with the Inspector settings naming `dump`, as `uid` when given, found by the processes source.
fn sleeper_job(job: &str, dump: &Path, uid: Option<u32>) -> (Sleeper, Vec<commwatch_model::Job>) {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("sleep");
    cmd.arg("30")
        .env("COMMWATCH_JOB", job)
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .env("NCCL_INSPECTOR_ENABLE", "1")
        .env("NCCL_INSPECTOR_DUMP_DIR", dump);
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let child = Sleeper(cmd.spawn().expect("spawn sleep"));
    let mut src = ProcessesSource::new("/proc".into(), None).only_pids(vec![child.0.id()]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        src.discover().unwrap();
        let jobs = src.jobs().unwrap().to_vec();
        if !jobs.is_empty() || std::time::Instant::now() > deadline {
            return (child, jobs);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn line(sn: u64, pid: u32) -> String {
    format!(
        r#"{{"header":{{"id":"0x77","rank":1,"n_ranks":2,"nnodes":2}},"metadata":{{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1764614400000000,"hostname":"h","pid":{pid}}},"coll_perf":{{"coll":"AllReduce","coll_sn":{sn},"coll_msg_size_bytes":220000000,"coll_exec_time_us":33673,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":6.533333,"coll_busbw_gbs":9.8}}}}"#
    )
}

fn append(path: &Path, s: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(s.as_bytes()).unwrap();
}

#[test]
fn a_real_process_dump_directory_is_followed() {
    let dump = tempfile::tempdir().unwrap();
    let child = Sleeper(
        Command::new("sleep")
            .arg("30")
            .env("COMMWATCH_JOB", "inspector-job")
            .env("RANK", "1")
            .env("WORLD_SIZE", "2")
            .env(
                "NCCL_PROFILER_PLUGIN",
                "/opt/nccl/libnccl-profiler-inspector.so",
            )
            .env("NCCL_INSPECTOR_ENABLE", "1")
            .env("NCCL_INSPECTOR_DUMP_DIR", dump.path())
            .env("NCCL_INSPECTOR_PROM_DUMP", "0")
            .env("NCCL_INSPECTOR_DUMP_VERBOSE", "1")
            .env("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "500")
            .env("NCCL_INSPECTOR_TOKEN", SECRET)
            .env("MY_API_KEY", SECRET)
            .spawn()
            .expect("spawn sleep"),
    );
    let pid = child.0.id();
    let mut src = ProcessesSource::new("/proc".into(), None).only_pids(vec![pid]);
    // A process just spawned can be missed by one scan (as the agent's next discovery would find it): scan
    // again for up to 5 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let jobs = loop {
        src.discover().unwrap();
        let jobs = src.jobs().unwrap().to_vec();
        if !jobs.is_empty() || std::time::Instant::now() > deadline {
            break jobs;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].id, "inspector-job");
    let settings: Vec<&str> = jobs[0].ranks[0].nccl.keys().map(String::as_str).collect();
    assert_eq!(
        settings,
        [
            "NCCL_INSPECTOR_DUMP_DIR",
            "NCCL_INSPECTOR_ENABLE",
            "NCCL_INSPECTOR_PROM_DUMP",
            "NCCL_PROFILER_PLUGIN"
        ]
    );
    assert!(!format!("{jobs:?}").contains(SECRET));
    assert!(!is_allowed("NCCL_INSPECTOR_DUMP_VERBOSE"));

    let metrics = Arc::new(AgentMetrics::new());
    let mut follower = Follower::new(FollowerSettings::new(Path::new("/proc")), metrics.clone());
    let file = dump.path().join(format!("h-pid{pid}.log"));
    append(&file, &format!("{}\n{}", line(1, pid), &line(2, pid)[..50]));
    let first = follower.poll(&jobs);
    assert_eq!(first.len(), 1);
    assert_eq!(
        (first[0].job.as_str(), first[0].job_rank, first[0].sequence),
        ("inspector-job", Some(1), 1)
    );
    append(&file, &format!("{}\n", &line(2, pid)[50..]));
    std::fs::rename(&file, dump.path().join(format!("h-pid{pid}.log.1"))).unwrap();
    append(&file, &format!("{}\n", line(3, pid)));
    let next: Vec<u64> = follower.poll(&jobs).iter().map(|r| r.sequence).collect();
    assert_eq!(next, [2, 3]);
    let rendered = metrics.render();
    assert!(
        rendered.contains("commwatch_agent_inspector_records_total 3"),
        "{rendered}"
    );
    assert!(rendered.contains("commwatch_agent_inspector_file_resets_total{kind=\"rotated\"} 1"));
    assert!(!rendered.contains(SECRET));
}

#[test]
fn a_real_job_cannot_make_the_agent_follow_a_link_or_read_anothers_file() {
    let base = tempfile::tempdir().unwrap();
    let real = base.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let linked = base.path().join("linked");
    std::os::unix::fs::symlink(&real, &linked).unwrap();
    let (_a, mut jobs) = sleeper_job("linked-job", &linked, None);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    append(&real.join("h-pid1.log"), &format!("{}\n", line(1, 1)));

    // As root, a job running as another user (nobody) naming a directory with a root-owned file in it.
    let root = euid() == 0;
    let mut _b = None;
    let shared = base.path().join("shared");
    if root {
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::set_permissions(
            base.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        append(&shared.join("syslog.log"), &format!("{}\n", line(2, 2)));
        let (b, more) = sleeper_job("nobody-job", &shared, Some(65534));
        assert_eq!(more.len(), 1, "{more:?}");
        jobs.extend(more);
        _b = Some(b);
    } else {
        commwatch_testdata::skip::skip(
            "starting a process as another user needs root: the foreign-owner half is not run",
        );
    }
    let metrics = Arc::new(AgentMetrics::new());
    let mut follower = Follower::new(FollowerSettings::new(Path::new("/proc")), metrics.clone());
    assert!(follower.poll(&jobs).is_empty());
    let rendered = metrics.render();
    assert!(
        rendered.contains("commwatch_agent_inspector_dropped_total{reason=\"symlink\"} 1"),
        "{rendered}"
    );
    if root {
        assert!(
            rendered
                .contains("commwatch_agent_inspector_dropped_total{reason=\"foreign_owner\"} 1"),
            "{rendered}"
        );
    }
    assert!(
        rendered.contains("commwatch_agent_inspector_records_total 0"),
        "{rendered}"
    );
    assert!(
        rendered.contains("commwatch_agent_inspector_files 0"),
        "{rendered}"
    );
}

/// The effective user of this test process (from `/proc/self`, whose owner it is).
fn euid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}
