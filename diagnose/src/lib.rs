//! `commwatch diagnose`: offline analysis of nccl-tests results, NCCL debug logs, PyTorch profiler (Kineto)
//! traces and Nsight Systems exports, organised by the four steps of the method (bare baselines, the timeline,
//! the costly collectives, link and algorithm), ending in the key judgment: the link, or how training uses it
//! (overlap, synchronisation, contention).
//!
//! Module map, in the order data flows; a module uses only modules listed before it:
//! - [`input`]: the one gate of the text inputs read whole, refusing a file over its size limit;
//! - [`lines`]: input lines made plain (launcher prefixes, timestamps, colours) and the [`lines::Cite`] that
//!   quotes one;
//! - [`progress`]: the progress bar for long inputs; [`timeline`]: one rank's GPU timeline, which both trace
//!   readers produce, with the kernel classification; [`units`]: quantities written for people;
//! - parsers, one per input kind: [`nccl_tests`], [`nccl_log`], [`kineto`] (streaming), [`nsys`], and
//!   [`kernels`] (`nsys stats` kernel tables, and kernel time summed from a timeline),
//!   [`collector`] (a running collector's inventory: link rate, interface roles), [`inspector`] (NCCL
//!   Inspector dump files and their per-collective summary);
//! - [`analysis`]: bandwidth curves, overlap per step, stragglers (pure functions of parser output);
//! - [`analysed`]: each input file with its analysis; [`link`]: the fabric link the baselines are compared
//!   with, and the share of it a baseline must reach;
//! - [`findings`]: one rule per file over the analysed inputs, and the [`findings::Finding`] type;
//! - [`report`]: assembly from paths to a [`Report`], the verdict, the JSON shape and the text and HTML
//!   renderers;
//! - [`baseline`]: a nccl-tests result summarised as the baseline `commwatch baseline import` sends to a
//!   collector (parsers and analysis only; nothing else uses it);
//! - this module: the command's flags and [`run`].

pub mod analysed;
pub mod analysis;
pub mod baseline;
pub mod collector;
pub mod findings;
pub mod input;
pub mod inspector;
pub mod kernels;
pub mod kineto;
pub mod lines;
pub mod link;
pub mod nccl_log;
pub mod nccl_tests;
pub mod nsys;
pub mod progress;
pub mod report;
pub mod timeline;
pub mod units;

use std::io::Write;
use std::path::PathBuf;

pub use baseline::{parse_baseline, Baseline};
pub use report::{render_json, render_text, Inputs, Report};

/// Output format of the report.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
    Html,
}

/// `commwatch diagnose` flags; their names are part of the command line's contract.
#[derive(clap::Args, Debug, Clone)]
pub struct DiagnoseArgs {
    /// nccl-tests or rccl-tests output (text of any generation, the JSON of `-J`, rccl-tests' JSON lines);
    /// repeatable.
    #[arg(long = "nccl-tests", value_name = "F")]
    pub nccl_tests: Vec<PathBuf>,
    /// NCCL or RCCL debug log (NCCL_DEBUG=INFO), of any generation; repeatable.
    #[arg(long = "nccl-log", value_name = "F")]
    pub nccl_log: Vec<PathBuf>,
    /// PyTorch profiler trace (.json, .json.gz) or a directory of them, one per rank; repeatable.
    #[arg(long = "trace", value_name = "F|DIR")]
    pub trace: Vec<PathBuf>,
    /// NCCL Inspector dump directory (or one dump file), as `NCCL_INSPECTOR_DUMP_DIR` names it; repeatable.
    #[arg(long = "nccl-inspector", value_name = "DIR")]
    pub nccl_inspector: Vec<PathBuf>,
    /// Nsight Systems export (`nsys export --type sqlite`), or an `nsys stats` kernel or NVTX summary table
    /// (text or CSV); repeatable.
    #[arg(long = "nsys", value_name = "F")]
    pub nsys: Vec<PathBuf>,
    /// A running collector: its inventory gives the fabric link rate when --link-rate is absent.
    #[arg(long = "collector", value_name = "URL")]
    pub collector: Option<String>,
    /// PEM CA that signed the collector's (or its proxy's) certificate, with an https:// --collector.
    #[arg(long = "tls-ca", value_name = "FILE", requires = "collector")]
    pub tls_ca: Option<PathBuf>,
    /// File holding the collector's API token, sent with the inventory request.
    #[arg(long = "api-token-file", value_name = "FILE", requires = "collector")]
    pub api_token_file: Option<PathBuf>,
    /// Theoretical rate of one fabric link in GB/s (1e9 bytes/s), e.g. 25 for 200 Gb/s HDR InfiniBand.
    #[arg(long = "link-rate", value_name = "GBPS")]
    pub link_rate: Option<f64>,
    /// Fabric NICs per node (a node's capacity is NICs x link rate); default: the collector's inventory, else
    /// the devices the NCCL log lists, else 1.
    #[arg(long = "nics-per-node", value_name = "N")]
    pub nics_per_node: Option<u32>,
    /// Report format.
    #[arg(long = "format", value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Write the report here instead of stdout.
    #[arg(long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum DiagnoseError {
    #[error("nothing to diagnose: give at least one of --nccl-tests, --nccl-log, --trace, --nsys, --nccl-inspector")]
    NoInputs,
    #[error("--link-rate must be a positive number of GB/s, got {0}")]
    InvalidLinkRate(f64),
    #[error("--nics-per-node must be at least 1")]
    InvalidNicsPerNode,
    /// The cause is in the message, not in `source()`, so a chain printer says it once.
    #[error("cannot write the report to {path}: {error}")]
    Output { path: String, error: std::io::Error },
}

/// Exit code when the report was written and every input was read.
pub const EXIT_OK: i32 = 0;
/// Exit code when the report was written but some input could not be read at all (see its `inputs`).
pub const EXIT_INPUT_ERRORS: i32 = 2;

/// Runs `commwatch diagnose`: reads the inputs, writes the report, returns the exit code.
pub fn run(args: &DiagnoseArgs) -> Result<i32, DiagnoseError> {
    if args.nccl_tests.is_empty()
        && args.nccl_log.is_empty()
        && args.trace.is_empty()
        && args.nsys.is_empty()
        && args.nccl_inspector.is_empty()
    {
        return Err(DiagnoseError::NoInputs);
    }
    if let Some(rate) = args.link_rate {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(DiagnoseError::InvalidLinkRate(rate));
        }
    }
    if args.nics_per_node == Some(0) {
        return Err(DiagnoseError::InvalidNicsPerNode);
    }
    // Fetched even with --link-rate: the inventory also tells which interfaces are management NICs.
    let client = args
        .collector
        .as_deref()
        .map(|url| collector_client(url, args));
    let inventory = client.as_ref().map(|c| {
        let c = c.as_ref().map_err(String::clone)?;
        collector::fetch_inventory_with(c).map_err(|e| e.to_string())
    });
    // Step 1's bare links: the collector's own probes of each pair of nodes.
    let bare_links = client.as_ref().map(|c| {
        let c = c.as_ref().map_err(String::clone)?;
        collector::probes::fetch_probes_with(c).map_err(|e| e.to_string())
    });
    let inputs = Inputs {
        nccl_tests: args.nccl_tests.clone(),
        nccl_logs: args.nccl_log.clone(),
        traces: args.trace.clone(),
        nsys: args.nsys.clone(),
        nccl_inspector: args.nccl_inspector.clone(),
        link_rate_gbps: args.link_rate,
        nics_per_node: args.nics_per_node,
        inventory,
        bare_links,
    };
    let report = Report::build(&inputs, &progress::Progress::auto());
    let body = match args.format {
        Format::Text => render_text(&report),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&render_json(&report)).unwrap_or_default();
            s.push('\n');
            s
        }
        Format::Html => report::html::render_html(&report),
    };
    let write = |path: &str, res: std::io::Result<()>| {
        res.map_err(|error| DiagnoseError::Output {
            path: path.to_string(),
            error,
        })
    };
    match &args.output {
        Some(path) => write(&path.display().to_string(), std::fs::write(path, body))?,
        None => write(
            "stdout",
            std::io::stdout().lock().write_all(body.as_bytes()),
        )?,
    }
    Ok(if report.has_input_errors() {
        EXIT_INPUT_ERRORS
    } else {
        EXIT_OK
    })
}

/// The client of the collector, with the CA and the token the flags name.
fn collector_client(url: &str, args: &DiagnoseArgs) -> Result<collector::Client, String> {
    let token = match &args.api_token_file {
        Some(path) => {
            Some(commwatch_model::token::read_token_file(path).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let options = collector::ClientOptions {
        ca_file: args.tls_ca.clone(),
        token,
        timeout: None,
        connect_to: None,
    };
    collector::Client::new(url, &options).map_err(|e| e.to_string())
}
