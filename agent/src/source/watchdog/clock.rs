//! Watched sources on clocks of their own ([`Source::clock`]): a thread sleeps to each tier's next deadline and
//! reads then, and hands each source's round over on that source's channel, which the sampler drains when it
//! cuts a batch. A healthy round wakes nobody but the reading thread: no request a tick, no answer waited for
//! (a send to a receiver that is not waiting costs no system call). The sampler waits only for a round under
//! way when it drains (rare: it drains between the ticks), so every value read before the drain is taken by it.
//!
//! Quick sources (files: [`Source::quick_reads`]) share one such thread, a [`ClockGroup`]: one wake-up a tick
//! for all of them, where each wake-up of a thread costs several times a file's read. It reads every member's
//! fast tier first, then the slow ones, so the members' fast values stay on one tick. Any other source reads
//! on its own thread, the one that answers its requests ([`Clock`]).
//!
//! Stalls: each source's round under way is published ([`Busy`]); one still under way
//! [`super::SAMPLE_DEADLINE`] after its start makes that source stalled, as a `sample` that has not returned
//! does behind a request. A value read later than the deadline after its round began is dropped (a quick
//! source's whole round, handed over at its end, when the round ended late): nothing read late is handed out
//! behind batches already cut. A group's thread stuck in one member past the deadline holds up the others:
//! each of them leaves the group then ([`super::Watched`] sees it), for a clock on its own thread. The group
//! never waits for a member its own thread is calling (a discovery): that member misses the tick instead.
//!
//! Deadlines keep each tier's grid from the clock's start: after a round that ends past the next deadline
//! the ticks missed are skipped (counted as an overrun), and the next read is a whole period after its end,
//! as the sampler's own ticks do.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use commwatch_model::clock::unix_now_ns;

use super::{Request, Stamped};
use crate::source::{
    next_deadline, Cadence, Inventory, RoundReads, RoundTimes, Source, Tier, TierRead, Tiers,
};

/// A source shared by the thread that answers its requests and the clock that reads it.
pub(super) type Shared = Arc<Mutex<Box<dyn Source>>>;

/// The source, locked; `None` when a call into it panicked while it was locked (it is not called again).
pub(super) fn lock(source: &Shared) -> Option<MutexGuard<'_, Box<dyn Source>>> {
    source.lock().ok()
}

/// The source if it is free now: `Ok(None)` while the thread answering its requests holds it (a discovery);
/// `Err` when a call into it panicked.
fn lock_free(source: &Shared) -> Result<Option<MutexGuard<'_, Box<dyn Source>>>, ()> {
    match source.try_lock() {
        Ok(guard) => Ok(Some(guard)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Poisoned(_)) => Err(()),
    }
}

/// What a clocked source's reading thread hands over.
pub(super) enum Clocked {
    /// One value read by the round under way (a source that is not quick).
    Value(Stamped),
    /// The end of a round: each tier's report, its times, and the values a quick source read, in order.
    Round(Box<(RoundReads, RoundTimes, Vec<Stamped>)>),
}

/// When the round under way began (a source's, or a group's); none between rounds.
pub(super) struct Busy {
    epoch: Instant,
    /// Nanoseconds after `epoch`, plus one; 0: no round under way.
    since: AtomicU64,
}

impl Busy {
    pub(super) fn new(epoch: Instant) -> Busy {
        Busy {
            epoch,
            since: AtomicU64::new(0),
        }
    }

    fn set(&self, at: Option<Instant>) {
        let ns = at.map_or(0, |at| {
            u64::try_from(at.saturating_duration_since(self.epoch).as_nanos())
                .unwrap_or(u64::MAX - 1)
                + 1
        });
        self.since.store(ns, Ordering::Release);
    }

    /// When the round under way began.
    pub(super) fn get(&self) -> Option<Instant> {
        match self.since.load(Ordering::Acquire) {
            0 => None,
            ns => Some(self.epoch + Duration::from_nanos(ns - 1)),
        }
    }
}

/// Where one clocked source's rounds go, and what the sampler sees of the round under way.
pub(super) struct Outlet {
    pub(super) rounds: Sender<Clocked>,
    /// Value vectors handed back by the sampler (no allocation a round).
    pub(super) spares: Receiver<Vec<Stamped>>,
    pub(super) busy: Arc<Busy>,
    pub(super) deadline: Duration,
}

/// A round of one source under way.
struct Round {
    reads: RoundReads,
    times: RoundTimes,
    values: Vec<Stamped>,
}

impl Outlet {
    /// Begins a round of the tiers due at `due`.
    fn begin(&self, due: [Option<Instant>; 2]) -> Round {
        let now = Instant::now();
        self.busy.set(Some(now));
        let mut values = self.spares.try_recv().unwrap_or_default();
        values.clear();
        Round {
            reads: [None, None],
            times: RoundTimes {
                due,
                started: now,
                ended: now,
                overran: Tiers::NONE,
            },
            values,
        }
    }

    /// Reads `tier` of `source` into `round`, each value stamped with the wall clock as it is read: a quick
    /// source's values kept for the round's end, any other's handed over at once unless read late.
    fn read(&self, source: &mut dyn Source, tier: Tier, round: &mut Round) {
        let quick = source.quick_reads();
        let late = round.times.started + self.deadline;
        let began = Instant::now();
        let values = &mut round.values;
        let report = source.sample(tier, &mut |i, v| {
            let read = (i, v, unix_now_ns());
            if quick {
                values.push(read);
            } else if Instant::now() <= late {
                let _ = self.rounds.send(Clocked::Value(read));
            }
        });
        round.reads[tier.index()] = Some(TierRead {
            report,
            took: began.elapsed(),
        });
    }

    /// Ends `round`; `next` holds the next deadline of each tier due (a tier the round did not read is left
    /// out of its overruns): what it read late is dropped. False when the [`super::Watched`] is gone.
    fn end(&self, mut round: Round, next: [Option<Instant>; 2]) -> bool {
        let ended = Instant::now();
        round.times.ended = ended;
        for tier in Tier::ALL {
            if round.reads[tier.index()].is_none() {
                round.times.due[tier.index()] = None;
            }
        }
        if ended > round.times.started + self.deadline {
            round.values.clear();
        }
        for tier in Tier::ALL {
            let read = round.reads[tier.index()].is_some();
            if read && next[tier.index()].is_some_and(|n| n <= ended) {
                round.times.overran = round.times.overran.with(tier);
            }
        }
        let sent = self
            .rounds
            .send(Clocked::Round(Box::new((
                round.reads,
                round.times,
                round.values,
            ))))
            .is_ok();
        self.busy.set(None);
        sent
    }
}

/// The tiers `inventory` has series in.
fn tiers_with_series(inventory: &Inventory) -> Tiers {
    inventory
        .series
        .iter()
        .fold(Tiers::NONE, |tiers, s| tiers.with(s.tier))
}

/// Each tier's deadlines, on the grid of its period from a start.
struct Deadlines {
    cadence: Arc<dyn Cadence>,
    due: [Instant; 2],
}

impl Deadlines {
    /// The first deadlines at or after now on the grids from `start`.
    fn new(cadence: Arc<dyn Cadence>, start: Instant) -> Deadlines {
        let now = Instant::now();
        let due = Tier::ALL.map(|tier| {
            let period = cadence.period(tier).max(Duration::from_millis(1));
            let behind = now.saturating_duration_since(start);
            let ticks = behind.as_nanos().div_ceil(period.as_nanos());
            start + period * u32::try_from(ticks).unwrap_or(u32::MAX)
        });
        Deadlines { cadence, due }
    }

    /// The next deadline of `tiers`.
    fn next(&self, tiers: Tiers) -> Option<Instant> {
        tiers.iter().map(|t| self.due[t.index()]).min()
    }

    /// Of `tiers`, those due at `now`, with their deadlines.
    fn due(&self, tiers: Tiers, now: Instant) -> (Tiers, [Option<Instant>; 2]) {
        let due = tiers
            .iter()
            .filter(|t| self.due[t.index()] <= now)
            .fold(Tiers::NONE, Tiers::with);
        let at = Tier::ALL.map(|t| due.contains(t).then_some(self.due[t.index()]));
        (due, at)
    }

    /// The deadlines after those of `tiers`, read now (each a period on).
    fn following(&self, tiers: Tiers) -> [Option<Instant>; 2] {
        Tier::ALL.map(|t| {
            tiers
                .contains(t)
                .then(|| self.due[t.index()] + self.cadence.period(t))
        })
    }

    /// Moves the deadlines of `tiers` on from a round that ended at `ended` ([`next_deadline`]).
    fn advance(&mut self, tiers: Tiers, ended: Instant) {
        for tier in tiers.iter() {
            let at = &mut self.due[tier.index()];
            *at = next_deadline(*at, self.cadence.period(tier), ended).0;
        }
    }
}

/// What the thread of a source is given to keep its own clock.
pub(super) struct Setup {
    pub(super) cadence: Arc<dyn Cadence>,
    pub(super) start: Instant,
    pub(super) outlet: Outlet,
}

/// The clock of a source on its own thread.
pub(super) struct Clock {
    outlet: Outlet,
    deadlines: Deadlines,
}

/// What the source's thread does next.
pub(super) enum Next {
    Request(Request),
    /// A tier is due: read a round.
    Round,
    /// The [`super::Watched`] was dropped, or the source panicked.
    Gone,
}

impl Clock {
    pub(super) fn new(setup: Setup) -> Clock {
        Clock {
            deadlines: Deadlines::new(setup.cadence, setup.start),
            outlet: setup.outlet,
        }
    }

    /// Waits for the next request, or until the next deadline of a tier the source has series in.
    pub(super) fn next(&self, source: &Shared, requests: &Receiver<Request>) -> Next {
        let Some(tiers) = lock(source).map(|s| tiers_with_series(s.inventory())) else {
            return Next::Gone;
        };
        let Some(wake) = self.deadlines.next(tiers) else {
            return requests.recv().map_or(Next::Gone, Next::Request);
        };
        let now = Instant::now();
        if wake <= now {
            return Next::Round;
        }
        match requests.recv_timeout(wake - now) {
            Ok(request) => Next::Request(request),
            Err(RecvTimeoutError::Timeout) => Next::Round,
            Err(RecvTimeoutError::Disconnected) => Next::Gone,
        }
    }

    /// Reads the tiers due now (fast first) and hands the round over; moves their deadlines on.
    pub(super) fn read(&mut self, source: &mut dyn Source) {
        let (tiers, due) = self
            .deadlines
            .due(tiers_with_series(source.inventory()), Instant::now());
        if tiers.is_empty() {
            return;
        }
        let mut round = self.outlet.begin(due);
        for tier in tiers.iter() {
            self.outlet.read(source, tier, &mut round);
        }
        let ended = Instant::now();
        self.outlet.end(round, self.deadlines.following(tiers));
        self.deadlines.advance(tiers, ended);
    }
}

/// A member of a [`ClockGroup`].
struct Member {
    source: Shared,
    outlet: Outlet,
    /// Set by the sampler's side when the source left the group (for a clock of its own).
    left: Arc<AtomicBool>,
    /// The tiers it has series in, and the number of series they were counted over.
    tiers: Tiers,
    counted: usize,
}

/// What a member of a group shares with its [`super::Watched`]: the group's round under way, and the flag
/// that takes it out of the group.
pub(super) struct Membership {
    pub(super) group: Arc<Busy>,
    pub(super) left: Arc<AtomicBool>,
}

/// Quick sources read on one thread, on one clock (see the module documentation). Built by the sampler as it
/// gives its sources their clocks ([`Source::clock`]), then started.
pub struct ClockGroup {
    members: Vec<Member>,
    busy: Arc<Busy>,
    /// Told the deadline of each round read, once it is handed over.
    after_round: Option<Box<dyn Fn(Instant) + Send>>,
}

impl ClockGroup {
    /// An empty group whose rounds are timed from `epoch`.
    pub fn new(epoch: Instant) -> ClockGroup {
        ClockGroup {
            members: Vec::new(),
            busy: Arc::new(Busy::new(epoch)),
            after_round: None,
        }
    }

    /// Has `told` called with each round's deadline (its earliest tier's) once the round is handed over: the
    /// sampler takes the rounds then, woken by the group's thread rather than by a timer of its own.
    pub fn after_round(&mut self, told: Box<dyn Fn(Instant) + Send>) {
        self.after_round = Some(told);
    }

    /// Adds `source`, its rounds going to `outlet`.
    pub(super) fn join(&mut self, source: Shared, outlet: Outlet) -> Membership {
        let left = Arc::new(AtomicBool::new(false));
        self.members.push(Member {
            source,
            outlet,
            left: left.clone(),
            tiers: Tiers::NONE,
            counted: 0,
        });
        Membership {
            group: self.busy.clone(),
            left,
        }
    }

    /// Starts the group's thread, reading on the grids of `cadence` from `start`; false when it cannot be
    /// started (said in a warning), or there is no member. The thread ends when every member has left or
    /// is gone.
    pub fn start(self, cadence: Arc<dyn Cadence>, start: Instant) -> bool {
        if self.members.is_empty() {
            return false;
        }
        let spawned = std::thread::Builder::new()
            .name("cw-src-clock".into())
            .spawn(move || self.run(Deadlines::new(cadence, start)));
        if let Err(e) = &spawned {
            tracing::warn!(error = %e, "cannot start the sources' clock thread");
        }
        spawned.is_ok()
    }

    /// The group's thread: sleeps to the next deadline of a tier some member has series in, reads every
    /// member's due tiers, fast first.
    fn run(mut self, mut deadlines: Deadlines) {
        let mut gone = Vec::new();
        let mut rounds = Vec::new();
        self.refresh(&mut gone);
        loop {
            self.members.retain(|m| !m.left.load(Ordering::Acquire));
            if self.members.is_empty() {
                return;
            }
            // With no tier to read, a look again in a while for a member whose discovery found series.
            let now = Instant::now();
            let wake = deadlines
                .next(self.tiers())
                .unwrap_or(now + Duration::from_secs(1));
            if wake > now {
                std::thread::sleep(wake - now);
            }
            let now = Instant::now();
            self.busy.set(Some(now));
            self.refresh(&mut gone);
            let (due, at) = deadlines.due(self.tiers(), now);
            if !due.is_empty() {
                let next = deadlines.following(due);
                self.round(due, at, next, &mut gone, &mut rounds);
                deadlines.advance(due, Instant::now());
            }
            self.busy.set(None);
            if let (Some(told), Some(at)) = (&self.after_round, at.iter().flatten().min()) {
                told(*at);
            }
            // `gone` matches `members` one to one.
            let mut k = 0;
            self.members.retain(|_| {
                k += 1;
                !gone[k - 1]
            });
        }
    }

    /// The tiers some member has series in.
    fn tiers(&self) -> Tiers {
        self.members
            .iter()
            .flat_map(|m| m.tiers.iter())
            .fold(Tiers::NONE, Tiers::with)
    }

    /// Takes each member's tiers from its inventory now where a discovery added series (series are never
    /// removed from an inventory: its length says whether it changed); which members are gone (a call into
    /// the source panicked, or nothing else holds it).
    fn refresh(&mut self, gone: &mut Vec<bool>) {
        gone.clear();
        for m in &mut self.members {
            // Held here alone: its [`super::Watched`] and the thread answering its requests are gone (a member
            // with no series would never find out by a failed hand-over).
            if Arc::strong_count(&m.source) == 1 {
                gone.push(true);
                continue;
            }
            let s = match lock_free(&m.source) {
                Ok(Some(s)) => s,
                // Being rediscovered: its tiers as they were.
                Ok(None) => {
                    gone.push(false);
                    continue;
                }
                Err(()) => {
                    gone.push(true);
                    continue;
                }
            };
            let series = &s.inventory().series;
            if series.len() != m.counted {
                m.tiers = tiers_with_series(s.inventory());
                m.counted = series.len();
            }
            gone.push(false);
        }
    }

    /// One round of the tiers `due` (deadlines `at`, the next ones `next`) over the members: each tier over
    /// every member before the next tier; a member's round is handed over after its last tier. Marks in
    /// `gone` the members whose source panicked, or whose [`super::Watched`] is gone; `rounds` is room for
    /// the rounds under way (kept between rounds).
    fn round(
        &mut self,
        due: Tiers,
        at: [Option<Instant>; 2],
        next: [Option<Instant>; 2],
        gone: &mut [bool],
        rounds: &mut Vec<Option<Round>>,
    ) {
        rounds.clear();
        rounds.resize_with(self.members.len(), || None);
        for tier in due.iter() {
            for (k, m) in self.members.iter_mut().enumerate() {
                if gone[k] || !m.tiers.contains(tier) || m.left.load(Ordering::Acquire) {
                    continue;
                }
                let mut source = match lock_free(&m.source) {
                    Ok(Some(source)) => source,
                    // Its own thread holds it (a discovery, between two ticks as a rule): this tier is not
                    // read this tick, rather than the group waiting for it.
                    Ok(None) => continue,
                    Err(()) => {
                        gone[k] = true;
                        continue;
                    }
                };
                let mine = Tier::ALL.map(|t| at[t.index()].filter(|_| m.tiers.contains(t)));
                let round = rounds[k].get_or_insert_with(|| m.outlet.begin(mine));
                let outlet = &m.outlet;
                let read = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    outlet.read(source.as_mut(), tier, round);
                }));
                drop(source);
                if read.is_err() {
                    m.outlet.busy.set(None);
                    gone[k] = true;
                    continue;
                }
                if due.iter().filter(|t| m.tiers.contains(*t)).last() == Some(tier) {
                    if let Some(r) = rounds[k].take() {
                        gone[k] |= !m.outlet.end(r, next);
                    }
                }
            }
        }
        // A round whose last tier was not read (its source was busy) ends with what it read.
        for (k, m) in self.members.iter().enumerate() {
            if let Some(r) = rounds[k].take() {
                gone[k] |= !m.outlet.end(r, next);
            }
        }
    }
}

/// The sampler's side of a clocked source: what [`super::Watched`] keeps.
pub(super) struct Clocking {
    pub(super) rounds: Receiver<Clocked>,
    pub(super) spares: Sender<Vec<Stamped>>,
    pub(super) busy: Arc<Busy>,
    pub(super) cadence: Arc<dyn Cadence>,
    pub(super) start: Instant,
    /// The group that reads the source, while it does.
    pub(super) membership: Option<Membership>,
    /// When the last round taken began: a round still marked under way with that start has ended.
    pub(super) last_started: Option<Instant>,
    /// While the source is stalled (or its thread gone): up to when its missed ticks were failed, per tier.
    pub(super) missed: [Instant; 2],
    /// The thread was seen gone (its missed ticks are counted from then).
    pub(super) dead_seen: bool,
}

impl Clocking {
    /// The sampler's side of a source read on the grids of `cadence` from `start`, and the [`Outlet`] its
    /// reading thread hands the rounds to.
    pub(super) fn new(
        cadence: Arc<dyn Cadence>,
        start: Instant,
        deadline: Duration,
    ) -> (Clocking, Outlet) {
        let (sender, rounds) = std::sync::mpsc::channel();
        let (spares, spare) = std::sync::mpsc::channel();
        let busy = Arc::new(Busy::new(start));
        let outlet = Outlet {
            rounds: sender,
            spares: spare,
            busy: busy.clone(),
            deadline,
        };
        let clocking = Clocking {
            rounds,
            spares,
            busy,
            cadence,
            start,
            membership: None,
            last_started: None,
            missed: [start, start],
            dead_seen: false,
        };
        (clocking, outlet)
    }

    /// Whether the source's group has been stuck in another member's round past `deadline` (this source's
    /// own round is not under way): it is to leave the group.
    pub(super) fn held_up(&self, deadline: Duration, now: Instant) -> bool {
        let Some(m) = &self.membership else {
            return false;
        };
        let mine = self.busy.get().filter(|&s| Some(s) != self.last_started);
        mine.is_none()
            && m.group
                .get()
                .is_some_and(|s| now.saturating_duration_since(s) > deadline)
    }

    /// Takes the source out of its group (what the group handed over is taken first: the caller drained
    /// `rounds`); the [`Setup`] for a clock on its own thread, the same grid on, with channels of its own (a
    /// round the group began before it saw the source leave is lost with the old ones).
    pub(super) fn leave(&mut self, deadline: Duration) -> Setup {
        if let Some(m) = self.membership.take() {
            m.left.store(true, Ordering::Release);
        }
        let (clocking, outlet) = Clocking::new(self.cadence.clone(), self.start, deadline);
        self.rounds = clocking.rounds;
        self.spares = clocking.spares;
        self.busy = clocking.busy;
        self.last_started = None;
        Setup {
            cadence: self.cadence.clone(),
            start: self.start,
            outlet,
        }
    }

    /// The number of `tier`'s ticks missed since they were last counted (at most up to `now`), counted.
    pub(super) fn count_missed(&mut self, tier: Tier, now: Instant) -> usize {
        let period = self.cadence.period(tier).max(Duration::from_millis(1));
        let since = &mut self.missed[tier.index()];
        let behind = now.saturating_duration_since(*since);
        let n = u32::try_from(behind.as_nanos() / period.as_nanos()).unwrap_or(u32::MAX);
        *since += period * n;
        n as usize
    }
}
