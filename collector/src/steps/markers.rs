//! Steps from markers: for each job on one node, step `k`'s edges from the markers of the job's ranks on that
//! node, on the node's agent clock (`received_unix_ns`, the clock of its samples).
//!
//! Per rank, step `k` starts at its `begin` marker, or else at the rank's `end` of step `k − 1`, and ends at its
//! `end` marker. The node's step takes the median start and the median end over its ranks (ranks are aligned by
//! step number, never by clocks). Confidence is 1 when every rank known on the node reported both edges and
//! the ranks agree; it drops with the spread of the ranks' edges (relative to the step's duration) and with the
//! share of ranks missing. Samples are summed over the ranks that gave them.
//!
//! A step is complete when every rank known on the node (seen in the last [`RANK_FORGET_NS`]) has ended it, or
//! when a marker of step `k + 2` or later arrived (a lagging rank is given one step), or when its first end is
//! older than [`LATE_NS`] behind the newest marker. Steps are emitted in step order, each once; markers of a
//! step already emitted are ignored.

use std::collections::{BTreeMap, HashMap};

use commwatch_model::stats::median_i64;

use crate::store::{Marker, StepPhase};

/// A rank not heard from for this long (agent clock) no longer counts as missing.
pub const RANK_FORGET_NS: i64 = 60_000_000_000;
/// A step whose first end marker is this much older than the newest marker is complete, ranks missing or not.
pub const LATE_NS: i64 = 5_000_000_000;
/// Most incomplete steps held per job and node (the oldest is dropped beyond it).
pub const MAX_PENDING_STEPS: usize = 64;

/// The edges of one node's step, found from markers.
#[derive(Debug, Clone, PartialEq)]
pub struct MarkerStep {
    pub job: String,
    pub index: u64,
    pub start_unix_ns: i64,
    pub end_unix_ns: i64,
    /// 0..1, see the module documentation.
    pub confidence: f64,
    /// Sum over the ranks that gave samples; `None` when none did.
    pub samples: Option<u64>,
    /// Ranks whose edges were used.
    pub ranks: usize,
}

#[derive(Debug, Default, Clone, Copy)]
struct RankStep {
    begin: Option<i64>,
    end: Option<i64>,
    samples: Option<u64>,
}

#[derive(Debug, Default)]
struct JobTrack {
    pending: BTreeMap<u64, HashMap<u32, RankStep>>,
    /// Per rank: the last step it ended and when.
    last_end: HashMap<u32, (u64, i64)>,
    /// Per rank: when it was last heard from.
    seen: HashMap<u32, i64>,
    /// Highest step emitted (or given up on).
    done_upto: Option<u64>,
    newest_ns: i64,
}

/// The marker state of one node (all its jobs). Feed markers with [`MarkerTracker::add`] and take completed
/// steps with [`MarkerTracker::complete`].
#[derive(Debug, Default)]
pub struct MarkerTracker {
    jobs: HashMap<String, JobTrack>,
    newest_ns: i64,
}

impl MarkerTracker {
    /// Agent time of the newest marker seen (0 before any).
    pub fn newest_unix_ns(&self) -> i64 {
        self.newest_ns
    }

    pub fn add(&mut self, m: &Marker) {
        self.newest_ns = self.newest_ns.max(m.received_unix_ns);
        let t = self.jobs.entry(m.job.clone()).or_default();
        t.newest_ns = t.newest_ns.max(m.received_unix_ns);
        t.seen.insert(m.rank, m.received_unix_ns);
        if t.done_upto.is_some_and(|d| m.step <= d) {
            return;
        }
        let r = t
            .pending
            .entry(m.step)
            .or_default()
            .entry(m.rank)
            .or_default();
        match m.phase {
            StepPhase::Begin => r.begin = Some(m.received_unix_ns),
            StepPhase::End => {
                r.end = Some(m.received_unix_ns);
                if m.samples.is_some() {
                    r.samples = m.samples;
                }
            }
        }
        while t.pending.len() > MAX_PENDING_STEPS {
            if let Some((k, ranks)) = t.pending.pop_first() {
                for (rank, rs) in ranks {
                    if let Some(e) = rs.end {
                        t.last_end.insert(rank, (k, e));
                    }
                }
                t.done_upto = Some(t.done_upto.map_or(k, |d| d.max(k)));
            }
        }
    }

    /// Removes and returns the steps that are complete, in step order per job (jobs in name order).
    pub fn complete(&mut self) -> Vec<MarkerStep> {
        let mut out = Vec::new();
        let mut jobs: Vec<&String> = self.jobs.keys().collect();
        jobs.sort();
        let jobs: Vec<String> = jobs.into_iter().cloned().collect();
        for job in jobs {
            let Some(t) = self.jobs.get_mut(&job) else {
                continue;
            };
            let newest = t.newest_ns;
            t.seen.retain(|_, seen| newest - *seen <= RANK_FORGET_NS);
            let known: Vec<u32> = t.seen.keys().copied().collect();
            let max_step = t.pending.keys().next_back().copied();
            while let Some((&k, ranks)) = t.pending.first_key_value() {
                let all_ended = known
                    .iter()
                    .all(|r| ranks.get(r).is_some_and(|s| s.end.is_some()));
                let overtaken = max_step.is_some_and(|m| m >= k.saturating_add(2));
                let first_end = ranks.values().filter_map(|s| s.end).min();
                let late = first_end.is_some_and(|e| newest - e > LATE_NS);
                if !(all_ended || overtaken || late) {
                    break;
                }
                let Some((k, ranks)) = t.pending.pop_first() else {
                    break;
                };
                t.done_upto = Some(k);
                let mut starts = Vec::new();
                let mut ends = Vec::new();
                let mut samples: Option<u64> = None;
                for (rank, rs) in &ranks {
                    let Some(end) = rs.end else { continue };
                    let start = rs.begin.or_else(|| {
                        t.last_end
                            .get(rank)
                            .filter(|(step, _)| step.checked_add(1) == Some(k))
                            .map(|&(_, e)| e)
                    });
                    if let Some(s) = rs.samples {
                        samples = Some(samples.unwrap_or(0).saturating_add(s));
                    }
                    if let Some(start) = start.filter(|&s| s < end) {
                        starts.push(start);
                        ends.push(end);
                    }
                }
                for (rank, rs) in &ranks {
                    if let Some(e) = rs.end {
                        t.last_end.insert(*rank, (k, e));
                    }
                }
                if starts.is_empty() {
                    continue;
                }
                let spread = |v: &[i64]| {
                    v.iter().max().copied().unwrap_or(0) - v.iter().min().copied().unwrap_or(0)
                };
                let worst_spread = spread(&starts).max(spread(&ends));
                let used = starts.len();
                let (Some(start), Some(end)) = (median_i64(&mut starts), median_i64(&mut ends))
                else {
                    continue;
                };
                if end <= start {
                    continue;
                }
                let agreement = (1.0 - worst_spread as f64 / (end - start) as f64).clamp(0.0, 1.0);
                let expected = known.len().max(ranks.len()).max(1);
                let present = used as f64 / expected as f64;
                out.push(MarkerStep {
                    job: job.clone(),
                    index: k,
                    start_unix_ns: start,
                    end_unix_ns: end,
                    confidence: (agreement * present).clamp(0.0, 1.0),
                    samples,
                    ranks: used,
                });
            }
        }
        out
    }

    /// The oldest time a step not yet completed may start at (agent clock, Unix ns): its ranks' begin markers,
    /// or the end of the step before it (`None`: no step open).
    pub fn oldest_open_ns(&self) -> Option<i64> {
        self.jobs
            .values()
            .flat_map(|t| {
                let begins = t
                    .pending
                    .values()
                    .flat_map(|r| r.values().filter_map(|s| s.begin));
                let ends = t
                    .last_end
                    .values()
                    .filter(|(step, _)| t.done_upto.is_none_or(|d| *step >= d))
                    .map(|&(_, e)| e);
                begins.chain(ends)
            })
            .min()
    }

    /// Forgets jobs not heard from for [`RANK_FORGET_NS`] before `now_ns` (agent clock).
    pub fn forget_idle(&mut self, now_ns: i64) {
        self.jobs
            .retain(|_, t| now_ns - t.newest_ns <= RANK_FORGET_NS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    fn m(rank: u32, step: u64, phase: StepPhase, t_ms: i64, samples: Option<u64>) -> Marker {
        Marker {
            job: "j".into(),
            rank,
            step,
            phase,
            sent_unix_ns: 0,
            received_unix_ns: 1_000_000 * MS + t_ms * MS,
            samples,
        }
    }

    #[test]
    fn begin_end_markers_of_two_ranks() {
        let mut t = MarkerTracker::default();
        for rank in 0..2u32 {
            let skew = rank as i64 * 2;
            t.add(&m(rank, 5, StepPhase::Begin, skew, None));
            t.add(&m(rank, 5, StepPhase::End, 300 + skew, Some(32)));
        }
        let steps = t.complete();
        assert_eq!(steps.len(), 1);
        let s = &steps[0];
        assert_eq!(s.index, 5);
        assert_eq!(s.start_unix_ns, 1_000_000 * MS + MS);
        assert_eq!(s.end_unix_ns, 1_000_000 * MS + 301 * MS);
        assert_eq!(s.samples, Some(64));
        assert_eq!(s.ranks, 2);
        // 2 ms spread over a 300 ms step.
        assert!((s.confidence - (1.0 - 2.0 / 300.0)).abs() < 1e-9);
        // Late markers of an emitted step change nothing.
        t.add(&m(0, 5, StepPhase::End, 400, None));
        assert!(t.complete().is_empty());
    }

    #[test]
    fn end_only_markers_use_the_previous_end() {
        let mut t = MarkerTracker::default();
        for k in 0..4u64 {
            t.add(&m(0, k, StepPhase::End, 100 + 250 * k as i64, Some(8)));
        }
        let steps = t.complete();
        // Step 0 has no start (no begin, no previous end): dropped.
        assert_eq!(
            steps.iter().map(|s| s.index).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        for s in &steps {
            assert_eq!(s.end_unix_ns - s.start_unix_ns, 250 * MS);
            assert_eq!(s.confidence, 1.0);
        }
    }

    #[test]
    fn missing_rank_waits_then_lowers_confidence() {
        let mut t = MarkerTracker::default();
        // Two ranks known from step 1.
        for rank in 0..2 {
            t.add(&m(rank, 1, StepPhase::Begin, 0, None));
            t.add(&m(rank, 1, StepPhase::End, 100, None));
        }
        assert_eq!(t.complete().len(), 1);
        // Step 2: only rank 0 ends; incomplete while rank 1 may still come.
        t.add(&m(0, 2, StepPhase::Begin, 100, None));
        t.add(&m(0, 2, StepPhase::End, 200, None));
        assert!(t.complete().is_empty());
        // Rank 0 reaches step 4: step 2 is overtaken and emitted with half the ranks.
        t.add(&m(0, 4, StepPhase::Begin, 300, None));
        let steps = t.complete();
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].index, 2);
        assert!((steps[0].confidence - 0.5).abs() < 1e-9);
    }

    #[test]
    fn disagreeing_ranks_lower_confidence() {
        let mut t = MarkerTracker::default();
        t.add(&m(0, 1, StepPhase::Begin, 0, None));
        t.add(&m(0, 1, StepPhase::End, 100, None));
        t.add(&m(1, 1, StepPhase::Begin, 0, None));
        t.add(&m(1, 1, StepPhase::End, 150, None));
        let s = &t.complete()[0];
        // Median end 125 ms; 50 ms spread over 125 ms.
        assert_eq!(s.end_unix_ns - s.start_unix_ns, 125 * MS);
        assert!((s.confidence - (1.0 - 50.0 / 125.0)).abs() < 1e-9);
    }
}
