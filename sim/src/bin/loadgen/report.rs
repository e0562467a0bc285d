//! Figures of a run: ack latency percentiles per shard and overall, counts, CPU and memory of the collectors
//! (from `/proc/PID/stat` and `/status`) and of the generator itself.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::conn::AgentStats;

/// The `p`-th percentile (0..=100, nearest rank) of sorted `v`, 0 when empty.
pub fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One shard's (or the whole run's) figures.
#[derive(Default, Debug, serde::Serialize)]
pub struct Figures {
    pub nodes: usize,
    pub sent: u64,
    pub acked: u64,
    pub blocked: u64,
    pub failed_streams: usize,
    /// Streams opened again after a failure during the warm-up.
    pub reconnects: u64,
    /// The most frequent reason a reopened stream had failed, with its count.
    pub reopen_reason: Option<(String, usize)>,
    pub measured_batches: usize,
    pub unacked_measured: u64,
    pub ack_p50_ms: f64,
    pub ack_p99_ms: f64,
    pub ack_max_ms: f64,
    /// Measured batches acked later than 1 s.
    pub acked_after_1s: usize,
    /// Streams with at least one measured batch acked later than 1 s (a few streams always late, or all
    /// of them now and then).
    pub streams_late: usize,
    /// Late batches (acked after 1 s) by the second of the measured window they were sent in.
    pub late_by_second: BTreeMap<u16, usize>,
    /// Every measured batch acked within 1 s, none blocked, no stream failed.
    pub keeps_up: bool,
}

impl Figures {
    pub fn of<'a>(stats: impl Iterator<Item = &'a AgentStats>) -> Figures {
        let mut f = Figures::default();
        let mut lat: Vec<u32> = Vec::new();
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for s in stats {
            if let Some(why) = s.reopened_after.as_deref() {
                *reasons.entry(why).or_default() += 1;
            }
            f.nodes += 1;
            f.sent += s.sent;
            f.acked += s.acked;
            f.blocked += s.blocked;
            f.unacked_measured += s.unacked_measured;
            f.failed_streams += usize::from(s.error.is_some());
            f.reconnects += u64::from(s.reconnects);
            lat.extend_from_slice(&s.latencies_us);
            f.streams_late += usize::from(!s.late_sent_s.is_empty());
            for &at in &s.late_sent_s {
                *f.late_by_second.entry(at).or_default() += 1;
            }
        }
        f.reopen_reason = reasons
            .into_iter()
            .max_by_key(|&(_, n)| n)
            .map(|(why, n)| (why.to_string(), n));
        lat.sort_unstable();
        let ms = |us: u32| f64::from(us) / 1000.0;
        f.measured_batches = lat.len();
        f.ack_p50_ms = ms(percentile(&lat, 50.0));
        f.ack_p99_ms = ms(percentile(&lat, 99.0));
        f.ack_max_ms = ms(lat.last().copied().unwrap_or(0));
        f.acked_after_1s = lat.iter().filter(|&&us| us > 1_000_000).count();
        f.keeps_up = f.acked_after_1s == 0
            && f.unacked_measured == 0
            && f.blocked == 0
            && f.failed_streams == 0
            && f.measured_batches > 0;
        f
    }

    pub fn line(&self, name: &str) -> String {
        let mut line = format!(
            "{name}: {} nodes, sent {} acked {} blocked {} failed streams {} (reopened {} times in the warm-up); ack p50 {:.1} ms p99 {:.1} ms max {:.1} ms; \
             {} of {} measured batches acked after 1 s (on {} streams), {} never; keeps up: {}",
            self.nodes,
            self.sent,
            self.acked,
            self.blocked,
            self.failed_streams,
            self.reconnects,
            self.ack_p50_ms,
            self.ack_p99_ms,
            self.ack_max_ms,
            self.acked_after_1s,
            self.measured_batches,
            self.streams_late,
            self.unacked_measured,
            if self.keeps_up { "yes" } else { "no" }
        );
        if let Some((why, n)) = &self.reopen_reason {
            let _ = write!(line, "; most reopened after: {why} ({n} streams)");
        }
        if !self.late_by_second.is_empty() {
            line.push_str("; late batches by the second they were sent in (s: n):");
            for (s, n) in &self.late_by_second {
                let _ = write!(line, " {s}: {n}");
            }
        }
        line
    }
}

/// CPU seconds (user + system) and resident bytes of process `pid` (this one when `None`), as the system
/// reports them (`sysinfo`); `None` when the process is gone.
pub fn proc_usage(pid: Option<u32>) -> Option<(f64, u64)> {
    use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
    let pid = match pid {
        Some(p) => Pid::from_u32(p),
        None => sysinfo::get_current_pid().ok()?,
    };
    let mut system = System::new().ok()?;
    system.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[pid]),
        true,
        ProcessRefreshKind::nothing().with_cpu().with_memory(),
    );
    let p = system.process(pid)?;
    Some((p.accumulated_cpu_time() as f64 / 1000.0, p.memory()))
}

/// The distinct stream errors and how many streams had each.
pub fn errors<'a>(stats: impl Iterator<Item = &'a AgentStats>) -> String {
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for s in stats {
        if let Some(e) = &s.error {
            *by.entry(e.as_str()).or_default() += 1;
        }
    }
    let mut out = String::new();
    for (e, n) in by {
        let _ = writeln!(out, "  {n} streams: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_keeping_up() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(
            (
                percentile(&v, 50.0),
                percentile(&v, 99.0),
                percentile(&v, 100.0)
            ),
            (50, 99, 100)
        );
        assert_eq!(percentile(&[], 50.0), 0);
        let good = AgentStats {
            sent: 3,
            acked: 3,
            latencies_us: vec![2_000, 900_000],
            ..Default::default()
        };
        let late = AgentStats {
            sent: 1,
            acked: 1,
            latencies_us: vec![1_000_001],
            late_sent_s: vec![7],
            ..Default::default()
        };
        assert!(Figures::of([&good].into_iter()).keeps_up);
        let f = Figures::of([&good, &late].into_iter());
        assert!(!f.keeps_up);
        assert_eq!((f.acked_after_1s, f.measured_batches, f.nodes), (1, 3, 2));
        assert_eq!(f.ack_max_ms, 1000.001);
        assert_eq!(f.late_by_second, BTreeMap::from([(7, 1)]));
        assert!(f.line("x").ends_with("(s: n): 7: 1"), "{}", f.line("x"));
    }
}

#[cfg(test)]
mod usage_tests {
    #[test]
    fn this_process_has_cpu_time_and_memory_and_a_gone_one_has_none() {
        let (cpu0, rss) = super::proc_usage(None).expect("this process");
        assert!(rss > 0);
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        std::hint::black_box(x);
        let (cpu1, _) = super::proc_usage(None).expect("this process");
        assert!(cpu1 >= cpu0, "{cpu0} then {cpu1}");
        assert_eq!(super::proc_usage(Some(u32::MAX - 1)), None);
    }
}
