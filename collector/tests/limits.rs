//! Per-agent rate limit (backpressure, counted) and label values from the wire that try to inject lines into
//! `/metrics`: the exposition stays valid (checked line by line here, and by `promtool check metrics` when
//! installed — required in CI).

mod common;

use std::time::{Duration, Instant};

use common::*;
use commwatch_proto::v1 as pb;

fn value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(' ')?;
            (n == name).then(|| v.parse().ok())?
        })
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_over_the_sample_rate_is_throttled_and_loses_nothing() {
    const LIMIT: u64 = 2_000;
    let mut cfg = config();
    cfg.limits.max_samples_per_second = LIMIT;
    let h = collector(cfg).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("node-a", 1)).await;
    // 40 batches of 20 ticks × 2 series = 1,600 samples in all, sent at once: 4x the limit's one-second burst.
    let started = Instant::now();
    for seq in 1..=40u64 {
        let first = (seq as i64 - 1) * 20;
        a.send_batch(batch(seq, &traffic(first, 20, 1_000_000, 500_000)))
            .await;
    }
    // Fill the budget well past the burst: 5 more batches of 1,000 samples each.
    for seq in 41..=45u64 {
        let first = 800 + (seq as i64 - 41) * 500;
        a.send_batch(batch(seq, &traffic(first, 500, 1_000_000, 500_000)))
            .await;
    }
    let acked = tokio::time::timeout(Duration::from_secs(30), a.ack_at_least(45))
        .await
        .expect("every batch acked in the end");
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(acked, 45);
    let m = metrics(&h).await;
    // 6,600 samples at 2,000/s with 2,000 of burst: 2.3 s of pushing back, of which the 1.8 s before the last
    // batch was read delay its ack (the wait after the last batch does not).
    let samples = value(&m, "commwatch_collector_samples_total");
    assert_eq!(samples, 6_600.0, "{m}");
    assert!(elapsed >= 1.7, "not throttled: all acked in {elapsed} s");
    assert!(
        value(&m, "commwatch_collector_throttled_batches_total") >= 1.0,
        "{m}"
    );
    // The waits are counted when each throttle starts, from the budget at that moment: on a machine slow
    // enough that processing itself takes part of the 2.3 s, the budget refills meanwhile and the waits are
    // shorter by that much (the time over the quickest run's 1.8 s), never longer than the 2.3 s in all.
    let throttled = value(&m, "commwatch_collector_throttled_seconds_total");
    let slow_by = (elapsed - 1.8).max(0.0);
    assert!(
        throttled >= 2.0 - slow_by && throttled > 0.0 && throttled <= 2.4,
        "throttled {throttled} s with all acked in {elapsed} s: {m}"
    );
    // Nothing refused, nothing lost.
    assert!(
        m.lines()
            .filter(|l| l.starts_with("commwatch_collector_rejected_streams_total{"))
            .all(|l| l.ends_with(" 0")),
        "{m}"
    );
    assert_eq!(value(&m, "commwatch_collector_gap_batches_total"), 0.0);
    assert!(
        m.contains("commwatch_collector_batches_total{result=\"accepted\"} 45"),
        "{m}"
    );
}

/// Hostile strings in every wire field that becomes a label value.
const HOSTILE: &[&str] = &[
    r#"a"b"#,
    r"back\slash",
    "x\"} 1\ncommwatch_injected_total 1\n#",
    "brace}",
    "q\\\"}\n",
    "tab\tand\r",
    "ünï\u{2028}cödé",
];

fn hostile_hello(node: &str, device: &str, state: &str) -> pb::Hello {
    let mut h = hello(node, 1);
    let inv = h.inventory.as_mut().unwrap();
    inv.links[0].device = device.into();
    inv.links[0].port = device.into();
    inv.links[0].state = state.into();
    h
}

/// A sample line: `name{k="v",...} value [ts]` with every label value escaped as the text format requires.
fn valid_sample_line(line: &str) -> bool {
    let bytes: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < bytes.len()
        && (bytes[i].is_ascii_alphanumeric() || bytes[i] == '_' || bytes[i] == ':')
    {
        i += 1;
    }
    if i == 0 {
        return false;
    }
    if i < bytes.len() && bytes[i] == '{' {
        i += 1;
        loop {
            if i < bytes.len() && bytes[i] == '}' {
                i += 1;
                break;
            }
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == '_') {
                i += 1;
            }
            if i == start || i + 1 >= bytes.len() || bytes[i] != '=' || bytes[i + 1] != '"' {
                return false;
            }
            i += 2;
            loop {
                match bytes.get(i) {
                    None | Some('\n') => return false,
                    Some('\\') => match bytes.get(i + 1) {
                        Some('\\') | Some('"') | Some('n') => i += 2,
                        _ => return false,
                    },
                    Some('"') => {
                        i += 1;
                        break;
                    }
                    Some(_) => i += 1,
                }
            }
            match bytes.get(i) {
                Some(',') => i += 1,
                Some('}') => {}
                _ => return false,
            }
        }
    }
    if bytes.get(i) != Some(&' ') {
        return false;
    }
    let rest: String = bytes[i + 1..].iter().collect();
    let mut parts = rest.split(' ');
    let v = parts.next().unwrap_or("");
    v.parse::<f64>().is_ok() || ["NaN", "+Inf", "-Inf"].contains(&v)
}

#[tokio::test]
async fn label_values_from_the_wire_cannot_inject_exposition_lines() {
    // The checker itself rejects what an injection would produce.
    assert!(valid_sample_line(r#"m{a="x\"y",b="\\"} 1"#));
    assert!(!valid_sample_line(r#"m{a="x"y"} 1"#));
    assert!(!valid_sample_line(r#"m{a="x\q"} 1"#));
    assert!(!valid_sample_line("m{a=\"x"));
    assert!(!valid_sample_line("injected"));
    let mut cfg = config();
    cfg.steps_interval = Duration::from_millis(100);
    let h = collector(cfg).await;
    let mut accepted = 0;
    for (i, s) in HOSTILE.iter().enumerate() {
        let node = format!("node-{i}-{s}");
        let (mut a, _) = {
            let mut a = Agent::open(h.grpc_addr).await;
            a.send(msg_hello(hostile_hello(&node, s, s))).await;
            match a.next_ack().await {
                Ok(seq) => (a, seq),
                Err(status) => {
                    // Refused at the edge (control characters): fine, as long as it is a clean refusal.
                    assert_eq!(
                        status.code(),
                        tonic::Code::InvalidArgument,
                        "{node:?}: {status}"
                    );
                    continue;
                }
            }
        };
        let mut b = batch(1, &traffic(0, 20, 1_000_000, 500_000));
        for (k, phase) in [(0i64, pb::StepPhase::Begin), (15, pb::StepPhase::End)] {
            b.markers.push(pb::StepMarker {
                job: s.to_string(),
                rank: 0,
                step: 1,
                phase: phase as i32,
                sent_unix_ns: T0 + k * 50 * MS,
                received_unix_ns: T0 + k * 50 * MS,
                samples: Some(8),
            });
        }
        a.send_batch(b).await;
        match tokio::time::timeout(Duration::from_secs(10), a.next_ack()).await {
            Ok(Ok(_)) => accepted += 1,
            Ok(Err(status)) => assert_eq!(
                status.code(),
                tonic::Code::InvalidArgument,
                "{node:?}: {status}"
            ),
            Err(_) => panic!("{node:?}: no answer"),
        }
    }
    eprintln!("{accepted} of {} hostile values accepted", HOSTILE.len());
    assert!(
        accepted >= 3,
        "too few hostile values accepted to test escaping"
    );
    // The job lists reach the store after their acks: wait until the last hostile job is in `/metrics`
    // (at most 10 s) instead of for a fixed time a loaded machine may not keep.
    let waited = Instant::now();
    let mut m = metrics(&h).await;
    while !m.contains(r#"training_job="brace}""#) && waited.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        m = metrics(&h).await;
    }
    for line in m.lines() {
        if line.is_empty() || line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        assert!(valid_sample_line(line), "invalid exposition line {line:?}");
        assert!(!line.starts_with("commwatch_injected"), "{line:?}");
    }
    // The hostile values are there, escaped.
    assert!(m.contains(r#"node="node-0-a\"b""#), "{m}");
    assert!(m.contains(r#"device="back\\slash""#), "{m}");
    assert!(m.contains(r#"training_job="brace}""#), "{m}");
    assert!(m.contains(r#"training_job="brace}""#), "{m}");
    promtool_check(&m);
}

fn promtool_check(text: &str) {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        commwatch_testdata::skip::unavailable(
            "promtool is not installed (apt-get install prometheus)",
        );
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    // promtool exits 3 on lint findings (naming advice) and 1 on a parse error; only parse errors matter here.
    assert!(
        !report.contains("error while linting") && out.status.code() != Some(1),
        "promtool: {report}"
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Hostile clients: many node names, and timestamps far from the collector's clock.

/// A Hello of one link and `n` counter series on it (`c0` … `c{n-1}`), the shape of a large node.
fn wide_hello(node: &str, n: u32) -> pb::Hello {
    let mut h = hello(node, 1);
    let inv = h.inventory.as_mut().unwrap();
    inv.series = (0..n)
        .map(|i| pb::SeriesDescriptor {
            id: i + 1,
            metric: format!("c{i}"),
            kind: pb::SeriesKind::Counter as i32,
            link_id: 1,
            labels: Default::default(),
            max_value: 0,
            tier: 1,
        })
        .collect();
    h
}

fn rejected(text: &str, reason: &str) -> f64 {
    value(
        text,
        &format!("commwatch_collector_rejected_streams_total{{reason=\"{reason}\"}}"),
    )
}

/// A hostile client created 1,000 nodes of 1,000 series from one connection (900 MiB). One connection now
/// speaks for at most `limits.max_nodes_per_connection` names, however many streams it opens or closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_cannot_report_as_more_nodes_than_its_limit() {
    let mut cfg = config();
    cfg.limits.max_nodes_per_connection = 4;
    let h = collector(cfg).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", h.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let as_node = |node: String, instance| {
        let channel = channel.clone();
        async move {
            let a = Agent::open_channel(channel).await;
            a.send(msg_hello(hello(&node, instance))).await;
            a
        }
    };
    let mut open = Vec::new();
    for i in 0..4 {
        let mut a = as_node(format!("n{i}"), 1).await;
        assert_eq!(a.next_ack().await.unwrap(), 0);
        open.push(a);
    }
    let mut fifth = as_node("n4".into(), 1).await;
    let status = fifth.error().await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("max_nodes_per_connection"),
        "{status:?}"
    );
    // Closing its streams does not give the names back; a name it spoke as before is still its own.
    drop(open);
    let status = as_node("n5".into(), 1).await.error().await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    let mut again = as_node("n0".into(), 2).await;
    assert_eq!(again.next_ack().await.unwrap(), 0);
    // Another connection has its own count.
    Agent::connect(h.grpc_addr, hello("n9", 1)).await;
    assert_eq!(
        rejected(&metrics(&h).await, "max_nodes_per_connection"),
        2.0
    );
    assert_eq!(h.snapshot_nodes().len(), 5);
    h.shutdown().await;
}

/// At most `limits.max_nodes` nodes, whatever the connections: a Hello of a new name beyond it is refused and
/// counted; the nodes held reconnect freely. The store's memory per node of 1,000 series is printed: the
/// figure behind the limit's documentation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_beyond_max_nodes_are_refused_and_memory_stays_bounded() {
    const NODES: usize = 100;
    const SERIES: u32 = 1_000;
    let mut cfg = config();
    cfg.limits.max_nodes = NODES;
    let h = collector(cfg).await;
    let mut agents = Vec::new();
    for i in 0..NODES {
        let (a, _) = Agent::connect(h.grpc_addr, wide_hello(&format!("n{i}"), SERIES)).await;
        agents.push(a);
    }
    let empty = h.store().memory();
    // One tick of every series, twice: the rings hold samples.
    for (i, a) in agents.iter_mut().enumerate() {
        for seq in 1..=2u64 {
            let tick = (
                T0 + seq as i64 * S,
                (1..=SERIES).map(|id| (id, seq * 1000)).collect(),
            );
            a.send_batch(batch(seq, &[tick])).await;
        }
        assert_eq!(a.ack_at_least(2).await, 2, "node n{i}");
    }
    let held = h.store().memory();
    eprintln!(
        "{} nodes × {SERIES} series: {} bytes described ({} per series), {} bytes with two samples each \
         ({} per series)",
        empty.nodes,
        empty.bytes,
        empty.bytes / empty.series,
        held.bytes,
        held.bytes / held.series
    );
    assert_eq!(held.nodes, NODES);
    assert_eq!(held.series, NODES * SERIES as usize);
    let mut extra = Agent::open(h.grpc_addr).await;
    extra
        .send(msg_hello(wide_hello("one-too-many", SERIES)))
        .await;
    let status = extra.error().await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("max_nodes"), "{status:?}");
    assert_eq!(rejected(&metrics(&h).await, "max_nodes"), 1.0);
    assert_eq!(h.store().memory().nodes, NODES);
    // A node held comes back as a new instance without trouble.
    drop(agents.pop());
    Agent::connect(h.grpc_addr, hello(&format!("n{}", NODES - 1), 2)).await;
    h.shutdown().await;
}

/// A sample stamped `i64::MAX` used to be accepted and freeze its series (every later sample "out of order").
/// Ticks beyond `limits.max_clock_skew` ahead of the collector's clock are skipped and counted; the series goes
/// on. (One not after the Unix epoch fails the stream at the edge, as before.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_stamped_far_from_the_collectors_clock_are_refused_and_counted() {
    let h = collector(config()).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    a.send_batch(batch(1, &traffic(0, 10, 1000, 500))).await;
    let now = commwatch_model::clock::unix_now_ns();
    let bad = vec![
        (i64::MAX, vec![(1, 1 << 40), (2, 1 << 40)]),
        (now + 3_600 * S, vec![(1, 1 << 41)]),
    ];
    a.send_batch(batch(2, &bad)).await;
    a.send_batch(batch(3, &traffic(10, 10, 1000, 500))).await;
    assert_eq!(a.ack_at_least(3).await, 3);
    let l = &h.snapshot_nodes()[0].links[0];
    assert_eq!(l.tx_bytes_total, Some(19_000), "the series goes on");
    assert_eq!(l.rx_bytes_total, Some(9_500));
    assert_eq!(l.tx_bytes_per_second, Some(20_000.0));
    let m = metrics(&h).await;
    assert_eq!(
        value(&m, "commwatch_collector_out_of_window_samples_total"),
        3.0,
        "{m}"
    );
    // Nothing else refused: the batch was applied around the bad ticks.
    assert_eq!(
        value(&m, "commwatch_collector_batches_total{result=\"accepted\"}"),
        3.0
    );
    h.shutdown().await;
}
