//! The report as one self-contained HTML page: no script, no external resource, one style sheet; charts are
//! inline SVG and every figure a table.
//!
//! The page opens with the key judgment as a sentence, then the findings, then the four steps of the method,
//! each a section with its chart or table, and ends with the inputs as read:
//! - [`conclusion`]: the verdict as a headline, the evidence behind it and the next action;
//! - [`findings`]: each finding with a severity badge, its evidence as a table and its action;
//! - [`baselines`] (step 1, with [`bandwidth_chart`], the [`results`] table and the probes' [`bare_links`]), [`timeline`] (step 2, with
//!   [`timeline_chart`]), [`collectives`] (step 3, with the NCCL Inspector table of [`inspector`]),
//!   [`link_algorithm`] (step 4); [`fabric`] names the link
//!   and the NICs the baselines are held against;
//! - [`inputs`]: what was read and how;
//! - below them: [`markup`] (escaping, inline code, badges, tables), [`svg`] (the SVG writer) and [`axis`]
//!   (round ticks, size labels, text widths).
//!
//! Every text from the inputs goes through [`markup::esc`] (or a function of [`markup`] that calls it) on its
//! way into the page.

pub mod axis;
pub mod bandwidth_chart;
pub mod bare_links;
pub mod baselines;
pub mod collectives;
pub mod conclusion;
pub mod fabric;
pub mod findings;
pub mod inputs;
pub mod inspector;
pub mod link_algorithm;
pub mod markup;
pub mod results;
pub mod svg;
pub mod timeline;
pub mod timeline_chart;

use std::fmt::Write as _;

pub use self::markup::esc;
use super::model::Report;

/// The one style sheet, inlined into the page.
const STYLE: &str = include_str!("style.css");

/// A section after the conclusion.
struct Section {
    id: &'static str,
    /// The step of the method it shows, if it is one.
    step: Option<u8>,
    heading: &'static str,
    /// Its name in the page's navigation.
    short: &'static str,
    body: String,
}

/// The sections after the conclusion, in page order.
fn sections(r: &Report) -> [Section; 6] {
    let s = |id, step, heading, short, body| Section {
        id,
        step,
        heading,
        short,
        body,
    };
    [
        s("findings", None, "Findings", "Findings", findings::body(r)),
        s(
            "step-1",
            Some(1),
            "Baselines: bare communication",
            "1. Baselines",
            baselines::body(r),
        ),
        s(
            "step-2",
            Some(2),
            "Communication and computation on the timeline",
            "2. Timeline",
            timeline::body(r),
        ),
        s(
            "step-3",
            Some(3),
            "The costly collectives",
            "3. Costly collectives",
            collectives::body(r),
        ),
        s(
            "step-4",
            Some(4),
            "Link and algorithm",
            "4. Link and algorithm",
            link_algorithm::body(r),
        ),
        s("inputs", None, "Inputs", "Inputs", inputs::body(r)),
    ]
}

/// The whole page.
pub fn render_html(r: &Report) -> String {
    let (headline, _) = conclusion::headline(&r.conclusion);
    let mut o = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>commwatch diagnose: {}</title><style>\n{STYLE}</style></head>\n<body><main>\n",
        esc(&headline)
    );
    let sections = sections(r);
    o.push_str("<header><p class=\"brand\">commwatch diagnose</p><nav><a href=\"#conclusion\">Conclusion</a>");
    for s in &sections {
        let _ = write!(o, "<a href=\"#{}\">{}</a>", s.id, esc(s.short));
    }
    o.push_str("</nav></header>\n");
    o.push_str(&conclusion::section(r));
    o.push('\n');
    for s in sections {
        let _ = write!(o, "<section id=\"{}\"><h2>", s.id);
        if let Some(n) = s.step {
            let _ = write!(o, "<span class=\"step\">Step {n}</span>");
        }
        let _ = writeln!(o, "{}</h2>{}</section>", esc(s.heading), s.body);
    }
    o.push_str(
        "<footer>Made by <code>commwatch diagnose</code>. Bandwidths in GB/s (10⁹ bytes per second), as \
         nccl-tests prints them; sizes in binary units.</footer>\n</main></body></html>\n",
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;

    #[test]
    fn text_from_the_inputs_is_escaped_everywhere() {
        let mut r = fixtures::report();
        r.conclusion.summary = "<script>alert(1)</script>".to_string();
        let page = render_html(&r);
        assert!(!page.contains("<script"));
        // One long word: it may break anywhere.
        assert!(page.contains(
            "<p class=\"summary\"><span class=\"long\">&lt;script&gt;alert(1)&lt;/script&gt;</span></p>"
        ));
        assert!(page.contains("<p>NCCL data moves over eth0 &lt;management&gt;</p>"));
        assert!(page.contains("bind NCCL to the fabric &amp; retry"));
    }

    #[test]
    fn hostile_names_and_values_stay_text() {
        let hostile = "<script>x</script>\"'&amp;";
        let mut r = fixtures::report();
        r.inputs[0].path = format!("/tmp/{hostile}.txt");
        r.nccl_tests[0].file = format!("/tmp/{hostile}.txt");
        r.nccl_tests[0].test.collective = hostile.to_string();
        r.nccl_tests[0].test.nccl_version = Some(hostile.to_string());
        r.nccl_logs[0].file = hostile.to_string();
        r.nccl_logs[0].log.version = Some(hostile.to_string());
        r.nccl_logs[0].log.network = Some(hostile.to_string());
        r.nccl_logs[0].log.interfaces[0].name = hostile.to_string();
        r.nccl_logs[0].log.interfaces[0].detail = Some(hostile.to_string());
        r.nccl_logs[0].log.transports.insert(hostile.to_string(), 1);
        r.nccl_logs[0]
            .log
            .settings
            .insert(hostile.to_string(), hostile.to_string());
        r.traces[0].file = hostile.to_string();
        r.traces[0].analysis.top_collectives[0].collective = hostile.to_string();
        r.traces[0].analysis.top_collectives[0].dtype = Some(hostile.to_string());
        r.findings[0].summary = hostile.to_string();
        r.findings[0].action = format!("`{hostile}`");
        r.findings[0]
            .subject
            .insert(hostile.to_string(), hostile.to_string());
        r.findings[0]
            .evidence
            .insert(hostile.to_string(), hostile.into());
        r.conclusion.evidence.push(hostile.to_string());
        r.link.warning = Some(hostile.to_string());
        let page = render_html(&r);
        assert!(!page.contains("<script"), "unescaped script tag");
        assert!(!page.contains("\"'&amp;<"), "unescaped quote");
        let escaped = "&lt;script&gt;x&lt;/script&gt;&quot;&#39;&amp;amp;";
        // Every place the value went shows it escaped.
        assert!(
            page.matches(escaped).count() >= 20,
            "{}",
            page.matches(escaped).count()
        );
    }

    #[test]
    fn every_section_in_order() {
        let page = render_html(&fixtures::report());
        let order: Vec<usize> = [
            "<section id=\"conclusion\"",
            "<section id=\"findings\"><h2>Findings</h2>",
            "<section id=\"step-1\"><h2><span class=\"step\">Step 1</span>Baselines: bare communication</h2>",
            "<section id=\"step-2\"><h2><span class=\"step\">Step 2</span>",
            "<section id=\"step-3\"><h2><span class=\"step\">Step 3</span>The costly collectives</h2>",
            "<section id=\"step-4\"><h2><span class=\"step\">Step 4</span>Link and algorithm</h2>",
            "<section id=\"inputs\"><h2>Inputs</h2>",
        ]
        .iter()
        .map(|s| page.find(s).unwrap_or_else(|| panic!("{s}")))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        assert!(page
            .contains("<a href=\"#step-1\">1. Baselines</a><a href=\"#step-2\">2. Timeline</a>"));
        assert!(page.starts_with("<!DOCTYPE html>\n<html lang=\"en\">"));
        assert!(page.contains(
            "<title>commwatch diagnose: The link is fine: training does not use it well</title>"
        ));
        assert!(page.ends_with("</main></body></html>\n"));
    }

    #[test]
    fn charts_tables_and_no_text_dump() {
        let page = markup::without_labels(&render_html(&fixtures::report()));
        assert_eq!(page.matches("<svg").count(), 2);
        assert!(page.contains("link 50.0 GB/s"));
        // The scaling table and the steps, once a text dump, are tables now.
        assert!(page.contains(
            "<tr><td><code>all_gather_perf</code></td><td class=\"num\">1</td><td class=\"num\">200.00</td>"
        ));
        assert!(page.contains("class=\"bar-label\">rank 0</text>"));
        assert!(page.contains("<details><summary>Rank 0: 1 step</summary>"));
        assert!(!page.contains("<pre"));
        assert!(!page.contains("src=") && !page.contains("href=\"http"));
    }
}
