//! `status` for a person: one screen, a label column and what it says; long lists are cut with a count of
//! what was left out (`findings` and `--format json` give everything).

use std::fmt::Write;

use super::report::{Report, ShardLine};
use crate::cmd::findings::render_lines;

/// Most stale nodes, jobs and root causes listed; the rest is counted.
const MAX_LISTED: usize = 10;

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let mut line = |label: &str, text: &str| {
        let _ = writeln!(out, "{label:<12}{text}");
    };
    let version = match (&r.collector.version.version, &r.collector.version.revision) {
        (Some(v), Some(rev)) => format!(", version {v} (rev {rev})"),
        (Some(v), None) => format!(", version {v}"),
        _ => String::new(),
    };
    if r.collectors.is_empty() {
        line(
            "collector",
            &format!("{} reachable{version}", r.collector.url),
        );
    }
    for c in &r.collectors {
        line("collector", &shard_line(c));
    }
    line(
        "nodes",
        &format!(
            "{} up, {} stale (no message for over {})",
            r.nodes.up,
            r.nodes.stale,
            seconds(r.nodes.stale_after_s)
        ),
    );
    for s in r.nodes.stale_nodes.iter().take(MAX_LISTED) {
        let age = s.age_s.map_or("never seen".to_string(), |a| {
            format!("last seen {} ago", seconds(a))
        });
        line("", &format!("  stale: {} ({age})", s.name));
    }
    more(&mut line, r.nodes.stale_nodes.len());
    if !r.nodes.blind_nodes.is_empty() {
        line(
            "blind",
            &format!(
                "{} node(s) whose agent cannot see its GPUs or fabric",
                r.nodes.blind
            ),
        );
    }
    for b in r.nodes.blind_nodes.iter().take(MAX_LISTED) {
        let what: Vec<&str> = b.blind.iter().map(|x| x.what.as_str()).collect();
        let why = b.blind.first().map_or("", |x| x.reason.as_str());
        line(
            "",
            &format!("  blind: {} to {}: {why}", b.name, what.join(", ")),
        );
    }
    more(&mut line, r.nodes.blind_nodes.len());
    line("jobs", &r.jobs.len().to_string());
    for j in r.jobs.iter().take(MAX_LISTED) {
        let mut text = format!("  {}: {} nodes, {} ranks", j.id, j.nodes, j.ranks);
        if let Some(c) = &j.collector {
            let _ = write!(text, " (on {c})");
        }
        if let Some(s) = j.step_time_s {
            let _ = write!(text, ", step {s:.3} s");
        }
        if let Some(e) = j.scaling_efficiency {
            let _ = write!(text, ", scaling efficiency {:.0}%", e * 100.0);
        }
        line("", &text);
    }
    more(&mut line, r.jobs.len());
    line("root causes", &format!("{} active", r.root_views.len()));
    let listed: Vec<_> = r.root_views.iter().take(MAX_LISTED).collect();
    for l in render_lines(&listed).lines() {
        line("", &format!("  {l}"));
    }
    more(&mut line, r.root_views.len());
    line(
        "status",
        if r.is_critical() {
            "CRITICAL: a root cause is critical (exit status 3)"
        } else {
            "ok"
        },
    );
    out
}

/// One shard of several: what it answered, or why it did not.
fn shard_line(c: &ShardLine) -> String {
    match (&c.error, c.nodes, c.jobs, c.root_causes) {
        (Some(e), ..) if c.reachable => format!("{} ERROR: {e}", c.url),
        (Some(e), ..) => format!("{} UNREACHABLE: {e}", c.url),
        (None, Some(n), Some(j), Some(k)) => {
            let v = c
                .version
                .version
                .as_deref()
                .map_or(String::new(), |v| format!(", version {v}"));
            format!(
                "{} reachable{v}: {n} nodes, {j} jobs, {k} root causes",
                c.url
            )
        }
        _ => format!("{} reachable", c.url),
    }
}

/// `… and N more` under a list cut at [`MAX_LISTED`].
fn more(line: &mut impl FnMut(&str, &str), total: usize) {
    if total > MAX_LISTED {
        line("", &format!("  … and {} more", total - MAX_LISTED));
    }
}

/// A duration for people: `45s`, `3m 20s`, `2h 5m`.
fn seconds(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::report::Version;
    use super::*;
    use crate::api::{Finding, Job, Node};

    #[test]
    fn one_screen_with_every_part() {
        let nodes = [
            Node {
                name: "node-00".into(),
                last_seen_unix_s: Some(999.5),
                blind: vec![crate::api::Blind {
                    code: "no_nvml".into(),
                    what: "gpu".into(),
                    reason: "NVML not loaded (libnvidia-ml.so.1: not found)".into(),
                }],
            },
            Node {
                name: "node-01".into(),
                last_seen_unix_s: Some(800.0),
                blind: Vec::new(),
            },
        ];
        let job: Job = serde_json::from_value(serde_json::json!({
            "id": "1001", "nodes": ["node-00", "node-01"], "ranks": [{}, {}],
            "step_time_s": 0.25, "scaling_efficiency": 0.87
        }))
        .unwrap();
        let jobs = vec![(job, None)];
        let raw = serde_json::json!({
            "id": "m", "kind": "management_network_traffic", "severity": "critical", "active": true,
            "subject": {"node": "node-01", "device": "eth0", "port": "eth0"},
            "summary": "NCCL traffic on eth0"
        });
        let f: Finding = serde_json::from_value(raw.clone()).unwrap();
        let r = Report::new(
            "http://127.0.0.1:9470",
            Version {
                version: Some("0.1.0".into()),
                revision: Some("abc1234".into()),
            },
            1000.0,
            Duration::from_secs(30),
            &nodes,
            &jobs,
            vec![(raw, f)],
        );
        assert_eq!(
            render(&r),
            "collector   http://127.0.0.1:9470 reachable, version 0.1.0 (rev abc1234)\n\
             nodes       1 up, 1 stale (no message for over 30s)\n\
             \x20             stale: node-01 (last seen 3m 20s ago)\n\
             blind       1 node(s) whose agent cannot see its GPUs or fabric\n\
             \x20             blind: node-00 to gpu: NVML not loaded (libnvidia-ml.so.1: not found)\n\
             jobs        1\n\
             \x20             1001: 2 nodes, 2 ranks, step 0.250 s, scaling efficiency 87%\n\
             root causes 1 active\n\
             \x20             critical  management_network_traffic  node-01 eth0  NCCL traffic on eth0\n\
             status      CRITICAL: a root cause is critical (exit status 3)\n"
        );
    }

    #[test]
    fn several_shards_get_a_line_each_and_jobs_name_theirs() {
        let job: Job =
            serde_json::from_value(serde_json::json!({"id": "7", "nodes": ["a"]})).unwrap();
        let mut r = Report::new(
            "http://a:9470,http://b:9470",
            Version::default(),
            1000.0,
            Duration::from_secs(30),
            &[],
            &[(job, Some("http://a:9470".into()))],
            vec![],
        );
        r.collectors = vec![
            ShardLine::answered("http://a:9470", &Version::default(), 3, 1, 0),
            ShardLine::failed("http://b:9470", false, "connection refused"),
        ];
        let text = render(&r);
        assert!(
            text.starts_with(
                "collector   http://a:9470 reachable: 3 nodes, 1 jobs, 0 root causes\n\
                 collector   http://b:9470 UNREACHABLE: connection refused\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  7: 1 nodes, 0 ranks (on http://a:9470)\n"),
            "{text}"
        );
        let doc = serde_json::to_value(&r).unwrap();
        assert_eq!(doc["jobs"][0]["collector"], "http://a:9470");
        assert_eq!(doc["collectors"][1]["reachable"], false);
        assert_eq!(doc["collectors"][1]["nodes"], serde_json::Value::Null);
        assert_eq!(doc["collectors"][0]["nodes"], 3);
    }

    #[test]
    fn durations_for_people() {
        assert_eq!(seconds(45.2), "45s");
        assert_eq!(seconds(200.0), "3m 20s");
        assert_eq!(seconds(7500.0), "2h 5m");
    }
}
