//! Job lists over the wire: merge across nodes, `/api/v1/jobs` (`?job=`), the node view's `jobs` and
//! `nccl_conflicts`, the metrics, edge validation, replacement, and persistence across a restart.

mod common;

use std::time::Duration;

use common::*;
use commwatch_proto::v1 as pb;

fn rank(pid: u32, rank: u32, ifname: &str) -> pb::Rank {
    pb::Rank {
        pid,
        rank: Some(rank),
        local_rank: Some(rank % 2),
        world_size: Some(4),
        gpus: vec![(rank % 2).to_string()],
        pod_uid: String::new(),
        container_id: String::new(),
        nccl: [("NCCL_SOCKET_IFNAME".to_string(), ifname.to_string())].into(),
        found_by: "environment".into(),
    }
}

fn mgmt_conflict() -> pb::NcclConflict {
    pb::NcclConflict {
        setting: "NCCL_SOCKET_IFNAME".into(),
        value: "eth0".into(),
        kind: "management_interface".into(),
        reason: "eth0 is the management interface while InfiniBand ports are active.".into(),
    }
}

fn jobs_msg(jobs: Vec<pb::Job>) -> pb::AgentMessage {
    pb::AgentMessage {
        msg: Some(pb::agent_message::Msg::InventoryUpdate(
            pb::InventoryUpdate {
                inventory: None,
                jobs: Some(pb::JobInventory { jobs }),
            },
        )),
    }
}

async fn jobs_json(h: &commwatch_collector::CollectorHandle, query: &str) -> serde_json::Value {
    let (code, body) = get(format!("http://{}/api/v1/jobs{query}", h.http_addr)).await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

/// Polls `f` until it holds (5 s at most).
async fn eventually<F: std::future::Future<Output = bool>>(mut f: impl FnMut() -> F) -> bool {
    for _ in 0..100 {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn jobs_are_merged_across_nodes_and_exported() {
    let h = collector(config()).await;
    let (a1, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    let (a2, _) = Agent::connect(h.grpc_addr, hello("n2", 2)).await;
    a1.send(jobs_msg(vec![
        pb::Job {
            id: "4242".into(),
            ranks: vec![rank(101, 1, "eth0"), rank(100, 0, "eth0")],
            conflicts: vec![mgmt_conflict()],
        },
        pb::Job {
            id: "a\"b\\c".into(),
            ranks: vec![],
            conflicts: vec![],
        },
    ]))
    .await;
    a2.send(jobs_msg(vec![pb::Job {
        id: "4242".into(),
        ranks: vec![rank(200, 2, "ib0"), rank(201, 3, "ib0")],
        conflicts: vec![],
    }]))
    .await;
    assert!(
        eventually(|| async {
            jobs_json(&h, "?job=4242").await[0]["ranks"]
                .as_array()
                .map(Vec::len)
                == Some(4)
        })
        .await,
        "{}",
        jobs_json(&h, "").await
    );
    let all = jobs_json(&h, "").await;
    let ids: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["4242", "a\"b\\c"]);
    let j = &jobs_json(&h, "?job=4242").await[0];
    assert_eq!(j["nodes"], serde_json::json!(["n1", "n2"]));
    let ranks: Vec<(String, u64)> = j["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["node"].as_str().unwrap().to_string(),
                r["rank"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ranks,
        vec![
            ("n1".into(), 0),
            ("n1".into(), 1),
            ("n2".into(), 2),
            ("n2".into(), 3)
        ]
    );
    let r0 = &j["ranks"][0];
    assert_eq!(r0["world_size"], 4);
    assert_eq!(r0["local_rank"], 0);
    assert_eq!(r0["gpu"], serde_json::json!(["0"]));
    assert!(r0["pod"].is_null());
    assert_eq!(
        r0["nccl"],
        serde_json::json!({"NCCL_SOCKET_IFNAME": "eth0"})
    );
    assert_eq!(j["ranks"][2]["nccl"]["NCCL_SOCKET_IFNAME"], "ib0");
    assert_eq!(
        j["conflicts"],
        serde_json::json!([{
            "node": "n1", "setting": "NCCL_SOCKET_IFNAME", "value": "eth0", "kind": "management_interface",
            "reason": "eth0 is the management interface while InfiniBand ports are active."
        }])
    );
    for k in [
        "step_time_s",
        "throughput_samples_per_second",
        "scaling_efficiency",
    ] {
        assert!(j.as_object().unwrap().contains_key(k), "{k} missing: {j}");
    }
    assert_eq!(jobs_json(&h, "?job=nope").await, serde_json::json!([]));

    let nodes = nodes_json(&h).await;
    let n1 = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "n1")
        .unwrap();
    let n2 = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "n2")
        .unwrap();
    assert_eq!(n1["jobs"], serde_json::json!(["4242", "a\"b\\c"]));
    assert_eq!(n1["nccl_conflicts"][0]["job"], "4242");
    assert_eq!(n1["nccl_conflicts"][0]["kind"], "management_interface");
    assert_eq!(n2["jobs"], serde_json::json!(["4242"]));
    assert_eq!(n2["nccl_conflicts"], serde_json::json!([]));

    let text = metrics(&h).await;
    assert!(
        text.contains(r#"commwatch_nccl_setting_conflict{kind="management_interface",node="n1",setting="NCCL_SOCKET_IFNAME",training_job="4242"} 1"#),
        "{text}"
    );
    assert!(
        !text.contains(r#"commwatch_nccl_setting_conflict{kind="management_interface",node="n2","#)
    );
    assert!(
        text.contains(r#"commwatch_job_ranks{node="n1",training_job="4242"} 2"#),
        "{text}"
    );
    assert!(text.contains(r#"commwatch_job_ranks{node="n2",training_job="4242"} 2"#));
    // Label values are escaped.
    assert!(
        text.contains(r#"commwatch_job_ranks{node="n1",training_job="a\"b\\c"} 0"#),
        "{text}"
    );

    // The analysis sees the conflict: an nccl_misconfiguration finding for n1.
    let found = async {
        for _ in 0..150 {
            let (_, body) = get(format!(
                "http://{}/api/v1/findings?kind=nccl_misconfiguration",
                h.http_addr
            ))
            .await;
            let v: serde_json::Value = serde_json::from_str(&body).expect("json");
            if v.as_array().is_some_and(|a| {
                a.iter()
                    .any(|f| f["subject"]["node"] == "n1" && f["subject"]["job"] == "4242")
            }) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(found.await, "no nccl_misconfiguration finding");

    // A new complete list replaces the old one: n2 has no jobs any more, n1 fixed its setting.
    a2.send(jobs_msg(vec![])).await;
    a1.send(jobs_msg(vec![pb::Job {
        id: "4242".into(),
        ranks: vec![rank(100, 0, "ib0")],
        conflicts: vec![],
    }]))
    .await;
    assert!(
        eventually(|| async {
            let j = jobs_json(&h, "").await;
            j.as_array().map(Vec::len) == Some(1)
                && j[0]["ranks"].as_array().map(Vec::len) == Some(1)
        })
        .await
    );
    assert_eq!(
        jobs_json(&h, "").await[0]["nodes"],
        serde_json::json!(["n1"])
    );
    let text = metrics(&h).await;
    assert!(!text.contains("commwatch_nccl_setting_conflict{"), "{text}");
    assert!(text.contains(r#"commwatch_job_ranks{node="n1",training_job="4242"} 1"#));
    assert!(
        !text.contains(r#"commwatch_job_ranks{node="n2",training_job="4242"}"#),
        "{text}"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn a_malformed_job_list_fails_the_stream_and_echoes_no_value() {
    let h = collector(config()).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    let mut r = rank(1, 0, "eth0");
    r.nccl.insert(
        "AWS_SECRET_ACCESS_KEY".into(),
        "hunter2-secret-value".into(),
    );
    a.send(jobs_msg(vec![pb::Job {
        id: "7".into(),
        ranks: vec![r],
        conflicts: vec![],
    }]))
    .await;
    let status = a.error().await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(!status.message().contains("hunter2") && !status.message().contains("AWS"));
    assert_eq!(jobs_json(&h, "").await, serde_json::json!([]));
    // An over-long setting value (over max_label_len) is malformed too.
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    a.send(jobs_msg(vec![pb::Job {
        id: "7".into(),
        ranks: vec![rank(1, 0, &"x".repeat(300))],
        conflicts: vec![],
    }]))
    .await;
    assert_eq!(a.error().await.code(), tonic::Code::InvalidArgument);
    assert!(!metrics(&h).await.contains("hunter2"));
    h.shutdown().await;
}

#[tokio::test]
async fn job_lists_survive_a_restart_and_a_new_instance_clears_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.state_dir = Some(dir.path().to_path_buf());
    let h = collector(cfg.clone()).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("n1", 3)).await;
    a.send(jobs_msg(vec![pb::Job {
        id: "4242".into(),
        ranks: vec![rank(100, 3, "eth0")],
        conflicts: vec![mgmt_conflict()],
    }]))
    .await;
    // A batch after the job list: once it is acked, the list (queued before it) is committed too.
    a.send_batch(batch(1, &[(T0, vec![(1, 100)])])).await;
    assert_eq!(a.ack_at_least(1).await, 1);
    h.abort();
    drop(a);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let h = collector(cfg.clone()).await;
    let j = jobs_json(&h, "").await;
    assert_eq!(j[0]["id"], "4242", "{j}");
    assert_eq!(j[0]["ranks"][0]["rank"], 3);
    assert_eq!(j[0]["ranks"][0]["nccl"]["NCCL_SOCKET_IFNAME"], "eth0");
    assert_eq!(j[0]["conflicts"][0]["kind"], "management_interface");
    assert!(metrics(&h)
        .await
        .contains(r#"commwatch_nccl_setting_conflict{kind="management_interface",node="n1",setting="NCCL_SOCKET_IFNAME",training_job="4242"} 1"#));

    // The same instance reconnecting keeps its list (it sends it again anyway); a new instance starts empty.
    let (a, _) = Agent::connect(h.grpc_addr, hello("n1", 3)).await;
    assert_eq!(jobs_json(&h, "").await[0]["id"], "4242");
    drop(a);
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("n1", 4)).await;
    assert_eq!(jobs_json(&h, "").await, serde_json::json!([]));
    a.send_batch(batch(1, &[(T0 + 10 * S, vec![(1, 200)])]))
        .await;
    assert_eq!(a.ack_at_least(1).await, 1);
    h.shutdown().await;
    drop(a);

    // Restarted once more: the stored list belongs to instance 3, the node's current instance is 4.
    let h = collector(cfg).await;
    assert_eq!(h.snapshot_nodes().len(), 1);
    assert_eq!(jobs_json(&h, "").await, serde_json::json!([]));
    h.shutdown().await;
}

/// A step marker received by the agent `age_s` seconds ago (by this machine's clock).
fn marker(job: &str, rank: u32, age_s: i64) -> pb::StepMarker {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    pb::StepMarker {
        job: job.into(),
        rank,
        step: 7,
        phase: pb::StepPhase::End as i32,
        sent_unix_ns: 0,
        received_unix_ns: now - age_s * S,
        samples: None,
    }
}

#[tokio::test]
async fn a_job_known_only_from_markers_is_listed_and_counted() {
    let h = collector(config()).await;
    let (a1, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    let (a2, _) = Agent::connect(h.grpc_addr, hello("n2", 2)).await;
    a1.send(jobs_msg(vec![pb::Job {
        id: "4242".into(),
        ranks: vec![rank(100, 0, "ib0"), rank(101, 1, "ib0")],
        conflicts: vec![],
    }]))
    .await;
    // n1's markers of its listed job add nothing; its markers of another job make that job known. n2 lists no
    // job: its markers place a rank of 4242 there. A job whose markers stopped long ago is not listed.
    a1.send_batch(pb::SampleBatch {
        seq: 1,
        markers: vec![
            marker("ended", 0, 900),
            marker("4242", 0, 3),
            marker("4242", 1, 3),
            marker("solo", 3, 2),
            marker("solo", 2, 1),
            marker("solo", 3, 1),
        ],
        ..Default::default()
    })
    .await;
    a2.send_batch(pb::SampleBatch {
        seq: 1,
        markers: vec![marker("4242", 5, 1)],
        ..Default::default()
    })
    .await;
    assert!(
        eventually(|| async {
            let v = jobs_json(&h, "").await;
            v.as_array().is_some_and(|a| a.len() == 2)
                && v[0]["nodes"] == serde_json::json!(["n1", "n2"])
        })
        .await,
        "{}",
        jobs_json(&h, "").await
    );
    let v = jobs_json(&h, "").await;
    let ranks = |job: &serde_json::Value| -> Vec<(String, u64, u64, String)> {
        job["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["node"].as_str().unwrap().to_string(),
                    r["rank"].as_u64().unwrap(),
                    r["pid"].as_u64().unwrap(),
                    r["found_by"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(v[0]["id"], "4242");
    let env = "environment".to_string();
    let mk = "markers".to_string();
    assert_eq!(
        ranks(&v[0]),
        [
            ("n1".into(), 0, 100, env.clone()),
            ("n1".into(), 1, 101, env),
            ("n2".into(), 5, 0, mk.clone())
        ]
    );
    assert_eq!(v[1]["id"], "solo");
    assert_eq!(v[1]["nodes"], serde_json::json!(["n1"]));
    assert_eq!(
        ranks(&v[1]),
        [("n1".into(), 2, 0, mk.clone()), ("n1".into(), 3, 0, mk)]
    );
    assert_eq!(
        jobs_json(&h, "?job=solo").await.as_array().unwrap().len(),
        1
    );

    let text = metrics(&h).await;
    for line in [
        r#"commwatch_job_ranks{node="n1",training_job="4242"} 2"#,
        r#"commwatch_job_ranks{node="n2",training_job="4242"} 1"#,
        r#"commwatch_job_ranks{node="n1",training_job="solo"} 2"#,
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    assert!(!text.contains(r#"training_job="ended""#), "{text}");
}
