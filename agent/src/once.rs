//! `commwatch agent --once`: samples every source once (two fast ticks, so rates exist, and one slow tick)
//! and describes the node as one JSON document. This is how an operator checks a node and how tests check a
//! source. The document's top-level keys are a contract: `node`, `agent_version`, `sysfs_root`,
//! `procfs_root`, `warnings`, `sources`, `inventory` (`links`, `series`), `links` (with byte totals and
//! rates), `samples`, `jobs`, `errors`.

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

    let mut first = BatchBuilder::default();
    let t0 = Instant::now();
    first.begin_tick(unix_now_ns());
    sampler.sample(Tier::Fast, &mut first);
    first.end_tick();
    let wait = config.fast_period.saturating_sub(t0.elapsed());
    std::thread::sleep(wait.max(Duration::from_millis(1)));
    let mut second = BatchBuilder::default();
    let t1 = Instant::now();
    second.begin_tick(unix_now_ns());
    sampler.sample(Tier::Fast, &mut second);
    sampler.sample(Tier::Slow, &mut second);
    second.end_tick();
    let dt = t1.duration_since(t0).as_secs_f64();

    let collect = |b: &mut BatchBuilder| -> BTreeMap<u32, u64> {
        b.take()
            .map(|b| b.series_ids.into_iter().zip(b.values).collect())
            .unwrap_or_default()
    };
    let v0 = collect(&mut first);
    let v1 = collect(&mut second);

    // Per link: byte totals and rates between the two fast ticks.
    let inv = sampler.full_inventory();
    let mut per_link: BTreeMap<u32, serde_json::Map<String, Json>> = BTreeMap::new();
    for d in &inv.series {
        if d.link_id == 0 || !(d.metric == "tx_bytes" || d.metric == "rx_bytes") {
            continue;
        }
        let (Some(a), Some(b)) = (v0.get(&d.id), v1.get(&d.id)) else {
            continue;
        };
        let entry = per_link.entry(d.link_id).or_default();
        entry.insert(format!("{}_total", d.metric), json!(b));
        let rate = if b >= a && dt > 0.0 {
            json!((b - a) as f64 / dt)
        } else {
            Json::Null
        };
        entry.insert(format!("{}_per_second", d.metric), rate);
    }
    // Each link's facts (the inventory's view); `links` adds the byte totals and rates to them.
    let link_facts: Vec<Json> = inv
        .links
        .iter()
        .map(|l| {
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
        })
        .collect();
    let links: Vec<Json> = inv
        .links
        .iter()
        .zip(&link_facts)
        .map(|(l, facts)| {
            let mut o = facts.clone();
            for k in [
                "tx_bytes_total",
                "rx_bytes_total",
                "tx_bytes_per_second",
                "rx_bytes_per_second",
            ] {
                o[k] = Json::Null;
            }
            if let Some(extra) = per_link.get(&l.id) {
                for (k, v) in extra {
                    o[k.as_str()] = v.clone();
                }
            }
            o
        })
        .collect();

    let mut samples = Vec::new();
    for d in &inv.series {
        let Some(bits) = v1.get(&d.id).or_else(|| v0.get(&d.id)) else {
            continue;
        };
        let mut o = series_json(d, sampler.link(d.link_id));
        o["value"] = value_json(d, *bits);
        o["saturated"] = json!(
            d.kind == pb::SeriesKind::Counter as i32
                && *bits
                    == if d.max_value == 0 {
                        u64::MAX
                    } else {
                        d.max_value
                    }
        );
        samples.push(o);
    }

    let sources: Vec<Json> = sampler
        .source_names()
        .into_iter()
        .map(|name| {
            json!({
                "name": name,
                "errors": sampler.recent_errors().iter().filter(|(s, _)| *s == name).count(),
            })
        })
        .collect();
    let errors: Vec<Json> = sampler
        .recent_errors()
        .iter()
        .map(|(s, m)| json!({"source": s, "error": m}))
        .collect();

    json!({
        "node": config.node,
        "agent_version": env!("CARGO_PKG_VERSION"),
        "sysfs_root": config.sysfs_root,
        "procfs_root": config.procfs_root,
        "warnings": crate::check_roots(config),
        "sources": sources,
        // The inventory as the collector receives it: every link with its facts, and every series.
        "inventory": {
            "links": link_facts,
            "series": inv.series.iter().map(|d| {
                let mut o = series_json(d, sampler.link(d.link_id));
                o["id"] = json!(d.id);
                o
            }).collect::<Vec<_>>(),
        },
        "links": links,
        "samples": samples,
        "jobs": serde_json::to_value(sampler.jobs()).unwrap_or_else(|_| json!([])),
        "errors": errors,
    })
}
