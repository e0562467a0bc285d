//! The fabric link the bare baselines are compared with: its rate (from `--link-rate`, else the collector's
//! inventory) and the role of each interface the inventory knows.

use serde::Serialize;

use crate::collector::Inventory;

/// A bare baseline "meets the link" from this share of the link's rate.
pub const BASELINE_MEETS_LINK: f64 = 0.75;

/// The fabric link the baselines are compared with.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LinkInfo {
    /// GB/s (1e9 bytes/s).
    pub rate_gbps: Option<f64>,
    /// `flag` (`--link-rate`), `collector`, or absent.
    pub source: Option<&'static str>,
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
    fn an_unreachable_collector_is_a_warning() {
        let link = LinkInfo::new(Some(12.5), Some(&Err("collector x: refused".to_string())));
        assert_eq!(link.warning.as_deref(), Some("collector x: refused"));
        assert_eq!((link.rate_gbps, link.source), (Some(12.5), Some("flag")));
        assert!(link.roles.is_empty());
        assert_eq!(LinkInfo::new(None, None), LinkInfo::default());
    }
}
