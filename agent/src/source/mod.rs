//! Hardware sources. One file per source, each behind [`Source`]; the explicit list ([`list`]) builds the
//! enabled ones from plain [`SourceSettings`]. The link, series and tier vocabulary is the shared model's
//! (re-exported here).
//!
//! Contract every source keeps (checked by the conformance test in `tests/sources.rs`):
//! - `inventory()` is cheap and returns the links and series found by the last `discover()`.
//! - `discover()` rescans the hardware. Absent hardware (no `class/infiniband`) is not an error: the source
//!   reports an empty inventory and logs once at debug level. It returns whether the inventory changed.
//! - `sample(tier, sink)` reads every series of that tier and pushes `(series index, value)` for each value it
//!   could read. A file that cannot be read or parsed is skipped and counted in the returned [`ReadReport`];
//!   the other series are still read (partial results, never "all or nothing").
//! - Series indices refer to `inventory().series` and are stable until the next `discover()` that returns
//!   `true`; series are never removed from the inventory (a vanished device's series simply stop producing).
//! - Sources never panic on what they read, never block on it, and never quote it: every file is opened through
//!   an [`FsRoot`] (non-blocking, regular files only, inside the root), and an error names the path and the
//!   reason, never the content.
//! - A source that does not answer in time is not waited for: [`list`] runs each source behind a
//!   [`watchdog::Watched`], which reports it stalled and lets its series stop until it answers again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use commwatch_model::clock::unix_now_ns;

pub mod attr_file;
pub mod cgroup;
pub mod dir_mark;
pub mod file_series;
pub mod fsroot;
pub mod gpu;
pub mod gpu_recorded;
pub mod host;
pub mod infiniband;
pub mod list;
pub mod netdev;
pub mod nvml;
pub mod nvml_lib;
pub mod pid_files;
pub mod processes;
pub mod qdisc;
pub mod sysfs;
pub mod tcp;
pub mod watchdog;

pub use commwatch_model::{
    Endpoint, Job, Link, LinkClass, LinkKey, LinkRole, Rank, SeriesKind, Tier,
};
pub use fsroot::FsRoot;
pub use list::{build_sources, build_sources_with, SourceExtras, SourceSettings, SOURCE_NAMES};

/// One series a source produces.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SeriesSpec {
    /// lower_snake_case metric name in base units: `tx_bytes`, `rx_bytes`, `tx_packets`, `symbol_errors`,
    /// `xmit_wait_ticks`, `cpu_utilization_ratio`, `memory_used_bytes`, ...
    pub metric: String,
    pub kind: SeriesKind,
    pub tier: Tier,
    /// The link it measures; `None` for node-level series.
    pub link: Option<LinkKey>,
    /// Extra labels, e.g. `cpu` = `"3"`.
    pub labels: BTreeMap<String, String>,
}

impl SeriesSpec {
    /// A series of `link` with no extra labels.
    pub fn for_link(metric: &str, kind: SeriesKind, tier: Tier, link: &LinkKey) -> SeriesSpec {
        SeriesSpec {
            metric: metric.to_string(),
            kind,
            tier,
            link: Some(link.clone()),
            labels: BTreeMap::new(),
        }
    }

    /// Identity used to give a series a stable id across rediscoveries.
    pub fn identity(&self) -> String {
        let mut s = String::new();
        if let Some(l) = &self.link {
            s.push_str(&l.to_string());
        }
        s.push('|');
        s.push_str(&self.metric);
        for (k, v) in &self.labels {
            s.push('|');
            s.push_str(k);
            s.push('=');
            s.push_str(v);
        }
        s
    }
}

/// A sampled value. Counters are already in base units (IB data counters multiplied by 4).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Value {
    Counter(u64),
    Gauge(f64),
}

impl Value {
    /// The wire form: u64 for counters, f64 bits for gauges.
    pub fn to_bits(self) -> u64 {
        match self {
            Value::Counter(v) => v,
            Value::Gauge(v) => v.to_bits(),
        }
    }
}

/// What the inventory of a source is now.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Inventory {
    pub links: Vec<Link>,
    pub series: Vec<SeriesSpec>,
}

/// The tiers one round reads ([`Source::start_round`]): one or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tiers([bool; 2]);

impl Tiers {
    /// No tier.
    pub const NONE: Tiers = Tiers([false, false]);

    /// `tier` alone.
    pub fn of(tier: Tier) -> Tiers {
        Tiers::NONE.with(tier)
    }

    /// These tiers and `tier`.
    pub fn with(mut self, tier: Tier) -> Tiers {
        self.0[tier.index()] = true;
        self
    }

    pub fn contains(self, tier: Tier) -> bool {
        self.0[tier.index()]
    }

    pub fn is_empty(self) -> bool {
        self == Tiers::NONE
    }

    /// The tiers, fast first.
    pub fn iter(self) -> impl Iterator<Item = Tier> {
        Tier::ALL.into_iter().filter(move |t| self.contains(*t))
    }
}

/// One tier's read in a round: what `sample` reported and how long it took (wall time of the source's own
/// read, without any wait for the caller).
#[derive(Debug)]
pub struct TierRead {
    pub report: ReadReport,
    pub took: Duration,
}

/// What a round read, per tier (indexed by [`Tier::index`]; `None` for a tier it was not asked for).
pub type RoundReads = [Option<TierRead>; 2];

/// The periods a source that keeps its own clock ([`Source::clock`]) reads its tiers at; read again at each of
/// its deadlines, as they change at run time (the collector's `Config`).
pub trait Cadence: Send + Sync {
    /// The period of `tier`.
    fn period(&self, tier: Tier) -> Duration;
}

/// The deadline after `due` of a tier read every `period`, once its round ended at `ended`: a period on, or,
/// where that has passed already, a period after `ended` (the ticks missed are skipped, not read in a burst);
/// `true` when it had passed (an overrun). The sampler's own ticks and the sources' clocks both keep it.
pub fn next_deadline(due: Instant, period: Duration, ended: Instant) -> (Instant, bool) {
    let next = due + period;
    match next <= ended {
        true => (ended + period, true),
        false => (next, false),
    }
}

/// When a round read on the source's own clock ran: the deadline of each tier it read (on the grid of that
/// tier's period from the clock's start), when its reads began and ended, and the tiers whose next deadline
/// had passed by its end (ticks skipped: the next is a whole period after the end).
#[derive(Debug, Clone, Copy)]
pub struct RoundTimes {
    pub due: [Option<Instant>; 2],
    pub started: Instant,
    pub ended: Instant,
    pub overran: Tiers,
}

/// A round taken from a source that keeps its own clock ([`Source::take_rounds`]): each tier's report, and
/// when it ran; `times` is `None` for the failures a stalled source reports for the ticks it missed.
#[derive(Debug)]
pub struct ClockedRound {
    pub reads: RoundReads,
    pub times: Option<RoundTimes>,
}

/// Where a round's values go: `(series index, value, read_unix_ns)`, the last the wall-clock time the value
/// was read, in nanoseconds since the Unix epoch.
pub type RoundSink<'a> = dyn FnMut(usize, Value, i64) + 'a;

/// Outcome of one `sample()` call.
#[derive(Debug, Default)]
pub struct ReadReport {
    /// Values pushed.
    pub read: usize,
    /// Series that could not be read or parsed this time (the cause of the first few is in `errors`).
    pub failed: usize,
    /// Up to a handful of errors, for logging and the agent's error counters.
    pub errors: Vec<SourceError>,
}

impl ReadReport {
    /// Records a failure, keeping only the first few errors.
    pub fn fail(&mut self, err: SourceError) {
        self.failed += 1;
        if self.errors.len() < 4 {
            self.errors.push(err);
        }
    }
}

/// Errors of the sources. None carries what a file holds: a path, a reason, at most a length.
///
/// Each variant's message says its cause itself, so none is also given as `source()` (which would print the
/// cause twice in a chain).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{path}: {error}")]
    Io {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: cannot parse ({bytes} bytes): {reason}")]
    Parse {
        path: std::path::PathBuf,
        /// Length of the text, in bytes (its content is never kept).
        bytes: usize,
        reason: String,
    },
    /// A file the sources will not read: see [`FsRoot`].
    #[error("{path}: refused: {why}")]
    Refused {
        path: std::path::PathBuf,
        why: Refusal,
    },
    /// A source whose `sample` or `discover` has not returned within its deadline (see [`watchdog`]).
    #[error(
        "{name}: {call} has not returned after {:.1} s; its series stop until it answers",
        waited.as_secs_f64()
    )]
    Stalled {
        name: &'static str,
        call: &'static str,
        waited: Duration,
    },
    #[error("{0}")]
    Other(String),
}

impl SourceError {
    /// The same error again, for one reported on every read until its file is fixed (an I/O error is rebuilt
    /// from its OS error code, else from its kind and message).
    pub fn duplicate(&self) -> SourceError {
        match self {
            SourceError::Io { path, error } => SourceError::Io {
                path: path.clone(),
                error: match error.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::new(error.kind(), error.to_string()),
                },
            },
            SourceError::Parse {
                path,
                bytes,
                reason,
            } => SourceError::Parse {
                path: path.clone(),
                bytes: *bytes,
                reason: reason.clone(),
            },
            SourceError::Refused { path, why } => SourceError::Refused {
                path: path.clone(),
                why: why.clone(),
            },
            SourceError::Stalled { name, call, waited } => SourceError::Stalled {
                name,
                call,
                waited: *waited,
            },
            SourceError::Other(m) => SourceError::Other(m.clone()),
        }
    }
}

/// Why [`FsRoot`] refused a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A FIFO, socket, device or directory where an attribute file should be (`a FIFO`, ...).
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    /// The path resolves (through links) outside this root.
    #[error("resolves outside the root {}", .0.display())]
    OutsideRoot(std::path::PathBuf),
}

/// A hardware source. See the module documentation for the contract.
pub trait Source: Send {
    /// Short name: `infiniband`, `netdev`, `host`, `nvml`, ...
    fn name(&self) -> &'static str;
    /// Rescans the hardware; returns whether the inventory (links, their facts, or series) changed.
    fn discover(&mut self) -> Result<bool, SourceError>;
    /// Links and series found by the last `discover()`.
    fn inventory(&self) -> &Inventory;
    /// Reads every series of `tier`, calling `sink(series_index, value)` for each value read.
    fn sample(&mut self, tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport;
    /// Called once by the sampler before the first `discover()`: sources that report their own cost (NVML call
    /// latencies) keep the handle.
    fn bind_metrics(&mut self, _metrics: &std::sync::Arc<crate::telemetry::AgentMetrics>) {}
    /// Called by the sampler before each `discover()` with the links the sources before this one found (the
    /// `processes` source checks NCCL settings against them).
    fn node_links(&mut self, _links: &[Link]) {}
    /// Training jobs found by the last `discover()`, for sources that look for them (`processes`); `None` for
    /// the others. A change of the list makes `discover()` return `true`.
    fn jobs(&self) -> Option<&[Job]> {
        None
    }
    /// A cheap look for training processes started or ended since the last `discover()` or refresh, between
    /// two discoveries (the sampler calls it at each slow tick): for sources that look for jobs. Returns
    /// whether [`Source::jobs`] changed; the inventory never changes here.
    fn refresh_jobs(&mut self) -> Result<bool, SourceError> {
        Ok(false)
    }
    /// Why the last `discover()` found this source unable to read anything on this node (its library does
    /// not load, it reports no device), in one sentence; `None` while it can read. A source whose hardware is
    /// merely absent where that is normal (no InfiniBand on an Ethernet node) stays `None`: the node-level
    /// checks (`coverage`) decide what a GPU node must have.
    fn unavailable(&self) -> Option<String> {
        None
    }
    /// Whether `sample` reads its values one quick read after another (files under sysfs or procfs), never
    /// pausing between two for a slow call (a driver's): the watchdog then hands a round's values to the
    /// sampler all at once when the round ends ([`watchdog`]) instead of each as it is read.
    fn quick_reads(&self) -> bool {
        false
    }
    /// Begins a round of `tiers` (fast first) without waiting for its values where the source can (one
    /// behind a [`watchdog::Watched`] asks its thread), so that the sampler asks every due source before it
    /// takes any answer; [`Source::finish_round`] ends it, and must be called before any other call. The
    /// default does nothing: `finish_round` reads.
    fn start_round(&mut self, _tiers: Tiers) {}
    /// Reads from now on on a clock where it can (a source behind a [`watchdog::Watched`]: a thread sleeps to
    /// each tier's next deadline, on the grid of the tier's period from `start`, and reads then: `group`'s,
    /// shared by the quick sources, or its own), instead of when the sampler asks; the rounds are taken with
    /// [`Source::take_rounds`]. Returns false where it cannot (the default): the sampler then asks for its
    /// rounds as before.
    fn clock(
        &mut self,
        _cadence: std::sync::Arc<dyn Cadence>,
        _start: Instant,
        _group: &mut watchdog::ClockGroup,
    ) -> bool {
        false
    }
    /// Takes what the source read on its own clock since the last call: each value to `sink` (series index,
    /// value, the wall-clock time of its read), each round's reports and times to `rounds`. A round under way
    /// that began by `upto` is waited for (at most the source's deadline from its start), so that every value
    /// read before `upto` is taken by this call. Does nothing for a source that does not keep its own clock.
    fn take_rounds(
        &mut self,
        _upto: Instant,
        _sink: &mut RoundSink<'_>,
        _rounds: &mut Vec<ClockedRound>,
    ) {
    }
    /// Ends the round [`Source::start_round`] began (reads `tiers` now where none was begun): calls
    /// `sink(series index, value, read_unix_ns)` for each value read, with the wall-clock time of its read,
    /// so a value taken in late behind another source's read keeps its own time. Returns each tier's
    /// report. The default reads each tier with [`Source::sample`], stamping a value when `sample` hands it
    /// over.
    fn finish_round(&mut self, tiers: Tiers, sink: &mut RoundSink<'_>) -> RoundReads {
        let mut reads: RoundReads = [None, None];
        for tier in tiers.iter() {
            let started = std::time::Instant::now();
            let report = self.sample(tier, &mut |i, v| sink(i, v, unix_now_ns()));
            reads[tier.index()] = Some(TierRead {
                report,
                took: started.elapsed(),
            });
        }
        reads
    }
}
