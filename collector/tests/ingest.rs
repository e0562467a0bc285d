//! Ingest through the real gRPC server on loopback: values, dedup, validation, limits, restarts, expiry.

mod common;

use std::time::Duration;

use common::*;
use commwatch_proto::v1 as pb;
use tonic::Code;

#[tokio::test]
async fn known_counters_give_exact_totals_and_rates() {
    let h = collector(config()).await;
    let (mut a, first) = Agent::connect(h.grpc_addr, hello("n1", 11)).await;
    assert_eq!(first, 0);
    // 21 ticks at 20 Hz: tx +5 MB per tick (100 MB/s), rx +2.5 MB per tick (50 MB/s).
    let mut ticks = traffic(0, 21, 5_000_000, 2_500_000);
    ticks[20].1.push((3, 7));
    ticks[20].1.push((4, 1234));
    ticks[20].1.push((5, 0.25f64.to_bits()));
    a.send_batch(batch(1, &ticks)).await;
    assert_eq!(a.ack_at_least(1).await, 1);

    let v = nodes_json(&h).await;
    let n = &v[0];
    assert_eq!(n["name"], "n1");
    assert!(n["last_seen_unix_s"].as_f64().unwrap() > 1.6e9);
    let l = &n["links"][0];
    assert_eq!(l["class"], "infiniband");
    assert_eq!(l["device"], "mlx5_0");
    assert_eq!(l["port"], "1");
    assert_eq!(l["role"], "fabric");
    assert_eq!(l["state"], "ACTIVE");
    assert_eq!(l["capacity_bytes_per_second"], 25e9);
    assert_eq!(l["tx_bytes_total"], 100_000_000u64);
    assert_eq!(l["rx_bytes_total"], 50_000_000u64);
    assert_eq!(l["tx_bytes_per_second"], 100_000_000.0);
    assert_eq!(l["rx_bytes_per_second"], 50_000_000.0);
    assert!(l.get("gpu").is_none());
    assert_eq!(
        h.snapshot_nodes()[0].links[0].tx_bytes_total,
        Some(100_000_000)
    );

    let m = metrics(&h).await;
    let labels = r#"node="n1",class="infiniband",device="mlx5_0",port="1",role="fabric""#;
    for line in [
        format!("commwatch_link_transmit_bytes_total{{{labels}}} 100000000"),
        format!("commwatch_link_receive_bytes_total{{{labels}}} 50000000"),
        format!("commwatch_link_transmit_bytes_per_second{{{labels}}} 100000000"),
        format!("commwatch_link_receive_bytes_per_second{{{labels}}} 50000000"),
        format!("commwatch_link_capacity_bytes_per_second{{{labels}}} 25000000000"),
        // The link's error counters summed (counter_detail = "family", the default): symbol_errors alone here.
        format!("commwatch_link_errors_total{{{labels}}} 7"),
        format!("commwatch_link_xmit_wait_ticks_total{{{labels}}} 1234"),
        "commwatch_node_cpu_utilization_ratio{node=\"n1\"} 0.25".to_string(),
        "commwatch_node_up{node=\"n1\"} 1".to_string(),
        "commwatch_collector_batches_total{result=\"accepted\"} 1".to_string(),
        "commwatch_collector_samples_total 45".to_string(),
        "commwatch_collector_streams 1".to_string(),
    ] {
        assert!(m.lines().any(|l| l == line), "missing {line:?} in\n{m}");
    }
    h.shutdown().await;
}

#[tokio::test]
async fn resend_is_acked_not_applied_twice() {
    let h = collector(config()).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("n1", 5)).await;
    a.send_batch(batch(1, &traffic(0, 10, 1000, 1000))).await;
    a.send_batch(batch(2, &traffic(10, 10, 1000, 1000))).await;
    assert_eq!(a.ack_at_least(2).await, 2);
    // Resend both (as after a reconnect): acked, not applied.
    a.send_batch(batch(1, &traffic(0, 10, 1000, 1000))).await;
    a.send_batch(batch(2, &traffic(10, 10, 1000, 1000))).await;
    assert_eq!(a.next_ack().await.unwrap(), 2);
    let s = h.ingest_stats();
    assert_eq!((s.batches_accepted, s.batches_duplicate), (2, 2));
    assert_eq!(s.samples, 40);
    assert_eq!(h.snapshot_nodes()[0].links[0].tx_bytes_total, Some(19_000));
    drop(a);
    // Reconnect with the same instance: the first Ack says what is held.
    let (mut a, first) = Agent::connect(h.grpc_addr, hello("n1", 5)).await;
    assert_eq!(first, 2);
    // A gap (seq 5 after 2): accepted, 2 batches counted lost.
    a.send_batch(batch(5, &traffic(20, 1, 1000, 1000))).await;
    assert_eq!(a.ack_at_least(5).await, 5);
    assert_eq!(h.ingest_stats().gap_batches, 2);
    assert_eq!(h.snapshot_nodes()[0].links[0].tx_bytes_total, Some(20_000));
    h.shutdown().await;
}

/// Acks are cumulative and coalesced: batches sent back to back get at most one ack each, every ack's sequence
/// number above the one before, the last one the newest batch's; a batch alone, with the previous ack older
/// than the interval, is acked at once (well within a second).
#[tokio::test]
async fn acks_are_cumulative_coalesced_and_prompt() {
    let h = collector(config()).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("n1", 5)).await;
    for seq in 1..=40u64 {
        let first = (seq as i64 - 1) * 10;
        a.send_batch(batch(seq, &traffic(first, 10, 1000, 1000)))
            .await;
    }
    let mut acks = Vec::new();
    while acks.last() != Some(&40) {
        acks.push(a.next_ack().await.expect("ack"));
    }
    assert!(acks.len() <= 40, "{acks:?}");
    assert!(acks.windows(2).all(|w| w[0] < w[1]), "{acks:?}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let sent = std::time::Instant::now();
    a.send_batch(batch(41, &traffic(400, 10, 1000, 1000))).await;
    assert_eq!(a.next_ack().await.unwrap(), 41);
    assert!(sent.elapsed() < Duration::from_secs(1));
    assert_eq!(h.ingest_stats().samples, 41 * 20);
    h.shutdown().await;
}

/// Sends `msgs` on a fresh stream and returns the error status.
async fn rejected(addr: std::net::SocketAddr, msgs: Vec<pb::AgentMessage>) -> tonic::Status {
    let mut a = Agent::open(addr).await;
    for m in msgs {
        a.send(m).await;
    }
    a.error().await
}

#[tokio::test]
async fn malformed_messages_fail_only_their_stream() {
    let h = collector(config()).await;
    let (mut good, _) = Agent::connect(h.grpc_addr, hello("good", 1)).await;
    let mut seq = 0;
    let mut check_good = async |good: &mut Agent| {
        seq += 1;
        good.send_batch(batch(seq, &traffic(seq as i64 * 10, 10, 1, 1)))
            .await;
        assert_eq!(good.ack_at_least(seq).await, seq);
    };
    check_good(&mut good).await;

    // No Hello first.
    let s = rejected(h.grpc_addr, vec![msg_batch(batch(1, &traffic(0, 1, 1, 1)))]).await;
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(s.message().contains("Hello"), "{}", s.message());
    check_good(&mut good).await;

    // Empty node name.
    let s = rejected(h.grpc_addr, vec![msg_hello(hello("", 1))]).await;
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(s.message().contains("hello.node"), "{}", s.message());

    // Length mismatch.
    let mut b = batch(1, &traffic(0, 2, 1, 1));
    b.values.pop();
    let s = rejected(h.grpc_addr, vec![msg_hello(hello("bad1", 1)), msg_batch(b)]).await;
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(s.message().contains("batch.values"), "{}", s.message());

    // Unknown series id.
    let b = batch(1, &[(T0, vec![(1, 1), (99, 1)])]);
    let s = rejected(h.grpc_addr, vec![msg_hello(hello("bad2", 1)), msg_batch(b)]).await;
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(
        s.message().contains("batch.series_ids[1]"),
        "{}",
        s.message()
    );

    // Series pointing at an undescribed link.
    let mut hl = hello("bad3", 1);
    hl.inventory.as_mut().unwrap().series[0].link_id = 42;
    let s = rejected(h.grpc_addr, vec![msg_hello(hl)]).await;
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(s.message().contains("link_id"), "{}", s.message());

    // A second Hello on the same stream.
    let s = rejected(
        h.grpc_addr,
        vec![msg_hello(hello("bad4", 1)), msg_hello(hello("bad4", 1))],
    )
    .await;
    assert_eq!(s.code(), Code::InvalidArgument);

    check_good(&mut good).await;
    let stats = h.ingest_stats();
    assert_eq!(stats.rejected_streams, 6);
    assert!(!h
        .snapshot_nodes()
        .iter()
        .any(|n| n.name == "bad1" && n.links[0].tx_bytes_total.is_some()));
    let m = metrics(&h).await;
    assert!(
        m.contains("commwatch_collector_rejected_streams_total{reason=\"invalid_argument\"} 6"),
        "{m}"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn unknown_enums_follow_compatibility_rules() {
    let h = collector(config()).await;
    let mut hl = hello("n1", 1);
    let inv = hl.inventory.as_mut().unwrap();
    inv.links[0].class = 77;
    inv.series[2].kind = 9; // symbol_errors of a kind we do not know: refused, samples skipped
    let (mut a, _) = Agent::connect(h.grpc_addr, hl).await;
    // An empty AgentMessage (a member this collector does not know) is ignored.
    a.send(pb::AgentMessage { msg: None }).await;
    a.send_batch(batch(
        1,
        &[
            (T0, vec![(1, 10), (3, 5)]),
            (T0 + 50 * MS, vec![(1, 20), (3, 6)]),
        ],
    ))
    .await;
    assert_eq!(a.ack_at_least(1).await, 1);
    let n = h.snapshot_nodes();
    assert_eq!(n[0].links[0].class, "unknown");
    assert_eq!(n[0].links[0].tx_bytes_total, Some(20));
    let m = metrics(&h).await;
    assert!(
        m.contains("commwatch_collector_refused_samples_total 2"),
        "{m}"
    );
    assert!(!m.contains("symbol_errors"));
    h.shutdown().await;
}

#[tokio::test]
async fn a_series_with_a_reserved_label_is_refused_alone() {
    let h = collector(config()).await;
    let mut hl = hello("n1", 1);
    // A newer agent's series with a label this collector sets itself: the series is refused, not the stream.
    hl.inventory.as_mut().unwrap().series[2]
        .labels
        .insert("node".into(), "forged".into());
    let (mut a, _) = Agent::connect(h.grpc_addr, hl).await;
    a.send_batch(batch(
        1,
        &[
            (T0, vec![(1, 10), (3, 5)]),
            (T0 + 50 * MS, vec![(1, 20), (3, 6)]),
        ],
    ))
    .await;
    assert_eq!(a.ack_at_least(1).await, 1);
    assert_eq!(h.snapshot_nodes()[0].links[0].tx_bytes_total, Some(20));
    let m = metrics(&h).await;
    for line in [
        "commwatch_collector_refused_series_total 1",
        "commwatch_collector_refused_samples_total 2",
        "commwatch_collector_rejected_streams_total{reason=\"invalid_argument\"} 0",
    ] {
        assert!(m.contains(line), "{line} in\n{m}");
    }
    assert!(!m.contains("forged"));
    h.shutdown().await;
}

#[tokio::test]
async fn limits_give_resource_exhausted() {
    let mut cfg = config();
    cfg.limits.max_series = 3;
    cfg.limits.max_label_len = 24;
    cfg.limits.max_batch_bytes = 4096;
    let h = collector(cfg).await;
    let s = rejected(h.grpc_addr, vec![msg_hello(hello("n1", 1))]).await;
    assert_eq!(s.code(), Code::ResourceExhausted);
    assert!(s.message().contains("series"), "{}", s.message());

    let mut hl = hello("n2", 1);
    let inv = hl.inventory.as_mut().unwrap();
    inv.series.truncate(2);
    inv.links[0].device = "x".repeat(25);
    let s = rejected(h.grpc_addr, vec![msg_hello(hl)]).await;
    assert_eq!(s.code(), Code::ResourceExhausted);
    assert!(s.message().contains("device"), "{}", s.message());

    let mut hl = hello("n3", 1);
    hl.inventory.as_mut().unwrap().series.truncate(2);
    let big = traffic(0, 400, 1, 1); // ~ 400 * 2 * 9 bytes + timestamps > 4 KiB
    let s = rejected(h.grpc_addr, vec![msg_hello(hl), msg_batch(batch(1, &big))]).await;
    assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
    let m = metrics(&h).await;
    assert!(
        m.contains("commwatch_collector_rejected_streams_total{reason=\"max_series\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("commwatch_collector_rejected_streams_total{reason=\"label_len\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("commwatch_collector_rejected_streams_total{reason=\"max_batch_bytes\"} 1"),
        "{m}"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn counter_reset_and_saturation_never_give_negative_or_absurd_rates() {
    let h = collector(config()).await;
    let mut hl = hello("n1", 1);
    // rx is a 32-bit PMA counter here.
    hl.inventory.as_mut().unwrap().series[1].max_value = u32::MAX as u64;
    let (mut a, _) = Agent::connect(h.grpc_addr, hl).await;
    // tx: 1 MB per tick, then a reset to 1000 (driver reload), then 1 MB per tick again.
    let mut ticks = Vec::new();
    for i in 0..40i64 {
        let tx = if i < 20 {
            i as u64 * 1_000_000
        } else {
            1000 + (i - 20) as u64 * 1_000_000
        };
        let rx = (i as u64 * 400_000_000).min(u32::MAX as u64);
        ticks.push((T0 + i * 50 * MS, vec![(1, tx), (2, rx)]));
    }
    a.send_batch(batch(1, &ticks)).await;
    a.ack_at_least(1).await;
    let l = &h.snapshot_nodes()[0].links[0];
    // The last second (ticks 19..39): the 1000 counted since the reset plus 19 deltas of 1 MB.
    let tx_rate = l.tx_bytes_per_second.expect("tx rate");
    assert!((tx_rate - 19_001_000.0).abs() < 1.0, "{tx_rate}");
    assert_eq!(l.tx_bytes_total, Some(1000 + 19_000_000));
    // rx sits at saturation: rate unknown (null), never a jump.
    assert_eq!(l.rx_bytes_per_second, None);
    assert_eq!(l.rx_bytes_total, Some(u32::MAX as u64));
    // An absurd jump (100 TB in 50 ms) is dropped and counted.
    a.send_batch(batch(
        2,
        &[(T0 + 40 * 50 * MS, vec![(1, 100_000_000_000_000)])],
    ))
    .await;
    a.ack_at_least(2).await;
    let l = &h.snapshot_nodes()[0].links[0];
    assert!(
        l.tx_bytes_per_second.unwrap() < 100e9,
        "{:?}",
        l.tx_bytes_per_second
    );
    assert!(l.tx_bytes_per_second.unwrap() >= 0.0);
    let s = h.ingest_stats();
    assert_eq!(s.implausible_rates, 1);
    assert_eq!(s.counter_resets, 1);
    let m = metrics(&h).await;
    assert!(
        !m.contains("commwatch_link_receive_bytes_per_second"),
        "{m}"
    );
    assert!(m.contains("commwatch_collector_implausible_rates_total 1"));
    h.shutdown().await;
}

#[tokio::test]
async fn agent_restart_gives_no_spike() {
    let h = collector(config()).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    a.send_batch(batch(1, &traffic(1000, 40, 2_000_000, 1_000_000)))
        .await;
    a.ack_at_least(1).await;
    drop(a);
    // New instance after a 2 s pause; ids renumbered, counters continue from the hardware's values.
    let mut hl = hello("n1", 2);
    for s in &mut hl.inventory.as_mut().unwrap().series {
        s.id += 100;
    }
    let (mut a, first) = Agent::connect(h.grpc_addr, hl).await;
    assert_eq!(first, 0, "a new instance starts with nothing held");
    let ticks: Vec<_> = traffic(1080, 30, 2_000_000, 1_000_000)
        .into_iter()
        .map(|(t, s)| (t, s.into_iter().map(|(id, v)| (id + 100, v)).collect()))
        .collect();
    a.send_batch(batch(1, &ticks[..1])).await;
    a.ack_at_least(1).await;
    let l = &h.snapshot_nodes()[0].links[0];
    // Across the restart: (1080 - 1039) ticks of 2 MB over 2.05 s = 40 MB/s, the steady rate.
    assert_eq!(l.tx_bytes_per_second, Some(40_000_000.0));
    a.send_batch(batch(2, &ticks[1..])).await;
    a.ack_at_least(2).await;
    let l = &h.snapshot_nodes()[0].links[0];
    assert_eq!(l.tx_bytes_per_second, Some(40_000_000.0));
    assert_eq!(l.rx_bytes_per_second, Some(20_000_000.0));
    assert_eq!(h.ingest_stats().counter_resets, 0);
    h.shutdown().await;
}

#[tokio::test]
async fn newer_stream_for_a_node_wins() {
    let h = collector(config()).await;
    let (mut old, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    let (mut new, first) = Agent::connect(h.grpc_addr, hello("n1", 2)).await;
    assert_eq!(first, 0);
    let s = old.error().await;
    assert_eq!(s.code(), Code::Aborted);
    assert!(s.message().contains("superseded"));
    new.send_batch(batch(1, &traffic(0, 2, 10, 10))).await;
    assert_eq!(new.ack_at_least(1).await, 1);
    assert_eq!(h.ingest_stats().superseded_streams, 1);
    h.shutdown().await;
}

#[tokio::test]
async fn stale_nodes_expire_from_api_and_metrics() {
    // "alive" sends a heartbeat every 50 ms, 40 within `node_expiry`: it stays however slow the machine is.
    // "gone" is silent and closed: it must leave the API and the metrics; how soon is not asserted (a loaded
    // machine runs the sweep late), only that it happens and "alive" is still there when it has.
    let mut cfg = config();
    cfg.node_expiry = Duration::from_secs(2);
    let h = collector(cfg).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("gone", 1)).await;
    a.send_batch(batch(1, &traffic(0, 2, 10, 10))).await;
    a.ack_at_least(1).await;
    let (b, _) = Agent::connect(h.grpc_addr, hello("alive", 1)).await;
    drop(a);
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let heartbeats = tokio::spawn(async move {
        for i in 0.. {
            b.send(pb::AgentMessage {
                msg: Some(pb::agent_message::Msg::Heartbeat(pb::Heartbeat {
                    unix_ns: i,
                })),
            })
            .await;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = stopped.changed() => break,
            }
        }
        b
    });
    let start = std::time::Instant::now();
    let (names, m) = loop {
        let v = nodes_json(&h).await;
        let names: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["name"].as_str().unwrap().to_string())
            .collect();
        let m = metrics(&h).await;
        if !names.iter().any(|n| n == "gone") && node_lines(&m, "gone").is_empty() {
            break (names, m);
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "\"gone\" never expired: {names:?}\n{m}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(names, vec!["alive"]);
    assert!(!node_lines(&m, "alive").is_empty(), "{m}");
    stop.send_replace(true);
    drop(heartbeats.await.unwrap());
    h.shutdown().await;
}

#[tokio::test]
async fn config_is_sent_after_the_first_ack() {
    let mut cfg = config();
    cfg.fast_period_ms = 100;
    let h = collector(cfg).await;
    let mut a = Agent::open(h.grpc_addr).await;
    a.send(msg_hello(hello("n1", 1))).await;
    assert!(matches!(
        a.next().await,
        Ok(Some(pb::collector_message::Msg::Ack(pb::Ack { seq: 0 })))
    ));
    match a.next().await {
        Ok(Some(pb::collector_message::Msg::Config(c))) => {
            assert_eq!((c.fast_period_ms, c.slow_period_ms), (100, 0))
        }
        other => panic!("expected Config, got {other:?}"),
    }
    h.shutdown().await;
}

#[tokio::test]
async fn shutdown_with_nothing_connected() {
    let h = collector(config()).await;
    let (code, body) = get(format!("http://{}/healthz", h.http_addr)).await;
    assert_eq!((code, body.as_str()), (200, "ok"));
    // A write without a JSON body is refused before routing (the cross-site guard); a JSON one reaches the
    // read-only endpoint and is not allowed there.
    let client = reqwest::Client::new();
    let url = format!("http://{}/api/v1/nodes", h.http_addr);
    let r = client.post(&url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 415);
    let r = client
        .post(&url)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(nodes_json(&h).await, serde_json::json!([]));
    tokio::time::timeout(Duration::from_secs(3), h.shutdown())
        .await
        .expect("prompt shutdown");
}

#[tokio::test]
async fn shutdown_ends_open_streams() {
    let h = collector(config()).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    let stop = tokio::spawn(h.shutdown());
    let s = a.error().await;
    assert_eq!(s.code(), Code::Unavailable);
    tokio::time::timeout(Duration::from_secs(6), stop)
        .await
        .expect("stops")
        .unwrap();
}

/// A stream the transport ends (the agent's connection closed under an open stream) is no rejected batch: it
/// is counted as dropped.
#[tokio::test]
async fn a_transport_drop_is_counted_as_dropped_not_as_rejected() {
    use prost::Message;
    let h = collector(config()).await;
    let tcp = tokio::net::TcpStream::connect(h.grpc_addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{}/commwatch.v1.Ingest/Stream", h.grpc_addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (resp, mut send) = client.send_request(req, false).unwrap();
    let hello = msg_hello(hello("n1", 1)).encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend((hello.len() as u32).to_be_bytes());
    frame.extend(hello);
    send.send_data(bytes::Bytes::from(frame), false).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), resp)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);
    // The Hello is accepted (its Ack arrives): the session runs.
    let mut body = resp.into_body();
    let ack = tokio::time::timeout(Duration::from_secs(5), body.data())
        .await
        .unwrap();
    assert!(matches!(ack, Some(Ok(_))), "{ack:?}");
    // The connection goes away under the open stream: no end of stream, no reset, just gone.
    conn.abort();
    drop((client, send, body));
    let dropped = || {
        let m = h.render_metrics();
        let v = |name: &str| {
            m.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
                .unwrap_or(-1.0)
        };
        (
            v("commwatch_collector_dropped_streams_total "),
            v("commwatch_collector_batches_total{result=\"rejected\"} "),
        )
    };
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while dropped().0 < 1.0 && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(dropped(), (1.0, 0.0));
    assert_eq!(h.ingest_stats().batches_rejected, 0);
    h.shutdown().await;
}

/// The API token is accepted with the `Bearer` scheme in any case (RFC 9110: schemes are case-insensitive).
#[tokio::test]
async fn the_api_token_scheme_is_matched_in_any_case() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("api-token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let mut cfg = config();
    cfg.api_token_file = Some(token);
    let h = collector(cfg).await;
    let url = format!("http://{}/api/v1/nodes", h.http_addr);
    let status = |auth: Option<&'static str>| {
        let url = url.clone();
        async move {
            let mut r = reqwest::Client::new().get(url);
            if let Some(a) = auth {
                r = r.header("authorization", a);
            }
            r.send().await.unwrap().status().as_u16()
        }
    };
    for scheme in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret"] {
        assert_eq!(status(Some(scheme)).await, 200, "{scheme}");
    }
    for refused in [
        None,
        Some("Basic s3cret"),
        Some("bearer wrong"),
        Some("s3cret"),
    ] {
        assert_eq!(status(refused).await, 401, "{refused:?}");
    }
    h.shutdown().await;
}

#[tokio::test]
async fn a_blind_agent_is_said_in_the_api_and_metrics_and_bad_blindness_is_refused() {
    let h = collector(config()).await;
    let mut blind = hello("gpu-07", 21);
    blind.blind = vec![pb::Blindness {
        code: "no_nvml".into(),
        what: "gpu".into(),
        reason: "NVML not loaded (libnvidia-ml.so.1: cannot open shared object file)".into(),
    }];
    let (mut a, _) = Agent::connect(h.grpc_addr, blind).await;
    a.send_batch(batch(1, &traffic(0, 3, 1, 1))).await;
    assert_eq!(a.ack_at_least(1).await, 1);
    let (mut b, _) = Agent::connect(h.grpc_addr, hello("gpu-08", 22)).await;
    b.send_batch(batch(1, &traffic(0, 3, 1, 1))).await;
    assert_eq!(b.ack_at_least(1).await, 1);

    let v = nodes_json(&h).await;
    let node = |name: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        node("gpu-07")["blind"],
        serde_json::json!([{
            "code": "no_nvml",
            "what": "gpu",
            "reason": "NVML not loaded (libnvidia-ml.so.1: cannot open shared object file)"
        }])
    );
    assert_eq!(node("gpu-08")["blind"], serde_json::json!([]));
    let m = metrics(&h).await;
    let blind_lines: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("commwatch_node_blind{"))
        .collect();
    assert_eq!(
        blind_lines,
        ["commwatch_node_blind{code=\"no_nvml\",node=\"gpu-07\",what=\"gpu\"} 1"]
    );

    // A code that is not a word, or a reason past its bound, fails that stream only.
    let mut bad = hello("gpu-09", 23);
    bad.blind = vec![pb::Blindness {
        code: "no nvml\n".into(),
        what: "gpu".into(),
        reason: String::new(),
    }];
    let s = rejected(h.grpc_addr, vec![msg_hello(bad)]).await;
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(
        s.message().contains("hello.blind[0].code"),
        "{}",
        s.message()
    );
    let mut long = hello("gpu-09", 24);
    long.blind = vec![pb::Blindness {
        code: "no_fabric".into(),
        what: "fabric".into(),
        reason: "x".repeat(2000),
    }];
    let s = rejected(h.grpc_addr, vec![msg_hello(long)]).await;
    assert!(
        s.message().contains("hello.blind[0].reason"),
        "{}",
        s.message()
    );
    h.shutdown().await;
}
