//! The real [`GpuBackend`]: NVML through `nvml-wrapper`, loaded at run time (`libnvidia-ml.so.1`), so the agent
//! builds and runs on machines without a driver.
//!
//! Two calls go through the raw binding (`nvml-wrapper-sys`) instead of the safe wrapper:
//! - `nvmlDeviceGetFieldValues`, because the wrapper's `field_values_for` never sets `scopeId`, and the NVLink
//!   throughput fields (138/139) select their link by `scopeId`;
//! - `nvmlDeviceGetNvLinkRemoteDeviceType`, because the wrapper's `remote_device_type` writes the answer into a
//!   temporary and always reports `Unknown`.

use std::collections::HashMap;
use std::sync::OnceLock;

use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter};
use nvml_wrapper::enum_wrappers::nv_link::{ErrorCounter, UtilizationCountUnit};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::nv_link::Counter;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::GpmSample;
use nvml_wrapper::struct_wrappers::gpm::GpmMetricResult;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings as sys;

use super::gpu::{
    field, FieldRequest, FieldValue, GpmMetrics, GpuBackend, GpuError, GpuInfo, GpuProcess,
    NvlinkErrors, NvlinkInfo, PcieStatus, PeerType, Utilization,
};

/// NVML, initialised once per process (`nvmlInit` is reference counted and its symbol loading is costly); the
/// outcome of the first attempt is kept, so an absent library is looked for once.
static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();

fn nvml() -> Result<&'static Nvml, GpuError> {
    NVML.get_or_init(|| Nvml::init().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| GpuError::Unavailable(e.clone()))
}

impl From<NvmlError> for GpuError {
    fn from(e: NvmlError) -> Self {
        match e {
            NvmlError::NotSupported => GpuError::NotSupported,
            NvmlError::GpuLost => GpuError::GpuLost,
            NvmlError::NotFound => GpuError::NotFound,
            NvmlError::InvalidArg => GpuError::InvalidArgument,
            NvmlError::NoPermission => GpuError::NoPermission,
            // A symbol missing from an old driver's library: the call is not supported there.
            NvmlError::FailedToLoadSymbol(_) => GpuError::NotSupported,
            NvmlError::DriverNotLoaded | NvmlError::LibraryNotFound | NvmlError::Uninitialized => {
                GpuError::Unavailable(e.to_string())
            }
            other => GpuError::Other(other.to_string()),
        }
    }
}

fn from_return(code: sys::nvmlReturn_t) -> Result<(), GpuError> {
    match code {
        sys::nvmlReturn_enum_NVML_SUCCESS => Ok(()),
        sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED => Err(GpuError::NotSupported),
        sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST => Err(GpuError::GpuLost),
        sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND => Err(GpuError::NotFound),
        sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT => Err(GpuError::InvalidArgument),
        sys::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION => Err(GpuError::NoPermission),
        other => Err(GpuError::Other(format!("NVML return code {other}"))),
    }
}

/// Decodes one raw field answer into an unsigned integer.
// `c_ulong` is 64-bit here but 32-bit on other targets: the conversion is not useless everywhere.
#[allow(clippy::useless_conversion)]
fn field_value(raw: &sys::nvmlFieldValue_t) -> Result<u64, GpuError> {
    from_return(raw.nvmlReturn)?;
    // SAFETY: NVML sets `valueType` to the member of the union it wrote.
    unsafe {
        match raw.valueType {
            sys::nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE => {
                let d = raw.value.dVal;
                if d.is_finite() && d >= 0.0 {
                    Ok(d as u64)
                } else {
                    Err(GpuError::Other(format!("field value {d} out of range")))
                }
            }
            sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT => Ok(u64::from(raw.value.uiVal)),
            sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG => Ok(u64::from(raw.value.ulVal)),
            sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => Ok(raw.value.ullVal),
            sys::nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG => {
                u64::try_from(raw.value.sllVal)
                    .map_err(|_| GpuError::Other("negative field value".into()))
            }
            sys::nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT => u64::try_from(raw.value.siVal)
                .map_err(|_| GpuError::Other("negative field value".into())),
            sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_SHORT => {
                Ok(u64::from(raw.value.usVal))
            }
            t => Err(GpuError::Other(format!("unknown field value type {t}"))),
        }
    }
}

/// NVML through `nvml-wrapper`. Device handles are looked up once per index and kept.
pub struct NvmlBackend {
    nvml: &'static Nvml,
    devices: HashMap<u32, Device<'static>>,
    gpm_previous: HashMap<u32, GpmSample<'static>>,
}

impl NvmlBackend {
    /// Loads and initialises NVML (once per process). Fails with [`GpuError::Unavailable`] where there is no
    /// driver or library.
    pub fn init() -> Result<NvmlBackend, GpuError> {
        Ok(NvmlBackend {
            nvml: nvml()?,
            devices: HashMap::new(),
            gpm_previous: HashMap::new(),
        })
    }

    fn device(&mut self, gpu: u32) -> Result<&Device<'static>, GpuError> {
        if !self.devices.contains_key(&gpu) {
            let d = self.nvml.device_by_index(gpu)?;
            self.devices.insert(gpu, d);
        }
        self.devices.get(&gpu).ok_or(GpuError::NotFound)
    }
}

impl GpuBackend for NvmlBackend {
    fn kind(&self) -> &'static str {
        "nvml"
    }

    fn device_count(&mut self) -> Result<u32, GpuError> {
        Ok(self.nvml.device_count()?)
    }

    fn device_info(&mut self, gpu: u32) -> Result<GpuInfo, GpuError> {
        let d = self.device(gpu)?;
        let uuid = d.uuid()?;
        let name = d.name().unwrap_or_default();
        let pci_bus_id = d.pci_info().map(|p| p.bus_id).unwrap_or_default();
        let gpm_supported = d.gpm_support().unwrap_or(false);
        let _ = d;
        let nvlink_count = match self.field_values(
            gpu,
            &[FieldRequest {
                field_id: field::NVLINK_LINK_COUNT,
                scope_id: 0,
            }],
        ) {
            Ok(v) => v
                .first()
                .and_then(|f| f.value.clone().ok())
                .map(|n| n.min(u64::from(sys::NVML_NVLINK_MAX_LINKS)) as u32)
                .unwrap_or(0),
            Err(_) => 0,
        };
        Ok(GpuInfo {
            index: gpu,
            uuid,
            name,
            pci_bus_id,
            nvlink_count,
            gpm_supported,
        })
    }

    fn nvlink_info(&mut self, gpu: u32, link: u32) -> Result<NvlinkInfo, GpuError> {
        let nvml = self.nvml;
        let d = self.device(gpu)?;
        let l = d.link_wrapper_for(link);
        let active = l.is_active()?;
        let version = l.version().ok();
        let remote_pci_bus_id = l.remote_pci_info().ok().map(|p| p.bus_id);
        let mut raw_type: sys::nvmlIntNvLinkDeviceType_t = 0;
        // SAFETY: the handle is valid for the process (NVML is never shut down) and `raw_type` outlives the call.
        let remote_type = unsafe {
            let code =
                nvml.lib()
                    .nvmlDeviceGetNvLinkRemoteDeviceType(d.handle(), link, &mut raw_type);
            from_return(code).ok().map(|_| match raw_type {
                sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_GPU => PeerType::Gpu,
                sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_SWITCH => {
                    PeerType::Switch
                }
                sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_IBMNPU => {
                    PeerType::Ibmnpu
                }
                _ => PeerType::Unknown,
            })
        };
        let speed_mbps = self
            .field_values(
                gpu,
                &[FieldRequest {
                    field_id: field::NVLINK_GET_SPEED,
                    scope_id: link,
                }],
            )
            .ok()
            .and_then(|v| v.first().and_then(|f| f.value.clone().ok()));
        Ok(NvlinkInfo {
            link,
            active,
            version,
            speed_mbps,
            remote_pci_bus_id,
            remote_type,
        })
    }

    fn field_values(
        &mut self,
        gpu: u32,
        requests: &[FieldRequest],
    ) -> Result<Vec<FieldValue>, GpuError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let nvml = self.nvml;
        let d = self.device(gpu)?;
        let mut raw: Vec<sys::nvmlFieldValue_t> = requests
            .iter()
            .map(|r| {
                // SAFETY: an all-zero nvmlFieldValue_t is a valid value of the plain C struct.
                let mut v: sys::nvmlFieldValue_t = unsafe { std::mem::zeroed() };
                v.fieldId = r.field_id;
                v.scopeId = r.scope_id;
                v
            })
            .collect();
        let count = i32::try_from(raw.len()).map_err(|_| GpuError::InvalidArgument)?;
        // SAFETY: `raw` holds `count` initialised entries that NVML fills in place; the handle is valid.
        let code = unsafe {
            nvml.lib()
                .nvmlDeviceGetFieldValues(d.handle(), count, raw.as_mut_ptr())
        };
        from_return(code)?;
        Ok(raw
            .iter()
            .map(|r| FieldValue {
                field_id: r.fieldId,
                scope_id: r.scopeId,
                value: field_value(r),
                latency_us: u64::try_from(r.latencyUsec).unwrap_or(0),
            })
            .collect())
    }

    fn nvlink_legacy_bytes(&mut self, gpu: u32, link: u32) -> Result<(u64, u64), GpuError> {
        let d = self.device(gpu)?;
        let l = d.link_wrapper_for(link);
        let control = l.utilization_control(Counter::Zero)?;
        if control.units != UtilizationCountUnit::Bytes {
            return Err(GpuError::NotSupported);
        }
        let c = l.utilization_counter(Counter::Zero)?;
        Ok((c.send, c.receive))
    }

    fn nvlink_errors(&mut self, gpu: u32, link: u32) -> Result<NvlinkErrors, GpuError> {
        let d = self.device(gpu)?;
        let l = d.link_wrapper_for(link);
        let read = |c: ErrorCounter| l.error_counter(c).map_err(GpuError::from);
        Ok(NvlinkErrors {
            crc_flit: read(ErrorCounter::DlCrcFlit),
            crc_data: read(ErrorCounter::DlCrcData),
            replay: read(ErrorCounter::DlReplay),
            recovery: read(ErrorCounter::DlRecovery),
        })
    }

    fn utilization(&mut self, gpu: u32) -> Result<Utilization, GpuError> {
        let u = self.device(gpu)?.utilization_rates()?;
        Ok(Utilization {
            gpu_percent: u.gpu,
            memory_percent: u.memory,
        })
    }

    fn memory_used_bytes(&mut self, gpu: u32) -> Result<u64, GpuError> {
        Ok(self.device(gpu)?.memory_info()?.used)
    }

    fn pcie(&mut self, gpu: u32, throughput: bool) -> Result<PcieStatus, GpuError> {
        let d = self.device(gpu)?;
        let e = GpuError::from;
        let rate = |c: PcieUtilCounter| -> Result<u64, GpuError> {
            if throughput {
                d.pcie_throughput(c).map(u64::from).map_err(e)
            } else {
                Err(GpuError::NotSupported)
            }
        };
        Ok(PcieStatus {
            tx_kb_per_second: rate(PcieUtilCounter::Send),
            rx_kb_per_second: rate(PcieUtilCounter::Receive),
            link_gen: d.current_pcie_link_gen().map_err(e),
            link_gen_max: d.max_pcie_link_gen().map_err(e),
            link_width: d.current_pcie_link_width().map_err(e),
            link_width_max: d.max_pcie_link_width().map_err(e),
            replay_counter: d.pcie_replay_counter().map(u64::from).map_err(e),
        })
    }

    fn power_mw(&mut self, gpu: u32) -> Result<u64, GpuError> {
        Ok(u64::from(self.device(gpu)?.power_usage()?))
    }

    fn sm_clock_mhz(&mut self, gpu: u32) -> Result<u32, GpuError> {
        Ok(self.device(gpu)?.clock_info(Clock::SM)?)
    }

    fn gpm(&mut self, gpu: u32) -> Result<GpmMetrics, GpuError> {
        use nvml_wrapper::enums::gpm::GpmMetricId as M;
        let nvml = self.nvml;
        let sample = self.device(gpu)?.gpm_sample()?;
        let Some(previous) = self.gpm_previous.insert(gpu, sample) else {
            return Err(GpuError::NotFound);
        };
        let Some(current) = self.gpm_previous.get(&gpu) else {
            return Err(GpuError::NotFound);
        };
        let ids = [
            M::SmUtil,
            M::NvlinkTotalTxPerSec,
            M::NvlinkTotalRxPerSec,
            M::PcieTxPerSec,
            M::PcieRxPerSec,
        ];
        let out = nvml_wrapper::gpm::gpm_metrics_get(nvml, &previous, current, &ids)?;
        let get = |i: usize| -> Option<f64> {
            out.get(i)
                .and_then(|r: &Result<GpmMetricResult, NvmlError>| r.as_ref().ok())
                .map(|m| m.value)
                .filter(|v| v.is_finite())
        };
        Ok(GpmMetrics {
            sm_activity_percent: get(0).ok_or(GpuError::NotSupported)?,
            // NVML reports the NVLink and PCIe GPM rates in MiB/s.
            nvlink_tx_bytes_per_second: get(1).map(|v| v * 1_048_576.0),
            nvlink_rx_bytes_per_second: get(2).map(|v| v * 1_048_576.0),
            pcie_tx_bytes_per_second: get(3).map(|v| v * 1_048_576.0),
            pcie_rx_bytes_per_second: get(4).map(|v| v * 1_048_576.0),
        })
    }

    fn compute_processes(&mut self) -> Result<Vec<GpuProcess>, GpuError> {
        let count = self.device_count()?;
        let mut out = Vec::new();
        for gpu in 0..count {
            let Ok(d) = self.device(gpu) else { continue };
            let Ok(list) = d.running_compute_processes() else {
                continue;
            };
            out.extend(list.into_iter().map(|p| GpuProcess {
                pid: p.pid,
                gpu,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
            }));
        }
        Ok(out)
    }
}
