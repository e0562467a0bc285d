//! Parser for NCCL debug logs (`NCCL_DEBUG=INFO`, optionally `NCCL_DEBUG_SUBSYS=INIT,COLL,NET`), from one rank
//! or many interleaved, of NCCL 2.4 to 2.29. Prefixes are removed: `mpirun --tag-output` tags, `pdsh`'s
//! `host: `, and lines without the `host:pid:tid` part are read as well.
//!
//! Lines read (after the `host:pid:tid [dev] NCCL INFO ` prefix), by module:
//! - here: `NCCL version 2.22.3+cuda12.6`; any line with `rank R` and `nranks N`/`nRanks N` (`comm 0x… rank 0
//!   nRanks 16 nNodes 2 localRanks 8 …`, `ncclCommInitRank comm 0x… rank 8 nranks 16 … Init COMPLETE`,
//!   `Init timings - ncclCommInitRank: rank 8 nranks 16 …`); `NCCL_IB_DISABLE set by environment to 1.` and
//!   `NCCL_SOCKET_IFNAME set to lo` (settings, without NCCL's trailing period); `Check P2P Type
//!   intraNodeP2pSupport 0`; `NCCL WARN …`; and the nccl-tests lines a log often carries (`#  Rank 1 … on
//!   HOST`, `# nThread 1 nGpus 2 … validation: 0`);
//! - [`net`]: the network: `Using network IB`, `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB eth0:…`,
//!   `NET/Socket : Using [0]eth0:…`, `NET/IB : No device found.`, `NET/IB: Dev 0 Port 1 qpn …`, `Bootstrap :
//!   Using [0]br0:…` (all generations), `NET/OFI Selected provider is efa (found 16 nics)`, `NET/OFI NIC group
//!   0 device #0 0000:56:00.0`, `NET/FastSocket : Connected after 15 retries.`, GPU Direct RDMA lines;
//! - [`channels`]: `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`, `[send] via NET/IB/0/GDRDMA`, the old
//!   `Ring 00 : 15[41000] -> 0[1b000] [receive] via NET/IB/0` and `via direct shared memory`: connections per
//!   transport kind, the ranks and network devices they name; `Channel 00/16 :    0   7   6 …` (rings);
//!   `16 coll channels, …`;
//! - [`derive`]: what the lines add up to: rank and node counts, the network when no `Using network` line
//!   names it, GPU Direct RDMA, whether the network carried data at all, NICs per node.

mod channels;
mod derive;
mod line;
mod net;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

pub use self::channels::transport_kind;
pub use self::derive::is_tcp;
use crate::nccl_tests::{parse_rank_line, strip_mpi_tags};

#[derive(Debug, thiserror::Error)]
pub enum NcclLogError {
    #[error("{file}: cannot read: {error}")]
    Io { file: String, error: std::io::Error },
    #[error("{file}: no NCCL log lines found")]
    NotALog { file: String },
}

/// A network interface NCCL said it uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetInterface {
    /// `IB`, `Socket`, `OFI` (Libfabric devices), `Bootstrap` (bootstrap and out-of-band), or a plugin name.
    pub transport: String,
    /// `mlx5_0:1`, `eth0`, `0000:56:00.0`, …
    pub name: String,
    /// `IB`/`RoCE` for IB ports, the address for sockets.
    pub detail: Option<String>,
}

/// What one log says.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NcclLog {
    pub version: Option<String>,
    /// Ranks of the communicator: printed (`nranks 16`), the length of a ring, or a complete `Using devices`
    /// list; `None` when the log shows only some ranks (see `nranks_at_least`).
    pub nranks: Option<u32>,
    /// One more than the highest rank the log names, when `nranks` is unknown.
    pub nranks_at_least: Option<u32>,
    /// Nodes: printed (`nNodes 2`) or the hosts of a complete `Using devices` list.
    pub nnodes: Option<u32>,
    pub local_ranks: Option<u32>,
    /// Ranks that wrote lines into this log (the `rank R` of their init lines).
    pub ranks_seen: Vec<u32>,
    /// Ranks of an nccl-tests `Using devices` list in the log: (rank, host).
    pub listed_ranks: Vec<(u32, String)>,
    /// Hosts that wrote lines into this log.
    pub hosts: Vec<String>,
    /// The network NCCL used across nodes: `IB`, `Socket`, `AWS Libfabric`, `NCCL RDMA Plugin v8`, … from
    /// `Using network`, else as its connections, device lists or plugin lines show it.
    pub network: Option<String>,
    /// Whether data crossed a network: `false` when every rank is on one node, `true` when a connection went
    /// through the network or ranks are on several nodes; `None` when the log does not show.
    pub network_carries_data: Option<bool>,
    pub net_plugin: Option<String>,
    /// The Libfabric provider (`efa`) of the OFI plugin.
    pub net_provider: Option<String>,
    pub ib_no_device: bool,
    /// A `NET/IB: Dev 0 Port 1 qpn …` line: IB verbs queue pairs were set up.
    pub ib_queue_pairs: bool,
    pub interfaces: Vec<NetInterface>,
    pub bootstrap_interface: Option<String>,
    /// Network devices NCCL uses per node: the devices it lists for the network it uses (IB ports, socket
    /// interfaces) or the NICs the OFI plugin found.
    pub nics_per_node: Option<u32>,
    /// Device indexes the connections name (`via NET/IB/5/GDRDMA`: 5), sorted.
    pub net_device_indexes: Vec<u32>,
    /// `Some(true)` when GPU Direct RDMA is used (network connections with `GDRDMA`, `GPU Direct RDMA
    /// Enabled`), `Some(false)` when the log says it is off or the connections go without it, and when the
    /// network is TCP; `None` when nothing crosses the network or the log does not show.
    pub gdr: Option<bool>,
    pub gdr_disabled_hcas: Vec<String>,
    /// The lines that decided `gdr`, as the log has them.
    pub gdr_evidence: Vec<String>,
    /// `Check P2P Type intraNodeP2pSupport 0|1`: whether GPUs of a node reach each other peer to peer.
    pub intra_node_p2p: Option<bool>,
    /// Connections per transport kind: `P2P/CUMEM`, `P2P/IPC`, `SHM`, `NET/IB`, `NET/Socket`, …
    pub transports: BTreeMap<String, u64>,
    /// Connections through the network that use GPU Direct RDMA.
    pub net_connections_gdr: u64,
    /// The most retries a net plugin needed to connect (`NET/FastSocket : Connected after 60 retries.`).
    pub connect_retries_max: Option<u32>,
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
    /// Whether the nccl-tests run in the log validated its results (`validation: 1`).
    pub tests_validation: Option<bool>,
    pub warnings: Vec<String>,
    pub warning_count: usize,
    /// Lines with an NCCL prefix in total.
    pub nccl_lines: usize,
}

/// How many `NCCL WARN` texts are kept (all are counted).
pub const MAX_WARNINGS_KEPT: usize = 20;

pub fn parse_file(path: &Path) -> Result<NcclLog, NcclLogError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|error| NcclLogError::Io {
        file: file.clone(),
        error,
    })?;
    parse_str(&String::from_utf8_lossy(&bytes), &file)
}

/// What reading the lines collects besides the log's own fields, for [`derive`].
#[derive(Debug, Default)]
struct Scan {
    /// (owner prefix) of the rank whose rings are kept.
    ring_owner: Option<String>,
    gdr_enabled_seen: bool,
    /// `GDR 0|1` of `Connected all rings, use ring PXN 0 GDR 1`.
    ring_gdr: Option<bool>,
    /// The OFI plugin said it disabled GDR.
    ofi_gdr_off: bool,
    /// The most devices one `NET/IB : Using` line lists, and one `NET/Socket : Using` line.
    ib_list_max: u32,
    socket_list_max: u32,
    /// `found N nics` of the OFI plugin.
    ofi_nics: Option<u32>,
    /// A `NET/FastSocket` line.
    fastsocket: bool,
    /// The highest rank a connection line names (`15[7] -> 6[6]`: 15).
    highest_rank_named: Option<u32>,
}

pub fn parse_str(text: &str, file: &str) -> Result<NcclLog, NcclLogError> {
    let mut log = NcclLog::default();
    let mut scan = Scan::default();
    for raw in text.lines() {
        let stripped = strip_mpi_tags(raw);
        let Some((prefix, level, msg)) = line::split_nccl_line(&stripped) else {
            read_other(&mut log, stripped.trim());
            continue;
        };
        log.nccl_lines += 1;
        if let Some(host) = line::host_of(prefix) {
            if !log.hosts.contains(&host) {
                log.hosts.push(host);
            }
        }
        if level == "WARN" {
            log.warning_count += 1;
            if log.warnings.len() < MAX_WARNINGS_KEPT {
                log.warnings.push(msg.to_string());
            }
            continue;
        }
        read_info(&mut log, &mut scan, prefix, msg);
    }
    if log.nccl_lines == 0 {
        return Err(NcclLogError::NotALog {
            file: file.to_string(),
        });
    }
    derive::derive(&mut log, &scan);
    Ok(log)
}

/// A line without the NCCL prefix: the version NCCL prints bare, and the nccl-tests header and rank list.
fn read_other(log: &mut NcclLog, line: &str) {
    if let Some(v) = line::version_in(line) {
        log.version.get_or_insert(v);
        return;
    }
    let Some(comment) = line.strip_prefix('#').map(str::trim) else {
        return;
    };
    if let Some(rank) = parse_rank_line(comment) {
        log.listed_ranks.push((rank.rank, rank.host));
    } else if comment.starts_with("nThread") {
        let tokens: Vec<&str> = comment
            .split_whitespace()
            .map(|t| t.trim_end_matches(':'))
            .collect();
        log.tests_validation = tokens
            .iter()
            .position(|t| *t == "validation")
            .and_then(|i| tokens.get(i + 1))
            .and_then(|v| v.parse::<u32>().ok())
            .map(|v| v != 0);
    }
}

/// Value after `key` in a whitespace-separated message.
fn after<'a>(tokens: &[&'a str], key: &str) -> Option<&'a str> {
    tokens
        .iter()
        .position(|t| *t == key)
        .and_then(|i| tokens.get(i + 1).copied())
}

fn read_info(log: &mut NcclLog, scan: &mut Scan, prefix: &str, msg: &str) {
    let tokens: Vec<&str> = msg.split_whitespace().collect();
    read_ranks(log, &tokens);
    if net::read(log, scan, msg) {
        return;
    }
    if let Some(v) = msg.strip_prefix("NCCL version ") {
        if let Some(v) = v.split_whitespace().next() {
            log.version.get_or_insert(v.to_string());
        }
    } else if let Some(rest) = msg
        .strip_prefix("Channel ")
        .or_else(|| msg.strip_prefix("Ring "))
    {
        channels::read_channel(log, scan, prefix, rest);
    } else if msg.starts_with("Trees ") {
        if log.trees == 0 {
            log.trees = msg.matches('[').count();
        }
    } else if msg.contains(" coll channels") {
        channels::read_channel_counts(log, msg);
    } else if msg.starts_with("NVLS multicast support is available") {
        log.nvls = true;
    } else if msg.starts_with("NCCL_") && msg.contains(" set ") {
        if let Some(pos) = msg.find(" to ") {
            // NCCL ends the echo of a number with a period: `… set by environment to 1.`
            let value = msg[pos + 4..].trim().trim_end_matches('.');
            log.settings
                .insert(tokens[0].to_string(), value.to_string());
        }
    } else if let Some(v) = after(&tokens, "intraNodeP2pSupport") {
        log.intra_node_p2p = v.parse::<u32>().ok().map(|v| v != 0);
    } else if msg.contains("Loaded net plugin") || msg.starts_with("P2P plugin") {
        log.net_plugin = Some(msg.to_string());
    }
}

/// `rank R` with `nranks N`/`nRanks N` (and `nNodes`, `localRanks`) in any line that has both.
fn read_ranks(log: &mut NcclLog, tokens: &[&str]) {
    let num = |k: &str| after(tokens, k).and_then(|v| v.trim_end_matches(',').parse::<u32>().ok());
    let Some(n) = num("nRanks").or_else(|| num("nranks")) else {
        return;
    };
    log.nranks = Some(n);
    if let Some(r) = num("rank") {
        log.ranks_seen.push(r);
    }
    log.nnodes = num("nNodes").or(log.nnodes);
    log.local_ranks = num("localRanks").or(log.local_ranks);
}

#[cfg(test)]
mod tests;
