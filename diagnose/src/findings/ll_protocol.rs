//! A large collective on NCCL's LL protocol (`ncclKernel_AllReduce_RING_LL_Sum_float` on messages of
//! megabytes). LL sends each 8 bytes as 4 bytes of data and 4 of flags, for latency: NCCL's tuner picks it
//! for small messages only, and a large message on it reaches a fraction of the link. Seen on big messages
//! it points at `NCCL_PROTO` forced (or a tuner plugin mistuned), which the trace itself does not show: the
//! finding says so.

use super::{Cite, Context, Finding, Severity};
use crate::units::human_bytes;

/// Messages from this size on are no longer small: NCCL leaves LL for LL128 or Simple well below it.
pub const LL_LARGE_BYTES: u64 = 4 << 20;

pub fn check(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    for t in ctx.traces {
        let large: Vec<_> = t
            .analysis
            .top_collectives
            .iter()
            .filter(|c| c.protocol.as_deref() == Some("LL"))
            .filter(|c| c.size_bytes.is_some_and(|s| s >= LL_LARGE_BYTES))
            .collect();
        let Some(biggest) = large.iter().max_by_key(|c| c.size_bytes) else {
            continue;
        };
        let calls: usize = large.iter().map(|c| c.count).sum();
        let busbw: Vec<f64> = large.iter().filter_map(|c| c.busbw_gbps).collect();
        let (lo, hi) = busbw
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(l, h), b| (l.min(*b), h.max(*b)));
        let name = kernel_name(&biggest.collective);
        let cites: Vec<Cite> = large
            .iter()
            .take(3)
            .map(|c| Cite {
                file: t.file.clone(),
                line: None,
                text: format!(
                    "{} kernels on protocol LL: {} calls of {}, mean {:.0} us{}",
                    name,
                    c.count,
                    human_bytes(c.size_bytes.unwrap_or(0)),
                    c.mean_time_us,
                    c.busbw_gbps
                        .map(|b| format!(", bus bandwidth {b:.2} GB/s"))
                        .unwrap_or_default()
                ),
            })
            .collect();
        let mut f = Finding::new(
            "low_bandwidth_protocol",
            Severity::Warning,
            format!(
                "{name} of up to {} runs on NCCL's LL protocol ({calls} calls{}): LL is for small messages and \
                 carries half its bytes as flags; NCCL does not pick it at this size unless NCCL_PROTO (or a tuner) \
                 forces it",
                human_bytes(biggest.size_bytes.unwrap_or(0)),
                if busbw.is_empty() {
                    String::new()
                } else {
                    format!(", {lo:.1} to {hi:.1} GB/s bus bandwidth")
                }
            ),
            "look for NCCL_PROTO (or NCCL_TUNER_PLUGIN) in the job's environment and remove it, or allow LL128 and \
             Simple; compare the collective's bandwidth afterwards",
        )
        .subject("file", &t.file)
        .subject("rank", t.analysis.rank)
        .subject("collective", &biggest.collective)
        .evidence("protocol", "LL")
        .evidence("largest_bytes", biggest.size_bytes.unwrap_or(0))
        .evidence("calls", calls as u64)
        .cite(&cites);
        if !busbw.is_empty() {
            f = f
                .evidence("lowest_busbw_gbps", super::r2(lo))
                .evidence("highest_busbw_gbps", super::r2(hi));
        }
        out.push(f);
    }
    out
}

/// `allreduce` as NCCL names its kernels: `AllReduce`.
fn kernel_name(collective: &str) -> String {
    match collective {
        "allreduce" | "all_reduce" => "AllReduce".to_string(),
        "allgather" | "all_gather" => "AllGather".to_string(),
        "reducescatter" | "reduce_scatter" => "ReduceScatter".to_string(),
        "broadcast" => "Broadcast".to_string(),
        "alltoall" | "all_to_all" => "AllToAll".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysed::TraceReport;
    use crate::report::fixtures;

    fn with_protocol(protocol: &str, size: u64) -> TraceReport {
        let mut t = fixtures::trace_report(0, 5, Some(("allreduce", size, 3.0)));
        t.analysis.top_collectives[0].protocol = Some(protocol.to_string());
        t
    }

    #[test]
    fn ll_on_megabytes_is_flagged_ll128_and_small_ll_are_not() {
        let link = crate::link::LinkInfo::default();
        let run = |t: TraceReport| {
            let traces = [t];
            let ctx = Context {
                kernels: &[],
                tests: &[],
                logs: &[],
                traces: &traces,
                straggler: None,
                link: &link,
            };
            check(&ctx)
        };
        let f = run(with_protocol("LL", 32 << 20));
        assert_eq!(f.len(), 1);
        assert!(f[0]
            .summary
            .starts_with("AllReduce of up to 32 MiB runs on NCCL's LL protocol"));
        assert!(f[0].cites[0].text.contains("protocol LL"));
        assert!(run(with_protocol("LL128", 32 << 20)).is_empty());
        assert!(run(with_protocol("LL", 64 << 10)).is_empty());
    }
}
