//! Parser for nccl-tests results (`all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`,
//! `alltoall_perf`, `broadcast_perf`, ...).
//!
//! Every output generation is read:
//! - before 2022: `size count type [redop] time algbw busbw error ...` (no `root` column, `error` is a
//!   max-relative-error float or `N/A`);
//! - 2022 to 2025: `size count type redop root time algbw busbw #wrong ...`;
//! - the current one: a `# nccl-tests version` line, `# Collective test starting/concluded` markers, optional
//!   per-iteration columns (`i_min i_max i_p99 i_cv%` after each `#wrong`), an optional trailing `timestamp`
//!   (two tokens, `YYYY-MM-DD HH:MM:SS`), `cputime` instead of `time`;
//! - the JSON document written by `-J FILE`.
//!
//! Columns are mapped from the header line, so width changes between generations do not matter; rows are split
//! on whitespace. `mpirun --tag-output` prefixes (`[1,0]<stdout>:`) are removed wherever they occur, also in the
//! middle of a row, and `NCCL INFO`/`NCCL WARN` lines inside the table are skipped.

use std::path::Path;

use serde::Serialize;

/// Errors that make a whole nccl-tests file unusable. Problems with single lines are [`LineWarning`]s.
#[derive(Debug, thiserror::Error)]
pub enum NcclTestsError {
    #[error("{file}: cannot read: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: no nccl-tests result table found")]
    NoResults { file: String },
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
}

/// One test (one program run) found in a file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclTest {
    /// `all_reduce_perf`, `all_gather_perf`, ...; see [`NcclTest::collective_source`].
    pub collective: String,
    /// Where the name came from: `marker` (the test said), `json`, `file_name`, `inferred` (busbw/algbw ratio),
    /// `unknown`.
    pub collective_source: &'static str,
    pub generation: Generation,
    pub tests_version: Option<String>,
    pub nccl_version: Option<String>,
    pub nthreads: Option<u32>,
    pub ngpus: Option<u32>,
    pub ranks: Vec<RankDevice>,
    pub rows: Vec<Row>,
    /// The `# Avg bus bandwidth` line as printed, GB/s.
    pub avg_busbw_gbps: Option<f64>,
    /// `# Out of bounds values` count.
    pub out_of_bounds: Option<u64>,
    /// 1-based line where the test starts (0 for JSON).
    pub first_line: usize,
}

impl NcclTest {
    /// Number of ranks: the `Using devices` list, else threads × GPUs.
    pub fn nranks(&self) -> Option<u32> {
        if !self.ranks.is_empty() {
            return Some(self.ranks.len() as u32);
        }
        match (self.nthreads, self.ngpus) {
            (Some(t), Some(g)) => Some(t * g),
            _ => None,
        }
    }

    /// Number of distinct hosts in the `Using devices` list.
    pub fn nnodes(&self) -> Option<u32> {
        if self.ranks.is_empty() {
            return None;
        }
        let mut hosts: Vec<&str> = self.ranks.iter().map(|r| r.host.as_str()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        Some(hosts.len() as u32)
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

/// Reads and parses a file (text or `-J` JSON, detected by content).
pub fn parse_file(path: &Path) -> Result<NcclTestsFile, NcclTestsError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| NcclTestsError::Io {
        file: file.clone(),
        source,
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    parse_str(&text, &file, name.as_deref())
}

/// Parses file content. `file` names the input in errors; `file_name` helps to name a test that does not say
/// which collective it ran.
pub fn parse_str(
    text: &str,
    file: &str,
    file_name: Option<&str>,
) -> Result<NcclTestsFile, NcclTestsError> {
    let parsed = if text.trim_start().starts_with('{') {
        parse_json(text, file)?
    } else {
        parse_text(text)
    };
    if parsed.tests.iter().all(|t| t.rows.is_empty()) {
        return Err(NcclTestsError::NoResults {
            file: file.to_string(),
        });
    }
    let mut parsed = parsed;
    parsed.tests.retain(|t| !t.rows.is_empty());
    for test in &mut parsed.tests {
        if test.collective.is_empty() {
            name_test(test, file_name);
        }
    }
    Ok(parsed)
}

/// Removes every `[x,y]<stdout>:` / `[x,y]<stderr>:` tag that `mpirun --tag-output` inserts, wherever it is.
pub fn strip_mpi_tags(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.contains("]<std") {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(pos) = rest.find('[') {
        out.push_str(&rest[..pos]);
        let candidate = &rest[pos..];
        match mpi_tag_len(candidate) {
            Some(len) => rest = &candidate[len..],
            None => {
                out.push('[');
                rest = &candidate[1..];
            }
        }
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// Length of an `[digits,digits]<stdout>:` tag at the start of `s`.
fn mpi_tag_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 1;
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > start
    };
    if !digits(&mut i) || b.get(i) != Some(&b',') {
        return None;
    }
    i += 1;
    if !digits(&mut i) || b.get(i) != Some(&b']') {
        return None;
    }
    i += 1;
    for tag in ["<stdout>:", "<stderr>:"] {
        if s[i..].starts_with(tag) {
            return Some(i + tag.len());
        }
    }
    None
}

/// Column layout taken from a header line.
#[derive(Debug, Clone, PartialEq)]
struct Layout {
    has_redop: bool,
    has_root: bool,
    legacy_error: bool,
    per_iteration: bool,
    timestamp: bool,
}

impl Layout {
    fn leading(&self) -> usize {
        3 + usize::from(self.has_redop) + usize::from(self.has_root)
    }
    fn group(&self) -> usize {
        if self.per_iteration {
            8
        } else {
            4
        }
    }
    fn trailing(&self) -> usize {
        if self.timestamp {
            2
        } else {
            0
        }
    }
    fn from_header(tokens: &[&str]) -> Option<Layout> {
        if tokens.first() != Some(&"size") || tokens.get(1) != Some(&"count") {
            return None;
        }
        Some(Layout {
            has_redop: tokens.contains(&"redop"),
            has_root: tokens.contains(&"root"),
            legacy_error: tokens.contains(&"error"),
            per_iteration: tokens.contains(&"i_min"),
            timestamp: tokens.contains(&"timestamp"),
        })
    }
}

#[derive(Default)]
struct TextState {
    tests: Vec<NcclTest>,
    current: Option<NcclTest>,
    pending_version: Option<String>,
    pending_tests_version: Option<String>,
    layout: Option<Layout>,
}

impl TextState {
    fn current(&mut self, line: usize) -> &mut NcclTest {
        if self.current.is_none() {
            self.current = Some(NcclTest {
                collective: String::new(),
                collective_source: "unknown",
                generation: Generation::Wrong,
                tests_version: self.pending_tests_version.clone(),
                nccl_version: self.pending_version.clone(),
                nthreads: None,
                ngpus: None,
                ranks: Vec::new(),
                rows: Vec::new(),
                avg_busbw_gbps: None,
                out_of_bounds: None,
                first_line: line,
            });
        }
        self.current.as_mut().expect("set above")
    }

    /// Starts a new test if the current one already has rows (a file with several runs).
    fn boundary(&mut self) {
        let has_rows = self.current.as_ref().is_some_and(|t| !t.rows.is_empty());
        if has_rows {
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
    }
}

fn parse_text(text: &str) -> NcclTestsFile {
    let mut st = TextState::default();
    let mut warnings = Vec::new();
    let mut skipped = 0usize;
    for (idx, raw) in text.lines().enumerate() {
        let lineno = idx + 1;
        let stripped = strip_mpi_tags(raw);
        let line = stripped.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(v) = nccl_version_in(line) {
            st.pending_version = Some(v.clone());
            if let Some(t) = st.current.as_mut() {
                if t.nccl_version.is_none() {
                    t.nccl_version = Some(v);
                }
            }
            continue;
        }
        if line.contains(" NCCL INFO ")
            || line.contains(" NCCL WARN ")
            || line.contains("NCCL INFO")
        {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            handle_comment(&mut st, comment.trim(), lineno, &mut warnings);
            continue;
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let looks_like_row = tokens
            .first()
            .is_some_and(|t| t.bytes().all(|b| b.is_ascii_digit()));
        if !looks_like_row {
            continue;
        }
        let layout = match &st.layout {
            Some(l) => Some(l.clone()),
            None => guess_layout(&tokens),
        };
        let parsed = layout
            .as_ref()
            .ok_or_else(|| {
                "no header line before this row and its columns are not recognised".to_string()
            })
            .and_then(|l| parse_row(&tokens, l, lineno));
        match parsed {
            Ok(row) => {
                if st.layout.is_none() {
                    st.layout = layout;
                }
                let legacy = st.layout.as_ref().is_some_and(|l| l.legacy_error);
                let test = st.current(lineno);
                if legacy {
                    test.generation = Generation::Legacy;
                }
                test.rows.push(row);
            }
            Err(message) => {
                skipped += 1;
                warnings.push(LineWarning {
                    line: lineno,
                    message,
                });
            }
        }
    }
    st.finish();
    NcclTestsFile {
        tests: st.tests,
        warnings,
        skipped_lines: skipped,
    }
}

/// `NCCL version 2.22.3+cuda12.6` anywhere in a line that is not part of the table.
fn nccl_version_in(line: &str) -> Option<String> {
    let pos = line.find("NCCL version ")?;
    let v = line[pos + "NCCL version ".len()..]
        .split_whitespace()
        .next()?;
    if v.starts_with(|c: char| c.is_ascii_digit()) {
        Some(v.to_string())
    } else {
        None
    }
}

fn handle_comment(st: &mut TextState, c: &str, lineno: usize, warnings: &mut Vec<LineWarning>) {
    if let Some(rest) = c.strip_prefix("nccl-tests version") {
        st.boundary();
        let mut it = rest.split_whitespace();
        let version = it.next().map(str::to_string);
        let library = it
            .find_map(|t| t.strip_prefix("nccl-library="))
            .and_then(|v| v.parse::<u32>().ok())
            .map(nccl_version_from_code);
        st.pending_tests_version = version.clone();
        let test = st.current(lineno);
        test.tests_version = version;
        test.generation = Generation::Versioned;
        if let Some(lib) = library {
            if test.nccl_version.is_none() {
                test.nccl_version = Some(lib);
            }
        }
    } else if let Some(name) = c.strip_prefix("Collective test starting:") {
        if st
            .current
            .as_ref()
            .is_some_and(|t| !t.collective.is_empty() || !t.rows.is_empty())
        {
            st.finish();
        }
        let test = st.current(lineno);
        test.collective = name.trim().to_string();
        test.collective_source = "marker";
        test.generation = Generation::Versioned;
    } else if c.starts_with("Collective test concluded:") {
        st.finish();
    } else if c.starts_with("nThread ") {
        st.boundary();
        let tokens: Vec<&str> = c.split_whitespace().collect();
        let value = |key: &str| {
            tokens
                .iter()
                .position(|t| *t == key)
                .and_then(|i| tokens.get(i + 1))
                .and_then(|v| v.parse::<u32>().ok())
        };
        let (nthreads, ngpus) = (value("nThread"), value("nGpus"));
        let test = st.current(lineno);
        test.nthreads = nthreads;
        test.ngpus = ngpus;
    } else if c.starts_with("Rank ") {
        if let Some(rank) = parse_rank_line(c) {
            st.current(lineno).ranks.push(rank);
        }
    } else if let Some(rest) = c.strip_prefix("Out of bounds values") {
        let value = rest
            .trim_start_matches([' ', ':'])
            .split_whitespace()
            .next();
        if let Some(n) = value.and_then(|v| v.parse::<u64>().ok()) {
            st.current(lineno).out_of_bounds = Some(n);
        }
    } else if let Some(rest) = c.strip_prefix("Avg bus bandwidth") {
        let value = rest
            .trim_start_matches([' ', ':'])
            .split_whitespace()
            .next();
        match value.and_then(|v| v.parse::<f64>().ok()) {
            Some(v) if v.is_finite() => st.current(lineno).avg_busbw_gbps = Some(v),
            _ => warnings.push(LineWarning {
                line: lineno,
                message: format!("unreadable average bus bandwidth line: {c:?}"),
            }),
        }
    } else {
        let tokens: Vec<&str> = c.split_whitespace().collect();
        if let Some(layout) = Layout::from_header(&tokens) {
            st.boundary();
            let legacy = layout.legacy_error;
            st.layout = Some(layout);
            let test = st.current(lineno);
            if legacy {
                test.generation = Generation::Legacy;
            }
        }
    }
}

/// NCCL_VERSION_CODE to a version: `major*10000 + minor*100 + patch` since 2.9, `major*1000 + minor*100 + patch`
/// before.
fn nccl_version_from_code(code: u32) -> String {
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// `Rank  0 Group  0 Pid 181 on HOST device  0 [0x04] NAME` (or without `Group` before 2022).
fn parse_rank_line(c: &str) -> Option<RankDevice> {
    let tokens: Vec<&str> = c.split_whitespace().collect();
    let rank = tokens.get(1)?.parse().ok()?;
    let on = tokens.iter().position(|t| *t == "on")?;
    let host = tokens.get(on + 1)?.to_string();
    let device = tokens
        .iter()
        .position(|t| *t == "device")
        .and_then(|i| tokens.get(i + 1))
        .and_then(|d| d.parse().ok());
    Some(RankDevice { rank, host, device })
}

/// Picks a layout for rows seen without a header (a file cut above the table).
fn guess_layout(tokens: &[&str]) -> Option<Layout> {
    for leading in [5usize, 4, 3] {
        for per_iteration in [false, true] {
            for timestamp in [false, true] {
                let layout = Layout {
                    has_redop: leading >= 4,
                    has_root: leading == 5,
                    legacy_error: false,
                    per_iteration,
                    timestamp,
                };
                let n = layout.leading() + 2 * layout.group() + layout.trailing();
                if n == tokens.len() && parse_row(tokens, &layout, 0).is_ok() {
                    return Some(layout);
                }
            }
        }
    }
    None
}

fn parse_row(tokens: &[&str], layout: &Layout, line: usize) -> Result<Row, String> {
    let lead = layout.leading();
    let group = layout.group();
    let full = lead + 2 * group + layout.trailing();
    let single = lead + group + layout.trailing();
    let two_groups = if tokens.len() == full {
        true
    } else if tokens.len() == single {
        false
    } else {
        return Err(format!(
            "row has {} columns, the header announces {full}",
            tokens.len()
        ));
    };
    let int = |i: usize, what: &str| -> Result<u64, String> {
        tokens[i]
            .parse::<u64>()
            .map_err(|_| format!("{what} {:?} is not an integer", tokens[i]))
    };
    let size_bytes = int(0, "size")?;
    let count = int(1, "count")?;
    let dtype = tokens[2].to_string();
    if dtype.parse::<f64>().is_ok() {
        return Err(format!("type {dtype:?} is a number: columns are shifted"));
    }
    let mut i = 3;
    let redop = if layout.has_redop {
        i += 1;
        Some(tokens[i - 1].to_string())
    } else {
        None
    };
    let root = if layout.has_root {
        i += 1;
        Some(
            tokens[i - 1]
                .parse::<i64>()
                .map_err(|_| format!("root {:?} is not an integer", tokens[i - 1]))?,
        )
    } else {
        None
    };
    let first = parse_placement(&tokens[i..i + group])?;
    let (out_of_place, in_place) = if two_groups {
        let second = parse_placement(&tokens[i + group..i + 2 * group])?;
        (Some(first), Some(second))
    } else {
        // Only the in-place half is printed when out-of-place is not measured.
        (None, Some(first))
    };
    Ok(Row {
        size_bytes,
        count,
        dtype,
        redop,
        root,
        out_of_place,
        in_place,
        line,
    })
}

fn parse_placement(t: &[&str]) -> Result<Placement, String> {
    let num = |i: usize, what: &str| -> Result<f64, String> {
        match t[i].parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(format!("{what} {:?} is not a number", t[i])),
        }
    };
    let wrong = if t[3] == "N/A" {
        None
    } else {
        Some(num(3, "#wrong")?)
    };
    Ok(Placement {
        time_us: num(0, "time")?,
        algbw_gbps: num(1, "algbw")?,
        busbw_gbps: num(2, "busbw")?,
        wrong,
    })
}

/// Names a test from the file name or from its numbers when the output does not say.
fn name_test(test: &mut NcclTest, file_name: Option<&str>) {
    if let Some(name) = file_name.and_then(collective_from_name) {
        test.collective = name.to_string();
        test.collective_source = "file_name";
        return;
    }
    if let Some(name) = infer_collective(test) {
        test.collective = name.to_string();
        test.collective_source = "inferred";
        return;
    }
    test.collective = "unknown".to_string();
    test.collective_source = "unknown";
}

/// Maps a file or program name to the nccl-tests binary name.
pub fn collective_from_name(name: &str) -> Option<&'static str> {
    let lower: String = name
        .to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    const NAMES: [(&str, &str); 9] = [
        ("allreduce", "all_reduce_perf"),
        ("allgather", "all_gather_perf"),
        ("reducescatter", "reduce_scatter_perf"),
        ("alltoall", "alltoall_perf"),
        ("broadcast", "broadcast_perf"),
        ("sendrecv", "sendrecv_perf"),
        ("hypercube", "hypercube_perf"),
        ("scatter", "scatter_perf"),
        ("gather", "gather_perf"),
    ];
    NAMES
        .iter()
        .find(|(k, _)| lower.contains(k))
        .map(|(_, v)| *v)
        .or_else(|| {
            // `reduce` must come after `allreduce` and `reducescatter`.
            lower.contains("reduce").then_some("reduce_perf")
        })
}

/// Infers the collective from busbw/algbw, which nccl-tests sets per collective: 2(n-1)/n for all-reduce,
/// (n-1)/n for all-gather, reduce-scatter and all-to-all (told apart by the `redop` column), 1 for the rooted
/// ones.
fn infer_collective(test: &NcclTest) -> Option<&'static str> {
    let n = f64::from(test.nranks()?);
    if n < 2.0 {
        return None;
    }
    let ratio = test
        .rows
        .iter()
        .rev()
        .filter_map(|r| r.out_of_place.as_ref())
        .find(|p| p.algbw_gbps >= 1.0)
        .map(|p| p.busbw_gbps / p.algbw_gbps)?;
    let close = |x: f64| (ratio - x).abs() < 0.02 * x;
    let has_redop = test
        .rows
        .first()
        .is_some_and(|r| r.redop.as_deref().is_some_and(|o| o != "none"));
    let has_root = test
        .rows
        .first()
        .is_some_and(|r| r.root.is_some_and(|x| x >= 0));
    if close(2.0 * (n - 1.0) / n) {
        Some("all_reduce_perf")
    } else if close((n - 1.0) / n) {
        Some(if has_redop {
            "reduce_scatter_perf"
        } else {
            "all_gather_perf"
        })
    } else if close(1.0) && has_root {
        Some(if has_redop {
            "reduce_perf"
        } else {
            "broadcast_perf"
        })
    } else {
        None
    }
}

fn parse_json(text: &str, file: &str) -> Result<NcclTestsFile, NcclTestsError> {
    let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| NcclTestsError::Json {
        file: file.to_string(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let mut warnings = Vec::new();
    let mut skipped = 0;
    let program = doc
        .get("args")
        .and_then(|a| a.get(0))
        .and_then(|a| a.as_str())
        .and_then(|p| p.rsplit('/').next())
        .map(str::to_string);
    let config = doc.get("config");
    let as_u32 = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_u64()).map(|v| v as u32);
    let ranks = config
        .and_then(|c| c.get("devices"))
        .and_then(|d| d.as_array())
        .map(|devs| {
            devs.iter()
                .filter_map(|d| {
                    Some(RankDevice {
                        rank: d.get("rank")?.as_u64()? as u32,
                        host: d.get("hostname")?.as_str()?.to_string(),
                        device: d.get("device").and_then(|v| v.as_u64()).map(|v| v as u32),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let mut rows = Vec::new();
    let mut experiment = None;
    if let Some(results) = doc.get("results").and_then(|r| r.as_array()) {
        for (i, r) in results.iter().enumerate() {
            match json_row(r) {
                Some(row) => rows.push(row),
                None => {
                    skipped += 1;
                    warnings.push(LineWarning {
                        line: 0,
                        message: format!("results[{i}] is missing size, count or measurements"),
                    });
                }
            }
            if experiment.is_none() {
                experiment = r
                    .get("experiment_name")
                    .and_then(|e| e.as_str())
                    .map(str::to_string);
            }
        }
    }
    let (collective, source) = match program.as_deref().and_then(collective_from_name) {
        Some(name) => (name.to_string(), "json"),
        None => (String::new(), "unknown"),
    };
    let nccl_version = doc
        .get("nccl_version")
        .and_then(|v| v.as_u64())
        .map(|c| nccl_version_from_code(c as u32));
    let test = NcclTest {
        collective,
        collective_source: source,
        generation: Generation::Json,
        tests_version: None,
        nccl_version,
        nthreads: as_u32(config.and_then(|c| c.get("nthreads"))),
        ngpus: as_u32(config.and_then(|c| c.get("ngpus"))),
        ranks,
        rows,
        avg_busbw_gbps: doc
            .get("average_bus_bandwidth")
            .and_then(|a| a.get("bandwidth"))
            .and_then(|b| b.as_f64()),
        out_of_bounds: doc
            .get("out_of_bounds")
            .and_then(|o| o.get("count"))
            .and_then(|c| c.as_u64()),
        first_line: 0,
    };
    Ok(NcclTestsFile {
        tests: vec![test],
        warnings,
        skipped_lines: skipped,
    })
}

fn json_row(r: &serde_json::Value) -> Option<Row> {
    let placement = |key: &str| -> Option<Placement> {
        let p = r.get(key)?;
        if p.is_null() {
            return None;
        }
        let time = p.get("time").or_else(|| p.get("cpu_time"))?.as_f64()?;
        Some(Placement {
            time_us: time,
            algbw_gbps: p.get("alg_bw")?.as_f64()?,
            busbw_gbps: p.get("bus_bw")?.as_f64()?,
            wrong: p.get("nwrong").and_then(|w| w.as_f64()),
        })
    };
    let out_of_place = placement("out_of_place");
    let in_place = placement("in_place");
    if out_of_place.is_none() && in_place.is_none() {
        return None;
    }
    let root = match r.get("root") {
        Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
        Some(v) => v.as_i64(),
        None => None,
    };
    Some(Row {
        size_bytes: r.get("size")?.as_u64()?,
        count: r.get("count")?.as_u64()?,
        dtype: r.get("type")?.as_str()?.to_string(),
        redop: r.get("redop").and_then(|v| v.as_str()).map(str::to_string),
        root,
        out_of_place,
        in_place,
        line: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_tags_inside_rows() {
        let line = "[1,0]<stdout>:           8             2     float     sum      -1[1,0]<stdout>:    85.70    0.00    0.00      0[1,0]<stdout>:    74.97    0.00    0.00      0";
        let s = strip_mpi_tags(line);
        let tokens: Vec<&str> = s.split_whitespace().collect();
        assert_eq!(
            tokens,
            [
                "8", "2", "float", "sum", "-1", "85.70", "0.00", "0.00", "0", "74.97", "0.00",
                "0.00", "0"
            ]
        );
    }

    #[test]
    fn keeps_brackets_that_are_not_tags() {
        assert_eq!(
            strip_mpi_tags("a [0x04] b ]<stdout>:"),
            "a [0x04] b ]<stdout>:"
        );
    }

    #[test]
    fn version_codes() {
        assert_eq!(nccl_version_from_code(22902), "2.29.2");
        assert_eq!(nccl_version_from_code(2708), "2.7.8");
    }

    #[test]
    fn names_from_file_names() {
        assert_eq!(
            collective_from_name("nccl_allgather.log"),
            Some("all_gather_perf")
        );
        assert_eq!(
            collective_from_name("all_reduce_8gpu.txt"),
            Some("all_reduce_perf")
        );
        assert_eq!(
            collective_from_name("reduce_scatter.txt"),
            Some("reduce_scatter_perf")
        );
        assert_eq!(collective_from_name("reduce.txt"), Some("reduce_perf"));
        assert_eq!(collective_from_name("run.txt"), None);
    }

    #[test]
    fn a_short_row_is_a_warning_not_a_panic() {
        let text = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n           8             2     float     sum      -1    33.66    0.00    0.00      0    33.55\n          16             4     float     sum      -1    32.28    0.00    0.00      0    33.02    0.00    0.00      0\n";
        let f = parse_str(text, "t", None).unwrap();
        assert_eq!(f.tests[0].rows.len(), 1);
        assert_eq!(f.skipped_lines, 1);
        assert_eq!(f.warnings[0].line, 2);
    }
}
