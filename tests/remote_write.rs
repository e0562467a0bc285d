//! Remote write end to end: a simulated cluster (the demo's: fake sysfs and procfs trees, real agents) feeds
//! two collectors; one sends its `/metrics` families to a real Prometheus started with
//! `--web.enable-remote-write-receiver`, the other to a real VictoriaMetrics (`victoria-metrics`), each with
//! its own `shard` external label. Both stores must answer their HTTP query API with a derived series (per-link
//! rates), the collector's own health, and a finding (the management-NIC scenario's); the collectors must count
//! no failed or dropped sample. Prints the figures: samples per second and bytes per request sent, and the delay
//! from a gather until its samples are queryable in each store.
//!
//! Without `prometheus` or `victoria-metrics` the test says so loudly and passes on a developer machine; in CI
//! (`CI=true`) a missing binary is a failure (`.ci/run` installs Debian's `prometheus` and `victoria-metrics`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{client, free_port, get_text, have_tool, metric, wait_for};

// The test-only reader of the exposition text, to gather a `/metrics` fetched over HTTP.
#[path = "../collector/src/remote_write/parse.rs"]
mod parse;

/// What `.ci/run` installs for these tests.
const PACKAGES: &str = "prometheus and victoria-metrics packages";
use serde_json::Value;

/// A time-series store as a child process, killed on drop.
struct Tsdb {
    name: &'static str,
    child: Child,
    log: PathBuf,
    base: String,
    write_path: &'static str,
}

impl Tsdb {
    fn prometheus(dir: &Path) -> Tsdb {
        let port = free_port();
        let cfg = dir.join("prometheus.yml");
        std::fs::write(&cfg, "global:\n  scrape_interval: 15s\n").unwrap();
        let args = vec![
            format!("--config.file={}", cfg.display()),
            format!("--storage.tsdb.path={}", dir.join("prom").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--web.enable-remote-write-receiver".into(),
        ];
        Tsdb::spawn(
            "prometheus",
            "prometheus",
            args,
            dir,
            port,
            "/-/ready",
            "/api/v1/write",
        )
    }

    fn victoria_metrics(dir: &Path) -> Tsdb {
        let port = free_port();
        let args = vec![
            format!("-httpListenAddr=127.0.0.1:{port}"),
            format!("-storageDataPath={}", dir.join("vm").display()),
            // Queries see samples at once (the default hides the last 30 s), uncached.
            "-search.latencyOffset=0s".into(),
            "-search.disableCache".into(),
        ];
        let bin = "victoria-metrics";
        Tsdb::spawn(
            "victoria-metrics",
            bin,
            args,
            dir,
            port,
            "/health",
            "/api/v1/write",
        )
    }

    fn spawn(
        name: &'static str,
        bin: &str,
        args: Vec<String>,
        dir: &Path,
        port: u16,
        ready: &str,
        write_path: &'static str,
    ) -> Tsdb {
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join(format!("{name}.out"))).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
        let t = Tsdb {
            name,
            child,
            log,
            base: format!("http://127.0.0.1:{port}"),
            write_path,
        };
        let up = wait_for(Duration::from_secs(30), || {
            get_text(&format!("{}{ready}", t.base))
        });
        assert!(up.is_some(), "{name} not ready:\n{}", t.log_text());
        t
    }

    fn write_url(&self) -> String {
        format!("{}{}", self.base, self.write_path)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An instant query's result vector (`None` while the store answers no vector).
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

    /// The results of `expr` once there is at least one (waiting up to `timeout`).
    fn wait_query(&self, expr: &str, timeout: Duration) -> Vec<Value> {
        let got = wait_for(timeout, || self.query(expr).filter(|r| !r.is_empty()));
        got.unwrap_or_else(|| {
            panic!(
                "{}: no result for {expr} within {timeout:?}:\n{}",
                self.name,
                self.log_text()
            )
        })
    }
}

impl Drop for Tsdb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One collector sending to a store with the external label `shard`, and one agent per simulated node.
struct Shard {
    shard: &'static str,
    collector: commwatch_collector::CollectorHandle,
    agents: Vec<commwatch_agent::AgentHandle>,
}

impl Shard {
    async fn start(shard: &'static str, write_url: String, nodes: &SimNodes) -> Shard {
        let mut config = commwatch_collector::CollectorConfig {
            grpc_listen: "127.0.0.1:0".parse().unwrap(),
            http_listen: "127.0.0.1:0".parse().unwrap(),
            ..Default::default()
        };
        let rw = &mut config.remote_write;
        rw.url = Some(write_url);
        rw.interval = Duration::from_secs(1);
        rw.external_labels.insert("shard".into(), shard.into());
        let collector = commwatch_collector::start(config).await.expect("collector");
        let mut agents = Vec::new();
        for (i, (node, sysfs_root, procfs_root)) in nodes.roots.iter().enumerate() {
            let config = commwatch_agent::AgentConfig {
                node: node.clone(),
                collector: Some(format!("http://{}", collector.grpc_addr)),
                sysfs_root: sysfs_root.clone(),
                procfs_root: procfs_root.clone(),
                http_listen: "127.0.0.1:0".parse().unwrap(),
                sources: ["infiniband", "netdev", "host", "nvml", "processes"]
                    .map(String::from)
                    .to_vec(),
                steps_udp: None,
                steps_socket: None,
                ..Default::default()
            };
            let extras = commwatch_agent::AgentExtras {
                gpu: Some(Box::new(commwatch_sim::SimGpus::new(
                    &nodes.model,
                    i,
                    nodes.epoch,
                ))),
                host: Some(Box::new(commwatch_sim::SimHost::new(
                    &nodes.model,
                    i,
                    nodes.epoch,
                ))),
            };
            agents.push(
                commwatch_agent::start_with(config, extras)
                    .await
                    .expect("agent"),
            );
        }
        Shard {
            shard,
            collector,
            agents,
        }
    }

    /// The collector's remote-write counter of `result`.
    fn samples(&self, result: &str) -> f64 {
        let text = self.collector.render_metrics();
        metric(
            &text,
            "commwatch_collector_remote_write_samples_total",
            &[("result", result)],
        )
        .unwrap_or(f64::NAN)
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric(&self.collector.render_metrics(), name, labels).unwrap_or(f64::NAN)
    }

    async fn stop(self) {
        for a in self.agents {
            a.shutdown().await;
        }
        self.collector.shutdown().await;
    }
}

/// The simulated cluster's nodes: name, sysfs root, procfs root; the model and clock of its GPUs and hosts.
struct SimNodes {
    roots: Vec<(String, PathBuf, PathBuf)>,
    model: commwatch_sim::JobModel,
    epoch: std::time::Instant,
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// For `window`: every 50 ms, the newest sample time of `expr`; each new one's delay from its timestamp
/// (the gather) until the query first returned it. Sorted.
fn delays(store: &Tsdb, expr: &str, window: Duration) -> Vec<f64> {
    let mut seen = f64::NAN;
    let mut out = Vec::new();
    let end = Instant::now() + window;
    while Instant::now() < end {
        let ts = store
            .query(&format!("timestamp({expr})"))
            .and_then(|r| r.first()?["value"][1].as_str()?.parse::<f64>().ok());
        if let Some(ts) = ts {
            if ts != seen {
                if !seen.is_nan() {
                    out.push(now_s() - ts);
                }
                seen = ts;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    out.sort_by(f64::total_cmp);
    out
}

#[test]
fn derived_series_and_findings_reach_prometheus_and_victoria_metrics() {
    if !have_tool("prometheus", "--version", PACKAGES)
        || !have_tool("victoria-metrics", "-version", PACKAGES)
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prometheus = Tsdb::prometheus(dir.path());
    let victoria = Tsdb::victoria_metrics(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();

    // The management-NIC demo on two nodes of two GPUs: node-01's ranks send over eth0.
    let spec = commwatch_sim::ClusterSpec {
        nodes: 2,
        gpus_per_node: 2,
        ..commwatch_sim::ClusterSpec::with_scenario(commwatch_sim::Scenario::ManagementNic)
    };
    let cluster = commwatch_sim::Cluster::create(&dir.path().join("trees"), spec).unwrap();
    let procfs = cluster.write_procfs_trees().unwrap();
    let nodes = SimNodes {
        roots: cluster
            .node_roots()
            .into_iter()
            .zip(procfs)
            .map(|((node, sys), (_, proc))| (node, sys, proc))
            .collect(),
        model: cluster.model().clone(),
        epoch: cluster.epoch(),
    };
    let updater = rt.block_on(async { cluster.spawn_updater(Duration::from_millis(10)) });
    let started = Instant::now();
    let shards = rt.block_on(async {
        [
            Shard::start("a", prometheus.write_url(), &nodes).await,
            Shard::start("b", victoria.write_url(), &nodes).await,
        ]
    });

    for (store, shard) in [(&prometheus, &shards[0]), (&victoria, &shards[1])] {
        let s = shard.shard;
        let rates = store.wait_query(
            &format!("commwatch_link_transmit_bytes_per_second{{shard=\"{s}\",node=\"node-01\"}}"),
            Duration::from_secs(60),
        );
        assert!(
            rates.iter().all(|r| r["metric"]["device"].is_string()),
            "{rates:?}"
        );
        store.wait_query(
            &format!("commwatch_collector_remote_write_samples_total{{shard=\"{s}\",result=\"sent\"}} > 0"),
            Duration::from_secs(30),
        );
        let findings = store.wait_query(
            &format!(
                "commwatch_finding_active{{shard=\"{s}\",kind=\"management_network_traffic\"}}"
            ),
            Duration::from_secs(90),
        );
        assert_eq!(findings[0]["metric"]["node"], "node-01", "{findings:?}");
        eprintln!(
            "{}: derived series and the finding queryable after {:?}",
            store.name,
            started.elapsed()
        );
    }

    for (store, shard) in [(&prometheus, &shards[0]), (&victoria, &shards[1])] {
        let expr = format!(
            "commwatch_collector_remote_write_queue_samples{{shard=\"{}\"}}",
            shard.shard
        );
        let d = delays(store, &expr, Duration::from_secs(6));
        assert!(d.len() >= 3, "{}: too few gathers seen: {d:?}", store.name);
        eprintln!(
            "{}: gather → queryable delay over {} gathers: median {:.3} s, max {:.3} s",
            store.name,
            d.len(),
            d[d.len() / 2],
            d[d.len() - 1]
        );
    }

    let elapsed = started.elapsed().as_secs_f64();
    for shard in &shards {
        let sent = shard.samples("sent");
        let requests = shard.counter(
            "commwatch_collector_remote_write_requests_total",
            &[("result", "sent")],
        );
        let bytes = shard.counter("commwatch_collector_remote_write_bytes_total", &[]);
        eprintln!(
            "shard {}: {sent} samples in {requests} requests over {elapsed:.1} s: {:.0} samples/s, {:.0} bytes per \
             request, {:.2} bytes per sample",
            shard.shard,
            sent / elapsed,
            bytes / requests,
            bytes / sent
        );
        assert!(sent > 0.0);
        assert_eq!(shard.samples("failed"), 0.0, "shard {}", shard.shard);
        assert_eq!(shard.samples("dropped"), 0.0, "shard {}", shard.shard);
    }
    rt.block_on(async {
        for s in shards {
            s.stop().await;
        }
    });
    drop(updater.stop());
}

/// The figures of the 8×8 demo (`cargo test --release --test remote_write -- --ignored --nocapture`): the
/// demo's `/metrics` (its own collector, 64 agents) gathered by the remote-write sender every 5 s and sent to
/// a real Prometheus. Prints the samples per gather (and per second at the default 15 s interval), requests
/// and bytes per gather, the CPU time of parsing and encoding the text fetched over HTTP (the collector itself
/// gathers its families as typed data, no text: `cargo bench -p commwatch-collector --bench exposition` times
/// that), and the delay until queryable.
#[test]
#[ignore = "a benchmark: minutes of CPU on a small machine"]
fn figures_for_the_8x8_demo() {
    use commwatch_collector::export::exposition::SampleRef;
    use commwatch_collector::remote_write::{self, encode, Gather, Metrics, Sender};
    /// The parsed samples, handed to `sink` as a gather hands them.
    fn replay(samples: &[parse::TextSample], sink: &mut dyn FnMut(SampleRef<'_>)) {
        for s in samples {
            let labels: Vec<(&str, &str)> = s
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            sink(SampleRef {
                name: &s.name,
                labels: &labels,
                value: s.value,
            });
        }
    }
    if !have_tool("prometheus", "--version", PACKAGES) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prometheus = Tsdb::prometheus(dir.path());
    let (grpc, http) = (free_port(), free_port());
    let mut demo = Command::new(common::BIN)
        .args(["demo", "--scenario", "management-nic", "--duration", "120s"])
        .args(["--grpc-listen", &format!("127.0.0.1:{grpc}")])
        .args(["--http-listen", &format!("127.0.0.1:{http}")])
        .args(["--dir", &dir.path().join("trees").display().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let metrics_url = format!("http://127.0.0.1:{http}/metrics");
    // Every node reporting with its step figures.
    let text = wait_for(Duration::from_secs(60), || {
        let t = get_text(&metrics_url)?;
        let nodes = metric(&t, "commwatch_collector_nodes", &[])?;
        (nodes >= 8.0 && t.contains("commwatch_step_duration_seconds")).then_some(t)
    })
    .expect("the demo's 8 nodes in /metrics");

    let started = Instant::now();
    let (samples, errors) = parse::parse_exposition(&text, |_| true);
    let n = samples.len();
    let mut series = remote_write::series::GatherSeries::new(&[], 0, Default::default());
    replay(&samples, &mut |s| series.push(s));
    let requests = encode::encode_requests(series.finish().series, 5_000).unwrap();
    let cpu = started.elapsed();
    let bytes: usize = requests.iter().map(|r| r.body.len()).sum();
    assert_eq!(errors, []);
    eprintln!(
        "8x8 demo: {} bytes of /metrics, {n} samples per gather ({:.0} samples/s at 15 s), {} requests of \
         ≤5,000, {:.0} bytes per request, {:.2} bytes per sample; parse + encode {:?}",
        text.len(),
        n as f64 / 15.0,
        requests.len(),
        bytes as f64 / requests.len() as f64,
        bytes as f64 / n as f64,
        cpu
    );

    struct Http(String);
    impl Gather for Http {
        fn gather(
            &self,
            keep: &mut dyn FnMut(&str) -> bool,
            sink: &mut dyn FnMut(SampleRef<'_>),
        ) -> Result<(), String> {
            let text = get_text(&self.0).ok_or_else(|| "no /metrics".to_string())?;
            let (samples, errors) = parse::parse_exposition(&text, keep);
            match errors.first() {
                Some(e) => Err(e.to_string()),
                None => {
                    replay(&samples, sink);
                    Ok(())
                }
            }
        }
    }
    let cfg = commwatch_collector::config::RemoteWriteConfig {
        url: Some(prometheus.write_url()),
        interval: Duration::from_secs(5),
        ..Default::default()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let health = commwatch_collector::telemetry::Health::new().unwrap();
    let m = Metrics::register(&health.registry).unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let sender = Sender::new(&cfg).unwrap();
    let task = rt.spawn(remote_write::run(
        cfg,
        std::sync::Arc::new(Http(metrics_url)),
        sender,
        m.clone(),
        rx,
        commwatch_collector::config::DEFAULT_EXPORT_SHARE,
    ));
    let d = delays(
        &prometheus,
        "commwatch_collector_nodes",
        Duration::from_secs(30),
    );
    stop.send_replace(true);
    rt.block_on(task).unwrap();
    let _ = demo.kill();
    let _ = demo.wait();
    eprintln!(
        "8x8 demo into Prometheus: {} samples sent in {} requests ({} bytes), {} failed, {} dropped; \
         gather → queryable over {} gathers: median {:.3} s, max {:.3} s",
        m.samples_sent.get(),
        m.requests_sent.get(),
        m.bytes_sent.get(),
        m.samples_failed.get(),
        m.samples_dropped.get(),
        d.len(),
        d.get(d.len() / 2).copied().unwrap_or(f64::NAN),
        d.last().copied().unwrap_or(f64::NAN),
    );
    assert_eq!(m.samples_failed.get() + m.samples_dropped.get(), 0);
}
