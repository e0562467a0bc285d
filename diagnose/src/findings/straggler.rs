//! One rank starts the collectives late; the others wait for it inside NCCL.

use super::{r2, Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.straggler else {
        return Vec::new();
    };
    let Some(rank) = s.straggler else {
        return Vec::new();
    };
    let Some(r) = s.ranks.iter().find(|r| r.rank == rank) else {
        return Vec::new();
    };
    vec![Finding::new(
        "straggler",
        Severity::Warning,
        format!(
            "rank {rank} starts the collectives {:.0} us after the first rank on average (last in {:.0} % of {}): the \
             others wait for it",
            r.mean_lateness_us,
            r.latest_share * 100.0,
            s.compared
        ),
        "look at what rank does before its collectives (data loading, uneven work, a slower GPU or host, thermal \
         throttling) rather than at the network",
    )
    .subject("rank", rank)
    .evidence("mean_lateness_us", r2(r.mean_lateness_us))
    .evidence("latest_share", r2(r.latest_share))
    .evidence("collectives_compared", s.compared as u64)]
}
