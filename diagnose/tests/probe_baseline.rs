//! `diagnose --collector URL`: step 1 shows the collector's probes ("the bare link gives X") beside the
//! nccl-tests baselines, read from `GET /api/v1/probes` of a fake collector.

use std::io::{Read, Write};
use std::path::PathBuf;

use commwatch_diagnose::{run, DiagnoseArgs, Format};

/// A fake collector on loopback answering `connections` requests: `/api/v1/nodes` with no node,
/// `/api/v1/probes` with `probes`. Returns its address and the request lines it saw.
fn fake_collector(
    probes: String,
    connections: usize,
) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for _ in 0..connections {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
            }
            let line = String::from_utf8_lossy(&request)
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            let body = if line.starts_with("GET /api/v1/probes") {
                probes.clone()
            } else {
                "[]".to_string()
            };
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            conn.write_all(answer.as_bytes()).unwrap();
            seen.push(line);
        }
        seen
    });
    (addr, server)
}

fn args(addr: &str, format: Format, out: PathBuf) -> DiagnoseArgs {
    DiagnoseArgs {
        nccl_tests: vec![PathBuf::from("tests/data/nccl/synth-allreduce-J.json")],
        nccl_log: vec![],
        trace: vec![],
        nsys: vec![],
        nccl_inspector: vec![],
        collector: Some(format!("http://{addr}")),
        tls_ca: None,
        api_token_file: None,
        link_rate: None,
        nics_per_node: None,
        format,
        output: Some(out),
    }
}

fn probes_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    format!(
        r#"{{"running": false, "probes": [
        {{"from": "node-a", "to": "node-b", "transport": "tcp", "at_unix_s": {}, "outcome": "ok", "error": null,
         "tx_bytes_per_second": 12.5e9, "rx_bytes_per_second": 11e9, "latency_p50_seconds": 1.2e-5,
         "latency_p99_seconds": 3e-5, "latency_max_seconds": 4e-5}},
        {{"from": "node-a", "to": "node-c", "transport": "tcp", "at_unix_s": {}, "outcome": "declined",
         "error": "busy", "tx_bytes_per_second": null, "rx_bytes_per_second": null}},
        {{"from": "node-b", "to": "node-c", "transport": "rdma", "at_unix_s": {}, "outcome": "ok",
         "tx_bytes_per_second": 20e9, "rx_bytes_per_second": 21e9}}]}}"#,
        now - 60.0,
        now - 30.0,
        now - 7200.0
    )
}

#[test]
fn step_one_says_what_the_bare_link_gives() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, server) = fake_collector(probes_now(), 2);
    let out = dir.path().join("r.txt");
    run(&args(&addr, Format::Text, out.clone())).unwrap();
    let seen = server.join().unwrap();
    assert!(seen[0].starts_with("GET /api/v1/nodes"), "{seen:?}");
    assert!(seen[1].starts_with("GET /api/v1/probes"), "{seen:?}");
    let text = std::fs::read_to_string(out).unwrap();
    let step1 = &text[text.find("Step 1.").unwrap()..text.find("Step 2.").unwrap()];
    assert!(
        step1.contains("the bare link gives 11.00 GB/s  node-a -> node-b  tcp"),
        "{step1}"
    );
    assert!(
        step1.contains("node-a -> node-c  tcp  not used: declined (busy)"),
        "{step1}"
    );
    assert!(
        step1.contains("node-b -> node-c  rdma  not used: stale"),
        "{step1}"
    );

    let (addr, server) = fake_collector(probes_now(), 2);
    let out = dir.path().join("r.json");
    run(&args(&addr, Format::Json, out.clone())).unwrap();
    server.join().unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    let links = &v["bare_links"]["links"];
    assert_eq!(links.as_array().unwrap().len(), 3, "{v}");
    assert_eq!(links[0]["bare_gbps"], 11.0);
    assert_eq!(links[0]["unused"], serde_json::Value::Null);
    assert_eq!(links[1]["unused"], "stale");
    assert_eq!(links[2]["unused"], "declined");
    assert_eq!(v["bare_links"]["warning"], serde_json::Value::Null);
}

#[test]
fn a_collector_without_probes_is_a_warning_in_step_one() {
    let dir = tempfile::tempdir().unwrap();
    // One connection only: the inventory is read, the probes request finds nobody listening.
    let (addr, server) = fake_collector(String::new(), 1);
    let out = dir.path().join("r.json");
    let a = args(&addr, Format::Json, out.clone());
    let rc = run(&a).unwrap();
    server.join().unwrap();
    assert_eq!(rc, commwatch_diagnose::EXIT_OK);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    assert_eq!(v["bare_links"]["links"], serde_json::json!([]));
    assert!(
        v["bare_links"]["warning"]
            .as_str()
            .is_some_and(|w| w.contains("/api/v1/probes")),
        "{v}"
    );
}
