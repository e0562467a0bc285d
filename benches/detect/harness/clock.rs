//! The virtual clock every part of a run reads: the simulated cluster's files, its GPUs and host CPUs, the
//! agents' sample stamps and the collector's "now" all stand at the same simulated instant.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use commwatch_agent::source::gpu::{
    FieldRequest, FieldValue, GpmMetrics, GpuBackend, GpuError, GpuInfo, GpuProcess, NvlinkErrors,
    NvlinkInfo, PcieStatus, Utilization,
};
use commwatch_agent::source::host::{HostBackend, HostReading};
use commwatch_agent::source::SourceError;
use commwatch_sim::{SimGpus, SimHost};

/// The Unix time (ns) that is model time 0: a fixed instant, so that two runs of one spec give the same
/// timestamps everywhere.
pub const BASE_UNIX_NS: i64 = 1_700_000_000_000_000_000;

/// Model time shared by a run's parts (cheap to clone; every clone reads the same time).
#[derive(Debug, Clone, Default)]
pub struct VirtualClock(Arc<AtomicU64>);

impl VirtualClock {
    /// Model time now.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }

    /// Sets model time (the run's driver alone moves it, forward).
    pub fn set(&self, t: Duration) {
        self.0.store(
            u64::try_from(t.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Model time now as the Unix time the agents stamp and the collector reads.
    pub fn unix_ns(&self) -> i64 {
        unix_ns(self.now())
    }
}

/// Model time `t` as Unix time.
pub fn unix_ns(t: Duration) -> i64 {
    BASE_UNIX_NS + i64::try_from(t.as_nanos()).unwrap_or(i64::MAX / 2)
}

/// Unix time as model time (zero before the base).
pub fn model_time(unix_ns: i64) -> Duration {
    Duration::from_nanos(u64::try_from(unix_ns - BASE_UNIX_NS).unwrap_or(0))
}

/// The simulated GPUs of one node, answering at the clock's time.
pub struct ClockedGpus {
    inner: SimGpus,
    clock: VirtualClock,
}

impl ClockedGpus {
    pub fn new(inner: SimGpus, clock: VirtualClock) -> ClockedGpus {
        ClockedGpus { inner, clock }
    }

    /// The inner backend, set to the clock's time.
    fn at_now(&mut self) -> &mut SimGpus {
        self.inner.set_time(Some(self.clock.now()));
        &mut self.inner
    }
}

impl GpuBackend for ClockedGpus {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn device_count(&mut self) -> Result<u32, GpuError> {
        self.at_now().device_count()
    }
    fn device_info(&mut self, gpu: u32) -> Result<GpuInfo, GpuError> {
        self.at_now().device_info(gpu)
    }
    fn nvlink_info(&mut self, gpu: u32, link: u32) -> Result<NvlinkInfo, GpuError> {
        self.at_now().nvlink_info(gpu, link)
    }
    fn field_values(
        &mut self,
        gpu: u32,
        requests: &[FieldRequest],
    ) -> Result<Vec<FieldValue>, GpuError> {
        self.at_now().field_values(gpu, requests)
    }
    fn nvlink_legacy_bytes(&mut self, gpu: u32, link: u32) -> Result<(u64, u64), GpuError> {
        self.at_now().nvlink_legacy_bytes(gpu, link)
    }
    fn nvlink_errors(&mut self, gpu: u32, link: u32) -> Result<NvlinkErrors, GpuError> {
        self.at_now().nvlink_errors(gpu, link)
    }
    fn utilization(&mut self, gpu: u32) -> Result<Utilization, GpuError> {
        self.at_now().utilization(gpu)
    }
    fn memory_used_bytes(&mut self, gpu: u32) -> Result<u64, GpuError> {
        self.at_now().memory_used_bytes(gpu)
    }
    fn pcie(&mut self, gpu: u32, throughput: bool) -> Result<PcieStatus, GpuError> {
        self.at_now().pcie(gpu, throughput)
    }
    fn power_mw(&mut self, gpu: u32) -> Result<u64, GpuError> {
        self.at_now().power_mw(gpu)
    }
    fn sm_clock_mhz(&mut self, gpu: u32) -> Result<u32, GpuError> {
        self.at_now().sm_clock_mhz(gpu)
    }
    fn gpm(&mut self, gpu: u32) -> Result<GpmMetrics, GpuError> {
        self.at_now().gpm(gpu)
    }
    fn compute_processes(&mut self) -> Result<Vec<GpuProcess>, GpuError> {
        self.at_now().compute_processes()
    }
}

/// The simulated host CPUs of one node, answering at the clock's time.
pub struct ClockedHost {
    inner: SimHost,
    clock: VirtualClock,
}

impl ClockedHost {
    pub fn new(inner: SimHost, clock: VirtualClock) -> ClockedHost {
        ClockedHost { inner, clock }
    }
}

impl HostBackend for ClockedHost {
    fn start(&mut self) -> Result<usize, SourceError> {
        self.inner.set_time(Some(self.clock.now()));
        self.inner.start()
    }
    fn read(&mut self) -> HostReading {
        self.inner.set_time(Some(self.clock.now()));
        self.inner.read()
    }
}
