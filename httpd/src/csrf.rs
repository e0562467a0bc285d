//! Cross-site request forgery: a web page in the operator's browser can send a `POST` to a collector or agent
//! it can reach (on loopback, through a port-forward) — a form, or `fetch` in `no-cors` mode — with the
//! browser's cookies and without a token when none is configured. Such a request can only carry a "simple"
//! content type (`text/plain`, a form) and always carries the page's `Origin` (or `Sec-Fetch-Site`), so every
//! state-changing request (any method but `GET` and `HEAD`) is refused ([`check`]):
//! - with a foreign origin: `403` — an `Origin` header whose `host[:port]` is not the request's `Host`, an
//!   opaque `Origin: null` that `Sec-Fetch-Site: same-origin` does not vouch for, or `Sec-Fetch-Site`
//!   `cross-site`/`same-site`. No `Origin` at all is allowed: command-line clients (curl, the `commwatch`
//!   CLI) send none, and browsers always send one with a `POST`.
//! - without a JSON content type (`application/json`, or `application/…+json`): `415`. A browser can send a
//!   JSON content type across sites only after a CORS preflight, which these servers never grant.
//! - at a form route ([`WriteGuard::form_paths`], the page's login form: the one write a browser makes
//!   itself): a form content type is accepted, but only with proof of the same origin (`Origin` equal to
//!   `Host`, or `Sec-Fetch-Site: same-origin`); without either it is refused (`403`).
//!
//! Each refusal answers `{"error": "..."}` and is counted by reason (`origin`, `content_type`) in the
//! server's counter ([`WriteGuard::refused`]).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus::IntCounterVec;

/// Why a write was refused; the `reason` label of the refusal counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A foreign or unproven origin (`403`).
    Origin,
    /// Not a JSON body (`415`).
    ContentType,
}

impl Refusal {
    /// The counter's `reason` label.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Origin => "origin",
            Refusal::ContentType => "content_type",
        }
    }

    /// The status the request is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::Origin => StatusCode::FORBIDDEN,
            Refusal::ContentType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }

    fn message(self) -> &'static str {
        match self {
            Refusal::Origin => {
                "refused: a state-changing request from another origin (its Origin is not this server's \
                 Host, or Sec-Fetch-Site says it is cross-site)"
            }
            Refusal::ContentType => {
                "refused: a state-changing request needs Content-Type: application/json"
            }
        }
    }
}

/// The guard of one server: where it counts, and which paths take a browser's form.
#[derive(Debug, Clone)]
pub struct WriteGuard {
    /// Refusals by `reason` ([`Refusal::reason`]).
    pub refused: IntCounterVec,
    /// Exact paths whose writes are a browser's form (`application/x-www-form-urlencoded`), accepted from the
    /// same origin only.
    pub form_paths: &'static [&'static str],
}

/// Whether a request with `method` at `path` and `headers` may go on; `form_path` when its path takes a form.
pub fn check(method: &Method, headers: &HeaderMap, form_path: bool) -> Result<(), Refusal> {
    if method == Method::GET || method == Method::HEAD {
        return Ok(());
    }
    let origin = same_origin(headers)?;
    match content_type(headers) {
        Body::Json => Ok(()),
        Body::Form if form_path && origin == Origin::Same => Ok(()),
        Body::Form if form_path => Err(Refusal::Origin),
        _ => Err(Refusal::ContentType),
    }
}

/// What the request says of where it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// `Origin` equal to `Host`, or `Sec-Fetch-Site: same-origin`.
    Same,
    /// Neither header (a command-line client).
    Unstated,
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"))
}

/// `Same`, `Unstated`, or the refusal of a foreign origin.
fn same_origin(headers: &HeaderMap) -> Result<Origin, Refusal> {
    let site = header_str(headers, "sec-fetch-site").map(str::to_ascii_lowercase);
    let vouched = match site.as_deref() {
        // `none`: the user typed the address or opened a bookmark.
        Some("same-origin") | Some("none") => true,
        Some(_) => return Err(Refusal::Origin),
        None => false,
    };
    let Some(origin) = header_str(headers, header::ORIGIN.as_str()) else {
        return Ok(if vouched {
            Origin::Same
        } else {
            Origin::Unstated
        });
    };
    if origin.trim() == "null" {
        // An opaque origin (a sandboxed frame, a `no-referrer` page's form): only the browser's own word counts.
        return if vouched {
            Ok(Origin::Same)
        } else {
            Err(Refusal::Origin)
        };
    }
    let host = header_str(headers, header::HOST.as_str()).ok_or(Refusal::Origin)?;
    let authority = origin
        .split_once("://")
        .map(|(_, rest)| rest)
        .ok_or(Refusal::Origin)?;
    if authority.eq_ignore_ascii_case(host.trim()) {
        Ok(Origin::Same)
    } else {
        Err(Refusal::Origin)
    }
}

/// The kinds of body a write may declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Json,
    Form,
    Other,
}

fn content_type(headers: &HeaderMap) -> Body {
    let Some(v) = header_str(headers, header::CONTENT_TYPE.as_str()) else {
        return Body::Other;
    };
    let essence = v
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
    {
        Body::Json
    } else if essence == "application/x-www-form-urlencoded" {
        Body::Form
    } else {
        Body::Other
    }
}

/// The middleware (`axum::middleware::from_fn_with_state(guard, csrf::guard)`): refuses what [`check`] refuses,
/// counted, before any handler or other guard runs.
pub async fn guard(State(g): State<Arc<WriteGuard>>, req: Request, next: Next) -> Response {
    let form_path = g.form_paths.contains(&req.uri().path());
    match check(req.method(), req.headers(), form_path) {
        Ok(()) => next.run(req).await,
        Err(r) => {
            g.refused.with_label_values(&[r.reason()]).inc();
            let body = format!("{{\"error\":\"{}\"}}", r.message());
            (
                r.status(),
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    const JSON: (&str, &str) = ("content-type", "application/json; charset=utf-8");
    const HOST: (&str, &str) = ("host", "127.0.0.1:9470");

    #[test]
    fn reads_pass_and_json_writes_from_the_command_line_pass() {
        let evil = headers(&[
            ("origin", "http://evil.example"),
            ("content-type", "text/plain"),
        ]);
        assert_eq!(check(&Method::GET, &evil, false), Ok(()));
        assert_eq!(check(&Method::HEAD, &evil, false), Ok(()));
        assert_eq!(check(&Method::POST, &headers(&[JSON, HOST]), false), Ok(()));
        let vendor = headers(&[("content-type", "application/vnd.x+json"), HOST]);
        assert_eq!(check(&Method::PUT, &vendor, false), Ok(()));
        let same = headers(&[JSON, HOST, ("origin", "http://127.0.0.1:9470")]);
        assert_eq!(check(&Method::POST, &same, false), Ok(()));
    }

    #[test]
    fn a_foreign_origin_is_refused_first() {
        for h in [
            headers(&[JSON, HOST, ("origin", "http://evil.example")]),
            headers(&[
                ("content-type", "text/plain"),
                HOST,
                ("origin", "http://evil.example"),
            ]),
            headers(&[JSON, HOST, ("origin", "http://127.0.0.1:9471")]),
            headers(&[JSON, HOST, ("origin", "null")]),
            headers(&[JSON, HOST, ("origin", "127.0.0.1:9470")]),
            headers(&[JSON, ("origin", "http://127.0.0.1:9470")]),
            headers(&[JSON, HOST, ("sec-fetch-site", "cross-site")]),
            headers(&[
                JSON,
                HOST,
                ("sec-fetch-site", "same-site"),
                ("origin", "http://127.0.0.1:9470"),
            ]),
        ] {
            assert_eq!(
                check(&Method::POST, &h, false),
                Err(Refusal::Origin),
                "{h:?}"
            );
            assert_eq!(
                check(&Method::DELETE, &h, false),
                Err(Refusal::Origin),
                "{h:?}"
            );
        }
    }

    #[test]
    fn a_write_without_json_is_refused() {
        for h in [
            headers(&[HOST]),
            headers(&[HOST, ("content-type", "text/plain")]),
            headers(&[HOST, ("content-type", "multipart/form-data; boundary=x")]),
            headers(&[HOST, ("content-type", "application/x-www-form-urlencoded")]),
            headers(&[HOST, ("content-type", "application/jsonx")]),
        ] {
            assert_eq!(
                check(&Method::POST, &h, false),
                Err(Refusal::ContentType),
                "{h:?}"
            );
        }
        assert_eq!(Refusal::ContentType.status().as_u16(), 415);
        assert_eq!(Refusal::Origin.status().as_u16(), 403);
    }

    #[test]
    fn the_login_form_needs_proof_of_the_same_origin() {
        let form = ("content-type", "application/x-www-form-urlencoded");
        let ok = [
            headers(&[form, HOST, ("origin", "http://127.0.0.1:9470")]),
            // A browser on a page with `Referrer-Policy: no-referrer` sends an opaque origin.
            headers(&[
                form,
                HOST,
                ("origin", "null"),
                ("sec-fetch-site", "same-origin"),
            ]),
            headers(&[form, HOST, ("sec-fetch-site", "same-origin")]),
        ];
        for h in ok {
            assert_eq!(check(&Method::POST, &h, true), Ok(()), "{h:?}");
        }
        assert_eq!(
            check(&Method::POST, &headers(&[form, HOST]), true),
            Err(Refusal::Origin)
        );
        let evil = headers(&[form, HOST, ("origin", "http://evil.example")]);
        assert_eq!(check(&Method::POST, &evil, true), Err(Refusal::Origin));
        let text = headers(&[
            ("content-type", "text/plain"),
            HOST,
            ("origin", "http://127.0.0.1:9470"),
        ]);
        assert_eq!(check(&Method::POST, &text, true), Err(Refusal::ContentType));
    }
}
