//! The `nvml` source: NVLink per-link byte counters and GPU state, through a [`GpuBackend`] (real NVML, a
//! recording, or the simulated cluster).
//!
//! Links: one per NVLink, class `nvlink`, device `gpu<N>`, port = link number, `gpu`/`link` set, role fabric,
//! capacity = the link's speed per direction (NVML's MB/s × 10^6: H100 26.562e9 B/s, A100 25e9 B/s), state
//! `up`/`down`, attributes `version`, `remote_pci_bus_id`, `peer_type` (`gpu`/`nvswitch`), `gpu_uuid`,
//! `gpu_name`, `throughput_source` (which counters the byte series come from).
//!
//! Fast tier (one batched `nvmlDeviceGetFieldValues` per GPU per tick): `tx_bytes`/`rx_bytes` per link,
//! cumulative bytes, from, in this order of preference, decided per GPU at discovery:
//! 1. fields 138/139 (`NVLINK_THROUGHPUT_DATA_TX/RX`, cumulative KiB, ×1024; link chosen by `scopeId`);
//! 2. fields 202/204 (NVLink 5 `COUNT_XMIT/RCV_BYTES`, bytes);
//! 3. the pre-Hopper utilisation counters, where they are configured to count bytes.
//!
//! A GPU where none works keeps its links in the inventory without byte series. Links that are down are not
//! read (their counters do not move; NVML answers NotSupported for them).
//!
//! Slow tier (node-level series with label `gpu`): `gpu_utilization_ratio`, `gpu_memory_utilization_ratio`,
//! `gpu_sm_activity_ratio` (GPM), `gpu_memory_used_bytes`, `gpu_pcie_tx_bytes_per_second`,
//! `gpu_pcie_rx_bytes_per_second` (GPM where supported, else NVML's 20 ms PCIe sample), `gpu_nvlink_tx_bytes_per_second`
//! and `gpu_nvlink_rx_bytes_per_second` (GPM), `gpu_pcie_link_gen`, `gpu_pcie_link_gen_max`,
//! `gpu_pcie_link_width`, `gpu_pcie_link_width_max`, `gpu_pcie_replay_errors` (counter), `gpu_power_watts`,
//! `gpu_sm_clock_hz`. Per link: `recovery_events` (field 215, Blackwell) in the slow batch, and every
//! [`ERROR_COUNTER_EVERY`] slow ticks the error counters `crc_flit_errors`, `crc_data_errors`,
//! `replay_errors`, `recovery_errors` (one driver call each per link, so they are read less often).
//!
//! Cost: NVML calls serialise in the driver, and a training process's own NVML/CUDA calls wait behind them. The
//! defaults keep the per-tick work to one batched call per GPU on the fast tier (36 fields on an H100), and on
//! the slow tier (1 Hz) six to eight short calls per GPU; the costly PCIe throughput sample (20 ms per
//! direction) is only taken on GPUs without GPM. Every call's wall time and NVML's own per-field latency are
//! exported by the agent (`commwatch_agent_nvml_call_duration_seconds`,
//! `commwatch_agent_nvml_field_latency_seconds`).
//!
//! Absence: where NVML cannot be loaded the source has an empty inventory, says so once at info level, and
//! never tries again (the library cannot appear without a driver install, which restarts the agent anyway).
//! A GPU that is lost (`GpuLost`) is logged once at warn level; its series stop producing and it is looked for
//! again at each discovery.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::gpu::{
    by_request, field, FieldRequest, FieldValue, GpuError, GpuInfo, NvlinkInfo, SharedGpu,
};
use super::{
    Endpoint, Inventory, Link, LinkClass, LinkKey, LinkRole, ReadReport, SeriesKind, SeriesSpec,
    Source, SourceError, Tier, Value,
};
use crate::telemetry::AgentMetrics;

/// The per-link error counters are read on every this many slow ticks (10 s at the default 1 Hz).
pub const ERROR_COUNTER_EVERY: u64 = 10;

/// Where a GPU's NVLink byte counters come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThroughputSource {
    /// Fields 138/139, cumulative KiB.
    ThroughputKib,
    /// Fields 202/204, cumulative bytes (NVLink 5).
    Nvlink5Bytes,
    /// The pre-Hopper utilisation counters, counting bytes.
    LegacyCounters,
    /// No byte counters on this GPU.
    None,
}

impl ThroughputSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ThroughputSource::ThroughputKib => "throughput_fields",
            ThroughputSource::Nvlink5Bytes => "nvlink5_byte_fields",
            ThroughputSource::LegacyCounters => "utilization_counters",
            ThroughputSource::None => "none",
        }
    }
}

#[derive(Debug, Clone)]
struct LinkSeries {
    link: u32,
    active: bool,
    tx: Option<usize>,
    rx: Option<usize>,
    crc_flit: usize,
    crc_data: usize,
    replay: usize,
    recovery: usize,
    recovery_events: usize,
}

#[derive(Debug, Clone)]
struct GpuSeries {
    index: u32,
    info: GpuInfo,
    throughput: ThroughputSource,
    links: Vec<LinkSeries>,
    /// Node-level series of this GPU by metric name.
    node: BTreeMap<&'static str, usize>,
    lost: bool,
    /// Whether this GPU's GPM rates replace the PCIe throughput call.
    gpm_ok: bool,
    /// Fields answered NotSupported once are not asked for again until the next discovery.
    recovery_events_supported: bool,
}

/// Node-level series of every GPU.
const GPU_SERIES: &[(&str, SeriesKind)] = &[
    ("gpu_utilization_ratio", SeriesKind::Gauge),
    ("gpu_memory_utilization_ratio", SeriesKind::Gauge),
    ("gpu_sm_activity_ratio", SeriesKind::Gauge),
    ("gpu_memory_used_bytes", SeriesKind::Gauge),
    ("gpu_pcie_tx_bytes_per_second", SeriesKind::Gauge),
    ("gpu_pcie_rx_bytes_per_second", SeriesKind::Gauge),
    ("gpu_nvlink_tx_bytes_per_second", SeriesKind::Gauge),
    ("gpu_nvlink_rx_bytes_per_second", SeriesKind::Gauge),
    ("gpu_pcie_link_gen", SeriesKind::Gauge),
    ("gpu_pcie_link_gen_max", SeriesKind::Gauge),
    ("gpu_pcie_link_width", SeriesKind::Gauge),
    ("gpu_pcie_link_width_max", SeriesKind::Gauge),
    ("gpu_pcie_replay_errors", SeriesKind::COUNTER64),
    ("gpu_power_watts", SeriesKind::Gauge),
    ("gpu_sm_clock_hz", SeriesKind::Gauge),
];

/// Reads NVLink counters and GPU state through a [`GpuBackend`](super::gpu::GpuBackend).
pub struct NvmlSource {
    backend: Option<SharedGpu>,
    inventory: Inventory,
    identities: HashMap<String, usize>,
    gpus: Vec<GpuSeries>,
    metrics: Option<Arc<AgentMetrics>>,
    slow_ticks: u64,
    absent_logged: bool,
}

fn link_key(gpu: u32, link: u32) -> LinkKey {
    LinkKey::new(LinkClass::Nvlink, format!("gpu{gpu}"), link.to_string())
}

fn gpu_err(what: &str, gpu: u32, e: &GpuError) -> SourceError {
    SourceError::Other(format!("gpu{gpu}: {what}: {e}"))
}

impl NvmlSource {
    /// A source over `backend`; `Err` is NVML's absence (logged once at info level by the first discovery).
    pub fn new(backend: Result<SharedGpu, GpuError>) -> NvmlSource {
        let (backend, absent) = match backend {
            Ok(b) => (Some(b), None),
            Err(e) => (None, Some(e)),
        };
        if let Some(e) = absent {
            tracing::info!(error = %e, "nvml source: NVML not available; no GPU metrics on this node");
        }
        NvmlSource {
            backend,
            inventory: Inventory::default(),
            identities: HashMap::new(),
            gpus: Vec::new(),
            metrics: None,
            slow_ticks: 0,
            absent_logged: true,
        }
    }

    /// Where the byte counters of GPU `gpu` come from (after discovery).
    pub fn throughput_source(&self, gpu: u32) -> Option<ThroughputSource> {
        self.gpus
            .iter()
            .find(|g| g.index == gpu)
            .map(|g| g.throughput)
    }

    fn series(
        &mut self,
        metric: &str,
        kind: SeriesKind,
        tier: Tier,
        link: Option<LinkKey>,
        labels: BTreeMap<String, String>,
    ) -> (usize, bool) {
        let spec = SeriesSpec {
            metric: metric.to_string(),
            kind,
            tier,
            link,
            labels,
        };
        let id = spec.identity();
        if let Some(i) = self.identities.get(&id) {
            return (*i, false);
        }
        self.inventory.series.push(spec);
        let i = self.inventory.series.len() - 1;
        self.identities.insert(id, i);
        (i, true)
    }

    fn observe_call(&self, call: &str, started: Instant) {
        if let Some(m) = &self.metrics {
            m.nvml_call_seconds
                .with_label_values(&[call])
                .observe(started.elapsed().as_secs_f64());
        }
    }

    fn observe_fields(&self, values: &[FieldValue]) {
        if let Some(m) = &self.metrics {
            for v in values {
                if v.latency_us > 0 {
                    m.nvml_field_latency_seconds
                        .observe(v.latency_us as f64 / 1e6);
                }
            }
        }
    }
}

/// Picks the byte-counter source of a GPU: the first of 138/139, 202/204, legacy counters that answers for at
/// least one active link.
pub fn choose_throughput(
    backend: &mut dyn super::gpu::GpuBackend,
    gpu: u32,
    links: &[NvlinkInfo],
) -> ThroughputSource {
    let active: Vec<u32> = links.iter().filter(|l| l.active).map(|l| l.link).collect();
    let probe = if active.is_empty() {
        links.iter().map(|l| l.link).collect::<Vec<_>>()
    } else {
        active
    };
    if probe.is_empty() {
        return ThroughputSource::None;
    }
    for (tx, rx, source) in [
        (
            field::NVLINK_THROUGHPUT_DATA_TX,
            field::NVLINK_THROUGHPUT_DATA_RX,
            ThroughputSource::ThroughputKib,
        ),
        (
            field::NVLINK_COUNT_XMIT_BYTES,
            field::NVLINK_COUNT_RCV_BYTES,
            ThroughputSource::Nvlink5Bytes,
        ),
    ] {
        let req: Vec<FieldRequest> = probe
            .iter()
            .flat_map(|&l| {
                [
                    FieldRequest {
                        field_id: tx,
                        scope_id: l,
                    },
                    FieldRequest {
                        field_id: rx,
                        scope_id: l,
                    },
                ]
            })
            .collect();
        if let Ok(values) = backend.field_values(gpu, &req) {
            if values.iter().any(|v| v.value.is_ok()) {
                return source;
            }
        }
    }
    if probe
        .iter()
        .any(|&l| backend.nvlink_legacy_bytes(gpu, l).is_ok())
    {
        return ThroughputSource::LegacyCounters;
    }
    ThroughputSource::None
}

/// Cumulative KiB (fields 138/139) to bytes; saturates at `u64::MAX` (the collector never takes a delta across
/// a saturated value).
pub fn kib_to_bytes(kib: u64) -> u64 {
    kib.saturating_mul(1024)
}

impl Source for NvmlSource {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn bind_metrics(&mut self, metrics: &Arc<AgentMetrics>) {
        self.metrics = Some(metrics.clone());
    }

    fn discover(&mut self) -> Result<bool, SourceError> {
        let Some(backend) = self.backend.clone() else {
            return Ok(false);
        };
        let mut b = match backend.lock() {
            Ok(b) => b,
            Err(p) => p.into_inner(),
        };
        let started = Instant::now();
        let count = match b.device_count() {
            Ok(n) => n,
            Err(GpuError::Unavailable(e)) => {
                if !self.absent_logged {
                    tracing::info!(error = %e, "nvml source: NVML not available");
                    self.absent_logged = true;
                }
                return Ok(false);
            }
            Err(e) => return Err(SourceError::Other(format!("nvml: device count: {e}"))),
        };
        self.observe_call("device_count", started);
        let mut changed = false;
        let mut links_now: Vec<Link> = Vec::new();
        let mut seen: Vec<u32> = Vec::new();
        for gpu in 0..count {
            let started = Instant::now();
            let info = match b.device_info(gpu) {
                Ok(i) => i,
                Err(e) => {
                    if let Some(g) = self.gpus.iter_mut().find(|g| g.index == gpu) {
                        if !g.lost {
                            tracing::warn!(gpu, error = %e, "GPU not readable; its series stop until it answers again");
                        }
                        g.lost = true;
                    } else {
                        tracing::debug!(gpu, error = %e, "GPU not readable at discovery");
                    }
                    continue;
                }
            };
            self.observe_call("device_info", started);
            seen.push(gpu);
            let mut nvlinks = Vec::new();
            for l in 0..info.nvlink_count {
                let started = Instant::now();
                match b.nvlink_info(gpu, l) {
                    Ok(li) => nvlinks.push(li),
                    Err(e) => tracing::debug!(gpu, link = l, error = %e, "NVLink not readable"),
                }
                self.observe_call("nvlink_info", started);
            }
            let throughput = choose_throughput(&mut **b, gpu, &nvlinks);
            let gpu_label = BTreeMap::from([("gpu".to_string(), gpu.to_string())]);
            let mut node = BTreeMap::new();
            for (metric, kind) in GPU_SERIES {
                let (i, new) = self.series(metric, *kind, Tier::Slow, None, gpu_label.clone());
                changed |= new;
                node.insert(*metric, i);
            }
            let mut link_series = Vec::new();
            for li in &nvlinks {
                let key = link_key(gpu, li.link);
                let mut attributes = BTreeMap::new();
                if let Some(v) = li.version {
                    attributes.insert("version".to_string(), v.to_string());
                }
                if let Some(r) = &li.remote_pci_bus_id {
                    attributes.insert("remote_pci_bus_id".to_string(), r.clone());
                }
                if let Some(t) = li.remote_type {
                    attributes.insert("peer_type".to_string(), t.as_str().to_string());
                }
                attributes.insert("gpu_uuid".to_string(), info.uuid.clone());
                attributes.insert("gpu_name".to_string(), info.name.clone());
                attributes.insert(
                    "throughput_source".to_string(),
                    throughput.as_str().to_string(),
                );
                links_now.push(Link {
                    key: key.clone(),
                    endpoint: Endpoint::GpuLink,
                    role: LinkRole::Fabric,
                    capacity_bytes_per_second: li.speed_mbps.map(|s| s as f64 * 1e6),
                    state: if li.active { "up" } else { "down" }.to_string(),
                    attributes,
                    gpu: Some(gpu.to_string()),
                    link: Some(li.link.to_string()),
                });
                let (tx, rx) = if throughput == ThroughputSource::None {
                    (None, None)
                } else {
                    let (tx, n1) = self.series(
                        "tx_bytes",
                        SeriesKind::COUNTER64,
                        Tier::Fast,
                        Some(key.clone()),
                        BTreeMap::new(),
                    );
                    let (rx, n2) = self.series(
                        "rx_bytes",
                        SeriesKind::COUNTER64,
                        Tier::Fast,
                        Some(key.clone()),
                        BTreeMap::new(),
                    );
                    changed |= n1 || n2;
                    (Some(tx), Some(rx))
                };
                let mut counter = |m: &str| {
                    let (i, new) = self.series(
                        m,
                        SeriesKind::COUNTER64,
                        Tier::Slow,
                        Some(key.clone()),
                        BTreeMap::new(),
                    );
                    changed |= new;
                    i
                };
                link_series.push(LinkSeries {
                    link: li.link,
                    active: li.active,
                    tx,
                    rx,
                    crc_flit: counter("crc_flit_errors"),
                    crc_data: counter("crc_data_errors"),
                    replay: counter("replay_errors"),
                    recovery: counter("recovery_errors"),
                    recovery_events: counter("recovery_events"),
                });
            }
            let state = GpuSeries {
                index: gpu,
                gpm_ok: info.gpm_supported,
                info,
                throughput,
                links: link_series,
                node,
                lost: false,
                recovery_events_supported: true,
            };
            match self.gpus.iter_mut().find(|g| g.index == gpu) {
                Some(g) => {
                    if g.lost {
                        tracing::info!(gpu, "GPU answers again");
                    }
                    *g = state;
                }
                None => self.gpus.push(state),
            }
        }
        // GPUs that no longer enumerate keep their series, which stop producing.
        for g in &mut self.gpus {
            if !seen.contains(&g.index) && !g.lost {
                tracing::warn!(gpu = g.index, "GPU no longer enumerated by NVML");
                g.lost = true;
            }
        }
        // Links only ever gain entries; facts of known links are replaced.
        for l in links_now {
            match self.inventory.links.iter_mut().find(|x| x.key == l.key) {
                Some(x) => {
                    if *x != l {
                        *x = l;
                        changed = true;
                    }
                }
                None => {
                    self.inventory.links.push(l);
                    changed = true;
                }
            }
        }
        Ok(changed)
    }

    fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    fn sample(&mut self, tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
        let mut report = ReadReport::default();
        let Some(backend) = self.backend.clone() else {
            return report;
        };
        let mut b = match backend.lock() {
            Ok(b) => b,
            Err(p) => p.into_inner(),
        };
        if tier == Tier::Slow {
            self.slow_ticks += 1;
        }
        let read_errors =
            tier == Tier::Slow && (self.slow_ticks - 1).is_multiple_of(ERROR_COUNTER_EVERY);
        let mut gpus = std::mem::take(&mut self.gpus);
        for g in gpus.iter_mut().filter(|g| !g.lost) {
            let lost = match tier {
                Tier::Fast => self.sample_fast(&mut **b, g, sink, &mut report),
                Tier::Slow => self.sample_slow(&mut **b, g, read_errors, sink, &mut report),
            };
            if lost {
                tracing::warn!(gpu = g.index, uuid = %g.info.uuid, "GPU lost; its series stop until it answers at a discovery");
                g.lost = true;
            }
        }
        self.gpus = gpus;
        report
    }
}

impl NvmlSource {
    /// Returns whether the GPU was lost.
    fn sample_fast(
        &self,
        b: &mut dyn super::gpu::GpuBackend,
        g: &GpuSeries,
        sink: &mut dyn FnMut(usize, Value),
        report: &mut ReadReport,
    ) -> bool {
        let (tx_field, rx_field, scale): (u32, u32, fn(u64) -> u64) = match g.throughput {
            ThroughputSource::ThroughputKib => (
                field::NVLINK_THROUGHPUT_DATA_TX,
                field::NVLINK_THROUGHPUT_DATA_RX,
                kib_to_bytes,
            ),
            ThroughputSource::Nvlink5Bytes => (
                field::NVLINK_COUNT_XMIT_BYTES,
                field::NVLINK_COUNT_RCV_BYTES,
                |v| v,
            ),
            ThroughputSource::LegacyCounters => {
                for l in g.links.iter().filter(|l| l.active) {
                    let (Some(tx), Some(rx)) = (l.tx, l.rx) else {
                        continue;
                    };
                    let started = Instant::now();
                    let r = b.nvlink_legacy_bytes(g.index, l.link);
                    self.observe_call("nvlink_utilization_counter", started);
                    match r {
                        Ok((t, r)) => {
                            sink(tx, Value::Counter(t));
                            sink(rx, Value::Counter(r));
                            report.read += 2;
                        }
                        Err(GpuError::GpuLost) => {
                            report.fail(gpu_err("nvlink counters", g.index, &GpuError::GpuLost));
                            return true;
                        }
                        Err(e) => {
                            report.fail(gpu_err("nvlink counters", g.index, &e));
                            report.failed += 1;
                        }
                    }
                }
                return false;
            }
            ThroughputSource::None => return false,
        };
        let req: Vec<FieldRequest> = g
            .links
            .iter()
            .filter(|l| l.active && l.tx.is_some())
            .flat_map(|l| {
                [
                    FieldRequest {
                        field_id: tx_field,
                        scope_id: l.link,
                    },
                    FieldRequest {
                        field_id: rx_field,
                        scope_id: l.link,
                    },
                ]
            })
            .collect();
        if req.is_empty() {
            return false;
        }
        let started = Instant::now();
        let answer = b.field_values(g.index, &req);
        self.observe_call("field_values", started);
        let values = match answer {
            Ok(v) => v,
            Err(e) => {
                let lost = e == GpuError::GpuLost;
                report.fail(gpu_err("field values", g.index, &e));
                report.failed += req.len() - 1;
                return lost;
            }
        };
        self.observe_fields(&values);
        let values = by_request(values);
        for l in g.links.iter().filter(|l| l.active) {
            for (f, idx) in [(tx_field, l.tx), (rx_field, l.rx)] {
                let Some(idx) = idx else { continue };
                match values.get(&(f, l.link)).map(|v| &v.value) {
                    Some(Ok(v)) => {
                        sink(idx, Value::Counter(scale(*v)));
                        report.read += 1;
                    }
                    Some(Err(e)) => report.fail(SourceError::Other(format!(
                        "gpu{} link {}: field {f}: {e}",
                        g.index, l.link
                    ))),
                    None => report.fail(SourceError::Other(format!(
                        "gpu{} link {}: field {f}: no answer",
                        g.index, l.link
                    ))),
                }
            }
        }
        false
    }

    /// Returns whether the GPU was lost.
    fn sample_slow(
        &self,
        b: &mut dyn super::gpu::GpuBackend,
        g: &mut GpuSeries,
        read_errors: bool,
        sink: &mut dyn FnMut(usize, Value),
        report: &mut ReadReport,
    ) -> bool {
        let gpu = g.index;
        let lost = std::cell::Cell::new(false);
        let node = g.node.clone();
        let mut push = |report: &mut ReadReport, name: &str, v: Result<f64, GpuError>| {
            let Some(&idx) = node.get(name) else {
                return;
            };
            match v {
                Ok(v) if v.is_finite() => {
                    let value = if name == "gpu_pcie_replay_errors" {
                        Value::Counter(v as u64)
                    } else {
                        Value::Gauge(v)
                    };
                    sink(idx, value);
                    report.read += 1;
                }
                Ok(_) => report.fail(gpu_err(name, gpu, &GpuError::Other("not finite".into()))),
                // Unsupported values are absent, not failures: many GPUs lack some of them.
                Err(GpuError::NotSupported) => {}
                Err(e) => {
                    if e == GpuError::GpuLost {
                        lost.set(true);
                    }
                    report.fail(gpu_err(name, gpu, &e));
                }
            }
        };

        let t = Instant::now();
        let u = b.utilization(gpu);
        self.observe_call("utilization", t);
        match u {
            Ok(u) => {
                push(
                    report,
                    "gpu_utilization_ratio",
                    Ok(f64::from(u.gpu_percent.min(100)) / 100.0),
                );
                push(
                    report,
                    "gpu_memory_utilization_ratio",
                    Ok(f64::from(u.memory_percent.min(100)) / 100.0),
                );
            }
            Err(e) => push(report, "gpu_utilization_ratio", Err(e)),
        }
        if lost.get() {
            return true;
        }
        let t = Instant::now();
        let m = b.memory_used_bytes(gpu);
        self.observe_call("memory_info", t);
        push(report, "gpu_memory_used_bytes", m.map(|v| v as f64));

        let mut gpm_pcie = false;
        if g.gpm_ok {
            let t = Instant::now();
            let r = b.gpm(gpu);
            self.observe_call("gpm", t);
            match r {
                Ok(m) => {
                    push(
                        report,
                        "gpu_sm_activity_ratio",
                        Ok((m.sm_activity_percent / 100.0).clamp(0.0, 1.0)),
                    );
                    for (name, v) in [
                        (
                            "gpu_nvlink_tx_bytes_per_second",
                            m.nvlink_tx_bytes_per_second,
                        ),
                        (
                            "gpu_nvlink_rx_bytes_per_second",
                            m.nvlink_rx_bytes_per_second,
                        ),
                        ("gpu_pcie_tx_bytes_per_second", m.pcie_tx_bytes_per_second),
                        ("gpu_pcie_rx_bytes_per_second", m.pcie_rx_bytes_per_second),
                    ] {
                        if let Some(v) = v {
                            push(report, name, Ok(v));
                        }
                    }
                    gpm_pcie = m.pcie_tx_bytes_per_second.is_some();
                }
                // The first call only takes the first sample.
                Err(GpuError::NotFound) => gpm_pcie = true,
                Err(GpuError::NotSupported) => g.gpm_ok = false,
                Err(e) => push(report, "gpu_sm_activity_ratio", Err(e)),
            }
        }
        let t = Instant::now();
        let p = b.pcie(gpu, !gpm_pcie);
        self.observe_call("pcie", t);
        match p {
            Ok(p) => {
                if !gpm_pcie {
                    push(
                        report,
                        "gpu_pcie_tx_bytes_per_second",
                        p.tx_kb_per_second.map(|v| v as f64 * 1000.0),
                    );
                    push(
                        report,
                        "gpu_pcie_rx_bytes_per_second",
                        p.rx_kb_per_second.map(|v| v as f64 * 1000.0),
                    );
                }
                push(report, "gpu_pcie_link_gen", p.link_gen.map(f64::from));
                push(
                    report,
                    "gpu_pcie_link_gen_max",
                    p.link_gen_max.map(f64::from),
                );
                push(report, "gpu_pcie_link_width", p.link_width.map(f64::from));
                push(
                    report,
                    "gpu_pcie_link_width_max",
                    p.link_width_max.map(f64::from),
                );
                push(
                    report,
                    "gpu_pcie_replay_errors",
                    p.replay_counter.map(|v| v as f64),
                );
            }
            Err(e) => push(report, "gpu_pcie_link_gen", Err(e)),
        }
        let t = Instant::now();
        let w = b.power_mw(gpu);
        self.observe_call("power_usage", t);
        push(report, "gpu_power_watts", w.map(|mw| mw as f64 / 1000.0));
        let t = Instant::now();
        let c = b.sm_clock_mhz(gpu);
        self.observe_call("clock_info", t);
        push(report, "gpu_sm_clock_hz", c.map(|mhz| f64::from(mhz) * 1e6));
        if lost.get() {
            return true;
        }

        // Link recovery events (NVLink 5) in one batched call.
        if g.recovery_events_supported && !g.links.is_empty() {
            let req: Vec<FieldRequest> = g
                .links
                .iter()
                .map(|l| FieldRequest {
                    field_id: field::NVLINK_COUNT_LINK_RECOVERY_EVENTS,
                    scope_id: l.link,
                })
                .collect();
            let t = Instant::now();
            let r = b.field_values(gpu, &req);
            self.observe_call("field_values", t);
            match r {
                Ok(values) => {
                    self.observe_fields(&values);
                    if values
                        .iter()
                        .all(|v| v.value == Err(GpuError::NotSupported))
                    {
                        g.recovery_events_supported = false;
                    }
                    let values = by_request(values);
                    for l in &g.links {
                        if let Some(Ok(v)) = values
                            .get(&(field::NVLINK_COUNT_LINK_RECOVERY_EVENTS, l.link))
                            .map(|v| &v.value)
                        {
                            sink(l.recovery_events, Value::Counter(*v));
                            report.read += 1;
                        }
                    }
                }
                Err(GpuError::NotSupported) => g.recovery_events_supported = false,
                Err(e) => {
                    let lost = e == GpuError::GpuLost;
                    report.fail(gpu_err("recovery events", gpu, &e));
                    if lost {
                        return true;
                    }
                }
            }
        }
        if read_errors {
            for l in g.links.iter().filter(|l| l.active) {
                let t = Instant::now();
                let r = b.nvlink_errors(gpu, l.link);
                self.observe_call("nvlink_error_counter", t);
                match r {
                    Ok(e) => {
                        for (idx, v) in [
                            (l.crc_flit, e.crc_flit),
                            (l.crc_data, e.crc_data),
                            (l.replay, e.replay),
                            (l.recovery, e.recovery),
                        ] {
                            match v {
                                Ok(v) => {
                                    sink(idx, Value::Counter(v));
                                    report.read += 1;
                                }
                                Err(GpuError::NotSupported) => {}
                                Err(e) => report.fail(gpu_err("nvlink error counter", gpu, &e)),
                            }
                        }
                    }
                    Err(GpuError::GpuLost) => {
                        report.fail(gpu_err("nvlink error counters", gpu, &GpuError::GpuLost));
                        return true;
                    }
                    Err(GpuError::NotSupported) => {}
                    Err(e) => report.fail(gpu_err("nvlink error counters", gpu, &e)),
                }
            }
        }
        false
    }
}
