//! The GPU waits most of the time and communication is not what it waits for: the input pipeline or the CPU is
//! the bottleneck, and tuning NCCL will not help.

use super::{r2, Context, Finding, Severity};

/// GPU idle share of the span from which the job counts as CPU-bound.
pub const MIN_IDLE_SHARE: f64 = 0.5;

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.traces
        .iter()
        .filter_map(|t| {
            let a = &t.analysis;
            if a.span_us <= 0.0 {
                return None;
            }
            let idle = a.idle_time_us / a.span_us;
            let exposed = a.exposed_comm_us / a.span_us;
            if idle < MIN_IDLE_SHARE || exposed >= idle / 2.0 {
                return None;
            }
            Some(
                Finding::new(
                    "cpu_bound",
                    Severity::Warning,
                    format!(
                        "rank {}: the GPU is idle {:.0} % of the traced time while exposed communication is {:.0} %: \
                         the host side (data loading, CPU ops, launches) sets the pace",
                        a.rank,
                        idle * 100.0,
                        exposed * 100.0
                    ),
                    "profile the host: data-loader workers and pinned memory, CPU-side ops and synchronisations, kernel \
                     launch overhead (CUDA graphs); do not tune NCCL for this",
                )
                .subject("rank", a.rank)
                .subject("file", &t.file)
                .evidence("idle_share", r2(idle))
                .evidence("exposed_comm_share", r2(exposed))
                .evidence("idle_time_us", r2(a.idle_time_us)),
            )
        })
        .collect()
}
