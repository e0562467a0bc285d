//! The variants on disk: a flapping port's state files, eight rails' trees, idle nodes' and two jobs' procfs.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use commwatch_sim::{Cluster, ClusterSpec, Link, NetStat, PortCounter, Scenario, Variant};

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn port_dir(root: &Path, node: usize, g: usize) -> PathBuf {
    root.join(format!("node-{node:02}/class/infiniband/mlx5_{g}/ports/1"))
}

fn small(variants: &[Variant]) -> ClusterSpec {
    ClusterSpec {
        nodes: 4,
        gpus_per_node: 2,
        ..ClusterSpec::with_variants(Scenario::Healthy, variants)
    }
}

/// `(key, value)` pairs of a NUL-separated environ file.
fn environ(p: &Path) -> Vec<(String, String)> {
    read(p)
        .split('\0')
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (k, v) = e.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn env_get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

#[test]
fn flapping_port_state_files_follow_the_model() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::create(tmp.path(), small(&[Variant::Flapping])).unwrap();
    // 4 state files of the one flapping port on top of 4 × (2 × 26 + 3 × 8) counters.
    assert_eq!(c.counter_file_count(), 4 * (2 * 26 + 3 * 8) + 4);
    let r = tmp.path().to_path_buf();
    let port = port_dir(&r, 3, 0);
    let ib0 = r.join("node-03/class/net/ib0");
    let state = || {
        (
            read(&port.join("state")),
            read(&port.join("phys_state")),
            read(&ib0.join("operstate")),
            read(&ib0.join("carrier")),
            read(&port.join("counters/link_downed")),
        )
    };
    let up = || {
        (
            "4: ACTIVE\n".to_string(),
            "5: LinkUp\n".to_string(),
            "up\n".to_string(),
            "1\n".to_string(),
        )
    };
    assert_eq!(state(), (up().0, up().1, up().2, up().3, "0\n".to_string()));
    // Its first down step.
    let tl = c.timeline().clone();
    let first_down = (0..100).find(|&k| tl.is_flapped(k)).unwrap();
    c.advance_to(tl.step_start(first_down)).unwrap();
    assert_eq!(
        state(),
        (
            "1: DOWN\n".to_string(),
            "2: Polling\n".to_string(),
            "down\n".to_string(),
            "0\n".to_string(),
            "1\n".to_string()
        )
    );
    // Traffic moved to mlx5_1 meanwhile: the node's share, 2 × 385 000 000, on one rail.
    assert_eq!(
        c.expected_step_bytes(3, Link::Hca(0), first_down).unwrap(),
        (0, 0)
    );
    assert_eq!(
        c.expected_step_bytes(3, Link::Hca(1), first_down).unwrap(),
        (770_000_000, 770_000_000)
    );
    // Back up after the down steps.
    let up_again = (first_down..200).find(|&k| !tl.is_flapped(k)).unwrap();
    c.advance_to(tl.step_start(up_again)).unwrap();
    assert_eq!(state(), (up().0, up().1, up().2, up().3, "1\n".to_string()));
    let m = c.model();
    let t = c.now();
    assert_eq!(
        read(&port.join("counters/port_xmit_data")),
        format!(
            "{}\n",
            m.port_counter(3, 0, PortCounter::PortXmitData, t).unwrap()
        )
    );
    // The other ports' state files stay static.
    assert_eq!(read(&port_dir(&r, 3, 1).join("state")), "4: ACTIVE\n");
    assert_eq!(read(&port_dir(&r, 2, 0).join("state")), "4: ACTIVE\n");
}

#[test]
fn rails8_trees_have_eight_hcas_and_ipoib_netdevs() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::create(tmp.path(), small(&[Variant::Rails8])).unwrap();
    assert_eq!(c.counter_file_count(), 4 * (8 * 26 + 9 * 8));
    let r = tmp.path();
    let mut hcas: Vec<String> = fs::read_dir(r.join("node-01/class/infiniband"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    hcas.sort();
    assert_eq!(
        hcas,
        (0..8).map(|g| format!("mlx5_{g}")).collect::<Vec<_>>()
    );
    assert!(r
        .join("node-01/class/net/ib7/statistics/tx_bytes")
        .is_file());
    // lids are unique across the cluster: node × 8 + rail + 1.
    assert_eq!(read(&port_dir(r, 1, 7).join("lid")), "0x10\n");
    let p = c.step_period();
    c.advance_to(p * 3).unwrap();
    let x = |g: usize| {
        read(&port_dir(r, 2, g).join("counters/port_xmit_data"))
            .trim_end()
            .parse::<u64>()
            .unwrap()
    };
    let before: Vec<u64> = (0..8).map(x).collect();
    c.advance_to(p * 4).unwrap();
    let m = c.model();
    let moved: u64 = (0..8)
        .map(|g| {
            let f = m.link(2, Link::Hca(g)).unwrap().tx;
            assert_eq!(
                x(g) - before[g],
                f.bytes_at(p * 4) / 4 - f.bytes_at(p * 3) / 4
            );
            f.burst_bytes_at(p * 4) - f.burst_bytes_at(p * 3)
        })
        .sum();
    // The node's two ranks' bytes, 2 × 385 000 000, over the eight rails.
    assert_eq!(moved, 770_000_000);
    // Two ranks per node in procfs still.
    let roots = c.write_procfs_trees().unwrap();
    assert!(roots[0].1.join("1001/environ").is_file());
    assert!(!roots[0].1.join("1002").exists());
}

#[test]
fn idle_nodes_and_two_jobs_in_procfs() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = ClusterSpec {
        gpus_per_node: 2,
        ..ClusterSpec::with_variants(Scenario::ManagementNic, &[Variant::TwoJobs])
    };
    let c = Cluster::create(tmp.path(), spec).unwrap();
    let roots = c.write_procfs_trees().unwrap();
    assert_eq!(roots.len(), 8);
    // node-04 runs no job: only its boot id.
    let idle = &roots[4].1;
    assert!(idle.join("sys/kernel/random/boot_id").is_file());
    assert!(!idle.join("1000").exists());
    // Job 1001 on node-00..03 (8 ranks), job 1002 on node-05..07 (6 ranks), each numbered from 0.
    for (node, job, rank, world, ifname) in [
        (0, "1001", "1", "8", "ib0"),
        (3, "1001", "7", "8", "eth0"),
        (5, "1002", "1", "6", "ib0"),
        (7, "1002", "5", "6", "ib0"),
    ] {
        let env = environ(&roots[node].1.join("1001/environ"));
        assert_eq!(env_get(&env, "SLURM_JOB_ID"), Some(job), "node {node}");
        assert_eq!(env_get(&env, "RANK"), Some(rank), "node {node}");
        assert_eq!(env_get(&env, "WORLD_SIZE"), Some(world), "node {node}");
        assert_eq!(
            env_get(&env, "NCCL_SOCKET_IFNAME"),
            Some(ifname),
            "node {node}"
        );
    }
    // The idle node's links carry background only; job 1002's nodes never touch job 1001's bursts.
    let m = c.model();
    let t = Duration::from_secs(30);
    assert_eq!(
        m.expected_link_bytes(4, Link::Hca(1), t).unwrap().tx_burst,
        0
    );
    assert_eq!(m.expected_link_bytes(4, Link::Eth0, t).unwrap().tx_burst, 0);
    assert!(m.net_stat(4, Link::Eth0, NetStat::TxBytes, t).is_ok());
    assert!(
        c.describe().contains("job 1002 on node-05..node-07"),
        "{}",
        c.describe()
    );
}

#[test]
fn a_cluster_with_every_variant_writes_the_model_values() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = ClusterSpec {
        nodes: 8,
        gpus_per_node: 2,
        ..ClusterSpec::with_variants(Scenario::DegradedLink, &Variant::ALL)
    };
    let mut c = Cluster::create(tmp.path(), spec).unwrap();
    for ms in [1u64, 999, 3_210, 17_000, 61_000] {
        c.advance_to(Duration::from_millis(ms)).unwrap();
        let (m, t, r) = (c.model(), c.now(), c.root());
        for node in 0..8 {
            for g in 0..8 {
                let f = port_dir(r, node, g).join("counters");
                for pc in [
                    PortCounter::PortXmitData,
                    PortCounter::LinkDowned,
                    PortCounter::PortXmitWait,
                ] {
                    assert_eq!(
                        read(&f.join(pc.file_name())),
                        format!("{}\n", m.port_counter(node, g, pc, t).unwrap())
                    );
                }
                assert_eq!(
                    read(&port_dir(r, node, g).join("state")),
                    format!("{}\n", m.port_state(node, g, t).unwrap())
                );
            }
            let eth = r.join(format!("node-{node:02}/class/net/eth0/statistics/rx_bytes"));
            assert_eq!(
                read(&eth),
                format!(
                    "{}\n",
                    m.net_stat(node, Link::Eth0, NetStat::RxBytes, t).unwrap()
                )
            );
        }
    }
}
