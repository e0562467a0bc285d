//! HTTP: the collector's whole HTTP surface is assembled here ([`app`]): `GET /healthz`, `GET /metrics` and
//! `GET /api/v1/nodes` served by this file, merged with the steps, findings (and baselines) and jobs routes,
//! everything under `/api/` behind the access guard ([`super::access`]). Read-only except where a route says
//! otherwise: other methods get 405. The paths and keys are a contract: add, never rename.

use std::sync::Arc;

use std::io::Write;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use commwatch_model::clock::unix_now_ns;
use flate2::write::GzEncoder;
use tracing::warn;

use super::access::{guard, ApiAccess};
use super::findings::FindingsCollector;
use super::jobs::JobsCollector;
use super::nodes::NodeView;
use super::prometheus::{content_type, Exposition, StoreDescs};
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
}

/// Registers the exporters' metric families in the health registry (they are scraped with `/metrics`) and
/// builds the router of every endpoint. Returns it with the `/metrics` renderer.
pub(crate) fn app(s: Sources) -> Result<(Router, Arc<Exposition>), prometheus::Error> {
    let registry = &s.health.registry;
    // The store's families are written by `Exposition` itself; their names are registered so that no other
    // collector can take them.
    registry.register(Box::new(StoreDescs::new()?))?;
    registry.register(Box::new(StepCollector::new(s.steps.clone())?))?;
    registry.register(Box::new(FindingsCollector::new(s.analysis.clone())?))?;
    registry.register(Box::new(JobsCollector::new(s.store.clone())?))?;
    let exposition = Arc::new(Exposition::new(s.store.clone()));
    let router = router(HttpState {
        store: s.store.clone(),
        health: s.health.clone(),
        exposition: exposition.clone(),
    })
    .merge(super::page::router(&s))
    .merge(super::steps::router(s.steps))
    .merge(super::findings::router(s.analysis.clone()))
    .merge(super::jobs::router(s.store, s.analysis))
    .layer(axum::middleware::from_fn_with_state(s.access, guard));
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

/// The exposition, gzip-compressed when the request's `Accept-Encoding` allows gzip ([`accepts_gzip`]): the
/// text of a large fleet is megabytes and compresses about tenfold. `Vary: Accept-Encoding` either way, so a
/// cache between keeps the two apart.
async fn metrics(State(s): State<HttpState>, request: HeaderMap) -> Response {
    let gzip = accepts_gzip(&request);
    let (health, exposition) = (s.health.clone(), s.exposition.clone());
    let render = move || {
        let text = exposition.render(&health)?;
        Ok::<_, prometheus::Error>(if gzip {
            gzipped(&text)?
        } else {
            text.into_bytes()
        })
    };
    match tokio::task::spawn_blocking(render).await {
        Ok(Ok(body)) => {
            let mut r = ([(header::CONTENT_TYPE, content_type())], body).into_response();
            let headers = r.headers_mut();
            headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
            if gzip {
                headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            }
            r
        }
        Ok(Err(e)) => {
            warn!(error = %e, "rendering /metrics failed");
            (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Whether `Accept-Encoding` allows gzip: a `gzip` (or `x-gzip`) entry, else a `*` entry, with a q-value
/// above 0 (`gzip;q=0` refuses it). No header, or one that names neither, means the plain text; so does a
/// q-value that does not parse (the plain text is always acceptable).
fn accepts_gzip(request: &HeaderMap) -> bool {
    let mut gzip = None;
    let mut any = None;
    for value in request.get_all(header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for entry in value.split(',') {
            let mut parts = entry.split(';');
            let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .map_or(Some(1.0), |(_, v)| v.trim().parse::<f32>().ok());
            let allowed = q.is_some_and(|q| q > 0.0);
            match coding.as_str() {
                "gzip" | "x-gzip" => gzip = Some(gzip.unwrap_or(false) || allowed),
                "*" => any = Some(allowed),
                _ => {}
            }
        }
    }
    gzip.or(any).unwrap_or(false)
}

/// `text` gzip-compressed at the fast level, since a scrape waits for it: the demo's 2.4 MB exposition (8 nodes
/// of 8 GPUs) becomes 190 kB in 3.4 ms (release build); the default level makes 124 kB but takes 36 ms.
fn gzipped(text: &str) -> Result<Vec<u8>, prometheus::Error> {
    let mut out = GzEncoder::new(
        Vec::with_capacity(text.len() / 8),
        flate2::Compression::fast(),
    );
    out.write_all(text.as_bytes())?;
    Ok(out.finish()?)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts(values: &[&str]) -> bool {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
        }
        accepts_gzip(&h)
    }

    #[test]
    fn gzip_is_negotiated_by_q_value() {
        // What Prometheus sends.
        assert!(accepts(&["gzip"]));
        assert!(accepts(&["GZip"]));
        assert!(accepts(&["br, gzip;q=0.5, deflate"]));
        assert!(accepts(&["x-gzip"]));
        assert!(accepts(&["*"]));
        assert!(accepts(&["br", "gzip"]));
        assert!(!accepts(&[]));
        assert!(!accepts(&["br"]));
        assert!(!accepts(&["identity"]));
        assert!(!accepts(&["gzip;q=0"]));
        assert!(!accepts(&["gzip; q=0.000"]));
        assert!(!accepts(&["gzip;q=nonsense"]));
        // A named gzip wins over `*`, either way.
        assert!(!accepts(&["*, gzip;q=0"]));
        assert!(accepts(&["*;q=0, gzip"]));
        assert!(!accepts(&["*;q=0"]));
    }
}
