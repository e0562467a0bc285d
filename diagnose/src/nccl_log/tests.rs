//! The log parser on small hand-written logs, one line form each.

use super::*;

fn parse(text: &str) -> NcclLog {
    parse_str(text, "x").unwrap()
}

fn names(log: &NcclLog) -> Vec<(&str, &str)> {
    log.interfaces
        .iter()
        .map(|i| (i.transport.as_str(), i.name.as_str()))
        .collect()
}

#[test]
fn ib_interfaces() {
    let text = "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/RoCE [RO]; OOB ens3:10.1.0.4<0>\nh:1:2 [0] NCCL INFO Using network IB\nh:1:2 [0] NCCL INFO GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n";
    let log = parse(text);
    assert_eq!(log.network.as_deref(), Some("IB"));
    // The two ports, then the out-of-band interface.
    assert_eq!(
        names(&log),
        [
            ("IB", "mlx5_0:1"),
            ("IB", "mlx5_3:1"),
            ("Bootstrap", "ens3")
        ]
    );
    assert_eq!(log.interfaces[1].detail.as_deref(), Some("RoCE"));
    assert_eq!(log.bootstrap_interface.as_deref(), Some("ens3"));
    assert_eq!(log.nics_per_node, Some(2));
    assert_eq!(log.gdr, Some(true));
}

#[test]
fn not_a_log() {
    assert!(matches!(
        parse_str("hello", "x"),
        Err(NcclLogError::NotALog { .. })
    ));
}

#[test]
fn nccl_2_5_without_host_prefix_and_old_ring_lines() {
    let log = parse(
        " [0] NCCL INFO Bootstrap : Using [0]br0:10.137.141.16<0>
 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.
 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB br0:10.137.141.16<0>
 [0] NCCL INFO NCCL version 2.5.7+cuda10.0
 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.
 [0] NCCL INFO Channel 00/02 :    0   1   2   3
 [0] NCCL INFO Ring 00 : 3[41000] -> 0[1b000] [receive] via NET/IB/0
 [0] NCCL INFO Ring 00 : 0[1b000] -> 1[1c000] via P2P/IPC
 [0] NCCL INFO Ring 00 : 0[1b000] -> 2[41000] via direct shared memory
",
    );
    assert_eq!(names(&log), [("Bootstrap", "br0"), ("IB", "mlx5_0:1")]);
    assert_eq!(log.settings["NCCL_IB_DISABLE"], "0");
    assert_eq!(log.settings["NCCL_IB_GID_INDEX"], "3");
    assert_eq!(log.version.as_deref(), Some("2.5.7+cuda10.0"));
    assert_eq!(log.nranks, Some(4));
    assert_eq!(
        log.transports,
        [("NET/IB", 1), ("P2P/IPC", 1), ("SHM", 1)]
            .map(|(k, v)| (k.to_string(), v))
            .into()
    );
    assert_eq!(log.network.as_deref(), Some("IB"));
    // The network connection goes without GDRDMA.
    assert_eq!(log.gdr, Some(false));
    assert_eq!(log.gdr_evidence, ["via NET/IB/0 (no GDRDMA)"]);
    assert_eq!(log.net_device_indexes, [0]);
    assert_eq!(log.network_carries_data, Some(true));
    assert!(log.hosts.is_empty());
}

#[test]
fn ranks_from_every_line_that_counts_them() {
    let log = parse(
        "node2:14159:14168 [0] NCCL INFO comm 0x55c6 rank 0 nranks 2 cudaDev 0 nvmlDev 2 busId 4c000 commId 0xbe - Init COMPLETE\n",
    );
    assert_eq!((log.nranks, log.ranks_seen.clone()), (Some(2), vec![0]));
    let log = parse(
        "g:7:7 [0] NCCL INFO [Rank 1] ncclCommInitRank comm 0x5a rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 30000 - Init START\n",
    );
    assert_eq!(log.nranks, Some(2));
    // Connections name ranks: at least 32 when rank 31 is seen.
    let log = parse(
        "h:1:2 [7] NCCL INFO Ring 00 : 30[6] -> 31[7] via P2P/IPC\nh:1:2 [7] NCCL INFO Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0\n",
    );
    assert_eq!((log.nranks, log.nranks_at_least), (None, Some(32)));
    assert_eq!(log.network.as_deref(), Some("AWS Libfabric"));
}

#[test]
fn an_nccl_tests_rank_list_in_the_log() {
    let one_node = "#   Rank  0 Pid  1 on a device  0 [0x86] Tesla T4
#   Rank  1 Pid  1 on a device  1 [0xaf] Tesla T4
a:1:1 [0] NCCL INFO NET/Socket : Using [0]em1:10.193.84.3<0> [1]tunl0:10.227.47.12<0>
a:1:1 [0] NCCL INFO Using network Socket
";
    let log = parse(one_node);
    assert_eq!((log.nranks, log.nnodes), (Some(2), Some(1)));
    assert_eq!(log.network_carries_data, Some(false));
    // Nothing crosses a network: GPU Direct RDMA does not apply.
    assert_eq!(log.gdr, None);
    assert_eq!(log.nics_per_node, Some(2));
    // A list that starts at rank 1 is a paste cut above it.
    let log = parse(
        "#   Rank  1 Pid 2 on  b device  0 [0xd1] H100\na:1:1 [0] NCCL INFO Using network IB\nb:2:2 [0] NCCL INFO Using network IB\n",
    );
    assert_eq!(
        (log.nranks, log.nranks_at_least, log.nnodes),
        (None, Some(2), None)
    );
    assert_eq!(log.network_carries_data, Some(true));
    let log = parse("# nThread 1 nGpus 1 minBytes 8 maxBytes 256M step: 2(factor) warmup iters: 5 iters: 20 validation: 0\nh:1:1 [0] NCCL INFO Using network IB\n");
    assert_eq!(log.tests_validation, Some(false));
}

#[test]
fn host_prefixes_of_pdsh_and_mpirun() {
    let log = parse(
        "w-0: w-0:19491:21059 [7] NCCL INFO NET/IB : Using [0]mlx5_9:1/IB/SHARP [RO]; OOB eth0:10.224.3.48<0>\n\
         [1,31]<stdout>:ip-1:8800:9549 [7] NCCL INFO NET/OFI No NIC info for dev 0\n",
    );
    assert_eq!(log.hosts, ["w-0", "ip-1"]);
    assert_eq!(names(&log), [("IB", "mlx5_9:1"), ("Bootstrap", "eth0")]);
    assert_eq!(log.interfaces[0].detail.as_deref(), Some("IB/SHARP"));
}

#[test]
fn ofi_plugin_lines() {
    let log = parse(
        "g:7:7 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 1 nics)
g:7:7 [0] NCCL INFO NET/OFI GUID of rdmap47s0: 733065c100010d00
g:7:7 [0] NCCL INFO NET/OFI Could not disable CUDA API usage for HMEM, disabling GDR
g:7:7 [0] NCCL INFO Bootstrap: Using enp39s0:10.0.10.221<0>
g:7:7 [0] NCCL INFO Using network Libfabric
g:7:7 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Libfabric/0
g:7:7 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 0
h:8:8 [0] NCCL INFO NET/OFI NIC group 0 device #0 0000:56:00.0
",
    );
    assert_eq!(log.net_provider.as_deref(), Some("efa"));
    assert_eq!(log.nics_per_node, Some(1));
    assert_eq!(
        names(&log),
        [
            ("OFI", "rdmap47s0"),
            ("Bootstrap", "enp39s0"),
            ("OFI", "0000:56:00.0")
        ]
    );
    assert_eq!(log.gdr, Some(false));
    assert_eq!(
        log.gdr_evidence,
        [
            "NET/OFI Could not disable CUDA API usage for HMEM, disabling GDR",
            "via NET/Libfabric/0 (no GDRDMA)",
            "Connected all rings, use ring PXN 0 GDR 0"
        ]
    );
}

#[test]
fn networks_no_using_network_line_names() {
    let net = |text: &str| parse(text).network;
    // IB is used when it found devices, even where socket interfaces are listed too.
    assert_eq!(
        net("s:1:1 [7] NCCL INFO NET/Socket : Using [0]enp41s0f1:<0> [1]virbr0:<0>\ns:1:1 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB enp41s0f1:<0>\n").as_deref(),
        Some("IB")
    );
    assert_eq!(
        net("i:1:1 [0] NCCL INFO NET/IB : No device found.\ni:1:1 [0] NCCL INFO NET/Socket : Using [0]ens3:172.31.10.182<0>\n").as_deref(),
        Some("Socket")
    );
    assert_eq!(
        net("n:1:2 [0] NCCL INFO NET/IB: Dev 0 Port 1 qpn 58 mtu 3 GID 3 (0/A10B)\n").as_deref(),
        Some("IB")
    );
    let fast = parse("a:1:5 [0] NCCL INFO NET/FastSocket : Connected after 15 retries.\na:1:5 [0] NCCL INFO NET/FastSocket : Connected after 60 retries.\n");
    assert_eq!(
        (fast.network.as_deref(), fast.connect_retries_max, fast.gdr),
        (Some("FastSocket"), Some(60), Some(false))
    );
}

#[test]
fn gdr_is_not_applicable_when_nothing_crosses_the_network() {
    let log = parse(
        "G:1:1 [0] NCCL INFO Using network Socket
G:1:1 [0] NCCL INFO comm 0x6 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
G:1:1 [0] NCCL INFO Check P2P Type intraNodeP2pSupport 0 directMode 1
G:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct
G:1:1 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1
",
    );
    assert_eq!(log.gdr, None);
    assert_eq!(log.intra_node_p2p, Some(false));
    assert_eq!(log.network_carries_data, Some(false));
    assert_eq!((log.ranks_seen.clone(), log.nranks), (vec![0], Some(2)));
}

#[test]
fn nccl_2_2_to_2_4_lines_without_the_word_nccl_or_a_host() {
    let log = parse(
        "gpu-a:1:1 [0] INFO NET : Using interface enp3s0:192.168.144.103<0>
gpu-a:1:1 [0] INFO NET/IB : Using interface enp3s0 for sideband communication
gpu-a:1:1 [0] INFO Using internal Network Socket
gpu-a:1:1 [0] INFO NET/Socket : 1 interfaces found
NCCL version 2.2.13+cuda9.0
gpu-a:1:2 [0] INFO comm 0x7fa42c00a3b0 rank 0 nranks 2
gpu-b:3:4 [0] INFO comm 0x7fa42c00a3b1 rank 1 nranks 2
",
    );
    assert_eq!(log.version.as_deref(), Some("2.2.13+cuda9.0"));
    assert_eq!(log.network.as_deref(), Some("Socket"));
    assert_eq!(names(&log), [("Socket", "enp3s0"), ("Bootstrap", "enp3s0")]);
    assert_eq!((log.nranks, log.nnodes), (Some(2), Some(2)));
    // NCCL 2.2 prints no `Init COMPLETE`: the log says nothing by its absence.
    assert_eq!(log.init_complete, None);
    let bare = parse(
        "NCCL INFO Channel 00 : 0[101c0] -> 8[101c0] [receive] via NET/AWS Libfabric/0/GDRDMA\n",
    );
    assert_eq!(bare.network.as_deref(), Some("AWS Libfabric"));
    assert_eq!(bare.gdr, Some(true));
    assert_eq!(bare.nnodes_at_least, Some(2));
}

#[test]
fn rccl_a_stopped_init_a_failure_and_command_line_settings() {
    let log = parse(
        "$ NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 ./build/all_reduce_perf -g 2
RCCL version 2.18.3+hip6.0 HEAD:2f6d59e+
h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 2f000 commId 0x5 - Init START
h:1:3 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 3000 commId 0x5 - Init START
h:1:2 [0] NCCL INFO P2P Chunksize set to 131072
",
    );
    assert_eq!(
        (log.library, log.version.as_deref()),
        ("RCCL", Some("2.18.3+hip6.0"))
    );
    assert_eq!(log.settings["NCCL_P2P_DISABLE"], "1");
    assert_eq!(log.init_complete, Some(false));
    assert_eq!(log.nnodes, Some(1));
    assert_eq!(log.cited("last_line")[0].line, Some(5));
    let failed = parse(
        "h:1:2 [0] include/socket.h:361 NCCL WARN Call to connect timeout : Connection refused
h:1:2 [0] NCCL INFO bootstrap.cu:19 -> 2
",
    );
    let f = failed.failure.unwrap();
    assert_eq!(f.message, "Call to connect timeout : Connection refused");
    assert_eq!(failed.init_complete, None);
    // A plugin's error return is no failure of the run: NCCL goes on with another network.
    let plugin = parse(
        "h:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v6)
h:1:1 [0] NCCL INFO plugin/net.cc:118 -> 2
h:1:1 [0] NCCL INFO Using network IB
",
    );
    assert!(plugin.failure.is_none());
    assert_eq!(
        plugin.plugin_fallback.map(|p| (p.plugin, p.network)),
        Some(("AWS Libfabric".to_string(), "IB".to_string()))
    );
}
