//! The fleet heatmap: one row per node and, for each link class of each group (fabric, management), a bounded
//! number of columns — whatever the links are called — coloured by utilisation (achieved bandwidth ÷
//! capacity): the median over the node's last [`STEPS`] steps where it has confident step figures, else the
//! live rate ÷ capacity. A node's links of a class (its adapter ports or interfaces; NVLink folded into one per
//! GPU) fill that class's columns in order, one link a cell, the cell naming its link (`data-link`, its
//! tooltip); a column is titled with the link's name where every node has the same one there, else with the
//! class and its place ("InfiniBand 3"). A node whose agent stream is closed, or that sent nothing for
//! [`STALE_AFTER_S`], is marked stale (its row faded, its name flagged).
//!
//! Bounded ([`layout`]): a class has at most [`MAX_SLOTS`] columns of its own links, fewer where the fleet's
//! rows would otherwise pass [`MAX_CELLS`] cells; a node's links beyond them fold into the class's last column
//! (`+ more`: the highest and lowest figure of the folded links, outlined if one of them is faulty, and a link
//! to the node's page, which lists each). Where even one folded column per class would pass [`MAX_CELLS`],
//! rows are left out — nodes with a faulty link kept first. What was folded or left out is said on the page
//! and counted (`commwatch_collector_page_omitted_total`). So a node reporting 20,000 links costs the page
//! one row of at most [`MAX_SLOTS`]` + 1` cells per class.
//!
//! An RDMA port's network interface (IPoIB, a RoCE netdev) has no cell of its own where its node has
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
/// Most columns of single links a link class has in a heatmap (a node's further links of the class fold into
/// one more column). A large node has 8 to 18 adapter ports, or 8 GPUs.
pub const MAX_SLOTS: usize = 18;
/// Most cells the fleet's heatmaps draw together: a cell is about 330 bytes of markup, so at most ~8 MB. A
/// fleet of 1,000 nodes of 8 adapter ports, 8 GPUs and a management NIC (17,000 cells) is drawn whole.
pub const MAX_CELLS: usize = 24_000;

/// Which heatmap a column belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    Fabric,
    Management,
}

/// A link class within a group: the heatmap's unit of columns, in display order (adapters and interfaces by
/// class name, then NVLink).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClassKey {
    pub group: Group,
    nvlink: bool,
    pub class: String,
}

/// One link's place on a node: its key and name, the order it takes among the node's links of its class.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkColumn {
    /// `device:port`, or `gpu<G>:nvlink`; the `data-link` of its cell.
    pub key: String,
    pub label: String,
    pub class: ClassKey,
    /// Order within the class: by key, NVLink by GPU number.
    sort: (u64, String),
}

/// Which of a class's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The node's `n`-th link of the class (from 0).
    Link(usize),
    /// The node's links of the class from the `n`-th on, folded into one cell.
    More(usize),
}

/// One column of a heatmap.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub class: ClassKey,
    pub slot: Slot,
    pub label: String,
}

impl Column {
    pub fn group(&self) -> Group {
        self.class.group
    }
}

/// One node's value for one link.
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

/// One node's row: its links of each class, in column order, each with its cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub node: String,
    pub stale: bool,
    pub classes: BTreeMap<ClassKey, Vec<(LinkColumn, Cell)>>,
}

impl Row {
    /// The cell of the link `key` (`device:port`, `gpu<G>:nvlink`), whatever its column.
    pub fn cell(&self, key: &str) -> Option<&Cell> {
        self.classes
            .values()
            .flatten()
            .find(|(c, _)| c.key == key)
            .map(|(_, cell)| cell)
    }

    fn faulty(&self) -> bool {
        self.classes.values().flatten().any(|(_, c)| c.faulty)
    }
}

/// The column of a link from its class, role, device, port and (NVLink) GPU.
pub fn column(class: &str, role: &str, device: &str, port: &str, gpu: Option<&str>) -> LinkColumn {
    let group = if role == "management" {
        Group::Management
    } else {
        Group::Fabric
    };
    let class_key = |nvlink| ClassKey {
        group,
        nvlink,
        class: class.to_string(),
    };
    if class == "nvlink" {
        let g = gpu.unwrap_or("");
        return LinkColumn {
            key: format!("gpu{g}:nvlink"),
            label: format!("GPU {g} NVLink"),
            class: class_key(true),
            sort: (g.parse().unwrap_or(u64::MAX), g.to_string()),
        };
    }
    let label = if device == port {
        device.to_string()
    } else {
        format!("{device} {port}")
    };
    LinkColumn {
        key: format!("{device}:{port}"),
        label,
        class: class_key(false),
        sort: (0, format!("{device}:{port}")),
    }
}

fn view_column(l: &LinkView) -> LinkColumn {
    column(&l.class, &l.role, &l.device, &l.port, l.gpu.as_deref())
}

fn step_column(l: &StepLink) -> LinkColumn {
    column(
        l.link.key.class.as_str(),
        l.link.role.as_str(),
        &l.link.key.device,
        &l.link.key.port,
        l.link.gpu.as_deref(),
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
pub fn row(node: &NodeView, steps: &[NodeStep], now_unix_s: f64) -> Row {
    let mut from_steps: HashMap<String, Vec<f64>> = HashMap::new();
    for s in steps.iter().rev().take(STEPS) {
        for l in s.links.iter().filter(|l| l.confident) {
            if let Some(u) = l.utilization.filter(|u| u.is_finite()) {
                from_steps.entry(step_column(l).key).or_default().push(u);
            }
        }
    }
    let mut columns: BTreeMap<String, LinkColumn> = BTreeMap::new();
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
    let mut classes: BTreeMap<ClassKey, Vec<(LinkColumn, Cell)>> = BTreeMap::new();
    for (key, (mut now, links, state)) in live_values {
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
        if let Some(c) = columns.remove(&key) {
            classes.entry(c.class.clone()).or_default().push((c, cell));
        }
    }
    for links in classes.values_mut() {
        links.sort_by(|a, b| a.0.sort.cmp(&b.0.sort));
    }
    let stale = !node.connected || now_unix_s - node.last_seen_unix_s > STALE_AFTER_S;
    Row {
        node: node.name.clone(),
        stale,
        classes,
    }
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
            for (c, cell) in row.classes.values_mut().flatten() {
                if c.key == key {
                    cell.faulty = true;
                }
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

/// The heatmaps' columns and rows within [`MAX_CELLS`], and what had to give way.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub columns: Vec<Column>,
    /// The rows drawn, in their order (indices into the rows laid out).
    pub rows: Vec<usize>,
    /// Single links drawn only inside a `+ more` cell, over every row drawn.
    pub folded_links: usize,
}

impl Layout {
    /// Rows laid out but not drawn.
    pub fn rows_left_out(&self, rows: usize) -> usize {
        rows - self.rows.len()
    }
}

/// Lays out `rows` within `max_cells`: the most single-link columns per class (up to [`MAX_SLOTS`]) that fit
/// every row; if even one folded column per class does not, the rows that fit, those with a faulty link first.
pub fn layout(rows: &[Row], max_cells: usize) -> Layout {
    // The most links any row has of each class.
    let mut widest: BTreeMap<&ClassKey, usize> = BTreeMap::new();
    for (k, links) in rows.iter().flat_map(|r| &r.classes) {
        let w = widest.entry(k).or_default();
        *w = (*w).max(links.len());
    }
    let width = |slots: usize| -> usize {
        widest
            .values()
            .map(|&n| if n <= slots { n } else { slots + 1 })
            .sum()
    };
    let slots = (0..=MAX_SLOTS)
        .rev()
        .find(|&k| rows.len() * width(k) <= max_cells)
        .unwrap_or(0);
    let fit = max_cells / width(slots).max(1);
    let mut order: Vec<usize> = (0..rows.len()).collect();
    if fit < rows.len() {
        order.sort_by_key(|&i| (!rows[i].faulty(), i));
        order.truncate(fit);
        order.sort_unstable();
    }
    let mut columns = Vec::new();
    for (&class, &n) in &widest {
        let singles = n.min(slots);
        for i in 0..singles {
            columns.push(Column {
                class: class.clone(),
                slot: Slot::Link(i),
                label: slot_label(rows, class, i),
            });
        }
        if n > singles {
            columns.push(Column {
                class: class.clone(),
                slot: Slot::More(singles),
                label: format!("+ more {}", class_name(class)),
            });
        }
    }
    let folded_links = order
        .iter()
        .flat_map(|&i| &rows[i].classes)
        .map(|(_, links)| links.len().saturating_sub(slots))
        .sum();
    Layout {
        columns,
        rows: order,
        folded_links,
    }
}

/// A class as the page names it.
fn class_name(c: &ClassKey) -> &str {
    match c.class.as_str() {
        "infiniband" => "InfiniBand",
        "roce" => "RoCE",
        "ethernet" => "Ethernet",
        "nvlink" => "NVLink",
        other => other,
    }
}

/// The title of a class's `i`-th single-link column: the link's name where every row that has one there has
/// the same, else the class and its place.
fn slot_label(rows: &[Row], class: &ClassKey, i: usize) -> String {
    let mut names = rows
        .iter()
        .filter_map(|r| r.classes.get(class).and_then(|l| l.get(i)))
        .map(|(c, _)| c.label.as_str());
    let first = names.next().unwrap_or("");
    if names.all(|n| n == first) {
        first.to_string()
    } else {
        format!("{} {}", class_name(class), i + 1)
    }
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

/// The SVG heatmap of the rows of `layout` (indices into `rows`) × its columns of `group`; `None` when the
/// group has no column.
pub fn render(rows: &[Row], layout: &Layout, group: Group, title: &str) -> Option<String> {
    let cols: Vec<&Column> = layout
        .columns
        .iter()
        .filter(|c| c.group() == group)
        .collect();
    if cols.is_empty() {
        return None;
    }
    // The rotated column labels lean right of their column: room for the last one's.
    let (w, h) = (
        LABEL_W + cols.len() * CELL_W + 64,
        HEAD_H + layout.rows.len() * CELL_H + 4,
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
    for (r, &i) in layout.rows.iter().enumerate() {
        render_row(&mut s, r, &rows[i], &cols);
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
        let at = (LABEL_W + i * CELL_W, y, opacity);
        let links = row.classes.get(&c.class).map(Vec::as_slice).unwrap_or(&[]);
        match c.slot {
            Slot::Link(n) => match links.get(n) {
                Some((link, cell)) => link_cell(s, at, &row.node, link, cell),
                None => absent_cell(s, at, &row.node, &c.label),
            },
            Slot::More(from) if links.len() > from => {
                more_cell(s, at, &row.node, class_name(&c.class), &links[from..])
            }
            Slot::More(_) => absent_cell(s, at, &row.node, &c.label),
        }
    }
}

/// Where a cell goes: its left edge, its top, and the opacity attribute of its row.
type At<'a> = (usize, usize, &'a str);

fn absent_cell(s: &mut String, (x, y, _): At, node: &str, label: &str) {
    let _ = write!(
        s,
        "<rect class=\"cell absent\" data-node=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" \
         fill=\"none\"><title>{} has no {}</title></rect>",
        Esc(node),
        x + 1,
        y + 1,
        CELL_W - 2,
        CELL_H - 2,
        Esc(node),
        Esc(label)
    );
}

fn link_cell(s: &mut String, (x, y, opacity): At, node: &str, link: &LinkColumn, cell: &Cell) {
    let u = cell.utilization;
    let folded = if cell.links > 1 {
        format!(", {} links", cell.links)
    } else {
        String::new()
    };
    let (what, mark) = if cell.source == "steps" {
        ("burst, median of the last steps", "")
    } else {
        ("live rate, no confident step figure", "~")
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
        Esc(node),
        Esc(&link.key),
        cell.source,
        x + 1,
        y + 1,
        CELL_W - 2,
        CELL_H - 2,
        colour(u),
        Esc(node),
        Esc(&link.label),
        units::utilization(u),
        folded,
        Esc(&cell.state),
        if cell.faulty { " — the subject of an active finding" } else { "" }
    );
    let ink = ink(u);
    let _ = write!(
        s,
        "<text class=\"pct {}\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{ink}\"{opacity}>{mark}{}</text>",
        cell.source,
        x + CELL_W / 2,
        y + CELL_H / 2 + 4,
        units::utilization(u)
    );
}

/// The cell of a node's links folded into its class's last column: coloured by the highest figure, outlined
/// if one is faulty, a link to the node's page (which lists each).
fn more_cell(
    s: &mut String,
    (x, y, opacity): At,
    node: &str,
    class: &str,
    links: &[(LinkColumn, Cell)],
) {
    let figures = || links.iter().filter_map(|(_, c)| c.utilization);
    let high = figures().reduce(f64::max);
    let low = figures().reduce(f64::min);
    let faulty = links.iter().filter(|(_, c)| c.faulty).count();
    let not_active = links.iter().filter(|(_, c)| c.state != "active").count();
    let stroke = if faulty > 0 {
        " faulty\" stroke=\"#b3261e\" stroke-width=\"3"
    } else {
        ""
    };
    let _ = write!(
        s,
        "<a href=\"/node/{}#links\"><rect class=\"cell more{stroke}\" data-node=\"{}\" data-folded=\"{}\" \
         x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"{opacity}><title>{} · {} more {class} \
         link(s), not drawn one by one: highest {}, lowest {}; {} not active, {} the subject of an active \
         finding. The node's page lists each.</title></rect>",
        url_component(node),
        Esc(node),
        links.len(),
        x + 1,
        y + 1,
        CELL_W - 2,
        CELL_H - 2,
        colour(high),
        Esc(node),
        links.len(),
        units::utilization(high),
        units::utilization(low),
        not_active,
        faulty,
    );
    let _ = write!(
        s,
        "<text class=\"pct more\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{}\"{opacity}>+{}</text></a>",
        x + CELL_W / 2,
        y + CELL_H / 2 + 4,
        ink(high),
        compact(links.len())
    );
}

/// The text colour readable on [`colour`]`(u)`.
fn ink(u: Option<f64>) -> &'static str {
    if u.is_some_and(|u| u > 0.5) {
        "#fff"
    } else {
        "#222"
    }
}

/// A count in at most four characters: `999`, `20k`, `3M`.
fn compact(n: usize) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{}k", n / 1_000),
        _ => format!("{}M", n / 1_000_000),
    }
}
