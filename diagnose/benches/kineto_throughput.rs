//! Kineto parsing throughput and peak memory on a synthesized large trace, plain and gzip.
//!
//! `cargo bench -p commwatch-diagnose --bench kineto_throughput` (size in MB with COMMWATCH_BENCH_MB, default
//! 200). Peak RSS is the process's VmHWM from /proc/self/status: the reader streams, so it should grow with the
//! GPU activities kept (a few dozen bytes each), not with the size of the file.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use commwatch_diagnose::analysis::overlap;
use commwatch_diagnose::kineto::parse_file;
use commwatch_diagnose::progress::Progress;

fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Writes a trace of about `target` bytes: steps of CPU ops, launches, compute kernels and NCCL kernels in the
/// proportions of a real training trace.
fn write_trace(w: &mut dyn Write, target: u64) -> std::io::Result<(u64, u64)> {
    let mut written = 0u64;
    let mut events = 0u64;
    let out = |w: &mut dyn Write, s: &str, written: &mut u64| -> std::io::Result<()> {
        w.write_all(s.as_bytes())?;
        *written += s.len() as u64;
        Ok(())
    };
    out(
        w,
        "{\"schemaVersion\": 1, \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 0, \"world_size\": 64}, \"traceEvents\": [\n",
        &mut written,
    )?;
    let mut ts = 1_000_000.0f64;
    let mut corr = 1u64;
    let mut step = 0u64;
    let mut first = true;
    while written < target {
        let step_start = ts;
        let mut body = String::with_capacity(1 << 20);
        for i in 0..2000u64 {
            let sep = if first { "" } else { ",\n" };
            first = false;
            body.push_str(&format!(
                "{sep}{{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::linear\", \"pid\": 100, \"tid\": 101, \"ts\": {ts:.3}, \"dur\": 12.5, \"args\": {{\"External id\": {corr}, \"Record function id\": 0, \"Ev Idx\": {i}}}}},\n\
                 {{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 100, \"tid\": 101, \"ts\": {:.3}, \"dur\": 4.1, \"args\": {{\"External id\": {corr}, \"cbid\": 211, \"correlation\": {corr}}}}},\n",
                ts + 1.0
            ));
            // Every 50th kernel is an all-reduce on its own stream, long enough to overlap the next compute kernel.
            let (name, dur, stream, extra) = if i % 50 == 49 {
                (
                    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                    80.0,
                    20,
                    ", \"Collective name\": \"allreduce\", \"In msg nelems\": 26214400, \"Out msg nelems\": 26214400, \"Group size\": 64, \"dtype\": \"BFloat16\"",
                )
            } else {
                (
                    "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)",
                    35.25,
                    7,
                    "",
                )
            };
            body.push_str(&format!(
                "{{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"{name}\", \"pid\": 0, \"tid\": 7, \"ts\": {:.3}, \"dur\": {dur}, \"args\": {{\"External id\": {corr}, \"queued\": 0, \"device\": 0, \"context\": 1, \"stream\": {stream}, \"correlation\": {corr}, \"registers per thread\": 168, \"shared memory\": 73728, \"blocks per SM\": 1.2, \"warps per SM\": 4.8, \"grid\": [132, 1, 1], \"block\": [128, 1, 1], \"est. achieved occupancy %\": 6{extra}}}}},\n\
                 {{\"ph\": \"f\", \"id\": {corr}, \"pid\": 0, \"tid\": 7, \"ts\": {:.3}, \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"}}",
                ts + 20.0,
                ts + 20.0
            ));
            ts += 40.0;
            corr += 1;
            events += 4;
        }
        body.push_str(&format!(
            ",\n{{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#{step}\", \"pid\": 100, \"tid\": 101, \"ts\": {step_start:.3}, \"dur\": {:.3}}}",
            ts - step_start
        ));
        events += 1;
        step += 1;
        out(w, &body, &mut written)?;
    }
    out(w, "\n], \"traceName\": \"bench\"}\n", &mut written)?;
    Ok((written, events))
}

fn bench(label: &str, path: &Path, uncompressed: u64) {
    let hwm_before = vm_hwm_kib().unwrap_or(0);
    let t0 = Instant::now();
    let trace = parse_file(path, &Progress::hidden()).expect("trace parses");
    let parse_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let a = overlap::analyze(&trace.timeline, 0);
    let analyse_s = t1.elapsed().as_secs_f64();
    let hwm_after = vm_hwm_kib().unwrap_or(0);
    let on_disk = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    println!(
        "{label:>5}: {:.1} MB on disk, {:.1} MB of JSON, {} events, {} GPU activities kept; parse {:.2} s = {:.1} MB/s of JSON; analysis {:.2} s; overlap {:.3}; peak RSS {:.1} MiB (was {:.1} MiB before this parse)",
        on_disk as f64 / 1e6,
        uncompressed as f64 / 1e6,
        trace.events_read,
        trace.timeline.events.len(),
        parse_s,
        uncompressed as f64 / 1e6 / parse_s,
        analyse_s,
        a.overlap_ratio.unwrap_or(0.0),
        hwm_after as f64 / 1024.0,
        hwm_before as f64 / 1024.0,
    );
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this too, with a small size so it stays quick.
    let quick = std::env::args().all(|a| a != "--bench");
    let mb: u64 = std::env::var("COMMWATCH_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 4 } else { 200 });
    let dir = tempfile::tempdir().expect("temp dir");
    let plain = dir.path().join("bench_rank-0.json");
    let gz = dir.path().join("bench_rank-0.json.gz");
    let t0 = Instant::now();
    let (bytes, events) = {
        let mut w = BufWriter::new(std::fs::File::create(&plain).expect("create"));
        let r = write_trace(&mut w, mb * 1_000_000).expect("write");
        w.flush().expect("flush");
        r
    };
    {
        let mut enc = flate2::write::GzEncoder::new(
            BufWriter::new(std::fs::File::create(&gz).expect("create")),
            flate2::Compression::fast(),
        );
        std::io::copy(&mut std::fs::File::open(&plain).expect("open"), &mut enc).expect("compress");
        enc.finish().expect("finish").flush().expect("flush");
    }
    println!(
        "synthesized {:.1} MB, {events} events in {:.1} s; peak RSS after writing {:.1} MiB",
        bytes as f64 / 1e6,
        t0.elapsed().as_secs_f64(),
        vm_hwm_kib().unwrap_or(0) as f64 / 1024.0
    );
    bench("plain", &plain, bytes);
    bench("gzip", &gz, bytes);
}
