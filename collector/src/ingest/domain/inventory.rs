//! `Hello` and `InventoryUpdate`: node names, links (with their endpoint kind) and series descriptors, and the
//! per-agent string limits of an inventory.

use commwatch_model::text::escape_controls_owned as escaped;
use commwatch_model::{Link, LinkKey, SeriesKind};
use commwatch_proto::convert;
use commwatch_proto::v1 as pb;

use super::IngestError;
use crate::config::Limits;
use crate::store::input::RefusedSeries;
use crate::store::input::LINK_GONE;
use crate::store::{Blindness, Hello, Inventory, LinkInfo, SeriesDesc};

/// Most attributes one link may carry.
pub const MAX_LINK_ATTRIBUTES: usize = 32;
/// Most things one `Hello` may say its agent is blind to.
pub const MAX_BLINDNESS: usize = 8;
/// Longest `code` and `what` of a [`Blindness`], bytes.
pub const MAX_BLINDNESS_CODE_LEN: usize = 64;
/// Longest `reason` of a [`Blindness`], bytes.
pub const MAX_BLINDNESS_REASON_LEN: usize = 1024;

/// Label names the collector sets itself; an agent label with one of these names is refused.
pub const RESERVED_LABELS: &[&str] = &[
    "node",
    "class",
    "device",
    "port",
    "role",
    "gpu",
    "link",
    "counter",
    "job",
    "kind",
    "severity",
    "le",
    "quantile",
    "instance",
    "training_job",
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
        let class = convert::link_class(l.class);
        let endpoint = convert::endpoint(l.endpoint, class, &l.device, &l.port);
        // Every name is stored with its control characters escaped (`commwatch_model::text`): they reach the
        // page, the API, logs and the CLI's terminal.
        Ok(LinkInfo {
            id: l.id,
            link: Link {
                key: LinkKey::new(class, escaped(l.device), escaped(l.port)),
                endpoint,
                role: convert::link_role(l.role),
                capacity_bytes_per_second: (cap > 0.0).then_some(cap),
                state: if l.gone {
                    LINK_GONE.to_string()
                } else {
                    escaped(l.state)
                },
                attributes: l
                    .attributes
                    .into_iter()
                    .map(|(k, v)| (escaped(k), escaped(v)))
                    .collect(),
                gpu: opt(escaped(l.gpu)),
                link: opt(escaped(l.link)),
            },
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
        let mut labels: Vec<(String, String)> =
            s.labels.into_iter().map(|(k, v)| (k, escaped(v))).collect();
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
            // A counter of no stated width is 64-bit.
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
            tier: convert::tier(s.tier),
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
        let mut series = Vec::with_capacity(inv.series.len());
        let mut refused = Vec::new();
        for s in inv.series {
            let id = s.id;
            match SeriesDesc::try_from(s) {
                Ok(d) => series.push(d),
                // A series whose id is valid is refused alone: it keeps its id (its samples are skipped).
                Err(e) if id != 0 => {
                    refused.push(RefusedSeries {
                        id,
                        reason: e.to_string(),
                    });
                    series.push(SeriesDesc {
                        id,
                        metric: String::new(),
                        kind: None,
                        link_id: 0,
                        labels: Vec::new(),
                        tier: None,
                    });
                }
                Err(e) => return Err(e),
            }
        }
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
        Ok(Inventory {
            links,
            series,
            refused,
        })
    }
}

impl TryFrom<pb::Hello> for Hello {
    type Error = IngestError;

    fn try_from(h: pb::Hello) -> Result<Self, Self::Error> {
        validate_node_name(&h.node)?;
        if h.instance_id == 0 {
            return Err(IngestError::invalid("hello.instance_id", "must be > 0"));
        }
        if h.blind.len() > MAX_BLINDNESS {
            return Err(IngestError::invalid(
                "hello.blind",
                format!("{} entries, at most {MAX_BLINDNESS}", h.blind.len()),
            ));
        }
        let blind = h
            .blind
            .into_iter()
            .enumerate()
            .map(|(i, b)| blindness(i, b))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Hello {
            blind,
            inventory: Inventory::try_from(h.inventory)?,
            node: h.node,
            agent_version: escaped(h.agent_version),
            boot_id: escaped(h.boot_id),
            instance_id: h.instance_id,
            fast_period_ms: h.fast_period_ms,
            slow_period_ms: h.slow_period_ms,
        })
    }
}

/// Entry `i` of `Hello.blind`: a code and a `what` of word characters, a reason of bounded length.
fn blindness(i: usize, b: pb::Blindness) -> Result<Blindness, IngestError> {
    let word = |field: &str, v: &str| -> Result<(), IngestError> {
        let ok = !v.is_empty()
            && v.len() <= MAX_BLINDNESS_CODE_LEN
            && v.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
        if ok {
            Ok(())
        } else {
            Err(IngestError::invalid(
                format!("hello.blind[{i}].{field}"),
                format!("must be 1 to {MAX_BLINDNESS_CODE_LEN} letters, digits or '_'"),
            ))
        }
    };
    word("code", &b.code)?;
    word("what", &b.what)?;
    if b.reason.len() > MAX_BLINDNESS_REASON_LEN {
        return Err(IngestError::invalid(
            format!("hello.blind[{i}].reason"),
            format!("longer than {MAX_BLINDNESS_REASON_LEN} bytes"),
        ));
    }
    Ok(Blindness {
        code: b.code,
        what: b.what,
        reason: escaped(b.reason),
    })
}

// The limits are checked at the edge, beside the conversions: the store trusts what it is given.
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
        for LinkInfo { id, link: l } in &self.links {
            let f = |n: &str| format!("link[id={id}].{n}");
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

#[cfg(test)]
mod tests {
    use super::*;
    use commwatch_model::{Endpoint, LinkClass, LinkRole, Tier};

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

    /// What an agent says is stored with its terminal escapes shown, not interpreted (issue 34): the version
    /// that forged a log line, a device that clears the screen, a state that retitles the window, a hyperlink.
    #[test]
    fn control_characters_are_stored_escaped() {
        let mut attributes = std::collections::HashMap::new();
        attributes.insert("fw\x07".to_string(), "\u{9b}1m".to_string());
        let link = pb::Link {
            id: 1,
            class: pb::LinkClass::Nvlink as i32,
            device: "mlx5_\x1b[2J".into(),
            port: "1\r".into(),
            state: "ACT\x1b]8;;http://evil.example\x1b\\IVE".into(),
            gpu: "0\x1b]0;owned\x07".into(),
            link: "\x7f".into(),
            attributes,
            ..Default::default()
        };
        let mut labels = std::collections::HashMap::new();
        labels.insert("cpu".to_string(), "3\n".to_string());
        let hello = Hello::try_from(pb::Hello {
            node: "n1".into(),
            instance_id: 1,
            agent_version: "1.0\n2026-12-06T04:00:00Z ERROR forged".into(),
            boot_id: "\x1b[31m".into(),
            blind: vec![pb::Blindness {
                code: "c".into(),
                what: "gpu".into(),
                reason: "\x1b]0;t\x07".into(),
            }],
            inventory: Some(pb::Inventory {
                links: vec![link],
                series: vec![pb::SeriesDescriptor {
                    id: 1,
                    metric: "cpu_utilization_ratio".into(),
                    kind: pb::SeriesKind::Gauge as i32,
                    labels,
                    ..Default::default()
                }],
            }),
            ..Default::default()
        })
        .expect("accepted, escaped");
        assert_eq!(
            hello.agent_version,
            "1.0\\u000a2026-12-06T04:00:00Z ERROR forged"
        );
        assert_eq!(hello.boot_id, "\\u001b[31m");
        assert_eq!(hello.blind[0].reason, "\\u001b]0;t\\u0007");
        let l = &hello.inventory.links[0].link;
        assert_eq!(l.key.device, "mlx5_\\u001b[2J");
        assert_eq!(l.key.port, "1\\u000d");
        assert_eq!(l.state, "ACT\\u001b]8;;http://evil.example\\u001b\\IVE");
        assert_eq!(l.gpu.as_deref(), Some("0\\u001b]0;owned\\u0007"));
        assert_eq!(l.link.as_deref(), Some("\\u007f"));
        assert_eq!(
            l.attributes.get("fw\\u0007").map(String::as_str),
            Some("\\u009b1m")
        );
        assert_eq!(
            hello.inventory.series[0].labels,
            vec![("cpu".to_string(), "3\\u000a".to_string())]
        );
    }

    #[test]
    fn a_series_the_collector_refuses_is_refused_alone() {
        let series = |id: u32, metric: &str, label: Option<&str>| pb::SeriesDescriptor {
            id,
            metric: metric.into(),
            kind: 1,
            labels: label
                .map(|l| [(l.to_string(), "x".to_string())].into())
                .unwrap_or_default(),
            ..Default::default()
        };
        let inv = Inventory::try_from(Some(pb::Inventory {
            links: vec![],
            series: vec![
                series(1, "tx_bytes", None),
                series(2, "cpu_cfs_periods_total", Some("node")),
                series(3, "Bad-Name", None),
                series(4, "cpu_cfs_periods_total", Some("job_id")),
            ],
        }))
        .expect("the inventory stands");
        let kinds: Vec<(u32, bool)> = inv
            .series
            .iter()
            .map(|s| (s.id, s.kind.is_some()))
            .collect();
        assert_eq!(kinds, [(1, true), (2, false), (3, false), (4, true)]);
        let why: Vec<(u32, &str)> = inv
            .refused
            .iter()
            .map(|r| (r.id, r.reason.as_str()))
            .collect();
        assert_eq!(why.len(), 2);
        assert!(why[0].1.contains("series[id=2].labels") && why[0].1.contains("reserved"));
        assert!(why[1].1.contains("series[id=3].metric"));
        // An id of 0 cannot be refused by id: the inventory is invalid.
        assert!(Inventory::try_from(Some(pb::Inventory {
            links: vec![],
            series: vec![series(0, "tx_bytes", None)],
        }))
        .is_err());
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
        .expect("unknown enums are accepted")
        .link;
        assert_eq!(l.key.class.as_str(), "unknown");
        assert_eq!(l.role.as_str(), "unknown");
        assert_eq!(l.capacity_bytes_per_second, None);
        // No endpoint on the wire (an older agent): the one its class and names imply.
        assert_eq!(l.endpoint, Endpoint::HcaPort);
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

    #[test]
    fn endpoint_and_tier_come_from_the_wire() {
        let link = |endpoint: pb::LinkEndpoint, device: &str, port: &str| {
            LinkInfo::try_from(pb::Link {
                id: 1,
                class: pb::LinkClass::Infiniband as i32,
                role: pb::LinkRole::Fabric as i32,
                device: device.into(),
                port: port.into(),
                endpoint: endpoint as i32,
                ..Default::default()
            })
            .expect("valid")
            .link
        };
        let ipoib = link(pb::LinkEndpoint::Unspecified, "ib0", "ib0");
        assert_eq!(ipoib.endpoint, Endpoint::Interface);
        assert!(!ipoib.is_fabric_rdma());
        let hca = link(pb::LinkEndpoint::HcaPort, "mlx5_0", "1");
        assert_eq!(hca.key, LinkKey::new(LinkClass::Infiniband, "mlx5_0", "1"));
        assert_eq!(hca.role, LinkRole::Fabric);
        assert!(hca.is_fabric_rdma());
        // A named endpoint wins over what the names would imply.
        assert_eq!(
            link(pb::LinkEndpoint::Interface, "bond0", "1").endpoint,
            Endpoint::Interface
        );
        let desc = |tier: i32| {
            SeriesDesc::try_from(pb::SeriesDescriptor {
                id: 1,
                metric: "tx_bytes".into(),
                kind: pb::SeriesKind::Counter as i32,
                tier,
                ..Default::default()
            })
            .expect("valid")
        };
        assert_eq!(desc(pb::Tier::Slow as i32).tier, Some(Tier::Slow));
        assert_eq!(desc(pb::Tier::Fast as i32).tier, Some(Tier::Fast));
        assert_eq!(desc(0).tier, None);
        assert_eq!(desc(0).kind, Some(SeriesKind::COUNTER64));
    }
}
