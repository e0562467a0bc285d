//! Step inference against the simulator's ground truth: the `management-nic` scenario (one node's NCCL
//! traffic on its management NIC, 354 ms bursts every 644 ms) read by the real agent code from fake sysfs
//! trees, shipped to a real collector, in one process. The inferred period and per-step bytes must match the
//! model; an idle node (a single-node job: nothing crosses the network) must yield no steps.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use commwatch_collector::steps::{NodeStep, StepSource};
use commwatch_collector::{CollectorConfig, CollectorHandle};
use commwatch_sim::model::Link;
use commwatch_sim::{Cluster, ClusterSpec, Scenario};

async fn start_collector() -> CollectorHandle {
    commwatch_collector::start(CollectorConfig {
        grpc_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    })
    .await
    .expect("collector")
}

async fn start_agents(
    collector: &CollectorHandle,
    roots: &[(String, PathBuf)],
) -> Vec<commwatch_agent::AgentHandle> {
    let mut agents = Vec::new();
    for (node, root) in roots {
        let config = commwatch_agent::AgentConfig {
            node: node.clone(),
            collector: Some(format!("http://{}", collector.grpc_addr)),
            sysfs_root: root.clone(),
            procfs_root: PathBuf::from("/proc"),
            http_listen: "127.0.0.1:0".parse().unwrap(),
            sources: vec!["infiniband".into(), "netdev".into()],
            steps_udp: None,
            steps_socket: None,
            ..Default::default()
        };
        agents.push(commwatch_agent::start(config).await.expect("agent"));
    }
    agents
}

fn link<'a>(s: &'a NodeStep, device: &str) -> &'a commwatch_collector::steps::StepLink {
    s.links
        .iter()
        .find(|l| l.link.key.device == device)
        .unwrap_or_else(|| panic!("no link {device} in {s:?}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inference_recovers_the_simulated_period_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    // 4 nodes × 2 GPUs with a 990 MB AllReduce: the classic case's 3.465 GB per step on node-03's eth0, so
    // its 353.6 ms burst and 643.6 ms step are those of the 8 × 8 demo at a fraction of the agents.
    let spec = ClusterSpec {
        nodes: 4,
        gpus_per_node: 2,
        allreduce_bytes: 990_000_000,
        ..ClusterSpec::with_scenario(Scenario::ManagementNic)
    };
    let cluster = Cluster::create(dir.path(), spec).unwrap();
    let period = cluster.step_period().as_secs_f64();
    let burst = cluster.timeline().burst_duration.as_secs_f64();
    let eth = cluster.expected_step(3, Link::Eth0).unwrap();
    let hca = cluster.expected_step(0, Link::Hca(0)).unwrap();
    assert!((period - 0.643571).abs() < 1e-3, "{period}");
    assert!((burst - 0.353571).abs() < 1e-3, "{burst}");
    let roots = cluster.node_roots();
    let updater = cluster.spawn_updater(Duration::from_millis(10));
    let collector = start_collector().await;
    let agents = start_agents(&collector, &roots).await;

    // Inference needs 6 s of samples; then collect 20 steps per node (skipping the first two).
    let deadline = Instant::now() + Duration::from_secs(90);
    let want = 22;
    loop {
        let done = ["node-00", "node-03"].iter().all(|n| {
            collector
                .steps()
                .node_steps(n, 1000)
                .is_some_and(|v| v.len() >= want)
        });
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "too few inferred steps");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for (node, device, exp_bytes, exp_rate) in [
        (
            "node-03",
            "eth0",
            eth.tx_bytes_per_step,
            eth.burst_tx_bytes_per_second,
        ),
        (
            "node-00",
            "mlx5_0",
            hca.tx_bytes_per_step,
            hca.burst_tx_bytes_per_second,
        ),
    ] {
        let steps = collector.steps().node_steps(node, 1000).unwrap();
        let steps = &steps[2..];
        assert!(steps
            .iter()
            .all(|s| s.source == StepSource::Inferred && s.job.is_none()));
        let mean = steps.iter().map(NodeStep::duration_s).sum::<f64>() / steps.len() as f64;
        let est = collector.steps().inferred_period(node).expect("period");
        let period_err = mean / period - 1.0;
        let est_err = est.period_s / period - 1.0;
        // Per-step bytes: every step, not only on average.
        let bytes: Vec<f64> = steps
            .iter()
            .map(|s| link(s, device).tx_bytes as f64)
            .collect();
        let worst_bytes_err = bytes
            .iter()
            .map(|b| (b / exp_bytes as f64 - 1.0).abs())
            .fold(0.0, f64::max);
        let achieved = median(
            steps
                .iter()
                .filter_map(|s| link(s, device).achieved_bytes_per_second)
                .collect(),
        );
        let rate_err = achieved / exp_rate - 1.0;
        let confident = steps.iter().filter(|s| link(s, device).confident).count();
        let conf = median(steps.iter().map(|s| s.confidence).collect());
        eprintln!(
            "{node} {device}: {} steps; mean step {mean:.4} s vs {period:.4} s ({:+.2}%); period estimate \
             {:.4} s ({:+.2}%, strength {:.2}); worst per-step bytes error {:.2}% (expected {exp_bytes} B); \
             achieved {:.3} GB/s vs burst rate {:.3} GB/s ({:+.1}%); {confident} confident; median confidence {conf:.2}",
            steps.len(),
            period_err * 100.0,
            est.period_s,
            est_err * 100.0,
            est.strength,
            worst_bytes_err * 100.0,
            achieved / 1e9,
            exp_rate / 1e9,
            rate_err * 100.0,
        );
        assert!(
            period_err.abs() < 0.02,
            "{node}: mean step {mean} vs {period}"
        );
        assert!(est_err.abs() < 0.02, "{node}: estimate {est:?} vs {period}");
        assert!(
            worst_bytes_err < 0.03,
            "{node}: bytes {bytes:?} vs {exp_bytes}"
        );
        assert!(
            rate_err.abs() < 0.10,
            "{node}: achieved {achieved} vs {exp_rate}"
        );
        assert!(
            confident >= steps.len() * 9 / 10,
            "{node}: {confident} confident"
        );
    }
    // node-03's HCAs are idle under this fault: no achieved bandwidth.
    let s = collector.steps().node_steps("node-03", 1).unwrap();
    assert_eq!(link(&s[0], "mlx5_0").achieved_bytes_per_second, None);

    for a in agents {
        a.shutdown().await;
    }
    collector.shutdown().await;
    drop(updater);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_node_yields_no_steps() {
    let dir = tempfile::tempdir().unwrap();
    // One node: the AllReduce never crosses the network; the links carry only background traffic.
    let spec = ClusterSpec {
        nodes: 1,
        gpus_per_node: 2,
        ..ClusterSpec::with_scenario(Scenario::Healthy)
    };
    let cluster = Cluster::create(dir.path(), spec).unwrap();
    let roots = cluster.node_roots();
    let updater = cluster.spawn_updater(Duration::from_millis(10));
    let collector = start_collector().await;
    let agents = start_agents(&collector, &roots).await;
    // Past the 6 s inference needs, with margin.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let steps = collector.steps().node_steps("node-00", 1000);
    assert_eq!(steps.map(|v| v.len()), Some(0), "an idle node got steps");
    assert!(collector.steps().inferred_period("node-00").is_none());
    for a in agents {
        a.shutdown().await;
    }
    collector.shutdown().await;
    drop(updater);
}
