//! Chart axes a person reads at a glance: linear ticks at round numbers (1, 2 or 5 × 10ᵏ apart), message
//! sizes on a log₂ axis labelled in binary units (`8 B` … `16 GiB`), and the width a label needs, so that
//! the charts can leave room for every label instead of clipping it.

use super::super::units::human_bytes;

/// Width in pixels of `s` set at `font_px`, an upper bound for the sans-serif faces the page asks for (the
/// widths are DejaVu Sans's, the widest of them, rounded up).
pub fn text_width(s: &str, font_px: f64) -> f64 {
    let em: f64 = s
        .chars()
        .map(|c| match c {
            'i' | 'j' | 'l' | '.' | ',' | ':' | ';' | '|' | '!' | '\'' | ' ' => 0.36,
            'f' | 't' | 'r' | '(' | ')' | '[' | ']' | '/' | '-' => 0.5,
            'm' | 'w' | 'M' | 'W' | '%' | '@' => 1.0,
            c if c.is_ascii_uppercase() => 0.8,
            c if c.is_ascii() => 0.66,
            // µ, dashes, accented letters and anything wider: a full em to be safe.
            _ => 1.0,
        })
        .sum();
    em * font_px
}

/// A step of 1, 2 or 5 × 10ᵏ that cuts `span` into about `target` parts (never more than `target`).
pub fn nice_step(span: f64, target: usize) -> f64 {
    if !(span.is_finite() && span > 0.0) {
        return 1.0;
    }
    let raw = span / target.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let f = raw / magnitude;
    let m = if f <= 1.0 + 1e-9 {
        1.0
    } else if f <= 2.0 + 1e-9 {
        2.0
    } else if f <= 5.0 + 1e-9 {
        5.0
    } else {
        10.0
    };
    m * magnitude
}

/// A linear axis from zero to a round top at or above the largest value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Linear {
    pub step: f64,
    pub top: f64,
}

impl Linear {
    /// About `target` ticks from 0 to `max` or a little above it.
    pub fn new(max: f64, target: usize) -> Linear {
        let max = if max.is_finite() && max > 0.0 {
            max
        } else {
            1.0
        };
        let step = nice_step(max, target);
        // The tolerance keeps a top that equals the maximum (50 for 50) from moving a step up.
        let top = (max / step - 1e-9).ceil().max(1.0) * step;
        Linear { step, top }
    }

    /// The tick values, 0 first.
    pub fn ticks(&self) -> Vec<f64> {
        let n = (self.top / self.step).round() as usize;
        // Rounded to a billionth so that 3 × 0.2 is 0.6, not 0.6000000000000001.
        (0..=n)
            .map(|i| (i as f64 * self.step * 1e9).round() / 1e9)
            .collect()
    }

    /// A tick's label: as many decimals as the step needs, none for whole steps.
    pub fn label(&self, v: f64) -> String {
        let decimals = if self.step >= 1.0 {
            0
        } else {
            (-self.step.log10()).ceil() as usize
        };
        format!("{v:.decimals$}")
    }
}

/// Powers of two apart that size labels may be: 1-2-5 in the exponent, and 10 (one label per binary unit).
const SIZE_STEPS: [i64; 4] = [1, 2, 5, 10];

/// The labels of a log₂ size axis from `lo` to `hi` bytes drawn `width_px` wide: (log₂ of the size, label).
///
/// The two ends are always labelled with the sizes themselves (`8 B`, `16 GiB`); between them, the powers of
/// two whose exponent is a multiple of the smallest step in [`SIZE_STEPS`] that keeps labels `gap_px` apart,
/// leaving out any that would crowd a label already placed.
pub fn size_labels(lo: u64, hi: u64, width_px: f64, font_px: f64) -> Vec<(f64, String)> {
    let (lo, hi) = (lo.max(1), hi.max(lo.max(1)));
    let (x0, x1) = ((lo as f64).log2(), (hi as f64).log2());
    let mut labels = vec![(x0, human_bytes(lo))];
    if hi == lo {
        return labels;
    }
    labels.push((x1, human_bytes(hi)));
    let widest = text_width("1023 MiB", font_px);
    let gap = widest + font_px;
    let px_per_unit = width_px / (x1 - x0);
    let step = SIZE_STEPS
        .into_iter()
        .find(|s| *s as f64 * px_per_unit >= gap)
        .unwrap_or(10);
    let first = (x0.ceil() as i64).div_euclid(step) * step;
    let mut k = first;
    while (k as f64) < x1 {
        let x = k as f64;
        if x > x0
            && labels
                .iter()
                .all(|(l, _)| (l - x).abs() * px_per_unit >= gap)
        {
            labels.push((x, human_bytes(1u64 << k.clamp(0, 62))));
        }
        k += step;
    }
    labels.sort_by(|a, b| a.0.total_cmp(&b.0));
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_step(537.0, 5), 200.0);
        assert_eq!(nice_step(100.0, 5), 20.0);
        assert_eq!(nice_step(50.0, 5), 10.0);
        assert_eq!(nice_step(0.9, 5), 0.2);
        assert_eq!(nice_step(7.0, 5), 2.0);
        assert_eq!(nice_step(0.0, 5), 1.0);
    }

    #[test]
    fn linear_ticks_are_round_and_reach_the_maximum() {
        // The chart of a 537 GB/s peak: 0, 200, 400, 600, not 0/134/268/403/537.
        let a = Linear::new(537.0, 5);
        assert_eq!(a.ticks(), vec![0.0, 200.0, 400.0, 600.0]);
        assert_eq!(a.label(400.0), "400");
        // A maximum on a tick keeps that tick as the top.
        assert_eq!(Linear::new(50.0, 5).top, 50.0);
        let small = Linear::new(0.9, 5);
        assert_eq!((small.step, small.top), (0.2, 1.0));
        assert_eq!(small.label(small.ticks()[3]), "0.6");
        assert_eq!(
            Linear::new(0.0, 5).ticks(),
            vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
        );
    }

    #[test]
    fn size_axes_label_their_ends_and_round_powers_between() {
        let labels: Vec<String> = size_labels(8, 16 << 30, 800.0, 11.0)
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        assert_eq!(
            labels,
            ["8 B", "1 KiB", "32 KiB", "1 MiB", "32 MiB", "1 GiB", "16 GiB"]
        );
        // Narrow: one label per binary unit.
        let labels: Vec<String> = size_labels(8, 16 << 30, 300.0, 11.0)
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        assert_eq!(labels, ["8 B", "1 MiB", "16 GiB"]);
        // A short range labels every power of two.
        let labels: Vec<String> = size_labels(1 << 20, 16 << 20, 600.0, 11.0)
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        assert_eq!(labels, ["1 MiB", "2 MiB", "4 MiB", "8 MiB", "16 MiB"]);
        // One size: one label.
        assert_eq!(
            size_labels(4096, 4096, 600.0, 11.0),
            vec![(12.0, "4 KiB".to_string())]
        );
    }

    #[test]
    fn labels_never_crowd() {
        for (lo, hi, w) in [
            (8u64, 16u64 << 30, 800.0),
            (1, 1 << 40, 500.0),
            (3, 1000, 200.0),
        ] {
            let labels = size_labels(lo, hi, w, 11.0);
            let px = w / ((hi as f64).log2() - (lo as f64).log2());
            for pair in labels.windows(2) {
                let apart = (pair[1].0 - pair[0].0) * px;
                let needed = (text_width(&pair[0].1, 11.0) + text_width(&pair[1].1, 11.0)) / 2.0;
                assert!(apart >= needed, "{pair:?} {apart} < {needed}");
            }
        }
    }

    #[test]
    fn widths_bound_the_text() {
        assert!(text_width("16 GiB", 10.0) > 30.0);
        assert!(text_width("µs", 10.0) >= 16.0);
        assert_eq!(text_width("", 10.0), 0.0);
    }
}
