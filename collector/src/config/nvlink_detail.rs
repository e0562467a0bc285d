//! `nvlink_detail`: how finely `/metrics` (and remote write) export NVLink links. A node of 8 GPUs has up to
//! 144 NVLinks, each with its byte counters, rates, capacity, state and error counters: per link that is most of
//! a node's series, per GPU a sixteenth of it. Per GPU is the default; per link is an explicit choice.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

/// The NVLink detail of the exported link families (`nvlink_detail = "gpu" | "link"`, `--nvlink-detail`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NvlinkDetail {
    /// One series set per GPU: its links summed (byte counters and rates, capacity, error counters), labels
    /// `node`, `class="nvlink"`, `device`, `role`, `gpu`; no `port`, no `link`.
    #[default]
    Gpu,
    /// One series set per NVLink link, with `port` and `link`.
    Link,
}

impl NvlinkDetail {
    /// The configuration word: `gpu` or `link`.
    pub fn as_str(self) -> &'static str {
        match self {
            NvlinkDetail::Gpu => "gpu",
            NvlinkDetail::Link => "link",
        }
    }
}

impl fmt::Display for NvlinkDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is neither `gpu` nor `link`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nvlink detail must be \"gpu\" or \"link\", not {0:?}")]
pub struct ParseNvlinkDetailError(String);

impl FromStr for NvlinkDetail {
    type Err = ParseNvlinkDetailError;

    fn from_str(s: &str) -> Result<NvlinkDetail, ParseNvlinkDetailError> {
        match s {
            "gpu" => Ok(NvlinkDetail::Gpu),
            "link" => Ok(NvlinkDetail::Link),
            other => Err(ParseNvlinkDetailError(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_others_are_refused() {
        for d in [NvlinkDetail::Gpu, NvlinkDetail::Link] {
            assert_eq!(d.as_str().parse::<NvlinkDetail>(), Ok(d));
        }
        assert_eq!(NvlinkDetail::default(), NvlinkDetail::Gpu);
        let e = "GPU".parse::<NvlinkDetail>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "nvlink detail must be \"gpu\" or \"link\", not \"GPU\""
        );
    }
}
