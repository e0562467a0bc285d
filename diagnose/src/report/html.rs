//! The report as one self-contained HTML file: no scripts, no external resources; charts are inline SVG
//! (bus bandwidth against message size with the link rate; per-step communication/computation/idle).

use std::fmt::Write as _;

use super::model::Report;
use super::scaling::scaling_table;
use super::text::render_text;
use super::units::human_bytes;

const W: f64 = 720.0;
const H: f64 = 300.0;
const PAD: f64 = 50.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// Escapes text for HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Bus bandwidth (y) against log2 message size (x), one line per test, the link rate as a dashed line.
fn busbw_chart(r: &Report) -> String {
    let series: Vec<(String, Vec<(f64, f64)>)> = r
        .nccl_tests
        .iter()
        .map(|t| {
            let pts = t
                .test
                .rows
                .iter()
                .filter(|row| row.size_bytes > 0)
                .filter_map(|row| Some(((row.size_bytes as f64).log2(), row.best_busbw_gbps()?)))
                .collect();
            (
                format!(
                    "{} ({} ranks)",
                    t.test.collective,
                    t.test.nranks().unwrap_or(0)
                ),
                pts,
            )
        })
        .filter(|(_, p): &(String, Vec<(f64, f64)>)| !p.is_empty())
        .collect();
    if series.is_empty() {
        return String::new();
    }
    let all = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for (x, y) in all {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y1 = y1.max(*y);
    }
    if let Some(rate) = r.link.rate_gbps {
        y1 = y1.max(rate);
    }
    let y1 = if y1 > 0.0 { y1 * 1.1 } else { 1.0 };
    let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
    let sx = |x: f64| PAD + (x - x0) / (x1 - x0) * (W - 2.0 * PAD);
    let sy = |y: f64| H - PAD - y / y1 * (H - 2.0 * PAD);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"bus bandwidth by message size\">"
    );
    let _ = write!(
        s,
        "<line x1=\"{PAD}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#444\"/><line x1=\"{PAD}\" y1=\"{PAD}\" x2=\"{PAD}\" y2=\"{}\" stroke=\"#444\"/>",
        H - PAD, W - PAD, H - PAD, H - PAD
    );
    for i in 0..=4 {
        let v = y1 * f64::from(i) / 4.0;
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{v:.0}</text>",
            PAD - 4.0,
            sy(v) + 3.0
        );
    }
    let mut x = x0.ceil();
    while x <= x1 {
        if (x as i64) % 4 == 0 || x1 - x0 <= 8.0 {
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
                sx(x),
                H - PAD + 14.0,
                esc(&human_bytes(2f64.powf(x) as u64))
            );
        }
        x += 1.0;
    }
    let _ = write!(s, "<text x=\"12\" y=\"{PAD}\" font-size=\"11\" transform=\"rotate(-90 12 {PAD})\" text-anchor=\"end\">busbw GB/s</text>");
    if let Some(rate) = r.link.rate_gbps {
        let _ = write!(
            s,
            "<line x1=\"{PAD}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#000\" stroke-dasharray=\"6 4\"/><text x=\"{}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">link {rate:.1} GB/s</text>",
            W - PAD,
            W - PAD,
            sy(rate) - 4.0,
            y = sy(rate)
        );
    }
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y)))
            .collect();
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>",
            path.join(" ")
        );
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"{c}\">{}</text>",
            PAD + 8.0,
            PAD + 14.0 * (i as f64 + 1.0),
            esc(name)
        );
    }
    s.push_str("</svg>");
    s
}

/// Per step of each rank: a bar of the step time split into exposed communication, overlapped communication,
/// computation alone and the rest (idle or other).
fn steps_chart(r: &Report) -> String {
    let rows: Vec<(String, f64, f64, f64, f64)> = r
        .traces
        .iter()
        .flat_map(|t| {
            t.analysis.steps.iter().map(move |s| {
                let overlapped = s.comm_time_us - s.exposed_comm_us;
                let compute_only = (s.compute_time_us - overlapped).max(0.0);
                (
                    format!("rank {} step {}", t.analysis.rank, s.step),
                    s.step_time_us,
                    s.exposed_comm_us,
                    overlapped,
                    compute_only,
                )
            })
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let max = rows.iter().map(|r| r.1).fold(0.0, f64::max).max(1.0);
    let bar_h = 18.0;
    let label_w = 150.0;
    let h = PAD + rows.len() as f64 * (bar_h + 6.0) + 30.0;
    let scale = |v: f64| v / max * (W - label_w - 20.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" role=\"img\" aria-label=\"per-step communication and computation\">"
    );
    let legend = [
        ("#d62728", "exposed comm"),
        ("#ff9896", "overlapped comm"),
        ("#1f77b4", "compute only"),
        ("#dddddd", "rest of step"),
    ];
    for (i, (c, l)) in legend.iter().enumerate() {
        let x = label_w + i as f64 * 130.0;
        let _ = write!(s, "<rect x=\"{x}\" y=\"10\" width=\"12\" height=\"12\" fill=\"{c}\"/><text x=\"{}\" y=\"20\" font-size=\"11\">{l}</text>", x + 16.0);
    }
    for (i, (label, step, exposed, overlapped, compute)) in rows.iter().enumerate() {
        let y = PAD + i as f64 * (bar_h + 6.0);
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
            label_w - 6.0,
            y + 13.0,
            esc(label)
        );
        let rest = (step - exposed - overlapped - compute).max(0.0);
        let mut x = label_w;
        for (v, c) in [
            (*exposed, "#d62728"),
            (*overlapped, "#ff9896"),
            (*compute, "#1f77b4"),
            (rest, "#dddddd"),
        ] {
            let w = scale(v);
            let _ = write!(s, "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{bar_h}\" fill=\"{c}\"/>");
            x += w;
        }
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">{:.1} ms</text>",
            x + 4.0,
            y + 13.0,
            step / 1e3
        );
    }
    s.push_str("</svg>");
    s
}

/// The whole page.
pub fn render_html(r: &Report) -> String {
    let mut o = String::new();
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>commwatch diagnose</title><style>");
    o.push_str("body{font-family:system-ui,sans-serif;margin:2em;max-width:60em}h2{border-bottom:1px solid #ccc}.critical{color:#b00}.warning{color:#a60}.info{color:#06c}pre{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:12px}table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}");
    o.push_str("</style></head><body>\n<h1>commwatch diagnose</h1>\n");
    let c = &r.conclusion;
    let _ = write!(
        o,
        "<h2>Conclusion: {}</h2><p><strong>{}</strong></p><ul>",
        esc(c.verdict),
        esc(&c.summary)
    );
    for e in &c.evidence {
        let _ = write!(o, "<li>{}</li>", esc(e));
    }
    let _ = writeln!(o, "</ul><p>Action: {}</p>", esc(&c.action));
    o.push_str("<h2>Findings</h2>");
    if r.findings.is_empty() {
        o.push_str("<p>none</p>");
    }
    for f in &r.findings {
        let _ = write!(
            o,
            "<p class=\"{}\"><strong>[{}] {}</strong>: {}<br>Action: {}</p>",
            f.severity.as_str(),
            f.severity.as_str(),
            esc(f.kind),
            esc(&f.summary),
            esc(&f.action)
        );
    }
    o.push_str("<h2>Step 1. Bus bandwidth by message size</h2>");
    o.push_str(&busbw_chart(r));
    let scaling = scaling_table(&r.nccl_tests);
    if !scaling.is_empty() {
        o.push_str("<table><tr><th>collective</th><th>ranks</th><th>peak busbw GB/s</th><th>vs smallest scale</th></tr>");
        for (coll, n, p, e) in scaling {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{n}</td><td>{p:.2}</td><td>{:.0} %</td></tr>",
                esc(&coll),
                e * 100.0
            );
        }
        o.push_str("</table>");
    }
    o.push_str("<h2>Step 2. Communication and computation per step</h2>");
    o.push_str(&steps_chart(r));
    o.push_str("<h2>Full report</h2><pre>");
    o.push_str(&esc(&render_text(r)));
    o.push_str("</pre></body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc(r#"<a href="x">R&D</a>"#),
            "&lt;a href=&quot;x&quot;&gt;R&amp;D&lt;/a&gt;"
        );
        // `&` first, so an entity in the input is escaped once, not re-read.
        assert_eq!(esc("&lt;"), "&amp;lt;");
    }

    #[test]
    fn text_from_the_inputs_is_escaped_everywhere() {
        let mut r = fixtures::report();
        r.conclusion.summary = "<script>alert(1)</script>".to_string();
        let page = render_html(&r);
        assert!(!page.contains("<script"));
        assert!(page.contains("<p><strong>&lt;script&gt;alert(1)&lt;/script&gt;</strong></p>"));
        assert!(page.contains(
            "<p class=\"critical\"><strong>[critical] management_network_traffic</strong>: NCCL data moves over \
             eth0 &lt;management&gt;<br>Action: bind NCCL to the fabric &amp; retry</p>"
        ));
        // The full text report is embedded, escaped.
        assert!(page.contains("<pre>commwatch diagnose: four-step report\n"));
        assert!(page.contains(
            "[critical] management_network_traffic: NCCL data moves over eth0 &lt;management&gt;"
        ));
    }

    #[test]
    fn charts_and_the_scaling_table() {
        let page = render_html(&fixtures::report());
        assert_eq!(page.matches("<svg").count(), 2);
        assert!(page.contains("link 50.0 GB/s"));
        assert!(page
            .contains("<tr><td>all_gather_perf</td><td>1</td><td>200.00</td><td>100 %</td></tr>"));
        assert!(page.contains(">rank 0 step 0</text>"));
        assert!(page.ends_with("</pre></body></html>\n"));
    }
}
