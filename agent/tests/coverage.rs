//! `agent --once` says what it cannot see: on an empty sysfs tree, on a tree of virtual interfaces only, and on
//! procfs roots that are absent or hold the wrong files.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use commwatch_agent::once::run_once;
use commwatch_agent::AgentConfig;
use serde_json::Value as Json;

/// `--once` on `sysfs` with the given sources (NVML among them when asked), procfs the test's own.
fn once(sysfs: &Path, procfs: &Path, sources: &[&str]) -> Json {
    let config = AgentConfig {
        node: "t1".into(),
        sysfs_root: sysfs.to_path_buf(),
        procfs_root: procfs.to_path_buf(),
        sources: sources.iter().map(|s| s.to_string()).collect(),
        fast_period: Duration::from_millis(5),
        ..AgentConfig::default()
    };
    run_once(&config)
}

/// `(code, level, message)` of each warning.
fn warnings(doc: &Json) -> Vec<(String, String, String)> {
    doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let s = |k: &str| w[k].as_str().unwrap().to_string();
            (s("code"), s("level"), s("message"))
        })
        .collect()
}

fn codes(doc: &Json) -> Vec<String> {
    warnings(doc).into_iter().map(|(c, _, _)| c).collect()
}

/// A procfs root with the two files the host source reads.
fn procfs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("stat"),
        "cpu  1 0 1 8 0 0 0 0 0 0\ncpu0 1 0 1 8 0 0 0 0 0 0\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("meminfo"),
        "MemTotal: 2048 kB\nMemAvailable: 1024 kB\n",
    )
    .unwrap();
    dir
}

#[test]
fn an_empty_sysfs_tree_lists_every_missing_part() {
    let sysfs = tempfile::tempdir().unwrap();
    let proc_ = procfs();
    let doc = once(
        sysfs.path(),
        proc_.path(),
        &["infiniband", "netdev", "host"],
    );
    let w = warnings(&doc);
    assert_eq!(
        codes(&doc),
        [
            "root_unused",
            "no_rdma_devices",
            "no_network_interfaces",
            "no_fabric"
        ],
        "{w:?}"
    );
    assert_eq!(w[0].1, "warn");
    assert!(w[0].2.contains("has no class/ directory"), "{}", w[0].2);
    assert_eq!(w[1].1, "info");
    assert!(
        w[1].2.ends_with(&format!(
            "no InfiniBand/RoCE device under {}/class/infiniband",
            sysfs.path().display()
        )),
        "{}",
        w[1].2
    );
    assert!(doc["links"].as_array().unwrap().is_empty());
    // The host source read the fixture procfs: 1 MiB of 2 MiB used.
    let used = doc["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == "memory_used_bytes")
        .expect("memory_used_bytes");
    assert_eq!(used["value"].as_f64(), Some(1024.0 * 1024.0));
}

#[test]
fn a_tree_of_virtual_interfaces_reads_none_of_them() {
    let sysfs = tempfile::tempdir().unwrap();
    let root = sysfs.path();
    std::fs::create_dir_all(root.join("class/net")).unwrap();
    std::fs::create_dir_all(root.join("class/infiniband")).unwrap();
    for name in ["lo", "ifb0", "ifb1", "veth3a", "mgmtvirt"] {
        let dir = root.join("devices/virtual/net").join(name);
        std::fs::create_dir_all(dir.join("statistics")).unwrap();
        for (f, v) in [("type", "1"), ("operstate", "up"), ("speed", "-1")] {
            std::fs::write(dir.join(f), format!("{v}\n")).unwrap();
        }
        std::fs::write(dir.join("statistics/tx_bytes"), "1\n").unwrap();
        symlink(
            format!("../../devices/virtual/net/{name}"),
            root.join("class/net").join(name),
        )
        .unwrap();
    }
    let proc_ = procfs();
    let doc = once(
        root,
        proc_.path(),
        &["infiniband", "netdev", "host", "nvml"],
    );
    assert!(
        doc["links"].as_array().unwrap().is_empty(),
        "{}",
        doc["links"]
    );
    let w = warnings(&doc);
    let code = |c: &str| {
        w.iter()
            .find(|(k, _, _)| k == c)
            .unwrap_or_else(|| panic!("{c} in {w:?}"))
    };
    assert_eq!(code("no_rdma_devices").1, "info");
    assert_eq!(code("no_network_interfaces").1, "info");
    assert_eq!(
        code("interfaces_left_out").2,
        "interfaces not read (virtual: mgmtvirt; excluded by pattern: ifb0, ifb1, lo, veth3a)"
    );
    // No fabric link at all: the agent is blind to inter-node traffic, and says so as a warning.
    let (_, level, message) = code("no_fabric");
    assert_eq!(level, "warn");
    assert!(message.starts_with("no fabric link under "), "{message}");
    let blind = doc["blind"].as_array().unwrap();
    assert!(
        blind
            .iter()
            .any(|b| b["what"] == "fabric" && b["code"] == "no_fabric"),
        "{blind:?}"
    );
    // NVML is absent on the machines the tests run on, or present: where absent the source says it is
    // unavailable (not `ok` with no errors), and the agent warns that it is blind to GPUs.
    let nvml = doc["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "nvml")
        .expect("the nvml source is listed");
    if nvml["status"] == "unavailable" {
        let (_, level, message) = code("no_nvml");
        assert_eq!(level, "warn");
        assert!(message.starts_with("NVML "), "{message}");
        assert!(message.contains(": no NVLink or GPU figures"), "{message}");
        assert!(nvml["reason"].as_str().unwrap().starts_with("NVML "));
        assert!(blind.iter().any(|b| b["what"] == "gpu"), "{blind:?}");
    } else {
        assert_eq!(nvml["status"], "ok");
    }
    assert!(!codes(&doc).iter().any(|c| c.starts_with("root_")), "{w:?}");
}

#[test]
fn an_included_interface_of_unknown_speed_is_said() {
    let sysfs = tempfile::tempdir().unwrap();
    let eth1 = sysfs.path().join("class/net/eth1");
    std::fs::create_dir_all(eth1.join("statistics")).unwrap();
    for (f, v) in [("type", "1"), ("operstate", "up"), ("speed", "-1")] {
        std::fs::write(eth1.join(f), format!("{v}\n")).unwrap();
    }
    let proc_ = procfs();
    let doc = once(sysfs.path(), proc_.path(), &["netdev"]);
    assert_eq!(doc["links"][0]["role"], "management");
    assert_eq!(
        warnings(&doc),
        [(
            "speed_unknown".to_string(),
            "info".to_string(),
            "eth1: link speed unknown (-1), state up: capacity not known".to_string()
        )]
    );
}

#[test]
fn procfs_roots_that_are_absent_or_hold_no_stat_are_said() {
    let sysfs = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(sysfs.path().join("class/net")).unwrap();
    let doc = once(
        sysfs.path(),
        Path::new("/nonexistent/commwatch-proc"),
        &["host"],
    );
    let w = warnings(&doc);
    assert_eq!(codes(&doc), ["root_absent"]);
    assert!(
        w[0].2
            .starts_with("procfs root /nonexistent/commwatch-proc does not exist"),
        "{w:?}"
    );
    assert!(
        doc["samples"].as_array().unwrap().is_empty(),
        "nothing from this machine's /proc"
    );
    let empty = tempfile::tempdir().unwrap();
    let doc = once(sysfs.path(), empty.path(), &["host"]);
    assert_eq!(codes(&doc), ["root_unused"]);
}
