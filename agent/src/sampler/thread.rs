//! The sampling thread: the two tiers on their own cadence, batches cut every batch period (with the step
//! markers queued since), rediscovery every discover period, a cheap look for training processes started or
//! ended at each slow tick between two ([`crate::source::Source::refresh_jobs`]), and the hand-over to the
//! shipper.
//!
//! The sources that can keep a clock do ([`Sampler::clock_sources`]): threads of theirs read each tier when
//! due, and this thread takes their rounds when it cuts a batch, instead of waking at every fast tick to ask
//! each source and wait for its answer. The quick sources' clock thread wakes it once it has handed over the
//! round of the tick a batch is due at ([`Cue`]: a wake-up by another thread costs a fraction of one by a
//! timer); failing that, its own timer wakes it half a fast period after that tick. It still reads any other
//! source at each tick.
//!
//! Inventory and job updates must reach the shipper before any batch that uses them: they are handed over
//! first, put back when the queue is full, and a batch waits (is dropped and counted) while an update is
//! still pending. The caller ran the first discovery; anything it found goes first.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_model::Tier;
use commwatch_proto::v1 as pb;
use tokio::sync::mpsc;

use super::{BatchBuilder, Periods, Sampler, SamplerEvent};
use crate::source::{next_deadline, RoundTimes, Tiers};
use crate::steps::MarkerQueue;
use crate::telemetry::AgentMetrics;

/// Samples read within this share of the fast period share a timestamp on the wire (one tick): a sample is
/// stamped at most 1/200 of a period early, so a rate over one period is off by at most 0.5 %.
pub const STAMP_SHARE: u32 = 200;

/// Settings of the sampling thread.
#[derive(Debug, Clone)]
pub struct LoopSettings {
    pub batch_period: Duration,
    pub discover_period: Duration,
    /// Step markers to attach to each batch.
    pub markers: Option<Arc<MarkerQueue>>,
    /// NCCL Inspector records read by the follower's own thread, attached at each batch cut; the loop
    /// publishes the node's jobs to it after each discovery.
    pub inspector: Option<Arc<crate::inspector::feed::InspectorFeed>>,
}

/// Handle of the sampling thread; dropping it does not stop the thread, call [`SamplerHandle::stop`].
pub struct SamplerHandle {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SamplerHandle {
    /// Stops the thread after its current tick and waits for it (the last partial batch is handed over). The
    /// thread sleeps until its next deadline, however far: it is woken for the stop.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if let Some(th) = t.thread().name() {
                tracing::debug!(thread = th, "stopping sampler");
            }
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Starts the sampling thread. The first `Inventory` event carries everything discovered at start.
pub fn spawn(
    sampler: Sampler,
    periods: Arc<Periods>,
    settings: LoopSettings,
    events: mpsc::Sender<SamplerEvent>,
    metrics: Arc<AgentMetrics>,
) -> std::io::Result<SamplerHandle> {
    let stop = Arc::new(AtomicBool::new(false));
    let run = SamplingLoop {
        tick_seconds: Tier::ALL.map(|t| metrics.tick_seconds.with_label_values(&[t.as_str()])),
        sampler,
        periods,
        settings,
        events,
        metrics,
        stop: stop.clone(),
        builder: BatchBuilder::default(),
        reads_itself: true,
        ticks: Vec::new(),
    };
    let thread = std::thread::Builder::new()
        .name("commwatch-sampler".into())
        .spawn(move || run.run())?;
    Ok(SamplerHandle {
        stop,
        thread: Some(thread),
    })
}

/// The sampling thread's state.
struct SamplingLoop {
    sampler: Sampler,
    periods: Arc<Periods>,
    settings: LoopSettings,
    events: mpsc::Sender<SamplerEvent>,
    metrics: Arc<AgentMetrics>,
    stop: Arc<AtomicBool>,
    builder: BatchBuilder,
    /// Wall time of a whole tick, per tier (indexed by [`Tier::index`]).
    tick_seconds: [prometheus::Histogram; 2],
    /// Some source does not keep its own clock: this thread reads it at each tick.
    reads_itself: bool,
    /// The times of the clocked sources' rounds taken by the last [`SamplingLoop::take_clocked`].
    ticks: Vec<RoundTimes>,
}

/// The quick sources' clock thread's word to the sampling thread: the deadline of the last round it handed
/// over, and the tick the next batch is due at; the sampling thread is woken when the one reaches the other.
struct Cue {
    start: Instant,
    thread: std::thread::Thread,
    /// Nanoseconds after `start`, plus one (0: none yet).
    last_round: AtomicU64,
    next_cut: AtomicU64,
}

impl Cue {
    /// A cue to the calling thread, its times from `start`.
    fn new(start: Instant) -> Cue {
        Cue {
            start,
            thread: std::thread::current(),
            last_round: AtomicU64::new(0),
            next_cut: AtomicU64::new(u64::MAX),
        }
    }

    fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX - 1)
            + 1
    }

    /// The round due at `due` has been handed over.
    fn round_done(&self, due: Instant) {
        let ns = self.ns(due);
        self.last_round.store(ns, Ordering::Release);
        if ns >= self.next_cut.load(Ordering::Acquire) {
            self.thread.unpark();
        }
    }

    /// The next batch is due at the tick `cut`.
    fn expect(&self, cut: Instant) {
        self.next_cut.store(self.ns(cut), Ordering::Release);
    }

    /// Whether the round of the tick `cut` (or a later one) has been handed over.
    fn ready(&self, cut: Instant) -> bool {
        self.last_round.load(Ordering::Acquire) >= self.ns(cut)
    }
}

/// When each kind of work is due next.
struct Deadlines {
    fast: Instant,
    slow: Instant,
    batch: Instant,
    discover: Instant,
}

impl SamplingLoop {
    /// Runs until the stop flag is set, then hands over the last partial batch.
    fn run(mut self) {
        self.flush_updates();
        self.publish_jobs();
        let start = Instant::now();
        let cue = Arc::new(Cue::new(start));
        let told = cue.clone();
        self.reads_itself = self.sampler.clock_sources(
            self.periods.clone(),
            start,
            Box::new(move |due| told.round_done(due)),
        );
        // Without the cue, a batch is cut half a fast period after its tick: the clocked sources' rounds are
        // over by then.
        let phase = if self.sampler.any_clocked() {
            self.periods.fast() / 2
        } else {
            Duration::ZERO
        };
        let mut due = Deadlines {
            fast: start,
            slow: start,
            batch: start + self.settings.batch_period,
            discover: start + self.settings.discover_period,
        };
        cue.expect(due.batch);
        loop {
            let now = Instant::now();
            let cued = now >= due.batch && cue.ready(due.batch);
            // With no source to read here, the job refresh waits for a batch's wake-up.
            let wake = if self.reads_itself {
                due.fast.min(due.slow).min(due.batch + phase)
            } else {
                due.batch + phase
            };
            if wake > now && !cued {
                // Asleep until the next deadline (the thread wakes only when work is due, whatever the rates;
                // `SamplerHandle::stop` unparks it). A spurious wake-up only goes round the loop again.
                std::thread::park_timeout(wake - now);
                if self.stop.load(Ordering::Relaxed) {
                    break;
                }
                continue;
            }
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            let slow_read = if self.reads_itself {
                self.tick(now, &mut due)
            } else {
                slow_due(now, &mut due.slow, self.periods.slow())
            };
            if now >= due.discover {
                due.discover = now + self.settings.discover_period;
                self.rediscover();
            } else if slow_read {
                self.refresh_jobs();
            }
            if cued || now >= due.batch + phase {
                // On the batch period's own grid (as the tiers keep theirs), so that a batch due with a tick is
                // cut in the same wake-up, after its reads, rather than in one of its own just after.
                due.batch = next_on_grid(due.batch, self.settings.batch_period, now);
                cue.expect(due.batch);
                self.cut_batch();
            }
        }
        self.cut_batch();
    }

    /// Takes the clocked sources' rounds read by `upto` into the batch, and counts their ticks: one per tier
    /// and deadline, from the first of its reads' start to the last one's end, an overrun when any of them
    /// ended past the tier's next deadline.
    fn take_clocked(&mut self, upto: Instant) {
        if !self.sampler.any_clocked() {
            return;
        }
        self.builder
            .set_resolution(self.periods.fast() / STAMP_SHARE);
        self.ticks.clear();
        self.sampler
            .take_clocked(upto, &mut self.builder, &mut self.ticks);
        for tier in Tier::ALL {
            let i = tier.index();
            self.ticks.sort_by_key(|t| t.due[i]);
            for tick in self.ticks.chunk_by(|a, b| a.due[i] == b.due[i]) {
                if tick[0].due[i].is_none() {
                    continue;
                }
                let started = tick.iter().map(|t| t.started).min();
                let ended = tick.iter().map(|t| t.ended).max();
                if let (Some(started), Some(ended)) = (started, ended) {
                    self.tick_seconds[i].observe((ended - started).as_secs_f64());
                }
                if tick.iter().any(|t| t.overran.contains(tier)) {
                    self.metrics
                        .tick_overruns
                        .with_label_values(&[tier.as_str()])
                        .inc();
                }
            }
        }
    }

    /// Reads the tiers that are due at `now`, both in one round when both are due (one request to each
    /// source), and moves their deadlines on. Each sample is stamped when it is read (see
    /// [`Sampler::sample_round`]), so how long the reads take, or how late the tick is, never shows in a
    /// rate; a deadline moves on from when the reads ended, so a long read is followed by a full period
    /// rather than by a read at once. Returns whether the slow tier was read.
    fn tick(&mut self, now: Instant, due: &mut Deadlines) -> bool {
        let mut tiers = Tiers::NONE;
        if now >= due.fast {
            tiers = tiers.with(Tier::Fast);
        }
        if now >= due.slow {
            tiers = tiers.with(Tier::Slow);
        }
        if tiers.is_empty() {
            return false;
        }
        let fast = self.periods.fast();
        self.builder.set_resolution(fast / STAMP_SHARE);
        let started = Instant::now();
        self.sampler.sample_round(tiers, &mut self.builder);
        let ended = Instant::now();
        for tier in tiers.iter() {
            // A round of both tiers counts its whole time for each.
            self.tick_seconds[tier.index()].observe((ended - started).as_secs_f64());
            let (at, period) = match tier {
                Tier::Fast => (&mut due.fast, fast),
                Tier::Slow => (&mut due.slow, self.periods.slow()),
            };
            *at = advance(*at, period, ended, &self.metrics, tier);
        }
        self.builder.end_tick();
        tiers.contains(Tier::Slow)
    }

    /// Samples of the current inventory go out before a rediscovery can change it (`send_batch` hands over
    /// any pending update first, so the batch must leave before `discover` queues one); a changed inventory
    /// then follows at once.
    fn rediscover(&mut self) {
        self.take_clocked(Instant::now());
        if let Some(b) = self.builder.take() {
            self.send_batch(b);
        }
        if self.sampler.discover() {
            self.flush_updates();
        }
        self.publish_jobs();
    }

    /// At a slow tick between discoveries: a training process started or ended since is known now (within a
    /// slow period of it, not a discovery period), its job list handed over and published at once.
    fn refresh_jobs(&mut self) {
        if self.sampler.refresh_jobs() {
            self.flush_updates();
            self.publish_jobs();
        }
    }

    /// Tells the Inspector follower which processes to follow.
    fn publish_jobs(&self) {
        if let Some(feed) = &self.settings.inspector {
            feed.set_jobs(self.sampler.jobs());
        }
    }

    /// Cuts the batch gathered so far, with the step markers queued since, and hands it over.
    fn cut_batch(&mut self) {
        self.take_clocked(Instant::now());
        let b = with_markers(self.builder.take(), self.settings.markers.as_deref());
        let feed = self.settings.inspector.as_deref();
        let most = crate::inspector::feed::MAX_RECORDS_PER_BATCH;
        if let Some(b) = crate::inspector::attach(b, feed, most) {
            self.send_batch(b);
        }
    }

    /// Hands over pending inventory and job updates; false when the queue is full (the update is put back).
    fn flush_updates(&mut self) -> bool {
        if let Some(inv) = self.sampler.take_update() {
            if let Err(e) = self.events.try_send(SamplerEvent::Inventory(inv)) {
                if let SamplerEvent::Inventory(inv) = e.into_inner() {
                    self.sampler.restore_update(inv);
                }
                return false;
            }
        }
        if let Some(jobs) = self.sampler.take_jobs_update() {
            if self.events.try_send(SamplerEvent::Jobs(jobs)).is_err() {
                self.sampler.restore_jobs_update();
                return false;
            }
        }
        true
    }

    /// Hands a batch over after any pending update; a batch that cannot go is dropped and counted.
    fn send_batch(&mut self, b: pb::SampleBatch) {
        if !self.flush_updates() || self.events.try_send(SamplerEvent::Batch(b)).is_err() {
            self.metrics.handoff_drops.inc();
        }
    }
}

/// Attaches the queued step markers; a batch is made for markers alone when there are no samples.
fn with_markers(
    batch: Option<pb::SampleBatch>,
    markers: Option<&MarkerQueue>,
) -> Option<pb::SampleBatch> {
    let m = markers.map(|q| q.drain()).unwrap_or_default();
    match batch {
        Some(mut b) => {
            b.markers = m;
            Some(b)
        }
        None if !m.is_empty() => Some(pb::SampleBatch {
            markers: m,
            ..Default::default()
        }),
        None => None,
    }
}

/// Whether the slow tier's deadline `due` has come by `now` (it moves on along its grid then), where no source
/// is left to read at it: the job refresh keeps its cadence.
fn slow_due(now: Instant, due: &mut Instant, period: Duration) -> bool {
    if now < *due {
        return false;
    }
    *due = next_on_grid(*due, period, now);
    true
}

/// The first deadline after `now` on the grid of `period` through `due` (`due` itself is past).
fn next_on_grid(due: Instant, period: Duration, now: Instant) -> Instant {
    let next = due + period;
    if next > now || period.is_zero() {
        return next.max(now);
    }
    let behind = (now - next).as_nanos() / period.as_nanos() + 1;
    next + period * u32::try_from(behind).unwrap_or(u32::MAX)
}

/// Next deadline after one that was due at `due`, once its reads ended at `now` ([`next_deadline`]), an
/// overrun counted.
fn advance(
    due: Instant,
    period: Duration,
    now: Instant,
    metrics: &AgentMetrics,
    tier: Tier,
) -> Instant {
    let (next, overran) = next_deadline(due, period, now);
    if overran {
        metrics
            .tick_overruns
            .with_label_values(&[tier.as_str()])
            .inc();
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cue_wakes_the_sampling_thread_once_the_round_of_the_cut_tick_is_handed_over() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let cue = Arc::new(Cue::new(t0));
        cue.expect(t0 + ms(250));
        // The rounds before the cut's tick do not make it ready ...
        cue.round_done(t0 + ms(200));
        assert!(!cue.ready(t0 + ms(250)));
        // ... the cut tick's does, and wakes this thread (the cue's) from another.
        let told = cue.clone();
        std::thread::spawn(move || told.round_done(t0 + ms(250)))
            .join()
            .unwrap();
        assert!(cue.ready(t0 + ms(250)));
        assert!(!cue.ready(t0 + ms(500)));
        let t = Instant::now();
        std::thread::park_timeout(Duration::from_secs(20));
        assert!(t.elapsed() < Duration::from_secs(10), "not woken");
    }

    #[test]
    fn batch_deadlines_stay_on_their_grid() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Cut on time, or a little late: the next one period after the last deadline.
        assert_eq!(next_on_grid(t0, ms(250), t0), t0 + ms(250));
        assert_eq!(next_on_grid(t0, ms(250), t0 + ms(3)), t0 + ms(250));
        // Several periods late: the first grid point after now, none skipped ahead of it.
        assert_eq!(next_on_grid(t0, ms(250), t0 + ms(250)), t0 + ms(500));
        assert_eq!(next_on_grid(t0, ms(250), t0 + ms(760)), t0 + ms(1000));
        assert_eq!(next_on_grid(t0, Duration::ZERO, t0 + ms(5)), t0 + ms(5));
    }

    #[test]
    fn a_round_past_its_next_deadline_skips_to_a_period_after_its_end() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Ended in time: a period on, no overrun.
        assert_eq!(next_deadline(t0, ms(50), t0 + ms(3)), (t0 + ms(50), false));
        // Ended at or past the next deadline: a period after its end, the ticks missed skipped.
        assert_eq!(next_deadline(t0, ms(50), t0 + ms(50)), (t0 + ms(100), true));
        assert_eq!(
            next_deadline(t0, ms(50), t0 + ms(170)),
            (t0 + ms(220), true)
        );
    }
}
