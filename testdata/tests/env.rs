//! The helpers as a test sees them, reading the real process environment: each case runs a probe test of this
//! binary in a child process with its own `COMMWATCH_SHARED_TESTDATA` and `CI` (setting them in this process
//! would race with the other tests).

use std::path::Path;
use std::process::{Command, Output};

#[test]
#[ignore = "a probe, run by the other tests in a child process"]
fn probe_shared() {
    let found = commwatch_testdata::shared_testdata!("sysfs/gpud_h100");
    println!("PROBE found={found:?}");
}

#[test]
#[ignore = "a probe, run by the other tests in a child process"]
fn probe_gpud_h100() {
    let Some(tree) = commwatch_testdata::gpud_h100_sysfs!() else {
        println!("PROBE none");
        return;
    };
    let read = |p: &str| std::fs::read_to_string(tree.path().join(p)).unwrap();
    println!(
        "PROBE rate={:?} ndev={:?} eth0={:?}",
        read("class/infiniband/mlx5_bond_0/ports/1/rate"),
        read("class/infiniband/mlx5_bond_0/ports/1/gid_attrs/ndevs/0"),
        read("class/net/eth0/speed"),
    );
}

/// Runs one probe with `COMMWATCH_SHARED_TESTDATA=shared` and `CI` as given (unset when `None`); its output,
/// and what it wrote to its own skip log after a `SKIP LOG:` line (the run's log is left alone).
fn probe(name: &str, shared: &Path, ci: Option<&str>) -> (Output, String) {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("skips.txt");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--ignored", "--nocapture"])
        .env("COMMWATCH_SHARED_TESTDATA", shared)
        .env(commwatch_testdata::skip::SKIP_LOG_VAR, &log)
        .env_remove("CI");
    if let Some(ci) = ci {
        cmd.env("CI", ci);
    }
    let out = cmd.output().expect("run the probe");
    let text = format!(
        "{}{}\nSKIP LOG:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    (out, text)
}

#[test]
fn absent_outside_ci_skips_loudly_and_passes() {
    let (out, text) = probe("probe_shared", Path::new("/nonexistent/cw"), None);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("PROBE found=None"), "{text}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "*** SKIPPED probe_shared: shared test data not found at /nonexistent/cw/sysfs/gpud_h100; \
             set COMMWATCH_SHARED_TESTDATA ***"
        ),
        "{text}"
    );
    // And it is recorded by name for the end of the run.
    assert!(
        text.ends_with(
            "SKIP LOG:\nprobe_shared: shared test data not found at /nonexistent/cw/sysfs/gpud_h100; \
             set COMMWATCH_SHARED_TESTDATA\n"
        ),
        "{text}"
    );
    // CI set to anything but `true` is not CI.
    let (out, text) = probe("probe_shared", Path::new("/nonexistent/cw"), Some("1"));
    assert!(out.status.success(), "{text}");
}

#[test]
fn absent_under_ci_fails_naming_the_path_and_the_variable() {
    let (out, text) = probe("probe_shared", Path::new("/nonexistent/cw"), Some("true"));
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(
            "probe_shared: shared test data not found at /nonexistent/cw/sysfs/gpud_h100 \
             (required when CI=true); put it there or set COMMWATCH_SHARED_TESTDATA"
        ),
        "{text}"
    );
    assert!(!text.contains("PROBE"), "{text}");
}

#[test]
fn the_variable_points_at_the_data() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("sysfs/gpud_h100")).unwrap();
    let (out, text) = probe("probe_shared", dir.path(), Some("true"));
    assert!(out.status.success(), "{text}");
    let want = dir.path().canonicalize().unwrap().join("sysfs/gpud_h100");
    assert!(
        text.contains(&format!("PROBE found=Some({want:?})")),
        "{text}"
    );
    assert!(!text.contains("SKIPPED"), "{text}");
}

#[test]
fn the_h100_tree_is_the_shared_capture_plus_the_project_additions() {
    // A stand-in for the shared capture: one file of the bond's port.
    let dir = tempfile::tempdir().unwrap();
    let port = dir
        .path()
        .join("sysfs/gpud_h100/sys-class-infiniband-h100.0/mlx5_bond_0/ports/1");
    std::fs::create_dir_all(&port).unwrap();
    std::fs::write(port.join("rate"), "200 Gb/sec (2X NDR)\n").unwrap();
    let (out, text) = probe("probe_gpud_h100", dir.path(), Some("true"));
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(r#"PROBE rate="200 Gb/sec (2X NDR)\n" ndev="ens1f0np0\n" eth0="25000\n""#),
        "{text}"
    );

    let (out, text) = probe("probe_gpud_h100", Path::new("/nonexistent/cw"), None);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("PROBE none"), "{text}");
    assert!(
        text.contains(
            "*** SKIPPED probe_gpud_h100: shared test data not found at \
         /nonexistent/cw/sysfs/gpud_h100/sys-class-infiniband-h100.0;"
        ),
        "{text}"
    );
}
