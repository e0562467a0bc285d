//! Sharded collectors end to end: the sim's two-jobs cluster (job 1001 on node-00..03, node-04 idle, job 1002 on
//! node-05..07; node-03's ranks send over the management NIC) with real agents given both collectors' URLs.
//!
//! - Every job lands on the shard rendezvous hashing picks for its id (the test picks ports until the two jobs
//!   hash apart): the shard lists the job with all its nodes, the other shard neither the job nor its nodes, and
//!   the job's management-NIC finding is on its shard only.
//! - Run twice, once per store: both shards remote-write into one real Prometheus (Debian's `prometheus`, with
//!   `--web.enable-remote-write-receiver`), then into one real VictoriaMetrics (Debian's `victoria-metrics`),
//!   external label `shard`; the finding is queryable there under the job's shard, and the moved nodes' series
//!   come from the other shard while theirs is down and from theirs again after its restart. Without the
//!   store's binary the run says so loudly and goes on without remote write; in CI (`CI=true`) a missing one
//!   is a failure.
//! - The job's shard is killed (aborted, as a crash: nothing flushed): its agents move to the other shard and
//!   replay their unacknowledged batches there; it restarts on the same port and state directory, and they move
//!   back (`shard_retry` = 2 s). Nothing is lost: no agent dropped a batch and every agent's buffer empties
//!   (every batch it numbered was acknowledged by some shard).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{client, free_port, get_json, get_text, have_tool, wait_for};
use commwatch_agent::shipper::shard;
use serde_json::Value;

const JOBS: [&str; 2] = ["1001", "1002"];

/// Two gRPC ports whose URLs send the two jobs to different shards; (ports, shard index of each job).
fn ports_splitting_the_jobs() -> ([u16; 2], [usize; 2]) {
    for _ in 0..64 {
        let ports = [free_port(), free_port()];
        if ports[0] == ports[1] {
            continue;
        }
        let urls = ports.map(url);
        let picks = JOBS.map(|j| shard::order(j, &urls)[0]);
        if picks[0] != picks[1] {
            return (ports, picks);
        }
    }
    panic!("no pair of ports split the two jobs in 64 tries");
}

fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// The remote-write store both shards send to.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Debian's `prometheus` with `--web.enable-remote-write-receiver`.
    Prometheus,
    /// Debian's `victoria-metrics` (single node).
    VictoriaMetrics,
}

/// What `.ci/run` installs for this test.
const PACKAGES: &str = "prometheus and victoria-metrics packages";

impl Kind {
    fn bin(self) -> &'static str {
        match self {
            Kind::Prometheus => "prometheus",
            Kind::VictoriaMetrics => "victoria-metrics",
        }
    }

    fn version_flag(self) -> &'static str {
        match self {
            Kind::Prometheus => "--version",
            Kind::VictoriaMetrics => "-version",
        }
    }

    /// The arguments for a store on `port` keeping its data under `dir`, and its readiness path.
    fn args(self, dir: &Path, port: u16) -> (Vec<String>, &'static str) {
        match self {
            Kind::Prometheus => {
                let cfg = dir.join("prometheus.yml");
                std::fs::write(&cfg, "global:\n  scrape_interval: 15s\n").unwrap();
                let args = vec![
                    format!("--config.file={}", cfg.display()),
                    format!("--storage.tsdb.path={}", dir.join("prom").display()),
                    format!("--web.listen-address=127.0.0.1:{port}"),
                    "--web.enable-remote-write-receiver".into(),
                ];
                (args, "/-/ready")
            }
            Kind::VictoriaMetrics => {
                let args = vec![
                    format!("-httpListenAddr=127.0.0.1:{port}"),
                    format!("-storageDataPath={}", dir.join("vm").display()),
                    // Queries see samples at once (the default hides the last 30 s), uncached.
                    "-search.latencyOffset=0s".into(),
                    "-search.disableCache".into(),
                ];
                (args, "/health")
            }
        }
    }
}

/// A remote-write store as a child process, killed on drop.
struct Store {
    kind: Kind,
    child: Child,
    base: String,
    log: PathBuf,
}

impl Store {
    fn start(kind: Kind, dir: &Path) -> Store {
        let port = free_port();
        let (args, ready) = kind.args(dir, port);
        let log = dir.join(format!("{}.log", kind.bin()));
        let child = Command::new(kind.bin())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", kind.bin()));
        let p = Store {
            kind,
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        };
        let up = wait_for(Duration::from_secs(30), || {
            get_text(&format!("{}{ready}", p.base))
        });
        assert!(
            up.is_some(),
            "{kind:?} not ready:\n{}",
            std::fs::read_to_string(&p.log).unwrap_or_default()
        );
        p
    }

    fn write_url(&self) -> String {
        format!("{}/api/v1/write", self.base)
    }

    fn query(&self, expr: &str) -> Option<Vec<Value>> {
        let r = client()
            .post(format!("{}/api/v1/query", self.base))
            .form(&[("query", expr)])
            .send()
            .ok()?;
        let v: Value = r.json().ok()?;
        if v["status"] != "success" {
            return None;
        }
        v["data"]["result"].as_array().cloned()
    }

    /// The newest `commwatch_node_last_seen_timestamp_seconds` of `node` sent by `shard`, seconds.
    fn last_seen(&self, node: &str, shard: &str) -> Option<f64> {
        let expr = format!(
            "commwatch_node_last_seen_timestamp_seconds{{node=\"{node}\",shard=\"{shard}\"}}"
        );
        let r = self.query(&expr)?;
        r.iter()
            .filter_map(|s| s["value"][1].as_str()?.parse::<f64>().ok())
            .reduce(f64::max)
    }

    /// Waits until every node of `nodes` was seen by `shard` after `since` (unix seconds), as the store has it.
    fn wait_seen(&self, nodes: &[String], shard: &str, since: f64) {
        let seen = wait_for(Duration::from_secs(60), || {
            nodes
                .iter()
                .all(|n| self.last_seen(n, shard).is_some_and(|t| t > since))
                .then_some(())
        });
        assert!(
            seen.is_some(),
            "{:?}: {nodes:?} not seen by shard {shard} after {since}: {:?}",
            self.kind,
            nodes
                .iter()
                .map(|n| self.last_seen(n, shard))
                .collect::<Vec<_>>()
        );
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A collector shard on a fixed gRPC port and state directory.
async fn start_shard(
    name: &str,
    port: u16,
    state: &Path,
    write_url: Option<&str>,
) -> commwatch_collector::CollectorHandle {
    let mut config = commwatch_collector::CollectorConfig {
        grpc_listen: format!("127.0.0.1:{port}").parse().unwrap(),
        http_listen: "127.0.0.1:0".parse().unwrap(),
        state_dir: Some(state.to_path_buf()),
        ..Default::default()
    };
    if let Some(w) = write_url {
        let rw = &mut config.remote_write;
        rw.url = Some(w.to_string());
        rw.interval = Duration::from_secs(1);
        rw.external_labels.insert("shard".into(), name.into());
    }
    // The port of an aborted shard may take a moment to be free again.
    for _ in 0..50 {
        match commwatch_collector::start(config.clone()).await {
            Ok(h) => return h,
            Err(e) => {
                eprintln!("shard {name} not started yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    panic!("shard {name} did not start on port {port}");
}

/// `GET /api/v1/{what}` of a shard.
fn api(h: &commwatch_collector::CollectorHandle, what: &str) -> Value {
    get_json(&format!("http://{}/api/v1/{what}", h.http_addr)).unwrap_or(Value::Null)
}

/// Names of the nodes a shard heard from in the last `fresh` seconds.
fn fresh_nodes(h: &commwatch_collector::CollectorHandle, fresh: f64) -> Vec<String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let nodes = api(h, "nodes");
    let mut out: Vec<String> = nodes
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| {
            n["last_seen_unix_s"]
                .as_f64()
                .is_some_and(|t| now - t < fresh)
        })
        .filter_map(|n| n["name"].as_str().map(String::from))
        .collect();
    out.sort();
    out
}

/// The job ids a shard lists, with their nodes.
fn jobs(h: &commwatch_collector::CollectorHandle) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = api(h, "jobs")
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| {
            let mut nodes: Vec<String> = j["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str().map(String::from))
                .collect();
            nodes.sort();
            (j["id"].as_str().unwrap_or("").to_string(), nodes)
        })
        .collect();
    out.sort();
    out
}

fn management_findings(h: &commwatch_collector::CollectorHandle) -> Vec<Value> {
    api(h, "findings?kind=management_network_traffic")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn job_nodes(job: &str) -> Vec<String> {
    let range = if job == "1001" { 0..4 } else { 5..8 };
    range.map(|i| format!("node-{i:02}")).collect()
}

/// The two runs (one per store) one after the other: each is eight agents, two shards and a store.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn jobs_land_on_their_shard_and_a_killed_shard_loses_nothing_prometheus() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    sharded(Kind::Prometheus);
}

#[test]
fn jobs_land_on_their_shard_and_a_killed_shard_loses_nothing_victoria_metrics() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    sharded(Kind::VictoriaMetrics);
}

fn sharded(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let store = have_tool(kind.bin(), kind.version_flag(), PACKAGES)
        .then(|| Store::start(kind, dir.path()));
    let write = store.as_ref().map(Store::write_url);
    let rt = tokio::runtime::Runtime::new().unwrap();

    let spec = commwatch_sim::ClusterSpec {
        nodes: 8,
        gpus_per_node: 2,
        ..commwatch_sim::ClusterSpec::with_variants(
            commwatch_sim::Scenario::ManagementNic,
            &[commwatch_sim::Variant::TwoJobs],
        )
    };
    let cluster = commwatch_sim::Cluster::create(&dir.path().join("trees"), spec).unwrap();
    let procfs = cluster.write_procfs_trees().unwrap();
    let (model, epoch) = (cluster.model().clone(), cluster.epoch());
    let roots: Vec<(String, PathBuf, PathBuf)> = cluster
        .node_roots()
        .into_iter()
        .zip(procfs)
        .map(|((n, s), (_, p))| (n, s, p))
        .collect();
    let updater = rt.block_on(async { cluster.spawn_updater(Duration::from_millis(10)) });

    let (ports, picks) = ports_splitting_the_jobs();
    let names = ["a", "b"];
    let states = [dir.path().join("state-a"), dir.path().join("state-b")];
    let mut shards: Vec<Option<commwatch_collector::CollectorHandle>> = rt.block_on(async {
        let mut v = Vec::new();
        for k in 0..2 {
            v.push(Some(
                start_shard(names[k], ports[k], &states[k], write.as_deref()).await,
            ));
        }
        v
    });
    let list = format!("{},{}", url(ports[0]), url(ports[1]));
    let agents: Vec<commwatch_agent::AgentHandle> = rt.block_on(async {
        let mut v = Vec::new();
        for (i, (node, sysfs_root, procfs_root)) in roots.iter().enumerate() {
            let config = commwatch_agent::AgentConfig {
                node: node.clone(),
                collector: Some(list.clone()),
                sysfs_root: sysfs_root.clone(),
                procfs_root: procfs_root.clone(),
                http_listen: "127.0.0.1:0".parse().unwrap(),
                sources: ["infiniband", "netdev", "host", "nvml", "processes"]
                    .map(String::from)
                    .to_vec(),
                steps_udp: None,
                steps_socket: None,
                shard_retry: Duration::from_secs(2),
                backoff_max: Duration::from_secs(1),
                ..Default::default()
            };
            let extras = commwatch_agent::AgentExtras {
                gpu: Some(Box::new(commwatch_sim::SimGpus::new(&model, i, epoch))),
                host: Some(Box::new(commwatch_sim::SimHost::new(&model, i, epoch))),
            };
            v.push(
                commwatch_agent::start_with(config, extras)
                    .await
                    .expect("agent"),
            );
        }
        v
    });
    let shard = |k: usize| shards[k].as_ref().expect("shard running");

    // Every job's nodes on its shard, and only there.
    for (j, job) in JOBS.iter().enumerate() {
        let (home, away) = (picks[j], 1 - picks[j]);
        let want = job_nodes(job);
        let listed = wait_for(Duration::from_secs(60), || {
            jobs(shard(home))
                .into_iter()
                .find(|(id, nodes)| id == job && *nodes == want)
        });
        assert!(
            listed.is_some(),
            "job {job} not on shard {}: {:?}",
            names[home],
            jobs(shard(home))
        );
        assert!(
            jobs(shard(away)).iter().all(|(id, _)| id != job),
            "job {job} also on shard {}",
            names[away]
        );
        // Until its job is known an agent ships by its node name: that stops once the job list is sent.
        let left = wait_for(Duration::from_secs(30), || {
            let elsewhere = fresh_nodes(shard(away), 3.0);
            want.iter().all(|n| !elsewhere.contains(n)).then_some(())
        });
        assert!(
            left.is_some(),
            "nodes of job {job} still on shard {}: {:?}",
            names[away],
            fresh_nodes(shard(away), 3.0)
        );
    }

    // The management-NIC finding is about a node of some job: on that job's shard only.
    let found = wait_for(Duration::from_secs(120), || {
        (0..2).find_map(|k| {
            management_findings(shard(k))
                .first()
                .map(|f| (k, f.clone()))
        })
    })
    .expect("a management_network_traffic finding on some shard");
    let (k, finding) = found;
    let node = finding["subject"]["node"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let job = JOBS
        .iter()
        .position(|j| job_nodes(j).contains(&node))
        .unwrap_or_else(|| panic!("finding on {node}, a node of no job: {finding}"));
    assert_eq!(
        k, picks[job],
        "the finding about {node} (job {}) is on the wrong shard",
        JOBS[job]
    );
    assert!(
        management_findings(shard(1 - k)).is_empty(),
        "the finding is on both shards"
    );
    if let Some(p) = &store {
        let expr = format!(
            "commwatch_finding_active{{kind=\"management_network_traffic\",node=\"{node}\"}}"
        );
        let series = wait_for(Duration::from_secs(60), || {
            p.query(&expr).filter(|r| !r.is_empty())
        })
        .unwrap_or_else(|| panic!("the finding in {kind:?}"));
        let labels: Vec<&str> = series
            .iter()
            .filter_map(|s| s["metric"]["shard"].as_str())
            .collect();
        assert_eq!(labels, [names[k]], "{series:?}");
        eprintln!(
            "remote write: the finding about {node} is in {kind:?} under shard {}",
            names[k]
        );
    }

    // Kill the shard of the finding's job: its agents move to the other shard and replay there.
    let (dead, other) = (k, 1 - k);
    // Every node whose key (its job, else its name) prefers the killed shard: the finding's job, and maybe
    // the idle node-04.
    let urls = ports.map(url);
    let moved: Vec<String> = roots
        .iter()
        .map(|r| r.0.clone())
        .filter(|n| {
            let key = JOBS
                .iter()
                .find(|j| job_nodes(j).contains(n))
                .map_or(n.as_str(), |j| j);
            shard::order(key, &urls)[0] == dead
        })
        .collect();
    let moves = |agents: &[commwatch_agent::AgentHandle]| -> Vec<u64> {
        agents
            .iter()
            .map(|a| a.metrics.disconnects.with_label_values(&["moved"]).get())
            .collect()
    };
    let moves_before = moves(&agents);
    let killed_at = now_s();
    if let Some(h) = shards[dead].take() {
        h.abort();
    }
    let failed_over = wait_for(Duration::from_secs(60), || {
        let fresh = fresh_nodes(shards[other].as_ref()?, 2.0);
        moved.iter().all(|n| fresh.contains(n)).then_some(fresh)
    });
    assert!(
        failed_over.is_some(),
        "{moved:?} did not move to shard {}",
        names[other]
    );
    eprintln!(
        "shard {} killed: job {} moved to shard {}",
        names[dead], JOBS[job], names[other]
    );
    // The store follows: the moved nodes' series now come from the other shard.
    if let Some(st) = &store {
        st.wait_seen(&moved, names[other], killed_at);
        eprintln!(
            "{kind:?}: {moved:?} seen through shard {} {:.1} s after the kill",
            names[other],
            now_s() - killed_at
        );
    }

    // Restart it: the agents come back after shard_retry.
    let restarted_at = now_s();
    shards[dead] = Some(rt.block_on(start_shard(
        names[dead],
        ports[dead],
        &states[dead],
        write.as_deref(),
    )));
    // Back: each of the job's agents ended its fallback stream to return (its state replayed from disk
    // would make the nodes look fresh at once), and the restarted shard hears from them again.
    let is_moved = |i: usize| moved.contains(&roots[i].0);
    let back = wait_for(Duration::from_secs(60), || {
        let now = moves(&agents);
        let returned = (0..agents.len()).all(|i| !is_moved(i) || now[i] > moves_before[i]);
        let fresh = fresh_nodes(shards[dead].as_ref()?, 1.0);
        (returned && moved.iter().all(|n| fresh.contains(n))).then_some(())
    });
    assert!(
        back.is_some(),
        "{moved:?} did not come back to shard {}",
        names[dead]
    );
    if let Some(st) = &store {
        st.wait_seen(&moved, names[dead], restarted_at);
        eprintln!(
            "{kind:?}: {moved:?} seen through the restarted shard {} {:.1} s after the restart",
            names[dead],
            now_s() - restarted_at
        );
    }

    // Nothing lost: no agent dropped a batch, and every batch was acknowledged by some shard.
    let drained = wait_for(Duration::from_secs(30), || {
        agents
            .iter()
            .all(|a| a.metrics.buffer_batches.get() <= 1)
            .then_some(())
    });
    for (a, (node, _, _)) in agents.iter().zip(&roots) {
        assert_eq!(a.metrics.dropped_batches.get(), 0, "{node} dropped batches");
    }
    assert!(
        drained.is_some(),
        "unacknowledged batches left: {:?}",
        agents
            .iter()
            .map(|a| a.metrics.buffer_batches.get())
            .collect::<Vec<_>>()
    );
    let returns: Vec<u64> = moves(&agents)
        .iter()
        .zip(&moves_before)
        .map(|(after, before)| after - before)
        .collect();
    eprintln!("returns to the preferred shard per agent after the restart: {returns:?}");
    for (i, n) in roots.iter().map(|r| &r.0).enumerate() {
        if moved.contains(n) {
            assert!(returns[i] >= 1, "{n} never moved back: {returns:?}");
        } else {
            assert_eq!(
                returns[i], 0,
                "{n} was not on the killed shard but moved: {returns:?}"
            );
        }
    }

    rt.block_on(async {
        for a in agents {
            a.shutdown().await;
        }
        for h in shards.into_iter().flatten() {
            h.shutdown().await;
        }
    });
    drop(updater.stop());
}
