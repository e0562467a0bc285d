//! Parser for NCCL debug logs (`NCCL_DEBUG=INFO`, optionally `NCCL_DEBUG_SUBSYS=INIT,COLL,NET`), from one rank
//! or many interleaved (`mpirun --tag-output` prefixes are removed).
//!
//! Lines read (after the `host:pid:tid [dev] NCCL INFO ` prefix):
//! - `NCCL version 2.22.3+cuda12.6`
//! - `comm 0x… rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0`, `ncclCommInitRank … nranks 16 …`
//! - `Using network IB|Socket|AWS Libfabric|…`, `NET/IB : No device found.`
//! - `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>`, `NET/Socket : Using [0]eth0:…`,
//!   `Bootstrap : Using eth0:10.128.0.52<0>`
//! - `GPU Direct RDMA Enabled|Disabled for HCA 0 'mlx5_0'`
//! - `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM` (and `[send]`/`[receive] via NET/IB/0/GDRDMA`, `SHM`, plugin
//!   transports): counted per transport kind
//! - `Channel 00/16 :    0   7   6 …` (rings), `Trees [0] …`, `16 coll channels, 16 collnet channels, 16 nvls
//!   channels, …`, `NVLS multicast support is available`
//! - `NCCL_SOCKET_IFNAME set to eth0`, `NCCL_IB_HCA set by environment to mlx5`
//! - `NCCL WARN …`

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::nccl_tests::strip_mpi_tags;

#[derive(Debug, thiserror::Error)]
pub enum NcclLogError {
    #[error("{file}: cannot read: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: no NCCL log lines found")]
    NotALog { file: String },
}

/// A network interface NCCL said it uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetInterface {
    /// `IB`, `Socket`, `Bootstrap`, or a plugin name.
    pub transport: String,
    /// `mlx5_0:1`, `eth0`, …
    pub name: String,
    /// `IB`/`RoCE` for IB ports, the address for sockets.
    pub detail: Option<String>,
}

/// What one log says.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NcclLog {
    pub version: Option<String>,
    pub nranks: Option<u32>,
    pub nnodes: Option<u32>,
    pub local_ranks: Option<u32>,
    /// Ranks that wrote lines into this log.
    pub ranks_seen: Vec<u32>,
    pub hosts: Vec<String>,
    /// `IB`, `Socket`, `AWS Libfabric`, … from `Using network`.
    pub network: Option<String>,
    pub net_plugin: Option<String>,
    pub ib_no_device: bool,
    pub interfaces: Vec<NetInterface>,
    pub bootstrap_interface: Option<String>,
    /// `Some(true)` when GPU Direct RDMA is enabled for every HCA mentioned (or connections use `GDRDMA`),
    /// `Some(false)` when it is disabled for any.
    pub gdr: Option<bool>,
    pub gdr_disabled_hcas: Vec<String>,
    /// Connections per transport kind: `P2P/CUMEM`, `P2P/IPC`, `SHM`, `NET/IB`, `NET/Socket`, …
    pub transports: BTreeMap<String, u64>,
    /// Connections through the network that use GPU Direct RDMA.
    pub net_connections_gdr: u64,
    /// Ring channels (`Channel xx/N :` ring lines give N), else coll channels.
    pub channels: Option<u32>,
    pub coll_channels: Option<u32>,
    pub nvls_channels: Option<u32>,
    pub p2p_channels: Option<u32>,
    pub nvls: bool,
    /// Rings as lists of ranks, from the first rank that printed them.
    pub rings: Vec<Vec<u32>>,
    pub trees: usize,
    /// `NCCL_*` settings echoed by the log.
    pub settings: BTreeMap<String, String>,
    pub warnings: Vec<String>,
    pub warning_count: usize,
    /// Lines with an NCCL prefix in total.
    pub nccl_lines: usize,
}

/// How many `NCCL WARN` texts are kept (all are counted).
pub const MAX_WARNINGS_KEPT: usize = 20;

pub fn parse_file(path: &Path) -> Result<NcclLog, NcclLogError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| NcclLogError::Io {
        file: file.clone(),
        source,
    })?;
    parse_str(&String::from_utf8_lossy(&bytes), &file)
}

pub fn parse_str(text: &str, file: &str) -> Result<NcclLog, NcclLogError> {
    let mut log = NcclLog::default();
    let mut ring_owner: Option<(String, u32)> = None;
    let mut gdr_enabled_seen = false;
    for raw in text.lines() {
        let line = strip_mpi_tags(raw);
        let (prefix, level, msg) = match split_nccl_line(&line) {
            Some(x) => x,
            None => {
                if let Some(v) = version_in(&line) {
                    log.version.get_or_insert(v);
                }
                continue;
            }
        };
        log.nccl_lines += 1;
        if let Some(host) = prefix.split(':').next().filter(|h| !h.is_empty()) {
            if !log.hosts.iter().any(|h| h == host) {
                log.hosts.push(host.to_string());
            }
        }
        if level == "WARN" {
            log.warning_count += 1;
            if log.warnings.len() < MAX_WARNINGS_KEPT {
                log.warnings.push(msg.to_string());
            }
            continue;
        }
        read_info(
            &mut log,
            prefix,
            msg,
            &mut ring_owner,
            &mut gdr_enabled_seen,
        );
    }
    if log.nccl_lines == 0 {
        return Err(NcclLogError::NotALog {
            file: file.to_string(),
        });
    }
    if log.gdr.is_none() {
        if !log.gdr_disabled_hcas.is_empty() {
            log.gdr = Some(false);
        } else if gdr_enabled_seen || log.net_connections_gdr > 0 {
            log.gdr = Some(true);
        }
    }
    if log.channels.is_none() {
        log.channels = log.coll_channels;
    }
    log.ranks_seen.sort_unstable();
    log.ranks_seen.dedup();
    Ok(log)
}

/// Splits `host:pid:tid [dev] NCCL INFO msg` into (`host:pid:tid [dev]`, `INFO`, `msg`).
fn split_nccl_line(line: &str) -> Option<(&str, &str, &str)> {
    for level in ["INFO", "WARN", "ERROR"] {
        let tag = match level {
            "INFO" => " NCCL INFO ",
            "WARN" => " NCCL WARN ",
            _ => " NCCL ERROR ",
        };
        if let Some(pos) = line.find(tag) {
            return Some((&line[..pos], level, line[pos + tag.len()..].trim()));
        }
    }
    None
}

fn version_in(line: &str) -> Option<String> {
    let pos = line.find("NCCL version ")?;
    let v = line[pos + "NCCL version ".len()..]
        .split_whitespace()
        .next()?;
    v.starts_with(|c: char| c.is_ascii_digit())
        .then(|| v.to_string())
}

/// Value after `key` in a whitespace-separated message.
fn after<'a>(tokens: &[&'a str], key: &str) -> Option<&'a str> {
    tokens
        .iter()
        .position(|t| *t == key)
        .and_then(|i| tokens.get(i + 1).copied())
}

fn read_info(
    log: &mut NcclLog,
    prefix: &str,
    msg: &str,
    ring_owner: &mut Option<(String, u32)>,
    gdr_enabled_seen: &mut bool,
) {
    let tokens: Vec<&str> = msg.split_whitespace().collect();
    if let Some(v) = msg.strip_prefix("NCCL version ") {
        if let Some(v) = v.split_whitespace().next() {
            log.version.get_or_insert(v.to_string());
        }
    } else if msg.starts_with("comm 0x") && msg.contains(" nRanks ") {
        let num = |k| after(&tokens, k).and_then(|v| v.parse::<u32>().ok());
        if let Some(r) = num("rank") {
            log.ranks_seen.push(r);
        }
        log.nranks = num("nRanks").or(log.nranks);
        log.nnodes = num("nNodes").or(log.nnodes);
        log.local_ranks = num("localRanks").or(log.local_ranks);
    } else if msg.starts_with("ncclCommInitRank") || msg.starts_with("ncclCommInitAll") {
        if let Some(n) = after(&tokens, "nranks").and_then(|v| v.parse().ok()) {
            log.nranks.get_or_insert(n);
        }
        if let Some(r) = after(&tokens, "rank").and_then(|v| v.parse().ok()) {
            log.ranks_seen.push(r);
        }
    } else if let Some(net) = msg.strip_prefix("Using network ") {
        log.network = Some(net.trim().to_string());
    } else if msg.contains("No device found") && msg.starts_with("NET/IB") {
        log.ib_no_device = true;
    } else if let Some(rest) = msg.strip_prefix("Bootstrap : Using ") {
        let name = rest.split(':').next().unwrap_or(rest).trim().to_string();
        log.bootstrap_interface = Some(name.clone());
        push_interface(log, "Bootstrap", &name, rest.split_once(':').map(|x| x.1));
    } else if msg.starts_with("NET/") && msg.contains(" Using [") {
        read_net_using(log, msg);
    } else if msg.contains("GPU Direct RDMA") {
        let hca = msg
            .split('\'')
            .nth(1)
            .map(str::to_string)
            .unwrap_or_default();
        if msg.contains("Disabled") {
            if !log.gdr_disabled_hcas.contains(&hca) {
                log.gdr_disabled_hcas.push(hca);
            }
        } else if msg.contains("Enabled") {
            *gdr_enabled_seen = true;
        }
    } else if let Some(rest) = msg.strip_prefix("Channel ") {
        read_channel(log, prefix, rest, ring_owner);
    } else if msg.starts_with("Trees ") {
        if log.trees == 0 {
            log.trees = msg.matches('[').count();
        }
    } else if msg.contains(" coll channels") {
        read_channel_counts(log, msg);
    } else if msg.starts_with("NVLS multicast support is available") {
        log.nvls = true;
    } else if msg.starts_with("NCCL_") && msg.contains(" set ") {
        let key = tokens[0].to_string();
        if let Some(pos) = msg.find(" to ") {
            log.settings.insert(key, msg[pos + 4..].trim().to_string());
        }
    } else if msg.contains("Loaded net plugin") || msg.starts_with("P2P plugin") {
        log.net_plugin = Some(msg.to_string());
    }
}

fn push_interface(log: &mut NcclLog, transport: &str, name: &str, detail: Option<&str>) {
    let iface = NetInterface {
        transport: transport.to_string(),
        name: name.to_string(),
        detail: detail.map(|d| d.trim().to_string()),
    };
    if !log.interfaces.contains(&iface) {
        log.interfaces.push(iface);
    }
}

/// `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>` or
/// `NET/Socket : Using [0]eth0:10.128.0.52<0> [1]eth1:…`.
fn read_net_using(log: &mut NcclLog, msg: &str) {
    let transport = msg["NET/".len()..]
        .split([' ', ':'])
        .next()
        .unwrap_or("")
        .to_string();
    let list = msg.split_once(" Using ").map(|x| x.1).unwrap_or("");
    let list = list.split(';').next().unwrap_or("");
    for item in list.split_whitespace() {
        let Some(rest) = item.strip_prefix('[') else {
            continue;
        };
        let Some((idx, dev)) = rest.split_once(']') else {
            continue;
        };
        if idx.parse::<u32>().is_err() || dev.is_empty() {
            continue;
        }
        let (name, detail) = if transport == "Socket" {
            match dev.split_once(':') {
                Some((n, addr)) => (n, Some(addr)),
                None => (dev, None),
            }
        } else {
            match dev.split_once('/') {
                Some((n, kind)) => (n, Some(kind)),
                None => (dev, None),
            }
        };
        push_interface(log, &transport, name, detail);
    }
}

/// `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM` (connection) or `Channel 00/16 :    0   7   6 …` (ring).
fn read_channel(
    log: &mut NcclLog,
    prefix: &str,
    rest: &str,
    ring_owner: &mut Option<(String, u32)>,
) {
    let Some((head, body)) = rest.split_once(':') else {
        return;
    };
    if let Some(pos) = body.find(" via ") {
        let via = body[pos + 5..].trim();
        let (kind, gdr) = transport_kind(via);
        if kind.starts_with("NET/") && gdr {
            log.net_connections_gdr += 1;
        }
        *log.transports.entry(kind).or_insert(0) += 1;
        return;
    }
    let total = head
        .trim()
        .split_once('/')
        .and_then(|(_, n)| n.trim().parse::<u32>().ok());
    let ranks: Option<Vec<u32>> = body.split_whitespace().map(|t| t.parse().ok()).collect();
    let (Some(total), Some(ranks)) = (total, ranks) else {
        return;
    };
    if total == 0 || ranks.is_empty() {
        return;
    }
    log.channels = Some(log.channels.map_or(total, |c| c.max(total)));
    // Keep the rings of the first rank that printed them (every rank prints the same rings).
    let owner = prefix.to_string();
    match ring_owner {
        None => {
            *ring_owner = Some((owner, total));
            log.rings.push(ranks);
        }
        Some((o, _)) if *o == owner => log.rings.push(ranks),
        Some(_) => {}
    }
}

/// Transport kind of a `via …` text and whether it uses GPU Direct RDMA: `P2P/CUMEM`, `P2P/IPC`,
/// `P2P/direct pointer`, `SHM`, `NET/IB`, `NET/Socket`, `NET/AWS Libfabric`, `CollNet`, `NVLS`.
pub fn transport_kind(via: &str) -> (String, bool) {
    let gdr = via.contains("GDRDMA");
    let via = via.split(" comm ").next().unwrap_or(via).trim();
    if let Some(net) = via.strip_prefix("NET/") {
        // NET/<name>/<dev>[/GDRDMA][/Shared]: the name may contain spaces and slashes are separators.
        let name: Vec<&str> = net
            .split('/')
            .take_while(|p| p.parse::<u32>().is_err())
            .collect();
        return (format!("NET/{}", name.join("/")), gdr);
    }
    if let Some(p2p) = via.strip_prefix("P2P/") {
        let sub = p2p.split('/').next().unwrap_or(p2p);
        return (format!("P2P/{}", sub.trim()), gdr);
    }
    let first = via.split(['/', ' ']).next().unwrap_or(via);
    (first.to_string(), gdr)
}

/// `16 coll channels, 16 collnet channels, 16 nvls channels, 16 p2p channels, 2 p2p channels per peer`.
fn read_channel_counts(log: &mut NcclLog, msg: &str) {
    for part in msg.split(',') {
        let tokens: Vec<&str> = part.split_whitespace().collect();
        let Some(n) = tokens.first().and_then(|t| t.parse::<u32>().ok()) else {
            continue;
        };
        match &tokens[1..] {
            ["coll", "channels"] => log.coll_channels = Some(n),
            ["nvls", "channels"] => log.nvls_channels = Some(n),
            ["p2p", "channels"] => log.p2p_channels = Some(n),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_kinds() {
        assert_eq!(transport_kind("P2P/CUMEM"), ("P2P/CUMEM".into(), false));
        assert_eq!(transport_kind("P2P/IPC/read"), ("P2P/IPC".into(), false));
        assert_eq!(transport_kind("NET/Socket/0"), ("NET/Socket".into(), false));
        assert_eq!(transport_kind("NET/IB/3/GDRDMA"), ("NET/IB".into(), true));
        assert_eq!(
            transport_kind("NET/AWS Libfabric/0/GDRDMA"),
            ("NET/AWS Libfabric".into(), true)
        );
        assert_eq!(
            transport_kind("NET/IBext_v8/0/GDRDMA/Shared"),
            ("NET/IBext_v8".into(), true)
        );
        assert_eq!(transport_kind("SHM/direct/direct"), ("SHM".into(), false));
    }

    #[test]
    fn ib_interfaces() {
        let text = "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/RoCE [RO]; OOB ens3:10.1.0.4<0>\nh:1:2 [0] NCCL INFO Using network IB\nh:1:2 [0] NCCL INFO GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n";
        let log = parse_str(text, "x").unwrap();
        assert_eq!(log.network.as_deref(), Some("IB"));
        assert_eq!(log.interfaces.len(), 2);
        assert_eq!(log.interfaces[1].name, "mlx5_3:1");
        assert_eq!(log.interfaces[1].detail.as_deref(), Some("RoCE"));
        assert_eq!(log.gdr, Some(true));
    }

    #[test]
    fn not_a_log() {
        assert!(matches!(
            parse_str("hello", "x"),
            Err(NcclLogError::NotALog { .. })
        ));
    }
}
