//! Validated domain types built from the wire messages with `TryFrom` (edge validation). Anything the wire can
//! say wrong becomes an [`IngestError`] naming the field; nothing here panics on input.
//!
//! Enum compatibility (per the proto's rules): an unknown link class or role maps to `Unknown` (still stored,
//! exported as `"unknown"`); a series of unspecified or unknown kind is *refused*: it is not stored and its
//! samples are skipped (counted), the stream goes on.

use commwatch_proto::v1 as pb;
use std::collections::BTreeMap;
use tonic::Status;

use crate::config::Limits;

/// Why a stream was failed. `Invalid` → `INVALID_ARGUMENT`, `Limit` → `RESOURCE_EXHAUSTED`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IngestError {
    #[error("invalid {field}: {reason}")]
    Invalid { field: String, reason: String },
    #[error("limit exceeded at {field}: {reason}")]
    Limit {
        field: String,
        reason: String,
        /// Bounded label value for `commwatch_collector_rejected_streams_total{reason}`.
        limit: &'static str,
    },
    /// The bytes are not a valid `AgentMessage` (tonic's protobuf decode failed).
    #[error("undecodable message: {0}")]
    Decode(String),
}

impl IngestError {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        IngestError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub fn limit(limit: &'static str, field: impl Into<String>, reason: impl Into<String>) -> Self {
        IngestError::Limit {
            field: field.into(),
            reason: reason.into(),
            limit,
        }
    }

    /// The gRPC status the stream fails with.
    pub fn to_status(&self) -> Status {
        match self {
            IngestError::Invalid { .. } | IngestError::Decode(_) => {
                Status::invalid_argument(self.to_string())
            }
            IngestError::Limit { .. } => Status::resource_exhausted(self.to_string()),
        }
    }

    /// The `reason` label of `commwatch_collector_rejected_streams_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            IngestError::Invalid { .. } => "invalid_argument",
            IngestError::Decode(_) => "decode",
            IngestError::Limit { limit, .. } => limit,
        }
    }
}

/// Link class as exported in the `class` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkClass {
    Infiniband,
    Roce,
    Ethernet,
    Nvlink,
    /// A value this collector does not know (newer agent) or unspecified.
    Unknown,
}

impl LinkClass {
    pub fn from_wire(v: i32) -> LinkClass {
        match pb::LinkClass::try_from(v) {
            Ok(pb::LinkClass::Infiniband) => LinkClass::Infiniband,
            Ok(pb::LinkClass::Roce) => LinkClass::Roce,
            Ok(pb::LinkClass::Ethernet) => LinkClass::Ethernet,
            Ok(pb::LinkClass::Nvlink) => LinkClass::Nvlink,
            Ok(pb::LinkClass::Unspecified) | Err(_) => LinkClass::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LinkClass::Infiniband => "infiniband",
            LinkClass::Roce => "roce",
            LinkClass::Ethernet => "ethernet",
            LinkClass::Nvlink => "nvlink",
            LinkClass::Unknown => "unknown",
        }
    }
}

/// Serialised as its label value (`"infiniband"`, ...), as in the API.
impl serde::Serialize for LinkClass {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Serialised as its label value (`"fabric"`, ...), as in the API.
impl serde::Serialize for LinkRole {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Link role as exported in the `role` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkRole {
    Fabric,
    Management,
    Unknown,
}

impl LinkRole {
    pub fn from_wire(v: i32) -> LinkRole {
        match pb::LinkRole::try_from(v) {
            Ok(pb::LinkRole::Fabric) => LinkRole::Fabric,
            Ok(pb::LinkRole::Management) => LinkRole::Management,
            Ok(pb::LinkRole::Unspecified) | Err(_) => LinkRole::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LinkRole::Fabric => "fabric",
            LinkRole::Management => "management",
            LinkRole::Unknown => "unknown",
        }
    }
}

/// Identity of a link on a node, stable across agent restarts: `(class, device, port)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkKey {
    pub class: LinkClass,
    pub device: String,
    pub port: String,
}

/// One link of the inventory.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkInfo {
    /// Agent-local id (> 0), valid for one agent instance.
    pub id: u32,
    pub key: LinkKey,
    pub role: LinkRole,
    /// Bytes per second per direction; `None` when the agent does not know it.
    pub capacity_bytes_per_second: Option<f64>,
    pub state: String,
    /// NVLink: GPU index and link number.
    pub gpu: Option<String>,
    pub link: Option<String>,
    /// Other facts the agent reported (`rate`, `phys_state`, `link_layer`, `netdev`, ...); at most
    /// [`MAX_LINK_ATTRIBUTES`], each key and value bounded by `Limits.max_label_len`.
    pub attributes: BTreeMap<String, String>,
}

/// Most attributes one link may carry.
pub const MAX_LINK_ATTRIBUTES: usize = 32;

/// Kind of a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesKind {
    /// Monotonic counter that saturates at `max_value`.
    Counter { max_value: u64 },
    /// Instantaneous value (f64 bits on the wire).
    Gauge,
}

/// One series descriptor.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesDesc {
    /// Agent-local id (> 0).
    pub id: u32,
    pub metric: String,
    /// `None`: a kind this collector does not know; the series is refused.
    pub kind: Option<SeriesKind>,
    /// 0 for node-level series.
    pub link_id: u32,
    /// Extra labels, sorted by key.
    pub labels: Vec<(String, String)>,
    /// 1 = fast, 2 = slow; informational.
    pub tier: u32,
}

/// Links and series of one `Hello` or `InventoryUpdate`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Inventory {
    pub links: Vec<LinkInfo>,
    pub series: Vec<SeriesDesc>,
}

/// A validated `Hello`.
#[derive(Debug, Clone, PartialEq)]
pub struct Hello {
    pub node: String,
    pub agent_version: String,
    pub boot_id: String,
    pub instance_id: u64,
    pub inventory: Inventory,
    pub fast_period_ms: u32,
    pub slow_period_ms: u32,
}

/// Label names the collector sets itself; an agent label with one of these names is refused.
pub const RESERVED_LABELS: &[&str] = &[
    "node", "class", "device", "port", "role", "gpu", "link", "counter", "job", "kind", "severity",
    "le", "quantile", "instance",
];

/// Node name: non-empty, at most 253 bytes, no control characters.
pub fn validate_node_name(node: &str) -> Result<(), IngestError> {
    if node.is_empty() {
        return Err(IngestError::invalid("hello.node", "empty"));
    }
    if node.len() > 253 {
        return Err(IngestError::invalid(
            "hello.node",
            format!("{} bytes, at most 253 allowed", node.len()),
        ));
    }
    if node.chars().any(|c| c.is_control()) {
        return Err(IngestError::invalid(
            "hello.node",
            "contains control characters",
        ));
    }
    Ok(())
}

fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
}

fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z' | 'A'..='Z' | '_'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with("__")
}

fn opt(s: String) -> Option<String> {
    if s.is_empty() {
        None
    } else {
        Some(s)
    }
}

impl TryFrom<pb::Link> for LinkInfo {
    type Error = IngestError;

    fn try_from(l: pb::Link) -> Result<Self, Self::Error> {
        if l.id == 0 {
            return Err(IngestError::invalid("link.id", "must be > 0"));
        }
        let f = |name: &str| format!("link[id={}].{name}", l.id);
        if l.device.is_empty() {
            return Err(IngestError::invalid(f("device"), "empty"));
        }
        let cap = l.capacity_bytes_per_second;
        if !cap.is_finite() || cap < 0.0 {
            return Err(IngestError::invalid(
                f("capacity_bytes_per_second"),
                format!("{cap} is not a finite non-negative number"),
            ));
        }
        Ok(LinkInfo {
            id: l.id,
            key: LinkKey {
                class: LinkClass::from_wire(l.class),
                device: l.device,
                port: l.port,
            },
            role: LinkRole::from_wire(l.role),
            capacity_bytes_per_second: (cap > 0.0).then_some(cap),
            state: l.state,
            gpu: opt(l.gpu),
            link: opt(l.link),
            attributes: l.attributes.into_iter().collect(),
        })
    }
}

impl TryFrom<pb::SeriesDescriptor> for SeriesDesc {
    type Error = IngestError;

    fn try_from(s: pb::SeriesDescriptor) -> Result<Self, Self::Error> {
        if s.id == 0 {
            return Err(IngestError::invalid("series.id", "must be > 0"));
        }
        let f = |name: &str| format!("series[id={}].{name}", s.id);
        if !is_metric_name(&s.metric) {
            return Err(IngestError::invalid(
                f("metric"),
                format!("{:?} is not lower_snake_case", s.metric),
            ));
        }
        let mut labels: Vec<(String, String)> = s.labels.into_iter().collect();
        labels.sort();
        for (k, _) in &labels {
            if !is_label_name(k) {
                return Err(IngestError::invalid(
                    f("labels"),
                    format!("{k:?} is not a label name"),
                ));
            }
            // Node-level GPU series (`gpu_*`) name their GPU with `gpu`; on link series it comes from the link.
            let node_gpu = k == "gpu" && s.link_id == 0;
            if RESERVED_LABELS.contains(&k.as_str()) && !node_gpu {
                return Err(IngestError::invalid(
                    f("labels"),
                    format!("{k:?} is reserved"),
                ));
            }
        }
        let kind = match pb::SeriesKind::try_from(s.kind) {
            Ok(pb::SeriesKind::Counter) => Some(SeriesKind::Counter {
                max_value: if s.max_value == 0 {
                    u64::MAX
                } else {
                    s.max_value
                },
            }),
            Ok(pb::SeriesKind::Gauge) => Some(SeriesKind::Gauge),
            Ok(pb::SeriesKind::Unspecified) | Err(_) => None,
        };
        Ok(SeriesDesc {
            id: s.id,
            metric: s.metric,
            kind,
            link_id: s.link_id,
            labels,
            tier: u32::try_from(s.tier).unwrap_or(0),
        })
    }
}

impl TryFrom<Option<pb::Inventory>> for Inventory {
    type Error = IngestError;

    /// A missing inventory is an empty one (proto3: an absent message equals its default).
    fn try_from(inv: Option<pb::Inventory>) -> Result<Self, Self::Error> {
        let inv = inv.unwrap_or_default();
        let links = inv
            .links
            .into_iter()
            .map(LinkInfo::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let series = inv
            .series
            .into_iter()
            .map(SeriesDesc::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let mut ids: Vec<u32> = links.iter().map(|l| l.id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(IngestError::invalid(
                "inventory.links.id",
                format!("{} described twice", w[0]),
            ));
        }
        let mut ids: Vec<u32> = series.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(IngestError::invalid(
                "inventory.series.id",
                format!("{} described twice", w[0]),
            ));
        }
        Ok(Inventory { links, series })
    }
}

impl TryFrom<pb::Hello> for Hello {
    type Error = IngestError;

    fn try_from(h: pb::Hello) -> Result<Self, Self::Error> {
        validate_node_name(&h.node)?;
        if h.instance_id == 0 {
            return Err(IngestError::invalid("hello.instance_id", "must be > 0"));
        }
        Ok(Hello {
            inventory: Inventory::try_from(h.inventory)?,
            node: h.node,
            agent_version: h.agent_version,
            boot_id: h.boot_id,
            instance_id: h.instance_id,
            fast_period_ms: h.fast_period_ms,
            slow_period_ms: h.slow_period_ms,
        })
    }
}

impl Inventory {
    /// Checks the per-agent string limits (`RESOURCE_EXHAUSTED` when exceeded).
    pub fn check_limits(&self, limits: &Limits) -> Result<(), IngestError> {
        let max = limits.max_label_len;
        let check = |field: String, s: &str| -> Result<(), IngestError> {
            if s.len() > max {
                Err(IngestError::limit(
                    "label_len",
                    field,
                    format!("{} bytes, limit {max}", s.len()),
                ))
            } else {
                Ok(())
            }
        };
        for l in &self.links {
            let f = |n: &str| format!("link[id={}].{n}", l.id);
            check(f("device"), &l.key.device)?;
            check(f("port"), &l.key.port)?;
            check(f("state"), &l.state)?;
            check(f("gpu"), l.gpu.as_deref().unwrap_or(""))?;
            check(f("link"), l.link.as_deref().unwrap_or(""))?;
            if l.attributes.len() > MAX_LINK_ATTRIBUTES {
                return Err(IngestError::limit(
                    "label_len",
                    f("attributes"),
                    format!(
                        "{} attributes, limit {MAX_LINK_ATTRIBUTES}",
                        l.attributes.len()
                    ),
                ));
            }
            for (k, v) in &l.attributes {
                check(f("attributes key"), k)?;
                check(f(&format!("attributes[{k}]")), v)?;
            }
        }
        for s in &self.series {
            let f = |n: &str| format!("series[id={}].{n}", s.id);
            check(f("metric"), &s.metric)?;
            if s.labels.len() > 16 {
                return Err(IngestError::limit(
                    "label_len",
                    f("labels"),
                    format!("{} labels, limit 16", s.labels.len()),
                ));
            }
            for (k, v) in &s.labels {
                check(f("labels"), k)?;
                check(f("labels"), v)?;
            }
        }
        Ok(())
    }
}

/// A `SampleBatch` whose shape invariants hold: `len(timestamps) == len(tick_lengths)`,
/// `sum(tick_lengths) == len(series_ids) == len(values)`, `seq > 0`, timestamps > 0. Whether every series id was
/// described is checked by the store, which knows the instance's descriptors.
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
    /// Markers of the batch that failed validation ([`Marker::try_from`]): dropped and counted, the batch
    /// and the stream go on (a training loop's bad marker must not cost the node its samples).
    pub invalid_markers: u64,
}

/// Step phase of a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepPhase {
    Begin,
    End,
}

/// A validated step marker. `received_unix_ns` is the agent's clock (the clock of the node's samples);
/// `sent_unix_ns` is the sender's clock (0 when absent) and is informational only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// Non-empty, at most [`MAX_MARKER_JOB_LEN`] bytes, no control characters.
    pub job: String,
    pub rank: u32,
    pub step: u64,
    pub phase: StepPhase,
    pub sent_unix_ns: i64,
    /// > 0.
    pub received_unix_ns: i64,
    pub samples: Option<u64>,
}

/// Longest job id of a marker, in bytes (as the agent's listener enforces).
pub const MAX_MARKER_JOB_LEN: usize = 128;

impl TryFrom<pb::StepMarker> for Marker {
    type Error = IngestError;

    fn try_from(m: pb::StepMarker) -> Result<Self, Self::Error> {
        if m.job.is_empty() || m.job.len() > MAX_MARKER_JOB_LEN {
            return Err(IngestError::invalid(
                "marker.job",
                format!("{} bytes, 1..={MAX_MARKER_JOB_LEN} allowed", m.job.len()),
            ));
        }
        if m.job.chars().any(|c| c.is_control()) {
            return Err(IngestError::invalid(
                "marker.job",
                "contains control characters",
            ));
        }
        let phase = match pb::StepPhase::try_from(m.phase) {
            Ok(pb::StepPhase::Begin) => StepPhase::Begin,
            Ok(pb::StepPhase::End) => StepPhase::End,
            Ok(pb::StepPhase::Unspecified) | Err(_) => {
                return Err(IngestError::invalid(
                    "marker.phase",
                    format!("{} is not begin or end", m.phase),
                ))
            }
        };
        if m.received_unix_ns <= 0 {
            return Err(IngestError::invalid(
                "marker.received_unix_ns",
                format!("{} is not after the Unix epoch", m.received_unix_ns),
            ));
        }
        Ok(Marker {
            job: m.job,
            rank: m.rank,
            step: m.step,
            phase,
            sent_unix_ns: m.sent_unix_ns.max(0),
            received_unix_ns: m.received_unix_ns,
            samples: m.samples,
        })
    }
}

impl Batch {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl TryFrom<pb::SampleBatch> for Batch {
    type Error = IngestError;

    fn try_from(b: pb::SampleBatch) -> Result<Self, Self::Error> {
        if b.seq == 0 {
            return Err(IngestError::invalid("batch.seq", "must be > 0"));
        }
        if b.timestamps_unix_ns.len() != b.tick_lengths.len() {
            return Err(IngestError::invalid(
                "batch.tick_lengths",
                format!(
                    "{} tick lengths for {} timestamps",
                    b.tick_lengths.len(),
                    b.timestamps_unix_ns.len()
                ),
            ));
        }
        let total: u64 = b.tick_lengths.iter().map(|&n| u64::from(n)).sum();
        if total != b.series_ids.len() as u64 {
            return Err(IngestError::invalid(
                "batch.series_ids",
                format!(
                    "{} series ids, tick lengths sum to {total}",
                    b.series_ids.len()
                ),
            ));
        }
        if b.values.len() != b.series_ids.len() {
            return Err(IngestError::invalid(
                "batch.values",
                format!(
                    "{} values for {} series ids",
                    b.values.len(),
                    b.series_ids.len()
                ),
            ));
        }
        if let Some(t) = b.timestamps_unix_ns.iter().find(|&&t| t <= 0) {
            return Err(IngestError::invalid(
                "batch.timestamps_unix_ns",
                format!("{t} is not after the Unix epoch"),
            ));
        }
        let mut markers = Vec::with_capacity(b.markers.len());
        let mut invalid_markers = 0u64;
        for m in b.markers {
            match Marker::try_from(m) {
                Ok(m) => markers.push(m),
                Err(_) => invalid_markers += 1,
            }
        }
        Ok(Batch {
            seq: b.seq,
            timestamps_unix_ns: b.timestamps_unix_ns,
            tick_lengths: b.tick_lengths,
            series_ids: b.series_ids,
            values: b.values,
            dropped_batches_total: b.dropped_batches_total,
            markers,
            invalid_markers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> pb::SampleBatch {
        pb::SampleBatch {
            seq: 1,
            timestamps_unix_ns: vec![1, 2],
            tick_lengths: vec![1, 2],
            series_ids: vec![1, 1, 2],
            values: vec![1, 2, 3],
            ..Default::default()
        }
    }

    #[test]
    fn batch_invariants() {
        assert!(Batch::try_from(batch()).is_ok());
        let mut b = batch();
        b.values.pop();
        let e = Batch::try_from(b).unwrap_err();
        assert!(e.to_string().contains("batch.values"), "{e}");
        let mut b = batch();
        b.tick_lengths = vec![3];
        assert!(Batch::try_from(b)
            .unwrap_err()
            .to_string()
            .contains("batch.tick_lengths"));
        let mut b = batch();
        b.tick_lengths = vec![1, 1];
        assert!(Batch::try_from(b)
            .unwrap_err()
            .to_string()
            .contains("batch.series_ids"));
        let mut b = batch();
        b.seq = 0;
        assert!(Batch::try_from(b)
            .unwrap_err()
            .to_string()
            .contains("batch.seq"));
        let mut b = batch();
        b.tick_lengths = vec![u32::MAX, u32::MAX];
        assert!(Batch::try_from(b).is_err());
    }

    #[test]
    fn markers_validated_not_fatal() {
        let m = |job: &str, phase: i32, received: i64| pb::StepMarker {
            job: job.into(),
            rank: 3,
            step: 7,
            phase,
            sent_unix_ns: -5,
            received_unix_ns: received,
            samples: Some(64),
        };
        let mut b = batch();
        b.markers = vec![
            m("j1", pb::StepPhase::End as i32, 10),
            m("", pb::StepPhase::End as i32, 10),
            m("j1", 0, 10),
            m("j1", 9, 10),
            m("j1", pb::StepPhase::Begin as i32, 0),
            m(&"x".repeat(129), pb::StepPhase::Begin as i32, 10),
            m("a\u{7}b", pb::StepPhase::Begin as i32, 10),
            m("j2", pb::StepPhase::Begin as i32, 11),
        ];
        let b = Batch::try_from(b).expect("bad markers do not fail the batch");
        assert_eq!(b.invalid_markers, 6);
        assert_eq!(b.markers.len(), 2);
        assert_eq!(
            b.markers[0],
            Marker {
                job: "j1".into(),
                rank: 3,
                step: 7,
                phase: StepPhase::End,
                sent_unix_ns: 0,
                received_unix_ns: 10,
                samples: Some(64),
            }
        );
        assert_eq!(b.markers[1].phase, StepPhase::Begin);
        assert_eq!(b.markers[1].job, "j2");
    }

    #[test]
    fn hello_node_name() {
        let h = |node: &str| pb::Hello {
            node: node.into(),
            instance_id: 1,
            ..Default::default()
        };
        assert!(Hello::try_from(h("n1")).is_ok());
        assert!(Hello::try_from(h(""))
            .unwrap_err()
            .to_string()
            .contains("hello.node"));
        assert!(Hello::try_from(h(&"a".repeat(254))).is_err());
        assert!(Hello::try_from(h("a\nb")).is_err());
        let mut x = h("n1");
        x.instance_id = 0;
        assert!(Hello::try_from(x)
            .unwrap_err()
            .to_string()
            .contains("instance_id"));
    }

    #[test]
    fn unknown_enums() {
        let l = LinkInfo::try_from(pb::Link {
            id: 1,
            class: 99,
            role: 42,
            device: "mlx5_0".into(),
            port: "1".into(),
            ..Default::default()
        })
        .expect("unknown enums are accepted");
        assert_eq!(l.key.class.as_str(), "unknown");
        assert_eq!(l.role.as_str(), "unknown");
        assert_eq!(l.capacity_bytes_per_second, None);
        let s = SeriesDesc::try_from(pb::SeriesDescriptor {
            id: 1,
            metric: "tx_bytes".into(),
            kind: 7,
            ..Default::default()
        })
        .expect("unknown kind is refused, not an error");
        assert_eq!(s.kind, None);
        let e = SeriesDesc::try_from(pb::SeriesDescriptor {
            id: 1,
            metric: "Tx-Bytes".into(),
            kind: 1,
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("metric"));
        let mut labels = std::collections::HashMap::new();
        labels.insert("node".to_string(), "x".to_string());
        assert!(SeriesDesc::try_from(pb::SeriesDescriptor {
            id: 1,
            metric: "tx_bytes".into(),
            kind: 1,
            labels,
            ..Default::default()
        })
        .is_err());
    }
}

/// Most jobs one node's job list may hold.
pub const MAX_JOBS_PER_NODE: usize = 64;
/// Most ranks one node's job list may hold, over all its jobs.
pub const MAX_RANKS_PER_NODE: usize = 1_024;
/// Most GPUs one rank may list.
pub const MAX_GPUS_PER_RANK: usize = 64;
/// Most NCCL settings one rank may carry.
pub const MAX_NCCL_SETTINGS_PER_RANK: usize = 128;
/// Most conflicts one job may carry on one node.
pub const MAX_CONFLICTS_PER_JOB: usize = 64;
/// Longest job id, in bytes (the proto's bound; [`Limits::max_label_len`] applies too).
pub const MAX_JOB_ID_LEN: usize = 128;
/// Longest NCCL setting name, in bytes (as the agent's allowlist enforces).
pub const MAX_NCCL_KEY_LEN: usize = 64;

/// An NCCL setting that contradicts the node's hardware, as the agent computed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclConflict {
    /// `NCCL_SOCKET_IFNAME`, `NCCL_IB_DISABLE`, `NCCL_NET`, `NCCL_IB_HCA`, ...
    pub setting: String,
    pub value: String,
    /// `management_interface`, `missing_interface`, `ib_disabled`, `hca_excluded` (or a kind a newer agent
    /// knows; it is passed on as is).
    pub kind: String,
    /// One sentence for operators.
    pub reason: String,
}

/// A process of a job on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRank {
    pub pid: u32,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    /// GPU indexes (NVML) or `CUDA_VISIBLE_DEVICES` entries.
    pub gpus: Vec<String>,
    /// Kubernetes pod UID; `None` outside Kubernetes.
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
    /// `NCCL_*` settings only (any other key fails validation).
    pub nccl: std::collections::BTreeMap<String, String>,
    /// `nvml` or `environment` (free text from newer agents).
    pub found_by: String,
}

/// One training job as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeJob {
    /// Non-empty, at most [`MAX_JOB_ID_LEN`] bytes, no control characters.
    pub id: String,
    pub ranks: Vec<JobRank>,
    pub conflicts: Vec<NcclConflict>,
}

/// A node's complete job list (`InventoryUpdate.jobs`), validated: at most [`MAX_JOBS_PER_NODE`] jobs with
/// distinct ids, [`MAX_RANKS_PER_NODE`] ranks in all, bounded GPUs, settings and conflicts, setting names of
/// the form `NCCL_[A-Z0-9_]+`. Every failure is `INVALID_ARGUMENT`: a job list is replaced as a whole, so a bad
/// one is malformed input, not a partial update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobList {
    pub jobs: Vec<NodeJob>,
}

fn nccl_key_ok(k: &str) -> bool {
    k.len() > "NCCL_".len()
        && k.len() <= MAX_NCCL_KEY_LEN
        && k.starts_with("NCCL_")
        && k.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn count_ok(field: String, n: usize, max: usize) -> Result<(), IngestError> {
    if n > max {
        Err(IngestError::invalid(
            field,
            format!("{n} entries, at most {max} allowed"),
        ))
    } else {
        Ok(())
    }
}

fn no_control(field: impl Fn() -> String, s: &str) -> Result<(), IngestError> {
    if s.chars().any(char::is_control) {
        Err(IngestError::invalid(field(), "contains control characters"))
    } else {
        Ok(())
    }
}

impl TryFrom<pb::JobInventory> for JobList {
    type Error = IngestError;

    fn try_from(inv: pb::JobInventory) -> Result<Self, Self::Error> {
        count_ok("jobs".into(), inv.jobs.len(), MAX_JOBS_PER_NODE)?;
        let total_ranks: usize = inv.jobs.iter().map(|j| j.ranks.len()).sum();
        count_ok("jobs[].ranks".into(), total_ranks, MAX_RANKS_PER_NODE)?;
        let mut jobs: Vec<NodeJob> = Vec::with_capacity(inv.jobs.len());
        for (ji, j) in inv.jobs.into_iter().enumerate() {
            if j.id.is_empty() || j.id.len() > MAX_JOB_ID_LEN {
                return Err(IngestError::invalid(
                    format!("jobs[{ji}].id"),
                    format!("{} bytes, 1..={MAX_JOB_ID_LEN} allowed", j.id.len()),
                ));
            }
            no_control(|| format!("jobs[{ji}].id"), &j.id)?;
            if jobs.iter().any(|x| x.id == j.id) {
                return Err(IngestError::invalid(
                    format!("jobs[{ji}].id"),
                    "the same job id twice in one job list",
                ));
            }
            count_ok(
                format!("jobs[{ji}].conflicts"),
                j.conflicts.len(),
                MAX_CONFLICTS_PER_JOB,
            )?;
            let mut ranks = Vec::with_capacity(j.ranks.len());
            for (ri, r) in j.ranks.into_iter().enumerate() {
                let f = |n: &str| format!("jobs[{ji}].ranks[{ri}].{n}");
                count_ok(f("gpus"), r.gpus.len(), MAX_GPUS_PER_RANK)?;
                count_ok(f("nccl"), r.nccl.len(), MAX_NCCL_SETTINGS_PER_RANK)?;
                if let Some(k) = r.nccl.keys().find(|k| !nccl_key_ok(k)) {
                    // The key is not echoed: only `NCCL_*` names may ever be stored or logged.
                    return Err(IngestError::invalid(
                        f("nccl"),
                        format!("a key of {} bytes is not an NCCL_* setting name", k.len()),
                    ));
                }
                let opt = |s: String| (!s.is_empty()).then_some(s);
                ranks.push(JobRank {
                    pid: r.pid,
                    rank: r.rank,
                    local_rank: r.local_rank,
                    world_size: r.world_size,
                    gpus: r.gpus,
                    pod_uid: opt(r.pod_uid),
                    container_id: opt(r.container_id),
                    nccl: r.nccl.into_iter().collect(),
                    found_by: r.found_by,
                });
            }
            let mut conflicts = Vec::with_capacity(j.conflicts.len());
            for (ci, c) in j.conflicts.into_iter().enumerate() {
                if !nccl_key_ok(&c.setting) {
                    return Err(IngestError::invalid(
                        format!("jobs[{ji}].conflicts[{ci}].setting"),
                        "not an NCCL_* setting name",
                    ));
                }
                if c.kind.is_empty() {
                    return Err(IngestError::invalid(
                        format!("jobs[{ji}].conflicts[{ci}].kind"),
                        "empty",
                    ));
                }
                no_control(|| format!("jobs[{ji}].conflicts[{ci}].kind"), &c.kind)?;
                conflicts.push(NcclConflict {
                    setting: c.setting,
                    value: c.value,
                    kind: c.kind,
                    reason: c.reason,
                });
            }
            jobs.push(NodeJob {
                id: j.id,
                ranks,
                conflicts,
            });
        }
        Ok(JobList { jobs })
    }
}

impl JobList {
    /// Converts and checks a received (or persisted) job list: [`TryFrom`] and then [`JobList::check_limits`].
    pub fn validated(inv: pb::JobInventory, limits: &Limits) -> Result<JobList, IngestError> {
        let l = JobList::try_from(inv)?;
        l.check_limits(limits)?;
        Ok(l)
    }

    /// Checks every string against [`Limits::max_label_len`] (job ids, GPUs, pod and container ids, setting
    /// values, conflict fields; `found_by` and conflict reasons too). A failure is `INVALID_ARGUMENT`.
    pub fn check_limits(&self, limits: &Limits) -> Result<(), IngestError> {
        let max = limits.max_label_len;
        let check = |field: &dyn Fn() -> String, s: &str| -> Result<(), IngestError> {
            if s.len() > max {
                Err(IngestError::invalid(
                    field(),
                    format!("{} bytes, limit {max}", s.len()),
                ))
            } else {
                Ok(())
            }
        };
        for (ji, j) in self.jobs.iter().enumerate() {
            check(&|| format!("jobs[{ji}].id"), &j.id)?;
            for (ri, r) in j.ranks.iter().enumerate() {
                let f = |n: &'static str| move || format!("jobs[{ji}].ranks[{ri}].{n}");
                for g in &r.gpus {
                    check(&f("gpus"), g)?;
                }
                check(&f("pod_uid"), r.pod_uid.as_deref().unwrap_or(""))?;
                check(&f("container_id"), r.container_id.as_deref().unwrap_or(""))?;
                check(&f("found_by"), &r.found_by)?;
                for v in r.nccl.values() {
                    check(&f("nccl"), v)?;
                }
            }
            for (ci, c) in j.conflicts.iter().enumerate() {
                let f = |n: &'static str| move || format!("jobs[{ji}].conflicts[{ci}].{n}");
                check(&f("value"), &c.value)?;
                check(&f("kind"), &c.kind)?;
                // A sentence: allowed four labels' worth.
                if c.reason.len() > 4 * max {
                    return Err(IngestError::invalid(
                        f("reason")(),
                        format!("{} bytes, limit {}", c.reason.len(), 4 * max),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Ranks over all jobs.
    pub fn rank_count(&self) -> usize {
        self.jobs.iter().map(|j| j.ranks.len()).sum()
    }
}

#[cfg(test)]
mod job_tests {
    use super::*;

    fn rank(pid: u32, nccl: &[(&str, &str)]) -> pb::Rank {
        pb::Rank {
            pid,
            rank: Some(pid),
            local_rank: Some(0),
            world_size: Some(16),
            gpus: vec!["0".into()],
            pod_uid: String::new(),
            container_id: String::new(),
            nccl: nccl
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            found_by: "environment".into(),
        }
    }

    fn job(id: &str, ranks: Vec<pb::Rank>) -> pb::Job {
        pb::Job {
            id: id.into(),
            ranks,
            conflicts: vec![pb::NcclConflict {
                setting: "NCCL_SOCKET_IFNAME".into(),
                value: "eth0".into(),
                kind: "management_interface".into(),
                reason: "eth0 is a management interface.".into(),
            }],
        }
    }

    fn inv(jobs: Vec<pb::Job>) -> pb::JobInventory {
        pb::JobInventory { jobs }
    }

    fn is_invalid(r: Result<JobList, IngestError>) -> bool {
        matches!(r, Err(ref e @ IngestError::Invalid { .. }) if e.to_status().code() == tonic::Code::InvalidArgument)
    }

    #[test]
    fn converts_a_job_list() {
        let l = JobList::try_from(inv(vec![job(
            "4242",
            vec![rank(7, &[("NCCL_SOCKET_IFNAME", "eth0")])],
        )]))
        .expect("valid");
        assert_eq!(l.jobs.len(), 1);
        let r = &l.jobs[0].ranks[0];
        assert_eq!((r.pid, r.rank, r.world_size), (7, Some(7), Some(16)));
        assert_eq!(r.pod_uid, None);
        assert_eq!(
            r.nccl.get("NCCL_SOCKET_IFNAME").map(String::as_str),
            Some("eth0")
        );
        assert_eq!(l.jobs[0].conflicts[0].kind, "management_interface");
        assert!(l.check_limits(&Limits::default()).is_ok());
        assert_eq!(
            JobList::try_from(inv(vec![])).expect("empty"),
            JobList::default()
        );
    }

    #[test]
    fn malformed_job_lists_are_invalid() {
        assert!(is_invalid(JobList::try_from(inv(vec![job("", vec![])]))));
        assert!(is_invalid(JobList::try_from(inv(vec![job(
            &"x".repeat(129),
            vec![]
        )]))));
        assert!(is_invalid(JobList::try_from(inv(vec![job(
            "a\nb",
            vec![]
        )]))));
        assert!(is_invalid(JobList::try_from(inv(vec![
            job("a", vec![]),
            job("a", vec![])
        ]))));
        // A key outside NCCL_* (what a secret would look like) is refused, and not echoed in the error.
        let bad = JobList::try_from(inv(vec![job(
            "a",
            vec![rank(1, &[("AWS_SECRET_ACCESS_KEY", "hunter2")])],
        )]));
        assert!(is_invalid(bad.clone()));
        let msg = bad.expect_err("invalid").to_string();
        assert!(!msg.contains("AWS") && !msg.contains("hunter2"), "{msg}");
        assert!(is_invalid(JobList::try_from(inv(vec![job(
            "a",
            vec![rank(1, &[("nccl_lower", "x")])]
        )]))));
        let mut c = job("a", vec![]);
        c.conflicts[0].setting = "PATH".into();
        assert!(is_invalid(JobList::try_from(inv(vec![c]))));
        let mut c = job("a", vec![]);
        c.conflicts[0].kind = String::new();
        assert!(is_invalid(JobList::try_from(inv(vec![c]))));
    }

    #[test]
    fn counts_are_bounded() {
        let many: Vec<pb::Job> = (0..=MAX_JOBS_PER_NODE)
            .map(|i| job(&i.to_string(), vec![]))
            .collect();
        assert!(is_invalid(JobList::try_from(inv(many))));
        let ranks: Vec<pb::Rank> = (0..=MAX_RANKS_PER_NODE as u32)
            .map(|p| rank(p, &[]))
            .collect();
        assert!(is_invalid(JobList::try_from(inv(vec![job("a", ranks)]))));
        let mut r = rank(1, &[]);
        r.gpus = (0..=MAX_GPUS_PER_RANK).map(|g| g.to_string()).collect();
        assert!(is_invalid(JobList::try_from(inv(vec![job("a", vec![r])]))));
        let mut r = rank(1, &[]);
        r.nccl = (0..=MAX_NCCL_SETTINGS_PER_RANK)
            .map(|i| (format!("NCCL_X{i}"), "1".to_string()))
            .collect();
        assert!(is_invalid(JobList::try_from(inv(vec![job("a", vec![r])]))));
        let mut j = job("a", vec![]);
        j.conflicts = vec![j.conflicts[0].clone(); MAX_CONFLICTS_PER_JOB + 1];
        assert!(is_invalid(JobList::try_from(inv(vec![j]))));
    }

    #[test]
    fn lengths_follow_max_label_len() {
        let limits = Limits {
            max_label_len: 12,
            ..Limits::default()
        };
        let ok = JobList::try_from(inv(vec![job("42", vec![rank(1, &[("NCCL_NET", "IB")])])]))
            .expect("valid");
        let mut ok = ok;
        ok.jobs[0].conflicts.clear();
        assert!(ok.check_limits(&limits).is_ok());
        let mut long = ok.clone();
        long.jobs[0].ranks[0]
            .nccl
            .insert("NCCL_IB_HCA".into(), "mlx5_0,mlx5_1".into());
        let e = long.check_limits(&limits).expect_err("too long");
        assert_eq!(e.to_status().code(), tonic::Code::InvalidArgument);
        let mut long = ok.clone();
        long.jobs[0].id = "1234567890123".into();
        assert!(long.check_limits(&limits).is_err());
        let mut long = ok;
        long.jobs[0].ranks[0].pod_uid = Some("x".repeat(13));
        assert!(long.check_limits(&limits).is_err());
    }
}
