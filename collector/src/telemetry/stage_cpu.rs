//! CPU time of the collector's stages ([`names::COLLECTOR_STAGE_CPU_SECONDS_TOTAL`]), read from its own threads
//! at each scrape: every stage runs on threads of its own name (`/proc/self/task/*/stat`, Linux), so the CPU a
//! node costs is broken down by stage without a clock read on any hot path. Stages ([`STAGES`]): `ingest` (the
//! runtime's threads: gRPC, validation and the store's apply, the persistence writer, the HTTP API), `analysis`
//! (the rules' evaluation thread, its input included), `steps` (the step engine), `render` (`/metrics`),
//! `remote_write`, `history` (the findings' history writer) and `other`.
//!
//! A thread's CPU is counted from one scrape to the next: what a thread that ended used since the scrape before
//! is not counted (the runtime's blocking threads come and go), so the figures are lower bounds, never
//! decreasing. Where `/proc/self/task` cannot be read the family has no samples.

use std::collections::HashMap;

use parking_lot::Mutex;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{CounterVec, Opts};

use super::names;

/// Values of the `stage` label, in the order of [`StageCpu`]'s totals.
pub const STAGES: [&str; 7] = [
    "ingest",
    "analysis",
    "steps",
    "render",
    "remote_write",
    "history",
    "other",
];

/// Threads by full name and their stage (the kernel keeps the first 15 bytes of a name). The runtime names its
/// workers and its blocking threads alike (`tokio-rt-worker`; `tokio-runtime-worker` in older tokio releases).
const THREADS: [(&str, usize); 7] = [
    ("tokio-rt-worker", 0),
    ("tokio-runtime-worker", 0),
    ("commwatch-analysis", 1),
    ("commwatch-steps", 2),
    ("commwatch-prom", 3),
    ("commwatch-rw", 4),
    ("analysis-history", 5),
];

/// Longest thread name the kernel keeps, bytes.
const COMM_LEN: usize = 15;

/// The stage (index into [`STAGES`]) of a thread whose name the kernel reports as `comm`.
pub fn stage_of(comm: &str) -> usize {
    THREADS
        .iter()
        .find(|(full, _)| {
            let kept = &full.as_bytes()[..full.len().min(COMM_LEN)];
            comm.as_bytes() == kept
        })
        .map_or(STAGES.len() - 1, |(_, s)| *s)
}

/// A thread's name and CPU time in clock ticks (user + system) from its `stat` line; `None` when the line is
/// not one.
pub fn parse_stat(line: &str) -> Option<(&str, u64)> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let comm = line.get(open + 1..close)?;
    // After the name: state (field 3), ..., utime (field 14), stime (field 15).
    let mut rest = line.get(close + 1..)?.split_ascii_whitespace().skip(11);
    let utime: u64 = rest.next()?.parse().ok()?;
    let stime: u64 = rest.next()?.parse().ok()?;
    Some((comm, utime.saturating_add(stime)))
}

/// Registers the stages' CPU in `registry` (a running collector's: every scrape reads the process's threads, so
/// a registry rendered twice to compare, as tests do, leaves it out).
pub fn register(registry: &prometheus::Registry) -> Result<(), prometheus::Error> {
    registry.register(Box::new(StageCpu::new()?))
}

/// The stages' CPU seconds, kept across scrapes ([`register`]).
pub struct StageCpu {
    seconds: CounterVec,
    /// Each live thread's CPU ticks at the last scrape, by thread id.
    seen: Mutex<HashMap<u32, u64>>,
    ticks_per_second: f64,
}

impl StageCpu {
    pub fn new() -> Result<StageCpu, prometheus::Error> {
        let seconds = CounterVec::new(
            Opts::new(
                names::COLLECTOR_STAGE_CPU_SECONDS_TOTAL,
                "CPU seconds of the collector's stages, from their threads (counted from one scrape to the next).",
            ),
            &["stage"],
        )?;
        for s in STAGES {
            seconds.with_label_values(&[s]);
        }
        // SAFETY: `sysconf` reads a constant of the system; no pointer is passed.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Ok(StageCpu {
            seconds,
            seen: Mutex::new(HashMap::new()),
            ticks_per_second: if tck > 0 { tck as f64 } else { 100.0 },
        })
    }

    /// Adds what every thread `(tid, comm, ticks)` used since it was last seen (all of it for a thread not
    /// seen before) to its stage, and forgets the threads that are gone.
    pub fn observe<'a>(&self, threads: impl IntoIterator<Item = (u32, &'a str, u64)>) {
        let mut seen = self.seen.lock();
        let mut now = HashMap::with_capacity(seen.len());
        let mut add = [0u64; STAGES.len()];
        for (tid, comm, ticks) in threads {
            let before = seen.get(&tid).copied().unwrap_or(0);
            add[stage_of(comm)] += ticks.saturating_sub(before);
            now.insert(tid, ticks);
        }
        *seen = now;
        for (stage, ticks) in STAGES.iter().zip(add) {
            if ticks > 0 {
                self.seconds
                    .with_label_values(&[stage])
                    .inc_by(ticks as f64 / self.ticks_per_second);
            }
        }
    }

    /// Reads this process's threads and adds their CPU ([`StageCpu::observe`]); nothing where
    /// `/proc/self/task` cannot be read.
    fn refresh(&self) {
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
            return;
        };
        let lines: Vec<(u32, String)> = dir
            .filter_map(|e| {
                let e = e.ok()?;
                let tid = e.file_name().to_str()?.parse().ok()?;
                Some((tid, std::fs::read_to_string(e.path().join("stat")).ok()?))
            })
            .collect();
        self.observe(lines.iter().filter_map(|(tid, l)| {
            let (comm, ticks) = parse_stat(l)?;
            Some((*tid, comm, ticks))
        }));
    }
}

impl Collector for StageCpu {
    fn desc(&self) -> Vec<&Desc> {
        self.seconds.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.refresh();
        self.seconds.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_whose_name_holds_spaces_and_parentheses() {
        let line = "4242 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 1234 567 0 0 20 0 1 0 99 0 0";
        assert_eq!(parse_stat(line), Some(("a (b) c", 1234 + 567)));
        let line = "17 (commwatch-analy) R 1 17 17 0 -1 4194368 300 0 0 0 250 50 0 0 25 5 1 0";
        assert_eq!(parse_stat(line), Some(("commwatch-analy", 300)));
        assert_eq!(parse_stat("17 (x) R 1 2"), None);
        assert_eq!(parse_stat("no name here"), None);
    }

    #[test]
    fn threads_map_to_stages_by_their_kept_name() {
        let stage = |c| STAGES[stage_of(c)];
        assert_eq!(stage("tokio-rt-worker"), "ingest");
        assert_eq!(stage("tokio-runtime-w"), "ingest");
        assert_eq!(stage("commwatch-analy"), "analysis");
        assert_eq!(stage("commwatch-steps"), "steps");
        assert_eq!(stage("commwatch-prom"), "render");
        assert_eq!(stage("commwatch-rw"), "remote_write");
        assert_eq!(stage("analysis-histor"), "history");
        assert_eq!(stage("commwatch"), "other");
        assert_eq!(stage("commwatch-p"), "other");
    }

    fn value(s: &StageCpu, stage: &str) -> f64 {
        s.seconds.with_label_values(&[stage]).get()
    }

    #[test]
    fn counts_each_thread_from_one_scrape_to_the_next() {
        let mut s = StageCpu::new().expect("metrics");
        s.ticks_per_second = 100.0;
        s.observe([(1, "tokio-rt-worker", 50), (2, "commwatch-steps", 20)]);
        assert_eq!(value(&s, "ingest"), 0.5);
        assert_eq!(value(&s, "steps"), 0.2);
        // Thread 2 ended; 3 is new (all its time counts); 1 used 30 more ticks.
        s.observe([(1, "tokio-rt-worker", 80), (3, "tokio-rt-worker", 10)]);
        assert!((value(&s, "ingest") - 0.9).abs() < 1e-9);
        assert_eq!(value(&s, "steps"), 0.2);
        // A thread id reused by a thread with less time never takes any away.
        s.observe([(1, "commwatch-prom", 5)]);
        assert!((value(&s, "ingest") - 0.9).abs() < 1e-9);
        assert_eq!(value(&s, "render"), 0.0);
        assert_eq!(value(&s, "other"), 0.0);
    }

    #[test]
    fn reads_this_process() {
        let s = StageCpu::new().expect("metrics");
        // Burn CPU on a thread named as the step engine's until a scrape counts some (a tick is 10 ms).
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("commwatch-steps".into())
                .spawn_scoped(scope, || {
                    let t = std::time::Instant::now();
                    let mut x = 0u64;
                    loop {
                        for _ in 0..1_000_000 {
                            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                        }
                        let fams = s.collect();
                        assert_eq!(fams.len(), 1);
                        assert_eq!(fams[0].get_metric().len(), STAGES.len());
                        if value(&s, "steps") > 0.0 {
                            break;
                        }
                        assert!(t.elapsed().as_secs() < 20, "no CPU counted: {fams:?}");
                    }
                })
                .expect("thread")
                .join()
                .expect("joined");
        });
    }
}
