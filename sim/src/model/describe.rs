//! A short human summary of a model: the job, the fault and its expected symptoms, and what each variant
//! adds.

use std::time::Duration;

use crate::model::{
    node_name, JobModel, LINK_ERROR_RECOVERY_PERIOD_NS, PORT_RCV_ERRORS_PERIOD_NS,
    SYMBOL_ERROR_PERIOD_NS,
};
use crate::variant::Variant;
use crate::{ClusterSpec, Scenario};

const NS_PER_S: u64 = 1_000_000_000;
const NS_PER_MS: u64 = 1_000_000;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn gbs(v: f64) -> f64 {
    v / 1e9
}

impl JobModel {
    /// A short human summary: the job, the faulty node or port, the symptoms to expect, and one line per
    /// variant.
    pub fn describe(&self) -> String {
        let s = &self.spec;
        let fault = s.resolved_fault_node();
        let t = self.node_timeline(fault).unwrap_or(self.timeline());
        let mut out = format!(
            "scenario {}: {} nodes x {} GPUs ({} ranks), ring AllReduce of {} B per step; \
             each HCA moves {} B per step each way\n",
            s.scenario,
            s.nodes,
            s.gpus_per_node,
            s.nodes * s.gpus_per_node,
            s.allreduce_bytes,
            self.per_rank_bytes_per_step(),
        );
        out.push_str(&format!(
            "step {:.3} ms (host {:.0} ms, compute {:.0} ms, burst at +{:.3} ms for {:.3} ms, exposed comm {:.3} ms)\n",
            ms(t.period),
            ms(t.host),
            ms(t.compute.iter().copied().max().unwrap_or_default()),
            ms(t.burst_start),
            ms(t.burst_duration),
            ms(t.exposed_comm()),
        ));
        out.push_str(&self.scenario_line());
        for v in &s.variants {
            out.push('\n');
            out.push_str(&self.variant_line(*v));
        }
        out
    }

    fn scenario_line(&self) -> String {
        let s = &self.spec;
        let fault = s.resolved_fault_node();
        let t = self.node_timeline(fault).unwrap_or(self.timeline());
        let fname = node_name(fault);
        let healthy = ClusterSpec {
            scenario: Scenario::Healthy,
            ..s.clone()
        };
        let healthy_burst = JobModel::new(&healthy)
            .ok()
            .and_then(|m| m.node_timeline(fault).map(|t| ms(t.burst_duration)))
            .unwrap_or(0.0);
        let hca_rate = self
            .hca(0, 0)
            .map(|h| gbs(h.link.tx.burst_rate_bytes_per_second()))
            .unwrap_or(0.0);
        match s.scenario {
            Scenario::Healthy => format!(
                "healthy: every HCA bursts at {hca_rate:.2} GB/s; eth0 and ib netdevs carry background only"
            ),
            Scenario::ManagementNic => {
                let eth = self.nodes[fault].eth0.link.tx;
                let job = self.placement.job_of(fault);
                let other = (0..s.nodes)
                    .find(|&n| n != fault && self.placement.job_of(n) == job)
                    .unwrap_or(0);
                let other_rate = self
                    .hca(other, 0)
                    .map(|h| gbs(h.link.tx.burst_rate_bytes_per_second()))
                    .unwrap_or(0.0);
                format!(
                    "fault: {fname} sends its NCCL traffic over eth0 (management, {} Mb/s) instead of its HCAs. \
                     expect: {fname} mlx5_* idle (background only); {fname} eth0 moves {} B per step each way at {:.2} GB/s; \
                     the job's burst stretches from {healthy_burst:.3} ms to {:.3} ms, other nodes' HCAs burst at only {other_rate:.2} GB/s",
                    s.eth_speed_mbps,
                    eth.burst_bytes_per_step,
                    gbs(eth.burst_rate_bytes_per_second()),
                    ms(t.burst_duration),
                )
            }
            Scenario::DegradedLink => {
                let h = &self.nodes[fault].hcas[s.fault_hca];
                format!(
                    "fault: {fname} mlx5_{} trained at {} (capacity {:.2} GB/s, effective {:.2} GB/s). \
                     expect: its rate file says so, its port_xmit_wait rises fast; the job's burst stretches from \
                     {healthy_burst:.3} ms to {:.3} ms on every link",
                    s.fault_hca,
                    h.rate_text,
                    gbs(h.link.capacity_bytes_per_second as f64),
                    gbs(h.link.effective_bytes_per_second as f64),
                    ms(t.burst_duration),
                )
            }
            Scenario::LinkErrors => format!(
                "fault: {fname} mlx5_{} port 1 has a bad cable. expect: symbol_error +1 every {} ms \
                 (saturates at 65535), link_error_recovery +1 every {} s (saturates at 255), port_rcv_errors +1 every {} ms \
                 (saturates at 65535); traffic unaffected",
                s.fault_hca,
                SYMBOL_ERROR_PERIOD_NS / NS_PER_MS,
                LINK_ERROR_RECOVERY_PERIOD_NS / NS_PER_S,
                PORT_RCV_ERRORS_PERIOD_NS / NS_PER_MS,
            ),
            Scenario::Straggler => format!(
                "fault: {fname} computes {}% longer ({:.0} ms). expect: every node's burst starts at +{:.3} ms \
                 instead of +{:.3} ms; links look healthy, the step is longer",
                s.straggler_percent,
                ms(t.compute.get(fault).copied().unwrap_or_default()),
                ms(t.burst_start),
                (s.compute_ms - s.overlap_ms) as f64,
            ),
            Scenario::NoOverlap => "fault: the AllReduce is not overlapped with backward. expect: the burst starts when \
                 compute ends, the step is longer by the overlap; links look healthy (GPU timeline comes with the GPU source)"
                .to_string(),
            Scenario::CpuBound => format!(
                "fault: a {} ms host phase (data loader / CPU) precedes compute each step. expect: long steps, GPU busy \
                 share {:.0}%, healthy links (GPU view comes with the GPU source)",
                s.cpu_bound_host_ms,
                t.gpu_busy_share(fault) * 100.0,
            ),
            Scenario::Constant {
                tx_bytes_per_second,
                rx_bytes_per_second,
            } => format!(
                "constant: every HCA port transmits {tx_bytes_per_second} B/s and receives {rx_bytes_per_second} B/s; \
                 netdevs still, no errors"
            ),
        }
    }

    fn jobs_line(&self) -> String {
        let jobs: Vec<String> = self
            .jobs
            .iter()
            .map(|j| {
                format!(
                    "job {} on {}..{} ({} ranks, {} B AllReduce, step {:.3} ms)",
                    j.id,
                    node_name(j.nodes[0]),
                    node_name(j.nodes[j.nodes.len() - 1]),
                    j.ranks,
                    j.allreduce_bytes,
                    ms(j.timeline.period)
                )
            })
            .collect();
        let idle: Vec<String> = self
            .placement
            .idle_nodes()
            .into_iter()
            .map(node_name)
            .collect();
        format!("{}; idle: {}", jobs.join("; "), idle.join(", "))
    }

    fn variant_line(&self, v: Variant) -> String {
        let s = &self.spec;
        let fault = s.resolved_fault_node();
        let t = self.node_timeline(fault).unwrap_or(self.timeline());
        match v {
            Variant::Storage => {
                let node = self.jobs[0].nodes[0];
                let rx = self.nodes[node].eth0.link.rx.storage;
                let (cycle, every, first) = rx.map_or((0.0, 0.0, 0.0), |st| {
                    (
                        st.read_cycle().as_secs_f64(),
                        st.checkpoint_period().as_secs_f64(),
                        st.first_checkpoint().as_secs_f64(),
                    )
                });
                format!(
                    "storage: eth0 of every job node reads in seeded 200-1000 MB/s chunks ({} cycle {cycle:.1} s) and \
                     writes a 4 GB checkpoint at 1 GB/s every {every:.1} s from t = {first:.1} s; not step-periodic, \
                     no NCCL traffic",
                    node_name(node)
                )
            }
            Variant::Overlap => format!(
                "overlap: {} gradient buckets from +{:.3} ms, {:.3} ms each; links busy {:.0}% of the step, \
                 exposed comm {:.3} ms",
                t.clock().buckets,
                ms(t.burst_start),
                t.clock().bucket_ns as f64 / 1e6,
                t.busy_share() * 100.0,
                ms(t.exposed_comm()),
            ),
            Variant::IdleNodes | Variant::TwoJobs => format!("{}: {}", v, self.jobs_line()),
            Variant::Jitter => {
                let j = t.clock().jitter;
                format!(
                    "jitter: step boundaries move by up to {:.3} ms, burst ends by up to {:.3} ms (seed {})",
                    j.map_or(0.0, |j| j.step_ns as f64 / 1e6),
                    j.map_or(0.0, |j| j.burst_ns as f64 / 1e6),
                    s.seed
                )
            }
            Variant::Rails8 => format!(
                "rails8: {} HCA rails per node; {} moves {} B per step on mlx5_0",
                s.hcas_per_node(),
                node_name(self.jobs[0].nodes[0]),
                self.nodes[self.jobs[0].nodes[0]].hcas[0]
                    .link
                    .tx
                    .burst_bytes_per_step
            ),
            Variant::SeedScale => format!(
                "seed-scale: per-rank bytes of a 220 MB AllReduce on 64 ranks: {} B per HCA per step in {:.3} ms",
                self.per_rank_bytes_per_step(),
                ms(self.timeline().burst_duration)
            ),
            Variant::Flapping => {
                let (every, down) = t.clock().flap.map_or((0, 0), |f| (f.every, f.down));
                let node = &self.nodes[fault];
                let other = (0..node.hcas.len()).find(|&h| h != s.fault_hca).unwrap_or(0);
                format!(
                    "fault: {} mlx5_{} flaps: down for {down} of every {every} steps (~{:.1} s of every {:.1} s). \
                     expect: state 1: DOWN, link_downed +1 each time, its bytes rerouted over the other rails \
                     ({} B per step on mlx5_{other}), bursts of {:.3} ms meanwhile",
                    node_name(fault),
                    s.fault_hca,
                    down as f64 * t.period.as_secs_f64(),
                    every as f64 * t.period.as_secs_f64(),
                    node.hcas[other].link.tx.burst_bytes_per_flapped_step,
                    t.clock().flapped_bucket_ns as f64 / 1e6,
                )
            }
        }
    }
}
