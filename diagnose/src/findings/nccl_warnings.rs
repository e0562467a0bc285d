//! `NCCL WARN` lines in a log.

use super::{Context, Finding, Severity};

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.logs
        .iter()
        .filter(|l| l.log.warning_count > 0)
        .map(|l| {
            Finding::new(
                "nccl_misconfiguration",
                Severity::Warning,
                format!(
                    "NCCL printed {} warning(s); first: {}",
                    l.log.warning_count,
                    l.log.warnings.first().map(String::as_str).unwrap_or("")
                ),
                "read the NCCL WARN lines: they name failed transports, missing devices and fallbacks",
            )
            .subject("file", &l.file)
            .evidence("warnings", l.log.warning_count as u64)
        })
        .collect()
}
