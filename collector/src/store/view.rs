//! Read-only copies of the store taken under a node's lock and formatted outside it: [`NodeSnapshot`] feeds
//! `/metrics` and the `/api/v1/nodes` view.

use std::sync::Arc;

use commwatch_model::{Link, SeriesKind};

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
    /// The link as the node's latest inventory describes it.
    pub link: Arc<Link>,
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
    /// What its agent said it is blind to (NVML not loaded, no fabric); empty when it sees what it should.
    pub blind: Arc<Vec<super::Blindness>>,
}
