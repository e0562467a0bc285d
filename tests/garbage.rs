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
