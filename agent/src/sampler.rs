//! The sampler: runs the sources on two tiers, gives every link and series a stable agent-local id, and
//! gathers samples into columnar batches (`commwatch.v1.SampleBatch`).
//!
//! It runs on its own OS thread ([`spawn`]) because sysfs and NVML reads block; it hands batches and inventory
//! changes to the shipper through a bounded queue and never waits on it (a full queue drops the batch and
//! counts it: sampling on time matters more than any single batch).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_model::clock::unix_now_ns;
use commwatch_model::{Job, Link, LinkKey, SeriesKind, Tier};
use commwatch_proto::v1 as pb;

use crate::source::{Source, Value};
use crate::telemetry::AgentMetrics;

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

/// Columnar batch under construction.
#[derive(Debug, Default)]
pub struct BatchBuilder {
    timestamps: Vec<i64>,
    lengths: Vec<u32>,
    ids: Vec<u32>,
    values: Vec<u64>,
    open: bool,
}

impl BatchBuilder {
    /// Starts a tick at `unix_ns`; samples pushed until [`end_tick`](Self::end_tick) share its timestamp.
    pub fn begin_tick(&mut self, unix_ns: i64) {
        if self.open {
            self.end_tick();
        }
        self.timestamps.push(unix_ns);
        self.lengths.push(0);
        self.open = true;
    }

    pub fn push(&mut self, id: u32, value: u64) {
        if !self.open {
            return;
        }
        self.ids.push(id);
        self.values.push(value);
        if let Some(l) = self.lengths.last_mut() {
            *l += 1;
        }
    }

    /// Closes the tick; an empty tick is removed.
    pub fn end_tick(&mut self) {
        if self.open && self.lengths.last() == Some(&0) {
            self.lengths.pop();
            self.timestamps.pop();
        }
        self.open = false;
    }

    pub fn samples(&self) -> usize {
        self.ids.len()
    }

    /// Takes the batch gathered so far (`seq` 0), or `None` when it holds no sample.
    pub fn take(&mut self) -> Option<pb::SampleBatch> {
        self.end_tick();
        if self.ids.is_empty() {
            return None;
        }
        Some(pb::SampleBatch {
            seq: 0,
            timestamps_unix_ns: std::mem::take(&mut self.timestamps),
            tick_lengths: std::mem::take(&mut self.lengths),
            series_ids: std::mem::take(&mut self.ids),
            values: std::mem::take(&mut self.values),
            dropped_batches_total: 0,
            markers: Vec::new(),
        })
    }
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
}

/// How many recent errors the sampler keeps for `--once` and logs.
pub const RECENT_ERRORS: usize = 32;

/// The wire form of a link under its agent-local id.
fn link_to_pb(id: u32, l: &Link) -> pb::Link {
    pb::Link {
        id,
        class: pb::LinkClass::from(l.key.class) as i32,
        role: pb::LinkRole::from(l.role) as i32,
        device: l.key.device.clone(),
        port: l.key.port.clone(),
        capacity_bytes_per_second: l.capacity_bytes_per_second.unwrap_or(0.0),
        state: l.state.clone(),
        attributes: l.attributes.clone().into_iter().collect(),
        gpu: l.gpu.clone().unwrap_or_default(),
        link: l.link.clone().unwrap_or_default(),
        endpoint: pb::LinkEndpoint::from(l.endpoint) as i32,
    }
}

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
        }
    }

    /// Names of the sources, in order.
    pub fn source_names(&self) -> Vec<&'static str> {
        self.slots.iter().map(|s| s.source.name()).collect()
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
            self.metrics.jobs.set(jobs.len() as i64);
            if jobs != self.jobs {
                self.jobs = jobs;
                self.jobs_pending = true;
                changed = true;
            }
        }
        changed
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

    fn absorb_inventory(&mut self, slot: usize) -> bool {
        let mut changed = false;
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
        for link in &inv.links {
            let next = self.link_ids.len() as u32 + 1;
            let id = *self.link_ids.entry(link.key.clone()).or_insert(next);
            let pbl = link_to_pb(id, link);
            if self.links.get(&id) != Some(&pbl) {
                self.links.insert(id, pbl.clone());
                self.pending.links.push(pbl);
                changed = true;
            }
        }
        let mut ids = Vec::with_capacity(inv.series.len());
        for spec in &inv.series {
            let identity = spec.identity();
            let id = match self.series_ids.get(&identity) {
                Some(id) => *id,
                None => {
                    let id = self.series.len() as u32 + 1;
                    self.series_ids.insert(identity, id);
                    let link_id = match &spec.link {
                        Some(k) => match self.link_ids.get(k) {
                            Some(id) => *id,
                            None => {
                                // A series on a link the source did not list: register a bare link so the
                                // reference stays valid.
                                let lid = self.link_ids.len() as u32 + 1;
                                self.link_ids.insert(k.clone(), lid);
                                // Its endpoint and role are unknown: left unspecified on the wire.
                                let pbl = pb::Link {
                                    id: lid,
                                    class: pb::LinkClass::from(k.class) as i32,
                                    role: pb::LinkRole::Unspecified as i32,
                                    device: k.device.clone(),
                                    port: k.port.clone(),
                                    ..Default::default()
                                };
                                self.links.insert(lid, pbl.clone());
                                self.pending.links.push(pbl);
                                lid
                            }
                        },
                        None => 0,
                    };
                    let (kind, max_value) = match spec.kind {
                        SeriesKind::Counter { max_value } => (pb::SeriesKind::Counter, max_value),
                        SeriesKind::Gauge => (pb::SeriesKind::Gauge, 0),
                    };
                    let d = pb::SeriesDescriptor {
                        id,
                        metric: spec.metric.clone(),
                        kind: kind as i32,
                        link_id,
                        labels: spec.labels.clone().into_iter().collect(),
                        max_value: if max_value == u64::MAX { 0 } else { max_value },
                        tier: pb::Tier::from(spec.tier) as i32,
                    };
                    self.series.push(d.clone());
                    self.pending.series.push(d);
                    changed = true;
                    id
                }
            };
            ids.push(id);
        }
        self.slots[slot].ids = ids;
        let mut tier_series = [0, 0];
        for spec in &inv.series {
            tier_series[spec.tier.index()] += 1;
        }
        self.slots[slot].tier_series = tier_series;
        changed
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

    /// Reads every source's series of `tier` into the open tick of `out`.
    pub fn sample(&mut self, tier: Tier, out: &mut BatchBuilder) {
        for slot in &mut self.slots {
            if slot.tier_series[tier.index()] == 0 {
                continue;
            }
            let ids = &slot.ids;
            let started = Instant::now();
            let report = slot.source.sample(tier, &mut |idx, v: Value| {
                if let Some(id) = ids.get(idx) {
                    out.push(*id, v.to_bits());
                }
            });
            slot.read[tier.index()].observe(started.elapsed().as_secs_f64());
            slot.samples.inc_by(report.read as u64);
            if report.failed > 0 {
                let name = slot.source.name();
                slot.errors.inc_by(report.failed as u64);
                if let Some(e) = report.errors.first() {
                    tracing::debug!(source = name, failed = report.failed, error = %e, "partial read");
                }
                for e in &report.errors {
                    note_error(&mut self.recent_errors, name, e.to_string());
                }
            }
        }
    }

    /// The series descriptor of an agent-local id.
    pub fn series(&self, id: u32) -> Option<&pb::SeriesDescriptor> {
        self.series.get((id as usize).checked_sub(1)?)
    }

    pub fn link(&self, id: u32) -> Option<&pb::Link> {
        self.links.get(&id)
    }
}

/// The wire form of a node's jobs.
pub fn jobs_to_pb(jobs: &[Job]) -> pb::JobInventory {
    pb::JobInventory {
        jobs: jobs
            .iter()
            .map(|j| pb::Job {
                id: j.id.clone(),
                ranks: j
                    .ranks
                    .iter()
                    .map(|r| pb::Rank {
                        pid: r.pid,
                        rank: r.rank,
                        local_rank: r.local_rank,
                        world_size: r.world_size,
                        gpus: r.gpus.clone(),
                        pod_uid: r.pod_uid.clone().unwrap_or_default(),
                        container_id: r.container_id.clone().unwrap_or_default(),
                        nccl: r.nccl.clone().into_iter().collect(),
                        found_by: r.found_by.clone(),
                    })
                    .collect(),
                conflicts: j
                    .conflicts
                    .iter()
                    .map(|c| pb::NcclConflict {
                        setting: c.setting.clone(),
                        value: c.value.clone(),
                        kind: c.kind.to_string(),
                        reason: c.reason.clone(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn note_error(errors: &mut Vec<(&'static str, String)>, source: &'static str, message: String) {
    if errors.len() >= RECENT_ERRORS {
        errors.remove(0);
    }
    errors.push((source, message));
}

impl Sampler {
    /// The most recent read and discovery errors, oldest first.
    pub fn recent_errors(&self) -> &[(&'static str, String)] {
        &self.recent_errors
    }
}

/// Sampling periods, changeable at run time (the collector's `Config`).
#[derive(Debug)]
pub struct Periods {
    fast_ms: AtomicU64,
    slow_ms: AtomicU64,
}

impl Periods {
    pub fn new(fast: Duration, slow: Duration) -> Arc<Periods> {
        Arc::new(Periods {
            fast_ms: AtomicU64::new(fast.as_millis() as u64),
            slow_ms: AtomicU64::new(slow.as_millis() as u64),
        })
    }
    pub fn fast(&self) -> Duration {
        Duration::from_millis(self.fast_ms.load(Ordering::Relaxed))
    }
    pub fn slow(&self) -> Duration {
        Duration::from_millis(self.slow_ms.load(Ordering::Relaxed))
    }
    /// Applies a requested change, clamped to 5 ms..60 s (fast) and fast..10 min (slow); 0 keeps a period.
    pub fn apply(&self, fast_ms: u32, slow_ms: u32) {
        if fast_ms > 0 {
            self.fast_ms
                .store(u64::from(fast_ms).clamp(5, 60_000), Ordering::Relaxed);
        }
        // The slow tier never runs faster than the fast one, whichever of the two changed.
        let fast = self.fast_ms.load(Ordering::Relaxed);
        let slow = match slow_ms {
            0 => self.slow_ms.load(Ordering::Relaxed),
            v => u64::from(v),
        };
        self.slow_ms
            .store(slow.clamp(fast, 600_000), Ordering::Relaxed);
    }
}

/// Settings of the sampling thread.
#[derive(Debug, Clone)]
pub struct LoopSettings {
    pub batch_period: Duration,
    pub discover_period: Duration,
    /// Step markers to attach to each batch.
    pub markers: Option<Arc<crate::steps::MarkerQueue>>,
}

/// Handle of the sampling thread; dropping it does not stop the thread, call [`SamplerHandle::stop`].
pub struct SamplerHandle {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SamplerHandle {
    /// Stops the thread after its current tick and waits for it (the last partial batch is handed over).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if let Some(th) = t.thread().name() {
                tracing::debug!(thread = th, "stopping sampler");
            }
            let _ = t.join();
        }
    }
}

/// Starts the sampling thread. The first `Inventory` event carries everything discovered at start.
pub fn spawn(
    mut sampler: Sampler,
    periods: Arc<Periods>,
    settings: LoopSettings,
    events: tokio::sync::mpsc::Sender<SamplerEvent>,
    metrics: Arc<AgentMetrics>,
) -> std::io::Result<SamplerHandle> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let thread = std::thread::Builder::new()
        .name("commwatch-sampler".into())
        .spawn(move || {
            // Inventory and job updates must reach the shipper before any batch that uses them: they are handed
            // over first, put back when the queue is full, and a batch waits (is dropped and counted) while an
            // update is still pending. The caller ran the first discovery; anything it found goes first.
            let flush_updates = |sampler: &mut Sampler| -> bool {
                if let Some(inv) = sampler.take_update() {
                    if let Err(e) = events.try_send(SamplerEvent::Inventory(inv)) {
                        if let SamplerEvent::Inventory(inv) = e.into_inner() {
                            sampler.restore_update(inv);
                        }
                        return false;
                    }
                }
                if let Some(jobs) = sampler.take_jobs_update() {
                    if events.try_send(SamplerEvent::Jobs(jobs)).is_err() {
                        sampler.restore_jobs_update();
                        return false;
                    }
                }
                true
            };
            let send_batch = |sampler: &mut Sampler, b: pb::SampleBatch| {
                if !flush_updates(sampler) || events.try_send(SamplerEvent::Batch(b)).is_err() {
                    metrics.handoff_drops.inc();
                }
            };
            flush_updates(&mut sampler);
            let tick_fast = metrics.tick_seconds.with_label_values(&["fast"]);
            let tick_slow = metrics.tick_seconds.with_label_values(&["slow"]);
            let mut builder = BatchBuilder::default();
            let start = Instant::now();
            let mut next_fast = start;
            let mut next_slow = start;
            let mut next_batch = start + settings.batch_period;
            let mut next_discover = start + settings.discover_period;
            loop {
                let now = Instant::now();
                let wake = next_fast.min(next_slow).min(next_batch);
                if wake > now {
                    // Sleep in short slices so a stop request is noticed promptly.
                    std::thread::sleep((wake - now).min(Duration::from_millis(20)));
                    if stop2.load(Ordering::Relaxed) {
                        break;
                    }
                    continue;
                }
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let do_fast = now >= next_fast;
                let do_slow = now >= next_slow;
                if do_fast || do_slow {
                    builder.begin_tick(unix_now_ns());
                    if do_fast {
                        let t = Instant::now();
                        sampler.sample(Tier::Fast, &mut builder);
                        tick_fast.observe(t.elapsed().as_secs_f64());
                        next_fast = advance(next_fast, periods.fast(), now, &metrics, "fast");
                    }
                    if do_slow {
                        let t = Instant::now();
                        sampler.sample(Tier::Slow, &mut builder);
                        tick_slow.observe(t.elapsed().as_secs_f64());
                        next_slow = advance(next_slow, periods.slow(), now, &metrics, "slow");
                    }
                    builder.end_tick();
                }
                if now >= next_discover {
                    next_discover = now + settings.discover_period;
                    // Samples of the current inventory go out before a rediscovery can change it (`send_batch`
                    // hands over any pending update first, so the batch must leave before `discover` queues
                    // one); a changed inventory then follows at once.
                    if let Some(b) = builder.take() {
                        send_batch(&mut sampler, b);
                    }
                    if sampler.discover() {
                        flush_updates(&mut sampler);
                    }
                }
                if now >= next_batch {
                    next_batch = now + settings.batch_period;
                    if let Some(b) = with_markers(builder.take(), settings.markers.as_deref()) {
                        send_batch(&mut sampler, b);
                    }
                }
            }
            if let Some(b) = with_markers(builder.take(), settings.markers.as_deref()) {
                send_batch(&mut sampler, b);
            }
        })?;
    Ok(SamplerHandle {
        stop,
        thread: Some(thread),
    })
}

/// Attaches the queued step markers; a batch is made for markers alone when there are no samples.
fn with_markers(
    batch: Option<pb::SampleBatch>,
    markers: Option<&crate::steps::MarkerQueue>,
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

/// Next deadline after one that was due at `due`: keeps the cadence, but skips missed ticks instead of
/// bursting to catch up (and counts the overrun).
fn advance(
    due: Instant,
    period: Duration,
    now: Instant,
    metrics: &AgentMetrics,
    tier: &str,
) -> Instant {
    let next = due + period;
    if next <= now {
        metrics.tick_overruns.with_label_values(&[tier]).inc();
        now + period
    } else {
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_groups_ticks_and_drops_empty_ones() {
        let mut b = BatchBuilder::default();
        b.begin_tick(10);
        b.push(1, 100);
        b.push(2, 200);
        b.begin_tick(20);
        b.end_tick();
        b.begin_tick(30);
        b.push(1, 150);
        let batch = b.take().unwrap();
        assert_eq!(batch.timestamps_unix_ns, vec![10, 30]);
        assert_eq!(batch.tick_lengths, vec![2, 1]);
        assert_eq!(batch.series_ids, vec![1, 2, 1]);
        assert_eq!(batch.values, vec![100, 200, 150]);
        assert!(b.take().is_none());
    }

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

    #[test]
    fn periods_clamp() {
        let p = Periods::new(Duration::from_millis(50), Duration::from_secs(1));
        p.apply(1, 0);
        assert_eq!(p.fast(), Duration::from_millis(5));
        p.apply(0, 2);
        assert_eq!(p.slow(), Duration::from_millis(5));
        p.apply(100, 2000);
        assert_eq!(
            (p.fast(), p.slow()),
            (Duration::from_millis(100), Duration::from_secs(2))
        );
        // A slower fast tier alone never leaves the slow tier below it.
        p.apply(5000, 0);
        assert_eq!(
            (p.fast(), p.slow()),
            (Duration::from_secs(5), Duration::from_secs(5))
        );
    }
}
