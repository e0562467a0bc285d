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
