//! The four-step report: reads every input, runs the analyses and the findings, reaches the verdict and
//! assembles the [`Report`] that the renderers show.
//!
//! - this module: assembly, from [`Inputs`] (paths and the link) to a [`Report`];
//! - [`model`]: the report's data and the JSON shape ([`render_json`] is serde of that shape);
//! - [`verdict`]: the key judgment, the report's conclusion;
//! - [`inspector`]: the NCCL Inspector section (steps 3 and 4);
//! - [`text`]: the terminal report; [`html`]: the self-contained HTML page;
//! - [`scaling`], [`units`]: the scaling table and byte sizes, which more than one part shows.

pub mod html;
pub mod inspector;
pub mod model;
pub mod scaling;
pub mod text;
pub mod units;
pub mod verdict;

use std::path::PathBuf;

pub use self::model::{render_json, worst_severity, Conclusion, InputRecord, Report};
pub use self::text::render_text;

use crate::analysed::{LogReport, TestReport, TraceReport};
use crate::analysis::bandwidth::summarize;
use crate::analysis::mixing;
use crate::analysis::overlap;
use crate::analysis::straggler::{self, StragglerAnalysis};
use crate::collector::Inventory;
use crate::findings::{self, Context};
use crate::link::LinkInfo;
use crate::progress::Progress;
use crate::timeline::Timeline;

/// What to read.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub nccl_tests: Vec<PathBuf>,
    pub nccl_logs: Vec<PathBuf>,
    /// Files or directories of Kineto traces.
    pub traces: Vec<PathBuf>,
    pub nsys: Vec<PathBuf>,
    /// NCCL Inspector dump directories or files.
    pub nccl_inspector: Vec<PathBuf>,
    /// Fabric link rate, GB/s (1e9 bytes/s).
    pub link_rate_gbps: Option<f64>,
    /// Fabric NICs per node (`--nics-per-node`); else the inventory's or the NCCL logs' count.
    pub nics_per_node: Option<u32>,
    /// Inventory fetched from a collector, or why it could not be.
    pub inventory: Option<Result<Inventory, String>>,
    /// Bare links from the collector's probes (`GET /api/v1/probes`), or why they could not be read.
    pub bare_links: Option<Result<Vec<crate::collector::probes::BareLink>, String>>,
}

/// One rank's timeline as read: (file, `kineto` or `nsys`, timeline).
type ReadTimeline = (String, &'static str, Timeline);

impl Report {
    /// Reads every input (a bad one is recorded and the rest still analysed) and builds the report.
    pub fn build(inputs: &Inputs, progress: &Progress) -> Report {
        let mut records = Vec::new();
        let mut tests = read_nccl_tests(&inputs.nccl_tests, &mut records);
        tests.extend(tests_in_logs(&inputs.nccl_logs, &inputs.nccl_tests));
        let mut logs = read_nccl_logs(&inputs.nccl_logs, &mut records);
        logs.extend(logs_in_test_outputs(&inputs.nccl_tests, &inputs.nccl_logs));
        let mut timelines = read_kineto(&inputs.traces, progress, &mut records);
        let mut kernel_summaries: Vec<crate::kernels::KernelSummary> = timelines
            .iter()
            .map(|(file, _, tl)| crate::kernels::from_timeline(file, tl))
            .collect();
        let (nsys, tables) = read_nsys(&inputs.nsys, &mut records);
        timelines.extend(nsys);
        kernel_summaries.extend(tables);
        // A trace without a rank of its own is numbered by its place among the traces.
        let traces: Vec<TraceReport> = timelines
            .iter()
            .enumerate()
            .map(|(i, (file, source, tl))| TraceReport {
                file: file.clone(),
                source,
                nccl_version: tl.nccl_version.clone(),
                analysis: overlap::analyze(tl, i as u32),
            })
            .collect();
        let ranked: Vec<(u32, &Timeline)> = timelines
            .iter()
            .zip(&traces)
            .map(|((_, _, tl), t)| (t.analysis.rank, tl))
            .collect();
        // Ranks of different jobs are not compared with each other (the mixed_inputs finding says so).
        let jobs: Vec<(u32, Option<u32>)> = traces
            .iter()
            .map(|t| (t.analysis.rank, t.analysis.world_size))
            .collect();
        let straggler = match mixing::trace_jobs(&jobs) {
            Some(_) => None,
            None => straggler::analyze(&ranked),
        };
        let log_nics = logs.iter().filter_map(|l| l.log.nics_per_node).max();
        let link = LinkInfo::new(inputs.link_rate_gbps, inputs.inventory.as_ref())
            .with_nics(inputs.nics_per_node, log_nics);
        let inspector_reads = read_inspector(&inputs.nccl_inspector, &mut records);
        let mut report = Report::assemble(
            records,
            link,
            tests,
            logs,
            traces,
            straggler,
            kernel_summaries,
        );
        report.nccl_inspector =
            inspector::build(&inspector_reads, &report.link, &report.nccl_tests);
        report.bare_links = inputs
            .bare_links
            .as_ref()
            .map(crate::collector::probes::BareLinks::from_fetch);
        quote_cites(&mut report);
        report
    }

    /// Builds the findings and the conclusion from analysed parts.
    pub fn assemble(
        inputs: Vec<InputRecord>,
        link: LinkInfo,
        nccl_tests: Vec<TestReport>,
        nccl_logs: Vec<LogReport>,
        traces: Vec<TraceReport>,
        straggler: Option<StragglerAnalysis>,
        kernel_summaries: Vec<crate::kernels::KernelSummary>,
    ) -> Report {
        let ctx = Context {
            kernels: &kernel_summaries,
            tests: &nccl_tests,
            logs: &nccl_logs,
            traces: &traces,
            straggler: straggler.as_ref(),
            link: &link,
        };
        let findings = findings::evaluate(&ctx);
        let conclusion = verdict::conclude(&ctx, &findings);
        Report {
            inputs,
            link,
            nccl_tests,
            nccl_logs,
            traces,
            straggler,
            findings,
            conclusion,
            nccl_inspector: None,
            bare_links: None,
            kernel_summaries,
        }
    }
}

/// Fills the text of every cited line that a rule named by number only ([`crate::lines::Cite::at`]), reading
/// each file once; a line the file no longer has is dropped rather than quoted wrong.
fn quote_cites(report: &mut Report) {
    let mut files: std::collections::BTreeMap<String, Option<Vec<String>>> = Default::default();
    let mut quote = |cites: &mut Vec<crate::lines::Cite>| {
        cites.retain_mut(|c| {
            if !c.text.is_empty() {
                return true;
            }
            let Some(n) = c.line else {
                return false;
            };
            let lines = files.entry(c.file.clone()).or_insert_with(|| {
                let text = crate::input::read_text(std::path::Path::new(&c.file)).ok()?;
                Some(text.lines().map(str::to_string).collect())
            });
            match lines.as_ref().and_then(|l| l.get(n.wrapping_sub(1))) {
                Some(text) => {
                    *c = crate::lines::Cite::new(&c.file, n, text);
                    true
                }
                None => false,
            }
        });
    };
    for f in &mut report.findings {
        quote(&mut f.cites);
    }
    quote(&mut report.conclusion.cites);
}

/// Every test of every nccl-tests file, with its curve summary; a file with warnings is `partial`.
fn read_nccl_tests(paths: &[PathBuf], records: &mut Vec<InputRecord>) -> Vec<TestReport> {
    let mut tests = Vec::new();
    for path in paths {
        match crate::nccl_tests::parse_file(path) {
            Ok(f) => {
                let mut rec = InputRecord::ok(path, "nccl_tests");
                rec.skipped = f.skipped_lines as u64;
                rec.warnings = f
                    .warnings
                    .iter()
                    .map(|w| format!("{}:{}: {}", path.display(), w.line, w.message))
                    .collect();
                if !rec.warnings.is_empty() {
                    rec.status = "partial";
                }
                records.push(rec);
                for test in f.tests {
                    tests.push(TestReport {
                        file: path.display().to_string(),
                        summary: summarize(&test),
                        test,
                    });
                }
            }
            Err(e) => records.push(InputRecord::failed(path, "nccl_tests", e)),
        }
    }
    tests
}

fn read_nccl_logs(paths: &[PathBuf], records: &mut Vec<InputRecord>) -> Vec<LogReport> {
    let mut logs = Vec::new();
    for path in paths {
        match crate::nccl_log::parse_file(path) {
            Ok(log) => {
                records.push(InputRecord::ok(path, "nccl_log"));
                logs.push(LogReport {
                    file: path.display().to_string(),
                    log,
                });
            }
            Err(e) => records.push(InputRecord::failed(path, "nccl_log", e)),
        }
    }
    logs
}

/// The NCCL log lines an nccl-tests output carries (a run with `NCCL_DEBUG=INFO`), read as that run's log
/// when they say something about the network, the ranks or the transports. A file also given with
/// `--nccl-log` is read there, not twice.
fn logs_in_test_outputs(paths: &[PathBuf], given_logs: &[PathBuf]) -> Vec<LogReport> {
    paths
        .iter()
        .filter(|p| !given_logs.contains(p))
        .filter_map(|path| {
            let log = crate::nccl_log::parse_file(path).ok()?;
            let telling = log.version.is_some()
                || log.network.is_some()
                || !log.interfaces.is_empty()
                || !log.transports.is_empty()
                || log.nranks.is_some();
            telling.then(|| LogReport {
                file: path.display().to_string(),
                log,
            })
        })
        .collect()
}

/// The nccl-tests results a log carries (the log of an nccl-tests run, given with `--nccl-log`): its runs
/// with rows. A file also given with `--nccl-tests` is read there, not twice; a failure is the log's own
/// finding already.
fn tests_in_logs(paths: &[PathBuf], given_tests: &[PathBuf]) -> Vec<TestReport> {
    paths
        .iter()
        .filter(|p| !given_tests.contains(p))
        .filter_map(|path| {
            let f = crate::nccl_tests::parse_file(path).ok()?;
            Some(
                f.tests
                    .into_iter()
                    .filter(|t| !t.rows.is_empty())
                    .map(|test| TestReport {
                        file: path.display().to_string(),
                        summary: summarize(&test),
                        test,
                    })
                    .collect::<Vec<_>>(),
            )
        })
        .flatten()
        .collect()
}

/// Every Kineto trace, a directory standing for the traces in it; a trace cut short is `partial`.
fn read_kineto(
    args: &[PathBuf],
    progress: &Progress,
    records: &mut Vec<InputRecord>,
) -> Vec<ReadTimeline> {
    let mut timelines = Vec::new();
    for arg in args {
        let files = match crate::kineto::trace_files(arg) {
            Ok(f) if !f.is_empty() => f,
            Ok(_) => {
                records.push(InputRecord::failed(
                    arg,
                    "trace",
                    "no .json or .json.gz trace files in this directory",
                ));
                continue;
            }
            Err(e) => {
                records.push(InputRecord::failed(
                    arg,
                    "trace",
                    format!("{}: {e}", arg.display()),
                ));
                continue;
            }
        };
        for path in files {
            match crate::kineto::parse_file(&path, progress) {
                Ok(t) => {
                    let mut rec = InputRecord::ok(&path, "trace");
                    rec.skipped = t.events_skipped;
                    if let Some(msg) = &t.truncated {
                        rec.status = "partial";
                        rec.warnings.push(msg.clone());
                    }
                    records.push(rec);
                    timelines.push((t.file, "kineto", t.timeline));
                }
                Err(e) => records.push(InputRecord::failed(&path, "trace", e)),
            }
        }
    }
    timelines
}

/// Every Inspector directory or file; lines that gave no record make the input `partial`.
fn read_inspector(
    paths: &[PathBuf],
    records: &mut Vec<InputRecord>,
) -> Vec<crate::inspector::InspectorRead> {
    let mut reads = Vec::new();
    for path in paths {
        match crate::inspector::read_path(path) {
            Ok(read) => {
                let mut rec = InputRecord::ok(path, "nccl_inspector");
                for f in &read.files {
                    rec.skipped += f.counts.dropped();
                    if f.counts.dropped() > 0 {
                        rec.warnings.push(format!(
                            "{}: {} malformed or truncated, {} of an unknown format version, {} not collectives",
                            f.file, f.counts.malformed, f.counts.unknown_version, f.counts.not_collective
                        ));
                    }
                }
                if !rec.warnings.is_empty() {
                    rec.status = "partial";
                }
                records.push(rec);
                reads.push(read);
            }
            Err(e) => records.push(InputRecord::failed(path, "nccl_inspector", e)),
        }
    }
    reads
}

/// Every Nsight Systems input: a SQLite export gives a timeline, an `nsys stats` table (text or CSV) the
/// kernel time by kernel; which one a file is, its content says.
fn read_nsys(
    paths: &[PathBuf],
    records: &mut Vec<InputRecord>,
) -> (Vec<ReadTimeline>, Vec<crate::kernels::KernelSummary>) {
    let mut timelines = Vec::new();
    let mut tables = Vec::new();
    for path in paths {
        let sqlite = std::fs::File::open(path).and_then(|mut f| {
            let mut magic = [0u8; 16];
            std::io::Read::read_exact(&mut f, &mut magic).map(|_| magic == *b"SQLite format 3\0")
        });
        if let Ok(false) = sqlite {
            match crate::kernels::parse_file(path) {
                Ok(s) => {
                    records.push(InputRecord::ok(path, "nsys"));
                    tables.push(s);
                }
                Err(e) => records.push(InputRecord::failed(path, "nsys", e)),
            }
            continue;
        }
        match crate::nsys::parse_file(path) {
            Ok(t) => {
                let mut rec = InputRecord::ok(path, "nsys");
                rec.skipped = t.rows_skipped;
                records.push(rec);
                timelines.push((t.file, "nsys", t.timeline));
            }
            Err(e) => records.push(InputRecord::failed(path, "nsys", e)),
        }
    }
    (timelines, tables)
}

#[cfg(test)]
pub(crate) mod fixtures;
