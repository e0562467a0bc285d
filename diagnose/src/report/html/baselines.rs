//! Step 1, the baselines: what NCCL reaches alone. The bus bandwidth chart with its legend, a table of each
//! nccl-tests result, and how the peak holds up with scale.

use std::fmt::Write as _;

use super::super::model::{Report, ReportJson};
use super::super::scaling::scaling_table;
use super::super::units::human_bytes;
use super::bandwidth_chart::{chart, style, Capacity, Series};
use super::markup::{code, duration, esc, file, int, num, pct, unbroken, Align, Table, UNKNOWN};

/// "16 ranks on 2 nodes", "8 ranks", or "ranks unknown": never a zero standing for "unknown".
pub fn ranks_phrase(nranks: Option<u32>, nnodes: Option<u32>) -> String {
    let plural = |n: u32, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    match (nranks, nnodes) {
        (Some(r), Some(n)) => format!(
            "{} on {}",
            plural(r, "rank", "ranks"),
            plural(n, "node", "nodes")
        ),
        (Some(r), None) => plural(r, "rank", "ranks"),
        (None, _) => "ranks unknown".to_string(),
    }
}

/// The section's body.
pub fn body(r: &Report) -> String {
    let mut o = String::from(
        "<p class=\"lead\">The bus bandwidth NCCL reaches alone, by message size: the most training can expect \
         from the same nodes.</p>",
    );
    if r.nccl_tests.is_empty() {
        o.push_str(
            "<p class=\"missing\">No nccl-tests results given. Run <code>all_reduce_perf</code> across the same \
             nodes and pass its output with <code>--nccl-tests</code>.</p>",
        );
        return o;
    }
    o.push_str(&curves(r));
    o.push_str(&results(r));
    o.push_str(&scaling(r));
    o
}

/// The chart and its legend: one entry per result that has a measured row.
fn curves(r: &Report) -> String {
    let (drawn, series): (Vec<usize>, Vec<Series>) = r
        .nccl_tests
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let points: Vec<(u64, f64)> = t
                .test
                .rows
                .iter()
                .filter(|row| row.size_bytes > 0)
                .filter_map(|row| Some((row.size_bytes, row.best_busbw_gbps()?)))
                .collect();
            (!points.is_empty()).then(|| {
                let name = t.test.collective.clone();
                (i, Series { name, points })
            })
        })
        .unzip();
    let capacity = r.link.rate_gbps.map(|gbps| Capacity {
        gbps,
        label: format!("link {gbps:.1} GB/s"),
    });
    let Some(svg) = chart(&series, capacity.as_ref()) else {
        return "<p class=\"missing\">No result has a measured row to draw.</p>".to_string();
    };
    let mut o = format!("<figure class=\"chart\">{svg}<figcaption><ul class=\"legend\">");
    for (k, i) in drawn.iter().enumerate() {
        let t = &r.nccl_tests[*i];
        let (color, dash) = style(k);
        let line_style = if dash.is_empty() { "solid" } else { "dashed" };
        let _ = write!(
            o,
            "<li><span class=\"swatch line\" style=\"border-top:3px {line_style} {color}\"></span>{} · {} · {}</li>",
            code(&t.test.collective),
            esc(&ranks_phrase(t.test.nranks(), t.test.nnodes())),
            file(&t.file)
        );
    }
    if let Some(c) = &capacity {
        let _ = write!(
            o,
            "<li><span class=\"swatch line\" style=\"border-top:2px dashed #222\"></span>{} (from {})</li>",
            esc(&c.label),
            esc(source_name(r.link.source))
        );
    }
    o.push_str("</ul></figcaption></figure>");
    o
}

/// Where the link rate came from, for people.
pub fn source_name(source: Option<&str>) -> &str {
    match source {
        Some("flag") => "--link-rate",
        Some("collector") => "the collector's inventory",
        Some(other) => other,
        None => "unknown",
    }
}

/// One row per result: who ran it, its curve's summary and its share of the link.
fn results(r: &Report) -> String {
    let view = ReportJson::from(r);
    let mut t = Table::new(
        "results",
        &[
            ("result", Align::Text),
            ("ranks", Align::Text),
            ("NCCL", Align::Text),
            ("sizes", Align::Text),
            ("avg bus bw, file (GB/s)", Align::Num),
            ("peak bus bw (GB/s)", Align::Num),
            ("peak at", Align::Num),
            ("latency", Align::Num),
            ("peak vs link", Align::Num),
        ],
    );
    for (test, json) in r.nccl_tests.iter().zip(&view.nccl_tests) {
        let s = &test.summary;
        let rows = &test.test.rows;
        let sizes = match (
            rows.iter().map(|r| r.size_bytes).min(),
            rows.iter().map(|r| r.size_bytes).max(),
        ) {
            (Some(a), Some(b)) if a == b => format!("{} (1 row)", human_bytes(a)),
            (Some(a), Some(b)) => {
                format!(
                    "{} – {} ({} rows)",
                    human_bytes(a),
                    human_bytes(b),
                    rows.len()
                )
            }
            _ => "no rows".to_string(),
        };
        let vs_link = match json.link_share {
            Some(share) => pct(Some(share)),
            None if !test.inter_node() => "single node".to_string(),
            None => UNKNOWN.to_string(),
        };
        t.row(&[
            format!("{}<br>{}", code(&test.test.collective), file(&test.file)),
            esc(&ranks_phrase(test.test.nranks(), test.test.nnodes())),
            test.test
                .nccl_version
                .as_deref()
                .map_or(UNKNOWN.to_string(), unbroken),
            esc(&sizes),
            num(test.test.avg_busbw_gbps, 2),
            num(s.peak_busbw_gbps, 2),
            s.peak_at_bytes
                .map_or(UNKNOWN.to_string(), |b| esc(&human_bytes(b))),
            s.latency_us.map_or(UNKNOWN.to_string(), duration),
            vs_link,
        ]);
    }
    t.finish()
}

/// Peak bus bandwidth by scale, when more than one scale was measured.
fn scaling(r: &Report) -> String {
    let rows = scaling_table(&r.nccl_tests);
    if rows.len() < 2 {
        return String::new();
    }
    let mut t = Table::new(
        "scaling",
        &[
            ("collective", Align::Text),
            ("ranks", Align::Num),
            ("peak bus bw (GB/s)", Align::Num),
            ("vs smallest scale", Align::Num),
        ],
    );
    for (coll, n, peak, eff) in rows {
        t.row(&[
            code(&coll),
            int(Some(n)),
            num(Some(peak), 2),
            pct(Some(eff)),
        ]);
    }
    format!("<h3>How the peak holds up with scale</h3>{}", t.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;
    use crate::report::html::markup::without_labels;

    #[test]
    fn ranks_are_counted_or_said_unknown() {
        assert_eq!(ranks_phrase(Some(16), Some(2)), "16 ranks on 2 nodes");
        assert_eq!(ranks_phrase(Some(1), Some(1)), "1 rank on 1 node");
        assert_eq!(ranks_phrase(Some(8), None), "8 ranks");
        assert_eq!(ranks_phrase(None, Some(2)), "ranks unknown");
    }

    #[test]
    fn chart_legend_results_and_scale() {
        let mut r = fixtures::report();
        r.nccl_tests.push(fixtures::test_report(
            "all_gather_perf",
            &["a", "b"],
            Some(30.0),
        ));
        let html = without_labels(&body(&r));
        assert!(html.contains("link 50.0 GB/s"));
        // The legend: the drawn result, then the link.
        assert!(html.contains(
            "<code>all_reduce_perf</code> · 2 ranks on 2 nodes · <span class=\"file\" \
             title=\"all_reduce_perf.txt\">all_reduce_perf.txt</span></li>"
        ));
        assert!(html.contains("link 50.0 GB/s (from --link-rate)</li>"));
        // The inter-node result against the link, the single-node one not.
        assert!(html.contains("<td class=\"num\">45.00</td><td class=\"num\">",));
        assert!(html.contains("<td class=\"num\">90 %</td></tr>"));
        assert!(html.contains("<td class=\"num\">single node</td></tr>"));
        assert!(html.contains("1 MiB – 1 GiB (2 rows)"));
        assert!(html.contains(
            "<tr><td><code>all_gather_perf</code></td><td class=\"num\">1</td><td class=\"num\">200.00</td>\
             <td class=\"num\">100 %</td></tr>"
        ));
        assert!(!html.contains("(0 ranks)"));
    }

    #[test]
    fn no_results_say_what_to_run() {
        let mut r = fixtures::report();
        r.nccl_tests.clear();
        assert!(body(&r).contains("pass its output with <code>--nccl-tests</code>"));
    }
}
