//! The lines about the network: which one NCCL uses, its devices and interfaces, the bootstrap interface,
//! GPU Direct RDMA, and the net plugins' own lines (OFI for Libfabric/EFA, FastSocket).

use super::{after, NcclLog, NetInterface, Scan};

/// Reads a network line; `false` when the message is not one.
pub fn read(log: &mut NcclLog, scan: &mut Scan, msg: &str) -> bool {
    let here = scan.here.clone();
    if let Some(net) = msg
        .strip_prefix("Using network ")
        .or_else(|| msg.strip_prefix("Using internal Network "))
    {
        log.network = Some(net.trim().to_string());
        log.note("network", &here);
        scan.network_line = Some(here);
    } else if let Some(rest) = msg.strip_prefix("Assigned NET plugin ") {
        let net = rest.split(" to ").next().unwrap_or("").trim();
        if !net.is_empty() {
            log.note("network", &here);
            scan.network_line = Some(here);
        }
    } else if let Some(name) = msg
        .strip_prefix("Initialized NET plugin ")
        .or_else(|| msg.strip_prefix("NET/Plugin: Loaded net plugin "))
        .or_else(|| msg.strip_prefix("NET/Plugin : Loaded net plugin "))
    {
        let name = name.split(" (").next().unwrap_or(name).trim().to_string();
        if !matches!(name.as_str(), "IB" | "Socket") && scan.plugin_loaded.is_none() {
            log.note("plugin", &here);
            scan.plugin_loaded = Some((name, here));
        }
        return false;
    } else if let Some(rest) = msg.strip_prefix("NET : Using interface ") {
        // NCCL 2.0 to 2.4: one line per socket interface.
        let (name, addr) = endpoint(rest.trim());
        if !name.is_empty() {
            push_interface(log, "Socket", name, addr);
            log.note("interfaces", &here);
        }
    } else if let Some(rest) = msg.strip_prefix("NET/IB : Using interface ") {
        // NCCL 2.0 to 2.4: `… enp3s0 for sideband communication`.
        if let Some(name) = rest.split_whitespace().next() {
            push_interface(log, "Bootstrap", name, None);
            log.bootstrap_interface
                .get_or_insert_with(|| name.to_string());
            log.note("interfaces", &here);
        }
    } else if msg.starts_with("NET/Socket") && msg.ends_with("interfaces found") {
        let n = msg
            .split_whitespace()
            .rev()
            .nth(2)
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(n) = n {
            scan.socket_list_max = scan.socket_list_max.max(n);
        }
    } else if msg.starts_with("NET/IB") && msg.contains("No device found") {
        log.ib_no_device = true;
    } else if msg.starts_with("NET/IB: Dev ") {
        log.ib_queue_pairs = true;
    } else if let Some(rest) = msg
        .strip_prefix("Bootstrap : Using ")
        .or_else(|| msg.strip_prefix("Bootstrap: Using "))
    {
        log.note("interfaces", &here);
        bootstrap(log, rest);
    } else if msg.contains("GPU Direct RDMA") {
        log.note("gdr", &here);
        gdr_line(log, scan, msg);
    } else if let Some(rest) = msg.strip_prefix("NET/OFI ") {
        ofi(log, scan, rest);
    } else if msg.starts_with("NET/FastSocket") {
        scan.fastsocket = true;
        let tokens: Vec<&str> = msg.split_whitespace().collect();
        if let Some(n) = after(&tokens, "after").and_then(|v| v.parse::<u32>().ok()) {
            log.connect_retries_max = Some(log.connect_retries_max.map_or(n, |m| m.max(n)));
        }
    } else if msg.starts_with("NET/") && msg.contains(" Using [") {
        log.note("interfaces", &here);
        device_list(log, scan, msg);
    } else if msg.starts_with("Connected all rings") && msg.contains(" GDR ") {
        let tokens: Vec<&str> = msg.split_whitespace().collect();
        scan.ring_gdr = after(&tokens, "GDR").map(|v| v != "0");
        log.note("gdr", &here);
        if scan.ring_gdr == Some(false) {
            push_evidence(log, msg);
        }
    } else {
        return false;
    }
    true
}

/// Keeps a line that decides GPU Direct RDMA, once.
pub fn push_evidence(log: &mut NcclLog, line: &str) {
    if !log.gdr_evidence.iter().any(|e| e == line) {
        log.gdr_evidence.push(line.to_string());
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

/// `eth0:10.128.0.52<0>`, `[0]br0:10.137.141.16<0>` (before NCCL 2.6 the entry has its index), or a bare
/// name: (name, address).
fn endpoint(item: &str) -> (&str, Option<&str>) {
    let item = match item.strip_prefix('[').and_then(|r| r.split_once(']')) {
        Some((idx, rest)) if idx.parse::<u32>().is_ok() => rest,
        _ => item,
    };
    match item.split_once(':') {
        Some((name, addr)) => (name, Some(addr)),
        None => (item, None),
    }
}

/// The bootstrap (out-of-band) interface: `Bootstrap : Using eth0:10.0.0.5<0>` or the `OOB` of an IB list.
fn bootstrap(log: &mut NcclLog, rest: &str) {
    let Some(first) = rest.split_whitespace().next() else {
        return;
    };
    let (name, addr) = endpoint(first);
    if name.is_empty() {
        return;
    }
    log.bootstrap_interface
        .get_or_insert_with(|| name.to_string());
    push_interface(log, "Bootstrap", name, addr);
}

/// `GPU Direct RDMA Enabled|Disabled for HCA 0 'mlx5_0'`.
fn gdr_line(log: &mut NcclLog, scan: &mut Scan, msg: &str) {
    let hca = msg
        .split('\'')
        .nth(1)
        .map(str::to_string)
        .unwrap_or_default();
    if msg.contains("Disabled") {
        if !log.gdr_disabled_hcas.contains(&hca) {
            log.gdr_disabled_hcas.push(hca);
        }
        push_evidence(log, msg);
    } else if msg.contains("Enabled") {
        scan.gdr_enabled_seen = true;
    }
}

/// `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>` or
/// `NET/Socket : Using [0]eth0:10.128.0.52<0> [1]eth1:…` (a name may come without an address: `[0]enp41s0f1:<0>`).
fn device_list(log: &mut NcclLog, scan: &mut Scan, msg: &str) {
    let transport = msg["NET/".len()..]
        .split([' ', ':'])
        .next()
        .unwrap_or("")
        .to_string();
    let list = msg.split_once(" Using ").map(|x| x.1).unwrap_or("");
    let (devices, oob) = match list.split_once(';') {
        Some((d, o)) => (d, Some(o)),
        None => (list, None),
    };
    let mut count = 0;
    for item in devices.split_whitespace() {
        let Some((idx, dev)) = item.strip_prefix('[').and_then(|r| r.split_once(']')) else {
            continue;
        };
        if idx.parse::<u32>().is_err() || dev.is_empty() {
            continue;
        }
        count += 1;
        let (name, detail) = if transport == "Socket" {
            endpoint(dev)
        } else {
            match dev.split_once('/') {
                Some((n, kind)) => (n, Some(kind)),
                None => (dev, None),
            }
        };
        push_interface(log, &transport, name, detail);
    }
    match transport.as_str() {
        "Socket" => scan.socket_list_max = scan.socket_list_max.max(count),
        _ => scan.ib_list_max = scan.ib_list_max.max(count),
    }
    if let Some(rest) = oob.and_then(|o| o.trim().strip_prefix("OOB ")) {
        bootstrap(log, rest);
    }
}

/// The OFI plugin (Libfabric, AWS EFA): `Selected provider is efa, fabric is efa (found 1 nics)`, `NIC group
/// 0 device #0 0000:56:00.0`, `GUID of rdmap47s0: …`, `Could not disable CUDA API usage for HMEM, disabling GDR`.
fn ofi(log: &mut NcclLog, scan: &mut Scan, rest: &str) {
    let tokens: Vec<&str> = rest.split_whitespace().collect();
    let lower = rest.to_ascii_lowercase();
    if let Some(pos) = lower.find("selected provider is ") {
        log.note("provider", &scan.here.clone());
        let provider = rest[pos + "selected provider is ".len()..]
            .split([' ', ','])
            .next()
            .unwrap_or("");
        if !provider.is_empty() {
            log.net_provider = Some(provider.to_string());
        }
        scan.ofi_nics = after(&tokens, "(found").and_then(|n| n.parse().ok());
    } else if rest.starts_with("NIC group ") {
        if let Some(addr) = tokens.last() {
            push_interface(log, "OFI", addr, None);
        }
    } else if let Some(name) = rest.strip_prefix("GUID of ") {
        let name = name.split(':').next().unwrap_or("").trim();
        if !name.is_empty() {
            push_interface(log, "OFI", name, None);
        }
    } else if rest.contains("disabling GDR") || rest.contains("GDR not supported") {
        log.note("gdr", &scan.here.clone());
        scan.ofi_gdr_off = true;
        push_evidence(log, &format!("NET/OFI {rest}"));
    }
}
