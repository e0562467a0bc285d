//! Ingest throughput and memory per series, through the real gRPC stream on loopback.
//!
//! `cargo bench -p commwatch-collector --bench ingest` (env: `AGENTS` (default 100), `SERIES` per agent (1000),
//! `TICKS` per batch (5), `SECS` measured (10), `MEM_SERIES` for the memory phase (2000), `PACE_MS` (0)).
//!
//! With `PACE_MS` > 0 each agent sends a batch every that many milliseconds (as agents do: 250) instead of as
//! fast as the collector takes them, and the throughput phase also says the collector thread's CPU time per
//! batch and per agent and second: the whole stream path (HTTP/2, the codec, validation, the store's apply,
//! the acks) on one thread, a figure the load beside it moves less than the throughput.
//!
//! The throughput phase runs twice in one run: with the step engine off (`steps_interval = 0`) and with it on
//! (the default 500 ms), so the engine's cost on ingest is read from one run. The byte counters carry a
//! step-periodic burst (7 of every 14 ticks), so the engine infers steps and computes per-step figures for
//! every link while ingest runs.
//!
//! The collector runs on a *current-thread* tokio runtime in its own OS thread, so it uses at most one core;
//! the fake agents run on a separate multi-thread runtime (they compete for the remaining cores).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::*;
use commwatch_collector::{start, CollectorConfig};
use commwatch_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

fn batch(seq: u64, first_tick: u64, ticks: u64, series: u32) -> pb::SampleBatch {
    let n = ticks as usize * series as usize;
    let mut b = pb::SampleBatch {
        seq,
        timestamps_unix_ns: Vec::with_capacity(ticks as usize),
        tick_lengths: Vec::with_capacity(ticks as usize),
        series_ids: Vec::with_capacity(n),
        values: Vec::with_capacity(n),
        ..Default::default()
    };
    for t in first_tick..first_tick + ticks {
        b.timestamps_unix_ns
            .push(1_700_000_000_000_000_000 + t as i64 * 50_000_000);
        b.tick_lengths.push(series);
        for id in 1..=series {
            b.series_ids.push(id);
            b.values.push(match (id - 1) % 10 {
                // tx_bytes / rx_bytes: 100 MB per tick in 7 of every 14 ticks, 50 kB per tick always.
                0 | 1 => {
                    (t / 14) * 7 * 100_000_000
                        + (t % 14).saturating_sub(7) * 100_000_000
                        + t * 50_000
                }
                _ => t * 1_000_000 + u64::from(id),
            });
        }
    }
    b
}

/// Streams batches as fast as the collector takes them until `stop`; returns batches sent.
async fn agent(
    addr: std::net::SocketAddr,
    node: String,
    series: u32,
    ticks: u64,
    pace: Duration,
    stop: Arc<AtomicBool>,
) -> u64 {
    let mut client = pb::ingest_client::IngestClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
        .max_decoding_message_size(64 << 20);
    let (tx, rx) = mpsc::channel(4);
    tx.send(pb::AgentMessage {
        msg: Some(pb::agent_message::Msg::Hello(node_hello(
            node, "bench", series, 0, None,
        ))),
    })
    .await
    .unwrap();
    let mut replies = client
        .stream(ReceiverStream::new(rx))
        .await
        .expect("stream")
        .into_inner();
    tokio::spawn(async move { while let Ok(Some(_)) = replies.message().await {} });
    let mut seq = 0;
    let start = tokio::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if !pace.is_zero() {
            tokio::time::sleep_until(start + pace * seq as u32).await;
        }
        seq += 1;
        let b = batch(seq, (seq - 1) * ticks, ticks, series);
        if tx
            .send(pb::AgentMessage {
                msg: Some(pb::agent_message::Msg::Batch(b)),
            })
            .await
            .is_err()
        {
            break;
        }
    }
    seq
}

/// A collector on a current-thread runtime in its own OS thread.
struct Running {
    addr: std::net::SocketAddr,
    samples: Arc<AtomicU64>,
    store_bytes: Arc<AtomicU64>,
    steps: Arc<AtomicU64>,
    /// The collector thread's CPU time, ns, and the batches it accepted, read together.
    cpu: Arc<(AtomicU64, AtomicU64)>,
    quit: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

fn start_collector(steps_interval: Duration) -> Running {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let samples = Arc::new(AtomicU64::new(0));
    let store_bytes = Arc::new(AtomicU64::new(0));
    let steps = Arc::new(AtomicU64::new(0));
    let quit = Arc::new(AtomicBool::new(false));
    let cpu = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let (s2, b2, st2, q2, c2) = (
        samples.clone(),
        store_bytes.clone(),
        steps.clone(),
        quit.clone(),
        cpu.clone(),
    );
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let cfg = CollectorConfig {
                grpc_listen: "127.0.0.1:0".parse().unwrap(),
                http_listen: "127.0.0.1:0".parse().unwrap(),
                steps_interval,
                ..CollectorConfig::default()
            };
            let h = start(cfg).await.expect("collector");
            addr_tx.send(h.grpc_addr).unwrap();
            let thread_cpu = || commwatch_collector::pace::thread_cpu_ns().unwrap_or(0);
            // The thread's CPU time in this loop (a walk over every node's memory among it): not the
            // collector's, left out of its figure.
            let mut polling_ns = 0;
            while !q2.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let p0 = thread_cpu();
                let stats = h.ingest_stats();
                s2.store(stats.samples, Ordering::Relaxed);
                c2.0.store(p0 - polling_ns, Ordering::Relaxed);
                c2.1.store(stats.batches_accepted, Ordering::Relaxed);
                b2.store(h.store().memory().bytes as u64, Ordering::Relaxed);
                let n: u64 = h
                    .steps()
                    .node_names()
                    .iter()
                    .filter_map(|n| h.steps().steps_total(n))
                    .map(|(m, i)| m + i)
                    .sum();
                st2.store(n, Ordering::Relaxed);
                polling_ns += thread_cpu() - p0;
            }
            let m = h.store().memory();
            println!(
                "store accounting: {} series, {} samples, {:.1} MiB ({:.1} B/sample incl. overhead)",
                m.series,
                m.samples,
                m.bytes as f64 / (1 << 20) as f64,
                m.bytes as f64 / m.samples.max(1) as f64
            );
            h.shutdown().await;
        });
    });
    let addr = addr_rx.recv().unwrap();
    Running {
        addr,
        samples,
        store_bytes,
        steps,
        cpu,
        quit,
        thread,
    }
}

/// Throughput phase against `c`: samples/s over `secs` after a 2 s warm-up.
fn throughput(
    c: &Running,
    agents_rt: &tokio::runtime::Runtime,
    agents: u64,
    series: u32,
    ticks: u64,
    secs: u64,
    label: &str,
) -> f64 {
    let addr = c.addr;
    let pace = Duration::from_millis(env("PACE_MS", 0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..agents)
        .map(|i| {
            agents_rt.spawn(agent(
                addr,
                format!("node-{i:04}"),
                series,
                ticks,
                pace,
                stop.clone(),
            ))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2)); // warm-up: connects, hellos, ring growth
    let cpu = || {
        (
            c.cpu.0.load(Ordering::Relaxed),
            c.cpu.1.load(Ordering::Relaxed),
        )
    };
    let (s0, st0, cpu0, t0) = (
        c.samples.load(Ordering::Relaxed),
        c.steps.load(Ordering::Relaxed),
        cpu(),
        Instant::now(),
    );
    std::thread::sleep(Duration::from_secs(secs));
    let (s1, st1, cpu1, dt) = (
        c.samples.load(Ordering::Relaxed),
        c.steps.load(Ordering::Relaxed),
        cpu(),
        t0.elapsed(),
    );
    stop.store(true, Ordering::Relaxed);
    let sent: u64 = agents_rt.block_on(async {
        let mut n = 0;
        for t in tasks {
            n += t.await.unwrap_or(0);
        }
        n
    });
    let rate = (s1 - s0) as f64 / dt.as_secs_f64();
    if !pace.is_zero() {
        let (ns, batches) = (cpu1.0 - cpu0.0, (cpu1.1 - cpu0.1).max(1));
        println!(
            "collector thread CPU ({label}, a batch every {} ms): {:.1} us per batch, {:.1} us per agent and \
             second, {:.3} cores ({batches} batches)",
            pace.as_millis(),
            ns as f64 / 1e3 / batches as f64,
            ns as f64 / 1e3 / (agents as f64 * dt.as_secs_f64()),
            ns as f64 / 1e9 / dt.as_secs_f64()
        );
    }
    println!(
        "throughput ({label}): {agents} agents x {series} series, {ticks} ticks/batch: {:.2} M samples/s \
         ({:.0} batches/s, {sent} batches sent, {} steps found) over {:.1} s",
        rate / 1e6,
        rate / (series as f64 * ticks as f64),
        st1 - st0,
        dt.as_secs_f64()
    );
    rate
}

fn main() {
    let agents = env("AGENTS", 100);
    let series = env("SERIES", 1000) as u32;
    let ticks = env("TICKS", 5);
    let secs = env("SECS", 10);
    let mem_series = env("MEM_SERIES", 2000) as u32;
    let agents_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // Phase 1: throughput, step engine off, then on (fresh collectors).
    let off = start_collector(Duration::ZERO);
    let rate_off = throughput(
        &off,
        &agents_rt,
        agents,
        series,
        ticks,
        secs,
        "step engine off",
    );
    off.quit.store(true, Ordering::Relaxed);
    off.thread.join().unwrap();
    let c = start_collector(Duration::from_millis(500));
    let rate_on = throughput(
        &c,
        &agents_rt,
        agents,
        series,
        ticks,
        secs,
        "step engine on",
    );
    println!(
        "step engine cost on ingest: {:+.1}% ({:.2} vs {:.2} M samples/s)",
        (rate_on / rate_off - 1.0) * 100.0,
        rate_on / 1e6,
        rate_off / 1e6
    );
    let (addr, samples, store_bytes, quit, collector) =
        (c.addr, c.samples, c.store_bytes, c.quit, c.thread);

    // Phase 2: memory per series at the default retention (10 min at 20 Hz = 12000 samples per series).
    let rss0 = rss_bytes();
    let bytes0 = store_bytes.load(Ordering::Relaxed);
    let samples_before = samples.load(Ordering::Relaxed);
    agents_rt.block_on(async {
        let mut client = pb::ingest_client::IngestClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let (tx, rx) = mpsc::channel(2);
        tx.send(pb::AgentMessage {
            msg: Some(pb::agent_message::Msg::Hello(node_hello(
                "mem".into(),
                "bench",
                mem_series,
                0,
                None,
            ))),
        })
        .await
        .unwrap();
        let mut replies = client
            .stream(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let total_ticks = 12_000u64;
        let per_batch = (3_000_000 / (mem_series as u64 * 13)).max(1);
        let mut seq = 0;
        let mut t = 0;
        while t < total_ticks {
            seq += 1;
            let n = per_batch.min(total_ticks - t);
            tx.send(pb::AgentMessage {
                msg: Some(pb::agent_message::Msg::Batch(batch(seq, t, n, mem_series))),
            })
            .await
            .unwrap();
            t += n;
        }
        while let Ok(Some(m)) = replies.message().await {
            if let Some(pb::collector_message::Msg::Ack(a)) = m.msg {
                if a.seq == seq {
                    break;
                }
            }
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let rss1 = rss_bytes();
    let bytes1 = store_bytes.load(Ordering::Relaxed);
    let filled = samples.load(Ordering::Relaxed) - samples_before;
    println!(
        "memory: {mem_series} series x 12000 samples ({filled} ingested): RSS +{:.1} MiB = {:.0} KiB/series; \
         store accounting +{:.0} KiB/series",
        (rss1.saturating_sub(rss0)) as f64 / (1 << 20) as f64,
        rss1.saturating_sub(rss0) as f64 / mem_series as f64 / 1024.0,
        bytes1.saturating_sub(bytes0) as f64 / mem_series as f64 / 1024.0
    );
    quit.store(true, Ordering::Relaxed);
    collector.join().unwrap();
}
