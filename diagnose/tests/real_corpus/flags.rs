//! The flags an expert raises on a file (`expert_flags` in `expected.json`), each with the check that the
//! report raises or shows it. An empty list is a fact too: the report raises no warning or critical finding.
//! A flag about something the file does not show (a maintainer's diagnosis) is not checkable.

use serde_json::Value;

use super::facts::table_rows;
use super::{array, finding_text, Case, Outcome};

type Check = fn(&Case) -> Outcome;

/// (corpus file, start of the flag's text, check).
const CHECKS: &[(&str, &str, Check)] = &[
    (
        "nccltests-alltoall-16rank-rtx6000d-banner-mpi-noise.txt",
        "bandwidth collapse",
        collapse_16m_to_1g,
    ),
    (
        "nccltests-alltoall-16rank-rtx6000d-banner-mpi-noise.txt",
        "OpenMPI help lines",
        read_without_damage,
    ),
    (
        "nccltests-dgx-spark-two-runs-in-one-notes-file.txt",
        "two runs",
        two_runs_disagree,
    ),
    (
        "nccltests-efa-g7e-2node-nccl2.29-debug-interleaved.txt",
        "GDR disabled",
        gdr_disabled_by_ofi,
    ),
    (
        "nccltests-efa-g7e-2node-nccl2.29-debug-interleaved.txt",
        "peak 12.37 GB/s",
        one_efa_nic_met,
    ),
    (
        "nccltests-h100-1024rank-crash-midway-oom.txt",
        "run crashed midway",
        crashed_after_16g,
    ),
    (
        "nccltests-h100-1024rank-crash-midway-oom.txt",
        "maintainer:",
        |_| Outcome::NotInFile("the maintainer's diagnosis later in the thread"),
    ),
    (
        "nccltests-rtx3090-2node-inc-wrong-nonzero-oob-failed.txt",
        "#wrong nonzero",
        wrong_at_every_size,
    ),
    (
        "nccltests-allreduce-2x5090-crash-before-first-row.txt",
        "run crashed before",
        crashed_before_first_row,
    ),
    (
        "nccltests-allreduce-2x5090-crash-before-first-row.txt",
        "GeForce RTX 5090: no P2P",
        no_p2p_shm,
    ),
    (
        "nccltests-allreduce-2x5090-crash-before-first-row.txt",
        "'ncclMaxSharedMem",
        crash_names_cuda_failure,
    ),
    (
        "nccllog-aws-socket-ens3-no-ib-nccl2.4.txt",
        "inter-node traffic over TCP",
        sockets_on_ens3,
    ),
    (
        "nccllog-azure-nc24rsv3-mlx4-ib-nccl2.5.txt",
        "validation disabled",
        validation_off,
    ),
    (
        "nccllog-efa-horovod-mpi-prefix-ofi-av-error.txt",
        "NCCL WARN NET/OFI Couldn't open AV",
        |c| warning_quoted(c, "Couldn't open AV"),
    ),
    (
        "nccllog-efa-horovod-mpi-prefix-ofi-av-error.txt",
        "'[1,N]<stdout>:' prefixes",
        hosts_without_tags,
    ),
    (
        "nccllog-gcp-fastsocket-plugin.txt",
        "many connection retries",
        fastsocket_retries,
    ),
    (
        "nccllog-ib-disabled-ipoib-socket-fallback.txt",
        "InfiniBand explicitly disabled",
        ib_disabled_over_ipoib,
    ),
    (
        "nccllog-ib-disabled-ipoib-socket-fallback.txt",
        "OpenMPI openib BTL errors",
        |_| Outcome::NotInFile("OpenMPI's own transport (its help messages), not NCCL's"),
    ),
    (
        "nccllog-ib-hpcx-rdma-plugin-16rank-gdrdma-window.txt",
        "intra-node via P2P/CUMEM",
        cumem_and_spaced_plugin,
    ),
    (
        "nccllog-ibext-sharp-pdsh-prefix-mlx5_9.txt",
        "lines prefixed by 'host: '",
        pdsh_host,
    ),
    ("nccllog-mixed-socket-ib-virbr0-32rank.txt", "virbr0", |c| {
        virtual_interface(c, "virbr0")
    }),
    (
        "nccllog-mixed-socket-ib-virbr0-32rank.txt",
        "interfaces printed without IP addresses",
        |c| has_interface(c, "enp41s0f1"),
    ),
    (
        "nccllog-roce-br0-nccl2.5-no-host-prefix-no-gdr.txt",
        "GPU Direct RDMA not used",
        gdr_not_used_on_ib,
    ),
    (
        "nccllog-roce-br0-nccl2.5-no-host-prefix-no-gdr.txt",
        "NCCL_IB_GID_INDEX=3",
        |c| setting(c, "NCCL_IB_GID_INDEX", "3"),
    ),
    (
        "nccllog-roce-br0-nccl2.5-no-host-prefix-no-gdr.txt",
        "lines have no host:pid:tid prefix",
        old_ring_lines,
    ),
    (
        "nccllog-roce-dgxh100-2node-nccl2.19-excerpt.txt",
        "(issue: ibv_modify_qp",
        |c| nothing_serious(c, "the excerpt shows no problem"),
    ),
    (
        "nccllog-roce-gid3-2rank-init-complete.txt",
        "NCCL_IB_GID_INDEX=3",
        |c| setting(c, "NCCL_IB_GID_INDEX", "3"),
    ),
    (
        "nccllog-roce-gid3-2rank-init-complete.txt",
        "'comm 0x... rank 0 nranks 2",
        |c| log_value(c, "nranks", &Value::from(2)),
    ),
    (
        "nccllog-socket-em1-tunl0-t4-nccl2.8.txt",
        "single node run",
        single_node_no_network,
    ),
    ("nccllog-socket-em1-tunl0-t4-nccl2.8.txt", "tunl0", |c| {
        virtual_interface(c, "tunl0")
    }),
    (
        "nccllog-socket-em1-tunl0-t4-nccl2.8.txt",
        "libibverbs missing",
        |c| warning_quoted(c, "libibverbs"),
    ),
    (
        "nccllog-socket-fallback-16rank-channels-only.txt",
        "inter-node traffic over TCP sockets",
        socket_connections_flagged,
    ),
    (
        "nccllog-socket-lo-ib-disabled-topo-dump.txt",
        "NCCL_SOCKET_IFNAME=lo with IB and IBext disabled",
        loopback_with_ib_disabled,
    ),
    (
        "nccllog-socket-lo-ib-disabled-topo-dump.txt",
        "GPU Direct RDMA disabled for HCA 0 'lo'",
        gdr_disabled_for_lo,
    ),
    (
        "nccllog-socket-lo-single-gpu-hang-nccl2.21.txt",
        "test hangs even with 1 GPU",
        |c| warning_quoted(c, "Connection closed by remote peer"),
    ),
    (
        "nccllog-socket-lo-single-gpu-hang-nccl2.21.txt",
        "NCCL_SOCKET_IFNAME=lo set by the user",
        loopback_shown_single_node,
    ),
    // The second corpus.
    (
        "nccllog-roce-8hca-ofi-plugin-fallback-to-ib-gdrdma-nccl2.27-rank8.txt",
        "NCCL_NET_PLUGIN=libnccl-net.so loads aws-ofi-nccl",
        plugin_fell_back_to_ib,
    ),
    (
        "rccltests-mi100-2gpu-p2p-disabled-single-node-allreduce.txt",
        "single node, 2 MI100",
        single_node_test_no_network,
    ),
    (
        "rccltests-mi100-2gpu-p2p-disabled-single-node-allreduce.txt",
        "~11 GB/s is PCIe-class",
        |_| Outcome::NotInFile("NCCL_P2P_DISABLE=1 is in the thread, not in the file"),
    ),
    (
        "nccllog-rccl2.18-mi100-single-node-socket-hang-after-init.txt",
        "log stops after channel/tree setup",
        stops_before_init_complete,
    ),
    (
        "nccllog-rccl2.18-mi100-single-node-socket-hang-after-init.txt",
        "NCCL WARN Missing 'iommu=pt'",
        |c| warning_quoted(c, "iommu=pt"),
    ),
    (
        "nccltests-dgx-h100-a100-bond0-100gbe-wrong-nonzero-excerpt.txt",
        "#wrong 237858",
        wrong_without_a_cause,
    ),
    (
        "nccllog-gtx1050ti-gtx950-single-node-socket-virbr0-p2p-disabled-nccl2.16.txt",
        "NCCL_P2P_DISABLE=1 on the command line",
        p2p_disabled,
    ),
    (
        "nccllog-gtx1050ti-gtx950-single-node-socket-virbr0-p2p-disabled-nccl2.16.txt",
        "WARN Could not find a path for pattern 4",
        |c| warning_quoted(c, "Could not find a path for pattern 4"),
    ),
    (
        "nccllog-horovod-old-nccl-lo-loopback-picked-multinode-connect-refused.txt",
        "NCCL uses loopback lo",
        loopback_among_socket_interfaces,
    ),
    (
        "nccllog-horovod-old-nccl-lo-loopback-picked-multinode-connect-refused.txt",
        "bootstrap 'Call to connect timeout : Connection refused'",
        |c| failure_quoted(c, "Connection refused"),
    ),
    (
        "nccllog-nccl2.2.13-2rank-enp3s0-connect-timed-out-no-nccl-prefix.txt",
        "bootstrap 'Call to connect failed : Connection timed out'",
        |c| failure_quoted(c, "Connection timed out"),
    ),
    (
        "nccllog-nccl2.4-16rank-docker-container-ring-via-net-socket.txt",
        "inter-node traffic over TCP sockets",
        socket_connections_flagged,
    ),
    (
        "nccllog-nccl2.3.7-docker-bridge-eth0-172.17-socket-4rank.txt",
        "container has no libibverbs and sits on the docker bridge",
        docker_bridge_noted,
    ),
    (
        "nccltests-reducescatter-2rank-same-gpu-rtx5090-gbps-suffix-v2.18.txt",
        "both ranks on the same GPU",
        ranks_share_a_gpu,
    ),
    (
        "nccltests-allreduce-rank-prefix-interleaved-midline-collapse-excerpt.txt",
        "bandwidth collapse above 32 MiB",
        collapse_32m,
    ),
    (
        "kineto-a100-2rank-allreduce-ring-ll-nccl2.17-rank0.json",
        "RING LL protocol used for multi-MB allreduce",
        ll_protocol_flagged,
    ),
    (
        "kineto-128rank-sampled-sendrecv-rank0.json",
        "all-to-all SendRecv kernels are ~65%",
        |c| nccl_kernel_share(c, 0.6, 0.7),
    ),
    (
        "nsys-stats-kern-sum-vllm-dsr1-b200-allgather-ring-ll-table-format.txt",
        "communication is <1% of GPU kernel time",
        not_comm_bound,
    ),
    (
        "nccllog-efa-p4-2node-nccl2.7.8-libfabric-no-gdrdma-16rank.txt",
        "GPUDirect RDMA not used on p4",
        gdr_not_used_on_ofi,
    ),
    (
        "nccllog-efa-instance-ofi-tcp-provider-nccl2.4.6-2node.txt",
        "OFI selected the tcp;ofi_rxm provider",
        tcp_provider_on_ofi,
    ),
];

/// Every flag of the file (its own and its `also_nccl_log`'s), or the one fact that there are none.
pub fn check(case: &Case) -> Vec<(String, Outcome)> {
    let mut out = Vec::new();
    for (prefix, list) in [
        ("expert_flags", &case.expected["expert_flags"]),
        (
            "also_nccl_log.expert_flags",
            &case.expected["also_nccl_log"]["expert_flags"],
        ),
    ] {
        let Some(flags) = list.as_array() else {
            continue;
        };
        if flags.is_empty() {
            out.push((
                format!("{prefix}: none"),
                nothing_serious(case, "an expert flags nothing"),
            ));
        }
        for flag in flags.iter().filter_map(|f| f.as_str()) {
            let check = CHECKS
                .iter()
                .find(|(file, start, _)| *file == case.name && flag.starts_with(start))
                .map(|(_, _, c)| c);
            let outcome = match check {
                Some(c) => c(case),
                None => Outcome::Disagree("no check written for this flag".to_string()),
            };
            out.push((format!("{prefix}: {flag}"), outcome));
        }
    }
    out
}

fn log(case: &Case) -> Value {
    case.logs().first().copied().cloned().unwrap_or(Value::Null)
}

fn nothing_serious(case: &Case, why: &str) -> Outcome {
    let serious: Vec<String> = case
        .serious_findings()
        .iter()
        .map(|f| f["summary"].to_string())
        .collect();
    Outcome::check(serious.is_empty(), || format!("{why}, yet {serious:?}"))
}

fn log_value(case: &Case, key: &str, want: &Value) -> Outcome {
    let log = log(case);
    Outcome::check(log[key] == *want, || format!("{key} {}", log[key]))
}

fn setting(case: &Case, key: &str, value: &str) -> Outcome {
    let log = log(case);
    Outcome::check(log["settings"][key] == value, || {
        format!("settings {}", log["settings"])
    })
}

fn has_interface(case: &Case, name: &str) -> Outcome {
    let log = log(case);
    Outcome::check(
        array(&log["interfaces"]).iter().any(|i| i["name"] == name),
        || format!("interfaces {}", log["interfaces"]),
    )
}

/// A finding whose text holds every one of `words`.
fn finding_with(case: &Case, kind: &str, words: &[&str]) -> Option<Value> {
    case.findings_of(kind)
        .into_iter()
        .find(|f| {
            let text = finding_text(f);
            words.iter().all(|w| text.contains(w))
        })
        .cloned()
}

fn warning_quoted(case: &Case, words: &str) -> Outcome {
    Outcome::check(
        finding_with(case, "nccl_misconfiguration", &[words]).is_some(),
        || format!("no finding quotes {words:?}: {:?}", case.findings()),
    )
}

fn virtual_interface(case: &Case, name: &str) -> Outcome {
    let found = case
        .findings_of("nccl_misconfiguration")
        .into_iter()
        .any(|f| f["subject"]["interface"] == name);
    Outcome::check(found, || {
        format!("no finding on {name}: {:?}", case.findings())
    })
}

fn collapse_16m_to_1g(case: &Case) -> Outcome {
    let Some(f) = case
        .findings_of("bandwidth_collapse")
        .first()
        .copied()
        .cloned()
    else {
        return Outcome::Disagree("no bandwidth_collapse finding".to_string());
    };
    let e = &f["evidence"];
    Outcome::check(
        e["before_bytes"] == 16u64 << 20
            && e["before_busbw_gbps"] == 34.26
            && e["lowest_busbw_gbps"] == 0.9
            && e["collapsed_to_bytes"] == 1u64 << 30
            && e["in_place_collapsed_from_bytes"] == 16u64 << 20,
        || format!("evidence {e}"),
    )
}

fn read_without_damage(case: &Case) -> Outcome {
    let input = &case.report["inputs"][0];
    let t = case
        .tests()
        .first()
        .copied()
        .cloned()
        .unwrap_or(Value::Null);
    Outcome::check(
        input["status"] == "ok" && input["skipped"] == 0 && table_rows(&t) == 24,
        || format!("input {input}, rows {}", table_rows(&t)),
    )
}

fn two_runs_disagree(case: &Case) -> Outcome {
    let Some(f) = case.findings_of("mixed_inputs").first().copied().cloned() else {
        return Outcome::Disagree("no mixed_inputs finding".to_string());
    };
    let ratio = f["evidence"]["slowest_to_fastest_ratio"]
        .as_f64()
        .unwrap_or(0.0);
    let runs = f["evidence"]["runs"].as_u64();
    let conclusion = case.report["conclusion"]["verdict"].as_str().unwrap_or("");
    Outcome::check(
        runs == Some(2) && (0.11..0.14).contains(&ratio) && conclusion == "mixed_inputs",
        || format!("finding {f}, verdict {conclusion}"),
    )
}

fn gdr_disabled_by_ofi(case: &Case) -> Outcome {
    let log = log(case);
    let finding = finding_with(case, "nccl_misconfiguration", &["disabling GDR"]);
    Outcome::check(
        finding.is_some() && log["settings"]["NCCL_PROTO"] == "simple" && log["gdr"] == false,
        || format!("finding {finding:?}, settings {}", log["settings"]),
    )
}

fn one_efa_nic_met(case: &Case) -> Outcome {
    // One 100 Gb/s EFA NIC: 12.5 GB/s, the rate an operator would give; the NIC count comes from the log.
    let v = case.report_with(Some(12.5));
    let c = &v["nccl_tests"][0]["fabric_comparison"];
    let share = c["share_of_ceiling"].as_f64().unwrap_or(0.0);
    Outcome::check(
        c["nics_per_node"] == 1
            && c["nics_source"] == "log"
            && (0.97..=1.0).contains(&share)
            && c["verdict"] == "meets",
        || format!("comparison {c}"),
    )
}

fn crashed_after_16g(case: &Case) -> Outcome {
    let t = case
        .tests()
        .first()
        .copied()
        .cloned()
        .unwrap_or(Value::Null);
    Outcome::check(
        !case.findings_of("test_failed").is_empty()
            && t["complete"] == false
            && t["failure"]["after_bytes"] == 16u64 << 30
            && t["avg_busbw_gbps"].is_null()
            && !case.report["conclusion"]["evidence"]
                .to_string()
                .contains("peak bus bandwidth"),
        || format!("test {}", t["failure"]),
    )
}

fn wrong_at_every_size(case: &Case) -> Outcome {
    let t = case
        .tests()
        .first()
        .copied()
        .cloned()
        .unwrap_or(Value::Null);
    let every = array(&t["rows"])
        .iter()
        .all(|r| r["wrong"].as_f64().is_some_and(|w| w > 0.0));
    let finding = case.findings_of("wrong_results").first().copied().cloned();
    Outcome::check(
        every
            && finding
                .as_ref()
                .is_some_and(|f| f["evidence"]["out_of_bounds"] == 108),
        || format!("every row wrong {every}, finding {finding:?}"),
    )
}

fn crashed_before_first_row(case: &Case) -> Outcome {
    let t = case
        .tests()
        .first()
        .copied()
        .cloned()
        .unwrap_or(Value::Null);
    Outcome::check(
        !case.findings_of("test_failed").is_empty()
            && table_rows(&t) == 0
            && t["failure"]["after_bytes"].is_null()
            && case.report["inputs"][0]["status"] != "error",
        || format!("test {t}"),
    )
}

fn no_p2p_shm(case: &Case) -> Outcome {
    let log = log(case);
    let transports = log["transports"].as_object().cloned().unwrap_or_default();
    Outcome::check(
        log["intra_node_p2p"] == false
            && transports.contains_key("SHM")
            && !transports.keys().any(|k| k.starts_with("P2P")),
        || format!("p2p {}, transports {:?}", log["intra_node_p2p"], transports),
    )
}

fn crash_names_cuda_failure(case: &Case) -> Outcome {
    let t = case
        .tests()
        .first()
        .copied()
        .cloned()
        .unwrap_or(Value::Null);
    let warned = array(&t["failure"]["nccl_warnings"]).iter().any(|w| {
        w.as_str()
            .is_some_and(|w| w.contains("Cuda failure 1 'invalid argument'"))
    });
    Outcome::check(warned && log(case)["version"] == "2.25.1+cuda12.8", || {
        format!("failure {}", t["failure"])
    })
}

fn sockets_on_ens3(case: &Case) -> Outcome {
    let fallback = finding_with(case, "nccl_misconfiguration", &["ens3", "No device found"]);
    let management = case.findings_of("management_network_traffic");
    Outcome::check(fallback.is_some() && management.is_empty(), || {
        format!("findings {:?}", case.findings())
    })
}

fn validation_off(case: &Case) -> Outcome {
    Outcome::check(!case.findings_of("results_unvalidated").is_empty(), || {
        format!("findings {:?}", case.findings())
    })
}

fn hosts_without_tags(case: &Case) -> Outcome {
    let log = log(case);
    let hosts = array(&log["hosts"]);
    Outcome::check(
        !hosts.is_empty()
            && hosts
                .iter()
                .all(|h| h.as_str().is_some_and(|h| h.starts_with("ip-172-32-"))),
        || format!("hosts {}", log["hosts"]),
    )
}

fn fastsocket_retries(case: &Case) -> Outcome {
    // The excerpt shows up to 60 retries (106 is elsewhere in the thread).
    let log = log(case);
    Outcome::check(
        log["network"] == "FastSocket" && log["connect_retries_max"] == 60,
        || {
            format!(
                "network {}, retries {}",
                log["network"], log["connect_retries_max"]
            )
        },
    )
}

fn ib_disabled_over_ipoib(case: &Case) -> Outcome {
    let found = case
        .findings_of("nccl_misconfiguration")
        .into_iter()
        .any(|f| {
            f["subject"]["setting"] == "NCCL_IB_DISABLE"
                && f["severity"] == "critical"
                && finding_text(f).contains("IPoIB")
        });
    let management = case.findings_of("management_network_traffic");
    Outcome::check(found && management.is_empty(), || {
        format!("findings {:?}", case.findings())
    })
}

fn cumem_and_spaced_plugin(case: &Case) -> Outcome {
    let log = log(case);
    let t = &log["transports"];
    Outcome::check(
        t.get("P2P/CUMEM").is_some() && t.get("NET/NCCL RDMA Plugin v8").is_some(),
        || format!("transports {t}"),
    )
}

fn pdsh_host(case: &Case) -> Outcome {
    let log = log(case);
    Outcome::check(
        log["hosts"] == serde_json::json!(["rdma-gpu-train-worker-0"]),
        || format!("hosts {}", log["hosts"]),
    )
}

fn gdr_not_used_on_ib(case: &Case) -> Outcome {
    let log = log(case);
    let finding = finding_with(case, "nccl_misconfiguration", &["GDRDMA"]);
    Outcome::check(
        log["gdr"] == false
            && log["net_connections_gdr"] == 0
            && log["transports"]["NET/IB"].as_u64().is_some_and(|n| n > 0)
            && finding.is_some(),
        || format!("gdr {}, findings {:?}", log["gdr"], case.findings()),
    )
}

fn old_ring_lines(case: &Case) -> Outcome {
    let log = log(case);
    Outcome::check(
        log["transports"]["NET/IB"] == 2
            && log["transports"]["P2P/IPC"] == 2
            && log["transports"]["SHM"] == 1,
        || format!("transports {}", log["transports"]),
    )
}

fn single_node_no_network(case: &Case) -> Outcome {
    let log = log(case);
    let network_findings: Vec<&Value> = case
        .serious_findings()
        .into_iter()
        .filter(|f| {
            f["subject"].get("interface").is_some() || f["subject"].get("network").is_some()
        })
        .collect();
    Outcome::check(
        log["nnodes"] == 1 && log["network_carries_data"] == false && network_findings.is_empty(),
        || format!("nnodes {}, findings {network_findings:?}", log["nnodes"]),
    )
}

fn socket_connections_flagged(case: &Case) -> Outcome {
    let found = case
        .findings_of("nccl_misconfiguration")
        .into_iter()
        .any(|f| {
            f["evidence"]["socket_connections"]
                .as_u64()
                .is_some_and(|n| n > 0)
        });
    Outcome::check(found, || format!("findings {:?}", case.findings()))
}

fn loopback_with_ib_disabled(case: &Case) -> Outcome {
    let lo = case
        .findings_of("nccl_misconfiguration")
        .into_iter()
        .any(|f| {
            f["subject"]["interface"] == "lo" && finding_text(f).contains("NCCL_SOCKET_IFNAME")
        });
    let ib = case
        .findings_of("nccl_misconfiguration")
        .into_iter()
        .any(|f| f["subject"]["setting"] == "NCCL_IB_DISABLE");
    Outcome::check(lo && ib, || format!("findings {:?}", case.findings()))
}

fn gdr_disabled_for_lo(case: &Case) -> Outcome {
    let log = log(case);
    Outcome::check(
        log["gdr"] == false && log["gdr_disabled_hcas"] == serde_json::json!(["lo"]),
        || format!("gdr {}, hcas {}", log["gdr"], log["gdr_disabled_hcas"]),
    )
}

fn loopback_shown_single_node(case: &Case) -> Outcome {
    let log = log(case);
    let socket_lo = array(&log["interfaces"])
        .iter()
        .any(|i| i["transport"] == "Socket" && i["name"] == "lo");
    Outcome::check(
        socket_lo && log["nnodes"] == 1 && log["network_carries_data"] == false,
        || format!("interfaces {}, nnodes {}", log["interfaces"], log["nnodes"]),
    )
}

fn plugin_fell_back_to_ib(case: &Case) -> Outcome {
    let log = log(case);
    let finding = case.findings().into_iter().find(|f| {
        let text = finding_text(f);
        f["kind"] == "net_plugin_fallback" && text.contains("AWS Libfabric") && text.contains("IB")
    });
    Outcome::check(finding.is_some() && log["network"] == "IB", || {
        format!("network {}, findings {:?}", log["network"], case.findings())
    })
}

fn single_node_test_no_network(case: &Case) -> Outcome {
    let t = case
        .tests()
        .first()
        .copied()
        .cloned()
        .unwrap_or(Value::Null);
    let network: Vec<&Value> = case
        .serious_findings()
        .into_iter()
        .filter(|f| f["subject"].get("interface").is_some() || f["kind"] == "link_underutilized")
        .collect();
    Outcome::check(t["nnodes"] == 1 && network.is_empty(), || {
        format!("nnodes {}, findings {network:?}", t["nnodes"])
    })
}

fn stops_before_init_complete(case: &Case) -> Outcome {
    let log = log(case);
    let finding = case.findings_of("results_incomplete").into_iter().any(|f| {
        array(&f["cites"]).iter().any(|c| {
            c["text"]
                .as_str()
                .is_some_and(|t| t.contains("P2P Chunksize"))
        })
    });
    Outcome::check(log["init_complete"] == false && finding, || {
        format!(
            "init_complete {}, findings {:?}",
            log["init_complete"],
            case.findings()
        )
    })
}

fn wrong_without_a_cause(case: &Case) -> Outcome {
    let f = case.findings_of("wrong_results").first().copied().cloned();
    let named_cause = !case.findings_of("link_errors").is_empty();
    Outcome::check(
        f.as_ref().is_some_and(|f| {
            f["severity"] == "critical" && f["evidence"]["wrong_elements"] == 475896.0
        }) && !named_cause,
        || format!("findings {:?}", case.findings()),
    )
}

fn p2p_disabled(case: &Case) -> Outcome {
    let found = case.findings().into_iter().any(|f| {
        f["subject"]["setting"] == "NCCL_P2P_DISABLE"
            && array(&f["cites"]).iter().any(|c| {
                c["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("NCCL_P2P_DISABLE=1"))
            })
    });
    Outcome::check(found, || format!("findings {:?}", case.findings()))
}

fn loopback_among_socket_interfaces(case: &Case) -> Outcome {
    let found = case
        .findings_of("nccl_misconfiguration")
        .into_iter()
        .any(|f| {
            f["subject"]["interface"] == "lo"
                && format!("{} {}", finding_text(f), f["action"]).contains("NCCL_SOCKET_IFNAME")
        });
    Outcome::check(
        found && has_interface(case, "eth1") == Outcome::Agree,
        || format!("findings {:?}", case.findings()),
    )
}

fn failure_quoted(case: &Case, words: &str) -> Outcome {
    Outcome::check(
        finding_with(case, "test_failed", &[words]).is_some(),
        || format!("no failure quotes {words:?}: {:?}", case.findings()),
    )
}

fn docker_bridge_noted(case: &Case) -> Outcome {
    let found = case
        .findings()
        .into_iter()
        .any(|f| f["subject"]["interface"] == "eth0" && finding_text(f).contains("172.17."));
    Outcome::check(found, || format!("findings {:?}", case.findings()))
}

fn ranks_share_a_gpu(case: &Case) -> Outcome {
    let f = case
        .findings_of("ranks_share_gpu")
        .first()
        .copied()
        .cloned();
    Outcome::check(
        f.as_ref().is_some_and(|f| f["evidence"]["ranks"] == 2),
        || format!("findings {:?}", case.findings()),
    )
}

fn collapse_32m(case: &Case) -> Outcome {
    let Some(f) = case
        .findings_of("bandwidth_collapse")
        .first()
        .copied()
        .cloned()
    else {
        return Outcome::Disagree(format!(
            "no bandwidth_collapse finding: {:?}",
            case.findings()
        ));
    };
    let e = &f["evidence"];
    Outcome::check(
        e["before_bytes"] == 32u64 << 20 && e["before_busbw_gbps"] == 29.5,
        || format!("evidence {e}"),
    )
}

fn ll_protocol_flagged(case: &Case) -> Outcome {
    let found = case
        .findings()
        .into_iter()
        .any(|f| f["kind"] == "low_bandwidth_protocol" && finding_text(f).contains("AllReduce"));
    Outcome::check(found, || format!("findings {:?}", case.findings()))
}

fn nccl_kernel_share(case: &Case, low: f64, high: f64) -> Outcome {
    let t = array(&case.report["kernel_summaries"])
        .first()
        .copied()
        .cloned()
        .unwrap_or(Value::Null);
    let share = match (
        t["nccl_kernel_time_us"].as_f64(),
        t["kernel_time_us"].as_f64(),
    ) {
        (Some(n), Some(k)) if k > 0.0 => n / k,
        _ => -1.0,
    };
    Outcome::check((low..=high).contains(&share), || format!("share {share}"))
}

fn not_comm_bound(case: &Case) -> Outcome {
    match nccl_kernel_share(case, 0.0, 0.01) {
        Outcome::Agree => nothing_serious(case, "communication is under 1 % of kernel time"),
        other => other,
    }
}

fn gdr_not_used_on_ofi(case: &Case) -> Outcome {
    let log = log(case);
    let finding = finding_with(case, "nccl_misconfiguration", &["GDRDMA"]);
    Outcome::check(log["gdr"] == false && finding.is_some(), || {
        format!("gdr {}, findings {:?}", log["gdr"], case.findings())
    })
}

fn tcp_provider_on_ofi(case: &Case) -> Outcome {
    let found = finding_with(case, "nccl_misconfiguration", &["tcp;ofi_rxm"]);
    Outcome::check(found.is_some(), || {
        format!("findings {:?}", case.findings())
    })
}
