//! `/metrics` rendering at fleet scale: the text writer (`Exposition::render`) against the previous path
//! (`MetricFamily` per family, one `Metric` and owned `LabelPair`s per series, `Registry::gather`, `TextEncoder`)
//! on the same store, in one run.
//!
//! `cargo bench -p commwatch-collector --bench exposition` (env: `NODES` (default 1000), `SERIES` per node (500),
//! `REPS` (5)).
//!
//! The store is filled through the real gRPC stream: every node is an agent of the load bench's shape (`SERIES`
//! link counters on `SERIES / 10` InfiniBand links, plus the `cpu_utilization_ratio` gauge) that sends its
//! `Hello` and one batch of five ticks, waits for the ack and disconnects; nothing is ingested while the
//! renders run. Each repetition renders once each way (alternating which goes first) with a fresh health
//! registry, checks that both texts are equal byte for byte, and times them: wall time and the calling thread's
//! CPU time (`/proc/thread-self/stat`, 10 ms resolution); the store snapshot both start with is timed apart.
//! Then `/metrics` is fetched over HTTP from the running collector (render, transfer and read of the whole
//! body).
//!
//! Last, one remote-write gather of the same store each way, once each, in one run: the previous path (render
//! the text, read it back with the text parser remote write used, `remote_write/parse.rs`, now test-only) and
//! the typed gather (`Exposition::gather`, the stage the text writer reads, its samples handed straight on).
//! Timed twice: the gather alone (text rendered and parsed into owned samples, against a walk of the typed
//! samples), and up to remote write's series (`GatherSeries`: labels sorted, external labels, stamps), the
//! series of both checked equal; the encoding into requests, the same for both, is timed apart. Per gather and
//! per series, wall time and the thread's CPU time.
//!
//! With `TAPE=FILE` (written by `loadgen --dump-tape FILE`: a real demo agent's `Hello` and batches) the store
//! is `NODES` (default 2000) copies of that agent instead, every batch of the tape applied in process
//! (`DirectAgent`, its clock moved so that the newest batch is now), and the renders are a scrape's, served
//! four ways, each through its own exposition (its gather's buffers kept), in an order rotated over `REPS` (4)
//! reps after one scrape each: gzip as before (the whole text rendered into a kept buffer, `render_into`, then
//! `gzip_fast`), gzip as `/metrics` serves it now (`render_gzip`: the text compressed in pieces as it is
//! written, the compressed bytes in a kept buffer), the plain text as before (`render`: a buffer of its own)
//! and as now (`render_plain`: a kept buffer lent to the body). Per scrape the thread's CPU time and minor page
//! faults (`getrusage(RUSAGE_THREAD)`), and the growth of the process's peak resident memory during it
//! (`VmHWM`, reset before each). Between scrapes 15 s apart the collector's allocator (jemalloc, 10 s dirty
//! decay) has returned a freed buffer's pages to the kernel; here the bench's allocator does the same at once
//! (`FreshLarge`: every block of 256 KiB or more mapped on its own and unmapped when freed), so a buffer
//! allocated afresh is fresh pages, as in the collector. The texts of all four (decompressed where gzipped) are
//! checked equal byte for byte (and once against the reference encoder), and the time of the store's snapshot
//! and of its export detail (the same in every way) is given apart.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use commwatch_collector::export::exposition::{Exposition, SampleRef, StoreDescs};
use commwatch_collector::remote_write::encode::TimeSeries;
use commwatch_collector::remote_write::series::{Finished, GatherSeries, Previous};
use commwatch_collector::store::Store;
use commwatch_collector::telemetry::Health;
use commwatch_collector::{start, CollectorConfig, CollectorHandle};
use commwatch_proto::v1 as pb;
use prometheus::TextEncoder;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

mod common;
use common::*;

// The reference encoder: the file the library's tests compile. It names the library's items by `crate::` paths,
// which the modules imported here make resolve in this bench.
#[path = "../src/export/exposition/reference.rs"]
mod reference;
use commwatch_collector::{export, store};

// The text reader remote write used before its typed gather (test-only now), for the previous path.
#[path = "../src/remote_write/parse.rs"]
mod parse;

const CPU_ID: u32 = 1_000_000;
const TICKS: u64 = 5;

/// CPU time (user + system) of the calling thread, seconds.
fn thread_cpu_s() -> f64 {
    std::fs::read_to_string("/proc/thread-self/stat").map_or(0.0, |s| stat_cpu_s(&s))
}

fn batch(series: u32, node: u64) -> pb::SampleBatch {
    let now = unix_ns();
    let mut b = pb::SampleBatch {
        seq: 1,
        ..Default::default()
    };
    for t in 0..TICKS {
        b.timestamps_unix_ns
            .push(now - (TICKS - 1 - t) as i64 * 50_000_000);
        for id in 1..=series {
            b.series_ids.push(id);
            b.values
                .push((t + 1) * 1_234_567 * u64::from(id) + node * 1_000_003);
        }
        b.series_ids.push(CPU_ID);
        b.values
            .push((0.01 * (node % 100) as f64 + 0.001 * t as f64).to_bits());
        b.tick_lengths.push(series + 1);
    }
    b
}

/// One agent: `Hello`, one batch, wait for its ack (at most 30 s), disconnect.
async fn agent(addr: std::net::SocketAddr, node: u64, series: u32) -> bool {
    let Ok(client) = pb::ingest_client::IngestClient::connect(format!("http://{addr}")).await
    else {
        return false;
    };
    let mut client = client.max_decoding_message_size(64 << 20);
    let (tx, rx) = mpsc::channel(4);
    for msg in [
        pb::agent_message::Msg::Hello(node_hello(
            format!("node-{node:04}"),
            "exposition",
            series,
            0,
            Some(CPU_ID),
        )),
        pb::agent_message::Msg::Batch(batch(series, node)),
    ] {
        if tx.send(pb::AgentMessage { msg: Some(msg) }).await.is_err() {
            return false;
        }
    }
    let Ok(replies) = client.stream(ReceiverStream::new(rx)).await else {
        return false;
    };
    let mut replies = replies.into_inner();
    let acked = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(m)) = replies.message().await {
            if let Some(pb::collector_message::Msg::Ack(a)) = m.msg {
                if a.seq >= 1 {
                    return true;
                }
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    drop(tx);
    acked
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Fills the collector with `nodes` agents of `series` series each (64 at a time); returns how many were acked.
fn fill(rt: &tokio::runtime::Runtime, handle: &CollectorHandle, nodes: u64, series: u32) -> u64 {
    rt.block_on(async {
        let addr = handle.grpc_addr;
        let gate = Arc::new(tokio::sync::Semaphore::new(64));
        let tasks: Vec<_> = (0..nodes)
            .map(|i| {
                let gate = gate.clone();
                tokio::spawn(async move {
                    let _permit = gate.acquire_owned().await;
                    agent(addr, i, series).await
                })
            })
            .collect();
        let mut n = 0;
        for t in tasks {
            n += u64::from(t.await.unwrap_or(false));
        }
        n
    })
}

/// One repetition's figures, seconds.
struct Rep {
    old_wall: f64,
    old_cpu: f64,
    new_wall: f64,
    new_cpu: f64,
    /// The time of a store snapshot on its own.
    snapshot_wall: f64,
}

/// Renders the store once each way (the previous path first in even repetitions), checks the texts equal and
/// prints them; returns the figures and the text's bytes and samples.
fn render_both(store: &Arc<Store>, exposition: &Exposition, rep: u64) -> (Rep, usize, usize) {
    let old = || {
        let health = reference_health(store);
        let (t, c) = (Instant::now(), thread_cpu_s());
        let text = TextEncoder::new()
            .encode_to_string(&health.registry.gather())
            .expect("encode");
        (text, t.elapsed().as_secs_f64(), thread_cpu_s() - c)
    };
    let new = || {
        let health = descs_health();
        let (t, c) = (Instant::now(), thread_cpu_s());
        let text = exposition.render(&health).expect("render");
        (text, t.elapsed().as_secs_f64(), thread_cpu_s() - c)
    };
    let ((o, ow, oc), (n, nw, nc)) = if rep.is_multiple_of(2) {
        let o = old();
        (o, new())
    } else {
        let n = new();
        (old(), n)
    };
    // The new text holds no scrape yet in its fresh registry, as the old one: equal byte for byte.
    assert!(o == n, "texts differ (rep {rep})");
    let bytes = n.len();
    let samples = n.lines().filter(|l| !l.starts_with('#')).count();
    drop((o, n));
    println!(
        "rep {rep}: previous path {:.0} ms (CPU {:.0} ms), writer {:.0} ms (CPU {:.0} ms), {:.1} MiB",
        ow * 1e3,
        oc * 1e3,
        nw * 1e3,
        nc * 1e3,
        bytes as f64 / (1 << 20) as f64
    );
    // The copy of every node that both paths start with.
    let t = Instant::now();
    drop(store.snapshot(unix_ns()));
    let rep = Rep {
        old_wall: ow,
        old_cpu: oc,
        new_wall: nw,
        new_cpu: nc,
        snapshot_wall: t.elapsed().as_secs_f64(),
    };
    (rep, bytes, samples)
}

/// Fetches `/metrics` over HTTP three times; returns the median time, seconds.
fn fetch_over_http(rt: &tokio::runtime::Runtime, handle: &CollectorHandle, bytes: usize) -> f64 {
    let url = format!("http://{}/metrics", handle.http_addr);
    let mut http = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let body = rt.block_on(async {
            reqwest::get(&url)
                .await
                .expect("GET /metrics")
                .bytes()
                .await
                .expect("body")
        });
        http.push(t.elapsed().as_secs_f64());
        assert!(body.len() > bytes / 2, "short /metrics body");
    }
    median(&mut http)
}

/// Wall and thread CPU seconds of `f`, and its result.
fn timed<R>(f: impl FnOnce() -> R) -> (R, f64, f64) {
    let (t, c) = (Instant::now(), thread_cpu_s());
    let r = f();
    (r, t.elapsed().as_secs_f64(), thread_cpu_s() - c)
}

/// The previous gather: the text rendered, then read back into owned samples.
fn text_gather(exposition: &Exposition, health: &Health) -> Vec<parse::TextSample> {
    let text = exposition.render(health).expect("render");
    let (samples, errors) = parse::parse_exposition(&text, |_| true);
    assert!(errors.is_empty(), "{:?}", errors.first());
    samples
}

/// The previous path up to remote write's series.
fn text_series(
    exposition: &Exposition,
    health: &Health,
    external: &[(String, String)],
) -> Vec<TimeSeries> {
    let samples = text_gather(exposition, health);
    let mut series = GatherSeries::new(external, 1, Previous::default());
    for s in &samples {
        let labels: Vec<(&str, &str)> = s
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        series.push(SampleRef {
            name: &s.name,
            labels: &labels,
            value: s.value,
        });
    }
    series.finish().series
}

/// The typed path up to remote write's series.
fn typed_series(
    exposition: &Exposition,
    health: &Health,
    external: &[(String, String)],
    previous: Previous,
) -> Finished {
    let mut series = GatherSeries::new(external, 1, previous);
    exposition.gather(health, |g| {
        g.for_each_sample(&mut |_| true, &mut |s| series.push(s))
    });
    series.finish()
}

/// One remote-write gather each way (see the module's doc); prints the figures.
fn remote_write_gathers(exposition: &Exposition) {
    let health = Health::new().expect("health");
    health
        .registry
        .register(Box::new(StoreDescs::new().expect("descs")))
        .expect("register");
    let external = [("shard".to_string(), "0".to_string())];
    // The typed gather first: the render observes the scrape histogram after its own gather only.
    let (walked, tw, tc) = timed(|| {
        let mut n = (0usize, 0usize);
        exposition.gather(&health, |g| {
            g.for_each_sample(&mut |_| true, &mut |s| {
                n.0 += 1;
                n.1 += s.labels.len();
            })
        });
        n
    });
    let (parsed, pw, pc) = timed(|| text_gather(exposition, &health));
    assert_eq!(walked.0, parsed.len(), "samples differ");
    drop(parsed);
    let (typed, sw_new, sc_new) =
        timed(|| typed_series(exposition, &health, &external, Previous::default()));
    let (text, sw_old, sc_old) = timed(|| text_series(exposition, &health, &external));
    let n = typed.series.len();
    assert_eq!(n, text.len(), "series differ");
    let mut values_differ = 0;
    for (a, b) in typed.series.iter().zip(&text) {
        assert_eq!(a.labels, b.labels, "series labels differ");
        let (x, y) = (a.samples[0].value, b.samples[0].value);
        values_differ += usize::from(x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()));
    }
    drop(text);
    let ((requests, previous), ew, ec) = timed(|| typed.encode(5_000).expect("encode"));
    let bytes: usize = requests.iter().map(|r| r.body.len()).sum();
    let us = |s: f64| s * 1e6;
    println!(
        "remote-write gather, {n} series ({} labels), one run each, the same series both ways ({values_differ} values \
         moved between the two):",
        walked.1
    );
    for (what, (ow, oc), (nw, nc)) in [
        (
            "gather alone (text: render + parse into samples; typed: walk)",
            (pw, pc),
            (tw, tc),
        ),
        (
            "gather up to remote write's series",
            (sw_old, sc_old),
            (sw_new, sc_new),
        ),
    ] {
        println!(
            "  {what}: previous {:.0} us ({:.3} us/series, CPU {:.0} us), typed {:.0} us ({:.3} us/series, CPU \
             {:.0} us): {:.1}x (wall), {:.1}x (CPU)",
            us(ow),
            us(ow) / n as f64,
            us(oc),
            us(nw),
            us(nw) / n as f64,
            us(nc),
            ow / nw,
            if nc > 0.0 { oc / nc } else { f64::NAN }
        );
    }
    println!(
        "  encoding into {} requests of <=5,000 ({bytes} bytes), both ways: {:.0} us ({:.3} us/series, CPU {:.0} us)",
        requests.len(),
        us(ew),
        us(ew) / n as f64,
        us(ec)
    );
    // The steady state: the next gather against this one's series (no series went away), encoded.
    let ((requests, _), w, c) = timed(|| {
        typed_series(exposition, &health, &external, previous)
            .encode(5_000)
            .expect("encode")
    });
    assert_eq!(requests.iter().map(|r| r.samples).sum::<usize>(), n);
    println!(
        "  a whole typed gather in the steady state (gather, series against the previous gather's, requests): \
         {:.0} us ({:.3} us/series, CPU {:.0} us)",
        us(w),
        us(w) / n as f64,
        us(c)
    );
}

/// Thread CPU time (ns) and minor page faults of the calling thread.
fn thread_usage() -> (u64, u64) {
    let cpu = commwatch_collector::pace::thread_cpu_ns().unwrap_or(0);
    // SAFETY: `getrusage` writes the struct it is given; a zeroed `rusage` is a valid one.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    (cpu, if rc == 0 { u.ru_minflt as u64 } else { 0 })
}

/// The CPU (ns) and page faults spent since `at` ([`thread_usage`]).
fn since(at: (u64, u64)) -> (u64, u64) {
    let now = thread_usage();
    (now.0.saturating_sub(at.0), now.1.saturating_sub(at.1))
}

/// Blocks of this many bytes or more are mapped on their own and unmapped when freed ([`FreshLarge`]).
const LARGE: usize = 256 << 10;

/// The allocator of this bench: the system's, except that every block of [`LARGE`] bytes or more is fresh
/// pages from the kernel, returned to it when freed (a grown one copied into fresh pages), as the collector's
/// jemalloc has returned a large freed block's pages by the next scrape, 15 s later (see the module's doc).
/// glibc's `malloc` alone would hand a render the pages an earlier render freed.
struct FreshLarge;

// SAFETY: every block is either the system allocator's (below `LARGE`) or an anonymous mapping of its size
// (page-aligned, which covers every alignment up to a page; larger alignments go to the system allocator),
// and each is freed by the side that made it: the size and alignment alone say which.
unsafe impl GlobalAlloc for FreshLarge {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if !mapped(l) {
            return unsafe { System.alloc(l) };
        }
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                l.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            p.cast()
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if mapped(l) {
            unsafe { libc::munmap(p.cast(), l.size()) };
        } else {
            unsafe { System.dealloc(p, l) }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, size: usize) -> *mut u8 {
        let Ok(to) = Layout::from_size_align(size, l.align()) else {
            return std::ptr::null_mut();
        };
        if !mapped(l) && !mapped(to) {
            return unsafe { System.realloc(p, l, size) };
        }
        let q = unsafe { self.alloc(to) };
        if !q.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(p, q, l.size().min(size));
                self.dealloc(p, l);
            }
        }
        q
    }
}

fn mapped(l: Layout) -> bool {
    l.size() >= LARGE && l.align() <= 4096
}

#[global_allocator]
static ALLOC: FreshLarge = FreshLarge;

/// A tape `loadgen --dump-tape` wrote: its `Hello` and its batches.
fn read_tape(path: &str) -> (pb::Hello, Vec<pb::SampleBatch>) {
    use prost::Message;
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("TAPE={path}: {e}"));
    let mut buf = &bytes[..];
    let (mut hello, mut batches) = (None, Vec::new());
    while !buf.is_empty() {
        let m = pb::AgentMessage::decode_length_delimited(&mut buf)
            .unwrap_or_else(|e| panic!("TAPE={path}: not a length-delimited message: {e}"));
        match m.msg {
            Some(pb::agent_message::Msg::Hello(h)) => hello = Some(h),
            Some(pb::agent_message::Msg::Batch(b)) => batches.push(b),
            _ => {}
        }
    }
    (
        hello.unwrap_or_else(|| panic!("TAPE={path}: no Hello")),
        batches,
    )
}

/// `nodes` copies of the tape's agent, each with every batch of the tape, its clock moved so that the newest
/// batch is now.
fn tape_store(path: &str, nodes: u64) -> Arc<Store> {
    use commwatch_collector::ingest::direct::DirectAgent;
    let (hello, mut batches) = read_tape(path);
    let newest = batches
        .iter()
        .filter_map(|b| b.timestamps_unix_ns.iter().max().copied())
        .max()
        .expect("the tape holds a batch");
    let shift = unix_ns() - newest;
    for b in &mut batches {
        b.timestamps_unix_ns.iter_mut().for_each(|t| *t += shift);
    }
    let config = CollectorConfig::default();
    let store = Arc::new(Store::new(
        config.retention,
        config.node_expiry,
        config.limits.clone(),
    ));
    for i in 0..nodes {
        let mut h = hello.clone();
        h.node = format!("node-{i:04}");
        let first = batches[0].timestamps_unix_ns.first().copied().unwrap_or(0);
        let mut agent = DirectAgent::hello(store.clone(), h, first).expect("a valid hello");
        for b in &batches {
            let at = b.timestamps_unix_ns.iter().max().copied().unwrap_or(first);
            agent.batch(b.clone(), at).expect("a valid batch");
        }
    }
    store
}

/// The ways a scrape is served, compared in `TAPE` mode: the previous ones and the present ones.
const WAYS: [&str; 4] = [
    "gzip, whole text (before)",
    "gzip, in pieces",
    "plain, fresh text (before)",
    "plain, lent text",
];

/// One scrape's figures: the whole scrape's CPU (ns) and page faults, the part of them the compression took
/// (`gzip_fast` after the whole text; 0 where the text is compressed as it is written), the growth of the
/// process's peak resident memory during it (bytes), the text's length and a hash of it.
struct Scrape {
    all: (u64, u64),
    gzip: (u64, u64),
    peak: u64,
    bytes: usize,
    hash: u64,
}

/// The process's resident memory and its peak since the last [`reset_peak`] (`/proc/self/status`: `VmRSS`,
/// `VmHWM`), bytes.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (kb("VmRSS:"), kb("VmHWM:"))
}

/// Resets the process's peak resident memory to the present (`/proc/self/clear_refs`, 5).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn text_hash(text: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

fn gunzip(z: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(z)
        .read_to_end(&mut text)
        .expect("a whole gzip stream");
    text
}

/// One scrape through `exposition` the way `way` (of [`WAYS`]) serves it, with a fresh health registry (no
/// scrape observed yet: every render's text is the same). `whole` is the text buffer the first way keeps.
fn scrape(exposition: &Exposition, way: usize, whole: &mut String) -> Scrape {
    let health = descs_health();
    reset_peak();
    let before = rss().0;
    let at = thread_usage();
    let mut gzip = (0, 0);
    // The body as the response holds it (dropped after the figures are taken; a lent buffer goes back then).
    let body: Bytes = match way {
        0 => {
            whole.clear();
            exposition.render_into(&health, whole).expect("render");
            let at = thread_usage();
            let z = commwatch_httpd::gzip_fast(whole.as_bytes()).expect("gzip");
            gzip = since(at);
            z.into()
        }
        1 => exposition.render_gzip(&health).expect("render"),
        2 => exposition.render(&health).expect("render").into(),
        _ => exposition.render_plain(&health).expect("render"),
    };
    let all = since(at);
    let peak = rss().1.saturating_sub(before);
    let text = match way {
        0 | 1 => gunzip(&body),
        _ => body.to_vec(),
    };
    Scrape {
        all,
        gzip,
        peak,
        bytes: text.len(),
        hash: text_hash(&text),
    }
}

fn median_u64(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// A registry holding the reference encoder's collector of `store`'s families (the previous path).
fn reference_health(store: &Arc<Store>) -> Health {
    let health = Health::new().expect("health");
    health
        .registry
        .register(Box::new(
            reference::StoreCollector::new(store.clone()).expect("collector"),
        ))
        .expect("register");
    health
}

/// A registry holding only the store families' descriptions, as the collector's (the exposition writes them).
fn descs_health() -> Health {
    let health = Health::new().expect("health");
    health
        .registry
        .register(Box::new(StoreDescs::new().expect("descs")))
        .expect("register");
    health
}

/// Checks the text against the reference encoder's, once; prints its size.
fn check_against_reference(store: &Arc<Store>, nodes: u64) {
    let old = TextEncoder::new()
        .encode_to_string(&reference_health(store).registry.gather())
        .expect("encode");
    let health = descs_health();
    let new = Exposition::new(store.clone())
        .render(&health)
        .expect("render");
    assert!(old == new, "the text differs from the reference encoder's");
    let samples = new.lines().filter(|l| !l.starts_with('#')).count();
    println!(
        "/metrics: {samples} samples ({:.0} a node), {:.1} MB, equal to the reference encoder's",
        samples as f64 / nodes.max(1) as f64,
        new.len() as f64 / 1e6
    );
}

/// `reps` scrapes each way ([`WAYS`], each through its own exposition), in an order rotated from one rep to the
/// next, their texts checked equal; per way the scrape's CPU and faults, the compression's CPU and faults, the
/// peak memory growth.
fn alternate(
    ways: &[Exposition],
    reps: u64,
    bytes: usize,
    whole: &mut String,
) -> Vec<[Vec<u64>; 5]> {
    let mut figures: Vec<[Vec<u64>; 5]> = ways.iter().map(|_| Default::default()).collect();
    for rep in 0..reps {
        let mut hashes = vec![0; ways.len()];
        for k in 0..ways.len() {
            let way = (k + rep as usize) % ways.len();
            let s = scrape(&ways[way], way, whole);
            hashes[way] = s.hash;
            assert_eq!(s.bytes, bytes, "the text's length moved");
            let f = &mut figures[way];
            for (v, x) in f
                .iter_mut()
                .zip([s.all.0, s.all.1, s.gzip.0, s.gzip.1, s.peak])
            {
                v.push(x);
            }
            println!(
                "rep {rep} {}: {:.0} ms CPU, {} faults (gzip after the text {:.0} ms, {} faults); peak +{:.1} MB",
                WAYS[way],
                s.all.0 as f64 / 1e6,
                s.all.1,
                s.gzip.0 as f64 / 1e6,
                s.gzip.1,
                s.peak as f64 / 1e6
            );
        }
        assert!(
            hashes.iter().all(|&h| h == hashes[0]),
            "texts differ (rep {rep})"
        );
    }
    figures
}

/// Times the parts both expositions share: the store's snapshot and its export detail (`reps` times; medians).
fn shared_parts(store: &Store, reps: u64) {
    let (mut snap, mut detail) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let at = thread_usage();
        let mut nodes = store.snapshot(unix_ns());
        snap.push(since(at));
        let at = thread_usage();
        export::exposition::apply_export_detail(
            &mut nodes,
            export::exposition::ExportDetail::default(),
        );
        detail.push(since(at));
        drop(nodes);
    }
    let med = |v: &[(u64, u64)]| {
        let (mut c, mut f): (Vec<u64>, Vec<u64>) = v.iter().copied().unzip();
        (median_u64(&mut c), median_u64(&mut f))
    };
    let (s, d) = (med(&snap), med(&detail));
    println!(
        "of a render: the store's snapshot {:.0} ms CPU, {} faults; its export detail {:.0} ms CPU, {} faults",
        s.0 as f64 / 1e6,
        s.1,
        d.0 as f64 / 1e6,
        d.1
    );
}

/// `TAPE` mode (see the module's doc).
fn main_tape(path: &str) {
    let nodes = env("NODES", 2000);
    let reps = env("REPS", 4).max(1);
    let filling = Instant::now();
    let store = tape_store(path, nodes);
    let m = store.memory();
    println!(
        "store: {} copies of the tape's node, {} series, {} samples, filled in {:.1} s",
        m.nodes,
        m.series,
        m.samples,
        filling.elapsed().as_secs_f64()
    );
    check_against_reference(&store, nodes);
    let ways: Vec<Exposition> = WAYS
        .iter()
        .map(|_| Exposition::new(store.clone()))
        .collect();
    let mut whole = String::new();
    let first: Vec<Scrape> = (0..ways.len())
        .map(|way| scrape(&ways[way], way, &mut whole))
        .collect();
    assert!(
        first.iter().all(|s| s.hash == first[0].hash),
        "texts differ"
    );
    for (way, s) in first.iter().enumerate() {
        println!(
            "first scrape (buffers sized by it), {}: {:.0} ms CPU, {} faults; peak +{:.1} MB",
            WAYS[way],
            s.all.0 as f64 / 1e6,
            s.all.1,
            s.peak as f64 / 1e6
        );
    }
    let mut figures = alternate(&ways, reps, first[0].bytes, &mut whole);
    let per_node_second = |ns: u64| ns as f64 / 1e3 / nodes.max(1) as f64 / 15.0;
    println!(
        "median per scrape over {reps} reps, {nodes} nodes (us per node and second at a scrape every 15 s; \
         ratio to the way before):"
    );
    let medians: Vec<[u64; 5]> = figures
        .iter_mut()
        .map(|f| f.each_mut().map(|v| median_u64(v)))
        .collect();
    for (way, m) in medians.iter().enumerate() {
        let [cpu, faults, gc, gf, peak] = *m;
        let before = medians[way & !1][0].max(1);
        println!(
            "  {}: {:.0} ms CPU ({:.2} us/node/s, {:.3} of before), {faults} faults (gzip after the text {:.0} ms, \
             {gf} faults); peak +{:.1} MB",
            WAYS[way],
            cpu as f64 / 1e6,
            per_node_second(cpu),
            cpu as f64 / before as f64,
            gc as f64 / 1e6,
            peak as f64 / 1e6
        );
    }
    for (way, e) in ways.iter().enumerate() {
        println!(
            "memory kept between scrapes, {}: {:.1} MB{}",
            WAYS[way],
            e.kept_bytes() as f64 / 1e6,
            if way == 0 {
                format!(
                    " and the text buffer's {:.1} MB",
                    whole.capacity() as f64 / 1e6
                )
            } else {
                String::new()
            }
        );
    }
    shared_parts(&store, reps);
}

fn main() {
    if let Ok(path) = std::env::var("TAPE") {
        return main_tape(&path);
    }
    let nodes = env("NODES", 1000);
    let series = env("SERIES", 500) as u32;
    let reps = env("REPS", 5).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let handle = rt.block_on(async {
        let cfg = CollectorConfig {
            grpc_listen: "127.0.0.1:0".parse().unwrap(),
            http_listen: "127.0.0.1:0".parse().unwrap(),
            node_expiry: Duration::from_secs(3600),
            steps_interval: Duration::ZERO,
            ..CollectorConfig::default()
        };
        start(cfg).await.expect("collector")
    });
    let filling = Instant::now();
    let acked = fill(&rt, &handle, nodes, series);
    let store = handle.store().clone();
    let m = store.memory();
    println!(
        "store: {} nodes ({acked} acked), {} series, {} samples, filled in {:.1} s",
        m.nodes,
        m.series,
        m.samples,
        filling.elapsed().as_secs_f64()
    );

    let exposition = Exposition::new(store.clone());
    let (mut old_wall, mut old_cpu, mut new_wall, mut new_cpu, mut snap_wall) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut bytes = 0;
    let mut samples = 0;
    for rep in 0..reps {
        let (r, b, s) = render_both(&store, &exposition, rep);
        (bytes, samples) = (b, s);
        old_wall.push(r.old_wall);
        old_cpu.push(r.old_cpu);
        new_wall.push(r.new_wall);
        new_cpu.push(r.new_cpu);
        snap_wall.push(r.snapshot_wall);
    }
    let (ow, oc, nw, nc) = (
        median(&mut old_wall),
        median(&mut old_cpu),
        median(&mut new_wall),
        median(&mut new_cpu),
    );
    let snap = median(&mut snap_wall);
    let mb = bytes as f64 / 1e6;
    println!(
        "{nodes} nodes x {series} series: {samples} samples, {:.1} MiB, texts equal byte for byte in {reps} reps",
        bytes as f64 / (1 << 20) as f64
    );
    println!(
        "median per scrape: previous path {:.0} ms wall / {:.0} ms CPU ({:.0} MB/s); writer {:.0} ms wall / {:.0} ms \
         CPU ({:.0} MB/s); {:.1}x faster (wall), {:.1}x (CPU)",
        ow * 1e3,
        oc * 1e3,
        mb / ow,
        nw * 1e3,
        nc * 1e3,
        mb / nw,
        ow / nw,
        if nc > 0.0 { oc / nc } else { f64::NAN }
    );
    println!(
        "of which the store snapshot (both paths): {:.0} ms",
        snap * 1e3
    );
    println!(
        "GET /metrics over HTTP (render + transfer + read): median {:.0} ms",
        fetch_over_http(&rt, &handle, bytes) * 1e3
    );
    remote_write_gathers(&exposition);
    rt.block_on(handle.shutdown());
}
