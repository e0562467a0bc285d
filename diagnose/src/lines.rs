//! Lines as people paste them, made plain before any parser reads them: one normaliser for every text input.
//!
//! What is removed, wherever a launcher or a terminal put it:
//! - carriage returns (CRLF files), ANSI colour and cursor sequences, tabs (read as spaces);
//! - `mpirun --tag-output` tags `[1,0]<stdout>:` anywhere in the line;
//! - leading labels, repeatedly and in any order: `srun --label`'s ` 0: `, rank tags `[0]`, `[rank0]:`,
//!   `rank0:`, torchrun's `[default0]:`, timestamps (`2024-05-01T10:00:00.123Z`, `[2024-05-01 10:00:00,123]`,
//!   `May  1 10:00:00`, `[10:00:00]`) and journald's `host prog[123]: `, `pdsh`'s `host: ` (a name that looks
//!   like a host, or any before a table line, a comment or an NCCL line), `kubectl logs --prefix`'s
//!   `[pod/…] `, `docker compose logs`' `name | `, Ray's `(RayTrainWorker pid=…, ip=…) `, a Markdown `> `;
//! - a rank tag that labels the line again in its middle, where two ranks' output was interleaved
//!   (`[0]  1048576 … -1[0]  1626.5 …`), in lines that are not NCCL's own (whose `0[0] -> 1[1]` are data).
//!
//! The label is kept ([`Line::label`]) so that a parser can still tell which host or rank printed a line.

use std::borrow::Cow;

use serde::Serialize;

/// An input line a claim rests on: the file, its 1-based line number (`None` where the input has no lines
/// of its own, as a trace event), and the line quoted as the file has it.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Cite {
    pub file: String,
    pub line: Option<usize>,
    pub text: String,
}

impl Cite {
    /// Line `number` of `file`, its text to be filled from the file by the report (an empty text is a line
    /// not yet quoted).
    pub fn at(file: &str, number: usize) -> Cite {
        Cite {
            file: file.to_string(),
            line: Some(number),
            text: String::new(),
        }
    }

    /// The line `number` of `file`, quoted from `raw` (trimmed, at most 300 characters).
    pub fn new(file: &str, number: usize, raw: &str) -> Cite {
        let text = raw.trim();
        let text = match text.char_indices().nth(300) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text.to_string(),
        };
        Cite {
            file: file.to_string(),
            line: Some(number),
            text,
        }
    }
}

/// One input line, normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line<'a> {
    /// 1-based line number in the file.
    pub number: usize,
    /// The line as the file has it (without its line ending).
    pub raw: &'a str,
    /// The line without prefixes, colours and tabs, trimmed.
    pub text: Cow<'a, str>,
    /// The first host or rank label removed from the start, when there was one (`0`, `worker-1`).
    pub label: Option<String>,
    /// The host label removed from the start (`pdsh`'s `worker-1: `, nccl-tests' own `HOST: Test NCCL
    /// failure`), when there was one.
    pub host: Option<String>,
}

impl Line<'_> {
    /// This line of `file`, to cite.
    pub fn cite(&self, file: &str) -> Cite {
        Cite::new(file, self.number, self.raw)
    }
}

/// Every line of `text`, normalised, with its number.
pub fn lines(text: &str) -> impl Iterator<Item = Line<'_>> {
    text.lines().enumerate().map(|(i, raw)| {
        let (text, label, host) = normalize_labels(raw);
        Line {
            number: i + 1,
            raw,
            text,
            label,
            host,
        }
    })
}

/// A raw line without its prefixes, colours and tabs, trimmed; and the first label removed.
pub fn normalize(raw: &str) -> (Cow<'_, str>, Option<String>) {
    let (text, label, _) = normalize_labels(raw);
    (text, label)
}

/// [`normalize`], and the host label removed, apart.
fn normalize_labels(raw: &str) -> (Cow<'_, str>, Option<String>, Option<String>) {
    let mut text: Cow<'_, str> = Cow::Borrowed(raw.trim_end_matches('\r'));
    if text.contains('\x1b') {
        text = Cow::Owned(strip_ansi(&text));
    }
    if text.contains('\t') || text.contains('\r') {
        text = Cow::Owned(text.replace(['\t', '\r'], " "));
    }
    if text.contains("]<std") {
        text = Cow::Owned(strip_mpi_tags(&text).into_owned());
    }
    let mut label = None;
    let mut host = None;
    let mut start = 0;
    let mut rank_tags: Vec<String> = Vec::new();
    loop {
        let rest = text[start..].trim_start();
        let skipped = text.len() - start - rest.len();
        let Some((len, what)) = leading_label(rest) else {
            break;
        };
        if let Prefix::RankTag(tag) = &what {
            rank_tags.push(tag.clone());
        }
        if let Prefix::Host(h) = &what {
            host.get_or_insert_with(|| h.clone());
        }
        if label.is_none() {
            label = what.label();
        }
        start += skipped + len;
    }
    let body = text[start..].trim();
    let text = match rank_tags.is_empty() {
        false if !body.contains("NCCL ") && rank_tags.iter().any(|t| body.contains(t.as_str())) => {
            let mut b = body.to_string();
            for t in &rank_tags {
                b = b.replace(t.as_str(), " ");
            }
            Cow::Owned(b.trim().to_string())
        }
        _ if start == 0 => match text {
            Cow::Borrowed(b) => Cow::Borrowed(b.trim()),
            Cow::Owned(o) => Cow::Owned(o.trim().to_string()),
        },
        _ => Cow::Owned(body.to_string()),
    };
    (text, label, host)
}

/// What a leading label was.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Prefix {
    /// `srun --label`'s `0:`, `rank0:`, `[rank0]:`.
    Rank(String),
    /// `[0]` before the line's content.
    RankTag(String),
    Timestamp,
    /// A Markdown quote's `> `.
    Quote,
    /// `pdsh`'s `host:`.
    Host(String),
}

impl Prefix {
    fn label(&self) -> Option<String> {
        match self {
            Prefix::Rank(r) | Prefix::Host(r) => Some(r.clone()),
            Prefix::RankTag(t) => Some(t.trim_matches(['[', ']']).to_string()),
            Prefix::Timestamp | Prefix::Quote => None,
        }
    }
}

/// The label at the start of `s` (already left-trimmed): its length and kind.
fn leading_label(s: &str) -> Option<(usize, Prefix)> {
    if let Some(len) = timestamp_len(s) {
        return Some((len, Prefix::Timestamp));
    }
    let b = s.as_bytes();
    // A Markdown quote: `> ` (a paste quoted in an issue).
    if s.starts_with("> ") || s == ">" {
        return Some((s.len().min(2), Prefix::Quote));
    }
    // Ray's `(RayTrainWorker pid=1234, ip=10.0.0.2) `.
    if b.first() == Some(&b'(') {
        let close = s.find(") ")?;
        let inner = &s[1..close];
        if inner.contains("pid=") && !inner.contains('(') {
            let ip = inner
                .split([',', ' '])
                .find_map(|t| t.strip_prefix("ip="))
                .unwrap_or(inner);
            return Some((close + 2, Prefix::Host(ip.to_string())));
        }
        return None;
    }
    // A syslog tag after its timestamp: `host prog[123]: ` (journalctl).
    if let Some(len) = syslog_tag_len(s) {
        return Some(len);
    }
    // ` 0: ` (srun --label) and `12:` before anything.
    let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits > 0 && digits <= 6 && b.get(digits) == Some(&b':') && b.get(digits + 1) == Some(&b' ')
    {
        return Some((digits + 2, Prefix::Rank(s[..digits].to_string())));
    }
    // `[0]`, `[12]` followed by a space, `[rank0]:`, `rank0:`.
    if b.first() == Some(&b'[') {
        let close = s.find(']')?;
        let inner = &s[1..close];
        let after = &s[close + 1..];
        if !inner.is_empty() && inner.bytes().all(|c| c.is_ascii_digit()) && after.starts_with(' ')
        {
            // `[0] NCCL INFO …` is NCCL's own device tag, kept for the log parser.
            if after.trim_start().starts_with("NCCL ") {
                return None;
            }
            return Some((close + 1, Prefix::RankTag(s[..=close].to_string())));
        }
        if let Some(r) = inner.strip_prefix("rank").filter(|r| is_digits(r)) {
            let len = close + 1 + usize::from(after.starts_with(':'));
            return Some((len, Prefix::Rank(r.to_string())));
        }
        // torchrun's `[default0]:`, `[worker3]:`: a word and a local rank, then a colon.
        let word = inner.trim_end_matches(|c: char| c.is_ascii_digit());
        if after.starts_with(':')
            && word.len() < inner.len()
            && !word.is_empty()
            && word
                .bytes()
                .all(|c| c.is_ascii_alphabetic() || c == b'_' || c == b'-')
        {
            return Some((close + 2, Prefix::Rank(inner.to_string())));
        }
        // `kubectl logs --prefix`'s `[pod/trainer-worker-0/main] `.
        if inner.starts_with("pod/") && after.starts_with(' ') {
            let pod = inner.split('/').nth(1).unwrap_or(inner);
            return Some((close + 1, Prefix::Host(pod.to_string())));
        }
        return None;
    }
    // `docker compose logs`' `worker-1  | `.
    if let Some(bar) = s.find(" | ") {
        let name = s[..bar].trim_end();
        if !name.is_empty()
            && !name.contains(' ')
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
            && name.bytes().any(|c| c.is_ascii_alphabetic())
        {
            return Some((bar + 3, Prefix::Host(name.to_string())));
        }
    }
    if let Some(r) = s.strip_prefix("rank") {
        let d = r.bytes().take_while(|c| c.is_ascii_digit()).count();
        if d > 0 && r[d..].starts_with(": ") {
            return Some((4 + d + 1, Prefix::Rank(r[..d].to_string())));
        }
    }
    host_label(s)
}

/// `host prog[123]: ` as syslog and journald print a line's origin: (length, the host).
fn syslog_tag_len(s: &str) -> Option<(usize, Prefix)> {
    let (host, rest) = s.split_once(' ')?;
    let colon = rest.find("]: ")?;
    let tag = &rest[..colon];
    let (prog, pid) = tag.split_once('[')?;
    let ok = !host.is_empty()
        && host
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.' || c == b'_')
        && !prog.is_empty()
        && !prog.contains(' ')
        && is_digits(pid);
    ok.then(|| (host.len() + 1 + colon + 3, Prefix::Host(host.to_string())))
}

/// `pdsh`'s `host: `: a host name that looks like one (with a digit, `-`, `.` or `_`: `node03`, `HCA-128`,
/// not `Note` or `Error`), or any name before a table line, a comment, an NCCL line or the same host's own
/// `host:pid:tid` prefix.
fn host_label(s: &str) -> Option<(usize, Prefix)> {
    let colon = s.find(": ")?;
    let host = &s[..colon];
    let hostlike = !host.is_empty()
        && host.len() <= 64
        && host
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.' || c == b'_')
        && host.bytes().any(|c| c.is_ascii_alphabetic());
    if !hostlike {
        return None;
    }
    let rest = s[colon + 2..].trim_start();
    let named = host
        .bytes()
        .any(|c| c.is_ascii_digit() || c == b'-' || c == b'.' || c == b'_');
    let follows = named
        || rest.starts_with('#')
        || rest.starts_with(|c: char| c.is_ascii_digit())
        || rest.starts_with("NCCL ")
        || rest.starts_with(&format!("{host}:"));
    follows.then(|| (s.len() - rest.len(), Prefix::Host(host.to_string())))
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit())
}

/// Length of a timestamp at the start of `s`, with its brackets and the space after it.
fn timestamp_len(s: &str) -> Option<usize> {
    let (open, body) = match s.strip_prefix('[') {
        Some(b) => (1, b),
        None => (0, s),
    };
    let len = iso_len(body)
        .or_else(|| syslog_len(body))
        .or_else(|| clock_len(body).filter(|_| open == 1))?;
    let mut end = open + len;
    if open == 1 {
        if !s[end..].starts_with(']') {
            return None;
        }
        end += 1;
    }
    let rest = &s[end..];
    let rest = rest.strip_prefix(':').unwrap_or(rest);
    if !rest.is_empty() && !rest.starts_with(' ') {
        return None;
    }
    Some(s.len() - rest.len())
}

/// `2024-05-01T10:00:00.123+02:00`, `2024-05-01 10:00:00,123`, `2024/05/01 10:00:00`.
fn iso_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let date = b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && matches!(b[4], b'-' | b'/')
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b[4]
        && b[8..10].iter().all(u8::is_ascii_digit);
    if !date {
        return None;
    }
    if !matches!(b.get(10), Some(b'T' | b' ')) {
        return None;
    }
    let clock = clock_len(&s[11..])?;
    let mut end = 11 + clock;
    // A zone: `Z`, `+02:00`, `+0200`.
    if b.get(end) == Some(&b'Z') {
        end += 1;
    } else if matches!(b.get(end), Some(b'+' | b'-')) {
        let zone = b[end + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit() || **c == b':')
            .count();
        if zone >= 2 {
            end += 1 + zone;
        }
    }
    Some(end)
}

/// `10:00:00`, `10:00:00.123456`, `10:00:00,123`.
fn clock_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let ok = b.len() >= 8
        && b[..2].iter().all(u8::is_ascii_digit)
        && b[2] == b':'
        && b[3..5].iter().all(u8::is_ascii_digit)
        && b[5] == b':'
        && b[6..8].iter().all(u8::is_ascii_digit);
    if !ok {
        return None;
    }
    let mut end = 8;
    if matches!(b.get(8), Some(b'.' | b',')) {
        let frac = b[9..].iter().take_while(|c| c.is_ascii_digit()).count();
        if frac > 0 {
            end += 1 + frac;
        }
    }
    Some(end)
}

/// `May  1 10:00:00` (syslog).
fn syslog_len(s: &str) -> Option<usize> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    if !MONTHS.iter().any(|m| s.starts_with(m)) || s.as_bytes().get(3) != Some(&b' ') {
        return None;
    }
    let rest = s[4..].trim_start();
    let day = rest.bytes().take_while(u8::is_ascii_digit).count();
    if day == 0 || day > 2 || rest.as_bytes().get(day) != Some(&b' ') {
        return None;
    }
    let clock = clock_len(&rest[day + 1..])?;
    Some(s.len() - rest.len() + day + 1 + clock)
}

/// Removes ANSI escape sequences (`ESC [ … letter`, and two-byte `ESC x`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() || c == '~' {
                        break;
                    }
                }
            }
            Some(']') => {
                // Operating system command: up to BEL or ESC \.
                while let Some(c) = chars.next() {
                    if c == '\x07' || (c == '\x1b' && chars.peek() == Some(&'\\')) {
                        chars.next_if_eq(&'\\');
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
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

/// `NCCL version 2.4.7+cuda9.2` (or RCCL's `RCCL version 2.18.3+hip6.0`) in a line.
pub fn version_in(line: &str) -> Option<String> {
    let (pos, tag) = match line.find("NCCL version ") {
        Some(p) => (p, "NCCL version "),
        None => (line.find("RCCL version ")?, "RCCL version "),
    };
    let v = line[pos + tag.len()..].split_whitespace().next()?;
    v.starts_with(|c: char| c.is_ascii_digit())
        .then(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(s: &str) -> String {
        normalize(s).0.into_owned()
    }

    #[test]
    fn launcher_labels_and_rank_tags() {
        let row = "8192 2048 float sum -1 35.15 0.23 0.23 0 30.33 0.27 0.27 0";
        assert_eq!(plain(&format!(" 0: {row}")), row);
        assert_eq!(plain(&format!("12: {row}")), row);
        assert_eq!(plain(&format!("[1,0]<stdout>:{row}")), row);
        assert_eq!(plain(&format!("[rank3]: {row}")), row);
        assert_eq!(plain(&format!("rank3: {row}")), row);
        assert_eq!(plain(&format!("node-7: {row}")), row);
        assert_eq!(normalize(&format!(" 3: {row}")).1.as_deref(), Some("3"));
        assert_eq!(
            plain("[0]   1048576  262144  float  sum  -1[0]  1626.5  0.64  1.24  0[0]  2302.3  0.46  0.87  0"),
            "1048576  262144  float  sum  -1   1626.5  0.64  1.24  0   2302.3  0.46  0.87  0"
        );
        assert_eq!(plain(&format!("[default3]:{row}")), row);
        assert_eq!(plain(&format!("> {row}")), row);
        assert_eq!(
            plain(&format!("(RayTrainWorker pid=1234, ip=10.0.0.2) {row}")),
            row
        );
        assert_eq!(
            plain(&format!("May  1 10:00:00 gpu-7 python[4242]: {row}")),
            row
        );
        assert_eq!(plain(&format!("[pod/trainer-worker-1/main] {row}")), row);
        assert_eq!(plain(&format!("trainer-1  | {row}")), row);
        // A table's own bars are no compose prefix.
        let bars = "|     0.2 |        46702618 |       621 | ncclDevKernel_AllGather_RING_LL |";
        assert_eq!(plain(bars), bars);
        // Tags of two launchers, both repeated mid-line.
        assert_eq!(
            plain("[3] [0]  8  2  float  sum  -1[0]  10.0  0.00  0.00  0"),
            "8  2  float  sum  -1   10.0  0.00  0.00  0"
        );
        // NCCL's own tags stay: they are the log's data.
        let nccl = "[0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC";
        assert_eq!(plain(nccl), nccl);
        assert_eq!(plain(&format!(" 1: {nccl}")), nccl);
        let pdsh = "w-0: w-0:19487:21056 [3] NCCL INFO Using network IBext";
        assert_eq!(
            plain(pdsh),
            "w-0:19487:21056 [3] NCCL INFO Using network IBext"
        );
        // The host before nccl-tests' failure line goes, and is kept apart as the line's host.
        let failure = "c2211f46f318: Test NCCL failure common.cu:1005 'unhandled CUDA error'";
        assert_eq!(
            plain(failure),
            "Test NCCL failure common.cu:1005 'unhandled CUDA error'"
        );
        assert_eq!(normalize_labels(failure).2.as_deref(), Some("c2211f46f318"));
        // A word before prose is no host.
        assert_eq!(plain("Note: see below"), "Note: see below");
        assert_eq!(
            plain("rccl-tests: Version develop:3f7f785"),
            "Version develop:3f7f785"
        );
    }

    #[test]
    fn timestamps_colours_and_line_ends() {
        let line = "# Avg bus bandwidth    : 179.465";
        for stamp in [
            "2024-05-01T10:00:00.123Z ",
            "2024-05-01 10:00:00,123 ",
            "[2024-05-01 10:00:00] ",
            "May  1 10:00:00 ",
            "[10:00:00] ",
            "2024/05/01 10:00:00: ",
        ] {
            assert_eq!(plain(&format!("{stamp}{line}")), line, "{stamp}");
        }
        assert_eq!(plain(&format!("\x1b[32m{line}\x1b[0m\r")), line);
        assert_eq!(plain("#\tsize\tcount"), "# size count");
        // Not timestamps: a time column and a host:pid:tid prefix.
        assert_eq!(plain("10:00:00x"), "10:00:00x");
        let nccl = "gpu1:123:456 [0] NCCL INFO NET : Using interface lo:127.0.0.1<0>";
        assert_eq!(plain(nccl), nccl);
    }

    #[test]
    fn numbers_follow_the_file() {
        let got: Vec<(usize, String)> = lines("a\r\n\n 0: b")
            .map(|l| (l.number, l.text.into_owned()))
            .collect();
        assert_eq!(
            got,
            [
                (1, "a".to_string()),
                (2, String::new()),
                (3, "b".to_string())
            ]
        );
    }
}
