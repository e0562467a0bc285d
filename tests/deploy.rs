//! Checks of the deployment files with the real tools: `promtool` (Prometheus config, rules, rule unit tests,
//! the agent's `/metrics`) and `systemd-analyze verify` (units). Without the tools the tests say so loudly and
//! pass on a developer machine; in CI (`CI=true`) a missing tool is a failure (`.ci/run` installs them).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `true` when `tool` can run; otherwise skips loudly, or fails in CI.
fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !ci,
            "{tool} is required in CI (.ci/run installs Debian's prometheus and systemd packages)"
        );
        eprintln!(
            "\n*** SKIPPED: {tool} is not installed (apt-get install prometheus systemd) ***\n"
        );
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
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(!ci, "{what} is required in CI ({hint})");
        eprintln!("\n*** SKIPPED: {what} is not available ({hint}) ***\n");
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
    for set in ["plain", "helm-default", "helm-mtls-token", "helm-tls-off"] {
        assert!(
            out.contains(&format!("== {set}\n")),
            "{set} not checked:\n{out}"
        );
    }
    assert!(!out.contains("FAIL"), "{out}");
}
