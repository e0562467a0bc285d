//! `commwatch_build_info{version,revision} 1`: which build of the collector answers, the gauge Prometheus
//! exporters conventionally carry so that a dashboard or an alert can join on the version. The revision is
//! known to the binary's build only, so the binary hands it over at start ([`set_build_info`]); a library user
//! that does not (tests, benches) exports revision `unknown`.

use std::sync::OnceLock;

use prometheus::{IntGaugeVec, Opts, Registry};

use super::names;

/// The version and revision exported in `commwatch_build_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: &'static str,
    pub revision: &'static str,
}

static BUILD_INFO: OnceLock<BuildInfo> = OnceLock::new();

/// Sets the version and revision exported by every collector this process starts afterwards. Call it once,
/// before the first [`super::Health::new`]; returns `false` (and changes nothing) when it was already set.
pub fn set_build_info(version: &'static str, revision: &'static str) -> bool {
    BUILD_INFO.set(BuildInfo { version, revision }).is_ok()
}

/// What [`set_build_info`] set; else this crate's version and revision `unknown`.
pub fn build_info() -> BuildInfo {
    BUILD_INFO.get().copied().unwrap_or(BuildInfo {
        version: env!("CARGO_PKG_VERSION"),
        revision: "unknown",
    })
}

/// Registers `commwatch_build_info` in `registry` with its one series at 1.
pub(super) fn register(registry: &Registry) -> Result<IntGaugeVec, prometheus::Error> {
    let g = IntGaugeVec::new(
        Opts::new(
            names::BUILD_INFO,
            "Always 1; the labels say which version and git revision of commwatch is running.",
        ),
        &["version", "revision"],
    )?;
    registry.register(Box::new(g.clone()))?;
    let b = build_info();
    g.with_label_values(&[b.version, b.revision]).set(1);
    Ok(g)
}
