//! A [`GpuBackend`] that replays recorded NVML answers from JSON, for tests of the GPU sources without a GPU.
//!
//! The recording lists GPUs with their facts and links, and a sequence of *reads*: each fast-tier field batch
//! (and each slow-tier call) answers from the current read; [`RecordedBackend::advance`] moves to the next one
//! (the last read repeats). Fields are keyed `"<field_id>/<scope_id>"`; a value is a number or an error name
//! (`"NotSupported"`, `"GpuLost"`, ...). A GPU with `lost_from_read: k` answers `GpuLost` to every call from
//! read `k` on. A recording with `"unavailable": "<why>"` stands for a node where NVML cannot be loaded.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::gpu::{
    FieldRequest, FieldValue, GpmMetrics, GpuBackend, GpuError, GpuInfo, GpuProcess, NvlinkErrors,
    NvlinkInfo, PcieStatus, Utilization,
};

/// A recorded value: a number or an NVML error.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(untagged)]
pub enum Recorded {
    Value(u64),
    Error(GpuError),
}

impl Recorded {
    fn get(&self) -> Result<u64, GpuError> {
        match self {
            Recorded::Value(v) => Ok(*v),
            Recorded::Error(e) => Err(e.clone()),
        }
    }
}

/// The slow-tier answers of one GPU in one read.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct RecordedSlow {
    pub utilization: Option<Utilization>,
    pub memory_used_bytes: Option<u64>,
    pub power_mw: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    pub pcie: Option<RecordedPcie>,
    pub gpm: Option<GpmMetrics>,
    #[serde(default)]
    pub nvlink_errors: BTreeMap<u32, [u64; 4]>,
}

/// PCIe answers of one read.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct RecordedPcie {
    pub tx_kb_per_second: Recorded,
    pub rx_kb_per_second: Recorded,
    pub link_gen: u32,
    pub link_gen_max: u32,
    pub link_width: u32,
    pub link_width_max: u32,
    pub replay_counter: u64,
}

/// One read of one GPU.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct RecordedRead {
    /// `"<field>/<scope>"` → value or error.
    #[serde(default)]
    pub fields: BTreeMap<String, Recorded>,
    /// Legacy utilisation counters per link: `[tx, rx]` bytes.
    #[serde(default)]
    pub legacy: BTreeMap<u32, [u64; 2]>,
    pub slow: Option<RecordedSlow>,
}

/// One recorded GPU.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct RecordedGpu {
    pub info: GpuInfo,
    pub links: Vec<NvlinkInfo>,
    pub reads: Vec<RecordedRead>,
    #[serde(default)]
    pub lost_from_read: Option<usize>,
    /// NVML's `latencyUsec` reported for every field.
    #[serde(default)]
    pub field_latency_us: u64,
}

/// A whole recording.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Recording {
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub unavailable: Option<String>,
    #[serde(default)]
    pub gpus: Vec<RecordedGpu>,
    #[serde(default)]
    pub processes: Vec<GpuProcess>,
}

/// Replays a [`Recording`]. See the module documentation.
#[derive(Debug, Clone)]
pub struct RecordedBackend {
    rec: Recording,
    read: Arc<AtomicUsize>,
    /// Every field request seen, for tests that check what was asked (`(gpu, request)`).
    pub requests: Vec<(u32, FieldRequest)>,
}

/// Errors of loading a recording.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

impl RecordedBackend {
    pub fn new(rec: Recording) -> RecordedBackend {
        RecordedBackend {
            rec,
            read: Arc::new(AtomicUsize::new(0)),
            requests: Vec::new(),
        }
    }

    pub fn from_json(text: &str) -> Result<RecordedBackend, RecordingError> {
        Ok(Self::new(serde_json::from_str(text)?))
    }

    /// Moves to the next recorded read (the last one repeats).
    pub fn advance(&self) {
        self.read.fetch_add(1, Ordering::Relaxed);
    }

    /// A handle that moves the replay on from outside, once the backend is boxed and shared: add 1 for the
    /// next read.
    pub fn cursor(&self) -> Arc<AtomicUsize> {
        self.read.clone()
    }

    fn read(&self) -> usize {
        self.read.load(Ordering::Relaxed)
    }

    fn gpu(&self, gpu: u32) -> Result<&RecordedGpu, GpuError> {
        if let Some(e) = &self.rec.unavailable {
            return Err(GpuError::Unavailable(e.clone()));
        }
        let g = self
            .rec
            .gpus
            .iter()
            .find(|g| g.info.index == gpu)
            .ok_or(GpuError::NotFound)?;
        if g.lost_from_read.is_some_and(|k| self.read() >= k) {
            return Err(GpuError::GpuLost);
        }
        Ok(g)
    }

    fn current(&self, gpu: u32) -> Result<&RecordedRead, GpuError> {
        let g = self.gpu(gpu)?;
        g.reads
            .get(self.read().min(g.reads.len().saturating_sub(1)))
            .ok_or(GpuError::NotSupported)
    }

    fn slow(&self, gpu: u32) -> Result<&RecordedSlow, GpuError> {
        self.current(gpu)?
            .slow
            .as_ref()
            .ok_or(GpuError::NotSupported)
    }
}

impl GpuBackend for RecordedBackend {
    fn kind(&self) -> &'static str {
        "recorded"
    }

    fn device_count(&mut self) -> Result<u32, GpuError> {
        if let Some(e) = &self.rec.unavailable {
            return Err(GpuError::Unavailable(e.clone()));
        }
        Ok(self.rec.gpus.len() as u32)
    }

    fn device_info(&mut self, gpu: u32) -> Result<GpuInfo, GpuError> {
        Ok(self.gpu(gpu)?.info.clone())
    }

    fn nvlink_info(&mut self, gpu: u32, link: u32) -> Result<NvlinkInfo, GpuError> {
        self.gpu(gpu)?
            .links
            .iter()
            .find(|l| l.link == link)
            .cloned()
            .ok_or(GpuError::InvalidArgument)
    }

    fn field_values(
        &mut self,
        gpu: u32,
        requests: &[FieldRequest],
    ) -> Result<Vec<FieldValue>, GpuError> {
        self.requests.extend(requests.iter().map(|r| (gpu, *r)));
        let latency = self.gpu(gpu)?.field_latency_us;
        let read = self.current(gpu)?;
        Ok(requests
            .iter()
            .map(|r| FieldValue {
                field_id: r.field_id,
                scope_id: r.scope_id,
                value: read
                    .fields
                    .get(&format!("{}/{}", r.field_id, r.scope_id))
                    .map(Recorded::get)
                    .unwrap_or(Err(GpuError::NotSupported)),
                latency_us: latency,
            })
            .collect())
    }

    fn nvlink_legacy_bytes(&mut self, gpu: u32, link: u32) -> Result<(u64, u64), GpuError> {
        let read = self.current(gpu)?;
        read.legacy
            .get(&link)
            .map(|[tx, rx]| (*tx, *rx))
            .ok_or(GpuError::NotSupported)
    }

    fn nvlink_errors(&mut self, gpu: u32, link: u32) -> Result<NvlinkErrors, GpuError> {
        let s = self.slow(gpu)?;
        let [crc_flit, crc_data, replay, recovery] =
            *s.nvlink_errors.get(&link).ok_or(GpuError::NotSupported)?;
        Ok(NvlinkErrors {
            crc_flit: Ok(crc_flit),
            crc_data: Ok(crc_data),
            replay: Ok(replay),
            recovery: Ok(recovery),
        })
    }

    fn utilization(&mut self, gpu: u32) -> Result<Utilization, GpuError> {
        self.slow(gpu)?.utilization.ok_or(GpuError::NotSupported)
    }

    fn memory_used_bytes(&mut self, gpu: u32) -> Result<u64, GpuError> {
        self.slow(gpu)?
            .memory_used_bytes
            .ok_or(GpuError::NotSupported)
    }

    fn pcie(&mut self, gpu: u32, throughput: bool) -> Result<PcieStatus, GpuError> {
        let p = self.slow(gpu)?.pcie.clone().ok_or(GpuError::NotSupported)?;
        let rate = |r: &Recorded| {
            if throughput {
                r.get()
            } else {
                Err(GpuError::NotSupported)
            }
        };
        Ok(PcieStatus {
            tx_kb_per_second: rate(&p.tx_kb_per_second),
            rx_kb_per_second: rate(&p.rx_kb_per_second),
            link_gen: Ok(p.link_gen),
            link_gen_max: Ok(p.link_gen_max),
            link_width: Ok(p.link_width),
            link_width_max: Ok(p.link_width_max),
            replay_counter: Ok(p.replay_counter),
        })
    }

    fn power_mw(&mut self, gpu: u32) -> Result<u64, GpuError> {
        self.slow(gpu)?.power_mw.ok_or(GpuError::NotSupported)
    }

    fn sm_clock_mhz(&mut self, gpu: u32) -> Result<u32, GpuError> {
        self.slow(gpu)?.sm_clock_mhz.ok_or(GpuError::NotSupported)
    }

    fn gpm(&mut self, gpu: u32) -> Result<GpmMetrics, GpuError> {
        if !self.gpu(gpu)?.info.gpm_supported {
            return Err(GpuError::NotSupported);
        }
        self.slow(gpu)?.gpm.ok_or(GpuError::NotFound)
    }

    fn compute_processes(&mut self) -> Result<Vec<GpuProcess>, GpuError> {
        if let Some(e) = &self.rec.unavailable {
            return Err(GpuError::Unavailable(e.clone()));
        }
        Ok(self.rec.processes.clone())
    }
}
