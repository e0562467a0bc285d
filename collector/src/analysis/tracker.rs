//! Hysteresis: candidates become findings, findings clear, without flapping.
//!
//! - A candidate id must be seen in [`RAISE_AFTER`] consecutive evaluations before its finding is raised
//!   (with the default 1 s evaluation period and 20 s windows, a rule already looked at many steps).
//! - An active finding clears after [`CLEAR_AFTER`] consecutive evaluations without its candidate; seen again
//!   before that, the count starts over.
//! - While active, each evaluation refreshes its summary, evidence, severity and links and `last_seen`.
//! - A cleared finding stays in the list (`active = false`, history); raised again, it keeps `first_seen`
//!   and is counted again in `raised_total`.

use std::collections::{BTreeMap, HashMap};

use super::{Candidate, Finding, Kind};

/// Consecutive evaluations a candidate needs before it is raised.
pub const RAISE_AFTER: u32 = 3;
/// Consecutive evaluations without it before an active finding clears.
pub const CLEAR_AFTER: u32 = 5;
/// Inactive findings kept in memory (oldest dropped first; the SQLite history keeps all).
pub const MAX_INACTIVE: usize = 1000;

/// What changed in one evaluation.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Raised(Finding),
    Cleared(Finding),
    /// Active and seen again (numbers refreshed).
    Updated(Finding),
}

#[derive(Debug, Default)]
struct Pending {
    seen: u32,
}

/// The findings and the counters of candidates not yet raised / findings not yet cleared.
#[derive(Debug, Default)]
pub struct Tracker {
    findings: BTreeMap<String, Finding>,
    pending: HashMap<String, Pending>,
    /// Evaluations in a row an active finding was missing.
    missing: HashMap<String, u32>,
    raised_total: BTreeMap<Kind, u64>,
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// Seeds with findings from history (as inactive unless `keep_active`); raised counters start at 0.
    pub fn restore(&mut self, findings: Vec<Finding>) {
        for f in findings {
            self.findings.insert(f.id.clone(), f);
        }
    }

    /// Applies one evaluation's candidates at `now_unix_s`.
    pub fn update(&mut self, now_unix_s: f64, candidates: Vec<Candidate>) -> Vec<Change> {
        let mut changes = Vec::new();
        // A set: a fleet's evaluation has tens of thousands of candidates, and both filters below ask it once
        // per pending or known finding.
        let mut seen_ids: std::collections::HashSet<String> =
            std::collections::HashSet::with_capacity(candidates.len());
        for c in candidates {
            let id = c.id();
            seen_ids.insert(id.clone());
            let active = self.findings.get(&id).is_some_and(|f| f.active);
            if active {
                self.missing.remove(&id);
                if let Some(f) = self.findings.get_mut(&id) {
                    refresh(f, c, now_unix_s);
                    changes.push(Change::Updated(f.clone()));
                }
                continue;
            }
            let p = self.pending.entry(id.clone()).or_default();
            p.seen += 1;
            if p.seen < RAISE_AFTER {
                continue;
            }
            self.pending.remove(&id);
            let first = self
                .findings
                .get(&id)
                .map_or(now_unix_s, |f| f.first_seen_unix_s);
            let f = Finding {
                id: id.clone(),
                kind: c.kind,
                severity: c.severity,
                subject: c.subject,
                summary: c.summary,
                evidence: c.evidence,
                action: c.action,
                first_seen_unix_s: first,
                last_seen_unix_s: now_unix_s,
                active: true,
                caused_by: c.caused_by,
                consequences: c.consequences,
            };
            *self.raised_total.entry(f.kind).or_insert(0) += 1;
            self.findings.insert(id, f.clone());
            changes.push(Change::Raised(f));
        }
        // Candidates not seen this time lose their streak.
        self.pending.retain(|id, _| seen_ids.contains(id));
        let absent: Vec<String> = self
            .findings
            .values()
            .filter(|f| f.active && !seen_ids.contains(&f.id))
            .map(|f| f.id.clone())
            .collect();
        for id in absent {
            let n = self.missing.entry(id.clone()).or_insert(0);
            *n += 1;
            if *n >= CLEAR_AFTER {
                self.missing.remove(&id);
                if let Some(f) = self.findings.get_mut(&id) {
                    f.active = false;
                    changes.push(Change::Cleared(f.clone()));
                }
            }
        }
        self.trim();
        changes
    }

    fn trim(&mut self) {
        let inactive = self.findings.values().filter(|f| !f.active).count();
        if inactive <= MAX_INACTIVE {
            return;
        }
        let mut old: Vec<(f64, String)> = self
            .findings
            .values()
            .filter(|f| !f.active)
            .map(|f| (f.last_seen_unix_s, f.id.clone()))
            .collect();
        old.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
        for (_, id) in old.into_iter().take(inactive - MAX_INACTIVE) {
            self.findings.remove(&id);
        }
    }

    /// Every finding (active and cleared), sorted by id.
    pub fn findings(&self) -> Vec<Finding> {
        self.findings.values().cloned().collect()
    }

    pub fn active(&self) -> Vec<Finding> {
        self.findings
            .values()
            .filter(|f| f.active)
            .cloned()
            .collect()
    }

    /// Findings raised since start, per kind.
    pub fn raised_total(&self) -> &BTreeMap<Kind, u64> {
        &self.raised_total
    }
}

fn refresh(f: &mut Finding, c: Candidate, now_unix_s: f64) {
    f.severity = c.severity;
    f.subject = c.subject;
    f.summary = c.summary;
    f.evidence = c.evidence;
    f.action = c.action;
    f.caused_by = c.caused_by;
    f.consequences = c.consequences;
    f.last_seen_unix_s = now_unix_s;
}

#[cfg(test)]
mod tests {
    use super::super::{Severity, Subject};
    use super::*;

    fn cand() -> Candidate {
        let mut c = Candidate::new(Kind::LinkErrors, Severity::Warning, Subject::node("n1"));
        c.summary = "x".into();
        c
    }

    #[test]
    fn raise_after_three_clear_after_five_no_flapping() {
        let mut t = Tracker::new();
        assert!(t.update(1.0, vec![cand()]).is_empty());
        assert!(t.update(2.0, vec![cand()]).is_empty());
        let ch = t.update(3.0, vec![cand()]);
        assert!(matches!(&ch[..], [Change::Raised(f)] if f.first_seen_unix_s == 3.0 && f.active));
        // Flapping input: absent 4 times, present once, absent 4 times: stays active.
        for i in 0..4 {
            assert!(t.update(4.0 + i as f64, vec![]).is_empty());
        }
        assert!(matches!(
            &t.update(8.0, vec![cand()])[..],
            [Change::Updated(_)]
        ));
        for i in 0..4 {
            assert!(t.update(9.0 + i as f64, vec![]).is_empty());
        }
        assert_eq!(t.active().len(), 1);
        let ch = t.update(13.0, vec![]);
        assert!(matches!(&ch[..], [Change::Cleared(f)] if !f.active && f.last_seen_unix_s == 8.0));
        assert_eq!(t.raised_total().get(&Kind::LinkErrors), Some(&1));
        // A broken streak does not raise: present, absent, present, present.
        t.update(14.0, vec![cand()]);
        t.update(15.0, vec![]);
        t.update(16.0, vec![cand()]);
        assert!(t.update(17.0, vec![cand()]).is_empty());
        let ch = t.update(18.0, vec![cand()]);
        assert!(matches!(&ch[..], [Change::Raised(f)] if f.first_seen_unix_s == 3.0));
        assert_eq!(t.raised_total().get(&Kind::LinkErrors), Some(&2));
    }
}
