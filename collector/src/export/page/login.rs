//! Access to the page: the same API token as `/api/` ([`ApiAccess`]). A browser cannot send a bearer header
//! when it follows a link, so with a token configured the page also accepts a session: the form at `/login`,
//! once the token typed in matches, opens one ([`crate::export::access::PageSessions`]: a random 256-bit id,
//! valid [`SESSION_TTL`]) and sets the `commwatch_page` cookie to its id (`HttpOnly`, `SameSite=Strict`,
//! `Path=/`, and `Secure` when the page is served over https: `secure_cookie = true`, or a request through a
//! proxy listed in `trusted_proxies` that says `X-Forwarded-Proto: https` — never from `Origin` or `Referer`,
//! which browsers leave out, the login page's own `Referrer-Policy: no-referrer` included). The token
//! itself never goes into the cookie. A request with neither is sent to `/login` (a fragment request of the
//! page's script gets 401). Without a token the page is open, like the API's reads. `/login` and `/assets/`
//! are always open.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use super::escape::{url_component, url_decode};
use super::layout;
use crate::export::access::{ApiAccess, SESSION_TTL};
#[cfg(test)]
use crate::export::access::{PageSessions, MAX_SESSIONS};
use crate::ingest::auth::{bearer, token_matches};

/// The cookie that carries the session id.
pub const COOKIE: &str = "commwatch_page";
/// The page session id a request's cookie presents.
fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .and_then(|(_, v)| url_decode(v, false))
}

/// True when the request may see the page: the bearer token, or an open session's cookie. A wrong bearer
/// token is counted (`surface="page"`); a missing or stale cookie is not (a browser's first visit).
fn admitted(access: &ApiAccess, token: &str, headers: &HeaderMap, now: Instant) -> bool {
    if let Some(t) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
    {
        let ok = token_matches(t, token);
        if !ok {
            access.failures.refused("page", None);
        }
        return ok;
    }
    session_cookie(headers).is_some_and(|id| access.page_sessions.valid(&id, now))
}
/// Largest login form accepted, bytes.
pub const MAX_FORM: usize = 8 << 10;
/// Time a client has to send the login form once its headers are in.
const FORM_TIMEOUT: Duration = Duration::from_secs(10);

/// The middleware of the page's routes.
pub async fn guard(State(access): State<Arc<ApiAccess>>, req: Request, next: Next) -> Response {
    let Some(token) = &access.token else {
        return next.run(req).await;
    };
    if admitted(&access, token, req.headers(), Instant::now()) {
        return next.run(req).await;
    }
    let partial = req.uri().query().is_some_and(|q| q.contains("partial=1"));
    if partial {
        return layout::with_headers(
            (StatusCode::UNAUTHORIZED, "log in again at /login").into_response(),
        );
    }
    layout::with_headers(Redirect::to("/login").into_response())
}

/// `GET /login`: the form, or a note that no token is needed.
pub async fn form(State(access): State<Arc<ApiAccess>>) -> Response {
    let body = if access.token.is_some() {
        layout::login_page(None)
    } else {
        layout::login_page(Some(
            "This collector has no API token: the page is open to whoever can reach it.",
        ))
    };
    layout::with_headers(layout::html_response(StatusCode::OK, body))
}

/// `POST /login` (`application/x-www-form-urlencoded`, field `token`): sets the cookie and goes to `/` when the
/// token matches; the form again with 401 when not.
pub async fn submit(
    State(access): State<Arc<ApiAccess>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(expected) = &access.token else {
        return layout::with_headers(Redirect::to("/").into_response());
    };
    let bytes = match tokio::time::timeout(FORM_TIMEOUT, axum::body::to_bytes(body, MAX_FORM)).await
    {
        Ok(Ok(b)) => b,
        _ => {
            let page =
                layout::login_page(Some("The form could not be read (too large or too slow)."));
            return layout::with_headers(layout::html_response(StatusCode::BAD_REQUEST, page));
        }
    };
    let given = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|text| {
            text.split('&')
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| *k == "token")
                .and_then(|(_, v)| url_decode(v, true))
        })
        .unwrap_or_default();
    if !token_matches(given.trim(), expected) {
        access.failures.refused("login", Some(peer));
        let page = layout::login_page(Some("Wrong token."));
        return layout::with_headers(layout::html_response(StatusCode::UNAUTHORIZED, page));
    }
    let id = access.page_sessions.open(Instant::now());
    let secure = if cookie_secure(&access, peer, &headers) {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        url_component(&id),
        SESSION_TTL.as_secs()
    );
    let mut r = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    layout::with_headers(r)
}

/// Whether the login cookie is marked `Secure`: always with `secure_cookie`; otherwise when the request came
/// from a proxy listed in `trusted_proxies` that says the browser used https (`X-Forwarded-Proto: https`,
/// its first value). Anyone else's `X-Forwarded-Proto` is ignored, and `Origin`/`Referer` are never used:
/// browsers leave them out (`Referrer-Policy: no-referrer` on the login page itself).
fn cookie_secure(access: &ApiAccess, peer: SocketAddr, headers: &HeaderMap) -> bool {
    if access.secure_cookie {
        return true;
    }
    if !access.trusted_proxies.contains(&peer.ip()) {
        return false;
    }
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_token_or_an_open_session_admits() {
        let access = ApiAccess {
            token: Some("tok".into()),
            page_sessions: PageSessions::default(),
            ..ApiAccess::default()
        };
        let now = Instant::now();
        let mut h = HeaderMap::new();
        assert!(!admitted(&access, "tok", &h, now));
        // The token in the cookie is not a session.
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; commwatch_page=tok"),
        );
        assert!(!admitted(&access, "tok", &h, now));
        let id = access.page_sessions.open(now);
        assert_eq!(id.len(), 64);
        let cookie = format!("a=b; commwatch_page={id}");
        h.insert(header::COOKIE, HeaderValue::from_str(&cookie).unwrap());
        assert!(admitted(&access, "tok", &h, now));
        assert!(!admitted(&access, "tok", &h, now + SESSION_TTL));
        // A wrong bearer header is refused even with a good cookie.
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer nope"),
        );
        assert!(!admitted(&access, "tok", &h, now));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer tok"),
        );
        assert!(admitted(&access, "tok", &h, now));
    }

    #[test]
    fn sessions_are_bounded_and_expire() {
        let s = PageSessions::default();
        let t0 = Instant::now();
        let first = s.open(t0);
        for i in 1..MAX_SESSIONS {
            s.open(t0 + Duration::from_millis(i as u64));
        }
        assert!(s.valid(&first, t0));
        s.open(t0 + Duration::from_secs(1));
        assert!(
            !s.valid(&first, t0),
            "the session closest to expiry goes first"
        );
        assert_eq!(s.open.lock().len(), MAX_SESSIONS);
        s.open(t0 + SESSION_TTL + Duration::from_secs(2));
        assert_eq!(s.open.lock().len(), 1, "expired sessions dropped");
    }

    #[test]
    fn the_cookie_is_secure_by_setting_or_a_trusted_proxys_word_only() {
        let proxy: SocketAddr = "10.0.0.5:40000".parse().unwrap();
        let other: SocketAddr = "10.0.0.9:40000".parse().unwrap();
        let mut access = ApiAccess::default();
        let mut h = HeaderMap::new();
        assert!(!cookie_secure(&access, proxy, &h));
        // Origin and Referer say nothing: browsers leave them out.
        h.insert(header::ORIGIN, HeaderValue::from_static("https://c"));
        h.insert(header::REFERER, HeaderValue::from_static("https://c/login"));
        assert!(!cookie_secure(&access, proxy, &h));
        // X-Forwarded-Proto only from a trusted proxy.
        h.insert("x-forwarded-proto", HeaderValue::from_static("HTTPS, http"));
        assert!(!cookie_secure(&access, proxy, &h));
        access.trusted_proxies = vec![proxy.ip()];
        assert!(cookie_secure(&access, proxy, &h));
        assert!(!cookie_secure(&access, other, &h));
        h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        assert!(!cookie_secure(&access, proxy, &h));
        // The setting: always.
        access.secure_cookie = true;
        assert!(cookie_secure(&access, other, &HeaderMap::new()));
    }
}
