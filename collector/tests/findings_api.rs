//! `GET /api/v1/findings` on a real collector: the order (root causes first, then by severity, then the most
//! recently seen), each filter, and a 400 with a JSON error naming the parameter for each bad value. The
//! findings come from the history of a previous run, as a restart brings them back (inactive).

use std::collections::BTreeSet;

use commwatch_collector::analysis::history::History;
use commwatch_collector::analysis::tracker::Change;
use commwatch_collector::analysis::{Evidence, Finding, FindingKind, Severity, Subject};
use commwatch_collector::CollectorConfig;

fn finding(
    kind: FindingKind,
    severity: Severity,
    subject: Subject,
    last_seen: f64,
    caused_by: Option<&str>,
) -> Finding {
    let id = commwatch_collector::analysis::finding_id(kind, &subject);
    Finding {
        id,
        kind,
        severity,
        subject,
        summary: "s".into(),
        evidence: Evidence::new(1.0, "ratio"),
        action: "a".into(),
        first_seen_unix_s: 1000.0,
        last_seen_unix_s: last_seen,
        active: true,
        root: caused_by.is_none(),
        caused_by: caused_by.map(str::to_string),
        consequences: vec![],
    }
}

fn on(node: &str, job: Option<&str>) -> Subject {
    Subject {
        node: node.into(),
        job: job.map(str::to_string),
        ..Default::default()
    }
}

/// Six findings of a previous run: four root causes, two consequences (one of them critical).
fn history() -> Vec<Finding> {
    let mut port = on("node-03", None);
    port.device = Some("mlx5_0".into());
    port.port = Some("1".into());
    let straggler = "straggler:node-04:job=j1";
    let nccl = "nccl_misconfiguration:node-06:job=j2";
    vec![
        finding(
            FindingKind::LinkErrors,
            Severity::Critical,
            port.clone(),
            1010.0,
            None,
        ),
        finding(
            FindingKind::Straggler,
            Severity::Warning,
            on("node-04", Some("j1")),
            1020.0,
            None,
        ),
        finding(
            FindingKind::ExposedCommunication,
            Severity::Info,
            on("node-05", Some("j1")),
            1030.0,
            Some(straggler),
        ),
        finding(
            FindingKind::NcclMisconfiguration,
            Severity::Critical,
            on("node-06", Some("j2")),
            1005.0,
            None,
        ),
        finding(
            FindingKind::ManagementNetworkTraffic,
            Severity::Critical,
            on("node-06", Some("j2")),
            1040.0,
            Some(nccl),
        ),
        finding(
            FindingKind::Congestion,
            Severity::Warning,
            port,
            1030.0,
            None,
        ),
    ]
}

/// A collector restarted on a state directory holding [`history`]; its HTTP address.
async fn collector(dir: &std::path::Path) -> commwatch_collector::CollectorHandle {
    {
        let mut h = History::open(dir).unwrap();
        let changes: Vec<Change> = history().into_iter().map(Change::Raised).collect();
        h.record(&changes, 1000.0).unwrap();
    }
    commwatch_collector::start(CollectorConfig {
        grpc_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: "127.0.0.1:0".parse().unwrap(),
        state_dir: Some(dir.to_path_buf()),
        ..Default::default()
    })
    .await
    .unwrap()
}

async fn get(h: &commwatch_collector::CollectorHandle, query: &str) -> (u16, serde_json::Value) {
    let r = reqwest::get(format!("http://{}/api/v1/findings{query}", h.http_addr))
        .await
        .unwrap();
    let status = r.status().as_u16();
    let json = r
        .headers()
        .get("content-type")
        .is_some_and(|c| c.to_str().unwrap_or("").starts_with("application/json"));
    assert!(json, "{query}: not JSON");
    (status, r.json().await.unwrap())
}

/// The ids of a 200 answer, in order.
async fn ids(h: &commwatch_collector::CollectorHandle, query: &str) -> Vec<String> {
    let (status, v) = get(h, query).await;
    assert_eq!(status, 200, "{query}: {v}");
    let list: Vec<Finding> = serde_json::from_value(v).unwrap();
    list.into_iter().map(|f| f.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_causes_first_then_severity_then_the_most_recent() {
    let dir = tempfile::tempdir().unwrap();
    let h = collector(dir.path()).await;
    assert_eq!(
        ids(&h, "").await,
        [
            "link_errors:node-03:mlx5_0:1",
            "nccl_misconfiguration:node-06:job=j2",
            "congestion:node-03:mlx5_0:1",
            "straggler:node-04:job=j1",
            "management_network_traffic:node-06:job=j2",
            "exposed_communication:node-05:job=j1",
        ]
    );
    // The keys of a consequence and of a root cause.
    let (_, v) = get(&h, "?node=node-05").await;
    assert_eq!(v[0]["root"], false);
    assert_eq!(v[0]["caused_by"], "straggler:node-04:job=j1");
    assert_eq!(v[0]["consequences"], serde_json::json!([]));
    let (_, v) = get(&h, "?node=node-04").await;
    assert_eq!(v[0]["root"], true);
    assert_eq!(v[0]["caused_by"], serde_json::Value::Null);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_filter_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let h = collector(dir.path()).await;
    let set = |v: Vec<String>| v.into_iter().collect::<BTreeSet<String>>();
    let of = |v: &[&str]| {
        v.iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<String>>()
    };
    assert_eq!(
        ids(&h, "?root=true").await,
        [
            "link_errors:node-03:mlx5_0:1",
            "nccl_misconfiguration:node-06:job=j2",
            "congestion:node-03:mlx5_0:1",
            "straggler:node-04:job=j1",
        ]
    );
    assert_eq!(
        set(ids(&h, "?root=false").await),
        of(&[
            "management_network_traffic:node-06:job=j2",
            "exposed_communication:node-05:job=j1"
        ])
    );
    assert_eq!(
        ids(&h, "?severity=critical").await,
        [
            "link_errors:node-03:mlx5_0:1",
            "nccl_misconfiguration:node-06:job=j2",
            "management_network_traffic:node-06:job=j2",
        ]
    );
    assert_eq!(
        ids(&h, "?severity=critical&root=true&limit=1").await,
        ["link_errors:node-03:mlx5_0:1"]
    );
    assert_eq!(ids(&h, "?severity=info,warning").await.len(), 3);
    assert_eq!(
        set(ids(&h, "?kind=straggler&kind=exposed_communication").await),
        of(&[
            "straggler:node-04:job=j1",
            "exposed_communication:node-05:job=j1"
        ])
    );
    assert_eq!(
        ids(&h, "?node=node-03").await,
        [
            "link_errors:node-03:mlx5_0:1",
            "congestion:node-03:mlx5_0:1"
        ]
    );
    assert_eq!(
        ids(&h, "?job=j2").await,
        [
            "nccl_misconfiguration:node-06:job=j2",
            "management_network_traffic:node-06:job=j2"
        ]
    );
    assert!(ids(&h, "?job=nobody").await.is_empty());
    // After a restart everything is cleared until raised again.
    assert!(ids(&h, "?active=true").await.is_empty());
    assert_eq!(ids(&h, "?active=false").await.len(), 6);
    assert_eq!(ids(&h, "?limit=2").await.len(), 2);
    // Unknown parameters are ignored.
    assert_eq!(ids(&h, "?colour=blue").await.len(), 6);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_value_is_a_400_naming_the_parameter_and_what_it_takes() {
    let dir = tempfile::tempdir().unwrap();
    let h = collector(dir.path()).await;
    let cases = [
        ("?severity=high", "`severity`", "info, warning, critical"),
        ("?kind=bogus", "`kind`", "link_underutilized"),
        ("?kind=straggler,bogus", "`kind`", "nccl_misconfiguration"),
        ("?node=", "`node`", "1 to 256 bytes"),
        ("?job=", "`job`", "1 to 256 bytes"),
        ("?active=maybe", "`active`", "true or false"),
        ("?root=yes", "`root`", "true or false"),
        ("?limit=0", "`limit`", "at least 1"),
        ("?limit=many", "`limit`", "at least 1"),
        ("?job=a&job=b", "`job`", "more than once"),
    ];
    for (query, param, expected) in cases {
        let (status, v) = get(&h, query).await;
        assert_eq!(status, 400, "{query}: {v}");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(e.contains(param) && e.contains(expected), "{query}: {e}");
    }
    h.shutdown().await;
}
