//! The explicit list of sources: their names in build and sampling order, the plain settings they are built
//! from, and the backends that can be injected instead of the real hardware. A new source is one new file plus
//! one name in [`SOURCE_NAMES`] and one arm in [`build_sources_with`].
//!
//! Every source built here runs behind a [`watchdog`](super::watchdog): one that stops answering is reported
//! stalled instead of freezing the others.

use std::path::PathBuf;

use super::cgroup::{shared_job_cgroups, CgroupSource};
use super::gpu::{self, GpuBackend, GpuError, SharedGpu};
use super::host::{HostBackend, HostSource};
use super::infiniband::InfinibandSource;
use super::netdev::{NetdevOptions, NetdevSource};
use super::nvml::NvmlSource;
use super::nvml_lib::NvmlBackend;
use super::processes::ProcessesSource;
use super::qdisc::QdiscSource;
use super::tcp::TcpSource;
use super::watchdog::watch;
use super::Source;

/// Names of the sources, in the order they are built and sampled (`qdisc` after `netdev`, whose interfaces'
/// queues it reads; `processes` after the hardware: it checks NCCL settings against the links the others
/// found; `cgroup` after it: it reads the cgroups of the jobs that `processes` found).
pub const SOURCE_NAMES: &[&str] = &[
    "infiniband",
    "netdev",
    "qdisc",
    "host",
    "tcp",
    "nvml",
    "processes",
    "cgroup",
];

/// What the sources are built from: plain values, handed down by the agent from its configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSettings {
    /// Sources to run, by name (of [`SOURCE_NAMES`]; other names are ignored). They are built in the order of
    /// [`SOURCE_NAMES`], whatever the order here.
    pub enabled: Vec<String>,
    /// Root of sysfs (`/sys`): every sysfs path of the `infiniband` and `netdev` sources is built from it.
    pub sysfs_root: PathBuf,
    /// Root of procfs (`/proc`), for the `host` and `processes` sources.
    pub procfs_root: PathBuf,
    /// Classification and filtering of the `netdev` source's interfaces.
    pub netdev: NetdevOptions,
    /// How the `nvml` source ships NVLink bytes: per GPU at the fast rate (the default) or per link.
    pub nvlink_bytes: crate::source::nvml::NvlinkBytes,
}

impl SourceSettings {
    /// Whether the source `name` is enabled.
    pub fn wants(&self, name: &str) -> bool {
        self.enabled.iter().any(|s| s == name)
    }
}

impl Default for SourceSettings {
    /// Every source, on `/sys` and `/proc`, with the default netdev options.
    fn default() -> Self {
        SourceSettings {
            enabled: SOURCE_NAMES.iter().map(|s| s.to_string()).collect(),
            sysfs_root: PathBuf::from("/sys"),
            procfs_root: PathBuf::from("/proc"),
            netdev: NetdevOptions::default(),
            nvlink_bytes: Default::default(),
        }
    }
}

/// Backends injected instead of the real hardware (the simulated cluster's GPUs and host).
#[derive(Default)]
pub struct SourceExtras {
    /// GPUs for the `nvml` and `processes` sources; `None` loads NVML.
    pub gpu: Option<Box<dyn GpuBackend>>,
    /// Host CPU and memory for the `host` source; `None` reads `stat` and `meminfo` under the procfs root.
    pub host: Option<Box<dyn HostBackend>>,
}

impl std::fmt::Debug for SourceExtras {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceExtras")
            .field("gpu", &self.gpu.as_ref().map(|g| g.kind()))
            .field("host", &self.host.is_some())
            .finish()
    }
}

/// Builds the enabled sources on the real hardware.
pub fn build_sources(settings: &SourceSettings) -> Vec<Box<dyn Source>> {
    build_sources_with(settings, SourceExtras::default())
}

/// [`build_sources`] with injected backends. Each source runs behind [`watch`].
pub fn build_sources_with(settings: &SourceSettings, extras: SourceExtras) -> Vec<Box<dyn Source>> {
    let SourceExtras {
        gpu: gpu_backend,
        host: mut host_backend,
    } = extras;
    // One GPU backend shared by `nvml` and `processes`; NVML is loaded only when one of them runs.
    let gpu: Option<Result<SharedGpu, GpuError>> =
        (settings.wants("nvml") || settings.wants("processes")).then(|| match gpu_backend {
            Some(b) => Ok(gpu::shared(b)),
            None => NvmlBackend::init().map(|b| gpu::shared(Box::new(b) as Box<dyn GpuBackend>)),
        });
    // The jobs' cgroups, from `processes` to `cgroup` (each scan of the first, read at the second's discovery).
    let cgroups = shared_job_cgroups();
    let mut out: Vec<Box<dyn Source>> = Vec::new();
    for name in SOURCE_NAMES.iter().filter(|n| settings.wants(n)) {
        match *name {
            "infiniband" => out.push(Box::new(InfinibandSource::new(settings.sysfs_root.clone()))),
            "netdev" => out.push(Box::new(NetdevSource::new(
                settings.sysfs_root.clone(),
                settings.netdev.clone(),
            ))),
            "qdisc" => out.push(Box::new(QdiscSource::new(
                settings.sysfs_root.clone(),
                settings.netdev.clone(),
            ))),
            "host" => out.push(Box::new(match host_backend.take() {
                Some(b) => HostSource::with_backend(b),
                None => HostSource::new(settings.procfs_root.clone()),
            })),
            "tcp" => out.push(Box::new(TcpSource::new(settings.procfs_root.clone()))),
            "nvml" => {
                if let Some(g) = &gpu {
                    out.push(Box::new(
                        NvmlSource::new(g.clone()).with_nvlink_bytes(settings.nvlink_bytes),
                    ));
                }
            }
            "processes" => out.push(Box::new(
                ProcessesSource::new(
                    settings.procfs_root.clone(),
                    gpu.as_ref().and_then(|g| g.as_ref().ok()).cloned(),
                )
                .with_cgroups(cgroups.clone()),
            )),
            "cgroup" => out.push(Box::new(CgroupSource::new(
                settings.sysfs_root.clone(),
                cgroups.clone(),
            ))),
            _ => {}
        }
    }
    out.into_iter().map(watch).collect()
}
