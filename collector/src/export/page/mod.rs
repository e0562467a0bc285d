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

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use commwatch_model::clock::unix_now_ns;

use super::access::ApiAccess;
use super::nodes::NodeView;
use crate::analysis::engine::FindingFilter;
use crate::analysis::AnalysisHandle;
use crate::steps::StepStore;
use crate::store::Store;
use escape::{url_component, Esc};

/// Everything the page reads.
#[derive(Clone)]
pub(crate) struct PageState {
    store: Arc<Store>,
    steps: Arc<StepStore>,
    analysis: AnalysisHandle,
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
) -> Router {
    let state = PageState {
        store,
        steps,
        analysis,
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
/// `<main>` for `partial`.
async fn respond(s: PageState, view: View, partial: bool) -> Response {
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
    layout::with_headers(layout::html_response(status, body))
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
    let mut out = roots::section(&findings, blind);
    out.push_str(&blind_section(&nodes));
    let now = now_ns as f64 / 1e9;
    let mut rows = Vec::new();
    let mut columns = Vec::new();
    for n in &nodes {
        let steps = s
            .steps
            .node_steps(&n.name, heatmap::STEPS)
            .unwrap_or_default();
        let (r, c) = heatmap::row(n, &steps, now);
        rows.push(r);
        columns.extend(c);
    }
    let columns = heatmap::union(columns);
    heatmap::mark_faulty(&mut rows, &findings);
    let stale = rows.iter().filter(|r| r.stale).count();
    let _ = write!(
        out,
        "<section id=\"fleet\"><h2>Fleet</h2><p>{} node(s), {stale} stale. Utilisation of each link: upright, \
         the <b>burst</b> figure (achieved ÷ capacity while the link carried traffic, the median over the node's \
         last {} steps); italic with <i>~</i>, the <i>live rate</i> ÷ capacity where no step gives a confident \
         figure (bursts shorter than the sampling period), which averages bursts with the gaps between them and \
         reads far below them. Never above 100 %: a figure above the capacity is a sampling artefact, shown as \
         100%*. Outlined in red: the link of an active critical finding or root cause. NVLink folded per GPU; IPoIB \
         and RoCE interfaces folded into their ports (the same bytes). Hover a cell for its figures; a node's \
         name opens it.</p>",
        rows.len(),
        heatmap::STEPS
    );
    out.push_str("<div class=\"heatmaps\">");
    for (group, title) in [
        (heatmap::Group::Fabric, "Fabric links"),
        (heatmap::Group::Management, "Management links"),
    ] {
        if let Some(svg) = heatmap::render(&rows, &columns, group, title) {
            let _ = write!(out, "<div class=\"scroll\"><h3>{title}</h3>{svg}</div>");
        }
    }
    out.push_str("</div>");
    if rows.is_empty() {
        out.push_str("<p>No node has reported yet.</p>");
    }
    out.push_str("</section>");
    out.push_str(&jobs_table(s));
    out
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
    for n in blind {
        for b in &n.blind {
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
    for j in jobs {
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
    out.push_str("</tbody></table></section>");
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
    Some(node::section(&view, stale, &steps, &gpus, &findings))
}

#[cfg(test)]
mod tests;
