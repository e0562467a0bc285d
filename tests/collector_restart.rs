//! SIGKILL the collector while agents stream, restart it on the same state directory: the agents buffer and
//! resend, the collector reloads what it had committed, and no batch is lost or applied twice.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn sigkilled_collector_restarts_without_losing_or_double_counting_batches() {
    let dir = tempfile::tempdir().unwrap();
    let trees = dir.path().join("trees");
    let state = dir.path().join("state");
    let cluster =
        commwatch_sim::Cluster::constant(&trees, 2, 1, 2_000_000_000, 1_000_000_000).unwrap();
    let roots = cluster.node_roots();
    let updater = cluster.spawn_updater(Duration::from_millis(5));

    let (grpc, http) = (free_port(), free_port());
    let state_arg = state.display().to_string();
    let mut first = collector(
        dir.path(),
        "collector-1",
        grpc,
        http,
        &["--state-dir", &state_arg],
    );
    let agent_ports: Vec<u16> = roots.iter().map(|_| free_port()).collect();
    let agents: Vec<Proc> = roots
        .iter()
        .zip(&agent_ports)
        .map(|((node, root), port)| {
            let listen = format!("127.0.0.1:{port}");
            agent(dir.path(), node, root, grpc, &["--http-listen", &listen])
        })
        .collect();
    let agent_metric = |i: usize, name: &str| -> Option<f64> {
        metric(
            &get_text(&format!("http://127.0.0.1:{}/metrics", agent_ports[i]))?,
            name,
            &[],
        )
    };

    // Streaming: every agent has batches acknowledged.
    let acked = wait_for(Duration::from_secs(30), || {
        let a: Vec<f64> = (0..agents.len())
            .filter_map(|i| agent_metric(i, "commwatch_agent_acked_sequence"))
            .collect();
        (a.len() == agents.len() && a.iter().all(|s| *s >= 8.0)).then_some(a)
    });
    assert!(
        acked.is_some(),
        "agents never got acks\n{}",
        first.log_text()
    );

    first.kill();
    // While the collector is down, the agents keep sampling into their buffers.
    let buffered = wait_for(Duration::from_secs(10), || {
        let b: Vec<f64> = (0..agents.len())
            .filter_map(|i| agent_metric(i, "commwatch_agent_buffer_batches"))
            .collect();
        (b.len() == agents.len() && b.iter().all(|n| *n >= 6.0)).then_some(b)
    });
    assert!(
        buffered.is_some(),
        "agents did not buffer while the collector was down"
    );

    let second = collector(
        dir.path(),
        "collector-2",
        grpc,
        http,
        &["--state-dir", &state_arg],
    );
    // The agents reconnect, resend what the collector does not hold, and the buffers drain.
    let drained = wait_for(Duration::from_secs(40), || {
        let ok = (0..agents.len()).all(|i| {
            agent_metric(i, "commwatch_agent_resent_batches_total").is_some_and(|r| r >= 1.0)
                && agent_metric(i, "commwatch_agent_buffer_batches").is_some_and(|b| b <= 4.0)
        });
        ok.then_some(())
    });
    assert!(
        drained.is_some(),
        "agents did not resend and drain\n{}",
        second.log_text()
    );

    let text = get_text(&format!("http://127.0.0.1:{http}/metrics")).expect("metrics");
    // Nothing lost: a batch missing from the store after the restart would show as a sequence gap.
    let gaps = metric(&text, "commwatch_collector_gap_batches_total", &[]).unwrap_or(0.0);
    assert_eq!(gaps, 0.0, "sequence gaps after restart\n{text}");
    for i in 0..agents.len() {
        assert_eq!(
            agent_metric(i, "commwatch_agent_dropped_batches_total"),
            Some(0.0)
        );
    }
    // Nothing double counted: resends of batches the first collector had committed were recognised.
    let nodes = get_json(&format!("http://127.0.0.1:{http}/api/v1/nodes")).expect("nodes");
    for (n, _) in &roots {
        let nv = node(&nodes, n).expect("node after restart");
        let l = link(nv, "infiniband", "mlx5_0", "1").expect("link");
        let tx = l["tx_bytes_per_second"]
            .as_f64()
            .expect("rate after restart");
        assert!(
            (tx / 2e9 - 1.0).abs() < 0.05,
            "{n}: rate after restart {tx}"
        );
    }
    drop(agents);
    drop(updater);
}
