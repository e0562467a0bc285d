//! `POST /api/v1/probes` and `GET /api/v1/probes` with two real probe servers standing for two nodes' agents:
//! the collector asks node-a's to relay a probe to node-b's, keeps the result and exports it in `/metrics`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use commwatch_probe::{NeverBusy, Server, ServerConfig};
use commwatch_proto::v1 as pb;

async fn agent_probe_port() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = Server::new(
        ServerConfig {
            token: Some("fleet".into()),
            relay: true,
            bind: Some("127.0.0.1".parse().unwrap()),
            ..ServerConfig::default()
        },
        Arc::new(NeverBusy),
    );
    tokio::spawn(server.serve(listener, std::future::pending()));
    addr
}

async fn post(url: String, body: &str) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collector_probes_a_pair_through_an_agent() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("probe-token");
    std::fs::write(&token, "fleet\n").unwrap();
    let mut cfg = config();
    cfg.probes.token_file = Some(token);
    cfg.probes
        .addresses
        .insert("node-a".into(), agent_probe_port().await);
    // node-b is not in the config: its agent advertises its probe port on its stream (a wildcard host, so the
    // collector takes the stream's peer IP, 127.0.0.1).
    let b_port = agent_probe_port().await.replace("127.0.0.1:", "0.0.0.0:");
    cfg.probes.size = 64 * 1024;
    cfg.probes.duration = Duration::from_millis(500);
    let h = collector(cfg).await;
    let api = format!("http://{}/api/v1/probes", h.http_addr);
    let (mut b_agent, _) = Agent::connect(h.grpc_addr, hello("node-b", 2)).await;
    b_agent
        .send(pb::AgentMessage {
            msg: Some(pb::agent_message::Msg::ProbeAdvert(pb::ProbeAdvert {
                address: b_port,
            })),
        })
        .await;
    // A batch acked after the advert: the stream handled the advert before it.
    b_agent.send_batch(batch(1, &traffic(0, 2, 1, 1))).await;
    b_agent.ack_at_least(1).await;

    let (code, body) = post(api.clone(), r#"{"nodes": ["node-a", "node-zz"]}"#).await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["field"], "nodes");
    assert!(
        body["error"].as_str().unwrap().contains("node-zz"),
        "{body}"
    );
    let (code, body) = post(api.clone(), r#"{"nodes": ["node-a"], "bogus": 1}"#).await;
    assert_eq!(code, 400, "{body}");

    let (code, body) = post(api.clone(), r#"{"nodes": ["node-b", "node-a"]}"#).await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["scheduled"], serde_json::json!([["node-a", "node-b"]]));

    let mut last = serde_json::Value::Null;
    for _ in 0..100 {
        let (_, text) = get(api.clone()).await;
        last = serde_json::from_str(&text).unwrap();
        if last["probes"].as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let p = &last["probes"][0];
    assert_eq!(p["from"], "node-a", "{last}");
    assert_eq!(p["to"], "node-b");
    assert_eq!(p["outcome"], "ok", "{last}");
    assert!(p["tx_bytes_per_second"].as_f64().unwrap() > 0.0, "{last}");
    assert!(p["latency_p50_seconds"].as_f64().unwrap() > 0.0, "{last}");

    let text = metrics(&h).await;
    let line = text
        .lines()
        .find(|l| l.starts_with("commwatch_probe_bandwidth_bytes_per_second{"))
        .unwrap_or_else(|| panic!("no probe bandwidth in /metrics:\n{text}"));
    assert!(
        line.contains(r#"node="node-a""#) && line.contains(r#"peer="node-b""#),
        "{line}"
    );
    assert!(
        text.contains(
            r#"commwatch_probe_latency_seconds{node="node-a",peer="node-b",quantile="0.99"}"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"commwatch_probes_total{outcome="ok"} 1"#),
        "{text}"
    );
}
