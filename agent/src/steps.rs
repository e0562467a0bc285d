//! Step markers from training loops: a listener on a loopback UDP port and a unix datagram socket, a parser,
//! and the bounded queue the sampler drains into each batch.
//!
//! Wire format of a marker (one datagram, UTF-8 JSON object, at most [`MAX_DATAGRAM`] bytes):
//! `{"job": "1234", "rank": 3, "step": 120, "phase": "end", "time": 1764460000.125, "samples": 256}`
//! - `job` (string, 1..=128 printable bytes) — required;
//! - `rank` (integer 0..2^24) — required;
//! - `step` (integer ≥ 0) — required;
//! - `phase` (`"begin"` or `"end"`) — required;
//! - `time` (seconds since the Unix epoch, float) — optional, the sender's clock;
//! - `samples` (integer ≥ 0) — optional, samples processed in the step.
//!
//! Unknown keys are ignored (senders may add fields). A malformed datagram is counted and dropped; a flood
//! beyond the rate limit is counted and dropped. The listener never answers: sending never blocks the loop.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use commwatch_model::clock::unix_now_ns;
use commwatch_proto::v1 as pb;
use prometheus::IntCounterVec;

/// Largest marker datagram accepted, in bytes.
pub const MAX_DATAGRAM: usize = 1024;
/// Longest job id accepted, in bytes.
pub const MAX_JOB_LEN: usize = 128;
/// Highest rank accepted (exclusive).
pub const MAX_RANK: u64 = 1 << 24;

/// Why a datagram was not a marker.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MarkerError {
    #[error("datagram of {0} bytes exceeds {MAX_DATAGRAM}")]
    TooLarge(usize),
    #[error("not a JSON object: {0}")]
    Json(String),
    #[error("missing or invalid field `{0}`")]
    Field(&'static str),
}

impl MarkerError {
    /// Label value for the dropped-markers counter.
    pub fn reason(&self) -> &'static str {
        match self {
            MarkerError::TooLarge(_) => "too_large",
            MarkerError::Json(_) => "malformed",
            MarkerError::Field(_) => "invalid_field",
        }
    }
}

/// Parses one datagram. `received_unix_ns` is the agent's clock at receipt.
pub fn parse_marker(data: &[u8], received_unix_ns: i64) -> Result<pb::StepMarker, MarkerError> {
    if data.len() > MAX_DATAGRAM {
        return Err(MarkerError::TooLarge(data.len()));
    }
    let v: serde_json::Value =
        serde_json::from_slice(data).map_err(|e| MarkerError::Json(e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| MarkerError::Json("not an object".into()))?;
    let job = obj
        .get("job")
        .and_then(|j| match j {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .filter(|s| !s.is_empty() && s.len() <= MAX_JOB_LEN && s.chars().all(|c| !c.is_control()))
        .ok_or(MarkerError::Field("job"))?;
    let rank = obj
        .get("rank")
        .and_then(|r| r.as_u64())
        .filter(|r| *r < MAX_RANK)
        .ok_or(MarkerError::Field("rank"))? as u32;
    let step = obj
        .get("step")
        .and_then(|s| s.as_u64())
        .ok_or(MarkerError::Field("step"))?;
    let phase = match obj.get("phase").and_then(|p| p.as_str()) {
        Some("begin") => pb::StepPhase::Begin,
        Some("end") => pb::StepPhase::End,
        _ => return Err(MarkerError::Field("phase")),
    };
    let sent_unix_ns = match obj.get("time") {
        None | Some(serde_json::Value::Null) => 0,
        Some(t) => {
            let t = t
                .as_f64()
                .filter(|t| t.is_finite() && *t > 0.0 && *t < 9.2e9)
                .ok_or(MarkerError::Field("time"))?;
            (t * 1e9) as i64
        }
    };
    let samples = match obj.get("samples") {
        None | Some(serde_json::Value::Null) => None,
        Some(s) => Some(s.as_u64().ok_or(MarkerError::Field("samples"))?),
    };
    Ok(pb::StepMarker {
        job,
        rank,
        step,
        phase: phase as i32,
        sent_unix_ns,
        received_unix_ns,
        samples,
    })
}

/// Token bucket: `rate` markers per second, bursts up to `burst`.
#[derive(Debug)]
pub struct RateLimit {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl RateLimit {
    pub fn new(rate: f64, burst: f64) -> RateLimit {
        RateLimit {
            rate,
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }
    /// Takes one token at `now`; false when the bucket is empty.
    pub fn allow(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Markers waiting for the next batch; bounded (the oldest are dropped and counted when full).
#[derive(Debug)]
pub struct MarkerQueue {
    inner: Mutex<VecDeque<pb::StepMarker>>,
    capacity: usize,
}

impl MarkerQueue {
    pub fn new(capacity: usize) -> Arc<MarkerQueue> {
        Arc::new(MarkerQueue {
            inner: Mutex::new(VecDeque::new()),
            capacity,
        })
    }
    /// Queues a marker; returns false when an older one had to be dropped to make room.
    pub fn push(&self, m: pb::StepMarker) -> bool {
        let mut q = match self.inner.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        let mut kept_all = true;
        if q.len() >= self.capacity {
            q.pop_front();
            kept_all = false;
        }
        q.push_back(m);
        kept_all
    }
    /// Takes every queued marker, in arrival order.
    pub fn drain(&self) -> Vec<pb::StepMarker> {
        let mut q = match self.inner.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        q.drain(..).collect()
    }
}

/// Where the listener listens.
#[derive(Debug, Clone)]
pub struct ListenerSettings {
    /// Loopback UDP address; `None` disables UDP.
    pub udp: Option<std::net::SocketAddr>,
    /// Unix datagram socket path; `None` disables it.
    pub unix: Option<PathBuf>,
    /// Markers per second accepted per listener; excess is dropped and counted.
    pub rate: f64,
}

/// Counts of the listener, exported on the agent's `/metrics`.
#[derive(Clone)]
pub struct MarkerMetrics {
    /// Markers accepted, by transport (`udp`, `unix`).
    pub received: IntCounterVec,
    /// Datagrams dropped, by reason (`malformed`, `invalid_field`, `too_large`, `rate_limited`, `queue_full`).
    pub dropped: IntCounterVec,
}

fn accept(
    data: &[u8],
    transport: &str,
    limit: &mut RateLimit,
    queue: &MarkerQueue,
    metrics: &MarkerMetrics,
) {
    if !limit.allow(Instant::now()) {
        metrics.dropped.with_label_values(&["rate_limited"]).inc();
        return;
    }
    match parse_marker(data, unix_now_ns()) {
        Ok(m) => {
            metrics.received.with_label_values(&[transport]).inc();
            if !queue.push(m) {
                metrics.dropped.with_label_values(&["queue_full"]).inc();
            }
        }
        Err(e) => {
            metrics.dropped.with_label_values(&[e.reason()]).inc();
            tracing::debug!(transport, error = %e, "dropped a malformed step marker");
        }
    }
}

/// Bound listener addresses.
#[derive(Debug, Clone)]
pub struct BoundListeners {
    pub udp: Option<std::net::SocketAddr>,
    pub unix: Option<PathBuf>,
}

/// Binds the configured sockets and spawns their receive loops; they stop when `shutdown` flips to true.
/// A socket that cannot be bound is logged and skipped (the agent keeps sampling).
pub async fn spawn_listeners(
    settings: &ListenerSettings,
    queue: Arc<MarkerQueue>,
    metrics: MarkerMetrics,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> BoundListeners {
    let mut bound = BoundListeners {
        udp: None,
        unix: None,
    };
    let listener = |transport| Listener {
        transport,
        queue: queue.clone(),
        metrics: metrics.clone(),
        limit: RateLimit::new(settings.rate, settings.rate.max(1.0)),
    };
    if let Some(addr) = settings.udp {
        match tokio::net::UdpSocket::bind(addr).await {
            Ok(sock) => {
                bound.udp = sock.local_addr().ok();
                tokio::spawn(listener("udp").receive_udp(sock, shutdown.clone()));
            }
            Err(e) => {
                tracing::warn!(%addr, error = %e, "cannot bind the step-marker UDP socket; UDP markers disabled")
            }
        }
    }
    if let Some(path) = &settings.unix {
        match bind_unix(path) {
            Ok(sock) => {
                bound.unix = Some(path.clone());
                tokio::spawn(listener("unix").receive_unix(sock, path.clone(), shutdown.clone()));
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot bind the step-marker unix socket; unix markers disabled")
            }
        }
    }
    bound
}

/// Binds the unix datagram socket at `path`. A stale socket file from an earlier run would make bind fail
/// and is removed; a live one belongs to another agent and is left alone, as is anything at the path that is
/// not a socket.
fn bind_unix(path: &Path) -> std::io::Result<tokio::net::UnixDatagram> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let existing = std::fs::symlink_metadata(path).ok().map(|m| m.file_type());
    let is_socket = existing.is_some_and(|t| t.is_socket());
    let live = is_socket
        && std::os::unix::net::UnixDatagram::unbound()
            .and_then(|s| s.connect(path))
            .is_ok();
    if is_socket && !live {
        let _ = std::fs::remove_file(path);
    }
    if live {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "another process is listening on this socket",
        ));
    }
    if existing.is_some() && !is_socket {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "the path exists and is not a socket; it is left alone",
        ));
    }
    let sock = tokio::net::UnixDatagram::bind(path)?;
    // Training jobs of any user send markers here: markers are rate-limited, validated and carry nothing
    // secret, so the socket is world-writable (the directory's permissions still apply).
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)) {
        tracing::warn!(path = %path.display(), error = %e, "cannot make the step-marker socket writable by other users");
    }
    Ok(sock)
}

/// One transport's receive loop: its own rate limit, the shared queue and counters.
struct Listener {
    transport: &'static str,
    queue: Arc<MarkerQueue>,
    metrics: MarkerMetrics,
    limit: RateLimit,
}

impl Listener {
    /// Receives until `shutdown` flips to true.
    async fn receive_udp(
        mut self,
        sock: tokio::net::UdpSocket,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut buf = vec![0u8; MAX_DATAGRAM + 1];
        loop {
            tokio::select! {
                r = sock.recv_from(&mut buf) => match r {
                    Ok((n, _)) => self.accept(&buf[..n]),
                    Err(e) => tracing::debug!(error = %e, "step marker receive failed"),
                },
                _ = shutdown.wait_for(|v| *v) => break,
            }
        }
    }

    /// Receives until `shutdown` flips to true, then removes the socket file.
    async fn receive_unix(
        mut self,
        sock: tokio::net::UnixDatagram,
        path: PathBuf,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut buf = vec![0u8; MAX_DATAGRAM + 1];
        loop {
            tokio::select! {
                r = sock.recv(&mut buf) => match r {
                    Ok(n) => self.accept(&buf[..n]),
                    Err(e) => tracing::debug!(error = %e, "step marker receive failed"),
                },
                _ = shutdown.wait_for(|v| *v) => break,
            }
        }
        let _ = std::fs::remove_file(&path);
    }

    fn accept(&mut self, data: &[u8]) {
        accept(
            data,
            self.transport,
            &mut self.limit,
            &self.queue,
            &self.metrics,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unregistered marker counters for a listener under test.
    fn marker_metrics() -> MarkerMetrics {
        MarkerMetrics {
            received: IntCounterVec::new(prometheus::Opts::new("r", "r"), &["transport"]).unwrap(),
            dropped: IntCounterVec::new(prometheus::Opts::new("d", "d"), &["reason"]).unwrap(),
        }
    }

    #[test]
    fn parses_a_full_marker() {
        let m = parse_marker(
            br#"{"job":"4242","rank":3,"step":120,"phase":"end","time":1764460000.5,"samples":256,"extra":1}"#,
            7,
        )
        .unwrap();
        assert_eq!(m.job, "4242");
        assert_eq!(m.rank, 3);
        assert_eq!(m.step, 120);
        assert_eq!(m.phase, pb::StepPhase::End as i32);
        assert_eq!(m.sent_unix_ns, 1_764_460_000_500_000_000);
        assert_eq!(m.received_unix_ns, 7);
        assert_eq!(m.samples, Some(256));
    }

    #[test]
    fn numeric_job_and_optional_fields() {
        let m = parse_marker(br#"{"job":17,"rank":0,"step":0,"phase":"begin"}"#, 1).unwrap();
        assert_eq!((m.job.as_str(), m.sent_unix_ns, m.samples), ("17", 0, None));
    }

    #[test]
    fn rejects_malformed() {
        let cases: &[(&[u8], &str)] = &[
            (b"not json", "malformed"),
            (b"[1,2]", "malformed"),
            (br#"{"rank":1,"step":1,"phase":"end"}"#, "invalid_field"),
            (
                br#"{"job":"","rank":1,"step":1,"phase":"end"}"#,
                "invalid_field",
            ),
            (
                br#"{"job":"j","rank":-1,"step":1,"phase":"end"}"#,
                "invalid_field",
            ),
            (
                br#"{"job":"j","rank":16777216,"step":1,"phase":"end"}"#,
                "invalid_field",
            ),
            (
                br#"{"job":"j","rank":1,"step":1.5,"phase":"end"}"#,
                "invalid_field",
            ),
            (
                br#"{"job":"j","rank":1,"step":1,"phase":"middle"}"#,
                "invalid_field",
            ),
            (
                br#"{"job":"j","rank":1,"step":1,"phase":"end","time":"now"}"#,
                "invalid_field",
            ),
            (
                br#"{"job":"j","rank":1,"step":1,"phase":"end","samples":-3}"#,
                "invalid_field",
            ),
            (
                br#"{"job":"a\u0000b","rank":1,"step":1,"phase":"end"}"#,
                "invalid_field",
            ),
        ];
        for (data, reason) in cases {
            let e = parse_marker(data, 0).unwrap_err();
            assert_eq!(e.reason(), *reason, "{}", String::from_utf8_lossy(data));
        }
        let big = vec![b' '; MAX_DATAGRAM + 1];
        assert_eq!(parse_marker(&big, 0).unwrap_err().reason(), "too_large");
    }

    #[test]
    fn rate_limit_and_queue_bounds() {
        let mut l = RateLimit::new(10.0, 5.0);
        let t = Instant::now();
        let allowed = (0..20).filter(|_| l.allow(t)).count();
        assert_eq!(allowed, 5);
        assert!(l.allow(t + std::time::Duration::from_millis(100)));
        let q = MarkerQueue::new(2);
        let m = parse_marker(br#"{"job":"j","rank":1,"step":1,"phase":"end"}"#, 0).unwrap();
        assert!(q.push(m.clone()));
        assert!(q.push(m.clone()));
        assert!(!q.push(m));
        assert_eq!(q.drain().len(), 2);
        assert!(q.drain().is_empty());
    }

    #[tokio::test]
    async fn a_regular_file_at_the_socket_path_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steps.sock");
        std::fs::write(&path, "not a socket").unwrap();
        let m = marker_metrics();
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let settings = ListenerSettings {
            udp: None,
            unix: Some(path.clone()),
            rate: 10.0,
        };
        let bound = spawn_listeners(&settings, MarkerQueue::new(4), m, rx).await;
        assert!(bound.unix.is_none());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a socket");
    }

    #[tokio::test]
    async fn unix_socket_is_writable_by_any_user_and_delivers_markers() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steps.sock");
        let registry_metrics = marker_metrics();
        let queue = MarkerQueue::new(16);
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let bound = spawn_listeners(
            &ListenerSettings {
                udp: None,
                unix: Some(path.clone()),
                rate: 100.0,
            },
            queue.clone(),
            registry_metrics.clone(),
            rx,
        )
        .await;
        assert_eq!(bound.unix.as_deref(), Some(path.as_path()));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666);
        let client = std::os::unix::net::UnixDatagram::unbound().unwrap();
        client
            .send_to(br#"{"job":"j","rank":2,"step":5,"phase":"end"}"#, &path)
            .unwrap();
        client.send_to(b"garbage", &path).unwrap();
        let mut got = Vec::new();
        for _ in 0..100 {
            got.extend(queue.drain());
            if !got.is_empty()
                && registry_metrics
                    .dropped
                    .with_label_values(&["malformed"])
                    .get()
                    == 1
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].rank, got[0].step), (2, 5));
        assert_eq!(
            registry_metrics.received.with_label_values(&["unix"]).get(),
            1
        );
        assert_eq!(
            registry_metrics
                .dropped
                .with_label_values(&["malformed"])
                .get(),
            1
        );
    }
}
