//! `commwatch baseline import FILE --collector URL` against a real collector process, with a real nccl-tests
//! output read in place from the shared test data.

mod common;

use std::process::Command;

use common::*;
use commwatch_testdata::shared_testdata;

#[test]
fn a_nccl_tests_result_is_kept_by_the_collector() {
    let Some(file) = shared_testdata!("nccl/nccl-tests-cluster-N10G1-allreduce.txt") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (free_port(), free_port());
    let _c = collector(dir.path(), "collector", grpc, http, &[]);
    let out = Command::new(BIN)
        .args(["baseline", "import"])
        .arg(&file)
        .args([
            "--collector",
            &format!("http://127.0.0.1:{http}"),
            "--job",
            "llm-7",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the collector's answer");
    let bare = stored["bare"].as_array().expect("stored bare baselines");
    assert_eq!(bare.len(), 1, "{stored:#}");
    assert_eq!(bare[0]["job"], "llm-7");
    assert_eq!(bare[0]["collective"], "all_reduce_perf");
    assert_eq!(bare[0]["nranks"], 10);
    // The peak bus bandwidth of the file (large messages): 48.89 GB/s at 8 GiB.
    assert_eq!(bare[0]["busbw_bytes_per_second"].as_f64(), Some(48.89e9));

    let kept = get_json(&format!("http://127.0.0.1:{http}/api/v1/baselines")).expect("baselines");
    let text = kept.to_string();
    assert!(
        text.contains("llm-7") && text.contains("all_reduce_perf") && text.contains("48890000000"),
        "{text}"
    );
}

#[test]
fn an_unreachable_collector_or_a_bad_file_is_a_clear_error() {
    let Some(file) = shared_testdata!("nccl/nccl-tests-cluster-N10G1-allreduce.txt") else {
        return;
    };
    let port = free_port();
    let out = Command::new(BIN)
        .args(["baseline", "import"])
        .arg(&file)
        .args(["--collector", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("127.0.0.1:{port}/api/v1/baselines")),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.txt");
    std::fs::write(&junk, "this is not a nccl-tests result\n").unwrap();
    let out = Command::new(BIN)
        .args(["baseline", "import"])
        .arg(&junk)
        .args(["--collector", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("junk.txt"), "{err}");
}

fn post_baseline(addr: &str, token: Option<&str>) -> u16 {
    let body = r#"{"job":"j","gpus":8,"samples_per_second_per_gpu":100.0}"#;
    let mut req = client()
        .post(format!("http://{addr}/api/v1/baselines"))
        .header("content-type", "application/json")
        .body(body);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    req.send().map(|r| r.status().as_u16()).unwrap_or(0)
}

#[test]
fn an_api_token_guards_every_api_request() {
    let Some(file) = shared_testdata!("nccl/nccl-tests-cluster-N10G1-allreduce.txt") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("api-token");
    std::fs::write(&token, "api-s3cret\n").unwrap();
    let (grpc, http) = (free_port(), free_port());
    let token_arg = token.display().to_string();
    let _c = collector(
        dir.path(),
        "collector",
        grpc,
        http,
        &["--api-token-file", &token_arg],
    );
    let base = format!("127.0.0.1:{http}");
    let get = |t: Option<&str>| {
        let mut r = client().get(format!("http://{base}/api/v1/nodes"));
        if let Some(t) = t {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        r.send().map(|r| r.status().as_u16()).unwrap_or(0)
    };
    assert_eq!(get(None), 401);
    assert_eq!(get(Some("wrong")), 401);
    assert_eq!(get(Some("api-s3cret")), 200);
    // /metrics and /healthz stay open for Prometheus and probes.
    assert!(get_text(&format!("http://{base}/metrics")).is_some());
    assert!(get_text(&format!("http://{base}/healthz")).is_some());
    assert_eq!(post_baseline(&base, None), 401);
    assert_eq!(post_baseline(&base, Some("api-s3cret")), 200);

    let import = |extra: &[&str]| {
        Command::new(BIN)
            .args(["baseline", "import"])
            .arg(&file)
            .args(["--collector", &format!("http://{base}")])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = import(&[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("401"));
    let out = import(&["--token-file", &token_arg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn without_a_token_api_writes_come_from_loopback_only() {
    // The host's own non-loopback address (no packet is sent: connecting a UDP socket only picks a route).
    let Some(ip) = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("10.255.255.255:9").map(|_| s))
        .and_then(|s| s.local_addr())
        .ok()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
    else {
        commwatch_testdata::skip::skip(
            "this host has no non-loopback address to test a remote client with",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (free_port(), free_port());
    let listen = format!("0.0.0.0:{http}");
    let mut args: Vec<String> = vec![
        "collector".into(),
        "--grpc-listen".into(),
        format!("127.0.0.1:{grpc}"),
        "--http-listen".into(),
        listen,
    ];
    args.push("--state-dir".into());
    args.push(dir.path().join("state").display().to_string());
    let _c = Proc::spawn(&args, dir.path().join("collector.log"));
    let remote = format!("{ip}:{http}");
    assert!(
        wait_for(std::time::Duration::from_secs(20), || get_text(&format!(
            "http://{remote}/healthz"
        )))
        .is_some()
    );
    // Reads are open from anywhere the port is reachable; the write is refused from a non-loopback client.
    assert!(get_json(&format!("http://{remote}/api/v1/nodes")).is_some());
    assert_eq!(post_baseline(&remote, None), 403);
    assert_eq!(post_baseline(&format!("127.0.0.1:{http}"), None), 200);
}
