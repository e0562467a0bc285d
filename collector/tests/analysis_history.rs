//! Restart: baselines set through `POST /api/v1/baselines` and the findings history survive a collector
//! restart on the same state directory.

use std::time::Duration;

use commwatch_collector::analysis::history::History;
use commwatch_collector::analysis::tracker::Change;
use commwatch_collector::analysis::{Evidence, Finding, FindingKind, Severity, Subject};
use commwatch_collector::CollectorConfig;

fn config(dir: &std::path::Path) -> CollectorConfig {
    CollectorConfig {
        grpc_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: "127.0.0.1:0".parse().unwrap(),
        state_dir: Some(dir.to_path_buf()),
        ..Default::default()
    }
}

/// A finding seen just before `now` (within the history's retention: the start prunes what is older).
fn finding(now: f64) -> Finding {
    Finding {
        id: "link_errors:node-03:mlx5_0:1".into(),
        kind: FindingKind::LinkErrors,
        severity: Severity::Critical,
        subject: Subject {
            node: "node-03".into(),
            device: Some("mlx5_0".into()),
            port: Some("1".into()),
            ..Default::default()
        },
        summary: "node-03 mlx5_0 port 1 error counters rising".into(),
        evidence: Evidence::new(52.7, "errors_per_second").expected(0.0),
        action: "reseat".into(),
        first_seen_unix_s: now - 30.0,
        last_seen_unix_s: now - 20.0,
        active: true,
        root: true,
        caused_by: None,
        consequences: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baselines_and_findings_survive_restart() {
    let now = commwatch_model::clock::unix_now_s().floor();
    let dir = tempfile::tempdir().unwrap();
    let h = commwatch_collector::start(config(dir.path()))
        .await
        .unwrap();
    let url = format!("http://{}/api/v1/baselines", h.http_addr);
    let client = reqwest::Client::new();
    // A diagnose-style bare baseline for one job, and an operator throughput baseline.
    let bare = serde_json::json!({
        "job": "job-42", "source_file": "allreduce_8n.txt",
        "tests": [{"collective": "all_reduce_perf", "nranks": 64, "avg_busbw_gbps": 18.5, "peak_busbw_gbps": 21.9}]
    });
    let r = client.post(&url).json(&bare).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let thr = serde_json::json!({"job": "job-42", "gpus": 8, "samples_per_second_per_gpu": 412.5});
    assert_eq!(
        client.post(&url).json(&thr).send().await.unwrap().status(),
        200
    );
    // Refused: not a baseline, or a non-positive number.
    let bad = client
        .post(&url)
        .header("content-type", "application/json")
        .body("{\"x\":1}")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let bad = serde_json::json!({"job": "j", "gpus": 0, "samples_per_second_per_gpu": 1.0});
    assert_eq!(
        client.post(&url).json(&bad).send().await.unwrap().status(),
        400
    );
    // Let the history thread write.
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.shutdown().await;
    // A finding recorded by the history as the engine does.
    {
        let mut hist = History::open(dir.path()).unwrap();
        let mut f = finding(now);
        hist.record(&[Change::Raised(f.clone())], now - 30.0)
            .unwrap();
        f.active = false;
        hist.record(&[Change::Cleared(f)], now - 10.0).unwrap();
    }
    let h = commwatch_collector::start(config(dir.path()))
        .await
        .unwrap();
    let got: serde_json::Value = reqwest::get(format!("http://{}/api/v1/baselines", h.http_addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let b = &got["bare"][0];
    assert_eq!(b["job"], "job-42");
    assert_eq!(b["busbw_bytes_per_second"], 21.9e9);
    assert_eq!(b["source"], "allreduce_8n.txt");
    let t = &got["throughput"][0];
    assert_eq!(
        (t["gpus"].as_u64(), t["samples_per_second_per_gpu"].as_f64()),
        (Some(8), Some(412.5))
    );
    assert_eq!(t["source"], "operator");
    let fs: Vec<Finding> = reqwest::get(format!(
        "http://{}/api/v1/findings?node=node-03",
        h.http_addr
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(fs.len(), 1);
    assert_eq!(fs[0].id, "link_errors:node-03:mlx5_0:1");
    assert!(!fs[0].active);
    assert_eq!(fs[0].first_seen_unix_s, now - 30.0);
    assert_eq!(fs[0].evidence.measured, 52.7);
    let none: Vec<Finding> = reqwest::get(format!(
        "http://{}/api/v1/findings?active=true",
        h.http_addr
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert!(none.is_empty());
    let none: Vec<Finding> = reqwest::get(format!(
        "http://{}/api/v1/findings?kind=straggler",
        h.http_addr
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert!(none.is_empty());
    let hist = History::open(dir.path()).unwrap();
    let ev: Vec<String> = hist
        .events("link_errors:node-03:mlx5_0:1")
        .unwrap()
        .into_iter()
        .map(|e| e.1)
        .collect();
    assert_eq!(ev, vec!["raised", "cleared"]);
    // Metrics: every kind's raised counter is exported (0 since this start).
    let m = reqwest::get(format!("http://{}/metrics", h.http_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        m.contains("commwatch_findings_raised_total{kind=\"management_network_traffic\"} 0"),
        "{m}"
    );
    h.shutdown().await;
}
