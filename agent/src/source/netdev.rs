//! Network interfaces: `<sysfs_root>/class/net/<if>/`.
//!
//! Links: one per interface (entries that are not directories, such as `bonding_masters`, are skipped), keyed
//! `(class, <if>, <if>)`; class `infiniband` for IPoIB (`type` = 32), `ethernet` otherwise. Role: **fabric**
//! when the interface is an RDMA port's netdev (`class/infiniband/*/ports/*/gid_attrs/ndevs/*`,
//! `class/infiniband/*/device/net/*`) or IPoIB, **management** otherwise; [`NetdevOptions`] overrides win.
//! State: `operstate`. Capacity: `speed` (Mb/s × 125000 → bytes/s; unknown when `-1` or unreadable).
//! Attributes: `type`, `mtu`, `speed_mbps` (when known), `operstate`.
//!
//! Series (64-bit counters from `statistics/`):
//! - fast tier: `tx_bytes`, `rx_bytes`;
//! - slow tier: `tx_packets`, `rx_packets`, `tx_errors`, `rx_errors`, `tx_dropped`, `rx_dropped`, and the
//!   gauges `state_code` (1 when `operstate` is `up`, else 0) and `capacity_bytes_per_second`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::file_series::FileSeries;
use super::fsroot::FsRoot;
use super::sysfs::{
    glob_match, parse_netdev_speed, parse_operstate, parse_u64, rdma_netdevs, Decode,
};
use super::{
    Endpoint, Inventory, Link, LinkClass, LinkKey, LinkRole, ReadReport, SeriesKind, SeriesSpec,
    Source, SourceError, Tier, Value,
};

/// ARPHRD_INFINIBAND: the `type` of an IPoIB interface.
pub const ARPHRD_INFINIBAND: u64 = 32;

/// Interfaces skipped unless configured otherwise: loopback and container/virtual plumbing.
pub const DEFAULT_EXCLUDE: &[&str] = &[
    "lo", "veth*", "docker*", "cali*", "flannel*", "cni*", "virbr*",
];

/// Classification and filtering of interfaces. Patterns are interface names where `*` matches any run of
/// characters (`veth*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetdevOptions {
    /// Interfaces classified as fabric whatever detection says. Wins over `management` when both match.
    pub fabric: Vec<String>,
    /// Interfaces classified as management whatever detection says.
    pub management: Vec<String>,
    /// Interfaces not read at all; wins over `fabric` and `management`. Default: [`DEFAULT_EXCLUDE`].
    pub exclude: Vec<String>,
}

impl Default for NetdevOptions {
    fn default() -> Self {
        NetdevOptions {
            fabric: Vec::new(),
            management: Vec::new(),
            exclude: DEFAULT_EXCLUDE.iter().map(|s| s.to_string()).collect(),
        }
    }
}

impl NetdevOptions {
    /// Whether `name` is excluded.
    pub fn is_excluded(&self, name: &str) -> bool {
        self.exclude.iter().any(|p| glob_match(p, name))
    }
}

/// Decides the role of interface `name`: overrides first, then RDMA netdev or IPoIB → fabric, else management.
pub fn classify(
    name: &str,
    if_type: Option<u64>,
    rdma_netdevs: &BTreeSet<String>,
    options: &NetdevOptions,
) -> LinkRole {
    if options.fabric.iter().any(|p| glob_match(p, name)) {
        return LinkRole::Fabric;
    }
    if options.management.iter().any(|p| glob_match(p, name)) {
        return LinkRole::Management;
    }
    if rdma_netdevs.contains(name) || if_type == Some(ARPHRD_INFINIBAND) {
        LinkRole::Fabric
    } else {
        LinkRole::Management
    }
}

/// `statistics/` counters: (file = metric, tier).
const STATISTICS: &[(&str, Tier)] = &[
    ("tx_bytes", Tier::Fast),
    ("rx_bytes", Tier::Fast),
    ("tx_packets", Tier::Slow),
    ("rx_packets", Tier::Slow),
    ("tx_errors", Tier::Slow),
    ("rx_errors", Tier::Slow),
    ("tx_dropped", Tier::Slow),
    ("rx_dropped", Tier::Slow),
];

/// State string of an interface whose `operstate` is missing or unreadable.
const UNKNOWN_STATE: &str = "unknown";

/// Reads every interface under `<sysfs_root>/class/net` that is not excluded.
pub struct NetdevSource {
    sysfs_root: FsRoot,
    options: NetdevOptions,
    inventory: Inventory,
    files: FileSeries,
    absent_logged: bool,
}

impl NetdevSource {
    /// A source reading `<sysfs_root>/class/net` (and `<sysfs_root>/class/infiniband` to classify). Nothing is
    /// read until [`Source::discover`].
    pub fn new(sysfs_root: PathBuf, options: NetdevOptions) -> Self {
        let sysfs_root = FsRoot::new(sysfs_root);
        NetdevSource {
            files: FileSeries::new(sysfs_root.clone()),
            sysfs_root,
            options,
            inventory: Inventory::default(),
            absent_logged: false,
        }
    }

    /// How many reads so far found a value not available (unknown speed).
    pub fn not_available_reads(&self) -> u64 {
        self.files.not_available()
    }

    fn discover_interface(
        &mut self,
        name: &str,
        rdma: &BTreeSet<String>,
        changed: &mut bool,
    ) -> Link {
        let dir = self.sysfs_root.join("class/net").join(name);
        let type_text = self.sysfs_root.read_trimmed(&dir.join("type"));
        let if_type = type_text.as_deref().and_then(|t| parse_u64(t).ok());
        let class = if if_type == Some(ARPHRD_INFINIBAND) {
            LinkClass::Infiniband
        } else {
            LinkClass::Ethernet
        };
        let key = LinkKey::interface(class, name);
        let role = classify(name, if_type, rdma, &self.options);
        let mut attributes = BTreeMap::new();
        if let Some(t) = type_text {
            attributes.insert("type".to_string(), t);
        }
        if let Some(mtu) = self.sysfs_root.read_trimmed(&dir.join("mtu")) {
            attributes.insert("mtu".to_string(), mtu);
        }

        let series = &mut self.inventory.series;
        let files = &mut self.files;
        let gauge =
            |metric: &str| SeriesSpec::for_link(metric, SeriesKind::Gauge, Tier::Slow, &key);

        let mut state = UNKNOWN_STATE.to_string();
        if let Some(idx) = files.upsert(
            series,
            gauge("state_code"),
            dir.join("operstate"),
            Decode::OperUp,
            changed,
        ) {
            if let Ok(text) = files.read_text(idx) {
                state = parse_operstate(text).as_str().to_string();
                attributes.insert("operstate".to_string(), state.clone());
            }
        }
        let mut capacity = None;
        if let Some(idx) = files.upsert(
            series,
            gauge("capacity_bytes_per_second"),
            dir.join("speed"),
            Decode::NetSpeedBytes,
            changed,
        ) {
            // Reading fails (EINVAL) while the link is down: the speed is then unknown.
            if let Some(mbps) = files.read_text(idx).ok().and_then(parse_netdev_speed) {
                attributes.insert("speed_mbps".to_string(), mbps.to_string());
                capacity = Some(super::sysfs::mbps_to_bytes_per_second(mbps));
            }
        }

        let stats = dir.join("statistics");
        for &(metric, tier) in STATISTICS {
            files.upsert(
                series,
                SeriesSpec::for_link(metric, SeriesKind::COUNTER64, tier, &key),
                stats.join(metric),
                Decode::Counter { scale: 1 },
                changed,
            );
        }

        Link {
            key,
            endpoint: Endpoint::Interface,
            role,
            capacity_bytes_per_second: capacity,
            state,
            attributes,
            gpu: None,
            link: None,
        }
    }
}

impl Source for NetdevSource {
    fn name(&self) -> &'static str {
        "netdev"
    }

    fn discover(&mut self) -> Result<bool, SourceError> {
        let net = self.sysfs_root.join("class/net");
        let names = match self.sysfs_root.list_subdirs(&net) {
            Ok(n) => n,
            Err(SourceError::Io { error, .. })
                if error.kind() == std::io::ErrorKind::NotADirectory =>
            {
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        if names.is_empty() && !self.absent_logged {
            tracing::debug!(path = %net.display(), "no network interfaces");
            self.absent_logged = true;
        }
        let rdma = rdma_netdevs(&self.sysfs_root);

        let mut changed = false;
        let mut links = Vec::new();
        self.files.begin();
        for name in names {
            if self.options.is_excluded(&name) {
                continue;
            }
            links.push(self.discover_interface(&name, &rdma, &mut changed));
        }
        self.files.finish(&self.inventory.series);
        if links != self.inventory.links {
            self.inventory.links = links;
            changed = true;
        }
        Ok(changed)
    }

    fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    fn sample(&mut self, tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
        let mut report = ReadReport::default();
        self.files.sample(tier, sink, &mut report);
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_are_named_as_interfaces() {
        let root = tempfile::tempdir().unwrap();
        for (name, if_type) in [("eth0", "1"), ("ib0", "32")] {
            let dir = root.path().join("class/net").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("type"), format!("{if_type}\n")).unwrap();
            std::fs::write(dir.join("operstate"), "up\n").unwrap();
        }
        let mut src = NetdevSource::new(root.path().to_path_buf(), NetdevOptions::default());
        assert!(src.discover().unwrap());
        let links = &src.inventory().links;
        assert_eq!(links.len(), 2);
        for l in links {
            assert_eq!(l.endpoint, Endpoint::Interface, "{}", l.key);
            assert!(l.is_interface() && l.is_up() && l.key.device == l.key.port);
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn classification() {
        let o = NetdevOptions::default();
        let rdma = set(&["ens1f0np0"]);
        assert_eq!(classify("ens1f0np0", Some(1), &rdma, &o), LinkRole::Fabric);
        assert_eq!(classify("ib0", Some(32), &rdma, &o), LinkRole::Fabric);
        assert_eq!(classify("eth0", Some(1), &rdma, &o), LinkRole::Management);
        assert_eq!(classify("eth0", None, &rdma, &o), LinkRole::Management);

        let o = NetdevOptions {
            fabric: vec!["eth*".into()],
            management: vec!["ib1".into(), "eth0".into()],
            ..NetdevOptions::default()
        };
        assert_eq!(classify("eth0", Some(1), &rdma, &o), LinkRole::Fabric);
        assert_eq!(classify("ib1", Some(32), &rdma, &o), LinkRole::Management);
        assert_eq!(classify("ib0", Some(32), &rdma, &o), LinkRole::Fabric);
    }

    #[test]
    fn default_exclusions() {
        let o = NetdevOptions::default();
        for name in [
            "lo",
            "veth1a2b",
            "docker0",
            "cali123",
            "flannel.1",
            "cni0",
            "virbr0",
        ] {
            assert!(o.is_excluded(name), "{name}");
        }
        for name in ["eth0", "ib0", "ens1f0np0", "bond0", "lo0"] {
            assert!(!o.is_excluded(name), "{name}");
        }
    }
}
