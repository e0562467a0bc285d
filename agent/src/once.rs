//! `commwatch agent --once`: samples every source once (two fast ticks, so rates exist, and one slow tick)
//! and describes the node as one JSON document. This is how an operator checks a node and how tests check a
//! source. The document's top-level keys are a contract: `node`, `agent_version`, `sysfs_root`,
//! `procfs_root`, `warnings` (what the agent cannot see: `code`, `level`, `message`), `blind` (what a GPU node
//! must have and this one does not show: `code`, `what`, `reason`; each also a `warn` warning), `sources`
//! (`name`, `status` `ok` or `unavailable` with a `reason`, `errors`), `inventory` (`links`, `series`), `links`
//! (with byte and packet totals and rates), `samples`, `jobs`, `errors`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_model::clock::unix_now_ns;
use commwatch_model::Tier;
use commwatch_proto::{convert, v1 as pb};
use serde_json::{json, Value as Json};

use crate::config::AgentConfig;
use crate::sampler::{BatchBuilder, Sampler};
use crate::source;
use crate::telemetry::AgentMetrics;

/// The class label of a wire class (`unknown` for one this build does not know).
fn class_name(c: i32) -> &'static str {
    convert::link_class(c).as_str()
}

/// The role label of a wire role (`unknown` for one this build does not know).
fn role_name(r: i32) -> &'static str {
    convert::link_role(r).as_str()
}

fn value_json(d: &pb::SeriesDescriptor, bits: u64) -> Json {
    if d.kind == pb::SeriesKind::Gauge as i32 {
        let v = f64::from_bits(bits);
        if v.is_finite() {
            json!(v)
        } else {
            Json::Null
        }
    } else {
        json!(bits)
    }
}

/// A series as the document describes it (in `samples` and in `inventory.series`): metric, kind, tier, its
/// link's class, device and port, and labels.
fn series_json(d: &pb::SeriesDescriptor, link: Option<&pb::Link>) -> Json {
    json!({
        "metric": d.metric,
        "kind": if d.kind == pb::SeriesKind::Gauge as i32 { "gauge" } else { "counter" },
        "tier": convert::tier(d.tier).unwrap_or(Tier::Slow).as_str(),
        "class": link.map(|l| class_name(l.class)),
        "device": link.map(|l| l.device.as_str()),
        "port": link.map(|l| l.port.as_str()),
        "labels": d.labels.iter().collect::<BTreeMap<_, _>>(),
    })
}

/// Samples once and returns the document. Blocking (reads files; sleeps one fast period between the two
/// fast ticks): call it from a blocking context.
pub fn run_once(config: &AgentConfig) -> Json {
    run_once_with(config, crate::AgentExtras::default())
}

/// [`run_once`] with injected backends.
pub fn run_once_with(config: &AgentConfig, extras: crate::AgentExtras) -> Json {
    let metrics = Arc::new(AgentMetrics::new());
    let mut sampler = Sampler::new(
        source::build_sources_with(&config.source_settings(), extras),
        metrics,
    );
    sampler.discover();
    let ticks = Ticks::read(&mut sampler, config.fast_period);
    let inv = sampler.full_inventory();
    let unavailable = sampler.unavailable_sources();
    let blind = crate::coverage::blindness(config, &sampler.source_names(), &unavailable, &inv);
    let mut warnings = crate::coverage::check_roots(config);
    warnings.extend(crate::coverage::check_discovery(
        config,
        &sampler.source_names(),
        &blind,
        &inv,
    ));
    crate::coverage::log(&config.node, &warnings);
    // Each link's facts (the inventory's view); `links` adds the byte totals and rates to them.
    let link_facts: Vec<Json> = inv.links.iter().map(link_facts_json).collect();
    json!({
        "node": config.node,
        "agent_version": env!("CARGO_PKG_VERSION"),
        "sysfs_root": config.sysfs_root,
        "procfs_root": config.procfs_root,
        "warnings": warnings,
        "blind": blind,
        "sources": sources_json(&sampler, &unavailable),
        // The inventory as the collector receives it: every link with its facts, and every series.
        "inventory": {
            "links": link_facts,
            "series": inv.series.iter().map(|d| {
                let mut o = series_json(d, sampler.link(d.link_id));
                o["id"] = json!(d.id);
                o
            }).collect::<Vec<_>>(),
        },
        "links": links_json(&inv, &link_facts, &ticks),
        "samples": samples_json(&sampler, &inv, &ticks),
        "jobs": serde_json::to_value(sampler.jobs()).unwrap_or_else(|_| json!([])),
        "errors": sampler
            .recent_errors()
            .iter()
            .map(|(s, m)| json!({"source": s, "error": m}))
            .collect::<Vec<_>>(),
    })
}

/// The values of two ticks, `dt` seconds apart: the first reads the fast tier, the second both tiers.
struct Ticks {
    first: BTreeMap<u32, u64>,
    second: BTreeMap<u32, u64>,
    dt: f64,
}

impl Ticks {
    /// Reads the two ticks, one fast period (at least 1 ms) apart.
    fn read(sampler: &mut Sampler, fast_period: Duration) -> Ticks {
        let mut first = BatchBuilder::default();
        let t0 = Instant::now();
        first.begin_tick(unix_now_ns());
        sampler.sample(Tier::Fast, &mut first);
        first.end_tick();
        let wait = fast_period.saturating_sub(t0.elapsed());
        std::thread::sleep(wait.max(Duration::from_millis(1)));
        let mut second = BatchBuilder::default();
        let t1 = Instant::now();
        second.begin_tick(unix_now_ns());
        sampler.sample(Tier::Fast, &mut second);
        sampler.sample(Tier::Slow, &mut second);
        second.end_tick();
        let collect = |b: &mut BatchBuilder| -> BTreeMap<u32, u64> {
            b.take()
                .map(|b| b.series_ids.into_iter().zip(b.values).collect())
                .unwrap_or_default()
        };
        Ticks {
            first: collect(&mut first),
            second: collect(&mut second),
            dt: t1.duration_since(t0).as_secs_f64(),
        }
    }

    /// The newest value of series `id`.
    fn latest(&self, id: u32) -> Option<u64> {
        self.second
            .get(&id)
            .or_else(|| self.first.get(&id))
            .copied()
    }
}

/// A link's facts: class, device, port, role, capacity, state, attributes, and `gpu`/`link` for NVLink.
fn link_facts_json(l: &pb::Link) -> Json {
    let mut o = json!({
        "class": class_name(l.class),
        "device": l.device,
        "port": l.port,
        "role": role_name(l.role),
        "capacity_bytes_per_second": if l.capacity_bytes_per_second > 0.0 { json!(l.capacity_bytes_per_second) } else { Json::Null },
        "state": l.state,
        "attributes": l.attributes.iter().collect::<BTreeMap<_, _>>(),
    });
    if !l.gpu.is_empty() {
        o["gpu"] = json!(l.gpu);
        o["link"] = json!(l.link);
    }
    o
}

/// The link counters `links` reports: bytes, and packets (a port without byte counters, as Soft-RoCE's, has
/// only these: never converted to bytes).
const LINK_TOTALS: [&str; 4] = ["tx_bytes", "rx_bytes", "tx_packets", "rx_packets"];

/// Each link's facts with its byte and packet totals (the newest value) and rates between the two ticks (a
/// counter read in both: the fast tier's); `null` where it has none.
fn links_json(inv: &pb::Inventory, link_facts: &[Json], ticks: &Ticks) -> Vec<Json> {
    let mut per_link: BTreeMap<u32, serde_json::Map<String, Json>> = BTreeMap::new();
    for d in &inv.series {
        if d.link_id == 0 || !LINK_TOTALS.contains(&d.metric.as_str()) {
            continue;
        }
        let Some(b) = ticks.latest(d.id) else {
            continue;
        };
        let entry = per_link.entry(d.link_id).or_default();
        entry.insert(format!("{}_total", d.metric), json!(b));
        let rate = match ticks.first.get(&d.id) {
            Some(&a) if ticks.second.contains_key(&d.id) && b >= a && ticks.dt > 0.0 => {
                json!((b - a) as f64 / ticks.dt)
            }
            _ => Json::Null,
        };
        entry.insert(format!("{}_per_second", d.metric), rate);
    }
    inv.links
        .iter()
        .zip(link_facts)
        .map(|(l, facts)| {
            let mut o = facts.clone();
            for m in LINK_TOTALS {
                o[format!("{m}_total").as_str()] = Json::Null;
                o[format!("{m}_per_second").as_str()] = Json::Null;
            }
            if let Some(extra) = per_link.get(&l.id) {
                for (k, v) in extra {
                    o[k.as_str()] = v.clone();
                }
            }
            o
        })
        .collect()
}

/// Every series that produced a value, with its newest value and whether a counter is saturated.
fn samples_json(sampler: &Sampler, inv: &pb::Inventory, ticks: &Ticks) -> Vec<Json> {
    inv.series
        .iter()
        .filter_map(|d| {
            let bits = ticks.latest(d.id)?;
            let mut o = series_json(d, sampler.link(d.link_id));
            o["value"] = value_json(d, bits);
            let saturation = if d.max_value == 0 {
                u64::MAX
            } else {
                d.max_value
            };
            o["saturated"] = json!(d.kind == pb::SeriesKind::Counter as i32 && bits == saturation);
            Some(o)
        })
        .collect()
}

/// Each source with its status — `ok`, or `unavailable` with the reason when it can read nothing here
/// (`unavailable`: [`Sampler::unavailable_sources`]) — and the number of its recent errors.
fn sources_json(sampler: &Sampler, unavailable: &[(&str, String)]) -> Vec<Json> {
    sampler
        .source_names()
        .into_iter()
        .map(|name| {
            let errors = sampler
                .recent_errors()
                .iter()
                .filter(|(s, _)| *s == name)
                .count();
            match unavailable.iter().find(|(s, _)| *s == name) {
                Some((_, reason)) => json!({
                    "name": name, "status": "unavailable", "reason": reason, "errors": errors,
                }),
                None => json!({"name": name, "status": "ok", "errors": errors}),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sysfs root with one interface whose byte counters hold `tx`/`rx`.
    fn sysfs_with_eth0(tx: u64, rx: u64) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let eth0 = dir.path().join("class/net/eth0");
        std::fs::create_dir_all(eth0.join("statistics")).unwrap();
        for (f, v) in [
            ("type", "1"),
            ("mtu", "1500"),
            ("operstate", "up"),
            ("speed", "25000"),
        ] {
            std::fs::write(eth0.join(f), format!("{v}\n")).unwrap();
        }
        for f in [
            "tx_packets",
            "rx_packets",
            "tx_errors",
            "rx_errors",
            "tx_dropped",
            "rx_dropped",
        ] {
            std::fs::write(eth0.join("statistics").join(f), "0\n").unwrap();
        }
        std::fs::write(eth0.join("statistics/tx_bytes"), format!("{tx}\n")).unwrap();
        std::fs::write(eth0.join("statistics/rx_bytes"), format!("{rx}\n")).unwrap();
        dir
    }

    fn keys(v: &Json) -> Vec<&str> {
        let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        k.sort();
        k
    }

    #[test]
    fn the_document_keeps_its_keys_and_describes_the_interface() {
        let root = sysfs_with_eth0(1000, 2000);
        let config = AgentConfig {
            node: "t1".into(),
            sysfs_root: root.path().to_path_buf(),
            sources: vec!["netdev".into()],
            fast_period: Duration::from_millis(5),
            ..AgentConfig::default()
        };
        let doc = run_once(&config);
        assert_eq!(
            keys(&doc),
            [
                "agent_version",
                "blind",
                "errors",
                "inventory",
                "jobs",
                "links",
                "node",
                "procfs_root",
                "samples",
                "sources",
                "sysfs_root",
                "warnings"
            ]
        );
        assert_eq!(doc["node"], "t1");
        assert_eq!(
            doc["sources"],
            json!([{"name": "netdev", "status": "ok", "errors": 0}])
        );
        // Only netdev asked for: neither GPU nor fabric is expected.
        assert_eq!(doc["blind"], json!([]));
        assert_eq!(doc["jobs"], json!([]));
        let facts = &doc["inventory"]["links"][0];
        assert_eq!(
            keys(facts),
            [
                "attributes",
                "capacity_bytes_per_second",
                "class",
                "device",
                "port",
                "role",
                "state"
            ]
        );
        assert_eq!(
            (&facts["class"], &facts["role"], &facts["state"]),
            (&json!("ethernet"), &json!("management"), &json!("up"))
        );
        assert_eq!(facts["capacity_bytes_per_second"], json!(3.125e9));
        let link = &doc["links"][0];
        assert_eq!(link["tx_bytes_total"], json!(1000));
        assert_eq!(link["rx_bytes_total"], json!(2000));
        // The counters did not move between the two ticks.
        assert_eq!(link["tx_bytes_per_second"], json!(0.0));
        let tx = doc["samples"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["metric"] == "tx_bytes")
            .unwrap();
        assert_eq!(
            keys(tx),
            [
                "class",
                "device",
                "kind",
                "labels",
                "metric",
                "port",
                "saturated",
                "tier",
                "value"
            ]
        );
        assert_eq!(
            (&tx["kind"], &tx["tier"], &tx["value"], &tx["saturated"]),
            (
                &json!("counter"),
                &json!("fast"),
                &json!(1000),
                &json!(false)
            )
        );
        let series = doc["inventory"]["series"].as_array().unwrap();
        assert_eq!(series.len(), 10, "8 statistics, state and capacity");
        assert!(series.iter().all(|s| s["id"].as_u64().is_some()));
    }
}
