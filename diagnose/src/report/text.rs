//! The report for the terminal: the inputs, the four steps of the method, the findings and the conclusion,
//! one section each.

use std::fmt::Write as _;

use super::model::{InputRecord, Report};
use super::scaling::scaling_table;
use super::units::human_bytes;
use crate::analysed::TestReport;
use crate::analysis::bandwidth::LATENCY_MAX_BYTES;
use crate::link::fabric::{compare, FabricVerdict};

// Writing to a `String` cannot fail, hence the ignored `fmt::Result`s below.

/// The report for the terminal. The inputs' text in it (file names, quoted lines, NCCL versions and interface
/// names, a collector's answers) has every control character but its line feeds escaped
/// ([`commwatch_model::text::EscapedLines`]): a crafted log line cannot move the cursor, retitle the window or
/// clear the screen; a quoted line holds no line feed of its own (inputs are read line by line).
pub fn render_text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "commwatch diagnose: four-step report");
    let _ = writeln!(o);
    inputs(&mut o, r);
    let _ = writeln!(o);
    baselines(&mut o, r);
    let _ = writeln!(o);
    timeline(&mut o, r);
    let _ = writeln!(o);
    collectives(&mut o, r);
    let _ = writeln!(o);
    link_and_algorithm(&mut o, r);
    let _ = writeln!(o);
    findings(&mut o, r);
    let _ = writeln!(o);
    conclusion(&mut o, r);
    commwatch_model::text::EscapedLines(&o).to_string()
}

/// Milliseconds from microseconds: `12.35 ms`.
fn ms(us: f64) -> String {
    format!("{:.2} ms", us / 1e3)
}

/// A share as a percentage, `-` when unknown: `87.5 %`.
fn pct(r: Option<f64>) -> String {
    r.map_or("-".to_string(), |r| format!("{:.1} %", r * 100.0))
}

/// A value or `?`.
fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("?".to_string(), |v| v.to_string())
}

/// `-` for an empty list.
fn or_dash(items: Vec<String>, sep: &str) -> String {
    if items.is_empty() {
        "-".to_string()
    } else {
        items.join(sep)
    }
}

fn inputs(o: &mut String, r: &Report) {
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
}

/// Step 1: each nccl-tests result against the fabric, then how the peak holds up with scale.
fn baselines(o: &mut String, r: &Report) {
    let _ = writeln!(o, "Step 1. Baselines: bare communication (nccl-tests)");
    let unread: Vec<&InputRecord> = r
        .inputs
        .iter()
        .filter(|i| i.kind == "nccl_tests" && i.status == "error")
        .collect();
    if r.nccl_tests.is_empty() && unread.is_empty() {
        let _ = writeln!(o, "  no nccl-tests results given (--nccl-tests)");
    }
    for i in unread {
        let why = i.warnings.first().map(String::as_str).unwrap_or("");
        let _ = writeln!(o, "  {} gave no results: {why}", i.path);
    }
    for t in &r.nccl_tests {
        test_heading(o, t);
        test_failure(o, t);
        if t.test.rows.is_empty() && t.test.failure.is_some() {
            continue;
        }
        test_curve(o, t);
        test_vs_fabric(o, t, r);
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
    bare_links(o, r);
}

/// Step 1's bare links from the collector's probes: "the bare link gives X" per probed pair, usable ones first,
/// and the best inter-node nccl-tests peak against the lowest of them.
fn bare_links(o: &mut String, r: &Report) {
    let Some(b) = &r.bare_links else { return };
    let _ = writeln!(o, "  bare links (commwatch probes, from the collector):");
    if let Some(w) = &b.warning {
        let _ = writeln!(o, "    not read: {w}");
    } else if b.links.is_empty() {
        let _ = writeln!(
            o,
            "    no probes yet (POST /api/v1/probes, or [probes] matrix_period)"
        );
    }
    let mins = |s: f64| format!("{:.0} min ago", (s / 60.0).max(0.0));
    for l in &b.links {
        match (l.unused, l.bare_gbps) {
            (None, Some(g)) => {
                let _ = writeln!(
                    o,
                    "    the bare link gives {g:.2} GB/s  {} -> {}  {}  latency p50 {} µs, p99 {} µs  ({})",
                    l.from,
                    l.to,
                    l.transport,
                    l.latency_p50_us.map_or("?".into(), |v| format!("{v:.1}")),
                    l.latency_p99_us.map_or("?".into(), |v| format!("{v:.1}")),
                    mins(l.age_s)
                );
            }
            (why, _) => {
                let _ = writeln!(
                    o,
                    "    {} -> {}  {}  not used: {}{}  ({})",
                    l.from,
                    l.to,
                    l.transport,
                    why.unwrap_or("failed"),
                    l.error
                        .as_deref()
                        .map_or(String::new(), |e| format!(" ({e})")),
                    mins(l.age_s)
                );
            }
        }
    }
    let lowest = b.links.iter().find(|l| l.unused.is_none());
    let peak = r
        .nccl_tests
        .iter()
        .filter(|t| t.test.nnodes().is_some_and(|n| n > 1))
        .filter_map(|t| t.summary.peak_busbw_gbps)
        .reduce(f64::max);
    if let (Some(l), Some(bare), Some(p)) = (lowest, lowest.and_then(|l| l.bare_gbps), peak) {
        let _ = writeln!(
            o,
            "    the lowest bare link ({} -> {}) gives {bare:.2} GB/s; the best inter-node nccl-tests peak, \
             {p:.2} GB/s bus bandwidth, is {:.0} % of it",
            l.from,
            l.to,
            p / bare * 100.0
        );
    }
}

/// A run's collective, scale, NCCL version, rows and file.
fn test_heading(o: &mut String, t: &TestReport) {
    let ranks = match (t.test.nranks(), t.test.nranks_at_least()) {
        (Some(n), _) => n.to_string(),
        (None, Some(n)) => format!("at least {n}"),
        (None, None) => "?".to_string(),
    };
    let _ = writeln!(
        o,
        "  {}  {} ranks on {} node(s)  NCCL {}  ({} rows, {})",
        t.test.collective,
        ranks,
        opt(&t.test.nnodes()),
        t.test.nccl_version.as_deref().unwrap_or("?"),
        t.test.rows.len(),
        t.file
    );
}

/// How the run failed or why its table is partial, when it is.
fn test_failure(o: &mut String, t: &TestReport) {
    if let Some(f) = &t.test.failure {
        let when = f
            .after_bytes
            .map_or("before its first size".to_string(), |b| {
                format!("after {}", human_bytes(b))
            });
        let _ = writeln!(o, "    FAILED {when}: {} (line {})", f.message, f.line);
        for w in &f.nccl_warnings {
            let _ = writeln!(o, "      after NCCL WARN {w}");
        }
        let _ = writeln!(o, "    incomplete: no baseline from this run");
    } else if t.test.cut_short() {
        let _ = writeln!(
            o,
            "    incomplete: the table stops before the {} it announced, without its footer",
            t.test.max_bytes.map_or("?".to_string(), human_bytes)
        );
    }
}

/// Average, peak, saturation and latency; latency only where small messages show it.
fn test_curve(o: &mut String, t: &TestReport) {
    let s = &t.summary;
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
    match s.latency_us {
        Some(latency) => {
            let _ = writeln!(
                o,
                "    latency {latency:.2} us; latency-bound below {}",
                s.latency_bound_below_bytes
                    .map_or("every measured size".to_string(), human_bytes)
            );
        }
        None => {
            let _ = writeln!(
                o,
                "    latency not measured: the smallest size, {}, is past the {} where latency shows",
                t.test
                    .rows
                    .iter()
                    .map(|r| r.size_bytes)
                    .min()
                    .map_or("?".to_string(), human_bytes),
                human_bytes(LATENCY_MAX_BYTES)
            );
        }
    }
}

/// The run against the nodes' fabric (with a known link rate): its share of what the network carries for
/// it, or why it is not compared.
fn test_vs_fabric(o: &mut String, t: &TestReport, r: &Report) {
    let Some(c) = compare(&t.test, &t.summary, &r.link) else {
        return;
    };
    let line = match (c.verdict, c.share_of_ceiling, c.ceiling_busbw_gbps) {
        (FabricVerdict::Meets | FabricVerdict::Below, Some(share), Some(ceiling)) => {
            let word = if c.verdict == FabricVerdict::Meets {
                "meets"
            } else {
                "below"
            };
            if c.nics_per_node == 1 && (ceiling - c.link_rate_gbps).abs() < 1e-9 * ceiling {
                format!(
                    "vs link {ceiling:.2} GB/s: {:.0} % ({word} the link)",
                    share * 100.0
                )
            } else {
                format!(
                    "vs fabric {ceiling:.2} GB/s ({} x {:.2} GB/s per node, NICs from the {}): {:.0} % ({word} the \
                     fabric)",
                    c.nics_per_node,
                    c.link_rate_gbps,
                    c.nics_source,
                    share * 100.0
                )
            }
        }
        (FabricVerdict::Impossible, _, _) => format!("vs fabric: impossible: {}", c.reason),
        _ if c.reason.starts_with("single node") => {
            "single node: intra-node bandwidth, not compared with the fabric link".to_string()
        }
        _ => format!("not compared with the fabric: {}", c.reason),
    };
    let _ = writeln!(o, "    {line}");
}

/// Step 2: per rank, communication against computation over the trace and per step.
fn timeline(o: &mut String, r: &Report) {
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
        if a.steps.is_empty() {
            continue;
        }
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

/// Step 3: the costliest collectives of each rank, then which rank the others wait for.
fn collectives(o: &mut String, r: &Report) {
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
    if let Some(s) = &r.nccl_inspector {
        super::inspector::text_step3(o, s);
    }
    kernel_time(o, r);
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
}

/// Step 3's kernel time: NCCL's kernels against all kernels, per `nsys stats` table or trace.
fn kernel_time(o: &mut String, r: &Report) {
    for k in &r.kernel_summaries {
        let _ = writeln!(
            o,
            "  kernel time ({}, {}): NCCL kernels {} of {} ({})",
            k.source,
            k.file,
            ms(k.nccl_kernel_time_us),
            ms(k.kernel_time_us),
            pct(k.nccl_time_share)
        );
        for (what, rows) in [
            ("NCCL", &k.nccl_kernels),
            ("other comm", &k.other_comm_kernels),
        ] {
            for row in rows.iter().take(5) {
                let _ = writeln!(
                    o,
                    "    {what:<10} {} x{} {} ({:.1} %)",
                    row.name,
                    row.instances,
                    ms(row.total_time_us),
                    row.time_share * 100.0
                );
            }
        }
    }
}

/// Step 4: the link rate, and what each NCCL log says about the network, transports and channels.
fn link_and_algorithm(o: &mut String, r: &Report) {
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
    if let Some(s) = &r.nccl_inspector {
        super::inspector::text_step4(o, s);
    }
    for l in &r.nccl_logs {
        let g = &l.log;
        let _ = writeln!(o, "  {}", l.file);
        let ranks = match (g.nranks, g.nranks_at_least) {
            (Some(n), _) => n.to_string(),
            (None, Some(n)) => format!("at least {n}"),
            (None, None) => "?".to_string(),
        };
        let _ = writeln!(
            o,
            "    NCCL {}  {} ranks, {} nodes, {} local ranks",
            g.version.as_deref().unwrap_or("?"),
            ranks,
            opt(&g.nnodes),
            opt(&g.local_ranks)
        );
        let ifaces: Vec<String> = g
            .interfaces
            .iter()
            .map(|i| format!("{}:{}", i.transport, i.name))
            .collect();
        let unused = if g.network_carries_data == Some(false) {
            " (no data crosses it: every rank on one node)"
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "    network {}{unused}  interfaces {}",
            g.network.as_deref().unwrap_or("?"),
            or_dash(ifaces, " ")
        );
        let transports: Vec<String> = g
            .transports
            .iter()
            .map(|(k, v)| format!("{k} x{v}"))
            .collect();
        let _ = writeln!(o, "    transports {}", or_dash(transports, ", "));
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
}

fn findings(o: &mut String, r: &Report) {
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
        cited(o, "      ", &f.cites);
    }
}

/// The input lines a claim rests on, one per line: `file:line: the line`.
fn cited(o: &mut String, indent: &str, cites: &[crate::lines::Cite]) {
    if cites.is_empty() {
        return;
    }
    let _ = writeln!(o, "{indent}lines:");
    for c in cites {
        let at = c.line.map(|l| format!(":{l}")).unwrap_or_default();
        let _ = writeln!(o, "{indent}  {}{at}: {}", c.file, c.text);
    }
}

fn conclusion(o: &mut String, r: &Report) {
    let _ = writeln!(o, "Conclusion: {}", r.conclusion.verdict);
    let _ = writeln!(o, "  {}", r.conclusion.summary);
    for e in &r.conclusion.evidence {
        let _ = writeln!(o, "  - {e}");
    }
    let _ = writeln!(o, "  action: {}", r.conclusion.action);
    cited(o, "  ", &r.conclusion.cites);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;

    fn lines() -> Vec<String> {
        render_text(&fixtures::report())
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The lines from the one equal to `header` up to the next blank line.
    fn section(header: &str) -> Vec<String> {
        lines()
            .into_iter()
            .skip_while(|l| l != header)
            .take_while(|l| !l.is_empty())
            .collect()
    }

    #[test]
    fn inputs_with_their_status_and_warnings() {
        assert_eq!(
            section("Inputs"),
            vec![
                "Inputs",
                "  [ok] nccl_tests all_reduce_perf.txt",
                "  [error] nccl_log   gone.log",
                "      gone.log: not found",
            ]
        );
    }

    #[test]
    fn baselines_against_the_link_and_by_scale() {
        let s = section("Step 1. Baselines: bare communication (nccl-tests)");
        assert_eq!(
            s[1],
            "  all_reduce_perf  2 ranks on 2 node(s)  NCCL 2.23.4  (2 rows, all_reduce_perf.txt)"
        );
        assert_eq!(
            s[2],
            "    avg bus bandwidth ? GB/s (file), peak 45.00 GB/s at ?, saturates from ?"
        );
        // The smallest size, 1 MiB, shows no latency.
        assert_eq!(
            s[3],
            "    latency not measured: the smallest size, 1 MiB, is past the 64 KiB where latency shows"
        );
        assert_eq!(s[4], "    vs link 50.00 GB/s: 90 % (meets the link)");
        assert_eq!(
            s[8],
            "    single node: intra-node bandwidth, not compared with the fabric link"
        );
        assert_eq!(s[9], "  scale (peak bus bandwidth by ranks):");
        assert_eq!(
            s[10],
            "    all_gather_perf          1 ranks     200.00 GB/s    100 % of the smallest scale"
        );
        assert_eq!(s.len(), 12);
    }

    /// Terminal escapes in an input (a window title, a hyperlink, a screen clear, a bell, a carriage return)
    /// come out as visible `\u001b`-style text.
    #[test]
    fn terminal_escapes_from_the_inputs_come_out_escaped() {
        let mut r = fixtures::report();
        r.nccl_tests[0].test.failure = Some(crate::nccl_tests::Failure {
            message:
                "\x1b]0;owned\x07\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\\x1b[2J\rERROR"
                    .into(),
            line: 120,
            hosts: 1,
            nccl_warnings: vec!["\u{9b}31mred".into()],
            after_bytes: None,
            exit_code: None,
        });
        let text = render_text(&r);
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains(
            "\\u001b]0;owned\\u0007\\u001b]8;;http://evil.example\\u001b\\link\\u001b]8;;\\u001b\\\\u001b[2J\\u000dERROR"
        ), "{text}");
        assert!(text.contains("\\u009b31mred"), "{text}");
    }

    #[test]
    fn a_failed_run_says_how_and_the_fabric_line_says_what_it_is() {
        let mut r = fixtures::report();
        r.nccl_tests[0].test.failure = Some(crate::nccl_tests::Failure {
            message: "Test NCCL failure common.cu:1204 'unhandled cuda error'".to_string(),
            line: 120,
            hosts: 37,
            nccl_warnings: vec!["Cuda failure 1 'invalid argument'".to_string()],
            after_bytes: Some(16 << 30),
            exit_code: Some(3),
        });
        let text = render_text(&r);
        for line in [
            "    FAILED after 16 GiB: Test NCCL failure common.cu:1204 'unhandled cuda error' (line 120)\n",
            "      after NCCL WARN Cuda failure 1 'invalid argument'\n",
            "    incomplete: no baseline from this run\n",
            "    not compared with the fabric: the run did not complete: its table is no baseline\n",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        // Two NICs per node: the comparison says what it compares with.
        let mut r = fixtures::report();
        r.link = r.link.clone().with_nics(Some(2), None);
        assert!(render_text(&r).contains(
            "    vs fabric 100.00 GB/s (2 x 50.00 GB/s per node, NICs from the flag): 45 % (below the fabric)\n"
        ));
        // 45 GB/s against a 10 GB/s link between 2 nodes is more than the network carries.
        r.link = fixtures::link(Some(10.0));
        assert!(render_text(&r)
            .contains("    vs fabric: impossible: 45.00 GB/s is more than the network can carry"));
    }

    #[test]
    fn one_rank_per_step() {
        assert_eq!(
            section("Step 2. Communication vs computation on the timeline"),
            vec![
                "Step 2. Communication vs computation on the timeline",
                "  rank 0 (kineto, rank-0.json)",
                "    comm 40.00 ms  compute 70.00 ms  idle 10.00 ms  overlap 50.0 %  exposed comm 20.00 ms  \
                 (100 of 120 GPU activities counted)",
                "        step    step time         comm      compute         idle   overlap      exposed",
                "           0    100.00 ms     40.00 ms     70.00 ms     10.00 ms    50.0 %     20.00 ms",
            ]
        );
        assert_eq!(
            section("Step 3. The costly collectives")[2],
            "    allreduce            64 MiB Float     x10    total   30.00 ms  mean    3000.0 us  busbw 12.50 GB/s"
        );
    }

    #[test]
    fn what_each_nccl_log_says() {
        assert_eq!(
            section("Step 4. Link and algorithm"),
            vec![
                "Step 4. Link and algorithm",
                "  link rate 50.00 GB/s (from flag)",
                "  rank0.log",
                "    NCCL 2.21.5  16 ranks, 2 nodes, ? local ranks",
                "    network Socket  interfaces Socket:eth0",
                "    transports NET/Socket x7",
                "    channels ?  GPU Direct RDMA disabled  NVLS no",
            ]
        );
    }

    #[test]
    fn findings_and_conclusion() {
        assert_eq!(
            section("Findings"),
            vec![
                "Findings",
                "  [critical] management_network_traffic: NCCL data moves over eth0 <management>",
                "      subject: interface=eth0",
                "      evidence: socket_connections=7",
                "      action: bind NCCL to the fabric & retry",
            ]
        );
        assert_eq!(
            section("Conclusion: not_the_link"),
            vec![
                "Conclusion: not_the_link",
                "  The bare baseline meets the link.",
                "  - link rate 50.00 GB/s (from flag)",
                "  action: look for stragglers",
            ]
        );
    }

    #[test]
    fn an_empty_report_says_what_is_missing() {
        let mut r = fixtures::report();
        r.nccl_tests.clear();
        r.traces.clear();
        r.findings.clear();
        r.link = fixtures::link(None);
        let text = render_text(&r);
        for line in [
            "  no nccl-tests results given (--nccl-tests)",
            "  no traces given (--trace, --nsys)",
            "  link rate unknown (--link-rate GBPS or --collector URL)",
            "Findings\n  none\n",
        ] {
            assert!(text.contains(line), "{line}");
        }
    }

    #[test]
    fn units() {
        assert_eq!(ms(1234.5), "1.23 ms");
        assert_eq!(pct(Some(0.875)), "87.5 %");
        assert_eq!(pct(None), "-");
        assert_eq!(opt(&Some(3)), "3");
        assert_eq!(opt::<u32>(&None), "?");
    }
}
