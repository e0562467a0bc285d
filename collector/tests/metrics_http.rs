//! `GET /metrics` over HTTP: gzip when the scraper's `Accept-Encoding` allows it (the same text once
//! decompressed), plain otherwise; `commwatch_build_info` once, with both labels.

mod common;

use std::io::Read;

use common::*;
use commwatch_collector::CollectorHandle;

/// One scrape of `/metrics` with `accept_encoding` (none when `None`): status, `Content-Encoding`, `Vary`, and
/// the body as sent (reqwest here decompresses nothing).
async fn scrape(
    h: &CollectorHandle,
    accept_encoding: Option<&str>,
) -> (u16, Option<String>, Option<String>, Vec<u8>) {
    let mut req = reqwest::Client::new().get(format!("http://{}/metrics", h.http_addr));
    if let Some(v) = accept_encoding {
        req = req.header("accept-encoding", v);
    }
    let r = req.send().await.expect("http get");
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    };
    let (encoding, vary) = (header("content-encoding"), header("vary"));
    let status = r.status().as_u16();
    (
        status,
        encoding,
        vary,
        r.bytes().await.expect("body").to_vec(),
    )
}

fn gunzip(body: &[u8]) -> String {
    let mut text = String::new();
    flate2::read::GzDecoder::new(body)
        .read_to_string(&mut text)
        .expect("a gzip stream of UTF-8 text");
    text
}

/// Families that change with every scrape (the render time, the open connections, the findings' age: now
/// minus the last evaluation, a family present only while there is one; the steps' age: now minus the step
/// engine's last pass) or at any moment (the background passes' time, CPU and nodes: the analysis runs every
/// quarter second; the stages' CPU, read at each scrape).
const VOLATILE: [&str; 6] = [
    "commwatch_collector_scrape_seconds",
    "commwatch_collector_http_connections",
    "commwatch_collector_evaluation_age_seconds",
    "commwatch_collector_steps_age_seconds",
    "commwatch_collector_pass_",
    "commwatch_collector_stage_cpu_seconds_total",
];

/// The text without the [`VOLATILE`] families' lines (samples, `# HELP` and `# TYPE`).
fn steady(text: &str) -> String {
    text.lines()
        .filter(|l| {
            let name = match l
                .strip_prefix("# HELP ")
                .or_else(|| l.strip_prefix("# TYPE "))
            {
                Some(rest) => rest.split(' ').next().unwrap_or_default(),
                None => l.split(['{', ' ']).next().unwrap_or_default(),
            };
            !VOLATILE.iter().any(|v| {
                name == *v
                    || (v.ends_with('_') && name.starts_with(v))
                    || name
                        .strip_prefix(v)
                        .is_some_and(|s| ["_bucket", "_sum", "_count"].contains(&s))
            })
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The lines of `after` that are not in `before` (for a failure's message).
fn moved(before: &str, after: &str) -> String {
    let (before, after) = (steady(before), steady(after));
    let before: std::collections::HashSet<&str> = before.lines().collect();
    let lines: Vec<&str> = after.lines().filter(|l| !before.contains(l)).collect();
    lines.join("\n")
}

/// A scrape with `accept_encoding` and the plain text it must equal: taken between two plain scrapes that agree
/// (the collector's passes move its own series between any two scrapes, the sooner the slower the machine),
/// retried until they do, for at most 30 s.
async fn scrape_between_agreeing(
    h: &CollectorHandle,
    accept_encoding: &str,
) -> ((u16, Option<String>, Option<String>, Vec<u8>), String) {
    let start = std::time::Instant::now();
    loop {
        let before = String::from_utf8(scrape(h, None).await.3).expect("plain text");
        let scraped = scrape(h, Some(accept_encoding)).await;
        let after = String::from_utf8(scrape(h, None).await.3).expect("plain text");
        if steady(&before) == steady(&after) {
            return (scraped, before);
        }
        eprintln!(
            "{accept_encoding}: moved between two plain scrapes:\n{}",
            moved(&before, &after)
        );
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{accept_encoding}: no two plain scrapes agreed for 30 s; the last moved:\n{}",
            moved(&before, &after)
        );
    }
}

#[tokio::test]
async fn metrics_are_gzipped_when_the_scraper_allows_it() {
    let h = collector(config()).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello("n1", 1)).await;
    a.send_batch(batch(1, &traffic(0, 21, 5_000_000, 2_500_000)))
        .await;
    assert_eq!(a.ack_at_least(1).await, 1);

    let (status, encoding, vary, plain) = scrape(&h, None).await;
    assert_eq!((status, encoding), (200, None));
    assert_eq!(vary.as_deref(), Some("accept-encoding"));
    let plain = String::from_utf8(plain).expect("plain text");
    assert!(plain.contains("commwatch_link_transmit_bytes_total{node=\"n1\""));

    for (accept, gzip) in [
        ("gzip", true),
        ("br, gzip;q=0.5", true),
        ("*", true),
        ("gzip;q=0", false),
        ("br", false),
        ("identity", false),
    ] {
        let ((status, encoding, vary, body), same_state) =
            scrape_between_agreeing(&h, accept).await;
        assert_eq!(status, 200, "{accept}");
        assert_eq!(vary.as_deref(), Some("accept-encoding"), "{accept}");
        let text = if gzip {
            assert_eq!(encoding.as_deref(), Some("gzip"), "{accept}");
            assert!(
                body.len() < plain.len() / 3,
                "{accept}: {} bytes",
                body.len()
            );
            gunzip(&body)
        } else {
            assert_eq!(encoding, None, "{accept}");
            String::from_utf8(body).expect("plain text")
        };
        assert_eq!(steady(&text), steady(&same_state), "{accept}");
    }
    h.shutdown().await;
}

#[tokio::test]
async fn build_info_is_one_series_with_version_and_revision() {
    let h = collector(config()).await;
    let text = metrics(&h).await;
    let samples: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("commwatch_build_info"))
        .collect();
    // No one set the revision in this test binary.
    let want = format!(
        "commwatch_build_info{{revision=\"unknown\",version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(samples, [want.as_str()]);
    assert_eq!(
        text.matches("# TYPE commwatch_build_info gauge\n").count(),
        1,
        "{text}"
    );
    h.shutdown().await;
}
