//! The key judgment at the top of the page: the verdict as a sentence (never its machine name), the summary,
//! the evidence behind it and the next action.

use std::fmt::Write as _;

use super::super::model::{worst_severity, Conclusion, Report};
use super::markup::{badge, cites, esc, inline};
use crate::findings::Severity;

/// How the verdict reads: good news, a problem, or not known yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Good,
    Problem,
    Unknown,
}

impl Tone {
    fn class(self) -> &'static str {
        match self {
            Tone::Good => "tone-good",
            Tone::Problem => "tone-problem",
            Tone::Unknown => "tone-unknown",
        }
    }
}

/// The verdict as a headline and its tone. A verdict this page does not know reads as the summary's first
/// sentence, so the page never shows a machine token.
pub fn headline(c: &Conclusion) -> (String, Tone) {
    let (text, tone) = match c.verdict {
        "not_the_link" => (
            "The link is fine: training does not use it well",
            Tone::Problem,
        ),
        "link_or_binding" => (
            "The link, or how NCCL is bound to it, holds communication back",
            Tone::Problem,
        ),
        "cpu_bound" => (
            "The GPUs wait on the host, not on communication",
            Tone::Problem,
        ),
        "exposed_communication" => (
            "Communication is exposed; whether the link is at fault is not yet known",
            Tone::Problem,
        ),
        "healthy" => (
            "Communication is healthy: the link is reached and hidden behind computation",
            Tone::Good,
        ),
        "baseline_meets_link" => (
            "The bare baseline reaches the link; training is not traced yet",
            Tone::Good,
        ),
        "insufficient_evidence" => ("Not enough evidence for a judgment yet", Tone::Unknown),
        "mixed_inputs" => (
            "The inputs mix runs or jobs that cannot be read as one",
            Tone::Unknown,
        ),
        "run_failed" => (
            "The baseline run failed: its numbers are no baseline",
            Tone::Problem,
        ),
        "not_a_network_measurement" => (
            "The baseline shows more than the network can carry: it did not measure the network",
            Tone::Unknown,
        ),
        "misconfigured" => (
            "NCCL is set up against the fabric: fix that before judging the link",
            Tone::Problem,
        ),
        _ => return (first_sentence(&c.summary), Tone::Unknown),
    };
    (text.to_string(), tone)
}

/// The text up to the first full stop or colon followed by a space (or all of it).
fn first_sentence(s: &str) -> String {
    let end = s
        .char_indices()
        .find(|(i, ch)| matches!(ch, '.' | ':') && s[i + 1..].starts_with(' '))
        .map_or(s.len(), |(i, _)| i);
    let sentence = s[..end].trim();
    if sentence.is_empty() {
        "The judgment".to_string()
    } else {
        sentence.to_string()
    }
}

/// The tone the page shows: a critical finding makes any verdict look like a problem, and a warning keeps a
/// good verdict from looking like good news.
fn shown_tone(tone: Tone, worst: Option<Severity>) -> Tone {
    match (tone, worst) {
        (_, Some(Severity::Critical)) => Tone::Problem,
        (Tone::Good, Some(Severity::Warning)) => Tone::Unknown,
        (t, _) => t,
    }
}

/// The section, with its headline as the heading.
pub fn section(r: &Report) -> String {
    let c = &r.conclusion;
    let (text, tone) = headline(c);
    let worst = worst_severity(r);
    let mut o = format!(
        "<section id=\"conclusion\" class=\"conclusion {}\" data-verdict=\"{}\"><p class=\"kicker\">Conclusion",
        shown_tone(tone, worst).class(),
        esc(c.verdict),
    );
    if !c.confident {
        o.push_str(" <span class=\"badge tentative\">tentative</span>");
    }
    let _ = write!(
        o,
        "</p><h2>{}</h2><p class=\"summary\">{}</p>",
        esc(&text),
        inline(&c.summary)
    );
    if !c.evidence.is_empty() {
        o.push_str("<h3>Evidence</h3><ul class=\"evidence\">");
        for e in &c.evidence {
            let _ = write!(o, "<li>{}</li>", inline(e));
        }
        o.push_str("</ul>");
    }
    if !c.cites.is_empty() {
        o.push_str("<h3>Lines it rests on</h3>");
        o.push_str(&cites(&c.cites));
    }
    let _ = write!(
        o,
        "<p class=\"action\"><strong>What to do next:</strong> {}</p>",
        inline(&c.action)
    );
    if let Some(worst) = worst {
        let n = r.findings.len();
        let _ = write!(
            o,
            "<p class=\"note\"><a href=\"#findings\">{n} finding{}</a> below, the worst {}.</p>",
            if n == 1 { "" } else { "s" },
            badge(worst)
        );
    }
    o.push_str("</section>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;

    #[test]
    fn every_verdict_reads_as_a_sentence() {
        let mut c = fixtures::report().conclusion;
        for v in [
            "not_the_link",
            "link_or_binding",
            "cpu_bound",
            "exposed_communication",
            "healthy",
            "baseline_meets_link",
            "insufficient_evidence",
            "mixed_inputs",
            "run_failed",
            "not_a_network_measurement",
            "misconfigured",
        ] {
            c.verdict = v;
            let (text, _) = headline(&c);
            assert!(!text.contains('_'), "{v}: {text}");
            assert!(text.contains(' '), "{v}: {text}");
        }
        // A verdict this page does not know: the summary's first sentence.
        c.verdict = "some_new_verdict";
        c.summary = "The run crashed: only 3 rows. More later.".to_string();
        assert_eq!(headline(&c), ("The run crashed".to_string(), Tone::Unknown));
    }

    #[test]
    fn the_section_heading_is_the_sentence_not_the_token() {
        let html = section(&fixtures::report());
        assert!(html.contains("<h2>The link is fine: training does not use it well</h2>"));
        assert!(!html.contains(">not_the_link<"));
        assert!(html.contains("data-verdict=\"not_the_link\""));
        assert!(html.contains(
            "<p class=\"kicker\">Conclusion <span class=\"badge tentative\">tentative</span></p>"
        ));
        assert!(html.contains("<li>link rate 50.00 GB/s (from flag)</li>"));
        assert!(html.contains("<strong>What to do next:</strong> look for stragglers</p>"));
        assert!(html.contains(
            "<a href=\"#findings\">1 finding</a> below, the worst <span class=\"badge sev-critical\">critical</span>."
        ));
    }

    #[test]
    fn a_critical_finding_colors_the_verdict() {
        assert_eq!(shown_tone(Tone::Good, None), Tone::Good);
        assert_eq!(shown_tone(Tone::Good, Some(Severity::Info)), Tone::Good);
        assert_eq!(
            shown_tone(Tone::Good, Some(Severity::Warning)),
            Tone::Unknown
        );
        assert_eq!(
            shown_tone(Tone::Good, Some(Severity::Critical)),
            Tone::Problem
        );
        assert_eq!(
            shown_tone(Tone::Unknown, Some(Severity::Critical)),
            Tone::Problem
        );
        assert_eq!(
            shown_tone(Tone::Unknown, Some(Severity::Warning)),
            Tone::Unknown
        );
    }

    #[test]
    fn backticks_in_the_summary_are_code() {
        let mut r = fixtures::report();
        r.conclusion.summary = "set `NCCL_IB_HCA` <now>".to_string();
        assert!(section(&r)
            .contains("<p class=\"summary\">set <code>NCCL_IB_HCA</code> &lt;now&gt;</p>"));
    }
}
