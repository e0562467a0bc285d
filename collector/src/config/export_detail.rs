//! `counter_detail`, `cpu_detail` and `gpu_detail`: how finely `/metrics` (and remote write) export a link's
//! named counters, a node's CPU and its GPUs. An 8-GPU node's HCA ports and interfaces carry about 28 named error, congestion and other
//! counters each, and a node has a CPU series per core: per name and per core that is over a third of a node's
//! series, per family and per node a few dozen. A GPU's PCIe maxima never change and its NVLink rate is its
//! NVLink links' (4 of its 17 series). Per family, the node total and the GPU summary are the defaults; the
//! names, the cores and every GPU family are an explicit choice. The findings and `/api` read the store and
//! keep every name either way.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

/// The detail of the link counter families that carry a `counter` label (`commwatch_link_errors_total`,
/// `commwatch_link_congestion_total`, `commwatch_link_events_total`): `counter_detail = "family" | "name"`,
/// `--counter-detail`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CounterDetail {
    /// One series per link and family: the link's counters of the family summed, no `counter` label.
    #[default]
    Family,
    /// One series per link, family and agent counter name (`counter` label).
    Name,
}

/// The detail of `commwatch_node_cpu_utilization_ratio`: `cpu_detail = "total" | "core"`, `--cpu-detail`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuDetail {
    /// The node's total only (no `cpu` label).
    #[default]
    Total,
    /// The total and one series per core (`cpu` label).
    Core,
}

/// The detail of the GPU families: `gpu_detail = "summary" | "full"`, `--gpu-detail`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuDetail {
    /// The PCIe maxima (hardware constants) as a `max` label of `commwatch_gpu_pcie_link_generation` and
    /// `commwatch_gpu_pcie_link_width`, no `_max` families; no `commwatch_gpu_nvlink_*_bytes_per_second` (the
    /// GPU's NVLink rate is its NVLink links' `commwatch_link_*_bytes_per_second{class="nvlink"}` summed).
    #[default]
    Summary,
    /// Every GPU family as the agent sends it.
    Full,
}

/// A word that is not one of a detail setting's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting} must be {expected}, not {got:?}")]
pub struct ParseDetailError {
    setting: &'static str,
    expected: &'static str,
    got: String,
}

impl CounterDetail {
    /// The configuration word: `family` or `name`.
    pub fn as_str(self) -> &'static str {
        match self {
            CounterDetail::Family => "family",
            CounterDetail::Name => "name",
        }
    }
}

impl CpuDetail {
    /// The configuration word: `total` or `core`.
    pub fn as_str(self) -> &'static str {
        match self {
            CpuDetail::Total => "total",
            CpuDetail::Core => "core",
        }
    }
}

impl GpuDetail {
    /// The configuration word: `summary` or `full`.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuDetail::Summary => "summary",
            GpuDetail::Full => "full",
        }
    }
}

impl fmt::Display for GpuDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for GpuDetail {
    type Err = ParseDetailError;

    fn from_str(s: &str) -> Result<GpuDetail, ParseDetailError> {
        match s {
            "summary" => Ok(GpuDetail::Summary),
            "full" => Ok(GpuDetail::Full),
            other => Err(ParseDetailError {
                setting: "gpu detail",
                expected: "\"summary\" or \"full\"",
                got: other.to_string(),
            }),
        }
    }
}

impl fmt::Display for CounterDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for CpuDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CounterDetail {
    type Err = ParseDetailError;

    fn from_str(s: &str) -> Result<CounterDetail, ParseDetailError> {
        match s {
            "family" => Ok(CounterDetail::Family),
            "name" => Ok(CounterDetail::Name),
            other => Err(ParseDetailError {
                setting: "counter detail",
                expected: "\"family\" or \"name\"",
                got: other.to_string(),
            }),
        }
    }
}

impl FromStr for CpuDetail {
    type Err = ParseDetailError;

    fn from_str(s: &str) -> Result<CpuDetail, ParseDetailError> {
        match s {
            "total" => Ok(CpuDetail::Total),
            "core" => Ok(CpuDetail::Core),
            other => Err(ParseDetailError {
                setting: "cpu detail",
                expected: "\"total\" or \"core\"",
                got: other.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_others_are_refused() {
        for d in [CounterDetail::Family, CounterDetail::Name] {
            assert_eq!(d.as_str().parse::<CounterDetail>(), Ok(d));
        }
        for d in [CpuDetail::Total, CpuDetail::Core] {
            assert_eq!(d.as_str().parse::<CpuDetail>(), Ok(d));
        }
        for d in [GpuDetail::Summary, GpuDetail::Full] {
            assert_eq!(d.as_str().parse::<GpuDetail>(), Ok(d));
        }
        assert_eq!(GpuDetail::default(), GpuDetail::Summary);
        assert!("all".parse::<GpuDetail>().is_err());
        assert_eq!(CounterDetail::default(), CounterDetail::Family);
        assert_eq!(CpuDetail::default(), CpuDetail::Total);
        let e = "Name".parse::<CounterDetail>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "counter detail must be \"family\" or \"name\", not \"Name\""
        );
        let e = "cores".parse::<CpuDetail>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "cpu detail must be \"total\" or \"core\", not \"cores\""
        );
    }
}
