//! What the lines of a log add up to, decided once they are all read: rank and node counts, the network when
//! no `Using network` line names it, NICs per node, GPU Direct RDMA, and whether data crossed a network.

use super::{NcclLog, Scan};

/// Network names that are TCP, where GPU Direct RDMA cannot exist.
pub fn is_tcp(network: &str) -> bool {
    matches!(network, "Socket" | "FastSocket")
}

pub fn derive(log: &mut NcclLog, scan: &Scan) {
    if log.channels.is_none() {
        log.channels = log.coll_channels;
    }
    log.ranks_seen.sort_unstable();
    log.ranks_seen.dedup();
    counts(log, scan);
    if log.network.is_none() {
        log.network = network(log, scan);
    }
    log.nics_per_node = match log.network.as_deref() {
        Some("Socket") => Some(scan.socket_list_max),
        Some(n) if n.contains("Libfabric") => scan.ofi_nics,
        Some(_) => Some(scan.ib_list_max),
        None => None,
    }
    .filter(|n| *n > 0);
    log.network_carries_data = carries_data(log);
    if log.nnodes.is_none() {
        let hosts = log.hosts.len() as u32;
        let crossed = log.network_carries_data == Some(true)
            && log.transports.keys().any(|k| k.starts_with("NET/"));
        log.nnodes_at_least = Some(hosts.max(if crossed { 2 } else { 0 })).filter(|n| *n > 1);
    }
    log.gdr = match log.network_carries_data {
        Some(false) => None,
        _ => gdr(log, scan),
    };
    // NCCL prints `Init COMPLETE` from 2.4 on: an older log never does, and says nothing by it.
    let prints_complete = log.library == "RCCL"
        || log.version.as_deref().is_none_or(|v| {
            let mut p = v.split(['.', '+']).map(|x| x.parse::<u32>().unwrap_or(0));
            (p.next().unwrap_or(0), p.next().unwrap_or(0)) >= (2, 4)
        });
    log.init_complete = if scan.init_done || scan.results_seen {
        Some(true)
    } else if scan.init_begun && log.failure.is_none() && prints_complete {
        Some(false)
    } else {
        None
    };
    log.plugin_fallback = plugin_fallback(log, scan);
}

/// A net plugin that loaded and returned an error, where NCCL then used another network.
fn plugin_fallback(log: &mut NcclLog, scan: &Scan) -> Option<super::PluginFallback> {
    let (plugin, _) = scan.plugin_loaded.as_ref()?;
    let failed = scan.plugin_failed.as_ref()?;
    let network = log.network.clone()?;
    if network == *plugin || scan.network_line.is_none() {
        return None;
    }
    log.note("plugin", failed);
    Some(super::PluginFallback {
        plugin: plugin.clone(),
        network,
    })
}

/// Whether the OFI plugin's Libfabric provider is TCP (`tcp;ofi_rxm`, `sockets`, `udp`): no RDMA.
pub fn is_tcp_provider(provider: &str) -> bool {
    provider
        .split(';')
        .next()
        .is_some_and(|p| matches!(p, "tcp" | "sockets" | "udp"))
}

/// Ranks listed under an nccl-tests `Using devices` header, when the list holds ranks 0 to n-1 once each.
fn complete_list(log: &NcclLog) -> Option<u32> {
    // Several runs in one file list their ranks again from rank 0: each list must be complete, and the same.
    let mut lists: Vec<Vec<&(u32, String)>> = Vec::new();
    for entry in &log.listed_ranks {
        match lists.last_mut() {
            Some(list) if entry.0 != 0 => list.push(entry),
            _ => lists.push(vec![entry]),
        }
    }
    let first = lists.first()?;
    let complete =
        |list: &Vec<&(u32, String)>| list.iter().enumerate().all(|(i, (r, _))| *r as usize == i);
    let same = lists.iter().all(|l| l == first);
    (same && complete(first)).then_some(first.len() as u32)
}

/// Ranks: printed, else a ring's length (a ring holds every rank once), else a complete rank list; nodes:
/// printed, else the hosts of a complete rank list; a lower bound on ranks where the count is unknown (the
/// ranks that wrote lines, are listed, or that connections name).
fn counts(log: &mut NcclLog, scan: &Scan) {
    let listed = complete_list(log);
    if log.nranks.is_none() {
        log.nranks = log.rings.first().map(|r| r.len() as u32).or(listed);
    }
    if log.nnodes.is_none() && listed.is_some() && listed == log.nranks {
        let mut hosts: Vec<&str> = log.listed_ranks.iter().map(|(_, h)| h.as_str()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        log.nnodes = Some(hosts.len() as u32);
    }
    // Every rank's init line, each from a known host: the nodes are those hosts.
    if let (None, Some(n)) = (log.nnodes, log.nranks) {
        if n > 0 && (0..n).all(|r| scan.rank_hosts.contains_key(&r)) {
            let mut hosts: Vec<&String> = scan.rank_hosts.values().collect();
            hosts.sort_unstable();
            hosts.dedup();
            log.nnodes = Some(hosts.len() as u32);
        }
    }
    if log.nranks.is_none() {
        let highest = log
            .ranks_seen
            .iter()
            .chain(log.listed_ranks.iter().map(|(r, _)| r))
            .chain(scan.highest_rank_named.iter())
            .map(|r| r + 1)
            .max();
        log.nranks_at_least = highest;
    }
}

/// The network a log shows without a `Using network` line: the transport most of its network connections
/// use (`via NET/IB/0` gives `IB`), else IB when it lists IB devices or sets up IB queue pairs, else the OFI
/// plugin's `Libfabric`, else `FastSocket`, else `Socket` when it lists socket interfaces.
fn network(log: &NcclLog, scan: &Scan) -> Option<String> {
    let busiest = log
        .transports
        .iter()
        .filter_map(|(k, n)| Some((k.strip_prefix("NET/")?, *n)))
        .max_by_key(|(_, n)| *n)
        .map(|(k, _)| k.to_string());
    let ib_disabled = log
        .settings
        .get("NCCL_IB_DISABLE")
        .is_some_and(|v| v == "1");
    let ib_listed = log.interfaces.iter().any(|i| i.transport == "IB");
    busiest
        .or_else(|| ((ib_listed && !ib_disabled) || log.ib_queue_pairs).then(|| "IB".to_string()))
        .or_else(|| log.net_provider.as_ref().map(|_| "Libfabric".to_string()))
        .or_else(|| scan.fastsocket.then(|| "FastSocket".to_string()))
        .or_else(|| {
            log.interfaces
                .iter()
                .any(|i| i.transport == "Socket")
                .then(|| "Socket".to_string())
        })
}

/// GPU Direct RDMA, in order: off where the log says so; on where network connections use it or the log
/// says it is enabled; off where network connections go without it; not applicable where nothing crosses
/// the network although NCCL reports GDR for its rings; off on TCP networks; else unknown.
fn gdr(log: &NcclLog, scan: &Scan) -> Option<bool> {
    let net_connections: u64 = log
        .transports
        .iter()
        .filter(|(k, _)| k.starts_with("NET/"))
        .map(|(_, n)| n)
        .sum();
    if !log.gdr_disabled_hcas.is_empty()
        || scan.ofi_gdr_off
        || (scan.ring_gdr == Some(false) && net_connections > 0)
    {
        Some(false)
    } else if log.net_connections_gdr > 0 || scan.gdr_enabled_seen {
        Some(true)
    } else if net_connections > 0 {
        Some(false)
    } else if scan.ring_gdr.is_some() {
        None
    } else if log.network.as_deref().is_some_and(is_tcp)
        || log.net_provider.as_deref().is_some_and(is_tcp_provider)
    {
        Some(false)
    } else {
        None
    }
}

/// Whether data crossed a network: yes with any network connection or several nodes (printed, or several
/// hosts writing the log), no when every rank is on one node.
fn carries_data(log: &NcclLog) -> Option<bool> {
    let net_connections = log.transports.keys().any(|k| k.starts_with("NET/"));
    if net_connections {
        Some(true)
    } else if log.nnodes == Some(1) || log.nranks == Some(1) {
        Some(false)
    } else if log.nnodes.is_some_and(|n| n > 1) || log.hosts.len() > 1 {
        Some(true)
    } else {
        None
    }
}
