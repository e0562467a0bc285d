//! NCCL settings: the names the project reads, NCCL's list syntax, and what a contradiction between a
//! setting and the node's hardware is called.
//!
//! NCCL's list syntax (`NCCL_SOCKET_IFNAME`, `NCCL_IB_HCA`): comma-separated entries, matched as prefixes; a
//! leading `^` excludes the listed entries instead; a leading `=` makes every match exact (NCCL reads `^`
//! first, then `=`; both orders are accepted). `NCCL_IB_HCA` entries may name a port (`mlx5_0:1`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `NCCL_SOCKET_IFNAME`: the interfaces NCCL's socket transport and bootstrap may use.
pub const SOCKET_IFNAME: &str = "NCCL_SOCKET_IFNAME";
/// `NCCL_IB_DISABLE`: `1` turns the InfiniBand/RoCE transport off.
pub const IB_DISABLE: &str = "NCCL_IB_DISABLE";
/// `NCCL_NET`: forces a network plugin or transport (`Socket`, `IB`).
pub const NET: &str = "NCCL_NET";
/// `NCCL_IB_HCA`: the RDMA adapters (and ports) NCCL may use.
pub const IB_HCA: &str = "NCCL_IB_HCA";

/// A parsed NCCL list: its entries, whether it excludes, whether matches are exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclList {
    pub exclude: bool,
    pub exact: bool,
    /// `(name, port)`; the port only in `NCCL_IB_HCA` entries.
    pub entries: Vec<(String, Option<String>)>,
}

impl NcclList {
    /// Parses NCCL's list syntax (`^` exclude, `=` exact, `name[:port]` entries). Never fails: an empty
    /// value is an empty list (which selects nothing, or everything when excluding).
    pub fn parse(value: &str) -> NcclList {
        let mut v = value.trim();
        let mut exclude = false;
        let mut exact = false;
        for _ in 0..2 {
            if let Some(rest) = v.strip_prefix('^') {
                exclude = true;
                v = rest;
            } else if let Some(rest) = v.strip_prefix('=') {
                exact = true;
                v = rest;
            }
        }
        let entries = v
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| match e.split_once(':') {
                Some((name, port)) => (name.to_string(), Some(port.to_string())),
                None => (e.to_string(), None),
            })
            .collect();
        NcclList {
            exclude,
            exact,
            entries,
        }
    }

    /// Whether `name` (and `port`, where the entry names one) is selected by the list.
    pub fn selects(&self, name: &str, port: Option<&str>) -> bool {
        let hit = self.entries.iter().any(|(n, p)| {
            let name_ok = if self.exact {
                name == n
            } else {
                name.starts_with(n.as_str())
            };
            let port_ok = match (p, port) {
                (Some(p), Some(port)) => p == port,
                _ => true,
            };
            name_ok && port_ok
        });
        hit != self.exclude
    }
}

/// What a setting contradicts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConflictKind {
    /// `NCCL_SOCKET_IFNAME` selects only management interfaces.
    ManagementInterface,
    /// `NCCL_SOCKET_IFNAME` selects no interface of the node.
    MissingInterface,
    /// `NCCL_IB_DISABLE=1` or `NCCL_NET=Socket` on a node with active InfiniBand/RoCE ports.
    IbDisabled,
    /// `NCCL_IB_HCA` leaves active ports out.
    HcaExcluded,
    /// A kind a newer agent knows; passed on as it came.
    Other(String),
}

impl ConflictKind {
    /// The machine-readable name (`management_interface`, ...), as on the wire and in the API.
    pub fn as_str(&self) -> &str {
        match self {
            ConflictKind::ManagementInterface => "management_interface",
            ConflictKind::MissingInterface => "missing_interface",
            ConflictKind::IbDisabled => "ib_disabled",
            ConflictKind::HcaExcluded => "hca_excluded",
            ConflictKind::Other(s) => s,
        }
    }

    /// The kind with this name; an unknown name becomes [`ConflictKind::Other`].
    pub fn parse(s: &str) -> ConflictKind {
        match s {
            "management_interface" => ConflictKind::ManagementInterface,
            "missing_interface" => ConflictKind::MissingInterface,
            "ib_disabled" => ConflictKind::IbDisabled,
            "hca_excluded" => ConflictKind::HcaExcluded,
            other => ConflictKind::Other(other.to_string()),
        }
    }

    /// Whether the setting keeps NCCL's training traffic off the fabric (the management-network finding's
    /// explanation), as opposed to a setting that merely names something absent.
    pub fn diverts_from_fabric(&self) -> bool {
        matches!(
            self,
            ConflictKind::ManagementInterface
                | ConflictKind::IbDisabled
                | ConflictKind::HcaExcluded
        )
    }
}

impl fmt::Display for ConflictKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ConflictKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Read back from its name, like [`ConflictKind::parse`]: an unknown name is kept as [`ConflictKind::Other`].
impl<'de> Deserialize<'de> for ConflictKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|s| ConflictKind::parse(&s))
    }
}

/// The kind with this name ([`ConflictKind::parse`], which never fails).
impl From<&str> for ConflictKind {
    fn from(s: &str) -> Self {
        ConflictKind::parse(s)
    }
}

/// One contradiction between a job's NCCL setting and the node's hardware, as the agent computed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NcclConflict {
    /// The setting's name (`NCCL_SOCKET_IFNAME`, ...).
    pub setting: String,
    pub value: String,
    pub kind: ConflictKind,
    /// One sentence for operators.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_syntax() {
        let l = NcclList::parse("^docker,lo");
        assert!(l.exclude && !l.exact);
        assert!(!l.selects("docker0", None) && !l.selects("lo", None));
        assert!(l.selects("eth0", None));
        let l = NcclList::parse("=eth0");
        assert!(l.selects("eth0", None) && !l.selects("eth00", None));
        let l = NcclList::parse("=eth");
        assert!(!l.selects("eth0", None));
        let l = NcclList::parse("eth");
        assert!(l.selects("eth0", None) && l.selects("eth1", None) && !l.selects("ib0", None));
        let l = NcclList::parse("ib,eth");
        assert!(l.selects("eth0", None) && l.selects("ib1", None));
        let l = NcclList::parse("mlx5_0:1,mlx5_1");
        assert!(l.selects("mlx5_0", Some("1")) && !l.selects("mlx5_0", Some("2")));
        assert!(l.selects("mlx5_1", Some("2")));
        let l = NcclList::parse("^=mlx5_1");
        assert!(l.exclude && l.exact && !l.selects("mlx5_1", Some("1")));
        assert!(l.selects("mlx5_10", Some("1")));
        let l = NcclList::parse("=^eth0");
        assert!(l.exclude && l.exact && l.selects("eth00", None));
        assert!(!NcclList::parse("").selects("eth0", None));
        assert!(NcclList::parse("^").selects("eth0", None));
    }

    #[test]
    fn conflict_kinds_round_trip_and_keep_unknown_names() {
        for k in [
            ConflictKind::ManagementInterface,
            ConflictKind::MissingInterface,
            ConflictKind::IbDisabled,
            ConflictKind::HcaExcluded,
        ] {
            assert_eq!(ConflictKind::parse(k.as_str()), k);
        }
        let other = ConflictKind::parse("plugin_missing");
        assert_eq!(other, ConflictKind::Other("plugin_missing".into()));
        assert_eq!(
            serde_json::to_string(&other).unwrap(),
            r#""plugin_missing""#
        );
        let back: ConflictKind = serde_json::from_str(r#""ib_disabled""#).unwrap();
        assert_eq!(back, ConflictKind::IbDisabled);
        let back: ConflictKind = serde_json::from_str(r#""plugin_missing""#).unwrap();
        assert_eq!(back, other);
        assert_eq!(
            ConflictKind::from("hca_excluded"),
            ConflictKind::HcaExcluded
        );
        assert!(ConflictKind::IbDisabled.diverts_from_fabric());
        assert!(!ConflictKind::MissingInterface.diverts_from_fabric());
    }
}
