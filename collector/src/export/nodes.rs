//! `/api/v1/nodes`: the JSON view of each node and its links, built from the store's [`NodeSnapshot`]. The key
//! names are a contract: add, never rename. Unknown numbers are `null`, never 0.

use std::collections::HashMap;
use std::sync::Arc;

use commwatch_model::clock::unix_now_ns;
use commwatch_model::LinkClass;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};
use serde::{Deserialize, Serialize};

use super::names;
use super::proto::{family, label, metric};
use crate::store::{LinkSnapshot, NodeSnapshot, Store};

/// `/api/v1/nodes` element.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// What the node's agent cannot see though a GPU node must have it — NVML not loaded or no GPU
    /// (`what` = `gpu`), no fabric link (`fabric`) — each with `code`, `what` and the agent's `reason`; empty
    /// when it sees what it should (addition to the contract).
    #[serde(default)]
    pub blind: Vec<BlindView>,
}

/// `/api/v1/nodes` `blind` element.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlindView {
    /// `no_nvml`, `no_fabric`, or a code a newer agent knows.
    pub code: String,
    /// `gpu` or `fabric`.
    pub what: String,
    pub reason: String,
}

/// `/api/v1/nodes` `nccl_conflicts` element: one NCCL setting of one job that contradicts the node's hardware.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkView {
    /// `infiniband` | `roce` | `ethernet` | `nvlink` | `unknown`.
    pub class: String,
    pub device: String,
    /// IB port number or interface name, as a string.
    pub port: String,
    /// `hca_port` (an RDMA adapter's port) | `interface` (a netdev, IPoIB included) | `gpu_link` (NVLink).
    pub endpoint: String,
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
            links: n.links.iter().map(LinkView::from).collect(),
            blind: n
                .blind
                .iter()
                .map(|b| BlindView {
                    code: b.code.clone(),
                    what: b.what.clone(),
                    reason: b.reason.clone(),
                })
                .collect(),
        }
    }
}

impl From<&LinkSnapshot> for LinkView {
    fn from(s: &LinkSnapshot) -> Self {
        let l = &s.link;
        // NVLink links always carry `gpu` and `link` (empty when unknown); other links never do.
        let nvlink = l.key.class == LinkClass::Nvlink;
        let nv = |v: &Option<String>| nvlink.then(|| v.clone().unwrap_or_default());
        LinkView {
            class: l.key.class.as_str().to_string(),
            device: l.key.device.clone(),
            port: l.key.port.clone(),
            endpoint: l.endpoint.as_str().to_string(),
            role: l.role.as_str().to_string(),
            capacity_bytes_per_second: l.capacity_bytes_per_second,
            tx_bytes_per_second: s.tx_bytes_per_second,
            rx_bytes_per_second: s.rx_bytes_per_second,
            tx_bytes_total: s.tx_bytes_total,
            rx_bytes_total: s.rx_bytes_total,
            state: l.state.clone(),
            gpu: nv(&l.gpu),
            link: nv(&l.link),
        }
    }
}

const BLIND_HELP: &str =
    "1 for each thing the node's agent cannot see though a GPU node must have it (what: gpu \
                          or fabric; code: no_nvml, no_fabric); see /api/v1/nodes for the reason.";

/// Renders `commwatch_node_blind{node,what,code}` (1 per thing a node's agent is blind to) at scrape time.
/// Bounded: at most [`crate::ingest::domain::MAX_BLINDNESS`] per node, codes of bounded length.
pub struct BlindCollector {
    store: Arc<Store>,
    descs: Vec<Desc>,
}

impl BlindCollector {
    pub fn new(store: Arc<Store>) -> Result<BlindCollector, prometheus::Error> {
        let desc = Desc::new(
            names::NODE_BLIND.to_string(),
            BLIND_HELP.to_string(),
            vec![],
            HashMap::new(),
        )?;
        Ok(BlindCollector {
            store,
            descs: vec![desc],
        })
    }
}

impl Collector for BlindCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut blind = family(names::NODE_BLIND, BLIND_HELP, MetricType::GAUGE);
        for (node, list) in self.store.node_blind(unix_now_ns()) {
            for b in list.iter() {
                blind.mut_metric().push(metric(
                    MetricType::GAUGE,
                    vec![
                        label("code", &b.code),
                        label("node", &node),
                        label("what", &b.what),
                    ],
                    1.0,
                ));
            }
        }
        if blind.get_metric().is_empty() {
            Vec::new()
        } else {
            vec![blind]
        }
    }
}
