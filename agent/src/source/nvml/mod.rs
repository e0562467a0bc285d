//! The `nvml` source: NVLink per-link byte counters and GPU state, through a [`GpuBackend`] (real NVML, a
//! recording, or the simulated cluster).
//!
//! Links: one per NVLink, class `nvlink`, device `gpu<N>`, port = link number, `gpu`/`link` set, role fabric,
//! capacity = the link's speed per direction (NVML's MB/s × 10^6: H100 26.562e9 B/s, A100 25e9 B/s), state
//! `up`/`down`, attributes `version`, `remote_pci_bus_id`, `peer_type` (`gpu`/`nvswitch`), `gpu_uuid`,
//! `gpu_name`, `throughput_source` (which counters the byte series come from). With
//! [`NvlinkBytes::Gpu`] (the agent's default, [`NvmlSource::with_nvlink_bytes`]) each GPU also has one link
//! for all its NVLinks (no port, no link number; [`sums`]) whose byte counters are its links' sums.
//!
//! Fast tier (one batched `nvmlDeviceGetFieldValues` per GPU per tick): `tx_bytes`/`rx_bytes` per link (with
//! [`NvlinkBytes::Gpu`]: the GPU's sums, and the links' own in the slow tier, one more batched call per GPU),
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

mod discover;
mod sample;
pub mod sums;

pub use sums::NvlinkBytes;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::gpu::{
    field, FieldRequest, FieldValue, GpuBackend, GpuError, GpuInfo, NvlinkInfo, SharedGpu,
};
use super::{
    Inventory, LinkClass, LinkKey, ReadReport, SeriesKind, SeriesSpec, Source, SourceError, Tier,
    Value,
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
    /// The byte sums of its NVLinks, with [`NvlinkBytes::Gpu`] (and a source of byte counters).
    sums: Option<sums::GpuSums>,
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
    /// Why NVML cannot be read here (not loaded, no GPU), as [`Source::unavailable`] says it.
    unavailable: Option<String>,
    /// Whether NVLink bytes go per link at the fast rate, or per GPU ([`sums`]).
    bytes: NvlinkBytes,
}

fn link_key(gpu: u32, link: u32) -> LinkKey {
    LinkKey::new(LinkClass::Nvlink, format!("gpu{gpu}"), link.to_string())
}

/// The backend, even if a thread panicked while holding it (its state is the driver's, not ours).
fn lock(backend: &SharedGpu) -> std::sync::MutexGuard<'_, Box<dyn GpuBackend>> {
    match backend.lock() {
        Ok(b) => b,
        Err(p) => p.into_inner(),
    }
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
        let unavailable = absent.map(|e| {
            tracing::info!(error = %e, "nvml source: NVML not available; no GPU metrics on this node");
            format!("NVML not loaded ({e})")
        });
        NvmlSource {
            backend,
            inventory: Inventory::default(),
            identities: HashMap::new(),
            gpus: Vec::new(),
            metrics: None,
            slow_ticks: 0,
            absent_logged: true,
            unavailable,
            bytes: NvlinkBytes::Link,
        }
    }

    /// The source shipping NVLink bytes as `bytes` says: [`NvlinkBytes::Link`] (the source's own default: every
    /// link at the fast rate) or [`NvlinkBytes::Gpu`] (the agent's default: per GPU at the fast rate, per link
    /// at the slow rate; see [`sums`]). Takes effect at the next discovery.
    pub fn with_nvlink_bytes(mut self, bytes: NvlinkBytes) -> NvmlSource {
        self.bytes = bytes;
        self
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
    backend: &mut dyn GpuBackend,
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
        let mut b = lock(&backend);
        let changed = self.discover_gpus(&mut **b);
        if changed.is_ok() && self.unavailable.is_none() && self.gpus.is_empty() {
            self.unavailable = Some("NVML is loaded but reports no GPU".into());
        } else if !self.gpus.is_empty() {
            self.unavailable = None;
        }
        changed
    }

    fn unavailable(&self) -> Option<String> {
        self.unavailable.clone()
    }

    fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    fn sample(&mut self, tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
        let mut report = ReadReport::default();
        let Some(backend) = self.backend.clone() else {
            return report;
        };
        let mut b = lock(&backend);
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
