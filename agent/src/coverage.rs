//! What the agent cannot see, said once: a root that is absent or unused, no RDMA device, no NVML, interfaces
//! left out, a link whose speed is unknown. Each [`SetupWarning`] carries a short stable code (documented with
//! the `agent --once` document) and a sentence; `--once` lists them under `warnings` and the agent logs them
//! at start: at warn level what an operator should fix, at info level hardware that is simply absent.
//!
//! [`check_roots`] needs only the configuration; [`check_discovery`] also the sources built and what their
//! first discovery found.
//!
//! Some of what is missing leaves the agent **blind** ([`Blindness`]): a GPU node's agent whose NVML does not
//! load (deployed without the NVIDIA runtime) or that finds no GPU, or one that finds no fabric link at all,
//! measures nothing of what it is there for while its other sources look healthy. Those are warnings, the
//! agent's `/healthz` says `degraded` with the reason, its `/metrics` has `commwatch_agent_blind`, and the
//! collector hears of them in the `Hello` (its `status`, page and `commwatch_node_blind` say which nodes are
//! blind).

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
    /// `interfaces_left_out`, `no_nvml`, `no_fabric`, `speed_unknown`, `no_byte_counters`.
    pub code: &'static str,
    pub level: Level,
    /// One sentence for a person.
    pub message: String,
}

impl Level {
    /// The name it has in `agent --once` and in the `level` label of `commwatch_agent_setup_warnings`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Warn => "warn",
            Level::Info => "info",
        }
    }
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
    check_roots_with(config, false)
}

/// [`check_roots`]; `host_injected`: the host source reads an injected backend (the demo's simulated nodes),
/// not the procfs root's `stat`, whose absence then costs nothing.
pub fn check_roots_with(config: &AgentConfig, host_injected: bool) -> Vec<SetupWarning> {
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
        } else if !host_injected && !root.join("stat").is_file() {
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

/// What the agent cannot see though a GPU node must have it. Sent to the collector in `Hello.blind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Blindness {
    /// Short stable code: `no_nvml` (NVML does not load, or loads and reports no GPU: the reason says which),
    /// `no_fabric` (no InfiniBand/RoCE port and no fabric interface).
    pub code: &'static str,
    /// What the node is blind to: `gpu` (GPU and NVLink figures) or `fabric` (inter-node traffic).
    pub what: &'static str,
    /// One sentence for a person: why, and what to do.
    pub reason: String,
}

impl Blindness {
    /// The wire form.
    pub fn to_pb(&self) -> pb::Blindness {
        pb::Blindness {
            code: self.code.to_string(),
            what: self.what.to_string(),
            reason: self.reason.clone(),
        }
    }
}

/// What the agent is blind to after a discovery. `sources`: the names of the sources built; `unavailable`:
/// the sources that said they can read nothing ([`crate::sampler::Sampler::unavailable_sources`]);
/// `inventory`: what the sources found.
///
/// - `gpu`: the `nvml` source is configured (it is by default) and NVML did not load or reports no GPU.
/// - `fabric`: the `infiniband` source is configured (by default) and no source found a fabric link (an
///   InfiniBand/RoCE port, an RDMA port's netdev, IPoIB, or an interface of `[netdev] fabric`).
///
/// A node that truly has no GPU or no fabric leaves `nvml` or `infiniband` out of `sources`.
pub fn blindness(
    config: &AgentConfig,
    sources: &[&str],
    unavailable: &[(&str, String)],
    inventory: &pb::Inventory,
) -> Vec<Blindness> {
    let wants = |name: &str| config.sources.iter().any(|s| s == name);
    let mut out = Vec::new();
    if wants("nvml") {
        let why = match unavailable.iter().find(|(name, _)| *name == "nvml") {
            Some((_, why)) => Some(why.clone()),
            // Not built at all: the library did not load.
            None if !sources.contains(&"nvml") => Some(NvmlBackend::init().err().map_or_else(
                || "NVML not loaded".into(),
                |e| format!("NVML not loaded ({e})"),
            )),
            None => None,
        };
        if let Some(why) = why {
            out.push(Blindness {
                code: "no_nvml",
                what: "gpu",
                reason: format!(
                    "{why}: no NVLink or GPU figures from this node (run the agent with the NVIDIA runtime and \
                     the driver's libnvidia-ml.so.1; on a node without GPUs, leave nvml out of sources)"
                ),
            });
        }
    }
    let fabric = inventory.links.iter().any(|l| {
        convert::link_role(l.role) == crate::source::LinkRole::Fabric
            && convert::link_class(l.class) != LinkClass::Nvlink
    });
    if wants("infiniband") && !fabric {
        out.push(Blindness {
            code: "no_fabric",
            what: "fabric",
            reason: format!(
                "no fabric link under {}: no InfiniBand/RoCE port and no fabric interface (an RDMA port's netdev, \
                 IPoIB, or one named in [netdev] fabric); inter-node traffic is not measured (on a node without \
                 a fabric, leave infiniband out of sources)",
                config.sysfs_root.join("class").display()
            ),
        });
    }
    out
}

/// What the first discovery shows missing: no RDMA device, no interface read (and which were left out), no
/// NVML or GPU, no fabric, links whose speed is unknown. `blind` is [`blindness`]'s answer (each a warning);
/// `sources` are the names of the sources built; `inventory` what they found.
pub fn check_discovery(
    config: &AgentConfig,
    sources: &[&str],
    blind: &[Blindness],
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
    for b in blind {
        w.push(SetupWarning::new(b.code, Level::Warn, b.reason.clone()));
    }
    for link in &inventory.links {
        w.extend(check_speed(&sysfs, link));
        w.extend(check_byte_counters(link));
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

/// An RDMA port without byte counters (no `ports/<n>/counters/`: no PMA, as Soft-RoCE's): what it gives
/// instead (packets), what it cannot give (bytes, rates, utilisation), and where its bytes are counted.
fn check_byte_counters(link: &pb::Link) -> Option<SetupWarning> {
    use crate::source::infiniband::{BYTE_COUNTERS_ATTRIBUTE, NO_BYTE_COUNTERS};
    if link
        .attributes
        .get(BYTE_COUNTERS_ATTRIBUTE)
        .map(String::as_str)
        != Some(NO_BYTE_COUNTERS)
    {
        return None;
    }
    let bytes_elsewhere = match link.attributes.get("netdev") {
        Some(nd) => format!("; its netdev {nd} counts the same traffic in bytes"),
        None => String::new(),
    };
    Some(SetupWarning::new(
        "no_byte_counters",
        Level::Warn,
        format!(
            "{} port {}: no byte counters (no ports/{}/counters/: a device without a PMA, as Soft-RoCE): its \
             traffic is counted in packets only (tx_packets, rx_packets from hw_counters/, retries and errors as \
             hw_*), so its byte totals, rates and utilisation are unknown{bytes_elsewhere}",
            link.device, link.port, link.port
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
