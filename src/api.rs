//! The collector's JSON API as `status` and `findings` read it: the keys they use, each optional where a
//! collector of another release may lack it, so that a CLI and a collector of neighbouring releases still talk.
//! Unknown keys are ignored (the API's compatibility rule).

use commwatch_model::Severity;
use serde::Deserialize;

/// `/api/v1/nodes` element.
#[derive(Debug, Clone, Deserialize)]
pub struct Node {
    pub name: String,
    /// Seconds since the Unix epoch (the collector's clock) of the node's last message.
    #[serde(default)]
    pub last_seen_unix_s: Option<f64>,
    /// What the node's agent cannot see though a GPU node must have it (collectors before the key: none).
    #[serde(default)]
    pub blind: Vec<Blind>,
}

/// `/api/v1/nodes` `blind` element.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Blind {
    #[serde(default)]
    pub code: String,
    /// `gpu` or `fabric`.
    #[serde(default)]
    pub what: String,
    #[serde(default)]
    pub reason: String,
}

/// `/api/v1/jobs` element.
#[derive(Debug, Clone, Deserialize)]
pub struct Job {
    pub id: String,
    #[serde(default)]
    pub nodes: Vec<String>,
    #[serde(default)]
    pub ranks: Vec<serde_json::Value>,
    #[serde(default)]
    pub step_time_s: Option<f64>,
    #[serde(default)]
    pub scaling_efficiency: Option<f64>,
}

/// `/api/v1/findings` element.
#[derive(Debug, Clone, Deserialize)]
pub struct Finding {
    pub id: String,
    pub kind: String,
    pub severity: String,
    #[serde(default)]
    pub subject: Subject,
    #[serde(default)]
    pub summary: String,
    #[serde(default)]
    pub active: bool,
    /// True for a root cause. Collectors before the key existed leave it out: then a finding that no other
    /// finding explains (`caused_by` null) is a root cause.
    #[serde(default)]
    pub root: Option<bool>,
    #[serde(default)]
    pub caused_by: Option<String>,
    #[serde(default)]
    pub last_seen_unix_s: Option<f64>,
}

/// What a finding is about; absent keys do not apply.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Subject {
    #[serde(default)]
    pub node: String,
    pub device: Option<String>,
    pub port: Option<String>,
    pub interface: Option<String>,
    pub gpu: Option<String>,
    pub link: Option<String>,
    pub job: Option<String>,
    pub setting: Option<String>,
}

impl Finding {
    /// Whether it is a root cause: its `root` key, else no `caused_by`.
    pub fn is_root(&self) -> bool {
        self.root.unwrap_or(self.caused_by.is_none())
    }

    /// Its severity; `None` for a name this release does not know.
    pub fn severity(&self) -> Option<Severity> {
        Severity::parse(&self.severity)
    }
}

impl Subject {
    /// The subject in a few words: `node-03 mlx5_2:1`, `node-03 eth0`, `node-01 gpu 3 link 2`, `job 1001`.
    /// A network interface's port is its own name (`eth0:eth0`), written once.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.node.is_empty() {
            parts.push(self.node.clone());
        }
        match (&self.device, &self.port) {
            (Some(d), Some(p)) if d != p => parts.push(format!("{d}:{p}")),
            (Some(d), _) => parts.push(d.clone()),
            (None, Some(p)) => parts.push(format!("port {p}")),
            (None, None) => {}
        }
        if let Some(i) = &self.interface {
            if self.device.as_ref() != Some(i) {
                parts.push(i.clone());
            }
        }
        for (word, value) in [("gpu", &self.gpu), ("link", &self.link)] {
            if let Some(v) = value {
                parts.push(format!("{word} {v}"));
            }
        }
        if let Some(s) = &self.setting {
            parts.push(s.clone());
        }
        if let Some(j) = &self.job {
            parts.push(format!("job {j}"));
        }
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join(" ")
        }
    }
}

/// The collector's order, kept by both commands: root causes first, then the worse severity, then the most
/// recently seen, then by id.
pub fn sort_findings(findings: &mut [(serde_json::Value, Finding)]) {
    let seen = |f: &Finding| f.last_seen_unix_s.unwrap_or(0.0);
    findings.sort_by(|(_, a), (_, b)| {
        b.is_root()
            .cmp(&a.is_root())
            .then(b.severity().cmp(&a.severity()))
            .then(seen(b).total_cmp(&seen(a)))
            .then(a.id.cmp(&b.id))
    });
}

/// Reads a findings list, keeping each element as the collector sent it beside its typed view. The view's
/// strings have their control characters escaped (`commwatch_model::text`): it is what the text outputs lay
/// out on a terminal; the raw element (for `--format json`) is JSON-escaped when printed.
pub fn read_findings(
    list: Vec<serde_json::Value>,
) -> Result<Vec<(serde_json::Value, Finding)>, serde_json::Error> {
    list.into_iter()
        .map(|raw| escaped_view(&raw).map(|f| (raw, f)))
        .collect()
}

/// `raw` as a `T`, every string of it with its control characters escaped first.
pub fn escaped_view<T: serde::de::DeserializeOwned>(
    raw: &serde_json::Value,
) -> Result<T, serde_json::Error> {
    let mut v = raw.clone();
    commwatch_model::text::escape_json_strings(&mut v);
    serde_json::from_value(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(json: serde_json::Value) -> Finding {
        serde_json::from_value(json).unwrap()
    }

    /// A finding whose summary and subject carry terminal escapes (an agent's device name, a hostile or older
    /// collector's text) reads as visible text in the text outputs; the raw element keeps them for JSON.
    #[test]
    fn terminal_escapes_in_a_finding_are_shown_not_interpreted() {
        let raw = serde_json::json!({
            "id": "a\x07", "kind": "link_errors", "severity": "critical",
            "subject": {"node": "n1", "device": "mlx5_\x1b[2J", "port": "1"},
            "summary": "bad\x1b]0;owned\x07\x1b]8;;http://evil.example\x1b\\link\r\nERROR forged",
        });
        let read = read_findings(vec![raw.clone()]).unwrap();
        assert_eq!(read[0].0, raw, "kept as sent for --format json");
        let views: Vec<&Finding> = read.iter().map(|(_, f)| f).collect();
        let text = crate::cmd::findings::render_lines(&views);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains("mlx5_\\u001b[2J:1"), "{text}");
        assert!(
            text.contains("bad\\u001b]0;owned\\u0007\\u001b]8;;http://evil.example\\u001b\\link\\u000d\\u000aERROR forged"),
            "{text}"
        );
    }

    #[test]
    fn a_root_cause_is_told_by_root_or_else_by_caused_by() {
        let base = serde_json::json!({"id": "a", "kind": "link_errors", "severity": "warning"});
        assert!(finding(base.clone()).is_root());
        let mut caused = base.clone();
        caused["caused_by"] = "x".into();
        assert!(!finding(caused.clone()).is_root());
        caused["root"] = true.into();
        assert!(finding(caused).is_root());
        let mut not_root = base;
        not_root["root"] = false.into();
        assert!(!finding(not_root).is_root());
    }

    #[test]
    fn subjects_in_a_few_words() {
        let s =
            |json: serde_json::Value| serde_json::from_value::<Subject>(json).unwrap().describe();
        assert_eq!(
            s(serde_json::json!({"node": "node-03", "device": "mlx5_2", "port": "1"})),
            "node-03 mlx5_2:1"
        );
        assert_eq!(
            s(
                serde_json::json!({"node": "node-03", "device": "eth0", "port": "eth0", "interface": "eth0"})
            ),
            "node-03 eth0"
        );
        assert_eq!(
            s(serde_json::json!({"node": "node-01", "gpu": "3", "link": "2"})),
            "node-01 gpu 3 link 2"
        );
        assert_eq!(
            s(serde_json::json!({"node": "", "job": "1001"})),
            "job 1001"
        );
        assert_eq!(
            s(serde_json::json!({"node": "n", "setting": "NCCL_SOCKET_IFNAME", "job": "7"})),
            "n NCCL_SOCKET_IFNAME job 7"
        );
        assert_eq!(s(serde_json::json!({})), "-");
    }

    #[test]
    fn roots_first_then_worse_then_by_id() {
        let raw = vec![
            serde_json::json!({"id": "c", "kind": "k", "severity": "critical", "caused_by": "a"}),
            serde_json::json!({"id": "b", "kind": "k", "severity": "info"}),
            serde_json::json!({"id": "a", "kind": "k", "severity": "warning"}),
            serde_json::json!({"id": "d", "kind": "k", "severity": "warning"}),
        ];
        let mut list = read_findings(raw).unwrap();
        sort_findings(&mut list);
        let ids: Vec<&str> = list.iter().map(|(_, f)| f.id.as_str()).collect();
        assert_eq!(ids, ["a", "d", "b", "c"]);
    }
}
