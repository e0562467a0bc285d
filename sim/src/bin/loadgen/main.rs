//! `loadgen`: many simulated agents in one process, replaying one real node's pre-encoded batches to one or
//! more collectors, so a benchmark measures the collector and not the agents.
//!
//! `cargo run --release -p commwatch-sim --bin loadgen -- --collector http://127.0.0.1:7070 --nodes 2000`
//!
//! 1. Captures the node shape: a real agent on the first node of the sim's demo cluster (8 GPUs), shipping to
//!    an in-process recorder for `--capture` ([`capture`]).
//! 2. Builds the [`tape`]: the captured batches, replayed lap after lap with timestamps moved to now and
//!    counters kept rising. One encoding per batch period for the whole fleet; every agent sends the same
//!    bytes with its own sequence number appended.
//! 3. Opens one gRPC stream per simulated node ([`conn`]; from its own loopback source address when the
//!    collector is on loopback, since collectors limit connections per address), sends its `Hello` (its own
//!    node name and instance id) and job list (nodes grouped `--nodes-per-job` to a job), then a batch every
//!    batch period, spread over the period. Each node ships to its shard: rendezvous hashing on its job id over
//!    the `--collector` list, as the agent does.
//! 4. After `--warmup`, measures `--secs`: every batch's ack latency (send → first ack at or above its seq),
//!    per shard and overall (p50, p99, max, how many after 1 s), batches sent/acked/blocked, failed streams (a
//!    stream that fails during the warm-up is opened again a second later, as an agent reconnects: counted),
//!    and with `--pid` the collectors' CPU and RSS over the window. "Keeps up": every measured batch acked
//!    within 1 s, none blocked, no stream failed.
//!
//! Run the collector pinned to one core and the generator on another
//! (`taskset -c 0 commwatch collector ...`, `taskset -c 1 loadgen ...`); `scripts/bench-shards.sh` does.

mod capture;
mod conn;
mod report;
mod tape;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use commwatch_agent::shipper::shard;
use commwatch_proto::v1 as pb;
use prost::bytes::Bytes;
use tokio::time::Instant;

use report::Figures;
use tape::{encode_message, Tape};

#[derive(Parser, Debug)]
#[command(
    about = "Replay one simulated node's batches from many agent streams, measuring ack latency"
)]
struct Args {
    /// Collector URL; several (shards): repeat or separate by commas.
    #[arg(long, value_delimiter = ',', required_unless_present = "dump_tape")]
    collector: Vec<String>,
    /// Simulated nodes (one gRPC stream each).
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Nodes per training job (the shard key).
    #[arg(long, default_value_t = 8)]
    nodes_per_job: usize,
    /// Seconds measured after the warm-up.
    #[arg(long, default_value_t = 60)]
    secs: u64,
    /// Seconds of warm-up (connects, Hellos) not measured.
    #[arg(long, default_value_t = 10)]
    warmup: u64,
    /// How long the real agent is recorded for the node shape.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    capture: Duration,
    /// How often each simulated agent ships a batch (the agent's `batch_period`; its default when not given).
    #[arg(long, value_parser = humantime::parse_duration)]
    batch_period: Option<Duration>,
    /// Worker threads of the generator's runtime.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Collector process ids whose CPU and RSS are reported over the measured window.
    #[arg(long, value_delimiter = ',')]
    pid: Vec<u32>,
    /// `text` or `json`.
    #[arg(long, default_value = "text")]
    format: String,
    /// Write the node's `Hello` and `--dump-secs` of its batches to this file instead of connecting (each a
    /// length-delimited `AgentMessage`), for the store's in-process measurement (`measure::apply_cost`, `TAPE`).
    #[arg(long)]
    dump_tape: Option<std::path::PathBuf>,
    /// Seconds of batches `--dump-tape` writes.
    #[arg(long, default_value_t = 660)]
    dump_secs: u64,
}

/// The shared batch bodies: the tape's body for the current slot, encoded once per slot.
pub struct Slots {
    pub period: Duration,
    start: Instant,
    start_ns: i64,
    tape: Tape,
    /// The newest encoded slots, newest last.
    cache: Mutex<Vec<(u64, Bytes)>>,
}

impl Slots {
    /// The body of the slot now.
    pub fn body(&self) -> Bytes {
        let slot = (self.start.elapsed().as_nanos() / self.period.as_nanos().max(1)) as u64;
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, b)) = cache.iter().find(|(s, _)| *s == slot) {
            return b.clone();
        }
        let b = self.tape.body(slot, self.start_ns);
        cache.push((slot, b.clone()));
        if cache.len() > 4 {
            cache.remove(0);
        }
        b
    }
}

fn unix_now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.nodes > 0 && args.nodes_per_job > 0,
        "--nodes and --nodes-per-job must be at least 1"
    );
    anyhow::ensure!(
        args.format == "text" || args.format == "json",
        "--format is text or json"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let urls: Vec<String> = shard::parse_list(&args.collector.join(","));
    let batch_period = args
        .batch_period
        .unwrap_or_else(|| commwatch_agent::AgentConfig::default().batch_period);
    eprintln!(
        "capturing the node shape for {:?} (a batch every {batch_period:?})...",
        args.capture
    );
    let cap = capture::capture(args.capture, batch_period).await?;
    let tape = Tape::new(
        cap.batches.clone(),
        &cap.series,
        batch_period.as_nanos() as i64,
    )?;
    eprintln!(
        "node shape: {} series described, {} batches captured, {} samples per lap ({:.0} per second)",
        cap.series.len(),
        tape.len(),
        tape.samples_per_lap(),
        tape.samples_per_lap() as f64 / (tape.len() as f64 * batch_period.as_secs_f64())
    );
    let samples_per_s =
        tape.samples_per_lap() as f64 / (tape.len() as f64 * batch_period.as_secs_f64());
    if let Some(path) = &args.dump_tape {
        let slots = args.dump_secs * 1_000 / batch_period.as_millis().max(1) as u64;
        return dump_tape(path, &cap, &tape, slots);
    }
    let slots = Arc::new(Slots {
        period: batch_period,
        start: Instant::now(),
        start_ns: unix_now_ns(),
        tape,
        cache: Mutex::new(Vec::new()),
    });
    let warmup_end = Instant::now() + Duration::from_secs(args.warmup);
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::with_capacity(args.nodes);
    let mut shard_of = Vec::with_capacity(args.nodes);
    for i in 0..args.nodes {
        let (plan, shard) = plan(&args, &urls, &cap, i, batch_period);
        shard_of.push(shard);
        tasks.push(tokio::spawn(conn::run_agent(
            plan,
            slots.clone(),
            warmup_end,
            stop.clone(),
        )));
    }
    tokio::time::sleep_until(warmup_end).await;
    let before = usage(&args.pid);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.secs)).await;
    let after = usage(&args.pid);
    let window = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut stats = Vec::with_capacity(tasks.len());
    for t in tasks {
        stats.push(t.await?);
    }
    print_report(
        &args,
        &urls,
        &shard_of,
        &stats,
        samples_per_s,
        (before, after, window),
    )
}

/// Writes the node's `Hello` (every series the capture described) and the tape's first `slots` batches
/// (numbered from 1, timestamps from now) to `path`, each a length-delimited `AgentMessage`.
fn dump_tape(
    path: &std::path::Path,
    cap: &capture::Capture,
    tape: &Tape,
    slots: u64,
) -> anyhow::Result<()> {
    use prost::Message as _;
    let mut hello = cap.hello.clone().unwrap_or_default();
    hello.inventory.get_or_insert_with(Default::default).series = cap.series.clone();
    let mut out = Vec::new();
    pb::AgentMessage {
        msg: Some(pb::agent_message::Msg::Hello(hello)),
    }
    .encode_length_delimited(&mut out)?;
    let start_ns = unix_now_ns();
    for slot in 0..slots {
        let mut msg = Vec::new();
        tape::frame_batch(slot + 1, &tape.body(slot, start_ns), &mut msg);
        prost::encoding::encode_varint(msg.len() as u64, &mut out);
        out.extend_from_slice(&msg);
    }
    std::fs::write(path, &out)?;
    eprintln!(
        "wrote {slots} batches ({} bytes) to {}",
        out.len(),
        path.display()
    );
    Ok(())
}

/// Node `i`'s stream: its shard, source address, Hello and job list.
fn plan(
    args: &Args,
    urls: &[String],
    cap: &capture::Capture,
    i: usize,
    period: Duration,
) -> (conn::Plan, usize) {
    let job = format!("load-job-{:05}", i / args.nodes_per_job);
    let shard = shard::order(&job, urls)[0];
    let url = urls[shard].clone();
    let mut hello = cap.hello.clone().unwrap_or_default();
    hello.node = format!("load-{i:05}");
    hello.instance_id = i as u64 + 1;
    hello.boot_id = format!("loadgen-{i}");
    let mut opening = vec![encode_message(pb::agent_message::Msg::Hello(hello))];
    if let Some(mut jobs) = cap.jobs.clone() {
        jobs.jobs.truncate(1);
        for j in &mut jobs.jobs {
            j.id = job.clone();
            let per_node = j.ranks.len() as u32;
            let offset = (i % args.nodes_per_job) as u32 * per_node;
            for r in &mut j.ranks {
                r.rank = r.rank.map(|x| x % per_node.max(1) + offset);
                r.world_size = Some(per_node * args.nodes_per_job as u32);
            }
        }
        opening.push(encode_message(pb::agent_message::Msg::InventoryUpdate(
            pb::InventoryUpdate {
                inventory: None,
                jobs: Some(jobs),
            },
        )));
    }
    let loopback = urls[shard].contains("://127.") || urls[shard].contains("://localhost");
    let local =
        loopback.then(|| IpAddr::V4(Ipv4Addr::new(127, 1, (i / 200) as u8, 1 + (i % 200) as u8)));
    let phase = period.mul_f64((i as f64 * 0.618_034).fract());
    (
        conn::Plan {
            url,
            local,
            opening,
            phase,
        },
        shard,
    )
}

type Usage = Vec<Option<(f64, u64)>>;

fn usage(pids: &[u32]) -> Usage {
    pids.iter().map(|p| report::proc_usage(Some(*p))).collect()
}

fn print_report(
    args: &Args,
    urls: &[String],
    shard_of: &[usize],
    stats: &[conn::AgentStats],
    samples_per_s: f64,
    (before, after, window): (Usage, Usage, f64),
) -> anyhow::Result<()> {
    let total = Figures::of(stats.iter());
    let shards: Vec<(String, Figures)> = urls
        .iter()
        .enumerate()
        .map(|(k, u)| {
            let f = Figures::of(
                stats
                    .iter()
                    .zip(shard_of)
                    .filter(|(_, &s)| s == k)
                    .map(|(s, _)| s),
            );
            (u.clone(), f)
        })
        .collect();
    let collectors: Vec<serde_json::Value> = args
        .pid
        .iter()
        .zip(before.iter().zip(&after))
        .map(|(pid, (b, a))| match (b, a) {
            (Some((c0, _)), Some((c1, rss))) => serde_json::json!({
                "pid": pid, "cpu_cores": (c1 - c0) / window, "rss_mib": *rss as f64 / 1048576.0 }),
            _ => serde_json::json!({ "pid": pid, "error": "process not readable" }),
        })
        .collect();
    let own = report::proc_usage(None).map_or(0.0, |u| u.0);
    if args.format == "json" {
        let doc = serde_json::json!({
            "nodes": args.nodes, "secs": args.secs, "samples_per_second_offered": samples_per_s * args.nodes as f64,
            "total": total, "shards": shards.iter().map(|(u, f)| serde_json::json!({"url": u, "figures": f})).collect::<Vec<_>>(),
            "collectors": collectors, "generator_cpu_s": own,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "{} nodes, {} shard(s), {:.0} samples/s offered ({:.0} per node), {} s measured after {} s warm-up",
        args.nodes, urls.len(), samples_per_s * args.nodes as f64, samples_per_s, args.secs, args.warmup
    );
    for (u, f) in &shards {
        println!("{}", f.line(u));
    }
    println!("{}", total.line("total"));
    for c in &collectors {
        println!("collector {c}");
    }
    println!("generator CPU: {own:.1} s over the whole run (capture included)");
    print!("{}", report::errors(stats.iter()));
    Ok(())
}
