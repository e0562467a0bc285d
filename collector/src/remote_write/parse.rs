//! Test only: the exposition text of `/metrics` (format 0.0.4) read back into samples, to check that what
//! remote write sends (read from the exposition's typed stage, never from text) is what `/metrics` shows.
//! Remote write itself parses no text. Self-contained (no `crate::` paths), so the benches and integration
//! tests compile it too (`#[path]`) to compare against, or to gather a `/metrics` fetched over HTTP. Pure: no
//! I/O.

/// One sample line: its metric name, its labels in the order written, its value. Timestamps on the line (the
/// collector writes none) are ignored: a gather stamps all its samples with one time.
#[derive(Debug, Clone, PartialEq)]
pub struct TextSample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Why one line could not be read (the line is skipped; the others are kept).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("exposition line {line}: {reason}")]
pub struct ParseError {
    /// 1-based.
    pub line: usize,
    pub reason: &'static str,
}

/// Every sample of `text` whose name `keep` accepts (names are tested before the labels are read), and the
/// errors of the lines that could not be read.
pub fn parse_exposition(
    text: &str,
    mut keep: impl FnMut(&str) -> bool,
) -> (Vec<TextSample>, Vec<ParseError>) {
    let mut samples = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_line(line, &mut keep) {
            Ok(Some(s)) => samples.push(s),
            Ok(None) => {}
            Err(reason) => errors.push(ParseError {
                line: i + 1,
                reason,
            }),
        }
    }
    (samples, errors)
}

/// One sample line; `None` when `keep` refuses its name.
fn parse_line(
    line: &str,
    keep: &mut impl FnMut(&str) -> bool,
) -> Result<Option<TextSample>, &'static str> {
    let end = line
        .find(|c: char| c == '{' || c.is_ascii_whitespace())
        .ok_or("no value after the metric name")?;
    let name = &line[..end];
    if !is_metric_name(name) {
        return Err("invalid metric name");
    }
    if !keep(name) {
        return Ok(None);
    }
    let mut rest = &line[end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let value = rest
        .split_ascii_whitespace()
        .next()
        .ok_or("no value after the labels")?;
    let value = parse_value(value).ok_or("value is not a number")?;
    Ok(Some(TextSample {
        name: name.to_string(),
        labels,
        value,
    }))
}

/// Reads `name="value",…}` into `labels`; returns what follows the `}`.
fn parse_labels<'a>(
    mut rest: &'a str,
    labels: &mut Vec<(String, String)>,
) -> Result<&'a str, &'static str> {
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Ok(after);
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = rest[..eq].trim();
        if !is_label_name(name) {
            return Err("invalid label name");
        }
        let quoted = rest[eq + 1..]
            .trim_start()
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let (value, after) = unescape_value(quoted)?;
        labels.push((name.to_string(), value));
        rest = after.trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// The label value up to its closing quote, unescaped (`\\`, `\"`, `\n`), and what follows the quote.
fn unescape_value(s: &str) -> Result<(String, &str), &'static str> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &s[i + 1..])),
            '\\' => match chars.next() {
                Some((_, '\\')) => out.push('\\'),
                Some((_, '"')) => out.push('"'),
                Some((_, 'n')) => out.push('\n'),
                _ => return Err("invalid escape in label value"),
            },
            c => out.push(c),
        }
    }
    Err("unterminated label value")
}

/// A sample value: a float, or `NaN`, `+Inf`, `-Inf` in any case (Rust's `f64` parser takes all of them).
fn parse_value(s: &str) -> Option<f64> {
    s.parse::<f64>().ok()
}

/// A Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
fn is_label_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A Prometheus metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn is_metric_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}
