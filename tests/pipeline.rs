//! End to end with real processes on loopback: a collector and three agents reading simulated sysfs trees
//! whose InfiniBand counters move at known constant rates. The rates at the collector must equal them.

mod common;

use std::time::Duration;

use common::*;

const TX: u64 = 1_000_000_000;
const RX: u64 = 500_000_000;

#[test]
fn rates_at_the_collector_equal_the_rates_written_into_the_trees() {
    let dir = tempfile::tempdir().unwrap();
    let trees = dir.path().join("trees");
    let cluster = commwatch_sim::Cluster::constant(&trees, 3, 2, TX, RX).unwrap();
    let roots = cluster.node_roots();
    let updater = cluster.spawn_updater(Duration::from_millis(5));

    let (grpc, http) = (free_port(), free_port());
    let collector = collector(dir.path(), "collector", grpc, http, &[]);
    let agents: Vec<Proc> = roots
        .iter()
        .map(|(node, root)| agent(dir.path(), node, root, grpc, &[]))
        .collect();

    let api = format!("http://127.0.0.1:{http}/api/v1/nodes");
    // Wait until every node has a rate on every HCA, then let the 1 s rate window fill with steady samples.
    let ready = wait_for(Duration::from_secs(40), || {
        let v = get_json(&api)?;
        let all = roots.iter().all(|(n, _)| {
            node(&v, n).is_some_and(|nv| {
                (0..2).all(|g| {
                    link(nv, "infiniband", &format!("mlx5_{g}"), "1")
                        .is_some_and(|l| l["tx_bytes_per_second"].is_number())
                })
            })
        });
        all.then_some(())
    });
    assert!(
        ready.is_some(),
        "nodes never reported rates\ncollector:\n{}\nagent:\n{}",
        collector.log_text(),
        agents[0].log_text()
    );
    std::thread::sleep(Duration::from_secs(2));

    let v = get_json(&api).expect("nodes");
    assert_eq!(v.as_array().map(|a| a.len()), Some(3), "{v:#}");
    for (n, _) in &roots {
        let nv = node(&v, n).expect("node present");
        assert!(nv["last_seen_unix_s"].as_f64().unwrap() > 1.7e9);
        for g in 0..2 {
            let l = link(nv, "infiniband", &format!("mlx5_{g}"), "1").expect("hca link");
            let tx = l["tx_bytes_per_second"].as_f64().unwrap();
            let rx = l["rx_bytes_per_second"].as_f64().unwrap();
            assert!((tx / TX as f64 - 1.0).abs() < 0.03, "{n} mlx5_{g} tx {tx}");
            assert!((rx / RX as f64 - 1.0).abs() < 0.03, "{n} mlx5_{g} rx {rx}");
            assert_eq!(l["capacity_bytes_per_second"].as_f64(), Some(25e9));
            assert_eq!(l["role"], "fabric");
            assert_eq!(l["state"], "ACTIVE");
            assert!(l["tx_bytes_total"].as_u64().unwrap() > 0);
            // The IPoIB netdev of the HCA is fabric too.
            let ib =
                link(nv, "infiniband", &format!("ib{g}"), &format!("ib{g}")).expect("ipoib link");
            assert_eq!(ib["role"], "fabric");
        }
        let eth = link(nv, "ethernet", "eth0", "eth0").expect("eth0");
        assert_eq!(eth["role"], "management");
        assert_eq!(eth["capacity_bytes_per_second"].as_f64(), Some(12.5e9));
    }

    let text = get_text(&format!("http://127.0.0.1:{http}/metrics")).expect("metrics");
    let tx = metric(
        &text,
        "commwatch_link_transmit_bytes_per_second",
        &[
            ("node", "node-01"),
            ("class", "infiniband"),
            ("device", "mlx5_1"),
            ("port", "1"),
            ("role", "fabric"),
        ],
    )
    .expect("rate metric");
    assert!((tx / TX as f64 - 1.0).abs() < 0.03, "metric tx {tx}");
    assert_eq!(
        metric(
            &text,
            "commwatch_link_capacity_bytes_per_second",
            &[("node", "node-02"), ("device", "mlx5_0")]
        ),
        Some(25e9)
    );
    assert_eq!(
        metric(&text, "commwatch_node_up", &[("node", "node-00")]),
        Some(1.0)
    );
    drop(agents);
    drop(updater);
}
