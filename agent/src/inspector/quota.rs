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

    /// Over many random nodes: never more than the bounds or the demand, and max-min fair — a job that gets
    /// less than it asks for gets at least as much as every other job, minus one (the uneven split).
    #[test]
    fn random_demands_keep_the_bounds_and_are_fair() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(34);
        for _ in 0..2000 {
            let jobs = rng.random_range(0..12);
            let d: BTreeMap<String, usize> = (0..jobs)
                .map(|j| (format!("j{j}"), rng.random_range(0..400)))
                .collect();
            let (node_max, job_max) = (rng.random_range(0..300), rng.random_range(1..200));
            let s = shares(&d, node_max, job_max);
            assert_eq!(s.len(), d.len());
            assert!(s.values().sum::<usize>() <= node_max, "{d:?} {node_max}");
            for (j, got) in &s {
                let want = d[j];
                assert!(*got <= want && *got <= job_max, "{j}: {got} of {want}");
                if *got < want.min(job_max) {
                    assert!(
                        s.values().all(|o| *o <= got + 1),
                        "{d:?} {node_max} {job_max}: {s:?}"
                    );
                }
            }
            let fits = d.values().map(|v| v.min(&job_max)).sum::<usize>() <= node_max;
            if fits {
                assert!(
                    d.iter().all(|(j, v)| s[j] == (*v).min(job_max)),
                    "{d:?}: {s:?}"
                );
            }
        }
    }

    #[test]
    fn demands_that_fit_are_met() {
        let s = shares(&demand(&[("a", 8), ("b", 16), ("c", 0)]), 256, 64);
        assert_eq!((get(&s, "a"), get(&s, "b"), get(&s, "c")), (8, 16, 0));
    }
}
