//! One node's evaluation, measured in process on a real agent's tape (`loadgen --dump-tape FILE`): the analysis
//! input rebuilt from the store's rings (`analysis::input::node_input`, the whole-fleet oracle's way) against the
//! windows kept from one evaluation to the next (`analysis::windows`, the per-job rounds' way), and the rules on
//! the nodes' inputs, all in thread CPU per node and evaluation.
//!
//! `TAPE=FILE cargo test --release -p commwatch-collector --lib measure::analysis_cost -- --ignored --nocapture`
//! (env: `NODES` (20) copies of the tape's node, `RETENTION` seconds (300), `WARM` seconds of tape applied
//! before the first timed evaluation (60)). The tape's batches are applied in order, every node's each in turn,
//! and every 4 batches (one second of data) each node is evaluated both ways, alternately first, and the two
//! inputs compared (a difference fails the run: the tape is one more oracle check); `FULL=0` leaves the
//! rebuild and the comparison out (to profile the kept windows alone), `KEPT=0` the kept windows (then the
//! head's flush waits for no reader: the store's apply as without them). It also prints the store's apply in
//! thread CPU per sample over the same span. A figure, not a check of speed: it never fails because the
//! machine is slow.

use std::time::Duration;

use super::apply_cost::{env, tape_nodes, thread_cpu_ns};
use crate::analysis::input::{node_input, AnalysisInput, NodeInput, WINDOW_NS};
use crate::analysis::windows::WindowCache;

/// Thread CPU, ns, of `f`, and what it returned.
fn timed<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let cpu0 = thread_cpu_ns();
    let r = f();
    (thread_cpu_ns() - cpu0, r)
}

#[test]
#[ignore = "a measurement: run with --release --ignored --nocapture and TAPE=FILE"]
fn analysis_cost() {
    let retention = Duration::from_secs(env("RETENTION", 300) as u64);
    let warm_ns = env("WARM", 60) as i64 * 1_000_000_000;
    let (store, refs, batches) = tape_nodes(env("NODES", 20), retention);
    let t0 = batches[0].timestamps_unix_ns[0];
    let (full_too, kept_too) = (env("FULL", 1) != 0, env("KEPT", 1) != 0);
    let mut cache = WindowCache::default();
    let (mut scratch, mut evaluations) = (Vec::new(), 0u64);
    let (mut full_ns, mut kept_ns, mut rules_ns) = (0u64, 0u64, 0u64);
    let (mut apply_ns, mut samples) = (0u64, 0u64);
    for (i, b) in batches.iter().enumerate() {
        let now = b.timestamps_unix_ns.last().copied().unwrap_or(0);
        let (ns, _) = timed(|| {
            for node in &refs {
                node.lock()
                    .apply_batch(b, now, &mut scratch)
                    .expect("apply");
            }
        });
        if now - t0 >= warm_ns {
            apply_ns += ns;
            samples += (b.values.len() * refs.len()) as u64;
        }
        if i % 4 != 3 {
            continue;
        }
        let since = now - WINDOW_NS;
        let timing = now - t0 >= warm_ns;
        let mut inputs: Vec<NodeInput> = Vec::with_capacity(refs.len());
        for node in &refs {
            let n = node.lock();
            let full = || full_too.then(|| node_input(&n, since));
            let kept = || kept_too.then(|| cache.input(&n, since));
            let ((f, full), (k, kept)) = if evaluations % 2 == 0 {
                let full = timed(full);
                (full, timed(kept))
            } else {
                let kept = timed(kept);
                (timed(full), kept)
            };
            if let (Some(kept), Some(full)) = (&kept, &full) {
                assert_eq!(kept, full, "{}: the inputs differ at batch {i}", n.name());
            }
            if timing {
                full_ns += f;
                kept_ns += k;
            }
            inputs.extend(kept.or(full));
        }
        let input = AnalysisInput {
            now_unix_ns: now,
            nodes: inputs,
            jobs: crate::jobs::fleet_jobs(&store, now),
            ..Default::default()
        };
        let (r, _) = timed(|| crate::analysis::evaluate(&input));
        if timing {
            rules_ns += r;
            evaluations += 1;
        }
        // As the rounds do: the next inputs are built into these ones' allocations.
        cache.give_back(input.nodes);
    }
    let per = |ns: u64| ns as f64 / (evaluations.max(1) * refs.len() as u64) as f64 / 1e3;
    let (kept_samples, bytes) = cache.memory();
    let (paired, copied) = cache.link_pairings();
    println!(
        "{} nodes, {evaluations} evaluations of each after {} s of tape: input from the rings {:.1} us of thread \
         CPU per node, from kept windows {:.1} us ({:.1}x less); the rules {:.1} us per node; windows kept: \
         {} samples, {:.1} KB per node; links' windows sampled together {paired} times, copied \
         {copied} times; the store's apply {:.1} ns per sample",
        refs.len(),
        warm_ns / 1_000_000_000,
        per(full_ns),
        per(kept_ns),
        full_ns as f64 / kept_ns.max(1) as f64,
        per(rules_ns),
        kept_samples / refs.len(),
        bytes as f64 / refs.len() as f64 / 1e3,
        apply_ns as f64 / samples.max(1) as f64,
    );
}
