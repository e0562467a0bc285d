//! Communication that computation does not hide: a large share of each step waits for the network.

use super::{r2, Context, Finding, Severity};

/// Overlap below this is poor.
pub const MIN_OVERLAP: f64 = 0.5;
/// Exposed communication matters from this share of the step time.
pub const MIN_EXPOSED_SHARE: f64 = 0.1;

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.traces
        .iter()
        .filter_map(|t| {
            let a = &t.analysis;
            let ratio = a.overlap_ratio?;
            let steps = a.steps.iter().filter(|s| s.comm_time_us > 0.0).count();
            let (exposed, step_time) = if steps > 0 {
                let n = steps as f64;
                (
                    a.steps.iter().map(|s| s.exposed_comm_us).sum::<f64>() / n,
                    a.steps.iter().filter(|s| s.comm_time_us > 0.0).map(|s| s.step_time_us).sum::<f64>() / n,
                )
            } else {
                (a.exposed_comm_us, a.span_us)
            };
            let share = if step_time > 0.0 { exposed / step_time } else { 0.0 };
            if ratio >= MIN_OVERLAP || share < MIN_EXPOSED_SHARE {
                return None;
            }
            let top = a.top_collectives.first();
            let mut f = Finding::new(
                "exposed_communication",
                if share >= 0.25 { Severity::Critical } else { Severity::Warning },
                format!(
                    "rank {}: {:.0} % of communication overlaps computation; {:.2} ms per step ({:.0} % of the step) \
                     is exposed",
                    a.rank,
                    ratio * 100.0,
                    exposed / 1e3,
                    share * 100.0
                ),
                "overlap the collectives with backward compute (DDP/FSDP bucketing and prefetch, no synchronising calls \
                 between backward and the optimizer step); tune bucket size against the latency-bound regime of the \
                 baseline",
            )
            .subject("rank", a.rank)
            .subject("file", &t.file)
            .evidence("overlap_ratio", r2(ratio))
            .evidence("exposed_comm_us_per_step", r2(exposed))
            .evidence("step_time_us", r2(step_time));
            if let Some(c) = top {
                f = f.evidence("top_collective", c.collective.clone());
                if let Some(s) = c.size_bytes {
                    f = f.evidence("top_collective_size_bytes", s);
                }
            }
            Some(f)
        })
        .collect()
}
