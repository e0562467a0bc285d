//! The live page at the collector's `/`: what commwatch concluded, visible at a glance.
//!
//! Routes (served by the collector's HTTP listener, so with its TLS; behind the API token, see [`login`]):
//! - `GET /`: root causes first ([`roots`]), then the fleet heatmap ([`heatmap`]), then the jobs;
//!   `/?job=ID` and `/?node=NAME` are the job and node views.
//! - `GET /job/{id}`: the job view ([`job`]); `GET /node/{name}`: the node view ([`node`]).
//! - Any of them with `partial=1` in the query: only the inside of `<main>`, what the page's script fetches
//!   every [`layout::REFRESH_MS`] to update the view in place. Without script the page is complete text.
//! - `GET|POST /login`, `GET /assets/page.js`, `GET /assets/page.css` (embedded; open).
//!
//! Rendered on the server as HTML with inline SVG; every value escaped ([`escape`]). The views read what the
//! JSON API reads (the node, job and finding views, the step store), never anything else.

pub mod chart;
pub mod escape;
pub mod heatmap;
pub mod job;
pub mod layout;
pub mod login;
pub mod node;
pub mod roots;
pub mod units;

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use commwatch_model::clock::unix_now_ns;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::access::ApiAccess;
use super::nodes::NodeView;
use crate::analysis::engine::FindingFilter;
use crate::analysis::AnalysisHandle;
use crate::steps::StepStore;
use crate::store::Store;
use crate::telemetry::PageMetrics;
use escape::{url_component, Esc};

/// Page renderings at once, each held from its start until its last byte is handed to the connection: a
/// rendering is at most a few megabytes ([`heatmap::MAX_CELLS`], [`node::MAX_LINK_ROWS`]), so however many
/// clients ask, or never read what they asked for, the page holds at most this many of them.
pub const PAGE_RENDERS: usize = 4;
/// How long a request waits for a rendering slot before it is answered `503` (counted in
/// `commwatch_collector_page_busy_total`). A client that stops reading frees its slot within the HTTP server's
/// write-stall timeout.
pub const PAGE_WAIT: Duration = Duration::from_secs(5);
/// Bytes handed to the connection at a time.
const CHUNK: usize = 64 << 10;

/// Everything the page reads.
#[derive(Clone)]
pub(crate) struct PageState {
    store: Arc<Store>,
    steps: Arc<StepStore>,
    analysis: AnalysisHandle,
    counts: PageMetrics,
    slots: Arc<Semaphore>,
}

/// Which view a request asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum View {
    Fleet,
    Job(String),
    Node(String),
}

/// The page's routes (merged into the collector's HTTP router); `access` guards the views.
pub fn router(
    store: Arc<Store>,
    steps: Arc<StepStore>,
    analysis: AnalysisHandle,
    access: Arc<ApiAccess>,
    counts: PageMetrics,
) -> Router {
    let state = PageState {
        store,
        steps,
        analysis,
        counts,
        slots: Arc::new(Semaphore::new(PAGE_RENDERS)),
    };
    let views = Router::new()
        .route("/", get(index))
        .route("/job/{id}", get(job_page))
        .route("/node/{name}", get(node_page))
        .route_layer(axum::middleware::from_fn_with_state(
            access.clone(),
            login::guard,
        ))
        .with_state(state);
    let open: Router = Router::new()
        .route("/login", get(login::form).post(login::submit))
        .with_state::<()>(access)
        .route("/assets/page.js", get(script))
        .route("/assets/page.css", get(style));
    views.merge(open)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    layout::with_headers(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

async fn script() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/page.js"),
    )
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", include_str!("assets/page.css"))
}

/// Whether the query asks for the fragment (`partial=1`).
fn partial(uri: &Uri) -> bool {
    Query::<Vec<(String, String)>>::try_from_uri(uri)
        .is_ok_and(|Query(p)| p.iter().any(|(k, v)| k == "partial" && v == "1"))
}

async fn index(State(s): State<PageState>, uri: Uri) -> Response {
    let pairs = match Query::<Vec<(String, String)>>::try_from_uri(&uri) {
        Ok(Query(p)) => p,
        Err(e) => {
            let page = layout::document("bad query", &format!("<p>{}</p>", Esc(&e.body_text())));
            return layout::with_headers(layout::html_response(StatusCode::BAD_REQUEST, page));
        }
    };
    let pick = |key: &str| {
        pairs
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.clone())
    };
    let view = match (pick("job"), pick("node")) {
        (Some(j), _) => View::Job(j),
        (None, Some(n)) => View::Node(n),
        (None, None) => View::Fleet,
    };
    respond(s, view, partial(&uri)).await
}

async fn job_page(State(s): State<PageState>, Path(id): Path<String>, uri: Uri) -> Response {
    respond(s, View::Job(id), partial(&uri)).await
}

async fn node_page(State(s): State<PageState>, Path(name): Path<String>, uri: Uri) -> Response {
    respond(s, View::Node(name), partial(&uri)).await
}

/// Renders `view` off the async workers (it reads every node's lock in turn): the document, or only its
/// `<main>` for `partial`. Within one of [`PAGE_RENDERS`] slots, held until the body is sent; `503` after
/// [`PAGE_WAIT`] without one.
async fn respond(s: PageState, view: View, partial: bool) -> Response {
    let Ok(Ok(slot)) = tokio::time::timeout(PAGE_WAIT, s.slots.clone().acquire_owned()).await
    else {
        s.counts.busy.inc();
        let page = layout::document(
            "busy",
            "<p>The page is being rendered for other clients; try again in a few seconds.</p>",
        );
        let mut r = layout::html_response(StatusCode::SERVICE_UNAVAILABLE, page);
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
        return layout::with_headers(r);
    };
    let rendered = tokio::task::spawn_blocking(move || render(&s, &view)).await;
    let (status, title, main) = match rendered {
        Ok(r) => r,
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "error".to_string(),
            format!("<p>rendering failed: {}</p>", Esc(&e.to_string())),
        ),
    };
    let body = if partial {
        main
    } else {
        layout::document(&title, &main)
    };
    let mut r = layout::html_response(status, String::new());
    *r.body_mut() = held(body, slot);
    layout::with_headers(r)
}

/// `body` as a stream of [`CHUNK`]s that keeps `slot` until its last chunk is taken (or the response is
/// dropped: the client went away).
fn held(body: String, slot: OwnedSemaphorePermit) -> Body {
    let chunks = futures::stream::unfold(
        (Bytes::from(body), Some(slot)),
        |(mut rest, slot)| async move {
            if rest.is_empty() {
                drop(slot);
                return None;
            }
            let chunk = rest.split_to(rest.len().min(CHUNK));
            Some((Ok::<_, Infallible>(chunk), (rest, slot)))
        },
    );
    Body::from_stream(chunks)
}

/// The status, title and `<main>` content of a view.
pub(crate) fn render(s: &PageState, view: &View) -> (StatusCode, String, String) {
    match view {
        View::Fleet => (StatusCode::OK, "fleet".into(), fleet(s)),
        View::Job(id) => match job_main(s, id) {
            Some(m) => (StatusCode::OK, format!("job {id}"), m),
            None => not_found(&format!("No job {id:?} runs on a node seen recently.")),
        },
        View::Node(name) => match node_main(s, name) {
            Some(m) => (StatusCode::OK, format!("node {name}"), m),
            None => not_found(&format!("No node {name:?} was seen recently.")),
        },
    }
}

fn not_found(message: &str) -> (StatusCode, String, String) {
    (
        StatusCode::NOT_FOUND,
        "not found".into(),
        format!(
            "<section id=\"missing\"><h2>Not found</h2><p>{}</p><p><a href=\"/\">The fleet</a></p></section>",
            Esc(message)
        ),
    )
}

fn active(filter: FindingFilter) -> FindingFilter {
    FindingFilter {
        active: Some(true),
        ..filter
    }
}

/// The fleet view: root causes, the heatmaps, the jobs.
fn fleet(s: &PageState) -> String {
    let findings = s.analysis.findings(&active(FindingFilter::default()));
    let now_ns = unix_now_ns();
    let nodes: Vec<NodeView> = s
        .store
        .snapshot(now_ns)
        .iter()
        .map(NodeView::from)
        .collect();
    let blind = nodes.iter().filter(|n| !n.blind.is_empty()).count();
    let roots_listed = findings.iter().filter(|f| f.active && f.root).count();
    s.counts.omitted("findings", roots::left_out(roots_listed));
    let mut out = roots::section(&findings, blind);
    out.push_str(&blind_section(&nodes));
    out.push_str(&fleet_section(
        nodes,
        &s.steps,
        &findings,
        &s.counts,
        now_ns as f64 / 1e9,
    ));
    out.push_str(&jobs_table(s));
    out
}

/// The fleet's heatmaps of `nodes` at `now` (unix seconds), the links of `findings` outlined, within
/// [`heatmap::MAX_CELLS`] (what was folded or left out said and counted in `counts`).
pub(crate) fn fleet_section(
    nodes: Vec<NodeView>,
    steps: &StepStore,
    findings: &[crate::analysis::Finding],
    counts: &PageMetrics,
    now: f64,
) -> String {
    let mut out = String::new();
    let mut rows: Vec<heatmap::Row> = nodes
        .iter()
        .map(|n| {
            let last = steps
                .node_steps(&n.name, heatmap::STEPS)
                .unwrap_or_default();
            heatmap::row(n, &last, now)
        })
        .collect();
    drop(nodes);
    heatmap::mark_faulty(&mut rows, findings);
    let layout = heatmap::layout(&rows, heatmap::MAX_CELLS);
    let stale = rows.iter().filter(|r| r.stale).count();
    let _ = write!(
        out,
        "<section id=\"fleet\"><h2>Fleet</h2><p>{} node(s), {stale} stale. Utilisation of each link: upright, \
         the <b>burst</b> figure (achieved ÷ capacity while the link carried traffic, the median over the node's \
         last {} steps); italic with <i>~</i>, the <i>live rate</i> ÷ capacity where no step gives a confident \
         figure (bursts shorter than the sampling period), which averages bursts with the gaps between them and \
         reads far below them. Never above 100 %: a figure above the capacity is a sampling artefact, shown as \
         100%*. Outlined in red: the link of an active critical finding or root cause. NVLink folded per GPU; IPoIB \
         and RoCE interfaces folded into their ports (the same bytes). A node's links of a class fill that \
         class's columns in order. Hover a cell for its figures; a node's name opens it.</p>",
        rows.len(),
        heatmap::STEPS
    );
    out.push_str(&left_out_note(counts, &layout, rows.len()));
    out.push_str("<div class=\"heatmaps\">");
    for (group, title) in [
        (heatmap::Group::Fabric, "Fabric links"),
        (heatmap::Group::Management, "Management links"),
    ] {
        if let Some(svg) = heatmap::render(&rows, &layout, group, title) {
            let _ = write!(out, "<div class=\"scroll\"><h3>{title}</h3>{svg}</div>");
        }
    }
    out.push_str("</div>");
    if rows.is_empty() {
        out.push_str("<p>No node has reported yet.</p>");
    }
    out.push_str("</section>");
    out
}

/// What the heatmaps folded or left out to stay within [`heatmap::MAX_CELLS`], said on the page and counted
/// (`commwatch_collector_page_omitted_total`); nothing when everything is drawn.
fn left_out_note(counts: &PageMetrics, layout: &heatmap::Layout, rows: usize) -> String {
    let left_out = layout.rows_left_out(rows);
    if layout.folded_links == 0 && left_out == 0 {
        return String::new();
    }
    counts.omitted("cells", layout.folded_links);
    counts.omitted("rows", left_out);
    let mut note = format!(
        "<p class=\"note warn\" id=\"left-out\">To keep this page within {} cells: ",
        heatmap::MAX_CELLS
    );
    if layout.folded_links > 0 {
        let _ = write!(
            note,
            "{} link(s) are folded into their class's <b>+ more</b> column (its highest and lowest figure; the \
             node's page lists each)",
            layout.folded_links
        );
    }
    if left_out > 0 {
        let _ = write!(
            note,
            "{}{left_out} node(s) are not drawn (nodes with a faulty link are drawn first; \
             <code>/api/v1/nodes</code> has every node)",
            if layout.folded_links > 0 { "; " } else { "" }
        );
    }
    note.push_str(".</p>");
    note
}

/// The nodes whose agent cannot see its GPUs or its fabric, each with why; nothing when every agent sees what
/// it should. Findings cannot be raised about what an agent does not see, so the root causes above say
/// nothing of these nodes.
pub fn blind_section(nodes: &[NodeView]) -> String {
    let blind: Vec<&NodeView> = nodes.iter().filter(|n| !n.blind.is_empty()).collect();
    if blind.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "<section id=\"blind\"><h2>Blind agents</h2><p class=\"warn\">{} node(s) whose agent cannot see \
         its GPUs or its fabric: nothing is concluded about what they do not see.</p><ul>",
        blind.len()
    );
    let entries = blind
        .iter()
        .flat_map(|n| n.blind.iter().map(move |b| (n, b)));
    let total = blind.iter().map(|n| n.blind.len()).sum::<usize>();
    for (n, b) in entries.take(roots::MAX_LISTED) {
        let _ = write!(
            out,
            "<li data-node=\"{node}\" data-what=\"{what}\"><a class=\"node\" href=\"/node/{href}\">{node}</a> \
             blind to <strong>{what}</strong> <code>{code}</code>: {reason}</li>",
            node = Esc(&n.name),
            href = url_component(&n.name),
            what = Esc(&b.what),
            code = Esc(&b.code),
            reason = Esc(&b.reason),
        );
    }
    if total > roots::MAX_LISTED {
        let _ = write!(
            out,
            "<li class=\"left-out\">… and {} more (<code>/api/v1/nodes</code> has every node's)</li>",
            total - roots::MAX_LISTED
        );
    }
    out.push_str("</ul></section>");
    out
}

fn jobs_table(s: &PageState) -> String {
    let jobs = super::jobs::job_views(&s.store, Some(&s.analysis));
    let mut out = String::from("<section id=\"jobs\"><h2>Jobs</h2>");
    if jobs.is_empty() {
        out.push_str("<p>No job found on the nodes.</p></section>");
        return out;
    }
    out.push_str(
        "<table class=\"jobs\"><thead><tr><th>job</th><th>nodes</th><th>ranks</th><th>step time</th>\
         <th>scaling efficiency</th><th>NCCL conflicts</th></tr></thead><tbody>",
    );
    let left_out = roots::left_out(jobs.len());
    s.counts.omitted("jobs", left_out);
    for j in jobs.into_iter().take(roots::MAX_LISTED) {
        let _ = write!(
            out,
            "<tr><td><a href=\"/job/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{} {}</td><td>{}</td></tr>",
            url_component(&j.id),
            Esc(&j.id),
            j.nodes.len(),
            j.ranks.len(),
            units::seconds(j.step_time_s),
            units::percent(j.scaling_efficiency),
            units::efficiency_method(j.scaling_efficiency_method.as_deref())
                .map(|m| format!("<span class=\"method\">({})</span>", Esc(&m)))
                .unwrap_or_default(),
            j.conflicts.len()
        );
    }
    out.push_str("</tbody></table>");
    if left_out > 0 {
        let _ = write!(
            out,
            "<p class=\"note warn\">{left_out} more job(s) not listed: this page lists at most {}. \
             <code>/api/v1/jobs</code> has every one.</p>",
            roots::MAX_LISTED
        );
    }
    out.push_str("</section>");
    out
}

fn job_main(s: &PageState, id: &str) -> Option<String> {
    let view = super::jobs::job_views(&s.store, Some(&s.analysis))
        .into_iter()
        .find(|j| j.id == id)?;
    let (source, steps) = match s.steps.job_steps(id, job::CHART_STEPS) {
        Some(v) => ("markers", v),
        // Inferred steps come one per node step: as many per node as the charts show.
        None => match s
            .steps
            .job_inferred_steps(id, job::CHART_STEPS * view.nodes.len().max(1))
        {
            Some(v) => ("inferred from traffic", v),
            None => ("none yet", Vec::new()),
        },
    };
    let findings = s.analysis.findings(&active(FindingFilter {
        job: Some(id.to_string()),
        ..Default::default()
    }));
    Some(job::section(&view, &steps, source, &findings))
}

fn node_main(s: &PageState, name: &str) -> Option<String> {
    let now = unix_now_ns();
    let snap = s.store.snapshot(now).into_iter().find(|n| n.name == name)?;
    let view = NodeView::from(&snap);
    s.counts.omitted("links", node::omitted_links(&view));
    let mut gpus = node::GpuReadings::new();
    for series in snap.series.iter().filter(|x| x.key.link.is_none()) {
        if let Some((_, g)) = series.key.labels.iter().find(|(k, _)| k == "gpu") {
            gpus.entry(g.clone())
                .or_default()
                .push((series.key.metric.clone(), series.value));
        }
    }
    for v in gpus.values_mut() {
        v.sort_by(|a, b| a.0.cmp(&b.0));
    }
    let steps = s.steps.node_steps(name, 10).unwrap_or_default();
    let stale =
        !view.connected || now as f64 / 1e9 - view.last_seen_unix_s > heatmap::STALE_AFTER_S;
    let findings = s.analysis.findings(&active(FindingFilter {
        node: Some(name.to_string()),
        ..Default::default()
    }));
    s.counts
        .omitted("findings", roots::left_out(findings.len()));
    Some(node::section(&view, stale, &steps, &gpus, &findings))
}

#[cfg(test)]
mod tests;
