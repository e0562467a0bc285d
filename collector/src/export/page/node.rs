//! The node view (`/node/NAME`, `/?node=NAME`): its links with capacity, state, live rate and their figures
//! in the node's latest step (NVLink folded per GPU), its GPUs (every node-level series labelled with a
//! GPU), its jobs and NCCL conflicts, and the findings about it.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use super::escape::{url_component, Esc};
use super::{roots, units};
use crate::analysis::Finding;
use crate::export::nodes::{LinkView, NodeView};
use crate::steps::{NodeStep, StepLink};

/// A GPU's readings: `(metric, value)` sorted by metric.
pub type GpuReadings = BTreeMap<String, Vec<(String, f64)>>;

/// The latest figure of each link in `steps` (oldest first), by `(class, device, port)`.
fn latest(steps: &[NodeStep]) -> HashMap<(String, String, String), &StepLink> {
    let mut out = HashMap::new();
    for s in steps {
        for l in &s.links {
            let k = (
                l.link.key.class.as_str().to_string(),
                l.link.key.device.clone(),
                l.link.key.port.clone(),
            );
            out.insert(k, l);
        }
    }
    out
}

/// The node's section.
pub fn section(
    node: &NodeView,
    stale: bool,
    steps: &[NodeStep],
    gpus: &GpuReadings,
    findings: &[Finding],
) -> String {
    let mut s = format!(
        "<section id=\"node\" data-node=\"{}\"><h2>Node <code>{}</code>{}</h2>",
        Esc(&node.name),
        Esc(&node.name),
        if stale {
            " <span class=\"badge stale\">stale</span>"
        } else {
            ""
        }
    );
    let jobs: Vec<String> = node
        .jobs
        .iter()
        .map(|j| format!("<a href=\"/job/{}\">{}</a>", url_component(j), Esc(j)))
        .collect();
    let _ = write!(
        s,
        "<dl class=\"figures\"><dt>agent stream</dt><dd>{}</dd><dt>jobs</dt><dd>{}</dd><dt>steps</dt><dd>{}</dd></dl>",
        if node.connected { "open" } else { "closed" },
        if jobs.is_empty() { "none".into() } else { jobs.join(", ") },
        steps.len()
    );
    for b in &node.blind {
        let _ = write!(
            s,
            "<p class=\"warn blind\">The agent is blind to <strong>{}</strong> (<code>{}</code>): {}</p>",
            Esc(&b.what),
            Esc(&b.code),
            Esc(&b.reason)
        );
    }
    s.push_str(&links(node, steps));
    s.push_str(&gpu_table(gpus));
    for c in &node.nccl_conflicts {
        let _ = write!(
            s,
            "<p class=\"conflict\">Job <a href=\"/job/{}\">{}</a> sets <code>{}={}</code>: {}</p>",
            url_component(&c.job),
            Esc(&c.job),
            Esc(&c.setting),
            Esc(&c.value),
            Esc(&c.reason)
        );
    }
    s.push_str("<h3>Findings</h3>");
    if findings.is_empty() {
        s.push_str("<p class=\"ok\">No active finding about this node.</p>");
    }
    let by_id: HashMap<&str, &Finding> = findings.iter().map(|f| (f.id.as_str(), f)).collect();
    for f in findings.iter().take(roots::MAX_LISTED) {
        s.push_str(&roots::finding(f, &by_id, false));
    }
    s.push_str(&roots::left_out_note(roots::left_out(findings.len())));
    s.push_str("</section>");
    s
}

const LINK_HEAD: &str =
    "<thead><tr><th>class</th><th>device</th><th>port</th><th>role</th><th>state</th>\
    <th>capacity</th><th>tx now</th><th>rx now</th><th>use now</th><th>step tx</th><th>step rx</th>\
    <th>step achieved</th><th>step use</th></tr></thead>";

/// Most link rows the node view lists, over all its link tables: a node's agent may report any number of links
/// (bounded only by its series limit), and the page stays a few hundred kilobytes. The rest are counted and
/// said; `/api/v1/nodes` has them all.
pub const MAX_LINK_ROWS: usize = 512;

/// Links of `node` its view does not list ([`MAX_LINK_ROWS`]).
pub fn omitted_links(node: &NodeView) -> usize {
    node.links.len().saturating_sub(MAX_LINK_ROWS)
}

/// Rows still to list, and the links left out once none are.
struct Budget<'a> {
    left: usize,
    omitted: usize,
    last: HashMap<(String, String, String), &'a StepLink>,
}

impl Budget<'_> {
    /// Appends `l`'s row to `s`, or counts it left out.
    fn row(&mut self, s: &mut String, l: &LinkView) {
        if self.left == 0 {
            self.omitted += 1;
        } else {
            self.left -= 1;
            s.push_str(&link_row(l, &self.last));
        }
    }
}

fn links(node: &NodeView, steps: &[NodeStep]) -> String {
    let mut budget = Budget {
        left: MAX_LINK_ROWS,
        omitted: 0,
        last: latest(steps),
    };
    let mut s = format!(
        "<h3 id=\"links\">Links ({})</h3><table class=\"links\">{LINK_HEAD}<tbody>",
        node.links.len()
    );
    let mut nvlink: BTreeMap<String, Vec<&LinkView>> = BTreeMap::new();
    // IPoIB and RoCE interfaces carry their ports' bytes: listed apart, not as links of their own.
    let mut port_interfaces: Vec<&LinkView> = Vec::new();
    for l in &node.links {
        if super::heatmap::duplicates_a_port(node, l) {
            port_interfaces.push(l);
        } else if l.class == "nvlink" {
            nvlink
                .entry(l.gpu.clone().unwrap_or_default())
                .or_default()
                .push(l);
        } else {
            budget.row(&mut s, l);
        }
    }
    s.push_str("</tbody></table>");
    for (gpu, ls) in nvlink {
        if budget.left == 0 {
            budget.omitted += ls.len();
            continue;
        }
        let _ = write!(
            s,
            "<details class=\"nvlink\" id=\"nvlink-{}\"><summary>GPU {} NVLink: {} link(s)</summary>\
             <table class=\"links\">{LINK_HEAD}<tbody>",
            url_component(&gpu),
            Esc(&gpu),
            ls.len()
        );
        for l in ls {
            budget.row(&mut s, l);
        }
        s.push_str("</tbody></table></details>");
    }
    if !port_interfaces.is_empty() && budget.left == 0 {
        budget.omitted += port_interfaces.len();
    } else if !port_interfaces.is_empty() {
        let _ = write!(
            s,
            "<details class=\"port-interfaces\"><summary>{} IPoIB/RoCE interface(s): the network interfaces of \
             the ports above, carrying the same bytes (their state is the interface's, e.g. <code>up</code>, \
             where the port says <code>ACTIVE</code>)</summary><table class=\"links\">{LINK_HEAD}<tbody>",
            port_interfaces.len()
        );
        for l in port_interfaces {
            budget.row(&mut s, l);
        }
        s.push_str("</tbody></table></details>");
    }
    if budget.omitted > 0 {
        let _ = write!(
            s,
            "<p class=\"note warn\" id=\"links-left-out\">{} link(s) not listed: this page lists at most \
             {MAX_LINK_ROWS}. <code>/api/v1/nodes</code> has every link.</p>",
            budget.omitted
        );
    }
    if s.contains(&format!("{}</td>", units::CAPPED_MARK)) {
        let _ = write!(s, "<p class=\"note\">{}</p>", Esc(units::CAPPED_NOTE));
    }
    s
}

fn link_row(l: &LinkView, last: &HashMap<(String, String, String), &StepLink>) -> String {
    let step = last.get(&(l.class.clone(), l.device.clone(), l.port.clone()));
    let now = super::heatmap::live(l);
    format!(
        "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
         <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        Esc(&l.role),
        Esc(&l.class),
        Esc(&l.device),
        Esc(&l.port),
        Esc(&l.role),
        Esc(&l.state),
        units::rate(l.capacity_bytes_per_second),
        units::rate(l.tx_bytes_per_second),
        units::rate(l.rx_bytes_per_second),
        units::utilization(now),
        units::bytes(step.map(|s| s.tx_bytes as f64)),
        units::bytes(step.map(|s| s.rx_bytes as f64)),
        units::rate_within(
            step.and_then(|s| s.achieved_bytes_per_second),
            l.capacity_bytes_per_second
        ),
        units::utilization(step.and_then(|s| s.utilization)),
    )
}

fn gpu_table(gpus: &GpuReadings) -> String {
    if gpus.is_empty() {
        return "<h3>GPUs</h3><p>No GPU readings.</p>".into();
    }
    let mut s = format!(
        "<h3>GPUs ({})</h3><table class=\"gpus\"><tbody>",
        gpus.len()
    );
    for (gpu, readings) in gpus {
        let v: Vec<String> = readings
            .iter()
            .map(|(m, x)| {
                let name = m.strip_prefix("gpu_").unwrap_or(m).replace('_', " ");
                format!("{} <b>{}</b>", Esc(&name), Esc(&units::by_name(m, *x)))
            })
            .collect();
        let _ = write!(
            s,
            "<tr><th>GPU {}</th><td>{}</td></tr>",
            Esc(gpu),
            v.join(" · ")
        );
    }
    s.push_str("</tbody></table>");
    s
}
