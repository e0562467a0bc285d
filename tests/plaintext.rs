//! Plain text only when explicitly allowed: an `http://` collector on another host (agent) and a plain-text gRPC
//! listener off loopback (collector) are refused at start with an error naming the way out, and run with a
//! warning when `--allow-plaintext` is given. Loopback plain text needs nothing.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Runs `commwatch args…` expecting it to exit within 20 s; returns (success, stderr).
fn run_to_exit(args: &[&str]) -> (bool, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("COMMWATCH_LOG", "info")
        .stdin(Stdio::null())
        .output()
        .expect("run commwatch");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits up to 20 s for `needle` in the process's log while it keeps running.
fn log_shows(p: &mut Proc, needle: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if p.log_text().contains(needle) {
            return true;
        }
        if let Ok(Some(status)) = p.child.try_wait() {
            panic!("exited with {status}:\n{}", p.log_text());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn agent_refuses_plain_text_to_another_host_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().to_str().unwrap();
    // 192.0.2.0/24 is TEST-NET-1: never this host.
    let base = [
        "agent",
        "--collector",
        "http://192.0.2.1:7070",
        "--node",
        "n1",
        "--sysfs-root",
        sys,
        "--http-listen",
        "127.0.0.1:0",
        "--steps-udp",
        "off",
        "--steps-socket",
        "off",
    ];
    let (ok, err) = run_to_exit(&base);
    assert!(!ok, "started without --allow-plaintext:\n{err}");
    assert!(
        err.contains("`collector`") && err.contains("--allow-plaintext"),
        "the error names the field and the way out:\n{err}"
    );

    let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    args.push("--allow-plaintext".into());
    let mut p = Proc::spawn(&args, dir.path().join("agent.log"));
    assert!(
        log_shows(&mut p, "plain text to the collector allowed"),
        "no start-up warning:\n{}",
        p.log_text()
    );

    // Loopback needs no allowance and warns about nothing.
    let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    args[2] = format!("http://127.0.0.1:{}", free_port());
    let mut p = Proc::spawn(&args, dir.path().join("agent-loopback.log"));
    assert!(log_shows(&mut p, "agent running"), "{}", p.log_text());
    assert!(!p.log_text().contains("plain text"), "{}", p.log_text());
}

#[test]
fn collector_refuses_plain_text_off_loopback_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let http = free_port();
    let http_listen = format!("127.0.0.1:{http}");
    let base = [
        "collector",
        "--grpc-listen",
        "0.0.0.0:0",
        "--http-listen",
        http_listen.as_str(),
    ];
    let (ok, err) = run_to_exit(&base);
    assert!(!ok, "started without --allow-plaintext:\n{err}");
    assert!(
        err.contains("`grpc_listen`") && err.contains("--allow-plaintext"),
        "the error names the field and the way out:\n{err}"
    );

    let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    args.push("--allow-plaintext".into());
    let mut p = Proc::spawn(&args, dir.path().join("collector.log"));
    assert!(
        log_shows(&mut p, "plain text on a non-loopback address"),
        "no start-up warning:\n{}",
        p.log_text()
    );
    let up = wait_for(Duration::from_secs(20), || {
        get_text(&format!("http://{http_listen}/healthz"))
    });
    assert!(up.is_some(), "{}", p.log_text());
}
