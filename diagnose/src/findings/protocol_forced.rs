//! NCCL's protocol or algorithm forced by a setting (`NCCL_PROTO=LL`, `NCCL_ALGO=Ring`), as the log or a
//! command line shows it. Without Simple, large messages run on LL or LL128, which carry flags beside the data
//! and reach a fraction of the link: a warning. Any other forced choice (Simple only, one algorithm) takes
//! NCCL's tuner out of the run, which a baseline should not do: `info`.

use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    for l in ctx.logs {
        for (setting, value) in &l.log.settings {
            if setting != "NCCL_PROTO" && setting != "NCCL_ALGO" {
                continue;
            }
            // `^LL128` excludes: NCCL keeps choosing among the rest.
            if value.starts_with('^') || value.is_empty() {
                continue;
            }
            let lower = value.to_ascii_lowercase();
            let without_simple = setting == "NCCL_PROTO" && !lower.contains("simple");
            let (severity, summary) = if without_simple {
                (
                    Severity::Warning,
                    format!(
                        "{setting}={value} leaves NCCL no Simple protocol: large messages run on LL or LL128, \
                         which carry flags beside the data and reach a fraction of the link"
                    ),
                )
            } else {
                (
                    Severity::Info,
                    format!(
                        "{setting}={value} forces NCCL's choice: its tuner does not pick per size, and the run \
                         measures this setting rather than what NCCL would do"
                    ),
                )
            };
            out.push(
                Finding::new(
                    "nccl_misconfiguration",
                    severity,
                    summary,
                    "unset it for baselines and training unless it works around a known problem; compare the \
                     bandwidth curve with and without it",
                )
                .subject("file", &l.file)
                .subject("setting", setting)
                .evidence("value", value.clone())
                .cite(l.log.cited(&format!("settings.{setting}"))),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::{log, on_logs};

    #[test]
    fn ll_only_is_a_warning_simple_only_is_info_an_exclusion_is_nothing() {
        let l = log("h:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL\n");
        let f = on_logs(check, &[l]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(f[0].cites[0].line, Some(1));
        let simple = log("$ NCCL_PROTO=Simple NCCL_ALGO=Ring ./all_reduce_perf\nh:1:1 [0] NCCL INFO Using network IB\n");
        let f = on_logs(check, &[simple]);
        assert_eq!(f.len(), 2);
        assert!(f.iter().all(|f| f.severity == Severity::Info));
        let excluded = log("h:1:1 [0] NCCL INFO NCCL_PROTO set by environment to ^LL128\n");
        assert!(on_logs(check, &[excluded]).is_empty());
    }
}
