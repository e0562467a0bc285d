//! `commwatch`: the command line. Thin clap wrappers over the library crates, dispatched here:
//! - [`cli`]: the parser, global options and the list of commands; [`cmd`]: each command's flags and run;
//! - [`client`]: the flags and client of the commands that ask a running collector, [`api`]: its JSON as
//!   they read it; [`outcome`]: exit statuses; [`logging`]: stderr logs; [`signal`]: Ctrl-C and SIGTERM;
//! - [`demo`]: the demo's orchestration.

mod api;
mod cli;
mod client;
mod cmd;
mod demo;
mod logging;
mod outcome;
mod signal;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use commwatch_model::text::EscapedLines;

use cli::{Cli, Command};
use outcome::CliError;
pub(crate) use signal::shutdown_signal;

/// jemalloc, not glibc's malloc: the collector's passes allocate and free on one thread what the ingest's
/// threads touch beside them, and glibc's arenas spent about a sixth of the collector's CPU at 400 demo nodes in
/// `_int_malloc`, `malloc_consolidate` and `unlink_chunk` (BENCHMARKS.md, "The binary's allocator").
/// mimalloc was tried and left: at load 11–15 its collector fell behind in 5 of 5 runs (glibc's 3 of 5,
/// jemalloc's none).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The commands that only print a report or a file and exit (no server, no socket of their own to keep up).
fn prints_only(command: &Command) -> bool {
    matches!(
        command,
        Command::Status(_)
            | Command::Findings(_)
            | Command::Baseline(_)
            | Command::Completions(_)
            | Command::Man(_)
            | Command::Diagnose(_)
    )
}

/// Restores SIGPIPE's default action, so that a report written into a pipe whose reader went away
/// (`commwatch findings … | head`) ends the process quietly, as Unix tools do, instead of panicking in
/// `println!`. Only for [`prints_only`] commands: the servers keep Rust's default (ignored), where a peer that
/// closed its socket is an error to handle, not a signal that ends the process.
fn quiet_on_closed_pipe() {
    // SAFETY: called once at start, before any thread is spawned; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(&cli.log, cli.log_format);
    // `commwatch_build_info` on both `/metrics`: the revision is known to this crate's build only.
    let (version, revision) = (env!("CARGO_PKG_VERSION"), env!("COMMWATCH_REVISION"));
    commwatch_collector::telemetry::set_build_info(version, revision);
    commwatch_agent::telemetry::set_build_info(version, revision);
    if prints_only(&cli.command) {
        quiet_on_closed_pipe();
    }
    let result = match cli.command {
        Command::Status(args) => cmd::status::run(&args),
        Command::Findings(args) => cmd::findings::run(&args).map(|()| 0),
        Command::Baseline(c) => cmd::baseline::run(&c).map(|()| 0),
        Command::Probe(c) => cmd::probe::run(&c).map(|()| 0).map_err(CliError::from),
        Command::Completions(args) => {
            cmd::completions::write(&args, Cli::command(), &mut std::io::stdout().lock());
            Ok(0)
        }
        Command::Man(args) => cmd::man::run(&args, Cli::command())
            .map(|()| 0)
            .map_err(CliError::from),
        Command::Diagnose(args) => match commwatch_diagnose::run(&args) {
            Ok(code) => Ok(code.clamp(0, 255) as u8),
            Err(e) => Err(CliError::Other(e.into())),
        },
        command => run_async(command).map(|()| 0).map_err(CliError::from),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            match &e {
                // The error's context chain, as these commands always printed it, each cause said once.
                // A peer's error body or a file's text may be part of the message: no control character of
                // theirs reaches the terminal (`commwatch_model::text`).
                CliError::Other(inner) => eprintln!("error: {}", EscapedLines(&said_once(inner))),
                other => eprintln!("error: {}", EscapedLines(&other.to_string())),
            }
            ExitCode::from(e.exit_code())
        }
    }
}

/// An error and its causes joined by `: ` (what `{:#}` prints), leaving out a cause that an error before it
/// already says: an error whose message includes its source's would otherwise print it twice (`X: X`).
fn said_once(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let m = cause.to_string();
        if m.is_empty() || out.contains(&m) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&m);
    }
    out
}

/// The long-running commands (agent, collector, demo): the collector and the demo in a multi-threaded
/// runtime; the agent in a runtime on its own thread alone. Its async work is one stream, its own `/metrics`
/// and the step-marker sockets (the sampling and the file following run on threads of their own): a worker
/// per CPU (hundreds on a GPU node) would only add threads to wake.
fn run_async(command: Command) -> anyhow::Result<()> {
    let mut builder = match command {
        Command::Agent(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let rt = builder
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    rt.block_on(async move {
        match command {
            Command::Agent(a) => cmd::agent::run(a).await,
            Command::Collector(a) => cmd::collector::run(a).await,
            Command::Demo(a) => demo::run(a).await,
            other => unreachable!("{other:?} is not a long-running command"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::said_once;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read token file /t: {source}")]
    struct Repeats {
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn a_cause_is_said_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = anyhow::Error::new(Repeats { source: io }).context("collector");
        assert_eq!(
            said_once(&e),
            "collector: cannot read token file /t: entity not found"
        );
        let plain = anyhow::anyhow!("outer").context("top");
        assert_eq!(said_once(&plain), "top: outer");
    }
}
