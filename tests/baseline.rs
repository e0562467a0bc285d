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

/// A cross-site forgery with no API token (the default on loopback): a web page's `text/plain` POST, or a
/// JSON one from a foreign `Origin`, is refused and counted, and stores nothing; the CLI's own writes (JSON,
/// no `Origin`) and a same-origin write still pass, as does the page's login form from its own origin only.
#[test]
fn forged_writes_are_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (free_port(), free_port());
    let _c = collector(dir.path(), "collector", grpc, http, &[]);
    let base = format!("http://127.0.0.1:{http}");
    let body = r#"{"job":"forged","gpus":8,"samples_per_second_per_gpu":100.0}"#;
    let post = |path: &str, headers: &[(&str, &str)], body: &str| {
        let mut r = client()
            .post(format!("{base}{path}"))
            .body(body.to_string());
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let r = r.send().expect("an answer");
        (r.status().as_u16(), r.text().unwrap_or_default())
    };
    let text_plain = [
        ("content-type", "text/plain"),
        ("origin", "http://evil.example"),
    ];
    let (status, text) = post("/api/v1/baselines", &text_plain, body);
    assert_eq!(status, 403, "{text}");
    let (status, text) = post("/api/v1/baselines", &[("content-type", "text/plain")], body);
    assert_eq!(status, 415, "{text}");
    assert!(text.contains("application/json"), "{text}");
    let foreign = [
        ("content-type", "application/json"),
        ("origin", "http://evil.example"),
    ];
    assert_eq!(post("/api/v1/baselines", &foreign, body).0, 403);
    let cross = [
        ("content-type", "application/json"),
        ("sec-fetch-site", "cross-site"),
    ];
    assert_eq!(post("/api/v1/probes", &cross, "{}").0, 403);
    let baselines = get_json(&format!("{base}/api/v1/baselines")).unwrap();
    assert!(
        !baselines.to_string().contains("forged"),
        "a refused write stored nothing: {baselines}"
    );
    let metrics = get_text(&format!("{base}/metrics")).unwrap();
    let refused = |reason| {
        metric(
            &metrics,
            "commwatch_collector_http_writes_refused_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(refused("origin"), Some(3.0), "{metrics}");
    assert_eq!(refused("content_type"), Some(1.0));

    // The CLI's shape (JSON, no Origin) and a same-origin page's both pass.
    let json = [("content-type", "application/json")];
    assert_eq!(post("/api/v1/baselines", &json, body).0, 200);
    let own = format!("http://127.0.0.1:{http}");
    let same = [
        ("content-type", "application/json"),
        ("origin", own.as_str()),
    ];
    assert_eq!(post("/api/v1/baselines", &same, body).0, 200);
    // The login form: from the page's own origin only (no token here, so it goes back to the page).
    let form = ("content-type", "application/x-www-form-urlencoded");
    assert_eq!(post("/login", &[form], "token=x").0, 403);
    assert_eq!(
        post(
            "/login",
            &[form, ("origin", "http://evil.example")],
            "token=x"
        )
        .0,
        403
    );
    let no_redirect = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let ok = no_redirect
        .post(format!("{base}/login"))
        .header(form.0, form.1)
        .header("origin", "null")
        .header("sec-fetch-site", "same-origin")
        .body("token=x")
        .send()
        .unwrap();
    assert_eq!(ok.status().as_u16(), 303);
}
