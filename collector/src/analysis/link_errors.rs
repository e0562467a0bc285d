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
                let Some(&(name, crit)) = WATCHED.iter().find(|(m, _)| *m == c.metric) else {
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
                e = e.detail(&format!("{m}_per_second"), r4(*rate));
            }
            for (m, raw) in &saturated {
                e = e.detail(&format!("{m}_saturated_at"), *raw);
            }
            c.evidence = e;
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
