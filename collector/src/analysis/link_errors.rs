//! `link_errors`: error counters of a link increasing over the window — InfiniBand `symbol_errors`,
//! `link_error_recoveries`, `link_downed`, `rx_errors` (port_rcv_errors), `local_link_integrity_errors`,
//! `excessive_buffer_overrun_errors`; netdev `rx_errors`; NVLink `crc_flit_errors`, `crc_data_errors`,
//! `replay_errors`, `recovery_errors`, `recovery_events`.
//!
//! Rates are reset-corrected increases over the window (at least [`MIN_WINDOW_S`] long: two readings of the
//! agent's 1 Hz slow tier). The severity rests on the increase itself, which two readings give exactly —
//! whether errors rise, and whether the link went down or retrained —, never on the rate's size; the rate in
//! the evidence grows more precise as the window fills. PMA error counters
//! *saturate* (stop at all ones): a counter at its saturation value has an unknown rate since; it is reported as
//! saturated (with the errors counted until then), never as zero. Severity critical when the link went down or
//! retrained (`link_downed`, `link_error_recoveries`, NVLink `recovery_*`), warning otherwise.
//!
//! Raised at its first sighting ([`Candidate::raise_after`] 1), not after the tracker's three: a counted
//! increase is a measured fact, and it stays in the window once it is there, so the candidate cannot flicker
//! across a line — a streak would add only its delay (two seconds). It clears as every finding does.

use commwatch_model::LinkClass;

use super::input::AnalysisInput;
use super::{r4, Candidate, Evidence, FindingKind, Severity, Subject};

/// Shortest window a rate is computed over, seconds (two slow-tier readings).
pub const MIN_WINDOW_S: f64 = 1.0;

/// Counters watched, and whether an increase is critical.
pub const WATCHED: &[(&str, bool)] = &[
    ("symbol_errors", false),
    ("link_error_recoveries", true),
    ("link_downed", true),
    ("rx_errors", false),
    ("local_link_integrity_errors", false),
    ("excessive_buffer_overrun_errors", false),
    ("crc_flit_errors", false),
    ("crc_data_errors", false),
    ("replay_errors", false),
    ("recovery_errors", true),
    ("recovery_events", true),
];

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    let mut out = Vec::new();
    for n in &input.nodes {
        for l in &n.links {
            let mut rising: Vec<(&str, f64, u64, bool)> = Vec::new();
            let mut saturated: Vec<(&str, u64)> = Vec::new();
            let mut critical = false;
            let mut window_s: f64 = 0.0;
            for c in &l.counters {
                // A counter that neither saturated nor rose says nothing, watched or not: its name is not
                // looked up (most counters of most links at every evaluation).
                if !c.saturated && (c.window_s < MIN_WINDOW_S || c.increase == 0) {
                    continue;
                }
                let Some(&(name, crit)) = WATCHED.iter().find(|(m, _)| *m == c.metric()) else {
                    continue;
                };
                if c.saturated {
                    saturated.push((name, c.raw));
                    critical |= crit;
                    continue;
                }
                if c.window_s < MIN_WINDOW_S || c.increase == 0 {
                    continue;
                }
                window_s = window_s.max(c.window_s);
                rising.push((name, c.increase as f64 / c.window_s, c.increase, crit));
                critical |= crit;
            }
            if rising.is_empty() && saturated.is_empty() {
                continue;
            }
            let sev = if critical {
                Severity::Critical
            } else {
                Severity::Warning
            };
            let mut c = Candidate::new(
                FindingKind::LinkErrors,
                sev,
                Subject::link(&n.name, &l.link),
            );
            let total: f64 = rising.iter().map(|r| r.1).sum();
            let mut parts: Vec<String> = rising
                .iter()
                .map(|(m, rate, inc, _)| format!("{m} +{inc} ({rate:.2}/s)"))
                .collect();
            parts.extend(
                saturated
                    .iter()
                    .map(|(m, raw)| format!("{m} saturated at {raw} (rate unknown)")),
            );
            c.summary = format!(
                "{} {} port {} error counters rising over {:.0} s: {}.",
                n.name,
                l.link.key.device,
                l.link.key.port,
                window_s,
                parts.join(", ")
            );
            let mut e = Evidence::new(r4(total), "errors_per_second")
                .expected(0.0)
                .seconds(r4(window_s));
            for (m, rate, _, _) in &rising {
                e = e.detail(format!("{m}_per_second"), r4(*rate));
            }
            for (m, raw) in &saturated {
                e = e.detail(format!("{m}_saturated_at"), *raw);
            }
            c.evidence = e;
            c.raise_after = 1;
            c.action = if l.link.key.class == LinkClass::Nvlink {
                "Run the GPU's NVLink diagnostics (nvidia-smi nvlink -e, dcgmi diag); rising CRC/replay/recovery \
                 counts precede link failures: drain and service the node."
                    .into()
            } else {
                "Physical-layer errors: check and reseat or replace the cable/transceiver, check the switch port \
                 (ibqueryerrors, mlxlink -e); clear saturated counters (perfquery -R) to keep measuring."
                    .into()
            };
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analysis::input::{CounterKey, CounterWindow, LinkInput, NodeInput};
    use commwatch_model::LinkRole;

    /// A counter `metric` that rose by `increase` over `window_s` (the `tcp_retransmits` tests use it too).
    pub(crate) fn counter(metric: &str, increase: u64, window_s: f64) -> CounterWindow {
        CounterWindow {
            key: CounterKey(std::sync::Arc::new(crate::store::SeriesKey {
                link: None,
                metric: metric.into(),
                labels: Vec::new(),
            })),
            increase,
            window_s,
            saturated: false,
            raw: 1000 + increase,
        }
    }

    fn input(counters: Vec<CounterWindow>) -> AnalysisInput {
        let mut link = LinkInput::new(LinkClass::Infiniband, "mlx5_0", "1", LinkRole::Fabric);
        link.counters = counters;
        AnalysisInput {
            nodes: vec![NodeInput {
                name: "node-03".into(),
                links: vec![link],
                ..NodeInput::default()
            }],
            ..AnalysisInput::default()
        }
    }

    #[test]
    fn two_slow_readings_with_an_increase_raise_at_first_sight() {
        // The link-errors fault: 40 symbol errors and 13 receive errors between two 1 Hz readings.
        let c = evaluate(&input(vec![
            counter("symbol_errors", 40, 1.0),
            counter("rx_errors", 13, 1.0),
        ]));
        assert_eq!(c.len(), 1, "{c:#?}");
        assert_eq!(c[0].id(), "link_errors:node-03:mlx5_0:1");
        assert_eq!(c[0].severity, Severity::Warning);
        assert_eq!(c[0].raise_after, 1);
        assert_eq!(c[0].evidence.details["symbol_errors_per_second"], 40.0);
    }

    #[test]
    fn a_flap_counted_in_link_downed_is_critical_at_first_sight() {
        let c = evaluate(&input(vec![counter("link_downed", 1, 1.0)]));
        assert_eq!(c.len(), 1, "{c:#?}");
        assert_eq!(c[0].severity, Severity::Critical);
        assert_eq!(c[0].raise_after, 1);
    }

    #[test]
    fn healthy_counters_stay_silent() {
        // No increase; one reading only; a counter that is not an error (congestion, traffic).
        for counters in [
            vec![
                counter("symbol_errors", 0, 20.0),
                counter("link_downed", 0, 20.0),
            ],
            vec![counter("symbol_errors", 5, 0.0)],
            vec![
                counter("xmit_wait_ticks", 1_000_000, 20.0),
                counter("tx_packets", 9_000, 20.0),
            ],
            vec![],
        ] {
            assert!(
                evaluate(&input(counters.clone())).is_empty(),
                "{counters:?}"
            );
        }
    }
}
