//! The hardware sources against trees of real layouts (node_exporter's sysfs fixture and an H100 node's
//! InfiniBand capture, read from the shared test data through `commwatch-testdata`, the latter with the
//! project's additions in `fixtures/h100_additions`), and the conformance test every source passes (the
//! contract in `source/mod.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use commwatch_agent::source::dir_mark::FULL_WALK_EVERY;
use commwatch_agent::source::host::HostSource;
use commwatch_agent::source::infiniband::InfinibandSource;
use commwatch_agent::source::netdev::{NetdevOptions, NetdevSource};
use commwatch_agent::source::{
    Inventory, Link, LinkClass, LinkRole, ReadReport, SeriesKind, Source, SourceError, Tier, Value,
};
use commwatch_testdata::sysfs::NODE_EXPORTER_SYS;
use commwatch_testdata::{gpud_h100_sysfs, shared_testdata};

/// node_exporter's sysfs fixture, read in place from the shared test data.
#[track_caller]
fn node_exporter() -> Option<PathBuf> {
    shared_testdata!(NODE_EXPORTER_SYS)
}

/// What node_exporter exports for its fixture (`node_exporter_*_expected.txt` of the shared sysfs data).
#[track_caller]
fn shared_expected(name: &str) -> Option<String> {
    let p = shared_testdata!(&format!("sysfs/{name}"))?;
    Some(fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

/// Values of one sample, keyed `device/port/metric` (plus `|label=value` for labelled series).
struct Sampled {
    values: BTreeMap<String, Value>,
    report: ReadReport,
}

fn series_name(inv: &Inventory, idx: usize) -> String {
    let s = &inv.series[idx];
    let mut name = match &s.link {
        Some(l) => format!("{}/{}/{}", l.device, l.port, s.metric),
        None => s.metric.clone(),
    };
    for (k, v) in &s.labels {
        name.push_str(&format!("|{k}={v}"));
    }
    name
}

fn sample(src: &mut dyn Source, tier: Tier) -> Sampled {
    let mut raw = Vec::new();
    let report = src.sample(tier, &mut |i, v| raw.push((i, v)));
    let inv = src.inventory();
    let mut values = BTreeMap::new();
    for (i, v) in raw {
        assert!(i < inv.series.len(), "index {i} out of range");
        assert!(
            values.insert(series_name(inv, i), v).is_none(),
            "series {i} pushed twice"
        );
    }
    assert_eq!(report.read, values.len());
    Sampled { values, report }
}

fn discovered(mut src: impl Source) -> impl Source {
    assert!(src.discover().expect("discover"));
    src
}

fn counter(s: &Sampled, name: &str) -> u64 {
    match s.values.get(name) {
        Some(Value::Counter(v)) => *v,
        other => panic!("{name}: expected a counter, got {other:?}"),
    }
}

fn gauge(s: &Sampled, name: &str) -> f64 {
    match s.values.get(name) {
        Some(Value::Gauge(v)) => *v,
        other => panic!("{name}: expected a gauge, got {other:?}"),
    }
}

fn link<'a>(inv: &'a Inventory, device: &str, port: &str) -> &'a Link {
    inv.links
        .iter()
        .find(|l| l.key.device == device && l.key.port == port)
        .unwrap_or_else(|| panic!("no link {device}/{port}"))
}

fn kind(inv: &Inventory, device: &str, port: &str, metric: &str) -> SeriesKind {
    inv.series
        .iter()
        .find(|s| {
            s.metric == metric
                && s.link
                    .as_ref()
                    .is_some_and(|l| l.device == device && l.port == port)
        })
        .unwrap_or_else(|| panic!("no series {device}/{port}/{metric}"))
        .kind
}

fn metrics_of(inv: &Inventory, device: &str, port: &str) -> BTreeSet<String> {
    inv.series
        .iter()
        .filter(|s| {
            s.link
                .as_ref()
                .is_some_and(|l| l.device == device && l.port == port)
        })
        .map(|s| s.metric.clone())
        .collect()
}

fn attrs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `name{labels} value` lines of a Prometheus exposition → value by `name{labels}`.
fn exposition(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// Overwrites a file's content keeping its inode, as sysfs content changes under an open descriptor.
fn overwrite_in_place(path: &Path, text: &str) {
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(text.as_bytes(), 0).unwrap();
    f.set_len(text.len() as u64).unwrap();
}

// ---------------------------------------------------------------------------------------------------------
// infiniband on the node_exporter tree: mlx4 (legacy counters_ext layout) and i40iw (no PMA).

#[test]
fn infiniband_node_exporter_inventory() {
    let Some(root) = node_exporter() else { return };
    let src = discovered(InfinibandSource::new(root));
    let inv = src.inventory();
    let keys: Vec<String> = inv.links.iter().map(|l| l.key.to_string()).collect();
    assert_eq!(
        keys,
        [
            "infiniband/i40iw0/1",
            "infiniband/mlx4_0/1",
            "infiniband/mlx4_0/2"
        ]
    );
    for l in &inv.links {
        assert_eq!(l.role, LinkRole::Fabric);
        assert_eq!(l.state, "ACTIVE");
        assert_eq!((l.gpu.as_deref(), l.link.as_deref()), (None, None));
    }
    let m1 = link(inv, "mlx4_0", "1");
    assert_eq!(m1.capacity_bytes_per_second, Some(5e9));
    assert_eq!(
        m1.attributes,
        attrs(&[
            ("board_id", "SM_1141000001000"),
            ("fw_ver", "2.31.5050"),
            ("hca_type", "MT4099"),
            ("link_layer", "InfiniBand"),
            ("phys_state", "LinkUp"),
            ("rate", "40 Gb/sec (4X QDR)"),
            ("width", "4X"),
        ])
    );
    assert_eq!(
        link(inv, "mlx4_0", "2").capacity_bytes_per_second,
        Some(5e9)
    );
    let i = link(inv, "i40iw0", "1");
    assert_eq!(i.capacity_bytes_per_second, Some(1.25e9));
    assert_eq!(i.attributes["rate"], "10 Gb/sec (4X)");
    assert_eq!(i.attributes["width"], "4X");
    assert_eq!(i.attributes["board_id"], "I40IW Board ID");

    // i40iw0: 17 counter files in counters/ and the three gauges.
    assert_eq!(metrics_of(inv, "i40iw0", "1").len(), 20);
    // Port 2 has only part of counters/: the missing files are simply not series.
    assert_eq!(
        metrics_of(inv, "mlx4_0", "2"),
        [
            "capacity_bytes_per_second",
            "link_downed",
            "link_error_recoveries",
            "phys_state_code",
            "rx_bytes",
            "rx_multicast_packets",
            "rx_packets",
            "rx_unicast_packets",
            "state_code",
            "tx_bytes",
            "tx_multicast_packets",
            "tx_packets",
            "tx_unicast_packets",
        ]
        .into_iter()
        .map(String::from)
        .collect()
    );
    assert!(!metrics_of(inv, "mlx4_0", "2").contains("symbol_errors"));
}

#[test]
fn infiniband_node_exporter_fast_tier() {
    let Some(root) = node_exporter() else { return };
    let mut src = InfinibandSource::new(root);
    src.discover().unwrap();
    let s = sample(&mut src, Tier::Fast);
    // Legacy layout: counters_ext/port_{xmit,rcv}_data_64 × 4.
    assert_eq!(counter(&s, "mlx4_0/1/tx_bytes"), 3_733_440 * 4);
    assert_eq!(counter(&s, "mlx4_0/1/rx_bytes"), 4_631_917 * 4);
    // Port 2's counters/port_xmit_data says 0; its 64-bit counters_ext twin is the one read.
    assert_eq!(counter(&s, "mlx4_0/2/tx_bytes"), 14_933_760);
    assert_eq!(counter(&s, "mlx4_0/2/rx_bytes"), 18_527_668);
    // i40iw0: `N/A (no PMA)`: no samples and no failures, counted as not available.
    assert_eq!(s.values.len(), 4);
    assert_eq!((s.report.failed, s.report.errors.len()), (0, 0));
    assert_eq!(src.not_available_reads(), 2);

    // The 64-bit counters_ext data counters saturate at u64::MAX (× 4, saturating).
    let inv = src.inventory();
    assert_eq!(kind(inv, "mlx4_0", "1", "tx_bytes"), SeriesKind::COUNTER64);
    // i40iw0 has no counters_ext: its counters/ data counters are taken as 64-bit.
    assert_eq!(kind(inv, "i40iw0", "1", "rx_bytes"), SeriesKind::COUNTER64);
}

#[test]
fn infiniband_node_exporter_slow_tier() {
    let Some(root) = node_exporter() else { return };
    let mut src = InfinibandSource::new(root);
    src.discover().unwrap();
    let s = sample(&mut src, Tier::Slow);
    assert_eq!((s.report.failed, s.report.errors.len()), (0, 0));

    // mlx4_0 port 1, values equal the files.
    assert_eq!(counter(&s, "mlx4_0/1/xmit_wait_ticks"), 4_294_967_295);
    assert_eq!(counter(&s, "mlx4_0/1/tx_discards"), 5);
    assert_eq!(counter(&s, "mlx4_0/1/rx_discards"), 0);
    assert_eq!(counter(&s, "mlx4_0/1/rx_errors"), 0);
    assert_eq!(counter(&s, "mlx4_0/1/link_downed"), 0);
    assert_eq!(counter(&s, "mlx4_0/1/link_error_recoveries"), 0);
    assert_eq!(counter(&s, "mlx4_0/1/port_rcv_constraint_errors"), 0);
    assert_eq!(counter(&s, "mlx4_0/1/port_xmit_constraint_errors"), 0);
    // Packets from the 64-bit counters_ext files (the legacy layout's 64-bit values).
    assert_eq!(counter(&s, "mlx4_0/1/tx_packets"), 0);
    assert_eq!(counter(&s, "mlx4_0/1/rx_packets"), 0);
    assert_eq!(counter(&s, "mlx4_0/1/rx_multicast_packets"), 93);
    assert_eq!(counter(&s, "mlx4_0/1/tx_multicast_packets"), 16);
    assert_eq!(counter(&s, "mlx4_0/1/rx_unicast_packets"), 61_148);
    assert_eq!(counter(&s, "mlx4_0/1/tx_unicast_packets"), 61_239);
    assert_eq!(counter(&s, "mlx4_0/2/rx_multicast_packets"), 93);
    assert_eq!(counter(&s, "mlx4_0/2/tx_unicast_packets"), 61_239);
    for port in ["mlx4_0/1", "mlx4_0/2", "i40iw0/1"] {
        assert_eq!(gauge(&s, &format!("{port}/state_code")), 4.0);
        assert_eq!(gauge(&s, &format!("{port}/phys_state_code")), 5.0);
    }
    assert_eq!(gauge(&s, "mlx4_0/1/capacity_bytes_per_second"), 5e9);
    assert_eq!(gauge(&s, "i40iw0/1/capacity_bytes_per_second"), 1.25e9);
    // i40iw0 produces only its gauges: 15 slow-tier counters say `N/A (no PMA)`.
    let i40: Vec<&String> = s
        .values
        .keys()
        .filter(|k| k.starts_with("i40iw0/"))
        .collect();
    assert_eq!(i40.len(), 3);
    assert_eq!(src.not_available_reads(), 15);

    // port_xmit_wait is a 32-bit PMA counter: its value is its saturation value.
    let inv = src.inventory();
    let SeriesKind::Counter { max_value } = kind(inv, "mlx4_0", "1", "xmit_wait_ticks") else {
        panic!("xmit_wait_ticks is not a counter");
    };
    assert_eq!(max_value, 4_294_967_295);
    assert_eq!(counter(&s, "mlx4_0/1/xmit_wait_ticks"), max_value);
    assert_eq!(
        kind(inv, "mlx4_0", "1", "link_downed"),
        SeriesKind::Counter { max_value: 255 }
    );
    assert_eq!(
        kind(inv, "mlx4_0", "1", "tx_discards"),
        SeriesKind::Counter { max_value: 65_535 }
    );
    assert_eq!(
        kind(inv, "i40iw0", "1", "local_link_integrity_errors"),
        SeriesKind::Counter { max_value: 15 }
    );
}

#[test]
fn infiniband_matches_node_exporter_output() {
    let Some(text) = shared_expected("node_exporter_infiniband_expected.txt") else {
        return;
    };
    let expected = exposition(&text);
    let Some(root) = node_exporter() else { return };
    let mut src = InfinibandSource::new(root);
    src.discover().unwrap();
    let fast = sample(&mut src, Tier::Fast);
    let slow = sample(&mut src, Tier::Slow);
    let ours = |name: &str| -> f64 {
        match fast.values.get(name).or_else(|| slow.values.get(name)) {
            Some(Value::Counter(v)) => *v as f64,
            Some(Value::Gauge(v)) => *v,
            None => panic!("no value for {name}"),
        }
    };
    let pairs = [
        ("legacy_data_received_bytes_total", "rx_bytes"),
        ("legacy_data_transmitted_bytes_total", "tx_bytes"),
        (
            "legacy_multicast_packets_received_total",
            "rx_multicast_packets",
        ),
        (
            "legacy_multicast_packets_transmitted_total",
            "tx_multicast_packets",
        ),
        (
            "legacy_unicast_packets_received_total",
            "rx_unicast_packets",
        ),
        (
            "legacy_unicast_packets_transmitted_total",
            "tx_unicast_packets",
        ),
        ("legacy_packets_received_total", "rx_packets"),
        ("legacy_packets_transmitted_total", "tx_packets"),
        ("link_downed_total", "link_downed"),
        ("link_error_recovery_total", "link_error_recoveries"),
        ("rate_bytes_per_second", "capacity_bytes_per_second"),
        ("state_id", "state_code"),
        ("physical_state_id", "phys_state_code"),
    ];
    let mut checked = 0;
    for (theirs, mine) in pairs {
        for port in ["1", "2"] {
            let key = format!("node_infiniband_{theirs}{{device=\"mlx4_0\",port=\"{port}\"}}");
            let want = expected[&key];
            assert_eq!(ours(&format!("mlx4_0/{port}/{mine}")), want, "{key}");
            checked += 1;
        }
    }
    for (theirs, mine) in [
        ("port_transmit_wait_total", "xmit_wait_ticks"),
        ("port_discards_transmitted_total", "tx_discards"),
        ("port_discards_received_total", "rx_discards"),
        ("port_errors_received_total", "rx_errors"),
        (
            "port_constraint_errors_received_total",
            "port_rcv_constraint_errors",
        ),
    ] {
        let key = format!("node_infiniband_{theirs}{{device=\"mlx4_0\",port=\"1\"}}");
        assert_eq!(ours(&format!("mlx4_0/1/{mine}")), expected[&key], "{key}");
        checked += 1;
    }
    let key = "node_infiniband_rate_bytes_per_second{device=\"i40iw0\",port=\"1\"}";
    assert_eq!(ours("i40iw0/1/capacity_bytes_per_second"), expected[key]);
    assert_eq!(checked, 31);
}

// ---------------------------------------------------------------------------------------------------------
// infiniband on the gpud H100 tree: 8× ConnectX-7 NDR and one BlueField-3 RoCE bond.

const IB_HCAS: [&str; 8] = [
    "mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9",
];

#[test]
fn infiniband_gpud_inventory() {
    let Some(h100) = gpud_h100_sysfs!() else {
        return;
    };
    let src = discovered(InfinibandSource::new(h100.path().to_path_buf()));
    let inv = src.inventory();
    assert_eq!(inv.links.len(), 9);
    for dev in IB_HCAS {
        let l = link(inv, dev, "1");
        assert_eq!(l.key.class, LinkClass::Infiniband);
        assert_eq!(l.role, LinkRole::Fabric);
        assert_eq!(l.capacity_bytes_per_second, Some(50e9));
        assert_eq!(l.state, "ACTIVE");
        assert_eq!(
            l.attributes,
            attrs(&[
                ("board_id", "MT_0000000838"),
                ("fw_ver", "28.41.1000"),
                ("hca_type", "MT4129"),
                ("link_layer", "InfiniBand"),
                ("phys_state", "LinkUp"),
                ("rate", "400 Gb/sec (4X NDR)"),
                ("width", "4X"),
            ])
        );
        // 21 counters/ files, 25 hw_counters/ files (lifespan is a setting), 3 gauges.
        assert_eq!(metrics_of(inv, dev, "1").len(), 21 + 25 + 3, "{dev}");
    }
    let bond = link(inv, "mlx5_bond_0", "1");
    assert_eq!(bond.key.class, LinkClass::Roce);
    assert_eq!(bond.role, LinkRole::Fabric);
    assert_eq!(bond.capacity_bytes_per_second, Some(25e9));
    assert_eq!(bond.attributes["link_layer"], "Ethernet");
    assert_eq!(bond.attributes["width"], "2X");
    assert_eq!(bond.attributes["hca_type"], "MT41692");
    assert_eq!(bond.attributes["netdev"], "ens1f0np0");
    assert!(!metrics_of(inv, "mlx5_0", "1").contains("hw_lifespan"));

    // Modern layout: data and packets in counters/ are 64-bit.
    assert_eq!(kind(inv, "mlx5_0", "1", "tx_bytes"), SeriesKind::COUNTER64);
    assert_eq!(
        kind(inv, "mlx5_0", "1", "rx_packets"),
        SeriesKind::COUNTER64
    );
    assert_eq!(
        kind(inv, "mlx5_0", "1", "symbol_errors"),
        SeriesKind::Counter { max_value: 65_535 }
    );
    assert_eq!(
        kind(inv, "mlx5_0", "1", "hw_out_of_sequence"),
        SeriesKind::COUNTER64
    );
}

#[test]
fn infiniband_gpud_values() {
    let Some(h100) = gpud_h100_sysfs!() else {
        return;
    };
    let mut src = InfinibandSource::new(h100.path().to_path_buf());
    src.discover().unwrap();
    let fast = sample(&mut src, Tier::Fast);
    assert_eq!(fast.values.len(), 18);
    assert_eq!(fast.report.failed, 0);
    for dev in IB_HCAS.iter().chain(&["mlx5_bond_0"]) {
        assert_eq!(
            counter(&fast, &format!("{dev}/1/tx_bytes")),
            230_442_669_431_839 * 4
        );
    }
    assert_eq!(counter(&fast, "mlx5_0/1/rx_bytes"), 230_539_874_932_483 * 4);
    assert_eq!(counter(&fast, "mlx5_1/1/rx_bytes"), 205_128_687_774_249 * 4);

    let slow = sample(&mut src, Tier::Slow);
    assert_eq!((slow.report.failed, src.not_available_reads()), (0, 0));
    // 9 ports × (19 slow counters + 25 hw counters + 3 gauges).
    assert_eq!(slow.values.len(), 9 * (19 + 25 + 3));
    assert_eq!(counter(&slow, "mlx5_0/1/tx_packets"), 315_487_941_081);
    assert_eq!(counter(&slow, "mlx5_0/1/rx_packets"), 317_548_853_677);
    assert_eq!(counter(&slow, "mlx5_0/1/xmit_wait_ticks"), 2_489_603_687);
    assert_eq!(counter(&slow, "mlx5_0/1/rx_errors"), 14);
    assert_eq!(counter(&slow, "mlx5_0/1/link_downed"), 0);
    assert_eq!(counter(&slow, "mlx5_1/1/port_rcv_switch_relay_errors"), 2);
    assert_eq!(
        counter(&slow, "mlx5_0/1/hw_rx_write_requests"),
        3_809_045_607
    );
    assert_eq!(counter(&slow, "mlx5_0/1/hw_rx_read_requests"), 9_187_392);
    assert_eq!(counter(&slow, "mlx5_bond_0/1/hw_rx_dct_connect"), 422_237);
    assert_eq!(counter(&slow, "mlx5_bond_0/1/hw_roce_adp_retrans"), 3);
    assert_eq!(counter(&slow, "mlx5_bond_0/1/hw_out_of_sequence"), 0);
    assert_eq!(gauge(&slow, "mlx5_0/1/capacity_bytes_per_second"), 50e9);
    assert_eq!(
        gauge(&slow, "mlx5_bond_0/1/capacity_bytes_per_second"),
        25e9
    );
    assert_eq!(gauge(&slow, "mlx5_9/1/state_code"), 4.0);
    assert_eq!(gauge(&slow, "mlx5_9/1/phys_state_code"), 5.0);

    // mlx5_1's link_downed sits at the all-ones of its 8-bit PMA width: saturated.
    let inv = src.inventory();
    assert_eq!(counter(&slow, "mlx5_1/1/link_downed"), 255);
    assert_eq!(
        kind(inv, "mlx5_1", "1", "link_downed"),
        SeriesKind::Counter { max_value: 255 }
    );
    // excessive_buffer_overrun_errors = 15 is saturated too (4 bits).
    assert_eq!(
        counter(&slow, "mlx5_0/1/excessive_buffer_overrun_errors"),
        15
    );
    assert_eq!(
        kind(inv, "mlx5_0", "1", "excessive_buffer_overrun_errors"),
        SeriesKind::Counter { max_value: 15 }
    );
}

// ---------------------------------------------------------------------------------------------------------
// infiniband on trees written here.

/// A minimal modern IB port under `<root>/class/infiniband/<dev>/ports/<port>`.
fn write_ib_port(root: &Path, dev: &str, port: &str, rate: &str) {
    let p = root
        .join("class/infiniband")
        .join(dev)
        .join("ports")
        .join(port);
    write(&p.join("state"), "4: ACTIVE\n");
    write(&p.join("phys_state"), "5: LinkUp\n");
    write(&p.join("rate"), &format!("{rate}\n"));
    write(&p.join("link_layer"), "InfiniBand\n");
    write(&p.join("counters/port_xmit_data"), "100\n");
    write(&p.join("counters/port_rcv_data"), "200\n");
    write(&p.join("counters/symbol_error"), "3\n");
    write(&p.join("counters/link_downed"), "1\n");
    write(&p.join("hw_counters/np_cnp_sent"), "42\n");
    write(&p.join("hw_counters/rp_cnp_handled"), "43\n");
    write(&p.join("hw_counters/lifespan"), "12\n");
}

#[test]
fn infiniband_legacy_32bit_data_counter_saturates_at_four_times_all_ones() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_ib_port(root, "mlx4_0", "1", "40 Gb/sec (4X QDR)");
    let p = root.join("class/infiniband/mlx4_0/ports/1");
    // Legacy layout whose counters_ext has only the receive twin: transmit stays on the 32-bit counters/ file.
    write(&p.join("counters_ext/port_rcv_data_64"), "5000000000\n");
    write(&p.join("counters/port_xmit_data"), "4294967295\n");
    let mut src = InfinibandSource::new(root.to_path_buf());
    src.discover().unwrap();
    let inv = src.inventory();
    assert_eq!(
        kind(inv, "mlx4_0", "1", "tx_bytes"),
        SeriesKind::Counter {
            max_value: 17_179_869_180
        }
    );
    assert_eq!(kind(inv, "mlx4_0", "1", "rx_bytes"), SeriesKind::COUNTER64);
    let s = sample(&mut src, Tier::Fast);
    assert_eq!(counter(&s, "mlx4_0/1/tx_bytes"), 17_179_869_180);
    assert_eq!(counter(&s, "mlx4_0/1/rx_bytes"), 20_000_000_000);
}

#[test]
fn infiniband_roce_counters_and_netdev_from_device_net() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_ib_port(root, "mlx5_2", "1", "100 Gb/sec (4X EDR)");
    write_ib_port(root, "mlx5_2", "2", "25 Gb/sec (1X EDR)");
    let dev = root.join("class/infiniband/mlx5_2");
    write(&dev.join("ports/1/link_layer"), "Ethernet\n");
    write(&dev.join("ports/2/link_layer"), "Ethernet\n");
    // Two netdevs on the PCI device: each port finds its own by `dev_port`.
    write(&dev.join("device/net/enp1s0f0/dev_port"), "0\n");
    write(&dev.join("device/net/enp1s0f1/dev_port"), "1\n");
    let mut src = InfinibandSource::new(root.to_path_buf());
    src.discover().unwrap();
    let inv = src.inventory();
    let p1 = link(inv, "mlx5_2", "1");
    assert_eq!(p1.key.class, LinkClass::Roce);
    assert_eq!(p1.capacity_bytes_per_second, Some(12.5e9));
    assert_eq!(p1.attributes["netdev"], "enp1s0f0");
    assert_eq!(link(inv, "mlx5_2", "2").attributes["netdev"], "enp1s0f1");
    assert_eq!(
        link(inv, "mlx5_2", "2").capacity_bytes_per_second,
        Some(3.125e9)
    );
    let s = sample(&mut src, Tier::Slow);
    assert_eq!(counter(&s, "mlx5_2/1/hw_np_cnp_sent"), 42);
    assert_eq!(counter(&s, "mlx5_2/2/hw_rp_cnp_handled"), 43);
    assert!(!s.values.contains_key("mlx5_2/1/hw_lifespan"));
    assert_eq!(counter(&s, "mlx5_2/1/symbol_errors"), 3);
}

#[test]
fn infiniband_discover_notices_state_and_rate_changes_and_keeps_indices() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_ib_port(root, "mlx5_0", "1", "400 Gb/sec (4X NDR)");
    let mut src = InfinibandSource::new(root.to_path_buf());
    assert!(src.discover().unwrap());
    assert!(!src.discover().unwrap(), "nothing changed");
    let before = src.inventory().clone();
    let p = root.join("class/infiniband/mlx5_0/ports/1");
    let ino = fs::metadata(p.join("state")).unwrap().ino();

    overwrite_in_place(&p.join("state"), "1: DOWN\n");
    overwrite_in_place(&p.join("rate"), "200 Gb/sec (4X HDR)\n");
    assert!(src.discover().unwrap());
    let inv = src.inventory();
    let l = link(inv, "mlx5_0", "1");
    assert_eq!(l.state, "DOWN");
    assert_eq!(l.capacity_bytes_per_second, Some(25e9));
    assert_eq!(l.attributes["rate"], "200 Gb/sec (4X HDR)");
    assert_eq!(
        inv.series, before.series,
        "series and their indices unchanged"
    );
    assert_eq!(fs::metadata(p.join("state")).unwrap().ino(), ino);

    let s = sample(&mut src, Tier::Slow);
    assert_eq!(gauge(&s, "mlx5_0/1/state_code"), 1.0);
    assert_eq!(gauge(&s, "mlx5_0/1/capacity_bytes_per_second"), 25e9);

    // A new hw counter appears: appended, earlier indices unchanged.
    write(&p.join("hw_counters/out_of_sequence"), "9\n");
    assert!(src.discover().unwrap());
    let inv = src.inventory();
    assert_eq!(inv.series.len(), before.series.len() + 1);
    assert_eq!(inv.series[..before.series.len()], before.series[..]);
    assert_eq!(inv.series.last().unwrap().metric, "hw_out_of_sequence");

    // The port vanishes: its series stay in the inventory and stop producing.
    fs::remove_dir_all(root.join("class/infiniband/mlx5_0")).unwrap();
    assert!(src.discover().unwrap());
    assert!(src.inventory().links.is_empty());
    assert_eq!(src.inventory().series.len(), before.series.len() + 1);
    let s = sample(&mut src, Tier::Slow);
    assert_eq!((s.values.len(), s.report.failed), (0, 0));

    // It comes back: the same indices produce again.
    write_ib_port(root, "mlx5_0", "1", "400 Gb/sec (4X NDR)");
    src.discover().unwrap();
    assert_eq!(src.inventory().series.len(), before.series.len() + 1);
    let s = sample(&mut src, Tier::Fast);
    assert_eq!(counter(&s, "mlx5_0/1/tx_bytes"), 400);
}

#[test]
fn infiniband_files_replaced_by_rename_are_reopened_at_discovery() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_ib_port(root, "mlx5_0", "1", "400 Gb/sec (4X NDR)");
    let mut src = InfinibandSource::new(root.to_path_buf());
    src.discover().unwrap();
    let path = root.join("class/infiniband/mlx5_0/ports/1/counters/port_xmit_data");
    let tmp = path.with_extension("new");
    write(&tmp, "7\n");
    fs::rename(&tmp, &path).unwrap();
    // The open handle still reads the old inode until discovery sees the new one.
    assert_eq!(
        counter(&sample(&mut src, Tier::Fast), "mlx5_0/1/tx_bytes"),
        400
    );
    assert!(!src.discover().unwrap());
    assert_eq!(
        counter(&sample(&mut src, Tier::Fast), "mlx5_0/1/tx_bytes"),
        28
    );
}

/// A rediscovery walks the tree in full only when its shape changed, and at least every `FULL_WALK_EVERY`
/// discoveries: a port or a device that appears or goes and a counter file that appears are still found at the
/// very next discovery, a state changed in place too (without a full walk), and a fact changed in place within
/// the bound.
#[test]
fn infiniband_rediscovery_walks_in_full_only_when_the_tree_changed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let ib = root.join("class/infiniband");
    write_ib_port(root, "mlx5_0", "1", "400 Gb/sec (4X NDR)");
    write(&ib.join("mlx5_0/fw_ver"), "28.39.1002\n");
    let mut src = InfinibandSource::new(root.to_path_buf());
    assert!(src.discover().unwrap());
    assert_eq!(src.full_walks(), 1);
    assert!(!src.discover().unwrap());
    assert_eq!(src.full_walks(), 1, "nothing changed: no full walk");

    write_ib_port(root, "mlx5_0", "2", "200 Gb/sec (4X HDR)");
    assert!(src.discover().unwrap(), "a port appeared");
    assert_eq!(src.inventory().links.len(), 2);
    assert_eq!(src.full_walks(), 2);
    let p2 = ib.join("mlx5_0/ports/2");
    write(&p2.join("hw_counters/out_of_sequence"), "9\n");
    assert!(src.discover().unwrap(), "a counter file appeared");
    assert_eq!(
        counter(&sample(&mut src, Tier::Slow), "mlx5_0/2/hw_out_of_sequence"),
        9
    );
    write_ib_port(root, "mlx5_1", "1", "400 Gb/sec (4X NDR)");
    assert!(src.discover().unwrap(), "a device appeared");
    assert_eq!(src.inventory().links.len(), 3);
    fs::remove_dir_all(&p2).unwrap();
    assert!(src.discover().unwrap(), "a port went");
    assert_eq!(src.inventory().links.len(), 2);
    let s = sample(&mut src, Tier::Slow);
    assert!(!s.values.contains_key("mlx5_0/2/hw_out_of_sequence"));
    assert_eq!(counter(&s, "mlx5_1/1/symbol_errors"), 3);

    let walks = src.full_walks();
    assert!(!src.discover().unwrap());
    overwrite_in_place(&ib.join("mlx5_0/ports/1/state"), "1: DOWN\n");
    assert!(src.discover().unwrap(), "a state changed in place");
    assert_eq!(link(src.inventory(), "mlx5_0", "1").state, "DOWN");
    assert_eq!(src.full_walks(), walks, "found without a full walk");

    overwrite_in_place(&ib.join("mlx5_0/fw_ver"), "28.40.1000\n");
    let found = (1..=FULL_WALK_EVERY).find(|_| src.discover().unwrap());
    assert!(
        found.is_some(),
        "a fact changed in place, found within the bound"
    );
    assert_eq!(
        link(src.inventory(), "mlx5_0", "1").attributes["fw_ver"],
        "28.40.1000"
    );
}

// ---------------------------------------------------------------------------------------------------------
// netdev.

/// `class/net/eth0` of node_exporter's fixture: a symbolic link into `devices/` as on every real machine, or a
/// plain file holding the link's target where the tree was copied without links.
const NODE_EXPORTER_ETH0: &str = "class/net/eth0";

/// node_exporter's netdev fixture read in place: `eth0` is read when its link is intact (node_exporter reads
/// it too) and skipped when the tree was flattened; the other interfaces either way.
#[test]
fn netdev_node_exporter() {
    let Some(root) = node_exporter() else { return };
    let linked = root.join(NODE_EXPORTER_ETH0).is_dir();
    check_node_exporter_netdev(&root, linked);
}

/// The same fixture in both layouts, whichever one the shared data holds: with `eth0` a link into `devices/`
/// and with it flattened to a plain file.
#[test]
fn netdev_node_exporter_linked_and_flattened() {
    let Some(shared) = node_exporter() else {
        return;
    };
    for linked in [true, false] {
        let tree = commwatch_testdata::ComposedTree::new("sys")
            .unwrap()
            .add("", &shared)
            .unwrap();
        let eth0 = tree.path().join(NODE_EXPORTER_ETH0);
        let target = match fs::read_link(&eth0) {
            Ok(target) => target,
            Err(_) => PathBuf::from(fs::read_to_string(&eth0).unwrap().trim()),
        };
        fs::remove_file(&eth0).unwrap();
        if linked {
            std::os::unix::fs::symlink(&target, &eth0).unwrap();
        } else {
            write(&eth0, &format!("{}\n", target.display()));
        }
        check_node_exporter_netdev(tree.path(), linked);
    }
}

/// What the netdev source reads from node_exporter's fixture at `root`; `eth0_linked`: whether `eth0` is a
/// link to its directory (read) rather than a flattened plain file (not an interface: skipped).
#[track_caller]
fn check_node_exporter_netdev(root: &Path, eth0_linked: bool) {
    let mut src = NetdevSource::new(root.to_path_buf(), NetdevOptions::default());
    assert!(src.discover().unwrap());
    let inv = src.inventory();
    // `bonding_masters` is a file, not an interface; so is `eth0` when flattened.
    let names: Vec<&str> = inv.links.iter().map(|l| l.key.device.as_str()).collect();
    let expected: &[&str] = if eth0_linked {
        &["bond0", "dmz", "eth0", "int"]
    } else {
        &["bond0", "dmz", "int"]
    };
    assert_eq!(names, expected, "eth0 linked: {eth0_linked}");
    for l in &inv.links {
        assert_eq!(l.key.class, LinkClass::Ethernet);
        assert_eq!(l.key.port, l.key.device);
        assert_eq!(l.role, LinkRole::Management);
        assert_eq!(l.state, "up");
        assert_eq!(l.attributes["mtu"], "1500");
        assert_eq!(l.attributes["type"], "1");
        assert_eq!(l.attributes["operstate"], "up");
        assert!(!l.attributes.contains_key("address"));
    }
    // bond0 `speed` is -1: unknown.
    let bond = link(inv, "bond0", "bond0");
    assert_eq!(bond.capacity_bytes_per_second, None);
    assert!(!bond.attributes.contains_key("speed_mbps"));
    let dmz = link(inv, "dmz", "dmz");
    assert_eq!(dmz.capacity_bytes_per_second, Some(1.25e8));
    assert_eq!(dmz.attributes["speed_mbps"], "1000");
    // A link with a known speed has two series (state, capacity), bond0 one; no statistics/ in this tree.
    let extra = if eth0_linked { 2 } else { 0 };
    assert_eq!(inv.series.len(), 6 + extra);
    let eth0_capacity = eth0_linked.then(|| link(inv, "eth0", "eth0").capacity_bytes_per_second);

    let fast = sample(&mut src, Tier::Fast);
    assert_eq!((fast.values.len(), fast.report.failed), (0, 0));
    let slow = sample(&mut src, Tier::Slow);
    assert_eq!(slow.report.failed, 0);
    assert_eq!(gauge(&slow, "bond0/bond0/state_code"), 1.0);
    assert_eq!(gauge(&slow, "dmz/dmz/capacity_bytes_per_second"), 1.25e8);
    assert_eq!(gauge(&slow, "int/int/capacity_bytes_per_second"), 1.25e8);
    assert!(!slow
        .values
        .contains_key("bond0/bond0/capacity_bytes_per_second"));
    assert_eq!(slow.values.len(), 5 + extra);
    assert_eq!(src.not_available_reads(), 1);

    let Some(text) = shared_expected("node_exporter_netclass_expected.txt") else {
        return;
    };
    let expected = exposition(&text);
    assert_eq!(expected["node_network_up{device=\"bond0\"}"], 1.0);
    assert_eq!(expected["node_network_mtu_bytes{device=\"bond0\"}"], 1500.0);
    // node_exporter drops bond0's invalid speed as we do.
    assert!(!expected.contains_key("node_network_speed_bytes{device=\"bond0\"}"));
    if eth0_linked {
        // node_exporter, reading the link, exports eth0: the same speed and state here.
        assert_eq!(
            eth0_capacity,
            Some(Some(expected["node_network_speed_bytes{device=\"eth0\"}"]))
        );
        assert_eq!(expected["node_network_up{device=\"eth0\"}"], 1.0);
        assert_eq!(gauge(&slow, "eth0/eth0/state_code"), 1.0);
    }
}

const NICS: [(&str, [u64; 8]); 4] = [
    (
        "ens1f0np0",
        [
            555_555_555_555,
            666_666_666_666,
            77_777_777,
            88_888_888,
            13,
            14,
            15,
            16,
        ],
    ),
    (
        "eth0",
        [
            987_654_321_098,
            876_543_210_987,
            1_234_567,
            2_345_678,
            9,
            10,
            11,
            12,
        ],
    ),
    (
        "ib0",
        [
            1_234_567_890_123,
            2_345_678_901_234,
            345_678_901,
            456_789_012,
            0,
            1,
            2,
            3,
        ],
    ),
    ("ib1", [11, 22, 33, 44, 5, 6, 7, 8]),
];
const STAT_METRICS: [&str; 8] = [
    "tx_bytes",
    "rx_bytes",
    "tx_packets",
    "rx_packets",
    "tx_errors",
    "rx_errors",
    "tx_dropped",
    "rx_dropped",
];

#[test]
fn netdev_gpud_classification_and_values() {
    let Some(h100) = gpud_h100_sysfs!() else {
        return;
    };
    let mut src = NetdevSource::new(h100.path().to_path_buf(), NetdevOptions::default());
    src.discover().unwrap();
    let inv = src.inventory();
    let summary: Vec<(String, LinkClass, LinkRole, Option<f64>, String)> = inv
        .links
        .iter()
        .map(|l| {
            (
                l.key.device.clone(),
                l.key.class,
                l.role,
                l.capacity_bytes_per_second,
                l.state.clone(),
            )
        })
        .collect();
    let up = || "up".to_string();
    assert_eq!(
        summary,
        vec![
            // The netdev of mlx5_bond_0 (gid_attrs/ndevs/0): fabric.
            (
                "ens1f0np0".into(),
                LinkClass::Ethernet,
                LinkRole::Fabric,
                Some(25e9),
                up()
            ),
            (
                "eth0".into(),
                LinkClass::Ethernet,
                LinkRole::Management,
                Some(3.125e9),
                up()
            ),
            // IPoIB (type 32): fabric, class infiniband.
            (
                "ib0".into(),
                LinkClass::Infiniband,
                LinkRole::Fabric,
                Some(50e9),
                up()
            ),
            (
                "ib1".into(),
                LinkClass::Infiniband,
                LinkRole::Fabric,
                None,
                "down".into()
            ),
        ]
    );
    assert_eq!(
        link(inv, "ens1f0np0", "ens1f0np0").attributes,
        attrs(&[
            ("mtu", "9000"),
            ("operstate", "up"),
            ("speed_mbps", "200000"),
            ("type", "1")
        ])
    );
    let fast_metrics: BTreeSet<&str> = inv
        .series
        .iter()
        .filter(|s| s.tier == Tier::Fast)
        .map(|s| s.metric.as_str())
        .collect();
    assert_eq!(fast_metrics, BTreeSet::from(["rx_bytes", "tx_bytes"]));

    let fast = sample(&mut src, Tier::Fast);
    let slow = sample(&mut src, Tier::Slow);
    assert_eq!((fast.report.failed, slow.report.failed), (0, 0));
    assert_eq!(fast.values.len(), 8);
    // 4 × 6 statistics + 4 state + 3 known capacities.
    assert_eq!(slow.values.len(), 31);
    for (nic, values) in NICS {
        for (metric, want) in STAT_METRICS.iter().zip(values) {
            let name = format!("{nic}/{nic}/{metric}");
            let s = if metric.ends_with("_bytes") {
                &fast
            } else {
                &slow
            };
            assert_eq!(counter(s, &name), want, "{name}");
        }
    }
    assert_eq!(gauge(&slow, "ib1/ib1/state_code"), 0.0);
    assert_eq!(gauge(&slow, "ib0/ib0/state_code"), 1.0);
    assert_eq!(gauge(&slow, "eth0/eth0/capacity_bytes_per_second"), 3.125e9);
    assert_eq!(
        gauge(&slow, "ens1f0np0/ens1f0np0/capacity_bytes_per_second"),
        25e9
    );
}

#[test]
fn netdev_overrides_win() {
    let opts = NetdevOptions {
        fabric: vec!["eth*".into()],
        management: vec!["ib*".into(), "ens1f0np0".into()],
        exclude: vec!["ib1".into()],
        ..NetdevOptions::default()
    };
    let Some(h100) = gpud_h100_sysfs!() else {
        return;
    };
    let mut src = NetdevSource::new(h100.path().to_path_buf(), opts);
    src.discover().unwrap();
    let roles: Vec<(&str, LinkRole)> = src
        .inventory()
        .links
        .iter()
        .map(|l| (l.key.device.as_str(), l.role))
        .collect();
    assert_eq!(
        roles,
        [
            ("ens1f0np0", LinkRole::Management),
            ("eth0", LinkRole::Fabric),
            ("ib0", LinkRole::Management),
        ]
    );
    // Excluded interfaces have no series either.
    assert!(metrics_of(src.inventory(), "ib1", "ib1").is_empty());
}

#[test]
fn netdev_default_exclusions_and_device_net_classification() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for nic in [
        "lo",
        "veth12ab",
        "docker0",
        "cali7",
        "flannel.1",
        "cni0",
        "virbr0",
        "enp1s0f0",
        "eno1",
    ] {
        let d = root.join("class/net").join(nic);
        write(&d.join("type"), if nic == "lo" { "772\n" } else { "1\n" });
        write(&d.join("operstate"), "up\n");
        write(&d.join("statistics/tx_bytes"), "1\n");
    }
    write(&root.join("class/net/bonding_masters"), "\n");
    // enp1s0f0 belongs to an RDMA device through device/net (no gid_attrs).
    write(
        &root.join("class/infiniband/mlx5_0/device/net/enp1s0f0/dev_port"),
        "0\n",
    );
    let mut src = NetdevSource::new(root.to_path_buf(), NetdevOptions::default());
    src.discover().unwrap();
    let roles: Vec<(&str, LinkRole)> = src
        .inventory()
        .links
        .iter()
        .map(|l| (l.key.device.as_str(), l.role))
        .collect();
    assert_eq!(
        roles,
        [
            ("eno1", LinkRole::Management),
            ("enp1s0f0", LinkRole::Fabric)
        ]
    );
    // No `speed` file: capacity unknown and no capacity series.
    assert_eq!(src.inventory().links[0].capacity_bytes_per_second, None);
    assert!(!metrics_of(src.inventory(), "eno1", "eno1").contains("capacity_bytes_per_second"));
}

/// As for InfiniBand: an interface that appears or goes is found at the next discovery, its state, speed and
/// MTU changed in place too (without a full walk), and an RDMA port's netdev named in place within the bound.
#[test]
fn netdev_rediscovery_walks_in_full_only_when_the_trees_changed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let nic = |name: &str| {
        let d = root.join("class/net").join(name);
        write(&d.join("type"), "1\n");
        write(&d.join("operstate"), "up\n");
        write(&d.join("speed"), "100000\n");
        write(&d.join("mtu"), "1500\n");
        write(&d.join("statistics/tx_bytes"), "1\n");
        d
    };
    let eth0 = nic("eth0");
    let port = root.join("class/infiniband/mlx5_0/ports/1");
    write(&port.join("link_layer"), "Ethernet\n");
    write(&port.join("gid_attrs/ndevs/0"), "eth9\n");
    let mut src = NetdevSource::new(root.to_path_buf(), NetdevOptions::default());
    assert!(src.discover().unwrap());
    assert!(!src.discover().unwrap());
    assert_eq!(src.full_walks(), 1, "nothing changed: no full walk");

    nic("eth1");
    assert!(src.discover().unwrap(), "an interface appeared");
    assert_eq!(src.inventory().links.len(), 2);
    fs::remove_dir_all(root.join("class/net/eth1")).unwrap();
    assert!(src.discover().unwrap(), "an interface went");
    assert_eq!(src.inventory().links.len(), 1);

    let walks = src.full_walks();
    overwrite_in_place(&eth0.join("mtu"), "9000\n");
    overwrite_in_place(&eth0.join("operstate"), "down\n");
    overwrite_in_place(&eth0.join("speed"), "25000\n");
    assert!(
        src.discover().unwrap(),
        "state, speed and MTU changed in place"
    );
    let l = link(src.inventory(), "eth0", "eth0");
    assert_eq!(
        (l.state.as_str(), l.attributes["mtu"].as_str()),
        ("down", "9000")
    );
    assert_eq!(l.capacity_bytes_per_second, Some(25_000.0 * 125_000.0));
    assert_eq!(src.full_walks(), walks, "found without a full walk");

    assert_eq!(
        link(src.inventory(), "eth0", "eth0").role,
        LinkRole::Management
    );
    overwrite_in_place(&port.join("gid_attrs/ndevs/0"), "eth0\n");
    let found = (1..=FULL_WALK_EVERY).find(|_| src.discover().unwrap());
    assert!(
        found.is_some(),
        "the RoCE port's netdev, found within the bound"
    );
    assert_eq!(link(src.inventory(), "eth0", "eth0").role, LinkRole::Fabric);
}

// ---------------------------------------------------------------------------------------------------------
// Held-open files, garbage and the conformance test.

#[test]
fn held_open_files_see_in_place_updates() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_ib_port(root, "mlx5_0", "1", "400 Gb/sec (4X NDR)");
    let nic = root.join("class/net/eth0");
    write(&nic.join("type"), "1\n");
    write(&nic.join("operstate"), "up\n");
    write(&nic.join("statistics/rx_bytes"), "5\n");
    let mut ib = InfinibandSource::new(root.to_path_buf());
    let mut nd = NetdevSource::new(root.to_path_buf(), NetdevOptions::default());
    ib.discover().unwrap();
    nd.discover().unwrap();
    assert_eq!(
        counter(&sample(&mut ib, Tier::Fast), "mlx5_0/1/tx_bytes"),
        400
    );
    assert_eq!(
        counter(&sample(&mut nd, Tier::Fast), "eth0/eth0/rx_bytes"),
        5
    );

    let xmit = root.join("class/infiniband/mlx5_0/ports/1/counters/port_xmit_data");
    let ino = fs::metadata(&xmit).unwrap().ino();
    // Longer, then shorter than before: the buffer is re-read from offset 0 and the old tail is not kept.
    overwrite_in_place(&xmit, "123456789012\n");
    overwrite_in_place(&nic.join("statistics/rx_bytes"), "6000\n");
    assert_eq!(
        counter(&sample(&mut ib, Tier::Fast), "mlx5_0/1/tx_bytes"),
        493_827_156_048
    );
    assert_eq!(
        counter(&sample(&mut nd, Tier::Fast), "eth0/eth0/rx_bytes"),
        6000
    );
    overwrite_in_place(&xmit, "9\n");
    assert_eq!(
        counter(&sample(&mut ib, Tier::Fast), "mlx5_0/1/tx_bytes"),
        36
    );
    assert_eq!(
        fs::metadata(&xmit).unwrap().ino(),
        ino,
        "same inode: no reopen needed"
    );
}

#[test]
fn garbage_fails_one_series_and_the_others_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_ib_port(root, "mlx5_0", "1", "400 Gb/sec (4X NDR)");
    let p = root.join("class/infiniband/mlx5_0/ports/1");
    write(&p.join("counters/port_xmit_data"), "garbage\n");
    write(&p.join("state"), "ACTIVE\n");
    let mut src = InfinibandSource::new(root.to_path_buf());
    src.discover().unwrap();
    // The unparseable state is unknown in the inventory, not a discovery failure.
    assert_eq!(link(src.inventory(), "mlx5_0", "1").state, "UNKNOWN");

    let fast = sample(&mut src, Tier::Fast);
    assert_eq!(fast.report.failed, 1);
    assert_eq!(counter(&fast, "mlx5_0/1/rx_bytes"), 800);
    assert!(!fast.values.contains_key("mlx5_0/1/tx_bytes"));
    match &fast.report.errors[..] {
        [e @ SourceError::Parse { path, bytes, .. }] => {
            assert!(path.ends_with("counters/port_xmit_data"), "{path:?}");
            // The length of what was read, never the text itself.
            assert_eq!(*bytes, "garbage\n".len());
            assert!(!e.to_string().contains("garbage"), "{e}");
        }
        other => panic!("unexpected errors {other:?}"),
    }
    let slow = sample(&mut src, Tier::Slow);
    assert_eq!(slow.report.failed, 1, "{:?}", slow.report.errors);
    assert_eq!(counter(&slow, "mlx5_0/1/symbol_errors"), 3);
    assert_eq!(gauge(&slow, "mlx5_0/1/capacity_bytes_per_second"), 50e9);

    // Netdev likewise.
    let nic = root.join("class/net/eth0");
    write(&nic.join("type"), "1\n");
    write(&nic.join("statistics/rx_bytes"), "-3\n");
    write(&nic.join("statistics/tx_bytes"), "9\n");
    let mut nd = NetdevSource::new(root.to_path_buf(), NetdevOptions::default());
    nd.discover().unwrap();
    let fast = sample(&mut nd, Tier::Fast);
    assert_eq!(fast.report.failed, 1);
    assert_eq!(counter(&fast, "eth0/eth0/tx_bytes"), 9);

    // Too many failures: every one counted, the first four kept.
    for f in ["symbol_error", "link_downed", "port_rcv_data"] {
        write(&p.join("counters").join(f), "x\n");
    }
    for f in ["np_cnp_sent", "rp_cnp_handled"] {
        write(&p.join("hw_counters").join(f), "\u{7f}\n");
    }
    let slow = sample(&mut src, Tier::Slow);
    assert_eq!(slow.report.failed, 5);
    assert_eq!(slow.report.errors.len(), 4);
}

/// What every source keeps, checked on one root.
fn check_contract(src: &mut dyn Source, what: &str) {
    src.discover()
        .unwrap_or_else(|e| panic!("{what}: discover: {e}"));
    let inv = src.inventory().clone();
    let identities: BTreeSet<String> = inv.series.iter().map(|s| s.identity()).collect();
    assert_eq!(
        identities.len(),
        inv.series.len(),
        "{what}: identities unique"
    );
    let link_keys: BTreeSet<_> = inv.links.iter().map(|l| l.key.clone()).collect();
    assert_eq!(link_keys.len(), inv.links.len(), "{what}: link keys unique");
    for s in &inv.series {
        let is_bytes = matches!(s.metric.as_str(), "tx_bytes" | "rx_bytes");
        assert_eq!(
            s.tier == Tier::Fast,
            is_bytes,
            "{what}: {} tier",
            s.identity()
        );
        if let Some(k) = &s.link {
            assert!(
                link_keys.contains(k),
                "{what}: {} has no link",
                s.identity()
            );
        }
        assert!(
            s.metric
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{what}: metric {} not lower_snake_case",
            s.metric
        );
    }
    for tier in [Tier::Fast, Tier::Slow] {
        let mut pushed = Vec::new();
        let report = src.sample(tier, &mut |i, v| pushed.push((i, v)));
        assert_eq!(report.read, pushed.len(), "{what}");
        assert!(report.errors.len() <= report.failed.min(4), "{what}");
        for (i, v) in pushed {
            assert!(i < inv.series.len(), "{what}: index {i}");
            let s = &inv.series[i];
            assert_eq!(
                s.tier,
                tier,
                "{what}: {} sampled in the wrong tier",
                s.identity()
            );
            match (s.kind, v) {
                (SeriesKind::Counter { max_value }, Value::Counter(c)) => {
                    assert!(
                        c <= max_value,
                        "{what}: {} = {c} above {max_value}",
                        s.identity()
                    )
                }
                (SeriesKind::Gauge, Value::Gauge(g)) => assert!(g.is_finite(), "{what}"),
                (k, v) => panic!("{what}: {} is {k:?} but gave {v:?}", s.identity()),
            }
        }
    }
    assert!(
        !src.discover().unwrap(),
        "{what}: a second discover finds no change"
    );
    assert_eq!(src.inventory(), &inv, "{what}: inventory stable");
}

type MakeSource = fn(PathBuf) -> Box<dyn Source>;

fn sysfs_sources() -> [(&'static str, MakeSource); 2] {
    [
        ("infiniband", |r| Box::new(InfinibandSource::new(r))),
        ("netdev", |r| {
            Box::new(NetdevSource::new(r, NetdevOptions::default()))
        }),
    ]
}

#[test]
fn conformance_on_fixtures() {
    let (Some(node_exporter), Some(h100)) = (node_exporter(), gpud_h100_sysfs!()) else {
        return;
    };
    for (name, make) in sysfs_sources() {
        for (tree, root) in [
            ("node_exporter", &node_exporter),
            ("gpud_h100", &h100.path().to_path_buf()),
        ] {
            let mut src = make(root.clone());
            assert_eq!(src.name(), name);
            check_contract(src.as_mut(), &format!("{name} on {tree}"));
            assert!(!src.inventory().links.is_empty(), "{name} on {tree}");
        }
    }
}

#[test]
fn conformance_on_missing_and_empty_roots() {
    let dir = tempfile::tempdir().unwrap();
    let file_root = dir.path().join("a-file");
    write(&file_root, "not a directory\n");
    let roots = [
        dir.path().join("does-not-exist"),
        dir.path().to_path_buf(),
        file_root,
    ];
    for (name, make) in sysfs_sources() {
        for root in &roots {
            let mut src = make(root.clone());
            assert!(
                !src.discover().unwrap(),
                "{name} on {root:?}: nothing to find"
            );
            assert_eq!(src.inventory(), &Inventory::default());
            check_contract(src.as_mut(), &format!("{name} on {root:?}"));
            for tier in [Tier::Fast, Tier::Slow] {
                let r = src.sample(tier, &mut |_, _| panic!("no series, no values"));
                assert_eq!((r.read, r.failed), (0, 0));
            }
        }
    }
}

#[test]
fn conformance_on_a_damaged_tree() {
    // The composed tree is a private copy: damaging it leaves the shared data alone.
    let Some(h100) = gpud_h100_sysfs!() else {
        return;
    };
    let root = h100.path().to_path_buf();
    let port = root.join("class/infiniband/mlx5_0/ports/1");
    write(&port.join("counters/port_xmit_data"), "\n");
    write(&port.join("counters/symbol_error"), "-1\n");
    write(&port.join("rate"), "fast\n");
    write(&port.join("hw_counters/out_of_sequence"), "N/A (no PMA)\n");
    write(&root.join("class/net/eth0/statistics/rx_bytes"), "1e9\n");
    write(&root.join("class/net/eth0/speed"), "\n");
    for (name, make) in sysfs_sources() {
        let mut src = make(root.clone());
        check_contract(src.as_mut(), &format!("{name} on a damaged tree"));
    }
    let mut ib = InfinibandSource::new(root.clone());
    ib.discover().unwrap();
    assert_eq!(
        link(ib.inventory(), "mlx5_0", "1").capacity_bytes_per_second,
        None
    );
    let (f, s) = (sample(&mut ib, Tier::Fast), sample(&mut ib, Tier::Slow));
    assert_eq!((f.report.failed, f.values.len()), (1, 17));
    // symbol_error and rate fail; out_of_sequence is not available.
    assert_eq!(s.report.failed, 2);
    assert_eq!(s.values.len(), 9 * (19 + 25 + 3) - 3);
    assert_eq!(ib.not_available_reads(), 1);
}

#[test]
fn host_source() {
    let mut src = HostSource::new("/proc".into());
    assert_eq!(src.name(), "host");
    check_contract(&mut src, "host");
    let inv = src.inventory().clone();
    assert!(inv.links.is_empty());
    assert!(inv
        .series
        .iter()
        .all(|s| s.link.is_none() && s.tier == Tier::Slow));
    let cpus: Vec<&String> = inv
        .series
        .iter()
        .filter(|s| s.metric == "cpu_utilization_ratio")
        .filter_map(|s| s.labels.get("cpu"))
        .collect();
    assert!(!cpus.is_empty());
    let expected: Vec<String> = (0..cpus.len()).map(|i| i.to_string()).collect();
    assert_eq!(cpus, expected.iter().collect::<Vec<_>>());

    std::thread::sleep(std::time::Duration::from_millis(250));
    let s = sample(&mut src, Tier::Slow);
    assert_eq!(s.report.failed, 0);
    // Total, per CPU, used and total memory.
    assert_eq!(s.values.len(), 1 + cpus.len() + 2);
    let total = gauge(&s, "memory_total_bytes");
    let used = gauge(&s, "memory_used_bytes");
    assert!(
        total > 0.0 && used > 0.0 && used <= total,
        "{used} of {total}"
    );
    let ratio = gauge(&s, "cpu_utilization_ratio");
    assert!((0.0..=1.0).contains(&ratio));
    for cpu in &cpus {
        let r = gauge(&s, &format!("cpu_utilization_ratio|cpu={cpu}"));
        assert!((0.0..=1.0).contains(&r));
    }
    assert_eq!(sample(&mut src, Tier::Fast).values.len(), 0);
}

/// A procfs root with `stat` (total and two CPUs, jiffies `user nice system idle iowait irq softirq steal`)
/// and `meminfo`.
fn write_procfs(root: &std::path::Path, cpus: [[u64; 8]; 3], mem_kb: (u64, u64)) {
    let line = |name: &str, j: &[u64; 8]| {
        let j: Vec<String> = j.iter().map(u64::to_string).collect();
        format!("{name} {} 0 0\n", j.join(" "))
    };
    let stat = format!(
        "{}{}{}intr 0\nctxt 1\nbtime 2\n",
        line("cpu ", &cpus[0]),
        line("cpu0", &cpus[1]),
        line("cpu1", &cpus[2])
    );
    std::fs::write(root.join("stat"), stat).unwrap();
    let (total, available) = mem_kb;
    std::fs::write(
        root.join("meminfo"),
        format!(
            "MemTotal: {total} kB\nMemFree: 1 kB\nMemAvailable: {available} kB\nBuffers: 0 kB\n"
        ),
    )
    .unwrap();
}

#[test]
fn host_source_reads_its_procfs_root() {
    let dir = tempfile::tempdir().unwrap();
    write_procfs(
        dir.path(),
        [
            [200, 0, 0, 1800, 0, 0, 0, 0],
            [100, 0, 0, 900, 0, 0, 0, 0],
            [100, 0, 0, 900, 0, 0, 0, 0],
        ],
        (16_000_000, 12_000_000),
    );
    let mut src = HostSource::new(dir.path().to_path_buf());
    check_contract(&mut src, "host");
    let cpus = src
        .inventory()
        .series
        .iter()
        .filter(|s| s.labels.contains_key("cpu"))
        .count();
    assert_eq!(cpus, 2, "the fixture's CPUs, not this machine's");
    // 400 jiffies later: cpu0 busy for 100 of 200 (user 60, system 20, irq 10, steal 10; iowait is idle),
    // cpu1 for 0 of 200; in all 100 of 400.
    write_procfs(
        dir.path(),
        [
            [260, 0, 20, 1950, 150, 10, 0, 10],
            [160, 0, 20, 950, 50, 10, 0, 10],
            [100, 0, 0, 1000, 100, 0, 0, 0],
        ],
        (16_000_000, 10_000_000),
    );
    let s = sample(&mut src, Tier::Slow);
    assert_eq!(s.report.failed, 0, "{:?}", s.report.errors);
    assert_eq!(gauge(&s, "cpu_utilization_ratio"), 0.25);
    assert_eq!(gauge(&s, "cpu_utilization_ratio|cpu=0"), 0.5);
    assert_eq!(gauge(&s, "cpu_utilization_ratio|cpu=1"), 0.0);
    assert_eq!(gauge(&s, "memory_total_bytes"), 16_000_000.0 * 1024.0);
    assert_eq!(gauge(&s, "memory_used_bytes"), 6_000_000.0 * 1024.0);

    // Files it cannot parse: the source says so. (It keeps its files open, as procfs regenerates them; a
    // fixture rewrites them in place.) Without a root it reads nothing from this machine's /proc.
    std::fs::write(dir.path().join("meminfo"), "garbage\n").unwrap();
    std::fs::write(dir.path().join("stat"), "garbage\n").unwrap();
    let s = sample(&mut src, Tier::Slow);
    assert!(s.values.is_empty());
    assert_eq!(s.report.failed, 3, "CPU total and both memory series");
    let mut src = HostSource::new(dir.path().join("absent"));
    assert!(src.discover().is_err());
}
