//! Logs on stderr: `text` lines, coloured only when stderr is a terminal (never escape codes in a file, a pipe
//! or journald) and `NO_COLOR` is unset; or `json`, one object per line with the fields flattened, for log
//! collectors.

use std::io::IsTerminal;

use crate::cli::LogFormat;

/// Installs the global subscriber. `filter` is the `--log` value; `RUST_LOG`, when it parses, wins over it.
pub fn init(filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(filter))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(colour(std::env::var_os("NO_COLOR")))
            .init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
}

/// Whether text logs are coloured: stderr is a terminal and `NO_COLOR` is unset or empty (no-color.org).
fn colour(no_color: Option<std::ffi::OsString>) -> bool {
    no_color.is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_turns_colours_off() {
        assert!(!colour(Some("1".into())));
    }
}
