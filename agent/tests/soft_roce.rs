//! Soft-RoCE (`rxe`) as the agent sees it, on a fixture tree shaped like the sysfs of the guest that
//! `scripts/rdma-vm.sh` boots (Debian's 6.1 kernel, `rdma link add rxe0 type rxe netdev veth0`): the port has
//! `hw_counters/` but no `counters/` (no PMA), sits under `devices/virtual/`, and its netdev is a veth.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use commwatch_agent::once::run_once;
use commwatch_agent::source::infiniband::InfinibandSource;
use commwatch_agent::source::netdev::{self, NetdevOptions, Selection};
use commwatch_agent::source::{FsRoot, LinkClass, LinkKey, LinkRole, Source, Tier, Value};
use commwatch_agent::AgentConfig;
use serde_json::{json, Value as Json};

/// The 16 files of rxe's `hw_counters/` (`lifespan` is a setting), as read off the guest.
const HW_COUNTERS: [&str; 16] = [
    "ack_deferred",
    "completer_retry_err",
    "duplicate_request",
    "lifespan",
    "link_downed",
    "out_of_seq_request",
    "rcvd_pkts",
    "rcvd_rnr_err",
    "rcvd_seq_err",
    "rdma_recvs",
    "rdma_sends",
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
    "send_err",
    "send_rnr_err",
    "sent_pkts",
];

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("{text}\n")).unwrap();
}

/// A veth under `devices/virtual/net/`, linked from `class/net/`, with its byte counters at `tx`/`rx`.
fn veth(root: &Path, name: &str, tx: u64, rx: u64) {
    let dir = root.join("devices/virtual/net").join(name);
    for (f, v) in [
        ("type", "1"),
        ("mtu", "1500"),
        ("operstate", "up"),
        ("speed", "10000"),
    ] {
        write(&dir.join(f), v);
    }
    for f in [
        "tx_packets",
        "rx_packets",
        "tx_errors",
        "rx_errors",
        "tx_dropped",
        "rx_dropped",
    ] {
        write(&dir.join("statistics").join(f), "0");
    }
    write(&dir.join("statistics/tx_bytes"), &tx.to_string());
    write(&dir.join("statistics/rx_bytes"), &rx.to_string());
    std::fs::create_dir_all(root.join("class/net")).unwrap();
    symlink(
        format!("../../devices/virtual/net/{name}"),
        root.join("class/net").join(name),
    )
    .unwrap();
}

/// rxe0 on veth0 (veth1, its peer, has no RDMA device here), its packet counters at `sent`/`rcvd`.
fn soft_roce_tree(sent: u64, rcvd: u64) -> tempfile::TempDir {
    let tree = tempfile::tempdir().unwrap();
    let root = tree.path();
    let dev = root.join("devices/virtual/infiniband/rxe0");
    for (f, v) in [
        ("fw_ver", ""),
        ("node_desc", "rxe"),
        ("node_guid", "0024:13ff:fec5:518f"),
        ("node_type", "1: CA"),
        ("parent", "veth0"),
        ("sys_image_guid", "0024:13ff:fec5:518f"),
    ] {
        write(&dev.join(f), v);
    }
    let port = dev.join("ports/1");
    for (f, v) in [
        ("cap_mask", "0x00010000"),
        ("lid", "0x0"),
        ("lid_mask_count", "0"),
        ("link_layer", "Ethernet"),
        ("phys_state", "5: LinkUp"),
        ("rate", "10 Gb/sec (1X FDR10)"),
        ("sm_lid", "0x0"),
        ("sm_sl", "0"),
        ("state", "4: ACTIVE"),
        ("gids/0", "fe80:0000:0000:0000:0024:13ff:fec5:518f"),
        ("gid_attrs/ndevs/0", "veth0"),
        ("gid_attrs/ndevs/1", "veth0"),
        ("gid_attrs/types/0", "IB/RoCE v1"),
        ("gid_attrs/types/1", "RoCE v2"),
    ] {
        write(&port.join(f), v);
    }
    for f in HW_COUNTERS {
        let v = match f {
            "lifespan" => 12,
            "sent_pkts" => sent,
            "rcvd_pkts" => rcvd,
            "rdma_sends" => 7,
            _ => 0,
        };
        write(&port.join("hw_counters").join(f), &v.to_string());
    }
    std::fs::create_dir_all(root.join("class/infiniband")).unwrap();
    symlink(
        "../../devices/virtual/infiniband/rxe0",
        root.join("class/infiniband/rxe0"),
    )
    .unwrap();
    veth(root, "veth0", 5_000_000, 4_000_000);
    veth(root, "veth1", 4_000_000, 5_000_000);
    tree
}

#[test]
fn the_port_counts_packets_and_says_it_has_no_byte_counters() {
    let tree = soft_roce_tree(1200, 1100);
    let mut src = InfinibandSource::new(tree.path().to_path_buf());
    assert!(src.discover().unwrap());
    let inv = src.inventory();
    assert_eq!(inv.links.len(), 1);
    let link = &inv.links[0];
    assert_eq!(link.key, LinkKey::new(LinkClass::Roce, "rxe0", "1"));
    assert_eq!(link.role, LinkRole::Fabric);
    assert_eq!(link.state, "ACTIVE");
    assert_eq!(link.capacity_bytes_per_second, Some(1.25e9));
    assert_eq!(link.attributes["netdev"], "veth0");
    assert_eq!(link.attributes["byte_counters"], "none");
    let metric = |m: &str| inv.series.iter().find(|s| s.metric == m);
    // No byte counter at all: nothing is passed off as bytes.
    assert!(metric("tx_bytes").is_none() && metric("rx_bytes").is_none());
    // The 15 counters of hw_counters/ as they are, and the packet pair in the fast tier as packets.
    let hw: Vec<&str> = inv
        .series
        .iter()
        .filter(|s| s.metric.starts_with("hw_"))
        .map(|s| s.metric.as_str())
        .collect();
    assert_eq!(hw.len(), 15, "{hw:?}");
    assert!(!hw.contains(&"hw_lifespan"));
    assert_eq!(metric("tx_packets").unwrap().tier, Tier::Fast);
    assert_eq!(metric("rx_packets").unwrap().tier, Tier::Fast);

    let names: Vec<String> = inv.series.iter().map(|s| s.metric.clone()).collect();
    let mut values = std::collections::BTreeMap::new();
    src.sample(Tier::Fast, &mut |i, v| {
        values.insert(names[i].clone(), v);
    });
    let fast: Vec<&str> = values.keys().map(String::as_str).collect();
    assert_eq!(fast, ["rx_packets", "tx_packets"]);
    assert_eq!(values["tx_packets"], Value::Counter(1200));
    assert_eq!(values["rx_packets"], Value::Counter(1100));
}

#[test]
fn a_port_with_pma_counters_keeps_its_bytes_and_no_stand_in() {
    let tree = soft_roce_tree(1, 1);
    let counters = tree
        .path()
        .join("devices/virtual/infiniband/rxe0/ports/1/counters");
    write(&counters.join("port_xmit_data"), "250");
    write(&counters.join("port_xmit_packets"), "9");
    let mut src = InfinibandSource::new(tree.path().to_path_buf());
    src.discover().unwrap();
    let inv = src.inventory();
    assert!(!inv.links[0].attributes.contains_key("byte_counters"));
    let tx_packets: Vec<_> = inv
        .series
        .iter()
        .filter(|s| s.metric == "tx_packets")
        .collect();
    // The PMA's own packet counter (slow tier), not the stand-in.
    assert_eq!(tx_packets.len(), 1);
    assert_eq!(tx_packets[0].tier, Tier::Slow);
    assert!(inv.series.iter().any(|s| s.metric == "tx_bytes"));
}

#[test]
fn the_netdev_of_a_roce_port_is_read_though_it_is_a_veth() {
    let tree = soft_roce_tree(0, 0);
    let root = FsRoot::new(tree.path());
    let got = netdev::select(&root, &NetdevOptions::default()).unwrap();
    assert_eq!(
        got,
        [
            ("veth0".to_string(), Selection::Read),
            ("veth1".to_string(), Selection::Excluded),
        ]
    );
    // Without the built-in patterns, veth1 is still left out as virtual; veth0 still read.
    let no_patterns = NetdevOptions {
        exclude: vec![],
        ..NetdevOptions::default()
    };
    let got = netdev::select(&root, &no_patterns).unwrap();
    assert_eq!(got[0].1, Selection::Read);
    assert_eq!(got[1].1, Selection::Virtual);
    // The operator's own patterns still win.
    let own = NetdevOptions {
        exclude: vec!["veth0".into()],
        ..NetdevOptions::default()
    };
    assert_eq!(
        netdev::select(&root, &own).unwrap()[0].1,
        Selection::Excluded
    );
    let include = NetdevOptions {
        include: vec!["eth*".into()],
        ..NetdevOptions::default()
    };
    assert_eq!(
        netdev::select(&root, &include).unwrap()[0].1,
        Selection::NotIncluded
    );
    let mut src = netdev::NetdevSource::new(tree.path().to_path_buf(), NetdevOptions::default());
    src.discover().unwrap();
    let links = &src.inventory().links;
    assert_eq!(links.len(), 1);
    assert_eq!(links[0].key.device, "veth0");
    assert_eq!(links[0].role, LinkRole::Fabric);
}

fn once(sysfs: &Path) -> Json {
    let config = AgentConfig {
        node: "guest".into(),
        sysfs_root: sysfs.to_path_buf(),
        sources: vec!["infiniband".into(), "netdev".into()],
        fast_period: Duration::from_millis(5),
        ..AgentConfig::default()
    };
    run_once(&config)
}

#[test]
fn once_gives_packets_for_the_port_bytes_for_its_netdev_and_says_why() {
    let tree = soft_roce_tree(1200, 1100);
    let doc = once(tree.path());
    let links = doc["links"].as_array().unwrap();
    let rxe0 = links.iter().find(|l| l["device"] == "rxe0").unwrap();
    assert_eq!(rxe0["class"], "roce");
    assert_eq!(rxe0["attributes"]["byte_counters"], "none");
    for k in [
        "tx_bytes_total",
        "rx_bytes_total",
        "tx_bytes_per_second",
        "rx_bytes_per_second",
    ] {
        assert_eq!(rxe0[k], Json::Null, "{k}");
    }
    assert_eq!(rxe0["tx_packets_total"], json!(1200));
    assert_eq!(rxe0["rx_packets_total"], json!(1100));
    // The files did not move between the two ticks.
    assert_eq!(rxe0["tx_packets_per_second"], json!(0.0));
    let veth0 = links.iter().find(|l| l["device"] == "veth0").unwrap();
    assert_eq!(veth0["role"], "fabric");
    assert_eq!(veth0["tx_bytes_total"], json!(5_000_000));
    assert!(links.iter().all(|l| l["device"] != "veth1"));

    let warning = doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "no_byte_counters")
        .expect("a no_byte_counters warning");
    assert_eq!(warning["level"], "warn");
    let text = warning["message"].as_str().unwrap();
    for part in [
        "rxe0 port 1",
        "no ports/1/counters/",
        "packets only",
        "tx_packets",
        "byte totals, rates and utilisation are unknown",
        "veth0 counts the same traffic in bytes",
    ] {
        assert!(text.contains(part), "{part:?} not in {text:?}");
    }
}
