//! The host itself, through `sysinfo`: CPU utilisation and memory. Node-level series (no link); no links.
//!
//! Series (all slow-tier gauges):
//! - `cpu_utilization_ratio` (0..1) over all CPUs (no labels) and per CPU (label `cpu` = its index, `"0"`, ...);
//! - `memory_used_bytes`, `memory_total_bytes`.
//!
//! Utilisation is measured between two reads: the first `sample` after `discover` covers the time since
//! `discover`.
//!
//! The readings come from a [`HostBackend`]: this machine through sysinfo by default, or an injected one (the
//! simulated cluster's nodes, whose CPUs are a model, not this machine's).

use std::collections::BTreeMap;

use sysinfo::{CpuRefreshKind, MemoryRefreshKind, System};

use super::{Inventory, ReadReport, SeriesKind, SeriesSpec, Source, SourceError, Tier, Value};

/// One reading of the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostReading {
    /// Utilisation over all CPUs since the previous reading, percent (0..100).
    pub cpu_percent: f32,
    /// Per CPU, percent, by CPU index.
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

/// This machine, through sysinfo.
pub struct SysinfoHost {
    system: Option<System>,
}

impl HostBackend for SysinfoHost {
    fn start(&mut self) -> Result<usize, SourceError> {
        let system = match &mut self.system {
            Some(s) => s,
            None => {
                let s = System::new()
                    .map_err(|e| SourceError::Other(format!("sysinfo: cannot start: {e}")))?;
                self.system.insert(s)
            }
        };
        refresh(system);
        Ok(system.cpus().len())
    }

    fn read(&mut self) -> HostReading {
        let Some(system) = self.system.as_mut() else {
            return HostReading {
                cpu_percent: 0.0,
                per_cpu_percent: Vec::new(),
                memory_used_bytes: 0,
                memory_total_bytes: 0,
            };
        };
        refresh(system);
        HostReading {
            cpu_percent: system.global_cpu_usage(),
            per_cpu_percent: system.cpus().iter().map(|c| c.usage()).collect(),
            memory_used_bytes: system.used_memory(),
            memory_total_bytes: system.total_memory(),
        }
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

impl Default for HostSource {
    fn default() -> Self {
        Self::new()
    }
}

impl HostSource {
    /// A host source. Nothing is read until [`Source::discover`].
    pub fn new() -> Self {
        Self::with_backend(Box::new(SysinfoHost { system: None }))
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

fn refresh(system: &mut System) {
    system.refresh_cpu_specifics(CpuRefreshKind::nothing().with_usage());
    system.refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram());
}

impl Source for HostSource {
    fn name(&self) -> &'static str {
        "host"
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
        let mut push = |idx: usize, v: f64| {
            sink(idx, Value::Gauge(v));
            report.read += 1;
        };
        if let Some(idx) = self.total_cpu {
            push(idx, percent_to_ratio(r.cpu_percent));
        }
        for (cpu, &idx) in r.per_cpu_percent.iter().zip(&self.per_cpu) {
            push(idx, percent_to_ratio(*cpu));
        }
        let total = r.memory_total_bytes;
        if let (Some(used_idx), Some(total_idx)) = (self.memory_used, self.memory_total) {
            // sysinfo reports 0 when it could not read the memory figures.
            if total > 0 {
                push(used_idx, r.memory_used_bytes as f64);
                push(total_idx, total as f64);
            } else {
                report.fail(SourceError::Other(
                    "sysinfo: no memory figures (is /proc mounted?)".to_string(),
                ));
                // Both memory series failed.
                report.failed += 1;
            }
        }
        report
    }
}

/// sysinfo's percent (0..100) → a ratio in 0..1; values outside (rounding, NaN) are clamped to the range.
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
}
