//! The page's shell: the document around a view's `<main>`, the login page, and the headers every page
//! response carries (a strict Content-Security-Policy: no inline script or style, nothing from elsewhere;
//! no caching; no framing; no referrer).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::escape::Esc;

/// The policy: scripts, styles and fetches from the collector only, none inline; SVG colours are attributes.
pub const CSP: &str =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// How often the page's script refreshes the view, milliseconds.
pub const REFRESH_MS: u32 = 2000;

/// `r` with the page's security headers.
pub fn with_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// An HTML response.
pub fn html_response(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

/// The whole document: `title`, the navigation, and `main` (the view's content, refreshed in place).
pub fn document(title: &str, main: &str) -> String {
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · commwatch</title><link rel=\"stylesheet\" href=\"/assets/page.css\">\
         <script src=\"/assets/page.js\" defer></script></head><body>\
         <header><a class=\"brand\" href=\"/\">commwatch</a> <nav><a href=\"/\">fleet</a> \
         <a href=\"/api/v1/findings?root=true\">findings (JSON)</a> <a href=\"/metrics\">metrics</a></nav>\
         <span id=\"live-status\">static view (reload to update)</span></header>\
         <main id=\"live\" data-refresh-ms=\"{REFRESH_MS}\">{main}</main></body></html>",
        title = Esc(title),
    )
}

/// The login form, with a note (an error, or that no token is needed).
pub fn login_page(note: Option<&str>) -> String {
    let note = note.map_or(String::new(), |n| {
        format!("<p class=\"note\">{}</p>", Esc(n))
    });
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>log in · commwatch</title>\
         <link rel=\"stylesheet\" href=\"/assets/page.css\"></head><body><header><a class=\"brand\" href=\"/\">\
         commwatch</a></header><main><section id=\"login\"><h2>Log in</h2>{note}\
         <form method=\"post\" action=\"/login\"><label>API token <input type=\"password\" name=\"token\" \
         autocomplete=\"current-password\" required></label> <button type=\"submit\">Log in</button></form>\
         <p>The collector's API token (its <code>api_token_file</code>). It is kept in an HttpOnly cookie of \
         this site only.</p></section></main></body></html>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_loads_its_script_and_style_from_the_collector_only() {
        let d = document("<x>", "<p>hi</p>");
        assert!(d.starts_with("<!DOCTYPE html>"));
        assert!(d.contains("<title>&lt;x&gt; · commwatch</title>"));
        assert!(d.contains("<script src=\"/assets/page.js\" defer></script>"));
        assert_eq!(d.matches("<script").count(), 1);
        assert!(!d.contains("style=\""));
    }
}
