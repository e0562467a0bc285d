//! Detection benchmark: every fault on every realistic background and every healthy variant, several seeds
//! each, through the real agent and collector code on a virtual clock (see `DETECTION.md`).
//!
//! `cargo bench --bench detect` (flags after `--`, or environment variables: see [`options`]):
//! `--size 8x8`, `--seeds N`, `--fault-steps N`, `--fault-secs S`, `--healthy-secs S`, `--hour-secs S`,
//! `--jobs N`, `--only TEXT`. Prints Markdown tables on stdout, progress on stderr.

mod harness;
mod matrix;
mod options;
mod report;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use options::Options;
use report::Done;

fn main() {
    let o = match Options::from_env_and_args(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("detect: {e}");
            std::process::exit(2);
        }
    };
    let (runs, mut refused) = matrix::plan(&o);
    // The same combination is refused for every seed: say it once.
    for r in &mut refused {
        if let Some((combo, _)) = r.0.split_once(", seed") {
            r.0 = combo.to_string();
        }
    }
    refused.dedup();
    eprintln!("detect: {o}; {} runs", runs.len());
    let started = Instant::now();
    let done = run_all(runs, o.jobs);
    println!("## Detection benchmark: {o}\n");
    print!("{}", report::render(&done, &refused, started.elapsed()));
}

/// Runs every planned run, `jobs` at a time, longest first (so the last to finish is a short one); returns
/// them in plan order.
fn run_all(runs: Vec<matrix::Planned>, jobs: usize) -> Vec<Done> {
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(runs[i].run.duration));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<_, String>>>> =
        Mutex::new((0..runs.len()).map(|_| None).collect());
    let total = runs.len();
    std::thread::scope(|s| {
        for _ in 0..jobs.min(total).max(1) {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&i) = order.get(k) else { break };
                let p = &runs[i];
                let r = harness::run::run(&p.run).map_err(|e| e.to_string());
                match &r {
                    Ok(o) => eprintln!(
                        "detect: [{}/{total}] {} ({:.0} s simulated) in {:.1} s; store per node: \
                         {} series, raw samples {:.2} MB, all {:.2} MB; raw samples with their own \
                         timestamps {:.2} MB, with ±500 µs of jitter {:.2} MB; scoped vs whole-fleet \
                         evaluation: {} of {} differed{}",
                        k + 1,
                        p.label,
                        p.run.duration.as_secs_f64(),
                        o.wall.as_secs_f64(),
                        o.store.series / o.store.nodes.max(1),
                        o.store.sample_bytes as f64 / o.store.nodes.max(1) as f64 / 1e6,
                        o.store.bytes as f64 / o.store.nodes.max(1) as f64 / 1e6,
                        o.own_timestamps_bytes.0 as f64 / o.store.nodes.max(1) as f64 / 1e6,
                        o.own_timestamps_bytes.1 as f64 / o.store.nodes.max(1) as f64 / 1e6,
                        o.oracle.1,
                        o.oracle.0,
                        o.oracle.2.as_ref().map_or(String::new(), |m| format!(" (first {m})")),
                    ),
                    Err(e) => eprintln!("detect: [{}/{total}] {} failed: {e}", k + 1, p.label),
                }
                if let Ok(mut v) = results.lock() {
                    v[i] = Some(r);
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    runs.into_iter()
        .zip(results)
        .map(|(p, r)| (p, r.unwrap_or_else(|| Err("did not run".into()))))
        .collect()
}
