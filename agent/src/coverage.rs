//! What the agent cannot see, said once: a root that is absent or unused, no RDMA device, no NVML, interfaces
//! left out, a link whose speed is unknown. Each [`SetupWarning`] carries a short stable code (documented with
//! the `agent --once` document) and a sentence; `--once` lists them under `warnings` and the agent logs them
//! at start: at warn level what an operator should fix, at info level hardware that is simply absent.
//!
//! [`check_roots`] needs only the configuration; [`check_discovery`] also the sources built and what their
//! first discovery found.

use std::path::Path;

use commwatch_proto::{convert, v1 as pb};
use serde::Serialize;

use crate::config::AgentConfig;
use crate::source::netdev::{self, NetdevOptions, Selection};
use crate::source::{nvml_lib::NvmlBackend, FsRoot, LinkClass};

/// How loud a [`SetupWarning`] is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Something an operator should fix (a wrong root, a fabric link without a known speed).
    Warn,
    /// Hardware that is absent here; nothing to fix unless it should be present.
    Info,
}

/// One thing the agent cannot see, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetupWarning {
    /// Short stable code: `root_absent`, `root_unused`, `no_rdma_devices`, `no_network_interfaces`,
    /// `interfaces_left_out`, `no_nvml`, `speed_unknown`.
    pub code: &'static str,
    pub level: Level,
    /// One sentence for a person.
    pub message: String,
}

impl SetupWarning {
    fn new(code: &'static str, level: Level, message: String) -> SetupWarning {
        SetupWarning {
            code,
            level,
            message,
        }
    }
}

/// Logs each warning once, at its level.
pub fn log(node: &str, warnings: &[SetupWarning]) {
    for w in warnings {
        match w.level {
            Level::Warn => tracing::warn!(node, code = w.code, "{}", w.message),
            Level::Info => tracing::info!(node, code = w.code, "{}", w.message),
        }
    }
}

/// The sysfs and procfs roots: absent, or present without what the sources read there.
pub fn check_roots(config: &AgentConfig) -> Vec<SetupWarning> {
    let mut w = Vec::new();
    let wants = |names: &[&str]| names.iter().any(|n| config.sources.iter().any(|s| s == n));
    if wants(&["infiniband", "netdev"]) {
        let root = &config.sysfs_root;
        let what = "the infiniband and netdev sources will find nothing";
        if !root.is_dir() {
            w.push(absent("sysfs", root, what));
        } else if !root.join("class").is_dir() {
            w.push(SetupWarning::new(
                "root_unused",
                Level::Warn,
                format!(
                    "sysfs root {} has no class/ directory: {what}",
                    root.display()
                ),
            ));
        }
    }
    if wants(&["host", "processes"]) {
        let root = &config.procfs_root;
        let what = "the host and processes sources will find nothing";
        if !root.is_dir() {
            w.push(absent("procfs", root, what));
        } else if !root.join("stat").is_file() {
            w.push(SetupWarning::new(
                "root_unused",
                Level::Warn,
                format!("procfs root {} has no stat file: {what}", root.display()),
            ));
        }
    }
    w
}

fn absent(what: &str, root: &Path, consequence: &str) -> SetupWarning {
    SetupWarning::new(
        "root_absent",
        Level::Warn,
        format!(
            "{what} root {} does not exist or is not a directory: {consequence}",
            root.display()
        ),
    )
}

/// What the first discovery shows missing: no RDMA device, no interface read (and which were left out), no
/// NVML, links whose speed is unknown. `sources` are the names of the sources built; `inventory` what they
/// found.
pub fn check_discovery(
    config: &AgentConfig,
    sources: &[&str],
    inventory: &pb::Inventory,
) -> Vec<SetupWarning> {
    let sysfs = FsRoot::new(&config.sysfs_root);
    let mut w = Vec::new();
    if sources.contains(&"infiniband") {
        w.extend(check_rdma(&sysfs));
    }
    if sources.contains(&"netdev") {
        w.extend(check_interfaces(
            &sysfs,
            &NetdevOptions::from(&config.netdev),
        ));
    }
    // NVML is the only source that is not built when its library fails to load.
    if config.sources.iter().any(|s| s == "nvml") && !sources.contains(&"nvml") {
        let why = NvmlBackend::init()
            .err()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        w.push(SetupWarning::new(
            "no_nvml",
            Level::Info,
            format!("NVML not loaded{why}: no NVLink or GPU figures"),
        ));
    }
    for link in &inventory.links {
        w.extend(check_speed(&sysfs, link));
    }
    w
}

fn check_rdma(sysfs: &FsRoot) -> Option<SetupWarning> {
    let dir = sysfs.join("class/infiniband");
    let devices = sysfs.list_subdirs(&dir).unwrap_or_default();
    devices.is_empty().then(|| {
        SetupWarning::new(
            "no_rdma_devices",
            Level::Info,
            format!("no InfiniBand/RoCE device under {}", dir.display()),
        )
    })
}

fn check_interfaces(sysfs: &FsRoot, options: &NetdevOptions) -> Vec<SetupWarning> {
    let dir = sysfs.join("class/net");
    let all = netdev::select(sysfs, options).unwrap_or_default();
    let left_out = |why: Selection| -> Vec<&str> {
        all.iter()
            .filter(|(_, s)| *s == why)
            .map(|(n, _)| n.as_str())
            .collect()
    };
    let mut w = Vec::new();
    if !all.iter().any(|(_, s)| *s == Selection::Read) {
        w.push(SetupWarning::new(
            "no_network_interfaces",
            Level::Info,
            format!(
                "no network interface read under {} ({} present, none selected)",
                dir.display(),
                all.len()
            ),
        ));
    }
    let parts: Vec<String> = [
        (Selection::Virtual, "virtual"),
        (Selection::Excluded, "excluded by pattern"),
        (Selection::NotIncluded, "not included"),
    ]
    .into_iter()
    .filter_map(|(sel, label)| {
        let names = left_out(sel);
        (!names.is_empty()).then(|| format!("{label}: {}", names.join(", ")))
    })
    .collect();
    if !parts.is_empty() {
        w.push(SetupWarning::new(
            "interfaces_left_out",
            Level::Info,
            format!("interfaces not read ({})", parts.join("; ")),
        ));
    }
    w
}

/// A network interface or RDMA port without a known capacity: findings that compare traffic with capacity
/// skip it. A fabric link that is up is a warning; a management link, or one that is down (the kernel knows
/// no speed for it, and its state is reported anyway), information.
fn check_speed(sysfs: &FsRoot, link: &pb::Link) -> Option<SetupWarning> {
    if link.capacity_bytes_per_second > 0.0 || !link.gpu.is_empty() {
        return None;
    }
    let class = convert::link_class(link.class);
    if class == LinkClass::Nvlink {
        return None;
    }
    let (name, raw) = if link.device == link.port {
        let speed = sysfs.join("class/net").join(&link.device).join("speed");
        (link.device.clone(), sysfs.read_trimmed(&speed))
    } else {
        let rate = sysfs
            .join("class/infiniband")
            .join(&link.device)
            .join("ports")
            .join(&link.port)
            .join("rate");
        (
            format!("{} port {}", link.device, link.port),
            sysfs.read_trimmed(&rate),
        )
    };
    let raw = raw.map_or_else(|| "unreadable".to_string(), |r| truncate(&r));
    let fabric = convert::link_role(link.role) == crate::source::LinkRole::Fabric;
    let level = if fabric && commwatch_model::link::state_is_up(&link.state) {
        Level::Warn
    } else {
        Level::Info
    };
    Some(SetupWarning::new(
        "speed_unknown",
        level,
        format!(
            "{name}: link speed unknown ({raw}), state {}: capacity not known",
            link.state
        ),
    ))
}

/// At most a short prefix of what a file says (a speed is a few characters; a hostile file is not quoted).
fn truncate(text: &str) -> String {
    let short: String = text.chars().take(16).filter(|c| !c.is_control()).collect();
    if short.len() < text.len() {
        format!("{short}…")
    } else {
        short
    }
}
