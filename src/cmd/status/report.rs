//! The `status` report and its JSON document. Keys (a contract, see docs/API.md):
//! `collector` {`url`, `reachable`, `version`, `revision`}, `checked_at_unix_s`, `nodes` {`total`, `up`,
//! `stale`, `stale_after_s`, `stale_nodes` [{`name`, `last_seen_unix_s`, `age_s`}]}, `jobs` [{`id`, `nodes`,
//! `ranks`, `step_time_s`, `scaling_efficiency`}], `root_causes` (findings as `/api/v1/findings` returns them),
//! `status` (`ok` | `critical`). With several collectors (shards): `collector.url` is their URLs joined by
//! commas, each job and root cause carries the `collector` that answered it, and `collectors` [{`url`,
//! `reachable`, `version`, `revision`, `nodes`, `jobs`, `root_causes`, `error`}] says what each shard answered.

use std::time::Duration;

use commwatch_diagnose::collector::client::Scan;
use commwatch_model::Severity;
use serde::Serialize;

use crate::api::{Finding, Job, Node};

/// The collector's version and revision, from its `commwatch_build_info` line; `None` when it has none.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Version {
    pub version: Option<String>,
    pub revision: Option<String>,
}

/// The family the version is read from.
const BUILD_INFO: &str = "commwatch_build_info";

impl Version {
    /// Judges a `/metrics` line while looking for the `commwatch_build_info` sample. The exposition is sorted
    /// by family name, so a family named after it means it is not there: the scan stops without reading the
    /// (possibly megabytes of) rest.
    pub fn scan(line: &str) -> Scan {
        let (name, sample) = match line.strip_prefix('#') {
            Some(comment) => (comment.split_whitespace().nth(1).unwrap_or(""), false),
            None => (line.split(['{', ' ']).next().unwrap_or(""), true),
        };
        if name.is_empty() {
            return Scan::Next;
        }
        match name.cmp(BUILD_INFO) {
            std::cmp::Ordering::Less => Scan::Next,
            std::cmp::Ordering::Equal if sample => Scan::Found,
            std::cmp::Ordering::Equal => Scan::Next,
            std::cmp::Ordering::Greater => Scan::Stop,
        }
    }

    /// Reads `commwatch_build_info{revision="abc1234",version="0.1.0"} 1`.
    pub fn from_build_info(line: &str) -> Version {
        Version {
            version: label(line, "version"),
            revision: label(line, "revision"),
        }
    }
}

/// The value of label `key` in an exposition line (escapes `\"`, `\\`, `\n` undone).
fn label(line: &str, key: &str) -> Option<String> {
    let labels = &line[line.find('{')? + 1..];
    let mut rest = labels;
    loop {
        let (name, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        if name.trim_start_matches(',').trim() == key {
            return Some(value);
        }
        rest = &after[end + 1..];
        if rest.starts_with('}') {
            return None;
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Collector {
    pub url: String,
    pub reachable: bool,
    #[serde(flatten)]
    pub version: Version,
}

#[derive(Debug, Serialize)]
pub struct StaleNode {
    pub name: String,
    pub last_seen_unix_s: Option<f64>,
    /// Seconds since its last message, on the collector's clock; `null` when the collector gave no time.
    pub age_s: Option<f64>,
}

/// A node whose agent cannot see what a GPU node must have (NVML, a fabric link).
#[derive(Debug, Serialize)]
pub struct BlindNode {
    pub name: String,
    /// What it is blind to, as `/api/v1/nodes` says: `code`, `what` (`gpu`, `fabric`), `reason`.
    pub blind: Vec<crate::api::Blind>,
}

#[derive(Debug, Serialize)]
pub struct Nodes {
    pub total: usize,
    pub up: usize,
    pub stale: usize,
    pub stale_after_s: f64,
    pub stale_nodes: Vec<StaleNode>,
    /// Nodes whose agent is blind to its GPUs or its fabric.
    pub blind: usize,
    pub blind_nodes: Vec<BlindNode>,
}

#[derive(Debug, Serialize)]
pub struct JobLine {
    pub id: String,
    /// The shard that answered it (several collectors only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collector: Option<String>,
    pub nodes: usize,
    pub ranks: usize,
    pub step_time_s: Option<f64>,
    pub scaling_efficiency: Option<f64>,
}

/// What `status` found.
#[derive(Debug, Serialize)]
pub struct Report {
    pub collector: Collector,
    /// When the nodes were read, seconds since the Unix epoch, on the collector's clock when it sent one.
    pub checked_at_unix_s: f64,
    pub nodes: Nodes,
    pub jobs: Vec<JobLine>,
    /// The active root causes, root first then worst first, each as the API returns it.
    pub root_causes: Vec<serde_json::Value>,
    /// `critical` when an active root cause is critical, else `ok`.
    pub status: &'static str,
    /// What each shard answered (several collectors only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub collectors: Vec<ShardLine>,
    #[serde(skip)]
    pub root_views: Vec<Finding>,
}

/// One shard's part of a merged report.
#[derive(Debug, Serialize)]
pub struct ShardLine {
    pub url: String,
    pub reachable: bool,
    #[serde(flatten)]
    pub version: Version,
    /// Counts it answered; `null` when it gave no usable answer.
    pub nodes: Option<usize>,
    pub jobs: Option<usize>,
    pub root_causes: Option<usize>,
    /// Why it gave no usable answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ShardLine {
    pub fn answered(
        url: &str,
        version: &Version,
        nodes: usize,
        jobs: usize,
        roots: usize,
    ) -> ShardLine {
        ShardLine {
            url: url.to_string(),
            reachable: true,
            version: version.clone(),
            nodes: Some(nodes),
            jobs: Some(jobs),
            root_causes: Some(roots),
            error: None,
        }
    }

    pub fn failed(url: &str, reachable: bool, error: &str) -> ShardLine {
        ShardLine {
            url: url.to_string(),
            reachable,
            version: Version::default(),
            nodes: None,
            jobs: None,
            root_causes: None,
            error: Some(error.to_string()),
        }
    }
}

impl Report {
    /// Assembles the report; `now` is seconds since the epoch, `findings` the active root causes in order.
    pub fn new(
        url: &str,
        version: Version,
        now: f64,
        stale_after: Duration,
        nodes: &[Node],
        jobs: &[(Job, Option<String>)],
        findings: Vec<(serde_json::Value, Finding)>,
    ) -> Report {
        let limit = stale_after.as_secs_f64();
        let stale_nodes: Vec<StaleNode> = nodes
            .iter()
            .filter_map(|n| {
                let age = n.last_seen_unix_s.map(|t| (now - t).max(0.0));
                (age.is_none_or(|a| a > limit)).then(|| StaleNode {
                    name: n.name.clone(),
                    last_seen_unix_s: n.last_seen_unix_s,
                    age_s: age,
                })
            })
            .collect();
        let blind_nodes: Vec<BlindNode> = nodes
            .iter()
            .filter(|n| !n.blind.is_empty())
            .map(|n| BlindNode {
                name: n.name.clone(),
                blind: n.blind.clone(),
            })
            .collect();
        let critical = findings
            .iter()
            .any(|(_, f)| f.severity() == Some(Severity::Critical));
        let (root_causes, root_views) = findings.into_iter().unzip();
        Report {
            collector: Collector {
                url: url.to_string(),
                reachable: true,
                version,
            },
            checked_at_unix_s: now,
            nodes: Nodes {
                total: nodes.len(),
                up: nodes.len() - stale_nodes.len(),
                stale: stale_nodes.len(),
                stale_after_s: limit,
                stale_nodes,
                blind: blind_nodes.len(),
                blind_nodes,
            },
            jobs: jobs
                .iter()
                .map(|(j, collector)| JobLine {
                    id: j.id.clone(),
                    collector: collector.clone(),
                    nodes: j.nodes.len(),
                    ranks: j.ranks.len(),
                    step_time_s: j.step_time_s,
                    scaling_efficiency: j.scaling_efficiency,
                })
                .collect(),
            root_causes,
            status: if critical { "critical" } else { "ok" },
            collectors: Vec::new(),
            root_views,
        }
    }

    pub fn is_critical(&self) -> bool {
        self.status == "critical"
    }
}

/// The document `status --format json` prints when the collector gave no usable answer: `status` is
/// `unreachable` (no answer to `/healthz`) or `error` (it answered, then refused or failed), with the message.
pub fn failure(url: &str, reachable: bool, error: &str) -> serde_json::Value {
    serde_json::json!({
        "collector": {"url": url, "reachable": reachable, "error": error},
        "status": if reachable { "error" } else { "unreachable" },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_labels_are_read() {
        let v = Version::from_build_info(
            r#"commwatch_build_info{revision="abc1234",version="0.1.0"} 1"#,
        );
        assert_eq!(v.version.as_deref(), Some("0.1.0"));
        assert_eq!(v.revision.as_deref(), Some("abc1234"));
        let odd = Version::from_build_info(r#"commwatch_build_info{version="1.0 \"rc\"",x="y"} 1"#);
        assert_eq!(odd.version.as_deref(), Some("1.0 \"rc\""));
        assert_eq!(odd.revision, None);
        assert_eq!(
            Version::from_build_info("commwatch_build_info 1"),
            Version::default()
        );
    }

    #[test]
    fn the_scan_stops_past_the_family() {
        assert_eq!(Version::scan("# HELP commwatch_agent_x help"), Scan::Next);
        assert_eq!(
            Version::scan("commwatch_analysis_seconds_sum 1"),
            Scan::Next
        );
        assert_eq!(
            Version::scan("# TYPE commwatch_build_info gauge"),
            Scan::Next
        );
        assert_eq!(
            Version::scan(r#"commwatch_build_info{version="0.1.0"} 1"#),
            Scan::Found
        );
        assert_eq!(Version::scan("# HELP commwatch_collector_up x"), Scan::Stop);
        assert_eq!(
            Version::scan("commwatch_link_state{node=\"a\"} 1"),
            Scan::Stop
        );
        assert_eq!(Version::scan(""), Scan::Next);
    }

    fn node(name: &str, last: Option<f64>) -> Node {
        Node {
            name: name.into(),
            last_seen_unix_s: last,
            blind: Vec::new(),
        }
    }

    #[test]
    fn nodes_are_up_or_stale_on_the_given_clock() {
        let nodes = [
            node("a", Some(1000.0)),
            node("b", Some(960.0)),
            node("c", Some(1005.0)),
            node("d", None),
        ];
        let r = Report::new(
            "u",
            Version::default(),
            1000.0,
            Duration::from_secs(30),
            &nodes,
            &[],
            vec![],
        );
        assert_eq!((r.nodes.total, r.nodes.up, r.nodes.stale), (4, 2, 2));
        let stale: Vec<(&str, Option<f64>)> = r
            .nodes
            .stale_nodes
            .iter()
            .map(|s| (s.name.as_str(), s.age_s))
            .collect();
        assert_eq!(stale, [("b", Some(40.0)), ("d", None)]);
        assert_eq!(r.status, "ok");
    }

    #[test]
    fn a_critical_root_cause_makes_the_status_critical() {
        let raw = serde_json::json!({"id": "a", "kind": "link_degraded", "severity": "critical", "active": true});
        let f: Finding = serde_json::from_value(raw.clone()).unwrap();
        let r = Report::new(
            "u",
            Version::default(),
            0.0,
            Duration::from_secs(30),
            &[],
            &[],
            vec![(raw, f)],
        );
        assert!(r.is_critical());
        let doc = serde_json::to_value(&r).unwrap();
        assert_eq!(doc["status"], "critical");
        assert_eq!(doc["root_causes"][0]["id"], "a");
        assert!(doc.get("root_views").is_none());
        assert_eq!(doc["collector"]["version"], serde_json::Value::Null);
    }
}
