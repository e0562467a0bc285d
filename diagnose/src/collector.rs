//! The fabric inventory from a running collector: `GET {URL}/api/v1/nodes` gives the links of every node
//! (`class`, `device`, `port`, `role`, `capacity_bytes_per_second`, …), from which the link rate that baselines are
//! compared with is taken when `--link-rate` is absent. [`client`] is the HTTP(S) client of every command that
//! asks a running collector.

pub mod client;
pub mod probes;

use std::collections::BTreeMap;

use serde::Deserialize;

pub use client::{Client, ClientError, ClientOptions};

#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    #[error("collector {url}: {message}")]
    Unreachable { url: String, message: String },
    /// The cause is in the message, not in `source()`, so a chain printer says it once.
    #[error("collector: {0}")]
    Client(ClientError),
    #[error("collector {url}: /api/v1/nodes is not the expected JSON: {message}")]
    BadResponse { url: String, message: String },
}

impl From<ClientError> for CollectorError {
    fn from(e: ClientError) -> Self {
        CollectorError::Client(e)
    }
}

/// What the report uses from the inventory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inventory {
    pub nodes: usize,
    /// The most common capacity among fabric links that are not NVLink, GB/s (1e9 bytes/s).
    pub fabric_rate_gbps: Option<f64>,
    /// Fabric links of class `infiniband` or `roce`.
    pub fabric_rdma_links: usize,
    /// The most fabric links (not NVLink) one node has: the NICs a node's traffic can spread over.
    pub fabric_links_per_node: Option<u32>,
    /// (device, role) of every link.
    pub roles: Vec<(String, String)>,
}

#[derive(Deserialize)]
struct Node {
    #[serde(default)]
    links: Vec<Link>,
}

#[derive(Deserialize)]
struct Link {
    #[serde(default)]
    class: String,
    #[serde(default)]
    device: String,
    #[serde(default)]
    role: String,
    #[serde(default)]
    capacity_bytes_per_second: Option<f64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum NodesDoc {
    List(Vec<Node>),
    Wrapped { nodes: Vec<Node> },
}

/// Reads the body of `/api/v1/nodes` (a list of nodes, or `{"nodes": [...]}`).
pub fn parse_nodes(body: &str, url: &str) -> Result<Inventory, CollectorError> {
    let doc: NodesDoc = serde_json::from_str(body).map_err(|e| CollectorError::BadResponse {
        url: url.to_string(),
        message: e.to_string(),
    })?;
    let nodes = match doc {
        NodesDoc::List(n) | NodesDoc::Wrapped { nodes: n } => n,
    };
    let mut inv = Inventory {
        nodes: nodes.len(),
        ..Inventory::default()
    };
    // Capacities counted in whole bytes/s so equal rates group exactly.
    let mut rates: BTreeMap<u64, usize> = BTreeMap::new();
    inv.fabric_links_per_node = nodes
        .iter()
        .map(|n| {
            n.links
                .iter()
                .filter(|l| l.role == "fabric" && l.class != "nvlink")
                .count() as u32
        })
        .max()
        .filter(|n| *n > 0);
    for link in nodes.iter().flat_map(|n| &n.links) {
        if !link.device.is_empty() && !link.role.is_empty() {
            let entry = (link.device.clone(), link.role.clone());
            if !inv.roles.contains(&entry) {
                inv.roles.push(entry);
            }
        }
        if link.role != "fabric" || link.class == "nvlink" {
            continue;
        }
        if matches!(link.class.as_str(), "infiniband" | "roce") {
            inv.fabric_rdma_links += 1;
        }
        if let Some(c) = link
            .capacity_bytes_per_second
            .filter(|c| c.is_finite() && *c > 0.0)
        {
            *rates.entry(c.round() as u64).or_insert(0) += 1;
        }
    }
    inv.fabric_rate_gbps = rates
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(rate, _)| *rate as f64 / 1e9);
    Ok(inv)
}

/// Fetches and reads `{url}/api/v1/nodes` with the default client (built-in and system roots, no token).
pub fn fetch_inventory(url: &str) -> Result<Inventory, CollectorError> {
    fetch_inventory_with(&Client::new(url, &ClientOptions::default())?)
}

/// Fetches and reads `/api/v1/nodes` through `client`.
pub fn fetch_inventory_with(client: &Client) -> Result<Inventory, CollectorError> {
    let endpoint = client.url("/api/v1/nodes");
    let body = client
        .get("/api/v1/nodes", &[])
        .map_err(|e| match e {
            ClientError::Unreachable { message, .. } => CollectorError::Unreachable {
                url: endpoint.clone(),
                message,
            },
            other => CollectorError::Client(other),
        })?
        .body;
    parse_nodes(&body, &endpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fabric_rate_is_the_common_capacity() {
        let body = r#"[{"name": "n1", "links": [
            {"class": "infiniband", "device": "mlx5_0", "port": "1", "role": "fabric", "capacity_bytes_per_second": 25e9},
            {"class": "infiniband", "device": "mlx5_1", "port": "1", "role": "fabric", "capacity_bytes_per_second": 25e9},
            {"class": "ethernet", "device": "eth0", "role": "management", "capacity_bytes_per_second": 1.25e9},
            {"class": "nvlink", "device": "nvlink", "role": "fabric", "capacity_bytes_per_second": 26.5e9}]}]"#;
        let inv = parse_nodes(body, "u").unwrap();
        assert_eq!(inv.nodes, 1);
        assert_eq!(inv.fabric_rate_gbps, Some(25.0));
        assert_eq!(inv.fabric_rdma_links, 2);
        assert_eq!(inv.fabric_links_per_node, Some(2));
        assert!(inv
            .roles
            .contains(&("eth0".to_string(), "management".to_string())));
    }

    #[test]
    fn bad_body() {
        assert!(matches!(
            parse_nodes("<html>", "u"),
            Err(CollectorError::BadResponse { .. })
        ));
    }
}
