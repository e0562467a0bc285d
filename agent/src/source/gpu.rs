//! The GPU backend trait: the few NVML calls the `nvml` source and the `processes` source need, behind one
//! small interface, so that their logic (rates, fallbacks, error handling) is tested with recorded values
//! ([`RecordedBackend`](super::gpu_recorded::RecordedBackend)) and the simulated cluster can stand in for real
//! GPUs (`commwatch_sim::gpu`).
//!
//! Contract of every backend:
//! - GPUs are addressed by their NVML index (`0..device_count()`), links by their NVLink number.
//! - A call that the GPU does not support returns [`GpuError::NotSupported`]; a GPU that fell off the bus returns
//!   [`GpuError::GpuLost`] from every call about it; callers skip and count, they never stop the agent.
//! - [`GpuBackend::field_values`] is one batched driver call (`nvmlDeviceGetFieldValues`): each request carries
//!   its own `scope_id` (the NVLink number for per-link fields) and each answer its own result and latency.
//! - Units are those NVML gives, named in each field (`_kib`, `_mbps`, `_kb_per_second`, `_mw`, `_mhz`); the
//!   sources convert to base units.
//! - Backends never panic.

use std::collections::BTreeMap;

/// NVML field ids the sources use (NVML's `NVML_FI_DEV_*` constants).
pub mod field {
    /// Per-link (scopeId) NVLink count of the device (`NVML_FI_DEV_NVLINK_LINK_COUNT`).
    pub const NVLINK_LINK_COUNT: u32 = 91;
    /// Cumulative transmitted data, KiB, per link by scopeId (`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`).
    pub const NVLINK_THROUGHPUT_DATA_TX: u32 = 138;
    /// Cumulative received data, KiB, per link by scopeId (`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX`).
    pub const NVLINK_THROUGHPUT_DATA_RX: u32 = 139;
    /// Per-link speed in MB/s (`NVML_FI_DEV_NVLINK_GET_SPEED`).
    pub const NVLINK_GET_SPEED: u32 = 164;
    /// NVLink 5 (Blackwell) cumulative transmitted bytes per link (`NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES`).
    pub const NVLINK_COUNT_XMIT_BYTES: u32 = 202;
    /// NVLink 5 cumulative received bytes per link (`NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES`).
    pub const NVLINK_COUNT_RCV_BYTES: u32 = 204;
    /// NVLink 5 link recovery events per link (`NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS`).
    pub const NVLINK_COUNT_LINK_RECOVERY_EVENTS: u32 = 215;
}

/// Errors of GPU backends, typed after NVML's return codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum GpuError {
    /// NVML could not be loaded or initialised (no driver, no library): the GPU sources are absent.
    #[error("NVML is not available: {0}")]
    Unavailable(String),
    /// The GPU or driver does not support this query.
    #[error("not supported")]
    NotSupported,
    /// The GPU fell off the bus or is otherwise inaccessible.
    #[error("GPU is lost")]
    GpuLost,
    /// No such GPU, link or process.
    #[error("not found")]
    NotFound,
    /// An argument was out of range (for example a link number past the GPU's last link).
    #[error("invalid argument")]
    InvalidArgument,
    /// The agent lacks the permission for this query.
    #[error("no permission")]
    NoPermission,
    /// Any other failure, with NVML's description.
    #[error("{0}")]
    Other(String),
}

/// Facts about one GPU, read at discovery.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpuInfo {
    /// NVML index.
    pub index: u32,
    pub uuid: String,
    pub name: String,
    /// PCI bus id, `00000000:18:00.0`.
    pub pci_bus_id: String,
    /// NVLinks the GPU has (active or not); 0 for a GPU without NVLink.
    pub nvlink_count: u32,
    /// Whether the GPU supports GPM (Hopper and later): SM activity and NVLink/PCIe rates.
    pub gpm_supported: bool,
}

/// What is on the other end of an NVLink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerType {
    Gpu,
    Switch,
    Ibmnpu,
    Unknown,
}

impl PeerType {
    pub fn as_str(self) -> &'static str {
        match self {
            PeerType::Gpu => "gpu",
            PeerType::Switch => "nvswitch",
            PeerType::Ibmnpu => "ibmnpu",
            PeerType::Unknown => "unknown",
        }
    }
}

/// Facts about one NVLink of a GPU, read at discovery.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NvlinkInfo {
    pub link: u32,
    /// Whether the link is up.
    pub active: bool,
    /// NVLink version (4 on H100, 3 on A100); `None` when unknown.
    pub version: Option<u32>,
    /// Speed per direction in MB/s (NVML's unit; H100: 26562, A100: 25000); `None` when unknown.
    pub speed_mbps: Option<u64>,
    /// PCI bus id of the peer (a GPU or an NVSwitch); `None` when unknown.
    pub remote_pci_bus_id: Option<String>,
    pub remote_type: Option<PeerType>,
}

/// One request of a batched field read.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct FieldRequest {
    pub field_id: u32,
    /// The link for per-link fields; 0 otherwise.
    pub scope_id: u32,
}

/// One answer of a batched field read.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FieldValue {
    pub field_id: u32,
    pub scope_id: u32,
    /// The value as an unsigned integer (every field the sources read is one), or why there is none.
    pub value: Result<u64, GpuError>,
    /// The driver's time to read this field, microseconds (NVML's `latencyUsec`); 0 when not reported.
    pub latency_us: u64,
}

/// GPU and memory-controller utilisation, percent over NVML's last sample period (1/6 s to 1 s).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Utilization {
    pub gpu_percent: u32,
    pub memory_percent: u32,
}

/// PCIe state of a GPU. Each part may fail on its own.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PcieStatus {
    /// Throughput over NVML's 20 ms window, KB/s (1000 bytes).
    pub tx_kb_per_second: Result<u64, GpuError>,
    pub rx_kb_per_second: Result<u64, GpuError>,
    pub link_gen: Result<u32, GpuError>,
    pub link_gen_max: Result<u32, GpuError>,
    pub link_width: Result<u32, GpuError>,
    pub link_width_max: Result<u32, GpuError>,
    /// Cumulative PCIe replay counter.
    pub replay_counter: Result<u64, GpuError>,
}

/// GPM metrics between the previous call and this one (Hopper and later).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpmMetrics {
    /// SM activity, percent (NVML_GPM_METRIC_SM_UTIL).
    pub sm_activity_percent: f64,
    /// NVLink totals over all links, bytes/s (NVML_GPM_METRIC_NVLINK_TOTAL_TX/RX_PER_SEC).
    pub nvlink_tx_bytes_per_second: Option<f64>,
    pub nvlink_rx_bytes_per_second: Option<f64>,
    /// PCIe, bytes/s (NVML_GPM_METRIC_PCIE_TX/RX_PER_SEC).
    pub pcie_tx_bytes_per_second: Option<f64>,
    pub pcie_rx_bytes_per_second: Option<f64>,
}

/// The per-link NVLink error counters (`nvmlDeviceGetNvLinkErrorCounter`). Each may fail on its own.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NvlinkErrors {
    pub crc_flit: Result<u64, GpuError>,
    pub crc_data: Result<u64, GpuError>,
    pub replay: Result<u64, GpuError>,
    pub recovery: Result<u64, GpuError>,
}

/// A compute process on a GPU (NVML's running compute process list).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    /// NVML index of the GPU.
    pub gpu: u32,
    /// GPU memory it uses, bytes; `None` when NVML cannot tell.
    pub used_memory_bytes: Option<u64>,
}

/// The NVML calls the GPU sources make. See the module documentation for the contract.
pub trait GpuBackend: Send {
    /// `nvml` for real GPUs, `recorded`, `simulated`.
    fn kind(&self) -> &'static str;
    fn device_count(&mut self) -> Result<u32, GpuError>;
    fn device_info(&mut self, gpu: u32) -> Result<GpuInfo, GpuError>;
    fn nvlink_info(&mut self, gpu: u32, link: u32) -> Result<NvlinkInfo, GpuError>;
    /// One batched `nvmlDeviceGetFieldValues`; the answer has one entry per request, in order. The outer error
    /// is for the whole call (for example [`GpuError::GpuLost`]).
    fn field_values(
        &mut self,
        gpu: u32,
        requests: &[FieldRequest],
    ) -> Result<Vec<FieldValue>, GpuError>;
    /// The pre-Hopper NVLink utilisation counters (counter set 0) read as cumulative `(tx, rx)` bytes; fails
    /// with [`GpuError::NotSupported`] unless the counter is configured to count bytes (the agent never
    /// reconfigures it: that needs root and changes what other tools see).
    fn nvlink_legacy_bytes(&mut self, gpu: u32, link: u32) -> Result<(u64, u64), GpuError>;
    fn nvlink_errors(&mut self, gpu: u32, link: u32) -> Result<NvlinkErrors, GpuError>;
    fn utilization(&mut self, gpu: u32) -> Result<Utilization, GpuError>;
    fn memory_used_bytes(&mut self, gpu: u32) -> Result<u64, GpuError>;
    /// PCIe link state and replay counter; with `throughput`, also `nvmlDeviceGetPcieThroughput`, which samples
    /// for 20 ms inside the driver per direction (the source asks for it only where GPM cannot give PCIe rates).
    fn pcie(&mut self, gpu: u32, throughput: bool) -> Result<PcieStatus, GpuError>;
    /// Power draw, milliwatts.
    fn power_mw(&mut self, gpu: u32) -> Result<u64, GpuError>;
    /// Current SM clock, MHz.
    fn sm_clock_mhz(&mut self, gpu: u32) -> Result<u32, GpuError>;
    /// GPM metrics since the previous call for this GPU; the first call only takes the first sample and returns
    /// [`GpuError::NotFound`].
    fn gpm(&mut self, gpu: u32) -> Result<GpmMetrics, GpuError>;
    /// Compute processes on every GPU.
    fn compute_processes(&mut self) -> Result<Vec<GpuProcess>, GpuError>;
}

/// A backend shared by the `nvml` and `processes` sources (both run on the sampler's thread).
pub type SharedGpu = std::sync::Arc<std::sync::Mutex<Box<dyn GpuBackend>>>;

/// Wraps a backend for sharing.
pub fn shared(backend: Box<dyn GpuBackend>) -> SharedGpu {
    std::sync::Arc::new(std::sync::Mutex::new(backend))
}

/// Field answers keyed by `(field_id, scope_id)`.
pub fn by_request(values: Vec<FieldValue>) -> BTreeMap<(u32, u32), FieldValue> {
    values
        .into_iter()
        .map(|v| ((v.field_id, v.scope_id), v))
        .collect()
}
