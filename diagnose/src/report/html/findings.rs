//! The findings, most severe first: each with its severity as a colored badge, a title in words, what it is
//! about, its evidence as a table and its action as text.

use std::fmt::Write as _;

use serde_json::Value;

use super::super::model::Report;
use super::super::units::human_bytes;
use super::markup::{badge, cites, code, duration, esc, file, inline, Align, Table, UNKNOWN};
use crate::findings::{Finding, Severity};

/// The section's body.
pub fn body(r: &Report) -> String {
    if r.findings.is_empty() {
        return "<p class=\"lead\">No findings: nothing in the inputs points at a problem.</p>"
            .to_string();
    }
    let mut o = String::from("<p class=\"lead\">");
    let counts: Vec<String> = [Severity::Critical, Severity::Warning, Severity::Info]
        .into_iter()
        .filter_map(|s| {
            let n = r.findings.iter().filter(|f| f.severity == s).count();
            (n > 0).then(|| format!("{} {n}", badge(s)))
        })
        .collect();
    o.push_str(&counts.join(" "));
    o.push_str("</p>");
    for group in groups(&r.findings) {
        o.push_str(&card(&group));
    }
    o
}

/// The findings by kind, severity and action, in the order they come: one rule firing on each of 16 ranks'
/// interfaces is one card with 16 instances, not 16 cards with the same advice.
fn groups(findings: &[Finding]) -> Vec<Vec<&Finding>> {
    let mut groups: Vec<Vec<&Finding>> = Vec::new();
    for f in findings {
        let same = |g: &&mut Vec<&Finding>| {
            let first = g[0];
            (first.kind, first.severity, first.action.as_str())
                == (f.kind, f.severity, f.action.as_str())
        };
        match groups.iter_mut().find(same) {
            Some(g) => g.push(f),
            None => groups.push(vec![f]),
        }
    }
    groups
}

/// One card: the badge and the title, then each instance in two columns, its words (summary, subject) on
/// the left and its evidence table on the right (one column on a narrow screen), and the action once.
fn card(group: &[&Finding]) -> String {
    let first = group[0];
    let mut o = format!(
        "<article class=\"finding edge-{}\" data-kind=\"{}\"><h3>{} {}",
        esc(first.severity.as_str()),
        esc(first.kind),
        badge(first.severity),
        esc(&title(first.kind)),
    );
    if group.len() > 1 {
        let _ = write!(o, " <span class=\"count\">× {}</span>", group.len());
    }
    o.push_str("</h3>");
    for f in group {
        o.push_str(&instance(f));
    }
    let _ = write!(
        o,
        "<p class=\"action\"><strong>What to do:</strong> {}</p></article>",
        inline(&first.action)
    );
    o
}

/// One finding's summary, subject and evidence.
fn instance(f: &Finding) -> String {
    let class = if f.evidence.is_empty() {
        "finding-body"
    } else {
        "finding-body with-evidence"
    };
    let mut o = format!("<div class=\"{class}\"><div><p>{}</p>", inline(&f.summary));
    if !f.subject.is_empty() {
        let about: Vec<String> = f
            .subject
            .iter()
            .map(|(k, v)| {
                let value = if k == "file" { file(v) } else { code(v) };
                format!("{} {value}", esc(k))
            })
            .collect();
        let _ = write!(o, "<p class=\"subject\">About: {}</p>", about.join(" · "));
    }
    o.push_str(&cites(&f.cites));
    o.push_str("</div>");
    if !f.evidence.is_empty() {
        let mut t = Table::new(
            "evidence",
            &[("evidence", Align::Text), ("value", Align::Text)],
        );
        for (k, v) in &f.evidence {
            t.row(&[key(k), value(k, v)]);
        }
        o.push_str(&t.finish());
    }
    o.push_str("</div>");
    o
}

/// A finding kind in words: `nccl_misconfiguration` → "NCCL misconfiguration".
pub fn title(kind: &str) -> String {
    let words: Vec<String> = kind
        .split('_')
        .filter(|w| !w.is_empty())
        .map(word)
        .collect();
    capitalize(&words.join(" "))
}

/// An evidence key in words, its unit in parentheses at the end: `peak_busbw_gbps` → "Peak bus bandwidth
/// (GB/s)", `exposed_comm_us_per_step` → "Exposed communication per step (µs)". A key in capitals is an
/// environment variable and stays as written.
fn key(k: &str) -> String {
    if k.chars().any(|c| c.is_ascii_uppercase()) {
        return code(k);
    }
    let mut unit = None;
    let mut words = Vec::new();
    for w in k.split('_').filter(|w| !w.is_empty()) {
        match w {
            "gbps" if unit.is_none() => unit = Some("GB/s"),
            // Durations carry their own unit in the value (`615 ms`, `80.5 µs`).
            "us" => {}
            "bytes" if unit.is_none() => unit = Some("bytes"),
            w => words.push(word(w)),
        }
    }
    let mut s = capitalize(&words.join(" "));
    if let Some(u) = unit {
        let _ = write!(s, " ({u})");
    }
    esc(&s)
}

/// Common abbreviations spelled out or set in capitals.
fn word(w: &str) -> String {
    match w {
        "nccl" | "gdr" | "ib" | "nic" | "gpu" | "cpu" | "rdma" | "efa" | "hca" => w.to_uppercase(),
        // Plurals of the above: `NICs`, not `NICS`.
        "nics" | "gpus" | "hcas" => format!("{}s", w[..w.len() - 1].to_uppercase()),
        "busbw" => "bus bandwidth".to_string(),
        "algbw" => "algorithm bandwidth".to_string(),
        "comm" => "communication".to_string(),
        "nnodes" => "nodes".to_string(),
        "nranks" => "ranks".to_string(),
        "us" => "µs".to_string(),
        "gbps" => "GB/s".to_string(),
        other => other.to_string(),
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// An evidence value for people: sizes also in binary units, shares also in percent, lists joined.
fn value(k: &str, v: &Value) -> String {
    match v {
        Value::Null => UNKNOWN.to_string(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.to_string(),
        Value::Number(n) => {
            let mut s = esc(&n.to_string());
            if k.ends_with("bytes") {
                if let Some(b) = n.as_u64() {
                    let _ = write!(s, " ({})", esc(&human_bytes(b)));
                }
            } else if k.split('_').any(|w| w == "us") {
                if let Some(us) = n.as_f64() {
                    s = format!("<span title=\"{s} µs\">{}</span>", esc(&duration(us)));
                }
            } else if k.ends_with("share") || k.ends_with("ratio") || k.starts_with("share") {
                if let Some(f) = n.as_f64() {
                    let _ = write!(s, " ({:.0} %)", f * 100.0);
                }
            }
            s
        }
        Value::String(s) if s.is_empty() => UNKNOWN.to_string(),
        Value::String(s) => inline(s),
        Value::Array(items) if items.is_empty() => UNKNOWN.to_string(),
        Value::Array(items) => items
            .iter()
            .map(|i| value(k, i))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Object(map) => map
            .iter()
            .map(|(mk, mv)| format!("{}: {}", esc(mk), value(mk, mv)))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::report::fixtures;
    use crate::report::html::markup::without_labels;

    #[test]
    fn kinds_and_keys_in_words() {
        assert_eq!(title("nccl_misconfiguration"), "NCCL misconfiguration");
        assert_eq!(
            title("management_network_traffic"),
            "Management network traffic"
        );
        assert_eq!(title("cpu_bound"), "CPU bound");
        assert_eq!(key("nics_per_node"), "NICs per node");
        assert_eq!(key("peak_busbw_gbps"), "Peak bus bandwidth (GB/s)");
        assert_eq!(
            key("exposed_comm_us_per_step"),
            "Exposed communication per step"
        );
        assert_eq!(key("idle_time_us"), "Idle time");
        assert_eq!(key("NCCL_SOCKET_IFNAME"), "<code>NCCL_SOCKET_IFNAME</code>");
    }

    #[test]
    fn values_for_people() {
        assert_eq!(
            value("top_collective_size_bytes", &json!(67_108_864)),
            "67108864 (64 MiB)"
        );
        assert_eq!(value("share_of_link", &json!(0.9)), "0.9 (90 %)");
        assert_eq!(value("overlap_ratio", &json!(0.25)), "0.25 (25 %)");
        assert_eq!(
            value("step_time_us", &json!(615_120.0)),
            "<span title=\"615120.0 µs\">615 ms</span>"
        );
        assert_eq!(
            value("mean_lateness_us", &json!(80.5)),
            "<span title=\"80.5 µs\">80.5 µs</span>"
        );
        assert_eq!(value("ib_no_device", &json!(true)), "yes");
        assert_eq!(value("network", &json!("")), UNKNOWN);
        assert_eq!(value("hcas", &json!(["mlx5_0", "a<b"])), "mlx5_0, a&lt;b");
        assert_eq!(value("x", &json!({"k": "`v`"})), "k: <code>v</code>");
    }

    #[test]
    fn a_finding_with_badge_subject_evidence_and_action() {
        let html = without_labels(&body(&fixtures::report()));
        assert!(html.starts_with(
            "<p class=\"lead\"><span class=\"badge sev-critical\">critical</span> 1</p>"
        ));
        assert!(html.contains(
            "<h3><span class=\"badge sev-critical\">critical</span> Management network traffic</h3>\
             <div class=\"finding-body with-evidence\"><div><p>NCCL data moves over eth0 &lt;management&gt;</p>\
             <p class=\"subject\">About: interface <code>eth0</code></p>"
        ));
        assert!(html.contains("<tr><td>Socket connections</td><td>7</td></tr>"));
        assert!(html.ends_with(
            "<p class=\"action\"><strong>What to do:</strong> bind NCCL to the fabric &amp; retry</p></article>"
        ));
        assert!(!html.contains("<pre"));
    }

    #[test]
    fn one_card_per_kind_severity_and_action() {
        let mut r = fixtures::report();
        let mut second = r.findings[0].clone();
        second.summary = "NCCL data moves over eth1".to_string();
        r.findings.push(fixtures::finding(
            "straggler",
            Severity::Warning,
            "rank 3 is late",
            "look at rank 3",
        ));
        r.findings.push(second);
        let mut other_action = r.findings[0].clone();
        other_action.action = "something else".to_string();
        r.findings.push(other_action);
        let html = body(&r);
        assert_eq!(html.matches("<article").count(), 3);
        assert!(html.contains("Management network traffic <span class=\"count\">× 2</span></h3>"));
        // The two instances, then the action once.
        let card = html.split("<article").nth(1).unwrap();
        assert_eq!(
            card.matches("<div class=\"finding-body with-evidence\">")
                .count(),
            2
        );
        assert!(card.contains("NCCL data moves over eth1"));
        assert_eq!(card.matches("What to do").count(), 1);
        // The straggler keeps its place after the first card.
        assert!(html.split("<article").nth(2).unwrap().contains("Straggler"));
    }

    #[test]
    fn no_findings_say_so() {
        let mut r = fixtures::report();
        r.findings.clear();
        assert!(body(&r).contains("No findings"));
    }
}
