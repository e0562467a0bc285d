//! Every metric name the collector exports, listed in one place ([`ALL`]: dashboards and alert rules are checked
//! against it). Prometheus conventions: `commwatch_` prefix, base units (bytes, seconds), `_total` for counters.
//! The names of the collector's own health metrics are defined where they are counted ([`crate::telemetry`])
//! and re-exported here.
//!
//! Link metrics carry `node`, `class` (`infiniband`|`roce`|`ethernet`|`nvlink`|`unknown`), `device`, `port`,
//! `role` (`fabric`|`management`|`unknown`), plus `gpu` and `link` on NVLink links. With the default NVLink detail
//! (`nvlink_detail = "gpu"`) an NVLink series is a GPU's links summed: `node`, `class`, `device`, `role`, `gpu`
//! ([`crate::export::exposition::apply_nvlink_detail`]). Node metrics carry `node`
//! (and the agent's own labels, e.g. `cpu` with `cpu_detail = "core"`). The error, congestion and other link
//! counter families carry `counter` (the agent's counter name) only with `counter_detail = "name"`; by default
//! they are a link's counters of the family summed. The training job is the label `training_job`: `job`
//! belongs to the scrape job in Prometheus and is never exported.

pub use crate::telemetry::names::*;

/// Raw transmit byte counter of a link as the agent read it (counter, bytes).
pub const LINK_TRANSMIT_BYTES_TOTAL: &str = "commwatch_link_transmit_bytes_total";
/// Raw receive byte counter of a link (counter, bytes).
pub const LINK_RECEIVE_BYTES_TOTAL: &str = "commwatch_link_receive_bytes_total";
/// Transmit rate over the last second of samples (gauge, bytes/s); absent while unknown.
pub const LINK_TRANSMIT_BYTES_PER_SECOND: &str = "commwatch_link_transmit_bytes_per_second";
/// Receive rate over the last second of samples (gauge, bytes/s); absent while unknown.
pub const LINK_RECEIVE_BYTES_PER_SECOND: &str = "commwatch_link_receive_bytes_per_second";
/// Capacity per direction (gauge, bytes/s); absent when unknown.
pub const LINK_CAPACITY_BYTES_PER_SECOND: &str = "commwatch_link_capacity_bytes_per_second";
/// 1 when the link's state is up (`ACTIVE`, `up`, `LinkUp`), else 0; the state text is the `state` label.
pub const LINK_UP: &str = "commwatch_link_up";
/// Transmitted / received packets (counter).
pub const LINK_TRANSMIT_PACKETS_TOTAL: &str = "commwatch_link_transmit_packets_total";
pub const LINK_RECEIVE_PACKETS_TOTAL: &str = "commwatch_link_receive_packets_total";
/// Error counters of a link, one series per agent counter name (`counter` label: `symbol_errors`,
/// `link_downed`, `port_rcv_errors`, `tx_errors`, `rx_dropped`, ...). Bounded by the agent's series limit.
pub const LINK_ERRORS_TOTAL: &str = "commwatch_link_errors_total";
/// Congestion counters (`counter` label: `np_cnp_sent`, `rp_cnp_handled`, `np_ecn_marked_roce_packets`,
/// `out_of_sequence`, ...).
pub const LINK_CONGESTION_TOTAL: &str = "commwatch_link_congestion_total";
/// Ticks the port had data to send but no flow-control credits (`port_xmit_wait`; counter, ticks).
pub const LINK_XMIT_WAIT_TICKS_TOTAL: &str = "commwatch_link_xmit_wait_ticks_total";
/// Any other link counter (`counter` label: the agent's metric name).
pub const LINK_EVENTS_TOTAL: &str = "commwatch_link_events_total";

/// 1 while the node's agent stream is open, 0 while the node is held but not connected.
pub const NODE_UP: &str = "commwatch_node_up";
/// Time of the last message from the node's agent (gauge, seconds since the Unix epoch).
pub const NODE_LAST_SEEN_TIMESTAMP_SECONDS: &str = "commwatch_node_last_seen_timestamp_seconds";
/// CPU utilisation, 0..1 (gauge; `cpu` label per core, absent for the total).
pub const NODE_CPU_UTILIZATION_RATIO: &str = "commwatch_node_cpu_utilization_ratio";
/// Memory used / total (gauge, bytes).
pub const NODE_MEMORY_USED_BYTES: &str = "commwatch_node_memory_used_bytes";
pub const NODE_MEMORY_TOTAL_BYTES: &str = "commwatch_node_memory_total_bytes";
/// Batches the agent dropped because its resend buffer overflowed (counter, per agent instance).
pub const NODE_AGENT_DROPPED_BATCHES_TOTAL: &str = "commwatch_node_agent_dropped_batches_total";

/// Nodes, series and samples held, and the store's own estimate of its memory (gauges).
pub const COLLECTOR_NODES: &str = "commwatch_collector_nodes";
pub const COLLECTOR_SERIES: &str = "commwatch_collector_series";
pub const COLLECTOR_STORE_SAMPLES: &str = "commwatch_collector_store_samples";
pub const COLLECTOR_STORE_BYTES: &str = "commwatch_collector_store_bytes";
/// Bytes of raw samples the store holds, part of [`COLLECTOR_STORE_BYTES`] (gauge).
pub const COLLECTOR_STORE_SAMPLE_BYTES: &str = "commwatch_collector_store_sample_bytes";
/// Duration of the node's latest training step (gauge, seconds; `node`, `training_job` — empty when inferred).
pub const STEP_DURATION_SECONDS: &str = "commwatch_step_duration_seconds";
/// Achieved bandwidth of a link — bytes ÷ active time — in its latest step with a confident figure (gauge,
/// bytes/s; link labels).
pub const STEP_LINK_BANDWIDTH_BYTES_PER_SECOND: &str =
    "commwatch_step_link_bandwidth_bytes_per_second";
/// Achieved bandwidth ÷ capacity of a link in that same step (gauge, ratio; link labels).
pub const LINK_UTILIZATION_RATIO: &str = "commwatch_link_utilization_ratio";
/// Steps found for a node since the collector started (counter; `node`, `source` = `markers`|`inferred`).
pub const STEPS_TOTAL: &str = "commwatch_steps_total";
/// Training throughput of a job from markers with samples (gauge, samples/s; `training_job`).
pub const STEP_SAMPLES_PER_SECOND: &str = "commwatch_step_samples_per_second";

/// GPU series (labels `node`, `gpu`), from the agent's `nvml` source; see [`gpu_family`]. With the default
/// `gpu_detail = "summary"` the PCIe generation and width carry their maximum as the label `max` and the
/// `_max` families and the GPU's NVLink rates (GPM) are exported only with `"full"`
/// ([`crate::export::exposition::apply_gpu_detail`]).
pub const GPU_UTILIZATION_RATIO: &str = "commwatch_gpu_utilization_ratio";
pub const GPU_MEMORY_UTILIZATION_RATIO: &str = "commwatch_gpu_memory_utilization_ratio";
pub const GPU_SM_ACTIVITY_RATIO: &str = "commwatch_gpu_sm_activity_ratio";
pub const GPU_MEMORY_USED_BYTES: &str = "commwatch_gpu_memory_used_bytes";
pub const GPU_PCIE_TRANSMIT_BYTES_PER_SECOND: &str = "commwatch_gpu_pcie_transmit_bytes_per_second";
pub const GPU_PCIE_RECEIVE_BYTES_PER_SECOND: &str = "commwatch_gpu_pcie_receive_bytes_per_second";
pub const GPU_NVLINK_TRANSMIT_BYTES_PER_SECOND: &str =
    "commwatch_gpu_nvlink_transmit_bytes_per_second";
pub const GPU_NVLINK_RECEIVE_BYTES_PER_SECOND: &str =
    "commwatch_gpu_nvlink_receive_bytes_per_second";
pub const GPU_PCIE_LINK_GENERATION: &str = "commwatch_gpu_pcie_link_generation";
pub const GPU_PCIE_LINK_GENERATION_MAX: &str = "commwatch_gpu_pcie_link_generation_max";
pub const GPU_PCIE_LINK_WIDTH: &str = "commwatch_gpu_pcie_link_width";
pub const GPU_PCIE_LINK_WIDTH_MAX: &str = "commwatch_gpu_pcie_link_width_max";
pub const GPU_PCIE_REPLAY_ERRORS_TOTAL: &str = "commwatch_gpu_pcie_replay_errors_total";
pub const GPU_POWER_WATTS: &str = "commwatch_gpu_power_watts";
pub const GPU_SM_CLOCK_HERTZ: &str = "commwatch_gpu_sm_clock_hertz";
/// NVLinks of a GPU that are up, and all its NVLinks (gauges; labels `node`, `gpu`): counted by the collector
/// from the node's NVLink links, whatever the NVLink detail (`nvlink_detail`), so that "links up per GPU"
/// reads the same with per-GPU and per-link series.
pub const GPU_NVLINKS_UP: &str = "commwatch_gpu_nvlinks_up";
pub const GPU_NVLINKS: &str = "commwatch_gpu_nvlinks";
/// NCCL settings of a job that contradict a node's hardware: 1 per `(node, job, setting)` (and `kind`).
pub const NCCL_SETTING_CONFLICT: &str = "commwatch_nccl_setting_conflict";
/// Ranks (processes) of a job the node's agent found (gauge; labels `node`, `training_job`).
pub const JOB_RANKS: &str = "commwatch_job_ranks";
/// 1 for each thing a node's agent cannot see though a GPU node must have it (gauge; labels `node`, `what`
/// (`gpu`, `fabric`), `code` (`no_nvml`, `no_fabric`)); absent when it sees what it should.
pub const NODE_BLIND: &str = "commwatch_node_blind";

/// 1 while a finding is active, absent once cleared (gauge; labels `kind`, `severity`, `node`, and the
/// subject's `device`, `port`, `gpu`, `link`, `training_job` where set).
pub const FINDING_ACTIVE: &str = "commwatch_finding_active";
/// Findings raised since the collector started (counter; label `kind`, every kind present).
pub const FINDINGS_RAISED_TOTAL: &str = "commwatch_findings_raised_total";
/// Scaling efficiency of a job, 0..1 (gauge; label `training_job`; the method is in `/api/v1/jobs`).
pub const SCALING_EFFICIENCY_RATIO: &str = "commwatch_scaling_efficiency_ratio";
/// Seconds from the end of the data a job's findings were last evaluated on to the scrape (gauge; label
/// `training_job`, `cluster` for the nodes of no job).
pub const COLLECTOR_EVALUATION_AGE_SECONDS: &str = "commwatch_collector_evaluation_age_seconds";
/// Seconds from the newest data the step engine cut steps from (its last completed pass's start) to the
/// scrape (gauge, no labels; absent where the engine is off): about the pass interval while it keeps up.
pub const COLLECTOR_STEPS_AGE_SECONDS: &str = "commwatch_collector_steps_age_seconds";

/// Every exported name (for checks against dashboards and alert rules).
pub const ALL: &[&str] = &[
    FINDING_ACTIVE,
    FINDINGS_RAISED_TOTAL,
    SCALING_EFFICIENCY_RATIO,
    COLLECTOR_EVALUATION_AGE_SECONDS,
    COLLECTOR_STEPS_AGE_SECONDS,
    LINK_TRANSMIT_BYTES_TOTAL,
    LINK_RECEIVE_BYTES_TOTAL,
    LINK_TRANSMIT_BYTES_PER_SECOND,
    LINK_RECEIVE_BYTES_PER_SECOND,
    LINK_CAPACITY_BYTES_PER_SECOND,
    LINK_UP,
    LINK_TRANSMIT_PACKETS_TOTAL,
    LINK_RECEIVE_PACKETS_TOTAL,
    LINK_ERRORS_TOTAL,
    LINK_CONGESTION_TOTAL,
    LINK_XMIT_WAIT_TICKS_TOTAL,
    LINK_EVENTS_TOTAL,
    NODE_UP,
    NODE_LAST_SEEN_TIMESTAMP_SECONDS,
    NODE_CPU_UTILIZATION_RATIO,
    NODE_MEMORY_USED_BYTES,
    NODE_MEMORY_TOTAL_BYTES,
    NODE_AGENT_DROPPED_BATCHES_TOTAL,
    COLLECTOR_BATCHES_TOTAL,
    COLLECTOR_SAMPLES_TOTAL,
    COLLECTOR_STREAMS,
    COLLECTOR_REJECTED_STREAMS_TOTAL,
    COLLECTOR_SUPERSEDED_STREAMS_TOTAL,
    COLLECTOR_GAP_BATCHES_TOTAL,
    COLLECTOR_IMPLAUSIBLE_RATES_TOTAL,
    COLLECTOR_SERIES_RESETS_TOTAL,
    COLLECTOR_REFUSED_SAMPLES_TOTAL,
    COLLECTOR_REFUSED_SERIES_TOTAL,
    COLLECTOR_OUT_OF_ORDER_SAMPLES_TOTAL,
    COLLECTOR_INGEST_SECONDS,
    COLLECTOR_SCRAPE_SECONDS,
    COLLECTOR_PASS_SECONDS,
    COLLECTOR_PASS_NODES_TOTAL,
    COLLECTOR_PASS_CPU_SECONDS_TOTAL,
    COLLECTOR_STEPS_SKIPPED_SECONDS_TOTAL,
    COLLECTOR_STAGE_CPU_SECONDS_TOTAL,
    COLLECTOR_PERSIST_ERRORS_TOTAL,
    COLLECTOR_PERSIST_COMMITS_TOTAL,
    COLLECTOR_HISTORY_PRUNED_TOTAL,
    COLLECTOR_EXPIRED_NODES_TOTAL,
    COLLECTOR_THROTTLED_BATCHES_TOTAL,
    COLLECTOR_THROTTLED_SECONDS_TOTAL,
    COLLECTOR_HTTP_CONNECTIONS,
    COLLECTOR_HTTP_CONNECTIONS_REFUSED_TOTAL,
    COLLECTOR_HTTP_WRITES_REFUSED_TOTAL,
    COLLECTOR_PAGE_OMITTED_TOTAL,
    COLLECTOR_PAGE_BUSY_TOTAL,
    COLLECTOR_GRPC_CONNECTIONS,
    COLLECTOR_GRPC_CONNECTIONS_REFUSED_TOTAL,
    COLLECTOR_REFUSED_COLLECTIVES_TOTAL,
    COLLECTOR_TLS_HANDSHAKE_FAILURES_TOTAL,
    COLLECTOR_PERSIST_DEGRADED,
    COLLECTOR_PERSIST_CORRUPT_DATABASES_TOTAL,
    COLLECTOR_AUTH_FAILURES_TOTAL,
    COLLECTOR_OUT_OF_WINDOW_SAMPLES_TOTAL,
    COLLECTOR_DROPPED_STREAMS_TOTAL,
    COLLECTOR_REMOTE_WRITE_SAMPLES_TOTAL,
    COLLECTOR_REMOTE_WRITE_REQUESTS_TOTAL,
    COLLECTOR_REMOTE_WRITE_BYTES_TOTAL,
    COLLECTOR_REMOTE_WRITE_QUEUE_SAMPLES,
    BUILD_INFO,
    COLLECTOR_NODES,
    COLLECTOR_SERIES,
    COLLECTOR_STORE_SAMPLES,
    COLLECTOR_STORE_BYTES,
    COLLECTOR_STORE_SAMPLE_BYTES,
    COLLECTOR_STEP_MARKERS_TOTAL,
    STEP_DURATION_SECONDS,
    STEP_LINK_BANDWIDTH_BYTES_PER_SECOND,
    LINK_UTILIZATION_RATIO,
    STEPS_TOTAL,
    STEP_SAMPLES_PER_SECOND,
    GPU_UTILIZATION_RATIO,
    GPU_MEMORY_UTILIZATION_RATIO,
    GPU_SM_ACTIVITY_RATIO,
    GPU_MEMORY_USED_BYTES,
    GPU_PCIE_TRANSMIT_BYTES_PER_SECOND,
    GPU_PCIE_RECEIVE_BYTES_PER_SECOND,
    GPU_NVLINK_TRANSMIT_BYTES_PER_SECOND,
    GPU_NVLINK_RECEIVE_BYTES_PER_SECOND,
    GPU_PCIE_LINK_GENERATION,
    GPU_PCIE_LINK_GENERATION_MAX,
    GPU_PCIE_LINK_WIDTH,
    GPU_PCIE_LINK_WIDTH_MAX,
    GPU_PCIE_REPLAY_ERRORS_TOTAL,
    GPU_POWER_WATTS,
    GPU_SM_CLOCK_HERTZ,
    GPU_NVLINKS_UP,
    GPU_NVLINKS,
    NCCL_SETTING_CONFLICT,
    JOB_RANKS,
    NODE_BLIND,
];

/// The exported family of an agent's node-level GPU series (`SeriesDescriptor.metric`), if it is one.
pub fn gpu_family(metric: &str) -> Option<&'static str> {
    Some(match metric {
        "gpu_utilization_ratio" => GPU_UTILIZATION_RATIO,
        "gpu_memory_utilization_ratio" => GPU_MEMORY_UTILIZATION_RATIO,
        "gpu_sm_activity_ratio" => GPU_SM_ACTIVITY_RATIO,
        "gpu_memory_used_bytes" => GPU_MEMORY_USED_BYTES,
        "gpu_pcie_tx_bytes_per_second" => GPU_PCIE_TRANSMIT_BYTES_PER_SECOND,
        "gpu_pcie_rx_bytes_per_second" => GPU_PCIE_RECEIVE_BYTES_PER_SECOND,
        "gpu_nvlink_tx_bytes_per_second" => GPU_NVLINK_TRANSMIT_BYTES_PER_SECOND,
        "gpu_nvlink_rx_bytes_per_second" => GPU_NVLINK_RECEIVE_BYTES_PER_SECOND,
        "gpu_pcie_link_gen" => GPU_PCIE_LINK_GENERATION,
        "gpu_pcie_link_gen_max" => GPU_PCIE_LINK_GENERATION_MAX,
        "gpu_pcie_link_width" => GPU_PCIE_LINK_WIDTH,
        "gpu_pcie_link_width_max" => GPU_PCIE_LINK_WIDTH_MAX,
        "gpu_pcie_replay_errors" => GPU_PCIE_REPLAY_ERRORS_TOTAL,
        "gpu_power_watts" => GPU_POWER_WATTS,
        "gpu_sm_clock_hz" => GPU_SM_CLOCK_HERTZ,
        "gpu_nvlinks_up" => GPU_NVLINKS_UP,
        "gpu_nvlinks" => GPU_NVLINKS,
        _ => return None,
    })
}

/// The families whose series carry a `counter` label (the agent's counter name) with `counter_detail =
/// "name"`; with `"family"` (the default) a link's counters of one of them are summed into one series without
/// it ([`crate::export::exposition::apply_counter_detail`]).
pub const NAMED_COUNTER_FAMILIES: [&str; 3] =
    [LINK_ERRORS_TOTAL, LINK_CONGESTION_TOTAL, LINK_EVENTS_TOTAL];

/// A series of the exported view named after one of [`NAMED_COUNTER_FAMILIES`]: a link's counters of that
/// family summed, written to it without a `counter` label.
pub fn summed_counter_family(metric: &str) -> Option<&'static str> {
    NAMED_COUNTER_FAMILIES.into_iter().find(|f| *f == metric)
}

impl LinkCounterFamily {
    /// The exported family of the counters of this kind, and whether they carry the `counter` label.
    pub fn exported(self) -> (&'static str, bool) {
        match self {
            LinkCounterFamily::TransmitPackets => (LINK_TRANSMIT_PACKETS_TOTAL, false),
            LinkCounterFamily::ReceivePackets => (LINK_RECEIVE_PACKETS_TOTAL, false),
            LinkCounterFamily::XmitWait => (LINK_XMIT_WAIT_TICKS_TOTAL, false),
            LinkCounterFamily::Errors => (LINK_ERRORS_TOTAL, true),
            LinkCounterFamily::Congestion => (LINK_CONGESTION_TOTAL, true),
            LinkCounterFamily::TransmitBytes
            | LinkCounterFamily::ReceiveBytes
            | LinkCounterFamily::Other => (LINK_EVENTS_TOTAL, true),
        }
    }
}

/// Which exported family a link counter of agent metric name `metric` belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkCounterFamily {
    TransmitBytes,
    ReceiveBytes,
    TransmitPackets,
    ReceivePackets,
    XmitWait,
    Errors,
    Congestion,
    Other,
}

/// Maps an agent's link counter name to its family. Names are the agent's (`SeriesDescriptor.metric`).
pub fn link_counter_family(metric: &str) -> LinkCounterFamily {
    match metric {
        "tx_bytes" => LinkCounterFamily::TransmitBytes,
        "rx_bytes" => LinkCounterFamily::ReceiveBytes,
        "tx_packets" | "port_xmit_packets" => LinkCounterFamily::TransmitPackets,
        "rx_packets" | "port_rcv_packets" => LinkCounterFamily::ReceivePackets,
        "xmit_wait_ticks" | "port_xmit_wait" | "xmit_wait" => LinkCounterFamily::XmitWait,
        m if m.contains("cnp")
            || m.contains("ecn")
            || m == "out_of_sequence"
            || m.contains("congest") =>
        {
            LinkCounterFamily::Congestion
        }
        m if m.contains("error")
            || m.contains("discard")
            || m.contains("drop")
            || m.contains("downed")
            || m.contains("overrun")
            || m.contains("integrity")
            || m.contains("recovery") =>
        {
            LinkCounterFamily::Errors
        }
        _ => LinkCounterFamily::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_conventions() {
        for n in ALL {
            assert!(n.starts_with("commwatch_"), "{n}");
            assert!(n.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{n}");
        }
        let mut v = ALL.to_vec();
        v.sort();
        v.dedup();
        assert_eq!(v.len(), ALL.len(), "duplicate names");
    }

    #[test]
    fn families() {
        assert_eq!(
            link_counter_family("symbol_errors"),
            LinkCounterFamily::Errors
        );
        assert_eq!(
            link_counter_family("link_downed"),
            LinkCounterFamily::Errors
        );
        assert_eq!(link_counter_family("rx_dropped"), LinkCounterFamily::Errors);
        assert_eq!(
            link_counter_family("np_cnp_sent"),
            LinkCounterFamily::Congestion
        );
        assert_eq!(
            link_counter_family("port_xmit_wait"),
            LinkCounterFamily::XmitWait
        );
        assert_eq!(
            link_counter_family("multicast_xmit_packets"),
            LinkCounterFamily::Other
        );
    }
}
