//! `tcp_retransmits`: a node whose TCP stack retransmits a large share of what it sends, sustained over the
//! window — on a TCP fabric (NCCL's socket transport, Gloo, MPI over TCP) a lossy link, a congested switch port
//! or a shaping queue that drops. Every loss costs a collective a retransmission timeout or a halved window,
//! far more than its bytes, and the ring runs at the pace of its slowest pair.
//!
//! Data: the node's `tcp_retransmitted_segments_total` and `tcp_out_segments_total` (the `tcp` source, the
//! counters of the node's network namespace), reset-corrected increases over the window, at least
//! [`MIN_WINDOW_S`] long. Raised when at least [`MIN_SEGMENTS`] segments were sent and the retransmitted share
//! reaches [`WARNING_SHARE`] (warning) or [`CRITICAL_SHARE`] (critical), with at least [`MIN_RETRANSMITS`]
//! retransmissions (a handful on an idle node is noise). The counters are the whole node's, not one link's:
//! the finding names the node, and its evidence names the fabric interfaces that carried the traffic.

use super::input::AnalysisInput;
use super::{r4, Candidate, Evidence, FindingKind, Severity, Subject};

/// Shortest window the share is computed over, seconds (several slow-tier readings).
pub const MIN_WINDOW_S: f64 = 4.0;
/// Fewest segments sent over the window for a share to mean anything.
pub const MIN_SEGMENTS: u64 = 10_000;
/// Fewest retransmissions over the window.
pub const MIN_RETRANSMITS: u64 = 100;
/// Retransmitted share of the segments sent for a warning and for critical.
pub const WARNING_SHARE: f64 = 0.01;
pub const CRITICAL_SHARE: f64 = 0.05;

/// The agent's metrics of the two counters.
pub const RETRANSMITTED: &str = "tcp_retransmitted_segments_total";
pub const SENT: &str = "tcp_out_segments_total";

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    let mut out = Vec::new();
    for n in &input.nodes {
        let (Some(re), Some(sent)) = (n.counter(RETRANSMITTED), n.counter(SENT)) else {
            continue;
        };
        let window_s = re.window_s.min(sent.window_s);
        if window_s < MIN_WINDOW_S || sent.increase < MIN_SEGMENTS || re.increase < MIN_RETRANSMITS
        {
            continue;
        }
        // OutSegs excludes retransmissions: the share of all segments put on the wire.
        let share = re.increase as f64 / (sent.increase + re.increase) as f64;
        let severity = if share >= CRITICAL_SHARE {
            Severity::Critical
        } else if share >= WARNING_SHARE {
            Severity::Warning
        } else {
            continue;
        };
        let fabric: Vec<&str> = n
            .fabric_links()
            .map(|l| l.link.key.device.as_str())
            .collect();
        let mut c = Candidate::new(
            FindingKind::TcpRetransmits,
            severity,
            Subject::node(&n.name),
        );
        if let Some(j) = input.job_of(&n.name) {
            c.subject.job = Some(j.id.clone());
        }
        c.summary = format!(
            "{} retransmits {:.1}% of its TCP segments ({} of {} over {:.0} s, {:.0} a second): its links or a \
             switch port on their path drop packets",
            n.name,
            share * 100.0,
            re.increase,
            sent.increase + re.increase,
            window_s,
            re.increase as f64 / window_s
        );
        c.action = format!(
            "On {}, check the fabric interfaces' drop and error counters (ip -s link, ethtool -S), the switch \
             ports they use and any shaping or policing queue on the path; `ss -ti` shows which connections \
             retransmit. A ring over TCP runs at the pace of its lossiest pair.",
            n.name
        );
        c.evidence = Evidence::new(r4(share), "ratio")
            .seconds(r4(window_s))
            .detail("retransmitted_segments", re.increase)
            .detail("segments_sent", sent.increase)
            .detail("fabric_interfaces", fabric.join(","));
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::input::NodeInput;
    use crate::analysis::link_errors::tests::counter;

    fn node(retransmitted: u64, sent: u64, window_s: f64) -> AnalysisInput {
        AnalysisInput {
            nodes: vec![NodeInput {
                name: "node-2".into(),
                counters: vec![
                    counter(RETRANSMITTED, retransmitted, window_s),
                    counter(SENT, sent, window_s),
                ],
                ..NodeInput::default()
            }],
            ..AnalysisInput::default()
        }
    }

    #[test]
    fn a_lossy_node_is_found_at_its_share() {
        let c = evaluate(&node(3_000, 97_000, 20.0));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].severity, Severity::Warning);
        assert!((c[0].evidence.measured - 0.03).abs() < 1e-9);
        assert!(
            c[0].summary
                .starts_with("node-2 retransmits 3.0% of its TCP segments"),
            "{}",
            c[0].summary
        );
        assert_eq!(
            evaluate(&node(6_000, 94_000, 20.0))[0].severity,
            Severity::Critical
        );
    }

    #[test]
    fn noise_and_short_windows_raise_nothing() {
        // Below 1 %, too few retransmissions, too little traffic, or too short a window.
        assert!(evaluate(&node(500, 99_500, 20.0)).is_empty());
        assert!(evaluate(&node(99, 2_000, 20.0)).is_empty());
        assert!(evaluate(&node(900, 9_000, 20.0)).is_empty());
        assert!(evaluate(&node(3_000, 97_000, 2.0)).is_empty());
        // A node without the counters (no tcp source): nothing.
        assert!(evaluate(&AnalysisInput {
            nodes: vec![NodeInput::default()],
            ..AnalysisInput::default()
        })
        .is_empty());
    }
}
