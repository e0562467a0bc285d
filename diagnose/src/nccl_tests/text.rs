//! The text outputs, as printed and as pasted: one pass over the lines. A run starts at its first line of its
//! own (the version line, the start marker, the `nThread` header, or a table after a finished one); every
//! other line is filed with the run it belongs to, or kept for the next run when it comes before one (the
//! command line, the NCCL version).

use super::command::{binary_in, launcher_in, nodes_in, processes_in, Launcher};
use super::failure::{exit_code, exit_code_in, failure_line, FailureLine, WARNINGS_KEPT};
use super::row::{parse_row, Layout};
use super::{
    nccl_version_from_code, parse_rank_line, Failure, Generation, LineWarning, NcclTest,
    NcclTestsFile,
};

#[derive(Default)]
struct TextState {
    tests: Vec<NcclTest>,
    current: Option<NcclTest>,
    /// What came before the next run: NCCL and nccl-tests versions, the binary, the launcher's processes.
    pending_version: Option<String>,
    pending_tests_version: Option<String>,
    pending_binary: Option<String>,
    pending_processes: Option<u32>,
    pending_nodes: Option<u32>,
    layout: Option<Layout>,
    /// The launcher of a command line that continues on the next line (it ended with `\`), and its options
    /// so far.
    continued_launcher: Option<(Launcher, Vec<String>)>,
    /// The last `NCCL WARN` messages, a failure's likely cause.
    recent_warnings: Vec<String>,
    /// Hosts that printed a failure line for the current run.
    failure_hosts: Vec<String>,
    /// Whether the current run's failure message is first-hand (a failing call, a signal).
    failure_primary: bool,
    warnings: Vec<LineWarning>,
    skipped: usize,
    /// The host label the line being read came with (`HCA-128: Test NCCL failure …`).
    host: Option<String>,
}

pub fn parse_text(text: &str) -> NcclTestsFile {
    let mut st = TextState::default();
    for line in crate::lines::lines(text) {
        if !line.text.is_empty() {
            st.host = line.host.clone();
            st.line(&line.text, line.number);
        }
    }
    st.finish();
    NcclTestsFile {
        tests: st.tests,
        warnings: st.warnings,
        skipped_lines: st.skipped,
    }
}

impl TextState {
    /// Files one non-empty line.
    fn line(&mut self, line: &str, lineno: usize) {
        if let Some(v) = nccl_version_in(line) {
            self.nccl_version(v);
            return;
        }
        if line.contains("NCCL INFO") || line.contains(" NCCL WARN ") {
            if let Some(pos) = line.find(" NCCL WARN ") {
                self.remember_warning(line[pos + " NCCL WARN ".len()..].trim());
            }
            return;
        }
        if let Some(mut f) = failure_line(line) {
            if f.host.is_none() {
                f.host = self.host.clone();
            }
            self.failure(f, lineno);
            return;
        }
        if let Some(code) = exit_code(line) {
            if let Some(f) = self.current.as_mut().and_then(|t| t.failure.as_mut()) {
                f.exit_code.get_or_insert(code);
            }
            return;
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let (body, hashed) = match line.strip_prefix('#') {
            Some(rest) => (rest.trim(), true),
            None => (line, false),
        };
        // Comment lines name binaries too (`# Collective test concluded: all_gather_perf`), but never the
        // command that starts a run.
        if !hashed {
            self.command(&tokens);
        }
        if self.keyword(body, lineno) {
            return;
        }
        let is_row = tokens
            .first()
            .is_some_and(|t| t.bytes().all(|b| b.is_ascii_digit()));
        if !hashed && is_row {
            self.row(&tokens, lineno);
        }
    }

    /// The run being read, started at `line` if there is none.
    fn current(&mut self, line: usize) -> &mut NcclTest {
        if self.current.is_none() {
            let mut t = NcclTest::new(line);
            t.tests_version = self.pending_tests_version.clone();
            t.nccl_version = self.pending_version.clone();
            t.command_binary = self.pending_binary.take();
            t.launched_processes = self.pending_processes.take();
            t.launched_nodes = self.pending_nodes.take();
            self.current = Some(t);
        }
        self.current.as_mut().expect("set above")
    }

    /// Whether the run being read has results or has failed (so a new header starts another run).
    fn current_has_results(&self) -> bool {
        self.current
            .as_ref()
            .is_some_and(|t| !t.rows.is_empty() || t.failure.is_some())
    }

    /// Starts a new run if the current one already has rows or a failure (a file with several runs).
    fn boundary(&mut self) {
        if self.current_has_results() {
            self.finish();
        }
    }

    fn finish(&mut self) {
        if let Some(mut t) = self.current.take() {
            if t.nccl_version.is_none() {
                t.nccl_version = self.pending_version.clone();
            }
            self.tests.push(t);
        }
        self.layout = None;
        self.failure_hosts.clear();
        self.failure_primary = false;
        self.recent_warnings.clear();
    }

    /// `NCCL version 2.30.3+cuda13.0`: the run's version, more precise than one from a version code.
    fn nccl_version(&mut self, v: String) {
        if let Some(t) = self.current.as_mut() {
            let vague = t
                .nccl_version
                .as_deref()
                .is_none_or(|old| v.starts_with(old) && v.len() > old.len());
            if vague {
                t.nccl_version = Some(v.clone());
            }
        }
        self.pending_version = Some(v);
    }

    fn remember_warning(&mut self, message: &str) {
        if self.recent_warnings.len() == WARNINGS_KEPT {
            self.recent_warnings.remove(0);
        }
        self.recent_warnings.push(message.to_string());
    }

    /// A failure line: the run's failure, and one more host that reported one.
    fn failure(&mut self, f: FailureLine, lineno: usize) {
        // A launcher's word after a run printed its footer concerns its teardown, not its results.
        let finished = self
            .current
            .as_ref()
            .is_some_and(|t| t.footer && t.failure.is_none());
        if !f.primary && finished {
            return;
        }
        if let Some(h) = f.host {
            if !self.failure_hosts.contains(&h) {
                self.failure_hosts.push(h);
            }
        }
        let hosts = self.failure_hosts.len() as u32;
        let warnings = self.recent_warnings.clone();
        let replace = f.primary && !self.failure_primary;
        self.failure_primary |= f.primary;
        let test = self.current(lineno);
        let after = test.largest_size_bytes();
        let failure = test.failure.get_or_insert_with(|| Failure {
            message: f.message.clone(),
            line: lineno,
            nccl_warnings: warnings,
            after_bytes: after,
            ..Failure::default()
        });
        if failure.exit_code.is_none() {
            failure.exit_code = exit_code_in(&f.message);
        }
        if replace {
            failure.message = f.message;
            failure.line = lineno;
        }
        failure.hosts = hosts;
    }

    /// A command line: the binary it names and the processes its launcher starts, for the run being read
    /// when it has no results yet, else for the next one.
    fn command(&mut self, tokens: &[&str]) {
        // The launcher's options end where the program starts: `-n 50` after `all_gather_perf` is its
        // iteration count.
        let program = tokens
            .iter()
            .position(|t| binary_in(&[t]).is_some())
            .unwrap_or(tokens.len());
        let mut processes = None;
        let mut nodes = None;
        if let Some((launcher, at)) = launcher_in(&tokens[..program]) {
            let options: Vec<String> = tokens[at + 1..program]
                .iter()
                .map(|t| t.to_string())
                .collect();
            let refs: Vec<&str> = options.iter().map(String::as_str).collect();
            processes = processes_in(launcher, &refs);
            nodes = nodes_in(launcher, &refs);
            self.continued_launcher = Some((launcher, options));
        } else if let Some((launcher, options)) = self.continued_launcher.as_mut() {
            options.extend(tokens[..program].iter().map(|t| t.to_string()));
            let refs: Vec<&str> = options.iter().map(String::as_str).collect();
            processes = processes_in(*launcher, &refs);
            nodes = nodes_in(*launcher, &refs);
        }
        if tokens.last() != Some(&"\\") && !tokens.last().is_some_and(|t| t.ends_with('\\')) {
            self.continued_launcher = None;
        }
        let binary = binary_in(tokens);
        if binary.is_none() && processes.is_none() && nodes.is_none() {
            return;
        }
        match self
            .current
            .as_mut()
            .filter(|t| t.rows.is_empty() && t.failure.is_none())
        {
            Some(t) => {
                t.command_binary = t.command_binary.take().or(binary);
                t.launched_processes = t.launched_processes.or(processes);
                t.launched_nodes = t.launched_nodes.or(nodes);
            }
            None => {
                self.pending_binary = self.pending_binary.take().or(binary);
                self.pending_processes = self.pending_processes.or(processes);
                self.pending_nodes = self.pending_nodes.or(nodes);
            }
        }
    }

    /// A line the format gives a meaning (with or without its `#`); `false` for any other line.
    fn keyword(&mut self, c: &str, lineno: usize) -> bool {
        if let Some(rest) = c.strip_prefix("nccl-tests version") {
            self.tests_version(rest, lineno);
        } else if let Some(name) = c.strip_prefix("Collective test starting:") {
            if self
                .current
                .as_ref()
                .is_some_and(|t| !t.collective.is_empty() || !t.rows.is_empty())
            {
                self.finish();
            }
            let test = self.current(lineno);
            test.collective = marker_name(name);
            test.collective_source = "marker";
            test.generation = Generation::Versioned;
        } else if let Some(name) = c.strip_prefix("Collective test concluded:") {
            // The footer names the collective too: a paste that starts below `starting` still tells it.
            if let Some(t) = self.current.as_mut() {
                if t.collective.is_empty() {
                    t.collective = marker_name(name);
                    t.collective_source = "marker";
                }
                t.footer = true;
            }
            self.finish();
        } else if c.starts_with("nThread") {
            self.run_header(c, lineno);
        } else if let Some(mut rank) = parse_rank_line(c) {
            // A rank list after a run's results or failure is the next run's.
            self.boundary();
            rank.line = lineno;
            self.current(lineno).ranks.push(rank);
        } else if let Some(rest) = c.strip_prefix("Reducing maxBytes to") {
            let max = rest.split_whitespace().next().and_then(|v| v.parse().ok());
            if let Some(max) = max {
                self.current(lineno).max_bytes = Some(max);
            }
        } else if let Some(rest) = c.strip_prefix("Out of bounds values") {
            let value = rest
                .trim_start_matches([' ', ':'])
                .split_whitespace()
                .next();
            if let Some(n) = value.and_then(|v| v.parse::<u64>().ok()) {
                let test = self.current(lineno);
                test.out_of_bounds = Some(n);
                test.footer = true;
            }
        } else if let Some(rest) = c.strip_prefix("Avg bus bandwidth") {
            self.average(rest, c, lineno);
        } else {
            let tokens: Vec<&str> = c.split_whitespace().collect();
            let Some(layout) = Layout::from_header(&tokens) else {
                return false;
            };
            self.boundary();
            let legacy = layout.legacy_error;
            self.layout = Some(layout);
            let test = self.current(lineno);
            if legacy {
                test.generation = Generation::Legacy;
            }
        }
        true
    }

    /// `# nccl-tests version 2.18.3 nccl-headers=23003 nccl-library=23003`: a new run, of the current
    /// generation.
    fn tests_version(&mut self, rest: &str, lineno: usize) {
        self.boundary();
        let mut it = rest.split_whitespace();
        let version = it.next().map(str::to_string);
        let library = it
            .find_map(|t| t.strip_prefix("nccl-library="))
            .and_then(|v| v.parse::<u32>().ok())
            .map(nccl_version_from_code);
        self.pending_tests_version = version.clone();
        let test = self.current(lineno);
        test.tests_version = version;
        test.generation = Generation::Versioned;
        if test.nccl_version.is_none() {
            test.nccl_version = library;
        }
    }

    /// `nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) … validation: 1 …` (or rccl-tests'
    /// `nThread: 1 nGpus: 1 …`).
    fn run_header(&mut self, c: &str, lineno: usize) {
        self.boundary();
        let tokens: Vec<&str> = c
            .split_whitespace()
            .map(|t| t.trim_end_matches(':'))
            .collect();
        let value = |key: &str| {
            tokens
                .iter()
                .position(|t| *t == key)
                .and_then(|i| tokens.get(i + 1))
                .copied()
        };
        let step = value("step").and_then(|s| {
            let (n, unit) = s.split_once('(')?;
            Some((n.parse::<u64>().ok()?, unit.starts_with("factor")))
        });
        let test = self.current(lineno);
        test.header_line = Some(lineno);
        test.nthreads = value("nThread").and_then(|v| v.parse().ok());
        test.ngpus = value("nGpus").and_then(|v| v.parse().ok());
        test.max_bytes = value("maxBytes").and_then(|v| v.parse().ok());
        test.step = step;
        test.validation = value("validation")
            .and_then(|v| v.parse::<u32>().ok())
            .map(|v| v != 0);
    }

    /// `Avg bus bandwidth    : 128.942`.
    fn average(&mut self, rest: &str, line: &str, lineno: usize) {
        let value = rest
            .trim_start_matches([' ', ':'])
            .split_whitespace()
            .next();
        match value.and_then(|v| v.parse::<f64>().ok()) {
            Some(v) if v.is_finite() => {
                let test = self.current(lineno);
                test.avg_busbw_gbps = Some(v);
                test.avg_line = Some(lineno);
                test.footer = true;
            }
            _ => self.warnings.push(LineWarning {
                line: lineno,
                message: format!("unreadable average bus bandwidth line: {line:?}"),
            }),
        }
    }

    /// A line that starts with a number: a table row, read with the header's layout (or a guessed one).
    fn row(&mut self, tokens: &[&str], lineno: usize) {
        let layout = match &self.layout {
            Some(l) => Some(l.clone()),
            None => Layout::guess(tokens),
        };
        let parsed = layout
            .as_ref()
            .ok_or_else(|| {
                "no header line before this row and its columns are not recognised".to_string()
            })
            .and_then(|l| parse_row(tokens, l, lineno));
        match parsed {
            Ok(row) => {
                if self.layout.is_none() {
                    self.layout = layout;
                }
                let legacy = self.layout.as_ref().is_some_and(|l| l.legacy_error);
                let test = self.current(lineno);
                if legacy {
                    test.generation = Generation::Legacy;
                }
                test.rows.push(row);
            }
            Err(message) => {
                self.skipped += 1;
                self.warnings.push(LineWarning {
                    line: lineno,
                    message,
                });
            }
        }
    }
}

/// A collective as a marker names it: `reduce_scatter_perf_mpi` is `reduce_scatter_perf` built with MPI.
fn marker_name(name: &str) -> String {
    let name = name.trim();
    name.strip_suffix("_mpi").unwrap_or(name).to_string()
}

/// `NCCL version 2.22.3+cuda12.6` (RCCL's `RCCL version 2.18.3+hip6.0`) anywhere in a line that is not part of
/// the table.
fn nccl_version_in(line: &str) -> Option<String> {
    crate::lines::version_in(line)
}
