//! Discovery of the `nvml` source: GPUs, their NVLinks and where each GPU's byte counters come from; the
//! series of each, registered once and kept at their index.

use std::collections::BTreeMap;
use std::time::Instant;

use super::{
    choose_throughput, link_key, sums, GpuSeries, LinkSeries, NvlinkBytes, NvmlSource,
    ThroughputSource, GPU_SERIES,
};
use crate::source::gpu::{GpuBackend, GpuError, GpuInfo, NvlinkInfo};
use crate::source::{Endpoint, Link, LinkRole, SeriesKind, SourceError, Tier};

impl NvmlSource {
    /// Rescans the GPUs through `b`; returns whether the inventory changed.
    pub(super) fn discover_gpus(&mut self, b: &mut dyn GpuBackend) -> Result<bool, SourceError> {
        let started = Instant::now();
        let count = match b.device_count() {
            Ok(n) => n,
            Err(GpuError::Unavailable(e)) => {
                if !self.absent_logged {
                    tracing::info!(error = %e, "nvml source: NVML not available");
                    self.absent_logged = true;
                }
                self.unavailable = Some(format!("NVML not available ({e})"));
                return Ok(false);
            }
            Err(e) => return Err(SourceError::Other(format!("nvml: device count: {e}"))),
        };
        self.observe_call("device_count", started);
        let mut changed = false;
        let mut links_now: Vec<Link> = Vec::new();
        let mut seen: Vec<u32> = Vec::new();
        for gpu in 0..count {
            let Some(info) = self.device_info(b, gpu) else {
                continue;
            };
            seen.push(gpu);
            let state = self.discover_gpu(b, gpu, info, &mut links_now, &mut changed);
            self.replace_gpu(state);
        }
        self.mark_missing(&seen);
        changed |= self.merge_links(links_now);
        Ok(changed)
    }

    /// The facts of GPU `gpu`; `None` when it does not answer (a GPU already known is marked lost, and said
    /// so once).
    fn device_info(&mut self, b: &mut dyn GpuBackend, gpu: u32) -> Option<GpuInfo> {
        let started = Instant::now();
        match b.device_info(gpu) {
            Ok(info) => {
                self.observe_call("device_info", started);
                Some(info)
            }
            Err(e) => {
                if let Some(g) = self.gpus.iter_mut().find(|g| g.index == gpu) {
                    if !g.lost {
                        tracing::warn!(gpu, error = %e, "GPU not readable; its series stop until it answers again");
                    }
                    g.lost = true;
                } else {
                    tracing::debug!(gpu, error = %e, "GPU not readable at discovery");
                }
                None
            }
        }
    }

    /// Registers the series of GPU `gpu` and of its NVLinks, adds the links to `links`, and returns the GPU's
    /// sampling state.
    fn discover_gpu(
        &mut self,
        b: &mut dyn GpuBackend,
        gpu: u32,
        info: GpuInfo,
        links: &mut Vec<Link>,
        changed: &mut bool,
    ) -> GpuSeries {
        let mut nvlinks = Vec::new();
        for l in 0..info.nvlink_count {
            let started = Instant::now();
            match b.nvlink_info(gpu, l) {
                Ok(li) => nvlinks.push(li),
                Err(e) => tracing::debug!(gpu, link = l, error = %e, "NVLink not readable"),
            }
            self.observe_call("nvlink_info", started);
        }
        let throughput = choose_throughput(b, gpu, &nvlinks);
        let gpu_label = BTreeMap::from([("gpu".to_string(), gpu.to_string())]);
        let mut node = BTreeMap::new();
        for (metric, kind) in GPU_SERIES {
            let (i, new) = self.series(metric, *kind, Tier::Slow, None, gpu_label.clone());
            *changed |= new;
            node.insert(*metric, i);
        }
        let mut link_series = Vec::new();
        for li in &nvlinks {
            links.push(nvlink(gpu, &info, li, throughput));
            link_series.push(self.link_series(gpu, li, throughput, changed));
        }
        let sums = self.gpu_sums(gpu, &info, &nvlinks, throughput, links, changed);
        GpuSeries {
            index: gpu,
            gpm_ok: info.gpm_supported,
            info,
            throughput,
            links: link_series,
            node,
            lost: false,
            recovery_events_supported: true,
            sums,
        }
    }

    /// With [`NvlinkBytes::Gpu`] and byte counters on the GPU: its sums link (added to `links`) and the
    /// sums' fast series ([`sums`]).
    fn gpu_sums(
        &mut self,
        gpu: u32,
        info: &GpuInfo,
        nvlinks: &[NvlinkInfo],
        throughput: ThroughputSource,
        links: &mut Vec<Link>,
        changed: &mut bool,
    ) -> Option<sums::GpuSums> {
        if self.bytes != NvlinkBytes::Gpu
            || throughput == ThroughputSource::None
            || nvlinks.is_empty()
        {
            return None;
        }
        let link = sums::sums_link(gpu, info, nvlinks, throughput.as_str());
        let mut counter = |metric: &str| {
            let (i, new) = self.series(
                metric,
                SeriesKind::COUNTER64,
                Tier::Fast,
                Some(link.key.clone()),
                BTreeMap::new(),
            );
            *changed |= new;
            i
        };
        let (tx, rx) = (counter("tx_bytes"), counter("rx_bytes"));
        links.push(link);
        Some(sums::GpuSums::new(tx, rx))
    }

    /// Registers the series of one NVLink: its byte counters (where the GPU has a source for them) and its
    /// error and recovery counters.
    fn link_series(
        &mut self,
        gpu: u32,
        li: &NvlinkInfo,
        throughput: ThroughputSource,
        changed: &mut bool,
    ) -> LinkSeries {
        // Per link at the fast rate, or at the slow one where the GPU's sums go at the fast rate.
        let tier = match self.bytes {
            NvlinkBytes::Link => Tier::Fast,
            NvlinkBytes::Gpu => Tier::Slow,
        };
        let key = link_key(gpu, li.link);
        let mut counter = |metric: &str, tier: Tier| {
            let (i, new) = self.series(
                metric,
                SeriesKind::COUNTER64,
                tier,
                Some(key.clone()),
                BTreeMap::new(),
            );
            *changed |= new;
            i
        };
        let (tx, rx) = if throughput == ThroughputSource::None {
            (None, None)
        } else {
            (
                Some(counter("tx_bytes", tier)),
                Some(counter("rx_bytes", tier)),
            )
        };
        LinkSeries {
            link: li.link,
            active: li.active,
            tx,
            rx,
            crc_flit: counter("crc_flit_errors", Tier::Slow),
            crc_data: counter("crc_data_errors", Tier::Slow),
            replay: counter("replay_errors", Tier::Slow),
            recovery: counter("recovery_errors", Tier::Slow),
            recovery_events: counter("recovery_events", Tier::Slow),
        }
    }

    /// Keeps the sampling state of a GPU found at this discovery (one that was lost answers again).
    fn replace_gpu(&mut self, state: GpuSeries) {
        match self.gpus.iter_mut().find(|g| g.index == state.index) {
            Some(g) => {
                if g.lost {
                    tracing::info!(gpu = state.index, "GPU answers again");
                }
                let mut state = state;
                if let (Some(new), Some(old)) = (state.sums.as_mut(), g.sums.as_ref()) {
                    new.carry_from(old);
                }
                *g = state;
            }
            None => self.gpus.push(state),
        }
    }

    /// GPUs that no longer enumerate keep their series, which stop producing.
    fn mark_missing(&mut self, seen: &[u32]) {
        for g in &mut self.gpus {
            if !seen.contains(&g.index) && !g.lost {
                tracing::warn!(gpu = g.index, "GPU no longer enumerated by NVML");
                g.lost = true;
            }
        }
    }

    /// Links only ever gain entries; facts of known links are replaced. Returns whether anything changed.
    fn merge_links(&mut self, links_now: Vec<Link>) -> bool {
        let mut changed = false;
        for l in links_now {
            match self.inventory.links.iter_mut().find(|x| x.key == l.key) {
                Some(x) => {
                    if *x != l {
                        *x = l;
                        changed = true;
                    }
                }
                None => {
                    self.inventory.links.push(l);
                    changed = true;
                }
            }
        }
        changed
    }
}

/// The inventory link of NVLink `li` of GPU `gpu`.
fn nvlink(gpu: u32, info: &GpuInfo, li: &NvlinkInfo, throughput: ThroughputSource) -> Link {
    let mut attributes = BTreeMap::new();
    if let Some(v) = li.version {
        attributes.insert("version".to_string(), v.to_string());
    }
    if let Some(r) = &li.remote_pci_bus_id {
        attributes.insert("remote_pci_bus_id".to_string(), r.clone());
    }
    if let Some(t) = li.remote_type {
        attributes.insert("peer_type".to_string(), t.as_str().to_string());
    }
    attributes.insert("gpu_uuid".to_string(), info.uuid.clone());
    attributes.insert("gpu_name".to_string(), info.name.clone());
    attributes.insert(
        "throughput_source".to_string(),
        throughput.as_str().to_string(),
    );
    Link {
        key: link_key(gpu, li.link),
        endpoint: Endpoint::GpuLink,
        role: LinkRole::Fabric,
        capacity_bytes_per_second: li.speed_mbps.map(|s| s as f64 * 1e6),
        state: if li.active { "up" } else { "down" }.to_string(),
        attributes,
        gpu: Some(gpu.to_string()),
        link: Some(li.link.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::gpu::PeerType;

    #[test]
    fn an_nvlink_is_a_gpu_link_with_its_facts() {
        let info = GpuInfo {
            index: 3,
            uuid: "GPU-1".into(),
            name: "H100".into(),
            pci_bus_id: "00000000:18:00.0".into(),
            nvlink_count: 18,
            gpm_supported: true,
        };
        let li = NvlinkInfo {
            link: 5,
            active: true,
            version: Some(4),
            speed_mbps: Some(26_562),
            remote_pci_bus_id: Some("00000000:99:00.0".into()),
            remote_type: Some(PeerType::Switch),
        };
        let l = nvlink(3, &info, &li, ThroughputSource::ThroughputKib);
        assert_eq!(l.endpoint, Endpoint::GpuLink);
        assert_eq!((l.key.device.as_str(), l.key.port.as_str()), ("gpu3", "5"));
        assert_eq!(
            (l.gpu.as_deref(), l.link.as_deref()),
            (Some("3"), Some("5"))
        );
        assert_eq!(l.capacity_bytes_per_second, Some(26.562e9));
        assert!(l.is_up() && !l.is_interface() && !l.is_fabric_rdma());
        assert_eq!(l.attributes["throughput_source"], "throughput_fields");
        assert_eq!(l.attributes["peer_type"], PeerType::Switch.as_str());
    }
}
