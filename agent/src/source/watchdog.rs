//! Sources behind a deadline: [`Watched`] runs one source on a thread of its own and waits for each call only
//! so long, so a source stuck in a read (a hung file system under `/proc`, a driver call that never returns)
//! cannot freeze the sampling of the others, `--once`, or the agent's shutdown.
//!
//! - A `sample` that has not returned after [`SAMPLE_DEADLINE`] (a `discover` after [`DISCOVER_DEADLINE`]) makes
//!   the source *stalled*: a warning is logged once, `commwatch_agent_source_stalled{source}` is 1, and each
//!   call while it lasts returns at once with a [`SourceError::Stalled`] failure for every series of the tier.
//!   Its series produce nothing meanwhile: the collector sees them stop, never old values repeated.
//! - When the stuck call returns, the source answers again (the gauge goes back to 0, an info line says how long
//!   it was stuck). The values that call read late are dropped (their tick is gone); a late discovery's
//!   inventory is kept, and the next `discover` reports it as a change.
//! - Each value travels to the caller's sink as soon as it is read, so the sampler stamps it when it was read
//!   (plus a hand-off of microseconds), not when the source's whole `sample` ended. A source whose values are
//!   quick reads one after another ([`Source::quick_reads`]: files) hands them over in chunks of at most
//!   [`CHUNK_VALUES`], none held longer than a [`HOLD_SHARE`] of the sampler's stamping resolution after its
//!   read ([`CHUNK_AGE`] until the sampler says it): hundreds of values a tick cost a few wake-ups of the
//!   sampler instead of one each.
//! - Dropping a [`Watched`] never waits: a thread still stuck in its source is left behind, detached, and ends
//!   with the process.
//!
//! Cost: a hand-off per value read (per chunk for quick reads) and one per call (each well under a
//! microsecond while the caller is waiting, a few microseconds when it has to be woken).

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_model::{Job, Link};

use super::{Inventory, ReadReport, Source, SourceError, Tier, Value};
use crate::telemetry::AgentMetrics;

/// How long a `sample` may take before its source is reported stalled. Far above any healthy read (sysfs
/// reads take microseconds, a tick of NVML calls milliseconds), well below the time an operator notices.
pub const SAMPLE_DEADLINE: Duration = Duration::from_secs(1);
/// How long a `discover` may take before its source is reported stalled: loading NVML on a node whose GPUs
/// are not in persistence mode can take seconds.
pub const DISCOVER_DEADLINE: Duration = Duration::from_secs(30);
/// Most values a quick-reading source's thread hands over at once.
pub const CHUNK_VALUES: usize = 256;
/// Longest a quick-reading source's thread holds a value it read before handing it over, until the sampler
/// gives its stamping resolution ([`Source::stamp_resolution`]): a fifth of the resolution at 20 Hz
/// (`STAMP_SHARE`: 250 µs).
pub const CHUNK_AGE: Duration = Duration::from_micros(50);
/// A value is held at most this share of the sampler's stamping resolution (the sampler stamps a value when
/// it arrives): at most a fifth of the resolution late, 0.1 % of a fast period. 50 µs at 20 Hz, 1 ms at 1 Hz,
/// where a tier of hundreds of files then costs the sampler one or two wake-ups instead of dozens.
pub const HOLD_SHARE: u32 = 5;

/// What the source's thread is asked to do.
enum Request {
    Bind(Arc<AgentMetrics>),
    /// Discover, after `node_links` with these links when given.
    Discover(Option<Vec<Link>>),
    /// Sample the tier, holding each quick read at most this long before handing it over.
    Sample(Tier, Duration),
    /// A cheap look for jobs started or ended ([`Source::refresh_jobs`]).
    RefreshJobs,
}

/// What the source's thread answers.
enum Reply {
    /// The end of a `discover` (boxed: the channel's slots are as large as its largest message).
    Discovered(Box<Discovered>),
    /// One value read by the `sample` under way.
    Value(usize, Value),
    /// Values read by the `sample` under way, in order (a quick-reading source's chunk).
    Values(Vec<(usize, Value)>),
    /// The end of a `sample`, with the values a quick-reading source read since its last chunk (handed over
    /// with the end rather than in a message of their own: one wake-up of the sampler less per tick).
    Sampled(ReadReport, Vec<(usize, Value)>),
    /// The end of a `refresh_jobs`: the new job list when it changed.
    Refreshed(Result<Option<Vec<Job>>, SourceError>),
}

/// What a `discover` found.
struct Discovered {
    result: Result<bool, SourceError>,
    /// The source's inventory; `None` when the discovery said it did not change (`Ok(false)`): the copy
    /// held from the discovery before stands (a copy of hundreds of series per discovery saved).
    inventory: Option<Inventory>,
    jobs: Option<Vec<Job>>,
    unavailable: Option<String>,
}

/// A call that has not been answered yet.
struct Pending {
    call: &'static str,
    since: Instant,
}

/// A source run on its own thread with deadlines. See the module documentation.
pub struct Watched {
    name: &'static str,
    requests: Sender<Request>,
    replies: Receiver<Reply>,
    sample_deadline: Duration,
    discover_deadline: Duration,
    /// The inventory and jobs of the last discovery that was answered.
    inventory: Inventory,
    jobs: Option<Vec<Job>>,
    /// What the source's last answered discovery said of its availability.
    unavailable: Option<String>,
    /// Series per tier (`[fast, slow]`) in `inventory`: what a stalled tick fails.
    tier_series: [usize; 2],
    /// Links for the next discovery's `node_links`.
    links: Option<Vec<Link>>,
    pending: Option<Pending>,
    /// A late discovery changed the inventory: the next `discover` returns `true`.
    missed_change: bool,
    /// How long the source's thread may hold a quick read ([`CHUNK_AGE`], then a [`HOLD_SHARE`] of the
    /// sampler's stamping resolution).
    hold: Duration,
    /// The source's thread ended (its source panicked).
    dead: bool,
    stalled: Option<prometheus::IntGauge>,
}

/// `source` behind the default deadlines; the source itself, unwatched, when no thread can be started (said
/// in a warning).
pub fn watch(source: Box<dyn Source>) -> Box<dyn Source> {
    watch_with(source, SAMPLE_DEADLINE, DISCOVER_DEADLINE)
}

/// [`watch`] with other deadlines (tests).
pub fn watch_with(
    source: Box<dyn Source>,
    sample_deadline: Duration,
    discover_deadline: Duration,
) -> Box<dyn Source> {
    let name = source.name();
    let (requests, inbox) = mpsc::channel();
    let (outbox, replies) = mpsc::channel();
    // The source moves to its thread only once that thread runs: if it cannot start, it comes back here.
    let (give, take) = mpsc::channel::<Box<dyn Source>>();
    let spawned = std::thread::Builder::new()
        .name(format!("cw-src-{name}"))
        .spawn(move || {
            if let Ok(source) = take.recv() {
                serve(source, inbox, outbox);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(source = name, error = %e, "cannot start the source's thread: it runs without a deadline");
        return source;
    }
    let _ = give.send(source);
    Box::new(Watched {
        name,
        requests,
        replies,
        sample_deadline,
        discover_deadline,
        inventory: Inventory::default(),
        jobs: None,
        unavailable: None,
        tier_series: [0, 0],
        links: None,
        pending: None,
        missed_change: false,
        hold: CHUNK_AGE,
        dead: false,
        stalled: None,
    })
}

/// The source's thread: answers requests in order until the [`Watched`] is dropped.
fn serve(mut source: Box<dyn Source>, requests: Receiver<Request>, replies: Sender<Reply>) {
    while let Ok(request) = requests.recv() {
        let reply = match request {
            Request::Bind(metrics) => {
                source.bind_metrics(&metrics);
                continue;
            }
            Request::Discover(links) => {
                if let Some(links) = links {
                    source.node_links(&links);
                }
                let result = source.discover();
                let inventory = match result {
                    Ok(false) => None,
                    _ => Some(source.inventory().clone()),
                };
                Reply::Discovered(Box::new(Discovered {
                    result,
                    inventory,
                    jobs: source.jobs().map(<[Job]>::to_vec),
                    unavailable: source.unavailable(),
                }))
            }
            Request::RefreshJobs => Reply::Refreshed(source.refresh_jobs().map(|changed| {
                if changed {
                    source.jobs().map(<[Job]>::to_vec)
                } else {
                    None
                }
            })),
            Request::Sample(tier, hold) if source.quick_reads() => {
                let mut chunk = Chunk::new(hold);
                let report = source.sample(tier, &mut |i, v| chunk.push(i, v, &replies));
                Reply::Sampled(report, chunk.take())
            }
            Request::Sample(tier, _) => {
                let report = source.sample(tier, &mut |i, v| {
                    let _ = replies.send(Reply::Value(i, v));
                });
                Reply::Sampled(report, Vec::new())
            }
        };
        if replies.send(reply).is_err() {
            return;
        }
    }
}

/// The values a quick-reading source read and its thread has not handed over yet.
struct Chunk {
    values: Vec<(usize, Value)>,
    /// When the oldest of them was read.
    oldest: Option<Instant>,
    /// How long the oldest may wait.
    hold: Duration,
}

impl Chunk {
    fn new(hold: Duration) -> Chunk {
        Chunk {
            values: Vec::with_capacity(CHUNK_VALUES),
            oldest: None,
            hold,
        }
    }

    /// Adds a value just read; hands the chunk over once it holds [`CHUNK_VALUES`] or its oldest value has
    /// waited its hold.
    fn push(&mut self, i: usize, v: Value, replies: &Sender<Reply>) {
        let oldest = *self.oldest.get_or_insert_with(Instant::now);
        self.values.push((i, v));
        if self.values.len() >= CHUNK_VALUES || oldest.elapsed() >= self.hold {
            self.flush(replies);
        }
    }

    fn flush(&mut self, replies: &Sender<Reply>) {
        self.oldest = None;
        if !self.values.is_empty() {
            let values = std::mem::replace(&mut self.values, Vec::with_capacity(CHUNK_VALUES));
            let _ = replies.send(Reply::Values(values));
        }
    }

    /// The values not handed over yet, for the end of the `sample`.
    fn take(self) -> Vec<(usize, Value)> {
        self.values
    }
}

impl Watched {
    /// Takes in a late answer if one came (dropping the values its call read late); false while the source is
    /// still stuck (or its thread is gone).
    fn settle(&mut self) -> bool {
        let Some((call, since)) = self.pending.as_ref().map(|p| (p.call, p.since)) else {
            return !self.dead;
        };
        loop {
            match self.replies.try_recv() {
                Ok(Reply::Value(..) | Reply::Values(_)) => continue,
                Ok(reply) => {
                    tracing::info!(
                        source = self.name,
                        call,
                        stuck_s = since.elapsed().as_secs_f64(),
                        "source answers again; its series resume"
                    );
                    self.pending = None;
                    self.set_stalled(false);
                    match reply {
                        Reply::Discovered(d) => {
                            let Discovered {
                                inventory, jobs, ..
                            } = *d;
                            self.missed_change |=
                                inventory.as_ref().is_some_and(|i| *i != self.inventory)
                                    || jobs != self.jobs;
                            self.absorb(inventory, jobs);
                        }
                        // Taken in; the sampler reads the list at the next discovery.
                        Reply::Refreshed(Ok(Some(jobs))) => self.jobs = Some(jobs),
                        _ => {}
                    }
                    return true;
                }
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Disconnected) => {
                    self.dead = true;
                    return false;
                }
            }
        }
    }

    /// Waits until `deadline` for the next answer to the request sent at `since`; `None` when it did not
    /// come (the source is then stalled, or its thread gone).
    fn wait(&mut self, call: &'static str, since: Instant, deadline: Duration) -> Option<Reply> {
        let left = deadline.saturating_sub(since.elapsed());
        match self.replies.recv_timeout(left) {
            Ok(reply) => Some(reply),
            Err(RecvTimeoutError::Timeout) => {
                tracing::warn!(
                    source = self.name,
                    call,
                    deadline_s = deadline.as_secs_f64(),
                    "source stalled: its call has not returned; its series stop until it answers"
                );
                self.pending = Some(Pending { call, since });
                self.set_stalled(true);
                None
            }
            Err(RecvTimeoutError::Disconnected) => {
                self.dead = true;
                None
            }
        }
    }

    /// Sends `request`; false when the source's thread is gone.
    fn send(&mut self, request: Request) -> bool {
        if self.requests.send(request).is_err() {
            self.dead = true;
        }
        !self.dead
    }

    /// Why the source does not answer now.
    fn unanswered(&self) -> SourceError {
        match &self.pending {
            Some(p) => SourceError::Stalled {
                name: self.name,
                call: p.call,
                waited: p.since.elapsed(),
            },
            None => SourceError::Other(format!(
                "{}: the source's thread ended; it is not read any more",
                self.name
            )),
        }
    }

    fn out_of_order(&self) -> SourceError {
        SourceError::Other(format!("{}: answer out of order", self.name))
    }

    /// A report failing every series of `tier` with [`Watched::unanswered`].
    fn unanswered_report(&self, tier: Tier) -> ReadReport {
        let mut report = ReadReport::default();
        report.fail(self.unanswered());
        report.failed = report.failed.max(self.tier_series[tier.index()]);
        report
    }

    /// Takes in what a discovery found; an inventory of `None` leaves the one held.
    fn absorb(&mut self, inventory: Option<Inventory>, jobs: Option<Vec<Job>>) {
        self.jobs = jobs;
        let Some(inventory) = inventory else {
            return;
        };
        self.tier_series = [0, 0];
        for s in &inventory.series {
            self.tier_series[s.tier.index()] += 1;
        }
        self.inventory = inventory;
    }

    fn set_stalled(&self, stalled: bool) {
        if let Some(g) = &self.stalled {
            g.set(i64::from(stalled));
        }
    }
}

impl Source for Watched {
    fn name(&self) -> &'static str {
        self.name
    }

    fn discover(&mut self) -> Result<bool, SourceError> {
        if !self.settle() {
            return Err(self.unanswered());
        }
        let links = self.links.take();
        let since = Instant::now();
        if !self.send(Request::Discover(links)) {
            return Err(self.unanswered());
        }
        match self.wait("discover", since, self.discover_deadline) {
            Some(Reply::Discovered(d)) => {
                let Discovered {
                    result,
                    inventory,
                    jobs,
                    unavailable,
                } = *d;
                self.absorb(inventory, jobs);
                self.unavailable = unavailable;
                let missed = std::mem::take(&mut self.missed_change);
                result.map(|changed| changed || missed)
            }
            Some(_) => Err(self.out_of_order()),
            None => Err(self.unanswered()),
        }
    }

    fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    fn sample(&mut self, tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
        let since = Instant::now();
        if !self.settle() || !self.send(Request::Sample(tier, self.hold)) {
            return self.unanswered_report(tier);
        }
        loop {
            match self.wait("sample", since, self.sample_deadline) {
                Some(Reply::Value(i, v)) => sink(i, v),
                Some(Reply::Values(values)) => {
                    for (i, v) in values {
                        sink(i, v);
                    }
                }
                Some(Reply::Sampled(report, tail)) => {
                    for (i, v) in tail {
                        sink(i, v);
                    }
                    return report;
                }
                Some(Reply::Discovered(_) | Reply::Refreshed(_)) => {
                    let mut report = ReadReport::default();
                    report.fail(self.out_of_order());
                    return report;
                }
                // Values already handed over were read in time and stay; the rest of the tier failed.
                None => return self.unanswered_report(tier),
            }
        }
    }

    fn bind_metrics(&mut self, metrics: &Arc<AgentMetrics>) {
        let gauge = metrics.source_stalled.with_label_values(&[self.name]);
        gauge.set(i64::from(self.pending.is_some()));
        self.stalled = Some(gauge);
        self.send(Request::Bind(metrics.clone()));
    }

    fn node_links(&mut self, links: &[Link]) {
        self.links = Some(links.to_vec());
    }

    fn stamp_resolution(&mut self, resolution: Duration) {
        self.hold = resolution / HOLD_SHARE;
    }

    fn jobs(&self) -> Option<&[Job]> {
        self.jobs.as_deref()
    }

    /// Asks the source's thread for a refresh, waiting as long as for a `sample`; a source that lists no jobs
    /// (or has not answered a discovery yet) is not asked at all.
    fn refresh_jobs(&mut self) -> Result<bool, SourceError> {
        if self.jobs.is_none() {
            return Ok(false);
        }
        if !self.settle() {
            return Err(self.unanswered());
        }
        let since = Instant::now();
        if !self.send(Request::RefreshJobs) {
            return Err(self.unanswered());
        }
        match self.wait("refresh_jobs", since, self.sample_deadline) {
            Some(Reply::Refreshed(Ok(Some(jobs)))) => {
                let changed = self.jobs.as_ref() != Some(&jobs);
                self.jobs = Some(jobs);
                Ok(changed)
            }
            Some(Reply::Refreshed(result)) => result.map(|_| false),
            Some(_) => Err(self.out_of_order()),
            None => Err(self.unanswered()),
        }
    }

    fn unavailable(&self) -> Option<String> {
        self.unavailable.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{SeriesKind, SeriesSpec};
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    /// One slow gauge; `sample` blocks while the gate is held, `discover` while `block_discover` holds it.
    struct Gated {
        inventory: Inventory,
        gate: Arc<Mutex<()>>,
        block_discover: bool,
        value: f64,
    }

    impl Source for Gated {
        fn name(&self) -> &'static str {
            "gated"
        }
        fn discover(&mut self) -> Result<bool, SourceError> {
            if self.block_discover {
                drop(self.gate.lock());
            }
            let first = self.inventory.series.is_empty();
            if first {
                self.inventory.series.push(SeriesSpec {
                    metric: "g".into(),
                    kind: SeriesKind::Gauge,
                    tier: Tier::Slow,
                    link: None,
                    labels: BTreeMap::new(),
                });
            }
            Ok(first)
        }
        fn inventory(&self) -> &Inventory {
            &self.inventory
        }
        fn sample(&mut self, _tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
            drop(self.gate.lock());
            self.value += 1.0;
            sink(0, Value::Gauge(self.value));
            ReadReport {
                read: 1,
                ..ReadReport::default()
            }
        }
    }

    fn read(s: &mut dyn Source) -> (Vec<(usize, Value)>, ReadReport) {
        let mut v = Vec::new();
        let r = s.sample(Tier::Slow, &mut |i, x| v.push((i, x)));
        (v, r)
    }

    /// The deadline in these tests: long enough that a healthy call under a loaded machine never misses it.
    const DEADLINE: Duration = Duration::from_secs(1);

    /// The first read after the stuck call came back: reads until one is not stalled (a stalled read returns
    /// at once without calling the source, so it changes nothing), failing if none comes within 20 s.
    fn read_once_answering(s: &mut dyn Source) -> (Vec<(usize, Value)>, ReadReport) {
        let start = Instant::now();
        loop {
            let (v, r) = read(s);
            if !r
                .errors
                .iter()
                .any(|e| matches!(e, SourceError::Stalled { .. }))
            {
                return (v, r);
            }
            assert!(start.elapsed() < Duration::from_secs(20), "still stalled");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_stuck_sample_is_reported_stalled_at_the_deadline_and_old_values_are_never_handed_out() {
        let gate = Arc::new(Mutex::new(()));
        let metrics = Arc::new(AgentMetrics::new());
        let mut s = watch_with(
            Box::new(Gated {
                inventory: Inventory::default(),
                gate: gate.clone(),
                block_discover: false,
                value: 0.0,
            }),
            DEADLINE,
            DEADLINE,
        );
        s.bind_metrics(&metrics);
        assert!(s.discover().unwrap());
        assert_eq!(read(s.as_mut()).0, vec![(0, Value::Gauge(1.0))]);
        let stalled = || metrics.source_stalled.with_label_values(&["gated"]).get();
        assert_eq!(stalled(), 0);

        let held = gate.lock().unwrap();
        let t = Instant::now();
        let (v, r) = read(s.as_mut());
        let waited = t.elapsed();
        // At the deadline, not later than it by much (the gate stays held: without the deadline it never ends).
        assert!(waited >= DEADLINE && waited < DEADLINE * 30, "{waited:?}");
        assert!(v.is_empty());
        assert_eq!(r.failed, 1);
        assert!(matches!(
            r.errors[0],
            SourceError::Stalled { call: "sample", .. }
        ));
        assert_eq!(stalled(), 1);
        // While stuck: at once (not another deadline), nothing read, the same failure.
        let t = Instant::now();
        let (v, r) = read(s.as_mut());
        assert!(t.elapsed() < DEADLINE / 2, "{:?}", t.elapsed());
        assert!(v.is_empty() && r.failed == 1);
        assert!(r.errors[0]
            .to_string()
            .starts_with("gated: sample has not returned after"));
        assert!(matches!(s.discover(), Err(SourceError::Stalled { .. })));

        drop(held);
        // The late sample (value 2) is dropped; the next one is read fresh.
        assert_eq!(
            read_once_answering(s.as_mut()).0,
            vec![(0, Value::Gauge(3.0))]
        );
        assert_eq!(stalled(), 0);
        assert!(!s.discover().unwrap());
    }

    /// Two values, the second read only once the caller's sink has the first (or, when the first is held
    /// back, after [`SEEN_DEADLINE`]): `seen_first` says which.
    struct Paced {
        inventory: Inventory,
        first_handed_over: Receiver<()>,
        seen_first: Arc<std::sync::atomic::AtomicBool>,
    }

    /// How long [`Paced`] waits for its first value to reach the caller: far beyond any scheduling delay.
    const SEEN_DEADLINE: Duration = Duration::from_secs(20);

    impl Source for Paced {
        fn name(&self) -> &'static str {
            "paced"
        }
        fn discover(&mut self) -> Result<bool, SourceError> {
            Ok(false)
        }
        fn inventory(&self) -> &Inventory {
            &self.inventory
        }
        fn sample(&mut self, _tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
            sink(0, Value::Counter(1));
            let seen = self.first_handed_over.recv_timeout(SEEN_DEADLINE).is_ok();
            self.seen_first
                .store(seen, std::sync::atomic::Ordering::SeqCst);
            sink(1, Value::Counter(2));
            ReadReport {
                read: 2,
                ..ReadReport::default()
            }
        }
    }

    #[test]
    fn each_value_reaches_the_sink_when_it_is_read_not_when_the_sample_ends() {
        // Causal, not timed: the source reads its second value only after the caller's sink got the first,
        // which can happen only if that value was handed over while the sample was still under way.
        let (handed_over, first_handed_over) = mpsc::channel();
        let seen_first = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let paced = Paced {
            inventory: Inventory::default(),
            first_handed_over,
            seen_first: seen_first.clone(),
        };
        let mut s = watch_with(Box::new(paced), SEEN_DEADLINE * 3, SEEN_DEADLINE * 3);
        let mut got = Vec::new();
        let r = s.sample(Tier::Fast, &mut |i, v| {
            got.push((i, v));
            let _ = handed_over.send(());
        });
        assert_eq!(r.read, 2);
        assert_eq!(got, vec![(0, Value::Counter(1)), (1, Value::Counter(2))]);
        assert!(
            seen_first.load(std::sync::atomic::Ordering::SeqCst),
            "the first value reached the sink only after the sample ended"
        );
    }

    #[test]
    fn a_late_discovery_is_reported_as_a_change_and_dropping_never_waits() {
        let gate = Arc::new(Mutex::new(()));
        let mut s = watch_with(
            Box::new(Gated {
                inventory: Inventory::default(),
                gate: gate.clone(),
                block_discover: true,
                value: 0.0,
            }),
            DEADLINE,
            DEADLINE,
        );
        let held = gate.lock().unwrap();
        assert!(matches!(
            s.discover(),
            Err(SourceError::Stalled {
                call: "discover",
                ..
            })
        ));
        assert!(s.inventory().series.is_empty());
        drop(held);
        // The first (late) discovery found the series; the next one finds nothing new but says it changed.
        assert_eq!(
            read_once_answering(s.as_mut()).0,
            vec![(0, Value::Gauge(1.0))]
        );
        assert_eq!(s.inventory().series.len(), 1);
        assert!(s.discover().unwrap());
        assert!(!s.discover().unwrap());

        let _held = gate.lock().unwrap();
        let (_, r) = read(s.as_mut());
        assert_eq!(r.failed, 1);
        // The source's thread stays stuck on the gate until the test ends: a drop that joined it would hang.
        let t = Instant::now();
        drop(s);
        assert!(t.elapsed() < DEADLINE * 10, "{:?}", t.elapsed());
    }

    /// A source of `n` counters read one after another, quickly or not.
    struct Counters {
        inventory: Inventory,
        n: usize,
        quick: bool,
        round: u64,
    }

    impl Source for Counters {
        fn name(&self) -> &'static str {
            "counters"
        }
        fn discover(&mut self) -> Result<bool, SourceError> {
            Ok(false)
        }
        fn inventory(&self) -> &Inventory {
            &self.inventory
        }
        fn sample(&mut self, _tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
            self.round += 1;
            for i in 0..self.n {
                sink(i, Value::Counter(self.round * 1000 + i as u64));
            }
            ReadReport {
                read: self.n,
                ..ReadReport::default()
            }
        }
        fn quick_reads(&self) -> bool {
            self.quick
        }
    }

    /// The sizes of the chunks waiting in `rx`.
    fn chunk_sizes(rx: &Receiver<Reply>) -> Vec<usize> {
        let mut sizes = Vec::new();
        while let Ok(reply) = rx.try_recv() {
            match reply {
                Reply::Values(v) => sizes.push(v.len()),
                _ => panic!("not a chunk"),
            }
        }
        sizes
    }

    #[test]
    fn a_chunk_is_handed_over_when_full_or_when_its_oldest_value_has_waited_its_hold() {
        let (tx, rx) = mpsc::channel();
        // A long hold (a slow sampler's): handed over when full, the rest at the end.
        let mut c = Chunk::new(Duration::from_secs(3600));
        for i in 0..CHUNK_VALUES + 10 {
            c.push(i, Value::Counter(i as u64), &tx);
        }
        assert_eq!(chunk_sizes(&rx), [CHUNK_VALUES]);
        c.flush(&tx);
        assert_eq!(chunk_sizes(&rx), [10]);
        // No hold: every value at once.
        let mut c = Chunk::new(Duration::ZERO);
        for i in 0..3 {
            c.push(i, Value::Counter(0), &tx);
        }
        assert_eq!(chunk_sizes(&rx), [1, 1, 1]);
    }

    #[test]
    fn quick_reads_arrive_whole_and_in_order_in_chunks() {
        for quick in [true, false] {
            let n = 3 * CHUNK_VALUES + 5;
            let mut s = watch(Box::new(Counters {
                inventory: Inventory::default(),
                n,
                quick,
                round: 0,
            }));
            for round in 1..=3u64 {
                let (v, r) = read(s.as_mut());
                assert_eq!(r.read, n);
                let want: Vec<(usize, Value)> = (0..n)
                    .map(|i| (i, Value::Counter(round * 1000 + i as u64)))
                    .collect();
                assert_eq!(v, want, "quick {quick}, round {round}");
            }
        }
    }
}
