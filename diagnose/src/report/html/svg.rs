//! A small writer of inline SVG: the few shapes the charts draw, with text escaped and coordinates rounded to
//! a tenth of a pixel. The chart scales down with the page (`viewBox`, and the style sheet's
//! `max-width: 100%`), so its coordinates are those of its full size.

use std::fmt::Write as _;

use super::markup::esc;

/// How a text is anchored at its x.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    fn as_str(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// One SVG element being written.
pub struct Svg {
    out: String,
}

impl Svg {
    /// An image `w` × `h` pixels; `label` is what a screen reader says of it.
    pub fn new(w: f64, h: f64, label: &str) -> Svg {
        Svg {
            out: format!(
                "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w:.0} {h:.0}\" width=\"{w:.0}\" \
                 height=\"{h:.0}\" role=\"img\" aria-label=\"{}\">",
                esc(label)
            ),
        }
    }

    /// A text; `class` picks its size and color in the style sheet.
    pub fn text(&mut self, x: f64, y: f64, anchor: Anchor, class: &str, text: &str) {
        let _ = write!(
            self.out,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{}\" class=\"{class}\">{}</text>",
            anchor.as_str(),
            esc(text)
        );
    }

    /// A text turned a quarter left around its anchor point (a vertical axis's title).
    pub fn vertical_text(&mut self, x: f64, y: f64, class: &str, text: &str) {
        let _ = write!(
            self.out,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"middle\" class=\"{class}\" \
             transform=\"rotate(-90 {x:.1} {y:.1})\">{}</text>",
            esc(text)
        );
    }

    pub fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), class: &str) {
        let _ = write!(
            self.out,
            "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" class=\"{class}\"/>"
        );
    }

    /// A filled rectangle with a tooltip.
    pub fn rect(&mut self, (x, y): (f64, f64), (w, h): (f64, f64), fill: &str, tip: &str) {
        let _ = write!(
            self.out,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{fill}\"><title>{}</title></rect>",
            esc(tip)
        );
    }

    /// A line through `points`, dashed when `dash` is not empty.
    pub fn polyline(&mut self, points: &[(f64, f64)], stroke: &str, dash: &str) {
        let pts: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = write!(
            self.out,
            "<polyline class=\"series\" points=\"{}\" stroke=\"{stroke}\"",
            pts.join(" ")
        );
        if !dash.is_empty() {
            let _ = write!(self.out, " stroke-dasharray=\"{dash}\"");
        }
        self.out.push_str("/>");
    }

    /// A point with a tooltip.
    pub fn dot(&mut self, (x, y): (f64, f64), fill: &str, tip: &str) {
        let _ = write!(
            self.out,
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{fill}\"><title>{}</title></circle>",
            esc(tip)
        );
    }

    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>");
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_with_escaped_text() {
        let mut s = Svg::new(100.0, 50.0, "a \"chart\"");
        s.text(10.0, 20.25, Anchor::End, "tick", "<8 B>");
        s.vertical_text(5.0, 25.0, "title", "GB/s");
        s.line((0.0, 1.0), (2.0, 3.0), "axis");
        s.rect((1.0, 2.0), (3.0, 4.0), "#123456", "a & b");
        s.polyline(&[(1.0, 2.0), (3.0, 4.0)], "#000", "4 2");
        s.dot((1.0, 2.0), "#000", "x<y");
        assert_eq!(
            s.finish(),
            "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 100 50\" width=\"100\" height=\"50\" \
             role=\"img\" aria-label=\"a &quot;chart&quot;\">\
             <text x=\"10.0\" y=\"20.2\" text-anchor=\"end\" class=\"tick\">&lt;8 B&gt;</text>\
             <text x=\"5.0\" y=\"25.0\" text-anchor=\"middle\" class=\"title\" transform=\"rotate(-90 5.0 25.0)\">GB/s</text>\
             <line x1=\"0.0\" y1=\"1.0\" x2=\"2.0\" y2=\"3.0\" class=\"axis\"/>\
             <rect x=\"1.0\" y=\"2.0\" width=\"3.0\" height=\"4.0\" fill=\"#123456\"><title>a &amp; b</title></rect>\
             <polyline class=\"series\" points=\"1.0,2.0 3.0,4.0\" stroke=\"#000\" stroke-dasharray=\"4 2\"/>\
             <circle cx=\"1.0\" cy=\"2.0\" r=\"3\" fill=\"#000\"><title>x&lt;y</title></circle></svg>"
        );
    }
}
