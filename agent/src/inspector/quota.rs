//! How many dump files each job may have followed at once: a fair share of the node's bound (pure).
//!
//! Every job gets the same share of [`FollowerSettings::max_files`](super::FollowerSettings::max_files), never
//! more than [`FollowerSettings::max_files_per_job`](super::FollowerSettings::max_files_per_job); what a job
//! does not need goes to the others (max-min fairness). So a job with thousands of files takes at most what
//! the other jobs leave, and a job's new file is followed at the next poll as long as the node runs no more
//! jobs than the node bound.

use std::collections::BTreeMap;

/// Each job's file budget from its demand (files it has now), for a node bound of `node_max` files and a job
/// bound of `job_max`. The budgets sum to at most `node_max`; a job gets its whole demand when the demands
/// fit. Jobs are served smallest demand first; ties and the remainder of an uneven split go by job id.
pub fn shares(
    demand: &BTreeMap<String, usize>,
    node_max: usize,
    job_max: usize,
) -> BTreeMap<String, usize> {
    let mut order: Vec<(&String, usize)> = demand.iter().map(|(j, d)| (j, *d)).collect();
    order.sort_by_key(|(j, d)| (*d, *j));
    let mut left = node_max;
    let mut out = BTreeMap::new();
    let n = order.len();
    for (i, (job, want)) in order.into_iter().enumerate() {
        let fair = left / (n - i);
        let give = want.min(job_max).min(fair);
        left -= give;
        out.insert(job.clone(), give);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(d: &[(&str, usize)]) -> BTreeMap<String, usize> {
        d.iter().map(|(j, n)| (j.to_string(), *n)).collect()
    }

    fn get(s: &BTreeMap<String, usize>, j: &str) -> usize {
        s.get(j).copied().unwrap_or(usize::MAX)
    }

    #[test]
    fn a_large_job_takes_only_what_the_others_leave() {
        let s = shares(&demand(&[("big", 3000), ("small", 2)]), 256, 256);
        assert_eq!((get(&s, "big"), get(&s, "small")), (254, 2));
        let s = shares(&demand(&[("big", 3000), ("small", 2)]), 256, 128);
        assert_eq!((get(&s, "big"), get(&s, "small")), (128, 2));
    }

    #[test]
    fn large_jobs_split_evenly_and_never_exceed_the_node_bound() {
        let s = shares(&demand(&[("a", 500), ("b", 500), ("c", 10)]), 256, 256);
        assert_eq!((get(&s, "a"), get(&s, "b"), get(&s, "c")), (123, 123, 10));
        let s = shares(&demand(&[("a", 5), ("b", 5), ("c", 5)]), 4, 4);
        assert_eq!(
            (get(&s, "a"), get(&s, "b"), get(&s, "c")),
            (1, 1, 2),
            "the remainder goes to the last by id"
        );
        assert!(shares(&BTreeMap::new(), 256, 256).is_empty());
    }

    #[test]
    fn demands_that_fit_are_met() {
        let s = shares(&demand(&[("a", 8), ("b", 16), ("c", 0)]), 256, 64);
        assert_eq!((get(&s, "a"), get(&s, "b"), get(&s, "c")), (8, 16, 0));
    }
}
