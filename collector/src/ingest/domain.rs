//! Validated domain types built from the wire messages with `TryFrom` (edge validation). Anything the wire can
//! say wrong becomes an [`IngestError`] naming the field; nothing here panics on input.
//!
//! Enum compatibility (per the proto's rules): an unknown link class or role maps to `Unknown` (still stored,
//! exported as `"unknown"`); a series of unspecified or unknown kind is *refused*: it is not stored and its
//! samples are skipped (counted), the stream goes on.

use commwatch_proto::v1 as pb;
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
}

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
            tier: s.tier,
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
