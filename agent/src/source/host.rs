//! The host itself, from procfs: CPU utilisation (`<procfs_root>/stat`) and memory (`<procfs_root>/meminfo`).
//! Node-level series (no link); no links.
//!
//! Series (all slow-tier gauges):
//! - `cpu_utilization_ratio` (0..1) over all CPUs (no labels) and per CPU (label `cpu` = its index, `"0"`, ...);
//! - `memory_used_bytes` (`MemTotal` − `MemAvailable`), `memory_total_bytes` (`MemTotal`).
//!
//! Utilisation is measured between two reads: the first `sample` after `discover` covers the time since
//! `discover`. A CPU is busy for every jiffy of `/proc/stat` that is not `idle` or `iowait`.
//!
//! The readings come from a [`HostBackend`]: [`ProcfsHost`] (the node's procfs, under `--procfs-root`, read
//! through [`FsRoot`]) by default, or an injected one (the simulated cluster's nodes, whose CPUs are a model,
//! not this machine's).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::attr_file::{read_parsed, AttrFile};
use super::fsroot::FsRoot;
use super::{Inventory, ReadReport, SeriesKind, SeriesSpec, Source, SourceError, Tier, Value};

/// One reading of the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostReading {
    /// Utilisation over all CPUs since the previous reading, percent (0..100).
    pub cpu_percent: f32,
    /// Per CPU, percent, by CPU index; NaN for a CPU not read this time (offline).
    pub per_cpu_percent: Vec<f32>,
    /// Memory in bytes; 0 when unknown.
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
}

/// Where the host source reads from.
pub trait HostBackend: Send {
    /// Number of CPUs now; also the baseline the next reading's utilisation is measured from.
    fn start(&mut self) -> Result<usize, SourceError>;
    /// A reading since the previous call (or `start`).
    fn read(&mut self) -> HostReading;
}

/// Jiffies of one CPU line of `/proc/stat`: busy and total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub busy: u64,
    pub total: u64,
}

/// The CPU lines of `/proc/stat`: the `cpu` line and each `cpuN` by index (`None` for a CPU absent from the
/// file, i.e. offline).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuStat {
    pub all: CpuTimes,
    pub per_cpu: Vec<Option<CpuTimes>>,
}

/// Parses the CPU lines of `/proc/stat` (`cpu  user nice system idle iowait irq softirq steal ...`). Lines of
/// other kinds are ignored; `guest` and `guest_nice` are already inside `user` and `nice` and are not added.
/// Not procfs-core's `KernelStats`: it lists the `cpuN` lines in file order (an offline CPU would shift every
/// later CPU's index) and refuses a file without `btime`, `ctxt` or `processes`.
pub fn parse_stat(text: &str) -> Result<CpuStat, String> {
    let mut stat = CpuStat::default();
    let mut seen_all = false;
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(name) = fields.next().and_then(|n| n.strip_prefix("cpu")) else {
            continue;
        };
        let jiffies: Vec<u64> = fields
            .take(8)
            .map(|f| {
                f.parse::<u64>()
                    .map_err(|_| format!("cpu{name}: a field is not a count"))
            })
            .collect::<Result<_, _>>()?;
        if jiffies.len() < 4 {
            return Err(format!("cpu{name}: fewer than 4 fields"));
        }
        let total: u64 = jiffies.iter().fold(0u64, |a, &j| a.saturating_add(j));
        let idle = jiffies[3].saturating_add(jiffies.get(4).copied().unwrap_or(0));
        let times = CpuTimes {
            busy: total.saturating_sub(idle),
            total,
        };
        if name.is_empty() {
            stat.all = times;
            seen_all = true;
        } else {
            let idx: usize = name
                .parse()
                .map_err(|_| format!("cpu{name}: not a CPU index"))?;
            if idx >= 1 << 16 {
                return Err(format!("cpu{name}: CPU index out of range"));
            }
            if stat.per_cpu.len() <= idx {
                stat.per_cpu.resize(idx + 1, None);
            }
            stat.per_cpu[idx] = Some(times);
        }
    }
    if seen_all {
        Ok(stat)
    } else {
        Err("no cpu line".to_string())
    }
}

/// `(used, total)` bytes from `/proc/meminfo`: `MemTotal` − `MemAvailable` and `MemTotal` (kB × 1024).
/// Not procfs-core's `Meminfo`: it requires 17 fields where two are read, multiplies counts unchecked (a panic
/// in a debug build, a wrapped figure in release) and panics on a field name ending in a non-ASCII character.
pub fn parse_meminfo(text: &str) -> Result<(u64, u64), String> {
    let field = |key: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.split(':').next() == Some(key))?;
        let kb: u64 = line
            .split(':')
            .nth(1)?
            .split_ascii_whitespace()
            .next()?
            .parse()
            .ok()?;
        kb.checked_mul(1024)
    };
    let total = field("MemTotal").ok_or("no MemTotal")?;
    let available = field("MemAvailable").ok_or("no MemAvailable")?;
    Ok((total.saturating_sub(available), total))
}

/// Busy share of the jiffies between two readings, percent; 0 when no jiffy passed.
fn busy_percent(before: CpuTimes, now: CpuTimes) -> f32 {
    let total = now.total.saturating_sub(before.total);
    if total == 0 {
        return 0.0;
    }
    let busy = now.busy.saturating_sub(before.busy).min(total);
    (busy as f64 * 100.0 / total as f64) as f32
}

/// The node's procfs, under a root: `stat` and `meminfo`, each opened through [`FsRoot`] and kept open
/// ([`super::attr_file::read_kept`]).
pub struct ProcfsHost {
    root: FsRoot,
    previous: Option<CpuStat>,
    stat: Option<AttrFile>,
    meminfo: Option<AttrFile>,
}

impl ProcfsHost {
    /// Reads `<procfs_root>/stat` and `<procfs_root>/meminfo`.
    pub fn new(procfs_root: PathBuf) -> ProcfsHost {
        ProcfsHost {
            root: FsRoot::new(procfs_root),
            previous: None,
            stat: None,
            meminfo: None,
        }
    }

    fn stat(&mut self) -> Result<CpuStat, SourceError> {
        read_parsed(&self.root, &mut self.stat, "stat", parse_stat)
    }
}

impl HostBackend for ProcfsHost {
    fn start(&mut self) -> Result<usize, SourceError> {
        let stat = self.stat()?;
        let cpus = stat.per_cpu.len();
        self.previous = Some(stat);
        Ok(cpus)
    }

    fn read(&mut self) -> HostReading {
        let (memory_used_bytes, memory_total_bytes) =
            read_parsed(&self.root, &mut self.meminfo, "meminfo", parse_meminfo).unwrap_or((0, 0));
        let mut reading = HostReading {
            cpu_percent: f32::NAN,
            per_cpu_percent: Vec::new(),
            memory_used_bytes,
            memory_total_bytes,
        };
        let Ok(now) = self.stat() else {
            return reading;
        };
        if let Some(before) = &self.previous {
            reading.cpu_percent = busy_percent(before.all, now.all);
            reading.per_cpu_percent = now
                .per_cpu
                .iter()
                .enumerate()
                .map(
                    |(i, t)| match (before.per_cpu.get(i).copied().flatten(), t) {
                        (Some(b), Some(n)) => busy_percent(b, *n),
                        _ => f32::NAN,
                    },
                )
                .collect();
        }
        self.previous = Some(now);
        reading
    }
}

/// Reads CPU utilisation and memory of the host.
pub struct HostSource {
    backend: Box<dyn HostBackend>,
    started: bool,
    inventory: Inventory,
    total_cpu: Option<usize>,
    /// Series index of each CPU's utilisation, by CPU index.
    per_cpu: Vec<usize>,
    memory_used: Option<usize>,
    memory_total: Option<usize>,
}

impl HostSource {
    /// A host source reading `<procfs_root>/stat` and `meminfo`. Nothing is read until [`Source::discover`].
    pub fn new(procfs_root: PathBuf) -> Self {
        Self::with_backend(Box::new(ProcfsHost::new(procfs_root)))
    }

    /// A host source reading from `backend`.
    pub fn with_backend(backend: Box<dyn HostBackend>) -> Self {
        HostSource {
            backend,
            started: false,
            inventory: Inventory::default(),
            total_cpu: None,
            per_cpu: Vec::new(),
            memory_used: None,
            memory_total: None,
        }
    }

    fn push_series(&mut self, metric: &str, labels: BTreeMap<String, String>) -> usize {
        self.inventory.series.push(SeriesSpec {
            metric: metric.to_string(),
            kind: SeriesKind::Gauge,
            tier: Tier::Slow,
            link: None,
            labels,
        });
        self.inventory.series.len() - 1
    }
}

impl Source for HostSource {
    fn name(&self) -> &'static str {
        "host"
    }

    fn quick_reads(&self) -> bool {
        true
    }

    fn discover(&mut self) -> Result<bool, SourceError> {
        // Also the baseline the first sample's utilisation is measured from.
        let cpus = self.backend.start()?;
        self.started = true;

        let mut changed = false;
        if self.total_cpu.is_none() {
            self.total_cpu = Some(self.push_series("cpu_utilization_ratio", BTreeMap::new()));
            changed = true;
        }
        // CPUs only ever gain series: one that goes offline keeps its series, which stops producing.
        while self.per_cpu.len() < cpus {
            let cpu = self.per_cpu.len();
            let labels = BTreeMap::from([("cpu".to_string(), cpu.to_string())]);
            let idx = self.push_series("cpu_utilization_ratio", labels);
            self.per_cpu.push(idx);
            changed = true;
        }
        if self.memory_used.is_none() {
            self.memory_used = Some(self.push_series("memory_used_bytes", BTreeMap::new()));
            self.memory_total = Some(self.push_series("memory_total_bytes", BTreeMap::new()));
            changed = true;
        }
        Ok(changed)
    }

    fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    fn sample(&mut self, tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
        let mut report = ReadReport::default();
        if tier != Tier::Slow {
            return report;
        }
        if !self.started {
            return report;
        }
        let r = self.backend.read();
        let mut values: Vec<(usize, f64)> = Vec::new();
        if let Some(idx) = self.total_cpu {
            // NaN: the backend could not read the CPU figures this time.
            if r.cpu_percent.is_nan() {
                report.fail(SourceError::Other(
                    "host: no CPU figures (stat unreadable)".to_string(),
                ));
            } else {
                values.push((idx, percent_to_ratio(r.cpu_percent)));
            }
        }
        for (cpu, &idx) in r.per_cpu_percent.iter().zip(&self.per_cpu) {
            // NaN: a CPU offline now; its series pauses.
            if !cpu.is_nan() {
                values.push((idx, percent_to_ratio(*cpu)));
            }
        }
        let total = r.memory_total_bytes;
        if let (Some(used_idx), Some(total_idx)) = (self.memory_used, self.memory_total) {
            // 0: the backend could not read the memory figures.
            if total > 0 {
                values.push((used_idx, r.memory_used_bytes as f64));
                values.push((total_idx, total as f64));
            } else {
                report.fail(SourceError::Other(
                    "host: no memory figures (meminfo unreadable)".to_string(),
                ));
                // Both memory series failed.
                report.failed += 1;
            }
        }
        for (idx, v) in values {
            sink(idx, Value::Gauge(v));
            report.read += 1;
        }
        report
    }
}

/// A percent (0..100) → a ratio in 0..1; values outside (rounding, NaN) are clamped to the range.
fn percent_to_ratio(percent: f32) -> f64 {
    let r = f64::from(percent) / 100.0;
    if r.is_nan() {
        0.0
    } else {
        r.clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio() {
        assert_eq!(percent_to_ratio(50.0), 0.5);
        assert_eq!(percent_to_ratio(100.5), 1.0);
        assert_eq!(percent_to_ratio(-1.0), 0.0);
        assert_eq!(percent_to_ratio(f32::NAN), 0.0);
    }

    const STAT_0: &str = "cpu  100 0 100 700 100 0 0 0 0 0\n\
                          cpu0 50 0 50 350 50 0 0 0 0 0\n\
                          cpu2 50 0 50 350 50 0 0 0 0 0\n\
                          intr 1 2 3\nctxt 5\n";

    #[test]
    fn stat_lines_parse_into_busy_and_total_jiffies() {
        let s = parse_stat(STAT_0).unwrap();
        assert_eq!(
            s.all,
            CpuTimes {
                busy: 200,
                total: 1000
            }
        );
        assert_eq!(
            s.per_cpu,
            [
                Some(CpuTimes {
                    busy: 100,
                    total: 500
                }),
                None,
                Some(CpuTimes {
                    busy: 100,
                    total: 500
                })
            ]
        );
        assert!(parse_stat("intr 1\n").is_err());
        assert!(parse_stat("cpu 1 x 3 4\n").is_err());
        assert!(parse_stat("cpu 1 2\n").is_err());
        assert!(parse_stat("cpu 1 2 3 4\ncpu99999999 1 2 3 4\n").is_err());
    }

    #[test]
    fn meminfo_gives_used_and_total_bytes() {
        let m = "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    250 kB\n";
        assert_eq!(parse_meminfo(m).unwrap(), (750 * 1024, 1000 * 1024));
        assert!(parse_meminfo("MemTotal: 1 kB\n").is_err());
    }

    #[test]
    fn busy_share_between_two_readings() {
        let a = CpuTimes {
            busy: 10,
            total: 100,
        };
        assert_eq!(
            busy_percent(
                a,
                CpuTimes {
                    busy: 35,
                    total: 200
                }
            ),
            25.0
        );
        assert_eq!(busy_percent(a, a), 0.0);
        // A counter that went backwards (CPU hot-plug) gives no nonsense above 100 %.
        assert_eq!(
            busy_percent(
                a,
                CpuTimes {
                    busy: 500,
                    total: 150
                }
            ),
            100.0
        );
    }
}
