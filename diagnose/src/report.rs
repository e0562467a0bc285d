//! The four-step report: what was read, the analyses, the findings and the key judgment, and its renderers
//! (text for the terminal, JSON for machines; HTML in [`crate::html`]).
//!
//! The key judgment (DESIGN.md): a bare baseline that meets the link while in-training communication does not
//! points at overlap, synchronisation or contention, not the link; a bare baseline below the link points at the
//! link, the NIC binding or the algorithm.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Value};

pub use crate::analysed::{LogReport, TestReport, TraceReport};
use crate::analysis::bandwidth::{busbw_at, summarize};
use crate::analysis::overlap;
use crate::analysis::straggler::{self, StragglerAnalysis};
use crate::collector::Inventory;
use crate::findings::{self, Context, Finding, Severity};
pub use crate::link::{LinkInfo, BASELINE_MEETS_LINK};
use crate::progress::Progress;
use crate::timeline::Timeline;

/// In-training bus bandwidth below this share of the bare baseline (same size) is "not meeting" it.
pub const TRAINING_MEETS_BASELINE: f64 = 0.6;
/// Fewer traced steps than this make a conclusion tentative (one un-warmed sample proves nothing).
pub const MIN_STEPS_FOR_CONFIDENCE: usize = 3;

/// What to read.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub nccl_tests: Vec<PathBuf>,
    pub nccl_logs: Vec<PathBuf>,
    /// Files or directories of Kineto traces.
    pub traces: Vec<PathBuf>,
    pub nsys: Vec<PathBuf>,
    /// Fabric link rate, GB/s (1e9 bytes/s).
    pub link_rate_gbps: Option<f64>,
    /// Inventory fetched from a collector, or why it could not be.
    pub inventory: Option<Result<Inventory, String>>,
}

/// One input file and how reading it went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InputRecord {
    pub path: String,
    /// `nccl_tests`, `nccl_log`, `trace`, `nsys`.
    pub kind: &'static str,
    /// `ok`, `partial` (read with warnings or cut short), `error` (nothing usable).
    pub status: &'static str,
    pub warnings: Vec<String>,
    /// Lines, events or rows that could not be used.
    pub skipped: u64,
}

/// The key judgment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conclusion {
    /// `not_the_link`, `link_or_binding`, `cpu_bound`, `exposed_communication`, `healthy`, `baseline_meets_link`,
    /// `insufficient_evidence`.
    pub verdict: &'static str,
    pub summary: String,
    pub evidence: Vec<String>,
    pub action: String,
    /// `false` when too few steps were traced to rule out warm-up effects.
    pub confident: bool,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub inputs: Vec<InputRecord>,
    pub link: LinkInfo,
    pub nccl_tests: Vec<TestReport>,
    pub nccl_logs: Vec<LogReport>,
    pub traces: Vec<TraceReport>,
    pub straggler: Option<StragglerAnalysis>,
    pub findings: Vec<Finding>,
    pub conclusion: Conclusion,
}

fn record(path: &Path, kind: &'static str) -> InputRecord {
    InputRecord {
        path: path.display().to_string(),
        kind,
        status: "ok",
        warnings: Vec::new(),
        skipped: 0,
    }
}

fn failed(path: &Path, kind: &'static str, err: impl std::fmt::Display) -> InputRecord {
    InputRecord {
        status: "error",
        warnings: vec![err.to_string()],
        ..record(path, kind)
    }
}

impl Report {
    /// Reads every input (a bad one is recorded and the rest still analysed) and builds the report.
    pub fn build(inputs: &Inputs, progress: &Progress) -> Report {
        let mut records = Vec::new();
        let mut tests = Vec::new();
        for path in &inputs.nccl_tests {
            match crate::nccl_tests::parse_file(path) {
                Ok(f) => {
                    let mut rec = record(path, "nccl_tests");
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
                Err(e) => records.push(failed(path, "nccl_tests", e)),
            }
        }
        let mut logs = Vec::new();
        for path in &inputs.nccl_logs {
            match crate::nccl_log::parse_file(path) {
                Ok(log) => {
                    records.push(record(path, "nccl_log"));
                    logs.push(LogReport {
                        file: path.display().to_string(),
                        log,
                    });
                }
                Err(e) => records.push(failed(path, "nccl_log", e)),
            }
        }
        let mut timelines: Vec<(String, &'static str, Timeline)> = Vec::new();
        for arg in &inputs.traces {
            let files = match crate::kineto::trace_files(arg) {
                Ok(f) if !f.is_empty() => f,
                Ok(_) => {
                    records.push(failed(
                        arg,
                        "trace",
                        "no .json or .json.gz trace files in this directory",
                    ));
                    continue;
                }
                Err(e) => {
                    records.push(failed(arg, "trace", format!("{}: {e}", arg.display())));
                    continue;
                }
            };
            for path in files {
                match crate::kineto::parse_file(&path, progress) {
                    Ok(t) => {
                        let mut rec = record(&path, "trace");
                        rec.skipped = t.events_skipped;
                        if let Some(msg) = &t.truncated {
                            rec.status = "partial";
                            rec.warnings.push(msg.clone());
                        }
                        records.push(rec);
                        timelines.push((t.file, "kineto", t.timeline));
                    }
                    Err(e) => records.push(failed(&path, "trace", e)),
                }
            }
        }
        for path in &inputs.nsys {
            match crate::nsys::parse_file(path) {
                Ok(t) => {
                    let mut rec = record(path, "nsys");
                    rec.skipped = t.rows_skipped;
                    records.push(rec);
                    timelines.push((t.file, "nsys", t.timeline));
                }
                Err(e) => records.push(failed(path, "nsys", e)),
            }
        }
        let traces: Vec<TraceReport> = timelines
            .iter()
            .enumerate()
            .map(|(i, (file, source, tl))| TraceReport {
                file: file.clone(),
                source,
                analysis: overlap::analyze(tl, i as u32),
            })
            .collect();
        let ranked: Vec<(u32, &Timeline)> = timelines
            .iter()
            .zip(&traces)
            .map(|((_, _, tl), t)| (t.analysis.rank, tl))
            .collect();
        let straggler = straggler::analyze(&ranked);
        let link = LinkInfo::new(inputs.link_rate_gbps, inputs.inventory.as_ref());
        Report::assemble(records, link, tests, logs, traces, straggler)
    }

    /// Builds the findings and the conclusion from analysed parts.
    pub fn assemble(
        inputs: Vec<InputRecord>,
        link: LinkInfo,
        nccl_tests: Vec<TestReport>,
        nccl_logs: Vec<LogReport>,
        traces: Vec<TraceReport>,
        straggler: Option<StragglerAnalysis>,
    ) -> Report {
        let ctx = Context {
            tests: &nccl_tests,
            logs: &nccl_logs,
            traces: &traces,
            straggler: straggler.as_ref(),
            link: &link,
        };
        let findings = findings::evaluate(&ctx);
        let conclusion = conclude(&ctx, &findings);
        Report {
            inputs,
            link,
            nccl_tests,
            nccl_logs,
            traces,
            straggler,
            findings,
            conclusion,
        }
    }

    /// Whether any input could not be read at all.
    pub fn has_input_errors(&self) -> bool {
        self.inputs.iter().any(|i| i.status == "error")
    }
}

/// The bare baseline the judgment uses: the inter-node test with the highest peak, all-reduce preferred.
fn baseline<'a>(tests: &'a [TestReport]) -> Option<&'a TestReport> {
    let inter: Vec<&TestReport> = tests.iter().filter(|t| t.inter_node()).collect();
    let pick = |v: &[&'a TestReport]| {
        v.iter().copied().max_by(|a, b| {
            let pa = a.summary.peak_busbw_gbps.unwrap_or(0.0);
            let pb = b.summary.peak_busbw_gbps.unwrap_or(0.0);
            pa.total_cmp(&pb)
        })
    };
    let allreduce: Vec<&TestReport> = inter
        .iter()
        .copied()
        .filter(|t| t.test.collective.contains("all_reduce"))
        .collect();
    pick(&allreduce).or_else(|| pick(&inter))
}

/// In-training bus bandwidth of the costliest collective with a known size, over all ranks: (collective,
/// size, busbw).
fn training_busbw(traces: &[TraceReport]) -> Option<(String, u64, f64)> {
    traces
        .iter()
        .flat_map(|t| t.analysis.top_collectives.iter())
        .filter(|c| c.size_bytes.is_some() && c.busbw_gbps.is_some())
        .max_by(|a, b| a.total_time_us.total_cmp(&b.total_time_us))
        .map(|c| {
            (
                c.collective.clone(),
                c.size_bytes.unwrap_or(0),
                c.busbw_gbps.unwrap_or(0.0),
            )
        })
}

fn conclude(ctx: &Context, findings: &[Finding]) -> Conclusion {
    let has = |kind: &str| findings.iter().any(|f| f.kind == kind);
    let steps = ctx
        .traces
        .iter()
        .map(|t| t.analysis.steps.len())
        .max()
        .unwrap_or(0);
    let confident = ctx.traces.is_empty() || steps >= MIN_STEPS_FOR_CONFIDENCE;
    let mut evidence = Vec::new();
    let base = baseline(ctx.tests);
    let rate = ctx.link.rate_gbps;
    if let Some(b) = base {
        if let Some(p) = b.summary.peak_busbw_gbps {
            evidence.push(format!(
                "bare {} ({} ranks): peak bus bandwidth {:.2} GB/s ({})",
                b.test.collective,
                b.test.nranks().map_or("?".to_string(), |n| n.to_string()),
                p,
                b.file
            ));
        }
    }
    if let Some(r) = rate {
        evidence.push(format!(
            "link rate {:.2} GB/s (from {})",
            r,
            ctx.link.source.unwrap_or("?")
        ));
    }
    let training = training_busbw(ctx.traces);
    if let Some((c, size, bw)) = &training {
        evidence.push(format!(
            "in training: {c} of {} reaches {bw:.2} GB/s bus bandwidth",
            human_bytes(*size)
        ));
    }
    let exposed = findings.iter().find(|f| f.kind == "exposed_communication");
    if let Some(f) = exposed {
        evidence.push(f.summary.clone());
    }
    let binding: Vec<&Finding> = findings
        .iter()
        .filter(|f| {
            matches!(
                f.kind,
                "nccl_misconfiguration" | "management_network_traffic" | "link_underutilized"
            )
        })
        .collect();
    for f in &binding {
        evidence.push(f.summary.clone());
    }

    let meets = match (base.and_then(|b| b.summary.peak_busbw_gbps), rate) {
        (Some(p), Some(r)) => Some(p >= BASELINE_MEETS_LINK * r),
        _ => None,
    };
    let training_short = match (&training, base) {
        (Some((_, size, bw)), Some(b)) => busbw_at(&b.test, *size)
            .or(b.summary.peak_busbw_gbps)
            .map(|bare| *bw < TRAINING_MEETS_BASELINE * bare),
        _ => None,
    };
    let (verdict, summary, action) = if meets == Some(false)
        || (meets.is_none()
            && (has("management_network_traffic")
                || has("nccl_misconfiguration") && base.is_some()))
        || (base.is_none() && has("management_network_traffic"))
    {
        (
            "link_or_binding",
            "The bare baseline does not reach the link: the cause is the link, the NIC binding or the algorithm, \
             not the training job."
                .to_string(),
            binding
                .first()
                .map(|f| f.action.clone())
                .unwrap_or_else(|| {
                    "verify the link (rate, errors), the NIC binding (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) and the \
                     algorithm with NCCL_DEBUG=INFO, then re-run the baseline"
                        .to_string()
                }),
        )
    } else if meets == Some(true) && (training_short == Some(true) || exposed.is_some()) {
        (
            "not_the_link",
            "The bare baseline meets the link but communication during training does not: the cause is overlap, \
             synchronisation or contention, not the link."
                .to_string(),
            exposed
                .map(|f| f.action.clone())
                .unwrap_or_else(|| {
                    "look for ranks that arrive late (stragglers), collectives serialised behind compute, and other \
                     traffic sharing the link"
                        .to_string()
                }),
        )
    } else if has("cpu_bound") {
        (
            "cpu_bound",
            "The GPU mostly waits on the host, not on communication: tuning NCCL will not help."
                .to_string(),
            findings
                .iter()
                .find(|f| f.kind == "cpu_bound")
                .map(|f| f.action.clone())
                .unwrap_or_default(),
        )
    } else if let Some(f) = exposed {
        (
            "exposed_communication",
            "Communication is exposed on the timeline; without a bare baseline against the link rate it is not yet \
             known whether the link or the overlap is at fault."
                .to_string(),
            format!(
                "run all_reduce_perf across the same nodes and pass it with --nccl-tests and the fabric rate with \
                 --link-rate; meanwhile: {}",
                f.action
            ),
        )
    } else if meets == Some(true) && !ctx.traces.is_empty() {
        (
            "healthy",
            "The bare baseline meets the link and training communication is hidden behind computation.".to_string(),
            "nothing to fix in communication; look at computation for further speed-up".to_string(),
        )
    } else if meets == Some(true) {
        (
            "baseline_meets_link",
            "The bare baseline meets the link. Whether training communication does is not known without a trace."
                .to_string(),
            "profile a few training steps (torch.profiler with ProfilerStep, or nsys) and pass the traces with --trace \
             or --nsys"
                .to_string(),
        )
    } else {
        let missing = match (base.is_some(), rate.is_some()) {
            (false, _) => "a multi-node nccl-tests baseline (--nccl-tests)",
            (true, false) => "the link rate (--link-rate or --collector)",
            _ => "a training trace (--trace or --nsys)",
        };
        (
            "insufficient_evidence",
            format!("Not enough evidence for the key judgment: missing {missing}."),
            format!("add {missing} and run again"),
        )
    };
    let mut summary = summary;
    if !confident {
        summary.push_str(&format!(
            " Tentative: only {steps} step(s) traced; trace at least {MIN_STEPS_FOR_CONFIDENCE} warmed-up steps."
        ));
    }
    Conclusion {
        verdict,
        summary,
        evidence,
        action,
        confident,
    }
}

/// `8 B`, `4 KiB`, `2.5 MiB`, `8 GiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn ms(us: f64) -> String {
    format!("{:.2} ms", us / 1e3)
}

fn pct(r: Option<f64>) -> String {
    r.map_or("-".to_string(), |r| format!("{:.1} %", r * 100.0))
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("?".to_string(), |v| v.to_string())
}

/// The report for the terminal.
pub fn render_text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "commwatch diagnose: four-step report");
    let _ = writeln!(o);
    let _ = writeln!(o, "Inputs");
    for i in &r.inputs {
        let _ = write!(o, "  [{}] {:<10} {}", i.status, i.kind, i.path);
        if i.skipped > 0 {
            let _ = write!(o, "  ({} skipped)", i.skipped);
        }
        let _ = writeln!(o);
        for w in &i.warnings {
            let _ = writeln!(o, "      {w}");
        }
    }
    if let Some(w) = &r.link.warning {
        let _ = writeln!(o, "  warning: {w}");
    }

    let _ = writeln!(o);
    let _ = writeln!(o, "Step 1. Baselines: bare communication (nccl-tests)");
    if r.nccl_tests.is_empty() {
        let _ = writeln!(o, "  no nccl-tests results given (--nccl-tests)");
    }
    for t in &r.nccl_tests {
        let s = &t.summary;
        let _ = writeln!(
            o,
            "  {}  {} ranks on {} node(s)  NCCL {}  ({} rows, {})",
            t.test.collective,
            opt(&t.test.nranks()),
            opt(&t.test.nnodes()),
            t.test.nccl_version.as_deref().unwrap_or("?"),
            t.test.rows.len(),
            t.file
        );
        let _ = writeln!(
            o,
            "    avg bus bandwidth {} GB/s (file), peak {} GB/s at {}, saturates from {}",
            t.test
                .avg_busbw_gbps
                .map_or("?".to_string(), |v| format!("{v}")),
            s.peak_busbw_gbps
                .map_or("?".to_string(), |v| format!("{v:.2}")),
            s.peak_at_bytes.map_or("?".to_string(), human_bytes),
            s.saturation_bytes.map_or("?".to_string(), human_bytes),
        );
        let _ = writeln!(
            o,
            "    latency {} us; latency-bound below {}",
            s.latency_us.map_or("?".to_string(), |v| format!("{v:.2}")),
            s.latency_bound_below_bytes
                .map_or("every measured size".to_string(), human_bytes)
        );
        match (r.link.rate_gbps, s.peak_busbw_gbps) {
            (Some(rate), Some(p)) if t.inter_node() => {
                let _ = writeln!(
                    o,
                    "    vs link {:.2} GB/s: {:.0} % ({})",
                    rate,
                    p / rate * 100.0,
                    if p >= BASELINE_MEETS_LINK * rate {
                        "meets the link"
                    } else {
                        "below the link"
                    }
                );
            }
            (Some(_), _) if !t.inter_node() => {
                let _ = writeln!(
                    o,
                    "    single node: intra-node bandwidth, not compared with the fabric link"
                );
            }
            _ => {}
        }
    }
    let scaling = scaling_table(&r.nccl_tests);
    if scaling.len() > 1 {
        let _ = writeln!(o, "  scale (peak bus bandwidth by ranks):");
        for (coll, n, peak, eff) in scaling {
            let _ = writeln!(
                o,
                "    {coll:<20} {n:>5} ranks  {peak:>9.2} GB/s  {:>5.0} % of the smallest scale",
                eff * 100.0
            );
        }
    }

    let _ = writeln!(o);
    let _ = writeln!(o, "Step 2. Communication vs computation on the timeline");
    if r.traces.is_empty() {
        let _ = writeln!(o, "  no traces given (--trace, --nsys)");
    }
    for t in &r.traces {
        let a = &t.analysis;
        let _ = writeln!(o, "  rank {} ({}, {})", a.rank, t.source, t.file);
        let _ = writeln!(
            o,
            "    comm {}  compute {}  idle {}  overlap {}  exposed comm {}  ({} of {} GPU activities counted{})",
            ms(a.comm_time_us),
            ms(a.compute_time_us),
            ms(a.idle_time_us),
            pct(a.overlap_ratio),
            ms(a.exposed_comm_us),
            a.gpu_events_counted,
            a.gpu_events,
            if a.last_step_excluded {
                ", last step excluded"
            } else {
                ""
            }
        );
        if !a.steps.is_empty() {
            let _ = writeln!(
                o,
                "    {:>8} {:>12} {:>12} {:>12} {:>12} {:>9} {:>12}",
                "step", "step time", "comm", "compute", "idle", "overlap", "exposed"
            );
            for s in &a.steps {
                let _ = writeln!(
                    o,
                    "    {:>8} {:>12} {:>12} {:>12} {:>12} {:>9} {:>12}",
                    s.step,
                    ms(s.step_time_us),
                    ms(s.comm_time_us),
                    ms(s.compute_time_us),
                    ms(s.idle_time_us),
                    pct(s.overlap_ratio),
                    ms(s.exposed_comm_us)
                );
            }
        }
    }

    let _ = writeln!(o);
    let _ = writeln!(o, "Step 3. The costly collectives");
    for t in &r.traces {
        let a = &t.analysis;
        if a.top_collectives.is_empty() {
            continue;
        }
        let _ = writeln!(o, "  rank {}", a.rank);
        for c in &a.top_collectives {
            let _ = writeln!(
                o,
                "    {:<16} {:>10} {:<9} x{:<5} total {:>10}  mean {:>9.1} us  busbw {}",
                c.collective,
                c.size_bytes.map_or("size ?".to_string(), human_bytes),
                c.dtype.as_deref().unwrap_or("-"),
                c.count,
                ms(c.total_time_us),
                c.mean_time_us,
                c.busbw_gbps
                    .map_or("?".to_string(), |b| format!("{b:.2} GB/s"))
            );
        }
    }
    if let Some(s) = &r.straggler {
        let _ = writeln!(o, "  across ranks ({} collectives compared):", s.compared);
        for rl in &s.ranks {
            let _ = writeln!(
                o,
                "    rank {:<5} starts {:>9.1} us late on average, last in {:>3.0} %, mean comm kernel {:.1} us",
                rl.rank,
                rl.mean_lateness_us,
                rl.latest_share * 100.0,
                rl.mean_comm_kernel_us
            );
        }
        let _ = writeln!(
            o,
            "    straggler: {}",
            s.straggler
                .map_or("none".to_string(), |r| format!("rank {r}"))
        );
    }

    let _ = writeln!(o);
    let _ = writeln!(o, "Step 4. Link and algorithm");
    match (r.link.rate_gbps, r.link.source) {
        (Some(rate), Some(src)) => {
            let _ = writeln!(o, "  link rate {rate:.2} GB/s (from {src})");
        }
        _ => {
            let _ = writeln!(
                o,
                "  link rate unknown (--link-rate GBPS or --collector URL)"
            );
        }
    }
    for l in &r.nccl_logs {
        let g = &l.log;
        let _ = writeln!(o, "  {}", l.file);
        let _ = writeln!(
            o,
            "    NCCL {}  {} ranks, {} nodes, {} local ranks",
            g.version.as_deref().unwrap_or("?"),
            opt(&g.nranks),
            opt(&g.nnodes),
            opt(&g.local_ranks)
        );
        let ifaces: Vec<String> = g
            .interfaces
            .iter()
            .map(|i| format!("{}:{}", i.transport, i.name))
            .collect();
        let _ = writeln!(
            o,
            "    network {}  interfaces {}",
            g.network.as_deref().unwrap_or("?"),
            if ifaces.is_empty() {
                "-".to_string()
            } else {
                ifaces.join(" ")
            }
        );
        let transports: Vec<String> = g
            .transports
            .iter()
            .map(|(k, v)| format!("{k} x{v}"))
            .collect();
        let _ = writeln!(
            o,
            "    transports {}",
            if transports.is_empty() {
                "-".to_string()
            } else {
                transports.join(", ")
            }
        );
        let _ = writeln!(
            o,
            "    channels {}  GPU Direct RDMA {}  NVLS {}",
            opt(&g.channels),
            match g.gdr {
                Some(true) => "enabled",
                Some(false) => "disabled",
                None => "?",
            },
            if g.nvls { "available" } else { "no" }
        );
        if !g.settings.is_empty() {
            let s: Vec<String> = g.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(o, "    settings {}", s.join(" "));
        }
    }

    let _ = writeln!(o);
    let _ = writeln!(o, "Findings");
    if r.findings.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for f in &r.findings {
        let _ = writeln!(o, "  [{}] {}: {}", f.severity.as_str(), f.kind, f.summary);
        let subject: Vec<String> = f.subject.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(o, "      subject: {}", subject.join(" "));
        let ev: Vec<String> = f.evidence.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(o, "      evidence: {}", ev.join(" "));
        let _ = writeln!(o, "      action: {}", f.action);
    }

    let _ = writeln!(o);
    let _ = writeln!(o, "Conclusion: {}", r.conclusion.verdict);
    let _ = writeln!(o, "  {}", r.conclusion.summary);
    for e in &r.conclusion.evidence {
        let _ = writeln!(o, "  - {e}");
    }
    let _ = writeln!(o, "  action: {}", r.conclusion.action);
    o
}

/// Peak bus bandwidth per collective and scale, with efficiency against the smallest multi-rank scale:
/// (collective, ranks, peak, efficiency).
pub fn scaling_table(tests: &[TestReport]) -> Vec<(String, u32, f64, f64)> {
    let mut rows: Vec<(String, u32, f64)> = tests
        .iter()
        .filter_map(|t| {
            Some((
                t.test.collective.clone(),
                t.test.nranks()?,
                t.summary.peak_busbw_gbps?,
            ))
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut out = Vec::new();
    for (c, n, p) in &rows {
        let first = rows.iter().find(|r| r.0 == *c).map(|r| r.2).unwrap_or(*p);
        out.push((c.clone(), *n, *p, if first > 0.0 { p / first } else { 0.0 }));
    }
    out
}

/// The report for machines. Keys listed in CONTRACTS.md are stable; others may be added.
pub fn render_json(r: &Report) -> Value {
    let tests: Vec<Value> = r
        .nccl_tests
        .iter()
        .map(|t| {
            let rows: Vec<Value> = t
                .test
                .rows
                .iter()
                .flat_map(|row| {
                    row.placements().map(move |(in_place, p)| {
                        json!({
                            "size_bytes": row.size_bytes,
                            "count": row.count,
                            "type": row.dtype,
                            "redop": row.redop,
                            "root": row.root,
                            "time_us": p.time_us,
                            "algbw_gbps": p.algbw_gbps,
                            "busbw_gbps": p.busbw_gbps,
                            "wrong": p.wrong,
                            "in_place": in_place,
                        })
                    })
                })
                .collect();
            let s = &t.summary;
            json!({
                "file": t.file,
                "collective": t.test.collective,
                "collective_source": t.test.collective_source,
                "format": t.test.generation,
                "nccl_version": t.test.nccl_version,
                "nranks": t.test.nranks(),
                "nnodes": t.test.nnodes(),
                "rows": rows,
                "avg_busbw_gbps": t.test.avg_busbw_gbps,
                "avg_busbw_computed_gbps": s.avg_busbw_computed_gbps,
                "peak_busbw_gbps": s.peak_busbw_gbps,
                "peak_at_bytes": s.peak_at_bytes,
                "saturation_bytes": s.saturation_bytes,
                "latency_us": s.latency_us,
                "latency_bound_below_bytes": s.latency_bound_below_bytes,
                "wrong_total": s.wrong_total,
                "out_of_bounds": t.test.out_of_bounds,
                "link_share": match (r.link.rate_gbps, s.peak_busbw_gbps) {
                    (Some(rate), Some(p)) if t.inter_node() && rate > 0.0 => Some(p / rate),
                    _ => None,
                },
            })
        })
        .collect();
    let logs: Vec<Value> = r
        .nccl_logs
        .iter()
        .map(|l| {
            let g = &l.log;
            json!({
                "file": l.file,
                "version": g.version,
                "nranks": g.nranks,
                "nnodes": g.nnodes,
                "local_ranks": g.local_ranks,
                "network": g.network,
                "interfaces": g.interfaces,
                "bootstrap_interface": g.bootstrap_interface,
                "transports": g.transports,
                "net_connections_gdr": g.net_connections_gdr,
                "channels": g.channels,
                "coll_channels": g.coll_channels,
                "nvls_channels": g.nvls_channels,
                "nvls": g.nvls,
                "rings": g.rings.len(),
                "trees": g.trees,
                "gdr": g.gdr,
                "ib_no_device": g.ib_no_device,
                "settings": g.settings,
                "warnings": g.warnings,
                "warning_count": g.warning_count,
            })
        })
        .collect();
    let traces: Vec<Value> = r
        .traces
        .iter()
        .map(|t| {
            let a = &t.analysis;
            json!({
                "file": t.file,
                "source": t.source,
                "rank": a.rank,
                "world_size": a.world_size,
                "comm_time_us": a.comm_time_us,
                "compute_time_us": a.compute_time_us,
                "memory_time_us": a.memory_time_us,
                "idle_time_us": a.idle_time_us,
                "span_us": a.span_us,
                "overlap_ratio": a.overlap_ratio,
                "exposed_comm_us": a.exposed_comm_us,
                "gpu_events": a.gpu_events,
                "gpu_events_counted": a.gpu_events_counted,
                "nccl_kernels": a.nccl_kernels,
                "last_step_excluded": a.last_step_excluded,
                "steps": a.steps,
                "top_collectives": a.top_collectives,
            })
        })
        .collect();
    let findings: Vec<Value> = r
        .findings
        .iter()
        .map(|f| {
            json!({
                "kind": f.kind,
                "severity": f.severity,
                "subject": f.subject,
                "summary": f.summary,
                "evidence": f.evidence,
                "action": f.action,
            })
        })
        .collect();
    json!({
        "inputs": r.inputs,
        "link": r.link,
        "nccl_tests": tests,
        "nccl_logs": logs,
        "traces": traces,
        "straggler": r.straggler,
        "findings": findings,
        "conclusion": r.conclusion,
    })
}

/// Severity of the worst finding.
pub fn worst_severity(r: &Report) -> Option<Severity> {
    r.findings.iter().map(|f| f.severity).max()
}
