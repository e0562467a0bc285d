//! `commwatch demo`: a collector, a simulated cluster (fake sysfs trees driven by a model of a data-parallel
//! training job), and one real agent per simulated node reading its tree — the same code that reads `/sys`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use commwatch_collector::analysis::engine::FindingFilter;
use commwatch_collector::analysis::FindingEvent;
use commwatch_collector::{CollectorHandle, LinkView};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

mod findings;

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Simulated nodes.
    #[arg(long, default_value_t = 8)]
    pub nodes: usize,
    /// GPUs (and InfiniBand HCAs) per node.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: usize,
    /// Fault to inject: healthy, management-nic, degraded-link, link-errors, straggler, no-overlap, cpu-bound;
    /// or constant:TX:RX, every HCA port at TX and RX bytes/s with no fault (for measurements).
    #[arg(long, default_value = "management-nic")]
    pub scenario: String,
    /// Realistic traffic on top of the scenario (repeat the flag or separate names with commas).
    #[arg(
        long = "variant",
        value_name = "NAME",
        value_delimiter = ',',
        value_parser = clap::builder::PossibleValuesParser::new(variant_values())
    )]
    pub variants: Vec<String>,
    /// gRPC address of the collector the simulated agents stream to.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub grpc_listen: SocketAddr,
    /// HTTP address of the collector's /metrics and /api/v1.
    #[arg(long, default_value = "127.0.0.1:9470")]
    pub http_listen: SocketAddr,
    /// Allow plain-text gRPC when --grpc-listen is not a loopback address (the demo has no TLS).
    #[arg(long)]
    pub allow_plaintext: bool,
    /// Stop after this long (e.g. 60s); default: until Ctrl-C.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Where to write the simulated sysfs trees (default: a temporary directory removed at exit).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// How often the live summary is printed.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    pub summary_every: Duration,
    /// NVLink series in the collector's /metrics: `gpu` (a GPU's links summed) or `link` (one per NVLink).
    #[arg(long, value_name = "gpu|link", default_value = "gpu")]
    pub nvlink_detail: commwatch_collector::config::NvlinkDetail,
    /// Link error/congestion/other counters in /metrics: `family` (summed per link) or `name` (per counter).
    #[arg(long, value_name = "family|name", default_value = "family")]
    pub counter_detail: commwatch_collector::config::CounterDetail,
    /// CPU utilisation in /metrics: `total` (the node's) or `core` (also per core).
    #[arg(long, value_name = "total|core", default_value = "total")]
    pub cpu_detail: commwatch_collector::config::CpuDetail,
    /// GPU series in /metrics: `summary` (PCIe maxima as labels, NVLink rate from the links) or `full`.
    #[arg(long, value_name = "summary|full", default_value = "summary")]
    pub gpu_detail: commwatch_collector::config::GpuDetail,
}

/// The simulator's traffic variants with their one-line summaries, for `--variant`'s help.
fn variant_values() -> Vec<clap::builder::PossibleValue> {
    commwatch_sim::Variant::ALL
        .into_iter()
        .map(|v| clap::builder::PossibleValue::new(v.name()).help(v.summary()))
        .collect()
}

/// Where the demo's agents connect: the collector's address, or loopback when it listens on every address.
fn agent_target(grpc: SocketAddr) -> SocketAddr {
    match grpc.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, grpc.port()))
        }
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, grpc.port()))
        }
        _ => grpc,
    }
}

fn gbps(v: f64) -> String {
    format!("{:.2} GB/s", v / 1e9)
}

/// Prints one summary block from the collector's current view.
fn print_summary(nodes: &[commwatch_collector::NodeView], elapsed: Duration) {
    println!(
        "--- t+{:>4}s  {} node(s) reporting",
        elapsed.as_secs(),
        nodes.len()
    );
    println!(
        "    {:<10} {:>14} {:>14} {:>16} {:>8}",
        "node", "fabric tx", "fabric rx", "management tx", "links"
    );
    for n in nodes {
        let sum = |pick: fn(&LinkView) -> bool, rate: fn(&LinkView) -> Option<f64>| -> f64 {
            n.links.iter().filter(|l| pick(l)).filter_map(rate).sum()
        };
        let fab_tx = sum(is_fabric_port, |l| l.tx_bytes_per_second);
        let fab_rx = sum(is_fabric_port, |l| l.rx_bytes_per_second);
        let mgmt_tx = sum(|l| l.role == "management", |l| l.tx_bytes_per_second);
        println!(
            "    {:<10} {:>14} {:>14} {:>16} {:>8}",
            n.name,
            gbps(fab_tx),
            gbps(fab_rx),
            gbps(mgmt_tx),
            n.links.len(),
        );
    }
}

/// Fabric traffic as the recording rules count it: the RDMA adapters' ports, not the IPoIB netdevs on top of
/// them (whose bytes the port counts too) nor NVLink.
fn is_fabric_port(l: &LinkView) -> bool {
    l.role == "fabric" && l.endpoint == "hca_port"
}

/// How long after an evaluation's first finding event its others are awaited before the batch is printed.
const EVENT_BATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// `first` and every event already waiting behind it.
fn drain(
    first: FindingEvent,
    rx: &mut tokio::sync::broadcast::Receiver<FindingEvent>,
) -> Vec<FindingEvent> {
    let mut batch = vec![first];
    loop {
        match rx.try_recv() {
            Ok(ev) => batch.push(ev),
            Err(TryRecvError::Lagged(n)) => println!("    ({n} finding events not shown)"),
            Err(TryRecvError::Empty | TryRecvError::Closed) => return batch,
        }
    }
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let spec = cluster_spec(&args)?;
    let tmp;
    let root = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.clone()
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("commwatch-demo-")
                .tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let cluster =
        commwatch_sim::Cluster::create(&root, spec).context("writing the simulated sysfs trees")?;
    let description = cluster.describe();
    let collector = commwatch_collector::start(commwatch_collector::CollectorConfig {
        grpc_listen: args.grpc_listen,
        http_listen: args.http_listen,
        allow_plaintext: args.allow_plaintext,
        nvlink_detail: args.nvlink_detail,
        counter_detail: args.counter_detail,
        cpu_detail: args.cpu_detail,
        gpu_detail: args.gpu_detail,
        ..Default::default()
    })
    .await
    .context("starting the collector")?;
    let agents = start_agents(&args, &cluster, &collector).await?;
    let updater = cluster.spawn_updater(Duration::from_millis(10));
    print_banner(&args, &description, &root, &collector);
    watch(&args, &collector).await;
    println!("stopping");
    for a in agents {
        a.shutdown().await;
    }
    collector.shutdown().await;
    if let Some(c) = updater.stop() {
        drop(c);
    }
    Ok(())
}

/// The simulated cluster the flags ask for.
fn cluster_spec(args: &DemoArgs) -> anyhow::Result<commwatch_sim::ClusterSpec> {
    // The parser's error lists the scenarios already: said once, here.
    let scenario: commwatch_sim::Scenario = args.scenario.parse().map_err(|_| {
        anyhow::anyhow!(
            "--scenario {:?}: no such scenario; one of {}, or constant:TX:RX (every HCA port at TX and RX \
             bytes/s, no fault: for measurements)",
            args.scenario,
            commwatch_sim::Scenario::NAMES.join(", ")
        )
    })?;
    let variants = args
        .variants
        .iter()
        .map(|v| v.parse::<commwatch_sim::Variant>())
        .collect::<Result<Vec<_>, _>>()
        .context("--variant")?;
    let spec = commwatch_sim::ClusterSpec {
        nodes: args.nodes,
        gpus_per_node: args.gpus_per_node,
        variants,
        ..commwatch_sim::ClusterSpec::with_scenario(scenario)
    };
    spec.validate().context("invalid demo size or variants")?;
    Ok(spec)
}

/// One real agent per simulated node, reading its sysfs and procfs trees (in management-nic, the faulty
/// node's ranks set NCCL_SOCKET_IFNAME=eth0); the simulated GPUs and host CPUs follow the same model and
/// clock as the trees.
async fn start_agents(
    args: &DemoArgs,
    cluster: &commwatch_sim::Cluster,
    collector: &CollectorHandle,
) -> anyhow::Result<Vec<commwatch_agent::AgentHandle>> {
    let procfs_roots = cluster
        .write_procfs_trees()
        .context("writing the simulated procfs trees")?;
    let (model, epoch) = (cluster.model().clone(), cluster.epoch());
    let mut agents = Vec::new();
    for (i, ((node, sysfs_root), (_, procfs_root))) in
        cluster.node_roots().iter().zip(&procfs_roots).enumerate()
    {
        let config = commwatch_agent::AgentConfig {
            node: node.clone(),
            collector: Some(format!("http://{}", agent_target(collector.grpc_addr))),
            allow_plaintext: args.allow_plaintext,
            sysfs_root: sysfs_root.clone(),
            procfs_root: procfs_root.clone(),
            http_listen: "127.0.0.1:0".parse().context("address")?,
            // The simulated nodes share this machine: their GPUs and host CPUs come from the simulator, and
            // markers have no sender here.
            sources: vec![
                "infiniband".into(),
                "netdev".into(),
                "host".into(),
                "nvml".into(),
                "processes".into(),
            ],
            steps_udp: None,
            steps_socket: None,
            ..Default::default()
        };
        let extras = commwatch_agent::AgentExtras {
            gpu: Some(Box::new(commwatch_sim::SimGpus::new(&model, i, epoch))),
            host: Some(Box::new(commwatch_sim::SimHost::new(&model, i, epoch))),
        };
        agents.push(
            commwatch_agent::start_with(config, extras)
                .await
                .with_context(|| format!("starting the agent of {node}"))?,
        );
    }
    Ok(agents)
}

/// What runs and where to look.
fn print_banner(
    args: &DemoArgs,
    description: &str,
    root: &std::path::Path,
    collector: &CollectorHandle,
) {
    // The page first: what a person opens.
    println!("live page:       http://{}/", collector.http_addr);
    println!(
        "commwatch demo: {} nodes × {} GPUs, scenario {}{}",
        args.nodes,
        args.gpus_per_node,
        args.scenario,
        if args.variants.is_empty() {
            String::new()
        } else {
            format!(", variants {}", args.variants.join(", "))
        }
    );
    println!("{description}");
    println!("simulated sysfs trees: {}", root.display());
    println!("collector gRPC:  {}", collector.grpc_addr);
    let http = collector.http_addr;
    println!("metrics:         http://{http}/metrics");
    println!("nodes:           http://{http}/api/v1/nodes");
    println!("jobs:            http://{http}/api/v1/jobs");
    println!("findings:        http://{http}/api/v1/findings?root=true");
    println!("health:          http://{http}/healthz");
    match args.duration {
        Some(d) => println!("running for {}s (Ctrl-C stops earlier)", d.as_secs()),
        None => println!("running until Ctrl-C"),
    }
}

/// Prints the live summary and each finding as it is raised or cleared until the duration ends or Ctrl-C,
/// then the findings still active.
async fn watch(args: &DemoArgs, collector: &CollectorHandle) {
    let started = tokio::time::Instant::now();
    let stop = async {
        match args.duration {
            Some(d) => tokio::select! {
                _ = tokio::time::sleep(d) => {},
                _ = crate::shutdown_signal() => {},
            },
            None => crate::shutdown_signal().await,
        }
    };
    tokio::pin!(stop);
    let mut every = tokio::time::interval(args.summary_every);
    every.tick().await;
    let mut events = collector.analysis().subscribe();
    let mut printer = findings::Printer::default();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = every.tick() => print_summary(&collector.snapshot_nodes(), started.elapsed()),
            ev = events.recv() => match ev {
                Ok(ev) => {
                    // One evaluation's events are printed as one batch, causes before what they explain;
                    // they are sent one by one, so the rest of them is given a moment to arrive (an
                    // evaluation every second: the batch is never a later one's).
                    tokio::time::sleep(EVENT_BATCH_WAIT).await;
                    let batch = drain(ev, &mut events);
                    let all = collector.analysis().findings(&FindingFilter::default());
                    for line in printer.events(&batch, &all, started.elapsed().as_secs()) {
                        println!("{line}");
                    }
                }
                Err(RecvError::Lagged(n)) => println!("    ({n} finding events not shown)"),
                Err(RecvError::Closed) => {}
            },
        }
    }
    print_summary(&collector.snapshot_nodes(), started.elapsed());
    let all = collector.analysis().findings(&FindingFilter::default());
    for line in findings::at_exit(&all) {
        println!("{line}");
    }
}
