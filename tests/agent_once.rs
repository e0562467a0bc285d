//! `commwatch agent --once` as an operator runs it: on an H100 node's tree, on a missing root, on an empty root,
//! on a tree of virtual interfaces only.

mod common;

use std::process::Command;

use common::BIN;

fn once(sysfs_root: &std::path::Path) -> (serde_json::Value, String) {
    let out = Command::new(BIN)
        .args([
            "agent",
            "--once",
            "--node",
            "t1",
            "--fast-period",
            "20ms",
            "--sysfs-root",
        ])
        .arg(sysfs_root)
        .output()
        .expect("run agent --once");
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = serde_json::from_slice(&out.stdout).expect("one JSON document on stdout");
    (doc, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The warning of `code` in the document, if any: `(level, message)`.
fn warning(doc: &serde_json::Value, code: &str) -> Option<(String, String)> {
    doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == code)
        .map(|w| {
            (
                w["level"].as_str().unwrap().to_string(),
                w["message"].as_str().unwrap().to_string(),
            )
        })
}

fn read_u64(p: std::path::PathBuf) -> u64 {
    std::fs::read_to_string(&p).unwrap().trim().parse().unwrap()
}

#[test]
fn once_on_the_h100_tree_reports_every_port_with_values_from_the_files() {
    // The shared H100 capture with the project's additions, composed in a temporary directory.
    let Some(h100) = commwatch_testdata::gpud_h100_sysfs!() else {
        return;
    };
    let root = h100.path();
    let (doc, _) = once(root);
    assert_eq!(doc["node"], "t1");
    // A complete tree: nothing to fix but NVML where this machine lacks it (a warning: the agent is blind to
    // GPUs). Noted: the IPoIB interface that is down has no speed.
    let warnings = doc["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .all(|w| (w["level"] == "warn" && w["code"] == "no_nvml")
                || (w["level"] == "info" && w["code"] == "speed_unknown")),
        "{warnings:?}"
    );
    // Fabric is there: blind to GPUs at most.
    assert!(
        doc["blind"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["what"] == "gpu"),
        "{}",
        doc["blind"]
    );
    assert_eq!(
        warning(&doc, "speed_unknown"),
        Some((
            "info".to_string(),
            "ib1: link speed unknown (-1), state down: capacity not known".to_string()
        ))
    );
    let links = doc["links"].as_array().unwrap();
    let ib: Vec<_> = links
        .iter()
        .filter(|l| l["class"] == "infiniband" && l["port"] == "1")
        .collect();
    assert_eq!(ib.len(), 8, "8 ConnectX-7 InfiniBand ports");
    let mlx5_0 = ib.iter().find(|l| l["device"] == "mlx5_0").unwrap();
    assert_eq!(mlx5_0["capacity_bytes_per_second"].as_f64(), Some(50e9));
    assert_eq!(mlx5_0["state"], "ACTIVE");
    assert_eq!(mlx5_0["role"], "fabric");
    let counters = root.join("class/infiniband/mlx5_0/ports/1/counters");
    assert_eq!(
        mlx5_0["tx_bytes_total"].as_u64(),
        Some(4 * read_u64(counters.join("port_xmit_data")))
    );
    assert_eq!(
        mlx5_0["rx_bytes_total"].as_u64(),
        Some(4 * read_u64(counters.join("port_rcv_data")))
    );
    // A static tree: the counters did not move between the two fast ticks.
    assert_eq!(mlx5_0["tx_bytes_per_second"].as_f64(), Some(0.0));
    let bond = links.iter().find(|l| l["device"] == "mlx5_bond_0").unwrap();
    assert_eq!(bond["class"], "roce");
    assert_eq!(bond["capacity_bytes_per_second"].as_f64(), Some(25e9));
    let samples = doc["samples"].as_array().unwrap();
    let downed = samples
        .iter()
        .find(|s| s["device"] == "mlx5_1" && s["metric"] == "link_downed")
        .expect("link_downed of mlx5_1");
    assert_eq!(downed["value"].as_u64(), Some(255));
    assert_eq!(
        downed["saturated"], true,
        "link_downed is an 8-bit PMA counter"
    );
    assert!(samples
        .iter()
        .any(|s| s["metric"] == "cpu_utilization_ratio"));
    // The inventory as the collector receives it: the same links (without byte figures) and every series.
    let inv_links = doc["inventory"]["links"].as_array().unwrap();
    assert_eq!(inv_links.len(), links.len());
    assert!(inv_links.iter().all(|l| l.get("tx_bytes_total").is_none()));
    let series = doc["inventory"]["series"].as_array().unwrap();
    assert!(series.len() >= samples.len());
    assert!(series.iter().any(|s| s["metric"] == "tx_bytes"
        && s["device"] == "mlx5_0"
        && s["tier"] == "fast"
        && s["kind"] == "counter"));
    assert!(doc["jobs"].is_array());
}

#[test]
fn a_missing_sysfs_root_is_said_clearly_and_the_host_source_still_works() {
    let (doc, stderr) = once(std::path::Path::new("/nonexistent/commwatch-sysfs"));
    let (level, message) = warning(&doc, "root_absent").expect("root_absent");
    assert_eq!(level, "warn");
    assert!(
        message.contains("/nonexistent/commwatch-sysfs does not exist"),
        "{message}"
    );
    assert!(warning(&doc, "root_unused").is_none());
    assert!(warning(&doc, "no_rdma_devices").is_some());
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(doc["links"].as_array().unwrap().is_empty());
    let samples = doc["samples"].as_array().unwrap();
    assert!(samples
        .iter()
        .any(|s| s["metric"] == "memory_total_bytes" && s["value"].as_f64().unwrap() > 0.0));
}

#[test]
fn an_empty_sysfs_root_is_said_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let (doc, _) = once(dir.path());
    let (level, message) = warning(&doc, "root_unused").expect("root_unused");
    assert_eq!(level, "warn");
    assert!(message.contains("has no class/ directory"), "{message}");
    let (level, message) = warning(&doc, "no_rdma_devices").expect("no_rdma_devices");
    assert_eq!(level, "info");
    assert_eq!(
        message,
        format!(
            "no InfiniBand/RoCE device under {}/class/infiniband",
            dir.path().display()
        )
    );
    assert!(warning(&doc, "no_network_interfaces").is_some());
    assert!(doc["links"].as_array().unwrap().is_empty());
}

#[test]
fn virtual_interfaces_are_no_links_and_are_said() {
    // Laid out as the kernel does: each `class/net/<if>` a link into `devices/`.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("class/net")).unwrap();
    for (name, parent) in [
        ("lo", "virtual"),
        ("ifb0", "virtual"),
        ("ifb1", "virtual"),
        ("vnet7", "virtual"),
    ] {
        let d = root.join("devices").join(parent).join("net").join(name);
        std::fs::create_dir_all(d.join("statistics")).unwrap();
        std::fs::write(d.join("type"), "1\n").unwrap();
        std::fs::write(d.join("operstate"), "up\n").unwrap();
        std::os::unix::fs::symlink(
            format!("../../devices/{parent}/net/{name}"),
            root.join("class/net").join(name),
        )
        .unwrap();
    }
    let (doc, stderr) = once(root);
    assert!(
        doc["links"].as_array().unwrap().is_empty(),
        "{}",
        doc["links"]
    );
    let (_, message) = warning(&doc, "interfaces_left_out").expect("interfaces_left_out");
    assert_eq!(
        message,
        "interfaces not read (virtual: vnet7; excluded by pattern: ifb0, ifb1, lo)"
    );
    assert!(warning(&doc, "no_network_interfaces").is_some());
    assert!(warning(&doc, "no_rdma_devices").is_some());
    assert!(stderr.contains("interfaces not read"), "{stderr}");
}

#[test]
fn once_ignores_a_plain_text_remote_collector_it_never_connects_to() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["agent", "--once", "--node", "t1", "--fast-period", "20ms"])
        .args([
            "--collector",
            "http://collector.example:7070",
            "--sysfs-root",
        ])
        .arg(dir.path())
        .output()
        .expect("run agent --once");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["node"], "t1");
    assert!(!stderr.contains("allow-plaintext"), "{stderr}");
}
