//! Step markers end to end with real processes: a real `python3` runs the `commwatch_steps` package and sends
//! begin/end markers over loopback UDP to a real agent, which ships them to a real collector. The collector's
//! `/api/v1/steps` must show marker-sourced steps with the indices sent and the durations the script slept;
//! garbage datagrams are counted by the agent and never become steps.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// Seconds each step sleeps in the script.
const SLEEPS: [f64; 5] = [0.10, 0.30, 0.20, 0.45, 0.15];

#[test]
fn python_markers_become_marker_steps() {
    let dir = tempfile::tempdir().unwrap();
    let trees = dir.path().join("trees");
    let cluster =
        commwatch_sim::Cluster::constant(&trees, 1, 1, 1_000_000_000, 1_000_000_000).unwrap();
    let roots = cluster.node_roots();
    let updater = cluster.spawn_updater(Duration::from_millis(5));
    let (grpc, http) = (free_port(), free_port());
    let collector = collector(dir.path(), "collector", grpc, http, &[]);
    // A free UDP port for the agent's marker listener.
    let udp_port = free_udp_port();
    let agent_http = free_port();
    let (node, root) = &roots[0];
    let agent = Proc::spawn(
        &[
            "agent".into(),
            "--collector".into(),
            format!("http://127.0.0.1:{grpc}"),
            "--node".into(),
            node.clone(),
            "--sysfs-root".into(),
            root.display().to_string(),
            "--steps-udp".into(),
            format!("127.0.0.1:{udp_port}"),
            "--steps-socket".into(),
            "off".into(),
            "--http-listen".into(),
            format!("127.0.0.1:{agent_http}"),
        ],
        dir.path().join("agent.log"),
    );
    let api = format!("http://127.0.0.1:{http}/api/v1/steps?node={node}");
    let up = wait_for(Duration::from_secs(30), || get_json(&api));
    assert!(
        up.is_some(),
        "node never known to the step engine\n{}",
        agent.log_text()
    );

    let script = format!(
        r#"
import socket, sys, time
import commwatch_steps
m = commwatch_steps.StepMarker(job="e2e-job", rank=0, socket_path="/nonexistent", udp="127.0.0.1:{udp_port}")
for i, d in enumerate({sleeps:?}):
    with m.step(i, samples=16):
        time.sleep(d)
    time.sleep(0.05)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for junk in [b"not json", b'{{"job": "e2e-job", "rank": 0, "step": -1, "phase": "end"}}', b'{{"job": "", "rank": 0, "step": 1, "phase": "end"}}', b'{{"job": "e2e-job", "rank": 0, "step": 9, "phase": "middle"}}']:
    s.sendto(junk, ("127.0.0.1", {udp_port}))
print(commwatch_steps.stats())
"#,
        sleeps = SLEEPS
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(&script)
        .env(
            "PYTHONPATH",
            concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python"),
        )
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats = String::from_utf8_lossy(&out.stdout);
    assert!(
        stats.contains("'sent': 10") && stats.contains("'dropped': 0"),
        "{stats}"
    );

    let v = wait_for(Duration::from_secs(20), || {
        let v = get_json(&api)?;
        (v["steps"].as_array()?.len() >= SLEEPS.len()).then_some(v)
    })
    .unwrap_or_else(|| {
        panic!(
            "no marker steps\n{}\n{}",
            agent.log_text(),
            collector.log_text()
        )
    });
    assert_eq!(v["source"], "markers", "{v:#}");
    let steps = v["steps"].as_array().unwrap();
    let idx: Vec<u64> = steps.iter().map(|s| s["index"].as_u64().unwrap()).collect();
    assert_eq!(idx, vec![0, 1, 2, 3, 4]);
    for (s, want) in steps.iter().zip(SLEEPS) {
        let d = s["duration_s"].as_f64().unwrap();
        eprintln!(
            "step {}: {d:.4} s, slept {want} s ({:+.1} ms)",
            s["index"],
            (d - want) * 1e3
        );
        assert!(
            (d - want).abs() < 0.020,
            "step {}: {d} vs {want}",
            s["index"]
        );
        assert_eq!(s["job"], "e2e-job");
        assert_eq!(s["samples"], 16);
        assert_eq!(s["confidence"].as_f64(), Some(1.0));
        // Constant 1 GB/s on the node's HCA: each step moved duration × 1 GB/s (±2 samples of jitter).
        let l = s["links"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["device"] == "mlx5_0")
            .expect("hca link");
        let bytes = l["tx_bytes"].as_f64().unwrap();
        assert!(
            (bytes / (d * 1e9) - 1.0).abs() < 0.15,
            "step {}: {bytes} B in {d} s",
            s["index"]
        );
    }
    // The garbage was counted by the agent and dropped.
    let text = get_text(&format!("http://127.0.0.1:{agent_http}/metrics")).expect("agent metrics");
    let dropped: f64 = text
        .lines()
        .filter(|l| l.starts_with("commwatch_agent_step_markers_dropped_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert_eq!(dropped, 4.0, "{text}");
    assert_eq!(
        metric(
            &text,
            "commwatch_agent_step_markers_total",
            &[("transport", "udp")]
        ),
        Some(10.0)
    );
    let ctext = get_text(&format!("http://127.0.0.1:{http}/metrics")).expect("collector metrics");
    assert_eq!(
        metric(
            &ctext,
            "commwatch_collector_step_markers_total",
            &[("result", "accepted")]
        ),
        Some(10.0)
    );
    assert_eq!(
        metric(
            &ctext,
            "commwatch_steps_total",
            &[("node", node), ("source", "markers")]
        ),
        Some(5.0)
    );
    drop(agent);
    drop(collector);
    drop(updater);
}
