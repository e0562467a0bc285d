//! Escaping and the small pieces of markup every section uses: inline code, badges, file names, numbers and
//! tables.
//!
//! Every function here that takes text from the inputs escapes it; a function that takes markup says so in
//! its name or its doc (`Table::row` takes cells already rendered by these functions).

use std::fmt::Write as _;
use std::path::Path;

use crate::findings::Severity;

/// Escapes text for HTML element content and for quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Text whose `backticked` spans are code, as the findings and conclusions write them: escaped, each pair of
/// backticks a `<code>` element. A backtick without its pair stays as written.
pub fn inline(s: &str) -> String {
    let parts: Vec<&str> = s.split('`').collect();
    let mut out = String::with_capacity(s.len() + 16);
    for (i, part) in parts.iter().enumerate() {
        let inside = i % 2 == 1;
        if inside && i + 1 < parts.len() {
            out.push_str(&code(part));
        } else if inside {
            out.push('`');
            out.push_str(&text(part));
        } else {
            out.push_str(&text(part));
        }
    }
    out
}

/// A word longer than this many characters (a path, an IPv6 address with its interface) may break anywhere.
pub const LONG_WORD: usize = 24;

/// Text from the inputs, escaped; when it holds a word longer than [`LONG_WORD`] it may break anywhere, so
/// that one long word cannot make a table wider than the page (a table is never narrower than its longest
/// word). Shorter words keep whole.
pub fn text(s: &str) -> String {
    if s.split_whitespace().any(|w| w.chars().count() > LONG_WORD) {
        format!("<span class=\"long\">{}</span>", esc(s))
    } else {
        esc(s)
    }
}

/// Code spans up to this many characters never break across lines (`--nsys` stays whole); longer ones
/// (paths, long lists) break anywhere rather than widen the page.
pub const UNBROKEN_CODE: usize = 32;

/// Text as one code element.
pub fn code(s: &str) -> String {
    if s.chars().count() <= UNBROKEN_CODE {
        format!("<code>{}</code>", esc(s))
    } else {
        format!("<code class=\"long\">{}</code>", esc(s))
    }
}

/// A short value that must not break across lines (a version such as `2.22.3+cuda12.6`); a long one (more
/// than [`UNBROKEN_CODE`] characters) is left free to break rather than widen the page.
pub fn unbroken(s: &str) -> String {
    if s.chars().count() <= UNBROKEN_CODE {
        format!("<span class=\"nw\">{}</span>", esc(s))
    } else {
        text(s)
    }
}

/// The severity as a colored badge.
pub fn badge(s: Severity) -> String {
    format!("<span class=\"badge sev-{0}\">{0}</span>", esc(s.as_str()))
}

/// A file by its name, the whole path in its tooltip: tables stay narrow and the path is one hover away.
pub fn file(path: &str) -> String {
    let name = Path::new(path)
        .file_name()
        .map_or(path.to_string(), |n| n.to_string_lossy().into_owned());
    format!(
        "<span class=\"file\" title=\"{}\">{}</span>",
        esc(path),
        esc(&name)
    )
}

/// The input lines a claim rests on: each as `file:line` (the path in its tooltip) and the line quoted.
pub fn cites(list: &[crate::lines::Cite]) -> String {
    if list.is_empty() {
        return String::new();
    }
    let mut o = String::from("<ul class=\"cites\" title=\"the input lines this rests on\">");
    for c in list {
        let at = c.line.map(|l| format!(":{l}")).unwrap_or_default();
        o.push_str(&format!(
            "<li>{}<span class=\"at\">{}</span> <code class=\"long\">{}</code></li>",
            file(&c.file),
            esc(&at),
            esc(&c.text)
        ));
    }
    o.push_str("</ul>");
    o
}

/// Shown where a value is unknown.
pub const UNKNOWN: &str = "<span class=\"unknown\" title=\"unknown\">–</span>";

/// `v` with `decimals` decimals, or [`UNKNOWN`].
pub fn num(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => UNKNOWN.to_string(),
    }
}

/// A count or other integer, or [`UNKNOWN`].
pub fn int<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or(UNKNOWN.to_string(), |v| v.to_string())
}

/// A share as a percentage with no decimals (`87 %`), or [`UNKNOWN`].
pub fn pct(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{:.0} %", v * 100.0),
        _ => UNKNOWN.to_string(),
    }
}

/// Milliseconds from microseconds, with three figures: `123 ms`, `12.3 ms`, `1.23 ms`.
pub fn ms(us: f64) -> String {
    let v = us / 1e3;
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

/// A duration from microseconds in the unit that reads best: `850.0 µs`, `12.3 ms`, `1.5 s`.
pub fn duration(us: f64) -> String {
    if us < 1e3 {
        format!("{us:.1} µs")
    } else if us < 1e5 * 100.0 {
        ms(us)
    } else {
        format!("{:.1} s", us / 1e6)
    }
}

/// How a column aligns: text to the left, figures to the right (with digits of one width).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Text,
    Num,
}

/// A table built row by row. Headers are plain text; cells are markup made by this module's functions. Each
/// cell carries its column's name (`data-label`): on a narrow screen the style sheet stacks a row's cells
/// under one another, each after its name, instead of letting the table run past the page.
pub struct Table {
    columns: Vec<(String, Align)>,
    html: String,
}

impl Table {
    /// A table with these columns; `class` names its kind for the style sheet. A table of more than two
    /// columns is one to stack on a narrow screen (class `stack`).
    pub fn new(class: &str, columns: &[(&str, Align)]) -> Table {
        let stack = if columns.len() > 2 { " stack" } else { "" };
        let mut html = format!("<table class=\"{}{stack}\"><thead><tr>", esc(class));
        for (name, align) in columns {
            let _ = write!(html, "<th{}>{}</th>", class_of(*align), esc(name));
        }
        html.push_str("</tr></thead><tbody>");
        Table {
            columns: columns.iter().map(|(n, a)| (esc(n), *a)).collect(),
            html,
        }
    }

    /// Adds a row of markup cells, one per column.
    pub fn row(&mut self, cells: &[String]) {
        self.row_with_class("", cells);
    }

    /// Adds a row with a class of its own (a highlighted straggler, say).
    pub fn row_with_class(&mut self, class: &str, cells: &[String]) {
        debug_assert_eq!(cells.len(), self.columns.len(), "one cell per column");
        if class.is_empty() {
            self.html.push_str("<tr>");
        } else {
            let _ = write!(self.html, "<tr class=\"{}\">", esc(class));
        }
        for (cell, (name, align)) in cells.iter().zip(&self.columns) {
            let _ = write!(
                self.html,
                "<td{} data-label=\"{name}\">{cell}</td>",
                class_of(*align)
            );
        }
        self.html.push_str("</tr>");
    }

    pub fn finish(mut self) -> String {
        self.html.push_str("</tbody></table>");
        self.html
    }
}

fn class_of(a: Align) -> &'static str {
    match a {
        Align::Text => "",
        Align::Num => " class=\"num\"",
    }
}

/// `html` without the cells' `data-label` attributes, so that a test can state a row as a person reads it.
#[cfg(test)]
pub fn without_labels(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(at) = rest.find(" data-label=\"") {
        out.push_str(&rest[..at]);
        let after = &rest[at + " data-label=\"".len()..];
        rest = after.find('"').map_or("", |end| &after[end + 1..]);
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_quotes_and_ampersands() {
        assert_eq!(
            esc(r#"<a href="x">R&D</a>"#),
            "&lt;a href=&quot;x&quot;&gt;R&amp;D&lt;/a&gt;"
        );
        assert_eq!(esc("it's"), "it&#39;s");
        // `&` is escaped as it comes, so an entity in the input is escaped once, not re-read.
        assert_eq!(esc("&lt;"), "&amp;lt;");
    }

    #[test]
    fn backticks_become_code_and_stay_escaped() {
        assert_eq!(
            inline("confirm `Using network IB` then <retry>"),
            "confirm <code>Using network IB</code> then &lt;retry&gt;"
        );
        assert_eq!(
            inline("`<b>` and `unpaired"),
            "<code>&lt;b&gt;</code> and `unpaired"
        );
        assert_eq!(inline("no code"), "no code");
        let path = "/a/very/long/path/to/a/file.txt";
        assert_eq!(
            inline(&format!("see {path} `x`")),
            format!("<span class=\"long\">see {path} </span><code>x</code>")
        );
        assert_eq!(text("short words only"), "short words only");
        assert_eq!(inline("``"), "<code></code>");
        let long = "x".repeat(UNBROKEN_CODE + 1);
        assert_eq!(
            unbroken("2.22.3+cuda12.6"),
            "<span class=\"nw\">2.22.3+cuda12.6</span>"
        );
        assert_eq!(
            unbroken(&long),
            format!("<span class=\"long\">{long}</span>")
        );
        assert_eq!(code(&long), format!("<code class=\"long\">{long}</code>"));
    }

    #[test]
    fn files_show_their_name_and_keep_the_path() {
        assert_eq!(
            file("/d/a&b/<x>.txt"),
            "<span class=\"file\" title=\"/d/a&amp;b/&lt;x&gt;.txt\">&lt;x&gt;.txt</span>"
        );
        assert_eq!(
            file("plain.txt"),
            "<span class=\"file\" title=\"plain.txt\">plain.txt</span>"
        );
    }

    #[test]
    fn figures_and_unknowns() {
        assert_eq!(num(Some(1.234), 1), "1.2");
        assert_eq!(num(None, 1), UNKNOWN);
        assert_eq!(num(Some(f64::NAN), 1), UNKNOWN);
        assert_eq!(int(Some(16)), "16");
        assert_eq!(int::<u32>(None), UNKNOWN);
        assert_eq!(pct(Some(0.875)), "88 %");
        assert_eq!(ms(123_456.0), "123 ms");
        assert_eq!(ms(12_345.0), "12.3 ms");
        assert_eq!(ms(1_234.0), "1.23 ms");
        assert_eq!(duration(850.0), "850.0 µs");
        assert_eq!(duration(38_762.6), "38.8 ms");
        assert_eq!(duration(1_500_000.0), "1500 ms");
        assert_eq!(duration(15_000_000.0), "15.0 s");
        assert_eq!(
            badge(Severity::Critical),
            "<span class=\"badge sev-critical\">critical</span>"
        );
    }

    #[test]
    fn labels_can_be_left_out_for_tests() {
        assert_eq!(
            without_labels(
                "<td data-label=\"a b\">1</td><td class=\"num\" data-label=\"c\">2</td>"
            ),
            "<td>1</td><td class=\"num\">2</td>"
        );
    }

    #[test]
    fn tables_align_figures_right() {
        let mut t = Table::new("facts", &[("name", Align::Text), ("GB/s", Align::Num)]);
        t.row(&[esc("a<b"), "1.5".to_string()]);
        t.row_with_class("straggler", &["c".to_string(), "2".to_string()]);
        assert_eq!(
            t.finish(),
            "<table class=\"facts\"><thead><tr><th>name</th><th class=\"num\">GB/s</th></tr></thead><tbody>\
             <tr><td data-label=\"name\">a&lt;b</td><td class=\"num\" data-label=\"GB/s\">1.5</td></tr>\
             <tr class=\"straggler\"><td data-label=\"name\">c</td><td class=\"num\" data-label=\"GB/s\">2</td></tr>\
             </tbody></table>"
        );
    }
}
