//! Everything the collector holds about one node ([`NodeState`]): the current agent instance's inventory
//! (links and series, with the agent-local id of each), the series' windows, per-instance sequence numbers for
//! dedup and durability, the step markers and the job list.
//!
//! A batch's ticks are written row-major into the node's head (`super::head`), each sample checked by its
//! series on the way (order, resets, plausibility); every [`FLUSH`] rows (the first time at a count of the
//! node's own) the oldest go into the series' rings, series by series. Readers see both
//! ([`NodeState::samples`]). Applying a `Hello`, an inventory update or a batch either changes the node as a
//! whole or, refused ([`StoreError`]), not at all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use commwatch_model::{Link, LinkKey, SeriesKind, Tier};
use tokio::sync::{oneshot, watch};

use super::collectives::CollectiveLog;
use super::head::{Head, FLUSH, HOLD_ROWS, KEEP_ROWS};
use super::markers::MarkerLog;
use super::memory::{footprint, SeriesMemory};
use super::newest_rates::newest_rates;
use super::prefetch::prefetch;
use super::rate::plausibility_cap;
use super::ring::Ring;
use super::series::{ApplyCounts, Series, SeriesKey};
use super::ticks::{Samples, Ticks};
use super::{
    Batch, Hello, Inventory, JobList, LinkSnapshot, NodeSnapshot, SeriesDesc, SeriesSnapshot,
    StoreError, StoreMemory,
};
use crate::config::Limits;

/// Most samples one series keeps, whatever the retention and period (1 MiB of samples).
pub const HARD_CAP_SAMPLES: usize = 65_536;
/// Period assumed for a tier the agent did not state: fast 50 ms (20 Hz), slow 1 s.
const DEFAULT_FAST_MS: u32 = 50;
const DEFAULT_SLOW_MS: u32 = 1000;
/// Agent instances whose highest sequence number a node remembers (for dedup of late resends).
const MAX_REMEMBERED_INSTANCES: usize = 16;
/// Series ids below this are mapped through a dense table; larger ones through a hash map.
const DENSE_ID_LIMIT: u32 = 1 << 17;

const UNKNOWN: u32 = u32::MAX;
const REFUSED: u32 = u32::MAX - 1;

/// Source of [`NodeState::layout`] numbers: unique in the process, so that a node created again (after it
/// expired) never repeats one its predecessor had.
static LAYOUTS: AtomicU64 = AtomicU64::new(1);

/// A fresh [`NodeState::layout`] number.
fn next_layout() -> u64 {
    LAYOUTS.fetch_add(1, Ordering::Relaxed)
}

/// Samples a series read every `period_ms` holds over `retention_ns`: 1/8 headroom for jitter, plus the
/// sample at each end.
fn samples_for(retention_ns: i64, period_ms: u32) -> usize {
    let n = (retention_ns / 1_000_000) as u64 / u64::from(period_ms.max(1));
    (n + n / 8 + 2) as usize
}

/// Ticks a node holds over `retention_ns` with a fast period of `period_ms`: twice the fast tier's samples
/// (room for slow-tier ticks of their own and for late ones), at most [`HARD_CAP_SAMPLES`] × 2 (1 MiB).
fn tick_cap(retention_ns: i64, period_ms: u32) -> usize {
    samples_for(retention_ns, period_ms)
        .saturating_mul(2)
        .min(2 * HARD_CAP_SAMPLES)
}

/// Samples ahead of the one being checked whose series a tick asks for (`super::prefetch`): at 16 the apply of a
/// demo node's tape took 0.97× the time it took at 8 (100 nodes, in process).
const AHEAD_TICK: usize = 16;
/// Slots ahead of the one being flushed whose series, ring state and ring's open bytes a flush asks for, in
/// that order: each hint reads the pointer that the one before it brought in.
const AHEAD_SERIES: usize = 24;
const AHEAD_RING: usize = 12;
const AHEAD_OPEN: usize = 6;

/// The hints of a flush at `slot` (slots ascend through a flush).
#[inline]
fn prefetch_flush(series: &[Series], slot: usize) {
    if let Some(s) = series.get(slot + AHEAD_SERIES) {
        // The line of the ring's pointer: a flush reads nothing else of a series.
        prefetch(&s.ring, size_of::<Box<Ring>>());
    }
    if let Some(s) = series.get(slot + AHEAD_RING) {
        prefetch(&*s.ring, size_of::<Ring>());
    }
    if let Some(s) = series.get(slot + AHEAD_OPEN) {
        s.ring.prefetch_open();
    }
}

/// Fewest rows of a node's first flush: it moves `FIRST_FLUSH_MIN - KEEP_ROWS` rows (48, 2.3 s of ticks), so that
/// a 1 Hz series has the two samples its staggered start reads its line from ([`Ring::start_staggered`]).
const FIRST_FLUSH_MIN: usize = KEEP_ROWS + 48;

/// Rows at which the head of a node whose name hashes to `phase` first flushes: between [`FIRST_FLUSH_MIN`] and
/// [`FLUSH`]. Why: nodes that start together (a job's, a fleet's after a collector restart) take their ticks in
/// step, and a flush moves a node's whole head at once; at the same row count every node would flush within the
/// same batch period, every `FLUSH - KEEP_ROWS` ticks, and the acks of that period would wait for all of them.
/// Staggered once, they stay apart (each later flush comes `FLUSH - KEEP_ROWS` rows after the one before).
fn first_flush(phase: u64) -> usize {
    FIRST_FLUSH_MIN + (phase % (FLUSH - FIRST_FLUSH_MIN + 1) as u64) as usize
}

/// A hash of a node's name, the same in every run (the phases of its flushes and of its series' chunks).
fn name_hash(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// The phase of the chunks of the series in `slot` of a node whose name hashes to `node`
/// ([`Ring::start_staggered`]): a node's series apart from each other, and from other nodes'.
fn chunk_phase(node: u64, slot: usize) -> u64 {
    node.wrapping_add((slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .rotate_left(17)
}

/// Result of offering a batch to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchOutcome {
    /// Applied; `gap` batches were skipped by the agent before it (lost).
    Accepted { gap: u64, counts: ApplyCounts },
    /// Its sequence number is not above the highest held for the instance: not applied again.
    Duplicate,
}

/// agent-local id → series slot (or `REFUSED`).
#[derive(Debug, Default)]
struct IdMap {
    dense: Vec<u32>,
    sparse: HashMap<u32, u32>,
}

impl IdMap {
    #[inline]
    fn get(&self, id: u32) -> u32 {
        if id < DENSE_ID_LIMIT {
            self.dense.get(id as usize).copied().unwrap_or(UNKNOWN)
        } else {
            self.sparse.get(&id).copied().unwrap_or(UNKNOWN)
        }
    }

    fn insert(&mut self, id: u32, slot: u32) {
        if id < DENSE_ID_LIMIT {
            let i = id as usize;
            if self.dense.len() <= i {
                self.dense.resize(i + 1, UNKNOWN);
            }
            self.dense[i] = slot;
        } else {
            self.sparse.insert(id, slot);
        }
    }

    fn clear(&mut self) {
        self.dense.clear();
        self.sparse.clear();
    }

    fn heap_bytes(&self) -> usize {
        self.dense.capacity() * 4 + self.sparse.capacity() * 12
    }
}

/// The series of the previous inventory (by key) that a new inventory may take over.
type OldSeries<'a> = (
    &'a HashMap<Arc<SeriesKey>, usize>,
    &'a mut Vec<Option<Series>>,
);

/// A link, as the latest inventory describes it, and the slots of its byte counters.
#[derive(Debug)]
pub struct LinkState {
    pub link: Arc<Link>,
    tx: Option<usize>,
    rx: Option<usize>,
}

#[derive(Debug)]
struct InstanceSeq {
    instance_id: u64,
    /// Highest sequence number applied to the store.
    highest: u64,
    /// Highest sequence number held durably (committed to SQLite, or applied when persistence is off).
    durable: Arc<watch::Sender<u64>>,
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) id: u64,
    pub(super) close: Option<oneshot::Sender<()>>,
}

/// Everything the collector holds about one node.
#[derive(Debug)]
pub struct NodeState {
    pub(super) name: String,
    agent_version: String,
    boot_id: String,
    instance_id: u64,
    fast_period_ms: u32,
    slow_period_ms: u32,
    links: Vec<LinkState>,
    link_ids: HashMap<u32, usize>,
    series: Vec<Series>,
    /// What `series` hold, kept as they change ([`NodeState::memory`] reads it).
    kept: SeriesMemory,
    by_key: HashMap<Arc<SeriesKey>, usize>,
    series_ids: IdMap,
    /// Series ids described on the current instance (refused ones included).
    described: usize,
    seqs: Vec<InstanceSeq>,
    pub(super) last_seen_unix_ns: i64,
    pub(super) conn: Option<Conn>,
    dropped_batches_total: u64,
    retention_ns: i64,
    /// The timestamps of the node's ticks, which its series' rings and its head refer to by number.
    ticks: Ticks,
    /// The newest ticks' samples, row-major, before they move into their series' rings.
    head: Head,
    /// Rows at which the head flushes next: [`FLUSH`], except before the node's first flush, which comes at a
    /// number of rows of its own ([`first_flush`]).
    flush_at: usize,
    /// A hash of the node's name ([`name_hash`]): the phase of its first flush and of its series' chunks.
    phase: u64,
    /// [`Ticks::first`] when every ring was last told to evict before it.
    evicted_before: u64,
    /// How far past its receipt a tick's timestamp may be (`limits.max_clock_skew`).
    future_ns: i64,
    markers: MarkerLog,
    collectives: CollectiveLog,
    /// The latest complete job list of the current agent instance (empty until one arrives).
    pub(super) jobs: Arc<JobList>,
    /// What the slots and tick numbers mean ([`NodeState::layout`]): changed by every inventory.
    layout: u64,
    /// `(timestamp, tick number)` of the newest reading of a link's byte counter (0: none), the largest of
    /// those series' `(last_ts, last_tick)`: kept as samples are applied, taken again at each inventory.
    newest_bytes: (i64, u64),
    /// The newest tick a reader of new samples read, plus one (0: none read yet): [`NodeState::samples_after`]
    /// sets it, the head's flush waits for it ([`NodeState::rows_to_flush`]).
    read_to: AtomicU64,
    /// What the current agent instance's `Hello` said it is blind to.
    pub(super) blind: Arc<Vec<super::Blindness>>,
}

impl NodeState {
    pub(super) fn new(name: &str, retention_ns: i64, future_ns: i64) -> NodeState {
        let phase = name_hash(name);
        NodeState {
            name: name.to_string(),
            agent_version: String::new(),
            boot_id: String::new(),
            instance_id: 0,
            fast_period_ms: 0,
            slow_period_ms: 0,
            links: Vec::new(),
            link_ids: HashMap::new(),
            series: Vec::new(),
            kept: SeriesMemory::default(),
            by_key: HashMap::new(),
            series_ids: IdMap::default(),
            described: 0,
            seqs: Vec::new(),
            last_seen_unix_ns: 0,
            conn: None,
            dropped_batches_total: 0,
            retention_ns,
            ticks: Ticks::new(tick_cap(retention_ns, DEFAULT_FAST_MS)),
            head: Head::default(),
            flush_at: first_flush(phase),
            phase,
            evicted_before: 0,
            future_ns,
            markers: MarkerLog::default(),
            collectives: CollectiveLog::default(),
            jobs: Arc::default(),
            blind: Arc::default(),
            layout: next_layout(),
            newest_bytes: (0, 0),
            read_to: AtomicU64::new(0),
        }
    }

    /// A number that stays the same while the node's series keep their slots and its ticks their numbers:
    /// a new one at every inventory (a `Hello` or an update, which may move series to other slots and resize
    /// their rings), and for a node created again. A reader that keeps what it read by slot and tick
    /// ([`NodeState::samples_after`]) starts over when it changes.
    pub fn layout(&self) -> u64 {
        self.layout
    }

    /// The timestamp of tick `n`, Unix ns; `None` once the node no longer holds that tick (nor any sample of
    /// it).
    pub fn tick_time(&self, n: u64) -> Option<i64> {
        self.ticks.time(n)
    }

    /// Visits the samples taken at ticks numbered after `after` (every tick when `None`) and stamped at or after
    /// `since_ns` of the series whose slot `wanted` marks (`wanted[slot]`; slots beyond it are skipped), as
    /// `to(slot, tick, value)`: each series' samples oldest first, series interleaved, values as
    /// [`NodeState::samples`] gives them (samples of ticks no longer held are skipped, as there). Returns the
    /// number of the newest tick the node ever took (`None`: none yet), the `after` of the next call.
    ///
    /// Cost: what is new only, row-major from the head, while the head still holds every tick after `after`
    /// (its flush waits for this reader, up to `HOLD_ROWS` rows: [`NodeState::rows_to_flush`]); else each
    /// wanted series' ring is read back to `after` or `since_ns` (its open part decoded), as a reader of the
    /// whole window would. One reader per node: the flush waits for the latest call's.
    pub fn samples_after(
        &self,
        after: Option<u64>,
        since_ns: i64,
        wanted: &[bool],
        mut to: impl FnMut(usize, u64, u64),
    ) -> Option<u64> {
        let newest = self.visit_after(after, since_ns, wanted, |slot, n, _, v| to(slot, n, v));
        self.read_to
            .store(newest.map_or(0, |n| n + 1), Ordering::Relaxed);
        newest
    }

    /// [`NodeState::samples_after`] for a second reader (the step engine), which the head's flush does not
    /// wait for, so its mark is not moved: the samples of the wanted series taken at ticks after `after`, as
    /// `to(slot, tick, timestamp_ns, value)`, of the newest ticks back to the newest one stamped before
    /// `since_ns` (a tick-ordered suffix of each series' [`NodeState::samples`], also where a clock went
    /// back); returns the newest tick's number, as there. Its cost is the same while the head still holds
    /// every tick after `after` (the newest `KEEP_ROWS` rows at least, about half a second of a demo agent's
    /// ticks); past that, each wanted series' ring is read back to `after` or `since_ns`.
    pub fn samples_after_unmarked(
        &self,
        after: Option<u64>,
        since_ns: i64,
        wanted: &[bool],
        to: impl FnMut(usize, u64, i64, u64),
    ) -> Option<u64> {
        let lower = after
            .map_or(0, |a| a.saturating_add(1))
            .max(self.ticks.first());
        let mut first = self.ticks.next();
        while first > lower && self.ticks.time(first - 1).is_some_and(|t| t >= since_ns) {
            first -= 1;
        }
        self.visit_after(first.checked_sub(1), i64::MIN, wanted, to)
    }

    /// Number of the oldest tick the node holds: every sample of an older tick is evicted (see [`Ticks`]).
    pub fn oldest_tick(&self) -> u64 {
        self.ticks.first()
    }

    /// The visit of [`NodeState::samples_after`], without its mark, each sample with its tick's timestamp.
    fn visit_after(
        &self,
        after: Option<u64>,
        since_ns: i64,
        wanted: &[bool],
        mut to: impl FnMut(usize, u64, i64, u64),
    ) -> Option<u64> {
        let newest = self.ticks.next().checked_sub(1);
        let from = after.map_or(-1, |a| a as i64);
        let in_rings = match self.head.first_tick() {
            Some(h) => from < h - 1,
            None => newest.is_some_and(|n| n as i64 > from),
        };
        // The timestamp of tick `n` when it is new and held.
        let time = |n: i64| {
            let t = self
                .ticks
                .time(u64::try_from(n).ok().filter(|_| n > from)?)?;
            (t >= since_ns).then_some(t)
        };
        if in_rings {
            let mut back = Vec::new();
            for (slot, s) in self.series.iter().enumerate() {
                if wanted.get(slot).copied().unwrap_or(false) {
                    back.clear();
                    back.extend(
                        s.ring
                            .iter()
                            .rev()
                            .map_while(|(n, v)| Some((n, time(n)?, v))),
                    );
                    back.iter()
                        .rev()
                        .for_each(|&(n, t, v)| to(slot, n as u64, t, v));
                }
            }
        }
        self.head.rows_after(from, |tick, slots, values| {
            let Some(t) = time(tick) else {
                return;
            };
            for (&slot, &v) in slots.iter().zip(values) {
                if wanted.get(slot as usize).copied().unwrap_or(false) {
                    to(slot as usize, tick as u64, t, v);
                }
            }
        });
        newest
    }

    /// Rows the head's flush moves into the rings now (`None`: not yet). Without a reader of new samples, all
    /// but the newest `KEEP_ROWS`. With one ([`NodeState::samples_after`]), the flush waits until it has read
    /// those rows, up to `HOLD_ROWS` rows held: so the reader finds what is new in the head, row-major,
    /// instead of decoding every series' ring (an agent stamps 50–60 ticks a second, each source its own, so
    /// the newest `KEEP_ROWS` rows hold about half a second). Waiting makes the runs longer, not shorter.
    fn rows_to_flush(&self) -> Option<usize> {
        let rows = self.head.rows();
        let moved = rows - KEEP_ROWS;
        match self.read_to.load(Ordering::Relaxed) {
            read_to if read_to > 0 && rows < HOLD_ROWS => {
                let read = self.head.rows_through(read_to as i64 - 1);
                (read >= moved).then_some(moved)
            }
            _ => Some(moved),
        }
    }

    /// The node's latest job list (empty when the agent sent none since its instance started).
    /// What the current agent instance said it is blind to (empty: nothing).
    pub fn blind(&self) -> &Arc<Vec<super::Blindness>> {
        &self.blind
    }

    pub fn jobs(&self) -> &Arc<JobList> {
        &self.jobs
    }

    /// Replaces the node's job list (an `InventoryUpdate` carrying jobs, or replay).
    pub(crate) fn set_jobs(&mut self, jobs: JobList) {
        self.jobs = Arc::new(jobs);
    }

    /// The node's step markers.
    pub fn markers(&self) -> &MarkerLog {
        &self.markers
    }

    /// The node's NCCL Inspector records.
    pub fn collectives(&self) -> &CollectiveLog {
        &self.collectives
    }

    /// Fast-tier sampling period the agent stated, in ms (the default 50 when it stated none).
    pub fn fast_period_ms(&self) -> u32 {
        if self.fast_period_ms > 0 {
            self.fast_period_ms
        } else {
            DEFAULT_FAST_MS
        }
    }

    /// The transmit and receive byte-counter series of link `i` (index into [`NodeState::links`]), when the
    /// agent described them. Their rings hold reset-corrected cumulative bytes.
    pub fn link_byte_series(&self, i: usize) -> (Option<&Series>, Option<&Series>) {
        let Some(l) = self.links.get(i) else {
            return (None, None);
        };
        let get = |slot: Option<usize>| slot.and_then(|s| self.series.get(s));
        (get(l.tx), get(l.rx))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The agent instance whose inventory is current.
    pub fn instance_id(&self) -> u64 {
        self.instance_id
    }

    pub fn boot_id(&self) -> &str {
        &self.boot_id
    }

    pub fn links(&self) -> &[LinkState] {
        &self.links
    }

    pub fn series(&self) -> &[Series] {
        &self.series
    }

    /// The samples of `s`, one of this node's series, oldest first as `(timestamp_ns, value)`: for counters
    /// the reset-corrected cumulative increase, for gauges the f64 bits.
    pub fn samples<'a>(&'a self, s: &'a Series) -> Samples<'a> {
        Samples::new(&s.ring, &self.head, s.slot, &self.ticks)
    }

    /// The timestamp of the newest sample of `s`, one of this node's series: `samples(s).last()`'s, without
    /// reading its ring or the head (`None` when it has none, or the node no longer holds its tick).
    pub fn newest_sample(&self, s: &Series) -> Option<i64> {
        (s.last_ts > 0 && s.last_tick >= self.ticks.first()).then_some(s.last_ts)
    }

    /// The timestamp of the newest sample of any link's byte counters ([`NodeState::link_byte_series`]): the
    /// largest [`NodeState::newest_sample`] of those series (`None`: none has one). Kept as samples are
    /// applied, so it costs no walk over the links, unless the newest reading's tick is no longer held (the
    /// node's byte counters silent for the retention, or its clock gone back): then it walks them.
    pub fn newest_byte_sample(&self) -> Option<i64> {
        let (ts, tick) = self.newest_bytes;
        if ts > 0 && tick >= self.ticks.first() {
            return Some(ts);
        }
        (0..self.links.len())
            .flat_map(|i| {
                let (tx, rx) = self.link_byte_series(i);
                [tx, rx]
            })
            .flatten()
            .filter_map(|s| self.newest_sample(s))
            .max()
    }

    /// Whether any of the node's links has a byte counter ([`NodeState::link_byte_series`]).
    pub fn has_byte_series(&self) -> bool {
        self.links.iter().any(|l| l.tx.is_some() || l.rx.is_some())
    }

    pub fn last_seen_unix_ns(&self) -> i64 {
        self.last_seen_unix_ns
    }

    /// Whether `conn_id` is the node's current stream.
    pub(crate) fn is_current(&self, conn_id: u64) -> bool {
        self.conn.as_ref().is_some_and(|c| c.id == conn_id)
    }

    pub(crate) fn touch(&mut self, unix_ns: i64) {
        self.last_seen_unix_ns = self.last_seen_unix_ns.max(unix_ns);
    }

    /// Samples a series of `tier` needs for the retention (a series of no stated tier is read as fast).
    fn ring_cap(&self, tier: Option<Tier>) -> usize {
        let period_ms = match tier {
            Some(Tier::Slow) if self.slow_period_ms > 0 => self.slow_period_ms,
            Some(Tier::Slow) => DEFAULT_SLOW_MS,
            Some(Tier::Fast) | None if self.fast_period_ms > 0 => self.fast_period_ms,
            Some(Tier::Fast) | None => DEFAULT_FAST_MS,
        };
        samples_for(self.retention_ns, period_ms).min(HARD_CAP_SAMPLES)
    }

    fn seq_entry(&mut self, instance_id: u64) -> &mut InstanceSeq {
        let pos = match self.seqs.iter().position(|s| s.instance_id == instance_id) {
            Some(p) => p,
            None => {
                if self.seqs.len() >= MAX_REMEMBERED_INSTANCES {
                    self.seqs.remove(0);
                }
                self.seqs.push(InstanceSeq {
                    instance_id,
                    highest: 0,
                    durable: Arc::new(watch::channel(0).0),
                });
                self.seqs.len() - 1
            }
        };
        &mut self.seqs[pos]
    }

    /// Highest sequence number applied for `instance_id` (0 if none).
    pub fn highest_seq(&self, instance_id: u64) -> u64 {
        self.seqs
            .iter()
            .find(|s| s.instance_id == instance_id)
            .map_or(0, |s| s.highest)
    }

    /// The durable-sequence channel of an instance (created on first use).
    pub(crate) fn durable(&mut self, instance_id: u64) -> Arc<watch::Sender<u64>> {
        self.seq_entry(instance_id).durable.clone()
    }

    fn series_key(
        &self,
        d: &SeriesDesc,
        links: &HashMap<u32, usize>,
    ) -> Result<SeriesKey, StoreError> {
        let link = if d.link_id == 0 {
            None
        } else {
            let idx = links.get(&d.link_id).ok_or(StoreError::UndescribedLink {
                series: d.id,
                link: d.link_id,
            })?;
            Some(self.links[*idx].link.key.clone())
        };
        Ok(SeriesKey {
            link,
            metric: d.metric.clone(),
            labels: d.labels.clone(),
        })
    }

    /// Installs a `Hello`'s inventory (complete at connect time). Series whose identity matches one already held
    /// keep their window and counter state; others are created; series not in the inventory are dropped.
    pub(crate) fn register_hello(
        &mut self,
        hello: &Hello,
        limits: &Limits,
    ) -> Result<(), StoreError> {
        let inv = &hello.inventory;
        if inv.series.len() > limits.max_series {
            return Err(StoreError::TooMany {
                field: "hello.inventory.series",
                what: "series",
                count: inv.series.len(),
                limit: limits.max_series,
            });
        }
        if inv.links.len() > limits.max_series {
            return Err(StoreError::TooMany {
                field: "hello.inventory.links",
                what: "links",
                count: inv.links.len(),
                limit: limits.max_series,
            });
        }
        // Validate every reference before changing anything.
        let link_ids: HashMap<u32, usize> = inv
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| (l.id, i))
            .collect();
        for d in &inv.series {
            if d.link_id != 0 && !link_ids.contains_key(&d.link_id) {
                return Err(StoreError::UndescribedLink {
                    series: d.id,
                    link: d.link_id,
                });
            }
        }
        self.agent_version = hello.agent_version.clone();
        self.boot_id = hello.boot_id.clone();
        self.blind = Arc::new(hello.blind.clone());
        if self.instance_id != hello.instance_id {
            // A new agent instance knows its own jobs and sends them after its Hello; the old list is gone.
            self.jobs = Arc::default();
        }
        self.instance_id = hello.instance_id;
        self.fast_period_ms = hello.fast_period_ms;
        self.slow_period_ms = hello.slow_period_ms;
        self.links = inv
            .links
            .iter()
            .map(|l| LinkState {
                link: Arc::new(l.link.clone()),
                tx: None,
                rx: None,
            })
            .collect();
        self.link_ids = link_ids;
        // Slots change meaning below: every head row goes into its ring first.
        self.flush_head(self.head.rows());
        let mut old: Vec<Option<Series>> = std::mem::take(&mut self.series)
            .into_iter()
            .map(Some)
            .collect();
        self.kept = SeriesMemory::default();
        let old_keys = std::mem::take(&mut self.by_key);
        self.series_ids.clear();
        self.described = 0;
        let links = self.link_ids.clone();
        for d in &inv.series {
            let key = self.series_key(d, &links)?;
            self.add_series(d, key, Some((&old_keys, &mut old)));
        }
        self.reindex();
        Ok(())
    }

    fn add_series(&mut self, d: &SeriesDesc, key: SeriesKey, old: Option<OldSeries<'_>>) {
        self.described += 1;
        let Some(kind) = d.kind else {
            self.series_ids.insert(d.id, REFUSED);
            return;
        };
        if let Some(&slot) = self.by_key.get(&key) {
            // Same identity described twice: one window.
            if self.series[slot].kind == kind {
                self.series_ids.insert(d.id, slot as u32);
                return;
            }
        }
        let reused = old.and_then(|(keys, series)| {
            let i = *keys.get(&key)?;
            match series.get_mut(i) {
                Some(s @ Some(_)) if s.as_ref().is_some_and(|x| x.kind == kind) => s.take(),
                _ => None,
            }
        });
        let mut series = match reused {
            Some(mut s) => {
                s.tier = d.tier;
                s
            }
            None => Series::new(Arc::new(key), kind, d.tier, self.ring_cap(d.tier)),
        };
        let slot = self.series.len();
        series.slot = slot;
        self.kept.add(&series);
        self.by_key.insert(series.key.clone(), slot);
        self.series.push(series);
        self.series_ids.insert(d.id, slot as u32);
    }

    /// Applies an `InventoryUpdate`: links matched by id are replaced, new ones added; new series described.
    /// A series id described again must keep its meaning (proto rule: descriptors are append-only).
    pub(crate) fn apply_inventory(
        &mut self,
        inv: &Inventory,
        limits: &Limits,
    ) -> Result<(), StoreError> {
        if self.described + inv.series.len() > limits.max_series {
            return Err(StoreError::TooMany {
                field: "inventory_update.inventory.series",
                what: "series",
                count: self.described + inv.series.len(),
                limit: limits.max_series,
            });
        }
        if self.links.len() + inv.links.len() > limits.max_series {
            return Err(StoreError::TooMany {
                field: "inventory_update.inventory.links",
                what: "links",
                count: self.links.len() + inv.links.len(),
                limit: limits.max_series,
            });
        }
        let mut links = self.link_ids.clone();
        let mut next = self.links.len();
        for l in &inv.links {
            links.entry(l.id).or_insert_with(|| {
                next += 1;
                next - 1
            });
        }
        // Check series before mutating anything.
        for d in &inv.series {
            if d.link_id != 0 && !links.contains_key(&d.link_id) {
                return Err(StoreError::UndescribedLink {
                    series: d.id,
                    link: d.link_id,
                });
            }
        }
        for l in &inv.links {
            match self.link_ids.get(&l.id) {
                Some(&i) => self.links[i].link = Arc::new(l.link.clone()),
                None => {
                    self.link_ids.insert(l.id, self.links.len());
                    self.links.push(LinkState {
                        link: Arc::new(l.link.clone()),
                        tx: None,
                        rx: None,
                    });
                }
            }
        }
        let link_ids = self.link_ids.clone();
        for d in &inv.series {
            let key = self.series_key(d, &link_ids)?;
            match self.series_ids.get(d.id) {
                UNKNOWN => self.add_series(d, key, None),
                REFUSED if d.kind.is_none() => {}
                REFUSED => return Err(StoreError::Redescribed { series: d.id }),
                slot => {
                    let s = &self.series[slot as usize];
                    if *s.key != key || Some(s.kind) != d.kind {
                        return Err(StoreError::Redescribed { series: d.id });
                    }
                }
            }
        }
        self.reindex();
        Ok(())
    }

    /// Recomputes link ↔ series references, plausibility caps and ring bounds after an inventory change (a new
    /// [`NodeState::layout`]).
    fn reindex(&mut self) {
        self.layout = next_layout();
        self.flush_head(self.head.rows());
        let by_key: HashMap<&LinkKey, usize> = self
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| (&l.link.key, i))
            .collect();
        let mut tx = vec![None; self.links.len()];
        let mut rx = vec![None; self.links.len()];
        let caps: Vec<usize> = self.series.iter().map(|s| self.ring_cap(s.tier)).collect();
        let fast_ms = self.fast_period_ms();
        self.ticks.set_cap(tick_cap(self.retention_ns, fast_ms));
        let horizon = self.ticks.first() as i64;
        for (slot, s) in self.series.iter_mut().enumerate() {
            s.link = s.key.link.as_ref().and_then(|k| by_key.get(k).copied());
            s.cap_per_s = plausibility_cap(None);
            let before = footprint(&s.ring);
            s.ring.set_cap(caps[slot]);
            s.ring.drop_chunks_before(horizon);
            self.kept.track(before, footprint(&s.ring));
            if let Some(li) = s.link {
                let is_counter = matches!(s.kind, SeriesKind::Counter { .. });
                if s.key.metric.ends_with("_bytes") && is_counter {
                    s.cap_per_s = plausibility_cap(self.links[li].link.capacity_bytes_per_second);
                }
                if is_counter && s.key.labels.is_empty() {
                    match s.key.metric.as_str() {
                        "tx_bytes" => tx[li] = Some(slot),
                        "rx_bytes" => rx[li] = Some(slot),
                        _ => {}
                    }
                }
            }
        }
        for (i, l) in self.links.iter_mut().enumerate() {
            l.tx = tx[i];
            l.rx = rx[i];
        }
        for s in &mut self.series {
            s.link_bytes = false;
        }
        for slot in tx.into_iter().chain(rx).flatten() {
            self.series[slot].link_bytes = true;
        }
        self.newest_bytes = self
            .series
            .iter()
            .filter(|s| s.link_bytes && s.last_ts > 0)
            .map(|s| (s.last_ts, s.last_tick))
            .max()
            .unwrap_or((0, 0));
    }

    /// Offers a batch of the current instance. Every series id is resolved before anything is applied, so a
    /// batch that fails validation leaves the store untouched. A tick stamped outside the window around
    /// `received_unix_ns` (see [`ApplyCounts::out_of_window`]) is skipped and counted; the window is judged at
    /// receipt, so replay decides as ingest did. `scratch` is reused across batches.
    pub(crate) fn apply_batch(
        &mut self,
        batch: &Batch,
        received_unix_ns: i64,
        scratch: &mut Vec<u32>,
    ) -> Result<BatchOutcome, StoreError> {
        self.touch(received_unix_ns);
        let instance = self.instance_id;
        let highest = self.seq_entry(instance).highest;
        if batch.seq <= highest {
            return Ok(BatchOutcome::Duplicate);
        }
        scratch.clear();
        scratch.reserve(batch.series_ids.len());
        for (i, &id) in batch.series_ids.iter().enumerate() {
            let slot = self.series_ids.get(id);
            if slot == UNKNOWN {
                return Err(StoreError::UndescribedSeries { index: i, id });
            }
            scratch.push(slot);
        }
        let mut counts = ApplyCounts::default();
        let retention_ns = self.retention_ns;
        let latest = received_unix_ns.saturating_add(self.future_ns);
        let mut i = 0usize;
        for (&ts, &n) in batch.timestamps_unix_ns.iter().zip(&batch.tick_lengths) {
            let end = i + n as usize;
            let (Some(slots), Some(values)) = (scratch.get(i..end), batch.values.get(i..end))
            else {
                break;
            };
            if ts <= 0 || ts > latest {
                counts.out_of_window += u64::from(n);
                i = end;
                continue;
            }
            self.apply_tick(ts, slots, values, retention_ns, &mut counts);
            i = end;
        }
        if self.head.rows() >= self.flush_at {
            if let Some(rows) = self.rows_to_flush() {
                self.flush_at = FLUSH;
                self.flush_head(rows);
            }
        }
        self.dropped_batches_total = batch.dropped_batches_total;
        for m in &batch.markers {
            self.markers.push(m.clone(), retention_ns);
            counts.markers += 1;
        }
        for c in &batch.collectives {
            let mut c = c.clone();
            c.record.hostname.clone_from(&self.name);
            c.received_unix_ns = received_unix_ns;
            self.collectives.push(c, retention_ns);
        }
        if !batch.collectives.is_empty() {
            super::collectives::note_appended();
        }
        let entry = self.seq_entry(instance);
        let gap = batch.seq - entry.highest - 1;
        entry.highest = batch.seq;
        Ok(BatchOutcome::Accepted { gap, counts })
    }

    /// Applies one tick's samples (`slots[k]` takes `values[k]`, stamped `ts` > 0). The tick gets its number
    /// with its first sample taken: until then each sample is offered on its own, after it the rest go
    /// straight into their rings under that number and horizon.
    #[inline]
    fn apply_tick(
        &mut self,
        ts: i64,
        slots: &[u32],
        values: &[u64],
        retention_ns: i64,
        counts: &mut ApplyCounts,
    ) {
        let mut k = 0;
        // The number the tick gets with its first sample taken (`Ticks::push` numbers it so).
        let tick = self.ticks.next();
        loop {
            let (Some(&slot), Some(&value)) = (slots.get(k), values.get(k)) else {
                return;
            };
            k += 1;
            let Some(s) = self.series.get_mut(slot as usize) else {
                counts.refused += u64::from(slot == REFUSED);
                continue;
            };
            if let Some(v) = s.accept(ts, tick, value, counts) {
                if s.link_bytes && (ts, tick) > self.newest_bytes {
                    self.newest_bytes = (ts, tick);
                }
                let n = self.ticks.push(ts, retention_ns) as i64;
                debug_assert_eq!(n as u64, tick);
                self.head.begin(n);
                self.head.push(slot, v);
                break;
            }
        }
        let rest = slots.get(k..).unwrap_or(&[]);
        for (j, (&slot, &value)) in rest.iter().zip(values.get(k..).unwrap_or(&[])).enumerate() {
            if let Some(&ahead) = rest.get(j + AHEAD_TICK) {
                if let Some(s) = self.series.get(ahead as usize) {
                    prefetch(s, Series::READING_BYTES);
                }
            }
            let Some(s) = self.series.get_mut(slot as usize) else {
                counts.refused += u64::from(slot == REFUSED);
                continue;
            };
            if let Some(v) = s.accept(ts, tick, value, counts) {
                if s.link_bytes && (ts, tick) > self.newest_bytes {
                    self.newest_bytes = (ts, tick);
                }
                self.head.push(slot, v);
            }
        }
        self.head.end();
    }

    /// Moves the oldest `rows` rows of the head into their series' rings, series by series, and has every ring
    /// drop what the node's ticks no longer stamp (series that took no sample of these ticks too).
    fn flush_head(&mut self, rows: usize) {
        let horizon = self.ticks.first() as i64;
        let series = &mut self.series;
        let kept = &mut self.kept;
        let phase = self.phase;
        let mut ran = 0;
        self.head.flush(rows, |slot, run| {
            prefetch_flush(series, slot);
            if let Some(s) = series.get_mut(slot) {
                ran += 1;
                let before = footprint(&s.ring);
                let mut run = &run[run.partition_point(|x| x.0 < horizon)..];
                // The series' line from its first two samples (a first flush holds two of a 1 Hz series). One
                // with a single sample starts unstaggered: a guessed line would cost its first chunk bits.
                if let [first, second, ..] = *run {
                    if s.ring
                        .start_staggered(first, second, chunk_phase(phase, slot))
                    {
                        run = &run[1..];
                    }
                }
                s.ring.extend_run(run, horizon);
                kept.track(before, footprint(&s.ring));
            }
        });
        // A run dropped its ring's old chunks already; when every series had one (a node whose agent sends all
        // its series), the walk over every ring, a cache miss each, is saved.
        if self.evicted_before != self.ticks.first() {
            self.evicted_before = self.ticks.first();
            if ran < self.series.len() {
                for s in &mut self.series {
                    let before = footprint(&s.ring);
                    s.ring.drop_chunks_before(horizon);
                    self.kept.track(before, footprint(&s.ring));
                }
            }
        }
    }

    /// Raises the highest sequence number applied for an instance (dedup state restored at start; what is
    /// restored is durable too, which persistence marks through [`NodeState::durable`]).
    pub(crate) fn raise_highest(&mut self, instance_id: u64, seq: u64) {
        let e = self.seq_entry(instance_id);
        e.highest = e.highest.max(seq);
    }

    pub(super) fn snapshot(&self) -> NodeSnapshot {
        let series_snap = |s: &Series| SeriesSnapshot {
            key: s.key.clone(),
            kind: s.kind,
            value: s.value_f64(),
            timestamp_unix_ns: s.last_ts,
        };
        // A link its agent no longer finds keeps its last totals but has no rate: it carries nothing.
        let gone = |l: &LinkState| super::input::is_gone(&l.link);
        // The byte counters' rates, link by link (tx, then rx), from one walk over the head.
        let counters: Vec<usize> = self
            .links
            .iter()
            .filter(|l| !gone(l))
            .flat_map(|l| [l.tx, l.rx])
            .flatten()
            .collect();
        let mut rates = newest_rates(&self.series, &counters, &self.head, &self.ticks).into_iter();
        let mut links: Vec<LinkSnapshot> = self
            .links
            .iter()
            .map(|l| {
                let raw = |slot: Option<usize>| {
                    slot.and_then(|i| self.series[i].last_raw()).map(|(_, v)| v)
                };
                // Taken in the order `counters` lists them.
                let mut rate = |slot: Option<usize>| {
                    slot.filter(|_| !gone(l))
                        .and_then(|_| rates.next())
                        .flatten()
                };
                let tx_bytes_per_second = rate(l.tx);
                let rx_bytes_per_second = rate(l.rx);
                LinkSnapshot {
                    link: l.link.clone(),
                    tx_bytes_total: raw(l.tx),
                    rx_bytes_total: raw(l.rx),
                    tx_bytes_per_second,
                    rx_bytes_per_second,
                    series: Vec::new(),
                }
            })
            .collect();
        let mut node_series = Vec::new();
        for (slot, s) in self.series.iter().enumerate() {
            if s.last_ts == 0 {
                continue;
            }
            match s.link {
                Some(li) => {
                    if self.links[li].tx != Some(slot) && self.links[li].rx != Some(slot) {
                        links[li].series.push(series_snap(s));
                    }
                }
                None => node_series.push(series_snap(s)),
            }
        }
        NodeSnapshot {
            name: self.name.clone(),
            agent_version: self.agent_version.clone(),
            connected: self.conn.is_some(),
            last_seen_unix_ns: self.last_seen_unix_ns,
            agent_dropped_batches_total: self.dropped_batches_total,
            links,
            series: node_series,
            jobs: self.jobs.clone(),
            blind: self.blind.clone(),
        }
    }

    /// The node's memory figures: its series' as kept ([`SeriesMemory`]: no walk over the rings), the rest
    /// read now.
    pub(super) fn memory(&self) -> StoreMemory {
        let kept = &self.kept;
        debug_assert_eq!(kept.series, self.series.len());
        // The tick timestamps are the samples' timestamps, held once for the node; the head holds the newest.
        let shared = self.ticks.heap_bytes() + self.head.heap_bytes();
        StoreMemory {
            nodes: 1,
            series: kept.series,
            samples: kept.samples + self.head.samples(),
            sample_bytes: kept.ring_bytes + shared,
            bytes: kept.ring_bytes
                + kept.fixed_bytes
                + shared
                + self.series_ids.heap_bytes()
                + self.links.len() * std::mem::size_of::<LinkState>()
                + self.markers.heap_bytes()
                + self.collectives.heap_bytes(),
        }
    }

    /// What the series hold, from a walk over every ring: what [`NodeState::memory`] keeps without one.
    #[cfg(test)]
    fn walked_memory(&self) -> SeriesMemory {
        SeriesMemory::walk(&self.series)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node of one fast series (id 1) and `n` ticks of it from tick `from` on, in batch `seq`.
    fn one_series(name: &str) -> NodeState {
        let mut n = NodeState::new(name, 600_000_000_000, 1_000_000_000);
        let hello = Hello {
            node: name.into(),
            agent_version: "t".into(),
            boot_id: "b".into(),
            instance_id: 1,
            inventory: Inventory {
                links: vec![],
                series: vec![SeriesDesc {
                    id: 1,
                    metric: "tcp_out_segments_total".into(),
                    kind: Some(SeriesKind::Counter {
                        max_value: u64::MAX,
                    }),
                    link_id: 0,
                    labels: vec![],
                    tier: Some(Tier::Fast),
                }],
                refused: vec![],
            },
            fast_period_ms: 50,
            slow_period_ms: 1000,
            blind: vec![],
        };
        n.register_hello(&hello, &Limits::default()).expect("hello");
        n
    }

    fn ticks(n: &mut NodeState, seq: u64, from: i64, count: i64) {
        let ts: Vec<i64> = (from..from + count).map(|k| (k + 1) * 50_000_000).collect();
        let b = Batch {
            seq,
            tick_lengths: vec![1; ts.len()],
            series_ids: vec![1; ts.len()],
            values: (from..from + count).map(|k| k as u64).collect(),
            timestamps_unix_ns: ts,
            dropped_batches_total: 0,
            markers: vec![],
            invalid_markers: 0,
            collectives: vec![],
            invalid_collectives: vec![],
        };
        n.apply_batch(&b, (from + count + 1) * 50_000_000, &mut Vec::new())
            .expect("applied");
    }

    #[test]
    fn the_flush_waits_for_a_reader_of_new_samples_up_to_a_bound() {
        let mut n = one_series("node-1");
        ticks(&mut n, 1, 0, 10);
        let mut got = Vec::new();
        let cursor = n.samples_after(None, 0, &[true], |_, t, v| got.push((t, v)));
        assert_eq!((cursor, got.len()), (Some(9), 10));
        // Unread rows stay in the head past the flush's row count ...
        let mut seq = 2;
        for k in 0..(HOLD_ROWS as i64 - 10) / 5 {
            ticks(&mut n, seq, 10 + 5 * k, 5);
            seq += 1;
        }
        assert!(
            n.head.rows() > FLUSH && n.head.rows() <= HOLD_ROWS,
            "{}",
            n.head.rows()
        );
        // ... and the reader reads them from there, every one once.
        got.clear();
        let held = n.head.rows() as u64;
        let cursor = n.samples_after(cursor, 0, &[true], |_, t, v| got.push((t, v)));
        assert_eq!(got.len() as u64, held - 10);
        assert!(got.iter().all(|&(t, v)| t == v && t >= 10));
        // Read: the next batch flushes all but the newest rows.
        ticks(&mut n, seq, cursor.expect("ticks") as i64 + 1, 5);
        assert_eq!(n.head.rows(), KEEP_ROWS);
        // A reader that stops reading holds the head at most to its bound.
        for k in 0..100 {
            ticks(&mut n, seq + 1 + k as u64, 1_000 + 5 * k, 5);
            assert!(n.head.rows() < HOLD_ROWS + 5);
        }
        let mut all = Vec::new();
        n.samples_after(None, 0, &[true], |_, t, v| all.push((t, v)));
        assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    }

    /// A node of two links with byte counters (ids 1–4: link 1's tx and rx, then link 2's) and a gauge (5)
    /// under `retention_ns`.
    fn two_links(name: &str, retention_ns: i64, series: &[u32]) -> (NodeState, Hello) {
        use crate::store::LinkInfo;
        use commwatch_model::{Endpoint, LinkClass, LinkRole};
        let link = |id: u32| LinkInfo {
            id,
            link: Link {
                key: LinkKey::new(LinkClass::Infiniband, format!("mlx5_{id}"), "1"),
                endpoint: Endpoint::HcaPort,
                role: LinkRole::Fabric,
                capacity_bytes_per_second: Some(50e9),
                state: "ACTIVE".into(),
                attributes: Default::default(),
                gpu: None,
                link: None,
            },
        };
        let desc = |id: u32| SeriesDesc {
            id,
            metric: match id {
                1 | 3 => "tx_bytes",
                2 | 4 => "rx_bytes",
                _ => "temperature_celsius",
            }
            .into(),
            kind: Some(if id == 5 {
                SeriesKind::Gauge
            } else {
                SeriesKind::Counter {
                    max_value: u64::MAX,
                }
            }),
            link_id: if id == 5 { 0 } else { id.div_ceil(2) },
            labels: vec![],
            tier: Some(Tier::Fast),
        };
        let hello = Hello {
            node: name.into(),
            agent_version: "t".into(),
            boot_id: "b".into(),
            instance_id: 1,
            inventory: Inventory {
                links: vec![link(1), link(2)],
                series: series.iter().map(|&id| desc(id)).collect(),
                refused: vec![],
            },
            fast_period_ms: 50,
            slow_period_ms: 1000,
            blind: vec![],
        };
        let mut n = NodeState::new(name, retention_ns, 1_000_000_000);
        n.register_hello(&hello, &Limits::default()).expect("hello");
        (n, hello)
    }

    /// The newest byte sample as a walk over every link's byte counters' samples reads it.
    fn newest_by_walk(n: &NodeState) -> Option<i64> {
        (0..n.links().len())
            .flat_map(|i| {
                let (tx, rx) = n.link_byte_series(i);
                [tx, rx]
            })
            .flatten()
            .filter_map(|s| n.samples(s).last().map(|x| x.0))
            .max()
    }

    #[test]
    fn the_newest_byte_sample_is_the_walks_through_eviction_and_inventories() {
        let (mut n, mut hello) = two_links("node-1", 2_000_000_000, &[1, 2, 3, 4, 5]);
        assert_eq!(n.newest_byte_sample(), None);
        assert!(n.has_byte_series());
        // Ticks of changing sets of series: link 2's counters stop at tick 40, then only the gauge; one tick
        // of link 2 stamped before the one it follows (its source's clock behind); ticks then go past the
        // retention.
        for k in 0..200i64 {
            let mut at = k * 50_000_000;
            let ids: &[u32] = match k {
                0..=39 => &[1, 2, 3, 4, 5],
                45 => {
                    at -= 200_000_000;
                    &[3, 4]
                }
                40..=99 => &[1, 2, 5],
                _ => &[5],
            };
            let b = Batch {
                seq: k as u64 + 1,
                tick_lengths: vec![ids.len() as u32],
                series_ids: ids.to_vec(),
                values: ids
                    .iter()
                    .map(|&id| (k * 1_000 + i64::from(id)) as u64)
                    .collect(),
                timestamps_unix_ns: vec![1_000_000_000 + at],
                dropped_batches_total: 0,
                markers: vec![],
                invalid_markers: 0,
                collectives: vec![],
                invalid_collectives: vec![],
            };
            n.apply_batch(&b, 1_000_000_000 + at, &mut Vec::new())
                .expect("applied");
            assert_eq!(n.newest_byte_sample(), newest_by_walk(&n), "tick {k}");
            for s in n.series() {
                assert_eq!(n.newest_sample(s), n.samples(s).last().map(|x| x.0));
            }
        }
        // Every byte sample is past the retention now.
        assert_eq!(n.newest_byte_sample(), None);
        // An inventory without link 1's counters: only link 2's (older) count.
        hello.inventory.series.retain(|d| d.id >= 3);
        n.register_hello(&hello, &Limits::default()).expect("hello");
        assert_eq!(n.newest_byte_sample(), newest_by_walk(&n));
        hello.inventory.series.retain(|d| d.id == 5);
        n.register_hello(&hello, &Limits::default()).expect("hello");
        assert!(!n.has_byte_series());
        assert_eq!(n.newest_byte_sample(), None);
    }

    #[test]
    fn first_flushes_spread_over_the_rows_a_flush_moves() {
        let at: Vec<usize> = (0..2_000)
            .map(|i| first_flush(name_hash(&format!("node-{i}"))))
            .collect();
        assert!(at.iter().all(|&r| (FIRST_FLUSH_MIN..=FLUSH).contains(&r)));
        // `FLUSH - FIRST_FLUSH_MIN + 1` possible row counts (305), 2,000 names: every quarter of the range is
        // taken by hundreds of them.
        let quarter = (FLUSH - FIRST_FLUSH_MIN + 1) / 4;
        for q in 0..4 {
            let lo = FIRST_FLUSH_MIN + q * quarter;
            let n = at
                .iter()
                .filter(|&&r| (lo..lo + quarter).contains(&r))
                .count();
            assert!(n > 300, "quarter {q}: {n} of 2,000");
        }
        // The same name, the same row count (a restart of the collector staggers the same way).
        assert_eq!(first_flush(name_hash("node-7")), at[7]);
    }

    #[test]
    fn the_kept_memory_equals_a_walk_after_pushes_seals_evictions_and_inventories() {
        use rand::rngs::StdRng;
        use rand::{Rng as _, SeedableRng};
        let desc = |id: u32| SeriesDesc {
            id,
            metric: format!("m{}", id % 7),
            kind: Some(if id.is_multiple_of(3) {
                SeriesKind::Gauge
            } else {
                SeriesKind::Counter {
                    max_value: u64::MAX,
                }
            }),
            link_id: 0,
            labels: vec![("i".into(), format!("{id}{}", "x".repeat(id as usize % 5)))],
            tier: Some(if id.is_multiple_of(4) {
                Tier::Slow
            } else {
                Tier::Fast
            }),
        };
        let hello = |instance: u64, ids: std::ops::RangeInclusive<u32>| Hello {
            node: "node-m".into(),
            agent_version: "t".into(),
            boot_id: "b".into(),
            instance_id: instance,
            inventory: Inventory {
                links: vec![],
                series: ids.map(desc).collect(),
                refused: vec![],
            },
            fast_period_ms: 50,
            slow_period_ms: 1000,
            blind: vec![],
        };
        let mut rng = StdRng::seed_from_u64(35);
        // 20 s of retention: the rings seal chunks every 12.8 s of 20 Hz ticks and drop them after.
        let mut n = NodeState::new("node-m", 20_000_000_000, 1_000_000_000);
        n.register_hello(&hello(1, 1..=30), &Limits::default())
            .expect("hello");
        let (mut ids, mut seq, mut tick) = (30u32, 0u64, 0i64);
        let mut values = vec![0u64; 64];
        let (mut sealed, mut evicted) = (false, false);
        for round in 0..1_600 {
            match round {
                // New series described; later a new instance that keeps some (their rings go on) and drops
                // others.
                500 => {
                    let inv = Inventory {
                        links: vec![],
                        series: (31..=40).map(desc).collect(),
                        refused: vec![],
                    };
                    n.apply_inventory(&inv, &Limits::default())
                        .expect("inventory");
                    ids = 40;
                }
                1_000 => {
                    n.register_hello(&hello(2, 11..=50), &Limits::default())
                        .expect("hello");
                    (ids, seq) = (50, 0);
                }
                _ => {}
            }
            let lo = if round >= 1_000 { 11 } else { 1 };
            seq += 1;
            let mut b = Batch::numbered(seq);
            for _ in 0..5 {
                tick += 1;
                b.timestamps_unix_ns.push(tick * 50_000_000);
                let mut len = 0;
                for id in lo..=ids {
                    // Now and then a series is left out of a tick, or sits out a while.
                    if rng.random_range(0u32..10) == 0 || (id % 9 == 0 && round % 300 < 100) {
                        continue;
                    }
                    let v = &mut values[id as usize];
                    let bits = rng.random_range(0u32..40);
                    *v += rng.random_range(0u64..1 << bits);
                    b.series_ids.push(id);
                    b.values.push(*v);
                    len += 1;
                }
                b.tick_lengths.push(len);
            }
            n.apply_batch(&b, tick * 50_000_000, &mut Vec::new())
                .expect("applied");
            sealed |= n.series.iter().any(|s| s.ring.heap_parts()[3] > 0);
            evicted |= sealed && n.series.iter().any(|s| s.ring.len() < s.ring.cap() / 2);
            if round % 7 == 0 || round > 1_590 {
                assert_eq!(n.kept, n.walked_memory(), "round {round}");
                let m = n.memory();
                assert_eq!(m.series, n.series.len());
                let rings: usize = n.series.iter().map(|s| s.ring.len()).sum();
                assert_eq!(m.samples, rings + n.head.samples(), "round {round}");
            }
        }
        assert!(sealed && evicted, "sealed {sealed}, evicted {evicted}");
        assert_eq!(n.series.len(), 40);
    }

    #[test]
    fn link_rates_from_one_head_walk_are_each_series_own() {
        use rand::rngs::StdRng;
        use rand::{Rng as _, SeedableRng};
        let mut rng = StdRng::seed_from_u64(17);
        let (mut n, _) = two_links("node-r", 30_000_000_000, &[1, 2, 3, 4, 5]);
        let (mut at, mut acc, mut checked) = (1_000_000_000i64, [0u64; 6], 0);
        for seq in 1..=1_500u64 {
            let mut b = Batch::numbered(seq);
            for _ in 0..5 {
                // Ticks 18 ms apart (the demo agent's 56 a second), now and then a pause past the window.
                at += if rng.random_range(0u32..300) == 0 {
                    1_500_000_000
                } else {
                    18_000_000
                };
                b.timestamps_unix_ns.push(at);
                let mut len = 0;
                for id in 1..=5u32 {
                    // Each source stamps its own ticks; link 2 falls silent for a while now and then.
                    let silent = (3..=4).contains(&id) && seq % 400 > 300;
                    if silent || rng.random_range(0u32..3) != 0 {
                        continue;
                    }
                    acc[id as usize] += rng.random_range(0u64..1 << 30);
                    b.series_ids.push(id);
                    b.values.push(acc[id as usize]);
                    len += 1;
                }
                b.tick_lengths.push(len);
            }
            n.apply_batch(&b, at, &mut Vec::new()).expect("applied");
            let snap = n.snapshot();
            for (i, l) in snap.links.iter().enumerate() {
                let (tx, rx) = n.link_byte_series(i);
                let own = |s: Option<&Series>| s.and_then(|s| s.rate(n.samples(s)));
                assert_eq!(l.tx_bytes_per_second, own(tx), "batch {seq}, link {i}");
                assert_eq!(l.rx_bytes_per_second, own(rx), "batch {seq}, link {i}");
                checked += usize::from(l.tx_bytes_per_second.is_some());
            }
        }
        // Most snapshots had rates to compare (the head's rows covered the window, or the rings did).
        assert!(checked > 2_000, "{checked}");
    }
}
