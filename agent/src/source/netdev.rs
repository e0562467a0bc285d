//! Network interfaces: `<sysfs_root>/class/net/<if>/`.
//!
//! Links: one per interface (entries that are not directories, such as `bonding_masters`, are skipped), keyed
//! `(class, <if>, <if>)`; class `infiniband` for IPoIB (`type` = 32), `ethernet` otherwise. Role: **fabric**
//! when the interface is an RDMA port's netdev (`class/infiniband/*/ports/*/gid_attrs/ndevs/*`,
//! `class/infiniband/*/device/net/*`) or IPoIB, **management** otherwise; [`NetdevOptions`] overrides win.
//!
//! Which interfaces are read ([`select`]): an `exclude` pattern match never is; when `include` patterns are
//! set, only the interfaces they match are (virtual ones too); otherwise every interface that is not virtual.
//! Virtual means what sysfs says: the interface's `class/net/<if>` entry resolves into `devices/virtual/`
//! (loopback, `ifb*`, `veth*`, bridges, tunnels: the kernel places every netdev without a parent device
//! there), except IPoIB (`type` 32) and bond masters (a `bonding/` directory), which are kept. Bond slaves are
//! physical ports and are read. An RDMA port's netdev is read though virtual or named by a built-in pattern
//! (Soft-RoCE's veth): only the operator's own `exclude` or `include` patterns leave it out. Trees that are plain directories (a copied sysfs, the simulated cluster's)
//! have no such links: there the built-in name patterns of [`DEFAULT_EXCLUDE`] do the same work.
//! State: `operstate`. Capacity: the configured one when a [`NetdevOptions::capacities`] pattern matches the
//! interface (a veth or a shaped port reports a nominal speed it does not carry), else `speed` (Mb/s × 125000
//! → bytes/s; unknown when `-1` or unreadable).
//! Attributes: `type`, `mtu`, `speed_mbps` (when known), `operstate`, `capacity_source` = `configured` when
//! the capacity comes from the configuration.
//!
//! Series (64-bit counters from `statistics/`):
//! - fast tier: `tx_bytes`, `rx_bytes`;
//! - slow tier: `tx_packets`, `rx_packets`, `tx_errors`, `rx_errors`, `tx_dropped`, `rx_dropped`, and the
//!   gauges `state_code` (1 when `operstate` is `up`, else 0) and `capacity_bytes_per_second`.
//!
//! Rediscovery: the interfaces are walked in full (every file opened or checked, the RDMA ports' netdevs
//! read, every interface classified) only when the shape of the trees changed ([`DirMark`] of `class/net`,
//! each interface's directory, and of `class/infiniband`, each device's `ports/` and `device/net/`, each
//! port's directory), and at least every [`FULL_WALK_EVERY`] discoveries. In between, a discovery lists those
//! directories and re-reads each interface's `operstate`, `speed` and `mtu` through their open files: an
//! interface that appears or goes, and a link's state, speed and MTU, are found at the next discovery as
//! before; what changes in place elsewhere (a RoCE GID's netdev) within [`FULL_WALK_EVERY`] discoveries.
//!
//! [`FULL_WALK_EVERY`]: super::dir_mark::FULL_WALK_EVERY

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::attr_file::AttrFile;
use super::dir_mark::{DirMark, Rewalk};
use super::file_series::FileSeries;
use super::fsroot::{is_absent, FsRoot};
use super::sysfs::{
    glob_match, parse_netdev_speed, parse_operstate, parse_u64, rdma_netdevs, Decode,
};
use super::{
    Endpoint, Inventory, Link, LinkClass, LinkKey, LinkRole, ReadReport, SeriesKind, SeriesSpec,
    Source, SourceError, Tier, Value,
};

/// ARPHRD_INFINIBAND: the `type` of an IPoIB interface.
pub const ARPHRD_INFINIBAND: u64 = 32;

/// Interfaces skipped unless configured otherwise: loopback and container/virtual plumbing, by name (for
/// trees without the `devices/virtual/` links that mark them in a real sysfs).
pub const DEFAULT_EXCLUDE: &[&str] = &[
    "lo", "ifb*", "veth*", "docker*", "cali*", "flannel*", "cni*", "virbr*", "br-*", "tun*",
    "tap*", "vxlan*", "dummy*",
];

/// Classification and filtering of interfaces. Patterns are interface names where `*` matches any run of
/// characters (`veth*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetdevOptions {
    /// When not empty, only the interfaces these match are read, virtual ones included (`exclude` still wins).
    pub include: Vec<String>,
    /// Interfaces classified as fabric whatever detection says. Wins over `management` when both match.
    pub fabric: Vec<String>,
    /// Interfaces classified as management whatever detection says.
    pub management: Vec<String>,
    /// Interfaces not read at all; wins over `fabric` and `management`. Default: [`DEFAULT_EXCLUDE`].
    pub exclude: Vec<String>,
    /// Capacities, bytes per second per direction, by interface pattern (the first match wins over the
    /// interface's nominal `speed`).
    pub capacities: Vec<(String, u64)>,
}

impl Default for NetdevOptions {
    fn default() -> Self {
        NetdevOptions {
            include: Vec::new(),
            fabric: Vec::new(),
            management: Vec::new(),
            exclude: DEFAULT_EXCLUDE.iter().map(|s| s.to_string()).collect(),
            capacities: Vec::new(),
        }
    }
}

impl NetdevOptions {
    /// Whether `name` is excluded.
    pub fn is_excluded(&self, name: &str) -> bool {
        self.exclude.iter().any(|p| glob_match(p, name))
    }

    /// The configured capacity of `name`, bytes/s (the first matching pattern's).
    pub fn capacity_of(&self, name: &str) -> Option<u64> {
        self.capacities
            .iter()
            .find(|(p, _)| glob_match(p, name))
            .map(|(_, c)| *c)
    }

    /// Whether `name` matches an `include` pattern (false when there are none).
    pub fn is_included(&self, name: &str) -> bool {
        self.include.iter().any(|p| glob_match(p, name))
    }
}

/// Whether an interface is read, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    Read,
    /// An `exclude` pattern matches it.
    Excluded,
    /// `include` patterns are set and none matches it.
    NotIncluded,
    /// sysfs places it under `devices/virtual/` and it is neither IPoIB nor a bond master.
    Virtual,
}

/// Decides whether interface `name` is read (see the module documentation); `virtual_device` is
/// [`is_virtual`]'s answer.
pub fn selection(name: &str, virtual_device: bool, options: &NetdevOptions) -> Selection {
    if options.is_excluded(name) {
        Selection::Excluded
    } else if !options.include.is_empty() {
        if options.is_included(name) {
            Selection::Read
        } else {
            Selection::NotIncluded
        }
    } else if virtual_device {
        Selection::Virtual
    } else {
        Selection::Read
    }
}

/// [`selection`] for an RDMA port's netdev: it carries the port's traffic in bytes, so neither sysfs's
/// virtual placement (Soft-RoCE on a veth, RoCE on a VLAN) nor a built-in pattern of [`DEFAULT_EXCLUDE`] leaves
/// it out; an `exclude` pattern of the operator's own, or `include` patterns none of which names it, still do.
pub fn rdma_netdev_selection(name: &str, options: &NetdevOptions) -> Selection {
    let own_exclude = options
        .exclude
        .iter()
        .any(|p| !DEFAULT_EXCLUDE.contains(&p.as_str()) && glob_match(p, name));
    if own_exclude {
        Selection::Excluded
    } else if !options.include.is_empty() && !options.is_included(name) {
        Selection::NotIncluded
    } else {
        Selection::Read
    }
}

/// Whether `<root>/class/net/<name>` is a virtual interface by sysfs's own layout: its entry is a link into
/// `devices/virtual/`, and it is neither IPoIB (`type` 32) nor a bond master (`bonding/`). Only the link is
/// read (`readlink`), no file is opened but `type`, through the root.
pub fn is_virtual(root: &FsRoot, name: &str) -> bool {
    let entry = root.join("class/net").join(name);
    let Ok(target) = std::fs::read_link(&entry) else {
        return false;
    };
    let under_virtual = target
        .components()
        .collect::<Vec<_>>()
        .windows(2)
        .any(|w| w[0].as_os_str() == "devices" && w[1].as_os_str() == "virtual");
    if !under_virtual {
        return false;
    }
    let ipoib = root
        .read_trimmed(&entry.join("type"))
        .and_then(|t| parse_u64(&t).ok())
        == Some(ARPHRD_INFINIBAND);
    let bond = root
        .list_subdirs(&entry)
        .is_ok_and(|d| d.iter().any(|n| n == "bonding"));
    !(ipoib || bond)
}

/// Every interface under `<root>/class/net` with whether it is read ([`selection`], or
/// [`rdma_netdev_selection`] for an RDMA port's netdev); sorted by name. An absent `class/net` gives none.
pub fn select(
    root: &FsRoot,
    options: &NetdevOptions,
) -> Result<Vec<(String, Selection)>, SourceError> {
    select_with(root, options, &rdma_netdevs(root))
}

/// [`select`] with the RDMA ports' netdevs already read ([`rdma_netdevs`]: a walk of every port).
pub fn select_with(
    root: &FsRoot,
    options: &NetdevOptions,
    rdma: &BTreeSet<String>,
) -> Result<Vec<(String, Selection)>, SourceError> {
    let net = root.join("class/net");
    let names = match root.list_subdirs(&net) {
        Ok(n) => n,
        Err(SourceError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotADirectory => {
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    Ok(names
        .into_iter()
        .map(|name| {
            let s = if rdma.contains(&name) {
                rdma_netdev_selection(&name, options)
            } else {
                selection(&name, is_virtual(root, &name), options)
            };
            (name, s)
        })
        .collect())
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

/// What a discovery without a full walk re-reads of an interface: its gauges (series indices, where it has
/// the file) and its `mtu`, open.
#[derive(Debug, Default)]
struct InterfaceFiles {
    operstate: Option<usize>,
    speed: Option<usize>,
    mtu: Option<AttrFile>,
}

/// Reads every interface under `<sysfs_root>/class/net` that is not excluded.
pub struct NetdevSource {
    sysfs_root: FsRoot,
    options: NetdevOptions,
    inventory: Inventory,
    files: FileSeries,
    /// Per link of `inventory.links`, the files a discovery without a full walk re-reads.
    facts: Vec<InterfaceFiles>,
    rewalk: Rewalk,
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
            facts: Vec::new(),
            rewalk: Rewalk::default(),
            absent_logged: false,
        }
    }

    /// How many discoveries so far walked the trees in full (see the module documentation).
    pub fn full_walks(&self) -> u64 {
        self.rewalk.full_walks()
    }

    /// The shape of the trees a full walk reads (see the module documentation); `None` when a directory of
    /// them cannot be listed.
    fn mark(&self) -> Option<u64> {
        let mut mark = DirMark::new();
        let net = self.sysfs_root.join("class/net");
        for name in mark.list(&net) {
            mark.list(&net.join(name));
        }
        let class = self.sysfs_root.join("class/infiniband");
        for dev in mark.list(&class) {
            let ports_dir = class.join(&dev).join("ports");
            for port in mark.list(&ports_dir) {
                mark.list(&ports_dir.join(port));
            }
            mark.list(&class.join(&dev).join("device/net"));
        }
        mark.finish()
    }

    /// A discovery without a full walk: each interface's state, speed and MTU read again through its open
    /// files. Returns whether a link changed.
    fn reread_links(&mut self) -> bool {
        let mut links = self.inventory.links.clone();
        let mut facts = std::mem::take(&mut self.facts);
        for (link, files) in links.iter_mut().zip(&mut facts) {
            self.read_facts(files, link);
        }
        self.facts = facts;
        if links == self.inventory.links {
            return false;
        }
        self.inventory.links = links;
        true
    }

    /// Sets an interface's state, capacity and the attributes `mtu`, `operstate`, `speed_mbps` and
    /// `capacity_source` from its files (through the open files of its gauges and `mtu`, read now); what
    /// cannot be read is left unknown or absent.
    fn read_facts(&mut self, files: &mut InterfaceFiles, link: &mut Link) {
        link.state = UNKNOWN_STATE.to_string();
        link.capacity_bytes_per_second = None;
        for attribute in ["mtu", "operstate", "speed_mbps", "capacity_source"] {
            link.attributes.remove(attribute);
        }
        if let Some(mtu) = files.mtu.as_mut().and_then(|f| trimmed(f.read().ok()?)) {
            link.attributes.insert("mtu".to_string(), mtu);
        }
        if let Some(Ok(text)) = files.operstate.map(|idx| self.files.read_text(idx)) {
            link.state = parse_operstate(text).as_str().to_string();
            link.attributes
                .insert("operstate".to_string(), link.state.clone());
        }
        let name = &link.key.device;
        if let Some(configured) = self.options.capacity_of(name) {
            // One source of capacity: the configuration's; the nominal speed stays an attribute.
            let dir = self.sysfs_root.join("class/net").join(name);
            if let Some(mbps) = self
                .sysfs_root
                .read_trimmed(&dir.join("speed"))
                .and_then(|t| parse_netdev_speed(&t))
            {
                link.attributes
                    .insert("speed_mbps".to_string(), mbps.to_string());
            }
            link.attributes
                .insert("capacity_source".to_string(), "configured".to_string());
            link.capacity_bytes_per_second = Some(configured as f64);
        } else if let Some(idx) = files.speed {
            // Reading fails (EINVAL) while the link is down: the speed is then unknown.
            if let Some(mbps) = self.files.read_text(idx).ok().and_then(parse_netdev_speed) {
                link.attributes
                    .insert("speed_mbps".to_string(), mbps.to_string());
                link.capacity_bytes_per_second = Some(super::sysfs::mbps_to_bytes_per_second(mbps));
            }
        }
    }

    /// How many reads so far found a value not available (unknown speed).
    pub fn not_available_reads(&self) -> u64 {
        self.files.not_available()
    }

    /// Registers the series of interface `name` and returns its link with the files a discovery without a
    /// full walk re-reads.
    fn discover_interface(
        &mut self,
        name: &str,
        rdma: &BTreeSet<String>,
        changed: &mut bool,
    ) -> (Link, InterfaceFiles) {
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
        let mtu = match AttrFile::open(&self.sysfs_root, dir.join("mtu")) {
            Ok(f) => Some(f),
            Err(e) => {
                if !is_absent(&e) {
                    tracing::debug!(error = %e, "fact not read");
                }
                None
            }
        };

        let series = &mut self.inventory.series;
        let files = &mut self.files;
        let mut gauge = |metric: &str, file: &str, how: Decode| {
            let spec = SeriesSpec::for_link(metric, SeriesKind::Gauge, Tier::Slow, &key);
            files.upsert(series, spec, dir.join(file), how, changed)
        };
        let operstate = gauge("state_code", "operstate", Decode::OperUp);
        let speed = match self.options.capacity_of(name) {
            // The configured capacity is the link's; `speed` is only read as an attribute.
            Some(_) => None,
            None => gauge("capacity_bytes_per_second", "speed", Decode::NetSpeedBytes),
        };
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

        let mut link = Link {
            key,
            endpoint: Endpoint::Interface,
            role,
            capacity_bytes_per_second: None,
            state: UNKNOWN_STATE.to_string(),
            attributes,
            gpu: None,
            link: None,
        };
        let mut files = InterfaceFiles {
            operstate,
            speed,
            mtu,
        };
        self.read_facts(&mut files, &mut link);
        (link, files)
    }
}

/// The trimmed text, `None` when empty.
fn trimmed(text: &str) -> Option<String> {
    let t = text.trim();
    (!t.is_empty()).then(|| t.to_string())
}

impl Source for NetdevSource {
    fn name(&self) -> &'static str {
        "netdev"
    }

    fn quick_reads(&self) -> bool {
        true
    }

    fn discover(&mut self) -> Result<bool, SourceError> {
        if !self.rewalk.full(self.mark()) {
            return Ok(self.reread_links());
        }
        let rdma = rdma_netdevs(&self.sysfs_root);
        let names = select_with(&self.sysfs_root, &self.options, &rdma)?;
        if names.is_empty() && !self.absent_logged {
            let net = self.sysfs_root.join("class/net");
            tracing::debug!(path = %net.display(), "no network interfaces");
            self.absent_logged = true;
        }

        let mut changed = false;
        let mut links = Vec::new();
        let mut facts = Vec::new();
        self.files.begin();
        for (name, selected) in names {
            if selected != Selection::Read {
                continue;
            }
            let (link, files) = self.discover_interface(&name, &rdma, &mut changed);
            links.push(link);
            facts.push(files);
        }
        self.files.finish(&self.inventory.series);
        self.facts = facts;
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
            "ifb0",
            "br-1f2e",
            "tun0",
            "tap3",
            "vxlan.calico",
            "dummy0",
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

    /// A sysfs tree laid out as the kernel does: `class/net/<if>` links into `devices/`.
    fn linked_tree(ifs: &[(&str, &str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("class/net")).unwrap();
        for (name, parent, if_type) in ifs {
            let dir = root
                .path()
                .join("devices")
                .join(parent)
                .join("net")
                .join(name);
            std::fs::create_dir_all(dir.join("statistics")).unwrap();
            std::fs::write(dir.join("type"), format!("{if_type}\n")).unwrap();
            std::fs::write(dir.join("operstate"), "up\n").unwrap();
            std::os::unix::fs::symlink(
                format!("../../devices/{parent}/net/{name}"),
                root.path().join("class/net").join(name),
            )
            .unwrap();
        }
        root
    }

    #[test]
    fn virtual_interfaces_are_told_by_their_place_in_sysfs() {
        let tree = linked_tree(&[
            ("eth0", "pci0000:00/0000:00:03.0", "1"),
            ("lo", "virtual", "772"),
            ("myifb", "virtual", "1"),
            ("ib0.8001", "virtual", "32"),
            ("bond0", "virtual", "1"),
        ]);
        std::fs::create_dir(tree.path().join("devices/virtual/net/bond0/bonding")).unwrap();
        let root = FsRoot::new(tree.path());
        let got = select(&root, &NetdevOptions::default()).unwrap();
        assert_eq!(
            got,
            [
                ("bond0".to_string(), Selection::Read),
                ("eth0".to_string(), Selection::Read),
                ("ib0.8001".to_string(), Selection::Read),
                ("lo".to_string(), Selection::Excluded),
                ("myifb".to_string(), Selection::Virtual),
            ]
        );
        let mut src = NetdevSource::new(tree.path().to_path_buf(), NetdevOptions::default());
        src.discover().unwrap();
        let names: Vec<&str> = src
            .inventory()
            .links
            .iter()
            .map(|l| l.key.device.as_str())
            .collect();
        assert_eq!(names, ["bond0", "eth0", "ib0.8001"]);
    }

    #[test]
    fn include_and_exclude_patterns() {
        let tree = linked_tree(&[
            ("eth0", "pci0000:00/0000:00:03.0", "1"),
            ("eth1", "pci0000:00/0000:00:04.0", "1"),
            ("myifb", "virtual", "1"),
            ("veth9", "virtual", "1"),
        ]);
        let root = FsRoot::new(tree.path());
        let read = |o: &NetdevOptions| -> Vec<String> {
            select(&root, o)
                .unwrap()
                .into_iter()
                .filter(|(_, s)| *s == Selection::Read)
                .map(|(n, _)| n)
                .collect()
        };
        // Include reads a virtual interface and only what it names; exclude still wins.
        let o = NetdevOptions {
            include: vec!["eth1".into(), "myifb".into(), "veth*".into()],
            ..NetdevOptions::default()
        };
        assert_eq!(read(&o), ["eth1", "myifb"]);
        assert_eq!(selection("eth0", false, &o), Selection::NotIncluded);
        let o = NetdevOptions {
            exclude: vec!["eth0".into()],
            ..NetdevOptions::default()
        };
        assert_eq!(
            read(&o),
            ["eth1"],
            "veth9 is virtual even when no pattern names it"
        );
        let o = NetdevOptions {
            include: vec!["*".into()],
            exclude: vec![],
            ..NetdevOptions::default()
        };
        assert_eq!(read(&o), ["eth0", "eth1", "myifb", "veth9"]);
    }
}
