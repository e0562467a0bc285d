//! Hostile baselines (issue #13, failures 1 and 4): a number out of bounds is refused at the edge naming its
//! field, a stored record that cannot be read is skipped and counted at start (never fatal), a request over
//! the limits is refused naming the limit, and what a `200` acknowledged survives a kill.

mod common;

use std::path::Path;

use common::*;
use commwatch_collector::CollectorHandle;
use commwatch_model::baseline::MAX_TESTS_PER_REQUEST;

async fn with_state(dir: &Path) -> CollectorHandle {
    let mut cfg = config();
    cfg.state_dir = Some(dir.to_path_buf());
    collector(cfg).await
}

async fn post(h: &CollectorHandle, body: String) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .post(format!("http://{}/api/v1/baselines", h.http_addr))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("an answer");
    let status = r.status().as_u16();
    (status, r.json().await.expect("a JSON answer"))
}

async fn held(h: &CollectorHandle) -> serde_json::Value {
    let (code, body) = get(format!("http://{}/api/v1/baselines", h.http_addr)).await;
    assert_eq!(code, 200);
    serde_json::from_str(&body).unwrap()
}

fn persist_errors(text: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix("commwatch_collector_persist_errors_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("commwatch_collector_persist_errors_total exported")
}

fn tests_body(n: usize, gbps: &str) -> String {
    let tests: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"collective":"c{i}","peak_busbw_gbps":{gbps}}}"#))
        .collect();
    format!(r#"{{"tests":[{}]}}"#, tests.join(","))
}

#[tokio::test]
async fn an_infinite_baseline_is_refused_and_the_collector_still_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let h = with_state(dir.path()).await;
    let (code, answer) = post(
        &h,
        r#"{"tests":[{"collective":"all_reduce","peak_busbw_gbps":1e300}]}"#.into(),
    )
    .await;
    assert_eq!(code, 400, "{answer}");
    assert_eq!(answer["field"], "tests[0].peak_busbw_gbps", "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("at most"),
        "{answer}"
    );
    assert_eq!(held(&h).await["bare"], serde_json::json!([]));
    let (code, answer) = post(&h, tests_body(1, "48.89")).await;
    assert_eq!(code, 200, "{answer}");
    h.shutdown().await;

    let h = with_state(dir.path()).await;
    let kept = held(&h).await;
    assert_eq!(kept["bare"].as_array().unwrap().len(), 1, "{kept}");
    assert_eq!(persist_errors(&metrics(&h).await), 0.0);
    h.shutdown().await;
}

#[tokio::test]
async fn an_unreadable_stored_record_is_skipped_counted_and_never_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let h = with_state(dir.path()).await;
    assert_eq!(post(&h, tests_body(2, "48.89")).await.0, 200);
    h.shutdown().await;
    // What an older collector wrote for `1e300`: the infinite bytes/s as `null`; and a finding that does not
    // decode.
    let db = rusqlite::Connection::open(
        dir.path()
            .join(commwatch_collector::analysis::history::HISTORY_FILE),
    )
    .unwrap();
    db.execute_batch(
        r#"INSERT INTO analysis_baselines (key, kind, json, set_unix_s) VALUES ('bare:*:all_reduce', 'bare',
             '{"job":null,"collective":"all_reduce","busbw_bytes_per_second":null,"nranks":null,"source":"operator"}', 0);
           INSERT INTO analysis_baselines (key, kind, json, set_unix_s) VALUES ('bare:*:huge', 'bare',
             '{"job":null,"collective":"huge","busbw_bytes_per_second":1e300,"nranks":null,"source":"operator"}', 0);
           INSERT INTO analysis_findings (id, json, active, first_seen_unix_s, last_seen_unix_s)
             VALUES ('x', '{"id":"x","kind":"no_such_kind"}', 1, 0, 0);"#,
    )
    .unwrap();
    drop(db);

    let h = with_state(dir.path()).await;
    let kept = held(&h).await;
    let names: Vec<&str> = kept["bare"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["collective"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c0", "c1"], "{kept}");
    assert_eq!(persist_errors(&metrics(&h).await), 3.0);
    h.shutdown().await;
}

#[tokio::test]
async fn a_request_over_the_limits_is_refused_naming_the_limit() {
    let h = collector(config()).await;
    let (code, answer) = post(&h, tests_body(40_000, "100.0")).await;
    assert_eq!(code, 413, "{answer}");
    let want = format!("at most {MAX_TESTS_PER_REQUEST} tests");
    assert!(
        answer["error"].as_str().unwrap().contains(&want),
        "{answer}"
    );
    assert_eq!(held(&h).await["bare"], serde_json::json!([]));
    // At the limit: accepted.
    let (code, answer) = post(&h, tests_body(MAX_TESTS_PER_REQUEST, "100.0")).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(
        answer["bare"].as_array().unwrap().len(),
        MAX_TESTS_PER_REQUEST
    );
    h.shutdown().await;
}

#[tokio::test]
async fn baselines_acknowledged_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let h = with_state(dir.path()).await;
    let (code, _) = post(&h, tests_body(MAX_TESTS_PER_REQUEST, "100.0")).await;
    assert_eq!(code, 200);
    // Killed right after the answer: the baselines were written before it.
    h.abort();
    let h = with_state(dir.path()).await;
    let kept = held(&h).await;
    assert_eq!(
        kept["bare"].as_array().unwrap().len(),
        MAX_TESTS_PER_REQUEST
    );
    h.shutdown().await;
}

#[tokio::test]
async fn a_replayed_row_of_the_wrong_type_is_skipped_counted_and_never_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let h = with_state(dir.path()).await;
    h.shutdown().await;
    let db = rusqlite::Connection::open(dir.path().join("collector.sqlite3")).unwrap();
    // A node name that is a blob, an instance id that is text: rows written by hand or damaged.
    db.execute_batch(
        "INSERT INTO hellos (node, instance_id, received_unix_ns, payload) VALUES (X'00ff', 1, 1, X'');
         INSERT INTO seqs (node, instance_id, highest_seq, updated_unix_ns) VALUES ('n', 'one', 1, 0);
         INSERT INTO jobs (node, instance_id, received_unix_ns, payload) VALUES ('n', 1, 1, 'text');",
    )
    .unwrap();
    drop(db);
    let h = with_state(dir.path()).await;
    assert_eq!(persist_errors(&metrics(&h).await), 3.0);
    h.shutdown().await;
}
