//! One remote-write request over HTTP, and what to do with its answer: protocol 1.0 headers, the receiver's
//! TLS CA and credentials, and the classification of the answer (2xx sent; 5xx, 429 and network errors are
//! retried with exponential backoff, no sooner than the answer's `Retry-After` ([`retry_after`]); any other
//! status is refused for good).
//!
//! Protocol: remote write 1.0 (`Content-Type: application/x-protobuf`, `X-Prometheus-Remote-Write-Version:
//! 0.1.0`). A 2.0-only receiver would answer 415 to it; no receiver we target is one (Prometheus, Mimir,
//! Thanos Receive and VictoriaMetrics all take 1.0), and a 415 is refused for good like any other 4xx.

use super::retry_after;

use std::time::Duration;

use reqwest::header::{
    HeaderMap, HeaderValue, CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER, USER_AGENT,
};
use reqwest::StatusCode;

use crate::config::RemoteWriteConfig;

/// Why the sender cannot be built (at start: the collector does not start).
/// Each message says its cause itself, so none is also a `source()`: a chain printer says it once.
#[derive(Debug, thiserror::Error)]
pub enum SendSetupError {
    #[error("remote_write.url: {0}")]
    Url(String),
    #[error("remote_write.ca_file {path}: {reason}")]
    Ca { path: String, reason: String },
    #[error("remote_write: {0}")]
    Token(commwatch_model::token::TokenError),
    #[error("remote_write: cannot build the HTTP client: {0}")]
    Client(String),
}

impl From<commwatch_model::token::TokenError> for SendSetupError {
    fn from(e: commwatch_model::token::TokenError) -> Self {
        SendSetupError::Token(e)
    }
}

/// What became of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Sent,
    /// 5xx, 429 or a network error (timeout, refused, reset): try again later, no sooner than `after` (the
    /// answer's `Retry-After`, when it had a readable one).
    Retry {
        why: String,
        after: Option<Duration>,
    },
    /// Any other status: the receiver refuses this request; sending it again would not help.
    Refused(String),
}

/// How to authenticate to the receiver.
#[derive(Clone)]
enum Auth {
    None,
    Bearer(String),
    Basic { user: String, password: String },
}

/// Sends encoded requests to one receiver.
#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    url: reqwest::Url,
    auth: Auth,
}

impl Sender {
    /// Builds the client from `[remote_write]` (`url` set): reads the CA and the credential files now.
    pub fn new(cfg: &RemoteWriteConfig) -> Result<Sender, SendSetupError> {
        let url = cfg.url.as_deref().unwrap_or_default();
        let url =
            reqwest::Url::parse(url).map_err(|e| SendSetupError::Url(format!("{url:?}: {e}")))?;
        let mut builder = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout)
            .default_headers(protocol_headers());
        if let Some(path) = &cfg.ca_file {
            let ca = |reason: String| SendSetupError::Ca {
                path: path.display().to_string(),
                reason,
            };
            let pem = std::fs::read(path).map_err(|e| ca(e.to_string()))?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca(e.to_string()))?;
            if certs.is_empty() {
                return Err(ca("no PEM certificate in it".into()));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let read = commwatch_model::token::read_token_file;
        let auth = match (
            &cfg.bearer_token_file,
            &cfg.basic_auth_user,
            &cfg.basic_auth_password_file,
        ) {
            (Some(token), _, _) => Auth::Bearer(read(token)?),
            (None, Some(user), Some(password)) => Auth::Basic {
                user: user.clone(),
                password: read(password)?,
            },
            _ => Auth::None,
        };
        let client = builder
            .build()
            .map_err(|e| SendSetupError::Client(e.to_string()))?;
        Ok(Sender { client, url, auth })
    }

    /// The receiver's address, credentials left out (for logs).
    pub fn target(&self) -> String {
        self.url.as_str().to_string()
    }

    /// One attempt to send `body` (snappy-compressed `WriteRequest`).
    pub async fn send(&self, body: Vec<u8>) -> Outcome {
        let mut request = self.client.post(self.url.clone()).body(body);
        request = match &self.auth {
            Auth::None => request,
            Auth::Bearer(token) => request.bearer_auth(token),
            Auth::Basic { user, password } => request.basic_auth(user, Some(password)),
        };
        match request.send().await {
            Ok(response) => {
                let status = response.status();
                if status.is_success() {
                    return Outcome::Sent;
                }
                let after = response
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| retry_after::parse(v, std::time::SystemTime::now()));
                // The receiver says why in its body (Prometheus: "out of order sample", …); keep a line of it,
                // read from the first few KiB only: a receiver's body can be anything, endless included.
                let text = error_head(response).await;
                let why = format!("{status}: {}", first_line(&text, 200));
                match classify(status, why) {
                    Outcome::Retry { why, .. } => Outcome::Retry { why, after },
                    other => other,
                }
            }
            Err(e) => Outcome::Retry {
                why: error_chain(&e),
                after: None,
            },
        }
    }
}

/// The headers protocol 1.0 requires.
fn protocol_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_ENCODING, HeaderValue::from_static("snappy"));
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-protobuf"),
    );
    h.insert(
        "X-Prometheus-Remote-Write-Version",
        HeaderValue::from_static("0.1.0"),
    );
    let agent = format!("commwatch/{}", env!("CARGO_PKG_VERSION"));
    if let Ok(v) = HeaderValue::from_str(&agent) {
        h.insert(USER_AGENT, v);
    }
    h
}

/// A non-2xx status: retried when the receiver is overloaded or failing (5xx, 429), refused otherwise (any
/// other 4xx, 415 included: sending the same request again would not help).
pub fn classify(status: StatusCode, why: String) -> Outcome {
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        Outcome::Retry { why, after: None }
    } else {
        Outcome::Refused(why)
    }
}

/// Most of an error body read, bytes; the rest is never read (the connection is dropped with it).
pub const MAX_ERROR_BODY_BYTES: usize = 4 << 10;

/// The first [`MAX_ERROR_BODY_BYTES`] of an error answer's body, as text (what arrived before an error
/// reading it, too).
async fn error_head(mut response: reqwest::Response) -> String {
    let mut head = Vec::new();
    while head.len() < MAX_ERROR_BODY_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_ERROR_BODY_BYTES - head.len();
                head.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    line.chars().take(max).collect()
}

/// `e` and its causes, `: `-joined (reqwest's own message omits the cause: "error sending request").
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = c.source();
    }
    out
}

/// Exponential backoff: `min`, doubling after each failure up to `max`; back to `min` after a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max,
            next: min,
        }
    }

    /// The wait before the next attempt.
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }

    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error and its `source()`s joined by `: `, as a chain printer (`{:#}`) says them.
    fn chain(e: &dyn std::error::Error) -> String {
        let mut out = e.to_string();
        let mut next = e.source();
        while let Some(cause) = next {
            out = format!("{out}: {cause}");
            next = cause.source();
        }
        out
    }

    #[test]
    fn a_cause_is_said_once() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing-token");
        let e =
            SendSetupError::from(commwatch_model::token::read_token_file(&missing).unwrap_err());
        let said = chain(&e);
        assert_eq!(said.matches("missing-token").count(), 1, "{said}");
        assert!(
            said.starts_with("remote_write: cannot read token file"),
            "{said}"
        );
    }

    #[test]
    fn statuses_retried_or_refused() {
        for code in [500, 502, 503, 504, 429] {
            let s = StatusCode::from_u16(code).unwrap();
            assert!(
                matches!(classify(s, String::new()), Outcome::Retry { .. }),
                "{code}"
            );
        }
        for code in [400, 401, 403, 404, 409, 413, 415] {
            let s = StatusCode::from_u16(code).unwrap();
            assert!(
                matches!(classify(s, String::new()), Outcome::Refused(_)),
                "{code}"
            );
        }
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(700));
        let waits: Vec<Duration> = (0..5).map(|_| b.next_wait()).collect();
        assert_eq!(waits, [ms(100), ms(200), ms(400), ms(700), ms(700)]);
        b.reset();
        assert_eq!(b.next_wait(), ms(100));
    }

    #[test]
    fn credentials_files_are_read_and_bad_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "s3cret\n").unwrap();
        let cfg = RemoteWriteConfig {
            url: Some("http://127.0.0.1:1/api/v1/write".into()),
            bearer_token_file: Some(token),
            ..Default::default()
        };
        let sender = Sender::new(&cfg).unwrap();
        assert!(matches!(&sender.auth, Auth::Bearer(t) if t == "s3cret"));
        let missing = RemoteWriteConfig {
            bearer_token_file: Some(dir.path().join("absent")),
            ..cfg.clone()
        };
        assert!(Sender::new(&missing).is_err());
        let empty_ca = dir.path().join("ca.pem");
        std::fs::write(&empty_ca, "").unwrap();
        let bad_ca = RemoteWriteConfig {
            ca_file: Some(empty_ca),
            bearer_token_file: None,
            ..cfg
        };
        let err = Sender::new(&bad_ca).err().unwrap().to_string();
        assert!(err.contains("ca_file"), "{err}");
    }
}
