//! The traffic variants: exact expectations per variant, their composition with the scenarios, and
//! determinism by seed.

use std::time::Duration;

use commwatch_sim::model::storage::{CHECKPOINT_BYTES, READ_CHUNKS};
use commwatch_sim::{
    ClusterSpec, HwCounter, JobModel, Link, NetStat, PortCounter, Scenario, SimError, Variant,
};

const R: u64 = 433_125_000; // 2·63/64 · 220 MB

fn ns(v: u64) -> Duration {
    Duration::from_nanos(v)
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn model(variants: &[Variant]) -> JobModel {
    JobModel::new(&ClusterSpec::with_variants(Scenario::Healthy, variants)).expect("valid spec")
}

/// AllReduce bytes of `link` on `node` between the starts of its job's steps `a` and `b`, transmit side.
fn burst_between(m: &JobModel, node: usize, link: Link, a: u64, b: u64) -> u64 {
    let tl = m.node_timeline(node).unwrap_or(m.timeline());
    let at = |k| {
        m.expected_link_bytes(node, link, tl.step_start(k))
            .unwrap()
            .tx_burst
    };
    at(b) - at(a)
}

#[test]
fn variant_names_round_trip() {
    assert_eq!(Variant::NAMES.len(), Variant::ALL.len());
    for (name, v) in Variant::NAMES.iter().zip(Variant::ALL) {
        assert_eq!(name.parse::<Variant>().unwrap(), v);
        assert_eq!(v.to_string(), *name);
        assert!(!v.summary().is_empty());
    }
    assert_eq!(
        Variant::parse_list(" storage, Two_Jobs,,rails8").unwrap(),
        vec![Variant::Storage, Variant::TwoJobs, Variant::Rails8]
    );
    match "bogus".parse::<Variant>() {
        Err(SimError::UnknownVariant { name, expected }) => {
            assert_eq!(name, "bogus");
            assert!(expected.contains("seed-scale"));
        }
        other => panic!("{other:?}"),
    }
    let faults: Vec<Variant> = Variant::ALL.into_iter().filter(|v| v.is_fault()).collect();
    assert_eq!(faults, vec![Variant::Flapping]);
    assert!(ClusterSpec::default().variants.is_empty());
}

#[test]
fn storage_reads_and_checkpoints_on_eth0_at_storage_rates() {
    let m = model(&[Variant::Storage]);
    // No NCCL traffic on eth0, only storage and background.
    let eth = m.expected_step(0, Link::Eth0).unwrap();
    assert_eq!((eth.tx_bytes_per_step, eth.rx_bytes_per_step), (0, 0));
    let l = m.link(0, Link::Eth0).unwrap();
    let (tx, rx) = (l.tx.storage.unwrap(), l.rx.storage.unwrap());
    // The HCAs carry the healthy job unchanged.
    assert_eq!(
        m.expected_step(0, Link::Hca(0)).unwrap().tx_bytes_per_step,
        R
    );
    assert!(m.link(0, Link::Hca(0)).unwrap().tx.storage.is_none());

    // Reads: 16 chunks of 300–1500 ms at 200–1000 MB/s with 100–1100 ms gaps.
    let chunks = rx.read_chunks();
    assert_eq!(chunks.len() as u64, READ_CHUNKS);
    let mut end = 0;
    for c in &chunks {
        assert_eq!(c.start_ns, end);
        assert!(
            (300_000_000..1_500_000_000).contains(&c.duration_ns),
            "{c:?}"
        );
        assert!((100_000_000..1_100_000_000).contains(&c.gap_ns), "{c:?}");
        let rate = c.bytes as f64 * 1e9 / c.duration_ns as f64;
        assert!((200e6..1000e6).contains(&rate), "{rate}");
        // Whole MB/s over whole milliseconds.
        let rate_exact = u128::from(c.bytes) * 1_000_000_000;
        assert_eq!(rate_exact % u128::from(c.duration_ns), 0);
        assert_eq!((rate_exact / u128::from(c.duration_ns)) % 1_000_000, 0);
        end = c.start_ns + c.duration_ns + c.gap_ns;
    }
    assert_eq!(rx.read_cycle(), ns(end));
    // Within the first chunk the reads move linearly; the requests going out are 2 % of them.
    let c0 = chunks[0];
    let mid = ns(c0.duration_ns / 2);
    assert_eq!(rx.read_bytes_at(mid), c0.bytes / 2);
    assert_eq!(rx.bytes_at(mid), c0.bytes / 2);
    assert_eq!(tx.bytes_at(mid), c0.bytes / 2 / 50);
    assert_eq!(
        rx.read_bytes_at(rx.read_cycle()),
        chunks.iter().map(|c| c.bytes).sum::<u64>()
    );
    // Mean read rate over ten minutes: hundreds of MB/s.
    let ten = Duration::from_secs(600);
    let mean = rx.read_bytes_at(ten) as f64 / 600.0;
    assert!((250e6..500e6).contains(&mean), "{mean}");

    // Checkpoints: every 200 steps (61.9375 s) from step 50 (15.484375 s), 4 GB at 1 GB/s.
    assert_eq!(tx.checkpoint_period(), ns(200 * 309_687_500));
    assert_eq!(tx.first_checkpoint(), ns(50 * 309_687_500));
    let first = tx.first_checkpoint();
    assert_eq!(tx.checkpoint_bytes_at(first), 0);
    assert_eq!(tx.checkpoint_bytes_at(first + ms(1_000)), 1_000_000_000);
    assert_eq!(tx.checkpoint_bytes_at(first + ms(4_000)), CHECKPOINT_BYTES);
    assert_eq!(tx.checkpoint_bytes_at(first + ms(60_000)), CHECKPOINT_BYTES);
    let second = first + tx.checkpoint_period();
    assert_eq!(
        tx.checkpoint_bytes_at(second + ms(4_000)),
        2 * CHECKPOINT_BYTES
    );
    // During a checkpoint eth0 transmits 1 GB/s plus the read requests; receives the reads plus 2 % acks.
    let (a, b) = (first + ms(1_000), first + ms(2_000));
    let d = |f: &commwatch_sim::model::StorageFlow| f.bytes_at(b) - f.bytes_at(a);
    let reads = rx.read_bytes_at(b) - rx.read_bytes_at(a);
    assert_eq!(
        d(&tx),
        1_000_000_000 + rx.read_bytes_at(b) / 50 - rx.read_bytes_at(a) / 50
    );
    assert_eq!(d(&rx), reads + 20_000_000);
    // Asymmetric over a checkpoint period: mostly received.
    let period = tx.checkpoint_period();
    let (tx_p, rx_p) = (
        tx.bytes_at(first + period) - tx.bytes_at(first),
        rx.bytes_at(first + period) - rx.bytes_at(first),
    );
    assert!(rx_p > 3 * tx_p, "rx {rx_p} tx {tx_p}");
    // The node's eth0 counters hold storage + background exactly.
    let t = Duration::from_millis(47_123);
    let bg = l.rx.background_bytes_at(t);
    assert_eq!(
        m.expected_link_bytes(0, Link::Eth0, t).unwrap().rx,
        rx.bytes_at(t) + bg
    );
    let base = m
        .net_stat(0, Link::Eth0, NetStat::RxBytes, Duration::ZERO)
        .unwrap();
    assert_eq!(
        m.net_stat(0, Link::Eth0, NetStat::RxBytes, t).unwrap() - base,
        rx.bytes_at(t) + bg
    );
    let pkts0 = m
        .net_stat(0, Link::Eth0, NetStat::RxPackets, Duration::ZERO)
        .unwrap();
    assert_eq!(
        m.net_stat(0, Link::Eth0, NetStat::RxPackets, t).unwrap() - pkts0,
        rx.bytes_at(t) / 1514 + bg / 800
    );
    // Each node reads its own pattern.
    let other = m.link(5, Link::Eth0).unwrap().rx.storage.unwrap();
    assert_ne!(other.read_chunks(), chunks);
}

#[test]
fn storage_traffic_is_not_step_periodic() {
    let m = model(&[Variant::Storage]);
    let tl = m.timeline();
    let rx = m.link(2, Link::Eth0).unwrap().rx.storage.unwrap();
    let hca = m.link(2, Link::Hca(0)).unwrap().tx;
    let p = tl.period.as_nanos() as u64;
    // Bytes per step: the AllReduce moves exactly R every step; storage varies from step to step.
    let steps = 1_000u64;
    let per_step: Vec<u64> = (0..steps)
        .map(|k| rx.bytes_at(ns((k + 1) * p)) - rx.bytes_at(ns(k * p)))
        .collect();
    for k in [0, 1, 500, 999] {
        assert_eq!(
            hca.burst_bytes_at(ns((k + 1) * p)) - hca.burst_bytes_at(ns(k * p)),
            R
        );
    }
    let mean = per_step.iter().sum::<u64>() as f64 / steps as f64;
    let var = per_step
        .iter()
        .map(|&x| (x as f64 - mean).powi(2))
        .sum::<f64>()
        / steps as f64;
    assert!(var.sqrt() / mean > 0.5, "cv {}", var.sqrt() / mean);
    let idle = per_step.iter().filter(|&&x| x == 0).count();
    assert!(idle > 50 && idle < 500, "{idle} steps without reads");
    // Folded at the step period, storage bytes spread over every phase of the step (a step-periodic flow
    // would sit in one phase, as the AllReduce does in the burst's last 6 %).
    let bins = 10u64;
    let mut folded = vec![0u64; bins as usize];
    let mut training = vec![0u64; bins as usize];
    for k in 0..steps {
        for b in 0..bins {
            let (t0, t1) = (ns(k * p + b * p / bins), ns(k * p + (b + 1) * p / bins));
            folded[b as usize] += rx.bytes_at(t1) - rx.bytes_at(t0);
            training[b as usize] += hca.burst_bytes_at(t1) - hca.burst_bytes_at(t0);
        }
    }
    let (lo, hi) = (
        *folded.iter().min().unwrap() as f64,
        *folded.iter().max().unwrap() as f64,
    );
    assert!(hi / lo < 1.2, "{folded:?}");
    assert_eq!(training[9], steps * R, "{training:?}");
    assert_eq!(training[..9].iter().sum::<u64>(), 0);
    // The read cycle is no whole number of steps.
    let cycle = rx.read_cycle().as_nanos() as u64;
    assert_ne!(cycle % p, 0);
}

#[test]
fn overlap_hides_gradient_buckets_under_the_second_half_of_compute() {
    let m = model(&[Variant::Overlap]);
    let tl = m.timeline();
    // 4 buckets in the 37.5 ms slots of 150..300 ms, each paced to 33.75 ms; nothing exposed.
    assert_eq!(tl.period, ms(300));
    assert_eq!(tl.exposed_comm(), Duration::ZERO);
    assert_eq!(tl.burst_start, ms(150));
    assert_eq!(tl.burst_duration, ns(146_250_000));
    let expect: Vec<(Duration, Duration)> = (0..4u64)
        .map(|i| {
            (
                ns(150_000_000 + i * 37_500_000),
                ns(183_750_000 + i * 37_500_000),
            )
        })
        .collect();
    assert_eq!(tl.bursts_of_step(0), expect);
    let k = 7;
    let shifted: Vec<(Duration, Duration)> = expect
        .iter()
        .map(|&(a, b)| (a + ms(300) * k, b + ms(300) * k))
        .collect();
    assert_eq!(tl.bursts_of_step(k as u64), shifted);
    assert!((tl.busy_share() - 0.45).abs() < 1e-12);
    // R per step, R/4 per bucket, at R / 135 ms = 3.208e9 B/s.
    let s = m.expected_step(4, Link::Hca(6)).unwrap();
    assert_eq!(s.tx_bytes_per_step, R);
    assert!((s.burst_tx_bytes_per_second - R as f64 / 0.135).abs() < 1.0);
    let f = m.link(4, Link::Hca(6)).unwrap().tx;
    let step = ms(300) * 3;
    assert_eq!(f.burst_bytes_at(step + ms(150)) - f.burst_bytes_at(step), 0);
    assert_eq!(
        f.burst_bytes_at(step + ns(183_750_000)) - f.burst_bytes_at(step),
        R / 4 // 108 281 250 exactly
    );
    assert_eq!(
        f.burst_bytes_at(step + ns(185_000_000)) - f.burst_bytes_at(step),
        R / 4,
        "the gap between buckets moves nothing"
    );
    assert_eq!(f.burst_bytes_at(step + ms(300)) - f.burst_bytes_at(step), R);
    // port_xmit_wait counts the busy time: 135 ms per step at 2 %.
    let wait = m
        .port_counter(4, 6, PortCounter::PortXmitWait, ms(3_000))
        .unwrap();
    assert_eq!(wait, 10 * 135_000_000 * 20_000 / 1_000_000 * 250 / 1_000);

    // A link too slow for the slots: the buckets queue and the tail is exposed (management-nic: node-03's
    // 3 465 000 000 B over eth0 need 353.571429 ms, 88.392858 ms per bucket).
    let slow = JobModel::new(&ClusterSpec::with_variants(
        Scenario::ManagementNic,
        &[Variant::Overlap],
    ))
    .unwrap();
    let st = slow.timeline();
    assert_eq!(st.period, ns(150_000_000 + 4 * 88_392_858));
    assert_eq!(st.exposed_comm(), ns(4 * 88_392_858 - 150_000_000));
    // no-overlap: the buckets run back to back after compute.
    let no = JobModel::new(&ClusterSpec::with_variants(
        Scenario::NoOverlap,
        &[Variant::Overlap],
    ))
    .unwrap();
    assert_eq!(no.timeline().burst_start, ms(300));
    assert_eq!(no.timeline().period, ns(300_000_000 + 4 * 4_921_875));
}

#[test]
fn idle_nodes_run_no_job_and_move_only_background() {
    let m = model(&[Variant::IdleNodes]);
    assert_eq!(m.placement().idle_nodes(), vec![6, 7]);
    assert_eq!(m.jobs().len(), 1);
    assert_eq!(m.jobs()[0].nodes, (0..6).collect::<Vec<_>>());
    assert_eq!(m.jobs()[0].ranks, 48);
    // 48 ranks: R = 2·47/48 · 220 MB = 430 833 333 (floor).
    let r48 = 430_833_333;
    assert_eq!(m.per_rank_bytes_per_step(), r48);
    assert_eq!(
        m.expected_step(5, Link::Hca(7)).unwrap().tx_bytes_per_step,
        r48
    );
    assert!(m.job_of(6).is_none() && m.node_timeline(7).is_none());
    let t = Duration::from_secs(10);
    for node in [6, 7] {
        for g in 0..8 {
            let s = m.expected_step(node, Link::Hca(g)).unwrap();
            assert_eq!((s.tx_bytes_per_step, s.rx_bytes_per_step), (0, 0));
            let b = m.expected_link_bytes(node, Link::Hca(g), t).unwrap();
            assert_eq!((b.tx_burst, b.rx_burst), (0, 0));
            assert!(b.tx < 32_000 * 10 && b.tx > 16_000 * 10 - 1);
            assert_eq!(
                m.port_counter(node, g, PortCounter::PortXmitWait, t)
                    .unwrap(),
                0
            );
        }
        assert_eq!(
            m.expected_link_bytes(node, Link::Eth0, t).unwrap().tx_burst,
            0
        );
    }
    // The job's burst is that of 48 ranks: 430 833 333 B at 22e9 B/s.
    assert_eq!(m.timeline().burst_duration, ns(19_583_334));
    assert_eq!(m.timeline().compute[6], Duration::ZERO);
    assert_eq!(m.timeline().compute[5], ms(300));
    // With fewer than 4 nodes one node is idle and the fault moves off it.
    let small = ClusterSpec {
        nodes: 4,
        gpus_per_node: 2,
        ..ClusterSpec::with_variants(Scenario::ManagementNic, &[Variant::IdleNodes])
    };
    assert_eq!(small.resolved_fault_node(), 2);
    let sm = JobModel::new(&small).unwrap();
    assert_eq!(
        sm.expected_step(2, Link::Eth0).unwrap().tx_bytes_per_step,
        2 * 366_666_666
    );
}

#[test]
fn jitter_moves_steps_and_bursts_within_bounds_without_drift() {
    let m = model(&[Variant::Jitter]);
    let tl = m.timeline();
    // Room for the slowest burst: 19.6875 ms + 2 × 1.5 % (295 305 ns each way).
    let p = 290_000_000 + 19_687_500 + 2 * 295_305u64;
    assert_eq!(tl.period, ns(p));
    let j = p / 40; // 7 756 952 ns
    let (mut min_len, mut max_len) = (u64::MAX, 0u64);
    let (mut min_d, mut max_d) = (u64::MAX, 0u64);
    let mut lengths = std::collections::BTreeSet::new();
    for k in 0..3_000u64 {
        let s = tl.step_start(k).as_nanos() as i128;
        assert!(
            (s - i128::from(k * p)).abs() <= i128::from(j),
            "step {k} drifted"
        );
        let len = (tl.step_start(k + 1) - tl.step_start(k)).as_nanos() as u64;
        lengths.insert(len);
        min_len = min_len.min(len);
        max_len = max_len.max(len);
        let (b0, b1) = tl.burst_of_step(k);
        assert!(b0 >= tl.step_start(k) && b1 <= tl.step_start(k + 1));
        let d = (b1 - b0).as_nanos() as u64;
        min_d = min_d.min(d);
        max_d = max_d.max(d);
        assert_eq!(tl.step_at(b0), k);
        // Every step moves exactly R on every HCA.
        if k < 300 {
            assert_eq!(burst_between(&m, 1, Link::Hca(3), k, k + 1), R);
        }
    }
    assert_eq!(tl.step_start(0), Duration::ZERO);
    assert!(
        lengths.len() > 1_000,
        "{} distinct step lengths",
        lengths.len()
    );
    assert!(min_len >= p - 2 * j && max_len <= p + 2 * j);
    assert!(min_len < p - j && max_len > p + j, "{min_len} {max_len}");
    assert!((p + 2 * j) as f64 / p as f64 <= 1.05 + 1e-9);
    // Burst ±3 % (rate ±3 %).
    assert!(min_d >= 19_687_500 - 2 * 295_305 && max_d <= 19_687_500 + 2 * 295_305);
    assert!(min_d < 19_687_500 - 295_305 && max_d > 19_687_500 + 295_305);
    // Counters stay monotonic and exact over long times.
    let mut prev = 0;
    for i in 0..5_000u64 {
        let t = ns(i * 7_777_777);
        let v = m.port_counter(0, 0, PortCounter::PortXmitWait, t).unwrap();
        assert!(v >= prev);
        prev = v;
    }
    let k = 10_000;
    let busy = m
        .link(0, Link::Hca(0))
        .unwrap()
        .tx
        .burst_active_ns_at(tl.step_start(k));
    let sum: u128 = (0..k)
        .map(|i| {
            let (a, b) = tl.burst_of_step(i);
            (b - a).as_nanos()
        })
        .sum();
    assert_eq!(busy, sum);
    // The same seed gives the same steps; another seed other steps, same nominal period.
    let again = model(&[Variant::Jitter]);
    assert_eq!(again, m);
    let other = JobModel::new(&ClusterSpec {
        seed: 2,
        ..ClusterSpec::with_variants(Scenario::Healthy, &[Variant::Jitter])
    })
    .unwrap();
    assert_eq!(other.timeline().period, tl.period);
    assert_ne!(other.timeline().step_start(5), tl.step_start(5));
}

#[test]
fn two_jobs_run_on_disjoint_nodes_with_their_own_rings() {
    let m = model(&[Variant::TwoJobs]);
    let jobs = m.jobs();
    assert_eq!(jobs.len(), 2);
    let (a, b) = (&jobs[0], &jobs[1]);
    assert_eq!((a.id.as_str(), b.id.as_str()), ("1001", "1002"));
    assert_eq!(a.nodes, vec![0, 1, 2, 3]);
    assert_eq!(b.nodes, vec![5, 6, 7]);
    assert!(a.nodes.iter().all(|n| !b.nodes.contains(n)));
    assert_eq!(m.placement().idle_nodes(), vec![4]);
    // Job 1001: 32 ranks of a 220 MB AllReduce, R = 426 250 000 B in 19.375 ms, step 309.375 ms.
    assert_eq!((a.ranks, a.allreduce_bytes), (32, 220_000_000));
    assert_eq!(a.per_rank_bytes_per_step, 426_250_000);
    assert_eq!(a.timeline.period, ns(309_375_000));
    // Job 1002: 24 ranks of a 110 MB AllReduce with 450 ms compute: R = 210 833 333 B in 9.583334 ms.
    assert_eq!((b.ranks, b.allreduce_bytes), (24, 110_000_000));
    assert_eq!(b.per_rank_bytes_per_step, 210_833_333);
    assert_eq!(b.timeline.burst_start, ms(440));
    assert_eq!(b.timeline.burst_duration, ns(9_583_334));
    assert_eq!(b.timeline.period, ms(450));
    assert_eq!(m.node_timeline(6), Some(&b.timeline));
    // Each node moves its own job's bytes, on its own job's steps.
    for (node, job) in [(0, a), (3, a), (5, b), (7, b)] {
        let s = m.expected_step(node, Link::Hca(2)).unwrap();
        assert_eq!(s.tx_bytes_per_step, job.per_rank_bytes_per_step);
        assert_eq!(
            burst_between(&m, node, Link::Hca(2), 4, 9),
            5 * job.per_rank_bytes_per_step
        );
    }
    assert_eq!(
        m.expected_step(4, Link::Hca(2)).unwrap().tx_bytes_per_step,
        0
    );
    // At 300 ms job 1001 is mid-burst and job 1002 still computes.
    let t = ms(300);
    assert!(m.expected_link_bytes(1, Link::Hca(0), t).unwrap().tx_burst > 0);
    assert_eq!(
        m.expected_link_bytes(6, Link::Hca(0), t).unwrap().tx_burst,
        0
    );
    // A fault on node-03 slows job 1001 only.
    let faulty = JobModel::new(&ClusterSpec::with_variants(
        Scenario::ManagementNic,
        &[Variant::TwoJobs],
    ))
    .unwrap();
    assert!(faulty.jobs()[0].timeline.period > a.timeline.period);
    assert_eq!(faulty.jobs()[1].timeline, b.timeline);
    let cpu = JobModel::new(&ClusterSpec::with_variants(
        Scenario::CpuBound,
        &[Variant::TwoJobs],
    ))
    .unwrap();
    assert_eq!(cpu.jobs()[0].timeline.host, ms(250));
    assert_eq!(cpu.jobs()[1].timeline.host, Duration::ZERO);
}

#[test]
fn rails8_split_the_node_share_over_eight_rails() {
    let spec = ClusterSpec {
        nodes: 4,
        gpus_per_node: 2,
        ..ClusterSpec::with_variants(Scenario::Healthy, &[Variant::Rails8])
    };
    let m = JobModel::new(&spec).unwrap();
    assert_eq!(m.hca_count(), 8);
    // 8 ranks: R = 385 000 000; the node's 2·R over 8 rails: 96 250 000 each, in 4.375 ms.
    assert_eq!(m.per_rank_bytes_per_step(), 385_000_000);
    for node in 0..4 {
        let rails: Vec<u64> = (0..8)
            .map(|g| {
                m.expected_step(node, Link::Hca(g))
                    .unwrap()
                    .tx_bytes_per_step
            })
            .collect();
        assert_eq!(rails, vec![96_250_000; 8]);
        assert_eq!(rails.iter().sum::<u64>(), 2 * 385_000_000);
    }
    assert_eq!(m.timeline().burst_duration, ns(4_375_000));
    assert!(matches!(
        m.hca(0, 8),
        Err(SimError::OutOfRange {
            what: "gpu",
            index: 8,
            count: 8
        })
    ));
    assert_eq!(m.netdev(0, Link::Ipoib(7)).unwrap().speed_mbps, 200_000);
    // A share that does not divide: the remainder one byte each on the lowest rails.
    let odd = JobModel::new(&ClusterSpec {
        allreduce_bytes: 220_000_001,
        ..spec.clone()
    })
    .unwrap();
    let rails: Vec<u64> = (0..8)
        .map(|g| {
            odd.expected_step(1, Link::Hca(g))
                .unwrap()
                .tx_bytes_per_step
        })
        .collect();
    assert_eq!(odd.per_rank_bytes_per_step(), 385_000_001);
    assert_eq!(rails.iter().sum::<u64>(), 770_000_002);
    assert_eq!(rails[..3], [96_250_001, 96_250_001, 96_250_000]);
    // With 8 GPUs per node, one rail per GPU carries R as without the variant.
    let full = model(&[Variant::Rails8]);
    assert_eq!(
        full.expected_step(3, Link::Hca(5))
            .unwrap()
            .tx_bytes_per_step,
        R
    );
    // The fault port may be any rail.
    let deg = JobModel::new(&ClusterSpec {
        scenario: Scenario::DegradedLink,
        fault_hca: 7,
        ..spec
    })
    .unwrap();
    assert_eq!(deg.hca(3, 7).unwrap().rate_text, "100 Gb/sec (2X HDR)");
    assert_eq!(deg.timeline().burst_duration, ns(8_750_000));
}

#[test]
fn seed_scale_has_the_design_magnitudes_in_short_bursts() {
    let spec = ClusterSpec {
        nodes: 4,
        gpus_per_node: 2,
        ..ClusterSpec::with_variants(Scenario::Healthy, &[Variant::SeedScale])
    };
    let m = JobModel::new(&spec).unwrap();
    // 64 ranks and 220 MB whatever the simulated 4 × 2: 433 125 000 B per HCA per step in 19.6875 ms.
    assert_eq!(m.per_rank_bytes_per_step(), R);
    let tl = m.timeline();
    assert_eq!(tl.burst_duration, ns(19_687_500));
    assert_eq!(tl.period, ns(309_687_500));
    assert!(tl.burst_duration < ms(50));
    for node in 0..4 {
        let s = m.expected_step(node, Link::Hca(1)).unwrap();
        assert_eq!(s.tx_bytes_per_step, R);
        assert!((s.burst_tx_bytes_per_second - 22e9).abs() < 1.0);
        assert_eq!(burst_between(&m, node, Link::Hca(1), 3, 4), R);
    }
    // A 50 ms sample holding the whole burst averages 39 % of the burst rate.
    let (b0, _) = tl.burst_of_step(2);
    let f = m.link(0, Link::Hca(0)).unwrap().tx;
    let w = f.burst_bytes_at(b0 + ms(50)) - f.burst_bytes_at(b0);
    assert_eq!(w, R);
    assert!((w as f64 / 0.05 / 22e9 - 0.39375).abs() < 1e-9);
    // Without the variant the small cluster moves 8 ranks' bytes.
    let plain = JobModel::new(&ClusterSpec {
        variants: vec![],
        ..spec
    })
    .unwrap();
    assert_eq!(plain.per_rank_bytes_per_step(), 385_000_000);
}

#[test]
fn flapping_port_goes_down_reroutes_and_counts() {
    let m = model(&[Variant::Flapping]);
    let tl = m.timeline();
    // Rerouted steps need 495 000 000 B on the other rails: 22.5 ms, and the step leaves room for it.
    assert_eq!(tl.period, ns(312_500_000));
    let flapped: Vec<u64> = (0..26).filter(|&k| tl.is_flapped(k)).collect();
    assert_eq!(flapped, vec![10, 11, 12, 23, 24, 25]);
    let bursts = |k| {
        let (a, b) = tl.burst_of_step(k);
        b - a
    };
    assert_eq!(bursts(9), ns(19_687_500));
    assert_eq!(bursts(10), ns(22_500_000));
    // Bytes: node-03 mlx5_0 moves nothing while down, its 7 sibling rails 433 125 000 + 61 875 000.
    for k in [9, 10, 13] {
        let down = tl.is_flapped(k);
        let (tx, rx) = m.expected_step_bytes(3, Link::Hca(0), k).unwrap();
        assert_eq!((tx, rx), if down { (0, 0) } else { (R, R) });
        let mut total = tx;
        for g in 1..8 {
            let (tx, _) = m.expected_step_bytes(3, Link::Hca(g), k).unwrap();
            assert_eq!(tx, if down { 495_000_000 } else { R });
            total += tx;
        }
        assert_eq!(total, 8 * R, "the node's share is kept in step {k}");
        assert_eq!(
            burst_between(&m, 3, Link::Hca(0), k, k + 1),
            tx_of(&m, 3, 0, k)
        );
        assert_eq!(m.expected_step_bytes(2, Link::Hca(0), k).unwrap().0, R);
    }
    // State and link_downed: down at step 10 (3.125 s), up at step 13 (4.0625 s), down again at step 23.
    let at = |t: Duration| {
        (
            m.port_state(3, 0, t).unwrap(),
            m.port_phys_state(3, 0, t).unwrap(),
            m.netdev_operstate(3, Link::Ipoib(0), t).unwrap(),
            m.netdev_carrier(3, Link::Ipoib(0), t).unwrap(),
            m.port_counter(3, 0, PortCounter::LinkDowned, t).unwrap(),
        )
    };
    assert_eq!(
        at(ns(3_124_999_999)),
        ("4: ACTIVE", "5: LinkUp", "up", "1", 0)
    );
    assert_eq!(
        at(ns(3_125_000_000)),
        ("1: DOWN", "2: Polling", "down", "0", 1)
    );
    assert_eq!(
        at(ns(4_062_500_000)),
        ("4: ACTIVE", "5: LinkUp", "up", "1", 1)
    );
    assert_eq!(
        at(ns(23 * 312_500_000)),
        ("1: DOWN", "2: Polling", "down", "0", 2)
    );
    // Saturates at 8 bits after 255 flaps (13 steps each).
    assert_eq!(
        m.port_counter(3, 0, PortCounter::LinkDowned, tl.step_start(13 * 300))
            .unwrap(),
        255
    );
    assert_eq!(m.link_downs(3, 0, tl.step_start(13 * 300)).unwrap(), 300);
    // Other ports never go down.
    assert_eq!(m.port_state(3, 1, ns(3_200_000_000)).unwrap(), "4: ACTIVE");
    assert_eq!(m.port_state(2, 0, ns(3_200_000_000)).unwrap(), "4: ACTIVE");
    assert_eq!(
        m.port_counter(2, 0, PortCounter::LinkDowned, ms(100_000))
            .unwrap(),
        0
    );
    // port_xmit_wait stands still while the port is down, and its siblings burst longer.
    let w = |g, k| {
        m.port_counter(3, g, PortCounter::PortXmitWait, tl.step_start(k))
            .unwrap()
    };
    assert_eq!(w(0, 13), w(0, 10));
    assert_eq!(
        w(1, 13) - w(1, 10),
        3 * 22_500_000 * 20_000 / 1_000_000 * 250 / 1_000
    );
    assert_eq!(
        m.hw_counter(3, 0, HwCounter::NpCnpSent, tl.step_start(13))
            .unwrap(),
        w(0, 13) / 4096
    );
}

fn tx_of(m: &JobModel, node: usize, g: usize, k: u64) -> u64 {
    m.expected_step_bytes(node, Link::Hca(g), k).unwrap().0
}

#[test]
fn variants_compose_with_every_scenario_and_keep_step_bytes_exact() {
    let healthy: Vec<Variant> = Variant::ALL.into_iter().filter(|v| !v.is_fault()).collect();
    for sc in Scenario::ALL_NAMED {
        for variants in [healthy.clone(), Variant::ALL.to_vec()] {
            let spec = ClusterSpec {
                nodes: 8,
                gpus_per_node: 2,
                ..ClusterSpec::with_variants(sc, &variants)
            };
            let m = JobModel::new(&spec).unwrap_or_else(|e| panic!("{sc} {variants:?}: {e}"));
            assert!(
                m.describe().contains("rails8: 8 HCA rails"),
                "{}",
                m.describe()
            );
            for node in 0..8 {
                let Some(job) = m.job_of(node) else {
                    for g in 0..8 {
                        assert_eq!(tx_of(&m, node, g, 3), 0);
                    }
                    continue;
                };
                let share = job.per_rank_bytes_per_step * 2;
                for k in [0, 10, 11, 40] {
                    let rails: u64 = (0..8).map(|g| tx_of(&m, node, g, k)).sum();
                    let eth = m.expected_step_bytes(node, Link::Eth0, k).unwrap().0;
                    assert_eq!(rails + eth, share, "{sc} node {node} step {k}");
                    for g in [0, 5] {
                        assert_eq!(
                            burst_between(&m, node, Link::Hca(g), k, k + 1),
                            tx_of(&m, node, g, k),
                            "{sc} node {node} rail {g} step {k}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn every_counter_is_monotonic_with_all_variants() {
    for sc in [
        Scenario::Healthy,
        Scenario::DegradedLink,
        Scenario::LinkErrors,
    ] {
        let spec = ClusterSpec {
            nodes: 8,
            gpus_per_node: 2,
            ..ClusterSpec::with_variants(sc, &Variant::ALL)
        };
        let m = JobModel::new(&spec).unwrap();
        let fault = spec.resolved_fault_node();
        for node in [0, fault, 5] {
            for g in [0, 1, 7] {
                let mut prev: Vec<u64> = vec![0; PortCounter::ALL.len() + NetStat::ALL.len() * 2];
                let times = (0..3_000u64)
                    .map(|i| i * 2_300_001)
                    .chain([100, 1_000, 100_000].map(|s| s * 1_000_000_000));
                for t in times.map(ns) {
                    let mut now: Vec<u64> = PortCounter::ALL
                        .into_iter()
                        .map(|c| m.port_counter(node, g, c, t).unwrap())
                        .collect();
                    for l in [Link::Eth0, Link::Ipoib(g)] {
                        now.extend(NetStat::ALL.map(|s| m.net_stat(node, l, s, t).unwrap()));
                    }
                    for (i, (a, b)) in prev.iter().zip(&now).enumerate() {
                        assert!(
                            b >= a,
                            "{sc} node {node} rail {g} counter {i} went back at {t:?}"
                        );
                    }
                    prev = now;
                }
            }
        }
    }
}

#[test]
fn same_seed_same_counters_for_every_variant() {
    for v in Variant::ALL {
        let spec = ClusterSpec {
            nodes: 4,
            gpus_per_node: 2,
            ..ClusterSpec::with_variants(Scenario::Healthy, &[v])
        };
        let (a, b) = (JobModel::new(&spec).unwrap(), JobModel::new(&spec).unwrap());
        assert_eq!(a, b, "{v}");
        let reseeded = JobModel::new(&ClusterSpec {
            seed: 99,
            ..spec.clone()
        })
        .unwrap();
        let t = ms(20_017);
        let fault = spec.resolved_fault_node();
        for node in [0, fault] {
            for c in [
                PortCounter::PortXmitData,
                PortCounter::LinkDowned,
                PortCounter::PortXmitWait,
            ] {
                assert_eq!(
                    a.port_counter(node, 0, c, t).unwrap(),
                    b.port_counter(node, 0, c, t).unwrap()
                );
            }
            for s in NetStat::ALL {
                assert_eq!(
                    a.net_stat(node, Link::Eth0, s, t).unwrap(),
                    b.net_stat(node, Link::Eth0, s, t).unwrap()
                );
            }
        }
        assert_ne!(
            a.net_stat(0, Link::Eth0, NetStat::TxBytes, t).unwrap(),
            reseeded
                .net_stat(0, Link::Eth0, NetStat::TxBytes, t)
                .unwrap(),
            "{v}: the seed reaches the counters"
        );
    }
}

#[test]
fn variant_specs_are_validated() {
    let field = |spec: ClusterSpec| match JobModel::new(&spec) {
        Err(SimError::InvalidSpec { field, .. }) => field,
        other => panic!("expected invalid spec, got {other:?}"),
    };
    let with = |sc, v: &[Variant]| ClusterSpec::with_variants(sc, v);
    assert_eq!(
        field(with(Scenario::Healthy, &[Variant::Jitter, Variant::Jitter])),
        "variants"
    );
    let constant = Scenario::Constant {
        tx_bytes_per_second: 1,
        rx_bytes_per_second: 1,
    };
    assert_eq!(field(with(constant, &[Variant::Storage])), "variants");
    assert_eq!(
        field(ClusterSpec {
            nodes: 2,
            ..with(Scenario::Healthy, &[Variant::TwoJobs])
        }),
        "variants"
    );
    assert_eq!(
        field(ClusterSpec {
            nodes: 1,
            ..with(Scenario::Healthy, &[Variant::IdleNodes])
        }),
        "variants"
    );
    assert_eq!(
        field(ClusterSpec {
            gpus_per_node: 1,
            ..with(Scenario::Healthy, &[Variant::Flapping])
        }),
        "variants"
    );
    // One GPU but eight rails: a flapping port can reroute.
    assert!(JobModel::new(&ClusterSpec {
        gpus_per_node: 1,
        ..with(Scenario::Healthy, &[Variant::Flapping, Variant::Rails8])
    })
    .is_ok());
    assert_eq!(
        field(ClusterSpec {
            fault_node: Some(7),
            ..with(Scenario::Straggler, &[Variant::IdleNodes])
        }),
        "fault_node"
    );
    assert_eq!(
        field(ClusterSpec {
            fault_hca: 8,
            ..with(Scenario::Healthy, &[Variant::Rails8])
        }),
        "fault_hca"
    );
}

#[test]
fn simulated_gpus_follow_their_node_job() {
    use commwatch_agent::source::gpu::GpuBackend;
    use commwatch_sim::SimGpus;
    use std::time::Instant;

    // Idle nodes: GPUs idle, NVLink still.
    let m = model(&[Variant::IdleNodes, Variant::TwoJobs]);
    let idle = m.placement().idle_nodes();
    assert_eq!(idle, vec![3, 6, 7]);
    let mut g = SimGpus::new(&m, 6, Instant::now());
    assert_eq!(g.nvlink_bytes_per_gpu_per_step(), 0);
    g.set_time(Some(Duration::from_secs(10)));
    assert_eq!(g.utilization(0).unwrap().gpu_percent, 0);
    assert_eq!(g.sm_activity(Duration::ZERO, Duration::from_secs(10)), 0.0);
    assert_eq!(g.link_bytes_at(0, Duration::from_secs(10)), 0);
    // Job 1002's node moves its own ring's NVLink share on its own steps: R·7/8 of 16 ranks, 110 MB.
    let job = m.job_of(5).unwrap();
    assert_eq!(job.id, "1002");
    let g = SimGpus::new(&m, 5, Instant::now());
    let r = job.per_rank_bytes_per_step;
    assert_eq!(r, 2 * 15 * 110_000_000 / 16);
    assert_eq!(g.nvlink_bytes_per_gpu_per_step(), r * 7 / 8);
    let tl = &job.timeline;
    assert_eq!(
        g.link_bytes_at(4, tl.step_start(6)) - g.link_bytes_at(4, tl.step_start(5)),
        g.link_bytes_per_step(4)
    );
    // Jitter and buckets: NVLink bytes move in each step's exact bursts.
    let m = model(&[Variant::Jitter, Variant::Overlap]);
    let g = SimGpus::new(&m, 2, Instant::now());
    let tl = m.timeline();
    for k in [0, 17, 333] {
        let bursts = tl.bursts_of_step(k);
        assert_eq!(bursts.len(), 4);
        let at = |t| g.link_bytes_at(9, t);
        assert_eq!(
            at(tl.step_start(k + 1)) - at(tl.step_start(k)),
            g.link_bytes_per_step(9)
        );
        // Nothing moves between the buckets.
        assert_eq!(at(bursts[1].0), at(bursts[0].1));
        assert!(bursts[3].1 <= tl.step_start(k + 1));
    }
}
