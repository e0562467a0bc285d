//! Ranks that share one GPU (`Rank 0 … on lab device 0 [0000:02:00]`, `Rank 1 … on lab device 0
//! [0000:02:00]`; in a log, two ranks' init lines with one host's same `busId`, or NCCL's `Duplicate GPU
//! detected`): the run measures one GPU talking to itself, not the hardware or the network.

use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    let logs = ctx.logs.iter().filter_map(|l| {
        let (a, b, host, bus) = l.log.shared_gpu.as_ref()?;
        Some(
            Finding::new(
                "ranks_share_gpu",
                Severity::Warning,
                format!(
                    "ranks {a} and {b} run on the same GPU (host {host}, bus id {bus}): the figures are no \
                     measurement of the hardware or the network"
                ),
                "give each rank its own GPU (CUDA_VISIBLE_DEVICES or the local rank per process) and run again",
            )
            .subject("file", &l.file)
            .evidence("ranks", 2u64)
            .evidence("host", host.clone())
            .cite(l.log.cited("shared_gpu")),
        )
    });
    let tests = ctx
        .tests
        .iter()
        .filter_map(|t| {
            let shared = t.test.ranks_sharing_a_gpu();
            if shared.is_empty() {
                return None;
            }
            let first = shared[0];
            let mut f = Finding::new(
                "ranks_share_gpu",
                Severity::Warning,
                format!(
                    "{} ranks of {} run on the same GPU (host {}, device {}): the figures are no measurement of \
                     the hardware or the network",
                    shared.len(),
                    t.test.collective,
                    first.host,
                    first.device.map_or("?".to_string(), |d| d.to_string())
                ),
                "give each rank its own GPU (CUDA_VISIBLE_DEVICES per rank, or -g per process) and run again",
            )
            .subject("file", &t.file)
            .subject("collective", &t.test.collective)
            .evidence("ranks", shared.len() as u64)
            .evidence("host", first.host.clone());
            for r in &shared {
                f = f.cite_line(&t.file, r.line);
            }
            Some(f)
        });
    tests.chain(logs).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{on_tests, table, tests};
    use crate::link::LinkInfo;

    #[test]
    fn two_ranks_on_one_gpu_in_a_log() {
        use crate::findings::testing::{log, on_logs};
        let l = log("h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 2000 - Init START\n\
                     h:3:4 [0] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 0 busId 2000 - Init START\n");
        let f = on_logs(check, &[l]);
        assert_eq!(f.len(), 1);
        assert!(f[0]
            .summary
            .starts_with("ranks 0 and 1 run on the same GPU (host h, bus id 2000)"));
        assert_eq!(f[0].cites.len(), 2);
        let warned = log(
            "h:3:4 [1] init.cc:900 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 2000\n",
        );
        assert_eq!(on_logs(check, &[warned]).len(), 1);
        let apart = log("h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 2000 - Init START\n\
                         g:3:4 [0] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 0 busId 2000 - Init START\n");
        assert!(on_logs(check, &[apart]).is_empty());
    }

    #[test]
    fn two_ranks_on_one_gpu() {
        let text = format!(
            "#  Rank  0 Group  0 Pid 1 on lab device 0 [0000:02:00] RTX\n\
             #  Rank  1 Group  0 Pid 2 on lab device 0 [0000:02:00] RTX\n{}",
            table(&[(1 << 20, 1.0, 1.0)])
        );
        let f = on_tests(check, &tests(&text), &LinkInfo::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].evidence["ranks"], 2);
        assert_eq!(f[0].cites.len(), 2);
        let own = "#  Rank  0 Group  0 Pid 1 on lab device 0 [0000:02:00] RTX\n\
                   #  Rank  1 Group  0 Pid 2 on lab device 1 [0000:03:00] RTX\n";
        let f = on_tests(
            check,
            &tests(&format!("{own}{}", table(&[(1 << 20, 1.0, 1.0)]))),
            &LinkInfo::default(),
        );
        assert!(f.is_empty());
    }
}
