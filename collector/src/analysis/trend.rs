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
//! **Earlier runs of the same shape.** A job that starts slow has no history of its own to drop against; a
//! rerun of a training job gets a new job id. When a job is no longer observed for [`RUN_ENDED_S`], its
//! history becomes a *run* of its shape ([`JobFigures::shape`]: ranks and nodes), kept [`RUNS_KEPT_S`]. A job
//! whose own reference does not exist yet is compared with the newest earlier run of its shape and step source
//! that spans at least [`MIN_RUN_S`] (its `earlier_run` names that run's job).
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
/// A job unobserved this long has ended: its history becomes a run of its shape, seconds.
pub const RUN_ENDED_S: f64 = 15.0;
/// How long runs are kept, seconds.
pub const RUNS_KEPT_S: f64 = 86_400.0;
/// Shortest run a later job of its shape is compared with, seconds of observations.
pub const MIN_RUN_S: f64 = 10.0;
/// Runs kept per shape (the newest).
pub const RUNS_PER_SHAPE: usize = 8;

/// What a job did at one time.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Observation {
    at_s: f64,
    step_time_s: Option<f64>,
    samples_per_second_per_gpu: Option<f64>,
    step_source: Option<StepSource>,
    fabric_bytes_per_second: Option<f64>,
}

/// A finished run of a job: its shape and its history's reference.
#[derive(Debug, Clone, PartialEq)]
struct Run {
    ended_at_s: f64,
    reference: JobReference,
}

/// Every job's recent figures, and earlier runs by shape.
#[derive(Debug, Clone)]
pub struct JobTrends {
    jobs: BTreeMap<String, VecDeque<Observation>>,
    /// Each observed job's shape, when known.
    shapes: BTreeMap<String, String>,
    /// Finished runs by shape, oldest first.
    runs: BTreeMap<String, VecDeque<Run>>,
    /// Lower bounds, seconds, of every job's newest observation, of every job's oldest, and of every run's
    /// end (infinite when there is none): an observation of one scope's jobs walks every job's history and
    /// every shape's runs only when one may have ended or aged out (the walks, at each scope's evaluation,
    /// were a pass over the fleet's jobs per scope).
    newest_from: f64,
    oldest_from: f64,
    runs_from: f64,
}

impl Default for JobTrends {
    fn default() -> JobTrends {
        JobTrends {
            jobs: BTreeMap::new(),
            shapes: BTreeMap::new(),
            runs: BTreeMap::new(),
            newest_from: f64::INFINITY,
            oldest_from: f64::INFINITY,
            runs_from: f64::INFINITY,
        }
    }
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
            // Mostly a job observed before, of the same shape: nothing copied.
            if let Some(shape) = &f.shape {
                match self.shapes.get_mut(&f.job) {
                    Some(s) if s == shape => {}
                    Some(s) => s.clone_from(shape),
                    None => {
                        self.shapes.insert(f.job.clone(), shape.clone());
                    }
                }
            }
            let h = match self.jobs.get_mut(&f.job) {
                Some(h) => h,
                None => self.jobs.entry(f.job.clone()).or_default(),
            };
            // A new step source starts a new segment: its figures are not comparable with the old ones.
            if h.back().is_some_and(|o| o.step_source != f.step_source) {
                h.clear();
            }
            if h.back().is_some_and(|o| now_s - o.at_s < OBSERVE_EVERY_S) {
                continue;
            }
            if h.is_empty() {
                self.oldest_from = self.oldest_from.min(now_s);
            }
            self.newest_from = self.newest_from.min(now_s);
            h.push_back(Observation {
                at_s: now_s,
                step_time_s: f.step_time_s,
                samples_per_second_per_gpu: f.samples_per_second_per_gpu,
                step_source: f.step_source,
                fabric_bytes_per_second: f.fabric_bytes_per_second,
            });
        }
        self.end_runs(now_s);
        // No job's oldest observation can be too old: nothing to forget (nor any history emptied).
        if now_s - self.oldest_from <= HISTORY_S {
            return;
        }
        for h in self.jobs.values_mut() {
            while h.front().is_some_and(|o| now_s - o.at_s > HISTORY_S) {
                h.pop_front();
            }
        }
        self.jobs.retain(|_, h| !h.is_empty());
        self.oldest_from = lowest(self.jobs.values().filter_map(|h| h.front()).map(|o| o.at_s));
    }

    /// Files the history of every job unobserved for [`RUN_ENDED_S`] as a run of its shape, and forgets runs
    /// older than [`RUNS_KEPT_S`].
    fn end_runs(&mut self, now_s: f64) {
        // No job's newest observation can be old enough to end its run: none ended.
        if now_s - self.newest_from < RUN_ENDED_S {
            return self.forget_runs(now_s);
        }
        let ended: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, h)| h.back().is_some_and(|o| now_s - o.at_s >= RUN_ENDED_S))
            .map(|(j, _)| j.clone())
            .collect();
        for job in ended {
            let (Some(h), shape) = (self.jobs.remove(&job), self.shapes.remove(&job)) else {
                continue;
            };
            let Some(shape) = shape else {
                continue;
            };
            let all: Vec<&Observation> = h.iter().collect();
            if let Some(reference) = reference_of(&job, &all) {
                let runs = self.runs.entry(shape).or_default();
                let ended_at_s = h.back().map_or(now_s, |o| o.at_s);
                self.runs_from = self.runs_from.min(ended_at_s);
                runs.push_back(Run {
                    ended_at_s,
                    reference,
                });
                if runs.len() > RUNS_PER_SHAPE {
                    runs.pop_front();
                }
            }
        }
        self.newest_from = lowest(self.jobs.values().filter_map(|h| h.back()).map(|o| o.at_s));
        self.forget_runs(now_s);
    }

    /// Forgets runs older than [`RUNS_KEPT_S`].
    fn forget_runs(&mut self, now_s: f64) {
        if now_s - self.runs_from <= RUNS_KEPT_S {
            return;
        }
        for runs in self.runs.values_mut() {
            runs.retain(|r| now_s - r.ended_at_s <= RUNS_KEPT_S);
        }
        self.runs.retain(|_, r| !r.is_empty());
        self.runs_from = lowest(self.runs.values().flatten().map(|r| r.ended_at_s));
    }

    /// The newest earlier run of `job`'s shape and step source, as `job`'s reference.
    fn earlier_run(&self, job: &str, source: Option<StepSource>) -> Option<JobReference> {
        let shape = self.shapes.get(job)?;
        let run = self.runs.get(shape)?.iter().rev().find(|r| {
            r.reference.job != job
                && r.reference.step_source == source
                && r.reference.over_seconds >= MIN_RUN_S
        })?;
        Some(JobReference {
            job: job.to_string(),
            earlier_run: Some(run.reference.job.clone()),
            ..run.reference.clone()
        })
    }

    /// Each job's reference at `now_s`: the median of its observations from [`HISTORY_S`] to [`RECENT_S`]
    /// ago, when they span at least [`MIN_REFERENCE_S`]; else the newest earlier run of its shape.
    pub fn references(&self, now_s: f64) -> Vec<JobReference> {
        self.jobs
            .iter()
            .filter_map(|(job, h)| {
                let old: Vec<&Observation> =
                    h.iter().filter(|o| now_s - o.at_s >= RECENT_S).collect();
                let own = reference_of(job, &old).filter(|r| r.over_seconds >= MIN_REFERENCE_S);
                own.or_else(|| self.earlier_run(job, h.back().and_then(|o| o.step_source)))
            })
            .collect()
    }
}

/// The lowest of `times`, seconds (infinite for none; a NaN is passed over, and never compares as old).
fn lowest(times: impl Iterator<Item = f64>) -> f64 {
    times.fold(f64::INFINITY, f64::min)
}

/// The medians of `observations` (oldest first) as `job`'s reference; `None` without two of them.
fn reference_of(job: &str, observations: &[&Observation]) -> Option<JobReference> {
    let span = match (observations.first(), observations.last()) {
        (Some(a), Some(b)) if observations.len() >= 2 => b.at_s - a.at_s,
        _ => return None,
    };
    let mut steps: Vec<f64> = observations.iter().filter_map(|o| o.step_time_s).collect();
    let mut per_gpu: Vec<f64> = observations
        .iter()
        .filter_map(|o| o.samples_per_second_per_gpu)
        .collect();
    let mut rate: Vec<f64> = observations
        .iter()
        .filter_map(|o| o.fabric_bytes_per_second)
        .collect();
    Some(JobReference {
        job: job.to_string(),
        step_time_s: median(&mut steps),
        samples_per_second_per_gpu: median(&mut per_gpu),
        over_seconds: span,
        step_source: observations.last().and_then(|o| o.step_source),
        fabric_bytes_per_second: median(&mut rate),
        earlier_run: None,
    })
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
            shape: None,
        }
    }

    /// What `t` holds, in full (the walks' bounds left out).
    fn held(t: &JobTrends) -> String {
        format!("{:?} {:?} {:?}", t.jobs, t.shapes, t.runs)
    }

    #[test]
    fn observing_without_the_walks_the_bounds_rule_out_changes_nothing() {
        // Two trends fed the same figures: one walks every job's history and runs at every observation (its
        // bounds made to allow anything), the other as the bounds say. Jobs of three shapes observed in
        // scopes of one or two, with gaps that end runs, step sources that change, and clock jumps past the
        // history's and the runs' spans.
        let (mut walked, mut bounded) = (JobTrends::new(), JobTrends::new());
        let mut seed: u64 = 7;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        let mut now = 0.0;
        for k in 0..6000 {
            now += match next(200) {
                0 => 1_000.0,
                1 => RUNS_KEPT_S / 3.0,
                2 => RUN_ENDED_S,
                _ => 0.5 + next(3) as f64,
            };
            let jobs: Vec<u64> = (0..1 + next(2)).map(|_| next(12)).collect();
            let mut figs = Vec::new();
            for j in jobs {
                if next(4) == 0 && k % 7 == 0 {
                    continue;
                }
                let mut f = figures(&format!("job-{j}"), 0.5 + next(5) as f64 / 10.0);
                f.shape = (next(10) > 0).then(|| format!("{} ranks", 8 << (j % 3)));
                let sources = [Some(StepSource::Markers), Some(StepSource::Inferred), None];
                f.step_source = sources[((j + k / 400) % 3) as usize];
                f.samples_per_second_per_gpu = (next(2) == 0).then_some(100.0);
                figs.push(f);
            }
            let figures = figs;
            let any = f64::NEG_INFINITY;
            (walked.newest_from, walked.oldest_from, walked.runs_from) = (any, any, any);
            walked.observe(&figures, now);
            bounded.observe(&figures, now);
            assert_eq!(held(&walked), held(&bounded), "at {now} s");
            assert_eq!(
                walked.references(now),
                bounded.references(now),
                "at {now} s"
            );
        }
        assert!(
            walked.runs.values().map(VecDeque::len).sum::<usize>() > 0,
            "no runs kept at the end"
        );
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

    #[test]
    fn a_rerun_of_the_same_shape_is_compared_with_the_earlier_run() {
        let run = |job: &str, rate: f64| JobFigures {
            step_source: Some(StepSource::Inferred),
            fabric_bytes_per_second: Some(rate),
            shape: Some("8 ranks on 2 nodes".into()),
            ..figures(job, 0.6)
        };
        let mut t = JobTrends::new();
        for s in 0..=40 {
            t.observe(&[run("run-1", 4e8)], f64::from(s));
        }
        // run-2 starts after run-1 ended; its own history is too short, run-1 stands in for it.
        for s in 60..=70 {
            t.observe(&[run("run-2", 1e8)], f64::from(s));
        }
        let r = t.references(70.0);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].job, "run-2");
        assert_eq!(r[0].earlier_run.as_deref(), Some("run-1"));
        assert_eq!(r[0].fabric_bytes_per_second, Some(4e8));
        assert_eq!(r[0].over_seconds, 40.0);
        // Another shape, or another step source, is not compared.
        let mut other = run("run-3", 1e8);
        other.shape = Some("16 ranks on 4 nodes".into());
        let mut markers = run("run-4", 1e8);
        markers.step_source = Some(StepSource::Markers);
        t.observe(&[run("run-2", 1e8), other, markers], 71.0);
        let jobs: Vec<String> = t.references(71.0).into_iter().map(|r| r.job).collect();
        assert_eq!(jobs, ["run-2"]);
    }
}
