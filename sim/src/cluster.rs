//! A simulated cluster on disk: one fake sysfs tree per node, kept current by `advance_to`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::model::{JobModel, Link, LinkBytes, LinkStep, StepTimeline};
use crate::tree::{lay_out_node, CounterFile};
use crate::{ClusterSpec, Scenario, SimError};

/// A simulated cluster: the model plus the open counter files of every node's tree.
///
/// Time `t = 0` is the moment [`Cluster::create`] returned ([`Cluster::epoch`]); the files then
/// hold the model's values at `t = 0`.
#[derive(Debug)]
pub struct Cluster {
    root: PathBuf,
    model: JobModel,
    files: Vec<CounterFile>,
    node_roots: Vec<(String, PathBuf)>,
    epoch: Instant,
    now: Duration,
    /// NCCL Inspector records of the jobs' AllReduces ([`crate::inspector`]).
    inspector: crate::inspector::InspectorWriter,
}

/// What one [`Cluster::advance_to`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AdvanceStats {
    /// Files whose value changed and were rewritten.
    pub written: usize,
    /// Files whose value did not change (left alone).
    pub unchanged: usize,
}

impl Cluster {
    /// Writes one tree per node under `root/<node-name>/` (creating directories, overwriting
    /// files a previous cluster left there) with every counter at its `t = 0` value, and keeps
    /// the counter files open.
    pub fn create(root: &Path, spec: ClusterSpec) -> Result<Cluster, SimError> {
        let model = JobModel::new(&spec)?;
        let mut files = Vec::new();
        let mut node_roots = Vec::with_capacity(spec.nodes);
        for node in 0..spec.nodes {
            let name = model.node_name(node)?.to_string();
            let node_root = root.join(&name);
            files.extend(lay_out_node(&model, node, &node_root)?);
            node_roots.push((name, node_root));
        }
        let epoch_unix_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let inspector = crate::inspector::InspectorWriter::new(
            root,
            spec.nodes,
            epoch_unix_us,
            crate::procfs::FIRST_PID,
        );
        let mut cluster = Cluster {
            root: root.to_path_buf(),
            model,
            files,
            node_roots,
            epoch: Instant::now(),
            now: Duration::ZERO,
            inspector,
        };
        cluster.write_all(Duration::ZERO)?;
        cluster.epoch = Instant::now();
        Ok(cluster)
    }

    /// Pipeline-test cluster: `nodes × gpus_per_node`, every HCA port moving exactly
    /// `tx_bytes_per_second` out and `rx_bytes_per_second` in ([`Scenario::Constant`]).
    pub fn constant(
        root: &Path,
        nodes: usize,
        gpus_per_node: usize,
        tx_bytes_per_second: u64,
        rx_bytes_per_second: u64,
    ) -> Result<Cluster, SimError> {
        Cluster::create(
            root,
            ClusterSpec {
                nodes,
                gpus_per_node,
                scenario: Scenario::Constant {
                    tx_bytes_per_second,
                    rx_bytes_per_second,
                },
                ..ClusterSpec::default()
            },
        )
    }

    /// Rewrites every counter file whose value at `elapsed` differs from what it holds.
    ///
    /// `elapsed` is time since [`Cluster::epoch`]; an `elapsed` earlier than a previous call is
    /// treated as that previous time, so files never go backwards. On a write failure the
    /// other files are still written and the first error is returned.
    pub fn advance_to(&mut self, elapsed: Duration) -> Result<AdvanceStats, SimError> {
        let t = elapsed.max(self.now);
        self.now = t;
        let stats = self.write_all(t);
        self.inspector.write(&self.model, t)?;
        stats
    }

    /// [`Cluster::advance_to`] the time elapsed since [`Cluster::epoch`].
    pub fn advance_to_now(&mut self) -> Result<AdvanceStats, SimError> {
        self.advance_to(self.epoch.elapsed())
    }

    fn write_all(&mut self, t: Duration) -> Result<AdvanceStats, SimError> {
        let mut stats = AdvanceStats::default();
        let mut first_err = None;
        for f in &mut self.files {
            let r = f
                .source
                .value(&self.model, f.node, t)
                .and_then(|v| f.write(v));
            match r {
                Ok(true) => stats.written += 1,
                Ok(false) => stats.unchanged += 1,
                Err(e) => {
                    if first_err.is_none() {
                        first_err = Some(e);
                    }
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }

    /// The instant that is `t = 0` of the model.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// The model time the files currently show.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// The directory holding the node trees.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `(node name, sysfs root)` per node, in node order; pass the path as an agent's
    /// `--sysfs-root`.
    pub fn node_roots(&self) -> Vec<(String, PathBuf)> {
        self.node_roots.clone()
    }

    /// Number of files kept current (every counter, and the `flapping` port's state files).
    pub fn counter_file_count(&self) -> usize {
        self.files.len()
    }

    /// The pure model behind the files.
    pub fn model(&self) -> &JobModel {
        &self.model
    }

    /// The spec the cluster was built from.
    pub fn spec(&self) -> &ClusterSpec {
        self.model.spec()
    }

    /// The step timeline (period, compute, burst start and duration).
    pub fn timeline(&self) -> &StepTimeline {
        self.model.timeline()
    }

    /// Length of one training step.
    pub fn step_period(&self) -> Duration {
        self.model.timeline().period
    }

    /// A short human summary of the scenario: faulty node or port and expected symptoms.
    pub fn describe(&self) -> String {
        self.model.describe()
    }

    /// Bytes `link` of node `node` has moved by model time `t` ([`JobModel::expected_link_bytes`]).
    pub fn expected_link_bytes(
        &self,
        node: usize,
        link: Link,
        t: Duration,
    ) -> Result<LinkBytes, SimError> {
        self.model.expected_link_bytes(node, link, t)
    }

    /// AllReduce bytes `(tx, rx)` of `link` of node `node` in step `k` of its job, exact with every variant
    /// ([`JobModel::expected_step_bytes`]).
    pub fn expected_step_bytes(
        &self,
        node: usize,
        link: Link,
        k: u64,
    ) -> Result<(u64, u64), SimError> {
        self.model.expected_step_bytes(node, link, k)
    }

    /// Per-step bytes and burst rates of `link` of node `node` ([`JobModel::expected_step`]).
    pub fn expected_step(&self, node: usize, link: Link) -> Result<LinkStep, SimError> {
        self.model.expected_step(node, link)
    }

    /// Moves the cluster to a thread that calls [`Cluster::advance_to_now`] every `tick` until
    /// the handle is stopped or dropped. Errors are logged (`tracing`, warn) and counted, never
    /// fatal. A `tick` of zero is taken as 1 ms.
    pub fn spawn_updater(self, tick: Duration) -> UpdaterHandle {
        let tick = tick.max(Duration::from_millis(1));
        let stop = Arc::new(AtomicBool::new(false));
        let errors = Arc::new(AtomicU64::new(0));
        let ticks = Arc::new(AtomicU64::new(0));
        let (s, e, k) = (stop.clone(), errors.clone(), ticks.clone());
        let thread = std::thread::Builder::new()
            .name("commwatch-sim-updater".into())
            .spawn(move || run_updater(self, tick, &s, &e, &k));
        match thread {
            Ok(t) => UpdaterHandle {
                stop,
                errors,
                ticks,
                thread: Some(t),
                cluster: None,
            },
            Err(err) => {
                // The closure (and the cluster in it) is gone with the failed spawn.
                tracing::error!(error = %err, "could not start the simulator's updater thread");
                errors.fetch_add(1, Ordering::Relaxed);
                UpdaterHandle {
                    stop,
                    errors,
                    ticks,
                    thread: None,
                    cluster: None,
                }
            }
        }
    }
}

fn run_updater(
    mut cluster: Cluster,
    tick: Duration,
    stop: &AtomicBool,
    errors: &AtomicU64,
    ticks: &AtomicU64,
) -> Cluster {
    let start = Instant::now();
    let mut k: u32 = 0;
    while !stop.load(Ordering::Acquire) {
        if let Err(err) = cluster.advance_to_now() {
            let n = errors.fetch_add(1, Ordering::Relaxed) + 1;
            // Log the first errors and then every power of two, so a broken disk does not flood.
            if n.is_power_of_two() {
                tracing::warn!(error = %err, errors_total = n, "simulator could not update counters");
            }
        }
        ticks.fetch_add(1, Ordering::Relaxed);
        // Next tick on the grid start + k·tick, skipping ticks already missed.
        let elapsed = start.elapsed();
        let next = (elapsed.as_nanos() / tick.as_nanos() + 1) as u32;
        k = next.max(k + 1);
        let due = start + tick * k;
        loop {
            if stop.load(Ordering::Acquire) {
                break;
            }
            let now = Instant::now();
            if now >= due {
                break;
            }
            std::thread::park_timeout(due - now);
        }
    }
    cluster
}

/// The running updater of a cluster. Dropping it stops the thread and waits for it.
#[derive(Debug)]
pub struct UpdaterHandle {
    stop: Arc<AtomicBool>,
    errors: Arc<AtomicU64>,
    ticks: Arc<AtomicU64>,
    thread: Option<JoinHandle<Cluster>>,
    cluster: Option<Cluster>,
}

impl UpdaterHandle {
    /// Update rounds that failed (at least one file not written).
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Update rounds done.
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    /// Stops the thread, waits for it, and gives the cluster back (`None` if the thread could
    /// not be started or did not finish normally).
    pub fn stop(mut self) -> Option<Cluster> {
        self.shutdown();
        self.cluster.take()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            match t.join() {
                Ok(c) => self.cluster = Some(c),
                Err(_) => tracing::error!("simulator updater thread ended abnormally"),
            }
        }
    }
}

impl Drop for UpdaterHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}
