//! The `nvml` source through its backend trait, on recorded NVML answers (`fixtures/nvml/*.json`): per-link
//! bytes from cumulative KiB, counter resets, unsupported fields, the fallback order, a GPU that is lost, NVML
//! absent, and the agent's own NVML cost metrics.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use commwatch_agent::source::gpu::{self, GpuError, SharedGpu};
use commwatch_agent::source::gpu_recorded::{RecordedBackend, Recording};
use commwatch_agent::source::nvml::{NvmlSource, ThroughputSource};
use commwatch_agent::source::{LinkClass, LinkRole, ReadReport, Source, Tier, Value};
use commwatch_agent::telemetry::AgentMetrics;
use commwatch_testdata::shared_testdata;

fn recording(name: &str) -> Recording {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nvml")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).expect("fixture")).expect("valid recording")
}

fn source(rec: Recording) -> (NvmlSource, Arc<AtomicUsize>, SharedGpu) {
    let b = RecordedBackend::new(rec);
    let cursor = b.cursor();
    let shared = gpu::shared(Box::new(b));
    (NvmlSource::new(Ok(shared.clone())), cursor, shared)
}

/// Values of one sample keyed `gpu<N>/<link>/<metric>` or `<metric>|gpu=<N>`.
fn sample(src: &mut NvmlSource, tier: Tier) -> (BTreeMap<String, Value>, ReadReport) {
    let mut raw = Vec::new();
    let report = src.sample(tier, &mut |i, v| raw.push((i, v)));
    let inv = src.inventory();
    let mut out = BTreeMap::new();
    for (i, v) in raw {
        let s = &inv.series[i];
        let mut name = match &s.link {
            Some(l) => format!("{}/{}/{}", l.device, l.port, s.metric),
            None => s.metric.clone(),
        };
        for (k, v) in &s.labels {
            name.push_str(&format!("|{k}={v}"));
        }
        assert!(out.insert(name.clone(), v).is_none(), "{name} pushed twice");
    }
    assert_eq!(report.read, out.len());
    (out, report)
}

fn counter(m: &BTreeMap<String, Value>, k: &str) -> u64 {
    match m.get(k) {
        Some(Value::Counter(v)) => *v,
        other => panic!("{k}: expected a counter, got {other:?}"),
    }
}

fn gauge(m: &BTreeMap<String, Value>, k: &str) -> f64 {
    match m.get(k) {
        Some(Value::Gauge(v)) => *v,
        other => panic!("{k}: expected a gauge, got {other:?}"),
    }
}

#[test]
fn h100_inventory_has_18_links_per_gpu_at_26_562_gb_per_s() {
    let (mut src, _, _) = source(recording("h100_sxm_8gpu.json"));
    assert!(src.discover().unwrap());
    let inv = src.inventory();
    assert_eq!(inv.links.len(), 8 * 18);
    for l in &inv.links {
        assert_eq!(l.key.class, LinkClass::Nvlink);
        assert_eq!(l.role, LinkRole::Fabric);
        assert_eq!(l.capacity_bytes_per_second, Some(26.562e9));
        assert_eq!(l.attributes["peer_type"], "nvswitch");
        assert_eq!(l.attributes["version"], "4");
        assert_eq!(l.attributes["throughput_source"], "throughput_fields");
        assert_eq!(l.gpu.as_deref(), Some(&l.key.device[3..]));
        assert_eq!(l.link.as_deref(), Some(l.key.port.as_str()));
    }
    let l = inv
        .links
        .iter()
        .find(|l| l.key.device == "gpu2" && l.key.port == "9")
        .unwrap();
    assert_eq!(l.attributes["remote_pci_bus_id"], "00000000:07:00.0");
    assert_eq!(
        l.attributes["gpu_uuid"],
        "GPU-2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d62"
    );
    assert_eq!(l.state, "up");
    let down = inv
        .links
        .iter()
        .find(|l| l.key.device == "gpu5" && l.key.port == "17")
        .unwrap();
    assert_eq!(down.state, "down");
    for g in 0..8 {
        assert_eq!(
            src.throughput_source(g),
            Some(ThroughputSource::ThroughputKib)
        );
    }
    // Rediscovery with nothing changed: no change, no new series.
    let n = inv.series.len();
    assert!(!src.discover().unwrap());
    assert_eq!(src.inventory().series.len(), n);
}

#[test]
fn per_link_bytes_from_cumulative_kib_and_a_counter_reset() {
    let (mut src, cursor, _) = source(recording("h100_sxm_8gpu.json"));
    src.discover().unwrap();
    let (r0, rep0) = sample(&mut src, Tier::Fast);
    assert_eq!(rep0.failed, 0, "{:?}", rep0.errors);
    // 8 GPUs × 18 links × 2 directions, less the down link of gpu5 (not read).
    assert_eq!(r0.len(), (8 * 18 - 1) * 2);
    assert!(!r0.contains_key("gpu5/17/tx_bytes"));
    assert_eq!(counter(&r0, "gpu0/0/tx_bytes"), 7_400_000_000 * 1024);
    assert_eq!(
        counter(&r0, "gpu1/5/rx_bytes"),
        (7_310_000_000 + 5 * 1000) * 1024
    );
    cursor.fetch_add(1, Ordering::Relaxed);
    let (r1, _) = sample(&mut src, Tier::Fast);
    // 50 ms between reads: 1_000_000 KiB → 1.024e9 B → 20.48e9 B/s.
    let dt = 0.05;
    let rate = |a: u64, b: u64| (b - a) as f64 / dt;
    assert_eq!(
        rate(
            counter(&r0, "gpu4/11/tx_bytes"),
            counter(&r1, "gpu4/11/tx_bytes")
        ),
        20.48e9
    );
    assert_eq!(
        rate(
            counter(&r0, "gpu4/11/rx_bytes"),
            counter(&r1, "gpu4/11/rx_bytes")
        ),
        999_000.0 * 1024.0 / dt
    );
    // Below the link's capacity as the inventory gives it.
    let cap = src.inventory().links[0].capacity_bytes_per_second.unwrap();
    assert!(
        rate(
            counter(&r0, "gpu0/0/tx_bytes"),
            counter(&r1, "gpu0/0/tx_bytes")
        ) < cap
    );
    cursor.fetch_add(1, Ordering::Relaxed);
    let (r2, _) = sample(&mut src, Tier::Fast);
    // gpu3 restarted its counters (driver reload): passed through as read, lower than before, so the collector
    // sees a reset (not a saturation: far below u64::MAX) and takes no delta across it.
    let before = counter(&r1, "gpu3/2/tx_bytes");
    let after = counter(&r2, "gpu3/2/tx_bytes");
    assert_eq!(after, (4096 + 2) * 1024);
    assert!(after < before);
}

#[test]
fn a_lost_gpu_fails_once_then_stays_quiet_and_is_looked_for_at_discovery() {
    let (mut src, cursor, _) = source(recording("h100_sxm_8gpu.json"));
    src.discover().unwrap();
    cursor.store(2, Ordering::Relaxed);
    let (r, rep) = sample(&mut src, Tier::Fast);
    assert!(rep.failed > 0);
    assert!(
        rep.errors
            .iter()
            .any(|e| e.to_string().contains("GPU is lost")),
        "{:?}",
        rep.errors
    );
    assert!(!r.keys().any(|k| k.starts_with("gpu7/")));
    assert!(r.contains_key("gpu6/0/tx_bytes"));
    // Marked lost: later ticks neither read it nor count failures for it.
    let (r, rep) = sample(&mut src, Tier::Fast);
    assert_eq!(rep.failed, 0, "{:?}", rep.errors);
    assert!(!r.keys().any(|k| k.starts_with("gpu7/")));
    let (_, rep) = sample(&mut src, Tier::Slow);
    assert_eq!(rep.failed, 0, "{:?}", rep.errors);
    // Discovery keeps its links and series (the GPU may come back) and does not fail.
    let links = src.inventory().links.len();
    assert!(!src.discover().unwrap());
    assert_eq!(src.inventory().links.len(), links);
}

#[test]
fn slow_tier_gpu_series_in_base_units() {
    let (mut src, _, _) = source(recording("h100_sxm_8gpu.json"));
    src.discover().unwrap();
    let (r, rep) = sample(&mut src, Tier::Slow);
    assert_eq!(rep.failed, 0, "{:?}", rep.errors);
    assert_eq!(gauge(&r, "gpu_utilization_ratio|gpu=0"), 0.97);
    assert_eq!(gauge(&r, "gpu_memory_utilization_ratio|gpu=0"), 0.41);
    assert_eq!(gauge(&r, "gpu_sm_activity_ratio|gpu=3"), 0.835);
    assert_eq!(gauge(&r, "gpu_memory_used_bytes|gpu=1"), 71_304_216_576.0);
    // GPM gives PCIe rates on Hopper: the 20 ms PCIe throughput sample is not taken.
    assert_eq!(gauge(&r, "gpu_pcie_tx_bytes_per_second|gpu=0"), 1.21e9);
    assert_eq!(gauge(&r, "gpu_pcie_rx_bytes_per_second|gpu=0"), 2.33e9);
    assert_eq!(gauge(&r, "gpu_nvlink_tx_bytes_per_second|gpu=0"), 368.6e9);
    assert_eq!(gauge(&r, "gpu_pcie_link_width|gpu=6"), 8.0);
    assert_eq!(gauge(&r, "gpu_pcie_link_width_max|gpu=6"), 16.0);
    assert_eq!(gauge(&r, "gpu_pcie_link_gen|gpu=6"), 5.0);
    assert_eq!(counter(&r, "gpu_pcie_replay_errors|gpu=6"), 12);
    assert_eq!(gauge(&r, "gpu_power_watts|gpu=0"), 612.345);
    assert_eq!(gauge(&r, "gpu_sm_clock_hz|gpu=0"), 1.98e9);
    // Error counters on the first slow tick, per active link.
    assert_eq!(counter(&r, "gpu2/4/replay_errors"), 3);
    assert_eq!(counter(&r, "gpu2/4/crc_flit_errors"), 0);
    assert!(
        !r.contains_key("gpu5/17/replay_errors"),
        "down link not read"
    );
    // Field 215 is NotSupported on Hopper: absent, not a failure, and not asked again.
    assert!(!r.keys().any(|k| k.ends_with("/recovery_events")));
    let (r, rep) = sample(&mut src, Tier::Slow);
    assert_eq!(rep.failed, 0);
    // Error counters wait for the tenth slow tick.
    assert!(!r.contains_key("gpu2/4/replay_errors"));
}

#[test]
fn a100_falls_back_to_the_legacy_counters() {
    let rec = recording("a100_sxm4_8gpu.json");
    // The `nvidia-smi nvlink --status` the recording's GPUs come from, read in place from the shared data.
    let smi = shared_testdata!("nvidia_smi/nvidia-smi.nvlink.status.a100")
        .map(|p| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())));
    let (mut src, cursor, _) = source(rec);
    src.discover().unwrap();
    let inv = src.inventory();
    assert_eq!(inv.links.len(), 8 * 12);
    assert!(inv
        .links
        .iter()
        .all(|l| l.capacity_bytes_per_second == Some(25e9) && l.attributes["version"] == "3"));
    if let Some(smi) = smi {
        // Same GPUs as nvidia-smi printed: 12 links of 25 GB/s each.
        assert_eq!(smi.matches("Link ").count(), inv.links.len());
        assert!(smi.contains(&inv.links[0].attributes["gpu_uuid"]));
    }
    assert_eq!(
        src.throughput_source(0),
        Some(ThroughputSource::LegacyCounters)
    );
    let (r0, rep) = sample(&mut src, Tier::Fast);
    assert_eq!(rep.failed, 0, "{:?}", rep.errors);
    cursor.fetch_add(1, Ordering::Relaxed);
    let (r1, _) = sample(&mut src, Tier::Fast);
    assert_eq!(counter(&r0, "gpu0/3/tx_bytes"), 90_000_000_003);
    assert_eq!(
        counter(&r1, "gpu0/3/tx_bytes") - counter(&r0, "gpu0/3/tx_bytes"),
        600_000_000
    );
    assert_eq!(
        counter(&r1, "gpu7/11/rx_bytes") - counter(&r0, "gpu7/11/rx_bytes"),
        500_000_000
    );
    // No GPM before Hopper: PCIe rates from NVML's throughput sample (KB/s × 1000), no SM activity.
    let (s, rep) = sample(&mut src, Tier::Slow);
    assert_eq!(rep.failed, 0, "{:?}", rep.errors);
    assert_eq!(gauge(&s, "gpu_pcie_tx_bytes_per_second|gpu=0"), 5e8);
    assert!(!s.contains_key("gpu_sm_activity_ratio|gpu=0"));
}

fn one_gpu(fields: serde_json::Value, legacy: serde_json::Value) -> Recording {
    serde_json::from_value(serde_json::json!({
        "gpus": [{
            "info": {"index": 0, "uuid": "GPU-x", "name": "test", "pci_bus_id": "0", "nvlink_count": 2,
                     "gpm_supported": false},
            "links": [
                {"link": 0, "active": true, "version": 5, "speed_mbps": 50000, "remote_pci_bus_id": null, "remote_type": null},
                {"link": 1, "active": true, "version": 5, "speed_mbps": 50000, "remote_pci_bus_id": null, "remote_type": null}
            ],
            "reads": [{"fields": fields, "legacy": legacy, "slow": null}]
        }]
    }))
    .unwrap()
}

#[test]
fn fallback_order_throughput_then_nvlink5_bytes_then_legacy_then_none() {
    // Only the NVLink 5 byte counters answer.
    let rec = one_gpu(
        serde_json::json!({"138/0": "NotSupported", "139/0": "NotSupported", "138/1": "NotSupported",
                           "139/1": "NotSupported", "202/0": 5000, "204/0": 6000, "202/1": 7000, "204/1": 8000}),
        serde_json::json!({"0": [1, 2]}),
    );
    let b = RecordedBackend::new(rec);
    let shared = gpu::shared(Box::new(b));
    let mut src = NvmlSource::new(Ok(shared.clone()));
    src.discover().unwrap();
    assert_eq!(
        src.throughput_source(0),
        Some(ThroughputSource::Nvlink5Bytes)
    );
    let (r, rep) = sample(&mut src, Tier::Fast);
    assert_eq!(rep.failed, 0);
    // Already bytes: not multiplied.
    assert_eq!(counter(&r, "gpu0/1/rx_bytes"), 8000);
    assert_eq!(
        src.inventory().links[0].capacity_bytes_per_second,
        Some(50e9)
    );

    // Neither field set: the legacy counters.
    let rec = one_gpu(serde_json::json!({}), serde_json::json!({"1": [10, 20]}));
    let mut src = NvmlSource::new(Ok(gpu::shared(Box::new(RecordedBackend::new(rec)))));
    src.discover().unwrap();
    assert_eq!(
        src.throughput_source(0),
        Some(ThroughputSource::LegacyCounters)
    );
    let (r, rep) = sample(&mut src, Tier::Fast);
    assert_eq!(counter(&r, "gpu0/1/tx_bytes"), 10);
    // Link 0 has no legacy counter: counted as failed, link 1 still read.
    assert_eq!(rep.failed, 2);

    // Nothing: links stay in the inventory without byte series.
    let rec = one_gpu(serde_json::json!({}), serde_json::json!({}));
    let mut src = NvmlSource::new(Ok(gpu::shared(Box::new(RecordedBackend::new(rec)))));
    src.discover().unwrap();
    assert_eq!(src.throughput_source(0), Some(ThroughputSource::None));
    assert_eq!(src.inventory().links.len(), 2);
    assert!(!src
        .inventory()
        .series
        .iter()
        .any(|s| s.metric == "tx_bytes"));
    let (r, rep) = sample(&mut src, Tier::Fast);
    assert!(r.is_empty() && rep.failed == 0);
}

#[test]
fn unsupported_fields_on_one_link_are_counted_and_the_rest_read() {
    let rec = one_gpu(
        serde_json::json!({"138/0": 10, "139/0": 20, "138/1": "NotSupported", "139/1": 40}),
        serde_json::json!({}),
    );
    let mut src = NvmlSource::new(Ok(gpu::shared(Box::new(RecordedBackend::new(rec)))));
    src.discover().unwrap();
    let (r, rep) = sample(&mut src, Tier::Fast);
    assert_eq!(rep.failed, 1);
    assert_eq!(counter(&r, "gpu0/0/tx_bytes"), 10 * 1024);
    assert_eq!(counter(&r, "gpu0/1/rx_bytes"), 40 * 1024);
    assert!(!r.contains_key("gpu0/1/tx_bytes"));
    // A slow tier with nothing recorded: every call NotSupported, nothing pushed, nothing failed.
    let (r, rep) = sample(&mut src, Tier::Slow);
    assert!(r.is_empty());
    assert_eq!(rep.failed, 0, "{:?}", rep.errors);
}

#[test]
fn nvml_absent_is_an_empty_source_without_errors() {
    let mut src = NvmlSource::new(Err(GpuError::Unavailable(
        "libnvidia-ml.so.1 missing".into(),
    )));
    assert!(!src.discover().unwrap());
    assert!(src.inventory().links.is_empty() && src.inventory().series.is_empty());
    let (r, rep) = sample(&mut src, Tier::Fast);
    assert!(r.is_empty() && rep.failed == 0);
    // A backend that reports NVML unavailable at discovery behaves the same.
    let (mut src, _, _) = source(recording("absent.json"));
    assert!(!src.discover().unwrap());
    assert!(!src.discover().unwrap());
    assert!(src.inventory().links.is_empty());
    let (_, rep) = sample(&mut src, Tier::Slow);
    assert_eq!(rep.failed, 0);
}

#[test]
fn nvml_call_latencies_are_agent_metrics() {
    let (mut src, _, _) = source(recording("h100_sxm_8gpu.json"));
    let metrics = Arc::new(AgentMetrics::new());
    src.bind_metrics(&metrics);
    src.discover().unwrap();
    sample(&mut src, Tier::Fast);
    sample(&mut src, Tier::Slow);
    // One batched field call per GPU per fast tick; 36 fields each, with NVML's latency of 3 or 4 µs.
    assert_eq!(
        metrics
            .nvml_call_seconds
            .with_label_values(&["field_values"])
            .get_sample_count(),
        // 8 probes at discovery are made without timing; 8 fast batches + 8 slow (field 215) batches.
        16
    );
    let lat = &metrics.nvml_field_latency_seconds;
    assert!(lat.get_sample_count() >= 8 * 35);
    let text = metrics.render();
    assert!(
        text.contains("commwatch_agent_nvml_call_duration_seconds_count{call=\"utilization\"} 8"),
        "{text}"
    );
    assert!(text.contains("commwatch_agent_nvml_field_latency_seconds_bucket{le=\"0.000005\"}"));
}

/// The counter `key` of `m`, if pushed.
fn maybe(m: &BTreeMap<String, Value>, key: &str) -> Option<u64> {
    match m.get(key) {
        Some(Value::Counter(v)) => Some(*v),
        _ => None,
    }
}

#[test]
fn nvlink_bytes_per_gpu_go_fast_and_per_link_slow() {
    use commwatch_agent::source::nvml::NvlinkBytes;
    let b = RecordedBackend::new(recording("h100_sxm_8gpu.json"));
    let cursor = b.cursor();
    let shared = gpu::shared(Box::new(b));
    let mut src = NvmlSource::new(Ok(shared)).with_nvlink_bytes(NvlinkBytes::Gpu);
    assert!(src.discover().unwrap());
    let inv = src.inventory();
    // One link per GPU for its NVLinks as one, beside the 144 links.
    let sums: Vec<_> = inv.links.iter().filter(|l| l.is_gpu_nvlinks()).collect();
    assert_eq!(sums.len(), 8);
    assert_eq!(inv.links.len(), 8 * 18 + 8);
    assert_eq!(sums[0].key.device, "gpu0");
    assert_eq!(sums[0].capacity_bytes_per_second, Some(18.0 * 26.562e9));
    assert_eq!(sums[0].attributes["nvlinks"], "18");
    // Byte counters: the sums at the fast rate, every link's at the slow one.
    let mut fast_bytes = 0;
    for s in inv
        .series
        .iter()
        .filter(|s| s.metric == "tx_bytes" || s.metric == "rx_bytes")
    {
        let key = s.link.as_ref().expect("a link's");
        let fast = key.port.is_empty();
        assert_eq!(s.tier, if fast { Tier::Fast } else { Tier::Slow }, "{key}");
        fast_bytes += usize::from(fast);
    }
    assert_eq!(fast_bytes, 16);
    // A reading: the sums are the links' (read in the slow tier at the same point of the recording).
    let (f0, rep) = sample(&mut src, Tier::Fast);
    assert_eq!((f0.len(), rep.failed), (16, 0), "{:?}", rep.errors);
    let (s0, _) = sample(&mut src, Tier::Slow);
    let links = |m: &BTreeMap<String, Value>, g: u32, d: &str| -> u64 {
        (0..18)
            .filter_map(|l| maybe(m, &format!("gpu{g}/{l}/{d}")))
            .sum()
    };
    for g in 0..8 {
        for d in ["tx_bytes", "rx_bytes"] {
            assert_eq!(counter(&f0, &format!("gpu{g}//{d}")), links(&s0, g, d));
        }
    }
    assert!(
        maybe(&s0, "gpu0/0/tx_bytes").is_some(),
        "links in the slow tier"
    );
    // The next reading: each sum grew by its links' increases.
    cursor.fetch_add(1, Ordering::Relaxed);
    let (f1, _) = sample(&mut src, Tier::Fast);
    let (s1, _) = sample(&mut src, Tier::Slow);
    for g in 0..8 {
        let grew =
            counter(&f1, &format!("gpu{g}//tx_bytes")) - counter(&f0, &format!("gpu{g}//tx_bytes"));
        assert_eq!(
            grew,
            links(&s1, g, "tx_bytes") - links(&s0, g, "tx_bytes"),
            "gpu{g}"
        );
    }
    // gpu3's counters restart (a driver reload): its sum does not go back.
    cursor.fetch_add(1, Ordering::Relaxed);
    let (f2, _) = sample(&mut src, Tier::Fast);
    assert!(counter(&f2, "gpu3//tx_bytes") >= counter(&f1, "gpu3//tx_bytes"));
    // A rediscovery keeps the sums.
    assert!(!src.discover().unwrap());
    let (f3, _) = sample(&mut src, Tier::Fast);
    assert!(counter(&f3, "gpu3//tx_bytes") >= counter(&f2, "gpu3//tx_bytes"));
}
