//! The job view (`/job/ID`, `/?job=ID`): its figures (step time, throughput, scaling efficiency and the
//! method behind it), then its findings — root causes first, each with what it explains folded beneath it,
//! the `link_underutilized` findings folded into one summary — then charts over its last steps (step time;
//! achieved bandwidth per link class, the median across nodes; bytes sent per step per link class), the
//! settings that contradict a node's hardware, and its ranks (the NCCL settings every rank shares said once).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use super::chart::{self, Axes, Series};
use super::escape::{url_component, Esc};
use super::{roots, units};
use crate::analysis::Finding;
use crate::export::jobs::JobView;
use crate::steps::{JobStep, NodeStep};
use commwatch_model::stats::median;
use commwatch_model::{Endpoint, LinkClass};

/// Steps the charts cover.
pub const CHART_STEPS: usize = 40;

/// The chart colour of a link class.
pub fn class_colour(c: LinkClass) -> &'static str {
    match c {
        LinkClass::Infiniband => "#1f77b4",
        LinkClass::Roce => "#ff7f0e",
        LinkClass::Ethernet => "#2ca02c",
        LinkClass::Nvlink => "#9467bd",
        _ => "#7f7f7f",
    }
}

/// Bytes a node sent per link class in one step. A class's adapter ports and GPU links count; its network
/// interfaces only where the node has no port of that class (an IPoIB or RoCE interface's bytes are its
/// port's too).
pub fn bytes_per_class(n: &NodeStep) -> BTreeMap<LinkClass, u64> {
    let mut ports: BTreeMap<LinkClass, u64> = BTreeMap::new();
    let mut interfaces: BTreeMap<LinkClass, u64> = BTreeMap::new();
    for l in &n.links {
        let into = if l.link.endpoint == Endpoint::Interface {
            &mut interfaces
        } else {
            &mut ports
        };
        *into.entry(l.link.key.class).or_default() += l.tx_bytes;
    }
    for (c, b) in interfaces {
        ports.entry(c).or_insert(b);
    }
    ports
}

/// One round of a job's steps: a marker step (every node's step of one index), or the inferred steps of the
/// job's nodes that end together (within half a median step of each other, one per node): inferred step
/// numbers are per node, so the rounds are found by time.
#[derive(Debug, Default)]
struct Round {
    end_s: f64,
    nodes: BTreeSet<String>,
    durations: Vec<f64>,
    achieved: BTreeMap<LinkClass, Vec<f64>>,
    sent: BTreeMap<LinkClass, u64>,
}

fn rounds(steps: &[JobStep]) -> Vec<Round> {
    let end = |s: &JobStep| s.nodes.iter().map(|n| n.end_unix_ns).max().unwrap_or(0) as f64 / 1e9;
    let mut sorted: Vec<&JobStep> = steps.iter().collect();
    sorted.sort_by(|a, b| end(a).total_cmp(&end(b)));
    let mut d: Vec<f64> = steps.iter().map(JobStep::duration_s).collect();
    let half = median(&mut d).unwrap_or(0.0) / 2.0;
    let mut out: Vec<Round> = Vec::new();
    for s in sorted {
        let e = end(s);
        let joins = out.last().is_some_and(|r| {
            (e - r.end_s).abs() <= half && s.nodes.iter().all(|n| !r.nodes.contains(&n.node))
        });
        if !joins {
            out.push(Round {
                end_s: e,
                ..Default::default()
            });
        }
        let Some(r) = out.last_mut() else { continue };
        r.nodes.extend(s.nodes.iter().map(|n| n.node.clone()));
        r.durations.push(s.duration_s());
        for c in &s.classes {
            // A median above the capacity is a sampling artefact: charted at the capacity.
            let over = c.utilization.as_ref().map_or(1.0, |u| u.median.max(1.0));
            r.achieved
                .entry(c.class)
                .or_default()
                .push(c.achieved_bytes_per_second.median / over);
        }
        for n in &s.nodes {
            for (c, b) in bytes_per_class(n) {
                *r.sent.entry(c).or_default() += b;
            }
        }
    }
    out
}

/// The three charts' series from `steps` (one point per [`Round`]); x is seconds relative to the newest
/// round's end.
pub fn series(steps: &[JobStep]) -> [Vec<Series>; 3] {
    // A round that misses some of the job's nodes shows a fraction of the bytes: the newest ones that do (their
    // steps still being found) are left out, and so is any with fewer than half the nodes.
    let mut rounds = rounds(steps);
    let most = rounds.iter().map(|r| r.nodes.len()).max().unwrap_or(0);
    rounds.retain(|r| r.nodes.len() * 2 >= most);
    while rounds.last().is_some_and(|r| r.nodes.len() < most) {
        rounds.pop();
    }
    let newest = rounds.last().map_or(0.0, |r| r.end_s);
    let mut time = Series {
        name: "step time (median over nodes)".into(),
        colour: "#333333",
        points: Vec::new(),
    };
    let mut achieved: BTreeMap<LinkClass, Vec<(f64, f64)>> = BTreeMap::new();
    let mut sent: BTreeMap<LinkClass, Vec<(f64, f64)>> = BTreeMap::new();
    for r in &mut rounds {
        let x = r.end_s - newest;
        if let Some(t) = median(&mut r.durations) {
            time.points.push((x, t));
        }
        for (c, v) in &mut r.achieved {
            if let Some(m) = median(v) {
                achieved.entry(*c).or_default().push((x, m));
            }
        }
        for (c, b) in &r.sent {
            sent.entry(*c).or_default().push((x, *b as f64));
        }
    }
    let lines = |m: BTreeMap<LinkClass, Vec<(f64, f64)>>| -> Vec<Series> {
        m.into_iter()
            .map(|(c, points)| Series {
                name: c.as_str().to_string(),
                colour: class_colour(c),
                points,
            })
            .collect()
    };
    [vec![time], lines(achieved), lines(sent)]
}

fn ago(x: f64) -> String {
    if x.abs() < 0.5 {
        "newest".into()
    } else {
        format!("{:.0} s ago", x.abs())
    }
}

/// The job's section; `source` says where its steps came from (`markers` or `inferred`).
pub fn section(job: &JobView, steps: &[JobStep], source: &str, findings: &[Finding]) -> String {
    let mut s = format!(
        "<section id=\"job\" data-job=\"{}\"><h2>Job <code>{}</code></h2>",
        Esc(&job.id),
        Esc(&job.id)
    );
    s.push_str(&figures(job, steps.len(), source));
    s.push_str(&findings_block(findings));
    let [time, achieved, sent] = series(steps);
    let axes = |title, y: fn(Option<f64>) -> String| Axes { title, y, x: ago };
    s.push_str("<div class=\"charts\" id=\"job-chart\">");
    s.push_str(&chart::render(&axes("Step time", units::seconds), &time));
    s.push_str(&chart::render(
        &axes(
            "Achieved bandwidth per link class (median over nodes)",
            units::rate,
        ),
        &achieved,
    ));
    s.push_str(&chart::render(
        &axes(
            "Bytes sent per step per link class (all nodes)",
            units::bytes,
        ),
        &sent,
    ));
    s.push_str("</div>");
    s.push_str(&conflicts(job));
    s.push_str(&ranks(job));
    s.push_str("</section>");
    s
}

/// The job's findings, first on its page: each root cause as a card with the findings it explains folded
/// beneath it; the other findings (their root cause outside this job, or none) as cards saying what causes
/// them; the `link_underutilized` ones not explained by a root cause here folded into one summary line with
/// the detail on demand (a fleet has many such links; each card would bury the cause).
pub fn findings_block(findings: &[Finding]) -> String {
    let mut s = String::from("<div id=\"job-findings\"><h3>Findings</h3>");
    if findings.is_empty() {
        s.push_str("<p class=\"ok\">No active finding about this job.</p></div>");
        return s;
    }
    let by_id: HashMap<&str, &Finding> = findings.iter().map(|f| (f.id.as_str(), f)).collect();
    let roots: Vec<&Finding> = findings.iter().filter(|f| f.root).collect();
    let explained = |f: &Finding| {
        f.caused_by
            .as_deref()
            .is_some_and(|c| roots.iter().any(|r| r.id == c))
    };
    for f in &roots {
        s.push_str(&roots::finding(f, &by_id, true));
    }
    let rest: Vec<&Finding> = findings
        .iter()
        .filter(|f| !f.root && !explained(f))
        .collect();
    let (under, others): (Vec<&Finding>, Vec<&Finding>) = rest
        .into_iter()
        .partition(|f| f.kind == crate::analysis::FindingKind::LinkUnderutilized);
    for f in others {
        s.push_str(&roots::finding(f, &by_id, false));
    }
    if !under.is_empty() {
        let nodes: BTreeSet<&str> = under.iter().map(|f| f.subject.node.as_str()).collect();
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let _ = write!(
            s,
            "<details class=\"underutilized\"><summary>{} <span class=\"kind\">link_underutilized</span> \
             finding{} on {} node{}: links that carry less than their capacity (the detail on demand)\
             </summary><ul>",
            under.len(),
            plural(under.len()),
            nodes.len(),
            plural(nodes.len())
        );
        for f in under {
            let _ = write!(
                s,
                "<li data-id=\"{}\">{} — {}</li>",
                Esc(&f.id),
                roots::subject(&f.subject),
                Esc(&f.summary)
            );
        }
        s.push_str("</ul></details>");
    }
    s.push_str("</div>");
    s
}

fn figures(job: &JobView, steps: usize, source: &str) -> String {
    let method = units::efficiency_method(job.scaling_efficiency_method.as_deref())
        .map_or(String::new(), |m| {
            format!(" <span class=\"method\">({})</span>", Esc(&m))
        });
    let nodes: Vec<String> = job
        .nodes
        .iter()
        .map(|n| format!("<a href=\"/node/{}\">{}</a>", url_component(n), Esc(n)))
        .collect();
    format!(
        "<dl class=\"figures\"><dt>step time</dt><dd>{}</dd><dt>throughput</dt><dd>{}</dd>\
         <dt>scaling efficiency</dt><dd>{}{method}</dd><dt>steps shown</dt><dd>{steps} ({})</dd>\
         <dt>nodes</dt><dd>{}</dd></dl>",
        units::seconds(job.step_time_s),
        job.throughput_samples_per_second
            .map_or("–".into(), |t| format!("{} samples/s", units::plain(t))),
        units::percent(job.scaling_efficiency),
        Esc(source),
        nodes.join(", ")
    )
}

/// The settings (name and value) every rank of `job` has, said once above the rank table.
fn shared_settings(job: &JobView) -> BTreeMap<&str, &str> {
    let Some((first, rest)) = job.ranks.split_first() else {
        return BTreeMap::new();
    };
    first
        .nccl
        .iter()
        .filter(|(k, v)| rest.iter().all(|r| r.nccl.get(*k) == Some(*v)))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

fn ranks(job: &JobView) -> String {
    let shared = shared_settings(job);
    let code = |k: &str, v: &str| format!("<code>{}={}</code>", Esc(k), Esc(v));
    let mut s = format!("<h3>Ranks ({})</h3>", job.ranks.len());
    if !shared.is_empty() && job.ranks.len() > 1 {
        let all: Vec<String> = shared.iter().map(|(k, v)| code(k, v)).collect();
        let _ = write!(s, "<p class=\"shared\">Every rank: {}</p>", all.join(" "));
    }
    s.push_str(
        "<table class=\"ranks\"><thead><tr><th>rank</th><th>node</th><th>local</th><th>world</th><th>GPU</th>\
         <th>pid</th><th>found by</th><th>other NCCL settings</th></tr></thead><tbody>",
    );
    let opt = |v: Option<u32>| v.map_or("–".to_string(), |v| v.to_string());
    for r in &job.ranks {
        let nccl: Vec<String> = r
            .nccl
            .iter()
            .filter(|(k, v)| job.ranks.len() < 2 || shared.get(k.as_str()) != Some(&v.as_str()))
            .map(|(k, v)| code(k, v))
            .collect();
        let _ = write!(
            s,
            "<tr><td>{}</td><td><a href=\"/node/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            opt(r.rank),
            url_component(&r.node),
            Esc(&r.node),
            opt(r.local_rank),
            opt(r.world_size),
            Esc(&r.gpu.join(", ")),
            r.pid,
            Esc(&r.found_by),
            nccl.join(" ")
        );
    }
    s.push_str("</tbody></table>");
    s
}

fn conflicts(job: &JobView) -> String {
    if job.conflicts.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "<h3>NCCL settings that contradict the hardware</h3><table class=\"conflicts\"><thead><tr><th>node</th>\
         <th>setting</th><th>kind</th><th>why</th></tr></thead><tbody>",
    );
    for c in &job.conflicts {
        let _ = write!(
            s,
            "<tr><td>{}</td><td><code>{}={}</code></td><td>{}</td><td>{}</td></tr>",
            Esc(&c.node),
            Esc(&c.setting),
            Esc(&c.value),
            Esc(&c.kind),
            Esc(&c.reason)
        );
    }
    s.push_str("</tbody></table>");
    s
}
