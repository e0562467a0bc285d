//! Root cause first, end to end: a real management-NIC demo — the collector, one agent per simulated node —
//! lists its root cause first in `/api/v1/findings`, returns exactly the root causes for `?root=true`, rolls
//! the job's slow links up into one finding, exports consequences as `root="false"`, and prints the root cause
//! before anything it explains. (The roll-ups of `no-overlap` and `cpu-bound` are checked on the simulator's
//! fast clock, in `findings_rules.rs`.)

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{free_port, get_json, get_text, metric, wait_for, BIN};
use commwatch_collector::analysis::{Finding, FindingKind};

/// The demo as a child process, its stdout in a file; killed on drop.
struct Demo {
    child: std::process::Child,
    stdout: std::path::PathBuf,
    http: u16,
    _dir: tempfile::TempDir,
}

impl Demo {
    fn start(scenario: &str, duration: &str) -> Demo {
        let dir = tempfile::tempdir().unwrap();
        let stdout = dir.path().join("demo.out");
        let (grpc, http) = (free_port(), free_port());
        let child = Command::new(BIN)
            .args(["demo", "--scenario", scenario, "--duration", duration])
            // Four nodes of two GPUs: the fault node (node-03), a job-level roll-up over several nodes, and
            // few enough agents that a shared two-core test machine samples them on time.
            .args(["--nodes", "4", "--gpus-per-node", "2"])
            .args(["--grpc-listen", &format!("127.0.0.1:{grpc}")])
            .args(["--http-listen", &format!("127.0.0.1:{http}")])
            .args(["--dir", &dir.path().join("trees").display().to_string()])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(dir.path().join("demo.err")).unwrap())
            .spawn()
            .expect("spawn the demo");
        Demo {
            child,
            stdout,
            http,
            _dir: dir,
        }
    }

    /// `GET /api/v1/findings{query}`; `None` while the collector is not up.
    fn try_findings(&self, query: &str) -> Option<Vec<Finding>> {
        let url = format!("http://127.0.0.1:{}/api/v1/findings{query}", self.http);
        Some(serde_json::from_value(get_json(&url)?).expect("a findings list"))
    }

    fn findings(&self, query: &str) -> Vec<Finding> {
        self.try_findings(query).expect("findings")
    }

    /// Waits for the demo to end by itself; its stdout.
    fn output(mut self) -> String {
        let done = wait_for(Duration::from_secs(60), || self.child.try_wait().ok()?);
        assert!(
            done.is_some_and(|s| s.success()),
            "the demo did not end well"
        );
        std::fs::read_to_string(&self.stdout).unwrap()
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn management_nic_demo_names_its_root_cause_first() {
    let demo = Demo::start("management-nic", "25s");
    let nccl = "nccl_misconfiguration:node-03:NCCL_SOCKET_IFNAME:job=1001";
    let mgmt = "management_network_traffic:node-03:eth0:eth0:job=1001";
    // Until the management traffic and the job-level underutilisation are raised.
    let list = wait_for(Duration::from_secs(40), || {
        let l = demo.try_findings("")?;
        let has = |id: &str| l.iter().any(|f| f.id == id && f.active);
        (has(mgmt) && has("link_underutilized:job=1001")).then_some(l)
    })
    .expect("the management-NIC findings");

    // Root causes first, then by severity; the setting is the one root cause and comes first.
    assert_eq!(list[0].id, nccl, "{list:#?}");
    for w in list.windows(2) {
        assert!(
            (w[0].root, w[0].severity) >= (w[1].root, w[1].severity),
            "{} before {}",
            w[0].id,
            w[1].id
        );
    }
    // `?root=true`: exactly the findings no other explains; `?root=false`: the rest.
    let roots = demo.findings("?root=true");
    let ids = |v: &[Finding]| -> BTreeSet<String> { v.iter().map(|f| f.id.clone()).collect() };
    let all = demo.findings("");
    let expected: BTreeSet<String> = all
        .iter()
        .filter(|f| f.caused_by.is_none())
        .map(|f| f.id.clone())
        .collect();
    assert_eq!(ids(&roots), expected);
    assert!(roots.iter().all(|f| f.root && f.caused_by.is_none()));
    assert!(
        expected.contains(nccl) && !expected.contains(mgmt),
        "{expected:?}"
    );
    // For the job, the setting is the only root cause: its exposed communication and slow links (rolled up
    // over the nodes that wait on node-03) are filed under it.
    let job_roots = demo.findings("?root=true&job=1001");
    assert_eq!(
        ids(&job_roots),
        BTreeSet::from([nccl.to_string()]),
        "{job_roots:#?}"
    );
    for f in all.iter().filter(|f| f.subject.node.is_empty()) {
        assert_eq!(f.caused_by.as_deref(), Some(nccl), "{f:#?}");
    }
    let rest = demo.findings("?root=false");
    assert_eq!(ids(&rest).len() + expected.len(), all.len());
    assert!(rest.iter().all(|f| !f.root && f.caused_by.is_some()));
    // The management traffic names its cause once; the cause lists it.
    let m = all.iter().find(|f| f.id == mgmt).unwrap();
    assert_eq!(m.caused_by.as_deref(), Some(nccl));
    assert!(!m.summary.contains(nccl));
    assert!(all[0].consequences.contains(&mgmt.to_string()));
    // `job` takes the job's link findings (their subject names no job) with its job-level ones.
    let job = demo.findings("?job=1001&kind=link_underutilized&limit=3");
    assert_eq!(job.len(), 3);
    assert!(job.iter().all(|f| f.kind == FindingKind::LinkUnderutilized));
    assert!(demo.findings("?job=other").is_empty());

    // The alerting family: the root cause at root="true", the consequences at root="false".
    let text = get_text(&format!("http://127.0.0.1:{}/metrics", demo.http)).unwrap();
    let root = [("kind", "nccl_misconfiguration"), ("root", "true")];
    assert_eq!(metric(&text, "commwatch_finding_active", &root), Some(1.0));
    let consequence = [("kind", "link_underutilized"), ("root", "false")];
    assert_eq!(
        metric(&text, "commwatch_finding_active", &consequence),
        Some(1.0)
    );
    let bad = [("kind", "management_network_traffic"), ("root", "true")];
    assert_eq!(metric(&text, "commwatch_finding_active", &bad), None);

    // The output: the first finding printed is the root cause, printed once; nothing it explains before it.
    let out = demo.output();
    let lines: Vec<&str> = out.lines().collect();
    let first = lines.iter().position(|l| l.starts_with("*** ")).unwrap();
    assert!(
        lines[first].contains("ROOT CAUSE [critical] nccl_misconfiguration on node-03"),
        "{out}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("ROOT CAUSE")).count(),
        1,
        "{out}"
    );
    assert!(lines[first + 4].contains("explains"), "{out}");
    let consequences = lines
        .iter()
        .position(|l| l.contains("consequence") && l.contains("of nccl_misconfiguration"))
        .expect("the consequences");
    assert!(consequences > first, "{out}");
    // At exit: the root cause's block, then its tree (one finding per line, never one per link).
    let exit = lines
        .iter()
        .position(|l| l.starts_with("--- findings at exit"))
        .unwrap();
    let root = lines[exit + 1];
    assert!(
        root.contains("nccl_misconfiguration on node-03") && root.contains("): explains"),
        "{out}"
    );
    assert!(
        lines[exit..]
            .iter()
            .any(|l| l.contains("node-level findings under it)")),
        "{out}"
    );
    // No finding printed per link (the scenario's description, before them, names the HCAs).
    assert!(!lines[first..].iter().any(|l| l.contains("mlx5_")), "{out}");
}
