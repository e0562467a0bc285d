//! `commwatch baseline import FILE --collector URL` against a real collector process.

mod common;

use std::process::Command;

use common::*;

#[test]
fn a_nccl_tests_result_is_kept_by_the_collector() {
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (free_port(), free_port());
    let _c = collector(dir.path(), "collector", grpc, http, &[]);
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("diagnose/tests/data/nccl/nccl-tests-cluster-N10G1-allreduce.txt");
    let out = Command::new(BIN)
        .args(["baseline", "import"])
        .arg(&file)
        .args([
            "--collector",
            &format!("http://127.0.0.1:{http}"),
            "--job",
            "llm-7",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the collector's answer");
    let bare = stored["bare"].as_array().expect("stored bare baselines");
    assert_eq!(bare.len(), 1, "{stored:#}");
    assert_eq!(bare[0]["job"], "llm-7");
    assert_eq!(bare[0]["collective"], "all_reduce_perf");
    assert_eq!(bare[0]["nranks"], 10);
    // The peak bus bandwidth of the file (large messages): 48.89 GB/s at 8 GiB.
    assert_eq!(bare[0]["busbw_bytes_per_second"].as_f64(), Some(48.89e9));

    let kept = get_json(&format!("http://127.0.0.1:{http}/api/v1/baselines")).expect("baselines");
    let text = kept.to_string();
    assert!(
        text.contains("llm-7") && text.contains("all_reduce_perf") && text.contains("48890000000"),
        "{text}"
    );
}

#[test]
fn an_unreachable_collector_or_a_bad_file_is_a_clear_error() {
    let port = free_port();
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("diagnose/tests/data/nccl/nccl-tests-cluster-N10G1-allreduce.txt");
    let out = Command::new(BIN)
        .args(["baseline", "import"])
        .arg(&file)
        .args(["--collector", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("127.0.0.1:{port}/api/v1/baselines")),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.txt");
    std::fs::write(&junk, "this is not a nccl-tests result\n").unwrap();
    let out = Command::new(BIN)
        .args(["baseline", "import"])
        .arg(&junk)
        .args(["--collector", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("junk.txt"), "{err}");
}
