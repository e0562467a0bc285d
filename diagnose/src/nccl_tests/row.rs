//! One line of the result table: the column layout a header announces, and a row read with it.

use super::{Placement, Row};

/// Column layout taken from a header line.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub has_redop: bool,
    pub has_root: bool,
    /// The legacy `error` column (a maximum error, not a count of wrong elements).
    pub legacy_error: bool,
    pub per_iteration: bool,
    pub timestamp: bool,
}

impl Layout {
    fn leading(&self) -> usize {
        3 + usize::from(self.has_redop) + usize::from(self.has_root)
    }

    fn group(&self) -> usize {
        if self.per_iteration {
            8
        } else {
            4
        }
    }

    fn trailing(&self) -> usize {
        if self.timestamp {
            2
        } else {
            0
        }
    }

    /// The layout a header line announces (`size count type redop root time algbw busbw #wrong …`, with or
    /// without its `#`); `None` for any other line.
    /// NCCL 1.x's tests print `bytes N type op time algbw busbw res`.
    pub fn from_header(tokens: &[&str]) -> Option<Layout> {
        let modern = tokens.first() == Some(&"size") && tokens.get(1) == Some(&"count");
        let nccl1 = tokens.first() == Some(&"bytes") && tokens.get(1) == Some(&"N");
        if !modern && !nccl1 {
            return None;
        }
        Some(Layout {
            has_redop: tokens.contains(&"redop") || tokens.contains(&"op"),
            has_root: tokens.contains(&"root"),
            legacy_error: tokens.contains(&"error") || tokens.contains(&"res"),
            per_iteration: tokens.contains(&"i_min"),
            timestamp: tokens.contains(&"timestamp"),
        })
    }

    /// Picks a layout for rows seen without a header (a file cut above the table).
    pub fn guess(tokens: &[&str]) -> Option<Layout> {
        for leading in [5usize, 4, 3] {
            for per_iteration in [false, true] {
                for timestamp in [false, true] {
                    let layout = Layout {
                        has_redop: leading >= 4,
                        has_root: leading == 5,
                        legacy_error: false,
                        per_iteration,
                        timestamp,
                    };
                    let n = layout.leading() + 2 * layout.group() + layout.trailing();
                    if n == tokens.len() && parse_row(tokens, &layout, 0).is_ok() {
                        return Some(layout);
                    }
                }
            }
        }
        None
    }
}

/// A table row with `layout`; the message says why a line that looked like a row is not one.
pub fn parse_row(tokens: &[&str], layout: &Layout, line: usize) -> Result<Row, String> {
    let lead = layout.leading();
    let group = layout.group();
    let full = lead + 2 * group + layout.trailing();
    let single = lead + group + layout.trailing();
    let two_groups = if tokens.len() == full {
        true
    } else if tokens.len() == single {
        false
    } else {
        return Err(format!(
            "row has {} columns, the header announces {full}",
            tokens.len()
        ));
    };
    let int = |i: usize, what: &str| -> Result<u64, String> {
        tokens[i]
            .parse::<u64>()
            .map_err(|_| format!("{what} {:?} is not an integer", tokens[i]))
    };
    let size_bytes = int(0, "size")?;
    let count = int(1, "count")?;
    let dtype = tokens[2].to_string();
    if dtype.parse::<f64>().is_ok() {
        return Err(format!("type {dtype:?} is a number: columns are shifted"));
    }
    let mut i = 3;
    let redop = if layout.has_redop {
        i += 1;
        Some(tokens[i - 1].to_string())
    } else {
        None
    };
    let root = if layout.has_root {
        i += 1;
        Some(
            tokens[i - 1]
                .parse::<i64>()
                .map_err(|_| format!("root {:?} is not an integer", tokens[i - 1]))?,
        )
    } else {
        None
    };
    let first = parse_placement(&tokens[i..i + group])?;
    let (out_of_place, in_place) = if two_groups {
        let second = parse_placement(&tokens[i + group..i + 2 * group])?;
        (Some(first), Some(second))
    } else {
        // Only the in-place half is printed when out-of-place is not measured.
        (None, Some(first))
    };
    Ok(Row {
        size_bytes,
        count,
        dtype,
        redop,
        root,
        out_of_place,
        in_place,
        line,
    })
}

fn parse_placement(t: &[&str]) -> Result<Placement, String> {
    let num = |i: usize, what: &str| -> Result<f64, String> {
        match t[i].parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(format!("{what} {:?} is not a number", t[i])),
        }
    };
    let wrong = if t[3] == "N/A" {
        None
    } else {
        Some(num(3, "#wrong")?)
    };
    Ok(Placement {
        time_us: num(0, "time")?,
        algbw_gbps: num(1, "algbw")?,
        busbw_gbps: num(2, "busbw")?,
        wrong,
    })
}
