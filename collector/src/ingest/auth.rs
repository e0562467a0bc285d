//! Authentication of agents: TLS (optionally mutual) on the gRPC listener and a bearer token.
//!
//! - TLS: the collector presents `tls.cert_file`/`tls.key_file`; agents verify it against their CA. The
//!   handshake itself is [`super::tls`]'s.
//! - Mutual TLS (`tls.client_ca_file`): the TLS handshake refuses agents without a certificate chaining to that
//!   CA, and [`identities`] gives the node names the agent's certificate vouches for — its DNS subject
//!   alternative names, or, only in a certificate without that extension, its subject common name: the
//!   stream's `Hello.node` must be one of them, so a node cannot report as another.
//! - Token (`token_file`): every stream must carry `authorization: Bearer <token>` (the scheme in any case);
//!   compared in constant time by the [`TokenCheck`] interceptor, which [`super::server`] puts in front of the
//!   service.
//!
//! Secret files (the TLS key, the agents' token, the API token) that group or others may read or change are
//! warned about at every start ([`exposure_warning`]).

use std::path::Path;
use std::sync::Arc;

pub use commwatch_model::token::exposure_warning;
use commwatch_model::token::{read_token_file, TokenError};
use tonic::service::Interceptor;
use tonic::{Request, Status};
use tracing::{debug, warn};

use super::tls::{TlsAcceptor, TlsError};
use crate::telemetry::Health;

/// Errors of loading the TLS material or the token. Each message says its cause itself (none is repeated as a
/// `source()`).
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The token file is missing, unreadable, empty or not text (the message names the file and the cause).
    #[error("{0}")]
    Token(TokenError),
    /// A TLS file is missing, unreadable or holds nothing usable (the message names the file and the cause).
    #[error("{0}")]
    Tls(TlsError),
}

impl From<TokenError> for AuthError {
    fn from(e: TokenError) -> Self {
        AuthError::Token(e)
    }
}

impl From<TlsError> for AuthError {
    fn from(e: TlsError) -> Self {
        AuthError::Tls(e)
    }
}

/// What agents must present, loaded once at start (a bad file fails the start).
pub struct AgentAuth {
    /// The bearer token every stream must carry (`token_file`).
    pub token: Option<Arc<str>>,
    /// The listener's TLS (`[tls]`).
    pub tls: Option<TlsAcceptor>,
}

impl AgentAuth {
    /// Reads the token file and the TLS material the configuration names; warns about those others can read.
    pub fn load(config: &crate::config::CollectorConfig) -> Result<AgentAuth, AuthError> {
        let auth = AgentAuth {
            token: config.token_file.as_deref().map(load_token).transpose()?,
            tls: config.tls.as_ref().map(TlsAcceptor::load).transpose()?,
        };
        let secrets = [
            ("token file", config.token_file.as_deref()),
            ("TLS key", config.tls.as_ref().map(|t| t.key_file.as_path())),
        ];
        for (what, path) in secrets {
            if let Some(w) = path.and_then(|p| exposure_warning(what, p)) {
                warn!("{w}");
            }
        }
        Ok(auth)
    }
}

/// The gRPC interceptor that checks every stream's bearer token (when one is configured). A refusal is
/// counted (`rejected_streams{reason="unauthenticated"}`) and logged at debug only: a flood of bad tokens
/// must not flood the log.
#[derive(Clone)]
pub struct TokenCheck {
    token: Option<Arc<str>>,
    health: Health,
}

impl TokenCheck {
    pub fn new(token: Option<Arc<str>>, health: Health) -> TokenCheck {
        TokenCheck { token, health }
    }
}

impl Interceptor for TokenCheck {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(token) = &self.token else {
            return Ok(req);
        };
        match check_token(token, &req) {
            Ok(()) => Ok(req),
            Err(status) => {
                self.health
                    .rejected_streams
                    .with_label_values(&["unauthenticated"])
                    .inc();
                debug!(peer = ?req.remote_addr(), "agent stream without the right bearer token refused");
                Err(status)
            }
        }
    }
}

/// Reads the token file: its text with surrounding whitespace trimmed; an empty file is refused.
pub fn load_token(path: &Path) -> Result<Arc<str>, AuthError> {
    Ok(Arc::from(read_token_file(path)?))
}

/// Whether a presented token equals the expected one, compared in constant time.
pub fn token_matches(given: &str, expected: &str) -> bool {
    same(given.as_bytes(), expected.as_bytes())
}

/// Constant-time comparison (the length is not secret).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `authorization` header value in the `Bearer` scheme (the scheme matched in any case, as
/// HTTP authentication schemes are; the token without surrounding whitespace). `None` for another scheme.
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Checks the bearer token of a request; `UNAUTHENTICATED` without naming what was expected.
pub fn check_token<T>(token: &str, req: &Request<T>) -> Result<(), Status> {
    let given = req
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
        .unwrap_or("");
    if same(given.as_bytes(), token.as_bytes()) {
        Ok(())
    } else {
        Err(Status::unauthenticated("missing or wrong bearer token"))
    }
}

/// Node names an agent's client certificate vouches for: the DNS subject alternative names of the leaf
/// certificate, or — only when it has no subject alternative name extension — its subject common name. One
/// certificate is one identity: a certificate whose CN and SAN name different nodes speaks for its SAN only.
/// `None` when the connection has no client certificate (mTLS off).
pub fn identities<T>(req: &Request<T>) -> Option<Vec<String>> {
    let certs = req.peer_certs()?;
    let leaf = certs.first()?;
    Some(certificate_names(leaf.as_ref()))
}

/// [`identities`] of one DER certificate (empty when it cannot be parsed).
pub fn certificate_names(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        return san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                _ => None,
            })
            .collect();
    }
    cert.subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        let mut r = Request::new(());
        assert!(check_token("s3cret", &r).is_err());
        r.metadata_mut()
            .insert("authorization", "Bearer s3cret".parse().unwrap());
        assert!(check_token("s3cret", &r).is_ok());
        assert!(check_token("s3creT", &r).is_err());
        assert!(check_token("s3cret-longer", &r).is_err());
        for scheme in ["bearer", "BEARER", "Bearer  "] {
            r.metadata_mut()
                .insert("authorization", format!("{scheme} s3cret").parse().unwrap());
            assert!(check_token("s3cret", &r).is_ok(), "{scheme}");
        }
        r.metadata_mut()
            .insert("authorization", "Basic s3cret".parse().unwrap());
        assert_eq!(
            check_token("s3cret", &r).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
    }
}
