//! Faults from hostile peers and inputs, with real processes on loopback (round two of the hostile probes):
//! connection floods on the probe listeners, shards that accept and never answer, a collector that sends an
//! endless answer, a thousand unreachable shards, and a text input too large to read. Each test asserts the
//! outcome — refused, closed, counted, reported — never that the machine was fast.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// Descriptors the process `pid` holds now.
fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// This process's soft limit on open files (`/proc/self/limits`), 1024 when it cannot be read.
fn open_files_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(3)?.parse().ok()
        })
        .unwrap_or(1024)
}

/// Runs `commwatch args` to its end (killed after `limit`, a guard against a hang only): exit code, stdout,
/// stderr.
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

fn token_file(dir: &Path, token: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("probe-token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

/// Opens `n` connections to `addr`, each sending `first` (may be empty); those the kernel accepted.
fn flood(addr: SocketAddr, n: usize, first: &[u8]) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..n {
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            let _ = s.write_all(first);
            held.push(s);
        }
    }
    held
}

/// How many of `held` the server has closed (a read returns end of stream or an error at once).
fn closed_count(held: &mut [TcpStream]) -> usize {
    held.iter_mut()
        .filter_map(|s| {
            s.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            let mut b = [0u8; 64];
            let closed = match s.read(&mut b) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
            };
            closed.then_some(())
        })
        .count()
}

#[test]
fn a_connection_flood_on_the_agents_probe_port_leaves_its_metrics_up() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = commwatch_sim::Cluster::constant(
        &dir.path().join("trees"),
        1,
        1,
        1_000_000_000,
        1_000_000_000,
    )
    .unwrap();
    let roots = cluster.node_roots();
    let (name, root) = &roots[0];
    let (http, probe) = (free_port(), free_port());
    let token = token_file(dir.path(), "s3cret");
    let listen = format!("127.0.0.1:{http}");
    let probe_listen = format!("127.0.0.1:{probe}");
    let agent = agent(
        dir.path(),
        name,
        root,
        free_port(),
        &[
            "--http-listen",
            &listen,
            "--probe-listen",
            &probe_listen,
            "--probe-token-file",
            &token,
        ],
    );
    let healthz = || get_text(&format!("http://{listen}/healthz"));
    assert!(
        wait_for(Duration::from_secs(20), healthz).is_some(),
        "agent did not start\n{}",
        agent.log_text()
    );
    let before = descriptors(agent.child.id());
    // 1,100 connections without a token: more than a default 1,024-descriptor process could hold (fewer
    // where this test's own limit is lower).
    let n = 1100.min(open_files_limit().saturating_sub(100));
    let mut held = flood(probe_listen.parse().unwrap(), n, b"");
    assert!(
        held.len() + 10 >= n,
        "only {} connections opened",
        held.len()
    );
    let during = descriptors(agent.child.id());
    assert!(
        healthz().is_some(),
        "/healthz down during the flood\n{}",
        agent.log_text()
    );
    // Every connection is either refused at accept or admitted within the cap and closed at the handshake
    // deadline (a flood slower than that deadline, on a busy machine, gets more than the cap's worth admitted
    // over its course, never more than the cap at once); the last ones leave the backlog in a moment.
    let counted = |m: &str| {
        let refused = metric(m, "commwatch_agent_probe_connections_refused_total", &[])?;
        let timed_out = metric(m, "commwatch_agent_probe_handshake_timeouts_total", &[])?;
        Some((refused, timed_out))
    };
    let refused = wait_for(Duration::from_secs(40), || {
        let m = get_text(&format!("http://{listen}/metrics"))?;
        let (refused, timed_out) = counted(&m)?;
        (refused + timed_out >= (held.len() - 40) as f64 && refused > 0.0).then_some(refused)
    });
    let refused = refused.unwrap_or_else(|| {
        panic!(
            "fewer than {} refused or timed out: {:?}",
            held.len() - 40,
            get_text(&format!("http://{listen}/metrics")).and_then(|m| counted(&m))
        )
    });
    // The agent holds the cap's worth, not the flood: the rest were closed at accept.
    assert!(
        during < before + 100,
        "descriptors {before} before, {during} during the flood"
    );
    // The ones admitted say nothing: closed at the handshake deadline, counted.
    let timed_out = wait_for(Duration::from_secs(30), || {
        let m = get_text(&format!("http://{listen}/metrics"))?;
        let n = metric(&m, "commwatch_agent_probe_handshake_timeouts_total", &[])?;
        (n >= 32.0).then_some(n)
    });
    assert!(timed_out.is_some(), "no handshake timeouts counted");
    assert!(closed_count(&mut held) >= held.len() - 40);
    println!("agent probe flood: {before} descriptors before, {during} during; {refused} refused");
}

#[test]
fn probe_serve_closes_half_sent_hellos_and_still_answers_a_probe() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "s3cret");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let server = Proc::spawn(
        &[
            "probe".into(),
            "serve".into(),
            "--listen".into(),
            listen.clone(),
            "--token-file".into(),
            token.clone(),
            "--max-duration".into(),
            "5s".into(),
        ],
        dir.path().join("serve.log"),
    );
    let up = wait_for(Duration::from_secs(20), || TcpStream::connect(&listen).ok());
    assert!(
        up.is_some(),
        "probe serve did not start\n{}",
        server.log_text()
    );
    drop(up);
    // A control header announcing 100 bytes and 10 of them, on 600 connections.
    let mut half = vec![1u8, 0, 0, 0, 100];
    half.extend_from_slice(b"{\"hello\":{");
    let mut held = flood(listen.parse().unwrap(), 600, &half);
    let during = descriptors(server.child.id());
    assert!(during < 150, "probe serve holds {during} descriptors");
    // Every one is closed: over the cap at once, the admitted ones at the handshake deadline.
    let all = wait_for(Duration::from_secs(30), || {
        (closed_count(&mut held) == held.len()).then_some(())
    });
    assert!(
        all.is_some(),
        "half-sent hellos kept\n{}",
        server.log_text()
    );
    // A client with the token is still served.
    let (code, out, err) = run_bounded(
        &[
            "probe",
            "run",
            "--target",
            &listen,
            "--token-file",
            &token,
            "--duration",
            "1s",
            "--size",
            "65536",
            "--format",
            "json",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        r["tx_bytes_per_second"].as_f64().unwrap_or(0.0) > 0.0,
        "{out}"
    );
    // The log says so in a few lines, not one per connection.
    let log = server.log_text();
    let lines = log
        .lines()
        .filter(|l| l.contains("probe connection"))
        .count();
    assert!(lines <= 10, "{lines} lines for 600 connections:\n{log}");
}

/// `n` listeners that accept connections and never answer; the most connections open at once over all.
fn hanging_listeners(n: usize) -> (Vec<SocketAddr>, Arc<AtomicUsize>) {
    let open = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut addrs = Vec::new();
    for _ in 0..n {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        addrs.push(l.local_addr().unwrap());
        let (open, most) = (open.clone(), most.clone());
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let now = open.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let open = open.clone();
                std::thread::spawn(move || {
                    let mut s = s;
                    let mut b = [0u8; 4096];
                    // Reads the request and never answers, until the client goes.
                    while matches!(s.read(&mut b), Ok(n) if n > 0) {}
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
    }
    (addrs, most)
}

#[test]
fn status_asks_twenty_hanging_shards_at_once_and_reports_each() {
    let (addrs, most) = hanging_listeners(20);
    let urls: Vec<String> = addrs.iter().map(|a| format!("http://{a}")).collect();
    let list = urls.join(",");
    let (code, out, err) = run_bounded(
        &[
            "status",
            "--collector",
            &list,
            "--timeout",
            "2s",
            "--format",
            "json",
        ],
        Duration::from_secs(120),
    );
    assert_eq!(code, Some(1), "{out}\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let shards = doc["collectors"].as_array().expect("collectors");
    assert_eq!(shards.len(), 20, "{out}");
    for s in shards {
        let text = s.to_string();
        assert!(text.contains("no whole answer within 2s"), "{text}");
    }
    // Asked at once: every shard had its connection open at the same time.
    assert_eq!(most.load(Ordering::SeqCst), 20);
}

/// A collector stand-in: `/healthz` answers `ok`, anything else an endless JSON-looking body.
fn endless_collector() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut b = [0u8; 4096];
                let n = s.read(&mut b).unwrap_or(0);
                let req = String::from_utf8_lossy(&b[..n]).to_string();
                if req.starts_with("GET /healthz") {
                    let _ = s.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    );
                    return;
                }
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n[");
                let chunk = vec![b' '; 1 << 20];
                while s.write_all(&chunk).is_ok() {}
            });
        }
    });
    addr
}

#[test]
fn the_cli_stops_reading_an_endless_answer_at_its_limit() {
    let addr = endless_collector();
    let url = format!("http://{addr}");
    let (code, out, err) = run_bounded(
        &["status", "--collector", &url, "--timeout", "300s"],
        Duration::from_secs(300),
    );
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("over the limit of 268435456 bytes on a response body"),
        "{err}"
    );
    // The timeout covers the body too: a shorter one ends the same read.
    let (code, _, err) = run_bounded(
        &["findings", "--collector", &url, "--timeout", "1s"],
        Duration::from_secs(120),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("no whole answer within 1s") || err.contains("over the limit"),
        "{err}"
    );
}

#[test]
fn an_agent_given_a_thousand_unreachable_shards_logs_a_few_lines() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("sysfs");
    std::fs::create_dir_all(&tree).unwrap();
    // Ports bound then released: nothing listens there.
    let shards: Vec<String> = (0..1000)
        .map(|_| format!("http://127.0.0.1:{}", free_port()))
        .collect();
    let list = shards.join(",");
    let http = free_port();
    let listen = format!("127.0.0.1:{http}");
    let args: Vec<String> = [
        "agent",
        "--collector",
        &list,
        "--node",
        "n1",
        "--sysfs-root",
        &tree.display().to_string(),
        "--steps-udp",
        "off",
        "--steps-socket",
        "off",
        "--http-listen",
        &listen,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let agent = Proc::spawn(&args, dir.path().join("agent.log"));
    // Until it has failed at least 500 connections (each counted)…
    let failed = wait_for(Duration::from_secs(60), || {
        let m = get_text(&format!("http://{listen}/metrics"))?;
        let n = metric(&m, "commwatch_agent_connects_total", &[("result", "error")])?;
        (n >= 500.0).then_some(n)
    });
    let log = agent.log_text();
    assert!(failed.is_some(), "few connection failures\n{log}");
    let lines = log
        .lines()
        .filter(|l| {
            l.contains("cannot connect to the collector")
                || l.contains("trying the next shard")
                || l.contains("stream to the collector ended")
        })
        .count();
    // …and said so in a few summary lines, each with the number held back.
    assert!(
        lines <= 30,
        "{lines} lines for {failed:?} failures:\n{}",
        log.lines().take(40).collect::<Vec<_>>().join("\n")
    );
    assert!(log.contains("held_back="), "{log}");
}

const NCCL_TESTS: &str = "\
#  nThread 1 nGpus 1 minBytes 1048576 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    100.0   10.49   19.66      0    100.0   10.49   19.66      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 19.66
";

#[test]
fn diagnose_refuses_a_text_input_over_its_limit_and_reads_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("huge.log");
    // 2 GiB, sparse: costs no disk, and is refused before a byte is read.
    std::fs::File::create(&big)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let tests = dir.path().join("allreduce.txt");
    std::fs::write(&tests, NCCL_TESTS).unwrap();
    let (code, out, err) = run_bounded(
        &[
            "diagnose",
            "--nccl-log",
            big.to_str().unwrap(),
            "--nccl-tests",
            tests.to_str().unwrap(),
            "--format",
            "json",
        ],
        Duration::from_secs(120),
    );
    assert!(code.is_some(), "diagnose did not end\n{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}\n{err}"));
    let inputs = doc["inputs"].as_array().expect("inputs");
    let of = |path: &Path| {
        inputs
            .iter()
            .find(|i| i["path"] == path.display().to_string())
            .unwrap_or_else(|| panic!("{} not listed: {out}", path.display()))
    };
    let huge = of(&big);
    assert_eq!(huge["status"], "error", "{huge}");
    let said = huge.to_string();
    assert!(
        said.contains("2147483648 bytes, over the limit of 268435456 bytes"),
        "{said}"
    );
    assert_eq!(of(&tests)["status"], "ok", "{out}");
    assert_eq!(doc["nccl_tests"].as_array().map(Vec::len), Some(1), "{out}");
}

#[test]
fn wrong_tokens_on_the_collectors_http_are_counted_and_warned_about_once() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("api-token");
    std::fs::write(&token, "s3cret\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (grpc, http) = (free_port(), free_port());
    let token_arg = token.display().to_string();
    let c = collector(
        dir.path(),
        "collector",
        grpc,
        http,
        &["--api-token-file", &token_arg],
    );
    let base = format!("http://127.0.0.1:{http}");
    let web = client();
    for i in 0..20 {
        let r = web
            .get(format!("{base}/api/v1/nodes"))
            .bearer_auth(format!("guess-{i}"))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
    }
    for i in 0..5 {
        let r = web
            .post(format!("{base}/login"))
            .header("origin", &base)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token=guess-{i}"))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 401, "{:?}", r.text());
    }
    let m = get_text(&format!("{base}/metrics")).unwrap();
    let failures = |surface: &str| {
        metric(
            &m,
            "commwatch_collector_auth_failures_total",
            &[("surface", surface)],
        )
    };
    assert_eq!(failures("api"), Some(20.0));
    assert_eq!(failures("login"), Some(5.0));
    assert_eq!(failures("page"), Some(0.0));
    let log = c.log_text();
    let warned = log
        .lines()
        .filter(|l| l.contains("refused for a missing or wrong token"))
        .count();
    assert_eq!(warned, 2, "one line per surface:\n{log}");
}
