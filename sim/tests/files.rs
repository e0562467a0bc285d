//! The trees on disk: exact files, formats, values at t, in-place rewrites, scenario symptoms.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use commwatch_sim::{Cluster, ClusterSpec, HwCounter, Link, NetStat, PortCounter, Scenario};
use commwatch_testdata::shared_testdata;
use commwatch_testdata::sysfs::GPUD_H100_INFINIBAND;

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Reads a counter file: decimal digits and exactly one trailing newline, as sysfs prints them.
fn counter(p: &Path) -> u64 {
    let s = read(p);
    let digits = s
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("{}: no newline in {s:?}", p.display()));
    assert!(
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
        "{}: {s:?}",
        p.display()
    );
    digits.parse().unwrap()
}

fn port_dir(root: &Path, node: usize, g: usize) -> PathBuf {
    root.join(format!("node-{node:02}/class/infiniband/mlx5_{g}/ports/1"))
}

fn net_dir(root: &Path, node: usize, dev: &str) -> PathBuf {
    root.join(format!("node-{node:02}/class/net/{dev}"))
}

fn small(sc: Scenario) -> ClusterSpec {
    ClusterSpec {
        nodes: 4,
        gpus_per_node: 2,
        ..ClusterSpec::with_scenario(sc)
    }
}

fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn tree_has_the_real_layout_and_formats() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::create(tmp.path(), small(Scenario::Healthy)).unwrap();
    let roots = c.node_roots();
    let want: Vec<String> = (0..4).map(|i| format!("node-0{i}")).collect();
    assert_eq!(
        roots.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        want
    );
    assert_eq!(roots[2].1, tmp.path().join("node-02"));
    // 2 HCAs × (21 + 5) + 3 netdevs × 8, per node.
    assert_eq!(c.counter_file_count(), 4 * (2 * 26 + 3 * 8));

    let r = tmp.path();
    let dev = r.join("node-01/class/infiniband/mlx5_1");
    assert_eq!(read(&dev.join("hca_type")), "MT4129\n");
    assert_eq!(read(&dev.join("fw_ver")), "28.39.1002\n");
    assert_eq!(read(&dev.join("board_id")), "MT_0000000838\n");
    let guid = read(&dev.join("node_guid"));
    let parts: Vec<&str> = guid.trim_end().split(':').collect();
    assert_eq!(parts.len(), 4);
    assert!(parts
        .iter()
        .all(|p| p.len() == 4 && u16::from_str_radix(p, 16).is_ok()));
    assert!(guid.starts_with("b8ce:f603:"));
    let port = port_dir(r, 1, 1);
    assert_eq!(read(&port.join("rate")), "200 Gb/sec (4X HDR)\n");
    assert_eq!(read(&port.join("state")), "4: ACTIVE\n");
    assert_eq!(read(&port.join("phys_state")), "5: LinkUp\n");
    assert_eq!(read(&port.join("link_layer")), "InfiniBand\n");
    assert_eq!(read(&port.join("lid")), "0x4\n");
    assert_eq!(read(&port.join("gid_attrs/ndevs/0")), "ib1\n");
    assert_eq!(
        fs::read_link(dev.join("device/net/ib1")).unwrap(),
        Path::new("../../../../net/ib1")
    );
    assert_eq!(read(&dev.join("device/net/ib1/type")), "32\n");

    let expect_counters: BTreeSet<String> = PortCounter::ALL
        .iter()
        .map(|c| c.file_name().to_string())
        .collect();
    assert_eq!(names(&port.join("counters")), expect_counters);
    // The same set as a real H100 node's mlx5 port (the shared gpud capture).
    if let Some(real) = shared_testdata!(&format!("{GPUD_H100_INFINIBAND}/mlx5_0/ports/1/counters"))
    {
        assert_eq!(names(&real), expect_counters);
    }
    let mut hw: BTreeSet<String> = HwCounter::ALL
        .iter()
        .map(|c| c.file_name().to_string())
        .collect();
    hw.insert("lifespan".into());
    assert_eq!(names(&port.join("hw_counters")), hw);

    let ib = net_dir(r, 1, "ib1");
    for (f, v) in [
        ("type", "32"),
        ("mtu", "4092"),
        ("operstate", "up"),
        ("carrier", "1"),
        ("speed", "200000"),
        ("duplex", "full"),
        ("addr_len", "20"),
    ] {
        assert_eq!(read(&ib.join(f)), format!("{v}\n"), "ib1/{f}");
    }
    assert_eq!(read(&ib.join("address")).trim_end().split(':').count(), 20);
    let eth = net_dir(r, 1, "eth0");
    for (f, v) in [
        ("type", "1"),
        ("mtu", "1500"),
        ("operstate", "up"),
        ("speed", "100000"),
        ("addr_len", "6"),
    ] {
        assert_eq!(read(&eth.join(f)), format!("{v}\n"), "eth0/{f}");
    }
    let expect_stats: BTreeSet<String> = NetStat::ALL
        .iter()
        .map(|s| s.file_name().to_string())
        .collect();
    assert_eq!(names(&eth.join("statistics")), expect_stats);
    assert_eq!(
        names(&r.join("node-03/class/net")),
        ["eth0", "ib0", "ib1"].map(String::from).into()
    );
}

/// Every counter file of the cluster equals the model at the cluster's current time.
fn assert_files_match_model(c: &Cluster) {
    let m = c.model();
    let t = c.now();
    let r = c.root();
    let spec = c.spec();
    for node in 0..spec.nodes {
        for g in 0..spec.gpus_per_node {
            let p = port_dir(r, node, g);
            for pc in PortCounter::ALL {
                let f = p.join("counters").join(pc.file_name());
                assert_eq!(
                    counter(&f),
                    m.port_counter(node, g, pc, t).unwrap(),
                    "{}",
                    f.display()
                );
            }
            for hc in HwCounter::ALL {
                let f = p.join("hw_counters").join(hc.file_name());
                assert_eq!(
                    counter(&f),
                    m.hw_counter(node, g, hc, t).unwrap(),
                    "{}",
                    f.display()
                );
            }
        }
        let mut links = vec![Link::Eth0];
        links.extend((0..spec.gpus_per_node).map(Link::Ipoib));
        for l in links {
            for s in NetStat::ALL {
                let f = net_dir(r, node, &l.device_name())
                    .join("statistics")
                    .join(s.file_name());
                assert_eq!(
                    counter(&f),
                    m.net_stat(node, l, s, t).unwrap(),
                    "{}",
                    f.display()
                );
            }
        }
    }
}

#[test]
fn files_hold_the_model_value_at_t_and_keep_their_inode() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::create(tmp.path(), small(Scenario::DegradedLink)).unwrap();
    assert_eq!(c.now(), Duration::ZERO);
    assert_files_match_model(&c);
    let xmit = port_dir(tmp.path(), 2, 1).join("counters/port_xmit_data");
    let ino = fs::metadata(&xmit).unwrap().ino();
    // Hold the file open like an agent does and re-read it at offset 0.
    let held = fs::File::open(&xmit).unwrap();
    let read_held = || {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 32];
        let n = held.read_at(&mut buf, 0).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    };
    let period = c.step_period();
    let mut prev = counter(&xmit);
    for ms in [1u64, 150, 295, 300, 310, 329, 330, 1_000, 5_000, 60_000] {
        let t = Duration::from_millis(ms);
        c.advance_to(t).unwrap();
        assert_eq!(c.now(), t);
        assert_files_match_model(&c);
        let v = counter(&xmit);
        assert!(v >= prev);
        prev = v;
        assert_eq!(read_held(), format!("{v}\n"));
        assert_eq!(fs::metadata(&xmit).unwrap().ino(), ino);
    }
    // ×4: the data counter grows by a quarter of the model's bytes (floor of the running total).
    let m = c.model();
    let (a, b) = (period * 3, period * 4);
    let bytes_a = m.expected_link_bytes(2, Link::Hca(1), a).unwrap();
    let bytes_b = m.expected_link_bytes(2, Link::Hca(1), b).unwrap();
    // 8 ranks: R = 2·7/8 · 220 MB.
    assert_eq!(bytes_b.tx_burst - bytes_a.tx_burst, 385_000_000);
    let d = m.port_counter(2, 1, PortCounter::PortXmitData, b).unwrap()
        - m.port_counter(2, 1, PortCounter::PortXmitData, a).unwrap();
    assert_eq!(d, bytes_b.tx / 4 - bytes_a.tx / 4);
    // Going back in time is clamped: files never decrease.
    let before = counter(&xmit);
    c.advance_to(Duration::from_millis(10)).unwrap();
    assert_eq!(c.now(), Duration::from_millis(60_000));
    assert_eq!(counter(&xmit), before);
    // A second advance to the same time writes nothing.
    let st = c.advance_to(Duration::from_millis(60_000)).unwrap();
    assert_eq!(st.written, 0);
    assert_eq!(st.unchanged, c.counter_file_count());
}

#[test]
fn management_nic_symptoms_in_files() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = ClusterSpec {
        nodes: 4,
        gpus_per_node: 8,
        ..ClusterSpec::demo()
    };
    let mut c = Cluster::create(tmp.path(), spec).unwrap();
    let r = tmp.path().to_path_buf();
    let p = c.step_period();
    // 32 ranks: R = 2·31/32 · 220 MB = 426 250 000 B; node-03's 8 GPUs → 3 410 000 000 B on eth0
    // at 9.8e9 B/s = 347.959184 ms.
    assert_eq!(
        c.timeline().burst_duration,
        Duration::from_nanos(347_959_184)
    );
    c.advance_to(p).unwrap();
    let x0 = |n: usize, g: usize| counter(&port_dir(&r, n, g).join("counters/port_xmit_data"));
    let e0 = |n: usize| counter(&net_dir(&r, n, "eth0").join("statistics/tx_bytes"));
    let (h3, h0, eth3, eth0) = (x0(3, 5), x0(0, 5), e0(3), e0(0));
    c.advance_to(p * 2).unwrap();
    let m = c.model();
    // node-03's HCA: background only (< 32 kB/s); node-00's HCA: R per step.
    let f3 = m.link(3, Link::Hca(5)).unwrap().tx;
    assert_eq!(f3.burst_bytes_at(p * 2), 0);
    assert_eq!(x0(3, 5) - h3, f3.bytes_at(p * 2) / 4 - f3.bytes_at(p) / 4);
    assert!((x0(3, 5) - h3) * 4 < 32_000);
    let f0 = m.link(0, Link::Hca(5)).unwrap().tx;
    assert_eq!(f0.burst_bytes_at(p * 2) - f0.burst_bytes_at(p), 426_250_000);
    assert_eq!(x0(0, 5) - h0, f0.bytes_at(p * 2) / 4 - f0.bytes_at(p) / 4);
    // node-03's eth0: all 8 GPUs' share plus its 1–5 MB/s background; node-00's eth0 background only.
    let eth3_d = e0(3) - eth3;
    let bg = m
        .link(3, Link::Eth0)
        .unwrap()
        .tx
        .background_bytes_per_second;
    assert_eq!(
        eth3_d,
        8 * 426_250_000 + m.link(3, Link::Eth0).unwrap().tx.background_bytes_at(p * 2)
            - m.link(3, Link::Eth0).unwrap().tx.background_bytes_at(p)
    );
    assert!((1_000_000..5_000_000).contains(&bg));
    assert!(e0(0) - eth0 < 5_000_000);
    // Mid-burst the eth0 rate is 9.8 GB/s: check over 100 ms inside step 2's burst.
    let (s, _) = c.timeline().burst_of_step(2);
    c.advance_to(s + Duration::from_millis(100)).unwrap();
    let a = e0(3);
    c.advance_to(s + Duration::from_millis(200)).unwrap();
    let rate = (e0(3) - a) as f64 / 0.1;
    assert!((rate - 9.8e9 - bg as f64).abs() < 100.0, "{rate}");
    assert!(c.describe().contains("node-03"));
}

#[test]
fn degraded_and_link_error_symptoms_in_files() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = ClusterSpec {
        degraded_lanes: 1,
        fault_node: Some(1),
        fault_hca: 1,
        ..small(Scenario::DegradedLink)
    };
    let c = Cluster::create(tmp.path(), spec).unwrap();
    let r = tmp.path();
    assert_eq!(
        read(&port_dir(r, 1, 1).join("rate")),
        "50 Gb/sec (1X HDR)\n"
    );
    assert_eq!(
        read(&port_dir(r, 1, 0).join("rate")),
        "200 Gb/sec (4X HDR)\n"
    );
    assert_eq!(read(&net_dir(r, 1, "ib1").join("speed")), "50000\n");
    // 8 ranks: R = 2·7/8 · 220 MB = 385 000 000 B at 5.5e9 B/s = 70 ms.
    assert_eq!(c.timeline().burst_duration, Duration::from_millis(70));
    let s = c.expected_step(1, Link::Hca(1)).unwrap();
    assert!((s.burst_tx_bytes_per_second - 5.5e9).abs() < 1.0);
    drop(c);

    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::create(tmp.path(), small(Scenario::LinkErrors)).unwrap();
    let errs =
        |c: &Cluster, name: &str| counter(&port_dir(c.root(), 3, 0).join("counters").join(name));
    c.advance_to(Duration::from_secs(60)).unwrap();
    assert_eq!(errs(&c, "symbol_error"), 2_400);
    assert_eq!(errs(&c, "link_error_recovery"), 12);
    assert_eq!(errs(&c, "port_rcv_errors"), 750);
    assert_eq!(errs(&c, "link_downed"), 0);
    c.advance_to(Duration::from_secs(7_200)).unwrap();
    assert_eq!(errs(&c, "symbol_error"), 65_535);
    assert_eq!(errs(&c, "link_error_recovery"), 255);
    assert_eq!(errs(&c, "port_rcv_errors"), 65_535);
    assert_eq!(
        counter(&port_dir(c.root(), 3, 1).join("counters/symbol_error")),
        0
    );
    assert_files_match_model(&c);
}

#[test]
fn straggler_burst_starts_late_in_files() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::create(tmp.path(), small(Scenario::Straggler)).unwrap();
    let x =
        |c: &Cluster, n: usize| counter(&port_dir(c.root(), n, 0).join("counters/port_xmit_data"));
    // Healthy would burst from 290 ms; here nothing but background moves until 380 ms.
    c.advance_to(Duration::from_millis(100)).unwrap();
    let a = [x(&c, 0), x(&c, 3)];
    c.advance_to(Duration::from_millis(379)).unwrap();
    for (i, n) in [0, 3].into_iter().enumerate() {
        assert!((x(&c, n) - a[i]) * 4 < 32_000 * 279 / 1000 + 8);
    }
    let at379 = [x(&c, 0), x(&c, 3)];
    // From 380 ms the burst moves R = 385 000 000 B in 17.5 ms: 22 000 000 B in the first 1 ms.
    c.advance_to(Duration::from_millis(381)).unwrap();
    for (i, n) in [0, 3].into_iter().enumerate() {
        assert!((x(&c, n) - at379[i]) * 4 >= 22_000_000);
        let b = c
            .expected_link_bytes(n, Link::Hca(0), Duration::from_millis(381))
            .unwrap();
        assert_eq!(b.tx_burst, 22_000_000);
    }
}

#[test]
fn constant_cluster_moves_exact_rates() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::constant(tmp.path(), 2, 2, 1_200_000_000, 800_000_000).unwrap();
    assert_eq!(
        c.spec().scenario.to_string(),
        "constant:1200000000:800000000"
    );
    c.advance_to(Duration::from_secs(1)).unwrap();
    let rd = |c: &Cluster, f: &str| counter(&port_dir(c.root(), 1, 1).join("counters").join(f));
    let (tx, rx) = (rd(&c, "port_xmit_data"), rd(&c, "port_rcv_data"));
    let eth = counter(&net_dir(c.root(), 1, "eth0").join("statistics/tx_bytes"));
    c.advance_to(Duration::from_secs(3)).unwrap();
    assert_eq!((rd(&c, "port_xmit_data") - tx) * 4, 2 * 1_200_000_000);
    assert_eq!((rd(&c, "port_rcv_data") - rx) * 4, 2 * 800_000_000);
    assert_eq!(
        counter(&net_dir(c.root(), 1, "eth0").join("statistics/tx_bytes")),
        eth
    );
    assert_eq!(rd(&c, "port_xmit_wait"), 0);
}

#[test]
fn trees_are_deterministic_for_a_seed() {
    fn snapshot(root: &Path) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let ft = fs::symlink_metadata(&p).unwrap().file_type();
                if ft.is_dir() {
                    stack.push(p);
                } else if ft.is_file() {
                    let rel = p.strip_prefix(root).unwrap().to_path_buf();
                    // Inspector records carry a dump time on the wall clock, as the plugin's do: the one
                    // field a seed does not fix.
                    let text = if rel.starts_with(commwatch_sim::inspector::DIR) {
                        without_dump_times(&read(&p))
                    } else {
                        read(&p)
                    };
                    out.push((rel, text));
                }
            }
        }
        out.sort();
        out
    }
    fn without_dump_times(text: &str) -> String {
        let key = "\"dump_timestamp_us\":";
        let mut out = String::new();
        let mut rest = text;
        while let Some(i) = rest.find(key) {
            out.push_str(&rest[..i + key.len()]);
            rest = rest[i + key.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
            out.push('T');
        }
        out.push_str(rest);
        out
    }
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = Duration::from_millis(1_234);
    for d in [&a, &b] {
        let mut c = Cluster::create(d.path(), small(Scenario::ManagementNic)).unwrap();
        c.advance_to(t).unwrap();
    }
    let (sa, sb) = (snapshot(a.path()), snapshot(b.path()));
    // Per node: 2 HCA ports, 3 interfaces, and one NCCL Inspector dump file per rank (2 GPUs).
    assert_eq!(sa.len(), 4 * (2 * (21 + 6 + 16) + 3 * (8 + 12) + 2));
    assert_eq!(sa, sb);
}

#[test]
fn updater_keeps_files_current_and_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::create(tmp.path(), small(Scenario::Healthy)).unwrap();
    let h = c.spawn_updater(Duration::from_millis(5));
    std::thread::sleep(Duration::from_millis(120));
    assert!(h.ticks() >= 2, "ticks {}", h.ticks());
    let c = h.stop().expect("cluster back");
    assert!(c.now() >= Duration::from_millis(100), "{:?}", c.now());
    assert_files_match_model(&c);
    // Dropping a handle also stops the thread.
    let h = c.spawn_updater(Duration::ZERO);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(h.errors(), 0);
    drop(h);
}

#[test]
fn updater_survives_its_tree_being_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::create(tmp.path(), small(Scenario::Healthy)).unwrap();
    // The files are held open, so writes to unlinked files still succeed: no error, no panic.
    fs::remove_dir_all(tmp.path().join("node-00")).unwrap();
    let h = c.spawn_updater(Duration::from_millis(2));
    std::thread::sleep(Duration::from_millis(20));
    assert!(h.ticks() > 0);
    assert_eq!(h.errors(), 0);
    assert!(h.stop().is_some());
}
