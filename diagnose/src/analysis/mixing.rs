//! Inputs that must not be read as one: a file holding several runs of the same test (repeats whose results
//! may differ: which one is the baseline?), and traces whose ranks belong to different jobs (their timelines
//! cannot be compared rank against rank).

use serde::Serialize;

use crate::nccl_tests::NcclTest;

/// Groups of runs that repeat one test in one file: the same collective on the same rank count (unknown
/// counts alike). Each group holds indexes into `runs` in file order; only groups of two or more.
pub fn repeated_runs(runs: &[(&str, &NcclTest)]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, (file, test)) in runs.iter().enumerate() {
        let same = |j: &usize| {
            let (f, t) = runs[*j];
            f == *file && t.collective == test.collective && t.nranks() == test.nranks()
        };
        match groups.iter_mut().find(|g| g.first().is_some_and(same)) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups.retain(|g| g.len() > 1);
    groups
}

/// Why traces come from more than one job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixedJobs {
    /// The distinct world sizes the traces give, ascending (more than one: more than one job).
    pub world_sizes: Vec<u32>,
    /// Ranks that more than one trace claims, ascending.
    pub repeated_ranks: Vec<u32>,
}

/// Whether traces, given as (rank, world size), belong to more than one job: their world sizes differ, or
/// two of them are the same rank. `None` when they can be one job.
pub fn trace_jobs(ranks: &[(u32, Option<u32>)]) -> Option<MixedJobs> {
    let mut world_sizes: Vec<u32> = ranks.iter().filter_map(|(_, w)| *w).collect();
    world_sizes.sort_unstable();
    world_sizes.dedup();
    let mut seen: Vec<u32> = ranks.iter().map(|(r, _)| *r).collect();
    seen.sort_unstable();
    let mut repeated_ranks: Vec<u32> = seen
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    repeated_ranks.dedup();
    (world_sizes.len() > 1 || !repeated_ranks.is_empty()).then_some(MixedJobs {
        world_sizes,
        repeated_ranks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl_tests::RankDevice;

    fn run(collective: &str, ranks: u32) -> NcclTest {
        let mut t = NcclTest::new(1);
        t.collective = collective.to_string();
        t.ranks = (0..ranks)
            .map(|rank| RankDevice {
                rank,
                host: format!("h{rank}"),
                device: Some(0),
                bus: None,
                line: 0,
            })
            .collect();
        t
    }

    #[test]
    fn repeats_of_one_test_in_one_file() {
        let (ag, rs, ag4) = (
            run("all_gather_perf", 2),
            run("reduce_scatter_perf", 2),
            run("all_gather_perf", 4),
        );
        let runs = [
            ("a.txt", &ag),
            ("a.txt", &rs),
            ("a.txt", &ag),
            ("a.txt", &ag4),
            ("b.txt", &ag),
        ];
        assert_eq!(repeated_runs(&runs), vec![vec![0, 2]]);
        // Two collectives in one file, or one test in two files, are not repeats.
        assert!(repeated_runs(&runs[..2]).is_empty());
        assert!(repeated_runs(&[("a", &ag), ("b", &ag)]).is_empty());
    }

    #[test]
    fn traces_of_two_jobs() {
        assert_eq!(trace_jobs(&[(0, Some(128)), (1, Some(128))]), None);
        assert_eq!(trace_jobs(&[(0, None), (1, Some(2))]), None);
        assert_eq!(
            trace_jobs(&[(0, Some(2)), (0, Some(128)), (1, Some(128))]),
            Some(MixedJobs {
                world_sizes: vec![2, 128],
                repeated_ranks: vec![0],
            })
        );
        assert_eq!(
            trace_jobs(&[(3, None), (3, None)]).unwrap().repeated_ranks,
            vec![3]
        );
    }
}
