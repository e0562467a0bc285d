//! Step 3's NCCL Inspector table: every collective and size class over every rank, costliest first, with its
//! slowest rank and (for the costliest) its share of the fabric. Every value escaped.

use super::super::inspector::InspectorSection;
use super::super::units::human_bytes;
use super::markup::{esc, num, pct, Align, Table};

/// The HTML table of step 3 (every value escaped).
pub fn body(s: &InspectorSection) -> String {
    let mut t = Table::new(
        "inspector",
        &[
            ("collective", Align::Text),
            ("size", Align::Num),
            ("count", Align::Num),
            ("total ms", Align::Num),
            ("busbw GB/s", Align::Num),
            ("slowest rank", Align::Text),
            ("of fabric", Align::Num),
        ],
    );
    for (i, c) in s.collectives.iter().enumerate() {
        let share = s
            .link
            .as_ref()
            .filter(|_| i == 0)
            .and_then(|f| f.fabric_share);
        let slowest = match (c.slowest_rank, &c.slowest_host) {
            (Some(r), Some(h)) => format!("{r} ({})", esc(h)),
            _ => "–".to_string(),
        };
        t.row(&[
            esc(&c.collective),
            esc(&human_bytes(c.size_bytes)),
            c.count.to_string(),
            num(Some(c.total_time_us / 1000.0), 1),
            num(Some(c.bus_bandwidth_gbps), 2),
            slowest,
            pct(share),
        ]);
    }
    format!(
        "<h3>NCCL Inspector: every collective on every rank</h3>{}",
        t.finish()
    )
}
