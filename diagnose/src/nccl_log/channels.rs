//! Channel and ring lines: the connections between ranks by transport, the ranks and network devices they
//! name, the rings, and the channel counts.

use super::net::push_evidence;
use super::{NcclLog, Scan};

/// `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`, `Channel 01 : 2[c7000] -> 0[87000] [receive] via
/// NET/IB/5/GDRDMA`, `Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0` (connections), or `Channel 00/16 :
/// 0   7   6 …` (a ring). `rest` is the line after `Channel `/`Ring `.
pub fn read_channel(log: &mut NcclLog, scan: &mut Scan, prefix: &str, rest: &str) {
    let Some((head, body)) = rest.split_once(':') else {
        return;
    };
    if let Some(pos) = body.find(" via ") {
        connection(log, scan, &body[..pos], body[pos + 5..].trim());
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
    log.note("channels", &scan.here.clone());
    // Keep the rings of the first rank that printed them (every rank prints the same rings).
    match &scan.ring_owner {
        None => {
            scan.ring_owner = Some(prefix.to_string());
            log.rings.push(ranks);
        }
        Some(o) if o == prefix => log.rings.push(ranks),
        Some(_) => {}
    }
}

/// One connection: its transport kind, whether it uses GPU Direct RDMA, the ranks at both ends and the
/// network device.
fn connection(log: &mut NcclLog, scan: &mut Scan, ends: &str, via: &str) {
    let (kind, gdr) = transport_kind(via);
    if kind.starts_with("NET/") {
        log.note("connections", &scan.here.clone());
        if gdr {
            log.net_connections_gdr += 1;
        }
        if let Some(dev) = net_device_index(via) {
            if let Err(pos) = log.net_device_indexes.binary_search(&dev) {
                log.net_device_indexes.insert(pos, dev);
            }
        }
        if !gdr {
            push_evidence(log, &format!("via {via} (no GDRDMA)"));
            log.note("gdr", &scan.here.clone());
        }
    }
    *log.transports.entry(kind).or_insert(0) += 1;
    // `15[41000] -> 0[1b000] [receive]` or `7 -> 8 [send]`.
    for end in ends.split("->") {
        let rank = end
            .split_whitespace()
            .next()
            .map(|t| t.split('[').next().unwrap_or(t))
            .and_then(|t| t.parse::<u32>().ok());
        if let Some(r) = rank {
            scan.highest_rank_named = scan.highest_rank_named.max(Some(r));
        }
    }
}

/// The device index of a network connection: `NET/IB/5/GDRDMA` gives 5, `NET/AWS Libfabric/0` 0.
fn net_device_index(via: &str) -> Option<u32> {
    via.strip_prefix("NET/")?
        .split('/')
        .find_map(|p| p.trim().parse::<u32>().ok())
}

/// Transport kind of a `via …` text and whether it uses GPU Direct RDMA: `P2P/CUMEM`, `P2P/IPC`,
/// `P2P/direct pointer`, `SHM` (also the old `direct shared memory`), `NET/IB`, `NET/Socket`, `NET/AWS
/// Libfabric`, `CollNet`, `NVLS`.
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
    if via.starts_with("direct shared memory") {
        return ("SHM".to_string(), gdr);
    }
    let first = via.split(['/', ' ']).next().unwrap_or(via);
    (first.to_string(), gdr)
}

/// `16 coll channels, 16 collnet channels, 16 nvls channels, 16 p2p channels, 2 p2p channels per peer`.
pub fn read_channel_counts(log: &mut NcclLog, scan: &Scan, msg: &str) {
    log.note("channels", &scan.here);
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
        assert_eq!(
            transport_kind("direct shared memory"),
            ("SHM".into(), false)
        );
    }

    #[test]
    fn device_indexes() {
        assert_eq!(net_device_index("NET/IB/5/GDRDMA"), Some(5));
        assert_eq!(
            net_device_index("NET/NCCL RDMA Plugin v8/6/GDRDMA"),
            Some(6)
        );
        assert_eq!(net_device_index("P2P/IPC"), None);
    }
}
