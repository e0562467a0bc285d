//! HTTP: the collector's whole HTTP surface is assembled here ([`app`]): `GET /healthz`, `GET /metrics` and
//! `GET /api/v1/nodes` served by this file, merged with the steps, findings (and baselines) and jobs routes,
//! everything under `/api/` behind the access guard ([`super::access`]). Read-only except where a route says
//! otherwise: other methods get 405. Every write (any method but `GET` and `HEAD`) passes the cross-site
//! guard first ([`commwatch_httpd::csrf`]: JSON only, never from a foreign `Origin`; the page's `/login` form
//! from its own origin only). The paths and keys are a contract: add, never rename.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use commwatch_model::clock::unix_now_ns;
use tracing::warn;

use super::access::{guard, ApiAccess};
use super::findings::FindingsCollector;
use super::jobs::JobsCollector;
use super::nodes::NodeView;
use super::prometheus::{Exposition, StoreDescs};
use super::steps::StepCollector;
use crate::analysis::AnalysisHandle;
use crate::steps::StepStore;
use crate::store::Store;
use crate::telemetry::Health;

/// Everything the HTTP endpoints read.
pub(crate) struct Sources {
    pub store: Arc<Store>,
    pub health: Health,
    pub steps: Arc<StepStore>,
    pub analysis: AnalysisHandle,
    pub access: Arc<ApiAccess>,
    /// NVLink series per GPU or per link in `/metrics` (`nvlink_detail`).
    pub nvlink_detail: crate::config::NvlinkDetail,
    /// A link's named counters per family or per name in `/metrics` (`counter_detail`).
    pub counter_detail: crate::config::CounterDetail,
    /// The node's CPU total or per core in `/metrics` (`cpu_detail`).
    pub cpu_detail: crate::config::CpuDetail,
    /// The GPU families as a summary or in full in `/metrics` (`gpu_detail`).
    pub gpu_detail: crate::config::GpuDetail,
    /// Active probes between nodes (`/api/v1/probes`, their series in `/metrics`).
    pub prober: Arc<crate::probes::Prober>,
    /// The share of a core the `/metrics` render is guaranteed against a busy ingest (`export_share`).
    pub export_share: f64,
}

/// Registers the exporters' metric families in the health registry (they are scraped with `/metrics`) and
/// builds the router of every endpoint. Returns it with the `/metrics` renderer.
pub(crate) fn app(s: Sources) -> Result<(Router, Arc<Exposition>), prometheus::Error> {
    let registry = &s.health.registry;
    // The store's families are written by `Exposition` itself; their names are registered so that no other
    // collector can take them.
    registry.register(Box::new(StoreDescs::new()?))?;
    registry.register(Box::new(StepCollector::new(
        s.steps.clone(),
        s.nvlink_detail,
    )?))?;
    registry.register(Box::new(FindingsCollector::new(s.analysis.clone())?))?;
    registry.register(Box::new(JobsCollector::new(s.store.clone())?))?;
    registry.register(Box::new(super::nodes::BlindCollector::new(
        s.store.clone(),
    )?))?;
    registry.register(Box::new(super::probes::ProbesCollector::new(
        s.prober.clone(),
    )?))?;
    let collectives = s.analysis.collectives();
    registry.register(Box::new(super::collectives::CollectivesCollector::new(
        s.store.clone(),
        collectives.clone(),
    )?))?;
    let exposition = Arc::new(Exposition::with_detail(
        s.store.clone(),
        super::exposition::ExportDetail {
            nvlink: s.nvlink_detail,
            counter: s.counter_detail,
            cpu: s.cpu_detail,
            gpu: s.gpu_detail,
        },
    ));
    let router = router(HttpState {
        store: s.store.clone(),
        health: s.health.clone(),
        exposition: exposition.clone(),
        render: crate::pace::export_thread("commwatch-prom", s.export_share).map(Arc::new),
    })
    .merge(super::page::router(
        s.store.clone(),
        s.steps.clone(),
        s.analysis.clone(),
        s.access.clone(),
        s.health.page.clone(),
    ))
    .merge(super::steps::router(s.steps.clone()))
    .merge(super::collectives::router(
        s.store.clone(),
        collectives,
        s.steps,
    ))
    .merge(super::findings::router(s.analysis.clone()))
    .merge(super::probes::router(s.prober, s.store.clone()))
    .merge(super::jobs::router(s.store, s.analysis))
    .layer(axum::middleware::from_fn_with_state(s.access, guard))
    // Outermost: a forged write is refused before the token is even looked at.
    .layer(axum::middleware::from_fn_with_state(
        Arc::new(commwatch_httpd::csrf::WriteGuard {
            refused: s.health.http_writes_refused.clone(),
            form_paths: &["/login"],
        }),
        commwatch_httpd::csrf::guard,
    ));
    Ok((router, exposition))
}

/// The HTTP server on `listener`, as a future that ends once `shutdown` flips: at most `max_connections`
/// connections at once (counted in the health registry, like the refusals).
pub(crate) fn server(
    listener: tokio::net::TcpListener,
    router: Router,
    max_connections: usize,
    health: &Health,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> {
    commwatch_httpd::serve(
        listener,
        router,
        commwatch_httpd::HttpBounds::new(max_connections),
        commwatch_httpd::ConnectionMetrics {
            open: health.http_connections.clone(),
            refused: health.http_connections_refused.clone(),
        },
        shutdown,
    )
}

#[derive(Clone)]
struct HttpState {
    pub store: Arc<Store>,
    pub health: Health,
    pub exposition: Arc<Exposition>,
    /// Where `/metrics` is rendered: a thread below the ingest's priority (`pace::export_thread`).
    pub render: Option<Arc<crate::pace::PassThread>>,
}

fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/api/v1/nodes", get(nodes))
        .with_state(state)
}

/// `ok`; while the state directory cannot be written, `degraded: …`. Still 200 then: the collector serves, and
/// a restart (what a failed liveness probe does) would not make the disk writable but lose the live window.
async fn healthz(State(s): State<HttpState>) -> &'static str {
    if s.health.persist_degraded.get() > 0 {
        "degraded: the state directory cannot be written; batches are not acknowledged until it can (agents \
         keep them); see the collector's log\n"
    } else {
        "ok"
    }
}

/// The exposition, gzip-compressed when the request's `Accept-Encoding` allows gzip
/// ([`commwatch_httpd::accepts_gzip`], as the agent's): the text of a large fleet is megabytes and compresses
/// about tenfold. `Vary: Accept-Encoding` either way ([`commwatch_httpd::metrics_response`]). Rendered on the
/// render thread at its share of a core against the ingest (`export_share`, [`crate::pace::export_thread`]): a
/// scrape of a large fleet takes seconds of CPU (1.4–1.9 s at 2,000 demo nodes), which at the ingest's priority
/// made acks seconds late during every scrape at 600 demo nodes, and at the lowest priority outlasted a scrape's
/// timeout on a full core. The text is compressed as it is written ([`Exposition::render_gzip`]), and the body is
/// written in a buffer the exposition keeps from one scrape to the next (lent to the response until it is sent).
async fn metrics(State(s): State<HttpState>, request: HeaderMap) -> Response {
    let gzip = commwatch_httpd::accepts_gzip(&request);
    let (health, exposition) = (s.health.clone(), s.exposition.clone());
    let render = move || {
        if gzip {
            exposition.render_gzip(&health)
        } else {
            exposition.render_plain(&health)
        }
    };
    match crate::pace::run_on(s.render.as_deref(), render).await {
        Ok(Ok(body)) => commwatch_httpd::metrics_response(body, gzip),
        Ok(Err(e)) => {
            warn!(error = %e, "rendering /metrics failed");
            (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The nodes seen within `node_expiry`, sorted by name, as `GET /api/v1/nodes` returns them.
pub fn node_views(store: &Store) -> Vec<NodeView> {
    store
        .snapshot(unix_now_ns())
        .iter()
        .map(NodeView::from)
        .collect()
}

async fn nodes(State(s): State<HttpState>) -> Json<Vec<NodeView>> {
    Json(node_views(&s.store))
}
