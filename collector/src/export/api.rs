//! HTTP: `GET /healthz`, `GET /metrics`, `GET /api/v1/nodes` (CONTRACTS.md). Read-only: other methods get 405.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use commwatch_model::clock::unix_now_ns;
use tracing::warn;

use super::health::Health;
use super::prometheus::{content_type, Exposition};
use crate::store::{NodeView, Store};

#[derive(Clone)]
pub(crate) struct HttpState {
    pub store: Arc<Store>,
    pub health: Health,
    pub exposition: Arc<Exposition>,
}

pub(crate) fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route("/api/v1/nodes", get(nodes))
        .with_state(state)
}

async fn metrics(State(s): State<HttpState>) -> Response {
    let (health, exposition) = (s.health.clone(), s.exposition.clone());
    match tokio::task::spawn_blocking(move || exposition.render(&health)).await {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, content_type())], text).into_response(),
        Ok(Err(e)) => {
            warn!(error = %e, "rendering /metrics failed");
            (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The nodes seen within `node_expiry`, sorted by name, as CONTRACTS.md describes them.
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
