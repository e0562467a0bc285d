//! The pure model: exact numbers for every scenario.

use std::time::Duration;

use commwatch_sim::counters::{saturating_events, saturation_limit};
use commwatch_sim::model::{IB_PACKET_BYTES, XMIT_WAIT_TICKS_PER_SECOND};
use commwatch_sim::{
    ClusterSpec, HwCounter, JobModel, Link, NetStat, PortCounter, Scenario, SimError,
};

const R: u64 = 433_125_000; // 2·63/64 · 220 MB

fn model(sc: Scenario) -> JobModel {
    JobModel::new(&ClusterSpec::with_scenario(sc)).expect("valid spec")
}

fn ns(v: u64) -> Duration {
    Duration::from_nanos(v)
}

#[test]
fn per_rank_bytes_follow_ring_allreduce() {
    let m = model(Scenario::Healthy);
    assert_eq!(m.per_rank_bytes_per_step(), R);
    for node in 0..8 {
        for g in 0..8 {
            let s = m.expected_step(node, Link::Hca(g)).unwrap();
            assert_eq!(s.tx_bytes_per_step, R);
            assert_eq!(s.rx_bytes_per_step, R);
            assert_eq!(s.capacity_bytes_per_second, 25_000_000_000);
            assert_eq!(s.effective_bytes_per_second, 22_000_000_000);
            assert!((s.burst_tx_bytes_per_second - 22e9).abs() < 1.0);
        }
        assert_eq!(
            m.expected_step(node, Link::Eth0).unwrap().tx_bytes_per_step,
            0
        );
        assert_eq!(
            m.expected_step(node, Link::Ipoib(3))
                .unwrap()
                .tx_bytes_per_step,
            0
        );
    }
    // Other sizes: 2 nodes × 4 GPUs, 1 GB → 2·7/8 GB.
    let spec = ClusterSpec {
        nodes: 2,
        gpus_per_node: 4,
        allreduce_bytes: 1_000_000_000,
        ..ClusterSpec::default()
    };
    assert_eq!(
        JobModel::new(&spec).unwrap().per_rank_bytes_per_step(),
        1_750_000_000
    );
    // One node: nothing crosses the network.
    let spec = ClusterSpec {
        nodes: 1,
        ..ClusterSpec::default()
    };
    let one = JobModel::new(&spec).unwrap();
    assert_eq!(one.per_rank_bytes_per_step(), 0);
    assert_eq!(one.timeline().burst_duration, Duration::ZERO);
    assert_eq!(one.timeline().period, Duration::from_millis(300));
}

#[test]
fn healthy_timeline_and_burst_shape() {
    let m = model(Scenario::Healthy);
    let tl = m.timeline();
    assert_eq!(tl.burst_duration, ns(19_687_500));
    assert_eq!(tl.burst_start, Duration::from_millis(290));
    assert_eq!(tl.period, ns(309_687_500));
    assert_eq!(tl.exposed_comm(), ns(9_687_500));
    let f = m.link(2, Link::Hca(5)).unwrap().tx;
    let period = 309_687_500u64;
    for k in 0..5u64 {
        let base = k * period;
        assert_eq!(f.burst_bytes_at(ns(base)), k * R);
        assert_eq!(f.burst_bytes_at(ns(base + 290_000_000)), k * R);
        assert_eq!(
            f.burst_bytes_at(ns(base + 290_000_000 + 9_843_750)),
            k * R + R / 2
        );
        assert_eq!(
            f.burst_bytes_at(ns(base + 290_000_000 + 19_687_500)),
            (k + 1) * R
        );
        // The burst ends exactly at the step boundary (period = start + duration here).
        assert_eq!(f.burst_bytes_at(ns(base + period - 1)), k * R + 433_124_978);
        assert_eq!(
            tl.burst_of_step(k),
            (ns(base + 290_000_000), ns(base + 309_687_500))
        );
    }
    // bytes = burst + floor(rate · t)
    let t = ns(1_234_567_891);
    let bg = f.background_bytes_per_second;
    assert!((16_000..32_000).contains(&bg));
    assert_eq!(
        f.background_bytes_at(t),
        (u128::from(bg) * 1_234_567_891 / 1_000_000_000) as u64
    );
    assert_eq!(
        f.bytes_at(t),
        f.burst_bytes_at(t) + f.background_bytes_at(t)
    );
    assert_eq!(
        f.packets_at(t),
        f.burst_bytes_at(t) / IB_PACKET_BYTES + f.background_bytes_at(t) / 256
    );
}

#[test]
fn every_counter_is_monotonic_in_every_scenario() {
    let mut scenarios = Scenario::ALL_NAMED.to_vec();
    scenarios.push(Scenario::Constant {
        tx_bytes_per_second: 1_000_003,
        rx_bytes_per_second: 7,
    });
    for sc in scenarios {
        let spec = ClusterSpec {
            nodes: 4,
            gpus_per_node: 2,
            ..ClusterSpec::with_scenario(sc)
        };
        let m = JobModel::new(&spec).unwrap();
        for node in [0, 3] {
            for g in 0..2 {
                let mut prev_port = vec![0u64; PortCounter::ALL.len()];
                let mut prev_hw = vec![0u64; HwCounter::ALL.len()];
                let mut prev_net = vec![0u64; NetStat::ALL.len()];
                // 0..2 s in 1.7 ms steps (crosses bursts and step edges), then long times.
                let times = (0..1200u64)
                    .map(|i| i * 1_700_000)
                    .chain([10, 100, 1_000, 10_000, 100_000].map(|s| s * 1_000_000_000));
                for t in times.map(ns) {
                    for (i, c) in PortCounter::ALL.into_iter().enumerate() {
                        let v = m.port_counter(node, g, c, t).unwrap();
                        assert!(v >= prev_port[i], "{sc} {c:?} went back at {t:?}");
                        assert!(v <= c.max_value());
                        prev_port[i] = v;
                    }
                    for (i, c) in HwCounter::ALL.into_iter().enumerate() {
                        let v = m.hw_counter(node, g, c, t).unwrap();
                        assert!(v >= prev_hw[i], "{sc} {c:?} went back at {t:?}");
                        prev_hw[i] = v;
                    }
                    for (i, s) in NetStat::ALL.into_iter().enumerate() {
                        let link = if g == 0 { Link::Eth0 } else { Link::Ipoib(g) };
                        let v = m.net_stat(node, link, s, t).unwrap();
                        assert!(v >= prev_net[i], "{sc} {s:?} went back at {t:?}");
                        prev_net[i] = v;
                    }
                }
            }
        }
    }
}

#[test]
fn management_nic_moves_the_node_share_onto_eth0() {
    let m = model(Scenario::ManagementNic);
    let tl = m.timeline();
    // 8·R = 3 465 000 000 B at 9.8e9 B/s = 353.571428…ms, rounded up to the ns.
    assert_eq!(tl.burst_duration, ns(353_571_429));
    assert_eq!(tl.period, ns(290_000_000 + 353_571_429));
    for g in 0..8 {
        let s = m.expected_step(3, Link::Hca(g)).unwrap();
        assert_eq!((s.tx_bytes_per_step, s.rx_bytes_per_step), (0, 0));
        assert_eq!(s.burst_tx_bytes_per_second, 0.0);
        // Other nodes still move R, stretched over the long burst.
        let o = m.expected_step(2, Link::Hca(g)).unwrap();
        assert_eq!(o.tx_bytes_per_step, R);
        assert!((o.burst_tx_bytes_per_second - R as f64 / 0.353_571_429).abs() < 1.0);
    }
    let eth = m.expected_step(3, Link::Eth0).unwrap();
    assert_eq!(eth.tx_bytes_per_step, 8 * R);
    assert_eq!(eth.rx_bytes_per_step, 8 * R);
    assert_eq!(eth.capacity_bytes_per_second, 12_500_000_000);
    assert_eq!(eth.effective_bytes_per_second, 9_800_000_000);
    assert!((eth.burst_tx_bytes_per_second - 9.8e9).abs() < 30.0);
    assert_eq!(m.expected_step(2, Link::Eth0).unwrap().tx_bytes_per_step, 0);
    // Over one whole step the faulty node's HCA moves only background.
    let p = tl.period;
    let h = m.expected_link_bytes(3, Link::Hca(0), p).unwrap();
    assert_eq!(h.tx_burst, 0);
    assert!(h.tx < 32_000);
    let e = m.expected_link_bytes(3, Link::Eth0, p).unwrap();
    assert_eq!(e.tx_burst, 8 * R);
    assert!(e.tx - e.tx_burst < 5_000_000);
    assert!(m
        .describe()
        .contains("node-03 sends its NCCL traffic over eth0"));
    // Fewer than 4 nodes: the last one is faulty.
    let spec = ClusterSpec {
        nodes: 3,
        ..ClusterSpec::demo()
    };
    let m3 = JobModel::new(&spec).unwrap();
    assert_eq!(
        m3.expected_step(2, Link::Hca(0)).unwrap().tx_bytes_per_step,
        0
    );
    assert!(m3.expected_step(2, Link::Eth0).unwrap().tx_bytes_per_step > 0);
}

#[test]
fn degraded_link_caps_its_port_and_stretches_the_burst() {
    let m = model(Scenario::DegradedLink);
    let h = m.hca(3, 0).unwrap();
    assert_eq!(h.rate_text, "100 Gb/sec (2X HDR)");
    assert_eq!(h.link.capacity_bytes_per_second, 12_500_000_000);
    assert_eq!(h.link.effective_bytes_per_second, 11_000_000_000);
    assert_eq!(m.hca(3, 1).unwrap().rate_text, "200 Gb/sec (4X HDR)");
    assert_eq!(m.netdev(3, Link::Ipoib(0)).unwrap().speed_mbps, 100_000);
    assert_eq!(m.netdev(3, Link::Ipoib(1)).unwrap().speed_mbps, 200_000);
    assert_eq!(m.timeline().burst_duration, ns(39_375_000));
    assert_eq!(m.timeline().period, ns(329_375_000));
    let s = m.expected_step(3, Link::Hca(0)).unwrap();
    assert!((s.burst_tx_bytes_per_second - 11e9).abs() < 1.0);
    // port_xmit_wait over one step: active 39.375 ms × share × 250e6 ticks/s.
    let t = m.timeline().period;
    let slow = m.port_counter(3, 0, PortCounter::PortXmitWait, t).unwrap();
    let fine = m.port_counter(3, 1, PortCounter::PortXmitWait, t).unwrap();
    let ticks = |ppm: u128| {
        (39_375_000u128 * ppm * u128::from(XMIT_WAIT_TICKS_PER_SECOND) / 1_000_000_000_000_000)
            as u64
    };
    assert_eq!(slow, ticks(400_000));
    assert_eq!(fine, ticks(20_000));
    assert_eq!(fine, 196_875);
    assert_eq!(slow, 3_937_500);
    assert_eq!(
        m.hw_counter(3, 0, HwCounter::NpCnpSent, t).unwrap(),
        3_937_500 / 4096
    );

    let one_lane = ClusterSpec {
        degraded_lanes: 1,
        fault_node: Some(5),
        fault_hca: 7,
        ..ClusterSpec::with_scenario(Scenario::DegradedLink)
    };
    let m1 = JobModel::new(&one_lane).unwrap();
    assert_eq!(m1.hca(5, 7).unwrap().rate_text, "50 Gb/sec (1X HDR)");
    assert_eq!(m1.timeline().burst_duration, ns(78_750_000));
}

#[test]
fn link_errors_rise_and_saturate_at_pma_width() {
    let m = model(Scenario::LinkErrors);
    let at = |c, s: u64| m.port_counter(3, 0, c, Duration::from_secs(s)).unwrap();
    assert_eq!(at(PortCounter::SymbolError, 10), 400);
    assert_eq!(at(PortCounter::LinkErrorRecovery, 10), 2);
    assert_eq!(at(PortCounter::PortRcvErrors, 10), 125);
    assert_eq!(
        m.hw_counter(3, 0, HwCounter::OutOfSequence, Duration::from_secs(10))
            .unwrap(),
        125
    );
    // symbol_error reaches 65535 at 1638.375 s and stays.
    let sat = Duration::from_millis(1_638_375);
    assert_eq!(
        m.port_counter(3, 0, PortCounter::SymbolError, sat - ns(1))
            .unwrap(),
        65_534
    );
    assert_eq!(
        m.port_counter(3, 0, PortCounter::SymbolError, sat).unwrap(),
        65_535
    );
    assert_eq!(at(PortCounter::SymbolError, 100_000), 65_535);
    assert_eq!(at(PortCounter::LinkErrorRecovery, 1_275), 255);
    assert_eq!(at(PortCounter::LinkErrorRecovery, 100_000), 255);
    assert_eq!(at(PortCounter::PortRcvErrors, 100_000), 65_535);
    assert_eq!(at(PortCounter::LinkDowned, 100_000), 0);
    // Other ports stay clean; traffic is as healthy.
    for (node, g) in [(3, 1), (0, 0)] {
        for c in [
            PortCounter::SymbolError,
            PortCounter::LinkErrorRecovery,
            PortCounter::PortRcvErrors,
        ] {
            assert_eq!(
                m.port_counter(node, g, c, Duration::from_secs(100))
                    .unwrap(),
                0
            );
        }
    }
    assert_eq!(m.timeline(), model(Scenario::Healthy).timeline());
    assert_eq!(saturation_limit(4), 15);
    assert_eq!(saturating_events(1_000, 1, 8), 255);
    assert_eq!(saturating_events(1_000, 0, 8), 0);
}

#[test]
fn straggler_noverlap_cpubound_timelines() {
    let s = model(Scenario::Straggler);
    let tl = s.timeline();
    assert_eq!(tl.compute[3], Duration::from_millis(390));
    assert_eq!(tl.compute[0], Duration::from_millis(300));
    assert_eq!(tl.burst_start, Duration::from_millis(380));
    assert_eq!(tl.period, ns(399_687_500));
    // Where a healthy job is mid-burst, every node of the straggling job has not started.
    let h = model(Scenario::Healthy);
    let t = Duration::from_millis(300);
    for node in [0, 3, 7] {
        assert!(
            h.expected_link_bytes(node, Link::Hca(1), t)
                .unwrap()
                .tx_burst
                > 0
        );
        assert_eq!(
            s.expected_link_bytes(node, Link::Hca(1), t)
                .unwrap()
                .tx_burst,
            0
        );
        let done = s
            .expected_link_bytes(node, Link::Hca(1), ns(399_687_500))
            .unwrap();
        assert_eq!(done.tx_burst, R);
    }

    let n = model(Scenario::NoOverlap);
    assert_eq!(n.timeline().burst_start, Duration::from_millis(300));
    assert_eq!(n.timeline().period, ns(319_687_500));
    assert_eq!(n.timeline().exposed_comm(), ns(19_687_500));

    let c = model(Scenario::CpuBound);
    assert_eq!(c.timeline().host, Duration::from_millis(250));
    assert_eq!(c.timeline().burst_start, Duration::from_millis(540));
    assert_eq!(c.timeline().period, ns(559_687_500));
    assert!((c.timeline().gpu_busy_share(0) - 0.3 / 0.559_687_5).abs() < 1e-12);
    for m in [&n, &c] {
        assert_eq!(
            m.expected_step(1, Link::Hca(2)).unwrap(),
            h.expected_step(1, Link::Hca(2)).unwrap()
        );
    }
}

#[test]
fn constant_rates_are_exact() {
    let spec = ClusterSpec {
        nodes: 2,
        gpus_per_node: 2,
        scenario: Scenario::Constant {
            tx_bytes_per_second: 1_000_000_000,
            rx_bytes_per_second: 400_000_000,
        },
        ..ClusterSpec::default()
    };
    let m = JobModel::new(&spec).unwrap();
    let d = |c, a: Duration, b: Duration| {
        m.port_counter(1, 1, c, b).unwrap() - m.port_counter(1, 1, c, a).unwrap()
    };
    let (a, b) = (Duration::from_millis(1_500), Duration::from_millis(2_500));
    assert_eq!(d(PortCounter::PortXmitData, a, b) * 4, 1_000_000_000);
    assert_eq!(d(PortCounter::PortRcvData, a, b) * 4, 400_000_000);
    assert_eq!(
        d(PortCounter::PortXmitPackets, a, b),
        1_000_000_000 / 4096 + 1
    );
    assert_eq!(d(PortCounter::MulticastXmitPackets, a, b), 0);
    assert_eq!(d(PortCounter::PortXmitWait, a, b), 0);
    for s in NetStat::ALL {
        let v0 = m.net_stat(0, Link::Eth0, s, a).unwrap();
        assert_eq!(m.net_stat(0, Link::Eth0, s, b).unwrap(), v0);
    }
}

#[test]
fn deterministic_for_a_seed() {
    let a = JobModel::new(&ClusterSpec::demo()).unwrap();
    let b = JobModel::new(&ClusterSpec::demo()).unwrap();
    assert_eq!(a, b);
    let c = JobModel::new(&ClusterSpec {
        seed: 2,
        ..ClusterSpec::demo()
    })
    .unwrap();
    let t = Duration::from_secs(3);
    assert_ne!(
        a.port_counter(0, 0, PortCounter::PortXmitData, t).unwrap(),
        c.port_counter(0, 0, PortCounter::PortXmitData, t).unwrap()
    );
    assert_eq!(a.timeline(), c.timeline());
}

#[test]
fn scenario_names_round_trip() {
    assert_eq!(Scenario::NAMES.len(), Scenario::ALL_NAMED.len());
    for (name, sc) in Scenario::NAMES.iter().zip(Scenario::ALL_NAMED) {
        assert_eq!(name.parse::<Scenario>().unwrap(), sc);
        assert_eq!(sc.to_string(), *name);
    }
    assert_eq!(
        "Management_NIC".parse::<Scenario>().unwrap(),
        Scenario::ManagementNic
    );
    let c = Scenario::Constant {
        tx_bytes_per_second: 5,
        rx_bytes_per_second: 6,
    };
    assert_eq!(c.to_string(), "constant:5:6");
    assert_eq!("constant:5:6".parse::<Scenario>().unwrap(), c);
    for bad in [
        "",
        "bogus",
        "constant",
        "constant:1",
        "constant:x:2",
        "constant:1:-2",
    ] {
        match bad.parse::<Scenario>() {
            Err(SimError::UnknownScenario { name, expected }) => {
                assert_eq!(name, bad);
                assert!(expected.contains("management-nic"));
            }
            other => panic!("{bad:?} parsed as {other:?}"),
        }
    }
}

#[test]
fn spec_validation_names_the_field() {
    let field = |spec: ClusterSpec| match JobModel::new(&spec) {
        Err(SimError::InvalidSpec { field, .. }) => field,
        other => panic!("expected invalid spec, got {other:?}"),
    };
    let d = ClusterSpec::default;
    assert_eq!(field(ClusterSpec { nodes: 0, ..d() }), "nodes");
    assert_eq!(
        field(ClusterSpec {
            gpus_per_node: 0,
            ..d()
        }),
        "gpus_per_node"
    );
    assert_eq!(
        field(ClusterSpec {
            ib_rate_gbps: 150,
            ..d()
        }),
        "ib_rate_gbps"
    );
    assert_eq!(
        field(ClusterSpec {
            fault_node: Some(8),
            ..d()
        }),
        "fault_node"
    );
    assert_eq!(
        field(ClusterSpec {
            fault_hca: 8,
            ..d()
        }),
        "fault_hca"
    );
    assert_eq!(
        field(ClusterSpec {
            degraded_lanes: 3,
            ..d()
        }),
        "degraded_lanes"
    );
    assert_eq!(
        field(ClusterSpec {
            overlap_ms: 301,
            ..d()
        }),
        "overlap_ms"
    );
    assert_eq!(
        field(ClusterSpec {
            ib_efficiency_permille: 0,
            ..d()
        }),
        "ib_efficiency_permille"
    );
    assert!(matches!(
        JobModel::new(&d()).unwrap().hca(8, 0),
        Err(SimError::OutOfRange { what: "node", .. })
    ));
    assert_eq!(ClusterSpec::default().scenario, Scenario::Healthy);
    assert_eq!(ClusterSpec::demo().scenario, Scenario::ManagementNic);
    // Other generations spell their rate like the kernel.
    let ndr = JobModel::new(&ClusterSpec {
        ib_rate_gbps: 400,
        ..d()
    })
    .unwrap();
    assert_eq!(ndr.hca(0, 0).unwrap().rate_text, "400 Gb/sec (4X NDR)");
}
