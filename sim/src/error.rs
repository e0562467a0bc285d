//! Errors of the simulated cluster.

use std::path::PathBuf;

/// Everything that can go wrong while building or updating a simulated cluster.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A [`crate::ClusterSpec`] field holds a value the model cannot use.
    #[error("invalid cluster spec: {field}: {reason}")]
    InvalidSpec {
        /// The offending field, as named in `ClusterSpec`.
        field: &'static str,
        /// Why the value was refused.
        reason: String,
    },
    /// A scenario name that is not one of [`crate::Scenario::NAMES`] (or `constant:TX:RX`).
    #[error("unknown scenario {name:?}; expected one of: {expected}")]
    UnknownScenario {
        /// The name as given.
        name: String,
        /// The accepted names, comma separated.
        expected: String,
    },
    /// A variant name that is not one of [`crate::Variant::NAMES`].
    #[error("unknown variant {name:?}; expected one of: {expected}")]
    UnknownVariant {
        /// The name as given.
        name: String,
        /// The accepted names, comma separated.
        expected: String,
    },
    /// A node, HCA or netdev index outside the cluster.
    #[error("no such {what} {index} (cluster has {count})")]
    OutOfRange {
        /// "node", "hca" or "gpu".
        what: &'static str,
        /// The index asked for.
        index: usize,
        /// How many there are.
        count: usize,
    },
    /// Creating, opening or writing a file of the fake sysfs tree failed.
    #[error("{op} {path}: {error}")]
    Io {
        /// What was attempted ("create dir", "open", "write", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
}

impl SimError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        SimError::Io {
            op,
            path: path.into(),
            error,
        }
    }

    pub(crate) fn spec(field: &'static str, reason: impl Into<String>) -> Self {
        SimError::InvalidSpec {
            field,
            reason: reason.into(),
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
        let e = SimError::io("write", "/sys/x", std::io::Error::other("disk gone"));
        assert_eq!(chain(&e), "write /sys/x: disk gone");
    }
}
