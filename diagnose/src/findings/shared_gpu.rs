//! Ranks that share one GPU (`Rank 0 … on lab device 0 [0000:02:00]`, `Rank 1 … on lab device 0
//! [0000:02:00]`): the run measures one GPU talking to itself, not the hardware or the network.

use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.tests
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
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{on_tests, table, tests};
    use crate::link::LinkInfo;

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
