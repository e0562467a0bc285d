//! Faults with real processes on loopback: an agent killed and restarted, a connection that stalls, a full disk
//! under the collector's SQLite state, clock skew between agents, and HTTP clients that never read. Each test
//! waits for conditions (never for the machine to be fast) and is bounded well under a minute.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

/// True rates of the simulated links, bytes/s.
const TX: u64 = 2_000_000_000;
const RX: u64 = 1_000_000_000;

fn agent_metric(port: u16, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metric(
        &get_text(&format!("http://127.0.0.1:{port}/metrics"))?,
        name,
        labels,
    )
}

fn collector_metric(http: u16, name: &str) -> Option<f64> {
    metric(
        &get_text(&format!("http://127.0.0.1:{http}/metrics"))?,
        name,
        &[],
    )
}

/// `(tx rate, tx counter)` of the node's first HCA port as `/api/v1/nodes` shows it.
fn hca(http: u16, node_name: &str) -> Option<(Option<f64>, Option<f64>)> {
    let nodes = get_json(&format!("http://127.0.0.1:{http}/api/v1/nodes"))?;
    let l = link(node(&nodes, node_name)?, "infiniband", "mlx5_0", "1")?;
    Some((
        l["tx_bytes_per_second"].as_f64(),
        l["tx_bytes_total"].as_f64(),
    ))
}

// ---------------------------------------------------------------------------------------------------------------
// Agent killed and restarted.

#[test]
fn sigkilled_agent_restarts_without_a_rate_spike() {
    let dir = tempfile::tempdir().unwrap();
    let cluster =
        commwatch_sim::Cluster::constant(&dir.path().join("trees"), 1, 1, TX, RX).unwrap();
    let roots = cluster.node_roots();
    let _updater = cluster.spawn_updater(Duration::from_millis(5));
    let (grpc, http) = (free_port(), free_port());
    let collector = collector(dir.path(), "collector", grpc, http, &[]);
    let (name, root) = &roots[0];
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut first = agent(dir.path(), name, root, grpc, &["--http-listen", &listen]);
    let up = wait_for(Duration::from_secs(30), || hca(http, name)?.0.map(|_| ()));
    assert!(up.is_some(), "no rate\n{}", first.log_text());

    // Sample the API at ~5 Hz from before the kill until well after the restart.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        let name = name.clone();
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Some(v) = hca(http, &name) {
                    seen.push(v);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            seen
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    first.kill();
    std::thread::sleep(Duration::from_secs(1));
    let port2 = free_port();
    let listen2 = format!("127.0.0.1:{port2}");
    let second = agent(dir.path(), name, root, grpc, &["--http-listen", &listen2]);
    let streaming = wait_for(Duration::from_secs(30), || {
        (agent_metric(port2, "commwatch_agent_acked_sequence", &[])? >= 12.0).then_some(())
    });
    assert!(
        streaming.is_some(),
        "restarted agent not acked\n{}\n{}",
        second.log_text(),
        collector.log_text()
    );
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let seen = sampler.join().unwrap();

    let rates: Vec<f64> = seen.iter().filter_map(|(r, _)| *r).collect();
    eprintln!(
        "{} readings, {} with a rate; min {:.4e} max {:.4e}",
        seen.len(),
        rates.len(),
        rates.iter().cloned().fold(f64::MAX, f64::min),
        rates.iter().cloned().fold(f64::MIN, f64::max)
    );
    assert!(seen.len() >= 15, "too few readings: {seen:?}");
    for (rate, _) in &seen {
        if let Some(r) = rate {
            assert!(
                (r / TX as f64 - 1.0).abs() < 0.05,
                "rate {r} across the restart (true {TX}); all: {seen:?}"
            );
        }
    }
    // The counter as exported continues: never backwards.
    let totals: Vec<f64> = seen.iter().filter_map(|(_, t)| *t).collect();
    assert!(
        totals.windows(2).all(|w| w[1] >= w[0]),
        "counter went backwards: {totals:?}"
    );
    // And rates came back after the restart (the last readings are the new instance's).
    assert!(
        seen.iter().rev().take(3).all(|(r, _)| r.is_some()),
        "no rate after restart: {seen:?}"
    );
    let text = get_text(&format!("http://127.0.0.1:{http}/metrics")).unwrap();
    assert_eq!(
        metric(&text, "commwatch_collector_gap_batches_total", &[]).unwrap_or(0.0),
        0.0
    );
}

// ---------------------------------------------------------------------------------------------------------------
// A connection that stalls.

/// A TCP proxy that forwards while `forward` is true and otherwise holds every byte (sockets stay open).
struct StallProxy {
    port: u16,
    forward: Arc<AtomicBool>,
}

impl StallProxy {
    fn start(upstream: u16) -> StallProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let forward = Arc::new(AtomicBool::new(true));
        let fwd = forward.clone();
        std::thread::spawn(move || {
            for down in listener.incoming().flatten() {
                let Ok(up) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let _ = up.set_nodelay(true);
                let _ = down.set_nodelay(true);
                for (from, to) in [
                    (down.try_clone(), up.try_clone()),
                    (up.try_clone(), down.try_clone()),
                ] {
                    let (Ok(from), Ok(to)) = (from, to) else {
                        continue;
                    };
                    let fwd = fwd.clone();
                    std::thread::spawn(move || pump(from, to, &fwd));
                }
            }
        });
        StallProxy { port, forward }
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, forward: &AtomicBool) {
    let hold = || {
        while !forward.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        hold();
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        hold();
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

#[test]
fn stalled_connection_is_detected_and_every_batch_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let cluster =
        commwatch_sim::Cluster::constant(&dir.path().join("trees"), 1, 1, TX, RX).unwrap();
    let roots = cluster.node_roots();
    let _updater = cluster.spawn_updater(Duration::from_millis(5));
    let (grpc, http) = (free_port(), free_port());
    let collector = collector(dir.path(), "collector", grpc, http, &[]);
    let proxy = StallProxy::start(grpc);
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, "ack_timeout = \"1s\"\nbackoff_max = \"1s\"\n").unwrap();
    let (name, root) = &roots[0];
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let cfg = config.display().to_string();
    let agent = agent(
        dir.path(),
        name,
        root,
        proxy.port,
        &["--http-listen", &listen, "--config", &cfg],
    );
    let m = |name: &str| agent_metric(port, name, &[]);
    let acked = wait_for(Duration::from_secs(30), || {
        m("commwatch_agent_acked_sequence").filter(|s| *s >= 8.0)
    })
    .unwrap_or_else(|| panic!("no acks through the proxy\n{}", agent.log_text()));

    proxy.forward.store(false, Ordering::Relaxed);
    // The agent buffers and notices the stall (no ack within ack_timeout).
    let stalled = wait_for(Duration::from_secs(20), || {
        let buffered = m("commwatch_agent_buffer_batches")?;
        let stalls = agent_metric(
            port,
            "commwatch_agent_disconnects_total",
            &[("cause", "stalled")],
        )?;
        (buffered >= 8.0 && stalls >= 1.0).then_some(buffered)
    });
    assert!(
        stalled.is_some(),
        "no stall detected or nothing buffered\n{}",
        agent.log_text()
    );
    let acked_in_stall = m("commwatch_agent_acked_sequence").unwrap();

    proxy.forward.store(true, Ordering::Relaxed);
    // It reconnects, resends, and the buffer drains.
    let recovered = wait_for(Duration::from_secs(30), || {
        let a = m("commwatch_agent_acked_sequence")?;
        let b = m("commwatch_agent_buffer_batches")?;
        (a >= acked_in_stall + 8.0 && b <= 4.0).then_some(a)
    });
    assert!(
        recovered.is_some(),
        "did not recover after the stall\n{}\n{}",
        agent.log_text(),
        collector.log_text()
    );
    assert!(acked_in_stall >= acked);
    assert!(m("commwatch_agent_resent_batches_total").unwrap() >= 1.0);
    assert_eq!(m("commwatch_agent_dropped_batches_total"), Some(0.0));
    let text = get_text(&format!("http://127.0.0.1:{http}/metrics")).unwrap();
    assert_eq!(
        metric(&text, "commwatch_collector_gap_batches_total", &[]).unwrap_or(0.0),
        0.0,
        "{text}"
    );
    let (rate, _) = hca(http, name).unwrap();
    let rate = rate.expect("rate after recovery");
    assert!((rate / TX as f64 - 1.0).abs() < 0.15, "rate {rate}");
}

// ---------------------------------------------------------------------------------------------------------------
// Disk full under the collector's state directory.
//
// `RLIMIT_FSIZE` lowered on the running collector with `prlimit --pid` makes every further write to its SQLite
// files fail with EFBIG, as a full disk fails them with ENOSPC: SQLite returns SQLITE_FULL / SQLITE_IOERR and the
// collector's error path runs. No mount (not allowed in CI containers) is needed. The collector is started with
// SIGXFSZ ignored (an ignored disposition survives exec) so the write fails instead of the signal killing it,
// and its stderr goes to a pipe (pipes are not subject to the limit) so its log lines survive.

/// A collector on `state`, its stderr collected in the returned log.
fn collector_with_state(grpc: u16, http: u16, state: &Path) -> (KillOnDrop, Arc<Mutex<String>>) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; exec \"$0\" \"$@\"")
        .arg(BIN)
        .args(["collector", "--grpc-listen"])
        .arg(format!("127.0.0.1:{grpc}"))
        .arg("--http-listen")
        .arg(format!("127.0.0.1:{http}"))
        .arg("--state-dir")
        .arg(state)
        .env("COMMWATCH_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn collector");
    let log = Arc::new(Mutex::new(String::new()));
    let sink = log.clone();
    let mut err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (KillOnDrop(child), log)
}

fn set_fsize(pid: u32, limit: &str) {
    let st = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--fsize={limit}"))
        .status()
        .expect("prlimit");
    assert!(st.success(), "prlimit --fsize={limit} failed");
}

/// `batches=N` of the collector's "replayed persisted state" log line (terminal colours, if any, removed).
fn replayed_batches(log: &str) -> Option<u64> {
    let line = log
        .lines()
        .find(|l| l.contains("replayed persisted state"))?;
    let mut plain = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|c| c.is_ascii_alphabetic());
        } else {
            plain.push(c);
        }
    }
    let at = plain.find("batches=")? + "batches=".len();
    let digits: String = plain[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Failure 5 of the hostile test: with the disk full, commits failed but acks went on, and after a restart the
/// acknowledged batches of the failure (~11 s) were missing. Now: while the state cannot be written the collector
/// still serves fresh data from memory, acknowledges nothing (the agent keeps the batches), and says so in its
/// log, `/healthz` and `commwatch_collector_persist_degraded`; with space again it commits what it held and acks
/// resume; killed then and restarted, it replays at least every batch the agent saw acknowledged.
#[test]
fn full_disk_stops_acks_until_the_state_is_written_and_loses_nothing_acked() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        commwatch_testdata::skip::unavailable(
            "prlimit is not installed (apt-get install util-linux)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster =
        commwatch_sim::Cluster::constant(&dir.path().join("trees"), 1, 1, TX, RX).unwrap();
    let roots = cluster.node_roots();
    let _updater = cluster.spawn_updater(Duration::from_millis(5));
    let (grpc, http) = (free_port(), free_port());
    let state = dir.path().join("state");
    let (guard, log) = collector_with_state(grpc, http, &state);
    let pid = guard.0.id();
    let log_text = || log.lock().unwrap().clone();
    let healthz = || get_text(&format!("http://127.0.0.1:{http}/healthz"));
    assert!(
        wait_for(Duration::from_secs(20), healthz).is_some(),
        "collector did not start\n{}",
        log_text()
    );
    let (name, root) = &roots[0];
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let agent = agent(dir.path(), name, root, grpc, &["--http-listen", &listen]);
    let acked = || agent_metric(port, "commwatch_agent_acked_sequence", &[]);
    let committed = wait_for(Duration::from_secs(30), || {
        collector_metric(http, "commwatch_collector_persist_commits_total").filter(|c| *c >= 5.0)
    });
    assert!(
        committed.is_some(),
        "nothing persisted\n{}\n{}",
        log_text(),
        agent.log_text()
    );

    // The disk is full from now on.
    set_fsize(pid, "0:unlimited");
    let errors = wait_for(Duration::from_secs(20), || {
        collector_metric(http, "commwatch_collector_persist_errors_total").filter(|e| *e >= 3.0)
    });
    assert!(errors.is_some(), "no persist errors\n{}", log_text());
    // What was durable before the first failure may still be acked within the ack interval.
    std::thread::sleep(Duration::from_millis(300));
    let acked_full = acked().unwrap();
    let degraded_gauge = collector_metric(http, "commwatch_collector_persist_degraded");
    let degraded_health = healthz();
    // Still serving fresh data from memory: the counter moves and the rate is right.
    let (_, before) = hca(http, name).expect("nodes while the disk is full");
    let fresh = wait_for(Duration::from_secs(10), || {
        let (rate, total) = hca(http, name)?;
        (total? > before?).then_some(rate?)
    })
    .unwrap_or_else(|| panic!("no fresh data with the disk full\n{}", log_text()));
    assert!((fresh / TX as f64 - 1.0).abs() < 0.15, "rate {fresh}");
    let text =
        get_text(&format!("http://127.0.0.1:{http}/metrics")).expect("metrics with the disk full");
    assert!(text.contains("commwatch_link_"), "{text}");
    std::thread::sleep(Duration::from_secs(2));
    let acked_still_full = acked().unwrap();

    // Space again: what was held is committed, and acks resume.
    let commits = collector_metric(http, "commwatch_collector_persist_commits_total").unwrap();
    set_fsize(pid, "unlimited:unlimited");
    let resumed = wait_for(Duration::from_secs(20), || {
        let c = collector_metric(http, "commwatch_collector_persist_commits_total")?;
        let a = acked()?;
        (c > commits && a >= acked_still_full + 4.0).then_some(a)
    });
    let recovered_health = healthz();

    // Killed now: everything the agent saw acknowledged is on disk.
    drop(guard);
    let acked_at_kill = acked().unwrap();
    let (guard, log2) = collector_with_state(grpc, http, &state);
    let replayed = wait_for(Duration::from_secs(20), || {
        replayed_batches(&log2.lock().unwrap())
    });
    eprintln!(
        "acked {acked_full} when the disk filled, {acked_still_full} 2 s later; {acked_at_kill} at the kill; \
         {replayed:?} batches replayed after the restart"
    );
    assert_eq!(
        acked_still_full,
        acked_full,
        "batches were acknowledged while the disk was full\n{}",
        log_text()
    );
    let replayed = replayed.unwrap_or_else(|| panic!("no replay\n{}", log2.lock().unwrap()));
    assert!(
        replayed as f64 >= acked_at_kill,
        "acknowledged batches missing after the restart: {replayed} replayed, {acked_at_kill} acknowledged"
    );
    assert!(
        resumed.is_some(),
        "commits and acks did not resume\n{}",
        log_text()
    );
    assert_eq!(degraded_gauge, Some(1.0), "persist_degraded while full");
    let said = degraded_health.unwrap_or_default();
    assert!(
        said.starts_with("degraded: "),
        "/healthz while full: {said:?}"
    );
    assert_eq!(recovered_health.as_deref(), Some("ok"));
    let text = log_text();
    assert!(text.contains("sqlite commit failed"), "no log line\n{text}");
    assert!(
        text.contains("acknowledgements resume"),
        "no recovery line\n{text}"
    );
    drop(agent);
    drop(guard);
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Clock skew of ±30 s between agents.

/// Seconds each step sleeps in the marker script.
const SLEEPS: [f64; 5] = [0.10, 0.30, 0.20, 0.45, 0.15];

fn faketime_available() -> bool {
    let ok = Command::new("faketime")
        .args(["-f", "+30s", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        commwatch_testdata::skip::unavailable(
            "faketime is not installed (apt-get install faketime)",
        );
    }
    ok
}

/// An agent under `faketime`, which forks the agent and waits for it: killing `faketime` alone would leave the
/// agent running, so the pair gets a process group of its own and the whole group is killed when dropped.
struct Skewed(Proc);

impl Drop for Skewed {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.child.id())])
            .status();
    }
}

fn skewed_agent(
    dir: &Path,
    skew: &str,
    name: &str,
    root: &Path,
    grpc: u16,
    http: u16,
    udp: u16,
) -> Skewed {
    let log = dir.join(format!("agent-{name}.log"));
    let child = Command::new("faketime")
        .args(["-f", skew, BIN, "agent", "--collector"])
        .arg(format!("http://127.0.0.1:{grpc}"))
        .args(["--node", name, "--sysfs-root"])
        .arg(root)
        .arg("--steps-udp")
        .arg(format!("127.0.0.1:{udp}"))
        .args(["--steps-socket", "off", "--http-listen"])
        .arg(format!("127.0.0.1:{http}"))
        .env("COMMWATCH_LOG", "info")
        // A skewed clock is the wall clock's: the monotonic clock that timers and timed waits count on is
        // the kernel's on every machine. libfaketime shifts both by default, and a timed wait on a shifted
        // monotonic deadline sleeps the skew longer (or not at all), which no real machine does.
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .process_group(0)
        .spawn()
        .expect("spawn faketime agent");
    Skewed(Proc { child, log })
}

#[test]
fn clock_skew_between_agents_keeps_steps_aligned() {
    if !faketime_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster =
        commwatch_sim::Cluster::constant(&dir.path().join("trees"), 2, 1, TX, RX).unwrap();
    let roots = cluster.node_roots();
    let _updater = cluster.spawn_updater(Duration::from_millis(5));
    let (grpc, http) = (free_port(), free_port());
    let collector = collector(dir.path(), "collector", grpc, http, &[]);
    let skews = ["+30s", "-30s"];
    let mut agents = Vec::new();
    let mut udp = Vec::new();
    for ((name, root), skew) in roots.iter().zip(skews) {
        let u = free_udp_port();
        agents.push(skewed_agent(
            dir.path(),
            skew,
            name,
            root,
            grpc,
            free_port(),
            u,
        ));
        udp.push(u);
    }
    for (name, _) in &roots {
        let up = wait_for(Duration::from_secs(30), || {
            get_json(&format!("http://127.0.0.1:{http}/api/v1/steps?node={name}"))
        });
        assert!(
            up.is_some(),
            "{name} never known\n{}\n{}",
            agents[0].0.log_text(),
            agents[1].0.log_text()
        );
    }

    // One rank per node, each sender under its agent's clock, both at once.
    let senders: Vec<_> = udp
        .iter()
        .zip(skews)
        .enumerate()
        .map(|(rank, (port, skew))| {
            let script = format!(
                r#"
import time
import commwatch_steps
m = commwatch_steps.StepMarker(job="skew-job", rank={rank}, socket_path="/nonexistent", udp="127.0.0.1:{port}")
for i, d in enumerate({SLEEPS:?}):
    with m.step(i, samples=8):
        time.sleep(d)
    time.sleep(0.05)
print(commwatch_steps.stats())
"#
            );
            Command::new("faketime")
                .args(["-f", skew, "python3", "-c", &script])
                .env(
                    "PYTHONPATH",
                    concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python"),
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("python3 under faketime")
        })
        .collect();
    for s in senders {
        let out = s.wait_with_output().expect("python3 under faketime");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let api = format!("http://127.0.0.1:{http}/api/v1/steps?job=skew-job");
    let v = wait_for(Duration::from_secs(20), || {
        let v = get_json(&api)?;
        let steps = v["steps"].as_array()?;
        (steps.len() >= SLEEPS.len()
            && steps
                .iter()
                .all(|s| s["nodes"].as_array().is_some_and(|n| n.len() == 2)))
        .then_some(v)
    })
    .unwrap_or_else(|| {
        panic!(
            "job steps never complete: {:#}\n{}",
            get_json(&api).unwrap_or_default(),
            collector.log_text()
        )
    });
    let steps = v["steps"].as_array().unwrap();
    let idx: Vec<u64> = steps.iter().map(|s| s["index"].as_u64().unwrap()).collect();
    assert_eq!(idx, vec![0, 1, 2, 3, 4], "{v:#}");
    for (s, want) in steps.iter().zip(SLEEPS) {
        let d = s["duration_s"].as_f64().unwrap();
        assert!(
            d >= 0.0 && (d - want).abs() < 0.030,
            "step {}: {d} s vs {want}",
            s["index"]
        );
        assert_eq!(s["nodes"].as_array().map(Vec::len), Some(2), "{s:#}");
        assert!(
            s["end_unix_s"].as_f64().unwrap() >= s["start_unix_s"].as_f64().unwrap(),
            "{s:#}"
        );
    }
    // Per node: the same step numbers with the slept durations, each on its own clock, 60 s apart.
    let per_node: Vec<Vec<(u64, f64, f64)>> = roots
        .iter()
        .map(|(name, _)| {
            let v = get_json(&format!("http://127.0.0.1:{http}/api/v1/steps?node={name}")).unwrap();
            v["steps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["job"] == "skew-job")
                .map(|s| {
                    (
                        s["index"].as_u64().unwrap(),
                        s["start_unix_s"].as_f64().unwrap(),
                        s["duration_s"].as_f64().unwrap(),
                    )
                })
                .collect()
        })
        .collect();
    for (i, want) in SLEEPS.iter().enumerate() {
        let at: Vec<&(u64, f64, f64)> = per_node
            .iter()
            .filter_map(|steps| steps.iter().find(|s| s.0 == i as u64))
            .collect();
        assert_eq!(at.len(), 2, "step {i} missing on a node: {per_node:?}");
        for (_, _, d) in &at {
            assert!(
                *d >= 0.0 && (d - want).abs() < 0.030,
                "step {i}: {d} vs {want}"
            );
        }
        // The skew is real: the +30 s node's step starts ~60 s after the -30 s node's (the two senders start
        // within a few seconds of each other).
        let apart = at[0].1 - at[1].1;
        assert!(
            (apart - 60.0).abs() < 5.0,
            "step {i}: clocks {apart} s apart"
        );
    }
    // No negative duration anywhere in the per-node views either, and rates stay right on both clocks.
    for (name, _) in &roots {
        let v = get_json(&format!("http://127.0.0.1:{http}/api/v1/steps?node={name}")).unwrap();
        for s in v["steps"].as_array().unwrap() {
            assert!(s["duration_s"].as_f64().unwrap() >= 0.0, "{s:#}");
            for l in s["links"].as_array().unwrap() {
                for k in ["active_s", "tx_bytes", "rx_bytes"] {
                    assert!(l[k].as_f64().unwrap_or(0.0) >= 0.0, "{l:#}");
                }
            }
        }
        let (rate, _) = hca(http, name).expect("node");
        let rate = rate.expect("rate");
        assert!((rate / TX as f64 - 1.0).abs() < 0.15, "{name}: rate {rate}");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// HTTP clients that never read.

#[test]
fn clients_that_never_read_do_not_block_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let cluster =
        commwatch_sim::Cluster::constant(&dir.path().join("trees"), 3, 2, TX, RX).unwrap();
    let roots = cluster.node_roots();
    let _updater = cluster.spawn_updater(Duration::from_millis(5));
    let (grpc, http) = (free_port(), free_port());
    let collector = collector(dir.path(), "collector", grpc, http, &[]);
    let ports: Vec<u16> = roots.iter().map(|_| free_port()).collect();
    let _agents: Vec<Proc> = roots
        .iter()
        .zip(&ports)
        .map(|((name, root), port)| {
            let listen = format!("127.0.0.1:{port}");
            agent(dir.path(), name, root, grpc, &["--http-listen", &listen])
        })
        .collect();
    let acked = |p: u16| agent_metric(p, "commwatch_agent_acked_sequence", &[]);
    let streaming = wait_for(Duration::from_secs(30), || {
        ports
            .iter()
            .all(|p| acked(*p).is_some_and(|a| a >= 4.0))
            .then_some(())
    });
    assert!(
        streaming.is_some(),
        "agents not streaming\n{}",
        collector.log_text()
    );

    // Clients that send a request and never read the answer, and clients that never finish their request.
    let mut held = Vec::new();
    for i in 0..120 {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", http)) else {
            continue;
        };
        let req = match i % 3 {
            0 => "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(8),
            1 => "GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\n\r\n".repeat(8),
            _ => "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ".to_string(),
        };
        let _ = s.write_all(req.as_bytes());
        held.push(s);
    }
    assert!(held.len() >= 100, "could not open the slow clients");
    let start: Vec<f64> = ports.iter().map(|p| acked(*p).unwrap()).collect();
    let (_, total0) = hca(http, &roots[0].0).expect("api with slow clients held");
    let t0 = Instant::now();
    // Acks keep rising on every agent and the counters at the collector keep moving.
    let flowing = wait_for(Duration::from_secs(20), || {
        let all = ports
            .iter()
            .zip(&start)
            .all(|(p, s)| acked(*p).is_some_and(|a| a >= s + 8.0));
        let (_, total) = hca(http, &roots[0].0)?;
        (all && total? > total0?).then_some(())
    });
    assert!(
        flowing.is_some(),
        "ingest stalled behind slow HTTP clients\n{}",
        collector.log_text()
    );
    // A normal scrape still works while the slow clients are held.
    let text = get_text(&format!("http://127.0.0.1:{http}/metrics")).expect("scrape");
    assert!(text.contains("commwatch_link_"));
    eprintln!(
        "{} slow clients held; acks advanced within {:?}",
        held.len(),
        t0.elapsed()
    );
    drop(held);
}

// ---------------------------------------------------------------------------------------------------------------
// Hostile files under the agent's sysfs root.

/// Runs `commwatch <args>`, killing it after `limit`: `(exit status or None when killed, stdout, stderr)`.
fn run_bounded(args: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("spawn commwatch");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break s.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    (status, read(&out), read(&err))
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let st = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(st.success(), "mkfifo {}", path.display());
}

#[test]
fn agent_once_refuses_a_fifo_a_link_out_and_a_loop_without_quoting_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sys");
    let port = root.join("class/infiniband/mlx5_0/ports/1");
    std::fs::create_dir_all(port.join("counters")).unwrap();
    for (f, v) in [
        ("state", "4: ACTIVE"),
        ("rate", "400 Gb/sec (4X NDR)"),
        ("link_layer", "InfiniBand"),
        ("counters/port_rcv_data", "200"),
        ("counters/link_downed", "1"),
    ] {
        std::fs::write(port.join(f), format!("{v}\n")).unwrap();
    }
    mkfifo(&port.join("counters/port_xmit_data"));
    std::fs::write(dir.path().join("secret"), "hunter2-secret-bytes\n").unwrap();
    std::os::unix::fs::symlink(
        dir.path().join("secret"),
        port.join("counters/symbol_error"),
    )
    .unwrap();
    std::os::unix::fs::symlink("port_rcv_errors", port.join("counters/port_rcv_errors")).unwrap();

    let t = Instant::now();
    let (status, out, err) = run_bounded(
        &[
            "agent",
            "--once",
            "--node",
            "t1",
            "--fast-period",
            "20ms",
            "--sysfs-root",
            root.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    let took = t.elapsed();
    eprintln!("agent --once on a tree with a FIFO took {took:?}");
    assert_eq!(
        status,
        Some(0),
        "--once hung or failed after {took:?}\n{err}"
    );
    assert!(!out.contains("hunter2") && !err.contains("hunter2"));
    let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    let link = &doc["links"][0];
    assert_eq!(link["device"], "mlx5_0");
    assert_eq!(link["rx_bytes_total"], 800);
    let errors = doc["errors"].to_string();
    for (file, why) in [
        ("counters/port_xmit_data", "not a regular file (a FIFO)"),
        ("counters/symbol_error", "resolves outside the root"),
        ("counters/port_rcv_errors", "symbolic links"),
    ] {
        assert!(
            errors.contains(&format!("{file}: ")) && errors.contains(why),
            "{file}: {why}\n{errors}"
        );
    }
}

#[test]
fn a_counter_turned_fifo_while_streaming_is_counted_and_sigterm_still_stops_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let cluster =
        commwatch_sim::Cluster::constant(&dir.path().join("trees"), 1, 1, TX, RX).unwrap();
    let roots = cluster.node_roots();
    let _updater = cluster.spawn_updater(Duration::from_millis(5));
    let (grpc, http) = (free_port(), free_port());
    let collector = collector(dir.path(), "collector", grpc, http, &[]);
    let (name, root) = &roots[0];
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, "discover_period = \"1s\"\n").unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut a = agent(
        dir.path(),
        name,
        root,
        grpc,
        &[
            "--http-listen",
            &listen,
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let up = wait_for(Duration::from_secs(30), || hca(http, name)?.1);
    assert!(up.is_some(), "no counter\n{}", a.log_text());

    // The receive counter becomes a FIFO (the simulator keeps writing the old file, now unlinked).
    let rcv = root.join("class/infiniband/mlx5_0/ports/1/counters/port_rcv_data");
    mkfifo(&rcv);
    let errors = |p| {
        agent_metric(
            p,
            "commwatch_agent_source_read_errors_total",
            &[("source", "infiniband")],
        )
    };
    let counted = wait_for(Duration::from_secs(15), || {
        (errors(port)? >= 3.0).then_some(())
    });
    assert!(counted.is_some(), "FIFO not counted\n{}", a.log_text());
    // The other counters go on: the transmit total at the collector still rises.
    let (_, before) = hca(http, name).unwrap();
    let moving = wait_for(Duration::from_secs(15), || {
        (hca(http, name)?.1? > before?).then_some(())
    });
    assert!(moving.is_some(), "reads stopped\n{}", a.log_text());
    assert_eq!(
        agent_metric(
            port,
            "commwatch_agent_source_stalled",
            &[("source", "infiniband")]
        ),
        Some(0.0)
    );

    let t = Instant::now();
    let status = a.terminate();
    let took = t.elapsed();
    eprintln!("SIGTERM to exit with a FIFO among the counters: {took:?}");
    assert!(
        status.is_some_and(|s| s.success()),
        "agent did not stop on SIGTERM within 10 s ({status:?})\n{}",
        a.log_text()
    );
    drop(collector);
}

// ---------------------------------------------------------------------------------------------------------------
// Idle connections against the collector's descriptor limit.

/// Twenty thousand idle connections to the gRPC port used to exhaust the collector's descriptors: `/healthz`
/// and new agents timed out. Here the collector runs with 512 descriptors and caps that fit them (what the
/// start-up check asks: 150 gRPC and 64 HTTP connections), and 700 idle connections arrive at once: those over
/// the cap are closed at accept, the rest at the handshake deadline, `/healthz` answers throughout, and an agent
/// gets in. (700 stays under the 1,024 descriptors a test process may have.)
#[test]
fn an_idle_connection_flood_does_not_starve_the_collector() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        commwatch_testdata::skip::unavailable(
            "prlimit is not installed (apt-get install util-linux)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster =
        commwatch_sim::Cluster::constant(&dir.path().join("trees"), 1, 1, TX, RX).unwrap();
    let roots = cluster.node_roots();
    let _updater = cluster.spawn_updater(Duration::from_millis(5));
    let config = dir.path().join("collector.toml");
    std::fs::write(
        &config,
        "[limits]\nmax_grpc_connections = 150\nmax_grpc_connections_per_peer = 150\n\
         max_http_connections = 64\ngrpc_handshake_timeout = \"2s\"\n",
    )
    .unwrap();
    let (grpc, http) = (free_port(), free_port());
    let log = dir.path().join("collector.log");
    let child = Command::new("prlimit")
        .args(["--nofile=512:512", "--", BIN, "collector"])
        .args(["--grpc-listen", &format!("127.0.0.1:{grpc}")])
        .args(["--http-listen", &format!("127.0.0.1:{http}")])
        .arg("--config")
        .arg(&config)
        .env("COMMWATCH_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn collector");
    let _guard = KillOnDrop(child);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let healthz = || get_text(&format!("http://127.0.0.1:{http}/healthz"));
    assert!(
        wait_for(Duration::from_secs(20), healthz).is_some(),
        "collector did not start\n{}",
        log_text()
    );
    let flood_started = Instant::now();
    let mut idle: Vec<TcpStream> = (0..700)
        .map(|_| TcpStream::connect(("127.0.0.1", grpc)).expect("connect"))
        .collect();
    for _ in 0..5 {
        assert_eq!(healthz().as_deref(), Some("ok"), "{}", log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    let (name, root) = &roots[0];
    let agent_http = free_port();
    let agent_listen = format!("127.0.0.1:{agent_http}");
    let agent = agent(
        dir.path(),
        name,
        root,
        grpc,
        &["--http-listen", &agent_listen],
    );
    let nodes = wait_for(Duration::from_secs(20), || {
        let n = get_json(&format!("http://127.0.0.1:{http}/api/v1/nodes"))?;
        node(&n, name).map(|_| ())
    });
    assert!(
        nodes.is_some(),
        "the agent did not get in\n{}\n{}",
        log_text(),
        agent.log_text()
    );
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 16];
        assert!(
            matches!(s.read(&mut buf), Ok(0) | Err(_)),
            "an idle connection is still open"
        );
    }
    eprintln!(
        "700 idle connections closed within {:?}",
        flood_started.elapsed()
    );
    let refused = |reason: &str| {
        metric(
            &get_text(&format!("http://127.0.0.1:{http}/metrics"))?,
            "commwatch_collector_grpc_connections_refused_total",
            &[("reason", reason)],
        )
    };
    // The agent's own attempts while the cap was full are refused too (it retries until it gets in): every
    // attempt it counted but the last, which got in (a counter it has not incremented is not exported yet).
    // One attempt can reach the collector twice (seen here: 4 refusals for 3 attempts; the gRPC channel
    // reconnects when its connection drops before the request), so the bound is twice the attempts.
    let agent_refused = || {
        let text = get_text(&format!("http://127.0.0.1:{agent_http}/metrics"))?;
        let attempts = |result: &str| {
            metric(
                &text,
                "commwatch_agent_connects_total",
                &[("result", result)],
            )
            .unwrap_or(0.0)
        };
        Some(attempts("ok") + attempts("error") - 1.0)
    };
    // Counted as they are closed (the last just after its client saw it): all 700 and the agent's, no more.
    let both = || {
        let (a, d) = (refused("listener_limit")?, refused("handshake_timeout")?);
        let e = agent_refused()?;
        (a + d >= 700.0 + e).then_some((a + d, e))
    };
    let counted = wait_for(Duration::from_secs(5), both);
    let (at_accept, at_deadline) = (refused("listener_limit"), refused("handshake_timeout"));
    let said = format!(
        "700 idle connections and the agent's {:?} refused attempts: over the cap {at_accept:?}, at the \
         deadline {at_deadline:?}\n{}",
        agent_refused(),
        agent.log_text()
    );
    let (total, e) = counted.unwrap_or_else(|| panic!("not all counted: {said}"));
    // The agent's attempts, each counted at most twice, and at least one of them: a connection of the agent's
    // may be refused at the cap without its counter seeing a failed attempt (seen once at load average ~10:
    // 701 refused for an agent that counted none; how it escapes the counter is not established).
    assert!(
        total <= 700.0 + 2.0 * e.max(1.0),
        "more than the flood and the agent: {said}"
    );
    assert!(
        !log_text().contains("the open-file limit is"),
        "the caps fit the limit: no warning\n{}",
        log_text()
    );
    drop(agent);
}

// ---------------------------------------------------------------------------------------------------------------
// Hostile baselines (failures 1 and 4 of the hostile test).

fn post_baseline_body(http: u16, body: String) -> (u16, serde_json::Value) {
    let r = client()
        .post(format!("http://127.0.0.1:{http}/api/v1/baselines"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .expect("an answer");
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(serde_json::Value::Null))
}

fn collectives(n: usize, gbps: &str) -> String {
    let tests: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"collective":"c{i}","peak_busbw_gbps":{gbps}}}"#))
        .collect();
    format!(r#"{{"tests":[{}]}}"#, tests.join(","))
}

/// One POST of `1e300` GB/s once stopped every later start ("invalid type: null, expected f64"), and 40,000
/// collectives in one POST held the collector for minutes. Now both are refused naming the field or the limit,
/// what a `200` acknowledged survives a SIGKILL, and the collector starts again on its state.
#[test]
fn hostile_baselines_are_refused_and_a_killed_collector_starts_again() {
    let state = tempfile::tempdir().unwrap();
    let (grpc, http) = (free_port(), free_port());
    let healthy = |http: u16| {
        wait_for(Duration::from_secs(20), || {
            get_text(&format!("http://127.0.0.1:{http}/healthz"))
        })
    };
    let (c, log) = collector_with_state(grpc, http, state.path());
    assert!(healthy(http).is_some(), "{}", log.lock().unwrap());
    let (code, answer) = post_baseline_body(http, collectives(1, "1e300"));
    assert_eq!(code, 400, "{answer}");
    assert_eq!(answer["field"], "tests[0].peak_busbw_gbps", "{answer}");
    let (code, answer) = post_baseline_body(http, collectives(40_000, "100.0"));
    assert_eq!(code, 413, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap_or_default()
            .contains("at most 256 tests"),
        "{answer}"
    );
    let (code, answer) = post_baseline_body(http, collectives(3, "48.89"));
    assert_eq!(code, 200, "{answer}");
    drop(c); // SIGKILL

    let (_c, log) = collector_with_state(grpc, http, state.path());
    assert!(
        healthy(http).is_some(),
        "the collector did not start again: {}",
        log.lock().unwrap()
    );
    let kept = get_json(&format!("http://127.0.0.1:{http}/api/v1/baselines")).expect("baselines");
    assert_eq!(kept["bare"].as_array().map(Vec::len), Some(3), "{kept}");
}

// ---------------------------------------------------------------------------------------------------------------
// Findings history after node churn (#34, item 7): 40,000 findings and their events in the state database used
// to be kept for good and all decoded at every start.

/// Writes `n` findings to the history in `state`: all but 2,000 raised and cleared at ages spread over 60 days,
/// the last 2,000 raised and still active.
fn churned_history(state: &Path, n: usize) {
    use commwatch_collector::analysis::history::History;
    use commwatch_collector::analysis::tracker::Change;
    use commwatch_collector::analysis::{Evidence, Finding, FindingKind, Severity, Subject};
    std::fs::create_dir_all(state).unwrap();
    let now = commwatch_model::clock::unix_now_s();
    let finding = |i: usize, seen: f64| Finding {
        id: format!("link_errors:node-{i:05}:mlx5_0:1"),
        kind: FindingKind::LinkErrors,
        severity: Severity::Critical,
        subject: Subject {
            node: format!("node-{i:05}"),
            device: Some("mlx5_0".into()),
            port: Some("1".into()),
            ..Default::default()
        },
        summary: format!("node-{i:05} mlx5_0 port 1 error counters rising"),
        evidence: Evidence::new(3.0, "errors_per_second").expected(0.0),
        action: "reseat".into(),
        first_seen_unix_s: seen - 600.0,
        last_seen_unix_s: seen,
        active: true,
        root: true,
        caused_by: None,
        consequences: vec![],
    };
    let mut h = History::open(state).unwrap();
    let cleared = n - 2000;
    let seen = |i: usize| now - 60.0 * 86_400.0 * (i as f64 / cleared as f64);
    let raised: Vec<Change> = (0..cleared)
        .map(|i| Change::Raised(finding(i, seen(i))))
        .collect();
    h.record(&raised, now - 61.0 * 86_400.0).unwrap();
    let gone: Vec<Change> = (0..cleared)
        .map(|i| {
            let mut f = finding(i, seen(i));
            f.active = false;
            Change::Cleared(f)
        })
        .collect();
    h.record(&gone, now - 61.0 * 86_400.0).unwrap();
    let active: Vec<Change> = (cleared..n)
        .map(|i| Change::Raised(finding(i, now)))
        .collect();
    h.record(&active, now).unwrap();
}

#[test]
fn a_churned_findings_history_is_pruned_and_a_start_loads_only_what_it_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    churned_history(&state, 40_000);
    let (grpc, http) = (free_port(), free_port());
    let (_guard, log) = collector_with_state(grpc, http, &state);
    let healthz = || get_text(&format!("http://127.0.0.1:{http}/healthz"));
    assert!(
        wait_for(Duration::from_secs(30), healthz).is_some(),
        "collector did not start\n{}",
        log.lock().unwrap()
    );
    // Pruned right after the start: the 38,000 cleared ones older than 14 days (about 29,100) go, with their
    // events (their raises were written 61 days ago: every cleared one's raise goes too).
    let pruned = |record: &str| {
        let text = get_text(&format!("http://127.0.0.1:{http}/metrics"))?;
        metric(
            &text,
            "commwatch_collector_history_pruned_total",
            &[("record", record)],
        )
        .filter(|v| *v > 0.0)
    };
    let findings = wait_for(Duration::from_secs(60), || pruned("finding"))
        .unwrap_or_else(|| panic!("nothing pruned\n{}", log.lock().unwrap()));
    assert!((28_000.0..30_000.0).contains(&findings), "{findings}");
    assert!(pruned("event").is_some_and(|e| e >= 38_000.0));
    // The start restored what the tracker keeps: the 2,000 that were active are among the first 1,000 it
    // takes, so the list holds 1,000, none of them past the retention.
    let listed = get_json(&format!("http://127.0.0.1:{http}/api/v1/findings"))
        .and_then(|v| v.as_array().map(|a| a.len()))
        .unwrap_or(0);
    assert_eq!(listed, 1000);
}
