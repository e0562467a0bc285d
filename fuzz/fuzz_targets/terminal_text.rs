//! The one sanitiser of outside text (`commwatch_model::text`) on arbitrary input: nothing panics; what it
//! returns holds no control character (the lines variant keeps only line feeds); text without one comes back
//! unchanged; every control character comes back as its six-character escape, so nothing is dropped.
#![no_main]
use commwatch_model::text::{escape_controls, EscapedLines, ESCAPE_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let escaped = escape_controls(&text);
    assert!(!escaped.chars().any(char::is_control), "{escaped:?}");
    let controls = text.chars().filter(|c| c.is_control()).count();
    let bytes: usize = text
        .chars()
        .filter(|c| c.is_control())
        .map(char::len_utf8)
        .sum();
    assert_eq!(escaped.len(), text.len() - bytes + controls * ESCAPE_LEN);
    if controls == 0 {
        assert_eq!(escaped, text);
    }
    let lines = EscapedLines(&text).to_string();
    assert!(!lines.chars().any(|c| c.is_control() && c != '\n'), "{lines:?}");
    assert_eq!(lines.matches('\n').count(), text.matches('\n').count());
});
