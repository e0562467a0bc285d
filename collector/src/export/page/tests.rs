//! Hostile names and label values come out of every view escaped: a node, device, job, NCCL setting, GPU
//! label or finding text holding markup never becomes markup, and links keep it inside their path.

use std::collections::BTreeMap;

use super::heatmap::{self, Group};
use super::{job, node, roots};
use crate::analysis::{Evidence, Finding, FindingKind, Severity, Subject};
use crate::export::jobs::{JobConflictView, JobView, RankView};
use crate::export::nodes::{BlindView, ConflictView, LinkView, NodeView};

const EVIL: &str = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>&";

fn link(class: &str, device: &str, port: &str, role: &str, gpu: Option<&str>) -> LinkView {
    LinkView {
        class: class.into(),
        device: device.into(),
        port: port.into(),
        endpoint: "hca_port".into(),
        role: role.into(),
        capacity_bytes_per_second: Some(25e9),
        tx_bytes_per_second: Some(5e9),
        rx_bytes_per_second: Some(1e9),
        tx_bytes_total: Some(1),
        rx_bytes_total: Some(1),
        state: EVIL.into(),
        gpu: gpu.map(str::to_string),
        link: gpu.map(|_| EVIL.to_string()),
    }
}

fn hostile_node() -> NodeView {
    NodeView {
        name: EVIL.into(),
        last_seen_unix_s: 100.0,
        connected: true,
        links: vec![
            link("infiniband", EVIL, EVIL, "fabric", None),
            link("ethernet", EVIL, "eth0", "management", None),
            link("nvlink", "gpu0", "0", "fabric", Some(EVIL)),
        ],
        jobs: vec![EVIL.into()],
        nccl_conflicts: vec![ConflictView {
            job: EVIL.into(),
            setting: EVIL.into(),
            value: EVIL.into(),
            kind: EVIL.into(),
            reason: EVIL.into(),
        }],
        blind: vec![BlindView {
            code: EVIL.into(),
            what: EVIL.into(),
            reason: EVIL.into(),
        }],
    }
}

fn hostile_finding(id: &str, root: bool) -> Finding {
    Finding {
        id: id.into(),
        kind: FindingKind::NcclMisconfiguration,
        severity: Severity::Critical,
        subject: Subject {
            node: EVIL.into(),
            device: Some(EVIL.into()),
            port: Some(EVIL.into()),
            interface: Some(EVIL.into()),
            gpu: Some(EVIL.into()),
            link: Some(EVIL.into()),
            job: Some(EVIL.into()),
            setting: Some(EVIL.into()),
        },
        summary: EVIL.into(),
        evidence: Evidence::new(1.0, EVIL)
            .detail(EVIL, EVIL)
            .detail("nodes", vec![EVIL, EVIL])
            .detail("setting", serde_json::json!({ EVIL: [EVIL] })),
        action: EVIL.into(),
        first_seen_unix_s: 1.0,
        last_seen_unix_s: 2.0,
        active: true,
        root,
        caused_by: (!root).then(|| EVIL.to_string()),
        consequences: if root {
            vec![format!("{EVIL}2")]
        } else {
            vec![]
        },
    }
}

fn hostile_job() -> JobView {
    JobView {
        id: EVIL.into(),
        nodes: vec![EVIL.into()],
        ranks: vec![RankView {
            node: EVIL.into(),
            pid: 1,
            rank: Some(0),
            local_rank: None,
            world_size: None,
            gpu: vec![EVIL.into()],
            pod: None,
            container: None,
            nccl: BTreeMap::from([(EVIL.to_string(), EVIL.to_string())]),
            found_by: EVIL.into(),
        }],
        conflicts: vec![JobConflictView {
            node: EVIL.into(),
            setting: EVIL.into(),
            value: EVIL.into(),
            kind: EVIL.into(),
            reason: EVIL.into(),
        }],
        step_time_s: Some(0.3),
        throughput_samples_per_second: None,
        scaling_efficiency: Some(0.8),
        scaling_efficiency_method: Some(EVIL.into()),
    }
}

/// No markup of the hostile value survives, and it is there, escaped.
fn assert_escaped(what: &str, html: &str) {
    for raw in ["<script", "<img", "\"'>", "onerror=alert(2)>"] {
        assert!(!html.contains(raw), "{what}: {raw:?} came through: {html}");
    }
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&gt;&lt;img"),
        "{what}: {html}"
    );
    // Links carry names percent-encoded.
    for href in html.split("href=\"").skip(1) {
        let target = &href[..href.find('"').unwrap()];
        assert!(
            !target.contains(['<', '>', '\'', ' ']),
            "{what}: href {target}"
        );
    }
}

#[test]
fn hostile_names_are_escaped_in_every_view() {
    let n = hostile_node();
    let (row, columns) = heatmap::row(&n, &[], 100.0);
    let columns = heatmap::union(columns);
    for group in [Group::Fabric, Group::Management] {
        let svg = heatmap::render(std::slice::from_ref(&row), &columns, group, EVIL).unwrap();
        assert_escaped("heatmap", &svg);
    }
    let root = hostile_finding(EVIL, true);
    let consequence = hostile_finding(&format!("{EVIL}2"), false);
    let findings = vec![root, consequence];
    let section = roots::section(&findings, 0);
    assert_escaped("root causes", &section);
    assert!(
        section.contains("Explains 1 finding on 1 node"),
        "{section}"
    );
    assert_escaped("job", &job::section(&hostile_job(), &[], EVIL, &findings));
    let gpus = node::GpuReadings::from([(EVIL.to_string(), vec![(EVIL.to_string(), 1.0)])]);
    assert_escaped("node", &node::section(&n, true, &[], &gpus, &findings));
    let blind = super::blind_section(std::slice::from_ref(&n));
    assert_escaped("blind agents", &blind);
    // With no root cause, the fleet is not called healthy while a node is blind.
    let quiet = roots::section(&[], 1);
    assert!(quiet.contains("1 node(s) are blind"), "{quiet}");
    assert!(!quiet.contains("nothing slows"), "{quiet}");
    assert!(roots::section(&[], 0).contains("nothing slows the fleet's jobs now"));
    assert!(
        blind.contains("1 node(s) whose agent cannot see"),
        "{blind}"
    );
    let mut seeing = n.clone();
    seeing.blind.clear();
    assert_eq!(super::blind_section(&[seeing]), "");
    let title = super::layout::document(EVIL, "");
    assert!(!title.contains("<script>alert"), "{title}");
}

#[test]
fn the_heatmap_has_a_cell_per_node_and_column_and_marks_stale_nodes() {
    let mut a = hostile_node();
    a.name = "node-a".into();
    let mut b = a.clone();
    b.name = "node-b".into();
    b.links.truncate(1);
    b.last_seen_unix_s = 10.0;
    let (ra, ca) = heatmap::row(&a, &[], 100.0);
    let (rb, cb) = heatmap::row(&b, &[], 100.0);
    assert!(!ra.stale && rb.stale);
    let columns = heatmap::union(ca.into_iter().chain(cb));
    let svg = heatmap::render(&[ra, rb], &columns, Group::Fabric, "t").unwrap();
    // Two fabric columns (the adapter port, GPU 0's NVLink) × two nodes; node-b lacks the NVLink one.
    assert_eq!(svg.matches("<rect class=\"cell").count(), 4);
    assert_eq!(svg.matches("<rect class=\"cell absent\"").count(), 1);
    assert!(svg.contains("(stale)"));
    // Live utilisation: the busier direction over capacity.
    assert!(svg.contains(">~20%</text>"), "{svg}");
    assert!(svg.contains("data-source=\"live\""), "{svg}");
}

#[test]
fn the_heatmap_never_shows_over_100_percent_and_outlines_the_faulty_link() {
    let mut n = hostile_node();
    n.name = "node-03".into();
    n.links = vec![link("ethernet", "eth0", "eth0", "management", None)];
    // 34 GB/s live on a 25 GB/s link: a sampling artefact.
    n.links[0].tx_bytes_per_second = Some(34e9);
    let (row, columns) = heatmap::row(&n, &[], 100.0);
    let mut rows = vec![row];
    let mut f = hostile_finding("m", true);
    f.subject = Subject {
        node: "node-03".into(),
        interface: Some("eth0".into()),
        ..Subject::default()
    };
    heatmap::mark_faulty(&mut rows, &[f]);
    let svg = heatmap::render(&rows, &heatmap::union(columns), Group::Management, "m").unwrap();
    assert!(svg.contains(">~100%*</text>"), "{svg}");
    assert!(!svg.contains("136%"), "{svg}");
    assert!(svg.contains("<rect class=\"cell faulty\""), "{svg}");
}

fn finding(
    id: &str,
    kind: FindingKind,
    node: &str,
    root: bool,
    caused_by: Option<&str>,
) -> Finding {
    let mut f = hostile_finding(id, root);
    f.kind = kind;
    f.summary = format!("summary of {id}");
    f.subject = Subject {
        node: node.into(),
        ..Subject::default()
    };
    f.caused_by = caused_by.map(str::to_string);
    f.consequences = vec![];
    f
}

#[test]
fn the_job_page_opens_on_its_root_cause_and_folds_the_underutilized_links() {
    let mut root = finding(
        "r",
        FindingKind::NcclMisconfiguration,
        "node-03",
        true,
        None,
    );
    root.consequences = vec!["m".into()];
    let m = finding(
        "m",
        FindingKind::ManagementNetworkTraffic,
        "node-03",
        false,
        Some("r"),
    );
    let elsewhere = finding(
        "s",
        FindingKind::Straggler,
        "node-01",
        false,
        Some("other-root"),
    );
    let under: Vec<Finding> = (0..3)
        .map(|i| {
            finding(
                &format!("u{i}"),
                FindingKind::LinkUnderutilized,
                &format!("node-0{}", i % 2),
                false,
                None,
            )
        })
        .collect();
    let findings: Vec<Finding> = [root, m, elsewhere].into_iter().chain(under).collect();
    let mut job = hostile_job();
    job.ranks.push(job.ranks[0].clone());
    let html = job::section(&job, &[], "inferred", &findings);
    // The findings come before the charts and the ranks; the root cause's card first.
    let at = |needle: &str| {
        html.find(needle)
            .unwrap_or_else(|| panic!("{needle} in {html}"))
    };
    assert!(at("id=\"job-findings\"") < at("id=\"job-chart\""));
    assert!(at("data-id=\"r\"") < at("data-id=\"s\""));
    // Its consequence is folded beneath it, not a card of its own.
    assert!(html.contains("<li data-id=\"m\""), "{html}");
    assert!(!html.contains("<article class=\"finding critical\" data-id=\"m\""));
    // A consequence of a root cause outside the job says what causes it.
    assert!(
        html.contains("Caused by <span class=\"kind\"></span> <code>other-root</code>"),
        "{html}"
    );
    // The underutilised links: one summary, the detail on demand.
    assert!(
        html.contains("3 <span class=\"kind\">link_underutilized</span> findings on 2 nodes"),
        "{html}"
    );
    assert_eq!(html.matches("<article").count(), 2, "{html}");
    // Settings every rank shares are said once.
    assert_eq!(
        html.matches("<p class=\"shared\">Every rank:").count(),
        1,
        "{html}"
    );
}

#[test]
fn the_node_view_lists_an_ipoib_interface_apart_from_its_port() {
    let mut n = hostile_node();
    n.name = "node-00".into();
    let mut ipoib = link("infiniband", "ib0", "ib0", "fabric", None);
    ipoib.endpoint = "interface".into();
    ipoib.state = "up".into();
    n.links = vec![link("infiniband", "mlx5_0", "1", "fabric", None), ipoib];
    let html = node::section(&n, false, &[], &node::GpuReadings::new(), &[]);
    let main = &html[..html.find("</table>").unwrap()];
    assert!(main.contains("<td>mlx5_0</td>"), "{main}");
    assert!(!main.contains("<td>ib0</td>"), "{main}");
    let apart = &html[html
        .find("<details class=\"port-interfaces\"")
        .expect("listed apart")..];
    assert!(apart.contains("<td>ib0</td>"), "{apart}");
}
