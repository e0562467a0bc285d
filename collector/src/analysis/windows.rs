//! Rule inputs kept as samples arrive: each node's windows of the series the rules read
//! ([`input::reads_window`]) held from one evaluation to the next ([`NodeWindows`]), so that an evaluation
//! reads from the store only the samples that came since the last one and drops those that left the window.
//!
//! Why: rebuilt from the rings, a node's input decoded each 1 Hz series' open part (minutes of samples) to read
//! its newest 20 s, every evaluation, about a thousand series a demo node: half of the 1.05–1.5 ms of CPU one
//! node's evaluation cost (BENCHMARKS.md, "Acks and findings' age with the analysis at nice 5"). Kept here, a
//! window costs the new samples (read row-major from the node's head, `NodeState::samples_after`) and the
//! ones it drops.
//!
//! Contract: the input built from kept windows ([`NodeWindows::input`]) is the input the store's rings give
//! ([`input::node_input`]) at the same instant: the same samples, derived by the same code
//! ([`input::node_input_from`]); only a link's activity is reached another way (its intervals and their runs kept
//! from one evaluation to the next, only the new samples' derived, and analysed as the copies would be:
//! `LinkIntervals`, [`activity::Sliding`]). The windows start over when the node's layout changes (an inventory, a node
//! created again) or an evaluation asks for an earlier window than the last; a series whose window holds more
//! samples than its ring keeps (an agent sending faster than the tier it stated) is read from the store.
//! `tests` compare both inputs field by field, and their findings, through counter resets, gaps, series and
//! links that come and go, and the window sliding; the detection benchmark compares the findings of every
//! evaluation with the whole-fleet rebuild's.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use commwatch_model::{Link, SeriesKind};

use super::activity::{self, Activity};
use super::input::{self, NodeInput, Scratch, StoreWindows, Windows};
use crate::steps::{bandwidth, busy};
use crate::store::{NodeState, Series};

/// One series' kept window: `(tick, value)` of its samples, oldest first. A ring, so that dropping the samples
/// that left the window moves none of the others (moving every window's samples was a fifth of an evaluation
/// from kept windows).
type Window = VecDeque<(u64, u64)>;

/// The samples a full window ([`input::WINDOW_NS`]) of `w`'s series holds, at its samples' mean interval so
/// far (`n` gives their ticks' times), at most `cap` (the series' ring capacity: a window that holds more is
/// read from the store); 0 with fewer than two samples or none of their times.
fn full_window(w: &Window, n: &NodeState, cap: usize) -> usize {
    let time = |x: Option<&(u64, u64)>| x.and_then(|x| n.tick_time(x.0));
    let span = match (time(w.front()), time(w.back())) {
        (Some(a), Some(z)) if z > a => (z - a) as u128,
        _ => return 0,
    };
    let intervals = (w.len() as u128).saturating_sub(1);
    let full = intervals * input::WINDOW_NS as u128 / span + 1;
    usize::try_from(full).unwrap_or(usize::MAX).min(cap)
}

/// The room a full kept window `w` grows to: a full window ([`full_window`]) and an eighth more (a series
/// sampled unevenly holds more in some windows than its mean interval gives), sized once; past that, or
/// without an estimate, a quarter more than it holds (not twice: a window's length stays about the same from
/// one evaluation to the next, and doubling left up to half of every window's room unused). Grown by a quarter
/// alone, a 20 Hz series' window reallocated 15 times as it filled.
fn window_room(w: &Window, n: &NodeState, cap: usize) -> usize {
    let full = full_window(w, n, cap);
    let len = w.len();
    (full + full / 8 + 4).max(len + len / 4 + 4)
}

/// The position of the first of `w`'s samples whose tick `in_window` holds (`w.len()`: none), looked for from
/// `guess` (the samples that left a window are a prefix: a series' ticks rise with its samples, and so do
/// their times), touching the samples between the guess and the answer only.
fn first_in_window(w: &Window, guess: usize, in_window: impl Fn(u64) -> bool) -> usize {
    let mut k = guess.min(w.len());
    while k > 0 && w.get(k - 1).is_some_and(|x| in_window(x.0)) {
        k -= 1;
    }
    while w.get(k).is_some_and(|x| !in_window(x.0)) {
        k += 1;
    }
    k
}

/// The place in `NodeWindows::kept` of a slot without a window (no sample of it kept yet).
const NO_WINDOW: u32 = u32::MAX;

/// The window of `slot` among `kept`, placed by `at` (see `NodeWindows::at`).
fn window_of<'k>(kept: &'k [Window], at: &[u32], slot: usize) -> Option<&'k Window> {
    kept.get(*at.get(slot)? as usize)
}

/// One node's kept windows.
#[derive(Debug, Default)]
pub struct NodeWindows {
    /// The node's [`NodeState::layout`] the windows were read under (`None`: nothing read yet).
    layout: Option<u64>,
    /// The newest tick read (`None`: none yet).
    cursor: Option<u64>,
    /// Start of the latest window, Unix ns: samples stamped before it are dropped.
    since_ns: i64,
    /// Whether each slot's window is kept ([`input::reads_window`]).
    wanted: Vec<bool>,
    /// The slots whose kept windows hold samples, ascending: the update's loops and the input's walk
    /// ([`input::Windows::held_slots`]) visit those only. A wanted series the agent describes but does not
    /// send (the demo node's 720 NVLink error counters) keeps an empty window: visiting every wanted slot
    /// read two thirds of the windows' headers and series for nothing (issue 35).
    live: Vec<usize>,
    /// The places in `kept` of the windows `live` lists, in the same order.
    live_at: Vec<u32>,
    /// Slots whose windows were empty before an update's new samples (they join `live`).
    joined: Vec<usize>,
    /// Each slot's window's place in `kept` ([`NO_WINDOW`]: none yet).
    at: Vec<u32>,
    /// The kept windows, each `(tick, value)` of a wanted series' samples from `since_ns` on, oldest first,
    /// at the place its series' slot has in `at`: a window takes the next place when its series' first sample
    /// comes (not the place of its slot), so that the windows that hold samples lie together. By slot, the
    /// ≈340 live windows' headers of a demo node lay among the 720 never-sent NVLink error counters' and
    /// the series no rule reads, each on a cache line of its own at every update (issue 35).
    kept: Vec<Window>,
    /// By place, the samples the latest update dropped from the window: where the next one's drop is looked
    /// for first ([`first_in_window`]).
    dropped: Vec<u32>,
    /// Each slot's ring capacity, samples (fixed under a layout): a window holding more is read from the store.
    caps: Vec<u32>,
    /// The node's last input, given back after its evaluation ([`WindowCache::give_back`]): the next one is
    /// built into its allocations (its links' vectors, maps and keys).
    spare: Option<NodeInput>,
    /// Buffers the input is built with.
    scratch: Scratch,
    /// Each kept window's oldest tick before an update's new samples (`None`: empty), as `live` lists them.
    fronts: Vec<Option<u64>>,
    /// The sampling intervals of each link whose activity a rule reads, by link index.
    links: Vec<LinkIntervals>,
    /// Updates at which a read link's intervals were derived from its kept windows, and those at which not
    /// (too few samples, out of time order: its activity analysed from copies).
    derivations: (u64, u64),
    /// Read links' grid samples whose other direction was interpolated, and provisional intervals derived
    /// again (`LinkIntervals::split`), over every update.
    splits: (u64, u64),
    /// Derived links' median interval lengths worked out, those taken from a link of the same intervals'
    /// bounds (`LinkIntervals::period_ns`), and of those the ones found the same by their new intervals only
    /// (`NodeWindows::settle_periods`).
    periods: (u64, u64, u64),
}

/// One link whose activity a rule reads, and how its activity is derived from its kept byte windows: the
/// window's sampling intervals (on the ticks of one direction, the grid: transmit, or receive when transmit
/// holds fewer than three samples; each interval's bytes the larger direction's between two samples, the
/// other's interpolated where its ticks differ, [`activity::other_bytes`]) are kept from one evaluation to the
/// next with their runs above the activity floor ([`activity::Sliding`]): an update drops the intervals whose
/// first sample left the window and derives those of the new samples only, and the activity is
/// [`activity::Sliding::activity`], equal to [`activity::of_intervals`] on the window's intervals. Where the
/// grid holds fewer than three samples, or two are not in time order, the windows are copied out and analysed
/// as [`activity::analyse`] does.
///
/// The other direction's bytes over an interval depend on its samples around the interval's two ends only:
/// once it holds a sample at or after an interval's end, later samples do not change them. An interval whose
/// end is past the other's newest sample (one direction read on the next tick, its sample not yet in) is
/// derived again at the next update, as is every interval when the other's oldest sample left and its window
/// now starts after the grid's (the first intervals' other bytes are then 0, as on copies).
///
/// Kept: 32 B per interval of each read link (its bounds, bytes and rate) and its runs. Deriving the intervals
/// anew at each evaluation cost no more than keeping them while the whole window's runs were analysed again
/// at each (BENCHMARKS.md, "Links' activity and the input's walk from kept windows"); with the runs kept too,
/// an evaluation analyses only the runs the window's slide cut or grew.
#[derive(Debug, Default)]
struct LinkIntervals {
    /// The link's index in the node's links.
    link: usize,
    /// Slots of its transmit and receive byte counters (the last of each among the node's series, as
    /// [`input::node_input_from`] takes them).
    slots: (Option<usize>, Option<usize>),
    /// The window's intervals and runs, when derived at the latest update (`Some`): on which window (transmit
    /// or not) and with the other direction's bytes or without, and the tick of the sample the settled ones
    /// end at (those after it are `provisional`).
    sliding: activity::Sliding,
    derived: Option<((bool, bool), u64)>,
    /// The newest intervals, derived while the other direction's newest sample was older than their end:
    /// derived again at the next update.
    provisional: usize,
    /// The time of the other direction's oldest sample at the latest update (`None`: it had none).
    other_first: Option<i64>,
    /// At the latest update: grid samples at which the other direction had no sample at the same tick (its
    /// value interpolated), and provisional intervals derived again.
    split: (u64, u64),
    /// Intervals of the previous update's kept by the latest one (the newest of them; 0 when they were all
    /// derived anew): the others were derived from its new samples.
    retained: usize,
    /// The earlier link (its position in `NodeWindows::links`) whose intervals had the same bounds as this
    /// one's at the latest update, and whose median interval length this one took (`None`: none had).
    same_as: Option<usize>,
    /// The link it was last updated with, its activity floor ([`busy::active_floor`] of its capacity) and
    /// whether its peaks are found ([`input::reads_peaks`]): worked out again when the node's link is another
    /// (its `Arc` is held here, so a new one is never at the old one's address). Read behind the link's
    /// pointer at each update and evaluation, they were a cache miss or two a read link.
    floor: Option<(Arc<Link>, f64, bool)>,
    /// The median length of the intervals derived at the latest update, nanoseconds (`None`: not derived):
    /// worked out once for the links whose intervals have the same bounds (a node's ports read together
    /// are sampled at the same ticks), not once per link.
    period_ns: Option<i64>,
}

impl LinkIntervals {
    /// The link's activity floor on node `n` (see `floor`).
    fn floor(&mut self, n: &NodeState) -> f64 {
        let link = n.links().get(self.link).map(|x| &x.link);
        match (&self.floor, link) {
            (Some((held, floor, _)), Some(link)) if Arc::ptr_eq(held, link) => *floor,
            (_, Some(link)) => {
                let floor = busy::active_floor(link.capacity_bytes_per_second);
                self.floor = Some((link.clone(), floor, input::reads_peaks(link)));
                floor
            }
            (_, None) => {
                self.floor = None;
                busy::active_floor(None)
            }
        }
    }

    /// The link's byte windows in `kept` (placed by `at`, `NodeWindows::at`): the one the intervals are on
    /// (transmit, or receive when transmit holds fewer than three samples) and the other, and whether the
    /// first is transmit's.
    fn windows<'k>(&self, (kept, at): (&'k [Window], &[u32])) -> (&'k Window, &'k Window, bool) {
        const NONE: &Window = &VecDeque::new();
        let window = |s: Option<usize>| s.and_then(|i| window_of(kept, at, i)).unwrap_or(NONE);
        let (tx, rx) = (window(self.slots.0), window(self.slots.1));
        if tx.len() >= 3 {
            (tx, rx, true)
        } else {
            (rx, tx, false)
        }
    }

    /// Brings the link's intervals up to its windows in `kept` on node `n`: drops those whose first sample
    /// left the window and the provisional ones, derives those of the new samples, and settles the runs above
    /// `floor`. Left underived (`derived` `None`) when the grid holds fewer than three samples, or a sample's
    /// tick is no longer held, or two samples are not in time order (then the activity is analysed from
    /// copies of the windows, as the rings' rebuild does).
    fn slide(
        &mut self,
        (kept, at, caps): (&[Window], &[u32], &[u32]),
        n: &NodeState,
        floor: f64,
        buffers: &mut activity::Buffers,
    ) {
        let (grid, other, on_tx) = self.windows((kept, at));
        (self.retained, self.split) = (0, (0, 0));
        let mode = (on_tx, !other.is_empty());
        let time = |x: Option<&(u64, u64)>| x.and_then(|x| n.tick_time(x.0));
        // The other's oldest sample left and its window starts after the grid's: the first intervals'
        // other bytes changed (rare: a tick split across the window's start, a direction that paused).
        let other_first = time(other.front());
        let front_moved = other_first != self.other_first
            && matches!((other_first, time(grid.front())), (Some(o), Some(g)) if o > g);
        self.other_first = other_first;
        // The sample the settled intervals end at, still in the window (searched from the newest: a second's
        // samples are new).
        let held = match self.derived {
            Some((m, end)) if m == mode && !front_moved && grid.len() >= 3 => {
                let mut back = grid.iter().rev().take_while(|s| s.0 >= end);
                back.position(|s| s.0 == end).map(|b| grid.len() - 1 - b)
            }
            _ => None,
        };
        self.derived = None;
        if grid.len() < 3 {
            self.sliding.clear();
            return;
        }
        let provisional = std::mem::take(&mut self.provisional);
        self.split.1 += provisional as u64;
        self.sliding.drop_newest(provisional);
        let from = match held {
            // Intervals before the `k`th sample's left with their first sample.
            Some(k) if self.sliding.intervals().len() >= k => {
                let gone = self.sliding.intervals().len() - k;
                self.sliding.drop_oldest(gone);
                self.retained = k;
                k
            }
            _ => {
                self.sliding.clear();
                0
            }
        };
        // Room for a full window of the grid's series, sized from the samples it holds.
        let grid_slot = if on_tx { self.slots.0 } else { self.slots.1 };
        let cap = grid_slot
            .and_then(|i| caps.get(i))
            .map_or(0, |&c| c as usize);
        let window = full_window(grid, n, cap).saturating_sub(1);
        // The kept ones must start at the window's first sample.
        let first = self.sliding.intervals().first().map(|x| x.0);
        if first.is_some() && first != time(grid.front()) {
            self.retained = 0;
            self.sliding.clear();
            return self.derive(grid, other, (0, window), (n, mode, floor), buffers);
        }
        self.derive(grid, other, (from, window), (n, mode, floor), buffers)
    }

    /// Derives the intervals from sample `from` of `grid` on (the last one held ends there), with `other`'s
    /// bytes beside, and settles their runs; `window`: the intervals a full window of `grid`'s series holds
    /// (0: not known), what the intervals' room is sized for ([`activity::Sliding::reserve`]).
    fn derive(
        &mut self,
        grid: &Window,
        other: &Window,
        (from, window): (usize, usize),
        (n, mode, floor): (&NodeState, (bool, bool), f64),
        buffers: &mut activity::Buffers,
    ) {
        let Some(mut prev) = grid.get(from).and_then(|s| n.tick_time(s.0)) else {
            self.sliding.clear();
            return;
        };
        self.sliding
            .reserve(grid.len().saturating_sub(from + 1), window);
        let other_last = other.back().and_then(|s| n.tick_time(s.0));
        let mut at = OtherAt {
            other,
            n,
            next: from,
            searched: 0,
        };
        let mut prev_at = at.get(grid[from].0, prev);
        // The sample the settled intervals end at: the last one the other's samples cover.
        let mut settled = from;
        for k in from + 1..grid.len() {
            let t = match n.tick_time(grid[k].0) {
                Some(t) if t > prev => t,
                _ => {
                    self.sliding.clear();
                    return;
                }
            };
            let own = activity::delta(grid[k - 1].1, grid[k].1);
            let now_at = at.get(grid[k].0, t);
            self.sliding
                .push((prev, t, own.max(activity::other_bytes(prev_at, now_at))));
            // Without the other's samples, its bytes are 0 whatever comes (a new sample changes the mode).
            if other_last.is_none_or(|o| t <= o) {
                settled = k;
            }
            (prev, prev_at) = (t, now_at);
        }
        self.sliding.settle(floor, buffers);
        self.split.0 += at.searched;
        self.provisional = grid.len() - 1 - settled;
        self.derived = Some((mode, grid[settled].0));
    }
}

/// The other direction's cumulative value at the grid's samples, in ascending order, as
/// [`bandwidth::acc_at`] gives it on copies of its window: the sample at the same tick where there is one (a
/// port's two counters read together), else [`bandwidth::acc_between`] the samples around.
struct OtherAt<'w> {
    other: &'w Window,
    n: &'w NodeState,
    /// Where the next grid sample's counterpart is looked for first.
    next: usize,
    /// Grid samples without a counterpart at their tick.
    searched: u64,
}

impl OtherAt<'_> {
    /// The value at the grid sample of `tick`, stamped `t`: `None` outside the other's samples.
    fn get(&mut self, tick: u64, t: i64) -> Option<(u64, f64)> {
        if let Some(&(k, v)) = self.other.get(self.next) {
            if k == tick {
                self.next += 1;
                return Some((v, 0.0));
            }
        }
        self.searched += 1;
        let time = |i: usize| self.other.get(i).and_then(|s| self.n.tick_time(s.0));
        // The first sample stamped after `t` (ticks no longer held are older than every one held).
        let j = self
            .other
            .partition_point(|s| self.n.tick_time(s.0).is_none_or(|x| x <= t));
        self.next = j;
        let (first, last) = (time(0)?, time(self.other.len().checked_sub(1)?)?);
        if t < first || t > last {
            return None;
        }
        let before = (time(j - 1)?, self.other[j - 1].1);
        let after = match self.other.get(j) {
            Some(s) => Some((time(j)?, s.1)),
            None => None,
        };
        Some(bandwidth::acc_between(before, after, t))
    }
}

impl NodeWindows {
    /// The input of node `n` (under its lock) with windows from `since_ns` on: the new samples read and the
    /// old ones dropped first.
    pub fn input(&mut self, n: &NodeState, since_ns: i64) -> NodeInput {
        self.update(n, since_ns);
        let (spare, mut scratch) = (self.spare.take(), std::mem::take(&mut self.scratch));
        let kept = Kept {
            n,
            w: self,
            store: StoreWindows(n),
        };
        let out = input::node_input_into(n, since_ns, &kept, spare, &mut scratch);
        self.scratch = scratch;
        out
    }

    /// Brings every kept window up to `n`'s newest sample and drops what is older than `since_ns` (or no
    /// longer held by the node).
    fn update(&mut self, n: &NodeState, since_ns: i64) {
        if self.layout != Some(n.layout()) || since_ns < self.since_ns {
            self.start_over(n);
        }
        self.since_ns = since_ns;
        let kept = &mut self.kept;
        // Each window's oldest tick and newest sample read first, in a loop of loads independent of one
        // another: their cache misses (two a window, each window in its own allocation) overlap here instead
        // of waiting one by one where the old samples are searched for and the new ones pushed below.
        // The sample where the previous update's drop ended is read too: the drop below is looked for from
        // there (a window slides by about as many samples at each update), not walked from the oldest sample
        // (a 20 Hz window's second of old samples spans five cache lines, each a miss: a fifth of the update).
        let (fronts, dropped) = (&mut self.fronts, &self.dropped);
        fronts.clear();
        let mut newest = 0u64;
        for &p in &self.live_at {
            let w = kept.get(p as usize);
            fronts.push(w.and_then(VecDeque::front).map(|x| x.0));
            newest ^= w.and_then(VecDeque::back).map_or(0, |x| x.1);
            let guess = dropped.get(p as usize).map_or(0, |&d| d as usize);
            newest ^= w.and_then(|w| w.get(guess)).map_or(0, |x| x.0);
        }
        std::hint::black_box(newest);
        // What left the window dropped before the new samples are pushed, while the windows' oldest samples
        // are still in cache (dropped after the push, which walks the head's rows, the search's first load
        // missed them again: 15 % of the input's own time in a profile of `measure::analysis_cost`). The same
        // samples go: every new one is stamped since `since_ns` ([`NodeState::samples_after`]).
        let in_window = |tick: u64| n.tick_time(tick).is_some_and(|t| t >= since_ns);
        for (&p, front) in self.live_at.iter().zip(self.fronts.iter()) {
            let p = p as usize;
            let (Some(w), Some(d)) = (kept.get_mut(p), self.dropped.get_mut(p)) else {
                continue;
            };
            // Nothing left (a slow series between its samples): the guess stays for the next drop.
            if front.is_none_or(in_window) {
                continue;
            }
            let gone = first_in_window(w, *d as usize, in_window);
            w.drain(..gone);
            *d = u32::try_from(gone).unwrap_or(u32::MAX);
        }
        let (caps, joined) = (&self.caps, &mut self.joined);
        let (at, dropped) = (&mut self.at, &mut self.dropped);
        self.cursor = n.samples_after(self.cursor, since_ns, &self.wanted, |slot, tick, v| {
            let Some(p) = at.get_mut(slot) else { return };
            if *p == NO_WINDOW {
                // Its first sample: the window takes the next place.
                match u32::try_from(kept.len()) {
                    Ok(next) if next != NO_WINDOW => *p = next,
                    _ => return,
                }
                kept.push(Window::new());
                dropped.push(0);
            }
            if let Some(w) = kept.get_mut(*p as usize) {
                if w.is_empty() {
                    joined.push(slot);
                }
                if w.len() == w.capacity() {
                    let cap = caps.get(slot).map_or(0, |&c| c as usize);
                    w.reserve_exact(window_room(w, n, cap) - w.len());
                }
                w.push_back((tick, v));
            }
        });
        // The windows the drop emptied leave (their headers are still in cache), those that got their first
        // samples join (rare: a series that came back, or all of them after a start over).
        let (at, held) = (&self.at, self.live.len());
        self.live
            .retain(|&i| window_of(kept, at, i).is_some_and(|w| !w.is_empty()));
        let changed = self.live.len() != held || !self.joined.is_empty();
        if !self.joined.is_empty() {
            self.live.append(&mut self.joined);
            self.live.sort_unstable();
            self.live.dedup();
        }
        if changed {
            self.live_at.clear();
            let places = self.live.iter().map(|&i| at.get(i).copied());
            self.live_at.extend(places.map(|p| p.unwrap_or(NO_WINDOW)));
        }
        // Each read link's oldest and newest interval loaded first, in a loop of loads independent of one
        // another: a link's slide reads both (the window's first, the one its new ones follow), each in its
        // own allocation, cold when the node is read once a second; slid link by link, each waited.
        let touched = self.links.iter().fold(0, |t, l| t ^ l.sliding.touch());
        std::hint::black_box(touched);
        for l in &mut self.links {
            let floor = l.floor(n);
            l.slide(
                (&self.kept, &self.at, &self.caps),
                n,
                floor,
                &mut self.scratch.activity,
            );
            self.splits = (self.splits.0 + l.split.0, self.splits.1 + l.split.1);
            if l.derived.is_some() {
                self.derivations.0 += 1;
            } else {
                self.derivations.1 += 1;
            }
        }
        self.settle_periods();
    }

    /// Each derived link's median interval length ([`LinkIntervals::period_ns`]): taken from an earlier link
    /// whose intervals have the same bounds, else worked out.
    ///
    /// The link whose bounds a link had at the previous update is asked first, by the intervals derived since
    /// only: where both kept as many of their intervals (the newest of equal lists), those are equal, and the
    /// bounds are the same when the new ones are. Compared whole, one link's ~400 intervals against another's
    /// at every update were 5 % of the analysis thread at 400 demo nodes (issue 35).
    fn settle_periods(&mut self) {
        for k in 0..self.links.len() {
            let (done, rest) = self.links.split_at_mut(k);
            let Some(l) = rest.first_mut() else { break };
            l.period_ns = None;
            let partner = l.same_as.take();
            if l.derived.is_none() {
                continue;
            }
            let by_new = partner.and_then(|j| done.get(j)).is_some_and(|d| {
                d.period_ns.is_some()
                    && d.retained == l.retained
                    && d.sliding.same_bounds_from(&l.sliding, l.retained)
            });
            l.same_as = match by_new {
                true => partner,
                false => done
                    .iter()
                    .position(|d| d.period_ns.is_some() && d.sliding.same_bounds(&l.sliding)),
            };
            self.periods.2 += u64::from(by_new);
            l.period_ns = Some(match l.same_as.and_then(|j| done[j].period_ns) {
                Some(p) => {
                    self.periods.1 += 1;
                    p
                }
                None => {
                    self.periods.0 += 1;
                    l.sliding.median_interval(&mut self.scratch.activity)
                }
            });
        }
    }

    /// The links whose activity a rule reads ([`input::reads_activity`]) with the slots of their byte counters.
    fn link_plan(n: &NodeState) -> Vec<LinkIntervals> {
        let mut links: Vec<LinkIntervals> = Vec::new();
        for s in n.series() {
            let (Some(i), SeriesKind::Counter { .. }) = (s.link_index(), s.kind()) else {
                continue;
            };
            let read = n
                .links()
                .get(i)
                .is_some_and(|l| input::reads_activity(&l.link));
            if !read || s.key().link.is_none() {
                continue;
            }
            let k = match links.binary_search_by_key(&i, |l| l.link) {
                Ok(k) => k,
                Err(k) => {
                    links.insert(
                        k,
                        LinkIntervals {
                            link: i,
                            ..Default::default()
                        },
                    );
                    k
                }
            };
            match s.key().metric.as_str() {
                "tx_bytes" => links[k].slots.0 = Some(s.slot()),
                "rx_bytes" => links[k].slots.1 = Some(s.slot()),
                _ => {}
            }
        }
        links.retain(|l| l.slots != (None, None));
        links
    }

    /// Forgets every window and takes `n`'s slots as they are now.
    fn start_over(&mut self, n: &NodeState) {
        self.layout = Some(n.layout());
        self.cursor = None;
        self.spare = None;
        self.wanted.clear();
        self.wanted
            .extend(n.series().iter().map(|s| input::reads_window(n, s)));
        self.live.clear();
        self.live_at.clear();
        self.at.clear();
        self.at.resize(self.wanted.len(), NO_WINDOW);
        self.kept.clear();
        self.dropped.clear();
        self.caps.clear();
        let cap = |s: &Series| u32::try_from(n.samples(s).cap()).unwrap_or(u32::MAX);
        self.caps.extend(n.series().iter().map(cap));
        self.links = Self::link_plan(n);
    }

    /// Samples kept, over every window.
    pub fn samples(&self) -> usize {
        self.kept.iter().map(VecDeque::len).sum()
    }

    /// Bytes allocated for the windows and the links' intervals.
    pub fn heap_bytes(&self) -> usize {
        self.wanted.capacity()
            + (self.live.capacity() + self.joined.capacity()) * size_of::<usize>()
            + (self.live_at.capacity() + self.at.capacity()) * size_of::<u32>()
            + self.dropped.capacity() * size_of::<u32>()
            + self.caps.capacity() * size_of::<u32>()
            + self.fronts.capacity() * size_of::<Option<u64>>()
            + self.kept.capacity() * size_of::<Window>()
            + self
                .kept
                .iter()
                .map(|w| w.capacity() * size_of::<(u64, u64)>())
                .sum::<usize>()
            + self.links.capacity() * size_of::<LinkIntervals>()
            + self
                .links
                .iter()
                .map(|l| l.sliding.heap_bytes())
                .sum::<usize>()
    }
}

/// A node's windows as an evaluation reads them: the kept ones, the store's for a series not kept.
struct Kept<'a> {
    n: &'a NodeState,
    w: &'a NodeWindows,
    store: StoreWindows<'a>,
}

impl Kept<'_> {
    /// `s`'s kept window, when it is kept and holds no more than its ring keeps.
    fn window(&self, s: &Series) -> Option<&Window> {
        let slot = s.slot();
        let w = window_of(&self.w.kept, &self.w.at, slot)?;
        let cap = *self.w.caps.get(slot)? as usize;
        (self.w.wanted.get(slot) == Some(&true) && w.len() <= cap).then_some(w)
    }

    /// Link `link`, when its byte counters are those in `slots`, windows from `since_ns` on are the kept ones
    /// and those are kept for both (not read from the store).
    fn kept_link(
        &self,
        link: usize,
        slots: (Option<usize>, Option<usize>),
        since_ns: i64,
    ) -> Option<&LinkIntervals> {
        let k = self.w.links.binary_search_by_key(&link, |l| l.link).ok()?;
        let l = &self.w.links[k];
        let kept = |slot: Option<usize>| {
            slot.is_none_or(|i| {
                self.n
                    .series()
                    .get(i)
                    .and_then(|s| self.window(s))
                    .is_some()
            })
        };
        (l.derived.is_some()
            && l.slots == slots
            && since_ns == self.w.since_ns
            && kept(slots.0)
            && kept(slots.1))
        .then_some(l)
    }

    /// Bytes moved over the kept window of the series in `slot` (0 without one).
    fn moved(&self, slot: Option<usize>) -> u64 {
        match slot
            .and_then(|i| window_of(&self.w.kept, &self.w.at, i))
            .map(|w| (w.front(), w.back()))
        {
            Some((Some(a), Some(z))) => z.1.saturating_sub(a.1),
            _ => 0,
        }
    }
}

/// One of two iterators of the same items.
enum Either<A, B> {
    Kept(A),
    Store(B),
}

impl<T, A: Iterator<Item = T>, B: Iterator<Item = T>> Iterator for Either<A, B> {
    type Item = T;

    // Inlined into the loops that read it (a gauge's mean): called once a sample, it was 7 % of the input.
    #[inline]
    fn next(&mut self) -> Option<T> {
        match self {
            Either::Kept(a) => a.next(),
            Either::Store(b) => b.next(),
        }
    }
}

impl Windows for Kept<'_> {
    fn held_slots(&self) -> Option<&[usize]> {
        Some(&self.w.live)
    }

    fn touch(&self, s: &Series) -> u64 {
        // Every fourth sample: one a cache line (16 B a sample).
        let Some(w) = self.window(s) else { return 0 };
        let (a, b) = w.as_slices();
        let line = |x: &[(u64, u64)]| x.iter().step_by(4).fold(0, |t, x| t ^ x.1);
        line(a) ^ line(b)
    }

    fn newest_first<'a>(
        &'a self,
        s: &'a Series,
        since_ns: i64,
    ) -> impl Iterator<Item = (i64, u64)> + 'a {
        match self.window(s) {
            Some(w) => Either::Kept(
                w.iter()
                    .rev()
                    .filter_map(|&(tick, v)| Some((self.n.tick_time(tick)?, v)))
                    .take_while(move |(t, _)| *t >= since_ns),
            ),
            None => Either::Store(self.store.newest_first(s, since_ns)),
        }
    }

    fn values_newest_first<'a>(
        &'a self,
        s: &'a Series,
        since_ns: i64,
    ) -> impl Iterator<Item = u64> + 'a {
        // The window kept from `since_ns` on holds only samples stamped since, of ticks still held (the update
        // dropped the rest): their values without a look-up of each one's time.
        match self.window(s).filter(|_| since_ns == self.w.since_ns) {
            Some(w) => Either::Kept(w.iter().rev().map(|x| x.1)),
            None => Either::Store(self.newest_first(s, since_ns).map(|(_, v)| v)),
        }
    }

    fn ends(&self, s: &Series, since_ns: i64) -> Option<((i64, u64), (i64, u64))> {
        let Some(w) = self.window(s) else {
            return self.store.ends(s, since_ns);
        };
        // A series' samples rise in time (the store takes none stamped before its last), and a tick no longer
        // held is older than every one held: the samples before `since_ns` are a prefix.
        let time = |k: usize| w.get(k).and_then(|x| self.n.tick_time(x.0));
        // The window kept from `since_ns` on holds only samples stamped since (the update dropped the rest).
        let from = match since_ns == self.w.since_ns {
            true => 0,
            false => w.partition_point(|x| self.n.tick_time(x.0).is_none_or(|t| t < since_ns)),
        };
        let newest = (time(w.len().checked_sub(1)?)?, w.back()?.1);
        let oldest = (time(from)?, w.get(from)?.1);
        Some((newest, oldest))
    }

    fn activity(
        &self,
        n: &NodeState,
        (link, slots): (usize, (Option<usize>, Option<usize>)),
        since_ns: i64,
        scratch: &mut Scratch,
        out: &mut Option<Activity>,
    ) {
        // A kept link's intervals were derived at the latest update (`kept_link`), and its floor and peaks
        // taken from the node's link then (`LinkIntervals::floor`), under the same lock as this.
        let kept = self.kept_link(link, slots, since_ns);
        if let Some((l, (_, floor, peaks))) = kept.and_then(|l| Some((l, l.floor.as_ref()?))) {
            let iv = l.sliding.intervals();
            if let (Some(a), Some(z)) = (iv.first(), iv.last()) {
                let window_s = (z.1 - a.0) as f64 / 1e9;
                let moved = (self.moved(slots.0), self.moved(slots.1));
                if window_s <= 0.0 {
                    *out = None;
                    return;
                }
                if l.sliding.floor() == Some(*floor) {
                    // Into the previous evaluation's activity: its lists' allocations kept.
                    let a = out.get_or_insert_with(Activity::default);
                    let buffers = &mut scratch.activity;
                    if l.sliding
                        .activity_into(window_s, moved, (l.period_ns, *peaks), buffers, a)
                    {
                        return;
                    }
                }
            }
        }
        *out = input::copied_activity(self, n, (link, slots), since_ns, scratch);
    }
}

/// Every node's kept windows, by node name.
#[derive(Debug, Default)]
pub struct WindowCache {
    nodes: HashMap<String, NodeWindows>,
}

impl WindowCache {
    /// The input of node `n` (under its lock) with windows from `since_ns` on, from its kept windows; its
    /// steps are those of the input last given back for the node ([`input::node_input_into`]): the caller
    /// sets them.
    pub fn input(&mut self, n: &NodeState, since_ns: i64) -> NodeInput {
        match self.nodes.get_mut(n.name()) {
            Some(w) => w.input(n, since_ns),
            None => self
                .nodes
                .entry(n.name().to_string())
                .or_default()
                .input(n, since_ns),
        }
    }

    /// Takes back the inputs of an evaluation: each node's next input is built into its allocations.
    pub fn give_back(&mut self, inputs: Vec<NodeInput>) {
        for i in inputs {
            if let Some(w) = self.nodes.get_mut(&i.name) {
                w.spare = Some(i);
            }
        }
    }

    /// Forgets the windows of the nodes not in `names` (expired ones).
    pub fn retain(&mut self, names: &[String]) {
        let live: HashSet<&str> = names.iter().map(String::as_str).collect();
        self.nodes.retain(|k, _| live.contains(k.as_str()));
    }

    /// Over every node: how many times a read link's intervals were derived from its kept windows at an
    /// update, and how many times its activity was left to copies (see `LinkIntervals`).
    pub fn link_derivations(&self) -> (u64, u64) {
        self.nodes.values().fold((0, 0), |(k, c), w| {
            (k + w.derivations.0, c + w.derivations.1)
        })
    }

    /// Over every node: how many derived links' median interval lengths were worked out, and how many were
    /// taken from another link of the node whose intervals had the same bounds.
    pub fn link_periods(&self) -> (u64, u64) {
        self.nodes
            .values()
            .fold((0, 0), |(k, s), w| (k + w.periods.0, s + w.periods.1))
    }

    /// Samples kept and bytes allocated, over every node.
    pub fn memory(&self) -> (usize, usize) {
        self.nodes
            .values()
            .fold((0, 0), |(s, b), w| (s + w.samples(), b + w.heap_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use commwatch_model::{Endpoint, Link, LinkClass, LinkKey, LinkRole, SeriesKind, Tier};

    use super::*;
    use crate::analysis::input::{node_input, AnalysisInput, WINDOW_NS};
    use crate::config::Limits;
    use crate::store::{Batch, Hello, Inventory, LinkInfo, NodeRef, SeriesDesc, Store};

    const T0: i64 = 1_700_000_000_000_000_000;
    /// The fast tier's period, ns (the slow tier reads every 20th fast tick).
    const TICK: i64 = 50_000_000;

    fn link(id: u32, class: LinkClass, device: &str, port: &str, role: LinkRole) -> LinkInfo {
        let endpoint = match class {
            LinkClass::Nvlink => Endpoint::GpuLink,
            LinkClass::Ethernet => Endpoint::legacy(class, device, port),
            _ => Endpoint::HcaPort,
        };
        LinkInfo {
            id,
            link: Link {
                key: LinkKey::new(class, device, port),
                endpoint,
                role,
                capacity_bytes_per_second: Some(25e9),
                state: "ACTIVE".into(),
                attributes: Default::default(),
                gpu: None,
                link: None,
            },
        }
    }

    /// A series: id, metric, link id (0: the node's), labels, counter (its saturation value) or gauge, tier.
    fn series(
        id: u32,
        metric: &str,
        link_id: u32,
        gpu: Option<&str>,
        max: Option<u64>,
        fast: bool,
    ) -> SeriesDesc {
        SeriesDesc {
            id,
            metric: metric.into(),
            kind: Some(match max {
                Some(max_value) => SeriesKind::Counter { max_value },
                None => SeriesKind::Gauge,
            }),
            link_id,
            labels: gpu
                .map(|g| vec![("gpu".to_string(), g.to_string())])
                .unwrap_or_default(),
            tier: Some(if fast { Tier::Fast } else { Tier::Slow }),
        }
    }

    /// Every kind of series the input reads: byte counters of a fabric HCA, an NVLink and the management NIC,
    /// link counters (one saturating at 255), link gauges (a last reading, a mean, a low), the host CPU, two
    /// GPUs' gauges and a counter, the node's TCP counters and a gauge no rule reads.
    fn inventory() -> Inventory {
        const C: Option<u64> = Some(u64::MAX);
        Inventory {
            links: vec![
                link(1, LinkClass::Infiniband, "mlx5_0", "1", LinkRole::Fabric),
                link(2, LinkClass::Nvlink, "gpu0", "0", LinkRole::Fabric),
                link(3, LinkClass::Ethernet, "eth0", "eth0", LinkRole::Management),
            ],
            series: vec![
                series(1, "tx_bytes", 1, None, C, true),
                series(2, "rx_bytes", 1, None, C, true),
                series(3, "symbol_errors", 1, None, C, false),
                series(4, "tx_bytes", 2, None, C, true),
                series(5, "state_code", 1, None, None, false),
                series(6, "tx_bytes", 3, None, C, true),
                series(7, "rx_bytes", 3, None, C, true),
                series(8, "qdisc_backlog_bytes", 3, None, None, false),
                series(9, "qdisc_rate_limit_bytes_per_second", 3, None, None, false),
                series(10, "cpu_utilization_ratio", 0, None, None, false),
                series(11, "gpu_utilization_ratio", 0, Some("0"), None, false),
                series(12, "gpu_sm_activity_ratio", 0, Some("0"), None, false),
                series(13, "gpu_pcie_replay_errors", 0, Some("0"), C, false),
                series(14, "gpu_utilization_ratio", 0, Some("1"), None, false),
                series(15, "tcp_retransmitted_segments_total", 0, None, C, false),
                series(16, "tcp_out_segments_total", 0, None, C, false),
                series(17, "memory_used_bytes", 0, None, None, false),
                series(18, "crc_flit_errors", 2, None, C, false),
                series(19, "link_downed", 1, None, Some(255), false),
                // A second gauge of the HCA's state under the same metric (other labels): the input holds the
                // later one's reading, whichever of the two changed.
                series(23, "state_code", 1, Some("0"), None, false),
            ],
            refused: Vec::new(),
        }
    }

    /// A store that keeps samples `retention_s` and nodes `expiry_s` after their last batch, seconds.
    fn store(retention_s: u64, expiry_s: u64) -> Store {
        Store::new(
            Duration::from_secs(retention_s),
            Duration::from_secs(expiry_s),
            Limits::default(),
        )
    }

    fn hello(instance: u64, inventory: Inventory) -> Hello {
        Hello {
            node: "node-00".into(),
            agent_version: "t".into(),
            boot_id: "b".into(),
            instance_id: instance,
            inventory,
            fast_period_ms: 50,
            slow_period_ms: 1000,
            blind: Vec::new(),
        }
    }

    /// A small deterministic generator (an LCG): the same run every time.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }
    }

    /// What one agent sends: cumulative counters by series id, which series it describes now, and what it
    /// leaves out.
    struct Agent {
        gen: Gen,
        totals: std::collections::BTreeMap<u32, u64>,
        ids: Vec<(u32, bool, bool)>,
        seq: u64,
        /// Which series' values at which fast tick are read late, on a tick of their own 250 µs after the rest.
        split: fn(u32, i64) -> bool,
    }

    impl Agent {
        fn new(inv: &Inventory, seed: u64) -> Agent {
            let mut a = Agent {
                gen: Gen(seed),
                totals: Default::default(),
                ids: Vec::new(),
                seq: 0,
                split: |_, _| false,
            };
            a.describe(inv);
            a
        }

        /// Takes `inv`'s series as the ones it sends: (id, counter, fast).
        fn describe(&mut self, inv: &Inventory) {
            self.ids = inv
                .series
                .iter()
                .map(|d| {
                    (
                        d.id,
                        matches!(d.kind, Some(SeriesKind::Counter { .. })),
                        d.tier == Some(Tier::Fast),
                    )
                })
                .collect();
        }

        /// The reading of series `id` at fast tick `k`: counters in bursts (bytes) or now and then (errors),
        /// with resets when `reset`; gauges from a few values, a zero and a negative among them.
        fn reading(&mut self, id: u32, counter: bool, k: i64, reset: bool) -> u64 {
            if !counter {
                let v = [0.0, 0.25, 0.5, 0.75, 1.0, -1.0, 3.5e9, 1.25e9]
                    [(self.gen.next() % 8) as usize];
                return f64::to_bits(v);
            }
            let step = match id {
                1 | 2 | 4 | 6 | 7 | 20 | 21 if k % 20 < 4 => 1_000_000 + self.gen.next() % 1_000,
                1 | 2 | 4 | 6 | 7 | 20 | 21 => self.gen.next() % 3,
                _ if self.gen.next().is_multiple_of(5) => 1 + self.gen.next() % 4,
                _ => 0,
            };
            let t = self.totals.entry(id).or_default();
            *t = if reset { step } else { *t + step };
            *t
        }

        /// A batch of fast ticks `ks` (the slow tier on every 20th; `skip(id, k)` leaves a sample out; every
        /// counter restarts from zero at ticks in `resets`).
        fn batch(
            &mut self,
            ks: std::ops::Range<i64>,
            skip: impl Fn(u32, i64) -> bool,
            resets: &[i64],
        ) -> Batch {
            let (mut ts, mut lens, mut ids, mut values) = (vec![], vec![], vec![], vec![]);
            for k in ks {
                let (mut n, mut late) = (0, Vec::new());
                for (id, counter, fast) in self.ids.clone() {
                    if (!fast && k % 20 != 0) || skip(id, k) {
                        continue;
                    }
                    let v = self.reading(id, counter, k, resets.contains(&k));
                    // A value read past the sampler's resolution opens the next tick, as a real agent's
                    // does now and then: one direction of a port a tick after the other.
                    if (self.split)(id, k) {
                        late.push((id, v));
                        continue;
                    }
                    values.push(v);
                    ids.push(id);
                    n += 1;
                }
                let t = T0 + k * TICK + (self.gen.next() % 1_000) as i64;
                if n > 0 {
                    ts.push(t);
                    lens.push(n);
                }
                if !late.is_empty() {
                    ts.push(t + 250_000);
                    lens.push(late.len() as u32);
                    ids.extend(late.iter().map(|x| x.0));
                    values.extend(late.iter().map(|x| x.1));
                }
            }
            self.seq += 1;
            Batch {
                seq: self.seq,
                timestamps_unix_ns: ts,
                tick_lengths: lens,
                series_ids: ids,
                values,
                dropped_batches_total: 0,
                markers: vec![],
                invalid_markers: 0,
                collectives: vec![],
                invalid_collectives: vec![],
            }
        }
    }

    /// Compares the kept windows' input of `node` with the store's at `now` (and the rules' findings on each);
    /// returns how many findings they had.
    fn compare(cache: &mut WindowCache, node: &NodeRef, now: i64) -> usize {
        let n = node.lock();
        let since = now - WINDOW_NS;
        let kept = cache.input(&n, since);
        let full = node_input(&n, since);
        // Every kept link's intervals are those its windows' copies give, interval for interval (the input's
        // figures below compare only what the intervals above the floor make of them).
        let w = cache.nodes.get(n.name()).expect("kept");
        for l in w.links.iter().filter(|l| l.derived.is_some()) {
            let copy = |slot: Option<usize>| -> Vec<(i64, u64)> {
                let s = slot.and_then(|i| n.series().get(i));
                let mut v: Vec<_> = s
                    .map(|s| StoreWindows(&n).newest_first(s, since).collect())
                    .unwrap_or_default();
                v.reverse();
                v
            };
            let (tx, rx) = (copy(l.slots.0), copy(l.slots.1));
            let (grid, other) = if tx.len() >= 3 { (tx, rx) } else { (rx, tx) };
            assert_eq!(
                l.sliding.intervals().to_vec(),
                activity::intervals(&grid, &other),
                "link {}'s intervals differ at {} s",
                l.link,
                (now - T0) as f64 / 1e9
            );
        }
        assert_eq!(
            kept,
            full,
            "the inputs differ at {} s",
            (now - T0) as f64 / 1e9
        );
        // Both are read by a plan made once per layout: the same as reading each series' part from its keys.
        assert_eq!(
            full,
            input::node_input_by_keys(&n, since),
            "the plan's input differs at {} s",
            (now - T0) as f64 / 1e9
        );
        let findings = |node: NodeInput| {
            super::super::evaluate(&AnalysisInput {
                now_unix_ns: now,
                nodes: vec![node],
                ..Default::default()
            })
        };
        let (a, b) = (findings(kept.clone()), findings(full));
        assert_eq!(a, b, "the findings differ at {} s", (now - T0) as f64 / 1e9);
        // The next input is built into this one's allocations, as the rounds do.
        cache.give_back(vec![kept]);
        a.len()
    }

    /// Runs `batches` batches of 5 ticks (250 ms) through `store`, evaluating after the batches whose index
    /// `evaluate_after` keeps, at the batch's end plus up to 300 ms; returns the evaluations and the findings
    /// seen over them.
    fn run(
        node: &NodeRef,
        agent: &mut Agent,
        cache: &mut WindowCache,
        range: std::ops::Range<i64>,
        evaluate_after: impl Fn(i64) -> bool,
        skip: impl Fn(u32, i64) -> bool + Copy,
        resets: &[i64],
    ) -> (usize, usize) {
        let (mut evaluations, mut findings, mut scratch) = (0, 0, Vec::new());
        for b in range {
            let batch = agent.batch(b * 5..b * 5 + 5, skip, resets);
            let end = T0 + (b * 5 + 5) * TICK;
            node.lock()
                .apply_batch(&batch, end, &mut scratch)
                .expect("applied");
            if evaluate_after(b) {
                let now = end + (agent.gen.next() % 300) as i64 * 1_000_000;
                findings += compare(cache, node, now);
                evaluations += 1;
            }
        }
        (evaluations, findings)
    }

    #[test]
    fn kept_windows_give_the_input_the_rings_give() {
        let store = store(300, 3_600);
        let mut inv = inventory();
        let node = store
            .hello(&hello(1, inv.clone()), T0, None)
            .expect("hello")
            .node;
        let mut agent = Agent::new(&inv, 7);
        // For the first minute, the HCA's transmit bytes read late now and then, its receive bytes at other
        // ticks (the intervals' other bytes interpolated, the newest derived again once the late direction's
        // sample is in), the management NIC's both at once.
        agent.split = |id, k| match id {
            _ if k >= 1_200 => false,
            1 => k % 37 == 5 || k % 15 == 14,
            2 => k % 53 == 11,
            6 | 7 => k % 71 == 3,
            _ => false,
        };
        let mut cache = WindowCache::default();
        // Evaluations 0.25 s to 10 s apart: within the head's newest rows, and past them (read from the rings).
        let gaps = [1, 4, 4, 4, 2, 12, 40, 4, 1, 4, 24, 4];
        let due = |b: i64| {
            let mut at = 0;
            (0..)
                .map(|i| {
                    at += gaps[i % gaps.len()];
                    at
                })
                .find(|&a| a >= b)
                == Some(b)
        };
        // Slow series miss readings now and then; the NVLink's bytes and the management NIC's receive counter
        // stop for 6 s, and the management NIC altogether for 22.5 s later on; every counter restarts from
        // zero at 40 s (the driver reloaded); GPU 0's utilisation stops for longer than a window from 60 s on
        // (its window empties under the same layout: its mean goes, as a rebuild finds it).
        let skip = |id: u32, k: i64| {
            (id == 3 && k % 140 == 0)
                || (id == 11 && (1_200..2_100).contains(&k))
                || (id == 8 && k % 60 == 20)
                || ((id == 4 || id == 7) && (600..720).contains(&k))
                || ((id == 6 || id == 7) && (2_150..2_600).contains(&k))
        };
        let (e1, f1) = run(&node, &mut agent, &mut cache, 0..240, due, skip, &[800]);
        // Nothing for 12 s (the agent's link down): the windows slide over the gap.
        let (e2, f2) = run(&node, &mut agent, &mut cache, 288..340, due, skip, &[]);
        // A link and series come (an inventory update) ...
        inv.links.push(link(
            4,
            LinkClass::Infiniband,
            "mlx5_1",
            "1",
            LinkRole::Fabric,
        ));
        let more = vec![
            series(20, "tx_bytes", 4, None, Some(u64::MAX), true),
            series(21, "rx_bytes", 4, None, Some(u64::MAX), true),
            series(22, "tcp_in_segments_total", 0, None, Some(u64::MAX), false),
        ];
        let update = Inventory {
            links: vec![inv.links[3].clone()],
            series: more.clone(),
            refused: Vec::new(),
        };
        node.lock()
            .apply_inventory(&update, &Limits::default())
            .expect("update");
        inv.series.extend(more);
        agent.describe(&inv);
        let (e3, f3) = run(&node, &mut agent, &mut cache, 340..420, due, skip, &[]);
        // ... and go: a new agent instance without GPU 1 and one TCP counter, its counters from zero.
        inv.series.retain(|d| d.id != 14 && d.id != 16);
        store
            .hello(&hello(2, inv.clone()), T0 + 420 * 5 * TICK, None)
            .expect("hello");
        agent.describe(&inv);
        agent.seq = 0;
        agent.totals.clear();
        let (e4, f4) = run(&node, &mut agent, &mut cache, 420..560, due, skip, &[]);
        assert!(e1 + e2 + e3 + e4 > 60, "{e1} {e2} {e3} {e4} evaluations");
        // The comparison is not of empty inputs: the rules found something (the error counters' increases).
        assert!(f1 > 0 && f4 > 0, "findings {f1} {f2} {f3} {f4}");
        let (samples, bytes) = cache.memory();
        assert!(
            samples > 0 && bytes >= samples * 16,
            "{samples} samples, {bytes} B"
        );
        // Both ways of a link's activity were compared: intervals derived from the kept samples, and copies of
        // windows too short to keep (the management NIC silent for longer than a window).
        let (kept, copied) = cache.link_derivations();
        assert!(kept > 0 && copied > 0, "{kept} kept, {copied} copied");
        // Kept through ticks split between a port's two counters: the late direction's values interpolated
        // (and the other's while the management NIC's receive counter stopped), the newest intervals derived
        // again once its sample came.
        let split = cache
            .nodes
            .values()
            .fold((0, 0), |a, w| (a.0 + w.splits.0, a.1 + w.splits.1));
        assert!(split.0 > 50 && split.1 > 3, "{split:?}");
        // The ports sampled at the same ticks share one median interval length; each of those compared
        // inputs took it so.
        let (worked, shared) = cache.link_periods();
        assert!(
            worked > 0 && shared > 0,
            "{worked} worked out, {shared} shared"
        );
        // Most of them were found of the same bounds by the intervals derived since the previous update, not
        // by every interval; some by every interval (the windows started over, or the links took none).
        let by_new: u64 = cache.nodes.values().map(|w| w.periods.2).sum();
        assert!(
            by_new > 0 && by_new < shared,
            "{by_new} of {shared} by the new intervals"
        );
    }

    #[test]
    fn windows_fill_with_a_reallocation_or_two() {
        let store = store(300, 3_600);
        let inv = inventory();
        let node = store
            .hello(&hello(1, inv.clone()), T0, None)
            .expect("hello")
            .node;
        let mut agent = Agent::new(&inv, 3);
        let mut cache = WindowCache::default();
        // 50 s evaluated every second: the 20 s windows fill, then slide. Each kept window's room and each
        // read link's intervals' room, and how often each changed.
        let (mut rooms, mut grown) = (Vec::new(), Vec::new());
        for s in 0..50 {
            let every_second = |b: i64| b % 4 == 3;
            let quiet = |_, _| false;
            run(
                &node,
                &mut agent,
                &mut cache,
                s * 4..s * 4 + 4,
                every_second,
                quiet,
                &[],
            );
            let w = &cache.nodes["node-00"];
            let now = w.kept.iter().map(VecDeque::capacity);
            let now: Vec<usize> = now
                .chain(w.links.iter().map(|l| l.sliding.room()))
                .collect();
            rooms.resize(now.len(), 0);
            grown.resize(now.len(), 0);
            for ((r, g), x) in rooms.iter_mut().zip(&mut grown).zip(now) {
                *g += usize::from(*r != x);
                *r = x;
            }
        }
        // The first few samples' room, then a full window's (grown by a quarter at a time, a 20 Hz series'
        // window reallocated 15 times as it filled, a link's intervals 17 times).
        let most = grown.iter().max().copied().unwrap_or(0);
        assert!(most > 0 && most <= 2, "rooms changed {grown:?}");
    }

    #[test]
    fn an_earlier_window_and_a_node_created_again_start_over() {
        let store = store(300, 60);
        let inv = inventory();
        let node = store
            .hello(&hello(1, inv.clone()), T0, None)
            .expect("hello")
            .node;
        let mut agent = Agent::new(&inv, 11);
        let mut cache = WindowCache::default();
        run(
            &node,
            &mut agent,
            &mut cache,
            0..120,
            |b| b % 4 == 3,
            |_, _| false,
            &[],
        );
        // An evaluation of an earlier instant (a round at a given time) reads the earlier window.
        compare(&mut cache, &node, T0 + 10 * 1_000_000_000);
        compare(&mut cache, &node, T0 + 30 * 1_000_000_000);
        // The node expires and comes back: tick numbers start again from 0 in a new node state.
        assert_eq!(store.expire(T0 + 200 * 1_000_000_000), 1);
        let node = store
            .hello(&hello(3, inv.clone()), T0 + 200 * 1_000_000_000, None)
            .expect("hello")
            .node;
        let mut agent = Agent::new(&inv, 12);
        run(
            &node,
            &mut agent,
            &mut cache,
            800..880,
            |b| b % 4 == 3,
            |_, _| false,
            &[],
        );
        cache.retain(&[]);
        assert_eq!(cache.memory(), (0, 0));
    }

    #[test]
    fn a_short_retention_and_an_agent_faster_than_its_tier_read_as_the_store_holds() {
        // 5 s of retention, shorter than the window: the windows hold what the store still has.
        let store = store(5, 3_600);
        let mut inv = inventory();
        // A series stated slow but sent at 20 Hz: its ring keeps fewer samples than the window holds.
        inv.series[2].tier = Some(Tier::Slow);
        let mut fast = inv.clone();
        for d in &mut fast.series {
            d.tier = Some(Tier::Fast);
        }
        let node = store.hello(&hello(1, inv), T0, None).expect("hello").node;
        let mut agent = Agent::new(&fast, 5);
        let mut cache = WindowCache::default();
        let (evaluations, _) = run(
            &node,
            &mut agent,
            &mut cache,
            0..200,
            |b| b % 3 != 1,
            |_, _| false,
            &[],
        );
        assert!(evaluations > 100);
    }
}
