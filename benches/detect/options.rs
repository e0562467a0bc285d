//! The benchmark's settings: flags (`cargo bench --bench detect -- --size 8x8`) over environment variables
//! (`DETECT_SIZE=8x8`) over defaults.

use std::fmt;

/// Settings of one benchmark run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Nodes × GPUs per node (`--size`, `DETECT_SIZE`; default 4x4).
    pub nodes: usize,
    pub gpus: usize,
    /// Seeds per combination, 1..=N (`--seeds`, `DETECT_SEEDS`; default 3).
    pub seeds: u64,
    /// A fault run lasts `fault_steps` steps of the faulty job (`--fault-steps`; default 60), at least
    /// `fault_secs` simulated seconds (`--fault-secs`; default 30).
    pub fault_steps: u32,
    pub fault_secs: u64,
    /// Simulated seconds of a healthy run (`--healthy-secs`; default 600) and of the first seed's healthy run
    /// (`--hour-secs`; default 3600; 0 makes it as short as the others).
    pub healthy_secs: u64,
    pub hour_secs: u64,
    /// Runs at once (`--jobs`; default: the CPUs).
    pub jobs: usize,
    /// Only the runs whose label contains this (`--only 'link-errors on plain'`).
    pub only: Option<String>,
}

/// A bad flag or value.
#[derive(Debug, thiserror::Error)]
#[error("{flag}: {reason}")]
pub struct OptionError {
    flag: String,
    reason: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 4,
            gpus: 4,
            seeds: 3,
            fault_steps: 60,
            fault_secs: 30,
            healthy_secs: 600,
            hour_secs: 3600,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            only: None,
        }
    }
}

/// The flags, each with its environment variable.
const FLAGS: &[(&str, &str)] = &[
    ("--size", "DETECT_SIZE"),
    ("--seeds", "DETECT_SEEDS"),
    ("--fault-steps", "DETECT_FAULT_STEPS"),
    ("--fault-secs", "DETECT_FAULT_SECS"),
    ("--healthy-secs", "DETECT_HEALTHY_SECS"),
    ("--hour-secs", "DETECT_HOUR_SECS"),
    ("--jobs", "DETECT_JOBS"),
    ("--only", "DETECT_ONLY"),
];

impl Options {
    /// Reads the environment, then the flags (`--bench`, which `cargo bench` passes, is ignored).
    pub fn from_env_and_args(args: impl Iterator<Item = String>) -> Result<Options, OptionError> {
        let mut o = Options::default();
        for (flag, var) in FLAGS {
            if let Ok(v) = std::env::var(var) {
                o.set(flag, &v)?;
            }
        }
        let mut args = args.peekable();
        while let Some(a) = args.next() {
            if a == "--bench" {
                continue;
            }
            let (flag, value) = match a.split_once('=') {
                Some((f, v)) => (f.to_string(), v.to_string()),
                None => {
                    let v = args.next().ok_or_else(|| bad(&a, "needs a value"))?;
                    (a, v)
                }
            };
            o.set(&flag, &value)?;
        }
        Ok(o)
    }

    fn set(&mut self, flag: &str, v: &str) -> Result<(), OptionError> {
        let num = |v: &str| v.parse::<u64>().map_err(|e| bad(flag, &e.to_string()));
        match flag {
            "--size" => {
                let (n, g) = v
                    .split_once('x')
                    .ok_or_else(|| bad(flag, "expected NODESxGPUS, e.g. 8x8"))?;
                self.nodes = num(n)? as usize;
                self.gpus = num(g)? as usize;
            }
            "--seeds" => self.seeds = num(v)?.max(1),
            "--fault-steps" => self.fault_steps = num(v)? as u32,
            "--fault-secs" => self.fault_secs = num(v)?,
            "--healthy-secs" => self.healthy_secs = num(v)?,
            "--hour-secs" => self.hour_secs = num(v)?,
            "--jobs" => self.jobs = (num(v)? as usize).max(1),
            "--only" => self.only = Some(v.to_string()),
            _ => {
                let known: Vec<&str> = FLAGS.iter().map(|(f, _)| *f).collect();
                return Err(bad(
                    flag,
                    &format!("unknown flag (known: {})", known.join(", ")),
                ));
            }
        }
        Ok(())
    }
}

fn bad(flag: &str, reason: &str) -> OptionError {
    OptionError {
        flag: flag.to_string(),
        reason: reason.to_string(),
    }
}

impl fmt::Display for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} nodes × {} GPUs, seeds 1..={}, fault runs {} steps (at least {} s), healthy runs {} s (seed 1: {} s), {} at once",
            self.nodes,
            self.gpus,
            self.seeds,
            self.fault_steps,
            self.fault_secs,
            self.healthy_secs,
            if self.hour_secs > 0 { self.hour_secs } else { self.healthy_secs },
            self.jobs
        )
    }
}
