//! Hostile files under the roots the agent reads, and sources that never answer: a FIFO or a symbolic-link
//! loop where a counter should be, a counter linked out of the sysfs root, a read that blocks for good. Each
//! is refused or reported without blocking the agent, and no error quotes what a file holds.
//!
//! Every test bounds its wait: a source that blocks fails the test instead of hanging it.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_agent::source::host::{HostBackend, HostReading};
use commwatch_agent::source::infiniband::InfinibandSource;
use commwatch_agent::source::netdev::{NetdevOptions, NetdevSource};
use commwatch_agent::source::{ReadReport, Source, SourceError, Tier, Value};
use commwatch_agent::{AgentConfig, AgentExtras};

/// How long a read may take before the test calls it blocked.
const BLOCKED: Duration = Duration::from_secs(10);

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn mkfifo(path: &Path) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let _ = fs::remove_file(path);
    let st = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(st.success(), "mkfifo {}", path.display());
}

/// One InfiniBand port with its data counters, state and rate.
fn ib_port(root: &Path) -> std::path::PathBuf {
    let p = root.join("class/infiniband/mlx5_0/ports/1");
    write(&p.join("state"), "4: ACTIVE\n");
    write(&p.join("rate"), "400 Gb/sec (4X NDR)\n");
    write(&p.join("link_layer"), "InfiniBand\n");
    write(&p.join("counters/port_xmit_data"), "100\n");
    write(&p.join("counters/port_rcv_data"), "200\n");
    write(&p.join("counters/symbol_error"), "3\n");
    p
}

/// What one discovery and one sample of `tier` gave: `(metric, value)` pairs and the report.
struct Outcome {
    values: Vec<(String, Value)>,
    report: ReadReport,
    metrics: Vec<String>,
}

impl Outcome {
    fn value(&self, metric: &str) -> Option<Value> {
        self.values
            .iter()
            .find(|(m, _)| m == metric)
            .map(|(_, v)| *v)
    }

    fn errors(&self) -> Vec<String> {
        self.report.errors.iter().map(|e| e.to_string()).collect()
    }
}

/// Discovers and samples `tier` on another thread, failing the test when that does not finish within
/// [`BLOCKED`] (the thread is left behind, blocked).
fn discover_and_sample(mut src: impl Source + 'static, tier: Tier) -> Outcome {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        src.discover().expect("discover");
        let mut raw = Vec::new();
        let report = src.sample(tier, &mut |i, v| raw.push((i, v)));
        let inv = src.inventory();
        let values = raw
            .into_iter()
            .map(|(i, v)| (inv.series[i].metric.clone(), v))
            .collect();
        let metrics = inv.series.iter().map(|s| s.metric.clone()).collect();
        let _ = tx.send(Outcome {
            values,
            report,
            metrics,
        });
    });
    rx.recv_timeout(BLOCKED)
        .expect("the source blocked on a hostile file")
}

#[test]
fn a_fifo_counter_file_is_refused_at_once_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let port = ib_port(dir.path());
    mkfifo(&port.join("counters/port_xmit_data"));
    let t = Instant::now();
    let out = discover_and_sample(InfinibandSource::new(dir.path().to_path_buf()), Tier::Fast);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(out.value("rx_bytes"), Some(Value::Counter(800)));
    assert_eq!(out.value("tx_bytes"), None);
    // In the inventory, failing: a counted read error that names the path, not silence.
    assert!(out.metrics.iter().any(|m| m == "tx_bytes"));
    assert_eq!(out.report.failed, 1, "{:?}", out.errors());
    let e = &out.errors()[0];
    assert!(e.contains("counters/port_xmit_data"), "{e}");
    assert!(e.contains("not a regular file"), "{e}");
    assert!(e.contains("FIFO"), "{e}");
}

#[test]
fn a_fifo_among_netdev_statistics_does_not_hang_agent_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let eth0 = root.join("class/net/eth0");
    write(&eth0.join("type"), "1\n");
    write(&eth0.join("operstate"), "up\n");
    write(&eth0.join("statistics/tx_bytes"), "5\n");
    mkfifo(&eth0.join("statistics/rx_bytes"));
    mkfifo(&eth0.join("mtu"));
    let config = AgentConfig {
        node: "n1".into(),
        sysfs_root: root.to_path_buf(),
        sources: vec!["netdev".into()],
        fast_period: Duration::from_millis(10),
        ..AgentConfig::default()
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(commwatch_agent::once::run_once(&config));
    });
    let doc = rx.recv_timeout(BLOCKED).expect("--once blocked on a FIFO");
    let errors = doc["errors"].to_string();
    assert!(errors.contains("statistics/rx_bytes"), "{errors}");
    assert!(errors.contains("not a regular file"), "{errors}");
    let eth = &doc["links"][0];
    assert_eq!(eth["device"], "eth0");
    assert_eq!(eth["tx_bytes_total"], 5);
}

#[test]
fn a_counter_linked_out_of_the_root_is_refused_and_never_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sys");
    let outside = dir.path().join("outside");
    write(&outside.join("secret"), "hunter2-secret-bytes\n");
    write(&outside.join("hw/leaked_name"), "7\n");
    let port = ib_port(&root);
    fs::remove_file(port.join("counters/port_xmit_data")).unwrap();
    symlink(outside.join("secret"), port.join("counters/port_xmit_data")).unwrap();
    // A directory linked out of the root: its file names must not become series either.
    symlink(outside.join("hw"), port.join("hw_counters")).unwrap();
    let out = discover_and_sample(InfinibandSource::new(root.clone()), Tier::Fast);
    assert_eq!(out.value("tx_bytes"), None);
    assert_eq!(out.value("rx_bytes"), Some(Value::Counter(800)));
    assert!(
        !out.metrics.iter().any(|m| m.contains("leaked")),
        "{:?}",
        out.metrics
    );
    let errors = out.errors();
    assert_eq!(out.report.failed, 1, "{errors:?}");
    assert!(errors[0].contains("counters/port_xmit_data"), "{errors:?}");
    assert!(errors[0].contains("outside"), "{errors:?}");
    for e in &errors {
        assert!(!e.contains("hunter2"), "a file's content quoted: {e}");
    }
}

#[test]
fn an_unparseable_file_is_named_but_never_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let port = ib_port(dir.path());
    write(&port.join("counters/port_xmit_data"), "TOKEN=s3cr3t\n");
    let out = discover_and_sample(InfinibandSource::new(dir.path().to_path_buf()), Tier::Fast);
    let errors = out.errors();
    assert_eq!(out.report.failed, 1, "{errors:?}");
    assert!(errors[0].contains("counters/port_xmit_data"), "{errors:?}");
    assert!(!errors[0].contains("s3cr3t"), "{errors:?}");
    assert!(!format!("{:?}", out.report.errors).contains("s3cr3t"));
}

#[test]
fn a_symlink_loop_is_a_counted_error_not_an_absent_counter() {
    let dir = tempfile::tempdir().unwrap();
    let port = ib_port(dir.path());
    let file = port.join("counters/port_xmit_data");
    fs::remove_file(&file).unwrap();
    symlink("port_xmit_data", &file).unwrap();
    let out = discover_and_sample(InfinibandSource::new(dir.path().to_path_buf()), Tier::Fast);
    assert_eq!(out.value("tx_bytes"), None);
    let errors = out.errors();
    assert_eq!(out.report.failed, 1, "{errors:?}");
    assert!(errors[0].contains("counters/port_xmit_data"), "{errors:?}");
    assert!(
        matches!(&out.report.errors[0], SourceError::Io { .. }),
        "{errors:?}"
    );
}

#[test]
fn links_inside_the_root_are_followed_as_in_a_real_sysfs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // As the kernel lays it out: class/net/<if> is a relative link into devices/.
    let dev = root.join("devices/pci0000:00/0000:00:03.0/net/eth0");
    write(&dev.join("type"), "1\n");
    write(&dev.join("operstate"), "up\n");
    write(&dev.join("statistics/tx_bytes"), "11\n");
    write(&dev.join("statistics/rx_bytes"), "22\n");
    fs::create_dir_all(root.join("class/net")).unwrap();
    symlink(
        "../../devices/pci0000:00/0000:00:03.0/net/eth0",
        root.join("class/net/eth0"),
    )
    .unwrap();
    // The root itself reached through a link resolves to the same tree.
    let via = dir.path().with_extension("link");
    let _ = fs::remove_file(&via);
    symlink(root, &via).unwrap();
    let out = discover_and_sample(
        NetdevSource::new(via.clone(), NetdevOptions::default()),
        Tier::Fast,
    );
    let _ = fs::remove_file(&via);
    assert_eq!(out.value("tx_bytes"), Some(Value::Counter(11)));
    assert_eq!(out.value("rx_bytes"), Some(Value::Counter(22)));
    assert_eq!(out.report.failed, 0, "{:?}", out.errors());
}

/// A host whose reads block for good from the `after`-th one on, until the test drops its sender.
struct StuckHost {
    reads: usize,
    after: usize,
    release: mpsc::Receiver<()>,
}

impl HostBackend for StuckHost {
    fn start(&mut self) -> Result<usize, SourceError> {
        Ok(1)
    }

    fn read(&mut self) -> HostReading {
        self.reads += 1;
        if self.reads >= self.after {
            let _ = self.release.recv();
        }
        HostReading {
            cpu_percent: 10.0,
            per_cpu_percent: vec![10.0],
            memory_used_bytes: 1,
            memory_total_bytes: 2,
        }
    }
}

fn agent_metric(text: &str, name: &str, source: &str) -> Option<f64> {
    let head = format!("{name}{{source=\"{source}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&head))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_blocks_is_reported_stalled_and_shutdown_does_not_wait_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let eth0 = dir.path().join("class/net/eth0");
    write(&eth0.join("type"), "1\n");
    write(&eth0.join("statistics/tx_bytes"), "5\n");
    let (release, rx) = mpsc::channel();
    let config = AgentConfig {
        node: "n1".into(),
        sysfs_root: dir.path().to_path_buf(),
        sources: vec!["netdev".into(), "host".into()],
        http_listen: "127.0.0.1:0".parse().unwrap(),
        steps_udp: None,
        steps_socket: None,
        fast_period: Duration::from_millis(20),
        slow_period: Duration::from_millis(40),
        batch_period: Duration::from_millis(40),
        discover_period: Duration::from_secs(1),
        ..AgentConfig::default()
    };
    let extras = AgentExtras {
        host: Some(Box::new(StuckHost {
            reads: 0,
            after: 3,
            release: rx,
        })),
        ..AgentExtras::default()
    };
    let handle = commwatch_agent::start_with(config, extras).await.unwrap();
    let metrics = Arc::clone(&handle.metrics);
    let stalled = |m: &commwatch_agent::telemetry::AgentMetrics| {
        agent_metric(&m.render(), "commwatch_agent_source_stalled", "host")
    };
    let t = Instant::now();
    while stalled(&metrics) != Some(1.0) {
        assert!(
            t.elapsed() < BLOCKED,
            "no stall reported:\n{}",
            metrics.render()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The other source goes on reading while the host source is stuck.
    let netdev = |m: &commwatch_agent::telemetry::AgentMetrics| {
        agent_metric(
            &m.render(),
            "commwatch_agent_source_samples_total",
            "netdev",
        )
        .unwrap_or(0.0)
    };
    // Ten more of its ticks (20 ms each), however long a loaded machine takes for them: only that they come.
    let before = netdev(&metrics);
    let t = Instant::now();
    while netdev(&metrics) < before + 10.0 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "netdev stopped: {before} → {}",
            netdev(&metrics)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let errors = agent_metric(
        &metrics.render(),
        "commwatch_agent_source_read_errors_total",
        "host",
    );
    assert!(errors.unwrap_or(0.0) >= 1.0, "{errors:?}");

    // The read stays blocked until `release` is dropped below: a shutdown that waited for it would never end.
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(30), handle.shutdown())
        .await
        .expect("shutdown waited on the blocked read");
    eprintln!("shutdown with a blocked read took {:?}", t.elapsed());
    drop(release);
}
