//! The follower on a dump directory written here, for jobs given here: records attributed by pid and by the
//! directory's job, drops counted by reason, the per-poll bound.

use std::collections::BTreeMap;
use std::io::Write;

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

fn follower(max_records: usize) -> (Follower, Arc<AgentMetrics>, tempfile::TempDir) {
    let proc = tempfile::tempdir().unwrap();
    let metrics = Arc::new(AgentMetrics::new());
    let mut settings = FollowerSettings::new(proc.path());
    settings.max_records_per_poll = max_records;
    (Follower::new(settings, metrics.clone()), metrics, proc)
}

#[test]
fn records_are_attributed_and_drops_counted() {
    let dump = tempfile::tempdir().unwrap();
    let (mut f, m, _proc) = follower(100);
    // pid 10 named the directory; pid 11 (another job) writes there too; pid 99 is unknown.
    let jobs = vec![
        job("job-a", 10, 0, Some(dump.path())),
        job("job-b", 11, 1, None),
    ];
    let file = dump.path().join("n-pid10.log");
    append(
        &file,
        &format!(
            "{}\n{}\n{}",
            line(10, 1, "v4.0"),
            line(11, 1, "v4.0"),
            &line(99, 1, "v4.0")[..40]
        ),
    );
    append(
        &dump.path().join("n-pid10.prom"),
        "nccl_bus_bandwidth_gbs 1\n",
    );
    let recs = f.poll(&jobs);
    assert_eq!(recs.len(), 2);
    assert_eq!((recs[0].job.as_str(), recs[0].job_rank), ("job-a", Some(0)));
    assert_eq!((recs[1].job.as_str(), recs[1].job_rank), ("job-b", Some(1)));
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
    assert_eq!(
        m.inspector
            .dropped
            .with_label_values(&["unknown_version"])
            .get(),
        1
    );
    assert_eq!(m.inspector.files.get(), 1, "the .prom file is not followed");
}

#[test]
fn a_poll_hands_on_at_most_its_bound_and_counts_the_rest() {
    let dump = tempfile::tempdir().unwrap();
    let (mut f, m, _proc) = follower(2);
    let jobs = vec![job("j", 10, 0, Some(dump.path()))];
    let lines: Vec<String> = (0..5).map(|sn| line(10, sn, "v4.0")).collect();
    append(&dump.path().join("x.log"), &(lines.join("\n") + "\n"));
    assert_eq!(f.poll(&jobs).len(), 2);
    assert_eq!(
        m.inspector.dropped.with_label_values(&["rate_limit"]).get(),
        3
    );
}

#[test]
fn processes_without_inspector_settings_are_not_followed() {
    let dump = tempfile::tempdir().unwrap();
    let (mut f, m, _proc) = follower(100);
    append(&dump.path().join("x.log"), &(line(10, 1, "v4.0") + "\n"));
    assert!(f.poll(&[job("j", 10, 0, None)]).is_empty());
    assert_eq!(m.inspector.files.get(), 0);
    assert!(attach(None, None, 10).is_none());
}

#[test]
fn the_feed_queues_in_order_bounds_and_counts_what_is_over() {
    let dump = tempfile::tempdir().unwrap();
    let (mut f, m, _proc) = follower(100);
    let feed = feed::InspectorFeed::new(5, m.clone());
    let lines: String = (1..=8).map(|sn| line(10, sn, "v4.0") + "\n").collect();
    append(&dump.path().join("x.log"), &lines);
    // No jobs published yet: nothing followed.
    assert_eq!(feed.poll_once(&mut f), 0);
    feed.set_jobs(&[job("j", 10, 0, Some(dump.path()))]);
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
    let dump = tempfile::tempdir().unwrap();
    let (f, m, _proc) = follower(100);
    let feed = feed::InspectorFeed::new(feed::DEFAULT_CAPACITY, m);
    feed.set_jobs(&[job("j", 10, 0, Some(dump.path()))]);
    let thread = feed::spawn(&feed, f, std::time::Duration::from_millis(5)).unwrap();
    append(&dump.path().join("x.log"), &(line(10, 7, "v4.0") + "\n"));
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
