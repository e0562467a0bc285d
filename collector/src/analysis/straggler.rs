//! `straggler`: a node the rest of the job waits for, consistently.
//!
//! Two signals, each over the window and against the job's median (at least [`MIN_NODES`] nodes; in a job of
//! two nodes, against the other node — the median of two would halve the gap, and a two-node job whose one
//! node computes longer is as stalled as a larger one):
//! - compute: its GPUs compute a larger share of the time than the job's median by more than
//!   [`BUSY_EXCESS_ABOVE`] (absolute share) — in synchronous data-parallel training every other rank idles
//!   while it finishes, so it is the one that is late at every step's collective. The share of time computing
//!   is SM activity ÷ the SM activity of dense compute (`exposed_comm`'s reference) where every node reports
//!   SM activity, else the share of time a kernel runs (`gpu_utilization_ratio`). The first leaves out NCCL's
//!   kernels: when gradient buckets overlap backward, the other ranks run NCCL kernels while they wait for the
//!   straggler's buckets, so their kernel-running share is as high as its own;
//! - CPU limit: its training processes stopped by their cgroup's CPU quota in at least [`THROTTLED_ABOVE`] of
//!   the CFS enforcement periods, more than [`THROTTLED_EXCESS`] above the job's median (a node without a
//!   limit counts as never throttled) — the `cgroup` source's `cpu_cfs_throttled_periods_total` ÷
//!   `cpu_cfs_periods_total` of the job's cgroups, over at least [`MIN_CFS_PERIODS`] periods. The rank is
//!   stopped for the rest of each period it outgrows, and the others wait for it at every collective; GPUs,
//!   where there are any, then idle on it too, so the compute signal may not see it;
//! - network: its fabric ports' achieved rate during communication below [`RATE_LAG_BELOW`] × the job's
//!   median (when no `link_degraded` explains it, root-cause linking happens in `causes.rs`). Measured rates
//!   only: confident steps or resolved bursts; a burst shorter than a few samples has no rate to compare.
//!
//! The window (20 s, tens of steps) and the tracker's hysteresis make it "consistent" (two evaluations in a
//! row for a compute straggler measured from SM activity, [`compute_raise_after`]; three otherwise). Severity
//! warning.

use super::exposed_comm::compute_share;
use super::input::{AnalysisInput, NodeInput};
use super::{
    gbs, median_select, r4, Candidate, Evidence, FindingKind, NodeFigures, Severity, Subject,
};

/// Fewest nodes to compare: two, each compared with the other.
pub const MIN_NODES: usize = 2;
/// GPU busy share above the job median by more than this: the node computes longer.
pub const BUSY_EXCESS_ABOVE: f64 = 0.05;
/// Fabric rate below this share of the job's median: the node's links lag.
pub const RATE_LAG_BELOW: f64 = 0.7;
/// Share of CFS periods throttled at or above which a node's training processes wait on their CPU limit.
pub const THROTTLED_ABOVE: f64 = 0.25;
/// ... and by more than this above the job's median share.
pub const THROTTLED_EXCESS: f64 = 0.2;
/// Fewest CFS periods over the window for a throttled share (2 s of the kernel's default 100 ms period).
pub const MIN_CFS_PERIODS: u64 = 20;
/// The `cgroup` source's counters of a job's cgroups on a node, and the label naming the job.
pub const CFS_PERIODS: &str = "cpu_cfs_periods_total";
pub const CFS_THROTTLED: &str = "cpu_cfs_throttled_periods_total";
pub const JOB_LABEL: &str = "job_id";

/// The groups of nodes to compare: each job's nodes; when no job is known, the nodes whose newest step names
/// the same job (one that has just ended: its steps are still in the window, and nodes of two jobs moved
/// different traffic), and the nodes whose steps name none, together.
pub(crate) fn groups(
    input: &AnalysisInput,
) -> Vec<(Option<String>, Vec<&super::input::NodeInput>)> {
    if input.jobs.is_empty() {
        let mut by_step_job: std::collections::BTreeMap<Option<&str>, Vec<_>> =
            std::collections::BTreeMap::new();
        for n in &input.nodes {
            let job = n.steps.last().and_then(|s| s.job.as_deref());
            by_step_job.entry(job).or_default().push(n);
        }
        return by_step_job
            .into_iter()
            .map(|(job, nodes)| (job.map(str::to_string), nodes))
            .collect();
    }
    input
        .jobs
        .iter()
        .map(|j| {
            let nodes = j.nodes().filter_map(|n| input.node(n)).collect();
            (Some(j.id.clone()), nodes)
        })
        .collect()
}

/// How a group's nodes' compute is compared: the share of time computing from SM activity when every node
/// with GPU data reports it, else the kernel-running share. `(signal name, share of a node)`.
fn compute_signal(nodes: &[&NodeInput]) -> (&'static str, fn(&NodeInput) -> Option<f64>) {
    let sm = nodes
        .iter()
        .filter(|n| n.gpu_busy_share().is_some())
        .all(|n| n.gpu_sm_activity().is_some());
    if sm {
        ("gpu_compute_share", compute_share)
    } else {
        ("gpu_busy_share", NodeInput::gpu_busy_share)
    }
}

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    evaluate_with(input, &NodeFigures::new(input))
}

/// [`evaluate`], each node's fabric burst rate read from `figures` (shared with the other rules that read it).
pub(crate) fn evaluate_with(input: &AnalysisInput, figures: &NodeFigures<'_>) -> Vec<Candidate> {
    let mut all = Vec::new();
    for (job, nodes) in groups(input) {
        let mut out = Vec::new();
        if nodes.len() < MIN_NODES {
            continue;
        }
        let (signal, share) = compute_signal(&nodes);
        let against = if nodes.len() == 2 {
            "the other node's"
        } else {
            "the job's median"
        };
        let busy_all = reference(&nodes, None, share);
        // Each node's burst rate worked out once (a walk over its steps' links), not once more per reference.
        let rates: Vec<Option<f64>> = nodes.iter().map(|n| figures.burst_rate(n)).collect();
        let rate_all = reference_in(&nodes, &rates, None);
        for (k, n) in nodes.iter().enumerate() {
            let pair = (nodes.len() == 2).then_some(n.name.as_str());
            let busy_median = pair.map_or(busy_all, |p| reference(&nodes, Some(p), share));
            let rate_median = pair.map_or(rate_all, |p| reference_in(&nodes, &rates, Some(p)));
            // Built only for a candidate: most nodes are no stragglers.
            let subject = || {
                let mut s = Subject::node(&n.name);
                s.job = job.clone();
                s
            };
            if let (Some(b), Some(m)) = (share(n), busy_median) {
                if b - m > BUSY_EXCESS_ABOVE {
                    let mut c =
                        Candidate::new(FindingKind::Straggler, Severity::Warning, subject());
                    c.summary = format!(
                        "{} computes {:.0}% of the time against {against} {:.0}%: the other {} nodes wait for it every step.",
                        n.name,
                        b * 100.0,
                        m * 100.0,
                        nodes.len() - 1
                    );
                    c.evidence = Evidence::new(r4(b), "ratio")
                        .expected(r4(m))
                        .detail("signal", signal)
                        .detail("nodes", nodes.len() as u64);
                    c.action = format!(
                        "Look at {} itself: GPU clocks/thermals/power capping (nvidia-smi -q -d PERFORMANCE), a slower \
                         GPU model, other processes on its GPUs or CPUs, or an uneven data shard.",
                        n.name
                    )
.into();
                    with_collective_rank(&mut c, input, job.as_deref(), &n.name, RankRole::Latest);
                    c.raise_after = compute_raise_after(signal);
                    out.push(c);
                    continue;
                }
            }
            if let Some(c) = throttled(&nodes, n, job.as_deref(), against) {
                out.push(c);
                continue;
            }
            if let (Some(r), Some(m)) = (rates[k], rate_median) {
                if r < RATE_LAG_BELOW * m {
                    let mut c =
                        Candidate::new(FindingKind::Straggler, Severity::Warning, subject());
                    c.summary = format!(
                        "{}'s fabric ports achieve {} during communication against {against} {}.",
                        n.name,
                        gbs(r),
                        gbs(m)
                    );
                    c.evidence = Evidence::new(r4(r), "bytes_per_second")
                        .expected(r4(m))
                        .detail("signal", "fabric_rate")
                        .detail("nodes", nodes.len() as u64);
                    c.action = format!(
                        "Check {}'s ports (rate, errors), its PCIe/NUMA affinity between GPUs and HCAs, and competing traffic.",
                        n.name
                    )
.into();
                    with_collective_rank(&mut c, input, job.as_deref(), &n.name, RankRole::Slowest);
                    out.push(c);
                }
            }
        }
        all.extend(late_rank_explains_slow_links(out));
    }
    all
}

/// A group's candidates without the `fabric_rate` ones when a node of the group is late for compute or CPU: a
/// rank that arrives late at each collective holds its ring neighbours' communication open while they wait
/// for its data, so their links read slow during communication (measured on the real-traffic bed: a
/// CPU-throttled rank's successor read at 0.6 of the job's median rate). Their rate says nothing of their
/// links then.
fn late_rank_explains_slow_links(group: Vec<Candidate>) -> Vec<Candidate> {
    let is_rate = |c: &Candidate| {
        c.evidence.details.get("signal").and_then(|s| s.as_str()) == Some("fabric_rate")
    };
    if group.iter().all(is_rate) {
        return group;
    }
    group.into_iter().filter(|c| !is_rate(c)).collect()
}

/// The CFS periods and throttled periods of `job`'s cgroups on `n` over the window (every job's when `None`);
/// `None` without the `cgroup` source's counters.
pub fn cfs_periods(n: &NodeInput, job: Option<&str>) -> Option<(u64, u64)> {
    let of_job = |c: &&super::input::CounterWindow| {
        job.is_none_or(|j| c.key.0.labels.iter().any(|(k, v)| k == JOB_LABEL && v == j))
    };
    let sum = |metric: &str| {
        let v: Vec<u64> = n
            .counters
            .iter()
            .filter(|c| c.metric() == metric)
            .filter(of_job)
            .map(|c| c.increase)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<u64>())
    };
    Some((sum(CFS_PERIODS)?, sum(CFS_THROTTLED)?))
}

/// The share of CFS periods in which `job`'s processes on `n` were throttled, over at least
/// [`MIN_CFS_PERIODS`]; 0 with fewer periods (no limit set, or never runnable against it), `None` without the
/// counters.
fn throttled_share(n: &NodeInput, job: Option<&str>) -> Option<f64> {
    let (periods, throttled) = cfs_periods(n, job)?;
    Some(if periods < MIN_CFS_PERIODS {
        0.0
    } else {
        (throttled as f64 / periods as f64).min(1.0)
    })
}

/// A straggler held back by its CPU limit: `n`'s throttled share against the median of the others (a node
/// without the counters counts as never throttled).
fn throttled(
    nodes: &[&NodeInput],
    n: &NodeInput,
    job: Option<&str>,
    against: &str,
) -> Option<Candidate> {
    let x = throttled_share(n, job)?;
    // Below the line whatever the others do: their shares are not worked out.
    if x < THROTTLED_ABOVE {
        return None;
    }
    let mut others: Vec<f64> = nodes
        .iter()
        .filter(|o| o.name != n.name)
        .map(|o| throttled_share(o, job).unwrap_or(0.0))
        .collect();
    let m = median_select(&mut others)?;
    if x < THROTTLED_ABOVE || x - m <= THROTTLED_EXCESS {
        return None;
    }
    let (periods, _) = cfs_periods(n, job)?;
    let mut subject = Subject::node(&n.name);
    subject.job = job.map(str::to_string);
    let mut c = Candidate::new(FindingKind::Straggler, Severity::Warning, subject);
    c.summary = format!(
        "{}'s training processes were stopped by their CPU limit in {:.0}% of the kernel's enforcement periods \
         against {against} {:.0}%: the other {} nodes wait for it at every step's collective.",
        n.name,
        x * 100.0,
        m * 100.0,
        nodes.len() - 1
    );
    c.evidence = Evidence::new(r4(x), "ratio")
        .expected(r4(m))
        .detail("signal", "cpu_throttled")
        .detail("cfs_periods", periods)
        .detail("nodes", nodes.len() as u64);
    c.action = format!(
        "Raise or remove the CPU limit of the training processes on {} (Kubernetes resources.limits.cpu, \
         systemd CPUQuota, Slurm's cgroup CPU constraint: their cgroup's cpu.max or cpu.cfs_quota_us), or move \
         what else runs under it (data-loader workers) out of that cgroup.",
        n.name
    )
.into();
    Some(c)
}

/// Evaluations in a row before a compute straggler is raised: with every node's SM activity (NVML GPM, a
/// rate between two of the GPU's 1 Hz samples, so first seen two seconds in) the compared shares are measured
/// over the whole window, and two looks in a row rest on two readings of each GPU: `exposed_comm`'s
/// [`RAISE_AFTER`](super::exposed_comm::RAISE_AFTER). From the kernel-running share (NCCL's kernels
/// included, which waiting ranks also run) the tracker's three.
fn compute_raise_after(signal: &str) -> u32 {
    if signal == "gpu_compute_share" {
        super::exposed_comm::RAISE_AFTER
    } else {
        super::tracker::RAISE_AFTER
    }
}

/// The median of the group's figures, leaving out `except` (in a group of two, a node is compared with the
/// other).
fn reference(
    nodes: &[&NodeInput],
    except: Option<&str>,
    figure: impl Fn(&NodeInput) -> Option<f64>,
) -> Option<f64> {
    let mut v: Vec<f64> = nodes
        .iter()
        .filter(|n| Some(n.name.as_str()) != except)
        .filter_map(|n| figure(n))
        .collect();
    median_select(&mut v)
}

/// [`reference`] of figures already worked out: `figures[k]` is `nodes[k]`'s.
fn reference_in(
    nodes: &[&NodeInput],
    figures: &[Option<f64>],
    except: Option<&str>,
) -> Option<f64> {
    let mut v: Vec<f64> = nodes
        .iter()
        .zip(figures)
        .filter(|(n, _)| Some(n.name.as_str()) != except)
        .filter_map(|(_, f)| *f)
        .collect();
    median_select(&mut v)
}

/// Which rank of a collective a straggler shows as (NCCL Inspector): a node that computes longer arrives last,
/// so its collectives run shortest (`latest_rank`); a node whose links lag runs them longest (`slowest_rank`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RankRole {
    Latest,
    Slowest,
}

/// Per-collective evidence: the job's costliest collective whose latest or slowest rank runs on `node`.
fn with_collective_rank(
    c: &mut Candidate,
    input: &AnalysisInput,
    job: Option<&str>,
    node: &str,
    role: RankRole,
) {
    let found = input.collectives_of(job).iter().find_map(|s| {
        let (rank, on, bw) = match role {
            RankRole::Latest => (
                s.latest_rank,
                &s.latest_rank_node,
                s.latest_rank_bus_bandwidth_bytes_per_second,
            ),
            RankRole::Slowest => (
                s.slowest_rank,
                &s.slowest_rank_node,
                s.slowest_rank_bus_bandwidth_bytes_per_second,
            ),
        };
        (on.as_deref() == Some(node)).then_some((s, rank?, bw?))
    });
    let Some((s, rank, bw)) = found else {
        return;
    };
    let key = match role {
        RankRole::Latest => "latest_rank",
        RankRole::Slowest => "slowest_rank",
    };
    c.evidence = std::mem::take(&mut c.evidence)
        .detail("collective", s.collective.as_str())
        .detail("collective_size_bytes", s.size_bytes)
        .detail(key, rank)
        .detail("rank_bus_bandwidth_bytes_per_second", r4(bw))
        .detail(
            "collective_bus_bandwidth_bytes_per_second",
            r4(s.bus_bandwidth_bytes_per_second),
        );
    c.summary.push_str(&format!(
        " NCCL Inspector: rank {rank} on it runs the job's {} of {:.0} MB at {} bus bandwidth against the median {}{}.",
        s.collective,
        s.size_bytes as f64 / 1e6,
        gbs(bw),
        gbs(s.bus_bandwidth_bytes_per_second),
        match role {
            RankRole::Latest => " (shortest: the others wait for it inside the collective)",
            RankRole::Slowest => "",
        }
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::input::{GpuInput, JobInput, RankInput};
    use crate::collectives::{CollectiveSummary, JobCollectives};
    use commwatch_model::Rank;

    fn node(name: &str, busy: f64) -> NodeInput {
        NodeInput {
            name: name.into(),
            gpus: vec![GpuInput {
                busy_share: Some(busy),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn with_no_job_known_nodes_are_compared_within_the_job_their_steps_name() {
        // Two jobs that just ended (no fleet job): one computed 90 % of the time, the other 50 %.
        let ended = |name: &str, busy: f64, job: &str| {
            let mut step = crate::analysis::test_support::hca_step(
                name,
                0,
                (0, 1_000_000_000),
                crate::analysis::test_support::HcaFigures::short_burst(true),
            );
            step.job = Some(job.into());
            NodeInput {
                steps: vec![std::sync::Arc::new(step)],
                ..node(name, busy)
            }
        };
        let input = AnalysisInput {
            nodes: vec![
                ended("n0", 0.9, "a"),
                ended("n1", 0.9, "a"),
                ended("n2", 0.5, "b"),
                ended("n3", 0.5, "b"),
            ],
            ..Default::default()
        };
        assert!(evaluate(&input).is_empty(), "{:#?}", evaluate(&input));
        // Steps that name no job: the nodes are compared together, as before.
        let input = AnalysisInput {
            nodes: vec![node("n0", 0.9), node("n1", 0.5), node("n2", 0.5)],
            ..Default::default()
        };
        assert_eq!(evaluate(&input).len(), 1);
    }

    #[test]
    fn a_compute_straggler_names_the_rank_the_others_wait_for() {
        let ranks = ["n1", "n2", "n3"]
            .iter()
            .map(|n| RankInput {
                node: n.to_string(),
                process: Rank::default(),
            })
            .collect();
        let summary = CollectiveSummary {
            collective: "AllReduce".into(),
            size_class: "le_256MiB",
            size_bytes: 220_000_000,
            count: 20,
            bytes: 4_400_000_000,
            time_s: 0.7,
            bus_bandwidth_bytes_per_second: 9.8e9,
            slowest_rank: Some(0),
            slowest_rank_node: Some("n1".into()),
            slowest_rank_bus_bandwidth_bytes_per_second: Some(9.0e9),
            latest_rank: Some(5),
            latest_rank_node: Some("n3".into()),
            latest_rank_bus_bandwidth_bytes_per_second: Some(14.0e9),
            ranks: 6,
            nodes: 3,
            fabric_capacity_bytes_per_second: Some(25e9),
            fabric_share: Some(0.392),
        };
        let input = AnalysisInput {
            nodes: vec![node("n1", 0.6), node("n2", 0.6), node("n3", 0.9)],
            jobs: vec![JobInput {
                id: "j".into(),
                ranks,
                ..Default::default()
            }],
            collectives: vec![JobCollectives {
                job: "j".into(),
                summaries: vec![summary],
            }],
            ..Default::default()
        };
        let found = evaluate(&input);
        assert_eq!(found.len(), 1, "{found:#?}");
        let c = &found[0];
        assert_eq!(c.subject.node, "n3");
        // The kernel-running share (no SM activity): the tracker's three evaluations.
        assert_eq!(c.raise_after, crate::analysis::tracker::RAISE_AFTER);
        // Two nodes: the one computing longer is compared with the other, and only it is named.
        let two = AnalysisInput {
            nodes: vec![node("n1", 0.6), node("n3", 0.7)],
            ..Default::default()
        };
        let found = evaluate(&two);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].subject.node, "n3");
        assert!(found[0].summary.contains("against the other node's 60%"));
        let even = AnalysisInput {
            nodes: vec![node("n1", 0.6), node("n3", 0.62)],
            ..Default::default()
        };
        assert!(evaluate(&even).is_empty());
        // With SM activity on every node: the measured compute share, raised after two looks.
        let with_sm = |name: &str, sm: f64| NodeInput {
            name: name.into(),
            gpus: vec![GpuInput {
                busy_share: Some(0.95),
                sm_activity: Some(sm),
                ..Default::default()
            }],
            ..Default::default()
        };
        let measured = AnalysisInput {
            nodes: vec![
                with_sm("n1", 0.54),
                with_sm("n2", 0.54),
                with_sm("n3", 0.72),
            ],
            ..Default::default()
        };
        let found = evaluate(&measured);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].subject.node, "n3");
        assert_eq!(found[0].evidence.details["signal"], "gpu_compute_share");
        assert_eq!(
            found[0].raise_after,
            crate::analysis::exposed_comm::RAISE_AFTER
        );
        assert_eq!(c.evidence.details["latest_rank"], 5);
        assert_eq!(c.evidence.details["collective_size_bytes"], 220_000_000);
        assert!(
            c.summary
                .contains("rank 5 on it runs the job's AllReduce of 220 MB at 14.00 GB/s"),
            "{}",
            c.summary
        );
    }

    /// A node of job `j` whose cgroup counted `periods` CFS periods, `throttled` of them throttled.
    fn limited(name: &str, periods: u64, throttled: u64) -> NodeInput {
        use crate::analysis::input::{CounterKey, CounterWindow};
        let c = |metric: &str, increase: u64| CounterWindow {
            key: CounterKey(std::sync::Arc::new(crate::store::SeriesKey {
                link: None,
                metric: metric.into(),
                labels: vec![(JOB_LABEL.into(), "j".into())],
            })),
            increase,
            window_s: 20.0,
            saturated: false,
            raw: increase,
        };
        NodeInput {
            name: name.into(),
            counters: vec![c(CFS_PERIODS, periods), c(CFS_THROTTLED, throttled)],
            ..Default::default()
        }
    }

    fn job_of(nodes: Vec<NodeInput>) -> AnalysisInput {
        let ranks = nodes
            .iter()
            .map(|n| RankInput {
                node: n.name.clone(),
                process: Rank::default(),
            })
            .collect();
        AnalysisInput {
            nodes,
            jobs: vec![JobInput {
                id: "j".into(),
                ranks,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_node_held_back_by_its_cpu_limit_is_the_straggler() {
        // node3 throttled in 90 % of 150 periods; the others have no limit (no period counted) or none at all.
        let input = job_of(vec![
            limited("node0", 0, 0),
            limited("node1", 0, 0),
            NodeInput {
                name: "node2".into(),
                ..Default::default()
            },
            limited("node3", 150, 135),
        ]);
        let c = evaluate(&input);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].subject.node, "node3");
        assert_eq!(c[0].subject.job.as_deref(), Some("j"));
        assert_eq!(c[0].evidence.measured, 0.9);
        assert!(
            c[0].summary.contains("CPU limit in 90%"),
            "{}",
            c[0].summary
        );
        assert!(c[0].action.contains("cpu.max"), "{}", c[0].action);
    }

    #[test]
    fn a_late_rank_s_neighbours_are_not_stragglers_for_their_slow_links() {
        use crate::analysis::input::LinkInput;
        use commwatch_model::{LinkClass, LinkRole};
        // node3 is CPU-throttled; node0 (its ring successor) reads slow during communication while it waits.
        let mut input = job_of(vec![
            limited("node0", 0, 0),
            limited("node1", 0, 0),
            limited("node2", 0, 0),
            limited("node3", 150, 140),
        ]);
        let rates = [88e6, 135e6, 140e6, 130e6];
        for (n, rate) in input.nodes.iter_mut().zip(rates) {
            let mut l = LinkInput::new(LinkClass::Infiniband, "mlx5_0", "1", LinkRole::Fabric);
            std::sync::Arc::make_mut(&mut l.link).capacity_bytes_per_second = Some(25e9);
            l.activity = Some(crate::analysis::activity::Activity {
                window_s: 20.0,
                sample_period_s: 0.05,
                tx_bytes: 1,
                rx_bytes: 1,
                busy_s: 5.0,
                bursts: Vec::new(),
                burst_rate_bytes_per_second: Some(rate),
                period_s: None,
                period_cv: None,
                bytes_per_burst: None,
                resolved: true,
                peaks: Default::default(),
            });
            n.links.push(l);
        }
        let c = evaluate(&input);
        let named: Vec<(&str, &str)> = c
            .iter()
            .map(|c| {
                (
                    c.subject.node.as_str(),
                    c.evidence.details["signal"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(named, [("node3", "cpu_throttled")]);
        // Without the late rank, node0's slow links are its own.
        let limited_node = input.nodes.iter_mut().find(|n| n.name == "node3").unwrap();
        limited_node.counters.clear();
        let c = evaluate(&input);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].subject.node, "node0");
        assert_eq!(c[0].evidence.details["signal"], "fabric_rate");
    }

    #[test]
    fn the_job_label_is_one_an_agent_may_send() {
        assert!(!crate::ingest::domain::RESERVED_LABELS.contains(&JOB_LABEL));
    }

    #[test]
    fn throttling_shared_by_the_job_or_too_short_to_count_raises_nothing() {
        // Every node equally throttled: a job-wide limit, not one node the others wait for.
        let all = job_of(vec![
            limited("a", 200, 150),
            limited("b", 200, 160),
            limited("c", 200, 140),
        ]);
        assert!(evaluate(&all).is_empty());
        // Too few periods to tell, and a little throttling against none.
        let few = job_of(vec![
            limited("a", 10, 10),
            limited("b", 0, 0),
            limited("c", 0, 0),
        ]);
        assert!(evaluate(&few).is_empty());
        let mild = job_of(vec![
            limited("a", 200, 40),
            limited("b", 0, 0),
            limited("c", 0, 0),
        ]);
        assert!(evaluate(&mild).is_empty());
    }
}
