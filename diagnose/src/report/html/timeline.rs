//! Step 2, communication against computation on the timeline: a stacked bar per rank, a table of each rank's
//! trace, and each rank's steps one click away (`<details>`, no script).

use std::fmt::Write as _;

use super::super::model::Report;
use super::markup::{esc, file, ms, pct, Align, Table, UNKNOWN};
use super::timeline_chart::{chart, Bar, PARTS};
use crate::analysed::TraceReport;

/// The most ranks the chart draws; the table lists every rank.
pub const MAX_BARS: usize = 64;

/// The section's body.
pub fn body(r: &Report) -> String {
    let mut o = String::from(
        "<p class=\"lead\">Where each rank's GPU time goes. Communication hidden behind computation costs \
         nothing; exposed communication and idle time are what a faster link or better overlap could win \
         back.</p>",
    );
    if r.traces.is_empty() {
        o.push_str(
            "<p class=\"missing\">No traces given. Profile a few training steps (<code>torch.profiler</code> with \
             <code>ProfilerStep</code>, or Nsight Systems) and pass them with <code>--trace</code> or \
             <code>--nsys</code>.</p>",
        );
        return o;
    }
    let per_step = r.traces.iter().all(|t| !t.analysis.steps.is_empty());
    let bars: Vec<Bar> = r
        .traces
        .iter()
        .take(MAX_BARS)
        .map(|t| bar(t, per_step))
        .collect();
    if let Some(svg) = chart(&bars) {
        let what = if per_step {
            "The mean step of each rank"
        } else {
            "The whole trace of each rank (not every trace marks its steps)"
        };
        let _ = write!(o, "<figure class=\"chart\">{svg}<figcaption>{what}.");
        if r.traces.len() > MAX_BARS {
            let _ = write!(
                o,
                " The first {MAX_BARS} of {} ranks are drawn; the table lists all.",
                r.traces.len()
            );
        }
        o.push_str("<ul class=\"legend\">");
        for p in &PARTS {
            let _ = write!(
                o,
                "<li><span class=\"swatch\" style=\"background:{}\"></span>{}</li>",
                p.fill,
                esc(p.name)
            );
        }
        o.push_str("</ul></figcaption></figure>");
    }
    o.push_str(&ranks_table(r));
    for t in &r.traces {
        o.push_str(&steps_details(t));
    }
    o
}

/// A rank's bar: its mean step when `per_step`, else its whole trace.
fn bar(t: &TraceReport, per_step: bool) -> Bar {
    let a = &t.analysis;
    let parts_us = if per_step {
        let n = a.steps.len() as f64;
        let mut sum = [0.0; 5];
        for s in &a.steps {
            let overlapped = (s.comm_time_us - s.exposed_comm_us).max(0.0);
            let parts = split(
                s.step_time_us,
                s.compute_time_us,
                overlapped,
                s.exposed_comm_us,
                s.idle_time_us,
            );
            for (acc, v) in sum.iter_mut().zip(parts) {
                *acc += v / n;
            }
        }
        sum
    } else {
        split(
            a.span_us,
            a.compute_time_us,
            a.overlap_time_us,
            a.exposed_comm_us,
            a.idle_time_us,
        )
    };
    Bar {
        label: format!("rank {}", a.rank),
        parts_us,
    }
}

/// A span split into the chart's parts: computation alone, overlapped and exposed communication, idle, and
/// what remains of the span (never negative).
fn split(span: f64, compute: f64, overlapped: f64, exposed: f64, idle: f64) -> [f64; 5] {
    let compute_alone = (compute - overlapped).max(0.0);
    let rest = (span - compute_alone - overlapped - exposed - idle).max(0.0);
    [
        compute_alone,
        overlapped,
        exposed.max(0.0),
        idle.max(0.0),
        rest,
    ]
}

/// One row per rank: its whole (counted) trace.
fn ranks_table(r: &Report) -> String {
    let mut t = Table::new(
        "ranks",
        &[
            ("rank", Align::Num),
            ("trace", Align::Text),
            ("steps", Align::Num),
            ("mean step", Align::Num),
            ("communication", Align::Num),
            ("computation", Align::Num),
            ("GPU idle", Align::Num),
            ("overlap", Align::Num),
            ("exposed communication", Align::Num),
        ],
    );
    for tr in &r.traces {
        let a = &tr.analysis;
        t.row(&[
            a.rank.to_string(),
            format!(
                "{} <span class=\"note\">({})</span>",
                file(&tr.file),
                esc(tr.source)
            ),
            a.steps.len().to_string(),
            a.mean_step_time_us().map_or(UNKNOWN.to_string(), ms),
            ms(a.comm_time_us),
            ms(a.compute_time_us),
            ms(a.idle_time_us),
            pct(a.overlap_ratio),
            ms(a.exposed_comm_us),
        ]);
    }
    let mut o = String::from("<h3>Each rank's trace</h3>");
    o.push_str(&t.finish());
    if r.traces.iter().any(|t| t.analysis.last_step_excluded) {
        o.push_str(
            "<p class=\"note\">Where a trace has two or more steps, its last step is left out of the totals: \
             the end of the trace usually cuts it short.</p>",
        );
    }
    o
}

/// A rank's steps, folded away.
fn steps_details(tr: &TraceReport) -> String {
    let a = &tr.analysis;
    if a.steps.is_empty() {
        return String::new();
    }
    let mut t = Table::new(
        "steps",
        &[
            ("step", Align::Num),
            ("step time", Align::Num),
            ("communication", Align::Num),
            ("computation", Align::Num),
            ("GPU idle", Align::Num),
            ("overlap", Align::Num),
            ("exposed communication", Align::Num),
        ],
    );
    for s in &a.steps {
        t.row(&[
            s.step.to_string(),
            ms(s.step_time_us),
            ms(s.comm_time_us),
            ms(s.compute_time_us),
            ms(s.idle_time_us),
            pct(s.overlap_ratio),
            ms(s.exposed_comm_us),
        ]);
    }
    format!(
        "<details><summary>Rank {}: {} step{}</summary>{}</details>",
        a.rank,
        a.steps.len(),
        if a.steps.len() == 1 { "" } else { "s" },
        t.finish()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;
    use crate::report::html::markup::without_labels;

    #[test]
    fn a_step_splits_into_the_charts_parts() {
        // The fixture's step: 100 ms, 40 ms communication of which 20 ms exposed, 70 ms computation, 10 ms idle.
        let r = fixtures::report();
        let b = bar(&r.traces[0], true);
        assert_eq!(b.label, "rank 0");
        assert_eq!(b.parts_us, [50_000.0, 20_000.0, 20_000.0, 10_000.0, 0.0]);
        assert_eq!(split(10.0, 2.0, 3.0, 1.0, 1.0), [0.0, 3.0, 1.0, 1.0, 5.0]);
    }

    #[test]
    fn chart_table_and_steps() {
        let html = without_labels(&body(&fixtures::report()));
        assert_eq!(html.matches("<svg").count(), 1);
        assert!(html.contains("The mean step of each rank."));
        assert!(html.contains(
            "<tr><td class=\"num\">0</td><td><span class=\"file\" title=\"rank-0.json\">rank-0.json</span> \
             <span class=\"note\">(kineto)</span></td><td class=\"num\">1</td><td class=\"num\">100 ms</td>"
        ));
        assert!(html.contains("<details><summary>Rank 0: 1 step</summary>"));
    }

    #[test]
    fn no_traces_say_how_to_get_them() {
        let mut r = fixtures::report();
        r.traces.clear();
        let html = body(&r);
        assert!(html.contains("pass them with <code>--trace</code>"));
        assert!(!html.contains("<svg"));
    }
}
