//! Timed example (issue #13, failures 1 and 4): how long `POST /api/v1/baselines` with N collectives takes,
//! how slow `/metrics` and `/api/v1/findings` answer meanwhile, and whether the collector restarts on its
//! state afterwards — then the same for a baseline of `1e300` GB/s.
//!
//! ```text
//! cargo run -p commwatch-collector --example baseline_post -- 1000,10000,40000
//! ```
//! Prints one line per size; figures depend on the build profile and the machine (report both).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commwatch_collector::analysis::baselines::merge;
use commwatch_collector::analysis::input::BareBaseline;
use commwatch_collector::{start, CollectorConfig, CollectorHandle};

/// A POST, or a read during it, given up after this long.
const GIVE_UP: Duration = Duration::from_secs(300);

fn config(dir: &Path) -> CollectorConfig {
    CollectorConfig {
        grpc_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: "127.0.0.1:0".parse().unwrap(),
        state_dir: Some(dir.to_path_buf()),
        ..CollectorConfig::default()
    }
}

fn body(n: usize, gbps: &str) -> String {
    named_body("c", n, gbps)
}

fn named_body(prefix: &str, n: usize, gbps: &str) -> String {
    let tests: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"collective":"{prefix}{i}","peak_busbw_gbps":{gbps}}}"#))
        .collect();
    format!(r#"{{"tests":[{}]}}"#, tests.join(","))
}

/// Reads `path` in a loop until `stop`; returns the slowest answer's time and how many answered.
async fn poll(client: reqwest::Client, url: String, stop: Arc<AtomicBool>) -> (Duration, usize) {
    let (mut worst, mut n) = (Duration::ZERO, 0);
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let ok = client
            .get(&url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        worst = worst.max(t.elapsed());
        n += usize::from(ok);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (worst, n)
}

/// POSTs `payload` while `/metrics` and `/api/v1/findings` are read; prints the figures.
async fn post_timed(h: &CollectorHandle, label: &str, payload: String) {
    let client = reqwest::Client::builder().timeout(GIVE_UP).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let base = format!("http://{}", h.http_addr);
    let metrics = tokio::spawn(poll(
        client.clone(),
        format!("{base}/metrics"),
        stop.clone(),
    ));
    let findings = tokio::spawn(poll(
        client.clone(),
        format!("{base}/api/v1/findings"),
        stop.clone(),
    ));
    let bytes = payload.len();
    let t = Instant::now();
    let r = client
        .post(format!("{base}/api/v1/baselines"))
        .header("content-type", "application/json")
        .body(payload)
        .send()
        .await;
    let took = t.elapsed();
    let status = match r {
        Ok(r) => r.status().as_u16().to_string(),
        Err(e) => format!("error ({e})"),
    };
    // Let the reads see the state the POST left (history writes go on after the answer).
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let (m, mn) = metrics.await.unwrap();
    let (f, fn_) = findings.await.unwrap();
    println!(
        "{label}: body {bytes} B, POST answered {status} in {:.3} s; slowest /metrics {:.3} s ({mn} reads), \
         slowest /api/v1/findings {:.3} s ({fn_} reads)",
        took.as_secs_f64(),
        m.as_secs_f64(),
        f.as_secs_f64()
    );
}

/// Stops `h` and starts a collector on the same state directory; prints how that went.
async fn restart(h: CollectorHandle, dir: &Path, label: &str) {
    h.shutdown().await;
    // The history thread writes after the answer: give it time to finish before the restart.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t = Instant::now();
    match start(config(dir)).await {
        Ok(h) => {
            let kept = reqwest::get(format!("http://{}/api/v1/baselines", h.http_addr))
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap();
            let n = kept["bare"].as_array().map_or(0, Vec::len);
            println!(
                "{label}: restart OK in {:.3} s, {n} bare baselines restored",
                t.elapsed().as_secs_f64()
            );
            h.shutdown().await;
        }
        Err(e) => println!(
            "{label}: restart FAILED after {:.3} s: {e}",
            t.elapsed().as_secs_f64()
        ),
    }
}

/// The merge alone, without the bounds: the old one (a `retain` over everything held per baseline added)
/// against [`merge`], for `n` baselines added to `n` held, half of them replaced.
fn merge_timed(n: usize) {
    let one = |i: usize| BareBaseline {
        job: None,
        collective: format!("c{i}"),
        busbw_bytes_per_second: 1e11,
        nranks: None,
        source: "operator".into(),
    };
    let held: Vec<BareBaseline> = (0..n).map(one).collect();
    let new: Vec<BareBaseline> = (n / 2..n + n / 2).map(one).collect();
    let mut old = held.clone();
    let t = Instant::now();
    for x in &new {
        old.retain(|y| !(y.job == x.job && y.collective == x.collective));
        old.push(x.clone());
    }
    let old_s = t.elapsed().as_secs_f64();
    let mut linear = held;
    let t = Instant::now();
    merge(&mut linear, &new, usize::MAX, |x| {
        (x.job.clone(), x.collective.clone())
    })
    .unwrap();
    let new_s = t.elapsed().as_secs_f64();
    assert_eq!(old.len(), linear.len());
    println!(
        "merge of {n} into {n} held: old (retain per baseline) {old_s:.3} s, linear {new_s:.4} s"
    );
}

#[tokio::main]
async fn main() {
    for n in [1_000, 10_000, 40_000] {
        merge_timed(n);
    }
    let sizes: Vec<usize> = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "1000,10000,40000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("sizes: comma-separated numbers"))
        .collect();
    for n in sizes {
        let dir = tempfile::tempdir().unwrap();
        let h = start(config(dir.path())).await.expect("collector starts");
        let label = format!("{n} collectives");
        post_timed(&h, &label, body(n, "100.0")).await;
        restart(h, dir.path(), &label).await;
    }
    // Up to the bound on held baselines: requests of the largest size accepted, until one is refused.
    let dir = tempfile::tempdir().unwrap();
    let h = start(config(dir.path())).await.expect("collector starts");
    let per = commwatch_model::baseline::MAX_TESTS_PER_REQUEST;
    for k in 0..=commwatch_model::baseline::MAX_BARE_BASELINES / per {
        let label = format!("request {} of {per} new collectives", k + 1);
        post_timed(&h, &label, named_body(&format!("r{k}c"), per, "100.0")).await;
    }
    restart(h, dir.path(), "bare baselines at their bound").await;

    let dir = tempfile::tempdir().unwrap();
    let h = start(config(dir.path())).await.expect("collector starts");
    post_timed(&h, "peak_busbw_gbps 1e300", body(1, "1e300")).await;
    restart(h, dir.path(), "peak_busbw_gbps 1e300").await;
}
