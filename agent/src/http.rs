//! The agent's own HTTP endpoint: `/metrics` (its health) and `/healthz` (`ok`, or `degraded: ` naming a stalled
//! source). Binds localhost unless configured.
//!
//! Served by [`commwatch_httpd`] like the collector's, bounded to [`MAX_HTTP_CONNECTIONS`] connections at once
//! (one accepted beyond that is closed at once and counted in `commwatch_agent_http_connections_refused_total`;
//! open now: `commwatch_agent_http_connections`), with the header-read and write-stall timeouts of
//! [`commwatch_httpd::HttpBounds::new`]. HTTP/1.1 only. `/metrics` is gzip-compressed when the scraper asks.
//! A write (any method but `GET`/`HEAD`) passes the cross-site guard first ([`commwatch_httpd::csrf`]; counted
//! in `commwatch_agent_http_writes_refused_total`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::telemetry::AgentMetrics;

/// Most HTTP connections the agent serves at once: its endpoint is scraped by one Prometheus (and read by an
/// operator now and then), so 32 leaves ample room while bounding what a local flood costs the node.
pub const MAX_HTTP_CONNECTIONS: usize = 32;

/// The agent's families, gzip-compressed when the scraper asks for it as the collector's
/// ([`commwatch_httpd::accepts_gzip`]).
async fn metrics_handler(State(m): State<Arc<AgentMetrics>>, request: HeaderMap) -> Response {
    let text = m.render();
    if !commwatch_httpd::accepts_gzip(&request) {
        return commwatch_httpd::metrics_response(text.into_bytes(), false);
    }
    match commwatch_httpd::gzip_fast(text.as_bytes()) {
        Ok(body) => commwatch_httpd::metrics_response(body, true),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// `GET /healthz`: `ok`; `degraded: ` with one line per reason while a source is stalled (a read that has not
/// returned within its deadline, `commwatch_agent_source_stalled` at 1) and for each thing the agent is blind
/// to (`commwatch_agent_blind`: NVML not loaded, no fabric link) — still `200`, as the collector's (the agent
/// serves and ships its other sources, and a restart would not unblock a hung read nor load a library).
async fn healthz(State(m): State<Arc<AgentMetrics>>) -> String {
    health_text(&stalled_sources(&m), &m.blind_reasons())
}

/// The `/healthz` text for the stalled sources and the blind reasons.
fn health_text(stalled: &[String], blind: &[String]) -> String {
    let mut reasons: Vec<String> = Vec::new();
    if !stalled.is_empty() {
        reasons.push(format!(
            "source {} stalled: a read has not returned within its deadline; its series stop until it answers",
            stalled.join(", ")
        ));
    }
    reasons.extend(blind.iter().cloned());
    if reasons.is_empty() {
        "ok\n".into()
    } else {
        format!("degraded: {}\n", reasons.join("\ndegraded: "))
    }
}

/// The sources whose stalled gauge is 1, by name.
fn stalled_sources(m: &AgentMetrics) -> Vec<String> {
    use prometheus::core::Collector;
    let mut out: Vec<String> = m
        .source_stalled
        .collect()
        .iter()
        .flat_map(|f| f.get_metric())
        .filter(|x| x.get_gauge().value() >= 1.0)
        .filter_map(|x| {
            x.get_label()
                .iter()
                .find(|l| l.name() == "source")
                .map(|l| l.value().to_string())
        })
        .collect();
    out.sort();
    out
}

/// Binds `addr` and serves until `shutdown` flips to true (or its sender is gone): then it accepts nothing
/// more, and open connections end after their current response. Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<AgentMetrics>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let counts = commwatch_httpd::ConnectionMetrics {
        open: metrics.http_connections.clone(),
        refused: metrics.http_connections_refused.clone(),
    };
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        // The agent takes no write today; any that comes is refused and counted like the collector's.
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(commwatch_httpd::csrf::WriteGuard {
                refused: metrics.http_writes_refused.clone(),
                form_paths: &[],
            }),
            commwatch_httpd::csrf::guard,
        ))
        .with_state(metrics);
    let task = tokio::spawn(commwatch_httpd::serve(
        listener,
        app,
        commwatch_httpd::HttpBounds::new(MAX_HTTP_CONNECTIONS),
        counts,
        shutdown,
    ));
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::time::Instant;

    const PROMPT: Duration = Duration::from_secs(5);

    async fn healthz(addr: SocketAddr) -> Option<String> {
        get(addr, "/healthz").await
    }

    async fn get(addr: SocketAddr, path: &str) -> Option<String> {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await.ok()?;
        let mut out = Vec::new();
        tokio::time::timeout(PROMPT, s.read_to_end(&mut out))
            .await
            .ok()?
            .ok()?;
        Some(String::from_utf8_lossy(&out).into_owned())
    }

    /// `GET /metrics` with `extra` request headers: the response's head (lower-cased) and its body's bytes.
    async fn get_raw(addr: SocketAddr, extra: &str) -> (String, Vec<u8>) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let request =
            format!("GET /metrics HTTP/1.1\r\nhost: a\r\n{extra}connection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(PROMPT, s.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap();
        let at = out
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a head");
        let head = String::from_utf8_lossy(&out[..at]).to_ascii_lowercase();
        (head, out[at + 4..].to_vec())
    }

    /// The agent takes no write: a forged one (a web page's `text/plain` POST, or JSON from a foreign origin)
    /// is refused before routing and counted; a JSON one without an origin reaches the router (405).
    #[tokio::test]
    async fn forged_writes_are_refused_and_counted() {
        let (stop, rx) = watch::channel(false);
        let metrics = Arc::new(AgentMetrics::new());
        let (addr, task) = serve("127.0.0.1:0".parse().unwrap(), metrics.clone(), rx)
            .await
            .unwrap();
        let post = |headers: &'static str| async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let request = format!(
                "POST /metrics HTTP/1.1\r\nhost: {addr}\r\n{headers}content-length: 2\r\n\
                 connection: close\r\n\r\n{{}}"
            );
            s.write_all(request.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            let _ = tokio::time::timeout(PROMPT, s.read_to_end(&mut out)).await;
            String::from_utf8_lossy(&out).into_owned()
        };
        let plain = post("content-type: text/plain\r\n").await;
        assert!(plain.starts_with("HTTP/1.1 415"), "{plain}");
        let foreign =
            post("content-type: application/json\r\norigin: http://evil.example\r\n").await;
        assert!(foreign.starts_with("HTTP/1.1 403"), "{foreign}");
        let json = post("content-type: application/json\r\n").await;
        assert!(json.starts_with("HTTP/1.1 405"), "{json}");
        let refused = |r| metrics.http_writes_refused.with_label_values(&[r]).get();
        assert_eq!((refused("content_type"), refused("origin")), (1, 1));
        stop.send_replace(true);
        tokio::time::timeout(PROMPT, task).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn metrics_are_gzipped_when_the_scraper_asks() {
        use std::io::Read as _;
        let (stop, rx) = watch::channel(false);
        let (addr, task) = serve(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(AgentMetrics::new()),
            rx,
        )
        .await
        .unwrap();
        let (head, body) = get_raw(addr, "accept-encoding: gzip\r\n").await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.contains("content-encoding: gzip"), "{head}");
        assert!(head.contains("vary: accept-encoding"), "{head}");
        let mut text = String::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_string(&mut text)
            .expect("gzip");
        assert!(text.contains("commwatch_build_info{"), "{text}");
        // Not asked (or refused): the plain text.
        for extra in ["", "accept-encoding: gzip;q=0\r\n"] {
            let (head, body) = get_raw(addr, extra).await;
            assert!(!head.contains("content-encoding"), "{head}");
            assert!(String::from_utf8(body)
                .unwrap()
                .contains("commwatch_build_info{"));
        }
        stop.send_replace(true);
        tokio::time::timeout(PROMPT, task).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn metrics_carry_build_info_once() {
        let (stop, rx) = watch::channel(false);
        let (addr, task) = serve(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(AgentMetrics::new()),
            rx,
        )
        .await
        .unwrap();
        let r = get(addr, "/metrics").await.expect("a response");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        let samples: Vec<&str> = r
            .lines()
            .filter(|l| l.starts_with("commwatch_build_info{"))
            .collect();
        let want = format!(
            "commwatch_build_info{{revision=\"unknown\",version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(samples, [want.as_str()]);
        stop.send_replace(true);
        tokio::time::timeout(PROMPT, task).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn healthz_says_degraded_naming_a_stalled_source() {
        let metrics = Arc::new(AgentMetrics::new());
        let (stop, rx) = watch::channel(false);
        let (addr, task) = serve("127.0.0.1:0".parse().unwrap(), metrics.clone(), rx)
            .await
            .unwrap();
        let body = |r: String| r.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
        metrics.source_stalled.with_label_values(&["sysfs"]).set(0);
        let r = healthz(addr).await.expect("a response");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert_eq!(body(r), "ok\n");
        metrics.source_stalled.with_label_values(&["sysfs"]).set(1);
        let r = healthz(addr).await.expect("a response");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(
            body(r.clone()).starts_with("degraded: source sysfs stalled"),
            "{r}"
        );
        metrics.source_stalled.with_label_values(&["sysfs"]).set(0);
        assert_eq!(body(healthz(addr).await.unwrap()), "ok\n");
        // A blind agent is degraded for as long as it runs, with the reason.
        metrics.set_blind(&[(
            "gpu",
            "no_nvml",
            "NVML not loaded (libnvidia-ml.so.1: not found)",
        )]);
        assert_eq!(
            body(healthz(addr).await.unwrap()),
            "degraded: blind to gpu: NVML not loaded (libnvidia-ml.so.1: not found)\n"
        );
        let m = get(addr, "/metrics").await.unwrap();
        assert!(
            m.contains("commwatch_agent_blind{code=\"no_nvml\",what=\"gpu\"} 1"),
            "{m}"
        );
        stop.send_replace(true);
        tokio::time::timeout(PROMPT, task).await.unwrap().unwrap();
    }

    #[test]
    fn every_reason_is_a_degraded_line() {
        assert_eq!(health_text(&[], &[]), "ok\n");
        assert_eq!(
            health_text(
                &["nvml".into(), "sysfs".into()],
                &["blind to fabric: no fabric link".into()]
            ),
            "degraded: source nvml, sysfs stalled: a read has not returned within its deadline; its series \
             stop until it answers\ndegraded: blind to fabric: no fabric link\n"
        );
    }

    #[tokio::test]
    async fn connections_over_the_cap_are_closed_at_once_and_counted() {
        let metrics = Arc::new(AgentMetrics::new());
        let (stop, rx) = watch::channel(false);
        let (addr, task) = serve("127.0.0.1:0".parse().unwrap(), metrics.clone(), rx)
            .await
            .unwrap();
        let mut idle = Vec::new();
        for _ in 0..MAX_HTTP_CONNECTIONS {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // Accepted in order: when the agent takes this one, the idle ones hold every slot.
        let mut over = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 16];
        let r = tokio::time::timeout(PROMPT, over.read(&mut buf)).await;
        assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "left open: {r:?}");
        assert_eq!(metrics.http_connections_refused.get(), 1);
        assert!(metrics
            .render()
            .contains("commwatch_agent_http_connections_refused_total 1"));
        drop(idle);
        let until = Instant::now() + PROMPT;
        loop {
            match healthz(addr).await {
                Some(r) if r.starts_with("HTTP/1.1 200") => break,
                r => assert!(
                    Instant::now() < until,
                    "no 200 after the idle ones closed: {r:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.send_replace(true);
        tokio::time::timeout(PROMPT, task).await.unwrap().unwrap();
    }
}
