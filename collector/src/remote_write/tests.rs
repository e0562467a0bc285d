//! The sender against a fake receiver (axum on 127.0.0.1:0): headers and bodies, retries with backoff on 5xx
//! and 429, no retry on 4xx, queue drops, the flush at stop, and every sample counted once.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use parking_lot::Mutex;

use super::*;

/// A fixed gather of `n` samples of `commwatch_t` (label `node`), then one of `other_family`.
struct Fixed(usize);

impl Gather for Fixed {
    fn gather(
        &self,
        keep: &mut dyn FnMut(&str) -> bool,
        sink: &mut dyn FnMut(SampleRef<'_>),
    ) -> Result<(), String> {
        if keep("commwatch_t") {
            for i in 0..self.0 {
                let node = format!("node-{i}");
                sink(SampleRef {
                    name: "commwatch_t",
                    labels: &[("node", &node)],
                    value: i as f64,
                });
            }
        }
        if keep("other_family") {
            sink(SampleRef {
                name: "other_family",
                labels: &[],
                value: 1.0,
            });
        }
        Ok(())
    }
}

/// What the fake receiver saw, and the statuses it answers with (then 204).
#[derive(Default)]
struct Receiver {
    requests: Mutex<Vec<(HeaderMap, Bytes)>>,
    script: Mutex<VecDeque<StatusCode>>,
    /// Answer this status forever once the script is used up.
    then: Mutex<Option<StatusCode>>,
}

async fn write(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    r.requests.lock().push((headers, body));
    let next = r.script.lock().pop_front();
    next.or(*r.then.lock()).unwrap_or(StatusCode::NO_CONTENT)
}

async fn receiver(script: &[u16], then: Option<u16>) -> (Arc<Receiver>, String) {
    let r = Arc::new(Receiver::default());
    r.script
        .lock()
        .extend(script.iter().map(|c| StatusCode::from_u16(*c).unwrap()));
    *r.then.lock() = then.map(|c| StatusCode::from_u16(c).unwrap());
    let app = Router::new()
        .route("/receive", post(write))
        .with_state(r.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/receive", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (r, url)
}

fn config(url: &str) -> RemoteWriteConfig {
    RemoteWriteConfig {
        url: Some(url.into()),
        // Shorter than validation allows: the tests run in real time.
        interval: Duration::from_millis(100),
        min_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
        include: vec!["commwatch_".into()],
        max_samples_per_request: 100,
        flush_timeout: Duration::from_millis(500),
        ..Default::default()
    }
}

/// Starts remote write over `Fixed(n)`; its metrics and the stop signal.
fn start_over(cfg: &RemoteWriteConfig, n: usize) -> (Metrics, watch::Sender<bool>, JoinHandle<()>) {
    let health = Health::new().unwrap();
    let (stop, rx) = watch::channel(false);
    let sender = Sender::new(cfg).unwrap();
    let metrics = Metrics::register(&health.registry).unwrap();
    let task = tokio::spawn(run(
        cfg.clone(),
        Arc::new(Fixed(n)),
        sender,
        metrics.clone(),
        rx,
        crate::config::DEFAULT_EXPORT_SHARE,
    ));
    (metrics, stop, task)
}

/// Waits until `cond` holds, for at most 30 s of wall time (generous: a loaded machine is slow, never wrong).
async fn until(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn accounted(m: &Metrics) -> u64 {
    m.samples_sent.get() + m.samples_failed.get() + m.samples_dropped.get()
}

#[tokio::test]
async fn sends_protocol_headers_and_decodable_requests_in_chunks() {
    let (r, url) = receiver(&[], None).await;
    let (m, stop, task) = start_over(&config(&url), 250);
    until("a gather sent", || m.samples_sent.get() >= 250).await;
    stop.send_replace(true);
    task.await.unwrap();
    let requests = r.requests.lock();
    let (headers, _) = &requests[0];
    assert_eq!(headers["content-encoding"], "snappy");
    assert_eq!(headers["content-type"], "application/x-protobuf");
    assert_eq!(headers["x-prometheus-remote-write-version"], "0.1.0");
    assert!(headers["user-agent"]
        .to_str()
        .unwrap()
        .starts_with("commwatch/"));
    let first: Vec<usize> = requests[..3]
        .iter()
        .map(|(_, b)| encode::decode_request(b).unwrap().timeseries.len())
        .collect();
    assert_eq!(
        first,
        [100, 100, 50],
        "250 samples in requests of at most 100"
    );
    let decoded = encode::decode_request(&requests[0].1).unwrap();
    let names: Vec<&str> = decoded.timeseries[0]
        .labels
        .iter()
        .map(|l| l.value.as_str())
        .collect();
    assert_eq!(
        names,
        ["commwatch_t", "node-0"],
        "other_family is not included"
    );
    assert_eq!(m.samples_sent.get(), m.requests_sent.get() / 3 * 250);
    assert_eq!(m.samples_failed.get() + m.samples_dropped.get(), 0);
    assert!(m.bytes_sent.get() > 0);
}

#[tokio::test]
async fn server_errors_and_429_are_retried_client_errors_are_not() {
    let (r, url) = receiver(&[503, 429, 500], None).await;
    let mut cfg = config(&url);
    cfg.interval = Duration::from_secs(3600);
    let (m, stop, task) = start_over(&cfg, 50);
    until("the retried request sent", || m.samples_sent.get() == 50).await;
    assert_eq!(m.requests_retried.get(), 3);
    assert_eq!(r.requests.lock().len(), 4, "three failures, then success");
    stop.send_replace(true);
    task.await.unwrap();

    let (r, url) = receiver(&[400], None).await;
    cfg.url = Some(url);
    let (m, stop, task) = start_over(&cfg, 50);
    until("the refusal counted", || m.samples_failed.get() == 50).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(r.requests.lock().len(), 1, "a 4xx is not retried");
    assert_eq!((m.requests_failed.get(), m.requests_retried.get()), (1, 0));
    stop.send_replace(true);
    task.await.unwrap();
    // The final gather at stop is sent too.
    assert_eq!(m.samples_sent.get(), 50);
}

#[tokio::test]
async fn retries_stop_after_retry_for_and_count_the_samples_failed() {
    let (_r, url) = receiver(&[], Some(503)).await;
    let mut cfg = config(&url);
    cfg.interval = Duration::from_secs(3600);
    cfg.retry_for = Duration::from_millis(200);
    let (m, stop, task) = start_over(&cfg, 50);
    until("given up", || m.samples_failed.get() == 50).await;
    assert!(
        m.requests_retried.get() >= 3,
        "{}",
        m.requests_retried.get()
    );
    stop.send_replace(true);
    task.await.unwrap();
}

#[tokio::test]
async fn a_full_queue_drops_the_oldest_and_stop_flushes_within_its_bound() {
    let (r, url) = receiver(&[], Some(503)).await;
    let mut cfg = config(&url);
    cfg.queue_max_samples = 1_000;
    cfg.retry_for = Duration::from_secs(3600);
    cfg.max_backoff = Duration::from_millis(10);
    let (m, stop, task) = start_over(&cfg, 400);
    until("drops", || m.samples_dropped.get() >= 400).await;
    assert!(m.queue_samples.get() <= 1_000, "{}", m.queue_samples.get());
    // The receiver recovers: what is queued is sent at stop, within flush_timeout.
    *r.then.lock() = None;
    let stopped = Instant::now();
    stop.send_replace(true);
    task.await.unwrap();
    // Bounded by flush_timeout (0.5 s), not retry_for (an hour); the margin is for a loaded machine.
    assert!(
        stopped.elapsed() < Duration::from_secs(20),
        "{:?}",
        stopped.elapsed()
    );
    assert!(m.samples_sent.get() >= 400, "{}", m.samples_sent.get());
    assert_eq!(accounted(&m) % 400, 0, "every gathered sample counted once");
    assert_eq!(m.samples_failed.get(), 0);
    assert_eq!(m.queue_samples.get(), 0);
}

#[tokio::test]
async fn stop_with_a_dead_receiver_ends_within_flush_timeout_and_counts_the_rest_dropped() {
    let (_r, url) = receiver(&[], Some(503)).await;
    let mut cfg = config(&url);
    cfg.retry_for = Duration::from_secs(3600);
    let (m, stop, task) = start_over(&cfg, 150);
    until("retries", || m.requests_retried.get() >= 2).await;
    let stopped = Instant::now();
    stop.send_replace(true);
    task.await.unwrap();
    let took = stopped.elapsed();
    // flush_timeout (0.5 s), not retry_for (an hour); the margin above it is for a loaded machine.
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(20),
        "{took:?}"
    );
    assert_eq!(m.samples_sent.get() + m.samples_failed.get(), 0);
    assert_eq!(accounted(&m) % 150, 0, "{}", accounted(&m));
    assert!(
        m.samples_dropped.get() >= 300,
        "{}",
        m.samples_dropped.get()
    );
}

#[tokio::test]
async fn nothing_starts_without_a_url_and_a_refused_connection_is_retried() {
    let health = Health::new().unwrap();
    let (_stop, rx) = watch::channel(false);
    let off = start(
        &RemoteWriteConfig::default(),
        Arc::new(Fixed(1)),
        &health,
        rx.clone(),
        crate::config::DEFAULT_EXPORT_SHARE,
    );
    assert!(off.unwrap().is_none());
    assert!(!health
        .registry
        .gather()
        .iter()
        .any(|f| f.name().contains("remote_write")));
    // A port nobody listens on: a network error, retried.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/api/v1/write", closed.local_addr().unwrap());
    drop(closed);
    let sender = Sender::new(&config(&url)).unwrap();
    assert!(matches!(sender.send(vec![1]).await, Outcome::Retry { .. }));
}

#[tokio::test]
async fn a_collector_with_a_url_sends_its_families_and_flushes_at_stop() {
    let (r, url) = receiver(&[], None).await;
    let mut config = crate::CollectorConfig {
        grpc_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    };
    config.remote_write = RemoteWriteConfig {
        url: Some(url),
        interval: Duration::from_secs(3600),
        external_labels: [("shard".to_string(), "s0".to_string())].into(),
        ..Default::default()
    };
    let handle = crate::start(config).await.unwrap();
    until("the first gather", || !r.requests.lock().is_empty()).await;
    let first = encode::decode_request(&r.requests.lock()[0].1).unwrap();
    let build_info = first
        .timeseries
        .iter()
        .find(|t| t.labels.iter().any(|l| l.value == "commwatch_build_info"))
        .expect("the collector's own health is sent");
    assert!(build_info
        .labels
        .iter()
        .any(|l| l.name == "shard" && l.value == "s0"));
    let text = handle.render_metrics();
    assert!(
        text.contains("commwatch_collector_remote_write_samples_total{result=\"sent\"}"),
        "{text}"
    );
    handle.shutdown().await;
    assert_eq!(r.requests.lock().len(), 2, "the gather at stop is sent");
}

/// What a scripted answer's `Retry-After` says.
#[derive(Debug, Clone)]
enum After {
    /// This text (delay-seconds, or something unreadable).
    Text(&'static str),
    /// An HTTP date this long after the answer is made: whole seconds, so up to a second sooner.
    DateIn(Duration),
}

/// A receiver that answers each request with the next `(status, Retry-After)` of its script (then 204) and
/// notes when each request came, and each date it asked to be retried at.
#[derive(Default)]
struct Pushback {
    script: Mutex<VecDeque<(StatusCode, Option<After>)>>,
    arrivals: Mutex<Vec<(std::time::Instant, std::time::SystemTime)>>,
    dates: Mutex<Vec<std::time::SystemTime>>,
}

async fn pushback(
    State(r): State<Arc<Pushback>>,
) -> (
    StatusCode,
    [(axum::http::HeaderName, String); 1],
    &'static str,
) {
    let now = std::time::SystemTime::now();
    r.arrivals.lock().push((std::time::Instant::now(), now));
    let (status, after) = r
        .script
        .lock()
        .pop_front()
        .unwrap_or((StatusCode::NO_CONTENT, None));
    // An empty Retry-After is unreadable: the sender's own backoff applies.
    let after = match after {
        None => String::new(),
        Some(After::Text(t)) => t.to_string(),
        Some(After::DateIn(d)) => {
            let date = httpdate::fmt_http_date(now + d);
            r.dates
                .lock()
                .push(httpdate::parse_http_date(&date).unwrap());
            date
        }
    };
    let header = (axum::http::header::RETRY_AFTER, after);
    (status, [header], "slow down")
}

async fn pushback_receiver(script: Vec<(u16, Option<After>)>) -> (Arc<Pushback>, String) {
    let r = Arc::new(Pushback::default());
    r.script.lock().extend(
        script
            .into_iter()
            .map(|(c, a)| (StatusCode::from_u16(c).unwrap(), a)),
    );
    let app = Router::new()
        .route("/receive", post(pushback))
        .with_state(r.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/receive", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (r, url)
}

/// The gaps between consecutive requests, seconds.
fn gaps(r: &Pushback) -> Vec<f64> {
    let at = r.arrivals.lock();
    at.windows(2)
        .map(|w| (w[1].0 - w[0].0).as_secs_f64())
        .collect()
}

#[tokio::test]
async fn retry_after_in_seconds_or_as_a_date_is_waited_for() {
    // 429 "wait 1 s", then 503 with a date 4 s after that answer (3–4 s: HTTP dates are whole seconds), then
    // 503 without the header (the own backoff: 10 ms), then accepted. Only lower bounds and the order of
    // events are asserted: a loaded machine makes every gap longer, never shorter.
    let (r, url) = pushback_receiver(vec![
        (429, Some(After::Text("1"))),
        (503, Some(After::DateIn(Duration::from_secs(4)))),
        (503, None),
    ])
    .await;
    let mut cfg = config(&url);
    cfg.interval = Duration::from_secs(3600);
    cfg.retry_for = Duration::from_secs(30);
    let (m, stop, task) = start_over(&cfg, 50);
    until("sent after the pushback", || m.samples_sent.get() == 50).await;
    let g = gaps(&r);
    eprintln!(
        "gaps between attempts after 429 Retry-After: 1, 503 Retry-After: <now + 4s>, 503: {g:.3?}"
    );
    assert_eq!(g.len(), 3, "{g:?}");
    assert!(g[0] >= 1.0, "429 Retry-After: 1 was not waited for: {g:?}");
    let date = r.dates.lock()[0];
    let retried_at = r.arrivals.lock()[2].1;
    assert!(
        retried_at >= date,
        "503 Retry-After as a date was not waited for: retried {:?} before it ({g:?})",
        date.duration_since(retried_at).unwrap_or_default()
    );
    // The date's wait is not carried over: a 10 ms backoff step, against the ≥ 1 s each Retry-After asked.
    assert!(
        g[2] < 1.0,
        "without the header the own backoff applies: {g:?}"
    );
    assert_eq!((m.requests_retried.get(), m.requests_failed.get()), (3, 0));
    stop.send_replace(true);
    task.await.unwrap();
}

#[tokio::test]
async fn a_wait_beyond_retry_for_gives_up_and_other_4xx_like_415_are_never_retried() {
    let (r, url) = pushback_receiver(vec![(429, Some(After::Text("3600")))]).await;
    let mut cfg = config(&url);
    cfg.interval = Duration::from_secs(3600);
    cfg.retry_for = Duration::from_secs(60);
    let (m, stop, task) = start_over(&cfg, 50);
    until("given up", || m.samples_failed.get() == 50).await;
    assert_eq!(r.arrivals.lock().len(), 1, "not retried within retry_for");
    assert_eq!((m.requests_failed.get(), m.requests_retried.get()), (1, 0));
    stop.send_replace(true);
    task.await.unwrap();

    // 415 (what a 2.0-only receiver answers a 1.0 request) with a Retry-After: refused, not retried.
    let (r, url) = pushback_receiver(vec![(415, Some(After::Text("1"))), (400, None)]).await;
    cfg.url = Some(url);
    let (m, stop, task) = start_over(&cfg, 50);
    until("refused", || m.samples_failed.get() == 50).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(r.arrivals.lock().len(), 1, "a 415 is not retried");
    assert_eq!((m.requests_failed.get(), m.requests_retried.get()), (1, 0));
    stop.send_replace(true);
    task.await.unwrap();
}

/// A receiver that answers every request 500 with a body that never ends.
async fn endless_500_receiver() -> (Arc<std::sync::atomic::AtomicUsize>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/receive", listener.local_addr().unwrap());
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 << 10];
                let _ = s.read(&mut buf).await;
                let head = "HTTP/1.1 500 Internal Server Error\r\nconnection: close\r\n\r\nreceiver broken\n";
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'x'; 64 << 10];
                while s.write_all(&chunk).await.is_ok() {}
            });
        }
    });
    (seen, url)
}

#[tokio::test]
async fn an_endless_error_body_is_not_read_and_failures_are_warned_about_once_a_minute() {
    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let log = Captured::default();
    let sink = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || sink.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let (seen, url) = endless_500_receiver().await;
    let mut cfg = config(&url);
    cfg.interval = Duration::from_secs(3600);
    cfg.retry_for = Duration::from_secs(3600);
    let (m, stop, task) = start_over(&cfg, 50);
    // Retries go on: the sender never waits for the body's end.
    until("five retries", || m.requests_retried.get() >= 5).await;
    assert!(seen.load(std::sync::atomic::Ordering::Relaxed) >= 5);
    stop.send_replace(true);
    task.await.unwrap();
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let warned: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("the receiver keeps failing"))
        .collect();
    assert_eq!(warned.len(), 1, "one warning per minute:\n{text}");
    assert!(
        warned[0].contains("500 Internal Server Error: receiver broken"),
        "{text}"
    );
    assert!(warned[0].contains("failed_attempts=1"), "{text}");
}
