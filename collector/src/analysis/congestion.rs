//! `congestion`: a fabric port that waits for credits while it communicates, or a RoCE port with high CNP /
//! out-of-sequence rates.
//!
//! - InfiniBand `xmit_wait_ticks` (`port_xmit_wait`): ticks the port had data but no credits. Share of the
//!   port's busy time spent waiting = ticks ÷ (busy seconds × [`XMIT_WAIT_TICKS_PER_SECOND`]). Warning above
//!   [`WAIT_SHARE_ABOVE`]. The tick length is adapter-specific; 4 ns (250 M ticks/s, HDR/NDR ConnectX) is
//!   assumed.
//! - RoCE: congestion notification packets handled (`hw_rp_cnp_handled`) or sent (`hw_np_cnp_sent`) per busy
//!   second above [`CNP_PER_BUSY_SECOND_ABOVE`], or `hw_out_of_sequence` above [`OOS_PER_SECOND_ABOVE`].
//!
//! Only while the port communicates (busy time > 0): an idle port cannot be congested. The busy time is the
//! steps' own definition (`steps::busy`); for bursts shorter than a few samples it is an upper bound, so the
//! waiting share is then a lower bound — a port raised on it waits at least that much, never less.

use commwatch_model::{LinkClass, LinkRole};

use super::input::AnalysisInput;
use super::{r4, Candidate, Evidence, FindingKind, Severity, Subject};

/// `port_xmit_wait` ticks per second of a port that waits all the time (4 ns ticks).
pub const XMIT_WAIT_TICKS_PER_SECOND: f64 = 250e6;
/// Share of busy time spent waiting above which the port is congested.
pub const WAIT_SHARE_ABOVE: f64 = 0.10;
/// RoCE CNPs per busy second above which the port is congested.
pub const CNP_PER_BUSY_SECOND_ABOVE: f64 = 5_000.0;
/// RoCE out-of-sequence packets per second above which it is reported.
pub const OOS_PER_SECOND_ABOVE: f64 = 100.0;
/// The RoCE CNP counters read, each with its evidence detail's name.
const CNP_COUNTERS: [(&str, &str); 2] = [
    ("hw_rp_cnp_handled", "hw_rp_cnp_handled_per_busy_second"),
    ("hw_np_cnp_sent", "hw_np_cnp_sent_per_busy_second"),
];

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    let mut out = Vec::new();
    for n in &input.nodes {
        for l in n
            .links
            .iter()
            .filter(|l| l.link.role == LinkRole::Fabric && l.link.key.class.is_rdma())
        {
            let Some(a) = &l.activity else { continue };
            if a.busy_s <= 0.0 {
                continue;
            }
            let mut reasons: Vec<String> = Vec::new();
            // The figures first, the evidence only for a port that is congested (most ports at most
            // evaluations are not: no map filled and dropped for them).
            let mut details: [Option<(&'static str, f64)>; 4] = [None; 4];
            let mut measured = None;
            if let Some(w) = l
                .counter("xmit_wait_ticks")
                .filter(|c| !c.saturated && c.window_s > 0.0)
            {
                let share = w.increase as f64 / (a.busy_s * XMIT_WAIT_TICKS_PER_SECOND);
                if share > WAIT_SHARE_ABOVE {
                    reasons.push(format!(
                        "it waited for credits {:.0}% of its {:.2} s of communication (port_xmit_wait +{})",
                        share.min(1.0) * 100.0,
                        a.busy_s,
                        w.increase
                    ));
                    measured = Some((share.min(1.0), WAIT_SHARE_ABOVE, "ratio"));
                }
                details[0] = Some(("xmit_wait_share", r4(share.min(1.0))));
            }
            if l.link.key.class == LinkClass::Roce {
                for (k, (m, key)) in CNP_COUNTERS.into_iter().enumerate() {
                    if let Some(c) = l.counter(m).filter(|c| c.window_s > 0.0) {
                        let per_busy = c.increase as f64 / a.busy_s;
                        details[1 + k] = Some((key, r4(per_busy)));
                        if per_busy > CNP_PER_BUSY_SECOND_ABOVE {
                            reasons.push(format!("{m} {per_busy:.0} per second of communication"));
                            measured.get_or_insert((
                                per_busy,
                                CNP_PER_BUSY_SECOND_ABOVE,
                                "packets_per_second",
                            ));
                        }
                    }
                }
                if let Some(rate) = l.counter("hw_out_of_sequence").and_then(|c| c.rate()) {
                    details[3] = Some(("out_of_sequence_per_second", r4(rate)));
                    if rate > OOS_PER_SECOND_ABOVE {
                        reasons.push(format!("out-of-sequence packets {rate:.0}/s"));
                        measured.get_or_insert((rate, OOS_PER_SECOND_ABOVE, "packets_per_second"));
                    }
                }
            }
            let Some((m, x, unit)) = measured else {
                continue;
            };
            let mut e = Evidence::new(r4(m), unit)
                .expected(x)
                .seconds(r4(a.window_s));
            for (k, v) in details.into_iter().flatten() {
                e = e.detail(k, v);
            }
            e = e.detail("busy_s", r4(a.busy_s));
            let mut c = Candidate::new(
                FindingKind::Congestion,
                Severity::Warning,
                Subject::link(&n.name, &l.link),
            );
            c.summary = format!(
                "{} {} port {} is congested: {}.",
                n.name,
                l.link.key.device,
                l.link.key.port,
                reasons.join("; ")
            );
            c.evidence = e;
            c.action = "Find the hot spot: a slower link in the ring (see link_degraded), an oversubscribed switch \
                        uplink, or other jobs sharing the path (adaptive routing, QoS/SL separation); for RoCE check \
                        ECN/PFC settings."
                .into();
            out.push(c);
        }
    }
    out
}
