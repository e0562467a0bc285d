//! Checks of the deployment files with the real tools: `promtool` (Prometheus config, rules, rule unit tests,
//! the agent's `/metrics`) and `systemd-analyze verify` (units). Without the tools the tests say so loudly and
//! pass on a developer machine; in CI (`CI=true`) a missing tool is a failure (`.ci/run` installs them).
//! And the runbooks: every alert and every finding kind has its section in `docs/runbooks.md`, and every alert
//! links its section and a dashboard that exists; every finding kind has one alert, or is one of
//! [`KINDS_WITHOUT_ALERT`] and its runbook says so.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `true` when `tool` can run; otherwise skips loudly, or fails in CI.
fn have(tool: &str) -> bool {
    have_from(tool, "prometheus systemd")
}

/// [`have`] for a tool of the Debian `packages`.
fn have_from(tool: &str, packages: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        commwatch_testdata::skip::unavailable(&format!(
            "{tool} is not installed (apt-get install {packages}; .ci/run installs them)"
        ));
    }
    ok
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run tool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn prometheus_config_rules_and_rule_unit_tests() {
    if !have("promtool") {
        return;
    }
    let dir = root().join("deploy/prometheus");
    let out = run(Command::new("promtool")
        .args(["check", "config", "prometheus.yml"])
        .current_dir(&dir));
    assert!(out.contains("SUCCESS"), "{out}");
    run(Command::new("promtool")
        .args([
            "check",
            "rules",
            "rules/commwatch-recording.yml",
            "rules/commwatch-alerts.yml",
        ])
        .current_dir(&dir));
    let out = run(Command::new("promtool")
        .args(["test", "rules", "tests/commwatch-alerts.test.yml"])
        .current_dir(&dir));
    assert!(out.contains("SUCCESS"), "{out}");
}

/// A `prometheus` server, killed and reaped on drop.
struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Number of series an instant query of `url`'s Prometheus answers; `None` before it answers.
fn series_count(url: &str, expr: &str) -> Option<usize> {
    let v: serde_json::Value = client()
        .post(format!("{url}/api/v1/query"))
        .form(&[("query", expr)])
        .send()
        .ok()?
        .json()
        .ok()?;
    v["data"]["result"].as_array().map(Vec::len)
}

/// The shipped `prometheus.yml` as a real Prometheus applies it to a real collector and agent (only the targets,
/// the intervals and the rules' directory replaced): a collector's series with a `node` label carry
/// `instance` = that node and `collector_instance` = the target; its own series keep the target's `instance`;
/// an agent's `instance` is its target's host.
#[test]
fn prometheus_config_gives_per_node_series_their_node_as_instance() {
    if !have("prometheus") {
        return;
    }
    let Some(h100) = commwatch_testdata::gpud_h100_sysfs!() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http, agent_http, prom) = (free_port(), free_port(), free_port(), free_port());
    let _collector = collector(dir.path(), "collector", grpc, http, &[]);
    let listen = format!("127.0.0.1:{agent_http}");
    let _agent = agent(
        dir.path(),
        "gpu-007",
        h100.path(),
        grpc,
        &["--http-listen", &listen],
    );
    let mut config =
        std::fs::read_to_string(root().join("deploy/prometheus/prometheus.yml")).unwrap();
    let rules = root().join("deploy/prometheus/rules/");
    for (from, to) in [
        ("\"127.0.0.1:9470\"", format!("\"127.0.0.1:{http}\"")),
        (
            "[\"gpu-001:9471\", \"gpu-002:9471\"]",
            format!("[\"localhost:{agent_http}\"]"),
        ),
        ("scrape_interval: 15s", "scrape_interval: 1s".into()),
        ("scrape_interval: 30s", "scrape_interval: 1s".into()),
        ("- rules/", format!("- {}", rules.display())),
    ] {
        assert!(
            config.contains(from),
            "prometheus.yml no longer holds {from}"
        );
        config = config.replace(from, &to);
    }
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(&cfg, config).unwrap();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let _prometheus = Prometheus(
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn prometheus"),
    );
    let url = format!("http://127.0.0.1:{prom}");
    let per_node = format!(
        "commwatch_link_capacity_bytes_per_second{{instance=\"gpu-007\", collector_instance=\"127.0.0.1:{http}\"}}"
    );
    let found = wait_for(Duration::from_secs(60), || {
        series_count(&url, &per_node).filter(|n| *n > 0)
    });
    let log_text =
        || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    assert!(
        found.is_some(),
        "no per-node series with instance=gpu-007:\n{}",
        log_text()
    );
    let count = |expr: &str| series_count(&url, expr).expect("prometheus answers");
    assert_eq!(
        count("{job=\"commwatch-collector\", node!=\"\", instance!=\"gpu-007\"}"),
        0,
        "a per-node series kept another instance"
    );
    assert_eq!(
        count(&format!(
            "commwatch_build_info{{job=\"commwatch-collector\", instance=\"127.0.0.1:{http}\", collector_instance=\"\"}}"
        )),
        1,
        "the collector's own series keep the target's instance"
    );
    let agent_up = wait_for(Duration::from_secs(30), || {
        series_count(
            &url,
            "up{job=\"commwatch-agent\", instance=\"localhost\"} == 1",
        )
        .filter(|n| *n == 1)
    });
    assert!(
        agent_up.is_some(),
        "the agent's instance is its host:\n{}",
        log_text()
    );
}

#[test]
fn every_alert_has_a_summary_a_runbook_description_and_a_firing_and_silent_test() {
    let rules =
        std::fs::read_to_string(root().join("deploy/prometheus/rules/commwatch-alerts.yml"))
            .unwrap();
    let tests =
        std::fs::read_to_string(root().join("deploy/prometheus/tests/commwatch-alerts.test.yml"))
            .unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 13, "{alerts:?}");
    assert_eq!(rules.matches("summary:").count(), alerts.len());
    assert_eq!(rules.matches("description:").count(), alerts.len());
    for a in alerts {
        let n = tests.matches(&format!("alertname: {a}")).count();
        assert!(
            n >= 2,
            "{a} needs a firing and a silent case in the rule tests ({n})"
        );
    }
}

/// Finding kinds no alert selects: properties of the training program, for the job's engineers rather than
/// the operators an alert pages; their runbook sections say so ("no alert by default").
const KINDS_WITHOUT_ALERT: [commwatch_collector::model::FindingKind; 2] = [
    commwatch_collector::model::FindingKind::ExposedCommunication,
    commwatch_collector::model::FindingKind::CpuBound,
];

/// The text of the `### heading` section of a Markdown document, up to the next heading of any level.
fn section<'a>(markdown: &'a str, heading: &str) -> Option<&'a str> {
    let start = markdown.find(&format!("\n### {heading}\n"))? + 1;
    let body = &markdown[start..];
    let end = body[1..].find("\n#").map_or(body.len(), |i| i + 1);
    Some(&body[..end])
}

#[test]
fn every_finding_kind_has_one_alert_or_says_why_not() {
    let rules =
        std::fs::read_to_string(root().join("deploy/prometheus/rules/commwatch-alerts.yml"))
            .unwrap();
    let runbooks = std::fs::read_to_string(root().join("docs/runbooks.md")).unwrap();
    for kind in commwatch_collector::model::FindingKind::ALL {
        // The root findings of the kind, perhaps narrowed further (a severity left out).
        let selector = format!(
            "commwatch_finding_active{{kind=\"{}\", root!=\"false\"",
            kind.as_str()
        );
        let alerts = rules.matches(&selector).count();
        if KINDS_WITHOUT_ALERT.contains(&kind) {
            let any = rules
                .matches(&format!("kind=\"{}\"", kind.as_str()))
                .count();
            assert_eq!(
                any, 0,
                "{kind} is listed in KINDS_WITHOUT_ALERT, yet a rule reads it"
            );
            let text = section(&runbooks, kind.as_str())
                .unwrap_or_else(|| panic!("docs/runbooks.md has no section {kind}"));
            assert!(
                text.to_lowercase().contains("no alert by default"),
                "docs/runbooks.md, {kind}: say that no alert pages on it"
            );
        } else {
            assert_eq!(
                alerts, 1,
                "{kind}: {alerts} alerts select {selector}: add one to commwatch-alerts.yml (with its \
                 promtool tests and runbook section), or list the kind in KINDS_WITHOUT_ALERT"
            );
        }
    }
}

#[test]
fn systemd_units_and_example_configs_verify() {
    if !have("systemd-analyze") {
        return;
    }
    let out = run(Command::new("bash")
        .arg(root().join("deploy/systemd/verify.sh"))
        .arg(BIN));
    assert!(out.contains("commwatch-agent.service: ok"), "{out}");
    assert!(out.contains("commwatch-collector.service: ok"), "{out}");
    assert!(out.contains("commwatch.sysusers: ok"), "{out}");
}

#[test]
fn agent_metrics_pass_promtool_check_metrics() {
    if !have("promtool") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let Some(h100) = commwatch_testdata::gpud_h100_sysfs!() else {
        return;
    };
    let tree = h100.path().to_path_buf();
    // No collector: the agent samples and serves its own health; the shipper keeps retrying.
    let listen = format!("127.0.0.1:{port}");
    let _a = agent(
        dir.path(),
        "lint",
        &tree,
        free_port(),
        &["--http-listen", &listen],
    );
    let url = format!("http://127.0.0.1:{port}/metrics");
    let text = wait_for(Duration::from_secs(20), || {
        get_text(&url).filter(|t| t.contains("commwatch_agent_source_read_duration_seconds_bucket"))
    })
    .expect("agent metrics");
    let (clean, msg) = promtool_check_metrics(&text);
    assert!(clean, "promtool check metrics:\n{msg}");
}

/// `true` when `cmd` runs successfully; otherwise skips loudly with `hint`, or fails in CI.
fn available(what: &str, cmd: &mut Command, hint: &str) -> bool {
    let ok = cmd.output().is_ok_and(|o| o.status.success());
    if !ok {
        commwatch_testdata::skip::unavailable(&format!("{what} is not available ({hint})"));
    }
    ok
}

#[test]
fn kubernetes_manifests_and_helm_chart_validate() {
    // helm from COMMWATCH_HELM or PATH (validate.sh reads the same variable); kubectl likewise, optional.
    let helm = std::env::var("COMMWATCH_HELM").unwrap_or_else(|_| "helm".into());
    let hint =
        "pip install kubernetes-validate; helm 3 on PATH or COMMWATCH_HELM; .ci/run installs both";
    if !available(
        "kubernetes-validate",
        Command::new("python3").args(["-c", "import kubernetes_validate"]),
        hint,
    ) || !available("helm", Command::new(&helm).arg("version"), hint)
    {
        return;
    }
    let out = run(Command::new("bash")
        .arg(root().join("deploy/kubernetes/validate.sh"))
        .arg(BIN));
    assert!(out.contains("validate.sh: all manifests valid"), "{out}");
    for set in [
        "plain",
        "helm-default",
        "helm-mtls-token",
        "helm-tls-off",
        "helm-observability",
        "chart files",
    ] {
        assert!(
            out.contains(&format!("== {set}\n")),
            "{set} not checked:\n{out}"
        );
    }
    assert!(!out.contains("FAIL"), "{out}");
    // The chart's dashboards and rules are the repository's; both are off by default.
    assert!(
        out.lines().any(|l| l.starts_with("3 dashboards and ")
            && l.ends_with("compared with the repository, 0 errors")),
        "{out}"
    );
    assert!(
        out.contains("ok   default values: no PrometheusRule, no dashboards ConfigMaps"),
        "{out}"
    );
    // Without its TLS Secret the chart fails the render, saying what to do.
    assert!(
        out.contains(
            "ok   without its TLS Secret the chart fails early: tls.mode=tls mounts the Secret"
        ),
        "{out}"
    );
}

/// GitHub's anchor of a Markdown heading: lower case, spaces as `-`, other punctuation than `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown document's headings (outside fenced code).
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// `(alert, annotation key, value)` of every `runbook_url` and `dashboard_url` in an alert rules file.
fn alert_links(rules: &str) -> Vec<(String, String, String)> {
    let mut alert = String::new();
    let mut out = Vec::new();
    for line in rules.lines().map(str::trim) {
        if let Some(a) = line.strip_prefix("- alert: ") {
            alert = a.to_string();
        }
        for key in ["runbook_url", "dashboard_url"] {
            if let Some(v) = line.strip_prefix(key).and_then(|v| v.strip_prefix(": ")) {
                out.push((alert.clone(), key.to_string(), v.to_string()));
            }
        }
    }
    out
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(anchor(" CommwatchLinkDegraded"), "commwatchlinkdegraded");
    assert_eq!(
        anchor(" management_network_traffic"),
        "management_network_traffic"
    );
    assert_eq!(anchor(" Finding kinds"), "finding-kinds");
    assert_eq!(anchor(" `agent --once` JSON"), "agent---once-json");
}

#[test]
fn every_alert_and_finding_kind_has_a_runbook_section() {
    let doc = std::fs::read_to_string(root().join("docs/runbooks.md")).unwrap();
    let sections = anchors(&doc);
    let rules =
        std::fs::read_to_string(root().join("deploy/prometheus/rules/commwatch-alerts.yml"))
            .unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    let mut missing: Vec<String> = alerts
        .iter()
        .map(|a| a.to_lowercase())
        .chain(
            commwatch_collector::model::FindingKind::ALL
                .iter()
                .map(|k| k.as_str().to_string()),
        )
        .filter(|a| !sections.contains(a))
        .collect();
    // The document's own links between sections.
    for target in doc.split("](#").skip(1) {
        let a = target.split(')').next().unwrap_or("");
        if !sections.contains(a) {
            missing.push(format!("#{a} (linked inside docs/runbooks.md)"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/runbooks.md has no section for: {missing:?}"
    );

    // Every alert links its own section and a dashboard that exists, with variables that exist.
    let links = alert_links(&rules);
    for a in &alerts {
        for key in ["runbook_url", "dashboard_url"] {
            let n = links.iter().filter(|(x, k, _)| x == a && k == key).count();
            assert_eq!(n, 1, "{a}: {n} {key} annotations");
        }
    }
    let dashboards: Vec<serde_json::Value> = std::fs::read_dir(root().join("dashboards"))
        .unwrap()
        .map(|e| {
            serde_json::from_str(&std::fs::read_to_string(e.unwrap().path()).unwrap()).unwrap()
        })
        .collect();
    for (alert, key, url) in links {
        if key == "runbook_url" {
            let (doc_url, fragment) = url.split_once('#').expect("a section anchor");
            assert!(doc_url.ends_with("/docs/runbooks.md"), "{alert}: {url}");
            assert_eq!(fragment, alert.to_lowercase(), "{alert}: {url}");
            continue;
        }
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        let uid = path
            .split("/d/")
            .nth(1)
            .and_then(|p| p.split('/').next())
            .unwrap_or_else(|| panic!("{alert}: {url} is not a Grafana /d/UID link"));
        let d = dashboards
            .iter()
            .find(|d| d["uid"] == uid)
            .unwrap_or_else(|| panic!("{alert}: no dashboard {uid}"));
        let vars: Vec<&str> = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        for part in query.split('&') {
            if let Some((name, _)) = part.split("var-").nth(1).and_then(|p| p.split_once('=')) {
                assert!(
                    vars.contains(&name),
                    "{alert}: {uid} has no variable {name}"
                );
            }
        }
        assert!(
            query.contains("from=") && query.contains("to="),
            "{alert}: {url}"
        );
    }
}

/// The values of `key: value` lines of a YAML file (any indentation, list items included), quotes removed.
fn yaml_values<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.lines()
        .map(|l| l.trim().trim_start_matches("- "))
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.split(" #").next().unwrap_or("").trim().trim_matches('"'))
        .collect()
}

#[test]
fn manifests_and_chart_run_the_image_the_script_builds() {
    let read = |p: &str| std::fs::read_to_string(root().join(p)).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let script = read("scripts/build-image.sh");
    let name = script
        .lines()
        .find_map(|l| l.strip_prefix("image=${COMMWATCH_IMAGE:-"))
        .and_then(|l| l.strip_suffix('}'))
        .expect("build-image.sh: image=${COMMWATCH_IMAGE:-NAME}");
    assert!(
        script.lines().any(|l| l == "tag=$version"),
        "the script tags the workspace version"
    );
    let image = format!("{name}:{version}");
    for f in [
        "deploy/kubernetes/agent-daemonset.yaml",
        "deploy/kubernetes/collector-deployment.yaml",
    ] {
        let text = read(f);
        let images = yaml_values(&text, "image");
        assert!(!images.is_empty(), "{f}");
        assert!(
            images.iter().all(|i| *i == image),
            "{f}: {images:?}, not {image}"
        );
    }
    let kustomization = read("deploy/kubernetes/kustomization.yaml");
    assert_eq!(yaml_values(&kustomization, "name"), [name]);
    assert_eq!(yaml_values(&kustomization, "newTag"), [version]);
    let values = read("deploy/helm/commwatch/values.yaml");
    assert_eq!(yaml_values(&values, "repository"), [name]);
    assert_eq!(
        yaml_values(&read("deploy/helm/commwatch/Chart.yaml"), "appVersion"),
        [version]
    );
    // The binary where the workloads run it.
    let binary = "/usr/local/bin/commwatch";
    assert_eq!(yaml_values(&values, "command"), [binary]);
    let containerfile = read("Containerfile");
    assert!(
        containerfile.contains(&format!("ENTRYPOINT [\"{binary}\"]"))
            && containerfile.contains(&format!("/out/commwatch {binary}")),
        "Containerfile installs and runs {binary}"
    );
}

#[test]
fn the_release_script_packages_a_stripped_binary_its_debug_information_and_checksums() {
    if !have_from("objcopy", "binutils") || !have_from("readelf", "binutils") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = run(Command::new("bash")
        .arg(root().join("scripts/release.sh"))
        .args(["--binary", BIN, "--no-image", "--out"])
        .arg(dir.path()));
    let version = env!("CARGO_PKG_VERSION");
    let arch = run(Command::new("uname").arg("-m"));
    let name = format!("commwatch-{version}-{}-linux-gnu", arch.trim());
    assert!(out.contains("release.sh: "), "{out}");
    let sums = std::fs::read_to_string(dir.path().join("SHA256SUMS")).unwrap();
    let listed: Vec<&str> = sums
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(
        listed,
        [format!("{name}.tar.gz"), format!("{name}.debug.tar.gz")]
    );
    let checked = run(Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(dir.path()));
    assert_eq!(checked.matches(": OK").count(), 2, "{checked}");
    // The binary without debug information, naming its debug file; the deployment files as files.
    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    run(Command::new("tar")
        .arg("xzf")
        .arg(dir.path().join(format!("{name}.tar.gz")))
        .arg("-C")
        .arg(&unpacked));
    let top = unpacked.join(format!("commwatch-{version}"));
    let bin = top.join("bin/commwatch");
    let sections = run(Command::new("readelf").arg("-S").arg(&bin));
    assert!(!sections.contains(".debug_info"), "{sections}");
    assert!(sections.contains(".gnu_debuglink"), "{sections}");
    let said = run(Command::new(&bin).arg("--version"));
    assert!(said.starts_with(&format!("commwatch {version} ")), "{said}");
    let rules = top.join("deploy/helm/commwatch/files/rules");
    assert!(
        rules.is_dir() && !rules.is_symlink(),
        "the chart's links resolved"
    );
    assert!(rules.join("commwatch-alerts.yml").is_file());
}

/// The value of `key = value` in a TOML file (the first, comments and quotes removed).
fn toml_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.trim_start().strip_prefix('='))
        .map(|v| v.split('#').next().unwrap_or("").trim().trim_matches('"'))
        .next()
}

/// Mebibytes of a systemd size (`256M`) or a Kubernetes quantity (`256Mi`).
fn mebibytes(v: &str) -> Option<u64> {
    let n = v.trim_end_matches("Mi").trim_end_matches('M');
    n.parse().ok()
}

#[test]
fn deployment_files_agree_with_each_other() {
    let read = |p: &str| std::fs::read_to_string(root().join(p)).unwrap();
    // Prometheus scrapes the collector where its example config listens, at 15 s or slower.
    let prometheus = read("deploy/prometheus/prometheus.yml");
    let collector_toml = read("deploy/systemd/collector.toml");
    let listen = toml_value(&collector_toml, "http_listen").unwrap();
    let collector_job = &prometheus[prometheus
        .find("job_name: commwatch-collector")
        .expect("the collector's scrape job")..];
    let collector_job = &collector_job[..collector_job
        .find("- job_name:")
        .unwrap_or(collector_job.len())];
    assert!(
        collector_job.contains(&format!("targets: [\"{listen}\"]")),
        "prometheus.yml does not scrape collector.toml's http_listen {listen}: {collector_job}"
    );
    for interval in yaml_values(&prometheus, "scrape_interval") {
        let secs = humantime::parse_duration(interval).unwrap().as_secs();
        assert!(
            secs >= 15,
            "scrape_interval {interval}: the chart's advice is 15 s or more"
        );
    }
    // The operator's monitors scrape the collector as slowly, and relabel as prometheus.yml does.
    let chart_monitors = read("deploy/helm/commwatch/templates/monitors.yaml");
    let plain_monitors = read("deploy/kubernetes/monitoring.yaml");
    let values = read("deploy/helm/commwatch/values.yaml");
    let service_monitor = &values[values.find("\nserviceMonitor:").expect("serviceMonitor")..];
    let plain_collector = &plain_monitors[..plain_monitors.find("kind: PodMonitor").unwrap()];
    for (file, text) in [
        ("values.yaml serviceMonitor", service_monitor),
        ("monitoring.yaml ServiceMonitor", plain_collector),
    ] {
        let interval = yaml_values(text, "interval")[0];
        let secs = humantime::parse_duration(interval).unwrap().as_secs();
        assert!(
            secs >= 15,
            "{file}: interval {interval}, advice 15 s or more"
        );
    }
    for (file, text) in [
        ("monitors.yaml", &chart_monitors[..]),
        ("monitoring.yaml", &plain_monitors[..]),
    ] {
        assert_eq!(
            yaml_values(text, "sourceLabels"),
            [
                "[node, instance]",
                "[node]",
                "[__meta_kubernetes_pod_node_name]"
            ],
            "{file}"
        );
        assert_eq!(
            yaml_values(text, "targetLabel"),
            ["collector_instance", "instance", "instance"],
            "{file}"
        );
    }
    assert_eq!(
        yaml_values(&prometheus, "source_labels"),
        ["[node, instance]", "[node]", "[__address__]"]
    );
    // The agent's memory limit is one figure everywhere.
    let unit = read("deploy/systemd/commwatch-agent.service");
    let systemd = unit
        .lines()
        .find_map(|l| l.strip_prefix("MemoryMax="))
        .and_then(mebibytes)
        .expect("MemoryMax=");
    let daemonset = read("deploy/kubernetes/agent-daemonset.yaml");
    let values = read("deploy/helm/commwatch/values.yaml");
    let agent_values = &values[values.find("\nagent:").expect("agent: in values.yaml")..];
    for (file, text) in [
        ("agent-daemonset.yaml", &daemonset[..]),
        ("values.yaml agent", agent_values),
    ] {
        let limits = &text[text.find("limits:").expect("limits")..];
        let memory = yaml_values(limits, "memory")
            .first()
            .and_then(|m| mebibytes(m))
            .expect("memory limit");
        assert_eq!(
            memory, systemd,
            "{file}: agent memory {memory} MiB, systemd {systemd} MiB"
        );
    }
}

/// Every systemd unit sets its descriptor limit: each listener caps its connections, and the limit keeps a
/// flood on one from using the descriptors the others (and the sources) need.
#[test]
fn every_unit_sets_a_descriptor_limit() {
    let dir = root().join("deploy/systemd");
    let mut units = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "service") {
            continue;
        }
        units += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let limit = text
            .lines()
            .find_map(|l| l.strip_prefix("LimitNOFILE="))
            .and_then(|v| v.trim().parse::<u64>().ok());
        assert!(
            limit.is_some_and(|n| n >= 1024),
            "{}: no LimitNOFILE= of at least 1024",
            path.display()
        );
    }
    assert!(units >= 2, "no units under {}", dir.display());
}
