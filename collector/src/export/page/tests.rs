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
    let rows = [heatmap::row(&n, &[], 100.0)];
    let layout = heatmap::layout(&rows, heatmap::MAX_CELLS);
    for group in [Group::Fabric, Group::Management] {
        let svg = heatmap::render(&rows, &layout, group, EVIL).unwrap();
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
    let (ra, rb) = (heatmap::row(&a, &[], 100.0), heatmap::row(&b, &[], 100.0));
    assert!(!ra.stale && rb.stale);
    let rows = [ra, rb];
    let layout = heatmap::layout(&rows, heatmap::MAX_CELLS);
    assert_eq!(layout.folded_links, 0);
    let svg = heatmap::render(&rows, &layout, Group::Fabric, "t").unwrap();
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
    let mut rows = vec![heatmap::row(&n, &[], 100.0)];
    let mut f = hostile_finding("m", true);
    f.subject = Subject {
        node: "node-03".into(),
        interface: Some("eth0".into()),
        ..Subject::default()
    };
    heatmap::mark_faulty(&mut rows, &[f]);
    let layout = heatmap::layout(&rows, heatmap::MAX_CELLS);
    let svg = heatmap::render(&rows, &layout, Group::Management, "m").unwrap();
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

// ---------------------------------------------------------------------------------------------------------------
// Bounded page work: a node whose agent reports 20,000 links costs the page one bounded row.

/// What the page is allowed to weigh at 1,000 nodes, whatever the links are called (issue 34).
const PAGE_BOUND_BYTES: usize = 10 << 20;
const NOW_NS: i64 = 1_700_000_000_000_000_000;

fn counts() -> crate::telemetry::PageMetrics {
    crate::telemetry::PageMetrics {
        omitted: prometheus::IntCounterVec::new(prometheus::Opts::new("o", "o"), &["what"])
            .unwrap(),
        busy: prometheus::IntCounter::new("b", "b").unwrap(),
    }
}

fn pb_link(
    id: u32,
    class: commwatch_proto::v1::LinkClass,
    device: String,
    port: String,
) -> commwatch_proto::v1::Link {
    use commwatch_proto::v1 as pb;
    let nvlink = class == pb::LinkClass::Nvlink;
    pb::Link {
        id,
        class: class as i32,
        role: pb::LinkRole::Fabric as i32,
        gpu: if nvlink {
            device.trim_start_matches("gpu").into()
        } else {
            String::new()
        },
        link: if nvlink { port.clone() } else { String::new() },
        device,
        port,
        capacity_bytes_per_second: 25e9,
        state: "ACTIVE".into(),
        ..Default::default()
    }
}

/// A store of `nodes` nodes of 8 InfiniBand ports, 8 GPUs of 18 NVLink links and a management NIC; node 0's
/// agent also reports `odd` InfiniBand links of odd names, each distinct.
fn fleet_store(nodes: usize, odd: u32) -> std::sync::Arc<crate::store::Store> {
    use crate::ingest::direct::DirectAgent;
    use commwatch_proto::v1 as pb;
    let store = std::sync::Arc::new(crate::store::Store::new(
        std::time::Duration::from_secs(600),
        std::time::Duration::from_secs(600),
        crate::config::Limits::default(),
    ));
    for n in 0..nodes {
        let mut links = Vec::new();
        let mut id = 0;
        let mut next = || {
            id += 1;
            id
        };
        for p in 0..8 {
            links.push(pb_link(
                next(),
                pb::LinkClass::Infiniband,
                format!("mlx5_{p}"),
                "1".into(),
            ));
        }
        for g in 0..8 {
            for l in 0..18 {
                links.push(pb_link(
                    next(),
                    pb::LinkClass::Nvlink,
                    format!("gpu{g}"),
                    l.to_string(),
                ));
            }
        }
        let mut eth = pb_link(
            next(),
            pb::LinkClass::Ethernet,
            "eth0".into(),
            "eth0".into(),
        );
        eth.role = pb::LinkRole::Management as i32;
        links.push(eth);
        if n == 0 {
            for i in 0..odd {
                let name = format!("<\u{202e}☃{i:05}{}>", "x".repeat(40));
                links.push(pb_link(
                    next(),
                    pb::LinkClass::Infiniband,
                    name,
                    format!("{i}"),
                ));
            }
        }
        let hello = pb::Hello {
            node: format!("node-{n:04}"),
            instance_id: 1,
            inventory: Some(pb::Inventory {
                links,
                series: vec![],
            }),
            ..Default::default()
        };
        DirectAgent::hello(store.clone(), hello, NOW_NS).expect("a valid hello");
    }
    store
}

fn node_views(store: &crate::store::Store) -> Vec<NodeView> {
    store.snapshot(NOW_NS).iter().map(NodeView::from).collect()
}

#[test]
fn a_thousand_nodes_and_one_with_20000_links_stay_within_the_bound() {
    let store = fleet_store(1000, 20_000);
    let nodes = node_views(&store);
    assert_eq!(nodes.len(), 1000);
    assert_eq!(nodes[0].links.len(), 8 + 8 * 18 + 1 + 20_000);
    let c = counts();
    let html = super::fleet_section(
        nodes,
        &crate::steps::StepStore::new(),
        &[],
        &c,
        NOW_NS as f64 / 1e9,
    );
    eprintln!(
        "fleet section at 1,000 nodes and one of 20,000 links: {} bytes",
        html.len()
    );
    assert!(
        html.len() <= PAGE_BOUND_BYTES,
        "the fleet section is {} bytes, more than {PAGE_BOUND_BYTES}",
        html.len()
    );
    // Every node is drawn, with all of its ordinary links; node 0's extra links are folded and counted.
    assert_eq!(html.matches("<text class=\"row").count(), 2 * 1000);
    let cells = html.matches("<rect class=\"cell").count();
    assert!(cells <= heatmap::MAX_CELLS, "{cells} cells");
    assert!(
        html.contains("id=\"left-out\""),
        "the page says what it folded"
    );
    assert!(html.contains("data-folded=\""), "a + more cell");
    let folded = c.omitted.with_label_values(&["cells"]).get();
    assert!(folded > 19_000 && folded <= 20_000, "{folded} links folded");
    assert_eq!(c.omitted.with_label_values(&["rows"]).get(), 0);
    // The ordinary links of the other nodes are drawn one by one.
    assert!(html.contains("data-node=\"node-0999\" data-link=\"mlx5_7:1\""));
    assert!(html.contains("data-node=\"node-0999\" data-link=\"gpu7:nvlink\""));
}

#[test]
fn the_node_view_of_20000_links_lists_a_bounded_number() {
    let store = fleet_store(1, 20_000);
    let n = node_views(&store).remove(0);
    assert_eq!(node::omitted_links(&n), n.links.len() - node::MAX_LINK_ROWS);
    let html = node::section(&n, false, &[], &node::GpuReadings::new(), &[]);
    assert_eq!(html.matches("<tr class=").count(), node::MAX_LINK_ROWS);
    assert!(html.contains(&format!(
        "{} link(s) not listed",
        n.links.len() - node::MAX_LINK_ROWS
    )));
    assert!(html.len() < 1 << 20, "{} bytes", html.len());
}

#[test]
fn the_layout_folds_columns_then_leaves_out_rows_faulty_first() {
    let mut n = hostile_node();
    n.links = (0..30)
        .map(|i| link("infiniband", &format!("mlx5_{i}"), "1", "fabric", None))
        .collect();
    let mut rows: Vec<heatmap::Row> = (0..10)
        .map(|i| {
            n.name = format!("n{i}");
            heatmap::row(&n, &[], 100.0)
        })
        .collect();
    // Room for all: 18 single columns and one folded (12 links a row).
    let l = heatmap::layout(&rows, 10_000);
    assert_eq!(l.columns.len(), heatmap::MAX_SLOTS + 1);
    assert_eq!(l.folded_links, 10 * (30 - heatmap::MAX_SLOTS));
    assert_eq!(l.rows.len(), 10);
    // 10 rows × 5 columns: 4 single links, the rest folded.
    let l = heatmap::layout(&rows, 50);
    assert_eq!(l.columns.len(), 5);
    assert!(matches!(l.columns[4].slot, heatmap::Slot::More(4)));
    assert_eq!(l.folded_links, 10 * 26);
    // Room for 3 rows of one folded column: the faulty node first, then the others in order.
    let mut f = hostile_finding("f", true);
    f.subject = Subject {
        node: "n7".into(),
        device: Some("mlx5_29".into()),
        port: Some("1".into()),
        ..Subject::default()
    };
    heatmap::mark_faulty(&mut rows, &[f]);
    let l = heatmap::layout(&rows, 3);
    assert_eq!(l.rows, vec![0, 1, 7]);
    assert_eq!(l.rows_left_out(rows.len()), 7);
    let svg = heatmap::render(&rows, &l, Group::Fabric, "t").unwrap();
    assert_eq!(
        svg.matches("<rect class=\"cell more faulty\"").count(),
        1,
        "{svg}"
    );
    assert!(svg.contains("href=\"/node/n7#links\""));
}

#[test]
fn a_rendering_keeps_its_slot_until_its_body_is_sent() {
    use http_body_util::BodyExt;
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let slot = slots.clone().try_acquire_owned().unwrap();
        let body = super::held("x".repeat(200_000), slot);
        assert_eq!(slots.available_permits(), 0, "held while unsent");
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(bytes.len(), 200_000);
        assert_eq!(slots.available_permits(), 1, "returned once sent");
        let slot = slots.clone().try_acquire_owned().unwrap();
        drop(super::held("y".into(), slot));
        assert_eq!(
            slots.available_permits(),
            1,
            "returned when the client goes away"
        );
    });
}

/// What the fleet's heatmaps cost: bytes and milliseconds (the best of three) at 300 and 1,000 nodes, with and
/// without a node whose agent reports 20,000 links. Figures, not a check: run with `--release --ignored
/// --nocapture` (BENCHMARKS.md).
#[test]
#[ignore = "a measurement; run with --release -- --ignored --nocapture"]
fn page_cost() {
    for (nodes, odd) in [(300, 0), (300, 20_000), (1000, 0), (1000, 20_000)] {
        let store = fleet_store(nodes, odd);
        let steps = crate::steps::StepStore::new();
        let mut best = f64::MAX;
        let mut bytes = 0;
        for _ in 0..3 {
            let t = std::time::Instant::now();
            let views = node_views(&store);
            let html = super::fleet_section(views, &steps, &[], &counts(), NOW_NS as f64 / 1e9);
            best = best.min(t.elapsed().as_secs_f64());
            bytes = html.len();
        }
        println!(
            "{nodes} nodes, one of {odd} more links: {bytes} bytes, {:.1} ms",
            best * 1e3
        );
    }
}
