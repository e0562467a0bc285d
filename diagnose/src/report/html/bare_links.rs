//! Step 1's bare links from the collector's probes, as the text report shows them: per probed pair "the bare
//! link gives X" (usable figures first, lowest first), the probes not used with why, and the best inter-node
//! nccl-tests peak against the lowest bare link ("the bare link gives X, the job gets Y"). Every value from the
//! collector goes through [`esc`] (or a [`super::markup`] function that calls it).

use std::fmt::Write as _;

use super::super::model::Report;
use super::markup::{esc, num, Align, Table};

/// The part of step 1 that shows the bare links; empty when the report was made without `--collector`.
pub fn body(r: &Report) -> String {
    let Some(b) = &r.bare_links else {
        return String::new();
    };
    let mut o = String::from("<h3>Bare links (commwatch probes, from the collector)</h3>");
    if let Some(w) = &b.warning {
        let _ = write!(o, "<p class=\"missing\">Not read: {}</p>", esc(w));
        return o;
    }
    if b.links.is_empty() {
        o.push_str(
            "<p class=\"missing\">No probes yet: <code>POST /api/v1/probes</code>, or set <code>[probes] \
             matrix_period</code> on the collector.</p>",
        );
        return o;
    }
    o.push_str(&lowest_against_peak(r));
    let mut t = Table::new(
        "bare-links",
        &[
            ("pair", Align::Text),
            ("transport", Align::Text),
            ("bare link (GB/s)", Align::Num),
            ("latency p50 (µs)", Align::Num),
            ("latency p99 (µs)", Align::Num),
            ("age (min)", Align::Num),
            ("used", Align::Text),
        ],
    );
    for l in &b.links {
        let used = match l.unused {
            None => "yes".to_string(),
            Some(why) => {
                let detail = l
                    .error
                    .as_deref()
                    .map_or(String::new(), |e| format!(" ({e})"));
                format!(
                    "<span class=\"bad\">not used: {}</span>",
                    esc(&format!("{why}{detail}"))
                )
            }
        };
        t.row(&[
            esc(&format!("{} -> {}", l.from, l.to)),
            esc(&l.transport),
            num(l.bare_gbps, 2),
            num(l.latency_p50_us, 1),
            num(l.latency_p99_us, 1),
            num(Some((l.age_s / 60.0).max(0.0)), 0),
            used,
        ]);
    }
    o.push_str(&t.finish());
    o
}

/// "The lowest bare link gives X; the best inter-node nccl-tests peak, Y, is Z % of it", when both exist.
fn lowest_against_peak(r: &Report) -> String {
    let Some(b) = &r.bare_links else {
        return String::new();
    };
    let lowest = b
        .links
        .iter()
        .find(|l| l.unused.is_none())
        .and_then(|l| Some((l, l.bare_gbps.filter(|g| *g > 0.0)?)));
    let Some((l, bare)) = lowest else {
        return "<p class=\"missing\">No probe gives a usable bare link figure (declined, failed or older \
                than an hour).</p>"
            .to_string();
    };
    let mut o = format!(
        "<p>The bare link gives <strong>{bare:.2} GB/s</strong> at its lowest ({}).",
        esc(&format!("{} -> {}", l.from, l.to))
    );
    let peak = r
        .nccl_tests
        .iter()
        .filter(|t| t.test.nnodes().is_some_and(|n| n > 1))
        .filter_map(|t| t.summary.peak_busbw_gbps)
        .reduce(f64::max);
    if let Some(p) = peak {
        let _ = write!(
            o,
            " The job gets {p:.2} GB/s bus bandwidth at the best inter-node nccl-tests peak: {:.0} % of it.",
            p / bare * 100.0
        );
    }
    o.push_str("</p>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector::probes::{BareLink, BareLinks};
    use crate::report::fixtures;
    use crate::report::html::markup::without_labels;

    fn link(from: &str, bare: Option<f64>, unused: Option<&'static str>) -> BareLink {
        BareLink {
            from: from.into(),
            to: "node-b".into(),
            transport: "tcp".into(),
            at_unix_s: 0.0,
            age_s: 120.0,
            outcome: if unused.is_none() { "ok" } else { "declined" }.into(),
            error: unused.map(|_| "busy <fabric>".to_string()),
            bare_gbps: bare,
            tx_gbps: bare,
            rx_gbps: bare,
            latency_p50_us: Some(12.5),
            latency_p99_us: Some(30.0),
            unused,
        }
    }

    #[test]
    fn bare_links_give_x_and_the_job_gets_y_escaped() {
        let mut r = fixtures::report();
        assert_eq!(body(&r), "");
        r.bare_links = Some(BareLinks {
            links: vec![
                link("node-<a>", Some(20.0), None),
                link("node-c", None, Some("declined")),
            ],
            warning: None,
        });
        let html = without_labels(&body(&r));
        assert!(
            html.contains("The bare link gives <strong>20.00 GB/s</strong> at its lowest (node-&lt;a&gt; -&gt; node-b)."),
            "{html}"
        );
        assert!(html.contains("The job gets "), "{html}");
        assert!(html.contains(
            "<td>node-&lt;a&gt; -&gt; node-b</td><td>tcp</td><td class=\"num\">20.00</td>"
        ));
        assert!(
            html.contains("not used: declined (busy &lt;fabric&gt;)"),
            "{html}"
        );
        assert!(!html.contains("<a>") && !html.contains("<fabric>"));
    }

    #[test]
    fn a_collector_not_read_or_without_probes_says_so() {
        let mut r = fixtures::report();
        r.bare_links = Some(BareLinks {
            links: vec![],
            warning: Some("connection refused <x>".into()),
        });
        assert!(body(&r).contains("Not read: connection refused &lt;x&gt;"));
        r.bare_links = Some(BareLinks::default());
        assert!(body(&r).contains("No probes yet"));
    }
}
