//! "Root causes first": each active root cause with its summary, its subject (linked to the node or job
//! view), its evidence table and its action, and the findings it explains folded beneath it. Then the other
//! active findings that no root cause explains are not left out: a root cause is any finding no other
//! explains, so every active finding is either listed here or folded under one that is.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::escape::{url_component, Esc};
use super::units;
use crate::analysis::{Evidence, Finding, Subject};

/// Most findings a view lists (root causes here, a node's findings in its view), and most consequences listed
/// under one root cause: the rest are counted on the page (`/api/v1/findings` has them all), so a node whose
/// agent reports thousands of links cannot make the page as large.
pub const MAX_LISTED: usize = 200;

/// The findings of `listed` a view leaves out ([`MAX_LISTED`]).
pub fn left_out(listed: usize) -> usize {
    listed.saturating_sub(MAX_LISTED)
}

/// The note under a list that left `n` findings out; empty when none.
pub fn left_out_note(n: usize) -> String {
    if n == 0 {
        return String::new();
    }
    format!(
        "<p class=\"note warn\">{n} more finding(s) not listed: this page lists at most {MAX_LISTED}. \
         <code>/api/v1/findings</code> has every one.</p>"
    )
}

/// The section of the active `findings` (in the API's order: root causes first); `blind_nodes`: how many
/// nodes' agents cannot see their GPUs or fabric (nothing can be concluded about what they do not see).
/// At most [`MAX_LISTED`] root causes.
pub fn section(findings: &[Finding], blind_nodes: usize) -> String {
    let by_id: HashMap<&str, &Finding> = findings.iter().map(|f| (f.id.as_str(), f)).collect();
    let roots: Vec<&Finding> = findings.iter().filter(|f| f.active && f.root).collect();
    let mut s = String::from("<section id=\"root-causes\"><h2>Root causes</h2>");
    if roots.is_empty() && blind_nodes == 0 {
        s.push_str("<p class=\"ok\">No active root cause: nothing slows the fleet's jobs now.</p>");
    } else if roots.is_empty() {
        let _ = write!(
            s,
            "<p class=\"warn\">No active root cause in what the agents see; {blind_nodes} node(s) are blind to \
             their GPUs or fabric (below), and nothing is concluded about what they do not see.</p>"
        );
    }
    let omitted = left_out(roots.len());
    for f in roots.into_iter().take(MAX_LISTED) {
        s.push_str(&finding(f, &by_id, true));
    }
    s.push_str(&left_out_note(omitted));
    s.push_str("</section>");
    s
}

/// One finding as an `<article>`: `explain` folds the findings it explains beneath it.
pub fn finding(f: &Finding, by_id: &HashMap<&str, &Finding>, explain: bool) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<article class=\"finding {sev}\" data-id=\"{id}\"><h3><span class=\"badge {sev}\">{sev}</span> \
         <span class=\"kind\">{kind}</span> {subject}</h3><p class=\"summary\">{summary}</p>",
        sev = f.severity.as_str(),
        id = Esc(&f.id),
        kind = f.kind.as_str(),
        subject = subject(&f.subject),
        summary = Esc(&f.summary),
    );
    if let (false, Some(cause)) = (f.root, &f.caused_by) {
        let kind = by_id.get(cause.as_str()).map_or("", |c| c.kind.as_str());
        let _ = write!(
            s,
            "<p class=\"caused-by\">Caused by <span class=\"kind\">{}</span> <code>{}</code>: act on that \
             root cause first.</p>",
            kind,
            Esc(cause)
        );
    }
    s.push_str(&evidence(&f.evidence));
    if !f.action.is_empty() {
        let _ = write!(
            s,
            "<p class=\"action\"><strong>Action:</strong> {}</p>",
            Esc(&f.action)
        );
    }
    let explained: Vec<&Finding> = f
        .consequences
        .iter()
        .filter_map(|c| by_id.get(c.as_str()).copied())
        .filter(|c| c.active)
        .collect();
    if explain && !explained.is_empty() {
        let _ = write!(
            s,
            "<details class=\"consequences\" id=\"cons-{}\"><summary>{}</summary><ul>",
            url_component(&f.id),
            explains(f, by_id)
        );
        let omitted = left_out(explained.len());
        for c in explained.into_iter().take(MAX_LISTED) {
            let _ = write!(
                s,
                "<li data-id=\"{}\"><span class=\"badge {sev}\">{sev}</span> <span class=\"kind\">{}</span> {} — {}</li>",
                Esc(&c.id),
                c.kind.as_str(),
                subject(&c.subject),
                Esc(&c.summary),
                sev = c.severity.as_str()
            );
        }
        if omitted > 0 {
            let _ = write!(s, "<li class=\"left-out\">… and {omitted} more</li>");
        }
        s.push_str("</ul></details>");
    }
    s.push_str("</article>");
    s
}

/// Most levels of consequences followed below a root cause (a guard against a cycle in the list).
const MAX_DEPTH: usize = 8;

/// `Explains 68 findings on 8 nodes`: every active finding `f` explains, directly or through others — the same
/// count the demo's console gives.
fn explains(f: &Finding, by_id: &HashMap<&str, &Finding>) -> String {
    let mut seen: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    let mut nodes: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    let mut stack: Vec<(&Finding, usize)> = vec![(f, 0)];
    while let Some((at, depth)) = stack.pop() {
        if depth >= MAX_DEPTH {
            continue;
        }
        for c in at.consequences.iter().filter_map(|c| by_id.get(c.as_str())) {
            if c.active && seen.insert(c.id.as_str()) {
                if !c.subject.node.is_empty() {
                    nodes.insert(c.subject.node.as_str());
                }
                stack.push((c, depth + 1));
            }
        }
    }
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    format!(
        "Explains {} finding{} on {} node{}",
        seen.len(),
        plural(seen.len()),
        nodes.len(),
        plural(nodes.len())
    )
}

/// The subject as text with links: `node node-03 · interface eth0 · job 1001`.
pub fn subject(sub: &Subject) -> String {
    let mut parts: Vec<String> = Vec::new();
    if !sub.node.is_empty() {
        parts.push(format!(
            "node <a class=\"node\" href=\"/node/{}\">{}</a>",
            url_component(&sub.node),
            Esc(&sub.node)
        ));
    }
    let named = [
        ("interface", &sub.interface),
        ("device", &sub.device),
        ("port", &sub.port),
        ("GPU", &sub.gpu),
        ("link", &sub.link),
        ("setting", &sub.setting),
    ];
    for (what, v) in named {
        if let Some(v) = v {
            // An interface is its own device and port: said once.
            let repeat = sub.interface.as_ref() == Some(v) && what != "interface";
            if !repeat {
                parts.push(format!("{what} <code>{}</code>", Esc(v)));
            }
        }
    }
    if let Some(j) = &sub.job {
        parts.push(format!(
            "job <a class=\"job\" href=\"/job/{}\">{}</a>",
            url_component(j),
            Esc(j)
        ));
    }
    format!("<span class=\"subject\">{}</span>", parts.join(" · "))
}

/// An evidence detail as text: a number in the unit its key implies (`min`/`max`/`median` in the evidence's
/// `unit`, `…_bytes_per_second` as GB/s, `…_bytes` as GB, `…_share`/`…_ratio`/`…utilization`/`…efficiency`/
/// `sm_activity` as %, `…_s`/`…_seconds` as ms or s, a Unix time plain), a list as comma-separated text, an
/// object as `key value` pairs. Unescaped: the caller escapes.
fn detail(key: &str, unit: &str, v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.as_f64().map_or(n.to_string(), |x| number(key, unit, x)),
        Value::Array(items) => items
            .iter()
            .map(|x| detail(key, unit, x))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Object(m) => m
            .iter()
            .map(|(k, x)| format!("{} {}", k.replace('_', " "), detail(k, unit, x)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// A number under `key` (see [`detail`]).
fn number(key: &str, unit: &str, x: f64) -> String {
    let ends = |s: &[&str]| s.iter().any(|e| key.ends_with(e));
    if matches!(key, "min" | "max" | "median") {
        units::in_unit(x, unit)
    } else if ends(&["bytes_per_second"]) {
        units::rate(Some(x))
    } else if ends(&["_bytes", "bytes_per_step"]) || key == "bytes" {
        units::bytes(Some(x))
    } else if ends(&[
        "share",
        "_ratio",
        "utilization",
        "efficiency",
        "sm_activity",
    ]) {
        units::percent(Some(x))
    } else if ends(&["_unix_s"]) {
        units::plain(x)
    } else if ends(&["_s", "_seconds"]) {
        units::seconds(Some(x))
    } else if ends(&["_per_second"]) {
        format!("{}/s", units::plain(x))
    } else {
        units::plain(x)
    }
}

/// The evidence as a two-column table.
fn evidence(e: &Evidence) -> String {
    let mut rows: Vec<(String, String)> =
        vec![("measured".into(), units::in_unit(e.measured, &e.unit))];
    if let Some(x) = e.expected {
        rows.push(("expected".into(), units::in_unit(x, &e.unit)));
    }
    if let Some(n) = e.over_steps {
        rows.push(("over steps".into(), n.to_string()));
    }
    if let Some(t) = e.over_seconds {
        rows.push(("over".into(), units::seconds(Some(t))));
    }
    for (k, v) in &e.details {
        rows.push((k.replace('_', " "), detail(k, &e.unit, v)));
    }
    let mut s = String::from("<table class=\"evidence\"><tbody>");
    for (k, v) in rows {
        let _ = write!(s, "<tr><th>{}</th><td>{}</td></tr>", Esc(&k), Esc(&v));
    }
    s.push_str("</tbody></table>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_prints_units_and_lists_as_text_escaped() {
        let e = Evidence::new(4.8e9, "bytes_per_second")
            .detail("max", 4_899_999_973.3)
            .detail("min", 4.66e9)
            .detail("nodes", vec!["node-00", "node-01<b>"])
            .detail("peer_fabric_bytes_per_second", 2.5e10)
            .detail("bytes_per_step", 7.7e8)
            .detail("busy_share", 0.203)
            .detail("step_period_s", 0.354)
            .detail("probe_at_unix_s", 1_700_000_000.0)
            .detail("findings", 7);
        let html = evidence(&e);
        for want in [
            "<th>max</th><td>4.90 GB/s</td>",
            "<th>min</th><td>4.66 GB/s</td>",
            "<th>nodes</th><td>node-00, node-01&lt;b&gt;</td>",
            "<th>peer fabric bytes per second</th><td>25.00 GB/s</td>",
            "<th>bytes per step</th><td>770 MB</td>",
            "<th>busy share</th><td>20%</td>",
            "<th>step period s</th><td>354 ms</td>",
            "<th>probe at unix s</th><td>1700000000</td>",
            "<th>findings</th><td>7</td>",
        ] {
            assert!(html.contains(want), "{want} in {html}");
        }
        assert!(!html.contains('['), "{html}");
        let ratio = Evidence::new(0.17, "ratio").detail("max", 0.1702);
        assert!(evidence(&ratio).contains("<th>max</th><td>17%</td>"));
    }
}
