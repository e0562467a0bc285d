//! Hysteresis: candidates become findings, findings clear, without flapping.
//!
//! Raising and clearing are measured in wall time, so that their meaning does not change when the evaluation
//! period stretches under load ([`crate::pace`]). Each evaluation looks at what happened since the previous
//! one, so a sighting at time `t` vouches for the interval that ends at `t`:
//! - A candidate id is raised once it was seen in consecutive evaluations covering at least [`RAISE_AFTER`]
//!   intervals of wall time — `latest − first sighting + interval ≥ RAISE_AFTER × interval` — and in at least
//!   [`RAISE_AFTER`] evaluations. At the nominal pace that is its [`RAISE_AFTER`]-th sighting; under load, when
//!   evaluations are farther apart, the evaluation count still holds (no finding from fewer looks); evaluations
//!   closer together than the interval (a test, an extra evaluation) cannot raise it sooner. A candidate
//!   may ask for fewer ([`Candidate::raise_after`], at least 1): a rule whose evidence cannot flicker across
//!   its line — a counted error increase stays in the window once it is there — gains nothing from the
//!   streak but its delay. Clearing is the same for every candidate.
//! - An active finding clears once it has been missing for at least [`CLEAR_AFTER`] intervals since it was
//!   last seen (`now − last_seen ≥ CLEAR_AFTER × interval`) and from at least [`CLEAR_AFTER`] evaluations in a
//!   row; seen again before that, both counts start over.
//! - Clock reads jitter by a few milliseconds: a span counts as reached within [`SLACK`] of an interval.
//! - A consequence (a candidate whose `caused_by` names another candidate) is never raised before its cause:
//!   once its own streak is long enough it waits, still counting, until the cause is active, and is raised
//!   in the same evaluation right after it. Causes are applied first, so the raises come out in that order.
//! - A finding's `caused_by` names an active finding or nothing: a candidate whose cause is not a finding is a
//!   root cause at its rule's severity; one filed under a cause is lowered to
//!   [`super::causes::consequence_severity`] and stays under it while the cause is active, even through an
//!   evaluation that did not link them (the links have the findings' hysteresis).
//! - While active, each evaluation refreshes its summary, evidence, severity, cause and `last_seen`; its
//!   `consequences` are the active findings that name it as their cause.
//! - A cleared finding stays in the list (`active = false`, history); raised again, it keeps `first_seen`
//!   and is counted again in `raised_total`.
//!
//! Cost: every active finding is refreshed at each evaluation of its scope, so the findings are held shared
//! (`Arc`) and a refresh ([`Change::Updated`]) shares the finding instead of copying it (a copy of every
//! active finding per evaluation was a fifth of the tracker's time); a finding is copied only when it
//! changes while a reader (an event, the history's writer) still holds it. Candidates come with their ids
//! ([`Tracker::update_keyed`]), formatted once per evaluation ([`super::evaluate_keyed`]), and may come with
//! their words unwritten ([`Candidate::words`]): a pending candidate's are never written, a raised one's
//! are, and a refresh with other figures keeps the figures and leaves the words to be written when the finding
//! is read — published by the engine ([`Tracker::written`]), listed ([`Tracker::findings`]) or cleared —, not
//! at each refresh: a [`Change::Updated`]'s summary and evidence may lag its figures until then.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::causes::consequence_severity;
use super::{Candidate, Finding, FindingKind, Severity, Words};

/// The tracker's maps, by finding id or scope label, hashed with foldhash (seeded at random per map). SipHash
/// hashing and comparing these ids was a tenth of the analysis thread, several look-ups per candidate; the
/// ids are our own (`kind:node:device:port…`), but a node's name and a job's id in them come from the wire
/// and from whoever runs a training job, so the hasher keeps a random seed: colliding ids cannot be made in
/// advance, which an unseeded hasher (FxHash) would allow.
type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// A set of ids hashed as [`Map`].
type Set<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

/// Intervals (and at least as many evaluations) a candidate must be seen for before it is raised, unless
/// it asks for fewer ([`Candidate::raise_after`]).
pub const RAISE_AFTER: u32 = 3;
/// Intervals (and at least as many evaluations in a row) an active finding must be missing before it clears.
pub const CLEAR_AFTER: u32 = 5;
/// Share of one interval by which a span may fall short and still count (clock-read jitter).
pub const SLACK: f64 = 0.05;
/// Inactive findings kept in memory (oldest dropped first; the SQLite history keeps all).
pub const MAX_INACTIVE: usize = 1000;

/// What changed in one evaluation, with the finding as it was then.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Raised(Finding),
    Cleared(Finding),
    /// Active and seen again (numbers refreshed): the finding shared with the tracker, not copied (every
    /// active finding is refreshed at each evaluation of its scope; raises and clears are rare). Its summary
    /// and evidence may lag its figures: [`Tracker::written`] gives it as published.
    Updated(Arc<Finding>),
}

/// A finding and the figures of its summary and evidence ([`Candidate::words`]; `None`: written by its rule):
/// a refresh with the same figures (and subject) keeps them as they are; one with other figures keeps the
/// figures and leaves the words to be written when the finding is read ([`Tracked::lagging`]).
#[derive(Debug)]
struct Tracked {
    finding: Arc<Finding>,
    words: Option<Box<Words>>,
    /// The finding's summary and evidence are not written from `words` yet (its figures changed since they
    /// were): written when the finding is read ([`Tracker::written`], [`Tracker::findings`], a clear), not at
    /// each refresh — most refreshes are never published, and the words were a third of the tracker's time.
    lagging: bool,
    /// The rule's fixed text the finding's `action` was last set from or compared equal to (`None`: other
    /// text, or not known).
    advice: Option<&'static str>,
    /// What the engine last published of the finding ([`Tracker::published_mut`]; `None`: nothing, or it
    /// cleared since).
    published: Option<Published>,
}

/// What was last published of an active finding (to publish its changes) and when it was last handed to the
/// history (the engine's events keep it). Kept beside the finding, not in a map of the engine's own: each
/// evaluation's changes are the findings its update just read, so their entries are in cache, where a map
/// of its own was a cold look-up per change (1.8 % of the analysis thread at 2,000 demo nodes, issue 35).
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    pub severity: Severity,
    pub caused_by: Option<String>,
    /// When it was last handed to the history.
    pub written: Instant,
}

impl Published {
    /// What is published of `f`, handed to the history at `written`.
    pub fn of(f: &Finding, written: Instant) -> Published {
        Published {
            severity: f.severity,
            caused_by: f.caused_by.clone(),
            written,
        }
    }
}

impl Tracked {
    /// The finding as published: its summary and evidence written from its latest figures.
    fn published(&self) -> Finding {
        let mut f = Finding::clone(&self.finding);
        if let Some(w) = self.words.as_ref().filter(|_| self.lagging) {
            f.evidence = w.write(&f.subject, &mut f.summary);
        }
        f
    }

    /// Writes the finding's summary and evidence from its latest figures, when they lag (copying the finding
    /// only while a reader still shares it).
    fn write_words(&mut self) {
        if !std::mem::take(&mut self.lagging) {
            return;
        }
        if let Some(w) = &self.words {
            let f = Arc::make_mut(&mut self.finding);
            f.evidence = w.write(&f.subject, &mut f.summary);
        }
    }
}

impl std::ops::Deref for Tracked {
    type Target = Finding;

    fn deref(&self) -> &Finding {
        &self.finding
    }
}

/// The causes among active findings: what [`Tracker::relink`] rewrites their `consequences` from.
struct Links {
    /// (cause, consequence) as places in the active findings (sorted by id: a cause is found by a binary
    /// search), by cause, then consequence: each cause's list in id order.
    links: Vec<(usize, usize)>,
    /// Which findings list consequences now: one that lists none and gets none is not looked up again (most
    /// findings explain nothing).
    listing: Vec<bool>,
}

impl Links {
    /// The links among `active` (active findings sorted by id); nothing copied.
    fn of(active: &[&Tracked]) -> Links {
        let mut links: Vec<(usize, usize)> = Vec::new();
        let listing = active.iter().map(|f| !f.consequences.is_empty()).collect();
        for (k, f) in active.iter().enumerate() {
            let Some(cause) = f.caused_by.as_deref() else {
                continue;
            };
            if let Ok(j) = active.binary_search_by(|a| a.id.as_str().cmp(cause)) {
                links.push((j, k));
            }
        }
        links.sort_unstable();
        Links { links, listing }
    }
}

/// A candidate not raised yet: its current streak of sightings.
#[derive(Debug)]
struct Pending {
    seen: u32,
    first_unix_s: f64,
}

/// The findings and the streaks of candidates not yet raised / findings not yet cleared.
#[derive(Debug)]
pub struct Tracker {
    /// The nominal evaluation period, seconds.
    interval_s: f64,
    /// By id: hashed, not ordered (an ordered map's search compared ids of long common prefixes a few dozen
    /// times per look-up, several look-ups per candidate); listed in id order where order matters.
    findings: Map<String, Tracked>,
    pending: Map<String, Pending>,
    /// Evaluations in a row an active finding was missing.
    missing: Map<String, u32>,
    raised_total: BTreeMap<FindingKind, u64>,
    /// For evaluations by scope ([`Tracker::update_scope`]): the ids each scope label last produced (pending
    /// or active), and the label of each such id.
    scopes: Map<String, BTreeSet<String>>,
    scope_of: Map<String, String>,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker::new()
    }
}

impl Tracker {
    /// A tracker for evaluations every [`super::DEFAULT_INTERVAL`].
    pub fn new() -> Tracker {
        Tracker::with_interval(super::DEFAULT_INTERVAL)
    }

    /// A tracker for evaluations every `interval` (the nominal period, before any stretching under load).
    pub fn with_interval(interval: Duration) -> Tracker {
        Tracker {
            interval_s: interval.as_secs_f64(),
            findings: Map::default(),
            pending: Map::default(),
            missing: Map::default(),
            raised_total: BTreeMap::new(),
            scopes: Map::default(),
            scope_of: Map::default(),
        }
    }

    /// Whether `span_s` seconds cover `n` intervals (within [`SLACK`]).
    fn covers(&self, span_s: f64, n: u32) -> bool {
        span_s >= (f64::from(n) - SLACK) * self.interval_s
    }

    /// Seeds with findings from history (they come back as history wrote them: inactive after a restart);
    /// raised counters start at 0.
    /// `root` is derived again from `caused_by` (records written before it existed lack it).
    pub fn restore(&mut self, findings: Vec<Finding>) {
        for mut f in findings {
            f.root = f.caused_by.is_none();
            let finding = Arc::new(f);
            let (words, advice) = (None, None);
            self.findings.insert(
                finding.id.clone(),
                Tracked {
                    finding,
                    words,
                    lagging: false,
                    advice,
                    published: None,
                },
            );
        }
    }

    /// Applies one evaluation's candidates at `now_unix_s`. Causes are applied before their consequences, so
    /// a cause raised now comes before the consequences raised with it; a consequence whose cause is among the
    /// candidates but not active waits (its streak goes on) and is raised right after its cause.
    pub fn update(&mut self, now_unix_s: f64, candidates: Vec<Candidate>) -> Vec<Change> {
        self.update_keyed(now_unix_s, keyed(candidates))
    }

    /// [`Tracker::update`] with each candidate's id ([`Candidate::id`]) beside it.
    pub fn update_keyed(
        &mut self,
        now_unix_s: f64,
        candidates: Vec<(String, Candidate)>,
    ) -> Vec<Change> {
        let n = candidates.len();
        let (mut changes, seen) = self.take(now_unix_s, candidates, None);
        // Candidates not seen this time lose their streak.
        self.pending.retain(|id, _| seen.contains(id));
        let mut absent: Vec<String> = self
            .findings
            .values()
            .filter(|f| f.active && !seen.contains(&f.id))
            .map(|f| f.id.clone())
            .collect();
        absent.sort();
        self.clear_missing(now_unix_s, absent, &mut changes);
        let mut active: Vec<&Tracked> = self.findings.values().filter(|f| f.active).collect();
        active.sort_by(|a, b| a.id.cmp(&b.id));
        let links = Links::of(&active);
        let active: Vec<String> = active.iter().map(|f| f.id.clone()).collect();
        let active: Vec<&str> = active.iter().map(String::as_str).collect();
        self.relink(&active, links, &mut changes, seen.len() < n);
        self.trim();
        changes
    }

    /// [`Tracker::update`] for one scope of the fleet ([`super::scope`]): `candidates` are all that an
    /// evaluation of the scope labelled `label` found, and only what that scope produced before (pending
    /// streaks, active findings last seen there) counts as missing from them; other scopes' findings are left
    /// as they are. A candidate last seen in another scope moves to this one. Scopes that are gone are swept by
    /// [`Tracker::sweep_scopes`].
    pub fn update_scope(
        &mut self,
        now_unix_s: f64,
        label: &str,
        candidates: Vec<Candidate>,
    ) -> Vec<Change> {
        self.update_scope_keyed(now_unix_s, label, keyed(candidates))
    }

    /// [`Tracker::update_scope`] with each candidate's id ([`Candidate::id`]) beside it.
    pub fn update_scope_keyed(
        &mut self,
        now_unix_s: f64,
        label: &str,
        candidates: Vec<(String, Candidate)>,
    ) -> Vec<Change> {
        let n = candidates.len();
        let (mut changes, seen) = self.take(now_unix_s, candidates, Some(label));
        self.settle_scope(now_unix_s, label, &seen, &mut changes, seen.len() < n);
        changes
    }

    /// Treats every scope label not in `live` as evaluated now with no candidates (its pending streaks end,
    /// its active findings count a miss and clear as [`Tracker::update`] would clear them), then drops the
    /// oldest inactive findings past [`MAX_INACTIVE`]. Called once per round of scope evaluations.
    pub fn sweep_scopes(&mut self, now_unix_s: f64, live: &HashSet<&str>) -> Vec<Change> {
        let gone: Vec<String> = self
            .scopes
            .keys()
            .filter(|l| !live.contains(l.as_str()))
            .cloned()
            .collect();
        let mut changes = Vec::new();
        for label in gone {
            self.settle_scope(now_unix_s, &label, &Set::default(), &mut changes, false);
        }
        self.trim();
        changes
    }

    /// The end of a scope's update: its ids not among `seen` (the evaluation's candidates) lose their streak
    /// or count a miss, its active findings' consequences are relinked, and ids no longer pending or active
    /// leave the scope's index.
    fn settle_scope(
        &mut self,
        now_unix_s: f64,
        label: &str,
        seen: &Set<String>,
        changes: &mut Vec<Change>,
        repeated: bool,
    ) {
        // The scope's ids, taken out while they are read (in id order, as a whole-fleet update clears and
        // relinks) and put back without the gone ones: none copied but those that count a miss.
        let (key, mut ids) = self.scopes.remove_entry(label).unwrap_or_default();
        let mut absent = Vec::new();
        for id in ids.iter().filter(|id| !seen.contains(*id)) {
            if !self.pending.is_empty() {
                self.pending.remove(id);
            }
            if self.findings.get(id).is_some_and(|f| f.active) {
                absent.push(id.clone());
            }
        }
        self.clear_missing(now_unix_s, absent, changes);
        // Which of the scope's ids are active (in the ids' order), each looked up once for this and for the
        // links between them.
        let (is_active, links) = {
            let found: Vec<Option<&Tracked>> = ids
                .iter()
                .map(|id| self.findings.get(id).filter(|f| f.active))
                .collect();
            let active: Vec<&Tracked> = found.iter().flatten().copied().collect();
            let is_active: Vec<bool> = found.iter().map(Option::is_some).collect();
            (is_active, Links::of(&active))
        };
        let active: Vec<&str> = ids
            .iter()
            .zip(&is_active)
            .filter(|(_, a)| **a)
            .map(|(id, _)| id.as_str())
            .collect();
        self.relink(&active, links, changes, repeated);
        let gone = |t: &Tracker, id: &String, active: bool| !active && !t.pending.contains_key(id);
        if ids.iter().zip(&is_active).any(|(id, a)| gone(self, id, *a)) {
            let (kept, left): (Vec<_>, Vec<_>) = ids
                .into_iter()
                .zip(is_active)
                .partition(|(id, a)| !gone(self, id, *a));
            let (kept, left): (BTreeSet<String>, Vec<String>) = (
                kept.into_iter().map(|(id, _)| id).collect(),
                left.into_iter().map(|(id, _)| id).collect(),
            );
            for id in left {
                self.scope_of.remove(&id);
            }
            ids = kept;
        }
        if !ids.is_empty() {
            self.scopes.insert(key, ids);
        }
    }

    /// Files each of `candidates`' ids under the scope `label` ([`Tracker::assign`]). `sorted`: their ids are
    /// strictly increasing, so those the scope holds already (mostly all) are found in one walk beside its
    /// index, in id order, instead of a look-up each in the fleet's (a probe of a table of every id, whose keys
    /// live on the heap, per candidate).
    fn assign_all(&mut self, candidates: &[(String, Candidate)], label: &str, sorted: bool) {
        let mut elsewhere: Vec<&str> = Vec::new();
        match self.scopes.get(label).filter(|_| sorted) {
            Some(own) => {
                let mut own = own.iter().peekable();
                for (id, _) in candidates {
                    let mut held = false;
                    while let Some(o) = own.peek() {
                        match o.as_str().cmp(id) {
                            Ordering::Less => {
                                own.next();
                            }
                            Ordering::Equal => {
                                own.next();
                                held = true;
                                break;
                            }
                            Ordering::Greater => break,
                        }
                    }
                    if !held {
                        elsewhere.push(id);
                    }
                }
            }
            None => elsewhere.extend(candidates.iter().map(|(id, _)| id.as_str())),
        }
        for id in elsewhere {
            self.assign(id, label);
        }
    }

    /// Files `id` under the scope `label` (moving it from another scope's index). A scope's index and
    /// `scope_of` agree: `id` is in `scopes[label]` exactly when `scope_of[id]` is `label`.
    fn assign(&mut self, id: &str, label: &str) {
        match self.scope_of.get(id) {
            Some(l) if l == label => return,
            Some(l) => {
                if let Some(s) = self.scopes.get_mut(l) {
                    s.remove(id);
                }
            }
            None => {}
        }
        self.scope_of.insert(id.to_string(), label.to_string());
        self.scopes
            .entry(label.to_string())
            .or_default()
            .insert(id.to_string());
    }

    /// Applies one evaluation's candidates (raises, refreshes, streaks; each filed under `scope` when given)
    /// and returns the changes and the candidates' ids.
    fn take(
        &mut self,
        now_unix_s: f64,
        candidates: Vec<(String, Candidate)>,
        scope: Option<&str>,
    ) -> (Vec<Change>, Set<String>) {
        // Every candidate of an active finding is a change (most are): room for all at once, not regrown (a
        // change holds a whole finding when raised).
        let mut changes = Vec::with_capacity(candidates.len());
        let mut seen = Set::with_capacity_and_hasher(candidates.len(), Default::default());
        // Ids in strictly increasing order (as [`super::evaluate_keyed`] gives them) are each seen once, so a
        // refresh may leave its words to be written when read: no earlier change of this evaluation holds the
        // finding with other figures. Otherwise each refresh writes them at once.
        let lazy = candidates.windows(2).all(|w| w[0].0 < w[1].0);
        if let Some(label) = scope {
            self.assign_all(&candidates, label, lazy);
        }
        for (id, c, cause_named) in in_cause_order(candidates) {
            // An active finding refreshed without a cause to settle (none named, nor had; or the one named
            // active): its own entry is all the refresh reads, looked up once.
            let named_active = c.caused_by.as_deref().is_some_and(|n| self.is_active(n));
            if let Some(t) = self.findings.get_mut(&id).filter(|t| t.active) {
                if named_active || (c.caused_by.is_none() && t.caused_by.is_none()) {
                    let mut c = c;
                    if named_active {
                        c.severity = consequence_severity(c.kind, c.severity);
                    }
                    if !self.missing.is_empty() {
                        self.missing.remove(&id);
                    }
                    refresh_tracked(t, c, now_unix_s, lazy, &mut changes);
                    seen.insert(id);
                    continue;
                }
            }
            let had_cause = match self.findings.get(&id) {
                Some(f) if f.active => Some(f.caused_by.is_some()),
                _ => None,
            };
            if let Some(had_cause) = had_cause {
                if !self.missing.is_empty() {
                    self.missing.remove(&id);
                }
                self.refresh_active(&id, c, had_cause, (now_unix_s, lazy), &mut changes);
                seen.insert(id);
                continue;
            }
            let p = match self.pending.get_mut(&id) {
                Some(p) => p,
                None => self.pending.entry(id.clone()).or_insert(Pending {
                    seen: 0,
                    first_unix_s: now_unix_s,
                }),
            };
            p.seen += 1;
            let (streak, held_s) = (p.seen, now_unix_s - p.first_unix_s + self.interval_s);
            let need = c.raise_after.clamp(1, RAISE_AFTER);
            // A consequence whose cause is among the candidates but not active waits for it.
            let cause_waits = cause_named
                && c.caused_by
                    .as_ref()
                    .is_some_and(|cause| !self.findings.get(cause).is_some_and(|f| f.active));
            if streak < need || !self.covers(held_s, need) || cause_waits {
                seen.insert(id);
                continue;
            }
            let mut c = c;
            self.settle(&mut c, None);
            self.pending.remove(&id);
            changes.push(Change::Raised(self.raise(id.clone(), c, now_unix_s)));
            seen.insert(id);
        }
        (changes, seen)
    }

    /// Refreshes the active finding `id` with `c` (filed under its cause as [`Tracker::settle`] says; `had_cause`:
    /// whether the finding names one now) at `now_unix_s`, its words written when read where `lazy`
    /// ([`refresh_tracked`]), and reports it in `changes`, sharing it: it is copied only while an earlier
    /// reader still holds it.
    fn refresh_active(
        &mut self,
        id: &str,
        mut c: Candidate,
        had_cause: bool,
        (now_unix_s, lazy): (f64, bool),
        changes: &mut Vec<Change>,
    ) {
        // Neither naming a cause, settling changes nothing (and looks nothing up); a cause named and active
        // is the one, whatever the finding had.
        if had_cause || c.caused_by.is_some() {
            let named_active = c.caused_by.as_deref().is_some_and(|n| self.is_active(n));
            if named_active {
                c.severity = consequence_severity(c.kind, c.severity);
            } else {
                let previous = self.findings.get(id).and_then(|f| f.caused_by.as_deref());
                self.settle(&mut c, previous);
            }
        }
        if let Some(t) = self.findings.get_mut(id) {
            refresh_tracked(t, c, now_unix_s, lazy, changes);
        }
    }

    /// Files `c` under the cause it names when that is an active finding; else under the cause it had
    /// (`previous`) while that is still active — a cause missing from one evaluation, or named but not raised
    /// yet, does not make its consequences root causes for a moment, nor the reverse; else under none. Filed
    /// under a cause, its severity is [`consequence_severity`]; under none, its rule's.
    fn settle(&self, c: &mut Candidate, previous: Option<&str>) {
        let cause = match c.caused_by.take() {
            Some(named) if self.is_active(&named) => Some(named),
            _ => previous.filter(|p| self.is_active(p)).map(str::to_string),
        };
        if cause.is_some() {
            c.severity = consequence_severity(c.kind, c.severity);
        }
        c.caused_by = cause;
    }

    /// Whether `id` is an active finding.
    fn is_active(&self, id: &str) -> bool {
        self.findings.get(id).is_some_and(|f| f.active)
    }

    /// Makes each active finding's `consequences` the active findings that name it in `caused_by` (in the
    /// changes too), so that the two never disagree: a consequence missing from one evaluation stays active,
    /// naming its cause, until it clears, and its cause keeps listing it; a candidate not raised yet is not
    /// listed.
    /// `active` lists the active findings to relink, sorted by id (all of them, or one scope's: causes and
    /// consequences are found in one evaluation, so within one scope), and `links` their causes
    /// ([`Links::of`] the same findings). `repeated`: the evaluation had two candidates of one id (a change
    /// may hold a finding refreshed again since; else a change's finding differs from the tracker's only
    /// where a list is rewritten here).
    fn relink(&mut self, active: &[&str], links: Links, changes: &mut [Change], repeated: bool) {
        let Links { links, listing } = links;
        let mut rest = &links[..];
        let mut rewritten = false;
        for (j, id) in active.iter().enumerate() {
            let n = rest.iter().take_while(|(c, _)| *c == j).count();
            let (now, after) = rest.split_at(n);
            rest = after;
            if now.is_empty() && !listing[j] {
                continue;
            }
            if let Some(f) = self.findings.get_mut(*id) {
                let same = f.consequences.len() == now.len()
                    && f.consequences
                        .iter()
                        .zip(now)
                        .all(|(a, (_, k))| a == active[*k]);
                // Written only when it changed: a finding a change still shares would be copied.
                if !same {
                    Arc::make_mut(&mut f.finding).consequences =
                        now.iter().map(|(_, k)| active[*k].to_string()).collect();
                    rewritten = true;
                }
            }
        }
        if !rewritten && !repeated {
            return;
        }
        for ch in changes.iter_mut() {
            match ch {
                Change::Raised(f) => {
                    if let Some(now) = self.findings.get(&f.id) {
                        f.consequences.clone_from(&now.consequences);
                    }
                }
                Change::Updated(f) => {
                    if let Some(now) = self.findings.get(&f.id) {
                        if !Arc::ptr_eq(f, &now.finding) && f.consequences != now.consequences {
                            Arc::make_mut(f).consequences.clone_from(&now.consequences);
                        }
                    }
                }
                Change::Cleared(_) => {}
            }
        }
    }

    /// Makes `c` an active finding (keeping `first_seen` of an earlier one with its id) and counts it.
    fn raise(&mut self, id: String, mut c: Candidate, now_unix_s: f64) -> Finding {
        let words = c.write_words();
        let advice = match &c.action {
            Cow::Borrowed(a) => Some(*a),
            Cow::Owned(_) => None,
        };
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
            action: c.action.into_owned(),
            first_seen_unix_s: first,
            last_seen_unix_s: now_unix_s,
            active: true,
            root: c.caused_by.is_none(),
            caused_by: c.caused_by,
            consequences: c.consequences,
        };
        *self.raised_total.entry(f.kind).or_insert(0) += 1;
        let finding = Arc::new(f.clone());
        self.findings.insert(
            id,
            Tracked {
                finding,
                words,
                lagging: false,
                advice,
                published: None,
            },
        );
        f
    }

    /// Counts a miss for every active finding of `absent` (ids in order) and clears those missing long enough.
    fn clear_missing(&mut self, now_unix_s: f64, absent: Vec<String>, changes: &mut Vec<Change>) {
        let absent: Vec<(String, f64)> = absent
            .into_iter()
            .filter_map(|id| {
                let last = self.findings.get(&id)?.last_seen_unix_s;
                Some((id, last))
            })
            .collect();
        for (id, last_seen) in absent {
            let n = self.missing.entry(id.clone()).or_insert(0);
            *n += 1;
            let misses = *n;
            if misses < CLEAR_AFTER || !self.covers(now_unix_s - last_seen, CLEAR_AFTER) {
                continue;
            }
            self.missing.remove(&id);
            if let Some(t) = self.findings.get_mut(&id) {
                t.write_words();
                Arc::make_mut(&mut t.finding).active = false;
                t.words = None;
                changes.push(Change::Cleared(Finding::clone(&t.finding)));
            }
        }
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
        // Oldest first, ties in id order.
        old.sort_by(|a, b| {
            let by_time = a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal);
            by_time.then_with(|| a.1.cmp(&b.1))
        });
        for (_, id) in old.into_iter().take(inactive - MAX_INACTIVE) {
            self.findings.remove(&id);
        }
    }

    /// Every finding (active and cleared) as published, sorted by id.
    pub fn findings(&self) -> Vec<Finding> {
        let mut all: Vec<&Tracked> = self.findings.values().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all.into_iter().map(Tracked::published).collect()
    }

    /// The active findings as published, sorted by id.
    pub fn active(&self) -> Vec<Finding> {
        let mut active: Vec<&Tracked> = self.findings.values().filter(|t| t.active).collect();
        active.sort_by(|a, b| a.id.cmp(&b.id));
        active.into_iter().map(Tracked::published).collect()
    }

    /// `f` (a refreshed finding of the last update, [`Change::Updated`]) as published: its summary and evidence
    /// written from the figures it was refreshed with where they lag — into the tracker's finding when `f` is
    /// it (they stay written until its figures change again).
    pub fn written(&mut self, mut f: Arc<Finding>) -> Arc<Finding> {
        let Some(t) = self.findings.get_mut(&f.id).filter(|t| t.lagging) else {
            return f;
        };
        if Arc::ptr_eq(&t.finding, &f) {
            // Not shared with `f` while the words are written: the finding is not copied for them.
            drop(f);
            t.write_words();
            return Arc::clone(&t.finding);
        }
        // A copy the tracker made since (its consequences relinked): the same figures, its own words.
        if let Some(w) = &t.words {
            let g = Arc::make_mut(&mut f);
            g.evidence = w.write(&g.subject, &mut g.summary);
        }
        f
    }

    /// Writes the summary and evidence of `f` (a copy of the tracker's latest finding of its id) from the
    /// tracker's figures where they lag.
    pub fn write_words(&self, f: &mut Finding) {
        if let Some(t) = self.findings.get(&f.id).filter(|t| t.lagging) {
            if let Some(w) = &t.words {
                f.evidence = w.write(&f.subject, &mut f.summary);
            }
        }
    }

    /// What was last published of the finding `id` (kept by the engine's events, [`Published`]), as a
    /// place to read and write it; `None` when the tracker holds no finding of that id. A finding raised
    /// again starts with nothing published.
    pub fn published_mut(&mut self, id: &str) -> Option<&mut Option<Published>> {
        self.findings.get_mut(id).map(|t| &mut t.published)
    }

    /// Findings raised since start, per kind.
    pub fn raised_total(&self) -> &BTreeMap<FindingKind, u64> {
        &self.raised_total
    }
}

/// Each candidate with its id formatted ([`Candidate::id`]).
fn keyed(candidates: Vec<Candidate>) -> Vec<(String, Candidate)> {
    candidates.into_iter().map(|c| (c.id(), c)).collect()
}

/// A candidate with its id and whether the cause it names is among the evaluation's candidates.
type Ordered = (String, Candidate, bool);

/// The candidates in the order the tracker applies them: causes before their consequences (by [`depth`],
/// stable), each with whether the cause it names is among them. Taken one by one: not moved into another
/// list first (a candidate holds a finding's worth of fields).
fn in_cause_order(candidates: Vec<(String, Candidate)>) -> Box<dyn Iterator<Item = Ordered>> {
    // None naming a cause: all at depth 0, in their order.
    if candidates.iter().all(|(_, c)| c.caused_by.is_none()) {
        return Box::new(candidates.into_iter().map(|(id, c)| (id, c, false)));
    }
    let order: Vec<(usize, bool)> = {
        // An evaluation of the whole fleet has tens of thousands of candidates: a map, asked once or more
        // for each. Where two share an id, the last one's cause counts.
        let causes: Map<&str, Option<&str>> = candidates
            .iter()
            .map(|(id, c)| (id.as_str(), c.caused_by.as_deref()))
            .collect();
        candidates
            .iter()
            .map(|(id, c)| {
                let named = c
                    .caused_by
                    .as_deref()
                    .is_some_and(|k| causes.contains_key(k));
                (depth(&causes, id), named)
            })
            .collect()
    };
    // Places sorted, not the candidates (each holds a finding's worth of fields): stable, by depth. Mostly no
    // candidate names a cause, and the order stays as it is.
    let mut places: Vec<(usize, usize)> = order.iter().map(|(d, _)| *d).zip(0..).collect();
    places.sort_by_key(|(d, _)| *d);
    let places = places.into_iter().map(|(_, k)| (order[k].1, k)).collect();
    Box::new(super::in_order(candidates, places).map(|(named, (id, c))| (id, c, named)))
}

/// How many causes up `id` is from a root cause, through this evaluation's candidates (`causes`: id → the
/// id of its cause). Bounded by the number of candidates, so that a cycle cannot hang the evaluation.
fn depth(causes: &Map<&str, Option<&str>>, id: &str) -> usize {
    let mut d = 0;
    let mut at = id;
    while let Some(Some(up)) = causes.get(at) {
        d += 1;
        if d > causes.len() {
            break;
        }
        at = up;
    }
    d
}

/// Refreshes the active finding `t` with `c` (its cause settled) and reports it in `changes`, sharing it: it
/// is copied only while an earlier reader still holds it. Other figures than the finding's are kept, and the
/// words written from them when the finding is read ([`Tracked::lagging`]) where `lazy` (no other candidate
/// of its id in the evaluation), else at once.
fn refresh_tracked(
    t: &mut Tracked,
    mut c: Candidate,
    now_unix_s: f64,
    lazy: bool,
    changes: &mut Vec<Change>,
) {
    // The same figures about the same subject: the same words, kept as they are (written or not).
    let same = c.words.is_some() && c.words == t.words && c.subject == t.subject;
    // Mostly the same fixed advice, borrowed from the rule as last time: not compared again.
    let advice = match &c.action {
        Cow::Borrowed(a) => Some(*a),
        Cow::Owned(_) => None,
    };
    let same_advice = advice.is_some_and(|a| t.advice.is_some_and(|b| std::ptr::eq(a, b)));
    t.advice = advice;
    let f = Arc::make_mut(&mut t.finding);
    match c.words.take() {
        Some(w) if !same => {
            if !lazy {
                f.evidence = w.write(&c.subject, &mut f.summary);
            }
            t.words = Some(w);
            t.lagging = lazy;
            refresh(f, c, now_unix_s, false, same_advice);
        }
        Some(_) => refresh(f, c, now_unix_s, false, same_advice),
        None => {
            t.words = None;
            t.lagging = false;
            refresh(f, c, now_unix_s, true, same_advice);
        }
    }
    changes.push(Change::Updated(Arc::clone(&t.finding)));
}

/// Refreshes `f` with `c`; its summary and evidence only when `words` (else they were written from `c`'s
/// figures, or stay as written from the same figures); its action unless `same_advice` (the same text as
/// `f`'s).
fn refresh(f: &mut Finding, c: Candidate, now_unix_s: f64, words: bool, same_advice: bool) {
    f.severity = c.severity;
    f.subject = c.subject;
    if words {
        f.summary = c.summary;
        f.evidence = c.evidence;
    }
    // Mostly the same fixed advice: copied only when it changed.
    if !same_advice && f.action != c.action {
        f.action = c.action.into_owned();
    }
    f.root = c.caused_by.is_none();
    f.caused_by = c.caused_by;
    f.consequences = c.consequences;
    f.last_seen_unix_s = now_unix_s;
}

#[cfg(test)]
mod tests {
    use super::super::{Severity, Subject};
    use super::*;

    fn cand() -> Candidate {
        let mut c = Candidate::new(
            FindingKind::LinkErrors,
            Severity::Warning,
            Subject::node("n1"),
        );
        c.summary = "x".into();
        c
    }

    fn on(node: &str) -> Candidate {
        let mut c = cand();
        c.subject = Subject::node(node);
        c
    }

    #[test]
    fn a_scope_clears_only_its_own_findings_and_a_gone_scope_is_swept() {
        let mut t = Tracker::new();
        for s in 1..=3 {
            t.update_scope(f64::from(s), "a", vec![on("n1")]);
            t.update_scope(f64::from(s), "b", vec![on("n2")]);
        }
        assert_eq!(t.active().len(), 2);
        // Scope b evaluated five more times without n2's candidate clears it; a's finding is untouched.
        let mut cleared = Vec::new();
        for s in 4..=8 {
            cleared.extend(t.update_scope(f64::from(s), "b", vec![]));
        }
        assert!(
            matches!(&cleared[..], [Change::Cleared(f)] if f.id == "link_errors:n2"),
            "{cleared:?}"
        );
        assert_eq!(t.active().len(), 1);
        // A candidate seen in another scope moves there: scope a no longer counts it missing.
        t.update_scope(9.0, "c", vec![on("n1")]);
        for s in 10..=20 {
            assert!(t.update_scope(f64::from(s), "a", vec![]).is_empty());
            t.update_scope(f64::from(s), "c", vec![on("n1")]);
        }
        // Scope c gone: its finding counts a miss at each sweep and clears after five.
        let live = HashSet::from(["a"]);
        let mut swept = Vec::new();
        for s in 21..=25 {
            swept.extend(t.sweep_scopes(f64::from(s), &live));
        }
        assert!(
            matches!(&swept[..], [Change::Cleared(f)] if f.id == "link_errors:n1"),
            "{swept:?}"
        );
        assert!(t.active().is_empty());
    }

    #[test]
    fn candidates_in_id_order_move_from_other_scopes_and_stay_in_their_own() {
        let keyed = |nodes: &[&str]| keyed(nodes.iter().map(|n| on(n)).collect());
        let mut t = Tracker::new();
        for s in 1..=3 {
            t.update_scope_keyed(f64::from(s), "a", keyed(&["n1", "n3", "n5"]));
        }
        assert_eq!(t.active().len(), 3);
        // Scope b takes n1 and n5 (beside n2, n4 of its own): a holds n3 alone, and counts it alone missing.
        for s in 4..=6 {
            t.update_scope_keyed(f64::from(s), "b", keyed(&["n1", "n2", "n4", "n5"]));
        }
        let mut cleared = Vec::new();
        for s in 7..=11 {
            cleared.extend(t.update_scope_keyed(f64::from(s), "a", Vec::new()));
            t.update_scope_keyed(f64::from(s), "b", keyed(&["n1", "n2", "n4", "n5"]));
        }
        assert!(
            matches!(&cleared[..], [Change::Cleared(f)] if f.id == "link_errors:n3"),
            "{cleared:?}"
        );
        let active: Vec<String> = t.active().into_iter().map(|f| f.id).collect();
        assert_eq!(
            active,
            [
                "link_errors:n1",
                "link_errors:n2",
                "link_errors:n4",
                "link_errors:n5"
            ]
        );
        // b's own ids stay b's: evaluated without them, b clears them all.
        let mut cleared = 0;
        for s in 12..=16 {
            cleared += t.update_scope_keyed(f64::from(s), "b", Vec::new()).len();
        }
        assert_eq!((cleared, t.active().len()), (4, 0));
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
        assert_eq!(t.raised_total().get(&FindingKind::LinkErrors), Some(&1));
        // A broken streak does not raise: present, absent, present, present.
        t.update(14.0, vec![cand()]);
        t.update(15.0, vec![]);
        t.update(16.0, vec![cand()]);
        assert!(t.update(17.0, vec![cand()]).is_empty());
        let ch = t.update(18.0, vec![cand()]);
        assert!(matches!(&ch[..], [Change::Raised(f)] if f.first_seen_unix_s == 3.0));
        assert_eq!(t.raised_total().get(&FindingKind::LinkErrors), Some(&2));
    }

    #[test]
    fn a_consequence_waits_for_its_cause_and_is_raised_right_after_it() {
        let cause = || {
            let mut c = Candidate::new(
                FindingKind::ManagementNetworkTraffic,
                Severity::Critical,
                Subject::node("n3"),
            );
            c.consequences = vec!["link_underutilized:n1".into()];
            c
        };
        let effect = || {
            let mut c = Candidate::new(
                FindingKind::LinkUnderutilized,
                Severity::Info,
                Subject::node("n1"),
            );
            c.caused_by = Some("management_network_traffic:n3".into());
            c
        };
        let mut t = Tracker::new();
        // The consequence is seen from the first evaluation on, its cause only from the third.
        assert!(t.update(1.0, vec![effect()]).is_empty());
        assert!(t.update(2.0, vec![effect()]).is_empty());
        assert!(t.update(3.0, vec![effect(), cause()]).is_empty());
        assert!(t.update(4.0, vec![effect(), cause()]).is_empty());
        // Listed after it, the consequence still comes out after its cause.
        let ch = t.update(5.0, vec![effect(), cause()]);
        let ids: Vec<(&str, bool)> = ch
            .iter()
            .map(|c| match c {
                Change::Raised(f) => (f.id.as_str(), f.root),
                _ => ("?", false),
            })
            .collect();
        assert_eq!(
            ids,
            [
                ("management_network_traffic:n3", true),
                ("link_underutilized:n1", false)
            ]
        );
        // The cause lists what was raised under it, and keeps listing it while it stays active unseen.
        assert!(matches!(&ch[0], Change::Raised(f) if f.consequences == ["link_underutilized:n1"]));
        let ch = t.update(6.0, vec![cause()]);
        assert!(
            matches!(&ch[..], [Change::Updated(f)] if f.consequences == ["link_underutilized:n1"])
        );
        // An evaluation that does not link them changes nothing while the cause is active.
        let ch = t.update(7.0, vec![cand_on("n1"), cause()]);
        assert!(ch.iter().any(|c| matches!(c, Change::Updated(f)
            if f.id == "link_underutilized:n1" && !f.root && f.severity == Severity::Info)));
        // Its cause cleared (five misses), it is a root cause at its rule's severity.
        for s in 8..=12 {
            t.update(f64::from(s), vec![cand_on("n1")]);
        }
        let ch = t.update(13.0, vec![cand_on("n1")]);
        assert!(matches!(&ch[..], [Change::Updated(f)]
            if f.root && f.caused_by.is_none() && f.severity == Severity::Warning));
    }

    #[test]
    fn a_cause_that_is_not_a_candidate_holds_nothing_back() {
        let mut c = cand();
        c.caused_by = Some("link_degraded:n9".into());
        let mut t = Tracker::new();
        t.update(1.0, vec![c.clone()]);
        t.update(2.0, vec![c.clone()]);
        // A cause that is no finding is no cause: raised as a root cause, at its rule's severity.
        assert!(matches!(&t.update(3.0, vec![c])[..], [Change::Raised(f)]
            if f.root && f.caused_by.is_none() && f.severity == Severity::Warning));
    }

    fn cand_on(node: &str) -> Candidate {
        Candidate::new(
            FindingKind::LinkUnderutilized,
            Severity::Warning,
            Subject::node(node),
        )
    }

    #[test]
    fn evaluations_stretched_under_load_still_need_three_sightings_and_five_misses() {
        // Nominal 1 s, but the paced engine evaluates every 4 s: the time spans are met at once, the counts
        // are what holds.
        let mut t = Tracker::with_interval(Duration::from_secs(1));
        assert!(t.update(100.0, vec![cand()]).is_empty());
        assert!(t.update(104.0, vec![cand()]).is_empty());
        assert!(matches!(
            &t.update(108.0, vec![cand()])[..],
            [Change::Raised(_)]
        ));
        for i in 1..5 {
            assert!(t.update(108.0 + 4.0 * i as f64, vec![]).is_empty());
        }
        let ch = t.update(128.0, vec![]);
        assert!(matches!(&ch[..], [Change::Cleared(f)] if f.last_seen_unix_s == 108.0));
    }

    #[test]
    fn evaluations_closer_than_the_interval_wait_for_the_wall_time() {
        // A 10 s interval evaluated every second: raised once seen over 30 s (first at 0 s, the sighting at
        // 20 s vouches for 10..20 s), cleared once missing for 50 s.
        let mut t = Tracker::with_interval(Duration::from_secs(10));
        for s in 0..20 {
            assert!(t.update(f64::from(s), vec![cand()]).is_empty(), "{s}");
        }
        let ch = t.update(20.0, vec![cand()]);
        assert!(matches!(&ch[..], [Change::Raised(f)] if f.first_seen_unix_s == 20.0));
        for s in 21..70 {
            assert!(t.update(f64::from(s), vec![]).is_empty(), "{s}");
        }
        assert!(matches!(&t.update(70.0, vec![])[..], [Change::Cleared(_)]));
    }

    #[test]
    fn a_candidate_may_ask_for_a_shorter_streak_but_clears_as_every_finding() {
        let fact = |n: u32| {
            let mut c = cand();
            c.raise_after = n;
            c
        };
        // 1: raised at its first sighting.
        let mut t = Tracker::new();
        assert!(
            matches!(&t.update(1.0, vec![fact(1)])[..], [Change::Raised(f)] if f.first_seen_unix_s == 1.0)
        );
        // Clearing still takes five misses.
        for s in 2..=5 {
            assert!(t.update(f64::from(s), vec![]).is_empty(), "{s}");
        }
        assert!(matches!(&t.update(6.0, vec![])[..], [Change::Cleared(_)]));
        // 2: at its second sighting, over two intervals of wall time.
        let mut t = Tracker::new();
        assert!(t.update(1.0, vec![fact(2)]).is_empty());
        assert!(
            t.update(1.5, vec![fact(2)]).is_empty(),
            "two looks, half an interval apart"
        );
        assert!(matches!(
            &t.update(2.0, vec![fact(2)])[..],
            [Change::Raised(_)]
        ));
        // Out of range: 0 counts as 1, more than RAISE_AFTER as RAISE_AFTER.
        let mut t = Tracker::new();
        assert!(matches!(
            &t.update(1.0, vec![fact(0)])[..],
            [Change::Raised(_)]
        ));
        let mut t = Tracker::new();
        assert!(t.update(1.0, vec![fact(9)]).is_empty());
        assert!(t.update(2.0, vec![fact(9)]).is_empty());
        assert!(matches!(
            &t.update(3.0, vec![fact(9)])[..],
            [Change::Raised(_)]
        ));
    }

    #[test]
    fn a_consequence_raised_at_first_sight_still_waits_for_its_cause() {
        let mut effect = Candidate::new(
            FindingKind::LinkErrors,
            Severity::Warning,
            Subject::node("n1"),
        );
        effect.raise_after = 1;
        effect.caused_by = Some("link_degraded:n9".into());
        let cause = Candidate::new(
            FindingKind::LinkDegraded,
            Severity::Critical,
            Subject::node("n9"),
        );
        let mut t = Tracker::new();
        assert!(t
            .update(1.0, vec![effect.clone(), cause.clone()])
            .is_empty());
        assert!(t
            .update(2.0, vec![effect.clone(), cause.clone()])
            .is_empty());
        let ch = t.update(3.0, vec![effect, cause]);
        let ids: Vec<&str> = ch
            .iter()
            .map(|c| match c {
                Change::Raised(f) => f.id.as_str(),
                _ => "?",
            })
            .collect();
        assert_eq!(ids, ["link_degraded:n9", "link_errors:n1"]);
    }

    #[test]
    fn a_few_milliseconds_of_clock_jitter_do_not_cost_an_interval() {
        let mut t = Tracker::with_interval(Duration::from_secs(1));
        t.update(10.0, vec![cand()]);
        t.update(10.998, vec![cand()]);
        assert!(matches!(
            &t.update(11.996, vec![cand()])[..],
            [Change::Raised(_)]
        ));
        for s in [12.995, 13.994, 14.993, 15.992] {
            assert!(t.update(s, vec![]).is_empty());
        }
        assert!(matches!(
            &t.update(16.991, vec![])[..],
            [Change::Cleared(_)]
        ));
    }
}
