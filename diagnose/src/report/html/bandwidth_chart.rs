//! Step 1's chart: bus bandwidth (GB/s, linear) against message size (log₂), one line per nccl-tests result,
//! and the link's capacity as a dashed line when it is known.

use super::axis::{size_labels, text_width, Linear};
use super::svg::{Anchor, Svg};

/// Full width and height of the chart, pixels.
const W: f64 = 1020.0;
const H: f64 = 360.0;
const TICK_PX: f64 = 11.0;
const TITLE_PX: f64 = 12.0;

/// Colors of the lines, in order; after the last, the colors repeat with the next dash pattern.
pub const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
];
const DASHES: [&str; 3] = ["", "7 3", "2 3"];

/// How the `i`-th line is drawn: (color, dash pattern).
pub fn style(i: usize) -> (&'static str, &'static str) {
    (
        COLORS[i % COLORS.len()],
        DASHES[(i / COLORS.len()) % DASHES.len()],
    )
}

/// One line: the name its tooltips use and its points, (message size in bytes, bus bandwidth GB/s).
pub struct Series {
    pub name: String,
    pub points: Vec<(u64, f64)>,
}

/// A horizontal reference line: its value (GB/s) and its label.
pub struct Capacity {
    pub gbps: f64,
    pub label: String,
}

/// Where the plot area lies inside the chart, and how values map onto it.
struct Frame {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    x0: f64,
    x1: f64,
    y: Linear,
}

impl Frame {
    fn x(&self, size: u64) -> f64 {
        self.x_log2((size.max(1) as f64).log2())
    }

    fn x_log2(&self, l: f64) -> f64 {
        if self.x1 > self.x0 {
            self.left + (l - self.x0) / (self.x1 - self.x0) * (self.right - self.left)
        } else {
            (self.left + self.right) / 2.0
        }
    }

    fn y(&self, v: f64) -> f64 {
        self.bottom - v / self.y.top * (self.bottom - self.top)
    }
}

/// The chart, or `None` when no series has a point.
pub fn chart(series: &[Series], capacity: Option<&Capacity>) -> Option<String> {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let lo = all().map(|p| p.0).min()?;
    let hi = all().map(|p| p.0).max()?;
    let max = all()
        .map(|p| p.1)
        .chain(capacity.map(|c| c.gbps))
        .fold(0.0, f64::max);
    let frame = frame(lo, hi, Linear::new(max, 6));
    let mut svg = Svg::new(W, H, "bus bandwidth by message size");
    y_axis(&mut svg, &frame);
    x_axis(&mut svg, &frame, lo, hi);
    if let Some(c) = capacity {
        capacity_line(&mut svg, &frame, c);
    }
    for (i, s) in series.iter().enumerate() {
        let (color, dash) = style(i);
        let mut pts: Vec<(u64, f64)> = s.points.clone();
        pts.sort_by_key(|p| p.0);
        let xy: Vec<(f64, f64)> = pts
            .iter()
            .map(|(x, y)| (frame.x(*x), frame.y(*y)))
            .collect();
        svg.polyline(&xy, color, dash);
        for ((size, gbps), at) in pts.iter().zip(&xy) {
            let tip = format!(
                "{}: {} at {gbps:.2} GB/s",
                s.name,
                super::super::units::human_bytes(*size)
            );
            svg.dot(*at, color, &tip);
        }
    }
    Some(svg.finish())
}

/// Margins from what the labels need: the widest bandwidth label and the axis title on the left, half of the
/// end size labels at either side.
fn frame(lo: u64, hi: u64, y: Linear) -> Frame {
    let widest_y = y
        .ticks()
        .iter()
        .map(|v| text_width(&y.label(*v), TICK_PX))
        .fold(0.0, f64::max);
    let half = |b: u64| text_width(&super::super::units::human_bytes(b), TICK_PX) / 2.0 + 4.0;
    let left = (8.0 + TITLE_PX + 10.0 + widest_y + 8.0).max(half(lo));
    let (mut x0, mut x1) = ((lo.max(1) as f64).log2(), (hi.max(1) as f64).log2());
    if x1 <= x0 {
        // One size: centred, a unit either side.
        x0 -= 1.0;
        x1 += 1.0;
    }
    Frame {
        left,
        right: W - half(hi).max(16.0),
        top: 22.0,
        bottom: H - (TICK_PX + 10.0 + TITLE_PX + 14.0),
        x0,
        x1,
        y,
    }
}

fn y_axis(svg: &mut Svg, f: &Frame) {
    for v in f.y.ticks() {
        let y = f.y(v);
        svg.line(
            (f.left, y),
            (f.right, y),
            if v == 0.0 { "axis" } else { "grid" },
        );
        svg.text(
            f.left - 8.0,
            y + TICK_PX * 0.35,
            Anchor::End,
            "tick",
            &f.y.label(v),
        );
    }
    svg.vertical_text(
        8.0 + TITLE_PX * 0.8,
        (f.top + f.bottom) / 2.0,
        "axis-title",
        "bus bandwidth (GB/s)",
    );
}

fn x_axis(svg: &mut Svg, f: &Frame, lo: u64, hi: u64) {
    // A small mark at every power of two, a grid line and a label at the labelled sizes.
    let mut k = f.x0.ceil();
    while k <= f.x1 {
        let x = f.x_log2(k);
        svg.line((x, f.bottom), (x, f.bottom + 4.0), "axis");
        k += 1.0;
    }
    for (l, label) in size_labels(lo, hi, f.right - f.left, TICK_PX) {
        let x = f.x_log2(l);
        svg.line((x, f.top), (x, f.bottom), "grid");
        svg.text(x, f.bottom + 6.0 + TICK_PX, Anchor::Middle, "tick", &label);
    }
    svg.line((f.left, f.top), (f.left, f.bottom), "axis");
    svg.text(
        (f.left + f.right) / 2.0,
        H - 10.0,
        Anchor::Middle,
        "axis-title",
        "message size (log scale)",
    );
}

/// The dashed capacity line, labelled above its right end (the top margin leaves room for the label when the
/// line runs along the top of the plot).
fn capacity_line(svg: &mut Svg, f: &Frame, c: &Capacity) {
    let y = f.y(c.gbps);
    svg.line((f.left, y), (f.right, y), "capacity");
    svg.text(f.right, y - 5.0, Anchor::End, "capacity-label", &c.label);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: Vec<(u64, f64)>) -> Series {
        Series {
            name: "all_reduce_perf".to_string(),
            points,
        }
    }

    #[test]
    fn round_ticks_size_labels_and_the_capacity() {
        let cap = Capacity {
            gbps: 50.0,
            label: "link 50.0 GB/s".to_string(),
        };
        let svg = chart(&[series(vec![(8, 0.1), (16 << 30, 45.0)])], Some(&cap)).unwrap();
        for tick in ["0", "10", "20", "30", "40", "50"] {
            assert!(
                svg.contains(&format!("class=\"tick\">{tick}</text>")),
                "{tick}"
            );
        }
        assert!(svg.contains(">8 B</text>") && svg.contains(">16 GiB</text>"));
        assert!(svg.contains("class=\"capacity-label\">link 50.0 GB/s</text>"));
        assert!(svg.contains("<title>all_reduce_perf: 16 GiB at 45.00 GB/s</title>"));
        assert_eq!(svg.matches("<polyline").count(), 1);
    }

    #[test]
    fn the_capacity_label_stays_inside_the_chart() {
        // The line on the top tick: the label still fits above it.
        let cap = Capacity {
            gbps: 50.0,
            label: "link".to_string(),
        };
        let f = frame(8, 1 << 20, Linear::new(50.0, 6));
        let mut svg = Svg::new(W, H, "t");
        capacity_line(&mut svg, &f, &cap);
        let out = svg.finish();
        let y: f64 = out
            .split("class=\"capacity-label\"")
            .next()
            .and_then(|s| s.rsplit("y=\"").next())
            .and_then(|s| s.split('"').next())
            .unwrap()
            .parse()
            .unwrap();
        assert!(y - TICK_PX >= 0.0, "{y}");
    }

    #[test]
    fn nothing_to_draw_is_no_chart() {
        assert_eq!(chart(&[series(vec![])], None), None);
        assert_eq!(chart(&[], None), None);
    }

    #[test]
    fn one_size_is_drawn_in_the_middle() {
        let svg = chart(&[series(vec![(1 << 30, 20.0)])], None).unwrap();
        assert!(svg.contains(">1 GiB</text>"));
        assert!(svg.contains("<circle cx=\""));
    }

    #[test]
    fn styles_cycle_colors_then_dashes() {
        assert_eq!(style(0), ("#1f77b4", ""));
        assert_eq!(style(COLORS.len()), ("#1f77b4", "7 3"));
    }
}
