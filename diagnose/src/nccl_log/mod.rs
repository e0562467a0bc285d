//! Parser for NCCL debug logs (`NCCL_DEBUG=INFO`, optionally `NCCL_DEBUG_SUBSYS=INIT,COLL,NET`), from one rank
//! or many interleaved, of NCCL 2.0 to 2.29 and RCCL. Lines are made plain first ([`crate::lines`]: launcher
//! labels, timestamps, colours); lines without the `host:pid:tid` part and, before NCCL 2.3, without the word
//! `NCCL` (`host:1:2 [0] INFO …`) are read as well.
//!
//! Lines read (after the `host:pid:tid [dev] NCCL INFO ` prefix), by module:
//! - here: `NCCL version 2.22.3+cuda12.6`, `RCCL version 2.18.3+hip6.0`; any line with `rank R` and `nranks N`/`nRanks N` (`comm 0x… rank 0
//!   nRanks 16 nNodes 2 localRanks 8 …`, `ncclCommInitRank comm 0x… rank 8 nranks 16 … Init COMPLETE`,
//!   `Init timings - ncclCommInitRank: rank 8 nranks 16 …`); `NCCL_IB_DISABLE set by environment to 1.` and
//!   `NCCL_SOCKET_IFNAME set to lo` (settings, without NCCL's trailing period); `Check P2P Type
//!   intraNodeP2pSupport 0`; `NCCL WARN …`; and the nccl-tests lines a log often carries (`#  Rank 1 … on
//!   HOST`, `# nThread 1 nGpus 2 … validation: 0`); `NCCL_*=…` settings on a command line; how the log ends
//!   ([`NcclLog::init_complete`], [`NcclLog::failure`]);
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
pub use self::derive::{is_tcp, is_tcp_provider};
pub use self::line::version_in;
use crate::lines::Cite;
use crate::nccl_tests::parse_rank_line;

#[derive(Debug, thiserror::Error)]
pub enum NcclLogError {
    #[error("{file}: cannot read: {error}")]
    Io { file: String, error: std::io::Error },
    /// No line was an NCCL log line; the first lines that were not, to show what the file holds.
    #[error("{file}: no NCCL log lines found (first lines: {})", first_lines.join(" | "))]
    NotALog {
        file: String,
        first_lines: Vec<String>,
    },
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
    /// `RCCL` when the log is ROCm's RCCL, `NCCL` otherwise.
    pub library: &'static str,
    /// A lower bound on the nodes when `nnodes` is unknown: the hosts that wrote lines, or 2 where a
    /// connection went through the network.
    pub nnodes_at_least: Option<u32>,
    /// `Some(true)` when a communicator finished its init (`Init COMPLETE`) or results follow; `Some(false)`
    /// when init began and the log stops before either, without a failure; `None` when the log shows neither.
    pub init_complete: Option<bool>,
    /// How the run failed, when the log shows it: an error NCCL returned through its init or bootstrap
    /// (`init.cc:1234 -> 2`), or a failure line.
    pub failure: Option<LogFailure>,
    /// A net plugin that loaded and failed, and the network NCCL used instead.
    pub plugin_fallback: Option<PluginFallback>,
    /// Two ranks on one GPU: (rank, other rank, host, bus id), from their init lines or NCCL's `Duplicate GPU
    /// detected` warning.
    pub shared_gpu: Option<(u32, u32, String, String)>,
    /// The lines each fact rests on, by topic (`version`, `network`, `interfaces`, `gdr`, `warnings`,
    /// `failure`, `last_line`, `plugin`, `provider`, `settings.NCCL_X`, `connections`, `hosts`), at most
    /// [`CITES_KEPT`] each.
    #[serde(skip)]
    pub cites: BTreeMap<String, Vec<Cite>>,
}

/// How a run failed, as its log shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogFailure {
    /// The warning before the error (`Call to connect timeout : Connection refused`), else the failure line.
    pub message: String,
    /// 1-based line of the error.
    pub line: usize,
}

/// A net plugin that NCCL loaded, that failed, and the network used instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginFallback {
    pub plugin: String,
    pub network: String,
}

/// How many lines are kept per topic of [`NcclLog::cites`].
pub const CITES_KEPT: usize = 4;

impl NcclLog {
    /// Keeps `cite` under `topic` (once, at most [`CITES_KEPT`]).
    pub fn note(&mut self, topic: &str, cite: &Cite) {
        let list = self.cites.entry(topic.to_string()).or_default();
        if list.len() < CITES_KEPT && !list.contains(cite) {
            list.push(cite.clone());
        }
    }

    /// The lines under `topic`.
    pub fn cited(&self, topic: &str) -> &[Cite] {
        self.cites.get(topic).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// How many `NCCL WARN` texts are kept (all are counted).
pub const MAX_WARNINGS_KEPT: usize = 20;

pub fn parse_file(path: &Path) -> Result<NcclLog, NcclLogError> {
    let file = path.display().to_string();
    let text = crate::input::read_text(path).map_err(|error| NcclLogError::Io {
        file: file.clone(),
        error,
    })?;
    parse_str(&text, &file)
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
    /// The line being read, to cite.
    here: Cite,
    /// The host of the line being read.
    line_host: Option<String>,
    /// Whether that host is the one NCCL printed (`host:pid:tid`), not a launcher's label.
    own_host: bool,
    /// The host each rank's init line came from.
    rank_hosts: BTreeMap<u32, String>,
    /// (host, bus id) of each GPU a rank's init line names: the first rank on it and that line.
    rank_gpus: BTreeMap<(String, String), (u32, Cite)>,
    /// The last `NCCL WARN` and its line: a failure's message.
    last_warning: Option<(String, Cite)>,
    init_begun: bool,
    init_done: bool,
    /// A table row or average after the log's lines: the run got past its init.
    results_seen: bool,
    /// A net plugin's line (`Loaded net plugin AWS Libfabric`, `Initialized NET plugin AWS Libfabric`).
    plugin_loaded: Option<(String, Cite)>,
    /// The plugin's error return (`plugin/net.cc:118 -> 2`).
    plugin_failed: Option<Cite>,
    /// `Using network IB`, `Assigned NET plugin IB to comm`: the network NCCL settled on, and its line.
    network_line: Option<Cite>,
}

pub fn parse_str(text: &str, file: &str) -> Result<NcclLog, NcclLogError> {
    let mut log = NcclLog {
        library: "NCCL",
        ..NcclLog::default()
    };
    let mut scan = Scan::default();
    let mut first_lines = Vec::new();
    for line in crate::lines::lines(text) {
        let t = line.text.as_ref();
        if t.is_empty() {
            continue;
        }
        scan.here = line.cite(file);
        let Some((prefix, level, msg)) = line::split_nccl_line(t) else {
            if first_lines.len() < 5 {
                first_lines.push(format!("{}: {}", line.number, scan.here.text));
            }
            read_other(&mut log, &mut scan, t);
            continue;
        };
        log.nccl_lines += 1;
        log.note_last(&scan.here);
        // The host NCCL printed, else a launcher's host label (pdsh, kubectl, Ray); a rank label is no host.
        let own = line::host_of(prefix);
        scan.own_host = own.is_some();
        scan.line_host = own.clone().or_else(|| line.host.clone());
        if let Some(host) = own {
            if !log.hosts.contains(&host) {
                log.hosts.push(host);
            }
        }
        if level == "WARN" {
            duplicate_gpu(&mut log, &scan, msg);
            log.warning_count += 1;
            if log.warnings.len() < MAX_WARNINGS_KEPT {
                log.warnings.push(msg.to_string());
            }
            log.note("warnings", &scan.here);
            scan.last_warning = Some((msg.to_string(), scan.here.clone()));
            continue;
        }
        read_info(&mut log, &mut scan, prefix, msg);
    }
    if log.nccl_lines == 0 {
        return Err(NcclLogError::NotALog {
            file: file.to_string(),
            first_lines,
        });
    }
    derive::derive(&mut log, &scan);
    Ok(log)
}

impl NcclLog {
    /// The last NCCL line read so far (where a log that stops, stops).
    fn note_last(&mut self, cite: &Cite) {
        self.cites
            .insert("last_line".to_string(), vec![cite.clone()]);
    }
}

/// `Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 2000`: NCCL's own word that two ranks share
/// a GPU.
fn duplicate_gpu(log: &mut NcclLog, scan: &Scan, msg: &str) {
    let Some(rest) = msg.split("Duplicate GPU detected").nth(1) else {
        return;
    };
    let tokens: Vec<&str> = rest.split_whitespace().collect();
    let rank_after = |i: usize| tokens.get(i + 1).and_then(|v| v.parse::<u32>().ok());
    let ranks: Vec<u32> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| **t == "rank")
        .filter_map(|(i, _)| rank_after(i))
        .collect();
    let bus = tokens.last().map(|b| b.to_string()).unwrap_or_default();
    if let [a, b, ..] = ranks[..] {
        let host = scan.line_host.clone().unwrap_or_default();
        log.shared_gpu.get_or_insert((b, a, host, bus));
        log.note("shared_gpu", &scan.here);
    }
}

/// A line without the NCCL prefix: the version NCCL prints bare, the nccl-tests header and rank list, a
/// command line's `NCCL_*` settings, results (the run got past its init) and failure lines.
fn read_other(log: &mut NcclLog, scan: &mut Scan, line: &str) {
    if let Some(v) = line::version_in(line) {
        if line.contains("RCCL version ") {
            log.library = "RCCL";
        }
        log.version.get_or_insert(v);
        log.note("version", &scan.here);
        return;
    }
    if let Some(message) = line::failure_in(line) {
        fail(log, scan, message);
        return;
    }
    command_settings(log, scan, line);
    let Some(comment) = line.strip_prefix('#').map(str::trim) else {
        if line::is_result_row(line) {
            scan.results_seen = true;
        }
        return;
    };
    if comment.starts_with("Avg bus bandwidth") {
        scan.results_seen = true;
    } else if let Some(rank) = parse_rank_line(comment) {
        log.note("ranks", &scan.here);
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

/// `NCCL_P2P_DISABLE=1 ./all_reduce_perf`, `export NCCL_IB_DISABLE=1`, `mpirun -x NCCL_ALGO=Ring`: settings a
/// command line gives (the log's own `… set by environment to …` echo wins where both exist).
fn command_settings(log: &mut NcclLog, scan: &mut Scan, line: &str) {
    for token in line.split_whitespace() {
        let token = token.trim_matches(|c: char| "'\"`;".contains(c));
        let Some((key, value)) = token.split_once('=') else {
            continue;
        };
        let named = key.starts_with("NCCL_")
            && key.len() > 5
            && key[5..]
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if named && !value.is_empty() {
            log.settings
                .entry(key.to_string())
                .or_insert_with(|| value.to_string());
            log.note(&format!("settings.{key}"), &scan.here);
        }
    }
}

/// A failure: the first one is kept, with the warning before it as its message where there is one.
fn fail(log: &mut NcclLog, scan: &mut Scan, message: String) {
    if log.failure.is_some() {
        return;
    }
    if let Some((warning, cite)) = scan.last_warning.clone() {
        log.note("failure", &cite);
        log.failure = Some(LogFailure {
            message: warning,
            line: scan.here.line.unwrap_or(0),
        });
    } else {
        log.failure = Some(LogFailure {
            message,
            line: scan.here.line.unwrap_or(0),
        });
    }
    log.note("failure", &scan.here.clone());
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
    read_ranks(log, scan, &tokens);
    lifecycle(log, scan, msg);
    if net::read(log, scan, msg) {
        return;
    }
    if let Some(v) = line::version_in(msg) {
        if msg.contains("RCCL version ") {
            log.library = "RCCL";
        }
        log.version.get_or_insert(v);
        log.note("version", &scan.here.clone());
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
        channels::read_channel_counts(log, scan, msg);
    } else if msg.starts_with("NVLS multicast support is available") {
        log.nvls = true;
    } else if msg.starts_with("NCCL_") && msg.contains(" set ") {
        if let Some(pos) = msg.find(" to ") {
            // NCCL ends the echo of a number with a period: `… set by environment to 1.`
            let value = msg[pos + 4..].trim().trim_end_matches('.');
            log.settings
                .insert(tokens[0].to_string(), value.to_string());
            log.note(&format!("settings.{}", tokens[0]), &scan.here.clone());
        }
    } else if let Some(v) = after(&tokens, "intraNodeP2pSupport") {
        log.intra_node_p2p = v.parse::<u32>().ok().map(|v| v != 0);
        log.note("p2p", &scan.here.clone());
    } else if msg.contains("Loaded net plugin") || msg.starts_with("P2P plugin") {
        log.net_plugin = Some(msg.to_string());
        log.note("plugin", &scan.here.clone());
    }
}

/// Where the run is: init begun (`Init START`, a communicator's `comm 0x… rank`), init done (`Init
/// COMPLETE`, `Destroy COMPLETE`), or an error returned up through init or bootstrap (`init.cc:1234 -> 2`).
fn lifecycle(log: &mut NcclLog, scan: &mut Scan, msg: &str) {
    if msg.contains("Init COMPLETE")
        || msg.contains("Destroy COMPLETE")
        || msg.starts_with("Launch mode ")
    {
        scan.init_done = true;
        log.note("init", &scan.here.clone());
    } else if msg.contains("Init START")
        || msg.starts_with("comm 0x")
        || msg.starts_with("Channel ")
        || msg.starts_with("Trees ")
        || msg.starts_with("Ring ")
    {
        scan.init_begun = true;
    }
    if let Some((site, code)) = line::error_return(msg) {
        if code != 0 {
            let fatal = [
                "init",
                "bootstrap",
                "enqueue",
                "group",
                "collectives",
                "transport/net_socket",
                "proxy",
            ]
            .iter()
            .any(|k| site.contains(k));
            if fatal {
                fail(log, scan, format!("{site} -> {code}"));
            } else if site.contains("plugin") {
                scan.plugin_failed.get_or_insert_with(|| scan.here.clone());
            }
        }
    }
}

/// `rank R` with `nranks N`/`nRanks N` (and `nNodes`, `localRanks`) in any line that has both.
fn read_ranks(log: &mut NcclLog, scan: &mut Scan, tokens: &[&str]) {
    let num = |k: &str| after(tokens, k).and_then(|v| v.trim_end_matches(',').parse::<u32>().ok());
    let Some(n) = num("nRanks").or_else(|| num("nranks")) else {
        return;
    };
    log.nranks = Some(n);
    log.note("ranks", &scan.here.clone());
    if let Some(r) = num("rank") {
        log.ranks_seen.push(r);
        if let Some(h) = &scan.line_host {
            scan.rank_hosts.insert(r, h.clone());
            // `comm 0x… rank 1 nranks 2 cudaDev 0 busId 2000`: the GPU this rank runs on, on the host NCCL
            // itself printed (a launcher's label may stand for several machines).
            if let Some(bus) = after(tokens, "busId").filter(|_| scan.own_host) {
                let gpu = (h.clone(), bus.to_string());
                let here = scan.here.clone();
                match scan.rank_gpus.get(&gpu) {
                    Some((other, first)) if *other != r => {
                        let (other, first) = (*other, first.clone());
                        log.shared_gpu
                            .get_or_insert((other, r, gpu.0.clone(), gpu.1.clone()));
                        log.note("shared_gpu", &first);
                        log.note("shared_gpu", &here);
                    }
                    Some(_) => {}
                    None => {
                        scan.rank_gpus.insert(gpu, (r, here));
                    }
                }
            }
        }
    }
    log.nnodes = num("nNodes").or(log.nnodes);
    log.local_ranks = num("localRanks").or(log.local_ranks);
}

#[cfg(test)]
mod tests;
