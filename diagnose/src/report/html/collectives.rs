//! Step 3, the costly collectives: the collectives that took the most time, gathered over the ranks, with a
//! bar of their share of the total; then which rank the others wait for.

use std::collections::BTreeMap;

use super::super::model::Report;
use super::super::units::human_bytes;
use super::markup::{code, duration, esc, ms, num, pct, text, Align, Table, UNKNOWN};

/// How many collectives the table lists.
pub const TOP: usize = 12;

/// One collective of one size and type, summed over the ranks that ran it.
#[derive(Debug, Default, PartialEq)]
struct Costly {
    ranks: usize,
    calls: usize,
    total_us: f64,
    /// Lowest and highest bus bandwidth among the ranks, GB/s.
    busbw: Option<(f64, f64)>,
}

/// The section's body.
pub fn body(r: &Report) -> String {
    let mut o = String::from(
        "<p class=\"lead\">The collectives that cost the most GPU time in training, with the bus bandwidth \
         they reached, to hold against the baselines of step 1.</p>",
    );
    let costly = gather(r);
    if costly.is_empty() && r.kernel_summaries.is_empty() {
        o.push_str(if r.traces.is_empty() {
            "<p class=\"missing\">No traces given: the costly collectives come from a training trace \
             (<code>--trace</code>, <code>--nsys</code>).</p>"
        } else {
            "<p class=\"missing\">The traces hold no NCCL collective.</p>"
        });
    } else if !costly.is_empty() {
        o.push_str(&table(&costly));
    }
    o.push_str(&kernel_time(r));
    if let Some(s) = &r.nccl_inspector {
        o.push_str(&super::inspector::body(s));
    }
    o.push_str(&stragglers(r));
    o
}

/// NCCL's kernels against all kernels, per `nsys stats` table or trace, each with the line it was read from.
fn kernel_time(r: &Report) -> String {
    let mut o = String::new();
    for k in &r.kernel_summaries {
        let _ = std::fmt::Write::write_fmt(
            &mut o,
            format_args!(
                "<p>Kernel time ({}, {}): NCCL kernels {} of {}, {}.</p>",
                esc(&k.source),
                super::markup::file(&k.file),
                ms(k.nccl_kernel_time_us),
                ms(k.kernel_time_us),
                pct(k.nccl_time_share)
            ),
        );
        let rows: Vec<&crate::kernels::KernelRow> = k
            .nccl_kernels
            .iter()
            .chain(&k.other_comm_kernels)
            .take(10)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let mut t = Table::new(
            "kernels",
            &[
                ("kernel", Align::Text),
                ("instances", Align::Num),
                ("total", Align::Num),
                ("share", Align::Num),
            ],
        );
        for row in rows {
            t.row(&[
                format!("<code class=\"long\">{}</code>", esc(&row.name)),
                row.instances.to_string(),
                ms(row.total_time_us),
                pct(Some(row.time_share)),
            ]);
        }
        o.push_str(&t.finish());
        let cites: Vec<crate::lines::Cite> = k
            .nccl_kernels
            .iter()
            .filter_map(|r| r.cite.clone())
            .take(3)
            .collect();
        o.push_str(&super::markup::cites(&cites));
    }
    o
}

type Key = (String, Option<u64>, Option<String>);

/// The collectives of every rank by (name, size, type), costliest first, at most [`TOP`].
fn gather(r: &Report) -> Vec<(Key, Costly)> {
    let mut by_key: BTreeMap<Key, Costly> = BTreeMap::new();
    for t in &r.traces {
        for c in &t.analysis.top_collectives {
            let e = by_key
                .entry((c.collective.clone(), c.size_bytes, c.dtype.clone()))
                .or_default();
            e.ranks += 1;
            e.calls += c.count;
            e.total_us += c.total_time_us;
            if let Some(b) = c.busbw_gbps {
                e.busbw = Some(e.busbw.map_or((b, b), |(lo, hi)| (lo.min(b), hi.max(b))));
            }
        }
    }
    let mut out: Vec<(Key, Costly)> = by_key.into_iter().collect();
    out.sort_by(|a, b| b.1.total_us.total_cmp(&a.1.total_us));
    out.truncate(TOP);
    out
}

fn table(costly: &[(Key, Costly)]) -> String {
    let max = costly.iter().map(|(_, c)| c.total_us).fold(0.0, f64::max);
    let mut t = Table::new(
        "collectives",
        &[
            ("collective", Align::Text),
            ("size", Align::Num),
            ("type", Align::Text),
            ("ranks", Align::Num),
            ("calls", Align::Num),
            ("time, all ranks", Align::Text),
            ("mean per call", Align::Num),
            ("bus bw (GB/s)", Align::Num),
        ],
    );
    for ((name, size, dtype), c) in costly {
        let share = if max > 0.0 {
            c.total_us / max * 100.0
        } else {
            0.0
        };
        let busbw = match c.busbw {
            Some((lo, hi)) if (hi - lo).abs() < 0.005 => num(Some(lo), 2),
            Some((lo, hi)) => format!("{lo:.2} – {hi:.2}"),
            None => UNKNOWN.to_string(),
        };
        t.row(&[
            code(name),
            size.map_or(UNKNOWN.to_string(), |s| esc(&human_bytes(s))),
            dtype.as_deref().map_or(UNKNOWN.to_string(), text),
            c.ranks.to_string(),
            c.calls.to_string(),
            format!(
                "<span class=\"meter\"><span style=\"width:{share:.1}%\"></span></span>{}",
                ms(c.total_us)
            ),
            duration(c.total_us / c.calls.max(1) as f64),
            busbw,
        ]);
    }
    t.finish()
}

/// Which rank starts its collectives late, when more than one rank was traced.
fn stragglers(r: &Report) -> String {
    let Some(s) = &r.straggler else {
        return String::new();
    };
    let mut t = Table::new(
        "stragglers",
        &[
            ("rank", Align::Num),
            ("starts late by, mean", Align::Num),
            ("last to start", Align::Num),
            ("mean communication kernel", Align::Num),
        ],
    );
    for rl in &s.ranks {
        let class = if s.straggler == Some(rl.rank) {
            "flagged"
        } else {
            ""
        };
        t.row_with_class(
            class,
            &[
                rl.rank.to_string(),
                duration(rl.mean_lateness_us),
                pct(Some(rl.latest_share)),
                duration(rl.mean_comm_kernel_us),
            ],
        );
    }
    let verdict = match s.straggler {
        Some(rank) => format!("Rank {rank} is the straggler: the others wait for it."),
        None => "No rank stands out as a straggler.".to_string(),
    };
    format!(
        "<h3>Who waits for whom</h3><p>{} <span class=\"note\">({} collectives compared across ranks.)</span></p>{}",
        esc(&verdict),
        s.compared,
        t.finish()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::straggler::{RankLateness, StragglerAnalysis};
    use crate::report::fixtures;
    use crate::report::html::markup::without_labels;

    #[test]
    fn collectives_are_summed_over_ranks() {
        let mut r = fixtures::report();
        r.traces.push(fixtures::trace_report(
            1,
            1,
            Some(("allreduce", 64 << 20, 10.0)),
        ));
        r.traces.push(fixtures::trace_report(
            2,
            1,
            Some(("allgather", 1 << 20, 5.0)),
        ));
        r.traces[2].analysis.top_collectives[0].total_time_us = 15_000.0;
        let costly = gather(&r);
        assert_eq!(costly.len(), 2);
        let ((name, size, _), c) = &costly[0];
        assert_eq!((name.as_str(), *size), ("allreduce", Some(64 << 20)));
        assert_eq!(
            c,
            &Costly {
                ranks: 2,
                calls: 20,
                total_us: 60_000.0,
                busbw: Some((10.0, 12.5))
            }
        );
        let html = without_labels(&table(&costly));
        assert!(html.contains("<td class=\"num\">10.00 – 12.50</td>"));
        assert!(html.contains("<span style=\"width:100.0%\"></span></span>60.0 ms"));
        assert!(html.contains("<span style=\"width:25.0%\"></span></span>15.0 ms"));
        assert!(html.contains("<td class=\"num\">3.00 ms</td>"));
    }

    #[test]
    fn the_straggler_is_named_and_flagged() {
        let mut r = fixtures::report();
        r.straggler = Some(StragglerAnalysis {
            compared: 40,
            ranks: vec![
                RankLateness {
                    rank: 0,
                    mean_lateness_us: 2.0,
                    latest_share: 0.1,
                    mean_comm_kernel_us: 900.0,
                },
                RankLateness {
                    rank: 1,
                    mean_lateness_us: 800.0,
                    latest_share: 0.9,
                    mean_comm_kernel_us: 100.0,
                },
            ],
            straggler: Some(1),
        });
        let html = without_labels(&body(&r));
        assert!(html.contains("Rank 1 is the straggler: the others wait for it."));
        assert!(html.contains(
            "<tr class=\"flagged\"><td class=\"num\">1</td><td class=\"num\">800.0 µs</td>"
        ));
    }

    #[test]
    fn without_traces_the_section_says_so() {
        let mut r = fixtures::report();
        r.traces.clear();
        assert!(body(&r).contains("No traces given"));
    }
}
