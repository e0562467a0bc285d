//! Cost of `Cluster::advance_to` for the demo's 8 nodes × 8 GPUs cluster.
//!
//! Run: `cargo bench -p commwatch-sim --bench advance`. Prints, per scenario (and for every traffic
//! variant at once), the time of one `advance_to` at the updater's 10 ms tick, how many files it
//! rewrote, and the files written per second; then the share of one core a 10 ms updater would take.

use std::time::{Duration, Instant};

use commwatch_sim::{Cluster, ClusterSpec, Scenario, Variant};

fn bench(spec: ClusterSpec, ticks: u32) -> Result<(), commwatch_sim::SimError> {
    let label = if spec.variants.is_empty() {
        spec.scenario.to_string()
    } else {
        format!("{} + {} variants", spec.scenario, spec.variants.len())
    };
    let tmp = tempfile::tempdir().map_err(|e| commwatch_sim::SimError::Io {
        op: "tempdir",
        path: std::env::temp_dir(),
        error: e,
    })?;
    let mut c = Cluster::create(tmp.path(), spec)?;
    let tick = Duration::from_millis(10);
    // Warm up over one step.
    let mut t = Duration::ZERO;
    for _ in 0..64 {
        t += tick;
        c.advance_to(t)?;
    }
    let mut written = 0usize;
    let start = Instant::now();
    for _ in 0..ticks {
        t += tick;
        written += c.advance_to(t)?.written;
    }
    let el = start.elapsed();
    let per = el / ticks;
    let files_per_s = written as f64 / el.as_secs_f64();
    println!(
        "{:<22} files {:>5}  advance_to {:>8.1} µs  rewritten/tick {:>7.1}  files written/s {:>10.0}  \
         10 ms updater ≈ {:>5.1}% of a core",
        label,
        c.counter_file_count(),
        per.as_secs_f64() * 1e6,
        written as f64 / f64::from(ticks),
        files_per_s,
        per.as_secs_f64() / tick.as_secs_f64() * 100.0,
    );
    Ok(())
}

fn main() {
    let ticks = std::env::var("SIM_BENCH_TICKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let specs = [
        ClusterSpec::with_scenario(Scenario::Healthy),
        ClusterSpec::with_scenario(Scenario::ManagementNic),
        ClusterSpec::with_scenario(Scenario::DegradedLink),
        ClusterSpec::with_variants(Scenario::Healthy, &Variant::ALL),
    ];
    for spec in specs {
        let sc = spec.scenario;
        if let Err(e) = bench(spec, ticks) {
            eprintln!("{sc}: {e}");
        }
    }
}
