//! Which node runs which job: by default one job on every node; the variants `idle-nodes` and `two-jobs`
//! leave nodes idle and split the rest between jobs.
//!
//! - `idle-nodes`: the last `max(1, nodes / 4)` nodes run no job (8 nodes: node-06 and node-07).
//! - `two-jobs`: the nodes left are split into two jobs with one idle node between them, the first job
//!   taking the larger half (8 nodes: job 1001 on node-00..03, node-04 idle, job 1002 on node-05..07; with
//!   `idle-nodes` as well: job 1001 on node-00..02, node-03 idle, job 1002 on node-04..05, node-06..07 idle).
//!
//! Job `j` has the id `1001 + j` (its ranks' `SLURM_JOB_ID`). A job's ranks are numbered from 0 on its own
//! nodes, in node order.

use crate::variant::Variant;

/// The id of the first job; job `j` is `FIRST_JOB_ID + j`.
pub const FIRST_JOB_ID: u32 = 1001;

/// One job's place on the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlacement {
    /// The job's id, `1001`, `1002`, …
    pub id: String,
    /// Its nodes, ascending.
    pub nodes: Vec<usize>,
}

/// Every job's nodes and every node's job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    jobs: Vec<JobPlacement>,
    job_of: Vec<Option<usize>>,
}

impl Placement {
    /// The placement of `nodes` nodes under `variants`. Jobs that would get no node are left out, so a
    /// placement may hold fewer jobs than asked ([`Placement::expected_jobs`]); the spec's validation
    /// refuses that.
    pub fn new(nodes: usize, variants: &[Variant]) -> Placement {
        let idle_tail = if variants.contains(&Variant::IdleNodes) {
            (nodes / 4).max(1)
        } else {
            0
        };
        let usable = nodes.saturating_sub(idle_tail);
        let ranges: Vec<(usize, usize)> = if variants.contains(&Variant::TwoJobs) {
            // One idle node between the jobs; the first job takes the larger half.
            let busy = usable.saturating_sub(1);
            let first = busy.div_ceil(2);
            vec![(0, first), (first + 1, usable.max(first + 1))]
        } else {
            vec![(0, usable)]
        };
        let mut job_of = vec![None; nodes];
        let mut jobs = Vec::new();
        for (from, to) in ranges.into_iter().filter(|(from, to)| from < to) {
            for slot in &mut job_of[from..to] {
                *slot = Some(jobs.len());
            }
            jobs.push(JobPlacement {
                id: (FIRST_JOB_ID + jobs.len() as u32).to_string(),
                nodes: (from..to).collect(),
            });
        }
        Placement { jobs, job_of }
    }

    /// How many jobs `variants` ask for (2 with `two-jobs`, else 1).
    pub fn expected_jobs(variants: &[Variant]) -> usize {
        if variants.contains(&Variant::TwoJobs) {
            2
        } else {
            1
        }
    }

    /// The jobs, in id order.
    pub fn jobs(&self) -> &[JobPlacement] {
        &self.jobs
    }

    /// The index (in [`Placement::jobs`]) of the job `node` runs, `None` for an idle node.
    pub fn job_of(&self, node: usize) -> Option<usize> {
        self.job_of.get(node).copied().flatten()
    }

    /// `node`'s position among its job's nodes (its first rank is this × GPUs per node).
    pub fn index_in_job(&self, node: usize) -> Option<usize> {
        let j = self.job_of(node)?;
        self.jobs[j].nodes.iter().position(|&n| n == node)
    }

    /// The nodes that run no job, ascending.
    pub fn idle_nodes(&self) -> Vec<usize> {
        (0..self.job_of.len())
            .filter(|&n| self.job_of[n].is_none())
            .collect()
    }

    /// The node that carries a fault when none is named: node 3 (the last node with fewer than 4) if it
    /// runs the first job, else the first job's node closest below it (else the first job's last node), so
    /// that the fault sits in the largest ring.
    pub fn default_fault_node(&self) -> usize {
        let nodes = self.job_of.len();
        let candidate = if nodes > 3 {
            3
        } else {
            nodes.saturating_sub(1)
        };
        let Some(first) = self.jobs.first() else {
            return candidate;
        };
        first
            .nodes
            .iter()
            .copied()
            .filter(|&n| n <= candidate)
            .max()
            .or_else(|| first.nodes.last().copied())
            .unwrap_or(candidate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes_of(p: &Placement) -> Vec<Vec<usize>> {
        p.jobs().iter().map(|j| j.nodes.clone()).collect()
    }

    #[test]
    fn one_job_on_every_node_by_default() {
        let p = Placement::new(8, &[]);
        assert_eq!(nodes_of(&p), vec![(0..8).collect::<Vec<_>>()]);
        assert_eq!(p.jobs()[0].id, "1001");
        assert!(p.idle_nodes().is_empty());
        assert_eq!(p.default_fault_node(), 3);
        assert_eq!(Placement::new(2, &[]).default_fault_node(), 1);
    }

    #[test]
    fn idle_nodes_and_two_jobs() {
        let p = Placement::new(8, &[Variant::IdleNodes]);
        assert_eq!(nodes_of(&p), vec![(0..6).collect::<Vec<_>>()]);
        assert_eq!(p.idle_nodes(), vec![6, 7]);
        let p = Placement::new(8, &[Variant::TwoJobs]);
        assert_eq!(nodes_of(&p), vec![vec![0, 1, 2, 3], vec![5, 6, 7]]);
        assert_eq!(p.jobs()[1].id, "1002");
        assert_eq!(p.idle_nodes(), vec![4]);
        assert_eq!((p.job_of(6), p.index_in_job(6)), (Some(1), Some(1)));
        let p = Placement::new(8, &[Variant::TwoJobs, Variant::IdleNodes]);
        assert_eq!(nodes_of(&p), vec![vec![0, 1, 2], vec![4, 5]]);
        assert_eq!(p.idle_nodes(), vec![3, 6, 7]);
        // node 3 is idle: the fault moves to the first job's node closest below it.
        assert_eq!(p.default_fault_node(), 2);
        // 4 nodes: job 1001 on node-00..01, node-02 idle, job 1002 on node-03; the fault stays in job 1001.
        let p = Placement::new(4, &[Variant::TwoJobs]);
        assert_eq!(nodes_of(&p), vec![vec![0, 1], vec![3]]);
        assert_eq!(p.default_fault_node(), 1);
        // Too few nodes: the second job is left out.
        let p = Placement::new(2, &[Variant::TwoJobs]);
        assert_eq!(p.jobs().len(), 1);
        assert_eq!(Placement::expected_jobs(&[Variant::TwoJobs]), 2);
        assert!(Placement::new(1, &[Variant::IdleNodes]).jobs().is_empty());
    }
}
