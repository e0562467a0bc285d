//! The per-series sample ring on its own: bytes per sample, push cost and iteration cost, for the shapes of data
//! the collector stores.
//!
//! `cargo bench -p commwatch-collector --bench ring` (env: `RINGS` pushed round-robin in the push phase (default
//! 1000), `TICKS` per ring (36000: 12,000 to fill the default retention, then 24,000 with eviction)).
//!
//! Every shape is a 20 Hz series (50 ms period, timestamps with a uniform ±500 µs jitter at ns precision) kept
//! at the default retention (10 min: 12,000 samples, cap 13,502 as the store sets it):
//! - `counter`: a busy byte counter's cumulative increase, ≈10 GB/s × the tick's length ± 5 %;
//! - `idle counter`: a counter that does not move;
//! - `constant gauge`: the same f64 every tick;
//! - `noisy gauge`: uniform random f64 in [40, 60) (every mantissa bit random);
//! - `integer gauge`: a whole-number f64 (a temperature in °C) that drifts by ±1 now and then;
//! - `regular counter`: exact period, constant increase (what the ingest bench's fake agents send).
//!
//! Push: `RINGS` rings filled tick by tick (one push per ring per tick, as a batch is applied), timed for the
//! fill (no eviction) and for the steady state (one eviction per push). Iteration, on one full ring: a full
//! walk oldest first and newest first, the newest 1 s (what a rate reads) and the newest 20 s (the analysis
//! window), walked newest first with `take_while`.

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use std::hint::black_box;
use std::time::Instant;

mod common;

use common::env;
use commwatch_collector::store::ring::Ring;

const PERIOD_NS: i64 = 50_000_000;
const JITTER_NS: i64 = 500_000;
const RETENTION_NS: i64 = 600_000_000_000;
const CAP: usize = 13_502;
const T0: i64 = 1_700_000_000_000_000_000;

#[derive(Clone, Copy)]
enum Shape {
    Counter,
    IdleCounter,
    ConstantGauge,
    NoisyGauge,
    IntegerGauge,
    RegularCounter,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Counter => "counter",
            Shape::IdleCounter => "idle counter",
            Shape::ConstantGauge => "constant gauge",
            Shape::NoisyGauge => "noisy gauge",
            Shape::IntegerGauge => "integer gauge",
            Shape::RegularCounter => "regular counter",
        }
    }

    fn samples(self, n: usize, seed: u64) -> Vec<(i64, u64)> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut out = Vec::with_capacity(n);
        let mut acc: u64 = 3_141_592_653_589;
        let mut prev_t = T0;
        let mut temp = 65.0f64;
        for i in 0..n as i64 {
            let t = match self {
                Shape::RegularCounter => T0 + i * PERIOD_NS,
                _ => T0 + i * PERIOD_NS + rng.random_range(-JITTER_NS..=JITTER_NS),
            };
            let v = match self {
                Shape::Counter => {
                    let dt = (t - prev_t).max(0) as f64;
                    acc += (dt * 10.0 * (0.95 + 0.1 * rng.random::<f64>())) as u64;
                    acc
                }
                Shape::IdleCounter => acc,
                Shape::ConstantGauge => 42.5f64.to_bits(),
                Shape::NoisyGauge => (40.0 + 20.0 * rng.random::<f64>()).to_bits(),
                Shape::IntegerGauge => {
                    if rng.random::<u64>().is_multiple_of(50) {
                        temp += if rng.random::<u64>().is_multiple_of(2) {
                            1.0
                        } else {
                            -1.0
                        };
                    }
                    temp.to_bits()
                }
                Shape::RegularCounter => {
                    acc += 1_000_000;
                    acc
                }
            };
            prev_t = t;
            out.push((t, v));
        }
        out
    }
}

/// Nanoseconds per item of `f` run `reps` times over `items` items each.
fn per_item(reps: usize, items: usize, mut f: impl FnMut() -> u64) -> f64 {
    let mut sink = 0u64;
    sink = sink.wrapping_add(f()); // warm-up
    let t = Instant::now();
    for _ in 0..reps {
        sink = sink.wrapping_add(f());
    }
    let ns = t.elapsed().as_nanos() as f64;
    black_box(sink);
    ns / (reps * items.max(1)) as f64
}

fn main() {
    let rings = env("RINGS", 1000) as usize;
    let ticks = (env("TICKS", 36_000) as usize).max(12_001);
    let shapes = [
        Shape::Counter,
        Shape::IdleCounter,
        Shape::ConstantGauge,
        Shape::NoisyGauge,
        Shape::IntegerGauge,
        Shape::RegularCounter,
    ];
    println!(
        "ring: 20 Hz series at the default retention (10 min = 12,000 samples, cap {CAP}); push over {rings} \
         rings x {ticks} ticks"
    );
    for shape in shapes {
        let data = shape.samples(ticks, 0x5EED ^ shape as u64);

        // Bytes per sample once full (12,000 samples) and in the steady state (after all ticks).
        let mut one = Ring::new(CAP);
        for &(t, v) in &data[..12_000] {
            one.push(t, v, RETENTION_NS);
        }
        let full = one.heap_bytes() as f64 / one.len() as f64;
        for &(t, v) in &data[12_000..] {
            one.push(t, v, RETENTION_NS);
        }
        let steady = one.heap_bytes() as f64 / one.len() as f64;
        assert_eq!(one.iter().count(), one.len());

        // Push: tick-major over many rings, as batches are applied.
        let mut all: Vec<Ring> = (0..rings).map(|_| Ring::new(CAP)).collect();
        let t = Instant::now();
        for &(ts, v) in &data[..12_000] {
            for r in all.iter_mut() {
                r.push(ts, v, RETENTION_NS);
            }
        }
        let fill_ns = t.elapsed().as_nanos() as f64 / (12_000 * rings) as f64;
        let t = Instant::now();
        for &(ts, v) in &data[12_000..] {
            for r in all.iter_mut() {
                r.push(ts, v, RETENTION_NS);
            }
        }
        let steady_ns = t.elapsed().as_nanos() as f64 / ((ticks - 12_000) * rings) as f64;
        black_box(&all);
        drop(all);

        // Iteration over the full ring `one`.
        let n = one.len();
        let fwd = per_item(200, n, || {
            one.iter().fold(0u64, |a, (t, v)| a ^ v ^ t as u64)
        });
        let rev = per_item(200, n, || {
            one.iter().rev().fold(0u64, |a, (t, v)| a ^ v ^ t as u64)
        });
        let newest = one.last().map_or(0, |l| l.0);
        let window = |secs: i64| {
            let since = newest - secs * 1_000_000_000;
            let k = one.iter().rev().take_while(|s| s.0 >= since).count();
            let ns = per_item(20_000 / secs as usize, k, || {
                one.iter()
                    .rev()
                    .take_while(|s| s.0 >= since)
                    .fold(0u64, |a, (t, v)| a ^ v ^ t as u64)
            });
            (k, ns)
        };
        let (k1, w1) = window(1);
        let (k20, w20) = window(20);
        println!(
            "{:>15}: {full:.2} B/sample full, {steady:.2} steady ({:.1} KiB/series) | push {fill_ns:.1} ns fill, \
             {steady_ns:.1} ns steady | iter {fwd:.2} ns/sample oldest first, {rev:.2} newest first | newest 1 s \
             ({k1}) {w1:.2} ns/sample = {:.0} ns, newest 20 s ({k20}) {w20:.2} ns/sample",
            shape.name(),
            one.heap_bytes() as f64 / 1024.0,
            w1 * k1 as f64,
        );
    }
}
