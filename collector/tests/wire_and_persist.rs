//! Garbage on the wire, persistence across an abrupt stop, and the exposition format.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use commwatch_proto::v1 as pb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn junk_bytes_on_the_grpc_port_leave_other_streams_alone() {
    let h = collector(config()).await;
    let (mut good, _) = Agent::connect(h.grpc_addr, hello("good", 1)).await;
    let mut tcp = tokio::net::TcpStream::connect(h.grpc_addr).await.unwrap();
    tcp.write_all(b"\x16\x03\x01 this is not http/2 at all \x00\xff\xfe")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    // The server closes the connection (possibly after a GOAWAY); it does not hang or crash.
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "connection with junk was not closed");
    good.send_batch(batch(1, &traffic(0, 2, 1, 1))).await;
    assert_eq!(good.ack_at_least(1).await, 1);
    h.shutdown().await;
}

#[tokio::test]
async fn invalid_protobuf_in_a_grpc_frame_is_invalid_argument() {
    let h = collector(config()).await;
    let (mut good, _) = Agent::connect(h.grpc_addr, hello("good", 1)).await;
    let tcp = tokio::net::TcpStream::connect(h.grpc_addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{}/commwatch.v1.Ingest/Stream", h.grpc_addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (resp, mut send) = client.send_request(req, false).unwrap();
    // A well-formed gRPC frame (uncompressed, 16 bytes) whose body is not a protobuf message.
    let mut frame = vec![0u8];
    frame.extend(16u32.to_be_bytes());
    frame.extend([0xffu8; 16]);
    send.send_data(bytes::Bytes::from(frame), false).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), resp)
        .await
        .unwrap()
        .unwrap();
    let (parts, mut body) = resp.into_parts();
    let mut status = parts.headers.get("grpc-status").cloned();
    let mut message = parts.headers.get("grpc-message").cloned();
    if status.is_none() {
        while let Some(chunk) = body.data().await {
            let _ = chunk;
        }
        let trailers = body.trailers().await.unwrap().expect("trailers");
        status = trailers.get("grpc-status").cloned();
        message = trailers.get("grpc-message").cloned();
    }
    assert_eq!(
        status.unwrap(),
        "3",
        "INVALID_ARGUMENT; message {message:?}"
    );
    good.send_batch(batch(1, &traffic(0, 2, 1, 1))).await;
    assert_eq!(good.ack_at_least(1).await, 1);
    let m = metrics(&h).await;
    assert!(
        m.contains("commwatch_collector_rejected_streams_total{reason=\"decode\"} 1"),
        "{m}"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn persisted_batches_survive_an_abrupt_stop_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.state_dir = Some(dir.path().to_path_buf());
    let h = collector(cfg.clone()).await;
    let (mut a, first) = Agent::connect(h.grpc_addr, hello("n1", 9)).await;
    assert_eq!(first, 0);
    for seq in 1..=5u64 {
        a.send_batch(batch(seq, &traffic((seq as i64 - 1) * 10, 10, 1000, 500)))
            .await;
    }
    // Acks come only after the commit.
    assert_eq!(a.ack_at_least(5).await, 5);
    // Batch 6 may or may not be committed when the collector dies: either way it must end up counted once.
    a.send_batch(batch(6, &traffic(50, 10, 1000, 500))).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    h.abort();
    drop(a);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let h = collector(cfg.clone()).await;
    let l = &h.snapshot_nodes()[0].links[0];
    let held = l.tx_bytes_total.unwrap();
    assert!(held == 49_000 || held == 59_000, "{held}");
    let (mut a, first) = Agent::connect(h.grpc_addr, hello("n1", 9)).await;
    assert!(first == 5 || first == 6, "{first}");
    assert_eq!(held, (first * 10 - 1) * 1000);
    // The agent resends what was not acked (and a stale one): each applied at most once.
    a.send_batch(batch(3, &traffic(20, 10, 1000, 500))).await;
    a.send_batch(batch(6, &traffic(50, 10, 1000, 500))).await;
    a.send_batch(batch(7, &traffic(60, 10, 1000, 500))).await;
    assert_eq!(a.ack_at_least(7).await, 7);
    let l = &h.snapshot_nodes()[0].links[0];
    assert_eq!(l.tx_bytes_total, Some(69_000));
    assert_eq!(l.rx_bytes_total, Some(34_500));
    assert_eq!(l.tx_bytes_per_second, Some(20_000.0));
    assert_eq!(l.capacity_bytes_per_second, Some(25e9));
    let s = h.ingest_stats();
    assert_eq!(s.batches_duplicate, if first == 6 { 2 } else { 1 });
    assert_eq!(s.gap_batches, 0);
    h.shutdown().await;

    // A graceful stop and a third start: everything still there once.
    let h = collector(cfg).await;
    let l = &h.snapshot_nodes()[0].links[0];
    assert_eq!(l.tx_bytes_total, Some(69_000));
    assert_eq!(l.tx_bytes_per_second, Some(20_000.0));
    let (_a, first) = Agent::connect(h.grpc_addr, hello("n1", 9)).await;
    assert_eq!(first, 7);
    h.shutdown().await;
}

fn golden_hello() -> pb::Hello {
    let mut h = hello("node-a", 1);
    let inv = h.inventory.as_mut().unwrap();
    inv.links.push(pb::Link {
        id: 2,
        class: pb::LinkClass::Ethernet as i32,
        role: pb::LinkRole::Management as i32,
        device: "eth0".into(),
        port: "eth0".into(),
        capacity_bytes_per_second: 0.0,
        state: "up".into(),
        attributes: HashMap::new(),
        gpu: String::new(),
        link: String::new(),
        ..Default::default()
    });
    inv.links.push(pb::Link {
        id: 3,
        class: pb::LinkClass::Nvlink as i32,
        role: pb::LinkRole::Fabric as i32,
        device: "gpu0".into(),
        port: "3".into(),
        capacity_bytes_per_second: 26.562e9,
        state: "up".into(),
        attributes: HashMap::new(),
        gpu: "0".into(),
        link: "3".into(),
        ..Default::default()
    });
    let c = |id, metric: &str, link_id| pb::SeriesDescriptor {
        id,
        metric: metric.into(),
        kind: pb::SeriesKind::Counter as i32,
        link_id,
        tier: 1,
        ..Default::default()
    };
    inv.series.push(c(10, "tx_bytes", 2));
    inv.series.push(c(11, "rx_bytes", 2));
    inv.series.push(c(12, "tx_bytes", 3));
    inv.series.push(c(13, "rx_bytes", 3));
    inv.series.push(c(14, "np_cnp_sent", 1));
    inv.series.push(c(15, "tx_packets", 1));
    inv.series.push(c(16, "multicast_xmit_packets", 1));
    h
}

#[tokio::test]
async fn golden_exposition_for_one_node() {
    let h = collector(config()).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, golden_hello()).await;
    let ticks: Vec<_> = (0..21i64)
        .map(|i| {
            let u = i as u64;
            (
                T0 + i * 50 * MS,
                vec![
                    (1, u * 1_000_000),
                    (2, u * 2_000_000),
                    (10, 5_000 + u * 100),
                    (11, 7_000 + u * 50),
                    (12, u * 10_000_000),
                    (13, u * 10_000_000),
                    (5, 0.5f64.to_bits()),
                    (3, 2),
                    (4, 0),
                    (14, 3),
                    (15, u * 10),
                    (16, 5),
                ],
            )
        })
        .collect();
    a.send_batch(batch(1, &ticks)).await;
    a.ack_at_least(1).await;
    let m = metrics(&h).await;
    let ib = r#"node="node-a",class="infiniband",device="mlx5_0",port="1",role="fabric""#;
    let eth = r#"node="node-a",class="ethernet",device="eth0",port="eth0",role="management""#;
    // The default NVLink detail: the GPU's links (one here) as one series set, without `port` and `link`.
    let nv = r#"node="node-a",class="nvlink",device="gpu0",role="fabric",gpu="0""#;
    let mut expected: Vec<String> = vec![
        format!("commwatch_link_capacity_bytes_per_second{{{ib}}} 25000000000"),
        format!("commwatch_link_capacity_bytes_per_second{{{nv}}} 26562000000"),
        // The default counter detail: a link's counters of a family summed, no `counter` label (one each here).
        format!("commwatch_link_congestion_total{{{ib}}} 3"),
        format!("commwatch_link_errors_total{{{ib}}} 2"),
        format!("commwatch_link_events_total{{{ib}}} 5"),
        format!("commwatch_link_receive_bytes_per_second{{{eth}}} 1000"),
        format!("commwatch_link_receive_bytes_per_second{{{ib}}} 40000000"),
        format!("commwatch_link_receive_bytes_per_second{{{nv}}} 200000000"),
        format!("commwatch_link_receive_bytes_total{{{eth}}} 8000"),
        format!("commwatch_link_receive_bytes_total{{{ib}}} 40000000"),
        format!("commwatch_link_receive_bytes_total{{{nv}}} 200000000"),
        format!("commwatch_link_transmit_bytes_per_second{{{eth}}} 2000"),
        format!("commwatch_link_transmit_bytes_per_second{{{ib}}} 20000000"),
        format!("commwatch_link_transmit_bytes_per_second{{{nv}}} 200000000"),
        format!("commwatch_link_transmit_bytes_total{{{eth}}} 7000"),
        format!("commwatch_link_transmit_bytes_total{{{ib}}} 20000000"),
        format!("commwatch_link_transmit_bytes_total{{{nv}}} 200000000"),
        format!("commwatch_link_transmit_packets_total{{{ib}}} 200"),
        format!("commwatch_link_up{{{eth},state=\"up\"}} 1"),
        format!("commwatch_link_up{{{ib},state=\"ACTIVE\"}} 1"),
        format!("commwatch_link_up{{{nv},state=\"up\"}} 1"),
        format!("commwatch_link_xmit_wait_ticks_total{{{ib}}} 0"),
        "commwatch_gpu_nvlinks_up{node=\"node-a\",gpu=\"0\"} 1".into(),
        "commwatch_gpu_nvlinks{node=\"node-a\",gpu=\"0\"} 1".into(),
        "commwatch_node_agent_dropped_batches_total{node=\"node-a\"} 0".into(),
        "commwatch_node_cpu_utilization_ratio{node=\"node-a\"} 0.5".into(),
        "commwatch_node_last_seen_timestamp_seconds{node=\"node-a\"} <now>".into(),
        "commwatch_node_up{node=\"node-a\"} 1".into(),
    ];
    expected.sort();
    let got: Vec<String> = node_lines(&m, "node-a")
        .into_iter()
        .map(|l| {
            if l.starts_with("commwatch_node_last_seen_timestamp_seconds") {
                let (k, v) = l.rsplit_once(' ').unwrap();
                let v: f64 = v.parse().unwrap();
                assert!(
                    (v - std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_secs_f64())
                    .abs()
                        < 30.0
                );
                format!("{k} <now>")
            } else {
                l
            }
        })
        .collect();
    assert_eq!(got, expected, "\n{m}");
    // The JSON view of the same node: NVLink adds gpu and link; unknown capacity is null.
    let v = nodes_json(&h).await;
    let links = v[0]["links"].as_array().unwrap();
    let eth = links.iter().find(|l| l["device"] == "eth0").unwrap();
    assert!(eth["capacity_bytes_per_second"].is_null());
    assert_eq!(eth["role"], "management");
    assert!(eth.get("gpu").is_none());
    let nv = links.iter().find(|l| l["class"] == "nvlink").unwrap();
    assert_eq!(
        (nv["gpu"].as_str(), nv["link"].as_str()),
        (Some("0"), Some("3"))
    );

    // promtool, where installed (Debian package `prometheus`), lints the whole exposition.
    if let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(m.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && text.trim().is_empty(),
            "promtool: {text}"
        );
    } else {
        eprintln!("promtool not installed; skipping the lint");
    }
    h.shutdown().await;
}

#[tokio::test]
async fn inventory_update_adds_links_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.state_dir = Some(dir.path().to_path_buf());
    let h = collector(cfg.clone()).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("n1", 3)).await;
    a.send(pb::AgentMessage {
        msg: Some(pb::agent_message::Msg::InventoryUpdate(
            pb::InventoryUpdate {
                inventory: Some(pb::Inventory {
                    links: vec![pb::Link {
                        id: 2,
                        class: pb::LinkClass::Ethernet as i32,
                        role: pb::LinkRole::Management as i32,
                        device: "eth0".into(),
                        port: "eth0".into(),
                        capacity_bytes_per_second: 1.25e9,
                        state: "up".into(),
                        ..Default::default()
                    }],
                    series: vec![pb::SeriesDescriptor {
                        id: 20,
                        metric: "tx_bytes".into(),
                        kind: pb::SeriesKind::Counter as i32,
                        link_id: 2,
                        tier: 1,
                        ..Default::default()
                    }],
                }),
                ..Default::default()
            },
        )),
    })
    .await;
    a.send_batch(batch(
        1,
        &[(T0, vec![(20, 100)]), (T0 + 50 * MS, vec![(20, 600)])],
    ))
    .await;
    assert_eq!(a.ack_at_least(1).await, 1);
    let eth = |h: &commwatch_collector::CollectorHandle| {
        h.snapshot_nodes()[0]
            .links
            .iter()
            .find(|l| l.device == "eth0")
            .cloned()
            .expect("eth0 link")
    };
    let l = eth(&h);
    assert_eq!(
        (l.tx_bytes_total, l.tx_bytes_per_second),
        (Some(600), Some(10_000.0))
    );
    assert_eq!(l.capacity_bytes_per_second, Some(1.25e9));
    h.abort();
    drop(a);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let h = collector(cfg).await;
    let l = eth(&h);
    assert_eq!(
        (l.tx_bytes_total, l.tx_bytes_per_second),
        (Some(600), Some(10_000.0))
    );
    h.shutdown().await;
}

/// `commwatch_collector_persist_corrupt_databases_total` of a running collector.
fn corrupt_databases(h: &commwatch_collector::CollectorHandle) -> Option<f64> {
    h.render_metrics().lines().find_map(|l| {
        l.strip_prefix("commwatch_collector_persist_corrupt_databases_total ")?
            .parse()
            .ok()
    })
}

/// Files of `dir` whose name starts with `prefix`.
fn named(dir: &std::path::Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort();
    v
}

/// A collector persists one batch of `node` and stops.
async fn persist_one(cfg: &commwatch_collector::CollectorConfig, node: &str) {
    let h = collector(cfg.clone()).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello(node, 1)).await;
    a.send_batch(batch(1, &traffic(0, 10, 1000, 500))).await;
    assert_eq!(a.ack_at_least(1).await, 1);
    h.shutdown().await;
}

/// A damaged state database used to stop every start ("file is not a database", no way forward): it is moved
/// aside, named and counted, and the collector starts on an empty one that works.
#[tokio::test]
async fn a_corrupt_state_database_is_moved_aside_and_the_collector_starts_fresh() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("first");
    let mut cfg = config();
    cfg.state_dir = Some(first.clone());
    persist_one(&cfg, "n1").await;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // Created private: it holds what agents sent.
    assert_eq!(mode(&first), 0o700);
    assert_eq!(mode(&first.join("collector.sqlite3")), 0o600);

    // A copy, away from anything of the first collector that may still close its files: every page in the
    // database file itself (none left in the WAL), then the pages after the first damaged. SQLite reports the
    // corruption when replay reads them.
    let dir = tmp.path().join("damaged");
    std::fs::create_dir(&dir).unwrap();
    let db = dir.join("collector.sqlite3");
    // The last connection to close checkpoints the WAL into the database and removes it.
    let until = std::time::Instant::now() + Duration::from_secs(3);
    while first.join("collector.sqlite3-wal").exists() && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for f in named(&first, "collector.sqlite3") {
        match std::fs::copy(first.join(&f), dir.join(&f)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            r => {
                r.unwrap();
            }
        }
    }
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    for f in named(&dir, "collector.sqlite3-") {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
    let mut bytes = std::fs::read(&db).unwrap();
    assert!(bytes.len() > 3 * 4096, "{} bytes", bytes.len());
    for b in bytes.iter_mut().skip(4096) {
        *b = 0xa5;
    }
    std::fs::write(&db, &bytes).unwrap();
    cfg.state_dir = Some(dir.clone());
    let h = collector(cfg.clone()).await;
    assert_eq!(corrupt_databases(&h), Some(1.0));
    assert!(h.snapshot_nodes().is_empty(), "nothing replayed");
    let aside = named(&dir, "collector.sqlite3.corrupt-");
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(
        std::fs::read(dir.join(&aside[0])).unwrap(),
        bytes,
        "kept as it was"
    );
    let (mut a, first_ack) = Agent::connect(h.grpc_addr, hello("n2", 1)).await;
    assert_eq!(first_ack, 0);
    a.send_batch(batch(1, &traffic(0, 10, 1000, 500))).await;
    assert_eq!(a.ack_at_least(1).await, 1);
    h.shutdown().await;
    // The fresh database keeps what came after.
    let h = collector(cfg.clone()).await;
    assert_eq!(corrupt_databases(&h), Some(0.0));
    let names: Vec<String> = h.snapshot_nodes().into_iter().map(|n| n.name).collect();
    assert_eq!(names, vec!["n2".to_string()]);
    h.shutdown().await;

    // Not a database at all.
    let dir = tmp.path().join("garbage");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("collector.sqlite3"),
        b"not an SQLite database, not even its header",
    )
    .unwrap();
    cfg.state_dir = Some(dir.clone());
    let h = collector(cfg).await;
    assert_eq!(corrupt_databases(&h), Some(1.0));
    assert_eq!(named(&dir, "collector.sqlite3.corrupt-").len(), 1);
    h.shutdown().await;
}

/// An empty database file starts empty, as SQLite does, and is made private.
#[tokio::test]
async fn an_empty_state_database_starts_empty_and_is_made_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("collector.sqlite3");
    std::fs::write(&db, b"").unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut cfg = config();
    cfg.state_dir = Some(tmp.path().to_path_buf());
    let h = collector(cfg).await;
    assert!(h.snapshot_nodes().is_empty());
    assert_eq!(corrupt_databases(&h), Some(0.0));
    let mode = std::fs::metadata(&db).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    h.shutdown().await;
}

/// An inventory update carrying only `link`.
fn link_update(link: pb::Link) -> pb::AgentMessage {
    pb::AgentMessage {
        msg: Some(pb::agent_message::Msg::InventoryUpdate(
            pb::InventoryUpdate {
                inventory: Some(pb::Inventory {
                    links: vec![link],
                    series: vec![],
                }),
                ..Default::default()
            },
        )),
    }
}

/// A link that vanished at the agent stayed `up` with its old totals forever. The agent now sends it again
/// flagged `gone`: the collector shows it gone (not up, no rate, its last totals), keeps it so across a
/// restart, and shows it back when the agent lists it again.
#[tokio::test]
async fn a_link_gone_at_the_agent_is_marked_gone_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.state_dir = Some(dir.path().to_path_buf());
    let h = collector(cfg.clone()).await;
    let hello = hello("n1", 3);
    let ib = hello.inventory.as_ref().unwrap().links[0].clone();
    let (mut a, _) = Agent::connect(h.grpc_addr, hello).await;
    a.send_batch(batch(1, &traffic(0, 10, 1000, 500))).await;
    a.send(link_update(pb::Link {
        gone: true,
        ..ib.clone()
    }))
    .await;
    a.send_batch(batch(2, &traffic(10, 1, 1000, 500))).await;
    assert_eq!(a.ack_at_least(2).await, 2);
    let link = |h: &commwatch_collector::CollectorHandle| h.snapshot_nodes()[0].links[0].clone();
    let l = link(&h);
    assert_eq!(l.state, "gone");
    assert_eq!((l.tx_bytes_per_second, l.rx_bytes_per_second), (None, None));
    assert_eq!(l.tx_bytes_total, Some(10_000), "its last totals stay");
    let up = h.render_metrics().lines().any(|line| {
        line.starts_with("commwatch_link_up{")
            && line.contains("state=\"gone\"")
            && line.ends_with(" 0")
    });
    let text = h.render_metrics();
    assert!(up, "{text}");
    h.abort();
    drop(a);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let h = collector(cfg).await;
    assert_eq!(link(&h).state, "gone", "replayed as gone");
    let (mut a, _) = Agent::connect(h.grpc_addr, hello_again()).await;
    a.send(link_update(ib)).await;
    a.send_batch(batch(3, &traffic(11, 10, 1000, 500))).await;
    assert_eq!(a.ack_at_least(3).await, 3);
    let l = link(&h);
    assert_eq!(l.state, "ACTIVE", "back");
    assert_eq!(l.tx_bytes_per_second, Some(20_000.0));
    h.shutdown().await;
}

/// The same agent instance reconnecting after a collector restart (its Hello still says the link is gone).
fn hello_again() -> pb::Hello {
    let mut h = hello("n1", 3);
    h.inventory.as_mut().unwrap().links[0].gone = true;
    h
}
