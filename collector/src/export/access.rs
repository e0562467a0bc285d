//! Access to the HTTP API. `/metrics` and `/healthz` are open (they are read-only and bound to localhost
//! unless configured). Under `/api/`:
//! - with `api_token_file` set, every request must carry `authorization: Bearer <token>` (the scheme in any
//!   case; 401 otherwise);
//! - without it, reads are open and the one write (`POST /api/v1/baselines`) is accepted only from a
//!   loopback client (403 otherwise), so a collector whose HTTP port is reachable from the network cannot have
//!   its baselines changed by anyone who can reach it.
//!
//! A refused token (here, on the page and at `/login`) is counted in `commwatch_collector_auth_failures_total`
//! by `surface` and warned about at most once a minute per surface, with the number held back
//! ([`AuthFailures`]): a guesser shows in the metrics and the log without flooding it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use commwatch_model::throttle::LogThrottle;
use prometheus::IntCounterVec;

use crate::telemetry::{Health, AUTH_WARN_EVERY};

/// The API's access settings.
#[derive(Debug, Clone, Default)]
pub struct ApiAccess {
    /// Bearer token required under `/api/` when set.
    pub token: Option<Arc<str>>,
    /// The page's logged-in sessions (`/login`): the cookie carries a session id, never the token.
    pub page_sessions: PageSessions,
    /// `secure_cookie`: the login cookie is always marked `Secure` (the page is served over https).
    pub secure_cookie: bool,
    /// `trusted_proxies`: addresses whose `X-Forwarded-Proto: https` marks the login cookie `Secure`.
    pub trusted_proxies: Vec<IpAddr>,
    /// Where refused tokens are counted and warned about.
    pub failures: AuthFailures,
}

/// Refused credentials: counted by surface, warned about at most once per [`AUTH_WARN_EVERY`] per surface
/// with the number held back. The default counts nowhere (tests).
#[derive(Debug, Clone)]
pub struct AuthFailures {
    counts: Option<IntCounterVec>,
    warnings: Arc<LogThrottle>,
}

impl Default for AuthFailures {
    fn default() -> Self {
        AuthFailures {
            counts: None,
            warnings: Arc::new(LogThrottle::new(AUTH_WARN_EVERY)),
        }
    }
}

impl AuthFailures {
    /// Counting in `health` (`commwatch_collector_auth_failures_total`).
    pub fn new(health: &Health) -> AuthFailures {
        AuthFailures {
            counts: Some(health.auth_failures.clone()),
            ..AuthFailures::default()
        }
    }

    /// A refusal on `surface` (one of [`crate::telemetry::AUTH_SURFACES`]) from `peer`.
    pub fn refused(&self, surface: &'static str, peer: Option<SocketAddr>) {
        if let Some(c) = &self.counts {
            c.with_label_values(&[surface]).inc();
        }
        if let Some(held) = self.warnings.allow(surface, Instant::now()) {
            let peer = peer.map(|p| p.ip().to_string()).unwrap_or_default();
            tracing::warn!(surface, peer, held_back = held, every = ?AUTH_WARN_EVERY,
                "a request was refused for a missing or wrong token");
        }
    }
}

fn deny(status: StatusCode, message: &str) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

/// The middleware applying [`ApiAccess`].
pub async fn guard(
    State(access): State<Arc<ApiAccess>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if !req.uri().path().starts_with("/api/") {
        return next.run(req).await;
    }
    match &access.token {
        Some(token) => {
            let given = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(crate::ingest::auth::bearer)
                .unwrap_or("");
            if !crate::ingest::auth::token_matches(given, token) {
                access.failures.refused("api", Some(peer));
                return deny(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
            }
        }
        None => {
            let read = req.method() == Method::GET || req.method() == Method::HEAD;
            if !read && !peer.ip().is_loopback() {
                return deny(
                    StatusCode::FORBIDDEN,
                    "writes to /api are accepted from loopback clients only unless the collector has an API token (api_token_file)",
                );
            }
        }
    }
    next.run(req).await
}

/// How long a page session lasts after its login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Most sessions held; a login past it ends the one closest to expiry.
pub const MAX_SESSIONS: usize = 1024;

/// The page's sessions: id (64 hex digits) → when it expires. Clones share the sessions.
#[derive(Debug, Default, Clone)]
pub struct PageSessions {
    pub(crate) open: Arc<parking_lot::Mutex<HashMap<String, Instant>>>,
}

impl PageSessions {
    /// Opens a session at `now` and returns its id; drops expired sessions, and the one closest to expiry
    /// when [`MAX_SESSIONS`] are open.
    pub fn open(&self, now: Instant) -> String {
        let id: String = rand::random::<[u8; 32]>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mut open = self.open.lock();
        open.retain(|_, until| *until > now);
        if open.len() >= MAX_SESSIONS {
            if let Some(first) = open.iter().min_by_key(|(_, u)| **u).map(|(k, _)| k.clone()) {
                open.remove(&first);
            }
        }
        open.insert(id.clone(), now + SESSION_TTL);
        id
    }

    /// True when `id` is an open session at `now`.
    pub fn valid(&self, id: &str, now: Instant) -> bool {
        self.open.lock().get(id).is_some_and(|until| *until > now)
    }
}
