//! Load: one collector, N concurrent agent streams at the default rates, for a fixed time.
//!
//! `cargo bench -p commwatch-collector --bench load` (env: `AGENTS` (default 1000), `SECS` (60), `FAST` series
//! per agent (250, at 20 Hz), `SLOW` (250, at 1 Hz), `BATCH_MS` (250), `COLLECTOR_THREADS` (2)).
//!
//! - The collector runs as in production (multi-thread runtime, step engine and analysis on) on its own named
//!   threads; its CPU is the sum of those threads' utime + stime (`/proc/self/task/*/stat`), so the in-process
//!   agents' cost is not counted.
//! - Each agent is a real tonic client streaming batches every `BATCH_MS` in real time: five fast ticks and, once
//!   a second, the slow series. Every agent also carries one gauge (`cpu_utilization_ratio`) whose value encodes
//!   the batch's send time; a scraper reads `/metrics` in a loop and, for each new value, takes the time it first
//!   appeared: an upper bound of the delay from sample to `/metrics` (lower by at most one scrape's duration).
//!   The CPU and RSS figures come from a first window of `SECS` without scrapes; the delay from a second window
//!   of `DELAY_SECS` (15) with `/metrics` scraped back to back, whose extra CPU is reported per scrape.
//! - At the end the agents stop, wait for their last acks, and the batches each sent are compared with what it
//!   got acked and with the collector's `batches_total{result="accepted"}`: every batch acknowledged and counted
//!   once.
//! - "Keeps up" = every agent's ack lag stays under 2 s in the measured window (an acked sample is in the store,
//!   so visible to the next scrape) and every batch is acked. The lag of the warm-up (every agent connecting at
//!   once) and of the scrape window is reported beside it. The delay's upper bound also holds the scrape's own
//!   duration, which grows with the fleet (tens of MiB of exposition), so it is reported, not judged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::*;
use commwatch_collector::{start, CollectorConfig};
use commwatch_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Series id of the send-time marker gauge.
const MARKER_ID: u32 = 1_000_000;

/// Seconds since `epoch_ns`, the marker's value (small, so a ratio gauge holds it with ms precision).
fn marker_value(epoch_ns: i64, now_ns: i64) -> f64 {
    (now_ns - epoch_ns) as f64 / 1e9 / 10_000.0
}

/// CPU seconds (user + system) of the whole process (collector, agents, scraper).
fn process_cpu() -> f64 {
    std::fs::read_to_string("/proc/self/stat").map_or(0.0, |s| stat_cpu_s(&s))
}

/// CPU seconds (user + system) of this process's threads whose name starts with `prefix`.
fn threads_cpu(prefix: &str) -> f64 {
    let mut secs = 0.0;
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    for t in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with(prefix) {
            continue;
        }
        secs += stat_cpu_s(&stat);
    }
    secs
}

struct Shape {
    fast: u32,
    slow: u32,
    batch: Duration,
    epoch_ns: i64,
}

/// One batch: the fast ticks of the last `batch` period, the slow series on the first tick when `with_slow`,
/// the marker on the last tick.
fn batch(seq: u64, now_ns: i64, tick0: u64, with_slow: bool, s: &Shape) -> pb::SampleBatch {
    let ticks = (s.batch.as_millis() / 50).max(1) as u64;
    let mut b = pb::SampleBatch {
        seq,
        ..Default::default()
    };
    for k in 0..ticks {
        let t = tick0 + k;
        let ts = now_ns - (ticks - 1 - k) as i64 * 50_000_000;
        b.timestamps_unix_ns.push(ts);
        let mut n = 0;
        for id in 1..=s.fast {
            b.series_ids.push(id);
            b.values.push(t * 1_000_000 + u64::from(id));
            n += 1;
        }
        if with_slow && k == 0 {
            for id in s.fast + 1..=s.fast + s.slow {
                b.series_ids.push(id);
                b.values.push(t / 20 + u64::from(id));
                n += 1;
            }
        }
        if k == ticks - 1 {
            b.series_ids.push(MARKER_ID);
            b.values.push(marker_value(s.epoch_ns, now_ns).to_bits());
            n += 1;
        }
        b.tick_lengths.push(n);
    }
    b
}

/// Phases of a run, for the ack lag: warm-up (connects, hellos), the measured window, the scrape window.
const PHASES: usize = 3;

#[derive(Default)]
struct AgentResult {
    sent: u64,
    acked: u64,
    /// Largest ack lag seen per phase, in batches.
    max_lag: [u64; PHASES],
    /// Batches sent per phase, and of those how many while the lag was over 2 s.
    sent_in: [u64; PHASES],
    lagging_in: [u64; PHASES],
    failed: bool,
}

async fn agent(
    addr: std::net::SocketAddr,
    node: String,
    shape: Arc<Shape>,
    stop: Arc<AtomicBool>,
    phase: Duration,
    run_phase: Arc<AtomicU64>,
) -> AgentResult {
    let mut r = AgentResult::default();
    let Ok(client) = pb::ingest_client::IngestClient::connect(format!("http://{addr}")).await
    else {
        r.failed = true;
        return r;
    };
    let mut client = client.max_decoding_message_size(64 << 20);
    let (tx, rx) = mpsc::channel(64);
    let _ = tx
        .send(pb::AgentMessage {
            msg: Some(pb::agent_message::Msg::Hello(node_hello(
                node,
                "load",
                shape.fast,
                shape.slow,
                Some(MARKER_ID),
            ))),
        })
        .await;
    let Ok(resp) = client.stream(ReceiverStream::new(rx)).await else {
        r.failed = true;
        return r;
    };
    let mut replies = resp.into_inner();
    let acked = Arc::new(AtomicU64::new(0));
    let acked2 = acked.clone();
    let reader = tokio::spawn(async move {
        while let Ok(Some(m)) = replies.message().await {
            if let Some(pb::collector_message::Msg::Ack(a)) = m.msg {
                acked2.fetch_max(a.seq, Ordering::Relaxed);
            }
        }
    });
    // Spread the agents over the batch period.
    tokio::time::sleep(phase).await;
    let mut tick = tokio::time::interval(shape.batch);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let per_second = (1000 / shape.batch.as_millis().max(1)) as u64;
    let ticks_per_batch = (shape.batch.as_millis() / 50).max(1) as u64;
    let mut seq = 0u64;
    // Batches since the last one that carried the slow series (once a second).
    let mut since_slow = 0u64;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        seq += 1;
        let b = batch(
            seq,
            unix_ns(),
            (seq - 1) * ticks_per_batch,
            since_slow == 0,
            &shape,
        );
        since_slow += 1;
        if since_slow >= per_second {
            since_slow = 0;
        }
        if tx
            .send(pb::AgentMessage {
                msg: Some(pb::agent_message::Msg::Batch(b)),
            })
            .await
            .is_err()
        {
            r.failed = true;
            break;
        }
        let lag = seq.saturating_sub(acked.load(Ordering::Relaxed));
        let p = (run_phase.load(Ordering::Relaxed) as usize).min(PHASES - 1);
        r.max_lag[p] = r.max_lag[p].max(lag);
        r.sent_in[p] += 1;
        if lag as f64 * shape.batch.as_secs_f64() > 2.0 {
            r.lagging_in[p] += 1;
        }
    }
    r.sent = seq;
    // The last acks.
    let deadline = Instant::now() + Duration::from_secs(20);
    while acked.load(Ordering::Relaxed) < seq && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    r.acked = acked.load(Ordering::Relaxed);
    drop(tx);
    reader.abort();
    r
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let agents = env("AGENTS", 1000);
    let secs = env("SECS", 60);
    let shape = Arc::new(Shape {
        fast: env("FAST", 250) as u32,
        slow: env("SLOW", 250) as u32,
        batch: Duration::from_millis(env("BATCH_MS", 250)),
        epoch_ns: unix_ns(),
    });
    let collector_threads = env("COLLECTOR_THREADS", 2) as usize;
    let delay_secs = env("DELAY_SECS", 15);

    // The collector, on its own named threads.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let quit = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(Mutex::new(None));
    let (q2, stats2) = (quit.clone(), stats.clone());
    let collector = std::thread::Builder::new()
        .name("collector-main".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(collector_threads)
                .thread_name("collector")
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let cfg = CollectorConfig {
                    grpc_listen: "127.0.0.1:0".parse().unwrap(),
                    http_listen: "127.0.0.1:0".parse().unwrap(),
                    ..CollectorConfig::default()
                };
                let h = start(cfg).await.expect("collector");
                addr_tx.send((h.grpc_addr, h.http_addr)).unwrap();
                while !q2.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let m = h.store().memory();
                *stats2.lock().unwrap() = Some((h.ingest_stats(), m.series, m.bytes));
                h.shutdown().await;
            });
        })
        .expect("collector thread");
    let (grpc, http) = addr_rx.recv().unwrap();

    let agents_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("agents")
        .enable_all()
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let run_phase = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..agents)
        .map(|i| {
            let phase = shape.batch * (i as u32) / (agents.max(1) as u32);
            agents_rt.spawn(agent(
                grpc,
                format!("node-{i:05}"),
                shape.clone(),
                stop.clone(),
                phase,
                run_phase.clone(),
            ))
        })
        .collect();

    // The scraper: first appearance of each marker value in /metrics.
    let scrape_stop = Arc::new(AtomicBool::new(false));
    let scrape_go = Arc::new(AtomicBool::new(false));
    let scraper = {
        let stop = scrape_stop.clone();
        let go = scrape_go.clone();
        let epoch_ns = shape.epoch_ns;
        std::thread::spawn(move || {
            let client = reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap();
            let url = format!("http://{http}/metrics");
            let mut last: HashMap<String, f64> = HashMap::new();
            let mut delays = Vec::new();
            let mut scrapes = Vec::new();
            while !go.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
            }
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let Ok(text) = client.get(&url).send().and_then(|r| r.text()) else {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                };
                let seen_ns = unix_ns();
                scrapes.push((t0.elapsed().as_secs_f64(), text.len()));
                for line in text.lines() {
                    let Some(rest) = line.strip_prefix("commwatch_node_cpu_utilization_ratio{")
                    else {
                        continue;
                    };
                    let Some((labels, v)) = rest.rsplit_once(' ') else {
                        continue;
                    };
                    let Ok(v) = v.parse::<f64>() else { continue };
                    if last.get(labels) != Some(&v) {
                        if last.contains_key(labels) {
                            let sent_ns = epoch_ns + (v * 10_000.0 * 1e9) as i64;
                            delays.push((seen_ns - sent_ns) as f64 / 1e9);
                        }
                        last.insert(labels.to_string(), v);
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            (delays, scrapes, last.len())
        })
    };

    // Warm-up (connects, hellos), then the measured window.
    std::thread::sleep(Duration::from_secs(5));
    run_phase.store(1, Ordering::Relaxed);
    let (cpu0, all0, t0) = (threads_cpu("collector"), process_cpu(), Instant::now());
    let mut rss_max = 0;
    while t0.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(1));
        rss_max = rss_max.max(rss_bytes());
    }
    let (cpu1, all1, window) = (
        threads_cpu("collector"),
        process_cpu(),
        t0.elapsed().as_secs_f64(),
    );
    // Delay phase: /metrics scraped back to back (this costs the collector CPU too, reported per scrape).
    scrape_go.store(true, Ordering::Relaxed);
    run_phase.store(2, Ordering::Relaxed);
    let (cpu2, t2) = (threads_cpu("collector"), Instant::now());
    std::thread::sleep(Duration::from_secs(delay_secs));
    let (cpu3, window2) = (threads_cpu("collector"), t2.elapsed().as_secs_f64());
    scrape_stop.store(true, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let results: Vec<AgentResult> = agents_rt.block_on(async {
        let mut v = Vec::new();
        for t in tasks {
            v.push(t.await.unwrap_or(AgentResult {
                failed: true,
                ..Default::default()
            }));
        }
        v
    });
    let (mut delays, scrapes, markers) = scraper.join().unwrap();
    quit.store(true, Ordering::Relaxed);
    collector.join().unwrap();
    let (ingest, series, store_bytes) = stats.lock().unwrap().take().expect("collector stats");

    let sent: u64 = results.iter().map(|r| r.sent).sum();
    let acked: u64 = results.iter().map(|r| r.acked).sum();
    let failed = results.iter().filter(|r| r.failed).count();
    let max_lag: Vec<u64> = (0..PHASES)
        .map(|p| results.iter().map(|r| r.max_lag[p]).max().unwrap_or(0))
        .collect();
    let share_lagging: Vec<f64> = (0..PHASES)
        .map(|p| {
            let sent: u64 = results.iter().map(|r| r.sent_in[p]).sum();
            let lagging: u64 = results.iter().map(|r| r.lagging_in[p]).sum();
            lagging as f64 / sent.max(1) as f64
        })
        .collect();
    delays.sort_by(f64::total_cmp);
    let scrape_s: Vec<f64> = scrapes.iter().map(|s| s.0).collect();
    let scrape_mean = scrape_s.iter().sum::<f64>() / scrape_s.len().max(1) as f64;
    let scrape_bytes = scrapes.last().map_or(0, |s| s.1);
    let lag_s: Vec<f64> = max_lag
        .iter()
        .map(|&l| l as f64 * shape.batch.as_secs_f64())
        .collect();
    let p99 = percentile(&delays, 0.99);
    let samples_per_s = f64::from(shape.fast) * 20.0 + f64::from(shape.slow) + 4.0;

    println!(
        "load: {agents} agents x ({} fast at 20 Hz + {} slow at 1 Hz) series, batches every {} ms, {:.0} s measured ({:.0} s in all)",
        shape.fast,
        shape.slow,
        shape.batch.as_millis(),
        window,
        started.elapsed().as_secs_f64()
    );
    println!(
        "offered: {:.2} M samples/s, {:.0} batches/s",
        agents as f64 * samples_per_s / 1e6,
        agents as f64 / shape.batch.as_secs_f64()
    );
    println!(
        "batches: {sent} sent, {acked} acked, collector accepted {} (duplicate {}, rejected {}), gaps {}, failed agents {failed}",
        ingest.batches_accepted, ingest.batches_duplicate, ingest.batches_rejected, ingest.gap_batches
    );
    println!(
        "every batch acknowledged and counted once: {}",
        sent == acked && acked == ingest.batches_accepted && ingest.batches_duplicate == 0
    );
    println!(
        "collector CPU: {:.2} cores ({:.1} s over {:.0} s; the whole process, agents included, {:.2} of {} cores); \
         process RSS max {:.0} MiB; store {} series, {:.0} MiB",
        (cpu1 - cpu0) / window,
        cpu1 - cpu0,
        window,
        (all1 - all0) / window,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        rss_max as f64 / (1 << 20) as f64,
        series,
        store_bytes as f64 / (1 << 20) as f64
    );
    println!(
        "with /metrics scraped back to back for {window2:.0} s: collector CPU {:.2} cores, {:.3} CPU-s per scrape",
        (cpu3 - cpu2) / window2,
        ((cpu3 - cpu2) - (cpu1 - cpu0) / window * window2) / scrapes.len().max(1) as f64
    );
    println!(
        "sample -> /metrics delay (upper bound): p50 {:.3} s, p99 {:.3} s, max {:.3} s over {} samples of {markers} markers; \
         {} scrapes of {:.1} MiB, mean {:.3} s",
        percentile(&delays, 0.5),
        p99,
        delays.last().copied().unwrap_or(f64::NAN),
        delays.len(),
        scrapes.len(),
        scrape_bytes as f64 / (1 << 20) as f64,
        scrape_mean
    );
    println!(
        "largest ack lag: warm-up {:.2} s, measured window {:.2} s ({:.3} % of batches sent over 2 s behind), \
         scrape window {:.2} s ({:.3} %)",
        lag_s[0],
        lag_s[1],
        share_lagging[1] * 100.0,
        lag_s[2],
        share_lagging[2] * 100.0
    );
    println!(
        "keeps up (measured window: ack lag under 2 s, every batch acked): {}",
        lag_s[1] < 2.0 && failed == 0 && sent == acked
    );
}
