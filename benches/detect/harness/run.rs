//! One run: a simulated cluster, one agent per node and a collector, driven tick by tick on the virtual
//! clock at the agent's and the collector's own cadences.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use commwatch_agent::source::Tier;
use commwatch_collector::analysis::FindingEvent;
use commwatch_collector::StoreMemory;
use commwatch_sim::{Cluster, ClusterSpec};

use super::agent::{Shipped, SimAgent, FAST_PERIOD_MS, SLOW_PERIOD_MS};
use super::clock::{model_time, VirtualClock};
use super::collector::VirtualCollector;
use super::truth::ByteTally;
use super::HarnessError;

/// The cadences of a run, each a multiple of the fast period: the agent's defaults (fast and slow tier,
/// batch, rediscovery) and the collector's (step engine, analysis).
pub const FAST: Duration = Duration::from_millis(FAST_PERIOD_MS as u64);
const SLOW_TICKS: u64 = SLOW_PERIOD_MS as u64 / FAST_PERIOD_MS as u64;
const BATCH_TICKS: u64 = 5;
const DISCOVER_TICKS: u64 = 200;
const STEPS_TICKS: u64 = 10;
const ANALYSIS_TICKS: u64 = 20;

/// What to run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub spec: ClusterSpec,
    /// Simulated time.
    pub duration: Duration,
}

/// A finding event with the model time of the evaluation that published it.
#[derive(Debug, Clone)]
pub struct TimedEvent {
    pub at: Duration,
    pub event: FindingEvent,
}

/// What a run saw.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub events: Vec<TimedEvent>,
    /// Steps the collector found, per node name.
    pub steps: HashMap<String, u64>,
    /// When the collector's first step (on any node) ended, model time.
    pub first_step: Option<Duration>,
    pub bytes: ByteTally,
    pub shipped: Shipped,
    /// Read and discovery errors the agents noted (bounded per agent).
    pub agent_errors: usize,
    /// Finding events lost because they were not read in time (0 expected).
    pub lagged: u64,
    /// Evaluations compared with the whole-fleet oracle, those whose findings differed (0 expected), and the
    /// first difference.
    pub oracle: (u64, u64, Option<String>),
    /// Wall time the run took.
    pub wall: Duration,
    /// The store's own accounting at the end of the run (its rings full after the retention).
    pub store: StoreMemory,
    /// What the same samples cost held as before the node's ticks were shared (each series a ring of its
    /// own timestamps): `(exact timestamps, with a sampler's ±500 µs of jitter)`, bytes over all nodes.
    pub own_timestamps_bytes: (usize, usize),
}

/// Runs `run` in a temporary directory.
pub fn run(run: &RunSpec) -> Result<RunOutcome, HarnessError> {
    let started = Instant::now();
    let dir = scratch_dir()?;
    let mut cluster = Cluster::create(dir.path(), run.spec.clone())?;
    let procfs = cluster.write_procfs_trees()?;
    let model = cluster.model().clone();
    let clock = VirtualClock::default();
    let mut collector = VirtualCollector::new()?;
    let mut agents = Vec::new();
    for (i, ((name, sysfs), (_, proc_root))) in cluster.node_roots().iter().zip(&procfs).enumerate()
    {
        agents.push(SimAgent::start(
            name,
            i,
            (sysfs, proc_root),
            &model,
            &clock,
            collector.store.clone(),
        )?);
    }
    let mut out = RunOutcome {
        events: Vec::new(),
        steps: HashMap::new(),
        first_step: None,
        bytes: ByteTally::default(),
        shipped: Shipped::default(),
        agent_errors: 0,
        lagged: 0,
        oracle: (0, 0, None),
        wall: Duration::ZERO,
        store: StoreMemory::default(),
        own_timestamps_bytes: (0, 0),
    };
    // Per node: the end of the newest step already compared.
    let mut seen_until: Vec<i64> = vec![i64::MIN; agents.len()];
    let ticks = (run.duration.as_nanos() / FAST.as_nanos()) as u64;
    for i in 1..=ticks {
        let t = FAST * i as u32;
        clock.set(t);
        cluster.advance_to(t)?;
        let now = clock.unix_ns();
        for a in &mut agents {
            a.read(Tier::Fast);
            if i % SLOW_TICKS == 0 {
                a.read(Tier::Slow);
            }
            a.end_tick();
            if i % DISCOVER_TICKS == 0 {
                a.rediscover()?;
            }
            if i % BATCH_TICKS == 0 {
                a.ship()?;
            }
        }
        if i % STEPS_TICKS == 0 {
            let added = collector.steps_tick(now);
            if added > 0 {
                for (n, a) in agents.iter().enumerate() {
                    let name = a.name();
                    tally_steps(
                        &collector,
                        &model,
                        (n, name),
                        added,
                        &mut seen_until[n],
                        &mut out,
                    );
                }
            }
        }
        if i % ANALYSIS_TICKS == 0 {
            let at = clock.now();
            out.events.extend(
                collector
                    .evaluate(now)
                    .into_iter()
                    .map(|event| TimedEvent { at, event }),
            );
        }
    }
    for a in &agents {
        let s = a.shipped();
        out.shipped.batches += s.batches;
        out.shipped.samples += s.samples;
        out.shipped.out_of_order += s.out_of_order;
        out.shipped.resets += s.resets;
        out.shipped.implausible += s.implausible;
        out.shipped.refused += s.refused;
        out.agent_errors += a.recent_errors();
    }
    out.lagged = collector.lagged;
    out.oracle = (
        collector.oracle_compared,
        collector.oracle_mismatches,
        collector.oracle_first_mismatch.clone(),
    );
    out.store = collector.store.memory();
    for a in &agents {
        let (exact, jittered) = own_timestamps_bytes(&collector.store, a.name());
        out.own_timestamps_bytes.0 += exact;
        out.own_timestamps_bytes.1 += jittered;
    }
    out.wall = started.elapsed();
    Ok(out)
}

/// The bytes `node`'s samples took when each series held its own timestamps (the store before its ticks were
/// shared): every series' samples re-encoded in a ring of `(timestamp, value)` of the same bound, with the
/// virtual clock's exact timestamps and with a deterministic ±500 µs of jitter per tick (what a sampler's
/// reads show; one timestamp per tick, as the agent stamps them).
fn own_timestamps_bytes(store: &commwatch_collector::Store, node: &str) -> (usize, usize) {
    use commwatch_collector::store::ring::Ring;
    let jitter = |t: i64| {
        let mut x = (t as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        t + ((x ^ (x >> 31)) % 1_000_001) as i64 - 500_000
    };
    store
        .with_node(node, |n| {
            let (mut exact, mut jittered) = (0, 0);
            for s in n.series() {
                let samples = n.samples(s);
                let (mut a, mut b) = (Ring::new(samples.cap()), Ring::new(samples.cap()));
                for (t, v) in samples.iter() {
                    a.push(t, v, i64::MAX);
                    b.push(jitter(t), v, i64::MAX);
                }
                exact += a.heap_bytes();
                jittered += b.heap_bytes();
            }
            (exact, jittered)
        })
        .unwrap_or((0, 0))
}

/// The directory the cluster's trees are written to: in memory where the system has one (the simulator
/// rewrites its files every tick), else the temporary directory.
fn scratch_dir() -> Result<tempfile::TempDir, HarnessError> {
    let b = tempfile::Builder::new().prefix("commwatch-detect-").clone();
    let shm = std::path::Path::new("/dev/shm");
    match shm.is_dir().then(|| b.tempdir_in(shm)) {
        Some(Ok(d)) => Ok(d),
        _ => b.tempdir().map_err(HarnessError::Io),
    }
}

/// Counts node `n`'s steps newer than `seen_until` (of the `added` the engine's last pass added over all
/// nodes) and compares their bytes with the truth.
fn tally_steps(
    collector: &VirtualCollector,
    model: &commwatch_sim::JobModel,
    (n, name): (usize, &str),
    added: usize,
    seen_until: &mut i64,
    out: &mut RunOutcome,
) {
    let Some(steps) = collector.steps.node_steps(name, added) else {
        return;
    };
    for s in steps.iter().filter(|s| s.end_unix_ns > *seen_until) {
        *out.steps.entry(name.to_string()).or_default() += 1;
        let end = model_time(s.end_unix_ns);
        if out.first_step.is_none_or(|f| end < f) {
            out.first_step = Some(end);
        }
        out.bytes.add_step(model, n, s);
    }
    if let Some(last) = steps.last() {
        *seen_until = (*seen_until).max(last.end_unix_ns);
    }
}
