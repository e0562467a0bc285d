//! Remote write: the collector's derived series — the families of `/metrics` (per-link rates, per-step figures,
//! findings, scaling, its own health), never the raw 20 Hz samples — sent to a Prometheus remote-write
//! receiver (Prometheus with `--web.enable-remote-write-receiver`, VictoriaMetrics, Mimir, Thanos Receive)
//! with protocol 1.0: protobuf `prometheus.WriteRequest`, snappy block format, `Content-Encoding: snappy`,
//! `Content-Type: application/x-protobuf`, `X-Prometheus-Remote-Write-Version: 0.1.0`. Off unless
//! `[remote_write] url` (`--remote-write-url`) is set.
//!
//! Every `interval` a gather reads the families `/metrics` shows as typed data, never as text
//! ([`ExpositionSource`]: the exposition's [`Gathered`](crate::export::exposition::Gathered), the stage its
//! text writer reads too), keeps the samples whose names `include`/`exclude` select, stamps every sample with
//! the gather's time, adds a staleness marker for each series the previous gather had and this one lacks (a
//! cleared finding ends at once in the store instead of lingering for its lookback) ([`series`]), and queues
//! the requests ([`encode`]) in a queue bounded by samples ([`queue`]: the oldest dropped when full). One
//! sender sends them in order ([`send`]): 5xx, 429 and network errors are retried with exponential backoff for
//! up to `retry_for`, each wait at least what the answer's `Retry-After` asks ([`retry_after`]; a request whose
//! asked wait ends after `retry_for` is given up at once); any other refusal (4xx) is final. One request at a
//! time: while the receiver pushes back, gathers pile up in the bounded queue, whose oldest are dropped
//! (counted). While the receiver keeps failing, a warning says so at most once per [`RETRY_WARN_EVERY`],
//! with its last status and the number of failed attempts since the previous one; an error body is read
//! only in its first KiB ([`send::MAX_ERROR_BODY_BYTES`]). At stop the gather runs once more and the queue is sent for at most `flush_timeout`; what is
//! left is dropped. Every sample ends counted in
//! `commwatch_collector_remote_write_samples_total{result="sent"|"failed"|"dropped"}` ([`metrics`]).
//!
//! Cost: one gather of the exposition's families per interval (the store's snapshot and its samples, no text
//! rendered or parsed), off the async workers, and the previous gather's label sets (for the staleness
//! markers) held between gathers, which the next gather takes back for the series it finds again. At 1,000
//! nodes × 500 series (554,112 series; `cargo bench -p commwatch-collector --bench exposition`) a whole
//! gather, encoded, takes 1.5–2 s of CPU on a shared 2-core machine; the gather itself 0.3–0.5 s, against
//! 0.8–1.4 s when the text was rendered and parsed back.

pub mod encode;
pub mod metrics;
#[cfg(test)]
pub(crate) mod parse;
#[cfg(test)]
mod parse_tests;
pub mod queue;
pub mod retry_after;
pub mod send;
pub mod series;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::config::RemoteWriteConfig;
use crate::export::exposition::{Exposition, SampleRef};
use crate::telemetry::throttle::LogThrottle;
use crate::telemetry::Health;
pub use metrics::Metrics;
use queue::{Queue, Queued};
pub use send::{Outcome, SendSetupError, Sender};
use series::{GatherSeries, Previous};

/// While the receiver keeps failing (5xx, 429, network errors), a warning at most this often.
pub const RETRY_WARN_EVERY: Duration = Duration::from_secs(60);

/// Why remote write cannot start (the collector does not start either).
#[derive(Debug, thiserror::Error)]
pub enum RemoteWriteError {
    #[error(transparent)]
    Setup(#[from] SendSetupError),
    #[error("remote write metrics: {0}")]
    Metrics(prometheus::Error),
}

/// Where a gather reads the families: every sample `/metrics` shows, as typed data.
pub trait Gather: Send + Sync + 'static {
    /// Hands `sink` every sample of the families now whose metric name `keep` accepts (tested before the
    /// labels are gathered), in `/metrics` order. CPU-bound (called on a blocking thread). An error: nothing
    /// was gathered.
    fn gather(
        &self,
        keep: &mut dyn FnMut(&str) -> bool,
        sink: &mut dyn FnMut(SampleRef<'_>),
    ) -> Result<(), String>;
}

/// The collector's families from the very [`Exposition`] that serves `/metrics` (its families, names, labels
/// and NVLink detail, whatever they become), through its typed stage ([`Exposition::gather`]): nothing is
/// rendered, so a gather is not observed in `commwatch_collector_scrape_seconds`.
pub struct ExpositionSource {
    pub exposition: Arc<Exposition>,
    pub health: Health,
}

impl Gather for ExpositionSource {
    fn gather(
        &self,
        keep: &mut dyn FnMut(&str) -> bool,
        sink: &mut dyn FnMut(SampleRef<'_>),
    ) -> Result<(), String> {
        self.exposition
            .gather(&self.health, |g| g.for_each_sample(keep, sink));
        Ok(())
    }
}

/// With `cfg.url` set: registers the metrics in `health`, builds the sender (reading the CA and credential
/// files) and starts the task, which ends by itself after the stop signal on `shutdown` and the flush; its
/// gathers run at `share` of a core against a busy ingest (`export_share`). `None` without a URL.
pub fn start(
    cfg: &RemoteWriteConfig,
    source: Arc<dyn Gather>,
    health: &Health,
    shutdown: watch::Receiver<bool>,
    share: f64,
) -> Result<Option<JoinHandle<()>>, RemoteWriteError> {
    if cfg.url.is_none() {
        return Ok(None);
    }
    let sender = Sender::new(cfg)?;
    let metrics = Metrics::register(&health.registry).map_err(RemoteWriteError::Metrics)?;
    let credentials = cfg.bearer_token_file.is_some() || cfg.basic_auth_user.is_some();
    if credentials && sender.target().starts_with("http://") {
        warn!(url = %sender.target(), "remote write sends credentials; use https beyond a trusted network");
    }
    info!(url = %sender.target(), interval = ?cfg.interval, "remote write on");
    Ok(Some(tokio::spawn(run(
        cfg.clone(),
        source,
        sender,
        metrics,
        shutdown,
        share,
    ))))
}

/// The task: gathers (at `share` of a core against a busy ingest) and sends until the stop signal, then
/// gathers once more and flushes.
pub async fn run(
    cfg: RemoteWriteConfig,
    source: Arc<dyn Gather>,
    sender: Sender,
    metrics: Metrics,
    shutdown: watch::Receiver<bool>,
    share: f64,
) {
    let queue = Arc::new(Queue::new(cfg.queue_max_samples));
    let stop = Stop {
        rx: shutdown,
        flush: cfg.flush_timeout,
        at: Arc::new(OnceLock::new()),
    };
    let mut producer = Producer {
        source,
        filter: Arc::new(Filter {
            include: cfg.include.clone(),
            exclude: cfg.exclude.clone(),
        }),
        external: cfg.external_labels.clone().into_iter().collect(),
        previous: Previous::default(),
        max_samples: cfg.max_samples_per_request,
        queue: queue.clone(),
        metrics: metrics.clone(),
        thread: crate::pace::export_thread("commwatch-rw", share),
    };
    let mut consumer = Consumer {
        queue,
        sender,
        metrics,
        cfg,
        stop: stop.clone(),
        retry_log: LogThrottle::new(RETRY_WARN_EVERY),
    };
    tokio::join!(producer.run(&stop, consumer.cfg.interval), consumer.run());
    consumer.flush().await;
}

/// The stop signal and the flush deadline it starts.
#[derive(Clone)]
struct Stop {
    rx: watch::Receiver<bool>,
    flush: Duration,
    at: Arc<OnceLock<Instant>>,
}

impl Stop {
    /// Resolves at the signal (or when its sender is gone).
    async fn signalled(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Resolves `flush` after the signal.
    async fn deadline_reached(&self) {
        self.signalled().await;
        let at = *self.at.get_or_init(|| Instant::now() + self.flush);
        tokio::time::sleep_until(at).await;
    }

    fn deadline_passed(&self) -> bool {
        *self.rx.borrow() && Instant::now() >= *self.at.get_or_init(|| Instant::now() + self.flush)
    }
}

/// Metric-name prefixes to send (`include`: empty = all) and not to send (`exclude`).
struct Filter {
    include: Vec<String>,
    exclude: Vec<String>,
}

impl Filter {
    fn keeps(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|p| name.starts_with(p.as_str())))
            && !self.exclude.iter().any(|p| name.starts_with(p.as_str()))
    }
}

/// The gathers: the exposition's samples → requests in the queue.
struct Producer {
    source: Arc<dyn Gather>,
    filter: Arc<Filter>,
    external: Vec<(String, String)>,
    previous: Previous,
    max_samples: usize,
    queue: Arc<Queue>,
    metrics: Metrics,
    /// Where a gather runs: at its share of a core against the ingest (`pace::export_thread`), as a `/metrics`
    /// render.
    thread: Option<crate::pace::PassThread>,
}

impl Producer {
    async fn run(&mut self, stop: &Stop, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.gather_once().await,
                _ = stop.signalled() => break,
            }
        }
        self.gather_once().await;
    }

    /// One gather, read and encoded on the gather thread, its requests queued.
    async fn gather_once(&mut self) {
        let (source, filter) = (self.source.clone(), self.filter.clone());
        let (external, previous) = (self.external.clone(), std::mem::take(&mut self.previous));
        let max = self.max_samples;
        let gathered = Instant::now();
        let work = crate::pace::run_on(self.thread.as_ref(), move || {
            let now_ms = (commwatch_model::clock::unix_now_ns() / 1_000_000) as i64;
            let mut series = GatherSeries::new(&external, now_ms, previous);
            let read = source.gather(&mut |n| filter.keeps(n), &mut |s| series.push(s));
            // A failed gather keeps the previous series, for their staleness markers next time.
            if let Err(e) = read {
                return Err((e, series.abandon()));
            }
            let g = series.finish();
            let (invalid, first_invalid) = (g.invalid, g.first_invalid.clone());
            let (requests, now) = g
                .encode(max)
                .map_err(|e| (e.to_string(), Previous::default()))?;
            Ok((requests, now, invalid, first_invalid))
        });
        let (requests, now, invalid, first_invalid) = match work.await {
            Ok(Ok(done)) => done,
            Ok(Err((e, previous))) => {
                self.previous = previous;
                return warn!(error = %e, "remote write: the gather failed; nothing queued");
            }
            Err(e) => return warn!(error = %e, "remote write: the gather task failed"),
        };
        self.previous = now;
        if let Some(first) = first_invalid {
            // Samples whose names the text format refuses are not sent: counted as dropped.
            self.metrics.samples_dropped.inc_by(invalid as u64);
            warn!(samples = invalid, first = %first, "remote write: samples with invalid names skipped");
        }
        let mut dropped = 0;
        for request in requests {
            dropped += self.queue.push(Queued { request, gathered });
        }
        if dropped > 0 {
            self.metrics.samples_dropped.inc_by(dropped as u64);
            warn!(
                samples = dropped,
                "remote write: queue full, the oldest requests were dropped"
            );
        }
        self.metrics.queue_samples.set(self.queue.samples() as i64);
    }
}

/// The sender's loop: one request at a time, in order.
struct Consumer {
    queue: Arc<Queue>,
    sender: Sender,
    metrics: Metrics,
    cfg: RemoteWriteConfig,
    stop: Stop,
    /// The "still failing" warning, once per [`RETRY_WARN_EVERY`].
    retry_log: LogThrottle,
}

impl Consumer {
    async fn run(&mut self) {
        loop {
            let q = tokio::select! {
                q = self.queue.pop() => q,
                _ = self.stop.signalled() => return,
            };
            self.metrics.queue_samples.set(self.queue.samples() as i64);
            self.deliver(q).await;
        }
    }

    /// After the stop signal: sends what is queued until the flush deadline; drops (and counts) the rest.
    async fn flush(&mut self) {
        while let Some(q) = self.queue.try_pop() {
            if self.stop.deadline_passed() {
                let left = q.request.samples + self.queue.clear();
                self.metrics.samples_dropped.inc_by(left as u64);
                warn!(
                    samples = left,
                    "remote write: stopped before the queue was sent; dropped"
                );
                break;
            }
            self.deliver(q).await;
        }
        self.metrics.queue_samples.set(0);
    }

    /// Sends one request, retrying 5xx, 429 and network errors with backoff for up to `retry_for` (and no
    /// later than the flush deadline once stopping).
    async fn deliver(&mut self, q: Queued) {
        let mut backoff = send::Backoff::new(self.cfg.min_backoff, self.cfg.max_backoff);
        let samples = q.request.samples as u64;
        loop {
            let attempt = tokio::select! {
                o = self.sender.send(q.request.body.clone()) => o,
                _ = self.stop.deadline_reached() => return self.metrics.samples_dropped.inc_by(samples),
            };
            let (why, after) = match attempt {
                Outcome::Sent => {
                    self.metrics.samples_sent.inc_by(samples);
                    self.metrics.requests_sent.inc();
                    self.metrics.bytes_sent.inc_by(q.request.body.len() as u64);
                    return;
                }
                Outcome::Refused(why) => {
                    self.fail(samples);
                    return warn!(url = %self.sender.target(), error = %why, samples,
                        "remote write: request refused by the receiver; not retried");
                }
                Outcome::Retry { why, after } => (why, after),
            };
            // The receiver's Retry-After is a floor: never sooner than our own backoff step either.
            let wait = backoff.next_wait().max(after.unwrap_or_default());
            if q.gathered.elapsed() + wait > self.cfg.retry_for {
                self.fail(samples);
                return warn!(url = %self.sender.target(), error = %why, samples, ?after,
                    "remote write: request failed for longer than retry_for; given up");
            }
            self.metrics.requests_retried.inc();
            if let Some(held) = self.retry_log.allow("retry", std::time::Instant::now()) {
                warn!(url = %self.sender.target(), error = %why, failed_attempts = held + 1,
                    every = ?self.retry_log.every(),
                    "remote write: the receiver keeps failing; retrying");
            }
            tracing::debug!(error = %why, ?wait, ?after, "remote write: retrying");
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.stop.deadline_reached() => return self.metrics.samples_dropped.inc_by(samples),
            }
        }
    }

    fn fail(&self, samples: u64) {
        self.metrics.samples_failed.inc_by(samples);
        self.metrics.requests_failed.inc();
    }
}

#[cfg(test)]
mod tests;
