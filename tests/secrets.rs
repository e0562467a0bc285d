//! The `processes` source end to end with real processes: training-like children carrying rank markers, NCCL
//! settings and a secret in their environment; a real agent reading this machine's `/proc` (and a fixture
//! sysfs whose `eth0` is management while its InfiniBand ports are active) shipping to a real collector with
//! a state directory. The job, its rank and the NCCL setting arrive; `NCCL_SOCKET_IFNAME=eth0` is a conflict
//! and `=ib0` (the fixture's IPoIB interface) is not; and the secret appears nowhere: not in `--once` output,
//! either process's `/metrics`, the collector's API, either log at debug level, or the state directory.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

const SECRET: &str = "hunter2-secret-value-XYZ";
const SECRET_KEY: &str = "AWS_SECRET_ACCESS_KEY";
/// The job whose `NCCL_SOCKET_IFNAME` names the management NIC.
const BAD_JOB: &str = "4242";
/// The job whose `NCCL_SOCKET_IFNAME` names the IPoIB interface.
const GOOD_JOB: &str = "4243";

/// A `sleep 60` with the environment of a training rank; killed and reaped on drop.
struct Rank(Child);

impl Rank {
    fn spawn(job: &str, ifname: &str) -> Rank {
        let child = Command::new("sleep")
            .arg("60")
            .env("RANK", "3")
            .env("WORLD_SIZE", "16")
            .env("LOCAL_RANK", "3")
            .env("SLURM_JOB_ID", job)
            .env("NCCL_SOCKET_IFNAME", ifname)
            .env(SECRET_KEY, SECRET)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sleep");
        Rank(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Fails naming `what` when the secret value or its variable name occurs in `text`.
fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "the secret value appears in {what}");
    assert!(
        !text.contains(SECRET_KEY),
        "the secret's variable name appears in {what}"
    );
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read state dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// The rank of `pid` in job `id` of a `/api/v1/jobs` document.
fn rank_of<'a>(jobs: &'a serde_json::Value, id: &str, pid: u32) -> Option<&'a serde_json::Value> {
    jobs.as_array()?.iter().find(|j| j["id"] == id)?["ranks"]
        .as_array()?
        .iter()
        .find(|r| r["pid"] == pid)
}

/// The `--once` document's job `id` rank of `pid`.
fn once_rank<'a>(doc: &'a serde_json::Value, id: &str, pid: u32) -> Option<&'a serde_json::Value> {
    doc["jobs"].as_array()?.iter().find(|j| j["id"] == id)?["ranks"]
        .as_array()?
        .iter()
        .find(|r| r["pid"] == pid)
}

fn once_conflicts(doc: &serde_json::Value, id: &str) -> Vec<(String, String)> {
    doc["jobs"]
        .as_array()
        .and_then(|a| a.iter().find(|j| j["id"] == id))
        .and_then(|j| j["conflicts"].as_array())
        .map(|c| {
            c.iter()
                .map(|c| {
                    (
                        c["setting"].as_str().unwrap_or("").to_string(),
                        c["kind"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn jobs_and_nccl_conflicts_arrive_and_the_secret_appears_nowhere() {
    // The shared H100 capture with the project's additions (eth0 management, ib0 IPoIB), composed here.
    let Some(h100) = commwatch_testdata::gpud_h100_sysfs!() else {
        return;
    };
    let sysfs = h100.path().to_path_buf();
    let bad = Rank::spawn(BAD_JOB, "eth0");
    let good = Rank::spawn(GOOD_JOB, "ib0");

    // `--once` as an operator runs it, at debug level.
    let out = Command::new(BIN)
        .args(["agent", "--once", "--node", "t1", "--log", "debug"])
        .arg("--procfs-root")
        .arg("/proc")
        .arg("--sysfs-root")
        .arg(&sysfs)
        .output()
        .expect("run agent --once");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    assert_clean("--once stdout", &stdout);
    assert_clean("--once stderr", &stderr);
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
    let r = once_rank(&doc, BAD_JOB, bad.pid())
        .unwrap_or_else(|| panic!("rank not in --once: {doc:#}"));
    assert_eq!(
        (r["rank"].as_u64(), r["world_size"].as_u64()),
        (Some(3), Some(16))
    );
    assert_eq!(r["nccl"]["NCCL_SOCKET_IFNAME"], "eth0");
    assert!(once_conflicts(&doc, BAD_JOB)
        .contains(&("NCCL_SOCKET_IFNAME".into(), "management_interface".into())));
    assert!(once_rank(&doc, GOOD_JOB, good.pid()).is_some());
    assert_eq!(once_conflicts(&doc, GOOD_JOB), vec![]);
    // Processes the agent may not read (other users', kernel threads) are skipped quietly.
    for line in stderr.lines() {
        assert!(
            !(line.contains("WARN") || line.contains("ERROR")) || !line.contains("/proc/"),
            "noisy about unreadable processes: {line}"
        );
    }

    // A collector with a state directory and an agent reading /proc, both at debug level.
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (grpc, http, agent_http) = (free_port(), free_port(), free_port());
    let state_arg = state.display().to_string();
    let mut collector = collector(
        dir.path(),
        "collector",
        grpc,
        http,
        &["--log", "debug", "--state-dir", &state_arg],
    );
    let agent_http_arg = format!("127.0.0.1:{agent_http}");
    let mut agent = agent(
        dir.path(),
        "n1",
        &sysfs,
        grpc,
        &[
            "--log",
            "debug",
            "--procfs-root",
            "/proc",
            "--http-listen",
            &agent_http_arg,
        ],
    );

    let base = format!("http://127.0.0.1:{http}");
    let jobs = wait_for(Duration::from_secs(40), || {
        let v = get_json(&format!("{base}/api/v1/jobs"))?;
        (rank_of(&v, BAD_JOB, bad.pid()).is_some() && rank_of(&v, GOOD_JOB, good.pid()).is_some())
            .then_some(v)
    });
    let jobs = jobs.unwrap_or_else(|| {
        panic!(
            "jobs never arrived\ncollector:\n{}\nagent:\n{}",
            collector.log_text(),
            agent.log_text()
        )
    });
    let r = rank_of(&jobs, BAD_JOB, bad.pid()).expect("rank");
    assert_eq!(r["node"], "n1");
    assert_eq!(r["rank"], 3);
    assert_eq!(r["local_rank"], 3);
    assert_eq!(r["world_size"], 16);
    assert!(r["gpu"].is_array());
    assert_eq!(r["nccl"]["NCCL_SOCKET_IFNAME"], "eth0");
    let job = |id: &str| {
        jobs.as_array()
            .and_then(|a| a.iter().find(|j| j["id"] == id))
            .cloned()
            .expect("job")
    };
    let bad_job = job(BAD_JOB);
    assert!(bad_job["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["node"] == "n1"
            && c["setting"] == "NCCL_SOCKET_IFNAME"
            && c["value"] == "eth0"
            && c["kind"] == "management_interface"));
    assert_eq!(job(GOOD_JOB)["conflicts"], serde_json::json!([]));
    assert_eq!(
        rank_of(&jobs, GOOD_JOB, good.pid()).unwrap()["nccl"]["NCCL_SOCKET_IFNAME"],
        "ib0"
    );
    let one = get_json(&format!("{base}/api/v1/jobs?job={BAD_JOB}")).expect("jobs?job=");
    assert_eq!(one.as_array().map(Vec::len), Some(1));

    let nodes = get_json(&format!("{base}/api/v1/nodes")).expect("nodes");
    let n1 = node(&nodes, "n1").expect("n1");
    assert!(n1["jobs"].as_array().unwrap().iter().any(|j| j == BAD_JOB));
    let conflicts = n1["nccl_conflicts"].as_array().unwrap();
    assert!(conflicts.iter().any(|c| c["job"] == BAD_JOB
        && c["setting"] == "NCCL_SOCKET_IFNAME"
        && c["kind"] == "management_interface"));
    assert!(!conflicts.iter().any(|c| c["job"] == GOOD_JOB));

    let text = get_text(&format!("{base}/metrics")).expect("metrics");
    let labels = |job| {
        [
            ("node", "n1"),
            ("training_job", job),
            ("setting", "NCCL_SOCKET_IFNAME"),
            ("kind", "management_interface"),
        ]
    };
    assert_eq!(
        metric(&text, "commwatch_nccl_setting_conflict", &labels(BAD_JOB)),
        Some(1.0)
    );
    assert_eq!(
        metric(&text, "commwatch_nccl_setting_conflict", &labels(GOOD_JOB)),
        None
    );
    assert!(metric(
        &text,
        "commwatch_job_ranks",
        &[("training_job", BAD_JOB), ("node", "n1")]
    )
    .is_some_and(|v| v >= 1.0));

    // Let a few more batches and a persistence commit go by, then look everywhere.
    std::thread::sleep(Duration::from_secs(2));
    for path in [
        "/metrics",
        "/api/v1/nodes",
        "/api/v1/jobs",
        "/api/v1/findings",
        "/api/v1/steps?node=n1",
    ] {
        let body = get_text(&format!("{base}{path}")).unwrap_or_default();
        assert_clean(&format!("the collector's {path}"), &body);
    }
    let agent_metrics =
        get_text(&format!("http://{agent_http_arg}/metrics")).expect("agent /metrics");
    assert!(
        agent_metrics.contains("commwatch_"),
        "agent /metrics: {agent_metrics}"
    );
    assert_clean("the agent's /metrics", &agent_metrics);

    agent.terminate();
    collector.terminate();
    let agent_log = agent.log_text();
    let collector_log = collector.log_text();
    assert!(
        agent_log.contains("DEBUG"),
        "the agent did not log at debug level"
    );
    assert!(
        collector_log.contains("DEBUG"),
        "the collector did not log at debug level"
    );
    assert_clean("the agent's log", &agent_log);
    assert_clean("the collector's log", &collector_log);
    let state_files = files(&state);
    assert!(!state_files.is_empty(), "no state files");
    for f in state_files {
        let bytes = std::fs::read(&f).expect("read state file");
        let text = String::from_utf8_lossy(&bytes);
        assert_clean(&f.display().to_string(), &text);
    }

    // The job list is in the state directory: a restarted collector knows the job before any agent speaks.
    let collector = common::collector(
        dir.path(),
        "collector2",
        grpc,
        http,
        &["--state-dir", &state_arg],
    );
    let jobs = get_json(&format!("{base}/api/v1/jobs")).expect("jobs after restart");
    assert!(
        rank_of(&jobs, BAD_JOB, bad.pid()).is_some(),
        "jobs lost across a restart: {jobs:#}\n{}",
        collector.log_text()
    );
}
