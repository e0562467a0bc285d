//! The analysis thread's rounds, measured whole in process on a real agent's tape (`loadgen --dump-tape
//! FILE`): [`crate::analysis::AnalysisHandle`]'s rounds on arrival as its thread runs them (the fleet cut into
//! scopes every quarter interval, the scopes due evaluated within a budget, the gone ones swept), in thread
//! CPU per node evaluated: the whole round, the scopes' own evaluations (each one's input, rules and tracker,
//! as the round itself times them) and the rest, the round's own overhead (the cut, the jobs lent to each
//! input, the collectives read, what the scopes share).
//!
//! `TAPE=FILE cargo test --release -p commwatch-collector --lib measure::round_cost -- --ignored --nocapture`
//! (env: `NODES` (40) copies of the tape's node, `PER_JOB` (8) nodes to a job as `loadgen` groups them, each
//! node one rank per GPU of its inventory; `RETENTION` seconds (300); `WARM` seconds of tape before the first
//! timed round (60); `WAKES` rounds per second of tape (32, the most the thread wakes); `SHARE` the budget's
//! share of a core in thousandths (1000: none binds; the collector's is 250, which at 40 nodes never binds:
//! give a small one to spread the scopes over the rounds as a loaded collector's are)). The tape is replayed
//! an hour ahead of the wall clock (a round on arrival evaluates as of the later of its time and the wall
//! clock); the budget earns on the tape's clock. The step engine takes a pass every second of tape (not
//! timed). A figure, not a check of speed: it never fails because the machine is slow.

use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_model::clock::unix_now_ns;

use super::analysis_cost::give_jobs;
use super::apply_cost::{env, tape_nodes, thread_cpu_ns};
use crate::analysis::{AnalysisConfig, AnalysisHandle};
use crate::pace::Budget;
use crate::steps::engine::Engine;
use crate::steps::StepStore;
use crate::store::Batch;

/// `b` moved `by_ns` later: its samples, markers and collectives' times.
fn shifted(b: &Batch, by_ns: i64) -> Batch {
    let mut b = b.clone();
    b.timestamps_unix_ns.iter_mut().for_each(|t| *t += by_ns);
    for m in &mut b.markers {
        m.sent_unix_ns += by_ns;
        m.received_unix_ns += by_ns;
    }
    for c in &mut b.collectives {
        c.received_unix_ns += by_ns;
        let us = c.record.dump_timestamp_us;
        if us > 0 {
            c.record.dump_timestamp_us = us.saturating_add_signed(by_ns / 1_000);
        }
    }
    b
}

/// Thread CPU and what the timed rounds did, summed.
#[derive(Default)]
struct Spent {
    rounds_ns: u64,
    scopes_ns: u64,
    rounds: u64,
    /// Rounds that evaluated at least one scope.
    busy_rounds: u64,
    nodes: u64,
    left: u64,
}

#[test]
#[ignore = "a measurement: run with --release --ignored --nocapture and TAPE=FILE"]
fn round_cost() {
    let retention = Duration::from_secs(env("RETENTION", 300) as u64);
    let warm_ns = env("WARM", 60) as i64 * 1_000_000_000;
    let wakes = env("WAKES", 32).max(1) as i64;
    let share = env("SHARE", 1000) as f64 / 1e3;
    let (store, refs, batches) = tape_nodes(env("NODES", 40), retention);
    give_jobs(&store, &refs, env("PER_JOB", 8).max(1));
    let t0 = batches[0].timestamps_unix_ns[0];
    // An hour ahead of the wall clock: the rounds evaluate as of the tape's time.
    let by_ns = unix_now_ns() + 3_600_000_000_000 - t0;
    let steps = Arc::new(StepStore::new());
    let passes = crate::telemetry::Passes::new().expect("pass metrics");
    let mut engine = Engine::new(store.clone(), steps.clone(), passes.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let config = AnalysisConfig::default();
    let interval = config.interval;
    let h = rt
        .block_on(AnalysisHandle::open(store.clone(), steps, passes, config))
        .expect("the analysis");
    let (mut budget, started) = (Budget::new(share, interval), Instant::now());
    let (mut scratch, mut spent, mut last_tick) = (Vec::new(), Spent::default(), i64::MIN);
    let mut prev: Option<i64> = None;
    for b in &batches {
        let b = shifted(b, by_ns);
        let now = b.timestamps_unix_ns.last().copied().unwrap_or(0);
        for node in &refs {
            node.lock()
                .apply_batch(&b, now, &mut scratch)
                .expect("apply");
        }
        if now - last_tick >= 1_000_000_000 {
            engine.tick(now);
            last_tick = now;
        }
        // The rounds from the previous batch's time to this one's, `wakes` a second.
        let from = prev.unwrap_or(now - 1);
        prev = Some(now);
        let step = 1_000_000_000 / wakes;
        let mut at = from + step;
        while at <= now {
            budget.refill(started + Duration::from_nanos((at - t0 - by_ns).max(0) as u64));
            let cpu0 = thread_cpu_ns();
            let r = h.round_at(at, Some(&mut budget));
            let ns = thread_cpu_ns() - cpu0;
            if at - t0 - by_ns >= warm_ns {
                spent.rounds_ns += ns;
                spent.scopes_ns += r.scopes_cpu.as_nanos() as u64;
                spent.rounds += 1;
                spent.busy_rounds += u64::from(r.scopes > 0);
                spent.nodes += r.nodes as u64;
                spent.left += r.left as u64;
            }
            at += step;
        }
    }
    report(&spent, refs.len(), wakes, share);
}

/// Prints the figures of a run.
fn report(spent: &Spent, nodes: usize, wakes: i64, share: f64) {
    let per = |ns: u64| ns as f64 / spent.nodes.max(1) as f64 / 1e3;
    let secs = spent.rounds as f64 / wakes as f64;
    println!(
        "{nodes} nodes, {wakes} rounds a second of tape, budget {share} of a core: {} rounds timed ({:.1} s of \
         tape), {} of them evaluating, {:.2} evaluations of each node a second; thread CPU per node evaluated: \
         the whole round {:.1} us, the scopes' evaluations {:.1} us, the round's own overhead {:.1} us; scopes \
         left for later {:.1} a round",
        spent.rounds,
        secs,
        spent.busy_rounds,
        spent.nodes as f64 / nodes.max(1) as f64 / secs.max(1e-9),
        per(spent.rounds_ns),
        per(spent.scopes_ns),
        per(spent.rounds_ns.saturating_sub(spent.scopes_ns)),
        spent.left as f64 / spent.rounds.max(1) as f64,
    );
}
