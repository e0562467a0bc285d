//! NCCL debug-log parser against real logs (`nccl/` of the shared test data, read in place; the first line of
//! each names its origin).

use std::path::PathBuf;

use commwatch_diagnose::nccl_log::parse_file;
use commwatch_testdata::shared_testdata;

/// A real NCCL log, read in place from the shared test data; `None` after a loud skip (a failure under CI)
/// when it is absent.
#[track_caller]
fn data(name: &str) -> Option<PathBuf> {
    shared_testdata!(&format!("nccl/{name}"))
}

#[test]
fn socket_fallback_log() {
    let Some(path) = data("gke-a3-socket-fallback-rank0.txt") else {
        return;
    };
    let log = parse_file(&path).unwrap();
    assert_eq!(log.version.as_deref(), Some("2.22.3+cuda12.6"));
    assert_eq!(log.nranks, Some(16));
    assert_eq!(log.nnodes, Some(2));
    assert_eq!(log.local_ranks, Some(8));
    assert_eq!(log.ranks_seen, vec![0]);
    assert_eq!(log.network.as_deref(), Some("Socket"));
    assert!(log.ib_no_device);
    assert_eq!(log.bootstrap_interface.as_deref(), Some("eth0"));
    let socket: Vec<_> = log
        .interfaces
        .iter()
        .filter(|i| i.transport == "Socket")
        .collect();
    assert_eq!(socket.len(), 1);
    assert_eq!(socket[0].name, "eth0");
    assert_eq!(socket[0].detail.as_deref(), Some("10.128.0.52<0>"));
    assert_eq!(log.gdr, Some(false));
    assert_eq!(log.gdr_disabled_hcas, vec!["eth0".to_string()]);
    // 16 intra-node connections over CUMEM, then the receive side of the inter-node ring over sockets (the
    // excerpt ends at channel 06).
    assert_eq!(log.transports.get("P2P/CUMEM"), Some(&16));
    assert_eq!(log.transports.get("NET/Socket"), Some(&7));
    assert_eq!(log.transports.len(), 2);
    assert_eq!(log.net_connections_gdr, 0);
    assert_eq!(log.channels, Some(16));
    assert_eq!(log.coll_channels, Some(16));
    assert_eq!(log.nvls_channels, Some(16));
    assert_eq!(log.rings.len(), 16);
    assert_eq!(
        log.rings[0],
        vec![0, 7, 6, 5, 4, 3, 2, 1, 8, 15, 14, 13, 12, 11, 10, 9]
    );
    assert_eq!(log.trees, 16);
    assert!(log.nvls);
    assert_eq!(
        log.settings.get("NCCL_SOCKET_IFNAME").map(String::as_str),
        Some("eth0")
    );
    assert_eq!(log.warning_count, 0);
    assert!(log.net_plugin.as_deref().unwrap().contains("IBext_v8"));
}

#[test]
fn efa_channels_with_mpirun_tags() {
    let Some(path) = data("p5-efa-debug-net-channels.txt") else {
        return;
    };
    let log = parse_file(&path).unwrap();
    assert_eq!(log.transports.len(), 1);
    let n = log.transports.get("NET/AWS Libfabric").copied().unwrap();
    assert_eq!(n, log.net_connections_gdr);
    assert!(n > 0);
    assert_eq!(log.gdr, Some(true));
    assert_eq!(
        log.hosts,
        vec![
            "test-nccl-worker-1".to_string(),
            "test-nccl-worker-0".to_string()
        ]
    );
}

#[test]
fn efa_rings_and_topology() {
    let Some(path) = data("p5-efa-debug-rings.txt") else {
        return;
    };
    let log = parse_file(&path).unwrap();
    assert_eq!(log.nranks, Some(16));
    assert_eq!(log.nnodes, Some(2));
    assert_eq!(log.local_ranks, Some(8));
    assert_eq!(log.ranks_seen, vec![0, 3]);
    assert_eq!(log.channels, Some(16));
    // Only rank 0's rings are kept; the excerpt has five of them.
    assert_eq!(log.rings.len(), 5);
    assert_eq!(
        log.rings[1],
        vec![0, 8, 15, 14, 13, 12, 11, 10, 9, 1, 2, 3, 4, 5, 6, 7]
    );
}

#[test]
fn nccl_tests_output_with_log_lines() {
    let Some(path) = data("p5-efa-allreduce-mpirun-tagged.txt") else {
        return;
    };
    let log = parse_file(&path).unwrap();
    assert_eq!(log.transports.get("P2P/CUMEM"), Some(&5));
    assert_eq!(log.hosts.len(), 2);
}
