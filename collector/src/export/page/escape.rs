//! Escaping for the page: every value that reaches the page's HTML goes through [`Esc`] (text and quoted
//! attribute values alike), and every value in a link's path or query through [`url_component`]. Node names,
//! job ids, label values and NCCL settings come from agents and may be hostile (`<script>`, quotes).

use std::fmt;

/// Displays a string with `&`, `<`, `>`, `"` and `'` replaced by character references: safe as element text
/// and inside a double- or single-quoted attribute value.
pub struct Esc<'a>(pub &'a str);

impl fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(i) = rest.find(['&', '<', '>', '"', '\'']) {
            f.write_str(&rest[..i])?;
            f.write_str(match rest.as_bytes()[i] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            rest = &rest[i + 1..];
        }
        f.write_str(rest)
    }
}

/// `s` escaped for HTML ([`Esc`]) as a `String`.
pub fn html(s: &str) -> String {
    Esc(s).to_string()
}

/// `s` percent-encoded for one URL path segment or query value: every byte but the unreserved ones
/// (`A-Z a-z 0-9 - . _ ~`) becomes `%XX`, so a `/`, `?`, `#`, `&` or quote in a name stays inside its part.
pub fn url_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes (and `+` as a space when `plus` is set, as HTML forms encode it). `None` for a
/// broken escape or bytes that are not UTF-8.
pub fn url_decode(s: &str, plus: bool) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_characters_become_references() {
        assert_eq!(
            html(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(html("node-03"), "node-03");
        assert_eq!(html("ünï ✓"), "ünï ✓");
    }

    #[test]
    fn url_components_round_trip() {
        for s in ["node-03", "a/b?c#d&e=f", "\"><img src=x>", "ünï ✓", "100%"] {
            let e = url_component(s);
            assert!(e
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)));
            assert_eq!(url_decode(&e, false).as_deref(), Some(s));
        }
        assert_eq!(url_decode("a+b%2Bc", true).as_deref(), Some("a b+c"));
        assert_eq!(url_decode("a+b", false).as_deref(), Some("a+b"));
        assert_eq!(url_decode("%zz", false), None);
        assert_eq!(url_decode("%4", false), None);
        assert_eq!(url_decode("%ff", false), None);
    }
}
