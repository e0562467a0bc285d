//! The decision: the first of these that the facts show.
//!
//! 1. `mixed_inputs`: runs of one test that disagree, or traces of different jobs, are not read as one;
//! 2. `run_failed`: the only runs crashed or returned wrong results: there is no baseline;
//! 3. `link_or_binding`: a complete multi-node baseline falls below the fabric, or meets it only at some
//!    sizes (its curve collapses at mid sizes);
//! 4. `not_a_network_measurement`: the bandwidth is more than the network carries: NVLink, not the network;
//! 5. `misconfigured`: without a comparison, the logs show NCCL bound against the fabric;
//! 6. `not_the_link`: the baseline meets the fabric, training communication does not;
//! 7. `cpu_bound`, then `exposed_communication` (without a baseline to tell link from overlap);
//! 8. `healthy` or `baseline_meets_link`; else `insufficient_evidence`, naming what is missing.

use super::Facts;
use crate::findings::Severity;

/// A verdict with its one-paragraph summary and the next action.
#[derive(Debug, PartialEq)]
pub struct Judgment {
    pub verdict: &'static str,
    pub summary: String,
    pub action: String,
}

impl Judgment {
    fn new(verdict: &'static str, summary: impl Into<String>, action: String) -> Judgment {
        Judgment {
            verdict,
            summary: summary.into(),
            action,
        }
    }
}

pub fn decide(f: &Facts) -> Judgment {
    stopped_short(f)
        .or_else(|| about_the_link(f))
        .or_else(|| about_training(f))
        .unwrap_or_else(|| missing(f))
}

/// Inputs that cannot give a baseline: mixed, failed, or not a network measurement.
fn stopped_short(f: &Facts) -> Option<Judgment> {
    if let Some(m) = f.mixed {
        return Some(Judgment::new(
            "mixed_inputs",
            format!(
                "The inputs mix runs or jobs that must not be read as one: {}. Each is judged on its own; no \
                 single baseline is taken from them.",
                m.summary
            ),
            m.action.clone(),
        ));
    }
    if f.base.is_none() {
        if let Some(failed) = f.failed {
            return Some(Judgment::new(
                "run_failed",
                format!(
                    "The run gave no valid result: {}. Its numbers are no baseline.",
                    failed.summary
                ),
                failed.action.clone(),
            ));
        }
    }
    None
}

/// A complete multi-node baseline against the fabric, or the network binding the logs show without one.
fn about_the_link(f: &Facts) -> Option<Judgment> {
    let meets = f.meets();
    if meets == Some(false) {
        return Some(Judgment::new(
            "link_or_binding",
            "The bare baseline does not reach the fabric: the cause is the link, the NIC binding or the \
             algorithm, not the training job.",
            f.binding.first().map(|b| b.action.clone()).unwrap_or_else(|| {
                "verify the link (rate, errors), the NIC binding (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) and the \
                 algorithm with NCCL_DEBUG=INFO, then re-run the baseline"
                    .to_string()
            }),
        ));
    }
    if let (Some(true), Some(c)) = (meets, f.base_collapse) {
        return Some(Judgment::new(
            "link_or_binding",
            format!(
                "The bare baseline reaches the link only at some sizes: {}. The cause is the link, the fabric under \
                 load or the algorithm, not the training job.",
                c.summary
            ),
            c.action.clone(),
        ));
    }
    if meets.is_none() {
        if let Some(i) = f.impossible {
            return Some(Judgment::new(
                "not_a_network_measurement",
                format!(
                    "The bare baseline did not measure the network: {}. The link is not judged from it.",
                    i.summary
                ),
                i.action.clone(),
            ));
        }
    }
    if meets.is_none() {
        if let Some(m) = f.misconfigured {
            return Some(Judgment::new(
                "misconfigured",
                format!(
                    "NCCL is set up against the fabric: {}. The link itself is not judged: that takes a \
                     multi-node baseline and the link rate.",
                    m.summary
                ),
                m.action.clone(),
            ));
        }
    }
    None
}

/// The baseline meets the fabric, or the training timeline speaks for itself.
fn about_training(f: &Facts) -> Option<Judgment> {
    let meets = f.meets();
    if meets == Some(true) && (f.training_short() == Some(true) || f.exposed.is_some()) {
        return Some(Judgment::new(
            "not_the_link",
            "The bare baseline meets the link but communication during training does not: the cause is overlap, \
             synchronisation or contention, not the link.",
            f.exposed.map(|e| e.action.clone()).unwrap_or_else(|| {
                "look for ranks that arrive late (stragglers), collectives serialised behind compute, and other \
                 traffic sharing the link"
                    .to_string()
            }),
        ));
    }
    if let Some(cpu) = f.cpu_bound {
        return Some(Judgment::new(
            "cpu_bound",
            "The GPU mostly waits on the host, not on communication: tuning NCCL will not help.",
            cpu.action.clone(),
        ));
    }
    if let Some(e) = f.exposed {
        return Some(Judgment::new(
            "exposed_communication",
            "Communication is exposed on the timeline; without a bare baseline against the link rate it is not yet \
             known whether the link or the overlap is at fault.",
            format!(
                "run all_reduce_perf across the same nodes and pass it with --nccl-tests and the fabric rate with \
                 --link-rate; meanwhile: {}",
                e.action
            ),
        ));
    }
    match (meets, f.traced) {
        (Some(true), true) => Some(Judgment::new(
            "healthy",
            "The bare baseline meets the link and training communication is hidden behind computation.",
            "nothing to fix in communication; look at computation for further speed-up".to_string(),
        )),
        (Some(true), false) => Some(Judgment::new(
            "baseline_meets_link",
            "The bare baseline meets the link. Whether training communication does is not known without a trace.",
            "profile a few training steps (torch.profiler with ProfilerStep, or nsys) and pass the traces with \
             --trace or --nsys"
                .to_string(),
        )),
        _ => None,
    }
}

/// What the judgment lacks; a critical finding, which stands without it, is named too.
fn missing(f: &Facts) -> Judgment {
    let missing = match (f.base.is_some(), f.rate.is_some()) {
        (false, _) if f.tests_given > 0 => {
            "a multi-node nccl-tests baseline (--nccl-tests): the runs given ran on one node, failed, or do not \
             show their nodes"
        }
        (false, _) => "a multi-node nccl-tests baseline (--nccl-tests)",
        (true, false) => "the link rate (--link-rate or --collector)",
        _ => "a training trace (--trace or --nsys)",
    };
    let mut summary = format!("Not enough evidence for the key judgment: missing {missing}.");
    if let Some(w) = f.worst.filter(|w| w.severity == Severity::Critical) {
        summary.push_str(&format!(
            " The most severe finding stands without it: {}.",
            w.summary
        ));
    }
    Judgment {
        verdict: "insufficient_evidence",
        summary,
        action: format!("add {missing} and run again"),
    }
}
