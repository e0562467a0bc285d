//! The agent's probe server, off by default: answers active probes (`commwatch probe run`, or the collector's
//! scheduled ones relayed through it) on the node's fabric address. Token-authenticated, one probe at a time
//! and at most one per `min_interval`, size- and duration-limited, and it declines while the node's fabric is
//! busy: a probe must never compete with training. Busy is read from the node's own InfiniBand/RoCE port byte
//! counters (`port_xmit_data`, `port_rcv_data`, octets ÷ 4) once a second while probes are enabled.
//! Like every listener, it holds at most `max_connections` connections and closes one whose `hello` does not
//! arrive within 5 s; wrong tokens are throttled per address (`commwatch_probe::server`), and all three are
//! counted in the agent's `/metrics` (`commwatch_agent_probe_*`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use commwatch_probe::{BusyCheck, Limits, Server, ServerConfig, ServerMetrics};
use serde::Deserialize;
use tokio::sync::watch;

use crate::source::sysfs::{parse_counter, parse_ib_rate, Reading};
use crate::source::FsRoot;

/// `[probe]` in the agent's configuration file (`--probe-listen` and `--probe-token-file` on the command line).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// Address to answer probes on (the fabric interface's, e.g. the IPoIB address); `None`: probes are off.
    pub listen: Option<SocketAddr>,
    /// Token probers must present; required when `listen` is set.
    pub token_file: Option<PathBuf>,
    /// Largest message size accepted, in bytes.
    pub max_size: u64,
    /// Longest probe accepted.
    #[serde(with = "humantime_serde")]
    pub max_duration: Duration,
    /// At most one probe per this interval.
    #[serde(with = "humantime_serde")]
    pub min_interval: Duration,
    /// Busy (decline) while any fabric port moves more than this share of its capacity (0 < x ≤ 1).
    pub busy_fraction: f64,
    /// Whether the collector may ask this agent to probe another node (relay).
    pub relay: bool,
    /// RDMA device for RDMA probes (needs the `rdma` build); `None`: the first.
    pub rdma_device: Option<String>,
    /// Most connections the probe listener holds at once; one beyond is closed at accept and counted.
    pub max_connections: usize,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            listen: None,
            token_file: None,
            max_size: 4 * 1024 * 1024,
            max_duration: Duration::from_secs(10),
            min_interval: Duration::from_secs(60),
            busy_fraction: 0.05,
            relay: true,
            rdma_device: None,
            max_connections: commwatch_probe::server::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl ProbeConfig {
    /// The first field that is wrong, and why.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.listen.is_some() && self.token_file.is_none() {
            return Err((
                "probe.token_file",
                "required when probe.listen is set: probes are token-authenticated".into(),
            ));
        }
        let max = u64::from(commwatch_probe::wire::MAX_DATA_BYTES);
        if self.max_size == 0 || self.max_size > max {
            return Err(("probe.max_size", format!("must be 1 to {max} bytes")));
        }
        if self.max_duration.is_zero() || self.max_duration > Duration::from_secs(60) {
            return Err((
                "probe.max_duration",
                "must be above 0 and at most 60s".into(),
            ));
        }
        if !(1..=MAX_PROBE_CONNECTIONS).contains(&self.max_connections) {
            return Err((
                "probe.max_connections",
                format!("must be 1 to {MAX_PROBE_CONNECTIONS}"),
            ));
        }
        if !(self.busy_fraction > 0.0 && self.busy_fraction <= 1.0) {
            return Err((
                "probe.busy_fraction",
                "must be above 0 and at most 1".into(),
            ));
        }
        Ok(())
    }
}

/// Largest `probe.max_connections`: more would only let a flood hold more of the agent's descriptors.
pub const MAX_PROBE_CONNECTIONS: usize = 4096;

/// One port's byte counters at one time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PortReading {
    /// Bytes sent and received (counters × 4).
    pub tx: u64,
    pub rx: u64,
    /// Capacity per direction, bytes/s (0: unknown).
    pub capacity: f64,
}

/// The busiest direction's rate of each port between two readings `seconds` apart, as `(port, bytes/s,
/// capacity)` (pure). A counter that went backwards (reset) gives no rate.
pub fn port_rates(
    before: &BTreeMap<String, PortReading>,
    now: &BTreeMap<String, PortReading>,
    seconds: f64,
) -> Vec<(String, f64, f64)> {
    if seconds <= 0.0 {
        return Vec::new();
    }
    now.iter()
        .filter_map(|(port, n)| {
            let b = before.get(port)?;
            let tx = n.tx.checked_sub(b.tx)?;
            let rx = n.rx.checked_sub(b.rx)?;
            Some((port.clone(), tx.max(rx) as f64 / seconds, n.capacity))
        })
        .collect()
}

/// Reads every RDMA port's data counters under `<sysfs>/class/infiniband`; unreadable ports are left out.
pub fn read_ports(root: &FsRoot) -> BTreeMap<String, PortReading> {
    let mut out = BTreeMap::new();
    let class = root.join("class/infiniband");
    for dev in root.list_subdirs(&class).unwrap_or_default() {
        let ports = class.join(&dev).join("ports");
        for port in root.list_subdirs(&ports).unwrap_or_default() {
            let dir = ports.join(&port);
            let counter = |name: &str| -> Option<u64> {
                let text = root.read_trimmed(&dir.join("counters").join(name))?;
                match parse_counter(&text).ok()? {
                    Reading::Value(v) => Some(v.saturating_mul(4)),
                    Reading::NotAvailable => None,
                }
            };
            let (Some(tx), Some(rx)) = (counter("port_xmit_data"), counter("port_rcv_data")) else {
                continue;
            };
            let capacity = root
                .read_trimmed(&dir.join("rate"))
                .and_then(|t| parse_ib_rate(&t).ok())
                .map_or(0.0, |r| r.bytes_per_second);
            out.insert(format!("{dev}/{port}"), PortReading { tx, rx, capacity });
        }
    }
    out
}

/// Busy from the node's own fabric counters, refreshed by [`watch_fabric`].
#[derive(Debug, Default)]
pub struct FabricBusy {
    why: Mutex<Option<String>>,
}

impl BusyCheck for FabricBusy {
    fn busy(&self) -> Option<String> {
        self.why.lock().ok().and_then(|g| g.clone())
    }
}

/// Rate above which a port of unknown capacity counts as busy (100 MB/s).
const UNKNOWN_CAPACITY_FLOOR: f64 = 1e8;

/// Reads the ports once a second and updates `busy` until `shutdown`.
async fn watch_fabric(
    root: FsRoot,
    fraction: f64,
    busy: Arc<FabricBusy>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut before = (Instant::now(), read_ports(&root));
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tick.tick() => {}
        }
        let now = (Instant::now(), read_ports(&root));
        let rates = port_rates(&before.1, &now.1, (now.0 - before.0).as_secs_f64());
        let why = commwatch_probe::busy::busy_from_rates(&rates, fraction, UNKNOWN_CAPACITY_FLOOR);
        if let Ok(mut g) = busy.why.lock() {
            *g = why;
        }
        before = now;
    }
}

/// Starts the probe server when `config.listen` is set, counting in `metrics` (the agent's registry); where it
/// listens. It stops on `shutdown`.
pub async fn start(
    config: &ProbeConfig,
    token: Option<String>,
    sysfs_root: &Path,
    metrics: ServerMetrics,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<Option<SocketAddr>> {
    let Some(listen) = config.listen else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let busy = Arc::new(FabricBusy::default());
    let root = FsRoot::new(sysfs_root);
    tokio::spawn(watch_fabric(
        root,
        config.busy_fraction,
        busy.clone(),
        shutdown.clone(),
    ));
    let server = Server::with_metrics(
        ServerConfig {
            token,
            limits: Limits {
                max_size: config.max_size,
                max_duration: config.max_duration,
                min_interval: config.min_interval,
            },
            rdma_device: config.rdma_device.clone(),
            relay: config.relay,
            bind: Some(addr.ip()).filter(|ip| !ip.is_unspecified()),
            max_connections: config.max_connections,
            ..ServerConfig::default()
        },
        busy,
        metrics,
    );
    let mut stop = shutdown;
    tokio::spawn(server.serve(listener, async move {
        let _ = stop.changed().await;
    }));
    tracing::info!(listen = %addr, "answering probes");
    Ok(Some(addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(tx: u64, rx: u64) -> PortReading {
        PortReading {
            tx,
            rx,
            capacity: 25e9,
        }
    }

    #[test]
    fn rates_take_the_busier_direction_and_skip_resets() {
        let before = BTreeMap::from([
            ("mlx5_0/1".to_string(), reading(1000, 0)),
            ("mlx5_1/1".to_string(), reading(5000, 5000)),
        ]);
        let now = BTreeMap::from([
            ("mlx5_0/1".to_string(), reading(3000, 9000)),
            ("mlx5_1/1".to_string(), reading(10, 10)),
            ("mlx5_2/1".to_string(), reading(10, 10)),
        ]);
        let r = port_rates(&before, &now, 2.0);
        assert_eq!(r, vec![("mlx5_0/1".to_string(), 4500.0, 25e9)]);
        assert!(port_rates(&before, &now, 0.0).is_empty());
    }

    #[test]
    fn reads_ports_from_a_sysfs_tree() {
        let dir = tempfile::tempdir().unwrap();
        let port = dir.path().join("class/infiniband/mlx5_0/ports/1");
        std::fs::create_dir_all(port.join("counters")).unwrap();
        std::fs::write(port.join("counters/port_xmit_data"), "100\n").unwrap();
        std::fs::write(port.join("counters/port_rcv_data"), "7\n").unwrap();
        std::fs::write(port.join("rate"), "200 Gb/sec (4X HDR)\n").unwrap();
        let bad = dir.path().join("class/infiniband/mlx5_1/ports/1/counters");
        std::fs::create_dir_all(&bad).unwrap();
        std::fs::write(bad.join("port_xmit_data"), "N/A (no PMA)\n").unwrap();
        let ports = read_ports(&FsRoot::new(dir.path()));
        assert_eq!(
            ports,
            BTreeMap::from([(
                "mlx5_0/1".to_string(),
                PortReading {
                    tx: 400,
                    rx: 28,
                    capacity: 25e9
                }
            )])
        );
    }

    #[test]
    fn validation_names_the_field() {
        assert!(ProbeConfig::default().validate().is_ok());
        let on = ProbeConfig {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            ..ProbeConfig::default()
        };
        assert_eq!(on.validate().unwrap_err().0, "probe.token_file");
        let bad = ProbeConfig {
            busy_fraction: 0.0,
            ..ProbeConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().0, "probe.busy_fraction");
        let big = ProbeConfig {
            max_size: u64::MAX,
            ..ProbeConfig::default()
        };
        assert_eq!(big.validate().unwrap_err().0, "probe.max_size");
        let none = ProbeConfig {
            max_connections: 0,
            ..ProbeConfig::default()
        };
        assert_eq!(none.validate().unwrap_err().0, "probe.max_connections");
    }
}
