//! The GPU timeline of one rank, as both trace readers (Kineto JSON, nsys SQLite) produce it.
//!
//! Kernels are classified by name exactly as Holistic Trace Analysis does, so that communication time and
//! overlap agree with it on the same trace:
//! - communication: the name matches `^nccl.*Kernel` (`ncclKernel_*`, `ncclDevKernel_*`);
//! - memory: the name starts with `Memcpy`, `Memset` or `dma`;
//! - computation: anything else, except names that contain `Memcpy` or `Sync` (those are "other").

use serde::Serialize;

/// What a GPU activity is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelClass {
    Communication,
    Computation,
    Memory,
    Other,
}

/// Classifies a GPU activity by its name (see the module documentation).
pub fn classify_kernel(name: &str) -> KernelClass {
    let name = name.trim_start_matches("void ");
    if name.starts_with("nccl") && name[4..].contains("Kernel") {
        KernelClass::Communication
    } else if name.starts_with("Memcpy") || name.starts_with("Memset") || name.starts_with("dma") {
        KernelClass::Memory
    } else if name.contains("Memcpy") || name.contains("Sync") {
        KernelClass::Other
    } else {
        KernelClass::Computation
    }
}

/// A collective as the trace describes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct CollectiveKey {
    /// `allreduce`, `allgather`, `reduce_scatter`, `broadcast`, `sendrecv`, ... (lower case).
    pub name: String,
    /// Message size in the nccl-tests convention (the larger of input and output), bytes; `None` when the
    /// trace does not record it.
    pub size_bytes: Option<u64>,
    pub dtype: Option<String>,
    pub group_size: Option<u32>,
    /// NCCL's protocol as the kernel's name gives it: `LL`, `LL128`, `SIMPLE`.
    pub protocol: Option<String>,
}

/// One GPU activity. Times are microseconds on the trace's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuEvent {
    pub start_us: f64,
    pub end_us: f64,
    pub class: KernelClass,
    /// Start of the CPU call that launched it (found through the correlation id), if known.
    pub launch_us: Option<f64>,
    /// Index into [`Timeline::collectives`] for communication kernels.
    pub collective: Option<u32>,
}

/// A training iteration as the trace marks it (`ProfilerStep#N`, an NVTX range).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepWindow {
    pub step: i64,
    pub start_us: f64,
    pub end_us: f64,
}

/// Everything the analysis needs from one rank's trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    pub rank: Option<u32>,
    pub world_size: Option<u32>,
    pub nccl_version: Option<String>,
    pub devices: Vec<String>,
    pub events: Vec<GpuEvent>,
    pub collectives: Vec<CollectiveKey>,
    pub steps: Vec<StepWindow>,
}

impl Timeline {
    /// Interns a collective description and returns its index.
    pub fn intern_collective(&mut self, key: CollectiveKey) -> u32 {
        if let Some(i) = self.collectives.iter().position(|k| *k == key) {
            return i as u32;
        }
        self.collectives.push(key);
        (self.collectives.len() - 1) as u32
    }
}

/// Collective name from an NCCL kernel name: `ncclKernel_AllReduce_RING_LL_Sum_float(...)` and
/// `ncclDevKernel_AllGather_RING_LL(...)` give `allreduce` and `allgather`.
pub fn collective_from_kernel(name: &str) -> Option<String> {
    let name = name.trim_start_matches("void ");
    let rest = name
        .strip_prefix("ncclDevKernel_")
        .or_else(|| name.strip_prefix("ncclKernel_"))?;
    let op: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    if op.is_empty() {
        None
    } else {
        Some(op.to_ascii_lowercase())
    }
}

/// The protocol an NCCL kernel's name gives: `ncclKernel_AllReduce_RING_LL_Sum_float` is `LL`,
/// `ncclDevKernel_AllGather_RING_LL128` `LL128`; `None` for a name without one (`ncclDevKernel_Generic`).
pub fn protocol_from_kernel(name: &str) -> Option<String> {
    let name = name.trim_start_matches("void ");
    if !name.starts_with("nccl") {
        return None;
    }
    let stem = name.split(['(', '<']).next().unwrap_or(name);
    stem.split('_')
        .find(|p| matches!(*p, "LL" | "LL128" | "SIMPLE"))
        .map(str::to_string)
}

/// Size in bytes of a PyTorch dtype name as the profiler records it (`Float`, `BFloat16`, ...).
pub fn dtype_bytes(dtype: &str) -> Option<u64> {
    let d = dtype.to_ascii_lowercase();
    let d = d.trim_start_matches("torch.");
    Some(match d {
        "float" | "float32" | "int" | "int32" | "uint32" | "f32" | "i32" | "u32" => 4,
        "double" | "float64" | "long" | "int64" | "uint64" | "complexfloat" | "f64" | "i64"
        | "u64" => 8,
        "half" | "bfloat16" | "float16" | "short" | "int16" | "uint16" | "f16" | "bf16" => 2,
        "byte" | "char" | "bool" | "int8" | "uint8" | "i8" | "u8" => 1,
        "complexdouble" => 16,
        _ if d.starts_with("float8") => 1,
        _ => return None,
    })
}

/// Bus-bandwidth factor nccl-tests uses for a collective over `n` ranks.
pub fn busbw_factor(collective: &str, n: u32) -> Option<f64> {
    let n = f64::from(n);
    if n < 1.0 {
        return None;
    }
    let c: String = collective
        .to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphabetic())
        .collect();
    if c.contains("allreduce") {
        Some(2.0 * (n - 1.0) / n)
    } else if c.contains("allgather") || c.contains("reducescatter") || c.contains("alltoall") {
        Some((n - 1.0) / n)
    } else if c.contains("broadcast") || c == "reduce" || c.contains("sendrecv") {
        Some(1.0)
    } else {
        None
    }
}

/// Merges intervals into a sorted list of disjoint ones.
pub fn merge_intervals(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    v.retain(|(s, e)| s.is_finite() && e.is_finite() && e >= s);
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Total length of disjoint intervals.
pub fn total(v: &[(f64, f64)]) -> f64 {
    v.iter().map(|(s, e)| e - s).sum()
}

/// Length of the intersection of two sorted disjoint interval lists.
pub fn intersection(a: &[(f64, f64)], b: &[(f64, f64)]) -> f64 {
    let (mut i, mut j, mut sum) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        let s = a[i].0.max(b[j].0);
        let e = a[i].1.min(b[j].1);
        if e > s {
            sum += e - s;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_follows_hta() {
        use KernelClass::*;
        assert_eq!(
            classify_kernel(
                "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
            ),
            Communication
        );
        assert_eq!(
            classify_kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            Communication
        );
        assert_eq!(classify_kernel("Memcpy DtoD (Device -> Device)"), Memory);
        assert_eq!(classify_kernel("Memset (Device)"), Memory);
        assert_eq!(
            classify_kernel("void at::native::vectorized_elementwise_kernel<4>"),
            Computation
        );
        assert_eq!(classify_kernel("cudaStreamSynchronize kernel Sync"), Other);
    }

    #[test]
    fn collective_names_from_kernels() {
        assert_eq!(
            collective_from_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)")
                .as_deref(),
            Some("allreduce")
        );
        assert_eq!(
            collective_from_kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)").as_deref(),
            Some("reducescatter")
        );
        assert_eq!(collective_from_kernel("gemm"), None);
    }

    #[test]
    fn interval_math() {
        let a = merge_intervals(vec![(0.0, 10.0), (5.0, 12.0), (20.0, 30.0)]);
        assert_eq!(a, vec![(0.0, 12.0), (20.0, 30.0)]);
        let b = merge_intervals(vec![(8.0, 22.0)]);
        assert_eq!(intersection(&a, &b), 6.0);
        assert_eq!(total(&a), 22.0);
    }

    #[test]
    fn busbw_factors() {
        assert_eq!(busbw_factor("allreduce", 8), Some(1.75));
        assert_eq!(busbw_factor("all_gather_perf", 8), Some(0.875));
        assert_eq!(busbw_factor("reduce_scatter", 2), Some(0.5));
        assert_eq!(busbw_factor("broadcast", 2), Some(1.0));
    }
}
