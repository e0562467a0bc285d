//! The step engine: a periodic pass (every [`DEFAULT_INTERVAL`] by default) that extends each node's step
//! history in the [`StepStore`] with the steps completed since the previous pass.
//!
//! Incremental: per node it keeps a marker cursor (only markers new since the last pass are read), the
//! inference tracker's traffic window (only samples newer than its newest point are read), and the edges of
//! steps found but not yet covered by samples. A step's link figures are computed once, when the node's
//! samples reach its end. Nothing is recomputed over the whole history.
//!
//! Locking: per node, two short critical sections under the node's lock — one copying new markers, reading the
//! new samples into the engine's kept tails ([`super::tails`]) and summing the new traffic, one reading the
//! samples new since into the tails before the newly completed steps' figures — and all other computation
//! outside it, so ingest of that node waits at most for a read of a few new samples per series.
//!
//! Source: a node whose markers were seen within [`MARKERS_FRESH_NS`] (agent clock, against its newest sample)
//! gets marker steps; otherwise inferred steps. Inference keeps following the traffic while markers are used,
//! so the switch back is immediate.
//!
//! **Inferred steps are the job's, aligned across its nodes.** Every node of a synchronous job runs the same
//! steps, but not every node's counters show them: a ring neighbour of a slow link waits inside the collective
//! as long as it computes, and its own traffic repeats at half the step. Each node's traffic repeats at the
//! job's step or at a fraction of it, so the job's reference is the node whose period the most of its nodes
//! share, the longest on a tie ([`reference`]): its steps are every node's steps, with one index sequence per job (the same index on every node). Each
//! node places each edge on its own samples ([`super::edges`]): its bytes counted at the sample that closes its
//! own burst nearest the edge, the edge shown where that burst ended inside the sampling interval. A node that runs no job, or the only node of its job, keeps its own steps.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use commwatch_model::clock::unix_now_ns;
use commwatch_model::{Link, LinkClass};
use tracing::debug;

use super::bandwidth::{step_link_with, Directions, LinkScratch};
use super::edges::{self, OwnEdge};
use super::history::StepStore;
use super::inferred::InferenceTracker;
use super::markers::MarkerTracker;
use super::tails::{Held, Tails, SLACK_NS};
use super::{NodeStep, StepSource};
use crate::config::NvlinkDetail;
use crate::store::prefetch::prefetch;
use crate::store::{JobList, NodeState, Store};
use crate::telemetry::Passes;

/// How often the engine runs by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(500);
/// Markers this recent (relative to the node's newest sample) make the node's steps marker-sourced.
pub const MARKERS_FRESH_NS: i64 = 30_000_000_000;
/// Steps waiting for samples to cover them, per node; beyond it the oldest is completed with the links whose
/// samples cover it.
pub const MAX_AWAITING: usize = 64;
/// Periods within this share of each other are the same period.
pub const SAME_PERIOD: f64 = 0.12;
/// A node's own steps kept for its job.
pub const RECENT_OWN: usize = 16;
/// A reference's step starting within this share of the period of the job's last step end continues it.
pub const CONTINUES_WITHIN: f64 = 0.25;

/// Edges of a step whose link figures are not computed yet.
#[derive(Debug, Clone)]
struct Edges {
    job: Option<String>,
    index: u64,
    start: i64,
    end: i64,
    source: StepSource,
    confidence: f64,
    samples: Option<u64>,
}

#[derive(Debug, Default)]
struct NodeEngine {
    marker_cursor: u64,
    markers: MarkerTracker,
    inference: InferenceTracker,
    next_inferred: u64,
    awaiting: VecDeque<Edges>,
    /// Markers lost to the log's bound before the engine read them.
    lost_markers: u64,
    /// What this pass read of the node (set by the first phase of [`Engine::tick`]).
    newest_sample: i64,
    has_byte_series: bool,
    markers_fresh: bool,
    /// End of the last inferred step queued: no inferred step starts before it.
    inferred_until: i64,
    /// The newest steps the node's own inference found (at most [`RECENT_OWN`]), for its job when it becomes
    /// the job's reference.
    recent: VecDeque<super::inferred::InferredStep>,
    /// The links that stand for its GPUs' NVLinks in its step figures ([`figure_units`]), kept so that a step
    /// shares them as it shares the store's links.
    gpu_links: Vec<Arc<Link>>,
    /// What the engine reads of the node, chosen once per layout.
    reads: NodeReads,
    /// The end of the last inferred step completed, as queued and as placed on the node's own samples
    /// ([`super::edges`]): the next step's start is the same edge.
    placed: Option<(i64, OwnEdge)>,
}

impl NodeEngine {
    /// Drops the kept samples no later walk is expected to need ([`Tails::trim`]): those before the oldest
    /// start a walk can have now, less [`SLACK_NS`] (an inferred edge is placed near where it was queued) —
    /// the next pass's traffic, a queued step's start, the start of the step that continues the last placed
    /// one, of the next inferred step, or of a marker step not yet complete. A walk that reaches further
    /// back reads the store.
    fn trim_tails(&mut self) {
        let starts = [
            Some(self.inference.newest_ns()),
            self.awaiting.iter().map(|e| e.start).min(),
            self.placed.map(|(_, p)| p.count_ns),
            (self.inferred_until > 0).then_some(self.inferred_until),
            self.markers.oldest_open_ns(),
        ];
        let from = starts.into_iter().flatten().min().unwrap_or(i64::MIN);
        self.reads.tails.trim(from.saturating_sub(SLACK_NS));
    }
}

/// What the engine reads of a node, chosen from its links once per layout ([`NodeState::layout`]: the links
/// and the series' slots stay while it does), so that a pass walks neither the links nor their strings.
#[derive(Debug, Default)]
struct NodeReads {
    /// The layout and the NVLink detail they were chosen for (`None`: not yet).
    chosen: Option<(u64, NvlinkDetail)>,
    /// Slots of the traffic series: the byte counters of every link but the NVLinks, in link order, each
    /// link's transmit before its receive counter.
    traffic: Vec<usize>,
    /// The links the step figures read ([`figure_units`]'s members), where their covering samples lie set at
    /// each read ([`read_covering`]).
    links: Vec<CoveredLink>,
    /// The step figures: parts are indices into `members`, members into `links`.
    units: Vec<Unit>,
    members: Vec<usize>,
    /// The newest samples of the traffic series and of the links' byte series, kept across passes.
    tails: Tails,
}

impl NodeReads {
    /// Chooses again from `n`'s links when its layout (or `detail`) changed; `detail` and `gpu_links` as for
    /// [`figure_units`].
    fn update(&mut self, n: &NodeState, detail: NvlinkDetail, gpu_links: &mut Vec<Arc<Link>>) {
        if self.chosen == Some((n.layout(), detail)) {
            return;
        }
        self.traffic.clear();
        let mut all = Vec::new();
        for (i, l) in n.links().iter().enumerate() {
            let (tx, rx) = n.link_byte_series(i);
            if tx.is_none() && rx.is_none() {
                continue;
            }
            if l.link.key.class != LinkClass::Nvlink {
                self.traffic
                    .extend([tx, rx].into_iter().flatten().map(|s| s.slot()));
            }
            all.push(CoveredLink {
                link: l.link.clone(),
                slots: (tx.map(|s| s.slot()), rx.map(|s| s.slot())),
                tx: Held::NONE,
                rx: Held::NONE,
            });
        }
        figure_units(&all, detail, gpu_links, &mut self.units, &mut self.members);
        // Only the links a figure reads are kept, numbered in the order the figures first read them.
        let mut kept = vec![usize::MAX; all.len()];
        self.links.clear();
        for m in self.members.iter_mut() {
            if kept[*m] == usize::MAX {
                kept[*m] = self.links.len();
                self.links.push(all[*m].clone());
            }
            *m = kept[*m];
        }
        let links = self
            .links
            .iter()
            .flat_map(|c| [c.slots.0, c.slots.1].into_iter().flatten());
        self.tails.choose(self.traffic.iter().copied().chain(links));
        self.chosen = Some((n.layout(), detail));
    }
}

/// One node's inference in a pass: its job and the steps its own traffic gave (borrowing the pass's node
/// names, sharing the node's job list: no allocation per node and pass).
struct NodeInferred<'a> {
    node: &'a str,
    /// Its index in the pass's nodes ([`Engine::nodes`]).
    index: usize,
    /// The node's job list ([`NodeInferred::job`]).
    jobs: Arc<JobList>,
    /// Steps found in this pass.
    steps: Vec<super::inferred::InferredStep>,
    period: Option<super::PeriodEstimate>,
    /// Whether its inference follows a step sequence (a node still warming up cannot lead the job).
    following: bool,
}

impl NodeInferred<'_> {
    /// The node's training job when it runs exactly one (inferred steps are attributed to it).
    fn job(&self) -> Option<&str> {
        match self.jobs.jobs.as_slice() {
            [only] => Some(only.id.as_str()),
            _ => None,
        }
    }
}

/// A job's inferred step sequence: the next index and the end of the last step given out.
#[derive(Debug, Default)]
struct JobSequence {
    next: u64,
    until: i64,
}

/// New data of one node, copied under its lock.
struct Fresh {
    markers: Vec<crate::store::Marker>,
    lost: u64,
    next_cursor: u64,
    newest_sample: i64,
    has_byte_series: bool,
    /// The node's job list.
    jobs: Arc<JobList>,
    /// The oldest traffic sample read (of the first traffic series): after the pass's start where the store
    /// no longer holds the samples from there.
    traffic_reach: Option<i64>,
    /// The time of the oldest tick the node holds, once it dropped one ([`evicted_through`]).
    oldest_tick_ns: Option<i64>,
}

/// Of `samples` (oldest first), those from the last one at or before `from` to the end (oldest first). Walks
/// from the newest, so the cost is the number of samples copied.
#[cfg(test)]
pub(super) fn tail_from(
    samples: impl DoubleEndedIterator<Item = (i64, u64)>,
    from: i64,
) -> Vec<(i64, u64)> {
    let mut v = Vec::new();
    tail_from_into(samples, from, &mut v);
    v
}

/// [`tail_from`] appended to `out`; returns where they lie in it.
#[cfg(test)]
fn tail_from_into(
    samples: impl DoubleEndedIterator<Item = (i64, u64)>,
    from: i64,
    out: &mut Vec<(i64, u64)>,
) -> Range<usize> {
    let start = out.len();
    for s in samples.rev() {
        out.push(s);
        if s.0 <= from {
            break;
        }
    }
    out[start..].reverse();
    start..out.len()
}

/// Of `samples` (oldest first), those covering `[start, end]`: the last at or before `start` to the first at
/// or after `end`.
#[cfg(test)]
pub(super) fn covering(
    samples: impl DoubleEndedIterator<Item = (i64, u64)>,
    start: i64,
    end: i64,
) -> Vec<(i64, u64)> {
    let mut v = Vec::new();
    covering_into(samples, start, end, &mut v);
    v
}

/// [`covering`] appended to `out`; returns where they lie in it.
#[cfg(test)]
fn covering_into(
    samples: impl DoubleEndedIterator<Item = (i64, u64)>,
    start: i64,
    end: i64,
    out: &mut Vec<(i64, u64)>,
) -> Range<usize> {
    let from = out.len();
    let mut after: Option<(i64, u64)> = None;
    for s in samples.rev() {
        if s.0 > end {
            // Walking back: ends as the oldest sample after `end`.
            after = Some(s);
            continue;
        }
        out.push(s);
        if s.0 <= start {
            break;
        }
    }
    out[from..].reverse();
    if let Some(a) = after {
        if out[from..].last().is_none_or(|l| l.0 < end) {
            out.push(a);
        }
    }
    from..out.len()
}

/// [`tail_from`] of a forward read (`Samples::from_time(from)`: ascending timestamps, from one at or before
/// the newest at or before `from`), appended to `out`; returns where they lie in it. Its cost is the samples
/// read from there, however far back `from` lies (a walk back from the newest decoded every chunk on the
/// way: a pass far behind the traffic cost more per second of data the further behind it was).
pub(super) fn tail_from_forward(
    samples: impl Iterator<Item = (i64, u64)>,
    from: i64,
    out: &mut Vec<(i64, u64)>,
) -> Range<usize> {
    let start = out.len();
    let mut samples = samples.peekable();
    let mut first = None;
    while let Some(s) = samples.next_if(|s| s.0 <= from) {
        first = Some(s);
    }
    out.extend(first);
    out.extend(samples);
    start..out.len()
}

/// [`covering`] of a forward read (`Samples::from_time(start.min(end))`, as for [`tail_from_forward`]),
/// appended to `out`; returns where they lie in it. Reads up to the first sample after `end` only.
pub(super) fn covering_forward(
    samples: impl Iterator<Item = (i64, u64)>,
    start: i64,
    end: i64,
    out: &mut Vec<(i64, u64)>,
) -> Range<usize> {
    let from = out.len();
    let lim = start.min(end);
    let mut samples = samples.peekable();
    let mut first = None;
    while let Some(s) = samples.next_if(|s| s.0 <= lim) {
        first = Some(s);
    }
    out.extend(first);
    for s in samples {
        if s.0 > end {
            // The first sample after `end`, where none lies at it.
            if out[from..].last().is_none_or(|l| l.0 < end) {
                out.push(s);
            }
            break;
        }
        out.push(s);
    }
    from..out.len()
}

/// Clamped interpolation: before the first sample its value, after the last the last value (one time; the
/// engine uses [`clamped_ascending`], tested against this).
#[cfg(test)]
fn clamped(samples: &[(i64, u64)], t: i64) -> f64 {
    match (samples.first(), samples.last()) {
        (Some(f), _) if t <= f.0 => f.1 as f64,
        (_, Some(l)) if t >= l.0 => l.1 as f64,
        (Some(_), Some(_)) => super::bandwidth::interpolate(samples, t).unwrap_or(0.0),
        _ => 0.0,
    }
}

/// [`clamped`] at each of `times` (ascending: one walk over the samples), the same values.
#[cfg(test)]
fn clamped_ascending(samples: &[(i64, u64)], times: &[i64]) -> Vec<f64> {
    let mut out = vec![0.0; times.len()];
    add_clamped_ascending(samples, times, &mut out);
    out
}

/// Adds [`clamped`] at each of `times` (ascending) to `sums` (one per time), by one walk over the samples:
/// the same values, bit for bit (nothing added where there are no samples: the sums are never -0).
/// (Before: the values interpolated into a buffer, then a second loop over it.)
fn add_clamped_ascending(samples: &[(i64, u64)], times: &[i64], sums: &mut [f64]) {
    let (Some(&(t_first, first)), Some(&(t_last, last))) = (samples.first(), samples.last()) else {
        return;
    };
    // The first sample stamped after the time before (as `acc_at`'s partition point).
    let mut next = 0;
    for (sum, &t) in sums.iter_mut().zip(times) {
        *sum += if t <= t_first {
            first as f64
        } else if t >= t_last {
            last as f64
        } else {
            while samples[next].0 <= t {
                next += 1;
            }
            let (a, f) = super::bandwidth::acc_between(samples[next - 1], Some(samples[next]), t);
            a as f64 + f
        };
    }
}

/// Buffers of [`copy_fresh`], kept by the engine across nodes and passes (so that a pass costs no allocation
/// per series), and the traffic it read last.
#[derive(Debug, Default)]
struct FreshScratch {
    /// The traffic series' samples from the last one at or before the pass's start, of those series whose
    /// tail did not reach back that far, copied from the store one series after another.
    samples: Vec<(i64, u64)>,
    /// Where each traffic series' samples lie: in its tail, or in `samples`.
    series: Vec<Held>,
    times: Vec<i64>,
    /// Traffic total at each new sample time (the sums of the traffic series at `times`).
    sums: Vec<f64>,
    walks: Walks,
}

/// Walks back through a series' samples, counted by where they ran: over a kept tail, or over the store's
/// samples (a tail that did not reach back far enough, see [`Tails`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Walks {
    pub tails: u64,
    pub store: u64,
}

impl Walks {
    fn count(&mut self, r: Option<Held>) -> Option<Held> {
        match r {
            Some(_) => self.tails += 1,
            None => self.store += 1,
        }
        r
    }
}

impl FreshScratch {
    /// The traffic read last: `(time, total)` at each new sample time.
    fn traffic(&self) -> impl Iterator<Item = (i64, f64)> + '_ {
        self.times.iter().copied().zip(self.sums.iter().copied())
    }
}

/// Copies what is new of node `n` since the marker `cursor` and the traffic time `traffic_from`: the markers
/// into the returned [`Fresh`], the traffic of the series `traffic` (slots) into `out`
/// ([`FreshScratch::traffic`]).
fn copy_fresh(
    n: &NodeState,
    (cursor, traffic_from): (u64, i64),
    reads: &NodeReads,
    out: &mut FreshScratch,
) -> Fresh {
    let (markers, lost) = n.markers().since(cursor);
    let next_cursor = n.markers().next_seq();
    out.samples.clear();
    out.series.clear();
    reads.tails.prefetch(traffic_from);
    // Per traffic link and direction: samples from the last one at or before `traffic_from`, from its kept
    // tail, or the store's walk where the tail does not reach back that far.
    for s in reads
        .traffic
        .iter()
        .filter_map(|&slot| n.series().get(slot))
    {
        let r = match out.walks.count(reads.tails.from(s.slot(), traffic_from)) {
            Some(r) => r,
            None => Held::Copied(tail_from_forward(
                n.samples(s).from_time(traffic_from),
                traffic_from,
                &mut out.samples,
            )),
        };
        out.series.push(r);
    }
    let (tails, copied) = (&reads.tails, &out.samples[..]);
    let newest_sample = n.newest_byte_sample().unwrap_or(0);
    let has_byte_series = n.has_byte_series();
    // Sample times: those of the first traffic series newer than `traffic_from`, up to the oldest "newest
    // sample" across series (all series of a tick share its timestamp; a lagging one must not read as a drop).
    let upto = out
        .series
        .iter()
        .filter_map(|r| r.get(tails, copied).last().map(|x| x.0))
        .min()
        .unwrap_or(0);
    out.times.clear();
    if let Some(first) = out.series.first() {
        out.times.extend(
            first
                .get(tails, copied)
                .iter()
                .map(|x| x.0)
                .filter(|&t| t > traffic_from && t <= upto),
        );
    }
    // Each series at every time by one walk ([`clamped_ascending`]), summed per time in series order.
    out.sums.clear();
    out.sums.resize(out.times.len(), 0.0);
    for r in &out.series {
        add_clamped_ascending(r.get(tails, copied), &out.times, &mut out.sums);
    }
    let traffic_reach = out
        .series
        .first()
        .and_then(|r| r.get(tails, copied).first())
        .map(|s| s.0);
    Fresh {
        traffic_reach,
        oldest_tick_ns: evicted_through(n),
        jobs: n.jobs().clone(),
        markers,
        lost,
        next_cursor,
        newest_sample,
        has_byte_series,
    }
}

/// A link with byte counters (shared with the store: a pointer copied under the node's lock, not the link's
/// strings and attributes) and where its covering samples lie, per direction: in its series' kept tail, or
/// in [`Covered::samples`].
#[derive(Debug, Clone)]
struct CoveredLink {
    link: Arc<Link>,
    /// The slots of its transmit and receive byte series (`None`: the agent does not count that direction).
    slots: (Option<usize>, Option<usize>),
    tx: Held,
    rx: Held,
}

/// One node's links with byte counters and where their samples covering a span lie, in buffers the engine
/// keeps across nodes and passes (so that reading them costs no allocation per link).
#[derive(Debug, Default)]
struct Covered {
    links: Vec<CoveredLink>,
    /// The samples of the directions whose tail did not reach back to the span's start, copied from the store.
    samples: Vec<(i64, u64)>,
    /// The node's fast sampling period, seconds.
    period_s: f64,
    walks: Walks,
}

impl Covered {
    /// The samples of `links[i]`, per direction (`tails`: the node's, as [`read_covering`] left them).
    fn directions<'a>(&'a self, tails: &'a Tails, i: usize) -> Directions<'a> {
        let l = &self.links[i];
        (
            l.tx.get(tails, &self.samples),
            l.rx.get(tails, &self.samples),
        )
    }
}

/// Sets where the samples covering `[start, end]` of the links the node's step figures read lie
/// (`reads.links`, chosen again first when the layout changed: [`NodeReads::update`]): in each series' kept
/// tail (read first), borrowed in place by the figures; where a tail does not reach back to `start`, the
/// store's samples covering the span, read forward from the span's start ([`covering_forward`]) and copied into
/// `out`. Either way the same samples ([`covering`]'s).
/// (Copied out of the tails before: the copy was a quarter of the engine's time.)
fn read_covering(
    n: &NodeState,
    (start, end): (i64, i64),
    out: &mut Covered,
    reads: &mut NodeReads,
    (detail, gpu_links): (NvlinkDetail, &mut Vec<Arc<Link>>),
) {
    reads.update(n, detail, gpu_links);
    reads.tails.read(n);
    reads.tails.prefetch(start.min(end));
    out.samples.clear();
    let tails = &reads.tails;
    for c in reads.links.iter_mut() {
        // From the series' kept tail, or the store's walk where the tail does not reach back to `start`.
        let mut read = |slot: Option<usize>| {
            let Some(slot) = slot else {
                return Held::NONE;
            };
            if let Some(held) = out.walks.count(tails.covering(slot, (start, end))) {
                return held;
            }
            let from = out.samples.len();
            Held::Copied(match n.series().get(slot) {
                Some(s) => covering_forward(
                    n.samples(s).from_time(start.min(end)),
                    start,
                    end,
                    &mut out.samples,
                ),
                None => from..from,
            })
        };
        (c.tx, c.rx) = (read(c.slots.0), read(c.slots.1));
    }
    out.period_s = f64::from(n.fast_period_ms()) / 1e3;
}

/// What one link figure of a step is made of: `link` (a link of the node, or one standing for a GPU's NVLinks)
/// over the parts `members[parts]` (indices into [`Covered::links`]).
#[derive(Debug)]
struct Unit {
    link: Arc<Link>,
    parts: Range<usize>,
}

/// The link figures of a node's steps for `detail` into `units` (and their parts into `members`), from its
/// links with byte counters:
/// - every link that is not an NVLink, as itself;
/// - with [`NvlinkDetail::Gpu`], one figure per GPU: the link its agent sent for the GPU's NVLinks as one
///   ([`Link::is_gpu_nvlinks`]: their byte sums) where it has byte counters, else the GPU's NVLinks summed
///   (a link from `gpu_links`, made and kept there when none fits: the GPU's, with their summed capacity);
/// - with [`NvlinkDetail::Link`], every NVLink as itself, and a GPU's summed link only where none of its
///   NVLinks has byte counters.
fn figure_units(
    links: &[CoveredLink],
    detail: NvlinkDetail,
    gpu_links: &mut Vec<Arc<Link>>,
    units: &mut Vec<Unit>,
    members: &mut Vec<usize>,
) {
    units.clear();
    members.clear();
    let same_gpu = |a: &Link, b: &Link| a.key.device == b.key.device && a.gpu == b.gpu;
    let nvlink = |i: usize| links[i].link.key.class == LinkClass::Nvlink;
    // The first NVLink of each GPU met so far (a node has a handful of GPUs).
    let mut gpus: Vec<usize> = Vec::new();
    for (i, l) in links.iter().enumerate() {
        let mut first_of_gpu = || {
            let first = !gpus.iter().any(|&g| same_gpu(&links[g].link, &l.link));
            if first {
                gpus.push(i);
            }
            first
        };
        let alone = !nvlink(i)
            || match detail {
                NvlinkDetail::Link => {
                    !l.link.is_gpu_nvlinks()
                        || !links
                            .iter()
                            .any(|p| !p.link.is_gpu_nvlinks() && same_gpu(&p.link, &l.link))
                }
                NvlinkDetail::Gpu => false,
            };
        if alone {
            units.push(Unit {
                link: l.link.clone(),
                parts: members.len()..members.len() + 1,
            });
            members.push(i);
            continue;
        }
        if detail == NvlinkDetail::Link || !first_of_gpu() {
            continue;
        }
        // The GPU's first NVLink: its figure, from the agent's sums or from its NVLinks.
        let from = members.len();
        let sums = links
            .iter()
            .position(|p| p.link.is_gpu_nvlinks() && same_gpu(&p.link, &l.link));
        match sums {
            Some(k) => members.push(k),
            None => members.extend(
                (i..links.len()).filter(|&k| nvlink(k) && same_gpu(&links[k].link, &l.link)),
            ),
        }
        let link = match sums {
            Some(k) => links[k].link.clone(),
            None => {
                let capacity = members[from..]
                    .iter()
                    .filter_map(|&k| links[k].link.capacity_bytes_per_second)
                    .fold(None, |sum: Option<f64>, c| Some(sum.unwrap_or(0.0) + c));
                gpu_link(gpu_links, &l.link, capacity)
            }
        };
        units.push(Unit {
            link,
            parts: from..members.len(),
        });
    }
}

/// The link standing for the NVLinks of `first`'s GPU with `capacity`: the one kept in `kept` when it fits,
/// else a new one, kept in place of that GPU's previous one.
fn gpu_link(kept: &mut Vec<Arc<Link>>, first: &Link, capacity: Option<f64>) -> Arc<Link> {
    let gpu = kept
        .iter()
        .position(|k| k.key.device == first.key.device && k.gpu == first.gpu);
    if let Some(k) = gpu.map(|g| &kept[g]) {
        if k.role == first.role
            && k.endpoint == first.endpoint
            && k.capacity_bytes_per_second == capacity
        {
            return k.clone();
        }
    }
    let link = Arc::new(Link::gpu_nvlinks(first, capacity));
    match gpu {
        Some(g) => kept[g] = link.clone(),
        None => kept.push(link.clone()),
    }
    link
}

/// The engine's state over all nodes. [`Engine::tick`] does one pass; [`run`] runs it periodically.
pub struct Engine {
    store: Arc<Store>,
    steps: Arc<StepStore>,
    /// The nodes of the last pass with their engines, in the order of their names (sorted, as
    /// [`Store::node_names`] gives them): a pass finds a node's engine by its index among the names, not by
    /// a lookup of its name in each phase ([`Engine::follow_names`]).
    nodes: Vec<(String, NodeEngine)>,
    jobs: HashMap<String, JobSequence>,
    /// The collector's pass metrics, where each pass is timed.
    passes: Passes,
    /// NVLink figures per GPU (the default) or per link.
    nvlink: NvlinkDetail,
    /// Buffers of the new traffic, kept across nodes and passes ([`copy_fresh`]).
    fresh: FreshScratch,
    /// Buffers of the link figures, kept across nodes and passes (see [`Engine::complete_node`]).
    covered: Covered,
    scratch: LinkScratch,
    /// When passes started, for the warning that they come late ([`PassLag`]).
    lag: PassLag,
    /// What the pass skipped, far behind ([`Skips`]).
    skips: Skips,
}

/// Passes this many seconds apart (or more) mean the step engine does not keep up: warned.
pub const LAGGING_S: f64 = 10.0;
/// Warnings that the step engine does not keep up come at most this often, ns.
const WARN_EVERY_NS: i64 = 60_000_000_000;

/// The starts of the engine's passes, to say when they come far apart: the engine runs on the CPU that the
/// ingest and the evaluation leave (`SCHED_IDLE`), so on a saturated core its steps fall behind — the
/// gauge `commwatch_collector_steps_age_seconds` shows how far, and the log says so at most once a minute.
#[derive(Debug, Default)]
struct PassLag {
    /// The previous pass's start, Unix ns (0: none yet).
    last_start_ns: i64,
    /// When the last warning was logged, Unix ns.
    warned_ns: i64,
}

impl PassLag {
    /// A pass over `nodes` nodes that started at `start_ns` (Unix ns) is done: warns when it started
    /// [`LAGGING_S`] or more after the one before (and says whether it did).
    fn done(&mut self, start_ns: i64, nodes: usize) -> bool {
        let gap_s = start_ns.saturating_sub(self.last_start_ns) as f64 / 1e9;
        let warn = self.last_start_ns > 0
            && gap_s >= LAGGING_S
            && start_ns.saturating_sub(self.warned_ns) >= WARN_EVERY_NS;
        if warn {
            self.warned_ns = start_ns;
            tracing::warn!(
                nodes,
                seconds_between_passes = gap_s,
                "step engine: its passes come far apart, so per-step figures are that late (it runs on the \
                 CPU the ingest and the evaluation leave); give the collector more CPU or run more shards \
                 (commwatch_collector_steps_age_seconds says how late)"
            );
        }
        self.last_start_ns = start_ns;
        warn
    }
}

/// What an engine far behind its nodes' traffic skips, so that it catches up by cutting the newest steps
/// instead of falling further behind, and says so: the seconds of node traffic it cut no steps from, in
/// `commwatch_collector_steps_skipped_seconds_total`, and a warning when it starts skipping (at most once a
/// minute). Two things are skipped, never silently:
/// - on a node whose inferred steps it was following, the traffic since the previous pass's that its
///   inference never sees: what lies more than the inference's window ([`super::inferred::WINDOW_NS`])
///   behind the newest (the inference keeps that window only), or before the oldest sample the store still
///   holds (retention);
/// - a step awaiting figures that starts before the oldest sample the node still holds, once it dropped older
///   ones (retention): its links' samples no longer cover it, so it gets no figures and is not added (before,
///   it was added with the links whose samples happened to reach, read from the oldest sample on).
#[derive(Debug, Default)]
struct Skips {
    /// Skipped in this pass, ns of node traffic.
    pass_ns: i64,
    /// Whether the previous pass skipped anything.
    skipping: bool,
    /// When the last warning was logged, Unix ns.
    warned_ns: i64,
}

impl Skips {
    /// Counts `ns` of a node's traffic skipped in this pass.
    fn add(&mut self, ns: i64) {
        self.pass_ns = self.pass_ns.saturating_add(ns.max(0));
    }

    /// The pass over `nodes` nodes that started at `start_ns` (Unix ns) is done: adds what it skipped to
    /// `counter` (seconds) and warns when it starts skipping (and says whether it did).
    fn done(&mut self, counter: &prometheus::Counter, start_ns: i64, nodes: usize) -> bool {
        let skipped = std::mem::take(&mut self.pass_ns);
        let starts = skipped > 0 && !self.skipping;
        self.skipping = skipped > 0;
        if skipped == 0 {
            return false;
        }
        counter.inc_by(skipped as f64 / 1e9);
        let warn = starts && start_ns.saturating_sub(self.warned_ns) >= WARN_EVERY_NS;
        if warn {
            self.warned_ns = start_ns;
            tracing::warn!(
                nodes,
                skipped_s = skipped as f64 / 1e9,
                "step engine: too far behind the traffic to cut every step; it skips the oldest and cuts \
                 the newest (commwatch_collector_steps_skipped_seconds_total counts the seconds of traffic \
                 skipped, commwatch_collector_steps_age_seconds how late it is); give the collector more CPU \
                 or run more shards"
            );
        }
        warn
    }
}

impl Engine {
    /// An engine reading `store` and extending `steps`, timing its passes in `passes` (the collector's own,
    /// [`crate::telemetry::Health::passes`]).
    pub fn new(store: Arc<Store>, steps: Arc<StepStore>, passes: Passes) -> Engine {
        Engine {
            store,
            steps,
            nodes: Vec::new(),
            jobs: HashMap::new(),
            passes,
            nvlink: NvlinkDetail::default(),
            fresh: FreshScratch::default(),
            covered: Covered::default(),
            scratch: LinkScratch::default(),
            lag: PassLag::default(),
            skips: Skips::default(),
        }
    }

    /// The engine with NVLink figures per GPU ([`NvlinkDetail::Gpu`], the default: one figure per GPU for its
    /// NVLinks) or per link ([`NvlinkDetail::Link`]); see [`figure_units`].
    pub fn with_nvlink_detail(mut self, detail: NvlinkDetail) -> Engine {
        self.nvlink = detail;
        self
    }

    /// Walks back through series' samples since the engine started: over the tails it keeps, or over the
    /// store's samples where a tail did not reach back far enough (the first pass over a node, a step
    /// beginning long before the traffic the engine last read).
    pub fn walks(&self) -> Walks {
        let (a, b) = (self.fresh.walks, self.covered.walks);
        Walks {
            tails: a.tails + b.tails,
            store: a.store + b.store,
        }
    }

    /// One pass over every node the store holds as fresh at `now_unix_ns`: new steps are appended to the
    /// [`StepStore`]. Returns how many steps were added.
    /// Timed in `commwatch_collector_pass_seconds{pass="steps"}`.
    pub fn tick(&mut self, now_unix_ns: i64) -> usize {
        let timer = self.passes.timer("steps");
        let names = self.store.node_names(now_unix_ns);
        self.follow_names(&names);
        self.steps.retain(&names);
        let inferred: Vec<NodeInferred> = names
            .iter()
            .enumerate()
            .filter_map(|(i, n)| self.read_node(i, n))
            .collect();
        self.queue_inferred(inferred);
        let mut added = 0;
        for i in 0..names.len() {
            added += self.complete_node(i);
        }
        timer.done(names.len());
        self.steps.pass_done(now_unix_ns);
        self.lag.done(now_unix_ns, names.len());
        let skipped = &self.passes.steps_skipped_seconds;
        self.skips.done(skipped, now_unix_ns, names.len());
        added
    }

    /// Keeps the engines of the nodes `names` (sorted) in their order, a new node's from nothing, a gone
    /// node's dropped: after it, `nodes[i]` is `names[i]`'s.
    fn follow_names(&mut self, names: &[String]) {
        let same = self.nodes.len() == names.len()
            && self.nodes.iter().zip(names).all(|((n, _), name)| n == name);
        if same {
            return;
        }
        let mut old = std::mem::take(&mut self.nodes).into_iter().peekable();
        for name in names {
            while old.next_if(|(n, _)| n < name).is_some() {}
            let st = old.next_if(|(n, _)| n == name).map(|(_, st)| st);
            self.nodes.push((name.clone(), st.unwrap_or_default()));
        }
    }

    /// The engine of the pass's node `i` ([`Engine::follow_names`]).
    fn node(&mut self, i: usize) -> Option<&mut NodeEngine> {
        self.nodes.get_mut(i).map(|(_, st)| st)
    }

    /// First phase for node `i`, `name`: reads what is new, queues its marker steps and runs its inference.
    fn read_node<'a>(&mut self, i: usize, name: &'a str) -> Option<NodeInferred<'a>> {
        let st = &mut self.nodes.get_mut(i)?.1;
        let cursor = st.marker_cursor;
        let traffic_from = st.inference.newest_ns();
        let (scratch, detail) = (&mut self.fresh, self.nvlink);
        let (reads, gpu_links) = (&mut st.reads, &mut st.gpu_links);
        let fresh = self.store.with_node(name, |n| {
            reads.update(n, detail, gpu_links);
            reads.tails.read(n);
            copy_fresh(n, (cursor, traffic_from), reads, scratch)
        })?;
        st.marker_cursor = fresh.next_cursor;
        if fresh.lost > 0 {
            st.lost_markers += fresh.lost;
            debug!(
                node = name,
                lost = fresh.lost,
                "step markers evicted before the engine read them"
            );
        }
        for m in &fresh.markers {
            st.markers.add(m);
        }
        for s in st.markers.complete() {
            st.awaiting.push_back(Edges {
                job: Some(s.job),
                index: s.index,
                start: s.start_unix_ns,
                end: s.end_unix_ns,
                source: StepSource::Markers,
                confidence: s.confidence,
                samples: s.samples,
            });
        }
        let agent_now = fresh.newest_sample.max(st.markers.newest_unix_ns());
        st.markers.forget_idle(agent_now);
        let following = st.inference.following() && !st.markers_fresh;
        st.inference.extend(self.fresh.traffic());
        if following {
            self.skips.add(unseen_traffic(
                &fresh,
                traffic_from,
                &self.fresh,
                &st.inference,
            ));
        }
        let steps = st.inference.steps();
        st.recent.extend(steps.iter().copied());
        while st.recent.len() > RECENT_OWN {
            st.recent.pop_front();
        }
        st.markers_fresh = st.markers.newest_unix_ns() > 0
            && agent_now - st.markers.newest_unix_ns() <= MARKERS_FRESH_NS;
        st.newest_sample = fresh.newest_sample;
        st.has_byte_series = fresh.has_byte_series;
        st.trim_tails();
        let period = st.inference.period();
        self.steps.set_period(name, period);
        Some(NodeInferred {
            node: name,
            index: i,
            jobs: fresh.jobs,
            steps,
            period,
            following: st.inference.following(),
        })
    }

    /// Queues the inferred steps of this pass: a job's reference steps on each of its nodes, a lone node's own
    /// (see the module documentation).
    fn queue_inferred(&mut self, inferred: Vec<NodeInferred>) {
        let mut by_job: HashMap<&str, Vec<&NodeInferred>> = HashMap::new();
        for n in &inferred {
            if let Some(j) = n.job() {
                by_job.entry(j).or_default().push(n);
            }
        }
        self.jobs.retain(|j, _| by_job.contains_key(j.as_str()));
        for n in &inferred {
            let group = n.job().and_then(|j| by_job.get(j)).filter(|g| g.len() > 1);
            let Some(group) = group else {
                let Some(st) = self.node(n.index) else {
                    continue;
                };
                let own: Vec<(u64, i64, i64, f64)> = {
                    n.steps
                        .iter()
                        .map(|s| {
                            let i = st.next_inferred;
                            st.next_inferred += 1;
                            (i, s.start_unix_ns, s.end_unix_ns, s.confidence)
                        })
                        .collect()
                };
                self.queue_on(n.index, n.job(), &own);
                continue;
            };
            // The job's steps are queued once, from its reference, on every node of the group.
            let Some(reference) = reference(group) else {
                continue;
            };
            if reference.index != n.index {
                continue;
            }
            let job = n.job().unwrap_or_default();
            // A new sequence goes on from its nodes' own (indices never go back, steps never overlap).
            let (next, until) = group
                .iter()
                .filter_map(|m| self.nodes.get(m.index).map(|(_, st)| st))
                .fold((0, 0), |(i, u), st| {
                    (st.next_inferred.max(i), st.inferred_until.max(u))
                });
            // The reference's newest own steps, copied once per job and pass (not every node's every pass).
            let recent: Vec<super::inferred::InferredStep> = self
                .nodes
                .get(reference.index)
                .map(|(_, st)| st.recent.iter().copied().collect())
                .unwrap_or_default();
            if !self.jobs.contains_key(job) {
                self.jobs
                    .insert(job.to_string(), JobSequence { next, until });
            }
            let Some(seq) = self.jobs.get_mut(job) else {
                continue;
            };
            let tol = reference
                .period
                .map_or(0, |p| (CONTINUES_WITHIN * p.period_s * 1e9) as i64);
            let mut steps = Vec::new();
            for s in &recent {
                if s.end_unix_ns <= seq.until || s.start_unix_ns < seq.until - tol {
                    continue;
                }
                // A step that starts near the last end continues it (a new reference's edges differ slightly).
                let continues = seq.until > 0 && s.start_unix_ns <= seq.until + tol;
                let start = if continues {
                    seq.until
                } else {
                    s.start_unix_ns
                };
                steps.push((seq.next, start, s.end_unix_ns, s.confidence));
                seq.next += 1;
                seq.until = s.end_unix_ns;
            }
            let next = seq.next;
            for m in group.iter() {
                self.queue_on(m.index, Some(job), &steps);
                if let Some(st) = self.node(m.index) {
                    st.next_inferred = st.next_inferred.max(next);
                }
            }
        }
    }

    /// Queues inferred steps `(index, start, end, confidence)` on the pass's node `node`, unless its markers
    /// are fresh; none starts before the node's last inferred step ends.
    fn queue_on(&mut self, node: usize, job: Option<&str>, steps: &[(u64, i64, i64, f64)]) {
        let Some(st) = self.node(node) else {
            return;
        };
        if st.markers_fresh {
            return;
        }
        for &(index, start, end, confidence) in steps {
            if start < st.inferred_until {
                continue;
            }
            st.awaiting.push_back(Edges {
                job: job.map(str::to_string),
                index,
                start,
                end,
                source: StepSource::Inferred,
                confidence,
                samples: None,
            });
            st.inferred_until = end;
        }
    }

    /// Last phase for the pass's node `i`: computes the figures of the queued steps its samples now cover.
    fn complete_node(&mut self, i: usize) -> usize {
        let Some((name, st)) = self.nodes.get_mut(i) else {
            return 0;
        };
        let name = name.as_str();
        // Steps whose end the samples reach (or every step when the node has no byte counters, or too many wait).
        let mut ready: Vec<Edges> = Vec::new();
        while let Some(e) = st.awaiting.front() {
            // An inferred edge is placed on the node's own samples once they reach past it (see `edges`).
            let margin = match e.source {
                StepSource::Inferred => {
                    edges::placing_margin_ns(&st.inference, e.end - e.start).unwrap_or(0)
                }
                StepSource::Markers => 0,
            };
            let covered = !st.has_byte_series || e.end + margin <= st.newest_sample;
            if covered || st.awaiting.len() > MAX_AWAITING {
                if let Some(e) = st.awaiting.pop_front() {
                    ready.push(e);
                }
            } else {
                break;
            }
        }
        // Steps that start before the oldest sample the node holds, once it dropped older ones: no link's
        // samples cover them ([`Skips`]). (Before its first sample, a job's step on a node that joined late
        // is added as before, with the links whose samples cover it: none lost there.)
        if st.has_byte_series && !ready.is_empty() {
            let reach = self.store.with_node(name, evicted_through);
            if let Some(reach) = reach.flatten() {
                let skips = &mut self.skips;
                ready.retain(|e| {
                    let covered = e.start >= reach;
                    if !covered {
                        skips.add(e.end - e.start);
                    }
                    covered
                });
            }
        }
        if ready.is_empty() {
            return 0;
        }
        let placed = place_edges(st, &ready);
        let span_start = placed.iter().map(|e| e.0.count_ns).min().unwrap_or(0);
        let span_end = placed.iter().map(|e| e.1.count_ns).max().unwrap_or(0);
        let covered = &mut self.covered;
        let gpu = (self.nvlink, &mut st.gpu_links);
        let reads = &mut st.reads;
        let copied = self
            .store
            .with_node(name, |n| {
                read_covering(n, (span_start, span_end), covered, reads, gpu)
            })
            .is_some();
        // The node's read links lent to the engine's buffer for the figures (given back below).
        covered.links.clear();
        if copied {
            std::mem::swap(&mut covered.links, &mut st.reads.links);
        } else {
            covered.period_s = 0.0;
        }
        let (units, members): (&[Unit], &[usize]) = if copied {
            (&st.reads.units, &st.reads.members)
        } else {
            (&[], &[])
        };
        let tails = &st.reads.tails;
        let covered: &Covered = covered;
        let period_s = if covered.period_s > 0.0 {
            covered.period_s
        } else {
            0.05
        };
        let mut parts: Vec<Directions<'_>> = Vec::new();
        let steps: Vec<NodeStep> = ready
            .into_iter()
            .zip(placed)
            .map(|(e, (start, end))| NodeStep {
                fabric: Default::default(),
                node: name.to_string(),
                job: e.job,
                index: e.index,
                start_unix_ns: start.at_ns,
                end_unix_ns: end.at_ns,
                source: e.source,
                confidence: e.confidence,
                samples: e.samples,
                links: step_links(
                    (covered, tails, units, members),
                    (start.count_ns, end.count_ns),
                    period_s,
                    &mut parts,
                    &mut self.scratch,
                ),
            })
            .collect();
        if copied {
            std::mem::swap(&mut self.covered.links, &mut st.reads.links);
        }
        let n = steps.len();
        self.steps.push(name, steps);
        n
    }
}

/// The time of the oldest tick `n` holds, once it dropped older ones for its retention (`None` before: its
/// first tick is the first it ever took, so nothing older was lost).
fn evicted_through(n: &NodeState) -> Option<i64> {
    let oldest = n.oldest_tick();
    (oldest > 0).then(|| n.tick_time(oldest)).flatten()
}

const SECOND_NS: i64 = 1_000_000_000;

/// Of a node's traffic since `traffic_from` (the end of what its inference saw before), ns of what its
/// inference never sees ([`Skips`]): what the pass read (`traffic`'s points) more than the inference's window
/// behind the newest, and what the store dropped before the pass could read it (where the read starts within
/// a second of the node's oldest tick, more than a second after `traffic_from`; an agent silent for longer
/// than the retention reads the same).
fn unseen_traffic(
    fresh: &Fresh,
    traffic_from: i64,
    traffic: &FreshScratch,
    inference: &InferenceTracker,
) -> i64 {
    let window_start = inference.newest_ns() - super::inferred::WINDOW_NS;
    let dropped = traffic
        .traffic()
        .next()
        .map_or(0, |(first, _)| (window_start - first).max(0));
    let evicted = match (fresh.traffic_reach, fresh.oldest_tick_ns) {
        (Some(r), Some(o)) if r - o <= SECOND_NS && r - traffic_from > SECOND_NS => {
            r - traffic_from
        }
        _ => 0,
    };
    dropped + evicted
}

/// The edges of `ready` steps on the node's own samples ([`edges::place`]), in order: a marker step's as they
/// are; an inferred step's start is the previous step's end where it continues it, else placed like its end;
/// an edge with no burst end of the node's own near it, or a step whose placed edges would not follow each
/// other, stays where it was queued.
fn place_edges(st: &mut NodeEngine, ready: &[Edges]) -> Vec<(OwnEdge, OwnEdge)> {
    ready
        .iter()
        .map(|e| {
            let queued = (OwnEdge::at(e.start), OwnEdge::at(e.end));
            if e.source != StepSource::Inferred {
                return queued;
            }
            let step = e.end - e.start;
            let start = match st.placed {
                Some((t, p)) if t == e.start => p,
                _ => edges::place(&st.inference, e.start, step).unwrap_or(queued.0),
            };
            let end = edges::place(&st.inference, e.end, step).unwrap_or(queued.1);
            let follows = |a: OwnEdge, b: OwnEdge| a.at_ns < b.at_ns && a.count_ns < b.count_ns;
            let placed = [(start, end), (start, queued.1)]
                .into_iter()
                .find(|&(a, b)| follows(a, b))
                .unwrap_or(queued);
            st.placed = Some((e.end, placed.1));
            placed
        })
        .collect()
}

/// The link figures of one step `[start, end]`: one per unit of `units` (those whose parts cover the step),
/// from the covered samples; `parts` and `scratch` are buffers kept by the caller.
fn step_links<'a>(
    (covered, tails, units, members): (&'a Covered, &'a Tails, &[Unit], &[usize]),
    (start, end): (i64, i64),
    period_s: f64,
    parts: &mut Vec<Directions<'a>>,
    scratch: &mut LinkScratch,
) -> Vec<super::StepLink> {
    let mut out = Vec::with_capacity(units.len());
    // The links are cold (the store's, read here once a step): asked for together, their misses overlap. A
    // figure reads its link's capacity and counts a reference to it: the allocation's first 32 bytes.
    for u in units {
        let link = Arc::as_ptr(&u.link).cast::<u8>();
        prefetch(link.wrapping_sub(16), 1);
        prefetch(link.wrapping_add(15), 1);
    }
    for u in units {
        parts.clear();
        parts.extend(
            members[u.parts.clone()]
                .iter()
                .map(|&k| covered.directions(tails, k)),
        );
        out.extend(step_link_with(
            &u.link,
            parts,
            (start, end),
            period_s,
            scratch,
        ));
    }
    out
}

/// The reference of a job's nodes, of those whose inference follows a step sequence: the node whose period
/// the most nodes share (within [`SAME_PERIOD`]), the longest such period on a tie (each node's traffic repeats
/// at the job's step or at a fraction of it: a ring neighbour of a slow link at half of it), then the strongest.
fn reference<'a, 'n>(group: &[&'a NodeInferred<'n>]) -> Option<&'a NodeInferred<'n>> {
    let period = |n: &NodeInferred| n.period.filter(|_| n.following);
    let periods: Vec<f64> = group
        .iter()
        .filter_map(|n| period(n).map(|p| p.period_s))
        .collect();
    let support = |p: f64| periods.iter().filter(|&&q| same_period(q, p)).count();
    group
        .iter()
        .filter_map(|n| period(n).map(|p| (*n, p)))
        .max_by(|(a, pa), (b, pb)| {
            support(pa.period_s)
                .cmp(&support(pb.period_s))
                .then_with(|| pa.period_s.total_cmp(&pb.period_s))
                .then_with(|| pa.strength.total_cmp(&pb.strength))
                .then_with(|| b.node.cmp(a.node))
        })
        .map(|(n, _)| n)
}

/// Whether two periods are the same within [`SAME_PERIOD`].
fn same_period(q: f64, p: f64) -> bool {
    q > 0.0 && (p / q - 1.0).abs() <= SAME_PERIOD
}

/// Runs `engine`'s [`Engine::tick`] every `every` (on a thread of its own, so the async workers that serve
/// ingest never wait for it), extending its step store, until the future is dropped (or a pass panics: logged,
/// the engine stops). Each pass is timed in the engine's pass metrics. The thread is guaranteed `share` of a
/// core against a busy ingest (`steps_share`: [`crate::pace::Yield::Share`]); its passes are paced by their
/// CPU time.
pub async fn run(engine: Engine, every: Duration, share: f64) {
    engine.steps.engine_started(unix_now_ns());
    let engine = Arc::new(parking_lot::Mutex::new(engine));
    let priority = crate::pace::Yield::Share(share);
    let thread = match crate::pace::PassThread::start_with("commwatch-steps", priority) {
        Ok(t) => Arc::new(t),
        Err(err) => {
            tracing::error!(error = %err, "could not start the step engine's thread; the engine stops");
            return;
        }
    };
    // Every `every`, or less often when a pass over a large fleet is costly (`crate::pace`), at a priority
    // below the ingest's: the engine reads only what is new since its last pass, so a longer pause costs no
    // samples.
    crate::pace::run_paced(every, move || {
        let (engine, thread) = (engine.clone(), thread.clone());
        async move {
            match thread
                .run_charged(move || engine.lock().tick(unix_now_ns()))
                .await
            {
                Ok((_, paced)) => paced,
                Err(err) => {
                    tracing::error!(error = %err, "step engine pass failed; the engine stops");
                    crate::pace::Paced::Stop
                }
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ring::Ring;

    fn ring(samples: &[(i64, u64)]) -> Ring {
        let mut r = Ring::new(100);
        for &(t, v) in samples {
            r.push(t, v, i64::MAX);
        }
        r
    }

    /// Passes far apart are warned about, at most once a minute; passes at their interval never.
    #[test]
    fn passes_far_apart_are_warned_at_most_once_a_minute() {
        const S: i64 = 1_000_000_000;
        let mut lag = PassLag::default();
        let t0 = 1_700_000_000 * S;
        assert!(!lag.done(t0, 10), "the first pass has nothing before it");
        assert!(!lag.done(t0 + S / 2, 10), "at the interval");
        assert!(lag.done(t0 + 12 * S, 10), "11.5 s after the one before");
        assert!(
            !lag.done(t0 + 24 * S, 10),
            "late again, but warned 12 s ago"
        );
        assert!(!lag.done(t0 + 24 * S + S / 2, 10));
        assert!(
            lag.done(t0 + 80 * S, 10),
            "late, and the warning is a minute old"
        );
    }

    /// A node of one InfiniBand port whose byte counters burst every 700 ms (20 Hz), in a store of
    /// `retention`, seen first at `t0` (Unix ns); returns the store and its agent.
    fn bursting_node(
        retention: Duration,
        t0: i64,
    ) -> (Arc<Store>, crate::ingest::direct::DirectAgent) {
        use commwatch_proto::v1 as pb;
        let store = Arc::new(Store::new(
            retention,
            Duration::from_secs(600),
            crate::config::Limits::default(),
        ));
        use super::super::fixtures::{bytes, hello_n1, link};
        let hello = hello_n1(
            vec![link(1, pb::LinkClass::Infiniband, "mlx5_0", "1", "")],
            vec![
                bytes(1, 1, "tx_bytes", pb::Tier::Fast),
                bytes(2, 1, "rx_bytes", pb::Tier::Fast),
            ],
        );
        let agent =
            crate::ingest::direct::DirectAgent::hello(store.clone(), hello, t0).expect("hello");
        (store, agent)
    }

    /// Far behind, the engine skips the traffic its inference no longer holds and the steps the node's
    /// samples no longer reach, counts them, and adds no step its samples do not cover; keeping up, it skips
    /// nothing.
    #[test]
    fn an_engine_far_behind_skips_what_it_cannot_cut_or_cover_and_counts_it() {
        use commwatch_proto::v1 as pb;
        const MS: i64 = 1_000_000;
        const T0: i64 = 1_700_000_000_000_000_000;
        let (store, mut agent) = bursting_node(Duration::from_secs(10), T0);
        let steps = Arc::new(StepStore::new());
        let passes = Passes::new().expect("pass metrics");
        let mut e = Engine::new(store.clone(), steps.clone(), passes.clone());
        let (mut tick, mut acc, mut seq) = (1i64, 0u64, 0u64);
        // Ticks of 50 ms up to `until` (ms), a batch every 250 ms, a pass every 500 ms when `passes`.
        let mut run = |until: i64, with_passes: bool, e: &mut Engine| -> i64 {
            while tick * 50 < until {
                seq += 1;
                let mut b = pb::SampleBatch {
                    seq,
                    ..Default::default()
                };
                for t in tick..tick + 5 {
                    acc += 50_000 + if t % 14 >= 7 { 400_000_000 } else { 0 };
                    b.timestamps_unix_ns.push(T0 + t * 50 * MS);
                    b.tick_lengths.push(2);
                    b.series_ids.extend([1, 2]);
                    b.values.extend([acc, acc]);
                }
                tick += 5;
                let now = T0 + tick * 50 * MS;
                agent.batch(b, now).expect("batch");
                if with_passes && seq % 2 == 0 {
                    e.tick(now);
                }
            }
            T0 + tick * 50 * MS
        };
        run(2_000, true, &mut e);
        // Nothing dropped yet: no step of the node is older than what it lost.
        assert_eq!(store.with_node("n1", evicted_through), Some(None));
        run(20_000, true, &mut e);
        assert!(store.with_node("n1", evicted_through).flatten().is_some());
        let kept_up = steps.node_steps("n1", usize::MAX).expect("node").len();
        assert!(kept_up > 15, "{kept_up} steps keeping up");
        assert_eq!(passes.steps_skipped_seconds.get(), 0.0, "keeping up");
        // 40 s without a pass: the inference holds the newest 30 s, the store the newest 10 s.
        let now = run(60_000, false, &mut e);
        e.tick(now);
        let skipped = passes.steps_skipped_seconds.get();
        // The 40 s less what the store still holds (10 s and less than a chunk), less a step or two.
        assert!((24.0..30.5).contains(&skipped), "{skipped} s skipped");
        let oldest = store
            .with_node("n1", |n| n.tick_time(n.oldest_tick()))
            .flatten()
            .expect("samples");
        let held = steps.node_steps("n1", usize::MAX).expect("node");
        let new: Vec<&NodeStep> = held[kept_up..].iter().collect();
        assert!(!new.is_empty(), "the newest steps are cut");
        for s in new {
            assert!(
                s.start_unix_ns >= oldest,
                "{} before {oldest}",
                s.start_unix_ns
            );
            assert_eq!(s.links.len(), 1, "covered: {s:?}");
        }
        // Caught up: nothing more is skipped.
        run(65_000, true, &mut e);
        assert_eq!(passes.steps_skipped_seconds.get(), skipped);
        // A pass whose figures come long after its reads (a pass over a large fleet): by then the store
        // no longer holds the oldest steps' samples.
        let now = run(75_000, false, &mut e);
        let names = store.node_names(now);
        e.follow_names(&names);
        let inferred: Vec<NodeInferred> = names
            .iter()
            .enumerate()
            .filter_map(|(i, n)| e.read_node(i, n))
            .collect();
        e.queue_inferred(inferred);
        let queued: Vec<(i64, i64)> = e.nodes[0]
            .1
            .awaiting
            .iter()
            .map(|s| (s.start, s.end))
            .collect();
        run(82_000, false, &mut e);
        let oldest = store
            .with_node("n1", |n| n.tick_time(n.oldest_tick()))
            .flatten()
            .expect("samples");
        let gone: i64 = queued
            .iter()
            .filter(|s| s.0 < oldest)
            .map(|s| s.1 - s.0)
            .sum();
        assert!(
            gone > 0 && queued.iter().any(|s| s.0 >= oldest),
            "{queued:?} {oldest}"
        );
        let before = e.skips.pass_ns;
        let held = steps.node_steps("n1", usize::MAX).expect("node").len();
        let added = e.complete_node(0);
        assert_eq!(e.skips.pass_ns - before, gone, "the steps no sample covers");
        let held = steps.node_steps("n1", usize::MAX).expect("node")[held..].to_vec();
        assert_eq!(held.len(), added);
        assert!(
            added > 0
                && held
                    .iter()
                    .all(|s| s.start_unix_ns >= oldest && s.links.len() == 1)
        );
    }

    /// Skipping is warned about when it starts, at most once a minute, and counted in seconds.
    #[test]
    fn skipping_is_counted_and_warned_when_it_starts() {
        const S: i64 = 1_000_000_000;
        let passes = Passes::new().expect("pass metrics");
        let c = &passes.steps_skipped_seconds;
        let mut k = Skips::default();
        let t0 = 1_700_000_000 * S;
        assert!(!k.done(c, t0, 3), "nothing skipped");
        k.add(-S);
        assert!(!k.done(c, t0, 3), "a negative span is nothing");
        k.add(3 * S / 2);
        k.add(S);
        assert!(k.done(c, t0 + S, 3), "starts skipping");
        assert_eq!(c.get(), 2.5);
        k.add(S);
        assert!(!k.done(c, t0 + 2 * S, 3), "goes on skipping");
        assert!(!k.done(c, t0 + 3 * S, 3));
        k.add(S);
        assert!(!k.done(c, t0 + 4 * S, 3), "starts again within the minute");
        assert!(!k.done(c, t0 + 5 * S, 3));
        k.add(S);
        assert!(k.done(c, t0 + 70 * S, 3), "starts again a minute later");
        assert_eq!(c.get(), 5.5);
    }

    /// A pass's nodes keep their engines by name as nodes come and go, in the order of the names.
    #[test]
    fn the_nodes_engines_follow_their_names() {
        let store = Arc::new(Store::new(
            Duration::from_secs(60),
            Duration::from_secs(60),
            crate::config::Limits::default(),
        ));
        let passes = Passes::new().expect("pass metrics");
        let mut e = Engine::new(store, Arc::new(StepStore::new()), passes);
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
        let cursors = |e: &Engine| {
            e.nodes
                .iter()
                .map(|(n, st)| (n.clone(), st.marker_cursor))
                .collect::<Vec<_>>()
        };
        e.follow_names(&names(&["a", "b", "c"]));
        for (k, (_, st)) in e.nodes.iter_mut().enumerate() {
            st.marker_cursor = k as u64 + 1;
        }
        e.follow_names(&names(&["a", "b", "c"]));
        assert_eq!(
            cursors(&e),
            [("a".into(), 1), ("b".into(), 2), ("c".into(), 3)]
        );
        // b gone, d and an earlier 0 new: a and c keep theirs.
        e.follow_names(&names(&["0", "a", "c", "d"]));
        assert_eq!(
            cursors(&e),
            [
                ("0".into(), 0),
                ("a".into(), 1),
                ("c".into(), 3),
                ("d".into(), 0)
            ]
        );
        e.follow_names(&[]);
        assert!(e.nodes.is_empty());
    }

    #[test]
    fn covering_and_tail_copy_only_what_is_needed() {
        let r = ring(&[(10, 1), (20, 2), (30, 3), (40, 4), (50, 5)]);
        assert_eq!(covering(r.iter(), 20, 35), vec![(20, 2), (30, 3), (40, 4)]);
        assert_eq!(covering(r.iter(), 25, 30), vec![(20, 2), (30, 3)]);
        assert_eq!(covering(r.iter(), 5, 60), r.iter().collect::<Vec<_>>());
        assert_eq!(tail_from(r.iter(), 35), vec![(30, 3), (40, 4), (50, 5)]);
        assert_eq!(tail_from(r.iter(), 50), vec![(50, 5)]);
        assert_eq!(clamped(&[(10, 5), (20, 15)], 15), 10.0);
        assert_eq!(clamped(&[(10, 5), (20, 15)], 0), 5.0);
        assert_eq!(clamped(&[(10, 5), (20, 15)], 99), 15.0);
    }

    #[test]
    fn what_a_node_is_read_for_follows_its_inventory() {
        use crate::ingest::direct::DirectAgent;
        use commwatch_proto::v1 as pb;
        let store = Arc::new(Store::new(
            Duration::from_secs(60),
            Duration::from_secs(60),
            crate::config::Limits::default(),
        ));
        use super::super::fixtures::{bytes, hello_n1, link};
        // An HCA port and two NVLinks of GPU 0, each with its byte counters.
        let hello = hello_n1(
            vec![
                link(1, pb::LinkClass::Infiniband, "mlx5_0", "1", ""),
                link(2, pb::LinkClass::Nvlink, "gpu0", "0", "0"),
                link(3, pb::LinkClass::Nvlink, "gpu0", "1", "0"),
            ],
            (0..6)
                .map(|k| {
                    let metric = ["tx_bytes", "rx_bytes"][k as usize % 2];
                    bytes(k + 1, k / 2 + 1, metric, pb::Tier::Fast)
                })
                .collect(),
        );
        let mut agent = DirectAgent::hello(store.clone(), hello, 1).expect("hello");
        let (mut reads, mut gpu_links) = (NodeReads::default(), Vec::new());
        let read = |reads: &mut NodeReads, gpu_links: &mut Vec<Arc<Link>>, detail| {
            store
                .with_node("n1", |n| reads.update(n, detail, gpu_links))
                .expect("node");
        };
        read(&mut reads, &mut gpu_links, NvlinkDetail::Gpu);
        // The HCA's counters are the traffic; the figures: the HCA, and GPU 0 from its two NVLinks.
        assert_eq!(reads.traffic, [0, 1]);
        let devices: Vec<&str> = reads
            .units
            .iter()
            .map(|u| u.link.key.device.as_str())
            .collect();
        assert_eq!(devices, ["mlx5_0", "gpu0"]);
        assert_eq!(reads.links.len(), 3);
        assert_eq!(reads.members, [0, 1, 2]);
        let first = reads.units[1].link.clone();
        // The same layout: nothing chosen again (the GPU's link is the one kept).
        read(&mut reads, &mut gpu_links, NvlinkDetail::Gpu);
        assert!(Arc::ptr_eq(&reads.units[1].link, &first));
        // Per link: three figures from the same links.
        read(&mut reads, &mut gpu_links, NvlinkDetail::Link);
        assert_eq!(reads.units.len(), 3);
        // The agent's sums for GPU 0 come: they stand for the GPU, its NVLinks are no longer read.
        agent
            .inventory_update(
                pb::InventoryUpdate {
                    inventory: Some(pb::Inventory {
                        links: vec![link(4, pb::LinkClass::Nvlink, "gpu0", "", "0")],
                        series: vec![
                            bytes(7, 4, "tx_bytes", pb::Tier::Fast),
                            bytes(8, 4, "rx_bytes", pb::Tier::Fast),
                        ],
                    }),
                    jobs: None,
                },
                2,
            )
            .expect("update");
        read(&mut reads, &mut gpu_links, NvlinkDetail::Gpu);
        assert_eq!(reads.traffic, [0, 1]);
        assert_eq!(reads.units.len(), 2);
        assert!(reads.units[1].link.is_gpu_nvlinks());
        assert_eq!(reads.links.len(), 2, "the HCA and the sums");
        let sums = store
            .with_node("n1", |n| {
                let (tx, rx) = n.link_byte_series(3);
                (tx.map(|s| s.slot()), rx.map(|s| s.slot()))
            })
            .expect("node");
        assert!(sums.0.is_some() && sums.1.is_some());
        assert_eq!(reads.links[1].slots, sums, "the sums' series");
    }

    #[test]
    fn clamped_walk_equals_clamped_per_time() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..300 {
            let n = r.random_range(0..30);
            let (mut t, mut acc) = (0i64, 0u64);
            let s: Vec<(i64, u64)> = (0..n)
                .map(|_| {
                    t += r.random_range(1..100);
                    acc += r.random_range(0..1u64 << 40);
                    (t, acc)
                })
                .collect();
            let k = r.random_range(0..40);
            let mut times: Vec<i64> = (0..k).map(|_| r.random_range(-20..t + 20)).collect();
            times.sort_unstable();
            let per_time: Vec<f64> = times.iter().map(|&x| clamped(&s, x)).collect();
            assert_eq!(clamped_ascending(&s, &times), per_time, "{s:?} {times:?}");
        }
    }

    /// A link of `class` on `device`/`port` (an NVLink when `gpu` is set) of `capacity` bytes/s.
    fn link(class: LinkClass, device: &str, port: &str, gpu: Option<&str>) -> Arc<Link> {
        use commwatch_model::{Endpoint, LinkKey, LinkRole};
        Arc::new(Link {
            key: LinkKey::new(class, device, port),
            endpoint: Endpoint::legacy(class, device, port),
            role: LinkRole::Fabric,
            capacity_bytes_per_second: Some(if gpu.is_some() { 25e9 } else { 50e9 }),
            state: "up".into(),
            attributes: Default::default(),
            gpu: gpu.map(str::to_string),
            link: gpu.filter(|_| !port.is_empty()).map(|_| port.to_string()),
        })
    }

    /// A node's covered links: an HCA port, then GPUs 0 and 1 with three NVLinks each, interleaved, each
    /// link's 50 ms samples over 1 s with a burst (link `k` moving `k + 1` GB/s from 300 to 700 ms).
    fn node() -> Covered {
        let mut c = Covered {
            period_s: 0.05,
            ..Covered::default()
        };
        let mut links = vec![link(LinkClass::Infiniband, "mlx5_0", "1", None)];
        for n in 0..3 {
            for g in 0..2 {
                let port = n.to_string();
                let gpu = g.to_string();
                links.push(link(
                    LinkClass::Nvlink,
                    &format!("gpu{g}"),
                    &port,
                    Some(gpu.as_str()),
                ));
            }
        }
        for (k, l) in links.into_iter().enumerate() {
            let mut acc = 0u64;
            let from = c.samples.len();
            for i in 0..=20i64 {
                if (7..=14).contains(&i) {
                    acc += (k as u64 + 1) * 50_000_000;
                }
                c.samples.push((i * 50_000_000, acc));
            }
            let to = c.samples.len();
            c.links.push(CoveredLink {
                link: l,
                slots: (None, None),
                tx: Held::Copied(from..to),
                rx: Held::Copied(from..to),
            });
        }
        c
    }

    fn figures(
        c: &Covered,
        detail: NvlinkDetail,
        kept: &mut Vec<Arc<Link>>,
    ) -> Vec<StepLinkFigure> {
        let (mut units, mut members) = (Vec::new(), Vec::new());
        figure_units(&c.links, detail, kept, &mut units, &mut members);
        let mut parts = Vec::new();
        let mut scratch = LinkScratch::default();
        step_links(
            (c, &Tails::default(), &units, &members),
            (100_000_000, 900_000_000),
            c.period_s,
            &mut parts,
            &mut scratch,
        )
    }

    type StepLinkFigure = crate::steps::StepLink;

    #[test]
    fn nvlink_figures_per_gpu_are_their_links_summed() {
        let c = node();
        let mut kept = Vec::new();
        let per_link = figures(&c, NvlinkDetail::Link, &mut kept);
        assert_eq!(per_link.len(), 7, "every link as itself");
        assert!(kept.is_empty());
        let per_gpu = figures(&c, NvlinkDetail::Gpu, &mut kept);
        assert_eq!(per_gpu.len(), 3, "the port, then one figure per GPU");
        assert_eq!(per_gpu[0], per_link[0]);
        for (g, f) in per_gpu[1..].iter().enumerate() {
            let device = format!("gpu{g}");
            assert!(f.link.is_gpu_nvlinks(), "{:?}", f.link);
            assert_eq!(f.link.key.device, device);
            assert_eq!(f.link.gpu.as_deref(), Some(g.to_string().as_str()));
            let links: Vec<&StepLinkFigure> = per_link
                .iter()
                .filter(|l| l.link.key.device == device)
                .collect();
            assert_eq!(links.len(), 3);
            let sum = |v: fn(&StepLinkFigure) -> u64| links.iter().map(|l| v(l)).sum::<u64>();
            assert_eq!(f.tx_bytes, sum(|l| l.tx_bytes));
            assert_eq!(f.rx_bytes, sum(|l| l.rx_bytes));
            assert_eq!(f.capacity_bytes_per_second, Some(75e9));
            // Every link bursts over the same 400 ms: so does the GPU, at the sum of their rates.
            assert!((f.active_s - 0.4).abs() < 1e-9, "{}", f.active_s);
            assert!(f.confident);
            let rates: f64 = links
                .iter()
                .filter_map(|l| l.achieved_bytes_per_second)
                .sum();
            let achieved = f.achieved_bytes_per_second.expect("active");
            assert!((achieved / rates - 1.0).abs() < 1e-9, "{achieved} {rates}");
        }
        // The GPUs' links are kept and shared by the next steps.
        assert_eq!(kept.len(), 2);
        let again = figures(&c, NvlinkDetail::Gpu, &mut kept);
        assert!(Arc::ptr_eq(&again[1].link, &per_gpu[1].link));
        assert_eq!(again, per_gpu);
    }

    #[test]
    fn an_agents_gpu_sums_stand_for_the_gpu_and_are_not_counted_twice() {
        let mut c = node();
        // The agent's sums for GPU 1 (three times its first link's bytes), after its links.
        let sums = link(LinkClass::Nvlink, "gpu1", "", Some("1"));
        let from = c.samples.len();
        let none = Tails::default();
        let first = c.links[2].tx.get(&none, &c.samples);
        let copied: Vec<(i64, u64)> = first.iter().map(|&(t, v)| (t, 3 * v)).collect();
        c.samples.extend(copied);
        let to = c.samples.len();
        c.links.push(CoveredLink {
            link: sums.clone(),
            slots: (None, None),
            tx: Held::Copied(from..to),
            rx: Held::Copied(from..to),
        });
        let mut kept = Vec::new();
        let per_gpu = figures(&c, NvlinkDetail::Gpu, &mut kept);
        assert_eq!(per_gpu.len(), 3);
        let g1 = per_gpu
            .iter()
            .find(|f| f.link.key.device == "gpu1")
            .expect("gpu1");
        assert!(Arc::ptr_eq(&g1.link, &sums), "the agent's own link");
        assert_eq!(g1.tx_bytes, 3 * 8 * 3 * 50_000_000);
        assert_eq!(kept.len(), 1, "only GPU 0 is summed here");
        // Per link: the links, not the sums as well.
        let per_link = figures(&c, NvlinkDetail::Link, &mut kept);
        assert_eq!(per_link.len(), 7);
        assert!(per_link.iter().all(|f| !f.link.is_gpu_nvlinks()));
        // Sums alone (the links without byte counters): the sums, per link as per GPU.
        c.links
            .retain(|l| l.link.key.class != LinkClass::Nvlink || l.link.is_gpu_nvlinks());
        for detail in [NvlinkDetail::Link, NvlinkDetail::Gpu] {
            let f = figures(&c, detail, &mut kept);
            assert_eq!(f.len(), 2, "{detail}");
            assert!(Arc::ptr_eq(&f[1].link, &sums));
        }
    }

    fn inferred(node: &str, period_s: f64, strength: f64) -> NodeInferred<'_> {
        let job = commwatch_model::Job {
            id: "j".into(),
            ranks: Vec::new(),
            conflicts: Vec::new(),
        };
        NodeInferred {
            node,
            index: 0,
            jobs: Arc::new(JobList { jobs: vec![job] }),
            steps: Vec::new(),
            period: Some(crate::steps::PeriodEstimate { period_s, strength }),
            following: true,
        }
    }

    #[test]
    fn the_reference_is_the_period_the_nodes_share() {
        // A neighbour at half the step, two nodes at the step, one reading two steps as one: the two agree.
        let g = [
            inferred("node0", 0.73, 0.45),
            inferred("node1", 1.50, 0.37),
            inferred("node2", 2.93, 0.6),
            inferred("node3", 1.58, 0.31),
        ];
        let group: Vec<&NodeInferred> = g.iter().collect();
        assert_eq!(reference(&group).map(|n| n.node), Some("node3"));
        // Alone against its neighbour at half the step, the step wins.
        let g1 = [inferred("node0", 0.73, 0.45), inferred("node1", 1.50, 0.37)];
        let group: Vec<&NodeInferred> = g1.iter().collect();
        assert_eq!(reference(&group).map(|n| n.node), Some("node1"));
        // A node still warming up cannot lead.
        let mut g2 = [inferred("node0", 1.5, 0.5), inferred("node1", 3.0, 0.9)];
        g2[0].following = false;
        let group: Vec<&NodeInferred> = g2.iter().collect();
        assert_eq!(reference(&group).map(|n| n.node), Some("node1"));
        assert!(same_period(1.5, 1.6) && !same_period(0.75, 1.5));
    }
}
