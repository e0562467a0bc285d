//! Cost of a sampling tick of the sysfs sources on the H100 tree (8 HCAs, one RoCE bond, four NICs: the shared
//! gpud capture with the project's additions, composed in a temporary directory by `commwatch-testdata`),
//! against the same reads done the naive way (open, read, close every file every tick).
//!
//! `cargo bench -p commwatch-agent --bench sources`. Plain `Instant` loops, single-threaded; also reports the
//! process CPU time (`/proc/self/stat` utime + stime) over each loop. Tick counts: `FAST_TICKS` and
//! `SLOW_TICKS` in the environment (defaults 20000 and 2000).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use commwatch_agent::source::infiniband::InfinibandSource;
use commwatch_agent::source::netdev::{NetdevOptions, NetdevSource};
use commwatch_agent::source::pid_files::PidFiles;
use commwatch_agent::source::sysfs::{decode, list_files, list_subdirs, Decode, Reading};
use commwatch_agent::source::{Source, Tier, Value};

/// Linux reports utime/stime in USER_HZ, which is 100 on every architecture the agent runs on.
const USER_HZ: f64 = 100.0;

/// Process CPU time (user + system) so far, from `/proc/self/stat`.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start at field 3; utime and stime are 14, 15.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some(Duration::from_secs_f64((utime + stime) / USER_HZ))
}

struct Measured {
    wall_per_tick: Duration,
    cpu_per_tick: Option<Duration>,
}

fn measure(ticks: u32, mut tick: impl FnMut()) -> Measured {
    for _ in 0..ticks.min(100) {
        tick();
    }
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    for _ in 0..ticks {
        tick();
    }
    let wall = t0.elapsed();
    let cpu = match (cpu0, cpu_time()) {
        (Some(a), Some(b)) => b.checked_sub(a),
        _ => None,
    };
    Measured {
        wall_per_tick: wall / ticks,
        cpu_per_tick: cpu.map(|c| c / ticks),
    }
}

/// The files each tier reads and how each is decoded, listed from the tree independently of the sources.
fn naive_files(root: &Path, tier: Tier) -> Vec<(PathBuf, Decode)> {
    let mut out = Vec::new();
    let counter = |scale| Decode::Counter { scale };
    let ib = root.join("class/infiniband");
    for dev in list_subdirs(&ib).unwrap_or_default() {
        for port in list_subdirs(&ib.join(&dev).join("ports")).unwrap_or_default() {
            let p = ib.join(&dev).join("ports").join(&port);
            for f in list_files(&p.join("counters")).unwrap_or_default() {
                let data = f == "port_xmit_data" || f == "port_rcv_data";
                if data == (tier == Tier::Fast) {
                    out.push((
                        p.join("counters").join(&f),
                        counter(if data { 4 } else { 1 }),
                    ));
                }
            }
            if tier == Tier::Slow {
                for f in list_files(&p.join("hw_counters")).unwrap_or_default() {
                    if f != "lifespan" {
                        out.push((p.join("hw_counters").join(f), counter(1)));
                    }
                }
                out.push((p.join("state"), Decode::IbStateCode));
                out.push((p.join("phys_state"), Decode::IbStateCode));
                out.push((p.join("rate"), Decode::IbRateBytes));
            }
        }
    }
    let net = root.join("class/net");
    for nic in list_subdirs(&net).unwrap_or_default() {
        let d = net.join(&nic);
        for f in list_files(&d.join("statistics")).unwrap_or_default() {
            if f.ends_with("_bytes") == (tier == Tier::Fast) {
                out.push((d.join("statistics").join(f), counter(1)));
            }
        }
        if tier == Tier::Slow {
            out.push((d.join("operstate"), Decode::OperUp));
            out.push((d.join("speed"), Decode::NetSpeedBytes));
        }
    }
    out
}

fn naive_tick(files: &[(PathBuf, Decode)], acc: &mut u64) {
    for (path, how) in files {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(Reading::Value(v)) = decode(*how, &text) {
                *acc = acc.wrapping_add(v.to_bits());
            }
        }
    }
}

fn fmt(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:8.2} µs", d.as_secs_f64() * 1e6),
        None => "       n/a".to_string(),
    }
}

fn ticks_from_env(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

fn main() {
    // The shared gpud capture with the project's additions, composed in a temporary directory.
    let Some(h100) = commwatch_testdata::gpud_h100_sysfs!() else {
        eprintln!("no tree to measure");
        std::process::exit(1);
    };
    let root = h100.path().to_path_buf();
    let mut ib = InfinibandSource::new(root.clone());
    let mut nd = NetdevSource::new(root.clone(), NetdevOptions::default());
    if let Err(e) = ib.discover().and_then(|_| nd.discover()) {
        eprintln!("discover failed: {e}");
        std::process::exit(1);
    }
    let links = ib.inventory().links.len() + nd.inventory().links.len();
    println!("fixture: {} ({links} links)", root.display());
    println!(
        "{:<6} {:>6} {:>7} | {:>11} {:>11} | {:>11} {:>11} | {:>10} {:>10}",
        "tier",
        "files",
        "ticks",
        "held wall",
        "held cpu",
        "naive wall",
        "naive cpu",
        "wall ratio",
        "cpu ratio"
    );
    for (tier, ticks) in [
        (Tier::Fast, ticks_from_env("FAST_TICKS", 20_000)),
        (Tier::Slow, ticks_from_env("SLOW_TICKS", 2_000)),
    ] {
        let series = ib
            .inventory()
            .series
            .iter()
            .chain(&nd.inventory().series)
            .filter(|s| s.tier == tier)
            .count();
        let files = naive_files(&root, tier);
        if files.len() != series {
            eprintln!(
                "{tier:?}: the naive list has {} files but the sources have {series} series",
                files.len()
            );
            std::process::exit(1);
        }
        let mut acc = 0u64;
        let mut failed = 0usize;
        let held = measure(ticks, || {
            let mut sink = |_: usize, v: Value| acc = acc.wrapping_add(v.to_bits());
            failed += ib.sample(tier, &mut sink).failed;
            failed += nd.sample(tier, &mut sink).failed;
        });
        let naive = measure(ticks, || naive_tick(&files, &mut acc));
        black_box(acc);
        if failed > 0 {
            eprintln!("{tier:?}: {failed} failed reads");
            std::process::exit(1);
        }
        let ratio = |n: Option<Duration>, h: Option<Duration>| match (n, h) {
            (Some(n), Some(h)) if !h.is_zero() => {
                format!("{:9.2}x", n.as_secs_f64() / h.as_secs_f64())
            }
            _ => "       n/a".to_string(),
        };
        println!(
            "{:<6} {:>6} {:>7} | {} {} | {} {} | {} {}",
            format!("{tier:?}").to_lowercase(),
            series,
            ticks,
            fmt(Some(held.wall_per_tick)),
            fmt(held.cpu_per_tick),
            fmt(Some(naive.wall_per_tick)),
            fmt(naive.cpu_per_tick),
            ratio(Some(naive.wall_per_tick), Some(held.wall_per_tick)),
            ratio(naive.cpu_per_tick, held.cpu_per_tick),
        );
    }
    println!(
        "cpu: process user+system time over the loop / ticks (USER_HZ resolution: 10 ms per loop)"
    );
    discoveries(&root, &mut ib, &mut nd);
    pid_files();
}

/// Cost of reading what the `processes` source reads of a process it has not seen (`stat`, `environ`,
/// `cgroup`), for every process of this machine's `/proc`, on procfs (`openat2` from a kept handle) against
/// by path (`lstat`, `open`, `fstat`): per process. Rounds: `PID_ROUNDS` in the environment (default 200).
fn pid_files() {
    let root = Path::new("/proc");
    let mut on_procfs = PidFiles::new(root);
    if !on_procfs.on_procfs() {
        println!("pid files: /proc is not procfs here, not measured");
        return;
    }
    let pids: Vec<u32> = std::fs::read_dir(root)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let rounds = ticks_from_env("PID_ROUNDS", 200);
    let mut by_path = PidFiles::by_path(root);
    let mut buf = Vec::new();
    let mut read_all = |files: &mut PidFiles, read: &mut u64| {
        for &pid in &pids {
            for name in ["stat", "environ", "cgroup"] {
                *read += u64::from(files.read(pid, name, 1 << 20, &mut buf).is_ok());
            }
        }
    };
    let (mut read_a, mut read_b) = (0u64, 0u64);
    let a = measure(rounds, || read_all(&mut on_procfs, &mut read_a));
    let b = measure(rounds, || read_all(&mut by_path, &mut read_b));
    let per = |d: Option<Duration>| d.map(|d| d / u32::try_from(pids.len().max(1)).unwrap_or(1));
    println!(
        "pid files ({} processes, stat+environ+cgroup, {rounds} rounds; files read: {read_a} / {read_b}): per process, on procfs wall {} cpu {}, by path wall {} cpu {}",
        pids.len(),
        fmt(per(Some(a.wall_per_tick))),
        fmt(per(a.cpu_per_tick)),
        fmt(per(Some(b.wall_per_tick))),
        fmt(per(b.cpu_per_tick)),
    );
}

/// Cost of a rediscovery of each source, on the tree as it is (the agent's case between hot-plugs) and with
/// an entry added to or removed from a port's directory before each (a changed tree: a full walk). Rounds:
/// `DISCOVER_ROUNDS` in the environment (default 300), after as many (at most 100) not measured.
fn discoveries(root: &Path, ib: &mut InfinibandSource, nd: &mut NetdevSource) {
    let rounds = ticks_from_env("DISCOVER_ROUNDS", 300);
    let calls = u64::from(rounds + rounds.min(100));
    let touched = root.join("class/infiniband/mlx5_0/ports/1/bench-touch");
    let mut flip = false;
    let mut touch = |changed: bool| {
        if changed {
            flip = !flip;
            let _ = if flip {
                std::fs::write(&touched, "")
            } else {
                std::fs::remove_file(&touched)
            };
        }
    };
    println!(
        "{:<10} {:<9} {:>7} | {:>11} {:>11} | full walks",
        "discover", "tree", "rounds", "wall", "cpu"
    );
    let row = |name: &str, changed: bool, m: Measured, walks: String| {
        println!(
            "{name:<10} {:<9} {rounds:>7} | {} {} | {walks}",
            if changed { "changed" } else { "unchanged" },
            fmt(Some(m.wall_per_tick)),
            fmt(m.cpu_per_tick),
        );
    };
    for changed in [false, true] {
        let walks0 = ib.full_walks();
        let m = measure(rounds, || {
            touch(changed);
            black_box(ib.discover().is_ok());
        });
        let walks = format!("{} of {calls}", ib.full_walks() - walks0);
        row("infiniband", changed, m, walks);
        let walks0 = nd.full_walks();
        let m = measure(rounds, || {
            touch(changed);
            black_box(nd.discover().is_ok());
        });
        let walks = format!("{} of {calls}", nd.full_walks() - walks0);
        row("netdev", changed, m, walks);
    }
    let _ = std::fs::remove_file(&touched);
}
