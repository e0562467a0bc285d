//! Steps through the real collector (gRPC ingest → store → step engine → `/api/v1/steps` and `/metrics`),
//! fed by a fake agent with exact synthetic counters and markers.

mod common;

use std::time::Duration;

use common::*;
use commwatch_proto::v1 as pb;
use serde_json::Value;

const JOB: &str = "job-7";
/// Burst per step: 400 ms to 800 ms into each 1 s step, tx 500 MB and rx 250 MB per 50 ms tick.
const TX_TICK: u64 = 500_000_000;
const RX_TICK: u64 = 250_000_000;

fn in_burst(tick: i64) -> bool {
    // Tick i closes the interval ((i-1)·50, i·50] ms; bursts cover 400..800 ms of every 1000 ms.
    let end_ms = (tick * 50) % 1000;
    (450..=800).contains(&end_ms)
}

fn marker(rank: u32, step: u64, phase: pb::StepPhase, t: i64) -> pb::StepMarker {
    pb::StepMarker {
        job: JOB.into(),
        rank,
        step,
        phase: phase as i32,
        sent_unix_ns: t,
        received_unix_ns: t,
        samples: (phase == pb::StepPhase::End).then_some(32),
    }
}

async fn get_json(url: String) -> (u16, Value) {
    let (code, body) = get(url).await;
    (code, serde_json::from_str(&body).expect("json body"))
}

async fn wait_steps(h: &commwatch_collector::CollectorHandle, node: &str, n: usize) -> Value {
    for _ in 0..100 {
        let (code, v) = get_json(format!("http://{}/api/v1/steps?node={node}", h.http_addr)).await;
        if code == 200 && v["steps"].as_array().is_some_and(|s| s.len() >= n) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("node {node} never had {n} steps");
}

#[tokio::test]
async fn marker_steps_have_exact_link_figures() {
    let h = collector(config()).await;
    let (a, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    // 5 steps of 1 s from T0, two ranks, begin and end markers on sample times; tick 0 at T0.
    // The tx counter resets (driver reload) inside step 2's burst, at tick 52.
    let mut tx_raw = 0u64;
    let mut rx = 0u64;
    let mut seq = 0;
    for b in 0..11i64 {
        let mut ticks = Vec::new();
        let mut markers = Vec::new();
        for i in (b * 10)..(b * 10 + 10).min(101) {
            if i > 0 && in_burst(i) {
                tx_raw += TX_TICK;
                rx += RX_TICK;
            }
            if i == 52 {
                // Reset just after tick 51: the counter restarts and counts this tick's bytes only.
                tx_raw = TX_TICK;
            }
            ticks.push((T0 + i * 50 * MS, vec![(1, tx_raw), (2, rx)]));
            if i % 20 == 0 {
                let k = (i / 20) as u64;
                for rank in 0..2 {
                    if k > 0 {
                        markers.push(marker(rank, k - 1, pb::StepPhase::End, T0 + i * 50 * MS));
                    }
                    if k < 5 {
                        markers.push(marker(rank, k, pb::StepPhase::Begin, T0 + i * 50 * MS));
                    }
                }
            }
        }
        if b == 3 {
            // Garbage from the wire: counted, dropped, the batch still applies.
            markers.push(pb::StepMarker {
                job: String::new(),
                ..marker(0, 99, pb::StepPhase::End, T0)
            });
            markers.push(pb::StepMarker {
                phase: 0,
                ..marker(0, 99, pb::StepPhase::End, T0)
            });
        }
        seq += 1;
        let mut batch = batch(seq, &ticks);
        batch.markers = markers;
        a.send_batch(batch.clone()).await;
        if b == 4 {
            // A resend of the same batch adds no marker and no step.
            a.send_batch(batch).await;
        }
    }

    let v = wait_steps(&h, "n1", 5).await;
    assert_eq!(v["source"], "markers", "{v:#}");
    let steps = v["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 5, "{v:#}");
    for (k, s) in steps.iter().enumerate() {
        assert_eq!(s["index"], k as u64);
        assert_eq!(s["job"], JOB);
        assert_eq!(s["duration_s"].as_f64(), Some(1.0));
        assert_eq!(
            s["start_unix_s"].as_f64(),
            Some((T0 + k as i64 * S) as f64 / 1e9)
        );
        assert_eq!(s["confidence"].as_f64(), Some(1.0));
        assert_eq!(s["samples"], 64);
        let links = s["links"].as_array().expect("links");
        assert_eq!(links.len(), 1);
        let l = &links[0];
        assert_eq!(
            (l["class"].as_str(), l["device"].as_str()),
            (Some("infiniband"), Some("mlx5_0"))
        );
        assert_eq!(l["role"], "fabric");
        // 8 busy ticks per step, exact (step 2 included: its reset costs nothing).
        assert_eq!(l["tx_bytes"], 8 * TX_TICK, "step {k}");
        assert_eq!(l["rx_bytes"], 8 * RX_TICK, "step {k}");
        let active = l["active_s"].as_f64().expect("active");
        assert!((active - 0.4).abs() < 1e-9, "step {k}: active {active}");
        let achieved = l["achieved_bytes_per_second"].as_f64().expect("achieved");
        assert!((achieved - 10e9).abs() < 1.0, "step {k}: {achieved}");
        assert_eq!(l["average_bytes_per_second"].as_f64(), Some(4e9));
        assert_eq!(l["capacity_bytes_per_second"].as_f64(), Some(25e9));
        assert!((l["utilization"].as_f64().expect("util") - 0.4).abs() < 1e-12);
        assert_eq!(l["confident"], true);
    }

    // The job view: the same steps, aggregated across nodes (one node here).
    let (code, j) = get_json(format!(
        "http://{}/api/v1/steps?job={JOB}&limit=2",
        h.http_addr
    ))
    .await;
    assert_eq!(code, 200, "{j}");
    assert_eq!(j["source"], "markers");
    let js = j["steps"].as_array().expect("steps");
    assert_eq!(
        js.iter()
            .map(|s| s["index"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![3, 4]
    );
    let agg = &js[1]["aggregates"][0];
    assert_eq!(agg["class"], "infiniband");
    assert_eq!(agg["nodes"], 1);
    assert!((agg["achieved_bytes_per_second"]["median"].as_f64().unwrap() - 10e9).abs() < 1.0);
    assert_eq!(agg["achieved_bytes_per_second"]["min_node"], "n1");
    assert_eq!(js[1]["links"][0]["node"], "n1");

    // Errors: JSON bodies, 400 for bad queries, 404 for unknown subjects.
    for (q, code) in [
        ("", 400),
        ("?limit=5", 400),
        ("?node=n1&job=x", 400),
        ("?node=n1&limit=0", 400),
        ("?node=n1&limit=abc", 400),
        ("?node=n1&limit=1001", 400),
        ("?node=n1&color=red", 400),
        ("?node=", 400),
        ("?node=nope", 404),
        ("?job=nope", 404),
    ] {
        let (c, body) = get_json(format!("http://{}/api/v1/steps{q}", h.http_addr)).await;
        assert_eq!(c, code, "{q}: {body}");
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{q}: {body}"
        );
    }

    let text = metrics(&h).await;
    let m = |name: &str, labels: &[(&str, &str)]| -> Option<f64> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find(|l| {
                l.starts_with(&format!("{name}{{"))
                    && labels
                        .iter()
                        .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
    };
    assert_eq!(
        m(
            "commwatch_step_duration_seconds",
            &[("node", "n1"), ("training_job", JOB)]
        ),
        Some(1.0)
    );
    let bw = m(
        "commwatch_step_link_bandwidth_bytes_per_second",
        &[
            ("node", "n1"),
            ("class", "infiniband"),
            ("device", "mlx5_0"),
            ("port", "1"),
            ("role", "fabric"),
        ],
    )
    .expect("bandwidth metric");
    assert!((bw - 10e9).abs() < 1.0, "{bw}");
    let u = m(
        "commwatch_link_utilization_ratio",
        &[("node", "n1"), ("device", "mlx5_0")],
    )
    .expect("util");
    assert!((u - 0.4).abs() < 1e-9);
    assert_eq!(
        m(
            "commwatch_steps_total",
            &[("node", "n1"), ("source", "markers")]
        ),
        Some(5.0)
    );
    assert_eq!(
        m(
            "commwatch_step_samples_per_second",
            &[("training_job", JOB)]
        ),
        Some(64.0)
    );
    // 11 batches: 2 ranks × (5 begins + 5 ends) accepted once (the resend added none), 2 invalid.
    assert_eq!(
        m(
            "commwatch_collector_step_markers_total",
            &[("result", "accepted")]
        ),
        Some(20.0)
    );
    assert_eq!(
        m(
            "commwatch_collector_step_markers_total",
            &[("result", "invalid")]
        ),
        Some(2.0)
    );
    h.shutdown().await;
}

#[tokio::test]
async fn inferred_steps_from_periodic_traffic_and_none_on_an_idle_node() {
    let h = collector(config()).await;
    let (busy, _) = Agent::connect(h.grpc_addr, hello("busy", 1)).await;
    let (idle, _) = Agent::connect(h.grpc_addr, hello("idle", 1)).await;
    // Period 700 ms (14 ticks); burst of 7 ticks at 400 MB per tick on tx and rx; 1 MB/s background.
    let (mut tx, mut idle_tx) = (0u64, 0u64);
    let mut seq = 0;
    for b in 0..40i64 {
        let mut ticks = Vec::new();
        let mut idle_ticks = Vec::new();
        for i in (b * 10)..(b * 10 + 10) {
            if i > 0 {
                tx += 50_000;
                idle_tx += 50_000;
                if (i % 14) >= 7 {
                    tx += 400_000_000;
                }
            }
            ticks.push((T0 + i * 50 * MS, vec![(1, tx), (2, tx)]));
            idle_ticks.push((T0 + i * 50 * MS, vec![(1, idle_tx), (2, idle_tx)]));
        }
        seq += 1;
        busy.send_batch(batch(seq, &ticks)).await;
        idle.send_batch(batch(seq, &idle_ticks)).await;
    }
    let v = wait_steps(&h, "busy", 20).await;
    assert_eq!(v["source"], "inferred");
    let steps = v["steps"].as_array().expect("steps");
    for s in steps {
        assert_eq!(s["job"], Value::Null);
        // Edges on samples right after each burst: exact bytes, exact duration.
        assert_eq!(s["duration_s"].as_f64(), Some(0.7), "{s}");
        let l = &s["links"][0];
        assert_eq!(l["tx_bytes"], 7 * 400_000_000u64 + 14 * 50_000, "{s}");
        let active = l["active_s"].as_f64().unwrap();
        assert!((active - 0.35).abs() < 1e-9, "{active}");
        assert!(s["confidence"].as_f64().unwrap() > 0.5, "{s}");
    }
    let idx: Vec<u64> = steps.iter().map(|s| s["index"].as_u64().unwrap()).collect();
    assert!(idx.windows(2).all(|w| w[1] == w[0] + 1), "{idx:?}");
    let period = h.steps().inferred_period("busy").expect("period");
    assert!((period.period_s - 0.7).abs() < 1e-9, "{period:?}");

    let (code, v) = get_json(format!("http://{}/api/v1/steps?node=idle", h.http_addr)).await;
    assert_eq!(code, 200);
    assert_eq!(v["steps"].as_array().map(Vec::len), Some(0), "{v}");
    assert!(h.steps().inferred_period("idle").is_none());
    h.shutdown().await;
}

#[tokio::test]
async fn steps_off_when_the_interval_is_zero() {
    let h = collector(commwatch_collector::CollectorConfig {
        steps_interval: Duration::ZERO,
        ..config()
    })
    .await;
    let (a, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    a.send_batch(batch(1, &traffic(0, 10, 1, 1))).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (code, _) = get(format!("http://{}/api/v1/steps?node=n1", h.http_addr)).await;
    assert_eq!(code, 404);
    h.shutdown().await;
}

/// Cumulative bytes at `t_ms` of a node whose step of 1 s moves `rate` bytes a millisecond from 400 ms to
/// `end_ms` into each step (exact, at a millisecond's resolution).
fn burst_bytes(t_ms: i64, end_ms: i64, rate: u64) -> u64 {
    let per_step = (end_ms - 400) as u64 * rate;
    let (whole, into) = (t_ms.div_euclid(1000), t_ms.rem_euclid(1000));
    whole as u64 * per_step + (into.clamp(400, end_ms) - 400) as u64 * rate
}

#[tokio::test]
async fn a_jobs_inferred_steps_are_placed_on_each_nodes_own_samples() {
    let h = collector(config()).await;
    let job = pb::AgentMessage {
        msg: Some(pb::agent_message::Msg::InventoryUpdate(
            pb::InventoryUpdate {
                inventory: None,
                jobs: Some(pb::JobInventory {
                    jobs: vec![pb::Job {
                        id: JOB.into(),
                        ranks: vec![],
                        conflicts: vec![],
                    }],
                }),
            },
        )),
    };
    // Node a samples every 50 ms from T0, its bursts end at 712 ms into each step; node b samples 25 ms later
    // and its bursts end at 731 ms (its link still draining): neither ends on a sample, nor at the same time.
    let nodes = [("a", 0, 712), ("b", 25, 731)];
    let mut agents = Vec::new();
    for (i, (name, _, _)) in nodes.iter().enumerate() {
        let (ag, _) = Agent::connect(h.grpc_addr, hello(name, i as u64 + 1)).await;
        ag.send(job.clone()).await;
        agents.push(ag);
    }
    const RATE: u64 = 1_000_000;
    for b in 0..40i64 {
        for ((_, offset, end), ag) in nodes.iter().zip(&agents) {
            let ticks: Vec<(i64, Vec<(u32, u64)>)> = (b * 10..b * 10 + 10)
                .map(|i| {
                    let t = i * 50 + offset;
                    let v = burst_bytes(t, *end, RATE);
                    (T0 + t * MS, vec![(1, v), (2, v)])
                })
                .collect();
            ag.send_batch(batch(b as u64 + 1, &ticks)).await;
        }
    }
    for (name, _, end) in nodes {
        let v = wait_steps(&h, name, 12).await;
        let steps = v["steps"].as_array().expect("steps");
        for s in steps {
            assert_eq!(s["job"], JOB, "{s}");
            // Every byte of a burst in its own step, on the node's own samples.
            assert_eq!(
                s["links"][0]["tx_bytes"],
                (end - 400) as u64 * RATE,
                "{name}: {s}"
            );
            // Edges where each burst ended, inside the sampling interval: durations of 1 s to a few ms.
            let d = s["duration_s"].as_f64().unwrap();
            assert!((d - 1.0).abs() < 0.005, "{name}: {d}");
            let end_s = s["end_unix_s"].as_f64().unwrap() - T0 as f64 / 1e9;
            let into = (end_s.rem_euclid(1.0) * 1000.0).round() as i64;
            assert!(
                (into - end).abs() <= 3,
                "{name}: step ends {into} ms into the second, burst {end}"
            );
        }
    }
    h.shutdown().await;
}
