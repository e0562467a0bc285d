//! What the collector says at start about a risky setup: an HTTP listener off loopback, secret files group or
//! others can read, a state directory others can enter. The log is captured by this test binary's own
//! subscriber.

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

use common::config;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_risky_setup_is_warned_about_at_start() {
    let log = Captured::default();
    let sink = log.clone();
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_env_filter("warn")
        .with_writer(move || sink.clone())
        .init();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("api-token");
    std::fs::write(&token, "t0ken\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cfg = config();
    cfg.http_listen = "0.0.0.0:0".parse().unwrap();
    cfg.api_token_file = Some(token.clone());
    cfg.state_dir = Some(state);
    let h = commwatch_collector::start(cfg).await.expect("starts");
    h.shutdown().await;
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let said = |what: &str| assert!(text.contains(what), "no {what:?} in\n{text}");
    said("the HTTP listener is not on a loopback address");
    said(&format!(
        "API token file {} can be read or changed by group or others (mode 0644): chmod 600",
        token.display()
    ));
    said("the state directory can be entered by group or others");
}
