//! What the store applies: an agent instance's inventory ([`Hello`], [`Inventory`]), its sample batches with
//! their step markers ([`Batch`], [`Marker`]) and its node's job list ([`JobList`]).
//!
//! These arrive validated: the ingest edge converts the wire messages into them and checks every field and
//! limit (replay does the same with persisted messages). The store trusts their shape and checks only what
//! needs its own state — a series id described on the instance, a link a series names, the series limit — and
//! says so with a [`super::StoreError`].

use commwatch_model::{Job, Link, SeriesKind, Tier};

/// The state of a link its agent no longer finds (`Link.gone` on the wire): not up, and no rates.
pub const LINK_GONE: &str = "gone";

/// Whether `link` is one its agent no longer finds ([`LINK_GONE`]).
pub fn is_gone(link: &Link) -> bool {
    link.state == LINK_GONE
}

/// One link of an inventory: the link and the id the agent instance gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkInfo {
    /// Agent-local id (> 0), valid for one agent instance.
    pub id: u32,
    pub link: Link,
}

/// One series descriptor.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesDesc {
    /// Agent-local id (> 0).
    pub id: u32,
    pub metric: String,
    /// `None`: a kind this collector does not know; the series is refused (not stored, its samples skipped).
    pub kind: Option<SeriesKind>,
    /// The [`LinkInfo::id`] of the link it measures; 0 for node-level series.
    pub link_id: u32,
    /// Extra labels, sorted by key.
    pub labels: Vec<(String, String)>,
    /// How often the agent reads it; `None` when it did not say (read as fast). Sizes the series' ring.
    pub tier: Option<Tier>,
}

/// Links and series of one `Hello` or `InventoryUpdate`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Inventory {
    pub links: Vec<LinkInfo>,
    /// Every series described, the refused ones included (as `kind: None`: not stored, samples skipped).
    pub series: Vec<SeriesDesc>,
    /// The series refused for what they say (a metric or label this collector does not accept), and why.
    pub refused: Vec<RefusedSeries>,
}

/// A series whose description this collector refuses (its metric or a label name is invalid or reserved here):
/// it is not stored and its samples are skipped and counted, while the rest of the stream goes on — an agent
/// newer than its collector may send a series the collector does not accept yet.
#[derive(Debug, Clone, PartialEq)]
pub struct RefusedSeries {
    pub id: u32,
    /// What is wrong, naming the field (`series[id=7].labels: "node" is reserved`).
    pub reason: String,
}

/// An agent instance's greeting: who it is and its complete inventory at connect time.
#[derive(Debug, Clone, PartialEq)]
pub struct Hello {
    pub node: String,
    pub agent_version: String,
    pub boot_id: String,
    pub instance_id: u64,
    pub inventory: Inventory,
    /// Sampling periods the agent uses, ms; 0 when it did not say.
    pub fast_period_ms: u32,
    pub slow_period_ms: u32,
    /// What the agent cannot see though a GPU node must have it (empty: it sees what it should).
    pub blind: Vec<Blindness>,
}

/// Something an agent is blind to, as its `Hello` says: NVML that does not load or reports no GPU
/// (`what` = `gpu`), no fabric link at all (`fabric`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Blindness {
    /// Short stable code (`no_nvml`, `no_fabric`, or one a newer agent knows).
    pub code: String,
    /// What the node is blind to: `gpu`, `fabric`.
    pub what: String,
    /// The agent's sentence: why, and what to do.
    pub reason: String,
}

/// A batch of samples whose shape holds: `len(timestamps) == len(tick_lengths)`,
/// `sum(tick_lengths) == len(series_ids) == len(values)`, `seq > 0`, timestamps > 0. Whether every series id
/// was described is the store's to check: it knows the instance's descriptors.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub seq: u64,
    pub timestamps_unix_ns: Vec<i64>,
    pub tick_lengths: Vec<u32>,
    pub series_ids: Vec<u32>,
    pub values: Vec<u64>,
    pub dropped_batches_total: u64,
    /// The batch's valid step markers, in arrival order.
    pub markers: Vec<Marker>,
    /// Markers of the batch that failed validation: dropped and counted, the batch and the stream go on (a
    /// training loop's bad marker must not cost the node its samples).
    pub invalid_markers: u64,
    /// The batch's valid NCCL Inspector records (host and receipt time set when the batch is applied).
    pub collectives: Vec<super::CollectiveEntry>,
    /// Inspector records of the batch that failed validation, one bounded reason each (the label values of
    /// `commwatch_collector_refused_collectives_total`): dropped and counted, the batch goes on.
    pub invalid_collectives: Vec<&'static str>,
}

impl Batch {
    /// Batch `seq` with no samples, markers or records (to be filled in).
    pub fn numbered(seq: u64) -> Batch {
        Batch {
            seq,
            timestamps_unix_ns: vec![],
            tick_lengths: vec![],
            series_ids: vec![],
            values: vec![],
            dropped_batches_total: 0,
            markers: vec![],
            invalid_markers: 0,
            collectives: vec![],
            invalid_collectives: vec![],
        }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// Step phase of a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepPhase {
    Begin,
    End,
}

/// A step marker of a training process. `received_unix_ns` is the agent's clock (the clock of the node's
/// samples); `sent_unix_ns` is the sender's clock (0 when absent) and is informational only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// Non-empty, bounded, no control characters.
    pub job: String,
    pub rank: u32,
    pub step: u64,
    pub phase: StepPhase,
    pub sent_unix_ns: i64,
    /// > 0.
    pub received_unix_ns: i64,
    pub samples: Option<u64>,
}

/// A node's complete job list as its agent last sent it (replaced as a whole, never patched).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobList {
    pub jobs: Vec<Job>,
}

impl JobList {
    /// Ranks over all jobs.
    pub fn rank_count(&self) -> usize {
        self.jobs.iter().map(|j| j.ranks.len()).sum()
    }
}
