//! The simulated GPUs and host CPUs of one node, behind the agent's own backend traits
//! ([`GpuBackend`], [`HostBackend`]), driven by the job model's step timeline. A real agent
//! started with these (`commwatch_agent::start_with`) shows NVLink traffic, GPU activity and host
//! CPU exactly as the model has them.
//!
//! # GPUs
//!
//! Each node has `gpus_per_node` H100 SXM GPUs, each with [`NVLINKS_PER_GPU`] NVLink 4 links to
//! the baseboard's NVSwitches at 26 562 MB/s per direction.
//!
//! **NVLink bytes (ring model).** NCCL's ring AllReduce across the `N = nodes × G` ranks runs one
//! ring per rail; inside a node each ring passes through the node's `G` GPUs over NVLink and leaves
//! it over InfiniBand. Of the `R = 2·(N−1)/N · S` bytes each rank sends per step
//! ([`JobModel::per_rank_bytes_per_step`]), the share `(G−1)/G` goes to an intra-node neighbour:
//! each GPU transmits and receives `R·(G−1)/G` bytes per step over NVLink, spread evenly over its
//! links (integer floor; the remainder on the lowest-numbered links). It moves during the step's
//! AllReduce burst, linearly, like the InfiniBand bytes — the ring runs at the pace of its slowest
//! link (the network), so NVLink is far from its capacity (healthy default: 1.07e9 B/s per link
//! during a 19.6875 ms burst). With one node the model has no AllReduce traffic and NVLink stays
//! idle. Counters answer as NVML's fields 138/139 do: cumulative KiB (floor), from a seeded base.
//!
//! **Activity.** Within each step: during the host phase (the `cpu-bound` scenario) the GPUs are
//! idle; during the node's compute phase SM activity is [`SM_ACTIVITY_COMPUTE`]; during the part of
//! the AllReduce burst that is not under compute (exposed communication: the whole burst in
//! `no-overlap`) only NCCL's kernels run, SM activity [`SM_ACTIVITY_COMM`]; otherwise the GPU
//! waits (0). GPU utilisation (a kernel running) is 1 during compute and burst, 0 otherwise.
//! `gpm` reports the mean SM activity since its previous call; `utilization` the mean over the
//! last second (NVML's sample period); power is 90 W + 610 W × SM activity over the last second.
//!
//! **Variants.** The GPUs follow the timeline of their node's job ([`JobModel::node_timeline`]): with
//! `overlap` the NVLink bytes move in the gradient buckets, with `jitter` at each step's exact bursts
//! (activity keeps the nominal step, within the jitter's ±2.5 %); on a node that runs no job (`idle-nodes`,
//! `two-jobs`) the GPUs idle and NVLink stays still.
//!
//! # Host
//!
//! [`HOST_CPUS`] CPUs. During the host phase of a step (`cpu-bound`: the input pipeline) every CPU
//! runs at [`HOST_CPU_BUSY`]; otherwise at [`HOST_CPU_IDLE`]. A reading is the mean since the
//! previous one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use commwatch_agent::source::gpu::{
    field, FieldRequest, FieldValue, GpmMetrics, GpuBackend, GpuError, GpuInfo, GpuProcess,
    NvlinkErrors, NvlinkInfo, PcieStatus, PeerType, Utilization,
};
use commwatch_agent::source::host::{HostBackend, HostReading};
use commwatch_agent::source::SourceError;

use crate::model::{seeded_u64, JobModel, StepTimeline};

/// NVLinks per simulated GPU (H100 SXM).
pub const NVLINKS_PER_GPU: u32 = 18;
/// Per-link speed per direction, MB/s, as NVML reports it for H100.
pub const NVLINK_SPEED_MBPS: u64 = 26_562;
/// SM activity while the GPUs compute.
pub const SM_ACTIVITY_COMPUTE: f64 = 0.9;
/// SM activity while only communication kernels run.
pub const SM_ACTIVITY_COMM: f64 = 0.08;
/// CPUs of a simulated host.
pub const HOST_CPUS: usize = 16;
/// CPU utilisation (percent) during the host phase.
pub const HOST_CPU_BUSY: f64 = 98.0;
/// CPU utilisation (percent) otherwise.
pub const HOST_CPU_IDLE: f64 = 12.0;

const NS: f64 = 1e9;

/// Piecewise-constant level within a step: `(start, end, level)` in nanoseconds from the step's
/// start, non-overlapping.
type Profile = Vec<(u128, u128, f64)>;

/// ∫₀ᵗ level dt (level·nanoseconds) of a profile repeated every `period` nanoseconds.
fn integral(profile: &Profile, period: u128, t: u128) -> f64 {
    if period == 0 {
        return 0.0;
    }
    let per_step: f64 = profile
        .iter()
        .map(|(a, b, l)| (b.saturating_sub(*a)) as f64 * l)
        .sum();
    let (k, tau) = (t / period, t % period);
    let partial: f64 = profile
        .iter()
        .map(|(a, b, l)| (tau.min(*b).saturating_sub(*a)) as f64 * l)
        .sum();
    k as f64 * per_step + partial
}

/// Mean level over `[t0, t1]`.
fn mean(profile: &Profile, period: u128, t0: u128, t1: u128) -> f64 {
    if t1 <= t0 {
        return 0.0;
    }
    (integral(profile, period, t1) - integral(profile, period, t0)) / (t1 - t0) as f64
}

/// The activity profiles of one node.
#[derive(Debug, Clone)]
struct Profiles {
    period: u128,
    sm: Profile,
    busy: Profile,
    host_cpu: Profile,
    /// The bursts NVLink bytes move in: the node's job's timeline.
    train: StepTimeline,
}

fn profiles(model: &JobModel, node: usize) -> Profiles {
    let Some(tl) = model.node_timeline(node) else {
        // No job: GPUs idle, host CPUs at their idle level.
        let train = model.timeline().clone();
        let period = train.period.as_nanos();
        return Profiles {
            period,
            sm: Vec::new(),
            busy: Vec::new(),
            host_cpu: vec![(0, period, HOST_CPU_IDLE)],
            train,
        };
    };
    let period = tl.period.as_nanos();
    let host = tl.host.as_nanos();
    let compute_end = host + tl.compute.get(node).copied().unwrap_or_default().as_nanos();
    let bs = tl.burst_start.as_nanos();
    let be = bs + tl.burst_duration.as_nanos();
    let exposed_start = bs.max(compute_end);
    let mut sm = vec![(host, compute_end, SM_ACTIVITY_COMPUTE)];
    let mut busy = vec![(host, compute_end, 1.0)];
    if exposed_start < be {
        sm.push((exposed_start, be, SM_ACTIVITY_COMM));
        busy.push((exposed_start, be, 1.0));
    }
    let host_cpu = vec![(0, host, HOST_CPU_BUSY), (host, period, HOST_CPU_IDLE)];
    Profiles {
        period,
        sm,
        busy,
        host_cpu,
        train: tl.clone(),
    }
}

/// The GPUs of one simulated node. See the module documentation.
#[derive(Debug, Clone)]
pub struct SimGpus {
    node: usize,
    gpus: u32,
    epoch: Instant,
    p: Profiles,
    /// NVLink bytes per GPU per step, each direction.
    per_gpu_step_bytes: u64,
    seed: u64,
    gpm_previous: HashMap<u32, u128>,
    /// Fixed model time instead of the clock (tests).
    fixed: Option<Duration>,
}

impl SimGpus {
    /// GPUs of `node`; model time is the time since `epoch` (the cluster's [`crate::Cluster::epoch`]).
    pub fn new(model: &JobModel, node: usize, epoch: Instant) -> SimGpus {
        let g = model.spec().gpus_per_node as u64;
        let r = model.job_of(node).map_or(0, |j| j.per_rank_bytes_per_step);
        SimGpus {
            node,
            gpus: g as u32,
            epoch,
            p: profiles(model, node),
            per_gpu_step_bytes: if g > 0 {
                (u128::from(r) * u128::from(g - 1) / u128::from(g)) as u64
            } else {
                0
            },
            seed: model.spec().seed,
            gpm_previous: HashMap::new(),
            fixed: None,
        }
    }

    /// Answers at model time `t` instead of the clock (for tests); `None` follows the clock again.
    pub fn set_time(&mut self, t: Option<Duration>) {
        self.fixed = t;
    }

    fn now(&self) -> u128 {
        self.fixed
            .unwrap_or_else(|| self.epoch.elapsed())
            .as_nanos()
    }

    /// NVLink bytes per GPU per step, each direction (`R·(G−1)/G`).
    pub fn nvlink_bytes_per_gpu_per_step(&self) -> u64 {
        self.per_gpu_step_bytes
    }

    /// Bytes per step on link `link` of a GPU, each direction.
    pub fn link_bytes_per_step(&self, link: u32) -> u64 {
        let n = u64::from(NVLINKS_PER_GPU);
        let base = self.per_gpu_step_bytes / n;
        let extra = u64::from(u64::from(link) < self.per_gpu_step_bytes % n);
        base + extra
    }

    /// Cumulative bytes on a link by model time `t` (burst part only, without the seeded base).
    pub fn link_bytes_at(&self, link: u32, t: Duration) -> u64 {
        self.p.train.bytes_at(self.link_bytes_per_step(link), t)
    }

    /// Mean SM activity over `[t0, t1]` (0..1).
    pub fn sm_activity(&self, t0: Duration, t1: Duration) -> f64 {
        mean(&self.p.sm, self.p.period, t0.as_nanos(), t1.as_nanos())
    }

    fn base_kib(&self, gpu: u32, link: u32, dir: u64) -> u64 {
        seeded_u64(
            self.seed,
            self.node,
            0x100 + u64::from(gpu),
            u64::from(link) * 2 + dir,
        ) % (1 << 36)
    }

    fn check(&self, gpu: u32) -> Result<(), GpuError> {
        if gpu < self.gpus {
            Ok(())
        } else {
            Err(GpuError::NotFound)
        }
    }

    fn last_second(&self) -> (u128, u128) {
        let now = self.now();
        (now.saturating_sub(1_000_000_000), now)
    }
}

fn bus_id(bus: u32) -> String {
    format!("00000000:{bus:02X}:00.0")
}

impl GpuBackend for SimGpus {
    fn kind(&self) -> &'static str {
        "simulated"
    }

    fn device_count(&mut self) -> Result<u32, GpuError> {
        Ok(self.gpus)
    }

    fn device_info(&mut self, gpu: u32) -> Result<GpuInfo, GpuError> {
        self.check(gpu)?;
        let u = seeded_u64(self.seed, self.node, 0x200 + u64::from(gpu), 1);
        Ok(GpuInfo {
            index: gpu,
            uuid: format!(
                "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                u >> 32,
                (u >> 16) & 0xffff,
                u & 0xffff,
                self.node & 0xffff,
                gpu
            ),
            name: "NVIDIA H100 80GB HBM3 (simulated)".to_string(),
            pci_bus_id: bus_id(0x18 + gpu * 0x10),
            nvlink_count: NVLINKS_PER_GPU,
            gpm_supported: true,
        })
    }

    fn nvlink_info(&mut self, gpu: u32, link: u32) -> Result<NvlinkInfo, GpuError> {
        self.check(gpu)?;
        if link >= NVLINKS_PER_GPU {
            return Err(GpuError::InvalidArgument);
        }
        // Four NVSwitch chips, links 0-4, 5-8, 9-12, 13-17.
        let sw = match link {
            0..=4 => 0,
            5..=8 => 1,
            9..=12 => 2,
            _ => 3,
        };
        Ok(NvlinkInfo {
            link,
            active: true,
            version: Some(4),
            speed_mbps: Some(NVLINK_SPEED_MBPS),
            remote_pci_bus_id: Some(bus_id(5 + sw)),
            remote_type: Some(PeerType::Switch),
        })
    }

    fn field_values(
        &mut self,
        gpu: u32,
        requests: &[FieldRequest],
    ) -> Result<Vec<FieldValue>, GpuError> {
        self.check(gpu)?;
        let t = Duration::from_nanos(u64::try_from(self.now()).unwrap_or(u64::MAX));
        Ok(requests
            .iter()
            .map(|r| {
                let value = match r.field_id {
                    field::NVLINK_LINK_COUNT => Ok(u64::from(NVLINKS_PER_GPU)),
                    field::NVLINK_GET_SPEED if r.scope_id < NVLINKS_PER_GPU => {
                        Ok(NVLINK_SPEED_MBPS)
                    }
                    field::NVLINK_THROUGHPUT_DATA_TX | field::NVLINK_THROUGHPUT_DATA_RX
                        if r.scope_id < NVLINKS_PER_GPU =>
                    {
                        let dir = u64::from(r.field_id == field::NVLINK_THROUGHPUT_DATA_RX);
                        Ok(self.base_kib(gpu, r.scope_id, dir)
                            + self.link_bytes_at(r.scope_id, t) / 1024)
                    }
                    _ => Err(GpuError::NotSupported),
                };
                FieldValue {
                    field_id: r.field_id,
                    scope_id: r.scope_id,
                    value,
                    latency_us: 0,
                }
            })
            .collect())
    }

    fn nvlink_legacy_bytes(&mut self, gpu: u32, _link: u32) -> Result<(u64, u64), GpuError> {
        self.check(gpu)?;
        Err(GpuError::NotSupported)
    }

    fn nvlink_errors(&mut self, gpu: u32, link: u32) -> Result<NvlinkErrors, GpuError> {
        self.check(gpu)?;
        if link >= NVLINKS_PER_GPU {
            return Err(GpuError::InvalidArgument);
        }
        Ok(NvlinkErrors {
            crc_flit: Ok(0),
            crc_data: Ok(0),
            replay: Ok(0),
            recovery: Ok(0),
        })
    }

    fn utilization(&mut self, gpu: u32) -> Result<Utilization, GpuError> {
        self.check(gpu)?;
        let (a, b) = self.last_second();
        let busy = mean(&self.p.busy, self.p.period, a, b);
        Ok(Utilization {
            gpu_percent: (busy * 100.0).round() as u32,
            // Memory traffic follows compute.
            memory_percent: (mean(&self.p.sm, self.p.period, a, b) * 50.0).round() as u32,
        })
    }

    fn memory_used_bytes(&mut self, gpu: u32) -> Result<u64, GpuError> {
        self.check(gpu)?;
        Ok(71_303_168_000)
    }

    fn pcie(&mut self, gpu: u32, throughput: bool) -> Result<PcieStatus, GpuError> {
        self.check(gpu)?;
        let rate = |v: u64| {
            if throughput {
                Ok(v)
            } else {
                Err(GpuError::NotSupported)
            }
        };
        Ok(PcieStatus {
            tx_kb_per_second: rate(200_000),
            rx_kb_per_second: rate(800_000),
            link_gen: Ok(5),
            link_gen_max: Ok(5),
            link_width: Ok(16),
            link_width_max: Ok(16),
            replay_counter: Ok(0),
        })
    }

    fn power_mw(&mut self, gpu: u32) -> Result<u64, GpuError> {
        self.check(gpu)?;
        let (a, b) = self.last_second();
        let sm = mean(&self.p.sm, self.p.period, a, b);
        Ok(((90.0 + 610.0 * sm) * 1000.0).round() as u64)
    }

    fn sm_clock_mhz(&mut self, gpu: u32) -> Result<u32, GpuError> {
        self.check(gpu)?;
        Ok(1980)
    }

    fn gpm(&mut self, gpu: u32) -> Result<GpmMetrics, GpuError> {
        self.check(gpu)?;
        let now = self.now();
        let Some(prev) = self.gpm_previous.insert(gpu, now) else {
            return Err(GpuError::NotFound);
        };
        if now <= prev {
            return Err(GpuError::NotFound);
        }
        let dt = (now - prev) as f64 / NS;
        let d = |t: u128| Duration::from_nanos(u64::try_from(t).unwrap_or(u64::MAX));
        let nvlink: u64 = (0..NVLINKS_PER_GPU)
            .map(|l| self.link_bytes_at(l, d(now)) - self.link_bytes_at(l, d(prev)))
            .sum();
        Ok(GpmMetrics {
            sm_activity_percent: mean(&self.p.sm, self.p.period, prev, now) * 100.0,
            nvlink_tx_bytes_per_second: Some(nvlink as f64 / dt),
            nvlink_rx_bytes_per_second: Some(nvlink as f64 / dt),
            pcie_tx_bytes_per_second: Some(2e8),
            pcie_rx_bytes_per_second: Some(8e8),
        })
    }

    fn compute_processes(&mut self) -> Result<Vec<GpuProcess>, GpuError> {
        // The simulated ranks are not processes of this machine.
        Ok(Vec::new())
    }
}

/// The host CPUs of one simulated node. See the module documentation.
#[derive(Debug, Clone)]
pub struct SimHost {
    epoch: Instant,
    p: Profiles,
    previous: u128,
    fixed: Option<Duration>,
}

impl SimHost {
    pub fn new(model: &JobModel, node: usize, epoch: Instant) -> SimHost {
        SimHost {
            epoch,
            p: profiles(model, node),
            previous: 0,
            fixed: None,
        }
    }

    /// Answers at model time `t` instead of the clock (for tests).
    pub fn set_time(&mut self, t: Option<Duration>) {
        self.fixed = t;
    }

    fn now(&self) -> u128 {
        self.fixed
            .unwrap_or_else(|| self.epoch.elapsed())
            .as_nanos()
    }
}

impl HostBackend for SimHost {
    fn start(&mut self) -> Result<usize, SourceError> {
        self.previous = self.now();
        Ok(HOST_CPUS)
    }

    fn read(&mut self) -> HostReading {
        let now = self.now();
        let pct = if now > self.previous {
            mean(&self.p.host_cpu, self.p.period, self.previous, now)
        } else {
            HOST_CPU_IDLE
        };
        self.previous = now;
        HostReading {
            cpu_percent: pct as f32,
            per_cpu_percent: vec![pct as f32; HOST_CPUS],
            memory_used_bytes: 200 << 30,
            memory_total_bytes: 512 << 30,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClusterSpec, Scenario};

    fn gpus(s: Scenario) -> (JobModel, SimGpus) {
        let m = JobModel::new(&ClusterSpec::with_scenario(s)).unwrap();
        let g = SimGpus::new(&m, 0, Instant::now());
        (m, g)
    }

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1000.0)
    }

    #[test]
    fn ring_bytes_per_link_per_step() {
        let (m, g) = gpus(Scenario::Healthy);
        // 8 × 8 ranks, 220 MB: R = 2·63/64·220e6 = 433_125_000; NVLink share 7/8 = 378_984_375.
        assert_eq!(m.per_rank_bytes_per_step(), 433_125_000);
        assert_eq!(g.nvlink_bytes_per_gpu_per_step(), 378_984_375);
        let total: u64 = (0..NVLINKS_PER_GPU).map(|l| g.link_bytes_per_step(l)).sum();
        assert_eq!(total, 378_984_375);
        assert_eq!(g.link_bytes_per_step(0), 21_054_688);
        assert_eq!(g.link_bytes_per_step(17), 21_054_687);
        // Over one full step, exactly one step's bytes; nothing before the burst.
        let tl = m.timeline();
        assert_eq!(g.link_bytes_at(3, tl.burst_start), 0);
        assert_eq!(g.link_bytes_at(3, tl.period), g.link_bytes_per_step(3));
        // Half-way through the burst, half the bytes.
        let mid = tl.burst_start + tl.burst_duration / 2;
        assert_eq!(g.link_bytes_at(5, mid), g.link_bytes_per_step(5) / 2);
    }

    #[test]
    fn field_values_are_cumulative_kib_per_scope() {
        let (m, mut g) = gpus(Scenario::Healthy);
        let tl = m.timeline().clone();
        let req = [
            FieldRequest {
                field_id: 138,
                scope_id: 2,
            },
            FieldRequest {
                field_id: 139,
                scope_id: 2,
            },
            FieldRequest {
                field_id: 202,
                scope_id: 2,
            },
        ];
        g.set_time(Some(tl.burst_start));
        let a = g.field_values(1, &req).unwrap();
        g.set_time(Some(tl.period));
        let b = g.field_values(1, &req).unwrap();
        let kib = |v: &FieldValue| v.value.clone().unwrap();
        let d = kib(&b[0]) - kib(&a[0]);
        // floor differences: within one KiB of the step's bytes / 1024.
        assert!(
            (d as i64 - (g.link_bytes_per_step(2) / 1024) as i64).abs() <= 1,
            "{d}"
        );
        assert_eq!(b[2].value, Err(GpuError::NotSupported));
        assert_eq!(g.field_values(8, &req).unwrap_err(), GpuError::NotFound);
    }

    #[test]
    fn sm_activity_shows_compute_and_exposed_communication() {
        let (m, g) = gpus(Scenario::NoOverlap);
        let tl = m.timeline();
        // Compute: 0 .. 300 ms at 0.9; burst 300 .. 319.6875 ms exposed at 0.08.
        assert!((g.sm_activity(ms(10.0), ms(290.0)) - SM_ACTIVITY_COMPUTE).abs() < 1e-9);
        let b0 = tl.burst_start;
        let b1 = tl.burst_start + tl.burst_duration;
        assert!((g.sm_activity(b0, b1) - SM_ACTIVITY_COMM).abs() < 1e-9);
        // Healthy: the burst starts 10 ms before compute ends; its exposed tail is shorter.
        let (mh, gh) = gpus(Scenario::Healthy);
        let th = mh.timeline();
        let exposed_h = th.exposed_comm();
        assert!(exposed_h < tl.exposed_comm());
        let avg_h = gh.sm_activity(Duration::ZERO, th.period);
        let avg_n = g.sm_activity(Duration::ZERO, tl.period);
        assert!(avg_h > avg_n, "{avg_h} {avg_n}");
    }

    #[test]
    fn cpu_bound_idles_gpus_and_saturates_the_host() {
        let m = JobModel::new(&ClusterSpec::with_scenario(Scenario::CpuBound)).unwrap();
        let mut g = SimGpus::new(&m, 2, Instant::now());
        let mut h = SimHost::new(&m, 2, Instant::now());
        let tl = m.timeline().clone();
        assert_eq!(tl.host, ms(250.0));
        // During the host phase: GPUs idle, CPUs busy.
        assert_eq!(g.sm_activity(ms(10.0), ms(240.0)), 0.0);
        h.set_time(Some(ms(10.0)));
        h.start().unwrap();
        h.set_time(Some(ms(240.0)));
        assert_eq!(h.read().cpu_percent, HOST_CPU_BUSY as f32);
        h.set_time(Some(ms(300.0)));
        assert_eq!(
            h.read().cpu_percent,
            ((10.0 * 98.0 + 50.0 * 12.0) / 60.0) as f32
        );
        // GPU utilisation over NVML's last second: the host phase (250 of 559.6875 ms) idles the GPUs.
        g.set_time(Some(tl.period * 10));
        let u = g.utilization(0).unwrap();
        let share = (tl.period - tl.host).as_secs_f64() / tl.period.as_secs_f64();
        assert!(u.gpu_percent < 70 && u.gpu_percent > 40, "{u:?} {share}");
        let mh = JobModel::new(&ClusterSpec::default()).unwrap();
        let mut gh = SimGpus::new(&mh, 2, Instant::now());
        gh.set_time(Some(mh.timeline().period * 10));
        assert_eq!(gh.utilization(0).unwrap().gpu_percent, 100);
        // Healthy host: idle level only.
        let mh = JobModel::new(&ClusterSpec::default()).unwrap();
        let mut hh = SimHost::new(&mh, 0, Instant::now());
        hh.set_time(Some(ms(0.0)));
        hh.start().unwrap();
        hh.set_time(Some(ms(900.0)));
        assert_eq!(hh.read().cpu_percent, HOST_CPU_IDLE as f32);
    }

    #[test]
    fn gpm_first_call_primes_then_reports_the_window() {
        let (m, mut g) = gpus(Scenario::Healthy);
        let tl = m.timeline().clone();
        g.set_time(Some(Duration::ZERO));
        assert_eq!(g.gpm(0).unwrap_err(), GpuError::NotFound);
        g.set_time(Some(tl.period * 4));
        let r = g.gpm(0).unwrap();
        let expect = g.sm_activity(Duration::ZERO, tl.period) * 100.0;
        assert!((r.sm_activity_percent - expect).abs() < 1e-9);
        let bytes = 4.0 * g.nvlink_bytes_per_gpu_per_step() as f64;
        let rate = bytes / (tl.period * 4).as_secs_f64();
        assert!((r.nvlink_tx_bytes_per_second.unwrap() - rate).abs() < 1.0);
    }
}
