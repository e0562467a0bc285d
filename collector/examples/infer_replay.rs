//! Replays recorded counters through step inference, to see what the collector would make of real traffic.
//!
//! ```text
//! cargo run -p commwatch-collector --example infer_replay -- node1.txt
//! ```
//! The file has one line per sample: a Unix time in ns, then any number of cumulative byte counters (the
//! test bed's `scripts/testbed/` runs record each node's fabric and management `tx_bytes`/`rx_bytes` so);
//! the traffic total is their sum, as the step engine's. Samples are fed a second at a time, as the engine
//! does; prints the period estimate after each second it changes and every step found (start, end relative to
//! the first sample, duration, confidence).

use commwatch_collector::steps::inferred::InferenceTracker;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: infer_replay FILE");
        std::process::exit(2);
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    let mut pts: Vec<(i64, f64)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let v: Vec<i64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        match v.split_first() {
            Some((&t, counters)) if !counters.is_empty() && counters.iter().all(|c| *c >= 0) => {
                pts.push((t, counters.iter().map(|c| *c as f64).sum()));
            }
            _ => eprintln!("{path}:{}: skipped (not a time and counters)", i + 1),
        }
    }
    let Some(&(t0, _)) = pts.first() else {
        eprintln!("{path}: no samples");
        std::process::exit(1);
    };
    let rel = |t: i64| (t - t0) as f64 / 1e9;
    let mut tracker = InferenceTracker::default();
    let mut last_period = None;
    for chunk in pts.chunks(20) {
        tracker.extend(chunk.iter().copied());
        for s in tracker.steps() {
            println!(
                "step {:8.3} .. {:8.3}  {:6.3} s  confidence {:.2}",
                rel(s.start_unix_ns),
                rel(s.end_unix_ns),
                (s.end_unix_ns - s.start_unix_ns) as f64 / 1e9,
                s.confidence
            );
        }
        let p = tracker.period().map(|p| (p.period_s * 1e3).round() as i64);
        if p != last_period {
            println!(
                "at {:8.3}: period {:?}",
                rel(tracker.newest_ns()),
                tracker.period()
            );
            last_period = p;
        }
    }
}
