//! Step 2's chart: one stacked bar per rank, a step's time (or the whole trace's) split into computation
//! alone, communication hidden behind computation, exposed communication, GPU idle and the rest, on one
//! millisecond axis so that ranks compare at a glance.

use super::axis::{text_width, Linear};
use super::markup::ms;
use super::svg::{Anchor, Svg};

const W: f64 = 1020.0;
const BAR_H: f64 = 22.0;
const GAP: f64 = 10.0;
const LABEL_PX: f64 = 12.0;
const TICK_PX: f64 = 11.0;

/// A part of a bar: its legend name, fill, and whether text on it is white.
pub struct Part {
    pub name: &'static str,
    pub fill: &'static str,
    pub light_text: bool,
}

/// The parts of every bar, left to right.
pub const PARTS: [Part; 5] = [
    Part {
        name: "computation alone",
        fill: "#3b6ea5",
        light_text: true,
    },
    Part {
        name: "communication hidden behind computation",
        fill: "#f2b061",
        light_text: false,
    },
    Part {
        name: "exposed communication",
        fill: "#c62828",
        light_text: true,
    },
    Part {
        name: "GPU idle",
        fill: "#b8bcc2",
        light_text: false,
    },
    Part {
        name: "other (memory copies, unclassified kernels, host time)",
        fill: "#e6e8eb",
        light_text: false,
    },
];

/// One rank's bar: its label and the time of each of [`PARTS`], microseconds.
pub struct Bar {
    pub label: String,
    pub parts_us: [f64; 5],
}

impl Bar {
    fn total_us(&self) -> f64 {
        self.parts_us.iter().sum()
    }
}

/// Where the bars lie inside the chart: the x of 0 ms and of the axis's top, the bottom of the last bar.
struct Frame {
    axis: Linear,
    left: f64,
    right: f64,
    bottom: f64,
}

impl Frame {
    /// Margins from what the labels need: the widest rank label on the left; on the right the widest total
    /// after its bar, or half the last tick label.
    fn new(bars: &[Bar]) -> Frame {
        let axis = Linear::new(
            bars.iter().map(|b| b.total_us() / 1e3).fold(0.0, f64::max),
            8,
        );
        let widest = |text: &dyn Fn(&Bar) -> String| {
            bars.iter()
                .map(|b| text_width(&text(b), LABEL_PX))
                .fold(0.0, f64::max)
        };
        let label_w = widest(&|b| b.label.clone());
        let value_w = widest(&|b| ms(b.total_us()));
        let last_tick = text_width(&axis.label(axis.top), TICK_PX) / 2.0 + 4.0;
        Frame {
            axis,
            left: 8.0 + label_w + 10.0,
            right: W - (value_w + 14.0).max(last_tick),
            bottom: 8.0 + bars.len() as f64 * (BAR_H + GAP),
        }
    }

    /// Width of `ms` milliseconds.
    fn w(&self, ms: f64) -> f64 {
        ms / self.axis.top * (self.right - self.left)
    }
}

/// The chart, or `None` without bars.
pub fn chart(bars: &[Bar]) -> Option<String> {
    if bars.is_empty() {
        return None;
    }
    let f = Frame::new(bars);
    let h = f.bottom + TICK_PX + 12.0 + LABEL_PX + 12.0;
    let mut svg = Svg::new(W, h, "time per step of each rank, by kind");
    for v in f.axis.ticks() {
        let x = f.left + f.w(v);
        let class = if v == 0.0 { "axis" } else { "grid" };
        svg.line((x, 4.0), (x, f.bottom), class);
        let label = f.axis.label(v);
        svg.text(x, f.bottom + 6.0 + TICK_PX, Anchor::Middle, "tick", &label);
    }
    let middle = (f.left + f.right) / 2.0;
    svg.text(
        middle,
        h - 8.0,
        Anchor::Middle,
        "axis-title",
        "milliseconds",
    );
    for (i, bar) in bars.iter().enumerate() {
        draw_bar(&mut svg, &f, bar, 8.0 + i as f64 * (BAR_H + GAP));
    }
    Some(svg.finish())
}

/// One bar at `y`: its label before it, its parts (each with its share written on it where the share fits),
/// its total after it.
fn draw_bar(svg: &mut Svg, f: &Frame, bar: &Bar, y: f64) {
    let mid = y + BAR_H / 2.0 + LABEL_PX * 0.35;
    svg.text(f.left - 10.0, mid, Anchor::End, "bar-label", &bar.label);
    let total = bar.total_us();
    let mut x = f.left;
    for (part, us) in PARTS.iter().zip(bar.parts_us) {
        let w = f.w(us / 1e3);
        if w <= 0.0 {
            continue;
        }
        let share = pct(if total > 0.0 { us / total } else { 0.0 });
        let tip = format!("{}: {} of {}, {share}", bar.label, ms(us), ms(total));
        svg.rect((x, y), (w, BAR_H), part.fill, &tip);
        if w >= text_width(&share, TICK_PX) + 6.0 {
            let class = if part.light_text {
                "in-bar light"
            } else {
                "in-bar"
            };
            let text_y = y + BAR_H / 2.0 + TICK_PX * 0.35;
            svg.text(x + w / 2.0, text_y, Anchor::Middle, class, &share);
        }
        x += w;
    }
    svg.text(x + 6.0, mid, Anchor::Start, "bar-value", &ms(total));
}

fn pct(share: f64) -> String {
    format!("{:.0} %", share * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(label: &str, parts_us: [f64; 5]) -> Bar {
        Bar {
            label: label.to_string(),
            parts_us,
        }
    }

    #[test]
    fn bars_on_a_round_millisecond_axis() {
        let svg = chart(&[
            bar("rank 0", [50_000.0, 20_000.0, 20_000.0, 10_000.0, 0.0]),
            bar("rank 1", [60_000.0, 10_000.0, 5_000.0, 5_000.0, 0.0]),
        ])
        .unwrap();
        for tick in ["0", "20", "40", "60", "80", "100"] {
            assert!(
                svg.contains(&format!("class=\"tick\">{tick}</text>")),
                "{tick}"
            );
        }
        assert!(svg.contains("class=\"bar-label\">rank 1</text>"));
        assert!(svg.contains("class=\"bar-value\">100 ms</text>"));
        assert!(svg.contains("class=\"in-bar light\">50 %</text>"));
        assert!(svg.contains("<title>rank 0: 20.0 ms of 100 ms, 20 %</title>"));
        // An empty part draws nothing.
        assert_eq!(svg.matches("<rect").count(), 8);
    }

    #[test]
    fn too_narrow_a_part_goes_unlabelled() {
        let svg = chart(&[bar("rank 0", [99_400.0, 0.0, 600.0, 0.0, 0.0])]).unwrap();
        assert!(svg.contains(">99 %</text>"));
        assert!(!svg.contains(">1 %</text>"));
        assert!(svg.contains("<title>rank 0: 0.60 ms of 100 ms, 1 %</title>"));
    }

    #[test]
    fn no_bars_no_chart() {
        assert_eq!(chart(&[]), None);
    }
}
