//! NCCL Inspector records through the collector: two agents send the records of a 4-rank job (2 per node) on
//! the stream; `/api/v1/collectives` aligns the ranks by communicator and sequence number and names the
//! slowest, `/metrics` carries the bounded bus-bandwidth family, and `link_underutilized` fires from the
//! collectives alone (the counters never resolved a burst), naming the collective and its size.

mod common;

use common::*;
use commwatch_collector::analysis::input::{build, Extras};
use commwatch_collector::analysis::{underutilized, FindingKind};
use commwatch_collector::collectives::job_summaries;
use commwatch_model::clock::unix_now_ns;
use commwatch_proto::v1 as pb;

fn record(rank: u32, sn: u64, bw: f64) -> pb::CollectiveRecord {
    pb::CollectiveRecord {
        job: "j".into(),
        job_rank: Some(rank),
        comm_id: "0x5eed".into(),
        rank,
        n_ranks: 4,
        n_nodes: 2,
        pid: 1000 + rank,
        dump_timestamp_us: 1,
        collective: "AllReduce".into(),
        sequence: sn,
        size_bytes: 220_000_000,
        exec_time_us: 220e6 / (bw / 1.5) * 1e6,
        timing_source: "kernel_gpu".into(),
        algorithm: String::new(),
        algo_bandwidth_bytes_per_second: bw / 1.5,
        bus_bandwidth_bytes_per_second: bw,
    }
}

fn job_list(ranks: [u32; 2]) -> pb::AgentMessage {
    let rank = |r: u32| pb::Rank {
        pid: 1000 + r,
        rank: Some(r),
        world_size: Some(4),
        found_by: "environment".into(),
        ..Default::default()
    };
    pb::AgentMessage {
        msg: Some(pb::agent_message::Msg::InventoryUpdate(
            pb::InventoryUpdate {
                inventory: None,
                jobs: Some(pb::JobInventory {
                    jobs: vec![pb::Job {
                        id: "j".into(),
                        ranks: ranks.iter().map(|r| rank(*r)).collect(),
                        conflicts: vec![],
                    }],
                }),
            },
        )),
    }
}

#[tokio::test]
async fn records_align_into_collectives_metrics_and_a_finding() {
    let h = collector(config()).await;
    let (mut a1, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    let (mut a2, _) = Agent::connect(h.grpc_addr, hello("n2", 2)).await;
    a1.send(job_list([0, 1])).await;
    a2.send(job_list([2, 3])).await;
    let bw = [9.9e9, 9.8e9, 9.8e9, 9.3e9];
    for (agent, ranks) in [(&a1, [0u32, 1]), (&a2, [2, 3])] {
        let mut b = pb::SampleBatch {
            seq: 1,
            ..Default::default()
        };
        for sn in 0..6 {
            b.collectives
                .extend(ranks.iter().map(|&r| record(r, sn, bw[r as usize])));
        }
        // One malformed record (rank outside its communicator) is dropped, the batch goes on.
        b.collectives.push(pb::CollectiveRecord {
            rank: 9,
            ..record(0, 99, 1e9)
        });
        agent.send_batch(b).await;
    }
    a1.ack_at_least(1).await;
    a2.ack_at_least(1).await;

    let (code, body) = get(format!("http://{}/api/v1/collectives?job=j", h.http_addr)).await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let c = &v["collectives"][0];
    assert_eq!(c["collective"], "AllReduce");
    assert_eq!(
        (
            c["count"].as_u64(),
            c["ranks"].as_u64(),
            c["nodes"].as_u64()
        ),
        (Some(6), Some(4), Some(2))
    );
    assert_eq!(
        (c["slowest_rank"].as_u64(), c["slowest_rank_node"].as_str()),
        (Some(3), Some("n2"))
    );
    assert_eq!(c["bus_bandwidth_bytes_per_second"].as_f64(), Some(9.8e9));
    assert_eq!(c["fabric_capacity_bytes_per_second"].as_f64(), Some(25e9));
    let (code, _) = get(format!(
        "http://{}/api/v1/collectives?job=nope",
        h.http_addr
    ))
    .await;
    assert_eq!(code, 404);

    let text = metrics(&h).await;
    let line = text
        .lines()
        .find(|l| l.starts_with("commwatch_collective_bus_bandwidth_bytes_per_second{"))
        .unwrap_or_else(|| panic!("no collective family in\n{text}"));
    assert_eq!(
        line,
        "commwatch_collective_bus_bandwidth_bytes_per_second{collective=\"AllReduce\",size_class=\"le_256MiB\",training_job=\"j\"} 9800000000"
    );
    // The two malformed records, one per agent, counted by their bounded reason; the other reasons at 0.
    for (reason, n) in [("rank", 2), ("text", 0), ("missing", 0), ("number", 0)] {
        let want =
            format!("commwatch_collector_refused_collectives_total{{reason=\"{reason}\"}} {n}");
        assert!(text.lines().any(|l| l == want), "{want} in\n{text}");
    }
    // Per step: this job sends no markers and no traffic, so no step holds its collectives; they are counted
    // apart, not dropped.
    let (code, body) = get(format!(
        "http://{}/api/v1/collectives?job=j&by=step&limit=5",
        h.http_addr
    ))
    .await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["steps"].as_array().map(Vec::len), Some(0), "{v}");
    assert_eq!(v["outside_steps"]["count"], 6, "{v}");

    let now = unix_now_ns();
    let passes = commwatch_collector::telemetry::Passes::new().expect("pass metrics");
    let mut input = build(h.store(), h.steps(), &passes, now, &Extras::default());
    input.collectives = job_summaries(&h.analysis().collectives(), h.store(), now);
    let found = underutilized::evaluate(&input);
    assert_eq!(found.len(), 2, "one per node: {found:#?}");
    let f = &found[0];
    assert_eq!(f.kind, FindingKind::LinkUnderutilized);
    assert!(f.summary.contains("AllReduce of 220 MB runs at 9.80 GB/s bus bandwidth, 39% of the node's fabric (25.00 GB/s)"), "{}", f.summary);
    assert_eq!(f.evidence.details["collective_size_bytes"], 220_000_000);
    assert_eq!(f.evidence.details["source"], "nccl_inspector");
    h.shutdown().await;
}

/// One node, job `j` with step markers for 3 steps of 1 s from T0 and collectives dumped at 0.5 s (step 0),
/// 1.5 s and 1.9 s (step 1) and 10 s (after every step).
#[tokio::test]
async fn collectives_per_step_through_the_collector() {
    let h = collector(config()).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    a.send(job_list([0, 1])).await;
    let marker = |rank: u32, step: u64, phase: pb::StepPhase, t: i64| pb::StepMarker {
        job: "j".into(),
        rank,
        step,
        phase: phase as i32,
        sent_unix_ns: t,
        received_unix_ns: t,
        samples: None,
    };
    let mut seq = 0;
    for b in 0..8i64 {
        let mut ticks = Vec::new();
        let mut markers = Vec::new();
        for i in (b * 10)..(b * 10 + 10) {
            let t = T0 + i * 50 * MS;
            ticks.push((t, vec![(1, i as u64 * 1000), (2, i as u64 * 1000)]));
            let k = (i / 20) as u64;
            for rank in (i % 20 == 0).then_some(0..2u32).into_iter().flatten() {
                if k > 0 && k <= 3 {
                    markers.push(marker(rank, k - 1, pb::StepPhase::End, t));
                }
                if k < 3 {
                    markers.push(marker(rank, k, pb::StepPhase::Begin, t));
                }
            }
        }
        seq += 1;
        let mut batch = batch(seq, &ticks);
        batch.markers = markers;
        if b == 0 {
            for (sn, dump_ms) in [(0u64, 500i64), (1, 1500), (2, 1900), (3, 10_000)] {
                for rank in 0..2 {
                    batch.collectives.push(pb::CollectiveRecord {
                        dump_timestamp_us: ((T0 + dump_ms * MS) / 1000) as u64,
                        ..record(rank, sn, 9.8e9 - rank as f64 * 0.5e9)
                    });
                }
            }
        }
        a.send_batch(batch).await;
    }
    a.ack_at_least(seq).await;
    let url = format!("http://{}/api/v1/collectives?job=j&by=step", h.http_addr);
    let mut v = serde_json::Value::Null;
    for _ in 0..100 {
        let (code, body) = get(url.clone()).await;
        assert_eq!(code, 200, "{body}");
        v = serde_json::from_str(&body).unwrap();
        if v["steps"].as_array().is_some_and(|s| s.len() >= 3) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(v["source"], "markers", "{v:#}");
    let steps = v["steps"].as_array().expect("steps");
    let counts: Vec<(u64, u64)> = steps
        .iter()
        .map(|s| {
            let n = s["collectives"].as_array().map_or(0, |c| {
                c.iter().map(|c| c["count"].as_u64().unwrap_or(0)).sum()
            });
            (s["index"].as_u64().unwrap_or(99), n)
        })
        .collect();
    assert_eq!(counts, [(0, 1), (1, 2), (2, 0)], "{v:#}");
    let c = &steps[1]["collectives"][0];
    assert_eq!(c["slowest_rank"], 1, "{c}");
    assert_eq!(c["per_rank"][1]["bus_bandwidth_bytes_per_second"], 9.3e9);
    assert_eq!(v["outside_steps"]["count"], 1, "{v:#}");
    h.shutdown().await;
}
