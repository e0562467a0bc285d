//! The agent's own HTTP endpoint: `/metrics` (its health) and `/healthz`. Binds localhost unless configured.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::telemetry::AgentMetrics;

async fn metrics_handler(State(m): State<Arc<AgentMetrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        m.render(),
    )
}

/// Binds `addr` and serves until `shutdown` flips to true. Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<AgentMetrics>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(metrics);
    let task = tokio::spawn(async move {
        let r = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|v| *v).await;
            })
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "agent HTTP server failed");
        }
    });
    Ok((bound, task))
}
