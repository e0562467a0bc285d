//! The probe's errors: each message says what went wrong and with whom.

use std::time::Duration;

use crate::wire::{Refusal, WireError};

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot connect to {target}: {source}")]
    Connect {
        target: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot bind to {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{target} declined the probe ({}): {detail}", reason.as_str())]
    Refused {
        target: String,
        reason: Refusal,
        detail: String,
    },
    #[error("probe protocol: {0}")]
    Wire(#[from] WireError),
    #[error("the peer broke the probe protocol: {0}")]
    Protocol(String),
    #[error("probe connection: {0}")]
    Io(#[from] std::io::Error),
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

impl ProbeError {
    /// The refusal when the server declined.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            ProbeError::Refused { reason, .. } => Some(*reason),
            _ => None,
        }
    }
}
