//! The real-traffic test bed's CI subset (issue #31): four network namespaces as nodes, an OpenMPI job doing a
//! data-parallel loop over shaped veth links, one agent per node, one collector, run by
//! `scripts/testbed/bed.sh` and judged by `scripts/testbed/evaluate.py` against the job's own log (steps, and
//! the kernel's counters at each step edge). Two scenarios: `healthy`, and `mgmt-one` (the seed's fault: one
//! node's rank on its management link, chosen through OpenMPI's own setting, which commwatch cannot read, so
//! traffic is the only signal). The bed must run cleanly and leave nothing behind, the evaluator must judge
//! every goal of both scenarios, and the goals in [`ASSERTED`] must say PASS. The others are printed as
//! measured, not asserted: on this bed they are met in some runs and not in others (REALITY.md has the runs),
//! and a test that fails by chance would stop every change from landing.
//!
//! It needs root, network namespaces, `tc`, `nsenter`/`unshare` and OpenMPI (`mpicc`, `mpirun`): it is
//! ignored by default and run by `.ci/run` with `--ignored`, which installs them. Run by hand with
//! `cargo test --test reality -- --ignored --nocapture`; the outputs land in
//! `target/tmp/reality/mpi-<scenario>/` (report.txt, report.json, the truth, the API snapshots, the logs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_commwatch");
const SCENARIOS: &[&str] = &["healthy", "mgmt-one"];
/// Steps per scenario: inference needs a few periods after the job is discovered (about 10 s), and the fault's
/// finding its 10 steps and a while to be seen held (30 steps: about 25 s healthy, 50 s with the fault).
const STEPS: &str = "30";
/// Goals that must PASS in every run (the evaluator's goal names): a healthy job raises no warning.
const ASSERTED: &[&str] = &["0 warnings"];
/// Goals each scenario's report must judge (PASS or FAIL), by the start of their names.
const JUDGED: &[(&str, &[&str])] = &[
    (
        "healthy",
        &[
            "every step found",
            "per-step fabric bytes",
            "period within",
            "0 warnings",
        ],
    ),
    (
        "mgmt-one",
        &[
            "management on node1 found as root",
            "management on node1 held",
            "steps during management",
        ],
    ),
];

/// What the bed needs and this machine lacks, each named with where it comes from.
fn missing_prerequisites() -> Vec<String> {
    let mut missing = Vec::new();
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        missing.push("root (network namespaces, tc, cgroups)".to_string());
    }
    for (tool, package) in [
        ("ip", "iproute2"),
        ("tc", "iproute2"),
        ("nsenter", "util-linux"),
        ("unshare", "util-linux"),
        ("mpirun", "openmpi-bin"),
        ("mpicc", "libopenmpi-dev"),
        ("python3", "python3"),
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            missing.push(format!("{tool} (Debian: {package})"));
        }
    }
    missing
}

/// The evaluator's goal lines of one scenario: (goal, verdict, detail); an unreadable report is one failure.
fn goals(report: &Path) -> Vec<(String, String, String)> {
    let text = match std::fs::read_to_string(report) {
        Ok(t) => t,
        Err(e) => {
            return vec![(
                "report".into(),
                "FAIL".into(),
                format!("{}: {e}", report.display()),
            )]
        }
    };
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            return vec![(
                "report".into(),
                "FAIL".into(),
                format!("{}: {e}", report.display()),
            )]
        }
    };
    let Some(list) = value["goals"].as_array().filter(|l| !l.is_empty()) else {
        return vec![(
            "report".into(),
            "FAIL".into(),
            format!("{}: no goals", report.display()),
        )];
    };
    list.iter()
        .map(|g| {
            let s = |i: usize| g[i].as_str().unwrap_or("?").to_string();
            (s(0), s(1), s(2))
        })
        .collect()
}

/// Namespaces, links, `/etc/netns` entries, cgroups and state directories whose name starts with `prefix`
/// (what a run must remove).
fn leftovers(prefix: &str) -> Vec<String> {
    let mut left: Vec<String> = [
        "/etc/netns",
        "/run/commwatch-testbed",
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup/cpu",
    ]
    .iter()
    .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
    .map(|e| e.path())
    .filter(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
    })
    .map(|p| p.display().to_string())
    .collect();
    left.extend(ip_leftovers(prefix));
    left
}

/// Namespaces and links whose name starts with `prefix`.
fn ip_leftovers(prefix: &str) -> Vec<String> {
    let list = |args: &[&str]| {
        Command::new("ip")
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let netns = list(&["netns", "list"]);
    let links = list(&["-o", "link", "show"]);
    netns
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .chain(
            links
                .lines()
                .filter_map(|l| l.split(": ").nth(1))
                .map(|n| n.split('@').next().unwrap_or(n)),
        )
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

#[test]
#[ignore = "needs root, network namespaces, tc and OpenMPI (about 4 minutes): run by .ci/run with --ignored"]
fn ci_subset_runs_and_a_healthy_job_raises_nothing() {
    let missing = missing_prerequisites();
    assert!(
        missing.is_empty(),
        "the test bed cannot run here; missing: {}",
        missing.join(", ")
    );
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("reality");
    let _ = std::fs::remove_dir_all(&out);
    // A prefix of this test's own, so the leftover check ignores other beds running on the machine.
    let prefix = format!("cwbt{:04x}", std::process::id() % 0x10000);
    let started = Instant::now();
    let status = Command::new(repo.join("scripts/testbed/bed.sh"))
        .args(["run", "--lib", "mpi", "--steps", STEPS, "--out"])
        .arg(&out)
        .args(SCENARIOS)
        .env("COMMWATCH_BIN", BIN)
        .env("BED_PREFIX", &prefix)
        .status()
        .expect("run scripts/testbed/bed.sh");
    let took = started.elapsed();
    eprintln!("the bed took {:.0} s", took.as_secs_f64());
    let left = leftovers(&prefix);
    assert!(left.is_empty(), "the bed left behind: {left:?}");
    assert!(
        status.success(),
        "the bed failed ({status}); see the logs under {}",
        out.display()
    );
    let mut failed = Vec::new();
    for (scenario, judged) in JUDGED {
        let dir = out.join(format!("mpi-{scenario}"));
        let goals = goals(&dir.join("report.json"));
        for (goal, verdict, detail) in &goals {
            let asserted = ASSERTED.iter().any(|a| goal.starts_with(a));
            let how = if asserted { "asserted" } else { "measured" };
            eprintln!("{scenario}: {verdict} ({how}): {goal} -- {detail}");
            if verdict != "PASS" && (asserted || verdict != "FAIL") {
                failed.push(format!("{scenario}: {verdict}: {goal} -- {detail}"));
            }
        }
        for name in judged.iter() {
            if !goals.iter().any(|(g, _, _)| g.starts_with(name)) {
                failed.push(format!(
                    "{scenario}: the evaluator did not judge \"{name}\""
                ));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "the test bed's CI subset (figures in {}/*/report.txt):\n{}",
        out.display(),
        failed.join("\n")
    );
}
