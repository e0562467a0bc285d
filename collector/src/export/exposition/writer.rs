//! Text format 0.0.4 of the store's families: escaping, label pairs, values printed as `TextEncoder` prints
//! them, and a family's `# HELP` / `# TYPE` header.

use std::fmt::Write as _;

use super::families::Family;

/// Where the text is written: a buffer that is handed to a sink and emptied whenever it holds a piece's worth
/// ([`Pieces::mark`], called between lines), so that a large exposition is never whole in memory. With an
/// unbounded piece ([`Pieces::whole`]) the buffer simply takes the whole text.
pub struct Pieces<'b> {
    text: &'b mut String,
    piece: usize,
    sink: &'b mut dyn FnMut(&str) -> Result<(), prometheus::Error>,
}

impl<'b> Pieces<'b> {
    /// Text appended to `text` is handed to `sink` (then cleared from `text`) once `text` holds `piece` bytes or
    /// more: `text` never holds more than `piece` bytes and one line (or one registry family) beyond.
    pub fn new(
        text: &'b mut String,
        piece: usize,
        sink: &'b mut dyn FnMut(&str) -> Result<(), prometheus::Error>,
    ) -> Pieces<'b> {
        Pieces { text, piece, sink }
    }

    /// The whole text appended to `text`, nothing handed on.
    pub fn whole(
        text: &'b mut String,
        sink: &'b mut dyn FnMut(&str) -> Result<(), prometheus::Error>,
    ) -> Pieces<'b> {
        Pieces::new(text, usize::MAX, sink)
    }

    /// The buffer to append to.
    pub(super) fn text(&mut self) -> &mut String {
        self.text
    }

    /// Hands the buffer on if it holds a piece's worth: the sink's error, if it fails.
    #[inline]
    pub(super) fn mark(&mut self) -> Result<(), prometheus::Error> {
        if self.text.len() >= self.piece {
            self.flush()?;
        }
        Ok(())
    }

    /// Hands what the buffer holds (if anything) to the sink and empties it: the end of the text.
    pub fn flush(&mut self) -> Result<(), prometheus::Error> {
        if !self.text.is_empty() {
            (self.sink)(self.text)?;
            self.text.clear();
        }
        Ok(())
    }
}

/// Appends `sep`, then `name="value"` with the value escaped.
pub(super) fn push_label(out: &mut String, sep: char, name: &str, value: &str) {
    out.push(sep);
    out.push_str(name);
    out.push_str("=\"");
    push_escaped(out, value, true);
    out.push('"');
}

/// `value` as `TextEncoder` prints it (`f64`'s `Display`: `NaN`, `inf`, `-inf`, `-0`, no exponent). Integers
/// below 2^53 (most counters) are printed by hand: the same digits, without the float formatting.
pub(super) fn push_value(out: &mut String, value: f64) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if value.fract() == 0.0 && value.abs() < EXACT && !(value == 0.0 && value.is_sign_negative()) {
        let n = value as i64;
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut m = n.unsigned_abs();
        loop {
            i -= 1;
            digits[i] = b'0' + (m % 10) as u8;
            m /= 10;
            if m == 0 {
                break;
            }
        }
        if n < 0 {
            out.push('-');
        }
        out.push_str(std::str::from_utf8(&digits[i..]).unwrap_or_default());
    } else {
        let _ = write!(out, "{value}");
    }
}

/// Text format 0.0.4 escaping: `\` → `\\`, newline → `\n`, and `"` → `\"` in label values (`quote`).
pub(super) fn push_escaped(out: &mut String, value: &str, quote: bool) {
    let special = |b: u8| b == b'\\' || b == b'\n' || (quote && b == b'"');
    if !value.bytes().any(special) {
        out.push_str(value);
        return;
    }
    let mut from = 0;
    for (i, b) in value.bytes().enumerate() {
        if special(b) {
            out.push_str(&value[from..i]);
            out.push_str(match b {
                b'\\' => "\\\\",
                b'\n' => "\\n",
                _ => "\\\"",
            });
            from = i + 1;
        }
    }
    out.push_str(&value[from..]);
}

/// The `# HELP` and `# TYPE` lines of `f`, as `TextEncoder` writes them.
pub(super) fn push_header(out: &mut String, f: &Family) {
    out.push_str("# HELP ");
    out.push_str(f.name);
    out.push(' ');
    push_escaped(out, f.help, false);
    out.push_str("\n# TYPE ");
    out.push_str(f.name);
    out.push(' ');
    out.push_str(&format!("{:?}", f.kind).to_lowercase());
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn values_print_as_text_encoder_prints_them() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut values = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.1,
            1.5e-7,
            1e300,
            -1e300,
            5e-324,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::MIN,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            9_007_199_254_740_991.0,
            9_007_199_254_740_992.0,
            9_007_199_254_740_994.0,
            -9_007_199_254_740_991.0,
            u64::MAX as f64,
            i64::MIN as f64,
            1_712_345_678.123_456_7,
        ];
        for _ in 0..100_000 {
            values.push(f64::from_bits(rng.random()));
            let shift = rng.random_range(0..64);
            values.push(rng.random_range(0..u64::MAX >> shift) as f64);
            values.push(-(rng.random_range(0..1u64 << 53) as f64));
        }
        let mut out = String::new();
        for v in values {
            out.clear();
            push_value(&mut out, v);
            assert_eq!(out, v.to_string(), "{v:?}");
        }
    }

    #[test]
    fn escaping() {
        let mut out = String::new();
        push_escaped(&mut out, "a\\b\"c\nd ü", true);
        assert_eq!(out, r#"a\\b\"c\nd ü"#);
        out.clear();
        push_escaped(&mut out, "a\\b\"c\nd", false);
        assert_eq!(out, r#"a\\b"c\nd"#);
    }
}
