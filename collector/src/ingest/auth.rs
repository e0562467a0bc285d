//! Authentication of agents: TLS (optionally mutual) on the gRPC listener and a bearer token.
//!
//! - TLS: the collector presents `tls.cert_file`/`tls.key_file`; agents verify it against their CA.
//! - Mutual TLS (`tls.client_ca_file`): the TLS handshake refuses agents without a certificate chaining to that
//!   CA, and [`identities`] gives the names in the agent's certificate (subject common name and DNS subject
//!   alternative names): the stream's `Hello.node` must be one of them, so a node cannot report as another.
//! - Token (`token_file`): every stream must carry `authorization: Bearer <token>`; compared in constant time
//!   by the [`TokenCheck`] interceptor, which [`super::server`] puts in front of the service.

use std::path::Path;
use std::sync::Arc;

use commwatch_model::token::{read_token_file, TokenError};
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Status};
use tracing::debug;

use crate::telemetry::Health;

/// Errors of loading the TLS material or the token.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The token file is missing, unreadable, empty or not text.
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error("TLS configuration: {0}")]
    Tls(String),
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, AuthError> {
    std::fs::read(path).map_err(|source| AuthError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// What agents must present, loaded once at start (a bad file fails the start).
pub struct AgentAuth {
    /// The bearer token every stream must carry (`token_file`).
    pub token: Option<Arc<str>>,
    /// The listener's TLS configuration (`[tls]`).
    pub tls: Option<ServerTlsConfig>,
}

impl AgentAuth {
    /// Reads the token file and the TLS material the configuration names.
    pub fn load(config: &crate::config::CollectorConfig) -> Result<AgentAuth, AuthError> {
        Ok(AgentAuth {
            token: config.token_file.as_deref().map(load_token).transpose()?,
            tls: config.tls.as_ref().map(server_tls).transpose()?,
        })
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

/// Builds tonic's server TLS configuration from the config's files.
pub fn server_tls(cfg: &crate::config::TlsConfig) -> Result<ServerTlsConfig, AuthError> {
    let identity = Identity::from_pem(
        read("TLS certificate", &cfg.cert_file)?,
        read("TLS key", &cfg.key_file)?,
    );
    let mut tls = ServerTlsConfig::new().identity(identity);
    if let Some(ca) = &cfg.client_ca_file {
        tls = tls.client_ca_root(Certificate::from_pem(read("client CA", ca)?));
    }
    Ok(tls)
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

/// Checks the bearer token of a request; `UNAUTHENTICATED` without naming what was expected.
pub fn check_token<T>(token: &str, req: &Request<T>) -> Result<(), Status> {
    let given = req
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if same(given.as_bytes(), token.as_bytes()) {
        Ok(())
    } else {
        Err(Status::unauthenticated("missing or wrong bearer token"))
    }
}

/// Names an agent's client certificate vouches for: the subject common name and the DNS subject alternative
/// names of the leaf certificate. `None` when the connection has no client certificate (mTLS off).
pub fn identities<T>(req: &Request<T>) -> Option<Vec<String>> {
    let certs = req.peer_certs()?;
    let leaf = certs.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                names.push(d.to_string());
            }
        }
    }
    Some(names)
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
        r.metadata_mut()
            .insert("authorization", "Basic s3cret".parse().unwrap());
        assert_eq!(
            check_token("s3cret", &r).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
    }
}
