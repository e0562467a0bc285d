//! The detection benchmark's harness kept from rotting: one fault and one healthy cluster for a short
//! simulated time through the real agent sources, ingest validation, store, step engine and analysis. It
//! checks the plumbing (samples reach the store, steps are found and compared with the truth, the fault's
//! finding is raised), not how well or how fast anything detects: that is the benchmark's job.

#[allow(dead_code)]
#[path = "../benches/detect/harness/mod.rs"]
mod harness;

use std::time::Duration;

use commwatch_sim::{ClusterSpec, Scenario};
use harness::expect::Expectation;
use harness::run::{run, RunOutcome, RunSpec};
use harness::score::score_fault;

fn small(scenario: Scenario) -> ClusterSpec {
    ClusterSpec {
        nodes: 4,
        gpus_per_node: 2,
        scenario,
        ..ClusterSpec::default()
    }
}

/// Samples reached the store without a refusal, and every node's steps were found and compared.
fn check_plumbing(o: &RunOutcome, nodes: usize) {
    assert!(
        o.shipped.batches > 0 && o.shipped.samples > 0,
        "{:?}",
        o.shipped
    );
    assert_eq!(
        (o.shipped.out_of_order, o.shipped.refused, o.shipped.resets),
        (0, 0, 0),
        "{:?}",
        o.shipped
    );
    assert_eq!(o.steps.len(), nodes, "steps per node: {:?}", o.steps);
    assert!(o.steps.values().all(|&n| n > 0), "{:?}", o.steps);
    assert!(o.bytes.compared > 0, "{:?}", o.bytes);
    // Every comparison beyond the tolerance is described, up to the number kept.
    let over = (o.bytes.compared - o.bytes.within) as usize;
    assert_eq!(
        o.bytes.misses.len(),
        over.min(harness::truth::MISSES_KEPT),
        "{:?}",
        o.bytes
    );
    assert_eq!(o.lagged, 0);
    // The evaluation by scope gave the whole-fleet evaluation's findings after every evaluation.
    assert!(o.oracle.0 > 0, "{:?}", o.oracle);
    assert_eq!(
        o.oracle.1, 0,
        "scoped and whole-fleet findings differ: {:?}",
        o.oracle.2
    );
}

#[test]
fn a_fault_and_a_healthy_cluster_go_through_agent_and_collector() {
    let fault = small(Scenario::ManagementNic);
    let expect = Expectation::of(&fault).expect("a fault");
    let o = run(&RunSpec {
        spec: fault,
        duration: Duration::from_secs(25),
    })
    .expect("fault run");
    check_plumbing(&o, 4);
    let score = score_fault(&expect, &o.events);
    assert!(
        score.seen_at.is_some(),
        "no finding on {:?}; events: {:#?}",
        expect.target,
        o.events
    );

    let healthy = small(Scenario::Healthy);
    assert!(Expectation::of(&healthy).is_none());
    let o = run(&RunSpec {
        spec: healthy,
        duration: Duration::from_secs(15),
    })
    .expect("healthy run");
    check_plumbing(&o, 4);
}

/// A step's bytes off the truth are counted as a miss and described: where, the step's edges against the
/// burst it holds, and the truth's AllReduce and other bytes.
#[test]
fn a_step_off_the_truth_is_listed_with_its_burst_and_bytes() {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use commwatch_collector::steps::{NodeStep, StepLink, StepSource};
    use commwatch_model::link::{Endpoint, Link, LinkClass, LinkKey, LinkRole};
    use commwatch_sim::JobModel;
    use harness::clock::unix_ns;
    use harness::truth::ByteTally;

    let model = JobModel::new(&small(Scenario::Healthy)).expect("model");
    let tl = model.node_timeline(0).expect("node-00 runs the job");
    let (start, end) = (tl.step_start(5), tl.step_start(6));
    let link = Arc::new(Link {
        key: LinkKey::new(LinkClass::Infiniband, "mlx5_0", "1"),
        endpoint: Endpoint::HcaPort,
        role: LinkRole::Fabric,
        capacity_bytes_per_second: None,
        state: "ACTIVE".into(),
        attributes: BTreeMap::new(),
        gpu: None,
        link: None,
    });
    let step = NodeStep {
        fabric: Default::default(),
        node: "node-00".into(),
        job: None,
        index: 5,
        start_unix_ns: unix_ns(start),
        end_unix_ns: unix_ns(end),
        source: StepSource::Inferred,
        confidence: 1.0,
        samples: None,
        links: vec![StepLink {
            link,
            tx_bytes: 0,
            rx_bytes: 0,
            active_s: 0.0,
            achieved_bytes_per_second: None,
            average_bytes_per_second: 0.0,
            capacity_bytes_per_second: None,
            utilization: None,
            confident: true,
        }],
    };
    let mut t = ByteTally::default();
    t.add_step(&model, 0, &step);
    assert_eq!((t.steps, t.compared, t.within), (1, 2, 0), "{t:?}");
    assert_eq!(t.misses.len(), 2, "{t:?}");
    let (bs, be) = tl.burst_of_step(5);
    let burst = format!("5: {:.4}–{:.4} s", bs.as_secs_f64(), be.as_secs_f64());
    assert!(
        t.misses[0].starts_with("node-00 mlx5_0 tx, step "),
        "{}",
        t.misses[0]
    );
    assert!(
        t.misses[0].contains(&burst),
        "{} lacks {burst}",
        t.misses[0]
    );
    assert!(t.misses[0].ends_with("(-100.000 %)"), "{}", t.misses[0]);
}
