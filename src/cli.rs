//! The command line: the top-level parser, its global options and the list of commands. Each command's own
//! flags live with the command (`cmd/*.rs`); the names here and there are a contract (docs/API.md).

use clap::{Parser, Subcommand, ValueEnum};

use crate::cmd;

/// What `--version` prints after the name: `0.1.0 (rev abc1234, built 2026-12-01)`. The revision and date come
/// from the build script (git and `SOURCE_DATE_EPOCH`).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (rev ",
    env!("COMMWATCH_REVISION"),
    ", built ",
    env!("COMMWATCH_BUILD_DATE"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "commwatch",
    version = LONG_VERSION,
    about = "Watches the communication of distributed GPU training: which link, on which node, slows which job, and why.",
    after_help = crate::outcome::EXIT_STATUS_HELP
)]
pub struct Cli {
    /// Log filter (`info`, `debug`, `commwatch_agent=debug`, ...); also read from RUST_LOG.
    #[arg(long, global = true, env = "COMMWATCH_LOG", default_value = "info")]
    pub log: String,
    /// Log line format on stderr: `text` (colours only on a terminal) or `json` (one object per line).
    #[arg(
        long,
        global = true,
        env = "COMMWATCH_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// `--log-format`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the node agent: sample InfiniBand, NIC and host counters and stream them to a collector.
    #[command(after_help = crate::outcome::EXIT_STATUS_HELP)]
    Agent(cmd::agent::AgentArgs),
    /// Run the collector: ingest agents' streams, derive rates, export Prometheus metrics and the JSON API.
    #[command(after_help = crate::outcome::EXIT_STATUS_HELP)]
    Collector(cmd::collector::CollectorArgs),
    /// Run a simulated cluster through the real agent and collector code.
    #[command(after_help = crate::outcome::EXIT_STATUS_HELP)]
    Demo(crate::demo::DemoArgs),
    /// Offline diagnosis of nccl-tests results, NCCL debug logs, PyTorch profiler traces, Nsight exports.
    #[command(after_help = crate::outcome::DIAGNOSE_EXIT_HELP)]
    Diagnose(commwatch_diagnose::DiagnoseArgs),
    /// Bare-communication baselines kept by a collector.
    #[command(subcommand, after_help = crate::outcome::EXIT_STATUS_HELP)]
    Baseline(cmd::baseline::BaselineCommand),
    /// A running collector at a glance: health, nodes up and stale, jobs, active root causes.
    #[command(after_help = crate::outcome::STATUS_EXIT_HELP)]
    Status(cmd::status::StatusArgs),
    /// A running collector's findings, filtered.
    #[command(after_help = crate::outcome::EXIT_STATUS_HELP)]
    Findings(cmd::findings::FindingsArgs),
    /// Active probes between two hosts: bare bandwidth both ways and latency, over TCP or RDMA.
    #[command(subcommand)]
    Probe(cmd::probe::ProbeCommand),
    /// Print a shell completion script (source it, or install it where the shell looks).
    Completions(cmd::completions::CompletionsArgs),
    /// Print the manual page (roff), or write one page per command into a directory.
    Man(cmd::man::ManArgs),
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_version_names_the_revision_and_the_date() {
        let v = LONG_VERSION;
        assert!(v.starts_with(env!("CARGO_PKG_VERSION")), "{v}");
        let (_, rest) = v.split_once(" (rev ").expect(v);
        let (rev, date) = rest.split_once(", built ").expect(v);
        assert!(
            rev == "unknown" || (rev.len() >= 7 && rev.chars().all(|c| c.is_ascii_hexdigit())),
            "{v}"
        );
        let date = date.strip_suffix(')').expect(v);
        assert_eq!(date.len(), 10, "{v}");
        assert!(date.chars().enumerate().all(|(i, c)| if i == 4 || i == 7 {
            c == '-'
        } else {
            c.is_ascii_digit()
        }));
    }
}
