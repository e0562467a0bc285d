//! The sampling thread starved: reads that are delayed (a slow source, a source that stalls before it reads,
//! a stall in the middle of a read, ticks that come late or are skipped) must never change the rate the
//! collector computes from the samples.
//!
//! Counters advance at a known rate, computed from the wall clock at the moment they are read. The real
//! sampling thread runs them on the fast tier while reads are delayed on a fixed schedule, some delays longer
//! than the period (so ticks are skipped).
//!
//! Each read is bracketed by the clock: the moment its value was taken and the moment the sampler's sink
//! returned. Every emitted timestamp must fall inside its read's bracket (less the sampler's stamp
//! resolution), whatever the machine did to the thread; and every interval's rate, from the samples' own
//! timestamps as the collector computes it, must stay within 2 % of the true rate plus what the two
//! brackets' widths allow (a thread preempted between taking a value and handing it over widens its
//! bracket; the test says how many intervals that touched).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use commwatch_agent::sampler::{self, LoopSettings, Periods, Sampler, SamplerEvent};
use commwatch_agent::source::{
    Endpoint, Inventory, Link, LinkClass, LinkKey, LinkRole, ReadReport, SeriesKind, SeriesSpec,
    Source, SourceError, Tier, Value,
};
use commwatch_agent::telemetry::AgentMetrics;
use commwatch_model::clock::unix_now_ns;
use tokio::sync::mpsc;

/// The counters' true rate, bytes per second.
const RATE: f64 = 12.5e9;
/// The fast sampling period.
const PERIOD: Duration = Duration::from_millis(50);
/// How far before its read a sample may be stamped: the sampling thread's resolution, a share of the fast
/// period.
const RESOLUTION_NS: i64 = PERIOD.as_nanos() as i64 / sampler::STAMP_SHARE as i64;
/// How long each scenario samples.
const RUN: Duration = Duration::from_millis(2_500);
/// Delays before successive reads, in milliseconds, cycled: jitter within a period, a read that takes most
/// of one, and two longer than the period (the ticks behind them are late, the next ones skipped).
const DELAYS_MS: &[u64] = &[0, 30, 4, 120, 0, 45, 11, 0, 75, 2, 20, 0];

/// The delay schedule of one stalling read.
struct Schedule(usize);

impl Schedule {
    fn next(&mut self) -> Duration {
        let d = DELAYS_MS[self.0 % DELAYS_MS.len()];
        self.0 += 1;
        Duration::from_millis(d)
    }
}

fn link(device: &str) -> Link {
    Link {
        key: LinkKey::new(LinkClass::Infiniband, device, "1"),
        endpoint: Endpoint::HcaPort,
        role: LinkRole::Fabric,
        capacity_bytes_per_second: Some(50e9),
        state: "ACTIVE".into(),
        attributes: BTreeMap::new(),
        gpu: None,
        link: None,
    }
}

/// Each counter read's bracket, by metric and value: (the clock when the value was taken, the clock when
/// the sampler's sink returned), nanoseconds since the Unix epoch.
type Reads = Arc<Mutex<HashMap<(String, u64), (i64, i64)>>>;

/// Each counter's emitted (metric, [(timestamp, value)]) by series id, in the order sent.
type Counters = BTreeMap<u32, (String, Vec<(i64, u64)>)>;

/// Fast series on one link, read in order: byte counters at [`RATE`] (each read from the clock at the moment
/// it is pushed), or a constant gauge. `stall` sleeps on the delay schedule before the read of that series.
struct Paced {
    name: &'static str,
    inventory: Inventory,
    stall: Option<(usize, Schedule)>,
    t0: i64,
    reads: Reads,
    /// Discovered once: the inventory is fixed from then on.
    discovered: bool,
    /// Says its reads are quick: behind the watchdog it shares the quick sources' clock thread.
    quick: bool,
}

impl Paced {
    /// `metrics`: the series, each a counter (`*_bytes`) or a gauge; `stall_before`: the series whose read
    /// the stall delays.
    fn new(
        name: &'static str,
        device: &str,
        metrics: &[&str],
        stall_before: Option<usize>,
        reads: &Reads,
    ) -> Paced {
        let l = link(device);
        let series = metrics
            .iter()
            .map(|m| {
                let kind = if m.ends_with("_bytes") {
                    SeriesKind::COUNTER64
                } else {
                    SeriesKind::Gauge
                };
                SeriesSpec::for_link(m, kind, Tier::Fast, &l.key)
            })
            .collect();
        Paced {
            name,
            inventory: Inventory {
                series,
                links: vec![l],
            },
            stall: stall_before.map(|i| (i, Schedule(0))),
            t0: unix_now_ns(),
            reads: reads.clone(),
            discovered: false,
            quick: false,
        }
    }
}

impl Source for Paced {
    fn name(&self) -> &'static str {
        self.name
    }
    fn quick_reads(&self) -> bool {
        self.quick
    }
    fn discover(&mut self) -> Result<bool, SourceError> {
        // The first discovery finds the inventory (a watched source's copy is taken only on a change).
        Ok(!std::mem::replace(&mut self.discovered, true))
    }
    fn inventory(&self) -> &Inventory {
        &self.inventory
    }
    fn sample(&mut self, _tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
        let n = self.inventory.series.len();
        for i in 0..n {
            if let Some((at, s)) = &mut self.stall {
                if *at == i {
                    std::thread::sleep(s.next());
                }
            }
            let spec = &self.inventory.series[i];
            if spec.kind == SeriesKind::Gauge {
                sink(i, Value::Gauge(40.0));
                continue;
            }
            let taken = unix_now_ns();
            let v = ((taken - self.t0) as f64 * RATE / 1e9) as u64;
            sink(i, Value::Counter(v));
            let returned = unix_now_ns();
            let key = (spec.metric.clone(), v);
            self.reads.lock().unwrap().insert(key, (taken, returned));
        }
        ReadReport {
            read: n,
            ..Default::default()
        }
    }
}

/// What one scenario measured.
struct Measured {
    /// Largest relative error of an interval's rate beyond what its reads' brackets allow.
    worst_excess: f64,
    /// Lowest interval rate as a share of the true rate (how slow the link looked at worst).
    lowest: f64,
    /// Fewest intervals of one counter.
    intervals: usize,
    /// Intervals whose reads were held up between taking the value and handing it over (a bracket wider
    /// than the stamp resolution): their allowance grew with it.
    disturbed: usize,
    /// Samples stamped outside their read's bracket, with the first one's description.
    misstamped: (usize, Option<String>),
    /// Longest interval between two samples of a counter, seconds.
    longest_s: f64,
    overruns: u64,
}

/// Runs `sources` on the real sampling thread for [`RUN`] and measures each counter's per-interval rates
/// against the brackets the sources logged in `reads`.
fn run(sources: Vec<Box<dyn Source>>, reads: &Reads) -> Measured {
    let metrics = Arc::new(AgentMetrics::new());
    let mut smp = Sampler::new(sources, metrics.clone());
    smp.discover();
    let (tx, mut rx) = mpsc::channel(1024);
    let handle = sampler::spawn(
        smp,
        Periods::new(PERIOD, Duration::from_secs(10)),
        LoopSettings {
            batch_period: Duration::from_millis(200),
            discover_period: Duration::from_secs(3600),
            markers: None,
            inspector: None,
        },
        tx,
        metrics.clone(),
    )
    .expect("sampling thread");
    std::thread::sleep(RUN);
    handle.stop();
    let counters = collect_counters(&mut rx);
    let overruns = metrics
        .tick_overruns
        .with_label_values(&[Tier::Fast.as_str()])
        .get();
    measure(&counters, &reads.lock().unwrap(), overruns)
}

/// The counters' samples as the sampler emitted them.
fn collect_counters(rx: &mut mpsc::Receiver<SamplerEvent>) -> Counters {
    let mut counters: Counters = BTreeMap::new();
    while let Ok(ev) = rx.try_recv() {
        match ev {
            SamplerEvent::Inventory(inv) => {
                for s in inv.series.iter().filter(|s| s.metric.ends_with("_bytes")) {
                    counters.insert(s.id, (s.metric.clone(), Vec::new()));
                }
            }
            SamplerEvent::Batch(b) => {
                let mut i = 0;
                for (&ts, &n) in b.timestamps_unix_ns.iter().zip(&b.tick_lengths) {
                    for k in i..i + n as usize {
                        if let Some((_, points)) = counters.get_mut(&b.series_ids[k]) {
                            points.push((ts, b.values[k]));
                        }
                    }
                    i += n as usize;
                }
            }
            SamplerEvent::Jobs(_) => {}
        }
    }
    counters
}

/// Checks every stamp against its read's bracket and every interval's rate against the truth.
fn measure(
    counters: &Counters,
    reads: &HashMap<(String, u64), (i64, i64)>,
    overruns: u64,
) -> Measured {
    let mut m = Measured {
        worst_excess: 0.0,
        lowest: f64::INFINITY,
        intervals: usize::MAX,
        disturbed: 0,
        misstamped: (0, None),
        longest_s: 0.0,
        overruns,
    };
    for (metric, points) in counters.values() {
        m.intervals = m.intervals.min(points.len().saturating_sub(1));
        let mut width = Vec::with_capacity(points.len());
        for &(ts, v) in points {
            let (taken, returned) = reads[&(metric.clone(), v)];
            if ts < taken - RESOLUTION_NS || ts > returned {
                m.misstamped.0 += 1;
                m.misstamped.1.get_or_insert_with(|| {
                    format!("{metric} stamped {ts}, read between {taken} and {returned}")
                });
            }
            width.push((returned - taken) as f64 / 1e9);
        }
        for (i, w) in points.windows(2).enumerate() {
            let dt = (w[1].0 - w[0].0) as f64 / 1e9;
            assert!(dt > 0.0, "timestamps go forward: {w:?}");
            let rate = (w[1].1 - w[0].1) as f64 / dt;
            let slack = width[i] + width[i + 1];
            if slack > RESOLUTION_NS as f64 / 1e9 {
                m.disturbed += 1;
            }
            let allowed = (slack + 2.0 * RESOLUTION_NS as f64 / 1e9) / dt;
            m.worst_excess = m.worst_excess.max((rate / RATE - 1.0).abs() - allowed);
            m.lowest = m.lowest.min(rate / RATE);
            m.longest_s = m.longest_s.max(dt);
        }
    }
    m
}

/// Checks a scenario: enough intervals, ticks really late or skipped, every stamp inside its read, every
/// rate within 2 % beyond what its reads' brackets allow.
#[track_caller]
fn check(what: &str, m: &Measured) {
    eprintln!(
        "{what}: {} intervals ({} with a read held up), longest {:.0} ms, {} overruns, worst rate error beyond \
         the brackets {:.2} %, lowest rate {:.1} % of the truth",
        m.intervals,
        m.disturbed,
        m.longest_s * 1e3,
        m.overruns,
        m.worst_excess.max(0.0) * 100.0,
        m.lowest * 100.0
    );
    assert!(m.intervals >= 15, "{what}: only {} intervals", m.intervals);
    assert!(
        m.longest_s > 2.0 * PERIOD.as_secs_f64() && m.overruns > 0,
        "{what}: the schedule should have made ticks late and skipped some"
    );
    assert_eq!(
        m.misstamped.0, 0,
        "{what}: samples stamped outside their read: {:?}",
        m.misstamped.1
    );
    assert!(
        m.worst_excess < 0.02,
        "{what}: an interval's rate is off by {:.2} % beyond what its reads allow (limit 2 %)",
        m.worst_excess * 100.0
    );
}

#[test]
fn a_source_that_stalls_before_its_read_keeps_its_rate() {
    let reads = Reads::default();
    let m = run(
        vec![Box::new(Paced::new(
            "paced",
            "mlx5_0",
            &["tx_bytes"],
            Some(0),
            &reads,
        ))],
        &reads,
    );
    check("stalling source", &m);
}

#[test]
fn a_slow_source_read_first_does_not_skew_the_next_ones_rate() {
    let reads = Reads::default();
    let m = run(
        vec![
            Box::new(Paced::new(
                "slow",
                "mlx5_1",
                &["temperature"],
                Some(0),
                &reads,
            )),
            Box::new(Paced::new("paced", "mlx5_0", &["tx_bytes"], None, &reads)),
        ],
        &reads,
    );
    check("slow source before the counter", &m);
}

#[test]
fn a_stall_inside_one_sources_read_keeps_both_sides_rates() {
    let reads = Reads::default();
    let m = run(
        vec![Box::new(Paced::new(
            "paced",
            "mlx5_0",
            &["tx_bytes", "rx_bytes"],
            Some(1),
            &reads,
        ))],
        &reads,
    );
    check("stall between two counters of one source", &m);
}

/// Two sources behind the watchdog (quick ones when `quick`): "slow" stalls before its read, "paced" does not.
fn stalling_pair(reads: &Reads, quick: bool) -> Vec<Box<dyn Source>> {
    use commwatch_agent::source::watchdog::watch;
    let paced = |name, device, metric, stall| {
        let mut p = Paced::new(name, device, &[metric], stall, reads);
        p.quick = quick;
        watch(Box::new(p))
    };
    vec![
        paced("slow", "mlx5_1", "tx_bytes", Some(0)),
        paced("paced", "mlx5_0", "rx_bytes", None),
    ]
}

#[test]
fn sources_on_their_own_threads_asked_together_keep_their_rates() {
    // Behind the watchdog, as the agent runs them: each tick asks both sources before it takes either answer,
    // with a stall before one source's read.
    let reads = Reads::default();
    let m = run(stalling_pair(&reads, false), &reads);
    check("two watched sources, one stalling", &m);
}

#[test]
fn quick_sources_on_one_clock_thread_keep_their_rates_when_one_stalls() {
    // Behind the watchdog and quick: one thread reads both on its clock, the stalling one first, so the
    // other's reads wait behind each stall; every value keeps its own read time.
    let reads = Reads::default();
    let m = run(stalling_pair(&reads, true), &reads);
    check("two quick sources on one clock, one stalling", &m);
}
