//! A small line chart as inline SVG: one polyline per series with a point (`circle.pt`, its value in a
//! tooltip) per value, a zero-based y axis with four gridlines labelled in the series' unit, the x range at
//! its ends. The legend is HTML beside it (no text of the chart can overlap another).

use std::fmt::Write as _;

use super::escape::Esc;

/// One line of a chart: `(x, y)` points, x ascending.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub colour: &'static str,
    pub points: Vec<(f64, f64)>,
}

/// How a chart labels its values.
pub struct Axes {
    pub title: &'static str,
    /// The y values as text (`units::rate`, ...).
    pub y: fn(Option<f64>) -> String,
    /// The x values as text.
    pub x: fn(f64) -> String,
}

const W: f64 = 560.0;
const H: f64 = 200.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 26.0;

/// The chart as a `<figure>`; a line saying so when no series has a point.
pub fn render(axes: &Axes, series: &[Series]) -> String {
    let mut s = format!(
        "<figure class=\"chart\"><figcaption>{}</figcaption>",
        Esc(axes.title)
    );
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    if all.is_empty() {
        s.push_str("<p class=\"empty\">No steps yet.</p></figure>");
        return s;
    }
    let x0 = all.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x1 = all.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let y1 = all
        .iter()
        .map(|p| p.1)
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE)
        * 1.1;
    let px = |x: f64| {
        if x1 > x0 {
            LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT)
        } else {
            (LEFT + W - RIGHT) / 2.0
        }
    };
    let py = |y: f64| TOP + (1.0 - y / y1) * (H - TOP - BOTTOM);
    let _ = write!(
        s,
        "<svg class=\"chart\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{}\" \
         xmlns=\"http://www.w3.org/2000/svg\">",
        Esc(axes.title)
    );
    grid(&mut s, axes, (x0, x1), y1, py);
    for line in series.iter().filter(|l| !l.points.is_empty()) {
        let pts: Vec<String> = line
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = write!(
            s,
            "<polyline class=\"line\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" points=\"{}\"/>",
            line.colour,
            pts.join(" ")
        );
        for &(x, y) in &line.points {
            let _ = write!(
                s,
                "<circle class=\"pt\" data-series=\"{}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.6\" fill=\"{}\"><title>{} at {}: \
                 {}</title></circle>",
                Esc(&line.name),
                px(x),
                py(y),
                line.colour,
                Esc(&line.name),
                Esc(&(axes.x)(x)),
                Esc(&(axes.y)(Some(y)))
            );
        }
    }
    s.push_str("</svg><ul class=\"legend\">");
    for line in series.iter().filter(|l| !l.points.is_empty()) {
        let _ = write!(
            s,
            "<li><svg width=\"12\" height=\"12\" aria-hidden=\"true\"><rect width=\"12\" height=\"12\" fill=\"{}\"/></svg> \
             {}</li>",
            line.colour,
            Esc(&line.name)
        );
    }
    s.push_str("</ul></figure>");
    s
}

/// The gridlines with their y labels, and the x range at its ends.
fn grid(s: &mut String, axes: &Axes, (x0, x1): (f64, f64), y1: f64, py: impl Fn(f64) -> f64) {
    for i in 0..=4 {
        let y = y1 * f64::from(i) / 4.0;
        let _ = write!(
            s,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{py:.1}\" y2=\"{py:.1}\"/><text class=\"tick\" \
             x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            LEFT - 6.0,
            py(y) + 4.0,
            Esc(&(axes.y)(Some(y))),
            py = py(y)
        );
    }
    for (x, anchor) in [(x0, "start"), (x1, "end")] {
        let _ = write!(
            s,
            "<text class=\"tick\" x=\"{:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text>",
            if anchor == "start" { LEFT } else { W - RIGHT },
            H - 8.0,
            Esc(&(axes.x)(x))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_a_point_and_names_are_escaped() {
        let axes = Axes {
            title: "t",
            y: super::super::units::rate,
            x: |x| format!("{x:.0}"),
        };
        let series = [Series {
            name: "<b>x</b>".into(),
            colour: "#123456",
            points: vec![(1.0, 2e9), (2.0, 3e9), (3.0, 1e9)],
        }];
        let svg = render(&axes, &series);
        assert_eq!(svg.matches("<circle class=\"pt\"").count(), 3);
        assert!(!svg.contains("<b>"), "{svg}");
        assert!(svg.contains("&lt;b&gt;x&lt;/b&gt;"));
        assert!(render(&axes, &[]).contains("No steps yet."));
    }
}
