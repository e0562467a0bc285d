//! NVLink bytes per GPU ([`NvlinkBytes::Gpu`], the agent's default): each GPU's NVLinks are also shipped as
//! one link (class `nvlink`, device `gpu<N>`, no port, no link number; [`sums_link`]) whose `tx_bytes` and
//! `rx_bytes` are the sums of its links' byte counters, read at the fast rate; the links' own byte counters
//! are then read at the slow rate (their errors and state stay per link, as they were). A node of 8 H100s ships
//! 16 NVLink byte series at 20 Hz instead of 288, and 288 at 1 Hz: the per-step bandwidth of a GPU stays
//! measurable at the fast rate, the collector derives it itself from the sums (as it derives every figure),
//! and a link's traffic is still seen per link, at 1 Hz.
//!
//! The sums are counters of their own: each link's increase since its previous reading is added (a link whose
//! counter went back, a reset, adds its new value), so a link that goes down, comes back or is not read in
//! one tick neither moves the sum back nor loses what it counted.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

use crate::source::gpu::{GpuInfo, NvlinkInfo};
use crate::source::{Endpoint, Link, LinkClass, LinkKey, LinkRole};

/// How the agent ships NVLink byte counters (`nvlink_bytes = "gpu" | "link"`, `--nvlink-bytes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NvlinkBytes {
    /// Per GPU at the fast rate (its links summed, [`sums_link`]), per link at the slow rate.
    #[default]
    Gpu,
    /// Per link at the fast rate (every link's byte counters every fast tick).
    Link,
}

impl NvlinkBytes {
    /// The configuration word: `gpu` or `link`.
    pub fn as_str(self) -> &'static str {
        match self {
            NvlinkBytes::Gpu => "gpu",
            NvlinkBytes::Link => "link",
        }
    }
}

impl fmt::Display for NvlinkBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is neither `gpu` nor `link`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nvlink bytes must be \"gpu\" or \"link\", not {0:?}")]
pub struct ParseNvlinkBytesError(String);

impl FromStr for NvlinkBytes {
    type Err = ParseNvlinkBytesError;

    fn from_str(s: &str) -> Result<NvlinkBytes, ParseNvlinkBytesError> {
        match s.trim() {
            "gpu" => Ok(NvlinkBytes::Gpu),
            "link" => Ok(NvlinkBytes::Link),
            other => Err(ParseNvlinkBytesError(other.to_string())),
        }
    }
}

/// The link standing for all NVLinks of GPU `gpu` (`links`, as discovered): device `gpu<N>`, empty port, no
/// link number; capacity the sum of its links' (where known), `up` while one of them is, the GPU's facts as
/// attributes (`gpu_uuid`, `gpu_name`, `throughput_source`, `nvlinks`: how many links it sums).
pub fn sums_link(gpu: u32, info: &GpuInfo, links: &[NvlinkInfo], throughput: &str) -> Link {
    let capacity = links
        .iter()
        .filter_map(|l| l.speed_mbps)
        .map(|s| s as f64 * 1e6)
        .fold(None, |sum: Option<f64>, c| Some(sum.unwrap_or(0.0) + c));
    let attributes = BTreeMap::from([
        ("gpu_uuid".to_string(), info.uuid.clone()),
        ("gpu_name".to_string(), info.name.clone()),
        ("throughput_source".to_string(), throughput.to_string()),
        ("nvlinks".to_string(), links.len().to_string()),
    ]);
    Link {
        key: LinkKey::new(LinkClass::Nvlink, format!("gpu{gpu}"), String::new()),
        endpoint: Endpoint::GpuLink,
        role: LinkRole::Fabric,
        capacity_bytes_per_second: capacity,
        state: if links.iter().any(|l| l.active) {
            "up"
        } else {
            "down"
        }
        .to_string(),
        attributes,
        gpu: Some(gpu.to_string()),
        link: None,
    }
}

/// One GPU's byte sums: their series and what each link counted at its last reading.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSums {
    /// Indices of the sums' `tx_bytes` and `rx_bytes` series.
    pub tx: usize,
    pub rx: usize,
    /// The sums, bytes.
    pub total: [u64; 2],
    /// Per link number, its last `[tx, rx]` reading.
    last: BTreeMap<u32, [Option<u64>; 2]>,
}

impl GpuSums {
    pub fn new(tx: usize, rx: usize) -> GpuSums {
        GpuSums {
            tx,
            rx,
            total: [0, 0],
            last: BTreeMap::new(),
        }
    }

    /// Adds link `link`'s reading `bytes` of direction `dir` (0 tx, 1 rx): its increase since the previous
    /// reading, its whole value at the first reading or after a reset. A saturated counter (all ones) is
    /// skipped: no increase can be taken across it.
    pub fn add(&mut self, link: u32, dir: usize, bytes: u64) {
        if bytes == u64::MAX || dir > 1 {
            return;
        }
        let last = &mut self.last.entry(link).or_default()[dir];
        let increase = match *last {
            Some(prev) if bytes >= prev => bytes - prev,
            _ => bytes,
        };
        *last = Some(bytes);
        self.total[dir] = self.total[dir].wrapping_add(increase);
    }

    /// Keeps what `earlier` (this GPU's sums before a rediscovery) counted, when it has the same series.
    pub fn carry_from(&mut self, earlier: &GpuSums) {
        if (earlier.tx, earlier.rx) == (self.tx, self.rx) {
            self.total = earlier.total;
            self.last = earlier.last.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_others_are_refused() {
        for b in [NvlinkBytes::Gpu, NvlinkBytes::Link] {
            assert_eq!(b.as_str().parse::<NvlinkBytes>(), Ok(b));
        }
        assert_eq!(NvlinkBytes::default(), NvlinkBytes::Gpu);
        let e = "port".parse::<NvlinkBytes>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "nvlink bytes must be \"gpu\" or \"link\", not \"port\""
        );
    }

    #[test]
    fn sums_count_every_increase_once_whatever_the_links_do() {
        let mut s = GpuSums::new(1, 2);
        // First readings: the counters' values.
        s.add(0, 0, 1000);
        s.add(1, 0, 500);
        assert_eq!(s.total[0], 1500);
        // Increases.
        s.add(0, 0, 1100);
        s.add(1, 0, 700);
        assert_eq!(s.total[0], 1800);
        // Link 1 not read this tick, then read again: nothing lost.
        s.add(0, 0, 1200);
        s.add(0, 0, 1300);
        s.add(1, 0, 900);
        assert_eq!(s.total[0], 2200);
        // Link 0 reset (driver reload): its new value is what it counted since.
        s.add(0, 0, 40);
        assert_eq!(s.total[0], 2240);
        // A saturated reading is skipped; the next one counts from the last good one.
        s.add(1, 0, u64::MAX);
        s.add(1, 0, 950);
        assert_eq!(s.total[0], 2290);
        assert_eq!(s.total[1], 0, "the other direction apart");
        // A rediscovery keeps the sums of the same series, not of others.
        let mut again = GpuSums::new(1, 2);
        again.carry_from(&s);
        assert_eq!(again, s);
        let mut other = GpuSums::new(3, 4);
        other.carry_from(&s);
        assert_eq!(other.total, [0, 0]);
    }

    #[test]
    fn the_sums_link_is_the_gpu_with_its_links_capacity() {
        let info = GpuInfo {
            index: 2,
            uuid: "GPU-2".into(),
            name: "H100".into(),
            pci_bus_id: "00000000:18:00.0".into(),
            nvlink_count: 2,
            gpm_supported: true,
        };
        let nv = |link, active| NvlinkInfo {
            link,
            active,
            version: Some(4),
            speed_mbps: Some(26_562),
            remote_pci_bus_id: None,
            remote_type: None,
        };
        let l = sums_link(2, &info, &[nv(0, true), nv(1, false)], "throughput_fields");
        assert!(l.is_gpu_nvlinks());
        assert_eq!((l.key.device.as_str(), l.key.port.as_str()), ("gpu2", ""));
        assert_eq!((l.gpu.as_deref(), l.link.as_deref()), (Some("2"), None));
        assert_eq!(l.capacity_bytes_per_second, Some(2.0 * 26.562e9));
        assert!(l.is_up(), "up while one of its links is");
        assert_eq!(l.attributes["nvlinks"], "2");
        let down = sums_link(2, &info, &[nv(0, false)], "throughput_fields");
        assert!(!down.is_up());
    }
}
