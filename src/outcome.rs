//! How a command ends, as its exit status. Every command: 0 success, 1 an error (the message on stderr as
//! `error: …`; for `status` and `findings`: no usable answer from the collector), 2 a usage error (clap's, or a
//! flag's file or value found wrong after parsing). `status` adds [`EXIT_CRITICAL`]; `diagnose` has its own 2
//! (some input unreadable).

use commwatch_diagnose::collector::ClientError;

/// A usage error: clap's code, kept for the mistakes found after parsing.
pub const EXIT_USAGE: u8 = 2;
/// `status`: the collector answered and at least one active root cause is critical.
pub const EXIT_CRITICAL: u8 = 3;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag's value or file is wrong (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The collector could not be reached or did not answer as expected (exit 1).
    #[error(transparent)]
    Collector(ClientError),
    /// Anything else (exit 1).
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::Collector(e) if e.is_usage() => EXIT_USAGE,
            CliError::Collector(_) | CliError::Other(_) => 1,
        }
    }
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> CliError {
        CliError::Collector(e)
    }
}
