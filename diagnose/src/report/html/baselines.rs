//! Step 1, the baselines: what NCCL reaches alone. The bus bandwidth chart with its legend, a table of each
//! nccl-tests result, and how the peak holds up with scale.

use std::fmt::Write as _;

use super::super::model::Report;
use super::super::scaling::scaling_table;
use super::bandwidth_chart::{chart, style, Capacity, Series};
use super::fabric::{capacity, capacity_sources};
use super::markup::{code, esc, file, int, num, pct, Align, Table};
use super::results::{ranks_of, run_status};

/// The section's body.
pub fn body(r: &Report) -> String {
    let mut o = String::from(
        "<p class=\"lead\">The bus bandwidth NCCL reaches alone, by message size: the most training can expect \
         from the same nodes.</p>",
    );
    let unread: Vec<&super::super::model::InputRecord> = r
        .inputs
        .iter()
        .filter(|i| i.kind == "nccl_tests" && i.status == "error")
        .collect();
    for i in &unread {
        o.push_str(&format!(
            "<p class=\"missing\">{} gave no results: {}</p>",
            super::markup::file(&i.path),
            super::markup::inline(i.warnings.first().map(String::as_str).unwrap_or(""))
        ));
    }
    if r.nccl_tests.is_empty() {
        if unread.is_empty() {
            o.push_str(
                "<p class=\"missing\">No nccl-tests results given. Run <code>all_reduce_perf</code> across the \
                 same nodes and pass its output with <code>--nccl-tests</code>.</p>",
            );
        }
        o.push_str(&super::bare_links::body(r));
        return o;
    }
    o.push_str(&curves(r));
    o.push_str(&super::results::table(r));
    o.push_str(&scaling(r));
    o.push_str(&super::bare_links::body(r));
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
    let capacity = capacity(&r.link).map(|(gbps, label)| Capacity { gbps, label });
    let Some(svg) = chart(&series, capacity.as_ref()) else {
        return "<p class=\"missing\">No result has a measured row to draw.</p>".to_string();
    };
    let mut o = format!("<figure class=\"chart\">{svg}<figcaption><ul class=\"legend\">");
    for (k, i) in drawn.iter().enumerate() {
        let t = &r.nccl_tests[*i];
        let (color, dash) = style(k);
        let line_style = if dash.is_empty() { "solid" } else { "dashed" };
        let status = run_status(t).map_or(String::new(), |s| {
            format!(" · <span class=\"bad\">{}</span>", esc(&s))
        });
        let _ = write!(
            o,
            "<li><span class=\"swatch line\" style=\"border-top:3px {line_style} {color}\"></span>{} · {} · \
             {}{status}</li>",
            code(&t.test.collective),
            esc(&ranks_of(t)),
            file(&t.file)
        );
    }
    if let Some(c) = &capacity {
        let _ = write!(
            o,
            "<li><span class=\"swatch line\" style=\"border-top:2px dashed #222\"></span>{} ({})</li>",
            esc(&c.label),
            esc(&capacity_sources(&r.link))
        );
    }
    o.push_str("</ul></figcaption></figure>");
    o
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
        assert!(html.contains("<table class=\"results stack\">"));
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
