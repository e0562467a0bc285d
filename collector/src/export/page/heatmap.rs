//! The fleet heatmap: one row per node, one column per fabric link (an adapter port or interface; NVLink
//! folded into one column per GPU), coloured by utilisation (achieved bandwidth ÷ capacity) — the median over
//! the node's last [`STEPS`] steps where it has confident step figures, else the live rate ÷ capacity. The
//! management links are a heatmap of their own beside it. A node whose agent stream is closed, or that sent
//! nothing for [`STALE_AFTER_S`], is marked stale (its row faded, its name flagged).
//!
//! An RDMA port's network interface (IPoIB, a RoCE netdev) has no column of its own where its node has
//! adapter ports of its class: its bytes are the port's ([`duplicates_a_port`]).
//!
//! Each cell says which it shows: a burst figure (`steps`, its percentage upright) or the live rate (`live`,
//! italic and prefixed `~`: a link whose bursts are shorter than the sampling period has no confident step
//! figure, and its live rate averages the bursts with the gaps between them, so it reads far below the burst).
//! No cell shows more than 100 % ([`units::utilization`]). A cell whose link is the subject of an active
//! critical finding or root cause is outlined ([`mark_faulty`]).
//!
//! Pure: rows are built from the API's node views and the steps' store types, rendered as inline SVG (no
//! script, no style attribute: colours are presentation attributes, allowed by the page's CSP).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use commwatch_model::stats::median;

use super::escape::{url_component, Esc};
use super::units;
use crate::export::nodes::{LinkView, NodeView};
use crate::steps::{NodeStep, StepLink};

/// Steps of each node the colours are taken over.
pub const STEPS: usize = 5;
/// Seconds without a message after which a node is marked stale.
pub const STALE_AFTER_S: f64 = 15.0;

/// Which heatmap a column belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    Fabric,
    Management,
}

/// One column: a link (or one GPU's NVLink links), the same key on every node.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// `device:port`, or `gpu<G>:nvlink`; the `data-link` of the cells.
    pub key: String,
    pub label: String,
    pub group: Group,
    /// Order: adapters and interfaces by key, then NVLink by GPU number.
    sort: (u8, u64, String),
}

/// One node's value in one column.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub utilization: Option<f64>,
    /// `steps` (median over the last steps) or `live` (the current rate).
    pub source: &'static str,
    /// Links folded into the cell (the GPU's NVLink links; 1 otherwise).
    pub links: usize,
    pub state: String,
    /// The link is the subject of an active critical finding or root cause ([`mark_faulty`]).
    pub faulty: bool,
}

/// One node's row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub node: String,
    pub stale: bool,
    pub cells: HashMap<String, Cell>,
}

/// The column of a link from its class, role, device, port and (NVLink) GPU.
pub fn column(class: &str, role: &str, device: &str, port: &str, gpu: Option<&str>) -> Column {
    let group = if role == "management" {
        Group::Management
    } else {
        Group::Fabric
    };
    if class == "nvlink" {
        let g = gpu.unwrap_or("");
        return Column {
            key: format!("gpu{g}:nvlink"),
            label: format!("GPU {g} NVLink"),
            group,
            sort: (1, g.parse().unwrap_or(u64::MAX), g.to_string()),
        };
    }
    let label = if device == port {
        device.to_string()
    } else {
        format!("{device} {port}")
    };
    Column {
        key: format!("{device}:{port}"),
        label,
        group,
        sort: (0, 0, format!("{device}:{port}")),
    }
}

fn view_column(l: &LinkView) -> Column {
    column(&l.class, &l.role, &l.device, &l.port, l.gpu.as_deref())
}

fn step_column(l: &StepLink) -> Column {
    column(
        l.key.class.as_str(),
        l.role.as_str(),
        &l.key.device,
        &l.key.port,
        l.gpu.as_deref(),
    )
}

/// The live utilisation of a link: the busier direction ÷ capacity.
pub fn live(l: &LinkView) -> Option<f64> {
    let cap = l.capacity_bytes_per_second.filter(|c| *c > 0.0)?;
    let busier = match (l.tx_bytes_per_second, l.rx_bytes_per_second) {
        (Some(t), Some(r)) => t.max(r),
        (Some(v), None) | (None, Some(v)) => v,
        (None, None) => return None,
    };
    Some(busier / cap)
}

/// A node's row from its view and its last steps (oldest first), `now_unix_s` deciding staleness.
pub fn row(node: &NodeView, steps: &[NodeStep], now_unix_s: f64) -> (Row, Vec<Column>) {
    let mut from_steps: HashMap<String, Vec<f64>> = HashMap::new();
    for s in steps.iter().rev().take(STEPS) {
        for l in s.links.iter().filter(|l| l.confident) {
            if let Some(u) = l.utilization.filter(|u| u.is_finite()) {
                from_steps.entry(step_column(l).key).or_default().push(u);
            }
        }
    }
    let mut columns: BTreeMap<String, Column> = BTreeMap::new();
    let mut live_values: HashMap<String, (Vec<f64>, usize, String)> = HashMap::new();
    for l in node.links.iter().filter(|l| !duplicates_a_port(node, l)) {
        let c = view_column(l);
        let e = live_values.entry(c.key.clone()).or_default();
        e.0.extend(live(l));
        e.1 += 1;
        if e.2.is_empty() || l.state != "active" {
            e.2 = l.state.clone();
        }
        columns.entry(c.key.clone()).or_insert(c);
    }
    let cells = live_values
        .into_iter()
        .map(|(key, (mut now, links, state))| {
            let (utilization, source) = match from_steps.get_mut(&key) {
                Some(v) if !v.is_empty() => (median(v), "steps"),
                _ => (median(&mut now), "live"),
            };
            let cell = Cell {
                utilization,
                source,
                links,
                state,
                faulty: false,
            };
            (key, cell)
        })
        .collect();
    let stale = !node.connected || now_unix_s - node.last_seen_unix_s > STALE_AFTER_S;
    let row = Row {
        node: node.name.clone(),
        stale,
        cells,
    };
    (row, columns.into_values().collect())
}

/// Marks the cells whose link is the subject of one of `findings` that is active and a root cause or critical
/// (its node, and its interface or device and port).
pub fn mark_faulty(rows: &mut [Row], findings: &[crate::analysis::Finding]) {
    for f in findings
        .iter()
        .filter(|f| f.active && (f.root || f.severity == commwatch_model::Severity::Critical))
    {
        let sub = &f.subject;
        let key = match (&sub.interface, &sub.device, &sub.port) {
            (Some(i), _, _) => format!("{i}:{i}"),
            (None, Some(d), Some(p)) => format!("{d}:{p}"),
            _ => continue,
        };
        for row in rows.iter_mut().filter(|r| r.node == sub.node) {
            if let Some(cell) = row.cells.get_mut(&key) {
                cell.faulty = true;
            }
        }
    }
}

/// Whether `l` is an RDMA port's network interface (IPoIB, a RoCE netdev) on a node that has adapter ports of
/// its class: its bytes are its port's, so the port's column stands for it (a column of its own would read
/// 0 % or repeat the port).
pub fn duplicates_a_port(node: &NodeView, l: &LinkView) -> bool {
    l.endpoint == "interface"
        && matches!(l.class.as_str(), "infiniband" | "roce")
        && node
            .links
            .iter()
            .any(|p| p.endpoint == "hca_port" && p.class == l.class)
}

/// Every column of `columns` once, in display order.
pub fn union(columns: impl IntoIterator<Item = Column>) -> Vec<Column> {
    let mut by_key: BTreeMap<String, Column> = BTreeMap::new();
    for c in columns {
        by_key.entry(c.key.clone()).or_insert(c);
    }
    let mut v: Vec<Column> = by_key.into_values().collect();
    v.sort_by(|a, b| a.sort.cmp(&b.sort));
    v
}

/// The fill of a utilisation: pale blue at 0 to dark blue at 1 (clamped), grey when unknown.
pub fn colour(u: Option<f64>) -> String {
    let Some(u) = u.filter(|u| u.is_finite()) else {
        return "#d9d9d9".into();
    };
    let t = u.clamp(0.0, 1.0);
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(239.0, 8.0),
        mix(243.0, 48.0),
        mix(255.0, 107.0)
    )
}

const LABEL_W: usize = 150;
const HEAD_H: usize = 96;
const CELL_W: usize = 40;
const CELL_H: usize = 24;

/// A name cut to `n` characters for a label (the whole name is in the label's tooltip).
fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut c: String = s.chars().take(n - 1).collect();
        c.push('…');
        c
    }
}

/// The SVG heatmap of `rows` × the `columns` of `group`; `None` when the group has no column.
pub fn render(rows: &[Row], columns: &[Column], group: Group, title: &str) -> Option<String> {
    let cols: Vec<&Column> = columns.iter().filter(|c| c.group == group).collect();
    if cols.is_empty() {
        return None;
    }
    // The rotated column labels lean right of their column: room for the last one's.
    let (w, h) = (
        LABEL_W + cols.len() * CELL_W + 64,
        HEAD_H + rows.len() * CELL_H + 4,
    );
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"heatmap\" data-group=\"{}\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         role=\"img\" aria-label=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">",
        if group == Group::Fabric { "fabric" } else { "management" },
        Esc(title)
    );
    for (i, c) in cols.iter().enumerate() {
        let x = LABEL_W + i * CELL_W + CELL_W / 2;
        let _ = write!(
            s,
            "<text class=\"col\" transform=\"translate({x},{}) rotate(-55)\">{}<title>{}</title></text>",
            HEAD_H - 6,
            Esc(&short(&c.label, 14)),
            Esc(&c.label)
        );
    }
    for (r, row) in rows.iter().enumerate() {
        render_row(&mut s, r, row, &cols);
    }
    s.push_str("</svg>");
    Some(s)
}

fn render_row(s: &mut String, r: usize, row: &Row, cols: &[&Column]) {
    let y = HEAD_H + r * CELL_H;
    let name = if row.stale {
        format!("⚠ {} (stale)", short(&row.node, 12))
    } else {
        short(&row.node, 20)
    };
    let _ = write!(
        s,
        "<a href=\"/node/{}\"><text class=\"row{}\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}<title>{}</title></text></a>",
        url_component(&row.node),
        if row.stale { " stale" } else { "" },
        LABEL_W - 6,
        y + CELL_H / 2 + 4,
        Esc(&name),
        Esc(&row.node)
    );
    let opacity = if row.stale { " opacity=\"0.35\"" } else { "" };
    for (i, c) in cols.iter().enumerate() {
        let x = LABEL_W + i * CELL_W;
        let Some(cell) = row.cells.get(&c.key) else {
            let _ = write!(
                s,
                "<rect class=\"cell absent\" data-node=\"{}\" data-link=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" \
                 height=\"{}\" fill=\"none\"><title>{} has no {}</title></rect>",
                Esc(&row.node),
                Esc(&c.key),
                x + 1,
                y + 1,
                CELL_W - 2,
                CELL_H - 2,
                Esc(&row.node),
                Esc(&c.label)
            );
            continue;
        };
        let u = cell.utilization;
        let folded = if cell.links > 1 {
            format!(", {} links", cell.links)
        } else {
            String::new()
        };
        let (what, mark) = if cell.source == "steps" {
            ("burst: median of the last steps' achieved ÷ capacity", "")
        } else {
            ("live rate ÷ capacity: no confident step figure", "~")
        };
        let faulty = if cell.faulty {
            " faulty\" stroke=\"#b3261e\" stroke-width=\"3"
        } else {
            ""
        };
        let _ = write!(
            s,
            "<rect class=\"cell{faulty}\" data-node=\"{}\" data-link=\"{}\" data-source=\"{}\" x=\"{}\" y=\"{}\" \
             width=\"{}\" height=\"{}\" fill=\"{}\"{opacity}><title>{} · {}: {} ({what}{}, {}){}</title></rect>",
            Esc(&row.node),
            Esc(&c.key),
            cell.source,
            x + 1,
            y + 1,
            CELL_W - 2,
            CELL_H - 2,
            colour(u),
            Esc(&row.node),
            Esc(&c.label),
            units::utilization(u),
            folded,
            Esc(&cell.state),
            if cell.faulty { " — the subject of an active finding" } else { "" }
        );
        let ink = if u.is_some_and(|u| u > 0.5) {
            "#fff"
        } else {
            "#222"
        };
        let _ = write!(
            s,
            "<text class=\"pct {}\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{ink}\"{opacity}>{mark}{}</text>",
            cell.source,
            x + CELL_W / 2,
            y + CELL_H / 2 + 4,
            units::utilization(u)
        );
    }
}
