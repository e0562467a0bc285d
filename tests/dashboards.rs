//! The Grafana dashboards (`dashboards/*.json`) and the Prometheus rules (`deploy/prometheus/rules/*.yml`)
//! checked against what commwatch really exports:
//!
//! - every `commwatch_*` name they use is one the collector (`commwatch_collector::export::names`) or the agent
//!   (`commwatch_agent::telemetry::METRIC_NAMES`) exports, so renaming a metric breaks this test, not a
//!   dashboard in production;
//! - the dashboards are well formed (schema version, the `DS_PROMETHEUS` datasource input, `job` and `node`
//!   variables from `label_values` queries);
//! - they link fleet → job → node and back: the dashboards menu keeps the time range and the variables, and
//!   every data link names a dashboard and variables that exist, carries the time range and the datasource,
//!   and takes its job or node from a label the panel's queries keep;
//! - every recording rule is read by a dashboard or another rule;
//! - with the demo (management-nic fault) streaming to its collector, one more real agent on a simulated tree
//!   sending step markers, and a real `prometheus` server scraping both on loopback, every variable query, every
//!   panel query and every recording and alert rule expression is evaluated through Prometheus' HTTP API: each
//!   must parse and return data (a panel with a data link: series carrying the link's label); and `promtool
//!   check metrics` on the collector's `/metrics` must be clean.
//!
//! Without `prometheus`/`promtool` the Prometheus test says so loudly and passes on a developer machine; in CI
//! (`CI=true`) a missing tool is a failure (`.ci/run` installs Debian's `prometheus` package).

mod common;

use std::collections::BTreeSet;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use serde_json::Value;

/// What `$__rate_interval` and `$__interval` become (Grafana computes them from the scrape interval and the
/// panel's width; with the test's 1 s scrapes, 30 s holds many samples).
const INTERVAL: &str = "30s";
/// The alerts the demo's fault (node-03's training traffic on its management NIC) raises: its own, or, when the
/// job's NCCL setting explains it, the setting's.
const FAULT_ALERTS: [&str; 2] = [
    "CommwatchManagementNetworkTraffic",
    "CommwatchNcclMisconfiguration",
];
/// How long the Prometheus test waits for every expression to return data.
const DATA_DEADLINE: Duration = Duration::from_secs(75);

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn dashboard_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("dashboards"))
        .expect("dashboards/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    v.sort();
    v
}

fn rule_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/prometheus/rules"))
        .expect("deploy/prometheus/rules/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    v.sort();
    v
}

fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `commwatch_*` metric name in `text` (recorded series `commwatch:*` are not metric names of ours).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("commwatch_") {
        // A name starts at a word boundary.
        let boundary = rest[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'));
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if boundary {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

/// Whether `name` is exported: by the collector or the agent, or a histogram's series of one (the lists do not
/// say which names are histograms; a counter, `_total`, never is).
fn exported(name: &str) -> bool {
    let known = |n: &str| {
        commwatch_collector::export::names::ALL.contains(&n)
            || commwatch_agent::telemetry::METRIC_NAMES.contains(&n)
    };
    known(name)
        || ["_bucket", "_sum", "_count"].iter().any(|s| {
            name.strip_suffix(s)
                .is_some_and(|b| !b.ends_with("_total") && known(b))
        })
}

#[test]
fn every_metric_name_in_dashboards_and_rules_is_exported() {
    let mut files = dashboard_files();
    assert_eq!(files.len(), 3, "fleet, job and node dashboards: {files:?}");
    files.extend(rule_files());
    assert!(files.len() >= 5, "{files:?}");
    let mut used = 0;
    let mut missing = Vec::new();
    for f in &files {
        let names = metric_names(&std::fs::read_to_string(f).unwrap());
        assert!(
            !names.is_empty(),
            "{} uses no commwatch metric",
            f.display()
        );
        for n in names {
            used += 1;
            if !exported(&n) {
                missing.push(format!("{}: {n}", f.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "names used by dashboards/rules that nothing exports:\n{}",
        missing.join("\n")
    );
    assert!(used >= 40, "{used}");
}

#[test]
fn the_name_scanner_sees_what_it_must() {
    let n = metric_names(
        r#"rate(commwatch_link_errors_total{node="$node"}[5m]) / commwatch:nodes_up:sum
           "uid": "commwatch-job", x_commwatch_not_ours, histogram(commwatch_agent_batch_size_bytes_bucket)"#,
    );
    let v: Vec<&str> = n.iter().map(String::as_str).collect();
    assert_eq!(
        v,
        [
            "commwatch_agent_batch_size_bytes_bucket",
            "commwatch_link_errors_total"
        ]
    );
    assert!(exported("commwatch_agent_batch_size_bytes_bucket"));
    assert!(exported("commwatch_link_errors_total"));
    assert!(!exported("commwatch_link_error_total"));
    assert!(!exported("commwatch_link_errors_total_bucket"));
}

/// Panels of a dashboard, rows' nested panels included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().into_iter().flatten() {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// A template variable: name, its `label_values(...)` query, and whether it takes several values.
struct Var {
    name: String,
    query: String,
    multi: bool,
}

fn variables(d: &Value) -> Vec<Var> {
    d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| Var {
            name: v["name"].as_str().unwrap().to_string(),
            query: v["query"]["query"]
                .as_str()
                .or(v["query"].as_str())
                .unwrap()
                .to_string(),
            multi: v["multi"] == true || v["includeAll"] == true,
        })
        .collect()
}

/// `(title, expr)` of every panel target.
fn targets(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("").to_string();
            out.push((title, t["expr"].as_str().unwrap_or("").to_string()));
        }
    }
    out
}

#[test]
fn dashboards_are_well_formed() {
    for f in dashboard_files() {
        let d = load(&f);
        let at = f.display();
        assert!(d["schemaVersion"].as_u64().unwrap() >= 36, "{at}");
        assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty()), "{at}");
        let inputs = d["__inputs"].as_array().unwrap();
        assert!(
            inputs
                .iter()
                .any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus"),
            "{at}"
        );
        let list = d["templating"]["list"].as_array().unwrap();
        assert!(
            list.iter()
                .any(|v| v["type"] == "datasource" && v["query"] == "prometheus"),
            "{at}: a datasource variable"
        );
        let vars = variables(&d);
        for want in ["job", "node"] {
            let v = vars
                .iter()
                .find(|v| v.name == want)
                .unwrap_or_else(|| panic!("{at}: variable {want}"));
            assert!(v.query.starts_with("label_values("), "{at}: {}", v.query);
        }
        let mut ids = BTreeSet::new();
        let mut n = 0;
        for p in panels(&d) {
            assert!(ids.insert(p["id"].as_u64().unwrap()), "{at}: duplicate id");
            if p["type"] == "row" {
                continue;
            }
            assert_eq!(p["datasource"]["uid"], "${DS_PROMETHEUS}", "{at}");
            let ts = p["targets"].as_array().unwrap();
            assert!(!ts.is_empty(), "{at}: {} has no query", p["title"]);
            for t in ts {
                assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}", "{at}");
                assert!(t["expr"].as_str().is_some_and(|e| !e.is_empty()), "{at}");
            }
            n += 1;
        }
        assert!(n >= 8, "{at}: {n} panels");
    }
}

// ------------------------------------------------------------------------------------------------------------
// Drill-down: fleet → job → node and back, carrying the variables and the time range.

/// A data link of a panel: its URL, and the table column it sits on (`None`: on every series of the panel).
struct DataLink {
    dashboard: String,
    panel: String,
    /// The panel's queries, as written.
    exprs: Vec<String>,
    url: String,
    column: Option<String>,
}

/// Every data link of a dashboard: the panels' `fieldConfig.defaults.links` and the links of their overrides
/// by field name (a table column).
fn data_links(d: &Value) -> Vec<DataLink> {
    let uid = d["uid"].as_str().unwrap_or("").to_string();
    let mut out = Vec::new();
    for p in panels(d) {
        let exprs: Vec<String> = p["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["expr"].as_str().map(str::to_string))
            .collect();
        let mut add = |links: &Value, column: Option<String>| {
            for l in links.as_array().into_iter().flatten() {
                out.push(DataLink {
                    dashboard: uid.clone(),
                    panel: p["title"].as_str().unwrap_or("").to_string(),
                    exprs: exprs.clone(),
                    url: l["url"].as_str().unwrap_or("").to_string(),
                    column: column.clone(),
                });
            }
        };
        add(&p["fieldConfig"]["defaults"]["links"], None);
        for o in p["fieldConfig"]["overrides"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let column = o["matcher"]["options"].as_str().map(str::to_string);
            for prop in o["properties"].as_array().into_iter().flatten() {
                if prop["id"] == "links" {
                    add(&prop["value"], column.clone());
                }
            }
        }
    }
    out
}

/// The names inside `${...}` placeholders of `url` that start with `prefix` (`__field.labels.`), up to a `:`
/// format or the closing brace.
fn placeholders(url: &str, prefix: &str) -> Vec<String> {
    url.split("${")
        .skip(1)
        .filter_map(|s| s.strip_prefix(prefix))
        .map(|s| s.split(['}', ':']).next().unwrap_or("").to_string())
        .collect()
}

/// Whether the series of `expr` keep `label`: every aggregation in it groups `by` a list naming the label (a
/// selector or a recorded series keeps its labels; the live test checks the values).
fn keeps_label(expr: &str, label: &str) -> bool {
    let aggregates = ["sum", "avg", "max", "min", "count"]
        .iter()
        .any(|a| expr.contains(&format!("{a}(")) || expr.contains(&format!("{a} (")));
    let groupings: Vec<&str> = expr
        .split("by (")
        .skip(1)
        .map(|s| s.split(')').next().unwrap_or(""))
        .collect();
    if groupings.is_empty() {
        return !aggregates;
    }
    groupings
        .iter()
        .all(|g| g.split(',').any(|l| l.trim() == label))
}

#[test]
fn drill_down_links_carry_job_node_and_time_range() {
    let dashboards: Vec<Value> = dashboard_files().iter().map(|f| load(f)).collect();
    let vars_of = |uid: &str| -> Option<BTreeSet<String>> {
        let d = dashboards.iter().find(|d| d["uid"] == uid)?;
        let list = d["templating"]["list"].as_array()?;
        Some(
            list.iter()
                .filter_map(|v| v["name"].as_str().map(str::to_string))
                .collect(),
        )
    };
    let mut edges = BTreeSet::new();
    for d in &dashboards {
        let uid = d["uid"].as_str().unwrap();
        // The dashboards menu keeps the time range and the variables.
        assert!(
            d["links"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|l| l["type"] == "dashboards"
                    && l["tags"]
                        .as_array()
                        .is_some_and(|t| t.contains(&"commwatch".into()))
                    && l["keepTime"] == true
                    && l["includeVars"] == true),
            "{uid}: a dashboards link with keepTime and includeVars"
        );
        for link in data_links(d) {
            let at = format!("{} panel {:?}: {}", link.dashboard, link.panel, link.url);
            let (path, query) = link.url.split_once('?').unwrap_or((&link.url, ""));
            let target = path
                .strip_prefix("/d/")
                .and_then(|p| p.split('/').next())
                .unwrap_or_else(|| panic!("{at}: not a /d/UID/... link"));
            let target_vars =
                vars_of(target).unwrap_or_else(|| panic!("{at}: no dashboard {target}"));
            let own_vars = vars_of(uid).unwrap();
            edges.insert((uid.to_string(), target.to_string()));
            for must in ["${__url_time_range}", "${DS_PROMETHEUS:queryparam}"] {
                assert!(query.split('&').any(|q| q == must), "{at}: lacks {must}");
            }
            for part in query.split('&') {
                if let Some((name, _)) = part.strip_prefix("var-").and_then(|p| p.split_once('=')) {
                    assert!(
                        target_vars.contains(name),
                        "{at}: {target} has no variable {name}"
                    );
                } else if let Some(name) = part
                    .strip_prefix("${")
                    .and_then(|p| p.strip_suffix(":queryparam}"))
                {
                    assert!(
                        own_vars.contains(name),
                        "{at}: {uid} has no variable {name}"
                    );
                    assert!(
                        target_vars.contains(name),
                        "{at}: {target} has no variable {name}"
                    );
                } else {
                    assert_eq!(part, "${__url_time_range}", "{at}: {part}");
                }
            }
            for label in placeholders(&link.url, "__field.labels.") {
                assert!(
                    link.column.is_none(),
                    "{at}: a series label on a column link"
                );
                for e in &link.exprs {
                    assert!(keeps_label(e, &label), "{at}: {e} drops {label}");
                }
            }
            for column in placeholders(&link.url, "__data.fields.") {
                assert_eq!(link.column.as_deref(), Some(column.as_str()), "{at}");
                assert!(
                    link.exprs.iter().any(|e| keeps_label(e, &column)),
                    "{at}: no query yields the column {column}"
                );
            }
        }
    }
    for (from, to) in [
        ("commwatch-fleet", "commwatch-job"),
        ("commwatch-fleet", "commwatch-node"),
        ("commwatch-job", "commwatch-node"),
        ("commwatch-node", "commwatch-job"),
    ] {
        assert!(
            edges.contains(&(from.to_string(), to.to_string())),
            "no data link from {from} to {to}: {edges:?}"
        );
    }
}

#[test]
fn link_checks_see_what_they_must() {
    assert_eq!(
        placeholders(
            "/d/x/y?var-node=${__field.labels.node:percentencode}&var-job=${__field.labels.training_job}",
            "__field.labels."
        ),
        ["node", "training_job"]
    );
    assert!(keeps_label(
        r#"sum by (node, source) (rate(x[5m]))"#,
        "node"
    ));
    assert!(!keeps_label(r#"sum by (source) (rate(x[5m]))"#, "node"));
    assert!(!keeps_label(r#"sum(x{node="a"})"#, "node"));
    assert!(keeps_label(
        r#"commwatch:node_fabric_transmit_bytes_per_second:sum{node=~"$node"}"#,
        "node"
    ));
    assert!(keeps_label(
        r#"commwatch_step_duration_seconds{node=~"$node"}"#,
        "training_job"
    ));
}

/// The `- record:` names of the recording rules.
fn recorded_names() -> Vec<String> {
    rule_files()
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .filter_map(|l| l.trim().strip_prefix("- record: ").map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_recording_rule_is_read_by_a_dashboard_or_an_alert() {
    let names = recorded_names();
    assert!(!names.is_empty());
    let mut readers: Vec<String> = dashboard_files()
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    // Alert expressions only: a recording rule reading another counts too.
    for f in rule_files() {
        let text = std::fs::read_to_string(&f).unwrap();
        readers.extend(
            text.lines()
                .filter(|l| {
                    !l.trim_start().starts_with("- record:") && !l.trim_start().starts_with('#')
                })
                .map(str::to_string),
        );
    }
    for n in names {
        assert!(
            readers.iter().any(|r| r.contains(&n)),
            "recording rule {n} is read by no dashboard or rule: use it or remove it"
        );
    }
}

// ------------------------------------------------------------------------------------------------------------
// Against a real Prometheus.

/// A `prometheus` server, killed on drop.
struct Prometheus {
    child: Child,
    log: PathBuf,
    url: String,
}

impl Prometheus {
    fn start(dir: &Path, config: &str) -> Prometheus {
        let port = free_port();
        let cfg = dir.join("prometheus.yml");
        std::fs::write(&cfg, config).unwrap();
        let log = dir.join("prometheus.log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn prometheus");
        let p = Prometheus {
            child,
            log,
            url: format!("http://127.0.0.1:{port}"),
        };
        let ready = wait_for(Duration::from_secs(30), || {
            get_text(&format!("{}/-/ready", p.url))
        });
        assert!(ready.is_some(), "prometheus not ready:\n{}", p.log_text());
        p
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An instant query: `Ok(number of results)` (a scalar or string counts as one), `Err(message)` when
    /// Prometheus rejects it.
    fn query(&self, expr: &str) -> Result<usize, String> {
        let r = client()
            .post(format!("{}/api/v1/query", self.url))
            .form(&[("query", expr)])
            .send()
            .map_err(|e| e.to_string())?;
        let v: Value = r.json().map_err(|e| e.to_string())?;
        if v["status"] != "success" {
            return Err(format!("{}: {}", v["errorType"], v["error"]));
        }
        let data = &v["data"];
        Ok(match data["resultType"].as_str() {
            Some("vector") | Some("matrix") => data["result"].as_array().map_or(0, Vec::len),
            _ => 1,
        })
    }

    /// [`Prometheus::query`], counting only the series that carry a non-empty `label` when one is given.
    fn query_carrying(&self, expr: &str, label: Option<&str>) -> Result<usize, String> {
        let Some(label) = label else {
            return self.query(expr);
        };
        let r = client()
            .post(format!("{}/api/v1/query", self.url))
            .form(&[("query", expr)])
            .send()
            .map_err(|e| e.to_string())?;
        let v: Value = r.json().map_err(|e| e.to_string())?;
        if v["status"] != "success" {
            return Err(format!("{}: {}", v["errorType"], v["error"]));
        }
        let series = v["data"]["result"].as_array().cloned().unwrap_or_default();
        Ok(series
            .iter()
            .filter(|s| s["metric"][label].as_str().is_some_and(|x| !x.is_empty()))
            .count())
    }

    /// Values of `label` on the series of `selector` (Grafana's `label_values(selector, label)`).
    fn label_values(&self, selector: &str, label: &str) -> Result<Vec<String>, String> {
        let r = client()
            .get(format!("{}/api/v1/label/{label}/values", self.url))
            .query(&[("match[]", selector)])
            .send()
            .map_err(|e| e.to_string())?;
        let v: Value = r.json().map_err(|e| e.to_string())?;
        if v["status"] != "success" {
            return Err(format!("{}: {}", v["errorType"], v["error"]));
        }
        let mut out: Vec<String> = v["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect();
        out.sort();
        Ok(out)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Replaces Grafana's variables in `expr`: the interval variables by [`INTERVAL`], each template variable by its
/// value (a multi-value variable by the regex Grafana renders, `(a|b)`).
fn substitute(expr: &str, values: &[(String, String)]) -> String {
    let mut e = expr
        .replace("$__rate_interval", INTERVAL)
        .replace("${__rate_interval}", INTERVAL)
        .replace("$__interval", INTERVAL)
        .replace("${__interval}", INTERVAL);
    // Longest names first, so `$node` never eats the start of a longer name.
    let mut vs: Vec<&(String, String)> = values.iter().collect();
    vs.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    for (name, value) in vs {
        e = e
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    e
}

/// Resolves a dashboard's variables in order through Prometheus: each `label_values` query must return values;
/// a single-value variable takes the first (sorted) one, as Grafana does by default; a multi-value one all of
/// them.
fn resolve(p: &Prometheus, vars: &[Var]) -> Result<Vec<(String, String)>, String> {
    let mut values: Vec<(String, String)> = Vec::new();
    for v in vars {
        let q = substitute(&v.query, &values);
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(|| format!("${}: not label_values(...): {q}", v.name))?;
        let (selector, label) = inner
            .rsplit_once(',')
            .ok_or_else(|| format!("${}: {q}", v.name))?;
        let got = p.label_values(selector.trim(), label.trim())?;
        if got.is_empty() {
            return Err(format!("${}: {q} returned no values", v.name));
        }
        let value = if v.multi {
            format!("({})", got.join("|"))
        } else {
            got[0].clone()
        };
        values.push((v.name.clone(), value));
    }
    Ok(values)
}

/// One expression to evaluate and what it stands for; with `label`, the series it returns must carry that label
/// (a data link takes its value from it).
struct Check {
    what: String,
    expr: String,
    label: Option<String>,
}

/// The "silent" form of an alert expression: its comparisons with a number removed (`== 1`, `> 120`) and its
/// `kind` matchers dropped. An alert legitimately returns nothing while its fault is absent (collector down,
/// agent silent, findings of kinds the scenario does not inject); its silent form must still return data, which
/// proves every metric it reads and every label it groups by exists.
fn silent_form(expr: &str) -> String {
    let mut e = expr.to_string();
    // `kind="..."` matchers, with the comma that joins them to other matchers.
    while let Some(i) = e.find("kind=\"") {
        let end = i + 6 + e[i + 6..].find('"').expect("closing quote") + 1;
        let (mut a, mut b) = (i, end);
        if e[b..].starts_with(", ") {
            b += 2;
        } else if e[b..].starts_with(',') {
            b += 1;
        } else if e[..a].ends_with(", ") {
            a -= 2;
        } else if e[..a].ends_with(',') {
            a -= 1;
        }
        e.replace_range(a..b, "");
    }
    e = e.replace("{}", "");
    for op in ["==", "!=", ">=", "<=", ">", "<"] {
        while let Some(i) = find_comparison(&e, op) {
            let num_start = i + op.len();
            let ws = e[num_start..].len() - e[num_start..].trim_start().len();
            let n = e[num_start + ws..]
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(e.len() - num_start - ws);
            e.replace_range(i..num_start + ws + n, "");
        }
    }
    e
}

/// Position of a comparison `op` followed by a number (not inside a label matcher).
fn find_comparison(e: &str, op: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(j) = e[from..].find(op) {
        let i = from + j;
        let after = e[i + op.len()..].trim_start();
        let before = e[..i].chars().next_back();
        let in_matcher = before == Some('!') || before == Some('=') || before == Some('<');
        if !in_matcher && after.starts_with(|c: char| c.is_ascii_digit()) {
            return Some(i);
        }
        from = i + op.len();
    }
    None
}

#[test]
fn silent_forms_of_alert_expressions() {
    assert_eq!(
        silent_form(
            r#"max by (training_job) (commwatch_finding_active{kind="scaling_efficiency_drop"}) == 1"#
        ),
        "max by (training_job) (commwatch_finding_active) "
    );
    assert_eq!(
        silent_form(r#"max(x{node="a", kind="b"}) == 1"#),
        r#"max(x{node="a"}) "#
    );
    assert_eq!(
        silent_form(
            "(time() - commwatch_node_last_seen_timestamp_seconds > 120) or (commwatch_node_up == 0)"
        ),
        "(time() - commwatch_node_last_seen_timestamp_seconds ) or (commwatch_node_up )"
    );
    assert_eq!(
        silent_form(
            r#"up{job="commwatch-collector"} == 0 or absent(up{job="commwatch-collector"})"#
        ),
        r#"up{job="commwatch-collector"}  or absent(up{job="commwatch-collector"})"#
    );
}

/// The finding kinds an alert expression selects (`kind="..."`).
fn kinds(expr: &str) -> Vec<String> {
    expr.split("kind=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next().map(str::to_string))
        .collect()
}

/// Sends begin/end step markers with samples for the demo's job (1001) over UDP until stopped: the demo's
/// simulated agents have no marker sender, so this node gives the job its marker steps and throughput.
fn send_markers(port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let now = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
        };
        let mut step = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let begin = format!(
                r#"{{"job":"1001","rank":0,"step":{step},"phase":"begin","time":{}}}"#,
                now()
            );
            let _ = s.send_to(begin.as_bytes(), ("127.0.0.1", port));
            std::thread::sleep(Duration::from_millis(300));
            let end = format!(
                r#"{{"job":"1001","rank":0,"step":{step},"phase":"end","time":{},"samples":64}}"#,
                now()
            );
            let _ = s.send_to(end.as_bytes(), ("127.0.0.1", port));
            step += 1;
        }
    })
}

#[test]
fn every_panel_query_and_rule_returns_data_from_a_real_prometheus() {
    if !have_tool("prometheus", "--version", "prometheus package")
        || !have_tool("promtool", "--version", "prometheus package")
    {
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();

    // The demo: 4 simulated nodes × 2 GPUs, node-03's NCCL traffic on its management NIC.
    let (grpc, http) = (free_port(), free_port());
    let demo = Proc::spawn(
        &[
            "demo".to_string(),
            "--scenario".into(),
            "management-nic".into(),
            "--nodes".into(),
            "4".into(),
            "--gpus-per-node".into(),
            "2".into(),
            "--grpc-listen".into(),
            format!("127.0.0.1:{grpc}"),
            "--http-listen".into(),
            format!("127.0.0.1:{http}"),
            "--duration".into(),
            "150s".into(),
            "--summary-every".into(),
            "60s".into(),
        ],
        dir.path().join("demo.log"),
    );
    let collector = format!("http://127.0.0.1:{http}");
    assert!(
        wait_for(Duration::from_secs(30), || get_text(&format!(
            "{collector}/healthz"
        )))
        .is_some(),
        "demo collector did not come up:\n{}",
        demo.log_text()
    );

    // node-04: a real agent process on a simulated tree with constant fabric traffic, a rank of job 1001 in its
    // procfs tree, and step markers: its links carry traffic for whole marker steps, so per-step bandwidth and
    // the job's throughput are measured (the demo's bursts are shorter than three of its sampling periods).
    let cluster = commwatch_sim::Cluster::constant(
        &dir.path().join("trees"),
        1,
        1,
        2_000_000_000,
        2_000_000_000,
    )
    .unwrap();
    let (_, sysfs) = cluster.node_roots().remove(0);
    let (_, procfs) = cluster.write_procfs_trees().unwrap().remove(0);
    let _updater = cluster.spawn_updater(Duration::from_millis(5));
    let udp = free_udp_port();
    let agent_http = free_port();
    let agent = Proc::spawn(
        &[
            "agent".to_string(),
            "--collector".into(),
            format!("http://127.0.0.1:{grpc}"),
            "--node".into(),
            "node-04".into(),
            "--sysfs-root".into(),
            sysfs.display().to_string(),
            "--procfs-root".into(),
            procfs.display().to_string(),
            "--steps-udp".into(),
            format!("127.0.0.1:{udp}"),
            "--steps-socket".into(),
            "off".into(),
            "--http-listen".into(),
            format!("127.0.0.1:{agent_http}"),
        ],
        dir.path().join("agent.log"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let markers = send_markers(udp, stop.clone());

    // Prometheus as deploy/prometheus/prometheus.yml wires it (job names; no honor_labels: the training job is
    // `training_job`, so nothing the collector exports collides with the scrape's `job`), on 1 s scrapes, with
    // the repository's rules.
    let rules_glob = root().join("deploy/prometheus/rules/*.yml");
    let config = format!(
        r#"global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {rules}
scrape_configs:
  - job_name: commwatch-collector
    static_configs:
      - targets: ["127.0.0.1:{http}"]
  - job_name: commwatch-agent
    static_configs:
      - targets: ["127.0.0.1:{agent_http}"]
"#,
        rules = rules_glob.display()
    );
    let prom_dir = dir.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let prom = Prometheus::start(&prom_dir, &config);

    // The rules as Prometheus loaded them (every rule of every file must be there).
    let rules_text: String = rule_files()
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let declared = rules_text
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with("- alert:") || t.starts_with("- record:")
        })
        .count();
    let loaded = get_json(&format!("{}/api/v1/rules", prom.url)).expect("rules API");
    let groups = loaded["data"]["groups"].as_array().unwrap().clone();
    let rules: Vec<Value> = groups
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect();
    assert_eq!(
        rules.len(),
        declared,
        "rules loaded vs declared\n{loaded:#}"
    );

    let dashboards: Vec<(String, Value)> = dashboard_files()
        .iter()
        .map(|f| {
            (
                f.file_name().unwrap().to_string_lossy().into_owned(),
                load(f),
            )
        })
        .collect();

    // Evaluate everything until it all returns data, or the deadline passes.
    let mut failures: Vec<String>;
    let mut evaluated;
    loop {
        failures = Vec::new();
        let mut checks: Vec<Check> = Vec::new();
        for (file, d) in &dashboards {
            match resolve(&prom, &variables(d)) {
                Ok(values) => {
                    let links = data_links(d);
                    for (title, expr) in targets(d) {
                        let e = substitute(&expr, &values);
                        assert!(
                            !e.contains('$'),
                            "{file} {title}: unresolved variable in {e}"
                        );
                        // The label the panel's data link reads, if it has one.
                        let label = links.iter().filter(|l| l.panel == title).find_map(|l| {
                            placeholders(&l.url, "__field.labels.")
                                .into_iter()
                                .chain(placeholders(&l.url, "__data.fields."))
                                .next()
                        });
                        checks.push(Check {
                            what: format!("{file} panel {title:?}"),
                            expr: e,
                            label,
                        });
                    }
                }
                Err(e) => failures.push(format!("{file}: variables: {e}")),
            }
        }
        for r in &rules {
            let name = r["name"].as_str().unwrap();
            let expr = r["query"].as_str().unwrap();
            if r["type"] == "recording" {
                checks.push(Check {
                    what: format!("recording rule {name}"),
                    expr: expr.to_string(),
                    label: None,
                });
                // The recorded series itself, once the rule group has run.
                checks.push(Check {
                    what: format!("recorded series {name}"),
                    expr: name.to_string(),
                    label: None,
                });
                continue;
            }
            match prom.query(expr) {
                Err(e) => failures.push(format!("alert {name}: {e}\n    {expr}")),
                Ok(n) if n > 0 => {}
                Ok(_) => {
                    // Silent in this scenario: its metrics and grouping labels must exist, and every finding
                    // kind it selects must be a kind the collector exports.
                    checks.push(Check {
                        what: format!("alert {name} (silent form)"),
                        expr: silent_form(expr),
                        label: None,
                    });
                    for k in kinds(expr) {
                        checks.push(Check {
                            what: format!("alert {name}: finding kind {k}"),
                            expr: format!(r#"commwatch_findings_raised_total{{kind="{k}"}}"#),
                            label: None,
                        });
                    }
                }
            }
        }
        // The injected fault must fire an alert's expression, not only a silent form: its own, or that of the
        // NCCL setting that explains it (alerts fire on root causes).
        let fault_alert = |name: &str| {
            rules
                .iter()
                .find(|r| r["name"] == name)
                .unwrap_or_else(|| panic!("{name}"))["query"]
                .as_str()
                .unwrap()
                .to_string()
        };
        checks.push(Check {
            what: "the management-nic fault's alert expression".into(),
            expr: format!(
                "({}) or ({})",
                fault_alert(FAULT_ALERTS[0]),
                fault_alert(FAULT_ALERTS[1])
            ),
            label: None,
        });
        evaluated = checks.len();
        for c in &checks {
            match prom.query_carrying(&c.expr, c.label.as_deref()) {
                Ok(0) => failures.push(format!(
                    "{}: no data{}\n    {}",
                    c.what,
                    c.label
                        .as_ref()
                        .map_or(String::new(), |l| format!(" with the label {l}")),
                    c.expr
                )),
                Ok(_) => {}
                Err(e) => failures.push(format!("{}: {e}\n    {}", c.what, c.expr)),
            }
        }
        if failures.is_empty() || started.elapsed() > DATA_DEADLINE {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(
        failures.is_empty(),
        "{} of {evaluated} expressions failed after {:?}:\n{}\n--- prometheus\n{}\n--- agent\n{}",
        failures.len(),
        started.elapsed(),
        failures.join("\n"),
        prom.log_text(),
        agent.log_text()
    );

    // Every rule evaluates without error in Prometheus itself.
    let loaded = get_json(&format!("{}/api/v1/rules", prom.url)).expect("rules API");
    for g in loaded["data"]["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            assert_ne!(r["health"], "err", "{r:#}");
        }
    }
    // The injected fault's alert is pending or firing.
    let alerts = get_json(&format!("{}/api/v1/alerts", prom.url)).expect("alerts API");
    assert!(
        alerts["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(
                |a| FAULT_ALERTS.iter().any(|n| a["labels"]["alertname"] == *n)
                    && a["labels"]["node"] == "node-03"
            ),
        "{alerts:#}"
    );

    // The collector's exposition, with GPUs, steps and findings in it, passes promtool's lint.
    let text = get_text(&format!("{collector}/metrics")).expect("collector /metrics");
    for family in [
        "commwatch_gpu_sm_activity_ratio",
        "commwatch_finding_active",
        "commwatch_step_link_bandwidth_bytes_per_second",
    ] {
        assert!(text.contains(family), "{family} missing from /metrics");
    }
    // The demo runs at the default detail, so every panel above was checked against it: a link's named
    // counters summed (no `counter` label), the node's CPU total only, the PCIe maxima as a `max` label.
    for (absent, why) in [
        (",counter=\"", "counter_detail = \"family\""),
        (",cpu=\"", "cpu_detail = \"total\""),
        (
            "commwatch_gpu_pcie_link_generation_max{",
            "gpu_detail = \"summary\"",
        ),
        (
            "commwatch_gpu_nvlink_transmit_bytes_per_second{",
            "gpu_detail = \"summary\"",
        ),
    ] {
        assert!(!text.contains(absent), "{absent} in /metrics with {why}");
    }
    assert!(
        text.contains("commwatch_link_errors_total{") && text.contains(",max=\""),
        "summed errors and PCIe maxima missing from /metrics"
    );
    let (clean, msg) = promtool_check_metrics(&text);
    assert!(clean, "promtool check metrics on the collector:\n{msg}");

    stop.store(true, Ordering::Relaxed);
    markers.join().unwrap();
    eprintln!(
        "{evaluated} expressions evaluated with data ({} dashboards, {} rules) in {:?}",
        dashboards.len(),
        rules.len(),
        started.elapsed()
    );
}
