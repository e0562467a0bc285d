//! commwatch's shared vocabulary: the types that the agent, the collector and `diagnose` all speak, defined
//! once so that a concept has one shape from a sysfs read to an exported label. No I/O beyond reading a token
//! file, no wire types: conversions to and from the protocol live in `commwatch-proto` (`convert`), conversions
//! to JSON views at each exporter.
//!
//! Module map:
//! - [`link`]: a link's identity ([`LinkKey`]: class, device, port), its [`Endpoint`] kind (HCA port, network
//!   interface, GPU link — named, never inferred from `device == port` outside [`Endpoint::legacy`]), its
//!   [`LinkRole`], the inventory facts ([`Link`]) and the one predicate each for "is an interface", "is a
//!   fabric RDMA port" and "is up".
//! - [`series`]: the sampling [`Tier`] and the [`SeriesKind`] of a series.
//! - [`finding`]: [`Severity`] and [`FindingKind`], whose names are part of the API.
//! - [`nccl`]: NCCL's list syntax ([`nccl::NcclList`], one parser for `NCCL_SOCKET_IFNAME` and `NCCL_IB_HCA`),
//!   the setting names, and a typed [`nccl::ConflictKind`] for a setting that contradicts the hardware.
//! - [`inspector`]: NCCL Inspector's per-collective records (the plugin's JSON lines), parsed one line at a
//!   time, and the size classes of collectives.
//! - [`job`]: a training job as one node sees it ([`Job`]) and its processes ([`Rank`]).
//! - [`baseline`]: the bounds of an operator's baselines (numbers, names, how many), checked by the collector
//!   and by `baseline import` alike.
//! - [`clock`], [`stats`], [`token`]: the wall clock in the project's units, the median, and bearer-token
//!   files — each written once.
//! - [`throttle`]: the one log throttle for warnings a peer can repeat at will.
//! - [`text`]: the one sanitiser of outside text (control characters shown as `\u001b`, never interpreted),
//!   applied before a string from an agent or a file is stored, logged or printed.

pub mod baseline;
pub mod clock;
pub mod finding;
pub mod inspector;
pub mod job;
pub mod link;
pub mod nccl;
pub mod series;
pub mod stats;
pub mod text;
pub mod throttle;
pub mod token;

pub use finding::{FindingKind, Severity};
pub use job::{Job, Rank};
pub use link::{Endpoint, FabricData, Link, LinkClass, LinkKey, LinkRole};
pub use nccl::{ConflictKind, NcclConflict, NcclList};
pub use series::{SeriesKind, Tier};
