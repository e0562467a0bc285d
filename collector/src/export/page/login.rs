//! Access to the page: the same API token as `/api/` ([`ApiAccess`]). A browser cannot send a bearer header
//! when it follows a link, so with a token configured the page also takes it from the `commwatch_page` cookie,
//! which the form at `/login` sets (`HttpOnly`, `SameSite=Strict`, `Path=/`) once the token typed in matches.
//! A request with neither is sent to `/login` (a fragment request of the page's script gets 401). Without a
//! token the page is open, like the API's reads. `/login` and `/assets/` are always open.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use super::escape::{url_component, url_decode};
use super::layout;
use crate::export::access::ApiAccess;
use crate::ingest::auth::{bearer, token_matches};

/// The cookie that carries the token.
pub const COOKIE: &str = "commwatch_page";
/// Largest login form accepted, bytes.
pub const MAX_FORM: usize = 8 << 10;
/// Time a client has to send the login form once its headers are in.
const FORM_TIMEOUT: Duration = Duration::from_secs(10);

/// The token a request presents: a bearer header, else the page's cookie (percent-decoded).
pub fn presented(headers: &HeaderMap) -> Option<String> {
    if let Some(t) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
    {
        return Some(t.to_string());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .and_then(|(_, v)| url_decode(v, false))
}

/// The middleware of the page's routes.
pub async fn guard(State(access): State<Arc<ApiAccess>>, req: Request, next: Next) -> Response {
    let Some(token) = &access.token else {
        return next.run(req).await;
    };
    if presented(req.headers()).is_some_and(|t| token_matches(&t, token)) {
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
pub async fn submit(State(access): State<Arc<ApiAccess>>, body: Body) -> Response {
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
        let page = layout::login_page(Some("Wrong token."));
        return layout::with_headers(layout::html_response(StatusCode::UNAUTHORIZED, page));
    }
    let cookie = format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
        url_component(given.trim())
    );
    let mut r = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    layout::with_headers(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_the_header_or_the_cookie() {
        let mut h = HeaderMap::new();
        assert_eq!(presented(&h), None);
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; commwatch_page=s%3Bcr%20t"),
        );
        assert_eq!(presented(&h).as_deref(), Some("s;cr t"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(presented(&h).as_deref(), Some("abc"));
    }
}
