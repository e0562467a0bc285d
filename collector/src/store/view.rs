//! Read-only copies of the store taken under a node's lock and formatted outside it: [`NodeSnapshot`] feeds
//! `/metrics`, [`NodeView`] is the `/api/v1/nodes` JSON (CONTRACTS.md: key names are a contract).

use std::sync::Arc;

use commwatch_model::{LinkClass, LinkRole, SeriesKind};
use serde::Serialize;

use super::{JobList, SeriesKey};

/// One series' latest reading.
#[derive(Debug, Clone)]
pub struct SeriesSnapshot {
    pub key: Arc<SeriesKey>,
    pub kind: SeriesKind,
    /// Counter: the raw value as the agent read it (as f64). Gauge: the value.
    pub value: f64,
    /// Time of the reading, ns since the Unix epoch.
    pub timestamp_unix_ns: i64,
}

/// One link with its derived figures.
#[derive(Debug, Clone)]
pub struct LinkSnapshot {
    pub class: LinkClass,
    pub device: String,
    pub port: String,
    pub role: LinkRole,
    pub gpu: Option<String>,
    pub link: Option<String>,
    pub capacity_bytes_per_second: Option<f64>,
    pub state: String,
    /// Raw counter values of the link's `tx_bytes` / `rx_bytes` series, bytes.
    pub tx_bytes_total: Option<u64>,
    pub rx_bytes_total: Option<u64>,
    /// Rates over the last [`crate::store::rate::RATE_WINDOW_NS`], bytes/s; `None` with fewer than two
    /// readings or while the counter is saturated.
    pub tx_bytes_per_second: Option<f64>,
    pub rx_bytes_per_second: Option<f64>,
    /// Every other series of the link (errors, packets, wait ticks, gauges).
    pub series: Vec<SeriesSnapshot>,
}

/// One node as the exporters see it.
#[derive(Debug, Clone)]
pub struct NodeSnapshot {
    pub name: String,
    pub agent_version: String,
    /// Whether an agent stream for this node is open now.
    pub connected: bool,
    pub last_seen_unix_ns: i64,
    /// Batches the agent dropped (its buffer overflowed), cumulative per agent instance.
    pub agent_dropped_batches_total: u64,
    pub links: Vec<LinkSnapshot>,
    /// Node-level series (CPU, memory, ...).
    pub series: Vec<SeriesSnapshot>,
    /// The node's latest job list.
    pub jobs: Arc<JobList>,
}

/// `/api/v1/nodes` element.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct NodeView {
    pub name: String,
    /// Seconds since the Unix epoch (fractional) of the last message from the node's agent.
    pub last_seen_unix_s: f64,
    /// Whether an agent stream is open now (addition to the contract).
    pub connected: bool,
    pub links: Vec<LinkView>,
    /// Ids of the training jobs the node's agent found, sorted (addition to the contract).
    #[serde(default)]
    pub jobs: Vec<String>,
    /// NCCL settings of those jobs that contradict the node's hardware (addition to the contract).
    #[serde(default)]
    pub nccl_conflicts: Vec<ConflictView>,
}

/// `/api/v1/nodes` `nccl_conflicts` element: one NCCL setting of one job that contradicts the node's hardware.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ConflictView {
    pub job: String,
    /// `NCCL_SOCKET_IFNAME`, `NCCL_IB_DISABLE`, `NCCL_NET`, `NCCL_IB_HCA`, ...
    pub setting: String,
    pub value: String,
    /// `management_interface`, `missing_interface`, `ib_disabled`, `hca_excluded`.
    pub kind: String,
    pub reason: String,
}

/// `/api/v1/nodes` link. Unknown numbers are `null`, never 0.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct LinkView {
    /// `infiniband` | `roce` | `ethernet` | `nvlink` | `unknown`.
    pub class: String,
    pub device: String,
    /// IB port number or interface name, as a string.
    pub port: String,
    /// `fabric` | `management` | `unknown`.
    pub role: String,
    pub capacity_bytes_per_second: Option<f64>,
    pub tx_bytes_per_second: Option<f64>,
    pub rx_bytes_per_second: Option<f64>,
    pub tx_bytes_total: Option<u64>,
    pub rx_bytes_total: Option<u64>,
    pub state: String,
    /// NVLink only.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu: Option<String>,
    /// NVLink only.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub link: Option<String>,
}

impl From<&NodeSnapshot> for NodeView {
    fn from(n: &NodeSnapshot) -> Self {
        NodeView {
            name: n.name.clone(),
            last_seen_unix_s: n.last_seen_unix_ns as f64 / 1e9,
            connected: n.connected,
            jobs: {
                let mut ids: Vec<String> = n.jobs.jobs.iter().map(|j| j.id.clone()).collect();
                ids.sort();
                ids
            },
            nccl_conflicts: n
                .jobs
                .jobs
                .iter()
                .flat_map(|j| {
                    j.conflicts.iter().map(|c| ConflictView {
                        job: j.id.clone(),
                        setting: c.setting.clone(),
                        value: c.value.clone(),
                        kind: c.kind.to_string(),
                        reason: c.reason.clone(),
                    })
                })
                .collect(),
            links: n
                .links
                .iter()
                .map(|l| {
                    let nvlink = l.class == LinkClass::Nvlink;
                    LinkView {
                        class: l.class.as_str().to_string(),
                        device: l.device.clone(),
                        port: l.port.clone(),
                        role: l.role.as_str().to_string(),
                        capacity_bytes_per_second: l.capacity_bytes_per_second,
                        tx_bytes_per_second: l.tx_bytes_per_second,
                        rx_bytes_per_second: l.rx_bytes_per_second,
                        tx_bytes_total: l.tx_bytes_total,
                        rx_bytes_total: l.rx_bytes_total,
                        state: l.state.clone(),
                        gpu: if nvlink {
                            Some(l.gpu.clone().unwrap_or_default())
                        } else {
                            None
                        },
                        link: if nvlink {
                            Some(l.link.clone().unwrap_or_default())
                        } else {
                            None
                        },
                    }
                })
                .collect(),
        }
    }
}
