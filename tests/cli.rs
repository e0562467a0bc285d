//! The operator's command line against real processes: `status` and `findings` over plain HTTP on loopback and
//! over HTTPS (a TLS proxy with a CA made for the test) with the API token; `baseline import` and `diagnose
//! --collector` over HTTPS; usage errors and exit statuses; `--version`; completions and the man page; logs
//! without colour codes when piped, and JSON log lines.

mod cli_support;
mod common;

use std::time::{Duration, Instant};

use cli_support::*;
use common::*;

/// A nccl-tests result with one clean AllReduce row (the smallest the baseline import accepts).
const NCCL_TESTS: &str = "./build/all_reduce_perf -b 1M -e 1M\n\
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
     1048576        262144     float     sum      -1    100.0   10.49   10.49      0    100.0   10.49   10.49      0\n";

// ---------------------------------------------------------------------------------------------------------------
// No collector needed.

#[test]
fn version_names_the_revision_and_the_build_date() {
    let o = run(&["--version"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let line = stdout(&o);
    let line = line.trim_end();
    let rest = line
        .strip_prefix(&format!("commwatch {} (rev ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{line}"));
    let (rev, date) = rest.split_once(", built ").expect(line);
    assert!(
        rev == "unknown" || (rev.len() == 7 && rev.chars().all(|c| c.is_ascii_hexdigit())),
        "{line}"
    );
    let date = date.strip_suffix(')').expect(line);
    let parts: Vec<u32> = date.split('-').map(|p| p.parse().expect(line)).collect();
    assert!(
        parts.len() == 3 && parts[0] >= 2024 && (1..=12).contains(&parts[1]),
        "{line}"
    );
}

#[test]
fn completions_name_every_command() {
    for shell in ["bash", "zsh", "fish"] {
        let o = run(&["completions", shell]);
        assert_eq!(code(&o), 0, "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        for word in [
            "agent",
            "collector",
            "status",
            "findings",
            "baseline",
            "completions",
            "log-format",
        ] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
    }
    let o = run(&["completions", "tcsh"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

/// A report written into a pipe whose reader is gone (`commwatch man | head -1`) ends quietly: by SIGPIPE, as
/// Unix tools do, never by a panic.
#[test]
fn a_closed_pipe_ends_a_report_quietly() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    for args in [&["man"][..], &["completions", "bash"][..]] {
        let mut child = Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        // The reader goes away before anything is written.
        drop(child.stdout.take());
        let o = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            o.status.signal() == Some(libc::SIGPIPE) || o.status.success(),
            "{args:?}: {:?} {err}",
            o.status
        );
    }
}

#[test]
fn the_man_page_lists_the_commands() {
    let o = run(&["man"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let page = stdout(&o);
    assert!(page.contains(".TH commwatch 1"), "{page}");
    for command in ["status", "findings", "completions"] {
        assert!(page.contains(command), "the page lacks {command}");
    }
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["man", "--dir", &dir.path().display().to_string()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let status = std::fs::read_to_string(dir.path().join("commwatch-status.1")).unwrap();
    assert!(status.contains("api\\-token\\-file"), "{status}");
}

#[test]
fn bad_flags_are_usage_errors_with_exit_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent-token").display().to_string();
    let http = "http://127.0.0.1:9";
    let cases: &[(&[&str], &str)] = &[
        (
            &["status", "--collector", "ftp://c:1"],
            "http:// or https://",
        ),
        (
            &["status", "--collector", "c:9470"],
            "not a URL (no scheme); did you mean http://c:9470?",
        ),
        (
            &["status", "--collector", http, "--api-token-file", &missing],
            "--api-token-file",
        ),
        (
            &["status", "--collector", http, "--tls-ca", &missing],
            "not https://",
        ),
        (
            &["status", "--collector", http, "--format", "yaml"],
            "--format",
        ),
        (
            &["status", "--collector", http, "--stale-after", "soon"],
            "--stale-after",
        ),
        (
            &["findings", "--collector", http, "--severity", "fatal"],
            "--severity",
        ),
        (
            &["findings", "--collector", http, "--kind", "link_down"],
            "link_degraded",
        ),
        (
            &["findings", "--collector", http, "--node", "a b"],
            "whitespace",
        ),
        (
            &["findings", "--collector", http, "--limit", "0"],
            "--limit",
        ),
        (
            &["--log-format", "xml", "status", "--collector", http],
            "--log-format",
        ),
    ];
    for (args, says) in cases {
        let o = run(args);
        assert_eq!(code(&o), 2, "{args:?}\n{}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
    }
    // A CA file that is no certificate, with https://.
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let o = run(&[
        "findings",
        "--collector",
        "https://127.0.0.1:9",
        "--tls-ca",
        &junk.display().to_string(),
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--tls-ca"), "{}", stderr(&o));
}

#[test]
fn without_collector_status_says_where_it_looks() {
    for cmd in ["status", "findings"] {
        let o = run(&[cmd, "--help"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let help = stdout(&o);
        assert!(help.contains("COMMWATCH_COLLECTOR"), "{help}");
        assert!(help.contains("http://127.0.0.1:9470"), "{help}");
    }
}

#[test]
fn an_unreachable_collector_is_exit_status_1() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let o = run(&["status", "--collector", &url]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).starts_with("error: ") && stderr(&o).contains(&format!("{url}/healthz")),
        "{}",
        stderr(&o)
    );
    let o = run(&["status", "--collector", &url, "--format", "json"]);
    assert_eq!(code(&o), 1);
    let doc = json(&o);
    assert_eq!(doc["status"], "unreachable");
    assert_eq!(doc["collector"]["reachable"], false);
    assert_eq!(doc["collector"]["url"], url.as_str());
    let o = run(&["findings", "--collector", &url]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains(&format!("{url}/api/v1/findings")));
}

// ---------------------------------------------------------------------------------------------------------------
// Logs.

/// Starts a collector with `extra` global flags and stderr to a file, waits for it, stops it; its log.
fn collector_log(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (free_port(), free_port());
    let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    args.extend([
        "collector".into(),
        "--grpc-listen".into(),
        format!("127.0.0.1:{grpc}"),
        "--http-listen".into(),
        format!("127.0.0.1:{http}"),
    ]);
    let mut p = Proc::spawn(&args, dir.path().join("collector.log"));
    let up = wait_for(Duration::from_secs(20), || {
        get_text(&format!("http://127.0.0.1:{http}/healthz"))
    });
    assert!(up.is_some(), "collector did not come up:\n{}", p.log_text());
    assert!(
        p.terminate().is_some_and(|s| s.success()),
        "{}",
        p.log_text()
    );
    p.log_text()
}

#[test]
fn text_logs_carry_no_colour_codes_when_piped() {
    let log = collector_log(&[]);
    assert!(log.contains("collector running"), "{log}");
    assert!(
        !log.contains('\x1b'),
        "escape codes in a piped log:\n{log:?}"
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    let log = collector_log(&["--log-format", "json"]);
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let running = lines
        .iter()
        .find(|l| l["message"] == "collector running")
        .unwrap_or_else(|| panic!("no 'collector running' line:\n{log}"));
    assert_eq!(running["level"], "INFO");
    assert!(
        running["grpc"].is_string() && running["http"].is_string(),
        "{running}"
    );
    assert!(running["timestamp"].is_string(), "{running}");
}

// ---------------------------------------------------------------------------------------------------------------
// A live demo: plain HTTP on loopback, and HTTPS through a proxy for findings and diagnose.

/// An active root cause of the demo (on the management-NIC scenario: the NCCL setting that sends NCCL over
/// `eth0`, or the management traffic itself), once raised.
fn active_root_cause(http: u16) -> Option<serde_json::Value> {
    let list = get_json(&format!(
        "http://127.0.0.1:{http}/api/v1/findings?active=true"
    ))?;
    list.as_array()?
        .iter()
        .find(|f| {
            let root = f["root"].as_bool().unwrap_or(f["caused_by"].is_null());
            f["active"] == true && root
        })
        .cloned()
}

#[test]
fn status_and_findings_against_a_live_demo() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (free_port(), free_port());
    let demo = Proc::spawn(
        &[
            "demo".to_string(),
            "--scenario".into(),
            "management-nic".into(),
            "--nodes".into(),
            "2".into(),
            "--gpus-per-node".into(),
            "1".into(),
            "--grpc-listen".into(),
            format!("127.0.0.1:{grpc}"),
            "--http-listen".into(),
            format!("127.0.0.1:{http}"),
            "--duration".into(),
            "170s".into(),
            "--summary-every".into(),
            "60s".into(),
        ],
        dir.path().join("demo.log"),
    );
    let finding = wait_for(Duration::from_secs(90), || active_root_cause(http))
        .unwrap_or_else(|| panic!("no root cause raised:\n{}", demo.log_text()));
    let kind = finding["kind"].as_str().unwrap();
    let url = format!("http://127.0.0.1:{http}");

    // status, JSON: every part, and an exit status that follows the root causes' severity.
    let o = run(&["status", "--collector", &url, "--format", "json"]);
    let doc = json(&o);
    assert_eq!(doc["collector"]["reachable"], true, "{doc:#}");
    assert_eq!(doc["collector"]["url"], url.as_str());
    assert_eq!(doc["nodes"]["total"], 2, "{doc:#}");
    assert_eq!(doc["nodes"]["up"], 2, "{doc:#}");
    assert_eq!(doc["nodes"]["stale"], 0);
    assert_eq!(doc["nodes"]["stale_after_s"], 30.0);
    assert!(doc["checked_at_unix_s"].as_f64().unwrap() > 1.7e9);
    assert!(doc["jobs"].is_array(), "{doc:#}");
    let roots = doc["root_causes"].as_array().unwrap();
    assert!(roots.iter().any(|f| f["id"] == finding["id"]), "{doc:#}");
    let critical = roots.iter().any(|f| f["severity"] == "critical");
    assert_eq!(doc["status"], if critical { "critical" } else { "ok" });
    assert_eq!(code(&o), if critical { 3 } else { 0 }, "{}", stderr(&o));

    // status, text: one screen naming the finding.
    let o = run(&["status", "--collector", &url]);
    let text = stdout(&o);
    assert!(
        text.starts_with(&format!("collector   {url} reachable")),
        "{text}"
    );
    assert!(text.contains("nodes       2 up, 0 stale"), "{text}");
    assert!(text.contains(kind), "{text}");
    assert!(text.lines().count() <= 40, "{text}");

    // findings: filters, text lines, JSON as the API's.
    let o = run(&[
        "findings",
        "--collector",
        &url,
        "--root",
        "--active",
        "--kind",
        kind,
        "--format",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let listed = json(&o);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&finding["id"].as_str().unwrap()), "{listed:#}");
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["kind"] == kind && f["active"] == true));
    let node = finding["subject"]["node"].as_str().unwrap();
    let o = run(&["findings", "--collector", &url, "--node", node, "--active"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    let line = text
        .lines()
        .find(|l| l.contains(kind))
        .unwrap_or_else(|| panic!("{text}"));
    let severity = finding["severity"].as_str().unwrap();
    assert!(line.starts_with(severity), "{line}");
    assert!(line.contains(node), "{line}");
    assert!(
        line.contains(finding["summary"].as_str().unwrap()),
        "{line}"
    );
    // Every consequence names its root cause, in the collector's order (roots first).
    let o = run(&[
        "findings",
        "--collector",
        &url,
        "--node",
        node,
        "--active",
        "--format",
        "json",
    ]);
    let all = json(&o);
    let all = all.as_array().unwrap();
    for f in all.iter().filter(|f| f["caused_by"].is_string()) {
        let cause = format!("(caused by {})", f["caused_by"].as_str().unwrap());
        assert!(text.contains(&cause), "{cause} not in\n{text}");
    }
    let first_consequence = all.iter().position(|f| f["root"] == false);
    let last_root = all.iter().rposition(|f| f["root"] == true);
    if let (Some(c), Some(r)) = (first_consequence, last_root) {
        assert!(r < c, "roots first: {all:#?}");
    }
    let o = run(&["findings", "--collector", &url, "--node", "no-such-node"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    assert!(stderr(&o).contains("no findings match"), "{}", stderr(&o));

    // The same over HTTPS, through a proxy whose CA is given; diagnose finds it through SSL_CERT_FILE.
    let pki = Pki::new();
    let proxy = TlsProxy::start(&pki, http);
    let https = format!("https://localhost:{}", proxy.port);
    let ca = pki.ca().display().to_string();
    let o = run(&[
        "findings",
        "--collector",
        &https,
        "--tls-ca",
        &ca,
        "--root",
        "--active",
        "--kind",
        kind,
        "--format",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(json(&o)
        .to_string()
        .contains(finding["id"].as_str().unwrap()));
    let nccl = dir.path().join("allreduce.txt");
    std::fs::write(&nccl, NCCL_TESTS).unwrap();
    let diagnose = [
        "diagnose",
        "--nccl-tests",
        nccl.to_str().unwrap(),
        "--collector",
        &https,
        "--format",
        "json",
    ];
    let o = run_env(&diagnose, &[("SSL_CERT_FILE", &pki.ca())]);
    let report = json(&o);
    assert_eq!(
        report["link"]["source"], "collector",
        "{:#}",
        report["link"]
    );
    assert_eq!(report["link"]["warning"], serde_json::Value::Null);
    // Without the CA the certificate is refused, and said so.
    let o = run(&diagnose);
    let warning = json(&o)["link"]["warning"].to_string();
    assert!(warning.contains("certificate"), "{warning}");
    eprintln!("live demo checks took {:?}", started.elapsed());
}

// ---------------------------------------------------------------------------------------------------------------
// HTTPS with the API token.

#[test]
fn status_findings_and_baseline_import_over_https_with_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("api-token");
    std::fs::write(&token, "s3cr3t-api-token\n").unwrap();
    let token_arg = token.display().to_string();
    let cluster = commwatch_sim::Cluster::constant(
        &dir.path().join("trees"),
        1,
        1,
        1_000_000_000,
        1_000_000_000,
    )
    .unwrap();
    let roots = cluster.node_roots();
    let _updater = cluster.spawn_updater(Duration::from_millis(5));
    let (grpc, http) = (free_port(), free_port());
    let _collector = collector(
        dir.path(),
        "collector",
        grpc,
        http,
        &["--api-token-file", &token_arg],
    );
    let (node, root) = &roots[0];
    let agent = agent(dir.path(), node, root, grpc, &[]);
    let pki = Pki::new();
    let proxy = TlsProxy::start(&pki, http);
    let url = format!("https://127.0.0.1:{}", proxy.port);
    let ca = pki.ca().display().to_string();
    let with = |args: &[&str]| {
        let mut v: Vec<&str> = args.to_vec();
        v.extend([
            "--collector",
            url.as_str(),
            "--tls-ca",
            ca.as_str(),
            "--api-token-file",
            token_arg.as_str(),
        ]);
        run(&v)
    };
    let seen = wait_for(Duration::from_secs(30), || {
        let doc = json(&with(&["status", "--format", "json"]));
        (doc["nodes"]["up"] == 1).then_some(doc)
    });
    let doc = seen.unwrap_or_else(|| panic!("the node never showed\n{}", agent.log_text()));
    assert_eq!(doc["collector"]["url"], url.as_str());
    assert_eq!(doc["nodes"]["total"], 1);

    let o = with(&["status"]);
    assert!([0, 3].contains(&code(&o)), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("nodes       1 up, 0 stale"),
        "{}",
        stdout(&o)
    );
    let o = with(&["findings", "--format", "json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(json(&o).is_array());

    // baseline import speaks HTTPS with the token too.
    let nccl = dir.path().join("allreduce.txt");
    std::fs::write(&nccl, NCCL_TESTS).unwrap();
    let o = run(&[
        "baseline",
        "import",
        nccl.to_str().unwrap(),
        "--collector",
        &url,
        "--tls-ca",
        &ca,
        "--api-token-file",
        &token_arg,
        "--job",
        "cli-https",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json(&o)["bare"][0]["job"], "cli-https", "{}", stdout(&o));

    // Without the token: the collector refuses (exit 1, its message shown).
    let o = run(&["status", "--collector", &url, "--tls-ca", &ca]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("HTTP 401") && stderr(&o).contains("bearer token"),
        "{}",
        stderr(&o)
    );
    let o = run(&[
        "status",
        "--collector",
        &url,
        "--tls-ca",
        &ca,
        "--format",
        "json",
    ]);
    let failed = json(&o);
    assert_eq!(
        (
            failed["status"].as_str(),
            failed["collector"]["reachable"].as_bool()
        ),
        (Some("error"), Some(true))
    );
    // Without the CA: the proxy's certificate is not trusted (exit 1, said so).
    let o = run(&[
        "findings",
        "--collector",
        &url,
        "--api-token-file",
        &token_arg,
    ]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("certificate"), "{}", stderr(&o));
}
