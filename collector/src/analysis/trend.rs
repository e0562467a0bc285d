//! A job's own recent history: its step time and throughput per GPU over the last minutes, the reference
//! against which `scaling_efficiency_drop` measures a *drop* (what operators asked to be alerted on).
//!
//! The engine [`JobTrends::observe`]s each evaluation's job figures and hands the next evaluation the
//! [`JobReference`]s ([`JobTrends::references`]): per job, the median of what it did between
//! [`HISTORY_S`] and [`RECENT_S`] ago — the recent part is left out so that the present is never its own
//! reference — once at least [`MIN_REFERENCE_S`] of such history exists. Observations are kept one per
//! [`OBSERVE_EVERY_S`] per job, so a fleet's history stays small. A job not observed for [`HISTORY_S`] is
//! forgotten.
//!
//! Like is compared with like: the history is a *segment* of one step source. When a job's steps change
//! source (markers appear or stop, a job falls back to inferred steps) its history starts again. Inferred
//! steps are the step engine's reading of the traffic, and the same traffic can be read as steps of one
//! burst or of several (its period found 3 s, later 5 s); their duration is therefore no measure of the
//! job's speed, and only marker steps are compared by step time. For inferred steps the reference is the
//! work per unit time the links show ([`JobFigures::fabric_bytes_per_second`]), which does not depend on
//! where the step edges fall.

use std::collections::{BTreeMap, VecDeque};

use super::input::JobReference;
use super::median;
use super::scaling::JobFigures;
use crate::steps::StepSource;

/// How far back the reference reaches, seconds.
pub const HISTORY_S: f64 = 900.0;
/// The most recent history left out of the reference (the analysis window), seconds.
pub const RECENT_S: f64 = 20.0;
/// History needed before a reference exists, seconds.
pub const MIN_REFERENCE_S: f64 = 60.0;
/// One observation per job at most this often, seconds.
pub const OBSERVE_EVERY_S: f64 = 5.0;

/// What a job did at one time.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Observation {
    at_s: f64,
    step_time_s: Option<f64>,
    samples_per_second_per_gpu: Option<f64>,
    step_source: Option<StepSource>,
    fabric_bytes_per_second: Option<f64>,
}

/// Every job's recent figures.
#[derive(Debug, Clone, Default)]
pub struct JobTrends {
    jobs: BTreeMap<String, VecDeque<Observation>>,
}

impl JobTrends {
    pub fn new() -> JobTrends {
        JobTrends::default()
    }

    /// Records the figures of one evaluation at `now_s` (seconds, any fixed origin) and forgets what is older
    /// than [`HISTORY_S`].
    pub fn observe(&mut self, figures: &[JobFigures], now_s: f64) {
        for f in figures {
            if f.step_time_s.is_none() && f.samples_per_second_per_gpu.is_none() {
                continue;
            }
            let h = self.jobs.entry(f.job.clone()).or_default();
            // A new step source starts a new segment: its figures are not comparable with the old ones.
            if h.back().is_some_and(|o| o.step_source != f.step_source) {
                h.clear();
            }
            if h.back().is_some_and(|o| now_s - o.at_s < OBSERVE_EVERY_S) {
                continue;
            }
            h.push_back(Observation {
                at_s: now_s,
                step_time_s: f.step_time_s,
                samples_per_second_per_gpu: f.samples_per_second_per_gpu,
                step_source: f.step_source,
                fabric_bytes_per_second: f.fabric_bytes_per_second,
            });
        }
        for h in self.jobs.values_mut() {
            while h.front().is_some_and(|o| now_s - o.at_s > HISTORY_S) {
                h.pop_front();
            }
        }
        self.jobs.retain(|_, h| !h.is_empty());
    }

    /// Each job's reference at `now_s`: the median of its observations from [`HISTORY_S`] to [`RECENT_S`]
    /// ago, when they span at least [`MIN_REFERENCE_S`].
    pub fn references(&self, now_s: f64) -> Vec<JobReference> {
        self.jobs
            .iter()
            .filter_map(|(job, h)| {
                let old: Vec<&Observation> =
                    h.iter().filter(|o| now_s - o.at_s >= RECENT_S).collect();
                let span = match (old.first(), old.last()) {
                    (Some(a), Some(b)) => b.at_s - a.at_s,
                    _ => return None,
                };
                if span < MIN_REFERENCE_S {
                    return None;
                }
                let mut steps: Vec<f64> = old.iter().filter_map(|o| o.step_time_s).collect();
                let mut per_gpu: Vec<f64> = old
                    .iter()
                    .filter_map(|o| o.samples_per_second_per_gpu)
                    .collect();
                let mut rate: Vec<f64> = old
                    .iter()
                    .filter_map(|o| o.fabric_bytes_per_second)
                    .collect();
                Some(JobReference {
                    job: job.clone(),
                    step_time_s: median(&mut steps),
                    samples_per_second_per_gpu: median(&mut per_gpu),
                    over_seconds: span,
                    step_source: old.last().and_then(|o| o.step_source),
                    fabric_bytes_per_second: median(&mut rate),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(job: &str, step_time_s: f64) -> JobFigures {
        JobFigures {
            job: job.into(),
            step_time_s: Some(step_time_s),
            throughput_samples_per_second: None,
            gpus: None,
            samples_per_second_per_gpu: None,
            scaling_efficiency: None,
            method: None,
            baseline: None,
            steps: 30,
            step_source: None,
            fabric_bytes_per_second: None,
        }
    }

    #[test]
    fn the_reference_is_the_older_history_and_needs_a_minute_of_it() {
        let mut t = JobTrends::new();
        for s in 0..=79 {
            t.observe(&[figures("a", 0.31)], f64::from(s));
        }
        // 80 s observed, every 5 s: 0..=55 s are older than 20 s, a span of 55 s — not yet a reference.
        assert!(t.references(79.0).is_empty());
        for s in 80..=100 {
            t.observe(&[figures("a", 0.62)], f64::from(s));
        }
        let r = t.references(100.0);
        assert_eq!(r.len(), 1);
        // 0..=80 s: 16 observations at 0.31 s, one (80 s) at 0.62 s.
        assert_eq!(r[0].step_time_s, Some(0.31));
        assert_eq!(r[0].over_seconds, 80.0);
        assert_eq!(r[0].samples_per_second_per_gpu, None);
    }

    #[test]
    fn old_history_and_silent_jobs_are_forgotten() {
        let mut t = JobTrends::new();
        t.observe(&[figures("a", 0.31)], 0.0);
        t.observe(&[figures("b", 0.5)], HISTORY_S + 1.0);
        assert!(!t.jobs.contains_key("a"));
        assert_eq!(t.jobs["b"].len(), 1);
    }

    #[test]
    fn a_new_step_source_starts_the_history_again() {
        let mut t = JobTrends::new();
        for s in 0..=100 {
            t.observe(&[figures("a", 3.0)], f64::from(s));
        }
        assert_eq!(t.references(100.0).len(), 1);
        let mut markers = figures("a", 0.3);
        markers.step_source = Some(StepSource::Markers);
        t.observe(&[markers], 105.0);
        // The old segment (steps without a source) is gone: no reference until a minute of the new one.
        assert_eq!(t.jobs["a"].len(), 1);
        assert!(t.references(130.0).is_empty());
    }
}
