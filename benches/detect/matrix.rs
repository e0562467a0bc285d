//! The runs of the benchmark: every fault on every background, every healthy variant alone and all together,
//! several seeds each.

use std::time::Duration;

use commwatch_sim::{ClusterSpec, JobModel, Scenario, Variant};

use crate::harness::expect::Expectation;
use crate::harness::run::RunSpec;
use crate::options::Options;

/// The fault scenarios, by their own name (`flapping` is a fault variant on a healthy scenario).
const FAULTS: &[(&str, Scenario, Option<Variant>)] = &[
    ("management-nic", Scenario::ManagementNic, None),
    ("degraded-link", Scenario::DegradedLink, None),
    ("link-errors", Scenario::LinkErrors, None),
    ("straggler", Scenario::Straggler, None),
    ("no-overlap", Scenario::NoOverlap, None),
    ("cpu-bound", Scenario::CpuBound, None),
    ("flapping", Scenario::Healthy, Some(Variant::Flapping)),
];

/// The realistic backgrounds a fault is run on (`plain`: the scenario's square wave alone).
pub const BACKGROUNDS: &[(&str, Option<Variant>)] = &[
    ("plain", None),
    ("storage", Some(Variant::Storage)),
    ("overlap", Some(Variant::Overlap)),
    ("jitter", Some(Variant::Jitter)),
    ("two-jobs", Some(Variant::TwoJobs)),
    ("idle-nodes", Some(Variant::IdleNodes)),
];

/// The healthy variants, each run alone.
const HEALTHY: &[Variant] = &[
    Variant::Storage,
    Variant::Overlap,
    Variant::IdleNodes,
    Variant::Jitter,
    Variant::TwoJobs,
    Variant::Rails8,
    Variant::SeedScale,
];

/// What a run is part of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Group {
    /// A fault on a background.
    Fault {
        fault: &'static str,
        background: &'static str,
    },
    /// A healthy cluster with these variants (`plain` for none, `all` for every healthy one).
    Healthy { variant: String },
}

/// One planned run.
#[derive(Debug, Clone)]
pub struct Planned {
    pub label: String,
    pub group: Group,
    pub run: RunSpec,
    /// The fault run's expectation.
    pub expect: Option<Expectation>,
    /// Nominal step period of the fault node's job (the first job's when healthy).
    pub period: Duration,
    /// When the fault first shows, model time: 0 for a fault present from the first step; for `flapping`
    /// the start of the port's first down step. Delays count from it.
    pub onset: Duration,
}

/// When the fault of `spec` first shows on `timeline` (the fault node's job's): the first flapped step's
/// start, else 0.
fn onset(timeline: &commwatch_sim::model::StepTimeline) -> Duration {
    (0..10_000)
        .find(|&k| timeline.is_flapped(k))
        .map_or(Duration::ZERO, |k| timeline.step_start(k))
}

/// The runs, and the combinations the simulator refuses (label, reason).
pub fn plan(o: &Options) -> (Vec<Planned>, Vec<(String, String)>) {
    let mut runs = Vec::new();
    let mut refused = Vec::new();
    // `secs`: the run's length; `None` for a fault run, as long as `fault_steps` steps.
    let mut add = |label: String, group: Group, spec: ClusterSpec, secs: Option<u64>| {
        let model = match JobModel::new(&spec) {
            Ok(m) => m,
            Err(e) => {
                refused.push((label, e.to_string()));
                return;
            }
        };
        let expect = Expectation::of(&spec);
        let fault_node = spec.resolved_fault_node();
        let timeline = model.node_timeline(fault_node).unwrap_or(model.timeline());
        let (period, onset) = (timeline.period, onset(timeline));
        let duration = match secs {
            None => (period * o.fault_steps).max(Duration::from_secs(o.fault_secs)),
            Some(s) => Duration::from_secs(s),
        };
        runs.push(Planned {
            label,
            group,
            run: RunSpec { spec, duration },
            expect,
            period,
            onset,
        });
    };
    let spec = |scenario, variants: Vec<Variant>, seed| ClusterSpec {
        nodes: o.nodes,
        gpus_per_node: o.gpus,
        scenario,
        variants,
        seed,
        ..ClusterSpec::default()
    };
    for seed in 1..=o.seeds {
        for &(fault, scenario, fault_variant) in FAULTS {
            for &(background, bg) in BACKGROUNDS {
                let variants = fault_variant.into_iter().chain(bg).collect();
                let label = format!("{fault} on {background}, seed {seed}");
                let group = Group::Fault { fault, background };
                add(label, group, spec(scenario, variants, seed), None);
            }
        }
        let healthy = std::iter::once(("plain".to_string(), vec![]))
            .chain(HEALTHY.iter().map(|v| (v.name().to_string(), vec![*v])))
            .chain(std::iter::once(("all".to_string(), HEALTHY.to_vec())));
        for (variant, variants) in healthy {
            // The first seed's run is the long one.
            let secs = if seed == 1 && o.hour_secs > 0 {
                o.hour_secs
            } else {
                o.healthy_secs
            };
            let label = format!("healthy {variant}, seed {seed}");
            let group = Group::Healthy { variant };
            add(
                label,
                group,
                spec(Scenario::Healthy, variants, seed),
                Some(secs),
            );
        }
    }
    runs.retain(|r| o.only.as_ref().is_none_or(|f| r.label.contains(f.as_str())));
    (runs, refused)
}
