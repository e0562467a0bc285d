//! `commwatch probe serve` and `commwatch probe run` as processes on loopback: JSON figures, a wrong token, a
//! target that is not there, and RDMA without a device.

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_commwatch");

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(port: u16, token_file: &std::path::Path) -> Serve {
    let child = Command::new(BIN)
        .args([
            "probe",
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--token-file",
        ])
        .arg(token_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start probe serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "probe serve did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Serve(child)
}

fn probe(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["probe", "run"])
        .args(args)
        .output()
        .expect("run probe run")
}

#[test]
fn probe_run_against_probe_serve() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    let wrong = dir.path().join("wrong");
    std::fs::write(&token, "s3cret\n").unwrap();
    std::fs::write(&wrong, "guess\n").unwrap();
    let port = free_port();
    let _server = serve(port, &token);
    let target = format!("127.0.0.1:{port}");

    let out = probe(&[
        "--target",
        &target,
        "--duration",
        "1s",
        "--size",
        "65536",
        "--format",
        "json",
        "--bind",
        "127.0.0.1",
        "--token-file",
        token.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    println!("{j:#}");
    assert_eq!(j["target"], target.as_str());
    assert_eq!(j["transport"], "tcp");
    assert_eq!(j["size_bytes"], 65536);
    for key in [
        "tx_bytes_per_second",
        "rx_bytes_per_second",
        "latency_p50_seconds",
    ] {
        assert!(j[key].as_f64().unwrap_or(0.0) > 0.0, "{key}: {j}");
    }
    let (p50, p99, max) = (
        j["latency_p50_seconds"].as_f64().unwrap(),
        j["latency_p99_seconds"].as_f64().unwrap(),
        j["latency_max_seconds"].as_f64().unwrap(),
    );
    assert!(p50 <= p99 && p99 <= max, "{j}");

    let out = probe(&[
        "--target",
        &target,
        "--duration",
        "1s",
        "--token-file",
        wrong.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "error: {target} declined the probe (token): the probe token is wrong"
        )),
        "{stderr}"
    );

    let out = probe(&[
        "--target",
        &target,
        "--token-file",
        token.to_str().unwrap(),
        "--duration",
        "500ms",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with(&format!("probe {target} over tcp (1048576 B messages)")),
        "{stdout}"
    );
    assert!(
        stdout.contains("bandwidth to target") && stdout.contains("latency (round trip)"),
        "{stdout}"
    );
}

#[test]
fn probe_run_names_a_target_that_is_not_there() {
    let target = format!("127.0.0.1:{}", free_port());
    let out = probe(&["--target", &target]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!("error: cannot connect to {target}: ")),
        "{stderr}"
    );
}

#[test]
fn probe_run_over_rdma_without_a_device_says_so() {
    let target = format!("127.0.0.1:{}", free_port());
    let out = probe(&[
        "--target",
        &target,
        "--transport",
        "rdma",
        "--device",
        "nosuchdev0",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no RDMA support") || stderr.contains("no RDMA device"),
        "{stderr}"
    );
}
