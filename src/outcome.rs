//! How a command ends, as its exit status. Every command: 0 success, 1 an error (the message on stderr as
//! `error: …`; for `status` and `findings`: no usable answer from the collector), 2 a usage error (clap's, or a
//! flag's file or value found wrong after parsing). `status` adds [`EXIT_CRITICAL`]; `diagnose` has its own 2
//! (some input unreadable).

use commwatch_diagnose::collector::ClientError;

/// A usage error: clap's code, kept for the mistakes found after parsing.
pub const EXIT_USAGE: u8 = 2;
/// `status`: the collector answered and at least one active root cause is critical.
pub const EXIT_CRITICAL: u8 = 3;

/// The exit statuses every command shares, as `--help` and the manual page say them.
pub const EXIT_STATUS_HELP: &str =
    "Exit status: 0 success; 1 an error (the message on stderr as `error: …`); \
                                    2 a usage error (a flag, or its value or file, is wrong).";
/// `status`'s exit statuses.
pub const STATUS_EXIT_HELP: &str = "Exit status: 0 the collector answered and no active root cause is \
                                    critical; 3 it answered and one is critical; 1 it cannot be reached or does \
                                    not answer as expected; 2 a usage error.";
/// `diagnose`'s exit statuses.
pub const DIAGNOSE_EXIT_HELP: &str = "Exit status: 0 the report was written and every input read; 2 the \
                                      report was written but some input could not be read at all; 1 an error \
                                      (no input, a bad flag, the report cannot be written).";

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag's value or file is wrong (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The collector could not be reached or did not answer as expected (exit 1).
    #[error("{}", collector_line(.0))]
    Collector(ClientError),
    /// Anything else (exit 1).
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// The HTTP client's wrappers around a cause, which say nothing to a person.
const CLIENT_WRAPPERS: &[&str] = &[
    "error sending request",
    "client error (Connect)",
    "client error (SendRequest)",
    "tcp connect error",
    "error trying to connect",
];

/// One line for a person. A collector that cannot be reached says where, the cause without the HTTP client's
/// wrappers ("Connection refused (os error 111)", "invalid peer certificate: UnknownIssuer"; not "error
/// sending request: client error (Connect): tcp connect error: …"), and what to check; the other errors as
/// they are.
fn collector_line(e: &ClientError) -> String {
    match e {
        ClientError::Unreachable { url, message } => {
            let parts: Vec<&str> = message
                .split(": ")
                .filter(|p| !CLIENT_WRAPPERS.contains(p))
                .collect();
            let cause = if parts.is_empty() {
                message.clone()
            } else {
                parts.join(": ")
            };
            format!(
                "cannot reach the collector at {url}: {cause} (is it running, and is --collector, or \
                 COMMWATCH_COLLECTOR, its HTTP address?)"
            )
        }
        other => other.to_string(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_collector_is_one_line_with_the_innermost_cause() {
        let e = CliError::Collector(ClientError::Unreachable {
            url: "http://127.0.0.1:1/healthz".into(),
            message: "error sending request: client error (Connect): tcp connect error: Connection refused \
                      (os error 111)"
                .into(),
        });
        assert_eq!(
            e.to_string(),
            "cannot reach the collector at http://127.0.0.1:1/healthz: Connection refused (os error 111) (is it \
             running, and is --collector, or COMMWATCH_COLLECTOR, its HTTP address?)"
        );
        assert_eq!(e.exit_code(), 1);
        let tls = CliError::Collector(ClientError::Unreachable {
            url: "https://c:9470/healthz".into(),
            message: "error sending request: client error (Connect): invalid peer certificate: UnknownIssuer"
                .into(),
        });
        assert!(
            tls.to_string()
                .starts_with("cannot reach the collector at https://c:9470/healthz: invalid peer certificate: UnknownIssuer ("),
            "{tls}"
        );
    }
}
