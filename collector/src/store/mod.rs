//! The in-memory store: per node, per series a bounded ring of samples over `retention`, and per link the byte
//! rates derived from counter deltas.
//!
//! Concurrency: a map of nodes behind an `RwLock` (written only when a node appears or expires), and one `Mutex`
//! per node. Ingesting one batch takes that node's lock once; a scrape copies a node's figures under its lock and
//! formats them outside it, so readers hold any one lock only briefly and never block other nodes' ingest.
//!
//! Counters: the ring of a counter holds `(timestamp_ns, acc)` where `acc` is the reset-corrected cumulative
//! increase since the collector first saw the series (see [`rate`]): a rate or a byte count over any interval
//! is a difference of two `acc`, never negative. The raw value as last read is kept beside it (exported as the
//! `_total`). Gauges hold the f64 bits. A series keeps its ring across agent restarts when its identity
//! (link `(class, device, port)` + metric + labels) matches, so rates continue across the restart.
//!
//! What it applies ([`input`]: an agent's `Hello`, inventory updates, batches with their step markers, job
//! lists) comes validated from the ingest edge or from replay; what only the store can refuse is a
//! [`StoreError`]. Readers take copies ([`view`]) or run short closures under a node's lock.

pub mod error;
pub mod input;
pub mod rate;
pub mod ring;
pub mod view;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use commwatch_model::{Link, LinkKey, SeriesKind, Tier};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{oneshot, watch};

use crate::config::Limits;
pub use error::StoreError;
pub use input::{Batch, Hello, Inventory, JobList, LinkInfo, Marker, SeriesDesc, StepPhase};
use rate::{counter_step, plausibility_cap, window_rate, Step, RATE_WINDOW_NS};
use ring::Ring;
pub use view::{LinkSnapshot, NodeSnapshot, SeriesSnapshot};

/// Most step markers one node keeps (at 2 markers per step and rank, 8 ranks and 3 steps/s: ~6 minutes).
pub const MAX_MARKERS_PER_NODE: usize = 16_384;
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

/// Identity of a series across agent restarts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    /// The link it measures; `None` for node-level series.
    pub link: Option<LinkKey>,
    pub metric: String,
    /// Extra labels, sorted by key.
    pub labels: Vec<(String, String)>,
}

/// Counts produced by applying one batch (added to the collector's health metrics once per batch).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ApplyCounts {
    pub samples: u64,
    /// Samples of refused series (unknown kind), skipped.
    pub refused: u64,
    /// Samples not newer than the series' previous one, skipped.
    pub out_of_order: u64,
    pub resets: u64,
    pub implausible: u64,
    /// Step markers appended to the node's marker log.
    pub markers: u64,
}

/// A node's step markers in the order they were applied (batch order, then arrival order within a batch),
/// bounded by [`MAX_MARKERS_PER_NODE`] and by the retention. Every marker gets a sequence number (0, 1, 2, ...
/// per node, never reused), so a reader can take only what is new since its last read ([`MarkerLog::since`]).
/// Markers come only from applied batches: a resent batch is a duplicate and adds nothing.
#[derive(Debug, Default)]
pub struct MarkerLog {
    buf: VecDeque<Marker>,
    /// Sequence number the next marker will get.
    next_seq: u64,
}

impl MarkerLog {
    fn push(&mut self, m: Marker, retention_ns: i64) {
        let horizon = m.received_unix_ns.saturating_sub(retention_ns);
        while let Some(front) = self.buf.front() {
            if self.buf.len() >= MAX_MARKERS_PER_NODE || front.received_unix_ns < horizon {
                self.buf.pop_front();
            } else {
                break;
            }
        }
        self.buf.push_back(m);
        self.next_seq += 1;
    }

    /// Markers held.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Sequence number the next marker will get (= markers ever appended).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Copies of the markers with sequence number ≥ `from`, oldest first, and how many of those were already
    /// evicted (lost to the reader).
    pub fn since(&self, from: u64) -> (Vec<Marker>, u64) {
        let first = self.next_seq - self.buf.len() as u64;
        let lost = first.saturating_sub(from);
        let skip = from.saturating_sub(first) as usize;
        (self.buf.iter().skip(skip).cloned().collect(), lost)
    }

    fn heap_bytes(&self) -> usize {
        self.buf.capacity() * std::mem::size_of::<Marker>()
            + self.buf.iter().map(|m| m.job.capacity()).sum::<usize>()
    }
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

/// One series' window and counter state.
#[derive(Debug)]
pub struct Series {
    key: Arc<SeriesKey>,
    kind: SeriesKind,
    tier: Option<Tier>,
    /// Index into the node's links.
    link: Option<usize>,
    /// Plausibility cap, units per second.
    cap_per_s: f64,
    ring: Ring,
    /// Previous reading (0 timestamp: none yet).
    last_ts: i64,
    last_raw: u64,
    acc: u64,
    saturated: bool,
}

impl Series {
    fn new(key: Arc<SeriesKey>, kind: SeriesKind, tier: Option<Tier>, cap: usize) -> Series {
        Series {
            key,
            kind,
            tier,
            link: None,
            cap_per_s: plausibility_cap(None),
            ring: Ring::new(cap),
            last_ts: 0,
            last_raw: 0,
            acc: 0,
            saturated: false,
        }
    }

    pub fn key(&self) -> &Arc<SeriesKey> {
        &self.key
    }

    pub fn kind(&self) -> SeriesKind {
        self.kind
    }

    /// Index of the link it measures in its node's [`NodeState::links`]; `None` for node-level series.
    pub fn link_index(&self) -> Option<usize> {
        self.link
    }

    /// Samples oldest first: `(timestamp_ns, acc)` for counters (reset-corrected cumulative increase),
    /// `(timestamp_ns, f64 bits)` for gauges.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The last reading as the agent sent it: `(timestamp_ns, raw)`.
    pub fn last_raw(&self) -> Option<(i64, u64)> {
        (self.last_ts > 0).then_some((self.last_ts, self.last_raw))
    }

    /// Counter rate per second over the last [`RATE_WINDOW_NS`]; `None` for gauges, with fewer than two
    /// readings, or while the counter sits at its saturation value (its true rate is unknown).
    pub fn rate(&self) -> Option<f64> {
        match self.kind {
            SeriesKind::Counter { .. } if !self.saturated => {
                window_rate(self.ring.iter().rev(), RATE_WINDOW_NS)
            }
            _ => None,
        }
    }

    fn value_f64(&self) -> f64 {
        match self.kind {
            SeriesKind::Counter { .. } => self.last_raw as f64,
            SeriesKind::Gauge => f64::from_bits(self.last_raw),
        }
    }

    #[inline]
    fn ingest(&mut self, ts: i64, raw: u64, retention_ns: i64, c: &mut ApplyCounts) {
        if self.last_ts != 0 && ts <= self.last_ts {
            c.out_of_order += 1;
            return;
        }
        c.samples += 1;
        match self.kind {
            SeriesKind::Gauge => {
                self.ring.push(ts, raw, retention_ns);
            }
            SeriesKind::Counter { max_value } => {
                if self.last_ts != 0 {
                    match counter_step(
                        self.last_raw,
                        raw,
                        max_value,
                        ts - self.last_ts,
                        self.cap_per_s,
                    ) {
                        Step::Delta(d) => self.acc = self.acc.wrapping_add(d),
                        Step::Reset(d) => {
                            c.resets += 1;
                            self.acc = self.acc.wrapping_add(d);
                        }
                        Step::ResetSkipped => c.resets += 1,
                        Step::Implausible => c.implausible += 1,
                        Step::Hold => {}
                    }
                }
                self.saturated = raw >= max_value;
                self.ring.push(ts, self.acc, retention_ns);
            }
        }
        self.last_ts = ts;
        self.last_raw = raw;
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
    pub link: Link,
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
struct Conn {
    id: u64,
    close: Option<oneshot::Sender<()>>,
}

/// Everything the collector holds about one node.
#[derive(Debug)]
pub struct NodeState {
    name: String,
    agent_version: String,
    boot_id: String,
    instance_id: u64,
    fast_period_ms: u32,
    slow_period_ms: u32,
    links: Vec<LinkState>,
    link_ids: HashMap<u32, usize>,
    series: Vec<Series>,
    by_key: HashMap<Arc<SeriesKey>, usize>,
    series_ids: IdMap,
    /// Series ids described on the current instance (refused ones included).
    described: usize,
    seqs: Vec<InstanceSeq>,
    last_seen_unix_ns: i64,
    conn: Option<Conn>,
    dropped_batches_total: u64,
    retention_ns: i64,
    markers: MarkerLog,
    /// The latest complete job list of the current agent instance (empty until one arrives).
    jobs: Arc<JobList>,
}

impl NodeState {
    fn new(name: &str, retention_ns: i64) -> NodeState {
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
            by_key: HashMap::new(),
            series_ids: IdMap::default(),
            described: 0,
            seqs: Vec::new(),
            last_seen_unix_ns: 0,
            conn: None,
            dropped_batches_total: 0,
            retention_ns,
            markers: MarkerLog::default(),
            jobs: Arc::default(),
        }
    }

    /// The node's latest job list (empty when the agent sent none since its instance started).
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
        let n = (self.retention_ns / 1_000_000) as u64 / u64::from(period_ms.max(1));
        // 1/8 headroom for jitter, plus the sample at each end.
        ((n + n / 8 + 2) as usize).min(HARD_CAP_SAMPLES)
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
                link: l.link.clone(),
                tx: None,
                rx: None,
            })
            .collect();
        self.link_ids = link_ids;
        let mut old: Vec<Option<Series>> = std::mem::take(&mut self.series)
            .into_iter()
            .map(Some)
            .collect();
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
        let series = match reused {
            Some(mut s) => {
                s.tier = d.tier;
                s
            }
            None => Series::new(Arc::new(key), kind, d.tier, self.ring_cap(d.tier)),
        };
        let slot = self.series.len();
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
                Some(&i) => self.links[i].link = l.link.clone(),
                None => {
                    self.link_ids.insert(l.id, self.links.len());
                    self.links.push(LinkState {
                        link: l.link.clone(),
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

    /// Recomputes link ↔ series references, plausibility caps and ring bounds after an inventory change.
    fn reindex(&mut self) {
        let by_key: HashMap<&LinkKey, usize> = self
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| (&l.link.key, i))
            .collect();
        let mut tx = vec![None; self.links.len()];
        let mut rx = vec![None; self.links.len()];
        let caps: Vec<usize> = self.series.iter().map(|s| self.ring_cap(s.tier)).collect();
        for (slot, s) in self.series.iter_mut().enumerate() {
            s.link = s.key.link.as_ref().and_then(|k| by_key.get(k).copied());
            s.cap_per_s = plausibility_cap(None);
            s.ring.set_cap(caps[slot]);
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
    }

    /// Offers a batch of the current instance. Every series id is resolved before anything is applied, so a
    /// batch that fails validation leaves the store untouched. `scratch` is reused across batches.
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
        let mut i = 0usize;
        for (&ts, &n) in batch.timestamps_unix_ns.iter().zip(&batch.tick_lengths) {
            let end = i + n as usize;
            let (Some(slots), Some(values)) = (scratch.get(i..end), batch.values.get(i..end))
            else {
                break;
            };
            for (&slot, &value) in slots.iter().zip(values) {
                if slot == REFUSED {
                    counts.refused += 1;
                    continue;
                }
                if let Some(s) = self.series.get_mut(slot as usize) {
                    s.ingest(ts, value, retention_ns, &mut counts);
                }
            }
            i = end;
        }
        self.dropped_batches_total = batch.dropped_batches_total;
        for m in &batch.markers {
            self.markers.push(m.clone(), retention_ns);
            counts.markers += 1;
        }
        let entry = self.seq_entry(instance);
        let gap = batch.seq - entry.highest - 1;
        entry.highest = batch.seq;
        Ok(BatchOutcome::Accepted { gap, counts })
    }

    /// Raises the highest sequence number applied for an instance (dedup state restored at start; what is
    /// restored is durable too, which persistence marks through [`NodeState::durable`]).
    pub(crate) fn raise_highest(&mut self, instance_id: u64, seq: u64) {
        let e = self.seq_entry(instance_id);
        e.highest = e.highest.max(seq);
    }

    fn snapshot(&self) -> NodeSnapshot {
        let series_snap = |s: &Series| SeriesSnapshot {
            key: s.key.clone(),
            kind: s.kind,
            value: s.value_f64(),
            timestamp_unix_ns: s.last_ts,
        };
        let mut links: Vec<LinkSnapshot> = self
            .links
            .iter()
            .map(|l| {
                let raw = |slot: Option<usize>| {
                    slot.and_then(|i| self.series[i].last_raw()).map(|(_, v)| v)
                };
                let rate = |slot: Option<usize>| slot.and_then(|i| self.series[i].rate());
                LinkSnapshot {
                    link: l.link.clone(),
                    tx_bytes_total: raw(l.tx),
                    rx_bytes_total: raw(l.rx),
                    tx_bytes_per_second: rate(l.tx),
                    rx_bytes_per_second: rate(l.rx),
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
        }
    }

    fn memory(&self) -> StoreMemory {
        let mut m = StoreMemory {
            nodes: 1,
            ..Default::default()
        };
        for s in &self.series {
            m.series += 1;
            m.samples += s.ring.len();
            m.sample_bytes += s.ring.heap_bytes();
            m.bytes += s.ring.heap_bytes()
                + std::mem::size_of::<Series>()
                + std::mem::size_of::<SeriesKey>()
                + s.key.metric.capacity()
                + s.key.labels.iter().map(|(k, v)| k.capacity() + v.capacity() + 48).sum::<usize>()
                // by_key entry
                + 32;
        }
        m.bytes += self.series_ids.heap_bytes()
            + self.links.len() * std::mem::size_of::<LinkState>()
            + self.markers.heap_bytes();
        m
    }
}

/// The store's own accounting of what it holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StoreMemory {
    pub nodes: usize,
    pub series: usize,
    /// Samples held in all rings.
    pub samples: usize,
    /// Bytes allocated for samples.
    pub sample_bytes: usize,
    /// Estimated bytes for everything (samples, series state, keys, id maps).
    pub bytes: usize,
}

/// Shared handle to one node.
pub type NodeRef = Arc<Mutex<NodeState>>;

/// The outcome of a `Hello`.
pub(crate) struct HelloOutcome {
    pub node: NodeRef,
    /// Highest sequence number already held for the instance.
    pub highest_seq: u64,
    pub durable: Arc<watch::Sender<u64>>,
    /// Whether an older stream for the node was told to close.
    pub superseded: bool,
}

/// All nodes. Cheap to share (`Arc<Store>`); the analysis reads it through [`Store::with_node`] and
/// [`Store::node_names`].
#[derive(Debug)]
pub struct Store {
    nodes: RwLock<HashMap<String, NodeRef>>,
    retention_ns: i64,
    node_expiry_ns: i64,
    limits: Limits,
    /// Bumped whenever a node's job list is replaced (readers: [`Store::jobs_changed`]).
    jobs_version: watch::Sender<u64>,
}

impl Store {
    pub fn new(
        retention: std::time::Duration,
        node_expiry: std::time::Duration,
        limits: Limits,
    ) -> Store {
        Store {
            nodes: RwLock::new(HashMap::new()),
            retention_ns: i64::try_from(retention.as_nanos()).unwrap_or(i64::MAX),
            node_expiry_ns: i64::try_from(node_expiry.as_nanos()).unwrap_or(i64::MAX),
            limits,
            jobs_version: watch::channel(0).0,
        }
    }

    /// Replaces `node`'s job list and tells [`Store::jobs_changed`] subscribers.
    pub(crate) fn set_jobs(&self, node: &NodeRef, jobs: JobList) {
        node.lock().set_jobs(jobs);
        self.note_jobs_changed();
    }

    /// Tells [`Store::jobs_changed`] subscribers that a job list was replaced (after [`NodeState::set_jobs`]).
    pub(crate) fn note_jobs_changed(&self) {
        self.jobs_version.send_modify(|v| *v += 1);
    }

    /// Changes whenever a node's job list is replaced (the value counts replacements).
    pub fn jobs_changed(&self) -> watch::Receiver<u64> {
        self.jobs_version.subscribe()
    }

    /// Every node seen within `node_expiry` that has jobs, with its job list, sorted by node name.
    pub fn node_jobs(&self, now_unix_ns: i64) -> Vec<(String, Arc<JobList>)> {
        let mut v: Vec<(String, Arc<JobList>)> = self
            .fresh_nodes(now_unix_ns)
            .iter()
            .filter_map(|n| {
                let n = n.lock();
                (!n.jobs.jobs.is_empty()).then(|| (n.name.clone(), n.jobs.clone()))
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn node_or_insert(&self, name: &str) -> NodeRef {
        if let Some(n) = self.nodes.read().get(name) {
            return n.clone();
        }
        self.nodes
            .write()
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(Mutex::new(NodeState::new(name, self.retention_ns))))
            .clone()
    }

    /// Registers a `Hello`. With `conn` (a live stream: id and a channel to close it), an older stream of the
    /// same node is told to close: the newer one wins.
    pub(crate) fn hello(
        &self,
        hello: &Hello,
        received_unix_ns: i64,
        conn: Option<(u64, oneshot::Sender<()>)>,
    ) -> Result<HelloOutcome, StoreError> {
        let node = self.node_or_insert(&hello.node);
        let (highest_seq, durable, superseded) = {
            let mut n = node.lock();
            n.register_hello(hello, &self.limits)?;
            n.touch(received_unix_ns);
            let mut superseded = false;
            if let Some((id, close)) = conn {
                if let Some(mut old) = n.conn.take() {
                    if let Some(tx) = old.close.take() {
                        superseded = tx.send(()).is_ok();
                    }
                }
                n.conn = Some(Conn {
                    id,
                    close: Some(close),
                });
            }
            let highest = n.highest_seq(hello.instance_id);
            (highest, n.durable(hello.instance_id), superseded)
        };
        // A node expired while its stream was silent comes back with the Hello.
        self.nodes
            .write()
            .entry(hello.node.clone())
            .or_insert_with(|| node.clone());
        Ok(HelloOutcome {
            node,
            highest_seq,
            durable,
            superseded,
        })
    }

    /// Makes sure `node` is in the map (a live stream's node may have expired while silent).
    pub(crate) fn ensure_present(&self, node: &NodeRef) {
        let name = node.lock().name.clone();
        let present = self
            .nodes
            .read()
            .get(&name)
            .is_some_and(|n| Arc::ptr_eq(n, node));
        if !present {
            self.nodes
                .write()
                .entry(name)
                .or_insert_with(|| node.clone());
        }
    }

    /// The stream `conn_id` ended; the node stays until it expires.
    pub(crate) fn release(&self, node: &NodeRef, conn_id: u64) {
        let mut n = node.lock();
        if n.is_current(conn_id) {
            n.conn = None;
        }
    }

    /// Removes nodes with no message for `node_expiry` and no open stream. Returns how many.
    pub fn expire(&self, now_unix_ns: i64) -> usize {
        // Find the stale nodes under the read lock (each node's lock taken alone), then remove them under a
        // short write lock, so a busy node's lock never stalls every other node's Hello and reads.
        let stale: Vec<(String, NodeRef)> = self
            .nodes
            .read()
            .iter()
            .filter(|(_, n)| self.is_stale(&n.lock(), now_unix_ns))
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        if stale.is_empty() {
            return 0;
        }
        let mut nodes = self.nodes.write();
        let mut removed = 0;
        for (name, node) in stale {
            // Still the same node object (not replaced by a new Hello meanwhile), and still stale.
            let still = nodes.get(&name).is_some_and(|n| Arc::ptr_eq(n, &node))
                && self.is_stale(&node.lock(), now_unix_ns);
            if still {
                nodes.remove(&name);
                removed += 1;
            }
        }
        removed
    }

    /// No open stream and no message for `node_expiry`: [`Store::expire`] removes it.
    fn is_stale(&self, n: &NodeState, now_unix_ns: i64) -> bool {
        n.conn.is_none() && now_unix_ns - n.last_seen_unix_ns > self.node_expiry_ns
    }

    fn fresh_nodes(&self, now_unix_ns: i64) -> Vec<NodeRef> {
        let nodes: Vec<NodeRef> = self.nodes.read().values().cloned().collect();
        nodes
            .into_iter()
            .filter(|n| now_unix_ns - n.lock().last_seen_unix_ns <= self.node_expiry_ns)
            .collect()
    }

    /// Copies of every node seen within `node_expiry`, sorted by name. Each node's lock is held only while its
    /// copy is taken.
    pub fn snapshot(&self, now_unix_ns: i64) -> Vec<NodeSnapshot> {
        let mut out: Vec<NodeSnapshot> = self
            .fresh_nodes(now_unix_ns)
            .iter()
            .map(|n| n.lock().snapshot())
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Names of the nodes seen within `node_expiry`, sorted.
    pub fn node_names(&self, now_unix_ns: i64) -> Vec<String> {
        let mut v: Vec<String> = self
            .fresh_nodes(now_unix_ns)
            .iter()
            .map(|n| n.lock().name.clone())
            .collect();
        v.sort();
        v
    }

    /// Runs `f` on a node under its lock (keep `f` short: it blocks that node's ingest).
    pub fn with_node<R>(&self, name: &str, f: impl FnOnce(&NodeState) -> R) -> Option<R> {
        let node = self.nodes.read().get(name).cloned()?;
        let n = node.lock();
        Some(f(&n))
    }

    /// The store's memory accounting over every node held (expired-but-connected included).
    pub fn memory(&self) -> StoreMemory {
        let nodes: Vec<NodeRef> = self.nodes.read().values().cloned().collect();
        let mut m = StoreMemory::default();
        for n in nodes {
            let x = n.lock().memory();
            m.nodes += x.nodes;
            m.series += x.series;
            m.samples += x.samples;
            m.sample_bytes += x.sample_bytes;
            m.bytes += x.bytes;
        }
        m
    }

    /// Nodes held, expired-but-connected included.
    pub fn node_count(&self) -> usize {
        self.nodes.read().len()
    }

    pub(crate) fn node(&self, name: &str) -> Option<NodeRef> {
        self.nodes.read().get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commwatch_model::{Endpoint, LinkClass, LinkRole};

    const S: i64 = 1_000_000_000;

    fn hello(instance: u64, with_rx: bool) -> Hello {
        let mut series = vec![SeriesDesc {
            id: 1,
            metric: "tx_bytes".into(),
            kind: Some(SeriesKind::Counter {
                max_value: u64::MAX,
            }),
            link_id: 1,
            labels: vec![],
            tier: Some(Tier::Fast),
        }];
        if with_rx {
            series.push(SeriesDesc {
                id: 2,
                metric: "rx_bytes".into(),
                kind: Some(SeriesKind::Counter {
                    max_value: u64::MAX,
                }),
                link_id: 1,
                labels: vec![],
                tier: Some(Tier::Fast),
            });
        }
        Hello {
            node: "n1".into(),
            agent_version: "t".into(),
            boot_id: "b".into(),
            instance_id: instance,
            inventory: Inventory {
                links: vec![LinkInfo {
                    id: 1,
                    link: Link {
                        key: LinkKey::new(LinkClass::Infiniband, "mlx5_0", "1"),
                        endpoint: Endpoint::HcaPort,
                        role: LinkRole::Fabric,
                        capacity_bytes_per_second: Some(25e9),
                        state: "ACTIVE".into(),
                        attributes: [("phys_state".to_string(), "LinkUp".to_string())].into(),
                        gpu: None,
                        link: None,
                    },
                }],
                series,
            },
            fast_period_ms: 50,
            slow_period_ms: 1000,
        }
    }

    fn batch(seq: u64, ticks: &[(i64, u64)]) -> Batch {
        Batch {
            seq,
            timestamps_unix_ns: ticks.iter().map(|t| t.0).collect(),
            tick_lengths: vec![1; ticks.len()],
            series_ids: vec![1; ticks.len()],
            values: ticks.iter().map(|t| t.1).collect(),
            dropped_batches_total: 0,
            markers: vec![],
            invalid_markers: 0,
        }
    }

    #[test]
    fn link_attributes_reach_the_analysis_input() {
        let store = Store::new(
            std::time::Duration::from_secs(600),
            std::time::Duration::from_secs(60),
            Limits::default(),
        );
        let out = store.hello(&hello(7, false), S, None).expect("hello");
        let n = out.node.lock();
        assert_eq!(n.links()[0].link.attributes["phys_state"], "LinkUp");
        let input = crate::analysis::input::node_input(&n, 0);
        assert_eq!(input.links[0].link.attributes["phys_state"], "LinkUp");
    }

    #[test]
    fn dedup_gap_and_rate() {
        let store = Store::new(
            std::time::Duration::from_secs(600),
            std::time::Duration::from_secs(60),
            Limits::default(),
        );
        let out = store.hello(&hello(7, false), S, None).expect("hello");
        let mut scratch = Vec::new();
        let mut n = out.node.lock();
        let b1 = batch(1, &[(S, 0), (2 * S, 1_000_000)]);
        assert!(matches!(
            n.apply_batch(&b1, S, &mut scratch),
            Ok(BatchOutcome::Accepted { gap: 0, .. })
        ));
        assert_eq!(
            n.apply_batch(&b1, S, &mut scratch),
            Ok(BatchOutcome::Duplicate)
        );
        let b3 = batch(3, &[(3 * S, 3_000_000)]);
        assert!(matches!(
            n.apply_batch(&b3, S, &mut scratch),
            Ok(BatchOutcome::Accepted { gap: 1, .. })
        ));
        assert_eq!(n.highest_seq(7), 3);
        let snap = n.snapshot();
        assert_eq!(snap.links[0].tx_bytes_total, Some(3_000_000));
        assert_eq!(snap.links[0].tx_bytes_per_second, Some(2_000_000.0));
        assert_eq!(snap.links[0].rx_bytes_total, None);
        // Unknown series id: rejected, nothing applied.
        let mut bad = batch(4, &[(4 * S, 4_000_000)]);
        bad.series_ids[0] = 9;
        let e = n.apply_batch(&bad, S, &mut scratch).unwrap_err();
        assert!(e.to_string().contains("batch.series_ids[0]"), "{e}");
        assert_eq!(n.highest_seq(7), 3);
    }

    #[test]
    fn restart_keeps_series_by_identity() {
        let store = Store::new(
            std::time::Duration::from_secs(600),
            std::time::Duration::from_secs(60),
            Limits::default(),
        );
        let mut scratch = Vec::new();
        let out = store.hello(&hello(1, false), S, None).expect("hello");
        out.node
            .lock()
            .apply_batch(
                &batch(1, &[(S, 10_000_000), (2 * S, 11_000_000)]),
                S,
                &mut scratch,
            )
            .expect("apply");
        drop(out);
        // New instance, series ids shuffled (rx first): tx continues from 11_000_000.
        let mut h = hello(2, true);
        h.inventory.series[0].id = 5;
        let out = store.hello(&h, 3 * S, None).expect("hello");
        let mut n = out.node.lock();
        let mut b = batch(1, &[(4 * S, 13_000_000)]);
        b.series_ids = vec![5];
        n.apply_batch(&b, 4 * S, &mut scratch).expect("apply");
        let snap = n.snapshot();
        // (13M - 11M) over 2 s.
        assert_eq!(snap.links[0].tx_bytes_per_second, Some(1_000_000.0));
        assert_eq!(n.highest_seq(1), 1);
        assert_eq!(n.highest_seq(2), 1);
    }

    fn marker(step: u64, t: i64) -> Marker {
        Marker {
            job: "j".into(),
            rank: 0,
            step,
            phase: StepPhase::End,
            sent_unix_ns: 0,
            received_unix_ns: t,
            samples: None,
        }
    }

    #[test]
    fn markers_logged_once_and_read_incrementally() {
        let store = Store::new(
            std::time::Duration::from_secs(600),
            std::time::Duration::from_secs(60),
            Limits::default(),
        );
        let out = store.hello(&hello(7, false), S, None).expect("hello");
        let mut scratch = Vec::new();
        let mut n = out.node.lock();
        let mut b1 = batch(1, &[(S, 0)]);
        b1.markers = vec![marker(1, S), marker(2, 2 * S)];
        let r = n.apply_batch(&b1, S, &mut scratch).expect("apply");
        assert!(matches!(r, BatchOutcome::Accepted { counts, .. } if counts.markers == 2));
        // A resend of the same batch: duplicate, no marker added.
        assert_eq!(
            n.apply_batch(&b1, S, &mut scratch),
            Ok(BatchOutcome::Duplicate)
        );
        assert_eq!(n.markers().len(), 2);
        let mut b2 = batch(2, &[(2 * S, 0)]);
        b2.markers = vec![marker(3, 3 * S)];
        n.apply_batch(&b2, S, &mut scratch).expect("apply");
        let (all, lost) = n.markers().since(0);
        assert_eq!(
            all.iter().map(|m| m.step).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(lost, 0);
        let (new, lost) = n.markers().since(2);
        assert_eq!(new.iter().map(|m| m.step).collect::<Vec<_>>(), vec![3]);
        assert_eq!(lost, 0);
        assert_eq!(n.markers().next_seq(), 3);
        assert!(n.markers().since(3).0.is_empty());
    }

    #[test]
    fn marker_log_is_bounded() {
        let mut log = MarkerLog::default();
        for i in 0..(MAX_MARKERS_PER_NODE as u64 + 10) {
            log.push(marker(i, S + i as i64), 600 * S);
        }
        assert_eq!(log.len(), MAX_MARKERS_PER_NODE);
        let (v, lost) = log.since(0);
        assert_eq!(lost, 10);
        assert_eq!(v[0].step, 10);
        // Older than the retention behind the newest: evicted.
        log.push(marker(99_999, 1_000 * S), 600 * S);
        assert_eq!(log.len(), 1);
    }

    #[test]
    fn ring_cap_follows_period() {
        let store = Store::new(
            std::time::Duration::from_secs(600),
            std::time::Duration::from_secs(60),
            Limits::default(),
        );
        let out = store.hello(&hello(1, true), S, None).expect("hello");
        let n = out.node.lock();
        // 600 s at 20 Hz = 12000, + 1/8 + 2.
        assert_eq!(n.series()[0].ring().cap(), 13_502);
    }
}
