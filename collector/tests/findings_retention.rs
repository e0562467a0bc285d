//! Findings history retention (#34, item 7): after node churn the state database held 40,000 findings and
//! 80,000 events, all reloaded at start. Here: many findings churned through the history, then pruned — by
//! age, by the cap on cleared findings and by the cap on events — with the active ones and the recent history
//! kept; a start reloads only what the tracker keeps, prunes right after, and counts it in `/metrics`.

use std::path::Path;
use std::time::Duration;

use commwatch_collector::analysis::history::{History, Pruned, Retention, Upkeep};
use commwatch_collector::analysis::tracker::{Change, MAX_INACTIVE};
use commwatch_collector::analysis::{Evidence, Finding, FindingKind, Severity, Subject};
use commwatch_collector::CollectorConfig;

const DAY: f64 = 86_400.0;

fn finding(i: usize, last_seen: f64, active: bool) -> Finding {
    let node = format!("node-{i:05}");
    Finding {
        id: format!("link_errors:{node}:mlx5_0:1"),
        kind: FindingKind::LinkErrors,
        severity: Severity::Critical,
        subject: Subject {
            node: node.clone(),
            device: Some("mlx5_0".into()),
            port: Some("1".into()),
            ..Default::default()
        },
        summary: format!("{node} mlx5_0 port 1 error counters rising"),
        evidence: Evidence::new(1.0 + i as f64, "errors_per_second").expected(0.0),
        action: "reseat the cable".into(),
        first_seen_unix_s: last_seen - 60.0,
        last_seen_unix_s: last_seen,
        active,
        root: true,
        caused_by: None,
        consequences: vec![],
    }
}

/// Writes `n` findings raised and cleared `age_s` before `now` (ids from `first`), as the engine does (one
/// transaction per evaluation's changes).
fn churn(h: &mut History, first: usize, n: usize, now: f64, age_s: f64) {
    let raised: Vec<Change> = (first..first + n)
        .map(|i| Change::Raised(finding(i, now - age_s, true)))
        .collect();
    h.record(&raised, now - age_s - 60.0).unwrap();
    let cleared: Vec<Change> = (first..first + n)
        .map(|i| Change::Cleared(finding(i, now - age_s, false)))
        .collect();
    h.record(&cleared, now - age_s).unwrap();
}

/// Writes `n` findings raised `age_s` before `now` and still active (ids from `first`).
fn raise(h: &mut History, first: usize, n: usize, now: f64, age_s: f64) {
    let raised: Vec<Change> = (first..first + n)
        .map(|i| Change::Raised(finding(i, now - age_s, true)))
        .collect();
    h.record(&raised, now - age_s).unwrap();
}

fn count(dir: &Path, sql: &str) -> i64 {
    let conn =
        rusqlite::Connection::open(dir.join(commwatch_collector::analysis::history::HISTORY_FILE))
            .unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn churned_findings_are_pruned_and_active_ones_and_recent_history_survive() {
    let dir = tempfile::tempdir().unwrap();
    let now = 2_000_000_000.0;
    let mut h = History::open(dir.path()).unwrap();
    // 2,000 cleared a month ago, 2,000 cleared an hour ago, 20 raised a month ago and still active.
    churn(&mut h, 0, 2000, now, 30.0 * DAY);
    churn(&mut h, 2000, 2000, now, 3600.0);
    raise(&mut h, 9000, 20, now, 30.0 * DAY);
    let keep = Retention {
        max_age: Duration::from_secs(14 * 86_400),
        max_cleared: 500,
        max_events: 5000,
    };
    let p = h.prune(&keep, now).unwrap();
    // By age: the 2,000 old cleared ones; by the cap: 1,500 of the recent ones; their events with them.
    assert_eq!(
        p,
        Pruned {
            findings: 3500,
            events: 7000
        }
    );
    let d = dir.path();
    assert_eq!(count(d, "SELECT COUNT(*) FROM analysis_findings"), 520);
    assert_eq!(
        count(d, "SELECT COUNT(*) FROM analysis_findings WHERE active = 1"),
        20,
        "active findings are never pruned, however old"
    );
    assert_eq!(
        count(
            d,
            "SELECT CAST(MIN(last_seen_unix_s) AS INTEGER) FROM analysis_findings WHERE active = 0"
        ),
        (now - 3600.0) as i64,
        "the cleared ones kept are the recent ones"
    );
    // The active findings' month-old raise events stay; every kept cleared finding keeps both events.
    assert_eq!(
        count(d, "SELECT COUNT(*) FROM analysis_finding_events"),
        20 + 2 * 500
    );
    assert_eq!(
        h.events("link_errors:node-09000:mlx5_0:1").unwrap().len(),
        1
    );
    assert!(h
        .events("link_errors:node-00000:mlx5_0:1")
        .unwrap()
        .is_empty());
    // Nothing more to prune: a second pass removes nothing.
    assert_eq!(h.prune(&keep, now).unwrap(), Pruned::default());

    // A tighter cap on events: the newest kept, those of active findings never pruned (and counted).
    let tight = Retention {
        max_events: 120,
        ..keep
    };
    let p = h.prune(&tight, now).unwrap();
    assert_eq!(p.events, 1020 - 120);
    assert_eq!(
        count(
            d,
            "SELECT COUNT(*) FROM analysis_finding_events e JOIN analysis_findings f ON e.id = f.id
             WHERE f.active = 1"
        ),
        20
    );
    assert_eq!(
        count(d, "SELECT COUNT(*) FROM analysis_finding_events"),
        120
    );
}

#[test]
fn the_start_loads_only_what_the_tracker_keeps_active_ones_first() {
    let dir = tempfile::tempdir().unwrap();
    let now = 2_000_000_000.0;
    let mut h = History::open(dir.path()).unwrap();
    churn(&mut h, 0, MAX_INACTIVE + 300, now, 3600.0);
    // Active, but last written long ago: still loaded.
    raise(&mut h, 50_000, 5, now, 20.0 * DAY);
    let loaded = h.load_findings().unwrap();
    assert_eq!(loaded.len(), MAX_INACTIVE);
    assert!(loaded.iter().all(|f| !f.active), "restored inactive");
    let old_active = loaded
        .iter()
        .filter(|f| f.subject.node.starts_with("node-5"))
        .count();
    assert_eq!(old_active, 5);
    let mut ids: Vec<&str> = loaded.iter().map(|f| f.id.as_str()).collect();
    let sorted = {
        let mut s = ids.clone();
        s.sort();
        s
    };
    assert_eq!(ids, sorted, "sorted by id");
    ids.dedup();
    assert_eq!(ids.len(), MAX_INACTIVE);
    // What a start restores: only what the retention keeps (what the prune right after leaves).
    let keep = Retention {
        max_age: Duration::from_secs(14 * 86_400),
        max_cleared: 10,
        max_events: 100,
    };
    let kept = h.load_kept_findings(&keep, now).unwrap();
    assert_eq!(kept.len(), 5 + 10);
    let tight = Retention {
        max_age: Duration::from_secs(1800),
        ..keep
    };
    assert_eq!(h.load_kept_findings(&tight, now).unwrap().len(), 5);
}

#[test]
fn upkeep_counts_what_it_prunes_and_is_due_again_after_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let now = commwatch_model::clock::unix_now_s();
    let mut h = History::open(dir.path()).unwrap();
    churn(&mut h, 0, 30, now, 30.0 * DAY);
    churn(&mut h, 100, 10, now, 60.0);
    let registry = prometheus::Registry::new();
    let counter = commwatch_collector::analysis::history::pruned_counter(&registry).unwrap();
    let mut upkeep = Upkeep::new(Retention::default(), Some(counter.clone()));
    assert_eq!(upkeep.due_in(), Duration::ZERO, "due at once");
    let p = upkeep.prune(&mut h);
    assert_eq!(
        p,
        Pruned {
            findings: 30,
            events: 60
        }
    );
    assert!(upkeep.due_in() > Duration::from_secs(60));
    assert_eq!(counter.with_label_values(&["finding"]).get(), 30);
    assert_eq!(counter.with_label_values(&["event"]).get(), 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_start_prunes_counts_and_serves_what_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let now = commwatch_model::clock::unix_now_s().floor();
    {
        let mut h = History::open(dir.path()).unwrap();
        churn(&mut h, 0, 40, now, 30.0 * DAY);
        churn(&mut h, 100, 8, now, 600.0);
        raise(&mut h, 200, 2, now, 30.0 * DAY);
    }
    let config = CollectorConfig {
        grpc_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: "127.0.0.1:0".parse().unwrap(),
        state_dir: Some(dir.path().to_path_buf()),
        findings_max_cleared: 5,
        ..Default::default()
    };
    let h = commwatch_collector::start(config).await.unwrap();
    // The history's thread prunes right after the start (the start does not wait for it).
    let metrics = format!("http://{}/metrics", h.http_addr);
    let want = [
        // 40 past the age, 3 over the cap of 5; their 86 events.
        "commwatch_collector_history_pruned_total{record=\"finding\"} 43",
        "commwatch_collector_history_pruned_total{record=\"event\"} 86",
    ];
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let m = loop {
        let m = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
        if want.iter().all(|w| m.contains(w)) || std::time::Instant::now() > deadline {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for w in want {
        assert!(m.contains(w), "{w}: {m}");
    }
    assert_eq!(
        count(dir.path(), "SELECT COUNT(*) FROM analysis_findings"),
        7
    );
    let listed: Vec<Finding> = reqwest::get(format!("http://{}/api/v1/findings", h.http_addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        listed.len(),
        7,
        "2 that were active and the 5 newest cleared"
    );
    h.shutdown().await;
}
