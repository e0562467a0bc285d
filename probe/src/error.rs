//! The probe's errors: each message says what went wrong and with whom.

use std::time::Duration;

use crate::wire::{Refusal, WireError};

/// Each message says its cause itself, so none is also a `source()`: a chain printer says it once.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot connect to {target}: {error}")]
    Connect {
        target: String,
        error: std::io::Error,
    },
    #[error("cannot bind to {addr}: {error}")]
    Bind { addr: String, error: std::io::Error },
    #[error("{target} declined the probe ({}): {detail}", reason.as_str())]
    Refused {
        target: String,
        reason: Refusal,
        detail: String,
    },
    #[error("probe protocol: {0}")]
    Wire(WireError),
    #[error("the peer broke the probe protocol: {0}")]
    Protocol(String),
    #[error("probe connection: {0}")]
    Io(std::io::Error),
    #[error("the peer did not answer within {0:?}")]
    Timeout(Duration),
    #[error("this build has no RDMA support: rebuild commwatch with the cargo feature `rdma`")]
    RdmaNotBuilt,
    #[error("no RDMA device on this host{0}")]
    NoRdmaDevice(String),
    #[error("{via} could not probe {to}: {detail}")]
    Relay {
        via: String,
        to: String,
        detail: String,
    },
    #[error("RDMA verbs: {0}")]
    Verbs(String),
}

impl From<WireError> for ProbeError {
    fn from(e: WireError) -> Self {
        ProbeError::Wire(e)
    }
}

impl From<std::io::Error> for ProbeError {
    fn from(e: std::io::Error) -> Self {
        ProbeError::Io(e)
    }
}

impl ProbeError {
    /// The refusal when the server declined.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            ProbeError::Refused { reason, .. } => Some(*reason),
            _ => None,
        }
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
        let error = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused by peer");
        let e = ProbeError::Connect {
            target: "h:1".into(),
            error,
        };
        assert_eq!(
            chain(&e).matches("refused by peer").count(),
            1,
            "{}",
            chain(&e)
        );
        let e = ProbeError::from(WireError::UnknownKind(9));
        let said = chain(&e);
        assert_eq!(said, "probe protocol: unknown frame kind 9");
        let e = ProbeError::from(std::io::Error::other("reset"));
        assert_eq!(chain(&e).matches("reset").count(), 1, "{}", chain(&e));
    }
}
