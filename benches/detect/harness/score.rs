//! A run's findings scored: for a fault, when (and whether as a root cause) it was found on its subject and
//! what else alarmed; for a healthy cluster, every alarm.

use std::collections::BTreeMap;
use std::time::Duration;

use commwatch_collector::analysis::{Finding, FindingEvent, Severity};

use super::expect::{Expectation, ALARM};
use super::run::TimedEvent;

/// A finding reaching a severity it did not have: raised at it, or changed up to it.
#[derive(Debug, Clone)]
pub struct Alarm {
    pub at: Duration,
    pub finding: Finding,
    /// The severity it reached (`ALARM` or above).
    pub severity: Severity,
}

/// Every time a finding became an alarm (warning or critical) or went from warning to critical.
pub fn alarms(events: &[TimedEvent]) -> Vec<Alarm> {
    let mut out = Vec::new();
    for e in events {
        let (f, was) = match &e.event {
            FindingEvent::Raised(f) => (f, None),
            FindingEvent::Changed {
                finding,
                severity_was,
                ..
            } => (finding, Some(*severity_was)),
            FindingEvent::Cleared(_) => continue,
        };
        let rose = was.is_none_or(|w| f.severity > w);
        if f.severity >= ALARM && rose {
            out.push(Alarm {
                at: e.at,
                finding: f.clone(),
                severity: f.severity,
            });
        }
    }
    out
}

/// How one fault run went.
#[derive(Debug, Clone, Default)]
pub struct FaultScore {
    /// When the fault was first found (an alarm on its subject), model time from its start.
    pub found_at: Option<Duration>,
    /// That finding's kind, and whether it was a root cause when raised.
    pub found_kind: Option<&'static str>,
    pub found_root: bool,
    /// When a finding on its subject was first raised at any severity.
    pub seen_at: Option<Duration>,
    /// Other root-cause alarms, by kind.
    pub other: BTreeMap<String, u32>,
}

/// Scores a fault run.
pub fn score_fault(expect: &Expectation, events: &[TimedEvent]) -> FaultScore {
    let mut s = FaultScore::default();
    for e in events {
        if let FindingEvent::Raised(f) = &e.event {
            if expect.matches(f) && s.seen_at.is_none() {
                s.seen_at = Some(e.at);
            }
        }
    }
    for a in alarms(events) {
        if expect.matches(&a.finding) {
            if s.found_at.is_none() {
                s.found_at = Some(a.at);
                s.found_kind = Some(a.finding.kind.as_str());
                s.found_root = a.finding.root;
            }
        } else if a.finding.root {
            *s.other
                .entry(a.finding.kind.as_str().to_string())
                .or_default() += 1;
        }
    }
    s
}

/// Alarms of a healthy run, by kind: findings raised at (or changed up to) warning, and to critical.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HealthyScore {
    pub warnings: BTreeMap<String, u32>,
    pub criticals: BTreeMap<String, u32>,
    /// The first alarm: `id (severity, at t s): summary`.
    pub first: Option<String>,
}

/// Scores a healthy run: every alarm counts.
pub fn score_healthy(events: &[TimedEvent]) -> HealthyScore {
    let mut s = HealthyScore::default();
    for a in alarms(events) {
        if s.first.is_none() {
            s.first = Some(format!(
                "{} ({}, at {:.0} s): {}",
                a.finding.id,
                a.severity.as_str(),
                a.at.as_secs_f64(),
                a.finding.summary
            ));
        }
        let kind = a.finding.kind.as_str().to_string();
        let map = if a.severity == Severity::Critical {
            &mut s.criticals
        } else {
            &mut s.warnings
        };
        *map.entry(kind).or_default() += 1;
    }
    s
}
