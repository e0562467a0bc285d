//! The benchmark's tables, in Markdown: faults found (share, delay in steps), faults by background, alarms
//! on healthy clusters per node-hour, per-step bytes against the truth, and the plumbing's counts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::harness::agent::Shipped;
use crate::harness::run::RunOutcome;
use crate::harness::score::{score_fault, score_healthy, FaultScore};
use crate::harness::truth::{ByteTally, TOLERANCE};
use crate::matrix::{Group, Planned, BACKGROUNDS};

/// A run and what came of it (an error when it could not run to the end).
pub type Done = (Planned, Result<RunOutcome, String>);

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn pct(n: usize, of: usize) -> String {
    if of == 0 {
        return "–".into();
    }
    format!("{}/{} ({:.0} %)", n, of, 100.0 * n as f64 / of as f64)
}

fn kinds(m: &BTreeMap<String, u32>) -> String {
    if m.is_empty() {
        return "–".into();
    }
    m.iter()
        .map(|(k, n)| format!("{k} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One fault run, scored.
struct FaultRun<'a> {
    fault: &'static str,
    background: &'static str,
    label: &'a str,
    score: FaultScore,
    /// From the fault's onset to its finding, steps of the faulty job.
    delay_steps: Option<f64>,
    /// From the onset, seconds.
    delay_s: Option<f64>,
    /// When the fault first shows, steps from the run's start (0 but for `flapping`).
    onset_steps: f64,
    /// When the collector's first step ended, in steps of the faulty job.
    first_step: Option<f64>,
}

fn fault_runs(done: &[Done]) -> Vec<FaultRun<'_>> {
    let mut out = Vec::new();
    for (p, r) in done {
        let (Group::Fault { fault, background }, Some(expect), Ok(o)) = (&p.group, &p.expect, r)
        else {
            continue;
        };
        let score = score_fault(expect, &o.events);
        let steps = |t: Duration| t.as_secs_f64() / p.period.as_secs_f64();
        let since_onset = score.found_at.map(|t| t.saturating_sub(p.onset));
        out.push(FaultRun {
            fault,
            background,
            label: &p.label,
            delay_steps: since_onset.map(steps),
            delay_s: since_onset.map(|t| t.as_secs_f64()),
            onset_steps: steps(p.onset),
            first_step: o.first_step.map(steps),
            score,
        });
    }
    out
}

/// Faults: per kind, over every background and seed.
fn faults_table(runs: &[FaultRun], s: &mut String) {
    let _ = writeln!(
        s,
        "### Faults: found on the right subject, at warning or above\n"
    );
    let _ = writeln!(
        s,
        "| fault | runs | found | found as | as root cause | fault starts, steps (median) | delay, steps: median / max | delay, s: median | first step found, steps (median) | raised at any severity | other root-cause alarms |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    let mut order: Vec<&str> = Vec::new();
    for r in runs {
        if !order.contains(&r.fault) {
            order.push(r.fault);
        }
    }
    for fault in order {
        let rs: Vec<&FaultRun> = runs.iter().filter(|r| r.fault == fault).collect();
        let found = rs.iter().filter(|r| r.score.found_at.is_some()).count();
        let root = rs
            .iter()
            .filter(|r| r.score.found_at.is_some() && r.score.found_root)
            .count();
        let seen = rs.iter().filter(|r| r.score.seen_at.is_some()).count();
        let mut delays: Vec<f64> = rs.iter().filter_map(|r| r.delay_steps).collect();
        let max = delays
            .iter()
            .copied()
            .fold(None, |m: Option<f64>, d| Some(m.map_or(d, |m| m.max(d))));
        let delay = match (median(&mut delays), max) {
            (Some(m), Some(x)) => format!("{m:.1} / {x:.1}"),
            _ => "–".into(),
        };
        let mut other: BTreeMap<String, u32> = BTreeMap::new();
        let mut found_as: BTreeMap<String, u32> = BTreeMap::new();
        for r in &rs {
            for (k, n) in &r.score.other {
                *other.entry(k.clone()).or_default() += n;
            }
            if let Some(k) = r.score.found_kind {
                *found_as.entry(k.to_string()).or_default() += 1;
            }
        }
        let mut first: Vec<f64> = rs.iter().filter_map(|r| r.first_step).collect();
        let first = median(&mut first).map_or("–".into(), |m| format!("{m:.1}"));
        let mut secs: Vec<f64> = rs.iter().filter_map(|r| r.delay_s).collect();
        let secs = median(&mut secs).map_or("–".into(), |m| format!("{m:.1}"));
        let mut onset: Vec<f64> = rs.iter().map(|r| r.onset_steps).collect();
        let onset = median(&mut onset).map_or("–".into(), |m| format!("{m:.1}"));
        let _ = writeln!(
            s,
            "| {fault} | {} | {} | {} | {} | {onset} | {delay} | {secs} | {first} | {} | {} |",
            rs.len(),
            pct(found, rs.len()),
            kinds(&found_as),
            pct(root, found),
            pct(seen, rs.len()),
            kinds(&other)
        );
    }
    let missed: Vec<&str> = runs
        .iter()
        .filter(|r| r.score.found_at.is_none())
        .map(|r| r.label)
        .collect();
    if !missed.is_empty() {
        let _ = writeln!(s, "\nNot found: {}.", missed.join("; "));
    }
    let other: Vec<String> = runs
        .iter()
        .filter(|r| !r.score.other.is_empty())
        .map(|r| format!("{} ({})", r.label, kinds(&r.score.other)))
        .collect();
    if !other.is_empty() {
        let _ = writeln!(s, "\nOther root-cause alarms in: {}.", other.join("; "));
    }
}

/// Faults by background: found / runs and the median delay in steps.
fn backgrounds_table(runs: &[FaultRun], s: &mut String) {
    let _ = writeln!(
        s,
        "\n### Faults by background: found / runs, median delay in steps\n"
    );
    let bgs: Vec<&str> = BACKGROUNDS
        .iter()
        .map(|(b, _)| *b)
        .filter(|b| runs.iter().any(|r| r.background == *b))
        .collect();
    let _ = writeln!(s, "| fault | {} |", bgs.join(" | "));
    let _ = writeln!(s, "|---|{}", "---|".repeat(bgs.len()));
    let mut order: Vec<&str> = Vec::new();
    for r in runs {
        if !order.contains(&r.fault) {
            order.push(r.fault);
        }
    }
    for fault in order {
        let cells: Vec<String> = bgs
            .iter()
            .map(|bg| {
                let rs: Vec<&FaultRun> = runs
                    .iter()
                    .filter(|r| r.fault == fault && r.background == *bg)
                    .collect();
                if rs.is_empty() {
                    return "n/a".into();
                }
                let found = rs.iter().filter(|r| r.score.found_at.is_some()).count();
                let mut d: Vec<f64> = rs.iter().filter_map(|r| r.delay_steps).collect();
                match median(&mut d) {
                    Some(m) => format!("{found}/{} · {m:.1}", rs.len()),
                    None => format!("{found}/{}", rs.len()),
                }
            })
            .collect();
        let _ = writeln!(s, "| {fault} | {} |", cells.join(" | "));
    }
}

/// Healthy clusters: alarms per node-hour, by variant.
fn healthy_table(done: &[Done], s: &mut String) {
    let _ = writeln!(s, "\n### Healthy clusters: alarms per node-hour\n");
    let _ = writeln!(
        s,
        "| variant | runs | node-hours | warnings / node-hour | criticals / node-hour | kinds |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    let mut firsts: Vec<String> = Vec::new();
    let mut order: Vec<&str> = Vec::new();
    for (p, _) in done {
        if let Group::Healthy { variant } = &p.group {
            if !order.contains(&variant.as_str()) {
                order.push(variant);
            }
        }
    }
    for variant in order {
        let (mut runs, mut node_h) = (0, 0.0);
        let (mut w, mut c) = (BTreeMap::new(), BTreeMap::new());
        for (p, r) in done {
            let (Group::Healthy { variant: v }, Ok(o)) = (&p.group, r) else {
                continue;
            };
            if v != variant {
                continue;
            }
            runs += 1;
            node_h += p.run.spec.nodes as f64 * p.run.duration.as_secs_f64() / 3600.0;
            let sc = score_healthy(&o.events);
            if let Some(f) = sc.first {
                firsts.push(format!("{}: {f}", p.label));
            }
            for (k, n) in sc.warnings {
                *w.entry(k).or_default() += n;
            }
            for (k, n) in sc.criticals {
                *c.entry(k.clone()).or_default() += n;
            }
        }
        let total = |m: &BTreeMap<String, u32>| m.values().sum::<u32>() as f64;
        let mut all = w.clone();
        for (k, n) in &c {
            *all.entry(format!("{k} (critical)")).or_default() += n;
        }
        let _ = writeln!(
            s,
            "| {variant} | {runs} | {node_h:.1} | {:.2} | {:.2} | {} |",
            total(&w) / node_h.max(1e-9),
            total(&c) / node_h.max(1e-9),
            kinds(&all)
        );
    }
    if !firsts.is_empty() {
        let _ = writeln!(s, "\nFirst alarm of each run that raised one:");
        for f in firsts {
            let _ = writeln!(s, "- {f}");
        }
    }
}

/// Per-step bytes against the truth, per fault and per healthy variant.
fn bytes_table(done: &[Done], s: &mut String) {
    let _ = writeln!(
        s,
        "\n### Per-step bytes against the simulator's truth (links carrying the AllReduce, tx and rx)\n"
    );
    let _ = writeln!(
        s,
        "| runs | steps found | holding one simulated burst | holding several | holding none | link directions compared | within {:.0} % | max relative error |",
        TOLERANCE * 100.0
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    let mut groups: Vec<(String, ByteTally)> = Vec::new();
    for (p, r) in done {
        let Ok(o) = r else { continue };
        let name = match &p.group {
            Group::Fault { fault, .. } => (*fault).to_string(),
            Group::Healthy { variant } => format!("healthy {variant}"),
        };
        match groups.iter_mut().find(|(n, _)| *n == name) {
            Some((_, t)) => t.merge(&o.bytes),
            None => groups.push((name, o.bytes.clone())),
        }
    }
    let mut worst = ByteTally::default();
    for (name, t) in &groups {
        worst.merge(t);
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {} | {} | {} | {} | {:.3} % |",
            t.steps,
            pct((t.steps - t.empty - t.multi) as usize, t.steps as usize),
            t.multi,
            t.empty,
            t.compared,
            pct(t.within as usize, t.compared as usize),
            t.max_rel_error * 100.0
        );
    }
    if !worst.worst.is_empty() {
        let _ = writeln!(s, "\nLargest error: {}.", worst.worst);
    }
    misses(done, s);
}

/// Every run's comparisons beyond the tolerance (the first few of each), so that a miss can be read against
/// the simulated bursts without a rerun.
fn misses(done: &[Done], s: &mut String) {
    let runs: Vec<_> = done
        .iter()
        .filter_map(|(p, r)| r.as_ref().ok().map(|o| (p, o)))
        .filter(|(_, o)| o.bytes.compared > o.bytes.within)
        .collect();
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(s, "\nOver {:.0} %:\n", TOLERANCE * 100.0);
    for (p, o) in runs {
        let over = o.bytes.compared - o.bytes.within;
        let _ = writeln!(
            s,
            "- {} ({over}, the first {} listed):",
            p.label,
            o.bytes.misses.len()
        );
        for m in &o.bytes.misses {
            let _ = writeln!(s, "  - {m}");
        }
    }
}

/// The plumbing: what reached the store, and the runs' wall time.
fn plumbing(done: &[Done], wall: Duration, s: &mut String) {
    let mut shipped = Shipped::default();
    let (mut errors, mut lagged, mut sim, mut run_wall) = (0, 0, 0.0, 0.0);
    let (mut compared, mut differed, mut first) = (0, 0, None);
    for (p, r) in done {
        let Ok(o) = r else { continue };
        shipped.batches += o.shipped.batches;
        shipped.samples += o.shipped.samples;
        shipped.out_of_order += o.shipped.out_of_order;
        shipped.resets += o.shipped.resets;
        shipped.implausible += o.shipped.implausible;
        shipped.refused += o.shipped.refused;
        errors += o.agent_errors;
        lagged += o.lagged;
        compared += o.oracle.0;
        differed += o.oracle.1;
        if first.is_none() {
            first = o.oracle.2.as_ref().map(|m| format!("{}: {m}", p.label));
        }
        sim += p.run.duration.as_secs_f64();
        run_wall += o.wall.as_secs_f64();
    }
    let failed: Vec<String> = done
        .iter()
        .filter_map(|(p, r)| r.as_ref().err().map(|e| format!("{}: {e}", p.label)))
        .collect();
    let _ = writeln!(s, "\n### Plumbing\n");
    let _ = writeln!(
        s,
        "{} runs ({} failed), {:.1} simulated hours in {:.0} s of wall time ({:.0} s of runs, {:.0}× real time per run); {} batches and {} samples applied to the stores; {} out of order, {} counter resets, {} implausible rates, {} refused; {} agent read errors; {} finding events lost.",
        done.len(),
        failed.len(),
        sim / 3600.0,
        wall.as_secs_f64(),
        run_wall,
        sim / run_wall.max(1e-9),
        shipped.batches,
        shipped.samples,
        shipped.out_of_order,
        shipped.resets,
        shipped.implausible,
        shipped.refused,
        errors,
        lagged
    );
    let _ = writeln!(
        s,
        "\nScoped (per-job) against whole-fleet evaluation, finding for finding after each evaluation: {compared} evaluations compared, {differed} differed{}.",
        first.map_or(String::new(), |f| format!(" (first: {f})"))
    );
    for f in failed {
        let _ = writeln!(s, "- failed: {f}");
    }
}

/// Every table.
pub fn render(done: &[Done], refused: &[(String, String)], wall: Duration) -> String {
    let mut s = String::new();
    let runs = fault_runs(done);
    if !runs.is_empty() {
        faults_table(&runs, &mut s);
        backgrounds_table(&runs, &mut s);
    }
    if done
        .iter()
        .any(|(p, _)| matches!(p.group, Group::Healthy { .. }))
    {
        healthy_table(done, &mut s);
    }
    bytes_table(done, &mut s);
    plumbing(done, wall, &mut s);
    if !refused.is_empty() {
        let _ = writeln!(s, "\nCombinations the simulator refuses (not run):");
        for (label, why) in refused {
            let _ = writeln!(s, "- {label}: {why}");
        }
    }
    s
}
