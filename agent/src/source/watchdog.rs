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
//! - The sampler asks every due source for its round first ([`Source::start_round`]: one request, both tiers
//!   when both are due) and then takes their answers ([`Source::finish_round`]), so the sources read at the
//!   same time and a source's answer never waits behind another's read. Each value carries the wall-clock
//!   time the source's thread read it: a value taken in late (behind another source, a slow tier) keeps its
//!   own time. A source whose values are quick reads one after another ([`Source::quick_reads`]: files)
//!   hands its round over in one message when it ends (one wake-up of the sampler a round, at most); any other
//!   (a driver's calls, which may hang between two values) hands each value over as it is read, so the values
//!   read before a call that hangs still arrive in time.
//! - The sampling thread runs its sources on clocks instead ([`Source::clock`], [`clock`]): one thread for
//!   the quick sources ([`ClockGroup`]), each other source's own for it, sleeps to the tiers' deadlines,
//!   reads, and hands each source's round over without waking anyone; the sampler takes the rounds when it
//!   cuts a batch ([`Source::take_rounds`]). The same deadline holds: a round under way past it makes the
//!   source stalled, and what it read late is dropped; a quick source held up behind a stuck one leaves the
//!   group for a clock on its own thread.
//! - Dropping a [`Watched`] never waits: a thread still stuck in its source is left behind, detached, and ends
//!   with the process.
//!
//! Cost: a hand-off per call (per value read besides, for a source that is not quick), each well under a
//! microsecond while the caller is waiting, a few microseconds when it has to be woken. On a clock, a tick
//! costs one wake-up of the clock's thread (the quick sources' together) and a message per source that nobody
//! waits for: a wake-up by a timer costs that thread several times a file's read on the machines measured.

mod clock;

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_model::{Job, Link};

use commwatch_model::clock::unix_now_ns;

use super::{
    Cadence, ClockedRound, Inventory, ReadReport, RoundReads, RoundSink, Source, SourceError, Tier,
    TierRead, Tiers, Value,
};
use crate::telemetry::AgentMetrics;
pub use clock::ClockGroup;
use clock::{lock, Clock, Clocked, Clocking, Next, Setup, Shared};

/// How long a `sample` may take before its source is reported stalled. Far above any healthy read (sysfs
/// reads take microseconds, a tick of NVML calls milliseconds), well below the time an operator notices.
pub const SAMPLE_DEADLINE: Duration = Duration::from_secs(1);
/// How long a `discover` may take before its source is reported stalled: loading NVML on a node whose GPUs
/// are not in persistence mode can take seconds.
pub const DISCOVER_DEADLINE: Duration = Duration::from_secs(30);

/// A value read, with the wall-clock time of its read (ns since the Unix epoch).
type Stamped = (usize, Value, i64);

/// What the source's thread is asked to do.
enum Request {
    Bind(Arc<AgentMetrics>),
    /// Discover, after `node_links` with these links when given.
    Discover(Option<Vec<Link>>),
    /// Read these tiers (fast first); the vector, empty, is where a quick source puts the round's values
    /// (the last round's, handed back: no allocation a round).
    Sample(Tiers, Vec<Stamped>),
    /// A cheap look for jobs started or ended ([`Source::refresh_jobs`]).
    RefreshJobs,
    /// Read on a clock of its own from now on ([`Source::clock`]; boxed as `Discovered` is).
    Clock(Box<Setup>),
}

/// What the source's thread answers.
enum Reply {
    /// The end of a `discover` (boxed: the channel's slots are as large as its largest message).
    Discovered(Box<Discovered>),
    /// One value read by the round under way (a source that is not quick).
    Value(Stamped),
    /// The end of a round: each tier's report, and the values a quick source read, in order.
    Sampled(Box<(RoundReads, Vec<Stamped>)>),
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
    /// The round asked for and not finished yet: when it was asked, or `None` when it could not be.
    asked: Option<Option<Instant>>,
    /// The last round's vector of values, handed back with the next request.
    spare: Vec<Stamped>,
    /// The source's thread ended (its source panicked).
    dead: bool,
    stalled: Option<prometheus::IntGauge>,
    /// The source reads on a clock ([`Source::clock`]).
    clocked: Option<Clocking>,
    /// The source, shared with its thread (a [`ClockGroup`] reads it too).
    source: Shared,
    /// Whether its values are quick reads ([`Source::quick_reads`]).
    quick: bool,
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
    let quick = source.quick_reads();
    let (requests, inbox) = mpsc::channel();
    let (outbox, replies) = mpsc::channel();
    // The source goes to its thread only once that thread runs: if it cannot start, it stays here.
    let (give, take) = mpsc::channel::<Shared>();
    let spawned = std::thread::Builder::new()
        .name(format!("cw-src-{name}"))
        .spawn(move || {
            if let Ok(shared) = take.recv() {
                serve(shared, inbox, outbox);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(source = name, error = %e, "cannot start the source's thread: it runs without a deadline");
        return source;
    }
    let shared: Shared = Arc::new(std::sync::Mutex::new(source));
    let _ = give.send(shared.clone());
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
        asked: None,
        spare: Vec::new(),
        dead: false,
        stalled: None,
        clocked: None,
        source: shared,
        quick,
    })
}

/// The source's thread: answers requests in order until the [`Watched`] is dropped; once given a clock,
/// reads its rounds when they are due between them.
fn serve(shared: Shared, requests: Receiver<Request>, replies: Sender<Reply>) {
    let mut clock: Option<Clock> = None;
    loop {
        let request = match &mut clock {
            None => match requests.recv() {
                Ok(request) => request,
                Err(_) => return,
            },
            Some(c) => match c.next(&shared, &requests) {
                Next::Request(request) => request,
                Next::Round => {
                    let Some(mut source) = lock(&shared) else {
                        return;
                    };
                    c.read(source.as_mut());
                    continue;
                }
                Next::Gone => return,
            },
        };
        // A call into the source that panicked (on a group's thread) ends this one too.
        let Some(mut source) = lock(&shared) else {
            return;
        };
        let reply = match request {
            Request::Bind(metrics) => {
                source.bind_metrics(&metrics);
                continue;
            }
            Request::Clock(setup) => {
                clock = Some(Clock::new(*setup));
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
            Request::Sample(tiers, values) => read_round(source.as_mut(), tiers, values, &replies),
        };
        drop(source);
        if replies.send(reply).is_err() {
            return;
        }
    }
}

/// Reads a round of `tiers` on the source's thread, each value stamped with the wall clock as it is read: a
/// quick source's values go into `values` and over with the end, any other's over one by one.
fn read_round(
    source: &mut dyn Source,
    tiers: Tiers,
    mut values: Vec<Stamped>,
    replies: &Sender<Reply>,
) -> Reply {
    let quick = source.quick_reads();
    let mut reads: RoundReads = [None, None];
    for tier in tiers.iter() {
        let started = Instant::now();
        let report = source.sample(tier, &mut |i, v| {
            let read = (i, v, unix_now_ns());
            if quick {
                values.push(read);
            } else {
                let _ = replies.send(Reply::Value(read));
            }
        });
        reads[tier.index()] = Some(TierRead {
            report,
            took: started.elapsed(),
        });
    }
    Reply::Sampled(Box::new((reads, values)))
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
                Ok(Reply::Value(_)) => continue,
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
    /// An answer already there is taken even when the deadline has passed (it came in time: the caller was
    /// busy with another source's).
    fn wait(&mut self, call: &'static str, since: Instant, deadline: Duration) -> Option<Reply> {
        match self.replies.try_recv() {
            Ok(reply) => return Some(reply),
            Err(TryRecvError::Disconnected) => {
                self.dead = true;
                return None;
            }
            Err(TryRecvError::Empty) => {}
        }
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

    /// Each of `tiers` failed with `report(tier)`, after waiting since `since`.
    fn failed_round(
        &self,
        tiers: Tiers,
        since: Instant,
        report: impl Fn(&Self, Tier) -> ReadReport,
    ) -> RoundReads {
        let mut reads: RoundReads = [None, None];
        for tier in tiers.iter() {
            reads[tier.index()] = Some(TierRead {
                report: report(self, tier),
                took: since.elapsed(),
            });
        }
        reads
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

    /// Takes one message of a clocked source: a value to `sink`; a round's end to `rounds`, unless the
    /// source was stalled in it (it answers again; what it read late is gone, its reports with it).
    fn take_clocked(
        &mut self,
        c: &mut Clocking,
        message: Clocked,
        sink: &mut RoundSink<'_>,
        rounds: &mut Vec<ClockedRound>,
    ) {
        let (reads, times, mut values) = match message {
            Clocked::Value((i, v, at)) => return sink(i, v, at),
            Clocked::Round(round) => *round,
        };
        c.last_started = Some(times.started);
        for (i, v, at) in values.drain(..) {
            sink(i, v, at);
        }
        let _ = c.spares.send(values);
        if let Some(p) = self.pending.as_ref().filter(|p| p.call == "sample") {
            tracing::info!(
                source = self.name,
                call = p.call,
                stuck_s = p.since.elapsed().as_secs_f64(),
                "source answers again; its series resume"
            );
            self.pending = None;
            self.set_stalled(false);
            return;
        }
        rounds.push(ClockedRound {
            reads,
            times: Some(times),
        });
    }

    /// A clocked source's round under way since `since` has passed its deadline: the source is stalled.
    fn clocked_stall(&mut self, c: &mut Clocking, since: Instant) {
        tracing::warn!(
            source = self.name,
            call = "sample",
            deadline_s = self.sample_deadline.as_secs_f64(),
            "source stalled: its call has not returned; its series stop until it answers"
        );
        self.pending = Some(Pending {
            call: "sample",
            since,
        });
        self.set_stalled(true);
        // The tick stuck in the read counts as missed.
        for tier in Tier::ALL {
            c.missed[tier.index()] = since.checked_sub(c.cadence.period(tier)).unwrap_or(since);
        }
    }

    /// While the source is stalled: each tick it missed since the last call fails every series of its tier.
    fn fail_missed(&self, c: &mut Clocking, now: Instant, rounds: &mut Vec<ClockedRound>) {
        let mut reads: RoundReads = [None, None];
        for tier in Tier::ALL {
            let missed = c.count_missed(tier, now);
            let series = self.tier_series[tier.index()];
            if missed == 0 || series == 0 {
                continue;
            }
            let mut report = ReadReport::default();
            report.fail(self.unanswered());
            report.failed = missed * series;
            reads[tier.index()] = Some(TierRead {
                report,
                took: Duration::ZERO,
            });
        }
        if reads.iter().any(Option::is_some) {
            rounds.push(ClockedRound { reads, times: None });
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

    /// A round of one tier ([`Watched::finish_round`] without the read times).
    fn sample(&mut self, tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
        let [fast, slow] = self.finish_round(Tiers::of(tier), &mut |i, v, _| sink(i, v));
        fast.or(slow).map(|r| r.report).unwrap_or_default()
    }

    /// Asks the source's thread for the round; a source still stuck in an earlier call is not asked (its
    /// `finish_round` fails at once). A round already asked for and not finished stands.
    fn start_round(&mut self, tiers: Tiers) {
        if self.asked.is_some() {
            return;
        }
        let values = std::mem::take(&mut self.spare);
        let asked = self.settle() && self.send(Request::Sample(tiers, values));
        self.asked = Some(asked.then(Instant::now));
    }

    /// Takes the round's answer, waiting at most the sample deadline from when it was asked (an answer that
    /// came in time is taken whenever this is called).
    fn finish_round(&mut self, tiers: Tiers, sink: &mut RoundSink<'_>) -> RoundReads {
        if self.asked.is_none() {
            self.start_round(tiers);
        }
        let Some(since) = self.asked.take().flatten() else {
            return self.failed_round(tiers, Instant::now(), Self::unanswered_report);
        };
        loop {
            match self.wait("sample", since, self.sample_deadline) {
                Some(Reply::Value((i, v, at))) => sink(i, v, at),
                Some(Reply::Sampled(round)) => {
                    let (reads, mut values) = *round;
                    for (i, v, at) in values.drain(..) {
                        sink(i, v, at);
                    }
                    self.spare = values;
                    return reads;
                }
                Some(Reply::Discovered(_) | Reply::Refreshed(_)) => {
                    return self.failed_round(tiers, since, |w, _| {
                        let mut report = ReadReport::default();
                        report.fail(w.out_of_order());
                        report
                    });
                }
                // Values already handed over were read in time and stay; the rest of the round failed.
                None => return self.failed_round(tiers, since, Self::unanswered_report),
            }
        }
    }

    /// Puts the source on a clock (see [`clock`]): `group`'s when its reads are quick, else its own
    /// thread's; false when its thread is gone.
    fn clock(&mut self, cadence: Arc<dyn Cadence>, start: Instant, group: &mut ClockGroup) -> bool {
        if self.clocked.is_some() {
            return true;
        }
        if self.dead {
            return false;
        }
        let (mut clocking, outlet) = Clocking::new(cadence.clone(), start, self.sample_deadline);
        if self.quick {
            clocking.membership = Some(group.join(self.source.clone(), outlet));
        } else if !self.send(Request::Clock(Box::new(Setup {
            cadence,
            start,
            outlet,
        }))) {
            return false;
        }
        self.clocked = Some(clocking);
        true
    }

    /// Takes the rounds the source's thread read on its clock, waiting for one under way that began by `upto`
    /// (at most the sample deadline from its start; not while the source is stalled). A round still under
    /// way past its deadline makes the source stalled; while it is, each missed tick fails its tier's series.
    fn take_rounds(
        &mut self,
        upto: Instant,
        sink: &mut RoundSink<'_>,
        rounds: &mut Vec<ClockedRound>,
    ) {
        let Some(mut c) = self.clocked.take() else {
            return;
        };
        if self.pending.as_ref().is_some_and(|p| p.call != "sample") {
            // A late discovery or refresh is taken in here too, so its stall ends without waiting for the next.
            self.settle();
        }
        let under_way = c
            .busy
            .get()
            .filter(|&s| s <= upto && Some(s) != c.last_started);
        if let (None, Some(since)) = (&self.pending, under_way) {
            let late = since + self.sample_deadline;
            while c.last_started != Some(since) {
                match c
                    .rounds
                    .recv_timeout(late.saturating_duration_since(Instant::now()))
                {
                    Ok(message) => self.take_clocked(&mut c, message, sink, rounds),
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => {
                        self.dead = true;
                        break;
                    }
                }
            }
        }
        loop {
            match c.rounds.try_recv() {
                Ok(message) => self.take_clocked(&mut c, message, sink, rounds),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.dead = true;
                    break;
                }
            }
        }
        let now = Instant::now();
        if self.pending.is_none() && c.held_up(self.sample_deadline, now) {
            tracing::info!(
                source = self.name,
                "the sources' clock thread is stuck in another source: this one reads on its own thread now"
            );
            let setup = c.leave(self.sample_deadline);
            self.send(Request::Clock(Box::new(setup)));
        }
        if self.pending.is_none() {
            let stuck = c.busy.get().filter(|&s| Some(s) != c.last_started);
            if let Some(since) =
                stuck.filter(|&s| now.saturating_duration_since(s) > self.sample_deadline)
            {
                self.clocked_stall(&mut c, since);
            }
        }
        if self.dead && !std::mem::replace(&mut c.dead_seen, true) {
            c.missed = [now, now];
        }
        if self.pending.is_some() || self.dead {
            self.fail_missed(&mut c, now, rounds);
        }
        self.clocked = Some(c);
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

    /// One slow gauge; `sample` blocks while the gate is held when `block_sample`, `discover` when
    /// `block_discover`.
    struct Gated {
        inventory: Inventory,
        gate: Arc<Mutex<()>>,
        block_discover: bool,
        block_sample: bool,
        value: f64,
        /// Whether it says its reads are quick (it shares a clock group then).
        quick: bool,
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
            if self.block_sample {
                drop(self.gate.lock());
            }
            self.value += 1.0;
            sink(0, Value::Gauge(self.value));
            ReadReport {
                read: 1,
                ..ReadReport::default()
            }
        }
        fn quick_reads(&self) -> bool {
            self.quick
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
                block_sample: true,
                value: 0.0,
                quick: false,
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
                block_sample: true,
                value: 0.0,
                quick: false,
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

    /// The replies waiting in `rx`: values handed over one by one, and whether a round's end is among them.
    fn waiting(rx: &Receiver<Reply>) -> (usize, bool) {
        let (mut values, mut ended) = (0, false);
        while let Ok(reply) = rx.try_recv() {
            match reply {
                Reply::Value(_) => values += 1,
                Reply::Sampled(_) => ended = true,
                _ => panic!("not a round's reply"),
            }
        }
        (values, ended)
    }

    #[test]
    fn a_round_of_both_tiers_is_one_answer_for_a_quick_source_and_each_value_keeps_its_read_time() {
        let both = Tiers::of(Tier::Fast).with(Tier::Slow);
        for quick in [true, false] {
            let mut c = Counters {
                inventory: Inventory::default(),
                n: 40,
                quick,
                round: 0,
            };
            let (tx, rx) = mpsc::channel();
            let before = unix_now_ns();
            let Reply::Sampled(round) = read_round(&mut c, both, Vec::new(), &tx) else {
                panic!("a round ends with its reports");
            };
            let after = unix_now_ns();
            let (reads, values) = *round;
            assert!(reads
                .iter()
                .all(|r| r.as_ref().is_some_and(|r| r.report.read == 40)));
            // Quick: nothing handed over before the end, every value with it; else each value on its own.
            assert_eq!(waiting(&rx), (if quick { 0 } else { 80 }, false), "{quick}");
            assert_eq!(values.len(), if quick { 80 } else { 0 });
            assert!(values.windows(2).all(|w| w[0].2 <= w[1].2));
            assert!(values.iter().all(|v| (before..=after).contains(&v.2)));
        }
    }

    #[test]
    fn a_stuck_source_does_not_hold_up_another_sources_round_nor_its_read_times() {
        let gate = Arc::new(Mutex::new(()));
        let mut stuck = watch_with(
            Box::new(Gated {
                inventory: Inventory::default(),
                gate: gate.clone(),
                block_discover: false,
                block_sample: true,
                value: 0.0,
                quick: false,
            }),
            DEADLINE,
            DEADLINE,
        );
        stuck.discover().unwrap();
        let mut quick = watch(Box::new(Counters {
            inventory: Inventory::default(),
            n: 5,
            quick: true,
            round: 0,
        }));
        let held = gate.lock().unwrap();
        let tiers = Tiers::of(Tier::Slow);
        let asked = unix_now_ns();
        stuck.start_round(tiers);
        quick.start_round(tiers);
        // The stuck source is waited for first, up to its deadline ...
        let [_, r] = stuck.finish_round(tiers, &mut |_, _, _| panic!("nothing read"));
        let stuck_ended = unix_now_ns();
        assert!(matches!(
            r.unwrap().report.errors[0],
            SourceError::Stalled { .. }
        ));
        // ... while the other read at once: its values carry their read times, not the end of that wait.
        let mut got = Vec::new();
        let [_, r] = quick.finish_round(tiers, &mut |i, _, at| got.push((i, at)));
        assert_eq!(r.unwrap().report.read, 5);
        assert_eq!(got.len(), 5);
        let deadline_ns = DEADLINE.as_nanos() as i64;
        assert!(stuck_ended - asked >= deadline_ns);
        assert!(
            got.iter().all(|&(_, at)| at >= asked && at < stuck_ended),
            "{got:?} not read between {asked} and {stuck_ended}"
        );
        drop(held);
    }

    #[test]
    fn reads_arrive_whole_and_in_order() {
        for quick in [true, false] {
            let n = 773;
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

    /// The same period for both tiers.
    struct Every(Duration);

    impl Cadence for Every {
        fn period(&self, _tier: Tier) -> Duration {
            self.0
        }
    }

    /// An inventory of `n` fast counters.
    fn fast_series(n: usize) -> Inventory {
        Inventory {
            links: Vec::new(),
            series: (0..n)
                .map(|i| SeriesSpec {
                    metric: format!("c{i}"),
                    kind: SeriesKind::COUNTER64,
                    tier: Tier::Fast,
                    link: None,
                    labels: BTreeMap::new(),
                })
                .collect(),
        }
    }

    /// What `take_rounds` handed over: the values, and the rounds.
    fn take(s: &mut dyn Source) -> (Vec<(usize, Value, i64)>, Vec<ClockedRound>) {
        let (mut got, mut rounds) = (Vec::new(), Vec::new());
        s.take_rounds(
            Instant::now(),
            &mut |i, v, at| got.push((i, v, at)),
            &mut rounds,
        );
        (got, rounds)
    }

    const TICK: Duration = Duration::from_millis(20);

    #[test]
    fn quick_sources_on_one_clock_hand_over_whole_rounds_on_the_grid_without_being_asked() {
        let cadence: Arc<dyn Cadence> = Arc::new(Every(TICK));
        let start = Instant::now();
        let mut group = ClockGroup::new(start);
        let mut sources: Vec<Box<dyn Source>> = (0..2)
            .map(|_| {
                watch(Box::new(Counters {
                    inventory: fast_series(5),
                    n: 5,
                    quick: true,
                    round: 0,
                }))
            })
            .collect();
        for s in &mut sources {
            assert!(s.clock(cadence.clone(), start, &mut group));
        }
        assert!(group.start(cadence, start));
        std::thread::sleep(TICK * 15);
        let mut first = Vec::new();
        for s in &mut sources {
            let (got, rounds) = take(s.as_mut());
            assert!(rounds.len() >= 5, "{} rounds in 15 ticks", rounds.len());
            // Whole rounds, in order, each value with its read time.
            assert_eq!(got.len(), rounds.len() * 5);
            for (k, round) in got.chunks(5).enumerate() {
                for (i, &(idx, v, _)) in round.iter().enumerate() {
                    assert_eq!(
                        (idx, v),
                        (i, Value::Counter((k as u64 + 1) * 1000 + i as u64))
                    );
                }
            }
            assert!(got.windows(2).all(|w| w[0].2 <= w[1].2));
            for r in &rounds {
                assert_eq!(r.reads[0].as_ref().map(|r| r.report.read), Some(5));
                let t = r.times.expect("a round read on the clock has its times");
                let due = t.due[0].expect("the fast tier was due");
                // On the grid from the start, read at or after its deadline.
                assert_eq!((due - start).as_nanos() % TICK.as_nanos(), 0);
                assert!(t.started >= due && t.ended >= t.started);
                assert!(t.due[1].is_none());
            }
            first.push(rounds[0].times.unwrap());
        }
        // One thread read both, one after the other, at the same deadline.
        assert_eq!(first[0].due, first[1].due);
        assert!(first[1].started >= first[0].ended);
    }

    #[test]
    fn a_quick_source_stuck_on_the_shared_clock_is_stalled_and_the_others_go_on_without_it() {
        let gate = Arc::new(Mutex::new(()));
        let metrics = Arc::new(AgentMetrics::new());
        let gated = Gated {
            inventory: Inventory::default(),
            gate: gate.clone(),
            block_discover: false,
            block_sample: true,
            value: 0.0,
            quick: true,
        };
        let mut stuck = watch_with(Box::new(gated), DEADLINE, DEADLINE);
        stuck.bind_metrics(&metrics);
        assert!(stuck.discover().unwrap());
        let mut other = watch_with(
            Box::new(Counters {
                inventory: fast_series(3),
                n: 3,
                quick: true,
                round: 0,
            }),
            DEADLINE,
            DEADLINE,
        );
        let stalled = || metrics.source_stalled.with_label_values(&["gated"]).get();

        let cadence: Arc<dyn Cadence> = Arc::new(Every(TICK));
        let held = gate.lock().unwrap();
        let start = Instant::now();
        let mut group = ClockGroup::new(start);
        assert!(stuck.clock(cadence.clone(), start, &mut group));
        assert!(other.clock(cadence.clone(), start, &mut group));
        assert!(group.start(cadence, start));
        std::thread::sleep(DEADLINE + TICK * 5);
        // The group is stuck in the first source's (slow) read, after the other's (fast) read of the first
        // tick: the other leaves it for a clock of its own ...
        let (got, _) = take(other.as_mut());
        assert!(got.len() <= 3, "read behind a stuck source: {got:?}");
        // ... and the stuck one is stalled: its missed ticks fail its series.
        let (got, rounds) = take(stuck.as_mut());
        assert!(got.is_empty());
        assert_eq!(stalled(), 1);
        let failed: usize = rounds
            .iter()
            .filter_map(|r| r.reads[1].as_ref())
            .map(|r| r.report.failed)
            .sum();
        assert!(
            failed >= 10,
            "{failed} failures over more than 50 missed ticks"
        );
        assert!(rounds.iter().all(|r| r.times.is_none()));
        std::thread::sleep(TICK * 10);
        let (got, rounds) = take(other.as_mut());
        assert!(
            rounds.len() >= 3,
            "{} rounds on its own clock",
            rounds.len()
        );
        assert_eq!(got.len(), rounds.len() * 3);

        drop(held);
        // The stuck read comes back: its value, read late, is dropped; the next ones come on the clock.
        let t = Instant::now();
        let got = loop {
            std::thread::sleep(TICK);
            let (got, _) = take(stuck.as_mut());
            if stalled() == 0 && !got.is_empty() {
                break got;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "still stalled");
        };
        assert!(
            got.iter().all(|&(_, v, _)| v != Value::Gauge(1.0)),
            "{got:?}"
        );
    }

    #[test]
    fn a_quick_source_being_rediscovered_is_skipped_and_the_shared_clock_goes_on() {
        let gate = Arc::new(Mutex::new(()));
        let cadence: Arc<dyn Cadence> = Arc::new(Every(TICK));
        // Only its discovery waits on the gate: a read the shared clock began just before the discovery took
        // the source would otherwise hold the clock up for as long (the case of a source stuck in a read,
        // which sends the others off to clocks of their own: another test's).
        let mut busy = watch_with(
            Box::new(Gated {
                inventory: Inventory::default(),
                gate: gate.clone(),
                block_discover: true,
                block_sample: false,
                value: 0.0,
                quick: true,
            }),
            DEADLINE,
            DEADLINE * 3,
        );
        assert!(busy.discover().unwrap());
        let mut other = watch(Box::new(Counters {
            inventory: fast_series(2),
            n: 2,
            quick: true,
            round: 0,
        }));
        let start = Instant::now();
        let mut group = ClockGroup::new(start);
        assert!(busy.clock(cadence.clone(), start, &mut group));
        assert!(other.clock(cadence.clone(), start, &mut group));
        assert!(group.start(cadence, start));
        std::thread::sleep(TICK * 3);
        take(other.as_mut());
        // A discovery that hangs on the source's own thread, which holds the source meanwhile.
        let held = gate.lock().unwrap();
        let discovering = std::thread::spawn(move || {
            let r = busy.discover();
            (busy, r.is_err())
        });
        std::thread::sleep(DEADLINE + TICK * 10);
        // The shared clock did not wait for it: the other source was read at (nearly) every tick, on it.
        let (_, rounds) = take(other.as_mut());
        let ticks = (DEADLINE + TICK * 10).as_millis() / TICK.as_millis();
        assert!(
            rounds.len() as u128 >= ticks / 2,
            "{} rounds in {ticks} ticks",
            rounds.len()
        );
        drop(held);
        let (_, failed) = discovering.join().unwrap();
        assert!(!failed, "the discovery came back within its deadline");
    }
}
