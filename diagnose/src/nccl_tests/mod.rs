//! Parser for nccl-tests results (`all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`,
//! `alltoall_perf`, `broadcast_perf`, ...) and the rccl-tests equivalents.
//!
//! Every output generation is read:
//! - before 2022: `size count type [redop] time algbw busbw error ...` (no `root` column, `error` is a
//!   max-relative-error float or `N/A`), including rccl-tests' `nThread: 1 nGpus: 1 …` header;
//! - 2022 to 2025: `size count type redop root time algbw busbw #wrong ...`;
//! - the current one: a `# nccl-tests version` line, `# Collective test starting/concluded` markers, optional
//!   per-iteration columns (`i_min i_max i_p99 i_cv%` after each `#wrong`), an optional trailing `timestamp`
//!   (two tokens, `YYYY-MM-DD HH:MM:SS`), `cputime` instead of `time`;
//! - the JSON document written by `-J FILE`, and rccl-tests' JSON lines (`--output_file`, one record per
//!   measurement).
//!
//! Text as people paste it is read too: columns are mapped from the header line (with or without its `#`),
//! so width changes between generations do not matter; rows are split on whitespace; `mpirun --tag-output`
//! prefixes (`[1,0]<stdout>:`) are removed wherever they occur, also in the middle of a row; `NCCL INFO`/`NCCL
//! WARN` lines, MPI help messages and prose inside the table are skipped; footers are read with or without
//! their `#`. A file may hold several runs.
//!
//! Beyond the table each run records what the file says about it: the binary and launcher named on its
//! command line ([`command`]), and how the run failed when it did ([`failure`]), so that a crashed run is
//! reported as such and a partial table is never taken for a result.

mod command;
mod failure;
mod json;
mod naming;
mod row;
mod text;

use std::path::Path;

use serde::Serialize;

pub use self::naming::collective_from_name;

/// Errors that make a whole nccl-tests file unusable. Problems with single lines are [`LineWarning`]s.
#[derive(Debug, thiserror::Error)]
pub enum NcclTestsError {
    #[error("{file}: cannot read: {error}")]
    Io { file: String, error: std::io::Error },
    /// Nothing in the file was a result table or a failed run; the first lines that could not be placed, to
    /// show what the file holds.
    #[error("{file}: no nccl-tests result table found (first lines: {})", first_lines.join(" | "))]
    NoResults {
        file: String,
        first_lines: Vec<String>,
    },
    #[error("{file}: invalid nccl-tests JSON at line {line}, column {column}: {message}")]
    Json {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
}

/// A line that could not be used, with its 1-based line number.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineWarning {
    pub line: usize,
    pub message: String,
}

/// Which generation of the output format a test was printed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Generation {
    /// Before 2022: `error` column, no `root` column.
    Legacy,
    /// 2022 to 2025: `#wrong` and `root` columns, no version line.
    Wrong,
    /// 2025 on: `# nccl-tests version` line and test start/end markers.
    Versioned,
    /// The `-J` JSON document.
    Json,
    /// rccl-tests' JSON lines: one object per measurement.
    JsonLines,
}

/// One measurement of a row (out-of-place or in-place).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    /// Time of one collective, microseconds (CPU time when the test ran with `-C 1`).
    pub time_us: f64,
    /// Algorithm bandwidth, GB/s (1e9 bytes per second).
    pub algbw_gbps: f64,
    /// Bus bandwidth, GB/s (1e9 bytes per second).
    pub busbw_gbps: f64,
    /// Wrong elements (`#wrong`) or, in the legacy format, the maximum error; `None` for `N/A`.
    pub wrong: Option<f64>,
}

/// One line of the result table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub size_bytes: u64,
    pub count: u64,
    #[serde(rename = "type")]
    pub dtype: String,
    pub redop: Option<String>,
    pub root: Option<i64>,
    pub out_of_place: Option<Placement>,
    pub in_place: Option<Placement>,
    /// 1-based line in the file (0 for the JSON format).
    pub line: usize,
}

impl Row {
    /// Placements present in this row, out-of-place first, with the in-place flag.
    pub fn placements(&self) -> impl Iterator<Item = (bool, &Placement)> {
        self.out_of_place
            .iter()
            .map(|p| (false, p))
            .chain(self.in_place.iter().map(|p| (true, p)))
    }

    /// The better (shorter) of the two times, which filters single noisy samples.
    pub fn best_time_us(&self) -> Option<f64> {
        self.placements().map(|(_, p)| p.time_us).reduce(f64::min)
    }

    /// The higher of the two bus bandwidths.
    pub fn best_busbw_gbps(&self) -> Option<f64> {
        self.placements()
            .map(|(_, p)| p.busbw_gbps)
            .reduce(f64::max)
    }
}

/// A rank listed under `# Using devices`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankDevice {
    pub rank: u32,
    pub host: String,
    pub device: Option<u32>,
    /// The device's bus id as listed (`0000:02:00`, `0x04`).
    pub bus: Option<String>,
    /// 1-based line of the listing (0 where the format has no lines).
    pub line: usize,
}

/// How a run failed, as the file shows it: nccl-tests' own failure line (`HOST: Test NCCL failure
/// common.cu:392 'unhandled cuda error …'`), the NCCL warnings just before it and what the launcher said.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Failure {
    /// The first failure line, without the host that printed it.
    pub message: String,
    /// Its 1-based line in the file.
    pub line: usize,
    /// Distinct hosts that printed a failure line.
    pub hosts: u32,
    /// The last `NCCL WARN` messages before the failure (at most [`failure::WARNINGS_KEPT`]), oldest first.
    pub nccl_warnings: Vec<String>,
    /// The largest size measured before the failure, bytes; `None` when it failed before the first row.
    pub after_bytes: Option<u64>,
    /// The launcher's exit code (`mpirun`: `Exit code: 3`), when printed.
    pub exit_code: Option<i32>,
}

/// One test (one program run) found in a file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclTest {
    /// `all_reduce_perf`, `all_gather_perf`, ...; see [`NcclTest::collective_source`].
    pub collective: String,
    /// Where the name came from: `marker` (the test said), `json`, `command_line` (the binary the file names),
    /// `inferred` (busbw/algbw ratio), `unknown`.
    pub collective_source: &'static str,
    pub generation: Generation,
    pub tests_version: Option<String>,
    pub nccl_version: Option<String>,
    pub nthreads: Option<u32>,
    pub ngpus: Option<u32>,
    pub ranks: Vec<RankDevice>,
    pub rows: Vec<Row>,
    /// The `Avg bus bandwidth` line as printed, GB/s.
    pub avg_busbw_gbps: Option<f64>,
    /// `Out of bounds values` count.
    pub out_of_bounds: Option<u64>,
    /// 1-based line where the test starts (0 for JSON).
    pub first_line: usize,
    /// The nccl-tests binary the file names before this run (`./build/all_reduce_perf`), as a binary name.
    pub command_binary: Option<String>,
    /// Processes the launcher starts (`mpirun -np 1024`, `srun -n 16`), when its command line is in the file.
    pub launched_processes: Option<u32>,
    /// Nodes the launcher's command line names (`srun -N 4`, `mpirun -H a,b`, `-np 16 -npernode 8`).
    pub launched_nodes: Option<u32>,
    /// Ranks the output declares without listing them (rccl-tests JSON lines: `gpus`).
    pub declared_ranks: Option<u32>,
    /// The largest size the run set out to measure (`maxBytes`, or what memory reduced it to), bytes.
    pub max_bytes: Option<u64>,
    /// The size step of the header: `(factor, true)` for `step: 2(factor)`, `(bytes, false)` for
    /// `step: 1048576(bytes)`.
    pub step: Option<(u64, bool)>,
    /// Whether results were validated (`validation: 1`); `None` when the header is not in the file.
    pub validation: Option<bool>,
    /// How the run failed, when the file shows it.
    pub failure: Option<Failure>,
    /// Whether the run's footer (`Avg bus bandwidth`, `Out of bounds values`, `Collective test concluded`)
    /// was printed: a run without it stopped, or its output was cut.
    pub footer: bool,
    /// 1-based lines of the run's header (`nThread …`) and of its average, when printed.
    pub header_line: Option<usize>,
    pub avg_line: Option<usize>,
}

impl NcclTest {
    /// An empty test starting at `first_line`, of the 2022-2025 generation until a line says otherwise.
    pub fn new(first_line: usize) -> NcclTest {
        NcclTest {
            collective: String::new(),
            collective_source: "unknown",
            generation: Generation::Wrong,
            tests_version: None,
            nccl_version: None,
            nthreads: None,
            ngpus: None,
            ranks: Vec::new(),
            rows: Vec::new(),
            avg_busbw_gbps: None,
            out_of_bounds: None,
            first_line,
            command_binary: None,
            launched_processes: None,
            launched_nodes: None,
            declared_ranks: None,
            max_bytes: None,
            step: None,
            validation: None,
            failure: None,
            footer: false,
            header_line: None,
            avg_line: None,
        }
    }

    /// The rank count the `Using devices` list proves: its length when it lists ranks 0 to n-1 each once.
    fn listed_ranks(&self) -> Option<u32> {
        let mut ranks: Vec<u32> = self.ranks.iter().map(|r| r.rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        let complete = !ranks.is_empty()
            && ranks.len() == self.ranks.len()
            && ranks.iter().enumerate().all(|(i, r)| *r as usize == i);
        complete.then_some(ranks.len() as u32)
    }

    /// Ranks the launcher starts: processes × threads × GPUs per thread.
    fn launched_ranks(&self) -> Option<u32> {
        let p = self.launched_processes?;
        Some(p * self.nthreads.unwrap_or(1) * self.ngpus.unwrap_or(1))
    }

    /// Number of ranks, when the file shows it: the `Using devices` list when complete, or the launcher's
    /// process count when the list is shorter (a pasted list cut at some rank) or absent, or the count the
    /// output declares. `None` when only part of the ranks is listed: see [`NcclTest::nranks_at_least`].
    pub fn nranks(&self) -> Option<u32> {
        match (self.listed_ranks(), self.launched_ranks()) {
            (Some(listed), Some(launched)) => Some(listed.max(launched)),
            (Some(listed), None) => Some(listed),
            (None, Some(launched)) if launched >= self.highest_listed_rank() => Some(launched),
            (None, _) if self.ranks.is_empty() => self.declared_ranks,
            _ => None,
        }
    }

    /// One more than the highest rank listed; 0 without a list.
    fn highest_listed_rank(&self) -> u32 {
        self.ranks.iter().map(|r| r.rank + 1).max().unwrap_or(0)
    }

    /// A lower bound on the rank count when [`NcclTest::nranks`] does not know it: one more than the highest
    /// rank listed (a paste that starts at `Rank 71` shows at least 72 ranks).
    pub fn nranks_at_least(&self) -> Option<u32> {
        match self.nranks() {
            Some(_) => None,
            None => Some(self.highest_listed_rank()).filter(|n| *n > 0),
        }
    }

    /// A lower bound on the hosts when [`NcclTest::nnodes`] does not know them: the distinct hosts listed,
    /// when more than one.
    pub fn nnodes_at_least(&self) -> Option<u32> {
        if self.nnodes().is_some() {
            return None;
        }
        let mut hosts: Vec<&str> = self.ranks.iter().map(|r| r.host.as_str()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        Some(hosts.len() as u32).filter(|n| *n > 1)
    }

    /// Ranks listed on the same host with the same device and bus id: processes sharing one GPU.
    pub fn ranks_sharing_a_gpu(&self) -> Vec<&RankDevice> {
        self.ranks
            .iter()
            .filter(|r| {
                r.device.is_some()
                    && self.ranks.iter().any(|o| {
                        o.rank != r.rank
                            && o.host == r.host
                            && o.device == r.device
                            && o.bus == r.bus
                    })
            })
            .collect()
    }

    /// Number of distinct hosts, when the `Using devices` list holds every rank; else the nodes the
    /// launcher's command line names.
    pub fn nnodes(&self) -> Option<u32> {
        if self.listed_ranks().is_none_or(|l| Some(l) != self.nranks()) {
            return self.launched_nodes;
        }
        let mut hosts: Vec<&str> = self.ranks.iter().map(|r| r.host.as_str()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        Some(hosts.len() as u32)
    }

    /// Whether the run measured every size it set out to: no failure, and either the footer was printed or
    /// the table reaches the last size the header announces. A file without the header and the footer
    /// counts as complete (nothing shows otherwise).
    pub fn complete(&self) -> bool {
        self.failure.is_none() && !self.cut_short()
    }

    /// Whether the table stops before the size the header announces as its last, without a footer.
    pub fn cut_short(&self) -> bool {
        if self.avg_busbw_gbps.is_some() || self.rows.is_empty() {
            return false;
        }
        let (Some(max), Some((step, factor)), Some(last)) = (
            self.max_bytes,
            self.step,
            self.rows.iter().map(|r| r.size_bytes).max(),
        ) else {
            return false;
        };
        let next = if factor {
            last.saturating_mul(step.max(2))
        } else {
            last.saturating_add(step.max(1))
        };
        next <= max
    }

    /// The largest size measured, bytes.
    pub fn largest_size_bytes(&self) -> Option<u64> {
        self.rows.iter().map(|r| r.size_bytes).max()
    }
}

/// Everything read from one file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclTestsFile {
    pub tests: Vec<NcclTest>,
    pub warnings: Vec<LineWarning>,
    /// Lines that looked like table rows but could not be read.
    pub skipped_lines: usize,
}

/// Reads and parses a file (text, `-J` JSON or JSON lines, detected by content).
pub fn parse_file(path: &Path) -> Result<NcclTestsFile, NcclTestsError> {
    let file = path.display().to_string();
    let text = crate::input::read_text(path).map_err(|error| NcclTestsError::Io {
        file: file.clone(),
        error,
    })?;
    parse_str(&text, &file)
}

/// Parses file content. `file` names the input in errors and nothing else: a file's name is never evidence
/// (a descriptive name must not score better than the content).
///
/// A run that failed before its first row is kept (with its [`Failure`]); a file with neither rows nor a
/// failure is [`NcclTestsError::NoResults`].
pub fn parse_str(text: &str, file: &str) -> Result<NcclTestsFile, NcclTestsError> {
    // JSON passed through a launcher carries its prefixes too: detected and read on the plain lines (built only
    // when the first plain line opens an object).
    let raw_json = json::is_json_lines(text) || text.trim_start().starts_with('{');
    let prefixed_json = !raw_json
        && crate::lines::lines(text)
            .find(|l| !l.text.is_empty())
            .is_some_and(|l| l.text.starts_with('{'));
    let plain: Option<String> = prefixed_json.then(|| {
        crate::lines::lines(text)
            .map(|l| l.text.into_owned() + "\n")
            .collect()
    });
    let json_text = plain.as_deref().unwrap_or(text);
    let mut parsed = if json::is_json_lines(json_text) {
        json::parse_json_lines(json_text)
    } else if json_text.trim_start().starts_with('{') {
        json::parse_json(json_text, file)?
    } else {
        text::parse_text(text)
    };
    parsed
        .tests
        .retain(|t| !t.rows.is_empty() || t.failure.is_some());
    if parsed.tests.is_empty() {
        let first_lines = crate::lines::lines(text)
            .filter(|l| !l.text.is_empty())
            .take(5)
            .map(|l| format!("{}: {}", l.number, l.raw.trim()))
            .collect();
        return Err(NcclTestsError::NoResults {
            file: file.to_string(),
            first_lines,
        });
    }
    for test in &mut parsed.tests {
        if test.collective.is_empty() {
            naming::name_test(test);
        }
    }
    Ok(parsed)
}

pub use crate::lines::strip_mpi_tags;

/// NCCL_VERSION_CODE to a version: `major*10000 + minor*100 + patch` since 2.9, `major*1000 + minor*100 + patch`
/// before.
fn nccl_version_from_code(code: u32) -> String {
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// `Rank  0 Group  0 Pid 181 on HOST device  0 [0x04] NAME` (or without `Group` before 2022), the text after
/// the `#` of a `Using devices` line.
pub fn parse_rank_line(c: &str) -> Option<RankDevice> {
    let tokens: Vec<&str> = c.split_whitespace().collect();
    if tokens.first() != Some(&"Rank") {
        return None;
    }
    let rank = tokens.get(1)?.parse().ok()?;
    let on = tokens.iter().position(|t| *t == "on")?;
    let host = tokens.get(on + 1)?.to_string();
    let at = tokens.iter().position(|t| *t == "device");
    let device = at
        .and_then(|i| tokens.get(i + 1))
        .and_then(|d| d.parse().ok());
    let bus = at
        .and_then(|i| tokens.get(i + 2))
        .filter(|b| b.starts_with('[') && b.ends_with(']'))
        .map(|b| b.trim_matches(['[', ']']).to_string());
    Some(RankDevice {
        rank,
        host,
        device,
        bus,
        line: 0,
    })
}

#[cfg(test)]
mod tests;
