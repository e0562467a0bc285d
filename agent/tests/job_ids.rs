//! One job identity rule for the processes source and the step-marker client: the table in
//! `clients/python/tests/job_ids.json` (which the client's tests read too), applied here the way the source
//! sees a process: its raw `environ` through the allowlist, its `cgroup` text, its session and pid.

use std::path::PathBuf;

use commwatch_agent::source::processes::{
    job_id, parse_cgroup, parse_environ, rank_of, MAX_JOB_ID_BYTES,
};
use serde_json::Value as Json;

fn table() -> Vec<Json> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../clients/python/tests/job_ids.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: Json = serde_json::from_str(&text).expect("job_ids.json is JSON");
    doc["cases"].as_array().expect("cases").clone()
}

/// The raw `/proc/<pid>/environ` of a process with `env`, among variables the allowlist drops.
fn environ(env: &serde_json::Map<String, Json>) -> Vec<u8> {
    let mut raw = b"PATH=/usr/bin\0HF_TOKEN=secret\0".to_vec();
    for (k, v) in env {
        raw.extend_from_slice(k.as_bytes());
        raw.push(b'=');
        let v = v.as_str().expect("string value");
        // NUL separates environ entries: a real environment cannot hold one in a value.
        assert!(!v.contains('\0'), "{k}: a value with a NUL byte");
        raw.extend_from_slice(v.as_bytes());
        raw.push(0);
    }
    raw
}

#[test]
fn job_ids_and_ranks_follow_the_shared_table() {
    let cases = table();
    assert!(cases.len() >= 10, "the table covers every rule");
    for case in &cases {
        let name = case["name"].as_str().expect("name");
        let raw = environ(case["env"].as_object().expect("env"));
        let env = parse_environ(&raw);
        let pod = case["cgroup"].as_str().and_then(|t| parse_cgroup(t).0);
        let session = case["session"].as_u64().expect("session") as u32;
        let pid = case["pid"].as_u64().expect("pid") as u32;
        let id = job_id(&env, pod.as_deref(), session, pid);
        assert_eq!(id, case["job"].as_str().expect("job"), "{name}: job id");
        assert!(id.len() <= MAX_JOB_ID_BYTES, "{name}: {} bytes", id.len());
        let rank = case["rank"].as_u64().map(|r| r as u32);
        assert_eq!(rank_of(&env), rank, "{name}: rank");
    }
}
