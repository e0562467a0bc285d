//! A link: one InfiniBand/RoCE HCA port, one network interface (netdev, IPoIB included) or one NVLink of a
//! GPU. Its identity on a node is [`LinkKey`] `(class, device, port)`; what kind of endpoint it is, is named by
//! [`Endpoint`] and never read off the key's strings (the one exception, for agents that predate the field, is
//! [`Endpoint::legacy`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Class of a link, as exported in the `class` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkClass {
    Infiniband,
    Roce,
    Ethernet,
    Nvlink,
    /// A class this build does not know (a newer agent) or none given; stored and exported as `unknown`.
    Unknown,
}

impl LinkClass {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkClass::Infiniband => "infiniband",
            LinkClass::Roce => "roce",
            LinkClass::Ethernet => "ethernet",
            LinkClass::Nvlink => "nvlink",
            LinkClass::Unknown => "unknown",
        }
    }

    /// The class named by its label value; `None` for anything else.
    pub fn parse(s: &str) -> Option<LinkClass> {
        [
            LinkClass::Infiniband,
            LinkClass::Roce,
            LinkClass::Ethernet,
            LinkClass::Nvlink,
            LinkClass::Unknown,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }

    /// InfiniBand or RoCE: a class that carries RDMA.
    pub fn is_rdma(self) -> bool {
        matches!(self, LinkClass::Infiniband | LinkClass::Roce)
    }
}

impl fmt::Display for LinkClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a link carries training traffic (`fabric`) or is the management network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkRole {
    Fabric,
    Management,
    /// A role this build does not know or none given; exported as `unknown`.
    Unknown,
}

impl LinkRole {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkRole::Fabric => "fabric",
            LinkRole::Management => "management",
            LinkRole::Unknown => "unknown",
        }
    }

    /// The role named by its label value; `None` for anything else.
    pub fn parse(s: &str) -> Option<LinkRole> {
        [LinkRole::Fabric, LinkRole::Management, LinkRole::Unknown]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

impl fmt::Display for LinkRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of endpoint a link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// A port of an RDMA adapter (`mlx5_0` port `1`): `device` is the HCA, `port` the port number.
    HcaPort,
    /// A network interface (netdev): `device` and `port` are both the interface name (`eth0`, `ib0`).
    Interface,
    /// One NVLink of a GPU: `device` is `gpu<N>`, `port` the link number.
    GpuLink,
}

impl Endpoint {
    /// The endpoint of a link described without one (agents before the field existed): NVLink is a GPU
    /// link, a key whose device and port are the same name is an interface, anything else an HCA port. This is
    /// the only place that reads the kind off the key's strings.
    pub fn legacy(class: LinkClass, device: &str, port: &str) -> Endpoint {
        if class == LinkClass::Nvlink {
            Endpoint::GpuLink
        } else if device == port {
            Endpoint::Interface
        } else {
            Endpoint::HcaPort
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::HcaPort => "hca_port",
            Endpoint::Interface => "interface",
            Endpoint::GpuLink => "gpu_link",
        }
    }
}

/// Identity of a link on a node, stable across agent restarts: `(class, device, port)`. For an HCA port
/// `device` is the adapter and `port` its number; for an interface both are the interface name; for NVLink
/// `device` is `gpu<N>` and `port` the link number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LinkKey {
    pub class: LinkClass,
    pub device: String,
    pub port: String,
}

impl LinkKey {
    pub fn new(class: LinkClass, device: impl Into<String>, port: impl Into<String>) -> LinkKey {
        LinkKey {
            class,
            device: device.into(),
            port: port.into(),
        }
    }

    /// The key of a network interface: device and port are its name.
    pub fn interface(class: LinkClass, name: &str) -> LinkKey {
        LinkKey::new(class, name, name)
    }
}

impl fmt::Display for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.class.as_str(), self.device, self.port)
    }
}

/// One link with its inventory facts, as a source found it and as the collector keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Link {
    pub key: LinkKey,
    pub endpoint: Endpoint,
    pub role: LinkRole,
    /// Capacity per direction in bytes per second; `None` when unknown.
    pub capacity_bytes_per_second: Option<f64>,
    /// The state as the hardware words it (`ACTIVE`, `4: ACTIVE`, `DOWN`, `up`, `LinkUp`, ...); read it
    /// through [`Link::is_up`].
    pub state: String,
    /// Other facts (`link_layer`, `phys_state`, `rate`, `netdev`, `mtu`, `speed_mbps`, ...).
    pub attributes: BTreeMap<String, String>,
    /// For NVLink: the GPU index and the link number.
    pub gpu: Option<String>,
    pub link: Option<String>,
}

impl Link {
    /// A network interface (netdev, IPoIB included).
    pub fn is_interface(&self) -> bool {
        self.endpoint == Endpoint::Interface
    }

    /// Whether this link stands for all of a GPU's NVLinks (an NVLink with no port and no link number): how
    /// `/metrics` and the step figures show a GPU's NVLinks by default, and how an agent ships their byte sums.
    pub fn is_gpu_nvlinks(&self) -> bool {
        self.key.class == LinkClass::Nvlink && self.link.is_none() && self.key.port.is_empty()
    }

    /// A link standing for all of a GPU's NVLinks ([`Link::is_gpu_nvlinks`]), of the GPU of `first` (one of
    /// them: its device, GPU, role and endpoint), with `capacity` (their sum, where known) and `first`'s state.
    pub fn gpu_nvlinks(first: &Link, capacity: Option<f64>) -> Link {
        Link {
            key: LinkKey::new(LinkClass::Nvlink, first.key.device.clone(), String::new()),
            endpoint: first.endpoint,
            role: first.role,
            capacity_bytes_per_second: capacity,
            state: first.state.clone(),
            attributes: BTreeMap::new(),
            gpu: Some(first.gpu.clone().unwrap_or_default()),
            link: None,
        }
    }

    /// A port of an InfiniBand or RoCE adapter on the fabric (not the netdev on top of it).
    pub fn is_fabric_rdma(&self) -> bool {
        is_fabric_rdma(self.key.class, self.endpoint, self.role)
    }

    /// Whether the state says the link is up.
    pub fn is_up(&self) -> bool {
        state_is_up(&self.state)
    }
}

/// Which of a node's links carry its fabric data. A node with RDMA ports on the fabric moves its collectives
/// through them (their netdevs count only what bypasses RDMA, IPoIB's sockets); a node without any has a TCP
/// fabric, whose data crosses its fabric network interfaces (`[netdev] fabric`, an RDMA-less Ethernet port):
/// the rules read those as they read RDMA ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FabricData {
    /// The node's RDMA ports on the fabric.
    RdmaPorts,
    /// The node's fabric network interfaces (no RDMA port on the fabric).
    Interfaces,
}

impl FabricData {
    /// The kind for a node with these links.
    pub fn of<'a>(links: impl IntoIterator<Item = &'a Link>) -> FabricData {
        if links.into_iter().any(Link::is_fabric_rdma) {
            FabricData::RdmaPorts
        } else {
            FabricData::Interfaces
        }
    }

    /// Whether a link of these facts carries the node's fabric data.
    pub fn carries(self, class: LinkClass, endpoint: Endpoint, role: LinkRole) -> bool {
        match self {
            FabricData::RdmaPorts => is_fabric_rdma(class, endpoint, role),
            FabricData::Interfaces => {
                role == LinkRole::Fabric
                    && endpoint == Endpoint::Interface
                    && class != LinkClass::Nvlink
            }
        }
    }

    /// Whether `link` carries the node's fabric data.
    pub fn carries_link(self, link: &Link) -> bool {
        self.carries(link.key.class, link.endpoint, link.role)
    }

    /// How the links are named in words: `InfiniBand/RoCE port` or `fabric interface`.
    pub fn noun(self) -> &'static str {
        match self {
            FabricData::RdmaPorts => "InfiniBand/RoCE port",
            FabricData::Interfaces => "fabric interface",
        }
    }
}

/// A port of an InfiniBand or RoCE adapter on the fabric: the predicate behind [`Link::is_fabric_rdma`], for
/// types that carry the three facts without a whole [`Link`].
pub fn is_fabric_rdma(class: LinkClass, endpoint: Endpoint, role: LinkRole) -> bool {
    class.is_rdma() && endpoint == Endpoint::HcaPort && role == LinkRole::Fabric
}

/// Whether a state text says the link is up: InfiniBand's `ACTIVE` (also `4: ACTIVE`, but not `INACTIVE`),
/// netdev `up`, and `LinkUp` physical states; case-insensitive.
pub fn state_is_up(state: &str) -> bool {
    // Compared ignoring ASCII case in place: the analysis asks it of every link of every node it evaluates,
    // and a lowercased copy was an allocation each time.
    let s = state.trim().as_bytes();
    let has = |needle: &[u8]| {
        s.windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
    };
    (has(b"active") && !has(b"inactive")) || s.eq_ignore_ascii_case(b"up") || has(b"linkup")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(class: LinkClass, device: &str, port: &str, role: LinkRole) -> Link {
        Link {
            key: LinkKey::new(class, device, port),
            endpoint: Endpoint::legacy(class, device, port),
            role,
            capacity_bytes_per_second: None,
            state: "ACTIVE".into(),
            attributes: BTreeMap::new(),
            gpu: None,
            link: None,
        }
    }

    #[test]
    fn up_states() {
        for s in [
            "ACTIVE",
            "4: ACTIVE",
            "active",
            "up",
            "UP",
            "LinkUp",
            "5: LinkUp",
        ] {
            assert!(state_is_up(s), "{s}");
        }
        for s in [
            "INACTIVE", "1: DOWN", "down", "", "unknown", "Polling", "dormant",
        ] {
            assert!(!state_is_up(s), "{s}");
        }
    }

    #[test]
    fn legacy_endpoints_and_predicates() {
        let hca = link(LinkClass::Infiniband, "mlx5_0", "1", LinkRole::Fabric);
        let ipoib = link(LinkClass::Infiniband, "ib0", "ib0", LinkRole::Fabric);
        let roce = link(LinkClass::Roce, "mlx5_bond_0", "1", LinkRole::Fabric);
        let eth = link(LinkClass::Ethernet, "eth0", "eth0", LinkRole::Management);
        let nv = link(LinkClass::Nvlink, "gpu0", "0", LinkRole::Fabric);
        assert_eq!(hca.endpoint, Endpoint::HcaPort);
        assert_eq!(nv.endpoint, Endpoint::GpuLink);
        assert!(hca.is_fabric_rdma() && roce.is_fabric_rdma());
        assert!(!ipoib.is_fabric_rdma() && !eth.is_fabric_rdma() && !nv.is_fabric_rdma());
        assert!(ipoib.is_interface() && eth.is_interface());
        assert!(!hca.is_interface() && !nv.is_interface());
    }

    #[test]
    fn labels_round_trip_and_serialize_as_labels() {
        for c in ["infiniband", "roce", "ethernet", "nvlink", "unknown"] {
            assert_eq!(LinkClass::parse(c).unwrap().as_str(), c);
        }
        assert_eq!(LinkClass::parse("bogus"), None);
        assert_eq!(LinkRole::parse("management"), Some(LinkRole::Management));
        let key = LinkKey::new(LinkClass::Roce, "mlx5_1", "1");
        assert_eq!(key.to_string(), "roce/mlx5_1/1");
        assert_eq!(
            serde_json::to_string(&key).unwrap(),
            r#"{"class":"roce","device":"mlx5_1","port":"1"}"#
        );
        assert_eq!(
            serde_json::to_string(&Endpoint::HcaPort).unwrap(),
            r#""hca_port""#
        );
    }
}
