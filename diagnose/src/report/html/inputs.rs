//! What was read: each input file, how reading it went, and why a file gave less than all it holds.

use std::fmt::Write as _;

use super::super::model::Report;
use super::markup::{esc, inline, Align, Table};

/// The section's body.
pub fn body(r: &Report) -> String {
    let mut t = Table::new(
        "inputs",
        &[
            ("file", Align::Text),
            ("kind", Align::Text),
            ("read", Align::Text),
            ("lines or events skipped", Align::Num),
            ("notes", Align::Text),
        ],
    );
    for i in &r.inputs {
        let status = match i.status {
            "ok" => "<span class=\"status ok\">in full</span>".to_string(),
            "partial" => "<span class=\"status partial\">in part</span>".to_string(),
            "error" => "<span class=\"status error\">not read</span>".to_string(),
            other => format!("<span class=\"status\">{}</span>", esc(other)),
        };
        let notes: Vec<String> = i.warnings.iter().map(|w| inline(w)).collect();
        t.row(&[
            format!("<span class=\"path\">{}</span>", esc(&i.path)),
            esc(&kind(i.kind)),
            status,
            i.skipped.to_string(),
            notes.join("<br>"),
        ]);
    }
    let mut o = t.finish();
    if let Some(w) = &r.link.warning {
        let _ = write!(o, "<p class=\"warning-note\">Collector: {}</p>", esc(w));
    }
    o
}

/// An input kind in words.
fn kind(k: &str) -> String {
    match k {
        "nccl_tests" => "nccl-tests output".to_string(),
        "nccl_log" => "NCCL log".to_string(),
        "trace" => "profiler trace".to_string(),
        "nsys" => "Nsight Systems export".to_string(),
        other => other.replace('_', " "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;
    use crate::report::html::markup::without_labels;

    #[test]
    fn each_input_with_how_it_was_read() {
        let html = without_labels(&body(&fixtures::report()));
        assert!(html.contains(
            "<tr><td><span class=\"path\">gone.log</span></td><td>NCCL log</td>\
             <td><span class=\"status error\">not read</span></td><td class=\"num\">0</td>\
             <td>gone.log: not found</td></tr>"
        ));
        assert!(html.contains("<span class=\"status ok\">in full</span>"));
    }
}
