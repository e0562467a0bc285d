//! InfiniBand and RoCE ports: `<sysfs_root>/class/infiniband/<dev>/ports/<n>/`.
//!
//! Links: one per port, class `infiniband` (`link_layer` = `InfiniBand`) or `roce` (`Ethernet`), role fabric,
//! capacity from `rate`, state from `state` (`ACTIVE`, ...). Attributes: `link_layer`, `phys_state`, `rate`,
//! `width`, `hca_type`, `fw_ver`, `board_id`, `netdev` (each where present).
//!
//! Series (counters are in base units; `max_value` is the saturation value of the file's PMA width, times the
//! scale):
//! - fast tier: `tx_bytes` (`port_xmit_data` × 4), `rx_bytes` (`port_rcv_data` × 4);
//! - slow tier: `tx_packets`, `rx_packets`, `tx_unicast_packets`, `rx_unicast_packets`, `tx_multicast_packets`,
//!   `rx_multicast_packets`, `symbol_errors`, `link_error_recoveries`, `link_downed`, `rx_errors`,
//!   `port_rcv_remote_physical_errors`, `port_rcv_switch_relay_errors`, `tx_discards`, `rx_discards` (mlx4
//!   only), `port_rcv_constraint_errors`, `port_xmit_constraint_errors`, `local_link_integrity_errors`,
//!   `excessive_buffer_overrun_errors`, `vl15_dropped`, `xmit_wait_ticks`, `hw_<name>` for every file of
//!   `hw_counters/` (64-bit), and the gauges `state_code`, `phys_state_code`, `capacity_bytes_per_second`.
//!
//! Ports without a PMA (Soft-RoCE `rxe`, whose port has no `counters/` directory) have no byte counters at
//! all: their link gets the attribute `byte_counters` = `none` (`agent --once` and the start-up log say so),
//! and the packet counters of `hw_counters/` stand in as `tx_packets`/`rx_packets` (`sent_pkts`/`rcvd_pkts`),
//! in the fast tier since they are the only data counters of the port: packets, never converted to bytes.
//! Their retries and errors stay `hw_<name>`. The port's netdev counts the same traffic in bytes.
//!
//! Counter widths. The data and packet counters of `counters/` are 64-bit on kernels that use the extended
//! PMA set. The legacy mlx4 layout (a `counters_ext/` directory beside `counters/`) keeps the 32-bit
//! `PortCounters` values in `counters/` and the 64-bit ones in `counters_ext/*_64`, `counters_ext/port_*`: there
//! the `counters_ext` file is read. Error counters keep their PMA widths (`symbol_error` 16 bits, `link_downed`
//! 8, `local_link_integrity_errors` 4, `port_xmit_wait` 32, ...) because PMA counters saturate at all ones.
//!
//! `N/A (no PMA)` (adapters without a PMA on old kernels) is counted as not available, not as a failure.
//!
//! Rediscovery: the tree is walked in full (every file opened or checked, every fact read) only when its
//! shape changed ([`DirMark`] of `class/infiniband`, each device's `ports/` and `device/net/`, each port's
//! directory, `counters/`, `counters_ext/` and `hw_counters/`), and at least every [`FULL_WALK_EVERY`]
//! discoveries. In between, a discovery lists those directories and re-reads each port's `state`,
//! `phys_state` and `rate` through their open files: a port or counter file that appears or goes, and a
//! link's state and rate, are found at the next discovery as before; a fact changed in place (`fw_ver`, the
//! RoCE GID's netdev) within [`FULL_WALK_EVERY`] discoveries.
//!
//! [`FULL_WALK_EVERY`]: super::dir_mark::FULL_WALK_EVERY

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::dir_mark::{DirMark, Rewalk};
use super::file_series::FileSeries;
use super::fsroot::FsRoot;
use super::sysfs::{counter_max, parse_ib_rate, parse_ib_state, parse_u64, Decode};
use super::{
    Endpoint, Inventory, Link, LinkClass, LinkKey, LinkRole, ReadReport, SeriesKind, SeriesSpec,
    Source, SourceError, Tier, Value,
};

/// Width of a `counters/` file.
#[derive(Debug, Clone, Copy)]
enum Width {
    /// Fixed PMA width in bits.
    Pma(u32),
    /// Data and packet counters: 64 bits, except 32 in the legacy layout (with `counters_ext/`).
    DataOrPackets,
}

/// One counter of `counters/` (or its `counters_ext/` twin).
struct CounterDef {
    metric: &'static str,
    file: &'static str,
    /// The 64-bit twin in `counters_ext/` of the legacy mlx4 layout.
    ext: Option<&'static str>,
    width: Width,
    scale: u64,
    tier: Tier,
}

const fn def(
    metric: &'static str,
    file: &'static str,
    ext: Option<&'static str>,
    width: Width,
    scale: u64,
    tier: Tier,
) -> CounterDef {
    CounterDef {
        metric,
        file,
        ext,
        width,
        scale,
        tier,
    }
}

/// The counters read from `counters/`, with the PMA widths of the kernel's `PortCounters` attributes.
#[rustfmt::skip]
const COUNTERS: &[CounterDef] = {
    use Tier::{Fast, Slow};
    use Width::{DataOrPackets as DP, Pma};
    &[
        // The data counters count 4-octet words.
        def("tx_bytes", "port_xmit_data", Some("port_xmit_data_64"), DP, 4, Fast),
        def("rx_bytes", "port_rcv_data", Some("port_rcv_data_64"), DP, 4, Fast),
        def("tx_packets", "port_xmit_packets", Some("port_xmit_packets_64"), DP, 1, Slow),
        def("rx_packets", "port_rcv_packets", Some("port_rcv_packets_64"), DP, 1, Slow),
        // Unicast and multicast counters exist only in the extended PMA set: always 64-bit.
        def("tx_unicast_packets", "unicast_xmit_packets", Some("port_unicast_xmit_packets"), Pma(64), 1, Slow),
        def("rx_unicast_packets", "unicast_rcv_packets", Some("port_unicast_rcv_packets"), Pma(64), 1, Slow),
        def("tx_multicast_packets", "multicast_xmit_packets", Some("port_multicast_xmit_packets"), Pma(64), 1, Slow),
        def("rx_multicast_packets", "multicast_rcv_packets", Some("port_multicast_rcv_packets"), Pma(64), 1, Slow),
        def("symbol_errors", "symbol_error", None, Pma(16), 1, Slow),
        def("link_error_recoveries", "link_error_recovery", None, Pma(8), 1, Slow),
        def("link_downed", "link_downed", None, Pma(8), 1, Slow),
        def("rx_errors", "port_rcv_errors", None, Pma(16), 1, Slow),
        def("port_rcv_remote_physical_errors", "port_rcv_remote_physical_errors", None, Pma(16), 1, Slow),
        def("port_rcv_switch_relay_errors", "port_rcv_switch_relay_errors", None, Pma(16), 1, Slow),
        def("tx_discards", "port_xmit_discards", None, Pma(16), 1, Slow),
        // mlx4 only; not a PortCounters field, given the width of its transmit sibling.
        def("rx_discards", "port_rcv_discards", None, Pma(16), 1, Slow),
        def("port_rcv_constraint_errors", "port_rcv_constraint_errors", None, Pma(8), 1, Slow),
        def("port_xmit_constraint_errors", "port_xmit_constraint_errors", None, Pma(8), 1, Slow),
        def("local_link_integrity_errors", "local_link_integrity_errors", None, Pma(4), 1, Slow),
        def("excessive_buffer_overrun_errors", "excessive_buffer_overrun_errors", None, Pma(4), 1, Slow),
        def("vl15_dropped", "VL15_dropped", None, Pma(16), 1, Slow),
        def("xmit_wait_ticks", "port_xmit_wait", None, Pma(32), 1, Slow),
    ]
};

/// Packet counters of `hw_counters/` read as `tx_packets`/`rx_packets` on a port without `counters/`:
/// (file, metric). `sent_pkts`/`rcvd_pkts` are Soft-RoCE's (`rxe`).
const HW_PACKETS: &[(&str, &str)] = &[("sent_pkts", "tx_packets"), ("rcvd_pkts", "rx_packets")];

/// The link attribute that says a port has no byte counters (`byte_counters` = [`NO_BYTE_COUNTERS`]).
pub const BYTE_COUNTERS_ATTRIBUTE: &str = "byte_counters";
/// The value of [`BYTE_COUNTERS_ATTRIBUTE`] on a port without `counters/`.
pub const NO_BYTE_COUNTERS: &str = "none";

/// Files of `hw_counters/` that are settings, not counters (`lifespan`: how long the driver caches the
/// counters, in milliseconds).
const HW_NOT_COUNTERS: &[&str] = &["lifespan"];

/// State string of a port whose `state` file is missing or unreadable.
const UNKNOWN_STATE: &str = "UNKNOWN";

/// The series indices of a port's gauges, where the port has the file.
#[derive(Debug, Clone, Copy, Default)]
struct PortGauges {
    state: Option<usize>,
    phys_state: Option<usize>,
    rate: Option<usize>,
}

/// Reads every InfiniBand/RoCE port under `<sysfs_root>/class/infiniband`.
pub struct InfinibandSource {
    sysfs_root: FsRoot,
    inventory: Inventory,
    files: FileSeries,
    /// Per link of `inventory.links`, its port's gauges: what a discovery without a full walk re-reads.
    gauges: Vec<PortGauges>,
    rewalk: Rewalk,
    absent_logged: bool,
}

impl InfinibandSource {
    /// A source reading `<sysfs_root>/class/infiniband`. Nothing is read until [`Source::discover`].
    pub fn new(sysfs_root: PathBuf) -> Self {
        let sysfs_root = FsRoot::new(sysfs_root);
        InfinibandSource {
            files: FileSeries::new(sysfs_root.clone()),
            sysfs_root,
            inventory: Inventory::default(),
            gauges: Vec::new(),
            rewalk: Rewalk::default(),
            absent_logged: false,
        }
    }

    /// How many discoveries so far walked the tree in full (see the module documentation).
    pub fn full_walks(&self) -> u64 {
        self.rewalk.full_walks()
    }

    /// The shape of the tree a full walk reads (see the module documentation); `None` when a directory of it
    /// cannot be listed.
    fn mark(class: &Path) -> Option<u64> {
        let mut mark = DirMark::new();
        for dev in mark.list(class) {
            let dev_dir = class.join(&dev);
            let ports_dir = dev_dir.join("ports");
            for port in mark.list(&ports_dir) {
                let port_dir = ports_dir.join(&port);
                let entries = mark.list(&port_dir);
                for sub in ["counters", "counters_ext", "hw_counters"] {
                    if entries.iter().any(|e| e == sub) {
                        mark.list(&port_dir.join(sub));
                    }
                }
            }
            mark.list(&dev_dir.join("device/net"));
        }
        mark.finish()
    }

    /// A discovery without a full walk: each link's state, physical state and rate read again through the
    /// open files of its gauges. Returns whether a link changed.
    fn reread_links(&mut self) -> bool {
        let mut links = self.inventory.links.clone();
        for (link, gauges) in links.iter_mut().zip(&self.gauges) {
            read_gauges(&mut self.files, *gauges, link);
        }
        if links == self.inventory.links {
            return false;
        }
        self.inventory.links = links;
        true
    }

    /// How many reads so far found a value not available (`N/A (no PMA)`, a rate of 0).
    pub fn not_available_reads(&self) -> u64 {
        self.files.not_available()
    }

    /// Registers the series of one port and returns its link.
    fn discover_port(
        &mut self,
        dev: &str,
        dev_dir: &Path,
        dev_facts: &BTreeMap<String, String>,
        port: &str,
        changed: &mut bool,
    ) -> (Link, PortGauges) {
        let port_dir = dev_dir.join("ports").join(port);
        let link_layer = self.sysfs_root.read_trimmed(&port_dir.join("link_layer"));
        let class = match link_layer.as_deref() {
            Some("Ethernet") => LinkClass::Roce,
            // Kernels before `link_layer` existed only had InfiniBand.
            _ => LinkClass::Infiniband,
        };
        let key = LinkKey::new(class, dev, port);
        let mut attributes = dev_facts.clone();
        if let Some(ll) = link_layer {
            attributes.insert("link_layer".into(), ll);
        }
        let gauges = self.port_gauges(&key, &port_dir, changed);
        if let Some(nd) = port_netdev(&self.sysfs_root, dev_dir, &port_dir, port) {
            attributes.insert("netdev".into(), nd);
        }
        if !self.port_counters(&key, &port_dir, changed) {
            attributes.insert(BYTE_COUNTERS_ATTRIBUTE.into(), NO_BYTE_COUNTERS.into());
        }
        let mut link = Link {
            key,
            endpoint: Endpoint::HcaPort,
            role: LinkRole::Fabric,
            capacity_bytes_per_second: None,
            state: UNKNOWN_STATE.to_string(),
            attributes,
            gpu: None,
            link: None,
        };
        read_gauges(&mut self.files, gauges, &mut link);
        (link, gauges)
    }

    /// Registers the port's gauges (`state_code`, `phys_state_code`, `capacity_bytes_per_second`); their
    /// files also give the link's state, capacity and attributes ([`read_gauges`]).
    fn port_gauges(&mut self, key: &LinkKey, port_dir: &Path, changed: &mut bool) -> PortGauges {
        let series = &mut self.inventory.series;
        let files = &mut self.files;
        let mut gauge = |metric: &str, file: &str, how: Decode| {
            let spec = SeriesSpec::for_link(metric, SeriesKind::Gauge, Tier::Slow, key);
            files.upsert(series, spec, port_dir.join(file), how, changed)
        };
        PortGauges {
            state: gauge("state_code", "state", Decode::IbStateCode),
            phys_state: gauge("phys_state_code", "phys_state", Decode::IbStateCode),
            rate: gauge("capacity_bytes_per_second", "rate", Decode::IbRateBytes),
        }
    }

    /// Registers the port's counters: the table of `counters/` (or their `counters_ext/` twins in the
    /// legacy layout) with their PMA widths, and every file of `hw_counters/`; on a port without either
    /// directory of PMA counters, [`HW_PACKETS`] as its packet counters. Whether the port has PMA counters.
    fn port_counters(&mut self, key: &LinkKey, port_dir: &Path, changed: &mut bool) -> bool {
        let series = &mut self.inventory.series;
        let files = &mut self.files;
        let counters = port_dir.join("counters");
        let counters_ext = port_dir.join("counters_ext");
        let legacy = counters_ext.is_dir();
        let pma = legacy || counters.is_dir();
        for d in COUNTERS {
            let ext_path = d.ext.filter(|_| legacy).map(|f| counters_ext.join(f));
            let (path, bits) = match ext_path {
                Some(p) if p.is_file() => (p, 64),
                _ => {
                    let bits = match d.width {
                        Width::Pma(b) => b,
                        Width::DataOrPackets if legacy => 32,
                        Width::DataOrPackets => 64,
                    };
                    (counters.join(d.file), bits)
                }
            };
            let kind = SeriesKind::Counter {
                max_value: counter_max(bits, d.scale),
            };
            files.upsert(
                series,
                SeriesSpec::for_link(d.metric, kind, d.tier, key),
                path,
                Decode::Counter { scale: d.scale },
                changed,
            );
        }
        let hw_dir = port_dir.join("hw_counters");
        for name in self.sysfs_root.list_files(&hw_dir).unwrap_or_default() {
            if HW_NOT_COUNTERS.contains(&name.as_str()) {
                continue;
            }
            let metric = format!("hw_{}", metric_safe(&name));
            files.upsert(
                series,
                SeriesSpec::for_link(&metric, SeriesKind::COUNTER64, Tier::Slow, key),
                hw_dir.join(&name),
                Decode::Counter { scale: 1 },
                changed,
            );
        }
        if !pma {
            for (file, metric) in HW_PACKETS {
                files.upsert(
                    series,
                    SeriesSpec::for_link(metric, SeriesKind::COUNTER64, Tier::Fast, key),
                    hw_dir.join(file),
                    Decode::Counter { scale: 1 },
                    changed,
                );
            }
        }
        pma
    }
}

/// Sets a port's link state, capacity and the attributes `phys_state`, `rate` and `width` from its gauges'
/// files (read through the open files now); what cannot be read is left unknown or absent.
fn read_gauges(files: &mut FileSeries, gauges: PortGauges, link: &mut Link) {
    link.state = UNKNOWN_STATE.to_string();
    link.capacity_bytes_per_second = None;
    for attribute in ["phys_state", "rate", "width"] {
        link.attributes.remove(attribute);
    }
    if let Some(idx) = gauges.state {
        if let Ok(Ok(s)) = files.read_text(idx).map(parse_ib_state) {
            link.state = s.name;
        }
    }
    if let Some(idx) = gauges.phys_state {
        if let Ok(Ok(s)) = files.read_text(idx).map(parse_ib_state) {
            link.attributes.insert("phys_state".into(), s.name);
        }
    }
    if let Some(idx) = gauges.rate {
        if let Ok(text) = files.read_text(idx) {
            let text = text.trim().to_string();
            if let Ok(rate) = parse_ib_rate(&text) {
                if rate.bytes_per_second > 0.0 {
                    link.capacity_bytes_per_second = Some(rate.bytes_per_second);
                }
                if let Some(w) = rate.width {
                    link.attributes.insert("width".into(), w);
                }
            }
            link.attributes.insert("rate".into(), text);
        }
    }
}

/// lower_snake_case form of a file name for a metric name.
fn metric_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The netdev of a port: the first RoCE GID entry's netdev (`ports/<n>/gid_attrs/ndevs/0`), else the one
/// entry of `<dev>/device/net/`, else the entry whose `dev_port` (0-based) is this port's.
fn port_netdev(root: &FsRoot, dev_dir: &Path, port_dir: &Path, port: &str) -> Option<String> {
    if let Some(nd) = root.read_trimmed(&port_dir.join("gid_attrs/ndevs/0")) {
        return Some(nd);
    }
    let net = dev_dir.join("device/net");
    let names = root.list_entries(&net).ok()?;
    if let [only] = names.as_slice() {
        return Some(only.clone());
    }
    let port_index = parse_u64(port).ok()?.checked_sub(1)?;
    names.into_iter().find(|n| {
        root.read_trimmed(&net.join(n).join("dev_port"))
            .and_then(|t| parse_u64(&t).ok())
            == Some(port_index)
    })
}

/// Sorts port directory names numerically (`2` before `10`), names that are not numbers last.
fn sort_ports(ports: &mut [String]) {
    ports.sort_by_key(|p| (p.parse::<u64>().unwrap_or(u64::MAX), p.clone()));
}

impl Source for InfinibandSource {
    fn name(&self) -> &'static str {
        "infiniband"
    }

    fn quick_reads(&self) -> bool {
        true
    }

    fn discover(&mut self) -> Result<bool, SourceError> {
        let class = self.sysfs_root.join("class/infiniband");
        if !self.rewalk.full(Self::mark(&class)) {
            return Ok(self.reread_links());
        }
        let devices = match self.sysfs_root.list_subdirs(&class) {
            Ok(d) => d,
            Err(SourceError::Io { error, .. })
                if error.kind() == std::io::ErrorKind::NotADirectory =>
            {
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        if devices.is_empty() && !self.absent_logged {
            tracing::debug!(path = %class.display(), "no InfiniBand/RoCE devices");
            self.absent_logged = true;
        }

        let mut changed = false;
        let mut links = Vec::new();
        let mut gauges = Vec::new();
        self.files.begin();
        for dev in devices {
            let dev_dir = class.join(&dev);
            let mut facts = BTreeMap::new();
            for fact in ["hca_type", "fw_ver", "board_id"] {
                if let Some(v) = self.sysfs_root.read_trimmed(&dev_dir.join(fact)) {
                    facts.insert(fact.to_string(), v);
                }
            }
            let ports = self.sysfs_root.list_subdirs(&dev_dir.join("ports"));
            let mut ports = ports.unwrap_or_default();
            sort_ports(&mut ports);
            for port in ports {
                let (link, port_gauges) =
                    self.discover_port(&dev, &dev_dir, &facts, &port, &mut changed);
                links.push(link);
                gauges.push(port_gauges);
            }
        }
        self.files.finish(&self.inventory.series);
        self.gauges = gauges;
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
    fn ports_are_named_as_hca_ports() {
        let root = tempfile::tempdir().unwrap();
        let port = root.path().join("class/infiniband/mlx5_0/ports/1");
        std::fs::create_dir_all(&port).unwrap();
        std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        std::fs::write(port.join("link_layer"), "InfiniBand\n").unwrap();
        let mut src = InfinibandSource::new(root.path().to_path_buf());
        assert!(src.discover().unwrap());
        let l = &src.inventory().links[0];
        assert_eq!(l.endpoint, Endpoint::HcaPort);
        assert_eq!(l.key, LinkKey::new(LinkClass::Infiniband, "mlx5_0", "1"));
        assert!(l.is_fabric_rdma() && l.is_up() && !l.is_interface());
    }

    #[test]
    fn metric_names_are_snake_case() {
        assert_eq!(metric_safe("np_cnp_sent"), "np_cnp_sent");
        assert_eq!(metric_safe("VL15-dropped"), "vl15_dropped");
    }

    #[test]
    fn ports_sort_numerically() {
        let mut p = vec!["10".to_string(), "2".into(), "1".into(), "x".into()];
        sort_ports(&mut p);
        assert_eq!(p, ["1", "2", "10", "x"]);
    }

    #[test]
    fn counter_table_is_consistent() {
        // Only data byte counters are in the fast tier, and only they are scaled.
        for d in COUNTERS {
            assert_eq!(
                d.tier == Tier::Fast,
                d.metric.ends_with("_bytes"),
                "{}",
                d.metric
            );
            assert_eq!(d.scale == 4, d.metric.ends_with("_bytes"), "{}", d.metric);
        }
    }
}
