//! The fabric the bare baselines are compared with: the rate of one link (from `--link-rate`, else the
//! collector's inventory), the NICs a node spreads its traffic over (from `--nics-per-node`, the inventory or
//! the NCCL log's device list), and the role of each interface the inventory knows.
//!
//! [`fabric`] compares one nccl-tests run with the most bus bandwidth the nodes' fabric can carry for it.

pub mod fabric;

use serde::Serialize;

use crate::collector::Inventory;

/// A bare baseline "meets the link" from this share of the link's rate.
pub const BASELINE_MEETS_LINK: f64 = 0.75;

/// The fabric link the baselines are compared with.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LinkInfo {
    /// Rate of one link, GB/s (1e9 bytes/s).
    pub rate_gbps: Option<f64>,
    /// `flag` (`--link-rate`), `collector`, or absent.
    pub source: Option<&'static str>,
    /// Fabric NICs per node; `None` when nothing tells (comparisons then assume one and say so).
    pub nics_per_node: Option<u32>,
    /// Where `nics_per_node` comes from: `flag` (`--nics-per-node`), `collector`, `log` (the devices the NCCL
    /// log lists), or absent.
    pub nics_source: Option<&'static str>,
    /// RDMA fabric links in the collector's inventory.
    pub fabric_rdma_links: usize,
    /// (interface, role) from the inventory.
    pub roles: Vec<(String, String)>,
    /// Why the inventory could not be fetched.
    pub warning: Option<String>,
}

impl LinkInfo {
    /// The link from the `--link-rate` flag (GB/s), which wins, and the collector's inventory or why it could
    /// not be fetched.
    pub fn new(flag_gbps: Option<f64>, inventory: Option<&Result<Inventory, String>>) -> LinkInfo {
        let mut link = LinkInfo::default();
        match inventory {
            Some(Ok(inv)) => {
                link.fabric_rdma_links = inv.fabric_rdma_links;
                link.nics_per_node = inv.fabric_links_per_node;
                link.nics_source = inv.fabric_links_per_node.map(|_| "collector");
                link.roles = inv.roles.clone();
                if let Some(rate) = inv.fabric_rate_gbps {
                    link.rate_gbps = Some(rate);
                    link.source = Some("collector");
                }
            }
            Some(Err(e)) => link.warning = Some(e.clone()),
            None => {}
        }
        if let Some(rate) = flag_gbps {
            link.rate_gbps = Some(rate);
            link.source = Some("flag");
        }
        link
    }

    /// The NICs per node, in order of trust: the `--nics-per-node` flag, the collector's inventory, the most
    /// network devices an NCCL log lists for one node.
    pub fn with_nics(mut self, flag: Option<u32>, from_logs: Option<u32>) -> LinkInfo {
        let (n, source) = match (flag, self.nics_per_node, from_logs) {
            (Some(n), _, _) => (Some(n), Some("flag")),
            (None, Some(n), _) => (Some(n), self.nics_source),
            (None, None, Some(n)) => (Some(n), Some("log")),
            (None, None, None) => (None, None),
        };
        self.nics_per_node = n.filter(|n| *n > 0);
        self.nics_source = source.filter(|_| self.nics_per_node.is_some());
        self
    }

    /// The NICs per node a comparison uses: the known count, else one (`assumed`).
    pub fn nics(&self) -> (u32, &'static str) {
        match (self.nics_per_node, self.nics_source) {
            (Some(n), Some(src)) => (n, src),
            _ => (1, "assumed"),
        }
    }

    /// A node's fabric capacity: NICs per node × link rate, GB/s; `None` without a rate.
    pub fn capacity_gbps(&self) -> Option<f64> {
        Some(f64::from(self.nics().0) * self.rate_gbps?)
    }

    /// Role of an interface in the collector's inventory.
    pub fn role_of(&self, device: &str) -> Option<&str> {
        self.roles
            .iter()
            .find(|(d, _)| d == device)
            .map(|(_, r)| r.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inventory(rate: Option<f64>) -> Inventory {
        Inventory {
            nodes: 2,
            fabric_rate_gbps: rate,
            fabric_rdma_links: 8,
            fabric_links_per_node: Some(4),
            roles: vec![
                ("eth0".to_string(), "management".to_string()),
                ("ib0".to_string(), "fabric".to_string()),
            ],
        }
    }

    #[test]
    fn the_flag_wins_over_the_collector() {
        let inv = Ok(inventory(Some(25.0)));
        let link = LinkInfo::new(Some(50.0), Some(&inv));
        assert_eq!(link.rate_gbps, Some(50.0));
        assert_eq!(link.source, Some("flag"));
        // The inventory still tells the roles and the RDMA links.
        assert_eq!(link.fabric_rdma_links, 8);
        assert_eq!(link.role_of("eth0"), Some("management"));
        assert_eq!(link.role_of("ib0"), Some("fabric"));
        assert_eq!(link.role_of("eth1"), None);
    }

    #[test]
    fn the_collector_gives_the_rate_when_it_knows_one() {
        let link = LinkInfo::new(None, Some(&Ok(inventory(Some(25.0)))));
        assert_eq!(
            (link.rate_gbps, link.source),
            (Some(25.0), Some("collector"))
        );
        let link = LinkInfo::new(None, Some(&Ok(inventory(None))));
        assert_eq!((link.rate_gbps, link.source), (None, None));
        assert_eq!(link.warning, None);
    }

    #[test]
    fn nics_per_node_from_the_flag_the_collector_or_a_log() {
        let inv = Ok(inventory(Some(25.0)));
        let link = LinkInfo::new(None, Some(&inv));
        assert_eq!(link.nics(), (4, "collector"));
        assert_eq!(link.clone().with_nics(Some(8), Some(2)).nics(), (8, "flag"));
        assert_eq!(link.with_nics(None, Some(2)).nics(), (4, "collector"));
        let bare = LinkInfo::new(Some(12.5), None);
        assert_eq!(bare.clone().with_nics(None, Some(1)).nics(), (1, "log"));
        assert_eq!(bare.nics(), (1, "assumed"));
        assert_eq!(bare.with_nics(None, Some(2)).capacity_gbps(), Some(25.0));
        assert_eq!(LinkInfo::default().capacity_gbps(), None);
    }

    #[test]
    fn an_unreachable_collector_is_a_warning() {
        let link = LinkInfo::new(Some(12.5), Some(&Err("collector x: refused".to_string())));
        assert_eq!(link.warning.as_deref(), Some("collector x: refused"));
        assert_eq!((link.rate_gbps, link.source), (Some(12.5), Some("flag")));
        assert!(link.roles.is_empty());
        assert_eq!(LinkInfo::new(None, None), LinkInfo::default());
    }
}
