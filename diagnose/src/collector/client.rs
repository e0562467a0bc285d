//! The HTTP client of every command that asks a running collector (`commwatch status`, `findings`, `baseline
//! import`, `diagnose --collector`): one blocking client on rustls, over `http://` or `https://`, trusting the
//! built-in web roots, the system's roots and, when given, a CA file (a collector behind a proxy with a private
//! CA), and sending the collector's API token as `authorization: Bearer <token>`.
//!
//! Blocking on purpose: the commands that use it run outside any async runtime (several shards are asked from
//! threads of their own).
//!
//! Bounds, whatever the peer sends: a body is read as it streams and given up past [`MAX_BODY_BYTES`]
//! ([`ClientError::TooLarge`], naming the limit), an error body past [`MAX_ERROR_BODY_BYTES`] is not read at
//! all, and the timeout covers the whole request, body included ([`ClientError::Timeout`]): a 1 GiB or an
//! endless answer costs at most the limit in memory and the timeout in time.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

/// Whole-request timeout when none is given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time to open the TCP connection (and finish the TLS handshake) before giving up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest piece of an error body quoted in an error message, bytes.
const QUOTED_BODY: usize = 300;
/// Largest response body read, bytes (256 MiB: `/api/v1/nodes` of a 1,000-node shard with every NVLink link
/// is about 50 MB). A larger answer is an error, and reading stops at the limit.
pub const MAX_BODY_BYTES: u64 = 256 << 20;
/// Most of an error (non-2xx) body read, bytes: enough for the collector's `{"error": ...}`; the rest is never
/// read.
pub const MAX_ERROR_BODY_BYTES: u64 = 4 << 10;
/// Bytes read from the body at a time.
const CHUNK: usize = 64 << 10;

/// How to reach a collector.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// PEM file of the CA certificate(s) that signed the collector's (or its proxy's) certificate, trusted in
    /// addition to the built-in and system roots. Only with an `https://` URL.
    pub ca_file: Option<PathBuf>,
    /// The collector's API token (its `api_token_file`), sent with every request.
    pub token: Option<String>,
    /// Whole-request timeout; [`DEFAULT_TIMEOUT`] when `None`.
    pub timeout: Option<Duration>,
    /// Connect to this address instead of resolving the URL's host (one shard of several behind one DNS
    /// name); TLS still verifies the certificate against the URL's host. The client is then named by the
    /// address ([`Client::name`]).
    pub connect_to: Option<std::net::SocketAddr>,
}

/// Why a request got no usable answer. [`ClientError::is_usage`] tells a mistake of the caller (URL, CA file,
/// token) from a collector that cannot be reached or answered badly.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("collector URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("CA file {}: {message}", path.display())]
    CaFile { path: PathBuf, message: String },
    #[error("the API token {0}")]
    BadToken(&'static str),
    #[error("cannot build the HTTP client: {0}")]
    Build(String),
    #[error("{url}: {message}")]
    Unreachable { url: String, message: String },
    #[error("{url}: HTTP {status}: {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
    },
    #[error("{url}: the answer is not the expected JSON: {message}")]
    BadBody { url: String, message: String },
    #[error("{url}: the answer is over the limit of {limit} bytes on a response body{seen}; not read further")]
    TooLarge {
        url: String,
        limit: u64,
        /// ` (N bytes announced)` when the peer said its length, else empty.
        seen: String,
    },
    #[error("{url}: no whole answer within {timeout:?} (--timeout)")]
    Timeout { url: String, timeout: Duration },
}

impl ClientError {
    /// True when the caller's input is wrong (URL, CA file, token), false when the collector is the problem.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            ClientError::BadUrl { .. } | ClientError::CaFile { .. } | ClientError::BadToken(_)
        )
    }
}

/// What [`Client::scan_lines`] does after a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// Read on.
    Next,
    /// This is the line sought.
    Found,
    /// The line sought cannot come any more.
    Stop,
}

/// A body and the collector's clock when it answered (the `Date` header, as sent).
#[derive(Debug, Clone)]
pub struct Answer {
    pub body: String,
    pub date: Option<String>,
}

/// A client bound to one collector's base URL (`https://collector:9470`, or with a path prefix behind a proxy).
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    /// What reports call this collector: the base URL, or with [`ClientOptions::connect_to`] the URL with the
    /// address in place of the host.
    name: String,
    http: reqwest::blocking::Client,
    token: Option<String>,
    /// The whole request's time, body included.
    timeout: Duration,
    /// Largest body read, bytes ([`MAX_BODY_BYTES`]).
    body_limit: u64,
}

impl Client {
    /// Checks the URL (`http://` or `https://`, a host, no query), reads the CA file and builds the client.
    pub fn new(base_url: &str, options: &ClientOptions) -> Result<Client, ClientError> {
        let base = check_url(base_url)?;
        let https = base.starts_with("https://");
        let timeout = options.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let mut builder = reqwest::blocking::Client::builder()
            .use_rustls_tls()
            .timeout(timeout)
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("commwatch/", env!("CARGO_PKG_VERSION")));
        if !https {
            // Plain http:// never checks a certificate: loading the system's roots (a fifth of a second
            // per client, one client per shard) would only slow the start.
            builder = builder.tls_built_in_root_certs(false);
        }
        if let Some(path) = &options.ca_file {
            if !https {
                return Err(ClientError::BadUrl {
                    url: base_url.to_string(),
                    reason: "a CA file is given but the URL is not https://".into(),
                });
            }
            for cert in read_ca(path)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        let token = options.token.as_deref().map(check_token).transpose()?;
        let mut name = base.clone();
        if let Some(addr) = options.connect_to {
            let url = reqwest::Url::parse(&base).map_err(|e| ClientError::BadUrl {
                url: base_url.to_string(),
                reason: e.to_string(),
            })?;
            let host = url.host_str().unwrap_or_default().to_string();
            builder = builder.resolve(&host, addr);
            name = named_by_address(&url, addr);
        }
        let http = builder.build().map_err(|e| ClientError::Build(chain(&e)))?;
        Ok(Client {
            base,
            name,
            http,
            token,
            timeout,
            body_limit: MAX_BODY_BYTES,
        })
    }

    /// The same client reading bodies up to `bytes` (tests; the default is [`MAX_BODY_BYTES`]).
    pub fn with_body_limit(mut self, bytes: u64) -> Client {
        self.body_limit = bytes;
        self
    }

    /// What reports call this collector: [`Client::base_url`], or `SCHEME://ADDRESS:PORT[/PREFIX]` when it was
    /// given an address to connect to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// True when the URL is `http://` to a host other than loopback: what is sent, a token included, crosses
    /// the network in clear.
    pub fn is_plaintext_off_host(&self) -> bool {
        let Ok(url) = reqwest::Url::parse(&self.base) else {
            return false;
        };
        let host = url.host_str().unwrap_or("");
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        url.scheme() == "http" && !loopback
    }

    /// Whether a token is sent with every request.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The full URL of `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET path?query`: the body of a 2xx answer, else [`ClientError::Status`].
    pub fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Answer, ClientError> {
        let url = self.url(path);
        let started = Instant::now();
        let resp = self.send(self.http.get(&url).query(query), &url, started)?;
        let date = resp
            .headers()
            .get(reqwest::header::DATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = self.read_body(resp, &url, started)?;
        Ok(Answer { body, date })
    }

    /// `GET path?query` read as JSON into `T`.
    pub fn get_json<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, ClientError> {
        let answer = self.get(path, query)?;
        parse_json(&answer.body, &self.url(path))
    }

    /// `POST path` with a JSON body; the JSON answer of a 2xx.
    pub fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, ClientError> {
        let url = self.url(path);
        let started = Instant::now();
        let resp = self.send(self.http.post(&url).json(body), &url, started)?;
        let text = self.read_body(resp, &url, started)?;
        parse_json(&text, &url)
    }

    /// `GET path` read line by line, each line judged by `judge`: the line it calls [`Scan::Found`] is
    /// returned, and reading stops there or at [`Scan::Stop`] (`None`); the rest of the body is not read (a
    /// `/metrics` exposition can be megabytes, the line sought is one).
    pub fn scan_lines(
        &self,
        path: &str,
        mut judge: impl FnMut(&str) -> Scan,
    ) -> Result<Option<String>, ClientError> {
        let url = self.url(path);
        let started = Instant::now();
        let resp = self.send(self.http.get(&url), &url, started)?;
        let mut reader = std::io::BufReader::with_capacity(CHUNK, resp.take(self.body_limit));
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .map_err(|e| self.read_error(&url, started, &e))?;
            if n == 0 {
                // The end of the body, or the limit: what was not read cannot hold the line.
                return Ok(None);
            }
            self.check_time(&url, started)?;
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            match judge(text) {
                Scan::Next => {}
                Scan::Found => return Ok(Some(text.to_string())),
                Scan::Stop => return Ok(None),
            }
        }
    }

    /// The body of `resp` as text (invalid UTF-8 replaced), read as it streams: at most the body limit
    /// ([`ClientError::TooLarge`] beyond), and within the timeout from `started` ([`ClientError::Timeout`]).
    fn read_body(
        &self,
        resp: reqwest::blocking::Response,
        url: &str,
        started: Instant,
    ) -> Result<String, ClientError> {
        let limit = self.body_limit;
        let too_large = |seen: String| ClientError::TooLarge {
            url: url.to_string(),
            limit,
            seen,
        };
        if let Some(len) = resp.content_length().filter(|l| *l > limit) {
            return Err(too_large(format!(" ({len} bytes announced)")));
        }
        let hint = resp.content_length().unwrap_or(0).min(limit);
        let mut body = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
        let mut reader = resp.take(limit.saturating_add(1));
        let mut chunk = vec![0u8; CHUNK];
        loop {
            let n = reader
                .read(&mut chunk)
                .map_err(|e| self.read_error(url, started, &e))?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
            if body.len() as u64 > limit {
                return Err(too_large(String::new()));
            }
            self.check_time(url, started)?;
        }
        Ok(String::from_utf8(body)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// [`ClientError::Timeout`] once the timeout from `started` has passed.
    fn check_time(&self, url: &str, started: Instant) -> Result<(), ClientError> {
        if started.elapsed() > self.timeout {
            return Err(ClientError::Timeout {
                url: url.to_string(),
                timeout: self.timeout,
            });
        }
        Ok(())
    }

    /// A failed read of a body: the timeout when it has passed, else the peer is unreachable.
    fn read_error(&self, url: &str, started: Instant, e: &std::io::Error) -> ClientError {
        self.check_time(url, started)
            .err()
            .unwrap_or_else(|| ClientError::Unreachable {
                url: url.to_string(),
                message: chain(e),
            })
    }

    /// Sends with the token; a non-2xx answer becomes [`ClientError::Status`] with the collector's message.
    /// The request's timeout is set on the request itself, so that it bounds the body's transfer too, not
    /// only each read; an error body is read up to [`MAX_ERROR_BODY_BYTES`] and no further.
    fn send(
        &self,
        mut req: reqwest::blocking::RequestBuilder,
        url: &str,
        started: Instant,
    ) -> Result<reqwest::blocking::Response, ClientError> {
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.timeout(self.timeout).send().map_err(|e| {
            self.check_time(url, started)
                .err()
                .unwrap_or_else(|| ClientError::Unreachable {
                    url: url.to_string(),
                    message: chain(&e.without_url()),
                })
        })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let mut head = Vec::new();
        // What could be read in time; a body cut short still says what it had.
        let _ = resp.take(MAX_ERROR_BODY_BYTES).read_to_end(&mut head);
        let body = String::from_utf8_lossy(&head);
        Err(ClientError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            message: error_message(&body),
        })
    }
}

/// The base URL without its trailing `/`, when it is `http://` or `https://` with a host and no query.
fn check_url(url: &str) -> Result<String, ClientError> {
    let bad = |reason: &str| ClientError::BadUrl {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http:// or https://"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("a query or fragment has no place in the base URL"));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// The token when it can travel in a header: not empty, printable ASCII without spaces.
fn check_token(token: &str) -> Result<String, ClientError> {
    if token.is_empty() {
        return Err(ClientError::BadToken("is empty"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ClientError::BadToken(
            "holds spaces, control or non-ASCII characters",
        ));
    }
    Ok(token.to_string())
}

/// Every certificate of a PEM file; an unreadable file or one with no certificate is an error.
fn read_ca(path: &Path) -> Result<Vec<reqwest::Certificate>, ClientError> {
    let err = |message: String| ClientError::CaFile {
        path: path.to_path_buf(),
        message,
    };
    let pem = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| err(chain(&e)))?;
    if certs.is_empty() {
        return Err(err("holds no PEM certificate".into()));
    }
    Ok(certs)
}

fn parse_json<T: DeserializeOwned>(body: &str, url: &str) -> Result<T, ClientError> {
    serde_json::from_str(body).map_err(|e| ClientError::BadBody {
        url: url.to_string(),
        message: e.to_string(),
    })
}

/// The collector's `{"error": "..."}` message, else the start of the body as text.
fn error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        if let Some(m) = v.get("error").and_then(|m| m.as_str()) {
            return m.to_string();
        }
    }
    let text = body.trim();
    match text.char_indices().nth(QUOTED_BODY) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None if text.is_empty() => "(empty body)".into(),
        None => text.to_string(),
    }
}

/// An error and its causes, `outer: inner: innermost` (a TLS failure is only named in the innermost).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// `url` with `addr` in place of its host and port, without a trailing `/`.
fn named_by_address(url: &reqwest::Url, addr: std::net::SocketAddr) -> String {
    let path = url.path().trim_end_matches('/');
    format!("{}://{addr}{path}", url.scheme())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_trimmed() {
        assert_eq!(
            check_url("https://collector:9470/").unwrap(),
            "https://collector:9470"
        );
        assert_eq!(
            check_url("http://10.0.0.1:9470/commwatch").unwrap(),
            "http://10.0.0.1:9470/commwatch"
        );
        for bad in [
            "collector:9470",
            "ftp://collector",
            "http://",
            "http://c:1/?x=1",
            "",
        ] {
            let e = check_url(bad).unwrap_err();
            assert!(e.is_usage(), "{bad}: {e}");
        }
    }

    #[test]
    fn a_ca_file_needs_https_and_a_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not a certificate\n").unwrap();
        let with_ca = ClientOptions {
            ca_file: Some(ca.clone()),
            ..Default::default()
        };
        let e = Client::new("http://127.0.0.1:1", &with_ca).unwrap_err();
        assert!(e.to_string().contains("not https://"), "{e}");
        let e = Client::new("https://127.0.0.1:1", &with_ca).unwrap_err();
        assert!(
            matches!(&e, ClientError::CaFile { .. }) && e.is_usage(),
            "{e}"
        );
        let missing = ClientOptions {
            ca_file: Some(dir.path().join("absent.pem")),
            ..Default::default()
        };
        let e = Client::new("https://127.0.0.1:1", &missing).unwrap_err();
        assert!(e.to_string().contains("absent.pem"), "{e}");
    }

    #[test]
    fn an_address_to_connect_to_replaces_the_hosts_lookup() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap();
            let request = String::from_utf8_lossy(&buf[..n]).to_string();
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .unwrap();
            request
        });
        // `.invalid` never resolves (RFC 6761): only the given address can answer.
        let url = format!("http://shards.invalid:{}/prefix", addr.port());
        let options = ClientOptions {
            connect_to: Some(addr),
            ..Default::default()
        };
        let client = Client::new(&url, &options).unwrap();
        assert_eq!(client.name(), format!("http://{addr}/prefix"));
        assert_eq!(client.base_url(), url);
        let answer = client.get("/api/v1/nodes", &[]).unwrap();
        assert_eq!(answer.body, "ok");
        let request = server.join().unwrap();
        assert!(
            request.starts_with("GET /prefix/api/v1/nodes "),
            "{request}"
        );
        assert!(
            request
                .to_ascii_lowercase()
                .contains(&format!("host: shards.invalid:{}", addr.port())),
            "{request}"
        );
        let plain = Client::new(&url, &ClientOptions::default()).unwrap();
        assert_eq!(plain.name(), url);
    }

    #[test]
    fn plain_text_off_the_host_is_told_apart() {
        let off = |url: &str| {
            Client::new(url, &ClientOptions::default())
                .unwrap()
                .is_plaintext_off_host()
        };
        assert!(off("http://collector:9470"));
        assert!(off("http://10.1.2.3:9470"));
        assert!(!off("http://127.0.0.1:9470"));
        assert!(!off("http://[::1]:9470"));
        assert!(!off("http://localhost:9470"));
        assert!(!off("https://collector:9470"));
    }

    #[test]
    fn tokens_must_fit_a_header() {
        assert_eq!(check_token("s3cr3t-_.~").unwrap(), "s3cr3t-_.~");
        assert!(check_token("").is_err());
        assert!(check_token("two words").is_err());
        assert!(check_token("tab\there").is_err());
        assert!(check_token("é").is_err());
    }

    #[test]
    fn error_bodies_are_quoted_briefly() {
        assert_eq!(
            error_message(r#"{"error": "missing or wrong bearer token"}"#),
            "missing or wrong bearer token"
        );
        assert_eq!(
            error_message("Invalid query string\n"),
            "Invalid query string"
        );
        assert_eq!(error_message(""), "(empty body)");
        let long = "x".repeat(1000);
        assert_eq!(error_message(&long).chars().count(), QUOTED_BODY + 1);
    }

    /// A server on loopback answering every connection with `head` then `body_chunk` repeated `times` times
    /// (`None`: without end), `pause` between chunks; its address.
    fn serve_body(
        head: &'static str,
        body_chunk: &'static [u8],
        times: Option<usize>,
        pause: Duration,
    ) -> std::net::SocketAddr {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf);
                    if conn.write_all(head.as_bytes()).is_err() {
                        return;
                    }
                    let mut sent = 0;
                    while times.is_none_or(|t| sent < t) {
                        if conn.write_all(body_chunk).is_err() {
                            return;
                        }
                        sent += 1;
                        std::thread::sleep(pause);
                    }
                });
            }
        });
        addr
    }

    const ENDLESS: &str =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n";
    static CHUNK_64K: [u8; 64 << 10] = [b' '; 64 << 10];

    #[test]
    fn an_endless_body_ends_at_the_limit_with_an_error_naming_it() {
        let addr = serve_body(ENDLESS, &CHUNK_64K, None, Duration::ZERO);
        let c = Client::new(&format!("http://{addr}"), &ClientOptions::default())
            .unwrap()
            .with_body_limit(4 << 20);
        let e = c.get("/api/v1/nodes", &[]).unwrap_err();
        assert!(
            matches!(e, ClientError::TooLarge { limit, .. } if limit == 4 << 20),
            "{e}"
        );
        assert!(
            e.to_string().contains("over the limit of 4194304 bytes"),
            "{e}"
        );
        // Line by line too: the limit ends the scan.
        let found = c.scan_lines("/metrics", |_| Scan::Next).unwrap();
        assert_eq!(found, None);
    }

    #[test]
    fn an_announced_length_over_the_limit_is_refused_before_reading() {
        let head = "HTTP/1.1 200 OK\r\ncontent-length: 1073741824\r\nconnection: close\r\n\r\n";
        let addr = serve_body(head, &CHUNK_64K, Some(4), Duration::ZERO);
        let c = Client::new(&format!("http://{addr}"), &ClientOptions::default()).unwrap();
        let e = c.get("/api/v1/jobs", &[]).unwrap_err();
        assert!(
            e.to_string().contains("(1073741824 bytes announced)"),
            "{e}"
        );
        assert!(e.to_string().contains(&MAX_BODY_BYTES.to_string()), "{e}");
    }

    #[test]
    fn an_endless_error_body_is_read_only_in_its_first_kibibytes() {
        let head = "HTTP/1.1 500 Internal Server Error\r\nconnection: close\r\n\r\n";
        let addr = serve_body(head, b"oops oops oops oops\n", None, Duration::ZERO);
        let c = Client::new(&format!("http://{addr}"), &ClientOptions::default()).unwrap();
        let e = c.get("/healthz", &[]).unwrap_err();
        match &e {
            ClientError::Status {
                status, message, ..
            } => {
                assert_eq!(*status, 500);
                assert!(message.starts_with("oops oops"), "{message}");
                assert!(message.len() <= QUOTED_BODY + 4, "{}", message.len());
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn the_timeout_covers_a_body_that_trickles() {
        let addr = serve_body(ENDLESS, b" ", None, Duration::from_millis(50));
        let options = ClientOptions {
            timeout: Some(Duration::from_millis(700)),
            ..Default::default()
        };
        let c = Client::new(&format!("http://{addr}"), &options).unwrap();
        let e = c.get("/api/v1/nodes", &[]).unwrap_err();
        assert!(matches!(e, ClientError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("within 700ms"), "{e}");
    }

    #[test]
    fn a_closed_port_is_unreachable_not_usage() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = Client::new(&format!("http://127.0.0.1:{port}"), &Default::default()).unwrap();
        let e = c.get("/healthz", &[]).unwrap_err();
        assert!(matches!(e, ClientError::Unreachable { .. }), "{e}");
        assert!(!e.is_usage());
        assert!(
            e.to_string().contains(&format!("127.0.0.1:{port}/healthz")),
            "{e}"
        );
    }
}
