//! The sampler: runs the sources on two tiers, gives every link and series a stable agent-local id, and
//! gathers samples into columnar batches (`commwatch.v1.SampleBatch`).
//!
//! It runs on its own OS thread ([`spawn`]) because sysfs and NVML reads block; it hands batches and inventory
//! changes to the shipper through a bounded queue and never waits on it (a full queue drops the batch and
//! counts it: sampling on time matters more than any single batch).
//!
//! Every sample carries the time it was read, not the time its tick was due (see [`batch`]): rates are
//! computed from those timestamps, so a late, slow or skipped read widens an interval and never changes a
//! rate.
//!
//! Files: this one holds the [`Sampler`] (sources, ids, pending updates); [`batch`] the columnar batch
//! builder; [`wire`] the wire forms of links, series and jobs; [`periods`] the run-time sampling periods;
//! [`thread`] the sampling thread and its hand-over to the shipper.

mod batch;
mod periods;
mod thread;
mod wire;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use commwatch_model::{Job, Link, LinkKey, Tier};
use commwatch_proto::v1 as pb;

pub use batch::{BatchBuilder, DEFAULT_RESOLUTION};
pub use periods::Periods;
pub use thread::{spawn, LoopSettings, SamplerHandle, STAMP_SHARE};
pub use wire::jobs_to_pb;

use crate::source::watchdog::ClockGroup;
use crate::source::{
    Cadence, ClockedRound, RoundReads, RoundTimes, SeriesSpec, Source, TierRead, Tiers, Value,
};
use crate::telemetry::AgentMetrics;
use wire::{bare_link_to_pb, gone_link_to_pb, link_to_pb, series_to_pb};

/// What the sampler hands to the shipper, in order.
#[derive(Debug, Clone)]
pub enum SamplerEvent {
    /// Links or series added or changed; always sent before the first batch that uses them.
    Inventory(pb::Inventory),
    /// A batch of samples; `seq` is 0 (the shipper numbers batches).
    Batch(pb::SampleBatch),
    /// The node's complete job list changed (sent as an `InventoryUpdate` with `jobs`).
    Jobs(pb::JobInventory),
}

struct Slot {
    source: Box<dyn Source>,
    /// Source series index → agent-local series id.
    ids: Vec<u32>,
    discovered: bool,
    /// Series per tier (`[fast, slow]`): a tier with none is not read (nor timed) at all.
    tier_series: [usize; 2],
    /// The slot's own metric handles, resolved once: the tick does no label lookups.
    /// Read durations per tier (`[fast, slow]`, as `tier_series`).
    read: [prometheus::Histogram; 2],
    samples: prometheus::IntCounter,
    errors: prometheus::IntCounter,
    /// The links the source listed at its last discovery: one missing from the next is sent as gone.
    listed: Vec<LinkKey>,
    /// The source reads on a clock of its own ([`Sampler::clock_sources`]): rounds leave it out.
    clocked: bool,
}

/// Runs the sources and keeps the agent-local ids. See the module documentation.
pub struct Sampler {
    slots: Vec<Slot>,
    link_ids: HashMap<LinkKey, u32>,
    series_ids: HashMap<String, u32>,
    links: BTreeMap<u32, pb::Link>,
    series: Vec<pb::SeriesDescriptor>,
    pending: pb::Inventory,
    metrics: Arc<AgentMetrics>,
    /// The most recent read and discovery errors, `(source, message)`, at most [`RECENT_ERRORS`].
    recent_errors: Vec<(&'static str, String)>,
    /// Jobs of the sources that look for them, and whether the list changed since the last hand-off.
    jobs: Vec<Job>,
    jobs_pending: bool,
    /// A round's values, `(read ns, series id, wire bits)`: kept between rounds (no allocation a round).
    round_values: Vec<(i64, u32, u64)>,
    /// The rounds taken from one clocked source: kept between calls.
    clocked_rounds: Vec<ClockedRound>,
}

/// How many recent errors the sampler keeps for `--once` and logs.
pub const RECENT_ERRORS: usize = 32;

impl Sampler {
    pub fn new(sources: Vec<Box<dyn Source>>, metrics: Arc<AgentMetrics>) -> Sampler {
        Sampler {
            slots: sources
                .into_iter()
                .map(|mut source| {
                    source.bind_metrics(&metrics);
                    let name = source.name();
                    Slot {
                        read: Tier::ALL.map(|tier| {
                            metrics
                                .read_seconds
                                .with_label_values(&[name, tier.as_str()])
                        }),
                        samples: metrics.samples.with_label_values(&[name]),
                        errors: metrics.read_errors.with_label_values(&[name]),
                        source,
                        ids: Vec::new(),
                        discovered: false,
                        tier_series: [0, 0],
                        listed: Vec::new(),
                        clocked: false,
                    }
                })
                .collect(),
            link_ids: HashMap::new(),
            series_ids: HashMap::new(),
            links: BTreeMap::new(),
            series: Vec::new(),
            pending: pb::Inventory::default(),
            metrics,
            recent_errors: Vec::new(),
            jobs: Vec::new(),
            jobs_pending: false,
            round_values: Vec::new(),
            clocked_rounds: Vec::new(),
        }
    }

    /// Names of the sources, in order.
    pub fn source_names(&self) -> Vec<&'static str> {
        self.slots.iter().map(|s| s.source.name()).collect()
    }

    /// The sources that cannot read anything here, by name, with why ([`Source::unavailable`] after the last
    /// discovery).
    pub fn unavailable_sources(&self) -> Vec<(&'static str, String)> {
        self.slots
            .iter()
            .filter_map(|s| Some((s.source.name(), s.source.unavailable()?)))
            .collect()
    }

    /// Rescans every source and assigns ids to new links and series. Changes are queued for
    /// [`take_update`](Self::take_update). Returns whether anything changed.
    pub fn discover(&mut self) -> bool {
        let mut changed = false;
        let mut any_jobs = false;
        let mut jobs: Vec<Job> = Vec::new();
        for i in 0..self.slots.len() {
            let name = self.slots[i].source.name();
            let before: Vec<Link> = self.slots[..i]
                .iter()
                .flat_map(|s| s.source.inventory().links.iter().cloned())
                .collect();
            self.slots[i].source.node_links(&before);
            let result = self.slots[i].source.discover();
            if let Some(j) = self.slots[i].source.jobs() {
                any_jobs = true;
                jobs.extend(j.iter().cloned());
            }
            let source_changed = match result {
                Ok(c) => c || !self.slots[i].discovered,
                Err(e) => {
                    self.metrics
                        .discover_errors
                        .with_label_values(&[name])
                        .inc();
                    note_error(&mut self.recent_errors, name, e.to_string());
                    tracing::warn!(source = name, error = %e, "discovery failed; keeping the previous inventory");
                    false
                }
            };
            self.slots[i].discovered = true;
            if source_changed {
                changed |= self.absorb_inventory(i);
            }
        }
        if any_jobs {
            changed |= self.set_jobs(jobs);
        }
        changed
    }

    /// Between two discoveries, asks the sources that look for jobs for a cheap look at what started or
    /// ended ([`Source::refresh_jobs`]); the node's job list, when it changed, is queued as at a discovery.
    /// Returns whether it changed. A source that fails keeps its last list; the failure is counted with the
    /// discovery errors (a stalled source's, already reported, is not).
    pub fn refresh_jobs(&mut self) -> bool {
        let mut any = false;
        for slot in &mut self.slots {
            if slot.source.jobs().is_none() {
                continue;
            }
            match slot.source.refresh_jobs() {
                Ok(changed) => any |= changed,
                // A stalled source is reported by its gauge and at discovery, not once a slow tick here.
                Err(crate::source::SourceError::Stalled { .. }) => {}
                Err(e) => {
                    let name = slot.source.name();
                    self.metrics
                        .discover_errors
                        .with_label_values(&[name])
                        .inc();
                    tracing::debug!(source = name, error = %e, "job refresh failed");
                    note_error(&mut self.recent_errors, name, e.to_string());
                }
            }
        }
        if !any {
            return false;
        }
        let jobs: Vec<Job> = self
            .slots
            .iter()
            .filter_map(|s| s.source.jobs())
            .flat_map(|j| j.iter().cloned())
            .collect();
        self.set_jobs(jobs)
    }

    /// Takes `jobs` as the node's job list; queues it and returns true when it differs from the last.
    fn set_jobs(&mut self, jobs: Vec<Job>) -> bool {
        self.metrics.jobs.set(jobs.len() as i64);
        if jobs == self.jobs {
            return false;
        }
        self.jobs = jobs;
        self.jobs_pending = true;
        true
    }

    /// Jobs found by the last discovery (empty without a `processes` source).
    pub fn jobs(&self) -> &[Job] {
        &self.jobs
    }

    /// The complete job list when it changed since the last call, or `None`.
    pub fn take_jobs_update(&mut self) -> Option<pb::JobInventory> {
        if !self.jobs_pending {
            return None;
        }
        self.jobs_pending = false;
        Some(jobs_to_pb(&self.jobs))
    }

    /// Takes in the inventory of source `slot`: ids for its new links and series, changes queued for the
    /// next update. Returns whether anything changed.
    fn absorb_inventory(&mut self, slot: usize) -> bool {
        let inv = self.slots[slot].source.inventory().clone();
        let name = self.slots[slot].source.name();
        self.metrics
            .series
            .with_label_values(&[name])
            .set(inv.series.len() as i64);
        self.metrics
            .links
            .with_label_values(&[name])
            .set(inv.links.len() as i64);
        let mut changed = false;
        for link in &inv.links {
            changed |= self.absorb_link(link);
        }
        let listed: Vec<LinkKey> = inv.links.iter().map(|l| l.key.clone()).collect();
        for key in std::mem::replace(&mut self.slots[slot].listed, listed) {
            if !inv.links.iter().any(|l| l.key == key) {
                changed |= self.mark_gone(&key);
            }
        }
        let mut ids = Vec::with_capacity(inv.series.len());
        let mut tier_series = [0, 0];
        for spec in &inv.series {
            ids.push(self.series_id(spec, &mut changed));
            tier_series[spec.tier.index()] += 1;
        }
        self.slots[slot].ids = ids;
        self.slots[slot].tier_series = tier_series;
        changed
    }

    /// Gives `link` its id (kept across rediscoveries) and queues its wire form when it is new or changed.
    fn absorb_link(&mut self, link: &Link) -> bool {
        let next = self.link_ids.len() as u32 + 1;
        let id = *self.link_ids.entry(link.key.clone()).or_insert(next);
        let pbl = link_to_pb(id, link);
        if self.links.get(&id) == Some(&pbl) {
            return false;
        }
        self.links.insert(id, pbl.clone());
        self.pending.links.push(pbl);
        true
    }

    /// Queues link `key` as gone (its source no longer lists it); `false` when it was gone already. It keeps
    /// its id: listed again, it is sent again without the flag.
    fn mark_gone(&mut self, key: &LinkKey) -> bool {
        let Some(id) = self.link_ids.get(key) else {
            return false;
        };
        let Some(last) = self.links.get(id).filter(|l| !l.gone) else {
            return false;
        };
        let gone = gone_link_to_pb(last);
        self.links.insert(*id, gone.clone());
        self.pending.links.push(gone);
        true
    }

    /// The id of series `spec`, kept across rediscoveries by its identity; a new one is queued (and sets
    /// `changed`).
    fn series_id(&mut self, spec: &SeriesSpec, changed: &mut bool) -> u32 {
        let identity = spec.identity();
        if let Some(id) = self.series_ids.get(&identity) {
            return *id;
        }
        let id = self.series.len() as u32 + 1;
        self.series_ids.insert(identity, id);
        let link_id = spec.link.as_ref().map_or(0, |k| self.link_id(k));
        let d = series_to_pb(id, spec, link_id);
        self.series.push(d.clone());
        self.pending.series.push(d);
        *changed = true;
        id
    }

    /// The id of link `k`. A series on a link its source did not list gets a bare link registered, so the
    /// reference stays valid.
    fn link_id(&mut self, k: &LinkKey) -> u32 {
        if let Some(id) = self.link_ids.get(k) {
            return *id;
        }
        let id = self.link_ids.len() as u32 + 1;
        self.link_ids.insert(k.clone(), id);
        let pbl = bare_link_to_pb(id, k);
        self.links.insert(id, pbl.clone());
        self.pending.links.push(pbl);
        id
    }

    /// Links and series added or changed since the last call, or `None`.
    pub fn take_update(&mut self) -> Option<pb::Inventory> {
        if self.pending.links.is_empty() && self.pending.series.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut self.pending))
        }
    }

    /// Puts back an update that could not be handed over, ahead of anything queued since, so the next
    /// [`take_update`](Self::take_update) carries it again.
    pub fn restore_update(&mut self, mut inv: pb::Inventory) {
        inv.links.append(&mut self.pending.links);
        inv.series.append(&mut self.pending.series);
        self.pending = inv;
    }

    /// Marks the job list as still to be sent (its hand-over failed).
    pub fn restore_jobs_update(&mut self) {
        self.jobs_pending = true;
    }

    /// Everything known so far (sent in `Hello`).
    pub fn full_inventory(&self) -> pb::Inventory {
        pb::Inventory {
            links: self.links.values().cloned().collect(),
            series: self.series.clone(),
        }
    }

    /// Reads every source's series of `tier` into `out` ([`Sampler::sample_round`] of one tier).
    pub fn sample(&mut self, tier: Tier, out: &mut BatchBuilder) {
        self.round(Tiers::of(tier), out, Stamps::Read);
    }

    /// Reads every source's series of `tiers` into `out` in one round: every due source is asked first
    /// (both tiers in one request when both are due), then their answers are taken, each value stamped with
    /// the wall-clock time its source read it ([`Source::finish_round`]): a source read late, behind a slow
    /// one, or after the thread stalled carries the time it was really read, and one whose answer is taken
    /// after another's read ended keeps its own. The round's values go into `out` in the order of their
    /// times.
    pub fn sample_round(&mut self, tiers: Tiers, out: &mut BatchBuilder) {
        self.round(tiers, out, Stamps::Read);
    }

    /// [`Sampler::sample`] with each value stamped from `clock` (nanoseconds since the Unix epoch) when it is
    /// handed over, instead of with the wall-clock time of its read: a run on a virtual clock (the detection
    /// benchmark, where simulated files stand at a simulated time and the clock stands still while they are
    /// read) stamps each sample with the moment it stands for. The reads take the same path.
    pub fn sample_at(
        &mut self,
        tier: Tier,
        out: &mut BatchBuilder,
        clock: &mut dyn FnMut() -> i64,
    ) {
        self.round(Tiers::of(tier), out, Stamps::Clock(clock));
    }

    /// Puts every source that can on a clock ([`Source::clock`]: a thread reads each tier when due, on the
    /// grid of `cadence`'s periods from `start`: one thread for the quick sources, their own for the
    /// others); their rounds are then taken with
    /// [`Sampler::take_clocked`], and rounds ([`Sampler::sample_round`]) read only the others. Returns
    /// whether any source is left for the rounds to read.
    /// `after_round` is told the deadline of each round of the quick sources once it is handed over.
    pub fn clock_sources(
        &mut self,
        cadence: Arc<dyn Cadence>,
        start: std::time::Instant,
        after_round: Box<dyn Fn(std::time::Instant) + Send>,
    ) -> bool {
        let mut group = ClockGroup::new(start);
        group.after_round(after_round);
        for slot in &mut self.slots {
            slot.clocked = slot.source.clock(cadence.clone(), start, &mut group);
        }
        group.start(cadence, start);
        self.slots.iter().any(|s| !s.clocked)
    }

    /// Whether any source reads on a clock of its own.
    pub fn any_clocked(&self) -> bool {
        self.slots.iter().any(|s| s.clocked)
    }

    /// Takes what the clocked sources read since the last call ([`Source::take_rounds`]: a round under way
    /// that began by `upto` is waited for) into `out`, in the order of the read times, as a round's values
    /// go; counts their reads as a round's, and adds each round's times to `ticks`.
    pub fn take_clocked(
        &mut self,
        upto: std::time::Instant,
        out: &mut BatchBuilder,
        ticks: &mut Vec<RoundTimes>,
    ) {
        let mut values = std::mem::take(&mut self.round_values);
        let mut rounds = std::mem::take(&mut self.clocked_rounds);
        for slot in self.slots.iter_mut().filter(|s| s.clocked) {
            let ids = &slot.ids;
            slot.source.take_rounds(
                upto,
                &mut |idx, v: Value, read_ns| {
                    if let Some(id) = ids.get(idx) {
                        values.push((read_ns, *id, v.to_bits()));
                    }
                },
                &mut rounds,
            );
            for round in rounds.drain(..) {
                slot.account(&round.reads, &mut self.recent_errors);
                ticks.extend(round.times);
            }
        }
        self.clocked_rounds = rounds;
        values.sort_by_key(|&(ns, ..)| ns);
        for (ns, id, bits) in values.drain(..) {
            out.push_read(id, bits, ns);
        }
        out.end_tick();
        self.round_values = values;
    }

    /// One round (see [`Sampler::sample_round`]); sources on a clock of their own are left out.
    fn round(&mut self, tiers: Tiers, out: &mut BatchBuilder, mut stamps: Stamps<'_>) {
        for slot in self.slots.iter_mut().filter(|s| !s.clocked) {
            let due = slot.due(tiers);
            if !due.is_empty() {
                slot.source.start_round(due);
            }
        }
        let mut values = std::mem::take(&mut self.round_values);
        for slot in self.slots.iter_mut().filter(|s| !s.clocked) {
            let due = slot.due(tiers);
            if due.is_empty() {
                continue;
            }
            let ids = &slot.ids;
            let reads = slot
                .source
                .finish_round(due, &mut |idx, v: Value, read_ns| {
                    if let Some(id) = ids.get(idx) {
                        let ns = match &mut stamps {
                            Stamps::Read => read_ns,
                            Stamps::Clock(clock) => clock(),
                        };
                        values.push((ns, *id, v.to_bits()));
                    }
                });
            slot.account(&reads, &mut self.recent_errors);
        }
        // Each source's values are in read order: a stable sort merges the sources' runs.
        values.sort_by_key(|&(ns, ..)| ns);
        for (ns, id, bits) in values.drain(..) {
            out.push_read(id, bits, ns);
        }
        self.round_values = values;
    }

    /// The series descriptor of an agent-local id.
    pub fn series(&self, id: u32) -> Option<&pb::SeriesDescriptor> {
        self.series.get((id as usize).checked_sub(1)?)
    }

    pub fn link(&self, id: u32) -> Option<&pb::Link> {
        self.links.get(&id)
    }
}

fn note_error(errors: &mut Vec<(&'static str, String)>, source: &'static str, message: String) {
    if errors.len() >= RECENT_ERRORS {
        errors.remove(0);
    }
    errors.push((source, message));
}

/// How a round's values are stamped.
enum Stamps<'a> {
    /// With the wall-clock time of each value's read.
    Read,
    /// With this clock's time when each value is handed over.
    Clock(&'a mut dyn FnMut() -> i64),
}

impl Slot {
    /// The tiers of `tiers` this slot has series in (a tier with none is not read, nor timed).
    fn due(&self, tiers: Tiers) -> Tiers {
        tiers
            .iter()
            .filter(|t| self.tier_series[t.index()] > 0)
            .fold(Tiers::NONE, Tiers::with)
    }

    /// Counts a round's reads: durations, values, failures (noted in `recent`).
    fn account(&self, reads: &RoundReads, recent: &mut Vec<(&'static str, String)>) {
        for (tier, read) in reads.iter().enumerate() {
            let Some(TierRead { report, took }) = read else {
                continue;
            };
            self.read[tier].observe(took.as_secs_f64());
            self.samples.inc_by(report.read as u64);
            if report.failed > 0 {
                let name = self.source.name();
                self.errors.inc_by(report.failed as u64);
                if let Some(e) = report.errors.first() {
                    tracing::debug!(source = name, failed = report.failed, error = %e, "partial read");
                }
                for e in &report.errors {
                    note_error(recent, name, e.to_string());
                }
            }
        }
    }
}

impl Sampler {
    /// The most recent read and discovery errors, oldest first.
    pub fn recent_errors(&self) -> &[(&'static str, String)] {
        &self.recent_errors
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use commwatch_model::clock::unix_now_ns;
    use commwatch_model::SeriesKind;

    use super::*;

    #[test]
    fn a_restored_update_comes_back_ahead_of_newer_ones() {
        let mut s = Sampler::new(Vec::new(), Arc::new(AgentMetrics::new()));
        let link = |id| pb::Link {
            id,
            ..Default::default()
        };
        s.restore_update(pb::Inventory {
            links: vec![link(2)],
            series: vec![],
        });
        s.restore_update(pb::Inventory {
            links: vec![link(1)],
            series: vec![],
        });
        let ids: Vec<u32> = s
            .take_update()
            .unwrap()
            .links
            .iter()
            .map(|l| l.id)
            .collect();
        assert_eq!(ids, vec![1, 2]);
        assert!(s.take_update().is_none());
    }

    /// A source with one link of each endpoint kind and a byte counter on each.
    struct Links(crate::source::Inventory);

    impl Source for Links {
        fn name(&self) -> &'static str {
            "links"
        }
        fn discover(&mut self) -> Result<bool, crate::source::SourceError> {
            Ok(true)
        }
        fn inventory(&self) -> &crate::source::Inventory {
            &self.0
        }
        fn sample(
            &mut self,
            _tier: Tier,
            _sink: &mut dyn FnMut(usize, Value),
        ) -> crate::source::ReadReport {
            crate::source::ReadReport::default()
        }
    }

    /// A source whose last link vanishes at its second discovery and comes back at its third.
    struct Vanishing {
        all: crate::source::Inventory,
        now: crate::source::Inventory,
        discoveries: usize,
    }

    impl Source for Vanishing {
        fn name(&self) -> &'static str {
            "vanishing"
        }
        fn discover(&mut self) -> Result<bool, crate::source::SourceError> {
            self.discoveries += 1;
            self.now = self.all.clone();
            if self.discoveries == 2 {
                self.now.links.pop();
            }
            Ok(true)
        }
        fn inventory(&self) -> &crate::source::Inventory {
            &self.now
        }
        fn sample(
            &mut self,
            _tier: Tier,
            _sink: &mut dyn FnMut(usize, Value),
        ) -> crate::source::ReadReport {
            crate::source::ReadReport::default()
        }
    }

    #[test]
    fn a_link_that_vanishes_is_sent_gone_and_stays_described() {
        use commwatch_model::{Endpoint, LinkClass, LinkRole};
        let link = |port: &str| Link {
            key: LinkKey::new(LinkClass::Infiniband, "mlx5_0", port),
            endpoint: Endpoint::HcaPort,
            role: LinkRole::Fabric,
            capacity_bytes_per_second: None,
            state: "ACTIVE".into(),
            attributes: BTreeMap::new(),
            gpu: None,
            link: None,
        };
        let all = crate::source::Inventory {
            links: vec![link("1"), link("2")],
            series: vec![],
        };
        let source = Vanishing {
            all,
            now: Default::default(),
            discoveries: 0,
        };
        let mut s = Sampler::new(vec![Box::new(source)], Arc::new(AgentMetrics::new()));
        assert!(s.discover());
        assert_eq!(s.take_update().unwrap().links.len(), 2);
        // Port 2 vanishes: sent again under its id, flagged gone; the Hello still describes it.
        assert!(s.discover());
        let update = s.take_update().unwrap();
        let sent: Vec<(u32, &str, bool)> = update
            .links
            .iter()
            .map(|l| (l.id, l.port.as_str(), l.gone))
            .collect();
        assert_eq!(sent, vec![(2, "2", true)]);
        let hello: Vec<bool> = s.full_inventory().links.iter().map(|l| l.gone).collect();
        assert_eq!(hello, vec![false, true]);
        // Back: the same id, without the flag.
        assert!(s.discover());
        let update = s.take_update().unwrap();
        let sent: Vec<(u32, bool)> = update.links.iter().map(|l| (l.id, l.gone)).collect();
        assert_eq!(sent, vec![(2, false)]);
    }

    /// One slow counter named `metric`; `sample` reads it, then signals `read` and waits for `wait` (when
    /// given), logging the wall-clock times around its read and the end of its `sample` in `log`.
    struct Timed {
        inventory: crate::source::Inventory,
        read: Option<std::sync::mpsc::Sender<()>>,
        wait: Option<std::sync::mpsc::Receiver<()>>,
        log: Arc<std::sync::Mutex<TimedLog>>,
    }

    #[derive(Debug, Default, Clone, Copy)]
    struct TimedLog {
        /// Just before and just after the sink took the value.
        taken: i64,
        returned: i64,
        /// When `sample` returned; whether the wait was answered.
        ended: i64,
        waited: bool,
    }

    impl Timed {
        fn new(metric: &str, log: &Arc<std::sync::Mutex<TimedLog>>) -> Timed {
            let spec = SeriesSpec {
                metric: metric.into(),
                kind: SeriesKind::COUNTER64,
                tier: Tier::Slow,
                link: None,
                labels: BTreeMap::new(),
            };
            Timed {
                inventory: crate::source::Inventory {
                    links: vec![],
                    series: vec![spec],
                },
                read: None,
                wait: None,
                log: log.clone(),
            }
        }
    }

    impl Source for Timed {
        fn name(&self) -> &'static str {
            "timed"
        }
        fn discover(&mut self) -> Result<bool, crate::source::SourceError> {
            Ok(true)
        }
        fn inventory(&self) -> &crate::source::Inventory {
            &self.inventory
        }
        fn sample(
            &mut self,
            _tier: Tier,
            sink: &mut dyn FnMut(usize, Value),
        ) -> crate::source::ReadReport {
            let taken = unix_now_ns();
            sink(0, Value::Counter(1));
            let returned = unix_now_ns();
            if let Some(read) = &self.read {
                let _ = read.send(());
            }
            let waited = self
                .wait
                .as_ref()
                .is_some_and(|w| w.recv_timeout(std::time::Duration::from_secs(20)).is_ok());
            *self.log.lock().unwrap() = TimedLog {
                taken,
                returned,
                ended: unix_now_ns(),
                waited,
            };
            crate::source::ReadReport {
                read: 1,
                ..Default::default()
            }
        }
        fn quick_reads(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_sources_values_keep_their_read_time_when_another_sources_read_ends_later() {
        use crate::source::watchdog::watch;
        // The first source's read ends only after the second one has read (each on its thread, both asked
        // before either answer is taken): the second's answer is taken after the first's read ended, and
        // its value must carry its own read time, not that end.
        let (read, wait) = std::sync::mpsc::channel();
        let (late, early) = (Arc::default(), Arc::default());
        let mut last = Timed::new("late", &late);
        last.wait = Some(wait);
        let mut first = Timed::new("early", &early);
        first.read = Some(read);
        let sources: Vec<Box<dyn Source>> = vec![watch(Box::new(last)), watch(Box::new(first))];
        let mut s = Sampler::new(sources, Arc::new(AgentMetrics::new()));
        assert!(s.discover());
        let mut out = BatchBuilder::default();
        out.set_resolution(std::time::Duration::from_micros(1));
        s.sample_round(Tiers::of(Tier::Slow), &mut out);
        let b = out.take().unwrap();
        let (late, early) = (*late.lock().unwrap(), *early.lock().unwrap());
        assert!(
            late.waited,
            "the two sources were not read at the same time"
        );
        let mut stamps = BTreeMap::new();
        let mut at = 0;
        for (&ts, &n) in b.timestamps_unix_ns.iter().zip(&b.tick_lengths) {
            for &id in &b.series_ids[at..at + n as usize] {
                stamps.insert(s.series(id).unwrap().metric.clone(), ts);
            }
            at += n as usize;
        }
        let stamped = stamps["early"];
        assert!(
            stamped <= early.returned && stamped >= early.taken - 1_000,
            "read between {} and {}, stamped {stamped}; the other source's read ended at {}",
            early.taken,
            early.returned,
            late.ended
        );
        assert!(stamps["late"] <= late.returned);
        // In the order of their reads on the wire.
        assert!(b.timestamps_unix_ns.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn links_go_on_the_wire_with_their_endpoint_class_role_and_tiers() {
        use crate::source::SeriesSpec;
        use commwatch_model::{Endpoint, LinkClass, LinkRole};
        let link = |class, device: &str, port: &str, endpoint, role| Link {
            key: LinkKey::new(class, device, port),
            endpoint,
            role,
            capacity_bytes_per_second: Some(50e9),
            state: "ACTIVE".into(),
            attributes: BTreeMap::new(),
            gpu: None,
            link: None,
        };
        let links = vec![
            link(
                LinkClass::Infiniband,
                "mlx5_0",
                "1",
                Endpoint::HcaPort,
                LinkRole::Fabric,
            ),
            link(
                LinkClass::Ethernet,
                "eth0",
                "eth0",
                Endpoint::Interface,
                LinkRole::Management,
            ),
            link(
                LinkClass::Nvlink,
                "gpu0",
                "0",
                Endpoint::GpuLink,
                LinkRole::Fabric,
            ),
        ];
        let series = vec![
            SeriesSpec::for_link("tx_bytes", SeriesKind::COUNTER64, Tier::Fast, &links[0].key),
            SeriesSpec::for_link(
                "symbol_errors",
                SeriesKind::COUNTER32,
                Tier::Slow,
                &links[0].key,
            ),
        ];
        let source = Links(crate::source::Inventory { links, series });
        let mut s = Sampler::new(vec![Box::new(source)], Arc::new(AgentMetrics::new()));
        assert!(s.discover());
        let inv = s.take_update().unwrap();
        let wire: Vec<(i32, i32, i32, &str)> = inv
            .links
            .iter()
            .map(|l| (l.endpoint, l.class, l.role, l.device.as_str()))
            .collect();
        assert_eq!(
            wire,
            vec![
                (
                    pb::LinkEndpoint::HcaPort as i32,
                    pb::LinkClass::Infiniband as i32,
                    pb::LinkRole::Fabric as i32,
                    "mlx5_0"
                ),
                (
                    pb::LinkEndpoint::Interface as i32,
                    pb::LinkClass::Ethernet as i32,
                    pb::LinkRole::Management as i32,
                    "eth0"
                ),
                (
                    pb::LinkEndpoint::GpuLink as i32,
                    pb::LinkClass::Nvlink as i32,
                    pb::LinkRole::Fabric as i32,
                    "gpu0"
                ),
            ]
        );
        let tiers: Vec<(i32, u64)> = inv.series.iter().map(|d| (d.tier, d.max_value)).collect();
        assert_eq!(
            tiers,
            vec![
                (pb::Tier::Fast as i32, 0),
                (pb::Tier::Slow as i32, u64::from(u32::MAX))
            ]
        );
        assert!(inv.series.iter().all(|d| d.link_id == inv.links[0].id));
    }
}
