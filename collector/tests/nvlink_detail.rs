//! `nvlink_detail` through a running collector: an agent with one InfiniBand port and two NVLinks of GPU 0
//! (each with byte counters and a CRC error counter); `/metrics` holds one NVLink series set for the GPU, its
//! links summed, with the default, and one per link with `"link"`. The port is exported the same either way.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use commwatch_collector::config::NvlinkDetail;
use commwatch_proto::v1 as pb;

/// The common hello plus NVLinks 0 and 1 of GPU 0 (links 10 and 11): tx (20, 23), rx (21, 24) and
/// crc_data_errors (22, 25).
fn hello_with_nvlinks() -> pb::Hello {
    let mut h = hello("n1", 1);
    let inv = h.inventory.as_mut().unwrap();
    for (id, n) in [(10u32, "0"), (11, "1")] {
        inv.links.push(pb::Link {
            id,
            class: pb::LinkClass::Nvlink as i32,
            role: pb::LinkRole::Fabric as i32,
            device: "gpu0".into(),
            port: n.into(),
            capacity_bytes_per_second: 25e9,
            state: "up".into(),
            attributes: HashMap::new(),
            gpu: "0".into(),
            link: n.into(),
            ..Default::default()
        });
    }
    for (id, metric, link_id) in [
        (20u32, "tx_bytes", 10u32),
        (21, "rx_bytes", 10),
        (22, "crc_data_errors", 10),
        (23, "tx_bytes", 11),
        (24, "rx_bytes", 11),
        (25, "crc_data_errors", 11),
    ] {
        inv.series.push(pb::SeriesDescriptor {
            id,
            metric: metric.into(),
            kind: pb::SeriesKind::Counter as i32,
            link_id,
            labels: HashMap::new(),
            max_value: 0,
            tier: 1,
        });
    }
    h
}

/// 40 ticks, 50 ms apart: link 10 sends 100 bytes a tick, link 11 300; 3 and 4 CRC errors.
fn ticks() -> Vec<(i64, Vec<(u32, u64)>)> {
    (0..40i64)
        .map(|i| {
            let k = i as u64;
            (
                T0 + i * 50 * MS,
                vec![
                    (1, k * 1000),
                    (2, k * 500),
                    (20, k * 100),
                    (21, k * 50),
                    (22, 3),
                    (23, k * 300),
                    (24, k * 150),
                    (25, 4),
                ],
            )
        })
        .collect()
}

async fn node_metrics(detail: NvlinkDetail) -> Vec<String> {
    let mut cfg = config();
    cfg.nvlink_detail = detail;
    node_metrics_with(cfg).await
}

async fn node_metrics_with(cfg: commwatch_collector::CollectorConfig) -> Vec<String> {
    let h = collector(cfg).await;
    let (mut a, _) = Agent::connect(h.grpc_addr, hello_with_nvlinks()).await;
    a.send_batch(batch(1, &ticks())).await;
    tokio::time::timeout(Duration::from_secs(10), a.ack_at_least(1))
        .await
        .expect("acked");
    node_lines(&metrics(&h).await, "n1")
}

fn value(lines: &[String], prefix: &str) -> Option<f64> {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(prefix)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvlinks_are_one_series_set_per_gpu_by_default() {
    let lines = node_metrics(NvlinkDetail::default()).await;
    let gpu = r#"node="n1",class="nvlink",device="gpu0",role="fabric",gpu="0""#;
    let at = |family: &str| format!("{family}{{{gpu}}}");
    assert_eq!(
        value(&lines, &at("commwatch_link_transmit_bytes_total")),
        Some(39.0 * 400.0),
        "{lines:#?}"
    );
    assert_eq!(
        value(&lines, &at("commwatch_link_receive_bytes_total")),
        Some(39.0 * 200.0)
    );
    assert_eq!(
        value(&lines, &at("commwatch_link_capacity_bytes_per_second")),
        Some(50e9)
    );
    let rate = value(&lines, &at("commwatch_link_transmit_bytes_per_second")).expect("rate");
    assert!((rate - 8000.0).abs() < 1.0, "{rate}");
    // Both links' crc_data_errors, summed per family (counter_detail = "family", the default).
    assert_eq!(
        value(&lines, &format!(r#"commwatch_link_errors_total{{{gpu}}}"#)),
        Some(7.0)
    );
    assert!(
        !lines.iter().any(|l| l.contains("counter=\"")),
        "{lines:#?}"
    );
    assert_eq!(
        value(&lines, &format!(r#"commwatch_link_up{{{gpu},state="up"}}"#)),
        Some(1.0)
    );
    assert!(!lines.iter().any(|l| l.contains("link=\"")), "{lines:#?}");
    assert_eq!(
        value(&lines, r#"commwatch_gpu_nvlinks_up{node="n1",gpu="0"}"#),
        Some(2.0)
    );
    assert_eq!(
        value(&lines, r#"commwatch_gpu_nvlinks{node="n1",gpu="0"}"#),
        Some(2.0)
    );
    // The InfiniBand port is exported per port, as always.
    assert_eq!(
        value(
            &lines,
            r#"commwatch_link_transmit_bytes_total{node="n1",class="infiniband",device="mlx5_0",port="1",role="fabric"}"#
        ),
        Some(39_000.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_detail_exports_every_nvlink() {
    let lines = node_metrics(NvlinkDetail::Link).await;
    for (n, tx) in [("0", 3900.0), ("1", 11_700.0)] {
        let prefix = format!(
            r#"commwatch_link_transmit_bytes_total{{node="n1",class="nvlink",device="gpu0",port="{n}",role="fabric",gpu="0",link="{n}"}}"#
        );
        assert_eq!(value(&lines, &prefix), Some(tx), "{lines:#?}");
    }
    assert_eq!(
        value(&lines, r#"commwatch_gpu_nvlinks{node="n1",gpu="0"}"#),
        Some(2.0)
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("commwatch_link_errors_total{") && l.contains("nvlink"))
            .count(),
        2
    );
}

/// `counter_detail = "name"` through a running collector: one series per agent counter name again, with the
/// `counter` label (here the GPU's folded NVLinks' crc_data_errors), and no sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_detail_exports_every_counter_name() {
    let mut cfg = config();
    cfg.counter_detail = commwatch_collector::config::CounterDetail::Name;
    let lines = node_metrics_with(cfg).await;
    let gpu = r#"node="n1",class="nvlink",device="gpu0",role="fabric",gpu="0""#;
    assert_eq!(
        value(
            &lines,
            &format!(r#"commwatch_link_errors_total{{{gpu},counter="crc_data_errors"}}"#)
        ),
        Some(7.0),
        "{lines:#?}"
    );
    assert!(!lines
        .iter()
        .any(|l| l.starts_with(&format!("commwatch_link_errors_total{{{gpu}}}"))));
}
