//! What the demo prints about findings, as pure functions of the findings (tested on lists of them).
//!
//! A root cause is printed once, as a block: its summary, evidence and action, and how many findings on how
//! many nodes it explains. Its consequences come after it, never before: those raised together are one line
//! each under a header naming their root cause, and the node-level findings of a roll-up only as a count (the
//! roll-up names their nodes; `/api/v1/findings` has each). At exit, every root cause is printed with its tree.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use commwatch_collector::analysis::{Finding, FindingEvent, Severity};

/// How many causes up the demo follows `caused_by` before it stops (the analysis never links deeper than a
/// few; this only guards against a malformed list).
const MAX_DEPTH: usize = 16;

/// The findings as they are now, indexed: by id, and each finding's consequences (from their `caused_by`).
pub struct Tree<'a> {
    by_id: HashMap<&'a str, &'a Finding>,
    children: HashMap<&'a str, Vec<&'a Finding>>,
}

impl<'a> Tree<'a> {
    pub fn new(all: &'a [Finding]) -> Tree<'a> {
        let mut children: HashMap<&str, Vec<&Finding>> = HashMap::new();
        for f in all {
            if let Some(c) = &f.caused_by {
                children.entry(c.as_str()).or_default().push(f);
            }
        }
        Tree {
            by_id: all.iter().map(|f| (f.id.as_str(), f)).collect(),
            children,
        }
    }

    /// The root cause `f` leads up to (`f` itself for a root cause; the last finding known on the way when a
    /// cause is missing from the list).
    fn top(&self, f: &'a Finding) -> &'a Finding {
        let mut at = f;
        for _ in 0..MAX_DEPTH {
            match at.caused_by.as_deref().and_then(|c| self.by_id.get(c)) {
                Some(up) => at = up,
                None => break,
            }
        }
        at
    }

    /// Every finding `id` explains, directly or through others, depth first (active ones only when asked).
    fn descendants(&self, id: &str, active_only: bool) -> Vec<&'a Finding> {
        let mut out = Vec::new();
        let mut stack: Vec<(&str, usize)> = vec![(id, 0)];
        while let Some((at, depth)) = stack.pop() {
            if depth >= MAX_DEPTH {
                continue;
            }
            for c in self.children.get(at).into_iter().flatten() {
                if !active_only || c.active {
                    out.push(*c);
                    stack.push((c.id.as_str(), depth + 1));
                }
            }
        }
        out
    }

    /// "explains N findings on M nodes": what the root explains now (live: its active consequences), or
    /// over the run (at exit: all of them).
    fn explains(&self, root: &Finding, live: bool) -> String {
        let d = self.descendants(&root.id, live);
        if d.is_empty() {
            return if live {
                "explains no other finding yet".into()
            } else {
                "explains no other finding".into()
            };
        }
        let nodes: BTreeSet<&str> = d
            .iter()
            .map(|f| f.subject.node.as_str())
            .filter(|n| !n.is_empty())
            .collect();
        format!(
            "explains {} finding{} on {} node{}",
            d.len(),
            plural(d.len()),
            nodes.len(),
            plural(nodes.len())
        )
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Where a finding is: node and device/port, interface, GPU and link, setting, job, as they apply.
pub fn subject(f: &Finding) -> String {
    let s = &f.subject;
    let mut out = String::new();
    if s.node.is_empty() {
        let _ = write!(out, "job {}", s.job.as_deref().unwrap_or("?"));
        return out;
    }
    out.push_str(&s.node);
    if let Some(g) = &s.gpu {
        let _ = write!(out, " GPU {g}");
    }
    if let Some(l) = &s.link {
        let _ = write!(out, " NVLink {l}");
    }
    match (&s.interface, &s.device, &s.port) {
        (Some(i), ..) => {
            let _ = write!(out, " {i}");
        }
        (None, Some(d), Some(p)) => {
            let _ = write!(out, " {d} port {p}");
        }
        (None, Some(d), None) => {
            let _ = write!(out, " {d}");
        }
        _ => {}
    }
    if let Some(x) = &s.setting {
        let _ = write!(out, " {x}");
    }
    if let Some(j) = &s.job {
        let _ = write!(out, " (job {j})");
    }
    out
}

/// A figure in its unit: GB/s, a percentage, or the number and the unit (`1 conflict`, `2 conflicts`).
fn figure(v: f64, unit: &str) -> String {
    match unit {
        "bytes_per_second" => format!("{:.2} GB/s", v / 1e9),
        "ratio" => format!("{:.1}%", v * 100.0),
        _ if v == 1.0 => format!("1 {}", unit.strip_suffix('s').unwrap_or(unit)),
        _ => format!("{v} {unit}"),
    }
}

/// The evidence on one line: the figure against what was expected, how much data, the rule's other numbers.
pub fn evidence(f: &Finding) -> String {
    let e = &f.evidence;
    let mut out = format!("measured {}", figure(e.measured, &e.unit));
    if let Some(x) = e.expected {
        let _ = write!(out, ", expected {}", figure(x, &e.unit));
    }
    if let Some(n) = e.over_steps {
        let _ = write!(out, ", over {n} steps");
    }
    if let Some(s) = e.over_seconds {
        let _ = write!(out, ", over {s} s");
    }
    for (k, v) in &e.details {
        let v = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(a) => a
                .iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                .collect::<Vec<_>>()
                .join(","),
            other => other.to_string(),
        };
        let _ = write!(out, "; {k} {v}");
    }
    out
}

/// The root cause's block: what, where, the numbers, what to do, what it explains.
fn root_block(tree: &Tree, f: &Finding, stamp: &str, out: &mut Vec<String>) {
    out.push(format!(
        "*** {stamp} ROOT CAUSE [{}] {} on {}",
        f.severity,
        f.kind.as_str(),
        subject(f)
    ));
    out.push(format!("    {}", f.summary));
    out.push(format!("    evidence: {}", evidence(f)));
    out.push(format!("    action: {}", f.action));
    out.push(format!("    {} (id {})", tree.explains(f, true), f.id));
}

/// One line for a consequence: severity, kind, where, summary.
fn consequence_line(f: &Finding, indent: &str) -> String {
    format!(
        "{indent}[{}] {} on {}: {}",
        f.severity,
        f.kind.as_str(),
        subject(f),
        f.summary
    )
}

/// Prints the live events: each root cause once, its consequences after it.
#[derive(Debug, Default)]
pub struct Printer {
    /// Root causes whose block is printed.
    printed: BTreeSet<String>,
}

/// The consequences one batch brought to a root cause.
#[derive(Default)]
struct Group<'a> {
    /// One line each: consequences not inside a roll-up.
    shown: Vec<&'a Finding>,
    /// Node-level findings inside a roll-up: counted per roll-up id.
    in_rollups: Vec<(String, usize)>,
    /// Consequences cleared, each named on its line.
    cleared: Vec<&'a Finding>,
}

impl Printer {
    /// The lines for one batch of events (those that arrived together), given the findings as they are now
    /// (`all`, the analysis' list after these events) and the time since the demo started.
    pub fn events(
        &mut self,
        batch: &[FindingEvent],
        all: &[Finding],
        elapsed_s: u64,
    ) -> Vec<String> {
        let tree = Tree::new(all);
        let stamp = format!("t+{elapsed_s:>4}s");
        let mut out = Vec::new();
        // Root causes in the order their events came, each with the consequences this batch brought it.
        let mut groups: Vec<(String, Group)> = Vec::new();
        for ev in batch {
            let (f, cleared) = match ev {
                FindingEvent::Raised(f) => (f, false),
                FindingEvent::Cleared(f) => (f, true),
                FindingEvent::Changed {
                    finding,
                    severity_was,
                    caused_by_was,
                } => {
                    self.changed(
                        &tree,
                        finding,
                        *severity_was,
                        caused_by_was,
                        &stamp,
                        &mut out,
                    );
                    if finding.root {
                        continue;
                    }
                    (finding, false)
                }
            };
            // The finding as the list has it now (a later event of the batch may have changed it).
            let f = tree.by_id.get(f.id.as_str()).copied().unwrap_or(f);
            if f.root {
                if cleared {
                    out.push(format!(
                        "*** {stamp} CLEARED [{}] {} on {} (id {})",
                        f.severity,
                        f.kind.as_str(),
                        subject(f),
                        f.id
                    ));
                } else if self.printed.insert(f.id.clone()) {
                    root_block(&tree, f, &stamp, &mut out);
                }
                continue;
            }
            let top = tree.top(f);
            if !top.root {
                // Its cause is not in the list (cleared and trimmed): nothing to file it under.
                continue;
            }
            if self.printed.insert(top.id.clone()) {
                root_block(&tree, top, &stamp, &mut out);
            }
            let at = match groups.iter().position(|(id, _)| *id == top.id) {
                Some(i) => i,
                None => {
                    groups.push((top.id.clone(), Group::default()));
                    groups.len() - 1
                }
            };
            let g = &mut groups[at].1;
            let parent = f.caused_by.as_deref().and_then(|c| tree.by_id.get(c));
            if cleared {
                g.cleared.push(f);
            } else if let Some(r) = parent.filter(|p| p.is_rollup()) {
                match g.in_rollups.iter_mut().find(|(id, _)| *id == r.id) {
                    Some(x) => x.1 += 1,
                    None => g.in_rollups.push((r.id.clone(), 1)),
                }
            } else {
                g.shown.push(f);
            }
        }
        for (root, g) in groups {
            group_lines(&tree, &root, &g, &stamp, &mut out);
        }
        out
    }

    /// A root cause that changed severity, or became one again: one line (its block once only).
    fn changed(
        &mut self,
        tree: &Tree,
        f: &Finding,
        severity_was: Severity,
        caused_by_was: &Option<String>,
        stamp: &str,
        out: &mut Vec<String>,
    ) {
        if !f.root {
            return;
        }
        if self.printed.insert(f.id.clone()) {
            root_block(tree, f, stamp, out);
        } else if caused_by_was.is_some() {
            out.push(format!(
                "*** {stamp} ROOT CAUSE again [{}] {} on {}: {}",
                f.severity,
                f.kind.as_str(),
                subject(f),
                f.summary
            ));
        } else if severity_was != f.severity {
            out.push(format!(
                "*** {stamp} NOW {} (was {severity_was}) {} on {}: {}",
                f.severity.as_str().to_uppercase(),
                f.kind.as_str(),
                subject(f),
                f.summary
            ));
        }
    }
}

/// The lines of one root cause's new consequences.
fn group_lines(tree: &Tree, root: &str, g: &Group, stamp: &str, out: &mut Vec<String>) {
    let Some(r) = tree.by_id.get(root) else {
        return;
    };
    let new = g.shown.len() + g.in_rollups.iter().map(|x| x.1).sum::<usize>();
    if new > 0 {
        out.push(format!(
            "*** {stamp} +{new} consequence{} of {} on {} (it {})",
            plural(new),
            r.kind.as_str(),
            subject(r),
            tree.explains(r, true)
        ));
        // In the order they were raised (a cause before what it explains), then the roll-ups' counts.
        for f in &g.shown {
            out.push(consequence_line(f, "    "));
        }
        for (id, n) in &g.in_rollups {
            out.push(format!(
                "    ({n} node-level finding{} under {id}: GET /api/v1/findings?root=false)",
                plural(*n)
            ));
        }
    }
    for c in &g.cleared {
        out.push(format!(
            "*** {stamp} CLEARED [{}] {} on {} (id {}), a consequence of {} on {}",
            c.severity,
            c.kind.as_str(),
            subject(c),
            c.id,
            r.kind.as_str(),
            subject(r)
        ));
    }
}

/// The findings at exit: each root cause with its tree below it (roll-ups with a count of what they stand
/// for), then anything whose cause is not in the list. `all` is in the API's order (root causes first).
pub fn at_exit(all: &[Finding]) -> Vec<String> {
    let tree = Tree::new(all);
    let roots: Vec<&Finding> = all.iter().filter(|f| f.root).collect();
    let mut out = vec![format!(
        "--- findings at exit: {} ({} root cause{}, {} consequence{})",
        all.len(),
        roots.len(),
        plural(roots.len()),
        all.len() - roots.len(),
        plural(all.len() - roots.len())
    )];
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for r in &roots {
        out.push(format!(
            "    [{}] {} {} on {}: {}",
            r.severity,
            if r.active { "active" } else { "cleared" },
            r.kind.as_str(),
            subject(r),
            tree.explains(r, false)
        ));
        out.push(format!("        {}", r.summary));
        out.push(format!("        evidence: {}", evidence(r)));
        out.push(format!("        action: {}", r.action));
        done.insert(&r.id);
        exit_tree(&tree, r, 2, &mut done, &mut out);
    }
    let rest: Vec<&Finding> = all
        .iter()
        .filter(|f| !done.contains(f.id.as_str()))
        .collect();
    if !rest.is_empty() {
        out.push(format!(
            "    {} finding{} whose cause is no longer listed:",
            rest.len(),
            plural(rest.len())
        ));
        for f in rest {
            out.push(consequence_line(f, "        "));
        }
    }
    out
}

/// The consequences of `f`, depth first, one line each, indented by depth; a roll-up's node-level findings as
/// a count.
fn exit_tree<'a>(
    tree: &Tree<'a>,
    f: &'a Finding,
    depth: usize,
    done: &mut BTreeSet<&'a str>,
    out: &mut Vec<String>,
) {
    if depth > MAX_DEPTH {
        return;
    }
    let indent = "    ".repeat(depth);
    let children = tree
        .children
        .get(f.id.as_str())
        .cloned()
        .unwrap_or_default();
    if f.is_rollup() && !children.is_empty() {
        out.push(format!(
            "{indent}({} node-level finding{} under it)",
            children.len(),
            plural(children.len())
        ));
        done.extend(children.iter().map(|c| c.id.as_str()));
        return;
    }
    for c in children {
        if done.insert(&c.id) {
            out.push(consequence_line(c, &indent));
            exit_tree(tree, c, depth + 1, done, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commwatch_collector::analysis::{Evidence, FindingKind, Subject};

    fn finding(id: &str, kind: FindingKind, node: &str, caused_by: Option<&str>) -> Finding {
        Finding {
            id: id.into(),
            kind,
            severity: if caused_by.is_some() {
                Severity::Info
            } else {
                Severity::Critical
            },
            subject: Subject {
                node: node.into(),
                job: node.is_empty().then(|| "1001".to_string()),
                ..Default::default()
            },
            summary: format!("summary of {id}"),
            evidence: Evidence::new(0.5, "ratio"),
            action: format!("action of {id}"),
            first_seen_unix_s: 0.0,
            last_seen_unix_s: 0.0,
            active: true,
            root: caused_by.is_none(),
            caused_by: caused_by.map(str::to_string),
            consequences: vec![],
        }
    }

    /// nccl → mgmt → {exposed roll-up → 3 nodes, scaling}, in the API's order (root causes first).
    fn management_nic() -> Vec<Finding> {
        let k = FindingKind::ExposedCommunication;
        let mut v = vec![
            finding("nccl", FindingKind::NcclMisconfiguration, "node-03", None),
            finding(
                "mgmt",
                FindingKind::ManagementNetworkTraffic,
                "node-03",
                Some("nccl"),
            ),
            finding("exposed", k, "", Some("mgmt")),
            finding(
                "scaling",
                FindingKind::ScalingEfficiencyDrop,
                "",
                Some("mgmt"),
            ),
        ];
        for n in ["node-00", "node-01", "node-02"] {
            v.push(finding(&format!("exposed:{n}"), k, n, Some("exposed")));
        }
        v
    }

    fn position(lines: &[String], what: &str) -> usize {
        lines
            .iter()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{what:?} not in {lines:#?}"))
    }

    #[test]
    fn a_root_cause_is_printed_once_before_its_consequences() {
        let all = management_nic();
        let mut p = Printer::default();
        // The consequences arrive first in the batch: their cause is still printed before them.
        let batch: Vec<FindingEvent> = all
            .iter()
            .rev()
            .cloned()
            .map(FindingEvent::Raised)
            .collect();
        let lines = p.events(&batch, &all, 5);
        let root = position(
            &lines,
            "ROOT CAUSE [critical] nccl_misconfiguration on node-03",
        );
        assert_eq!(root, 0, "{lines:#?}");
        assert_eq!(lines[1], "    summary of nccl");
        assert_eq!(lines[2], "    evidence: measured 50.0%");
        assert_eq!(lines[3], "    action: action of nccl");
        assert_eq!(lines[4], "    explains 6 findings on 4 nodes (id nccl)");
        let header = position(
            &lines,
            "+6 consequences of nccl_misconfiguration on node-03",
        );
        assert!(header > root);
        assert!(position(&lines, "management_network_traffic on node-03") > header);
        assert!(position(&lines, "exposed_communication on job 1001") > header);
        assert!(position(&lines, "3 node-level findings under exposed") > header);
        // Each consequence once; none of the node-level ones on a line of its own.
        assert_eq!(lines.iter().filter(|l| l.contains("ROOT CAUSE")).count(), 1);
        assert!(
            !lines.iter().any(|l| l.contains("on node-00")),
            "{lines:#?}"
        );
        // Raised again later (after a clear), a root cause is not printed twice as a block.
        let again = p.events(&[FindingEvent::Raised(all[0].clone())], &all, 9);
        assert!(again.is_empty(), "{again:#?}");
    }

    #[test]
    fn a_root_cause_that_gets_worse_says_so_once() {
        let mut f = finding("link_errors:n3", FindingKind::LinkErrors, "n3", None);
        f.severity = Severity::Warning;
        let mut p = Printer::default();
        let all = vec![f.clone()];
        assert_eq!(
            p.events(&[FindingEvent::Raised(f.clone())], &all, 4).len(),
            5
        );
        f.severity = Severity::Critical;
        let all = vec![f.clone()];
        let ev = FindingEvent::Changed {
            finding: f,
            severity_was: Severity::Warning,
            caused_by_was: None,
        };
        let lines = p.events(&[ev], &all, 6);
        assert_eq!(
            lines,
            ["*** t+   6s NOW CRITICAL (was warning) link_errors on n3: summary of link_errors:n3"]
        );
    }

    #[test]
    fn at_exit_each_root_cause_comes_with_its_tree() {
        let lines = at_exit(&management_nic());
        assert_eq!(
            lines[0],
            "--- findings at exit: 7 (1 root cause, 6 consequences)"
        );
        assert_eq!(
            lines[1],
            "    [critical] active nccl_misconfiguration on node-03: explains 6 findings on 4 nodes"
        );
        let mgmt = position(&lines, "[info] management_network_traffic on node-03");
        let rollup = position(&lines, "[info] exposed_communication on job 1001");
        assert!(mgmt > 1 && rollup > mgmt);
        assert_eq!(
            lines[rollup + 1],
            "                (3 node-level findings under it)"
        );
        assert!(lines
            .iter()
            .any(|l| l.contains("scaling_efficiency_drop on job 1001")));
        assert_eq!(lines.len(), 9, "{lines:#?}");
    }

    #[test]
    fn a_cleared_consequence_is_named_and_a_count_of_one_is_singular() {
        let all = management_nic();
        let mut p = Printer::default();
        let _ = p.events(&[FindingEvent::Raised(all[0].clone())], &all, 1);
        let mgmt = all.iter().find(|f| f.id == "mgmt").unwrap().clone();
        let lines = p.events(&[FindingEvent::Cleared(mgmt)], &all, 7);
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0]
                .starts_with("*** t+   7s CLEARED [info] management_network_traffic on node-03")
                && lines[0]
                    .ends_with("(id mgmt), a consequence of nccl_misconfiguration on node-03"),
            "{lines:#?}"
        );
        assert_eq!(figure(1.0, "conflicts"), "1 conflict");
        assert_eq!(figure(0.0, "conflicts"), "0 conflicts");
    }
}
