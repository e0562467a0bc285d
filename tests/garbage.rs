//! Garbage bytes and invalid messages at the gRPC port: an error for that stream, other agents unaffected.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::*;
use commwatch_proto::v1 as pb;

#[test]
fn garbage_and_invalid_streams_fail_alone() {
    let dir = tempfile::tempdir().unwrap();
    let trees = dir.path().join("trees");
    let cluster =
        commwatch_sim::Cluster::constant(&trees, 1, 1, 1_000_000_000, 1_000_000_000).unwrap();
    let roots = cluster.node_roots();
    let updater = cluster.spawn_updater(Duration::from_millis(5));
    let (grpc, http) = (free_port(), free_port());
    let c = collector(dir.path(), "collector", grpc, http, &[]);
    let _agent = agent(dir.path(), &roots[0].0, &roots[0].1, grpc, &[]);
    let api = format!("http://127.0.0.1:{http}/api/v1/nodes");
    let last_seen =
        || -> Option<f64> { node(&get_json(&api)?, "node-00")?["last_seen_unix_s"].as_f64() };
    assert!(
        wait_for(Duration::from_secs(30), last_seen).is_some(),
        "{}",
        c.log_text()
    );

    // 1. Raw garbage on the TCP port: the connection is closed, nothing else happens.
    for junk in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        &[0xffu8; 4096][..],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x04garbage",
    ] {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", grpc)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(junk);
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
    }

    // 2. Well-formed gRPC with invalid messages: each stream fails with INVALID_ARGUMENT.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let codes = rt.block_on(async {
        let mut codes = Vec::new();
        let cases: Vec<Vec<pb::AgentMessage>> = vec![
            // A batch before any Hello.
            vec![pb::AgentMessage {
                msg: Some(pb::agent_message::Msg::Batch(pb::SampleBatch {
                    seq: 1,
                    ..Default::default()
                })),
            }],
            // A Hello with an empty node name.
            vec![pb::AgentMessage {
                msg: Some(pb::agent_message::Msg::Hello(pb::Hello {
                    instance_id: 5,
                    ..Default::default()
                })),
            }],
            // A batch whose columns disagree, and one naming a series never described.
            vec![
                pb::AgentMessage {
                    msg: Some(pb::agent_message::Msg::Hello(pb::Hello {
                        node: "bad-1".into(),
                        instance_id: 9,
                        ..Default::default()
                    })),
                },
                pb::AgentMessage {
                    msg: Some(pb::agent_message::Msg::Batch(pb::SampleBatch {
                        seq: 1,
                        timestamps_unix_ns: vec![1],
                        tick_lengths: vec![3],
                        series_ids: vec![1],
                        values: vec![1, 2],
                        ..Default::default()
                    })),
                },
            ],
            vec![
                pb::AgentMessage {
                    msg: Some(pb::agent_message::Msg::Hello(pb::Hello {
                        node: "bad-2".into(),
                        instance_id: 10,
                        ..Default::default()
                    })),
                },
                pb::AgentMessage {
                    msg: Some(pb::agent_message::Msg::Batch(pb::SampleBatch {
                        seq: 1,
                        timestamps_unix_ns: vec![1],
                        tick_lengths: vec![1],
                        series_ids: vec![77],
                        values: vec![1],
                        ..Default::default()
                    })),
                },
            ],
        ];
        for msgs in cases {
            let mut client =
                pb::ingest_client::IngestClient::connect(format!("http://127.0.0.1:{grpc}"))
                    .await
                    .unwrap();
            let code = match client.stream(tokio_stream::iter(msgs)).await {
                Err(status) => status.code(),
                Ok(resp) => {
                    let mut inbound = resp.into_inner();
                    let mut code = tonic::Code::Ok;
                    loop {
                        match tokio::time::timeout(Duration::from_secs(5), inbound.message()).await
                        {
                            Ok(Ok(Some(_))) => continue,
                            Ok(Ok(None)) => break,
                            Ok(Err(status)) => {
                                code = status.code();
                                break;
                            }
                            Err(_) => {
                                code = tonic::Code::DeadlineExceeded;
                                break;
                            }
                        }
                    }
                    code
                }
            };
            codes.push(code);
        }
        codes
    });
    assert_eq!(codes, vec![tonic::Code::InvalidArgument; 4]);

    // 3. The good agent is unaffected: its node keeps being updated, the bad ones never appear with links.
    let before = last_seen().unwrap();
    let after = wait_for(Duration::from_secs(10), || {
        last_seen().filter(|t| *t > before + 0.5)
    });
    assert!(
        after.is_some(),
        "the good agent stopped being updated\n{}",
        c.log_text()
    );
    let nodes = get_json(&api).unwrap();
    assert!(node(&nodes, "node-00").is_some());
    let text = get_text(&format!("http://127.0.0.1:{http}/metrics")).unwrap();
    let rejected: f64 = text
        .lines()
        .filter(|l| l.starts_with("commwatch_collector_rejected_streams_total"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert!(
        rejected >= 4.0,
        "rejected streams counted: {rejected}\n{text}"
    );
    drop(updater);
}

/// Terminal escapes an agent puts in what it says (its version, a link's device and state, a blind reason, an
/// NCCL value, a conflict's reason) are shown, never interpreted: the collector stores them escaped
/// (`\u001b`), so `status` prints them as text and the collector's log holds no forged line (issue 34).
#[test]
fn terminal_escapes_from_an_agent_come_out_escaped() {
    const OSC_TITLE: &str = "\x1b]0;owned\x07";
    const OSC_LINK: &str = "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\";
    const CLEAR: &str = "\x1b[2J\r";
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (free_port(), free_port());
    let c = collector(dir.path(), "collector", grpc, http, &[]);
    let hello = pb::Hello {
        node: "esc-1".into(),
        instance_id: 7,
        agent_version: format!("1.0\n2026-12-06T04:00:00.000000Z ERROR forged{OSC_TITLE}"),
        blind: vec![pb::Blindness {
            code: "nvml_missing".into(),
            what: "gpu".into(),
            reason: format!("no NVML{OSC_TITLE}{OSC_LINK}{CLEAR}"),
        }],
        inventory: Some(pb::Inventory {
            links: vec![pb::Link {
                id: 1,
                class: pb::LinkClass::Infiniband as i32,
                role: pb::LinkRole::Fabric as i32,
                device: format!("mlx5_0{CLEAR}"),
                port: "1".into(),
                state: format!("ACTIVE{OSC_LINK}"),
                ..Default::default()
            }],
            series: vec![],
        }),
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client =
            pb::ingest_client::IngestClient::connect(format!("http://127.0.0.1:{grpc}"))
                .await
                .unwrap();
        let msgs = vec![pb::AgentMessage {
            msg: Some(pb::agent_message::Msg::Hello(hello)),
        }];
        let mut inbound = client
            .stream(tokio_stream::iter(msgs))
            .await
            .expect("the hello is accepted")
            .into_inner();
        // The collector greets the agent once it holds the node.
        let first = tokio::time::timeout(Duration::from_secs(10), inbound.message()).await;
        assert!(matches!(first, Ok(Ok(Some(_)))), "{first:?}");
    });

    // Stored escaped: the API's JSON carries the escape as text (`\\u001b`), not a control character.
    let nodes = get_json(&format!("http://127.0.0.1:{http}/api/v1/nodes")).unwrap();
    let n = node(&nodes, "esc-1").expect("the node is held");
    assert_eq!(n["links"][0]["device"], "mlx5_0\\u001b[2J\\u000d");
    assert_eq!(
        n["links"][0]["state"],
        "ACTIVE\\u001b]8;;http://evil.example\\u001b\\click\\u001b]8;;\\u001b\\"
    );

    // `status` shows the blind reason as visible text.
    let out = std::process::Command::new(BIN)
        .args(["status", "--collector", &format!("http://127.0.0.1:{http}")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.chars().any(|ch| ch.is_control() && ch != '\n'),
        "{stdout:?}"
    );
    assert!(
        stdout.contains("no NVML\\u001b]0;owned\\u0007\\u001b]8;;http://evil.example"),
        "{stdout}"
    );
    assert!(stdout.contains("\\u001b[2J\\u000d"), "{stdout}");

    // The log line of the connection says the version in one line, escaped; nothing forged a line of its own.
    let log = wait_for(Duration::from_secs(5), || {
        let l = c.log_text();
        l.contains("agent connected").then_some(l)
    })
    .expect("the connection is logged");
    assert!(
        !log.chars().any(|ch| ch.is_control() && ch != '\n'),
        "{log:?}"
    );
    assert!(
        !log.lines().any(|l| l.starts_with("2026-12-06T04:00:00")),
        "a forged line: {log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("agent connected") && l.contains("1.0\\u000a2026-12-06")),
        "{log}"
    );
}

/// A collector (or anything at its address) answering with terminal escapes in an error body: the CLI's error
/// message shows them as `\u001b`-style text on stderr, never as escapes (issue 34).
#[test]
fn an_error_body_with_terminal_escapes_is_printed_escaped() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        // Every request of the command (it may retry) gets the same hostile answer.
        listener.set_nonblocking(false).unwrap();
        for stream in listener.incoming().take(4) {
            let Ok(mut s) = stream else { break };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = "{\"error\":\"no\x1b]0;owned\x07\x1b[2J\rERROR forged\"}";
            let answer = format!(
                "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(answer.as_bytes());
        }
    });
    let out = std::process::Command::new(BIN)
        .args([
            "findings",
            "--collector",
            &format!("http://127.0.0.1:{port}"),
        ])
        .args(["--timeout", "5s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        !stderr.chars().any(|c| c.is_control() && c != '\n'),
        "{stderr:?}"
    );
    assert!(
        stderr.contains("\\u001b"),
        "the body is shown, escaped: {stderr}"
    );
    drop(server);
}
