//! The one sanitiser of text that comes from outside — an agent's message, a file `diagnose` reads, a peer's
//! HTTP answer — before it is stored, logged or printed on a terminal.
//!
//! Every control character (C0 `U+0000`–`U+001F`, DEL `U+007F`, C1 `U+0080`–`U+009F`: ESC, BEL, CR, LF, the
//! 8-bit CSI…) is replaced by its JSON-style escape, `\u001b` for ESC: six visible ASCII characters that no
//! terminal interprets, so an operator sees that the sender put one there, where dropping it silently would hide
//! it. Nothing else changes (a backslash stays a backslash: the text stays readable, and the escape cannot
//! be taken for a control character that is still there). Text without a control character is returned as it
//! is, without a copy.
//!
//! - [`escape_controls`]: `&str` → `Cow<str>`, for a value being stored or compared.
//! - [`escape_controls_owned`]: `String` → `String`, for a value taken from a message (no copy when clean).
//! - [`Escaped`]: a `Display` wrapper, for a value written straight into a terminal, a log field or a page.
//! - [`EscapedLines`]: the same for a whole text the program laid out in lines itself (a report, an error
//!   message): its line feeds stay, every other control character is escaped. The values inside it are
//!   escaped whole where they come in, so a line feed of theirs cannot start a forged line.
//! - [`escape_json_strings`]: every string of a JSON document (keys included), for a document read from a
//!   peer before its values are laid out as text.
//! - [`is_escaped`]: the predicate itself (which characters are escaped).

use std::borrow::Cow;
use std::fmt;

/// Bytes the escape of one control character takes (`\u001b`).
pub const ESCAPE_LEN: usize = 6;

/// True for the characters [`escape_controls`] replaces: C0, DEL and C1 (Unicode's category Cc).
pub fn is_escaped(c: char) -> bool {
    c.is_control()
}

/// `s` with each control character written `\uXXXX` (lower-case hex, four digits); borrowed when `s` has none.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_escaped) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + ESCAPE_LEN * 2);
    write_escaped(&mut out, s).expect("writing to a String cannot fail");
    Cow::Owned(out)
}

/// [`escape_controls`] of an owned string: the same string, unchanged and not copied, when it has no control
/// character.
pub fn escape_controls_owned(s: String) -> String {
    match escape_controls(&s) {
        Cow::Borrowed(_) => s,
        Cow::Owned(o) => o,
    }
}

/// Escapes `s` in place (see [`escape_controls`]); nothing is copied when it has no control character.
pub fn escape_in_place(s: &mut String) {
    if s.chars().any(is_escaped) {
        *s = escape_controls(s).into_owned();
    }
}

/// Writes `s` into `out` with its control characters escaped.
fn write_escaped(out: &mut impl fmt::Write, s: &str) -> fmt::Result {
    write_escaped_but(out, s, None)
}

/// Writes `s` into `out` with its control characters escaped, but `keep`.
fn write_escaped_but(out: &mut impl fmt::Write, s: &str, keep: Option<char>) -> fmt::Result {
    let mut rest = s;
    while let Some((i, c)) = rest
        .char_indices()
        .find(|(_, c)| is_escaped(*c) && Some(*c) != keep)
    {
        out.write_str(&rest[..i])?;
        write!(out, "\\u{:04x}", c as u32)?;
        rest = &rest[i + c.len_utf8()..];
    }
    out.write_str(rest)
}

/// Displays its text with control characters escaped ([`escape_controls`]), without a copy:
/// `println!("{}", Escaped(&reason))`, `warn!(version = %Escaped(&v), …)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.width().is_none() && f.precision().is_none() {
            return write_escaped(f, self.0);
        }
        // Padding and truncation apply to what is shown, the escapes included.
        f.pad(&escape_controls(self.0))
    }
}

/// Displays a text laid out in lines with every control character but the line feed escaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscapedLines<'a>(pub &'a str);

impl fmt::Display for EscapedLines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped_but(f, self.0, Some('\n'))
    }
}

/// Escapes the control characters of every string in `v`, keys included ([`escape_controls`]).
pub fn escape_json_strings(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::String(s) => escape_in_place(s),
        Value::Array(items) => items.iter_mut().for_each(escape_json_strings),
        Value::Object(map) => {
            if map.keys().any(|k| k.chars().any(is_escaped)) {
                let old = std::mem::take(map);
                for (k, mut item) in old {
                    escape_json_strings(&mut item);
                    map.insert(escape_controls_owned(k), item);
                }
            } else {
                map.values_mut().for_each(escape_json_strings);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_character_is_escaped_and_nothing_else() {
        assert_eq!(escape_controls("mlx5_0"), Cow::Borrowed("mlx5_0"));
        assert_eq!(escape_controls("é ü 東 \\u001b"), "é ü 東 \\u001b");
        assert_eq!(
            escape_controls("\x1b]0;owned\x07"),
            "\\u001b]0;owned\\u0007"
        );
        assert_eq!(escape_controls("\x1b[2J"), "\\u001b[2J");
        assert_eq!(
            escape_controls("a\r\nERROR forged"),
            "a\\u000d\\u000aERROR forged"
        );
        assert_eq!(
            escape_controls("\u{7f}\u{80}\u{9b}\u{9f}\u{a0}"),
            "\\u007f\\u0080\\u009b\\u009f\u{a0}"
        );
        assert_eq!(escape_controls("\0"), "\\u0000");
        for c in (0u32..0x20).chain(0x7f..0xa0).filter_map(char::from_u32) {
            let e = escape_controls_owned(format!("x{c}y"));
            assert_eq!(e, format!("x\\u{:04x}y", c as u32));
            assert!(!e.chars().any(char::is_control), "{e:?}");
        }
    }

    #[test]
    fn the_display_wrapper_matches_and_pads() {
        let s = "\x1b]8;;http://evil.example\x1b\\link";
        assert_eq!(Escaped(s).to_string(), escape_controls(s));
        assert_eq!(format!("{:>8}", Escaped("\x07")), "  \\u0007");
        assert_eq!(format!("{:<4}|", Escaped("ab")), "ab  |");
        let mut owned = String::from("ok");
        escape_in_place(&mut owned);
        assert_eq!(owned, "ok");
        let mut bad = String::from("a\tb");
        escape_in_place(&mut bad);
        assert_eq!(bad, "a\\u0009b");
    }

    #[test]
    fn lines_keep_their_line_feeds_and_json_documents_lose_every_control() {
        assert_eq!(
            EscapedLines("a\x1b[2J\r\nb\x07\n").to_string(),
            "a\\u001b[2J\\u000d\nb\\u0007\n"
        );
        let mut v = serde_json::json!({"a\x1b": ["x\ny", 1, {"k": "\u{9b}31m"}], "n": null});
        escape_json_strings(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"a\\u001b": ["x\\u000ay", 1, {"k": "\\u009b31m"}], "n": null})
        );
    }
}
