//! The follower on dump directories written here, for jobs given here, under a fake procfs whose processes
//! have a root of their own: records attributed to the directory's job (by pid within it), drops counted by
//! reason, the per-poll bound, each job's share of the files, links refused.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use commwatch_model::{Job, Rank};

use super::*;

fn line(pid: u32, sn: u64, version: &str) -> String {
    format!(
        r#"{{"header":{{"id":"0xabc","rank":0,"n_ranks":2,"nnodes":2}},"metadata":{{"inspector_output_format_version":"{version}","dump_timestamp_us":1764614400000000,"hostname":"n","pid":{pid}}},"coll_perf":{{"coll":"AllReduce","coll_sn":{sn},"coll_msg_size_bytes":220000000,"coll_exec_time_us":33673,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":6.533333,"coll_busbw_gbs":9.8}}}}"#
    )
}

fn job(id: &str, pid: u32, rank: u32, dump_dir: Option<&Path>) -> Job {
    let mut nccl = BTreeMap::new();
    if let Some(d) = dump_dir {
        nccl.insert(
            "NCCL_INSPECTOR_DUMP_DIR".to_string(),
            d.display().to_string(),
        );
    }
    Job {
        id: id.to_string(),
        ranks: vec![Rank {
            pid,
            rank: Some(rank),
            local_rank: None,
            world_size: Some(2),
            gpus: vec![],
            pod_uid: None,
            container_id: None,
            nccl,
            found_by: "environment".to_string(),
        }],
        conflicts: vec![],
    }
}

fn append(path: &Path, s: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(s.as_bytes()).unwrap();
}

/// A fake node: a procfs whose processes all have `root` as their root directory.
struct Node {
    proc: tempfile::TempDir,
    root: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        Node {
            proc: tempfile::tempdir().unwrap(),
            root: tempfile::tempdir().unwrap(),
        }
    }

    /// Makes process `pid` exist, rooted at the node's root.
    fn process(&self, pid: u32) {
        let p = self.proc.path().join(pid.to_string());
        if !p.exists() {
            std::fs::create_dir(&p).unwrap();
            std::os::unix::fs::symlink(self.root.path(), p.join("root")).unwrap();
        }
    }

    /// `name` under the root (created), as the agent sees it, and as the processes name it.
    fn dump_dir(&self, name: &str) -> (PathBuf, PathBuf) {
        let seen = self.root.path().join(name);
        std::fs::create_dir_all(&seen).unwrap();
        (seen, Path::new("/").join(name))
    }

    /// A job of one process `pid` (made to exist) naming `dir` as its dump directory.
    fn job(&self, id: &str, pid: u32, rank: u32, dir: Option<&Path>) -> Job {
        self.process(pid);
        job(id, pid, rank, dir)
    }

    fn follower(&self, max_records: usize) -> (Follower, Arc<AgentMetrics>) {
        let metrics = Arc::new(AgentMetrics::new());
        let mut settings = FollowerSettings::new(self.proc.path());
        settings.max_records_per_poll = max_records;
        (Follower::new(settings, metrics.clone()), metrics)
    }
}

fn dropped(m: &AgentMetrics, reason: &str) -> u64 {
    m.inspector.dropped.with_label_values(&[reason]).get()
}

#[test]
fn records_are_attributed_and_drops_counted() {
    let node = Node::new();
    let (dump, named) = node.dump_dir("dump");
    let (mut f, m) = node.follower(100);
    // pids 10 and 12 are job-a's, pid 10 named the directory; pid 11 (job-b) writes there too; pid 99 is
    // unknown.
    let mut a = node.job("job-a", 10, 0, Some(&named));
    a.ranks.extend(node.job("job-a", 12, 2, None).ranks);
    let jobs = vec![a, node.job("job-b", 11, 1, None)];
    let file = dump.join("n-pid10.log");
    append(
        &file,
        &format!(
            "{}\n{}\n{}\n{}",
            line(10, 1, "v4.0"),
            line(11, 1, "v4.0"),
            line(12, 1, "v4.0"),
            &line(99, 1, "v4.0")[..40]
        ),
    );
    append(&dump.join("n-pid10.prom"), "nccl_bus_bandwidth_gbs 1\n");
    let recs = f.poll(&jobs);
    assert_eq!(recs.len(), 2);
    assert_eq!((recs[0].job.as_str(), recs[0].job_rank), ("job-a", Some(0)));
    assert_eq!(
        (recs[1].job.as_str(), recs[1].job_rank),
        ("job-a", Some(2)),
        "a pid of the directory's job is credited to its rank"
    );
    assert_eq!(
        dropped(&m, "unattributed"),
        1,
        "job-b's pid in job-a's directory is not credited to job-b"
    );
    assert!((recs[0].bus_bandwidth_bytes_per_second - 9.8e9).abs() < 1.0);
    // The rest of the partial line arrives, then a line of an unknown version.
    append(
        &file,
        &format!("{}\n{}\n", &line(99, 1, "v4.0")[40..], line(10, 2, "v5.0")),
    );
    let recs = f.poll(&jobs);
    assert_eq!(
        recs.len(),
        1,
        "the unknown pid's record goes to the directory's job"
    );
    assert_eq!(recs[0].job, "job-a");
    assert_eq!(m.inspector.records.get(), 3);
    assert_eq!(dropped(&m, "unknown_version"), 1);
    assert_eq!(m.inspector.files.get(), 1, "the .prom file is not followed");
}

#[test]
fn a_poll_hands_on_at_most_its_bound_and_counts_the_rest() {
    let node = Node::new();
    let (dump, named) = node.dump_dir("d");
    let (mut f, m) = node.follower(2);
    let jobs = vec![node.job("j", 10, 0, Some(&named))];
    let lines: Vec<String> = (0..5).map(|sn| line(10, sn, "v4.0")).collect();
    append(&dump.join("x.log"), &(lines.join("\n") + "\n"));
    assert_eq!(f.poll(&jobs).len(), 2);
    assert_eq!(dropped(&m, "rate_limit"), 3);
}

#[test]
fn processes_without_inspector_settings_are_not_followed() {
    let node = Node::new();
    let (dump, _) = node.dump_dir("d");
    let (mut f, m) = node.follower(100);
    append(&dump.join("x.log"), &(line(10, 1, "v4.0") + "\n"));
    assert!(f.poll(&[node.job("j", 10, 0, None)]).is_empty());
    assert_eq!(m.inspector.files.get(), 0);
    assert!(attach(None, None, 10).is_none());
}

#[test]
fn the_feed_queues_in_order_bounds_and_counts_what_is_over() {
    let node = Node::new();
    let (dump, named) = node.dump_dir("d");
    let (mut f, m) = node.follower(100);
    let feed = feed::InspectorFeed::new(5, m.clone());
    let lines: String = (1..=8).map(|sn| line(10, sn, "v4.0") + "\n").collect();
    append(&dump.join("x.log"), &lines);
    // No jobs published yet: nothing followed.
    assert_eq!(feed.poll_once(&mut f), 0);
    feed.set_jobs(&[node.job("j", 10, 0, Some(&named))]);
    assert_eq!(feed.poll_once(&mut f), 5);
    assert_eq!(
        m.inspector.dropped.with_label_values(&["queue_full"]).get(),
        3
    );
    let first: Vec<u64> = feed.take(2).iter().map(|r| r.sequence).collect();
    assert_eq!(first, [1, 2]);
    let batch = attach(None, Some(&feed), 10).expect("a batch for records alone");
    let rest: Vec<u64> = batch.collectives.iter().map(|r| r.sequence).collect();
    assert_eq!(rest, [3, 4, 5]);
    assert!(attach(None, Some(&feed), 10).is_none());
}

#[test]
fn the_follower_thread_delivers_and_ends_with_the_feed() {
    let node = Node::new();
    let (dump, named) = node.dump_dir("d");
    let (f, m) = node.follower(100);
    let feed = feed::InspectorFeed::new(feed::DEFAULT_CAPACITY, m);
    feed.set_jobs(&[node.job("j", 10, 0, Some(&named))]);
    let thread = feed::spawn(&feed, f, std::time::Duration::from_millis(5)).unwrap();
    append(&dump.join("x.log"), &(line(10, 7, "v4.0") + "\n"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut got = Vec::new();
    while got.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
        got = feed.take(10);
    }
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].sequence, 7);
    assert!(!thread.is_finished());
    drop(feed);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !thread.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(
        thread.is_finished(),
        "the thread ends once the feed is dropped"
    );
}

#[test]
fn a_job_with_many_files_does_not_starve_another_jobs_new_file() {
    let node = Node::new();
    let (big, big_named) = node.dump_dir("big");
    let (small, small_named) = node.dump_dir("small");
    let (mut f, m) = node.follower(10_000);
    f.settings.max_files = 16;
    f.settings.max_files_per_job = 16;
    for i in 0..300 {
        append(
            &big.join(format!("r{i:03}.log")),
            &(line(10, i, "v4.0") + "\n"),
        );
    }
    let big_job = node.job("big", 10, 0, Some(&big_named));
    let small_job = node.job("small", 20, 0, Some(&small_named));
    // The big job alone takes the whole node bound.
    assert_eq!(f.poll(std::slice::from_ref(&big_job)).len(), 16);
    assert_eq!(m.inspector.files.get(), 16);
    assert_eq!(dropped(&m, "too_many_files"), 300 - 16);
    // Another job starts and writes its first file: followed at the next poll, the big job shrinks to fit.
    let jobs = vec![big_job, small_job];
    append(&small.join("s.log"), &(line(20, 1, "v4.0") + "\n"));
    let recs = f.poll(&jobs);
    let small_recs: Vec<&pb::CollectiveRecord> = recs.iter().filter(|r| r.job == "small").collect();
    assert_eq!(small_recs.len(), 1, "the small job's new file is read");
    assert_eq!(
        m.inspector.files.get(),
        16,
        "never more than the node bound"
    );
    // And it stays followed while the big job keeps writing new files.
    append(&big.join("r999.log"), &(line(10, 999, "v4.0") + "\n"));
    append(&small.join("s.log"), &(line(20, 2, "v4.0") + "\n"));
    let recs = f.poll(&jobs);
    assert_eq!(recs.iter().filter(|r| r.job == "small").count(), 1);
    assert!(
        recs.iter().all(|r| r.sequence != 999),
        "over its share: not read"
    );
}

#[test]
fn a_symlinked_dump_directory_and_a_symlinked_file_are_refused_and_counted() {
    let node = Node::new();
    let host = tempfile::tempdir().unwrap();
    append(&host.path().join("host.log"), &(line(10, 1, "v4.0") + "\n"));
    // The job's dump directory is a link to a directory out of its root; in a real directory of its own, a
    // link to a file out of it.
    std::os::unix::fs::symlink(host.path(), node.root.path().join("linked")).unwrap();
    let (dump, named) = node.dump_dir("real");
    std::os::unix::fs::symlink(host.path().join("host.log"), dump.join("x.log")).unwrap();
    let (mut f, m) = node.follower(100);
    let jobs = vec![
        node.job("a", 10, 0, Some(Path::new("/linked"))),
        node.job("b", 11, 0, Some(&named)),
        // A host path: looked up inside the process's root only, where it does not exist.
        node.job("c", 12, 0, Some(host.path())),
    ];
    assert!(f.poll(&jobs).is_empty());
    assert_eq!(dropped(&m, "symlink"), 2, "the directory and the file");
    assert_eq!(m.inspector.files.get(), 0);
    assert!(f.poll(&jobs).is_empty());
    assert_eq!(dropped(&m, "symlink"), 4, "counted at each poll");
}

#[test]
fn a_followed_file_swapped_for_a_link_is_not_opened() {
    let node = Node::new();
    let host = tempfile::tempdir().unwrap();
    append(
        &host.path().join("other.log"),
        &(line(10, 9, "v4.0") + "\n"),
    );
    let (dump, named) = node.dump_dir("d");
    let (mut f, m) = node.follower(100);
    let jobs = vec![node.job("j", 10, 0, Some(&named))];
    append(&dump.join("x.log"), &(line(10, 1, "v4.0") + "\n"));
    assert_eq!(f.poll(&jobs).len(), 1);
    std::fs::remove_file(dump.join("x.log")).unwrap();
    std::os::unix::fs::symlink(host.path().join("other.log"), dump.join("x.log")).unwrap();
    assert!(f.poll(&jobs).is_empty());
    assert!(dropped(&m, "symlink") >= 1);
    assert_eq!(m.inspector.records.get(), 1);
}
