//! Helpers of the end-to-end tests: real `commwatch` processes on loopback.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_commwatch");

/// A child process killed (SIGKILL) and reaped on drop; its stderr goes to a file for failure messages.
pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(args: &[String], log: PathBuf) -> Proc {
        let err = std::fs::File::create(&log).expect("log file");
        let child = Command::new(BIN)
            .args(args)
            .env("COMMWATCH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawn commwatch");
        Proc { child, log }
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit (up to 10 s).
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free loopback UDP port (bound then released; the tests use it right away).
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("free udp port")
}

/// `promtool check metrics` over an exposition: (clean, what promtool said). Clean = exit 0 and no lint output.
pub fn promtool_check_metrics(text: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("promtool stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool output");
    let msg = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && msg.trim().is_empty(), msg)
}

/// A free loopback port (bound then released; the tests use it right away).
/// `true` when `tool` runs (`tool version_flag` exits 0); otherwise it skips loudly, or fails when `CI=true`
/// (`.ci/run` installs the Debian `packages` named).
pub fn have_tool(tool: &str, version_flag: &str, packages: &str) -> bool {
    let ok = Command::new(tool)
        .arg(version_flag)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        commwatch_testdata::skip::unavailable(&format!(
            "{tool} is not installed (apt-get install {packages}; .ci/run installs it)"
        ));
    }
    ok
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("http client")
}

pub fn get_text(url: &str) -> Option<String> {
    let r = client().get(url).send().ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.text().ok()
}

pub fn get_json(url: &str) -> Option<serde_json::Value> {
    serde_json::from_str(&get_text(url)?).ok()
}

/// Polls `f` every 100 ms until it returns `Some` or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts a collector on the given ports.
pub fn collector(dir: &Path, name: &str, grpc: u16, http: u16, extra: &[&str]) -> Proc {
    let mut args: Vec<String> = vec![
        "collector".into(),
        "--grpc-listen".into(),
        format!("127.0.0.1:{grpc}"),
        "--http-listen".into(),
        format!("127.0.0.1:{http}"),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let p = Proc::spawn(&args, dir.join(format!("{name}.log")));
    let ok = wait_for(Duration::from_secs(20), || {
        get_text(&format!("http://127.0.0.1:{http}/healthz"))
    });
    assert!(ok.is_some(), "collector did not come up:\n{}", p.log_text());
    p
}

/// Starts an agent for `node` reading `sysfs_root`, shipping to the collector on `grpc`.
pub fn agent(dir: &Path, node: &str, sysfs_root: &Path, grpc: u16, extra: &[&str]) -> Proc {
    let mut args: Vec<String> = vec![
        "agent".into(),
        "--collector".into(),
        format!("http://127.0.0.1:{grpc}"),
        "--node".into(),
        node.into(),
        "--sysfs-root".into(),
        sysfs_root.display().to_string(),
        "--steps-udp".into(),
        "off".into(),
        "--steps-socket".into(),
        "off".into(),
    ];
    if !extra.contains(&"--http-listen") {
        args.extend(["--http-listen".to_string(), "127.0.0.1:0".to_string()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    Proc::spawn(&args, dir.join(format!("agent-{node}.log")))
}

/// Value of the first sample of `name` whose labels include every `(key, value)` of `labels`.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let (head, value) = line.rsplit_once(' ')?;
        let (metric_name, label_part) = match head.find('{') {
            Some(i) => (&head[..i], &head[i..]),
            None => (head, ""),
        };
        if metric_name != name {
            continue;
        }
        if labels
            .iter()
            .all(|(k, v)| label_part.contains(&format!("{k}=\"{v}\"")))
        {
            return value.parse().ok();
        }
    }
    None
}

/// The node object of `/api/v1/nodes` named `node`.
pub fn node<'a>(nodes: &'a serde_json::Value, node: &str) -> Option<&'a serde_json::Value> {
    nodes.as_array()?.iter().find(|n| n["name"] == node)
}

/// The link of a node object matching class, device and port.
pub fn link<'a>(
    node: &'a serde_json::Value,
    class: &str,
    device: &str,
    port: &str,
) -> Option<&'a serde_json::Value> {
    node["links"]
        .as_array()?
        .iter()
        .find(|l| l["class"] == class && l["device"] == device && l["port"] == port)
}
