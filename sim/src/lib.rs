//! commwatch-sim: a simulated GPU cluster for commwatch's agents and tests.
//!
//! It writes a fake sysfs tree per node (`<root>/node-00/class/{infiniband,net}/...`, the
//! layout of a real `/sys`, see [`tree`]) and keeps its counters at the values a model of a
//! data-parallel training job gives them ([`model`]). Real agents read those trees with
//! `--sysfs-root <root>/<node>`; tests compute the exact values the agents should see.
//!
//! Module map:
//! - [`spec`]: [`ClusterSpec`], the cluster's shape, job, fault and variants, with defaults.
//! - [`scenario`]: [`Scenario`], the faults by CLI name.
//! - [`variant`]: [`Variant`], realistic traffic on top of a scenario (storage, overlapped buckets, idle
//!   nodes, jitter, two jobs, eight rails, the design's magnitudes, a flapping port), by CLI name.
//! - [`placement`]: which node runs which job ([`Placement`]).
//! - [`model`]: the pure model — step timelines, bytes per link, every counter as a function of time.
//! - [`counters`]: the counter files' names and PMA widths.
//! - [`tree`]: the on-disk layout and the in-place writer.
//! - [`cluster`]: [`Cluster`] (create, `advance_to`, expectations) and its updater thread.
//! - [`gpu`]: the simulated GPUs and host CPUs behind the agent's backend traits ([`SimGpus`],
//!   [`SimHost`]).
//! - [`inspector`]: NCCL Inspector records of the simulated jobs, appended as their steps end.
//! - [`procfs`]: a procfs tree per node holding the job's ranks (environment markers, NCCL settings) for an
//!   agent's `processes` source ([`Cluster::write_procfs_trees`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use commwatch_sim::{Cluster, ClusterSpec};
//! let cluster = Cluster::create("/tmp/sim".as_ref(), ClusterSpec::demo())?;
//! println!("{}", cluster.describe());
//! for (node, root) in cluster.node_roots() { println!("{node}: --sysfs-root {}", root.display()); }
//! let updater = cluster.spawn_updater(Duration::from_millis(10));
//! // ... run agents ...
//! drop(updater);
//! # Ok::<(), commwatch_sim::SimError>(())
//! ```

pub mod cluster;
pub mod counters;
mod error;
pub mod gpu;
pub mod inspector;
pub mod model;
pub mod placement;
pub mod procfs;
pub mod scenario;
pub mod spec;
pub mod tree;
pub mod variant;

pub use cluster::{AdvanceStats, Cluster, UpdaterHandle};
pub use counters::{HwCounter, NetStat, PortCounter};
pub use error::SimError;
pub use gpu::{SimGpus, SimHost};
pub use model::{Job, JobModel, Link, LinkBytes, LinkModel, LinkStep, StepTimeline};
pub use placement::Placement;
pub use scenario::Scenario;
pub use spec::ClusterSpec;
pub use variant::Variant;
