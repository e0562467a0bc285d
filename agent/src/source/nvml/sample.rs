//! Sampling of the `nvml` source. The fast tier reads each GPU's NVLink byte counters in one batched call
//! (or the legacy counters link by link); the slow tier reads the GPU's node-level values, the links'
//! recovery events in one batched call and, every [`ERROR_COUNTER_EVERY`](super::ERROR_COUNTER_EVERY) slow
//! ticks, the links' error counters. Each method returns whether the GPU was found lost.

use std::collections::BTreeMap;
use std::time::Instant;

use super::{gpu_err, kib_to_bytes, GpuSeries, LinkSeries, NvmlSource, ThroughputSource};
use crate::source::gpu::{by_request, field, FieldRequest, GpuBackend, GpuError};
use crate::source::{ReadReport, SourceError, Value};

/// Where the slow tier's node-level values of one GPU go: into the sink by series name, failures into the
/// report; and whether a read found the GPU lost.
struct NodeValues<'a> {
    gpu: u32,
    node: &'a BTreeMap<&'static str, usize>,
    sink: &'a mut dyn FnMut(usize, Value),
    report: &'a mut ReadReport,
    lost: bool,
}

impl NodeValues<'_> {
    /// One value of series `name`. Not finite is a failure; NotSupported is absent (many GPUs lack some
    /// values), not a failure.
    fn push(&mut self, name: &str, v: Result<f64, GpuError>) {
        let Some(&idx) = self.node.get(name) else {
            return;
        };
        match v {
            Ok(v) if v.is_finite() => {
                let value = if name == "gpu_pcie_replay_errors" {
                    Value::Counter(v as u64)
                } else {
                    Value::Gauge(v)
                };
                (self.sink)(idx, value);
                self.report.read += 1;
            }
            Ok(_) => self.report.fail(gpu_err(
                name,
                self.gpu,
                &GpuError::Other("not finite".into()),
            )),
            Err(GpuError::NotSupported) => {}
            Err(e) => {
                if e == GpuError::GpuLost {
                    self.lost = true;
                }
                self.report.fail(gpu_err(name, self.gpu, &e));
            }
        }
    }
}

impl NvmlSource {
    /// The fast tier of one GPU: its links' byte counters, or with its sums ([`super::sums`]) the sums alone.
    pub(super) fn sample_fast(
        &self,
        b: &mut dyn GpuBackend,
        g: &mut GpuSeries,
        sink: &mut dyn FnMut(usize, Value),
        report: &mut ReadReport,
    ) -> bool {
        let mut sums = g.sums.take();
        let (mut pushed, mut read) = (0, false);
        let lost = self.read_link_bytes(b, g, report, &mut |l, dir, bytes| {
            read = true;
            match &mut sums {
                Some(s) => s.add(l.link, dir, bytes),
                None => {
                    if let Some(i) = [l.tx, l.rx][dir] {
                        sink(i, Value::Counter(bytes));
                        pushed += 1;
                    }
                }
            }
        });
        // The sums once a link was read this tick (none read: no sample, rather than a stale one).
        if let Some(s) = sums.as_ref().filter(|_| read) {
            sink(s.tx, Value::Counter(s.total[0]));
            sink(s.rx, Value::Counter(s.total[1]));
            pushed += 2;
        }
        report.read += pushed;
        g.sums = sums;
        lost
    }

    /// With the GPU's sums: its links' own byte counters (read in the slow tier), also added to the sums.
    fn slow_link_bytes(
        &self,
        b: &mut dyn GpuBackend,
        g: &mut GpuSeries,
        sink: &mut dyn FnMut(usize, Value),
        report: &mut ReadReport,
    ) -> bool {
        let Some(mut sums) = g.sums.take() else {
            return false;
        };
        let mut pushed = 0;
        let lost = self.read_link_bytes(b, g, report, &mut |l, dir, bytes| {
            sums.add(l.link, dir, bytes);
            if let Some(i) = [l.tx, l.rx][dir] {
                sink(i, Value::Counter(bytes));
                pushed += 1;
            }
        });
        report.read += pushed;
        g.sums = Some(sums);
        lost
    }

    /// Reads the byte counters of the GPU's active links from its throughput source, handing each value to
    /// `each` as (link, direction 0 tx / 1 rx, bytes); failures go to `report` (the caller counts what it
    /// pushes). Returns whether the GPU was found lost.
    fn read_link_bytes(
        &self,
        b: &mut dyn GpuBackend,
        g: &GpuSeries,
        report: &mut ReadReport,
        each: &mut dyn FnMut(&LinkSeries, usize, u64),
    ) -> bool {
        match g.throughput {
            ThroughputSource::ThroughputKib => self.read_byte_fields(
                b,
                g,
                (
                    field::NVLINK_THROUGHPUT_DATA_TX,
                    field::NVLINK_THROUGHPUT_DATA_RX,
                ),
                kib_to_bytes,
                report,
                each,
            ),
            ThroughputSource::Nvlink5Bytes => self.read_byte_fields(
                b,
                g,
                (
                    field::NVLINK_COUNT_XMIT_BYTES,
                    field::NVLINK_COUNT_RCV_BYTES,
                ),
                |v| v,
                report,
                each,
            ),
            ThroughputSource::LegacyCounters => self.read_legacy_bytes(b, g, report, each),
            ThroughputSource::None => false,
        }
    }

    /// Byte counters from the pre-Hopper utilisation counters, one call per active link.
    fn read_legacy_bytes(
        &self,
        b: &mut dyn GpuBackend,
        g: &GpuSeries,
        report: &mut ReadReport,
        each: &mut dyn FnMut(&LinkSeries, usize, u64),
    ) -> bool {
        for l in g.links.iter().filter(|l| l.active) {
            if l.tx.is_none() || l.rx.is_none() {
                continue;
            }
            let started = Instant::now();
            let r = b.nvlink_legacy_bytes(g.index, l.link);
            self.observe_call("nvlink_utilization_counter", started);
            match r {
                Ok((t, r)) => {
                    each(l, 0, t);
                    each(l, 1, r);
                }
                Err(GpuError::GpuLost) => {
                    report.fail(gpu_err("nvlink counters", g.index, &GpuError::GpuLost));
                    return true;
                }
                Err(e) => {
                    // Both directions failed.
                    report.fail(gpu_err("nvlink counters", g.index, &e));
                    report.failed += 1;
                }
            }
        }
        false
    }

    /// Byte counters from the `(tx, rx)` fields of every active link in one batched call, each value
    /// converted to bytes by `scale`.
    fn read_byte_fields(
        &self,
        b: &mut dyn GpuBackend,
        g: &GpuSeries,
        (tx_field, rx_field): (u32, u32),
        scale: fn(u64) -> u64,
        report: &mut ReadReport,
        each: &mut dyn FnMut(&LinkSeries, usize, u64),
    ) -> bool {
        let req: Vec<FieldRequest> = g
            .links
            .iter()
            .filter(|l| l.active && l.tx.is_some())
            .flat_map(|l| {
                [tx_field, rx_field].map(|field_id| FieldRequest {
                    field_id,
                    scope_id: l.link,
                })
            })
            .collect();
        if req.is_empty() {
            return false;
        }
        let started = Instant::now();
        let answer = b.field_values(g.index, &req);
        self.observe_call("field_values", started);
        let values = match answer {
            Ok(v) => v,
            Err(e) => {
                let lost = e == GpuError::GpuLost;
                report.fail(gpu_err("field values", g.index, &e));
                report.failed += req.len() - 1;
                return lost;
            }
        };
        self.observe_fields(&values);
        let values = by_request(values);
        for l in g.links.iter().filter(|l| l.active) {
            for (dir, (f, idx)) in [(tx_field, l.tx), (rx_field, l.rx)].into_iter().enumerate() {
                if idx.is_none() {
                    continue;
                }
                match values.get(&(f, l.link)).map(|v| &v.value) {
                    Some(Ok(v)) => each(l, dir, scale(*v)),
                    Some(Err(e)) => report.fail(SourceError::Other(format!(
                        "gpu{} link {}: field {f}: {e}",
                        g.index, l.link
                    ))),
                    None => report.fail(SourceError::Other(format!(
                        "gpu{} link {}: field {f}: no answer",
                        g.index, l.link
                    ))),
                }
            }
        }
        false
    }

    /// The slow tier of one GPU: node-level values, then the links' recovery events and (when
    /// `read_errors`) error counters.
    pub(super) fn sample_slow(
        &self,
        b: &mut dyn GpuBackend,
        g: &mut GpuSeries,
        read_errors: bool,
        sink: &mut dyn FnMut(usize, Value),
        report: &mut ReadReport,
    ) -> bool {
        let mut out = NodeValues {
            gpu: g.index,
            node: &g.node,
            sink: &mut *sink,
            report: &mut *report,
            lost: false,
        };
        self.slow_utilization(b, &mut out);
        if out.lost {
            return true;
        }
        let t = Instant::now();
        let m = b.memory_used_bytes(g.index);
        self.observe_call("memory_info", t);
        out.push("gpu_memory_used_bytes", m.map(|v| v as f64));
        let gpm_pcie = g.gpm_ok && self.slow_gpm(b, &mut g.gpm_ok, &mut out);
        self.slow_pcie(b, gpm_pcie, &mut out);
        self.slow_power_and_clock(b, &mut out);
        if out.lost {
            return true;
        }
        if g.recovery_events_supported
            && !g.links.is_empty()
            && self.slow_recovery_events(b, g, sink, report)
        {
            return true;
        }
        if self.slow_link_bytes(b, g, sink, report) {
            return true;
        }
        read_errors && self.slow_error_counters(b, g, sink, report)
    }

    fn slow_utilization(&self, b: &mut dyn GpuBackend, out: &mut NodeValues) {
        let t = Instant::now();
        let u = b.utilization(out.gpu);
        self.observe_call("utilization", t);
        match u {
            Ok(u) => {
                out.push(
                    "gpu_utilization_ratio",
                    Ok(f64::from(u.gpu_percent.min(100)) / 100.0),
                );
                out.push(
                    "gpu_memory_utilization_ratio",
                    Ok(f64::from(u.memory_percent.min(100)) / 100.0),
                );
            }
            Err(e) => out.push("gpu_utilization_ratio", Err(e)),
        }
    }

    /// GPM rates (SM activity, NVLink and PCIe throughput); returns whether they stand in for the PCIe
    /// throughput call. A GPU that answers NotSupported is not asked again (`gpm_ok` cleared).
    fn slow_gpm(&self, b: &mut dyn GpuBackend, gpm_ok: &mut bool, out: &mut NodeValues) -> bool {
        let t = Instant::now();
        let r = b.gpm(out.gpu);
        self.observe_call("gpm", t);
        match r {
            Ok(m) => {
                out.push(
                    "gpu_sm_activity_ratio",
                    Ok((m.sm_activity_percent / 100.0).clamp(0.0, 1.0)),
                );
                for (name, v) in [
                    (
                        "gpu_nvlink_tx_bytes_per_second",
                        m.nvlink_tx_bytes_per_second,
                    ),
                    (
                        "gpu_nvlink_rx_bytes_per_second",
                        m.nvlink_rx_bytes_per_second,
                    ),
                    ("gpu_pcie_tx_bytes_per_second", m.pcie_tx_bytes_per_second),
                    ("gpu_pcie_rx_bytes_per_second", m.pcie_rx_bytes_per_second),
                ] {
                    if let Some(v) = v {
                        out.push(name, Ok(v));
                    }
                }
                m.pcie_tx_bytes_per_second.is_some()
            }
            // The first call only takes the first sample.
            Err(GpuError::NotFound) => true,
            Err(GpuError::NotSupported) => {
                *gpm_ok = false;
                false
            }
            Err(e) => {
                out.push("gpu_sm_activity_ratio", Err(e));
                false
            }
        }
    }

    /// The PCIe link and replay counter; the throughput too unless GPM gave it (`gpm_pcie`).
    fn slow_pcie(&self, b: &mut dyn GpuBackend, gpm_pcie: bool, out: &mut NodeValues) {
        let t = Instant::now();
        let p = b.pcie(out.gpu, !gpm_pcie);
        self.observe_call("pcie", t);
        let p = match p {
            Ok(p) => p,
            Err(e) => return out.push("gpu_pcie_link_gen", Err(e)),
        };
        if !gpm_pcie {
            out.push(
                "gpu_pcie_tx_bytes_per_second",
                p.tx_kb_per_second.map(|v| v as f64 * 1000.0),
            );
            out.push(
                "gpu_pcie_rx_bytes_per_second",
                p.rx_kb_per_second.map(|v| v as f64 * 1000.0),
            );
        }
        out.push("gpu_pcie_link_gen", p.link_gen.map(f64::from));
        out.push("gpu_pcie_link_gen_max", p.link_gen_max.map(f64::from));
        out.push("gpu_pcie_link_width", p.link_width.map(f64::from));
        out.push("gpu_pcie_link_width_max", p.link_width_max.map(f64::from));
        out.push("gpu_pcie_replay_errors", p.replay_counter.map(|v| v as f64));
    }

    fn slow_power_and_clock(&self, b: &mut dyn GpuBackend, out: &mut NodeValues) {
        let t = Instant::now();
        let w = b.power_mw(out.gpu);
        self.observe_call("power_usage", t);
        out.push("gpu_power_watts", w.map(|mw| mw as f64 / 1000.0));
        let t = Instant::now();
        let c = b.sm_clock_mhz(out.gpu);
        self.observe_call("clock_info", t);
        out.push("gpu_sm_clock_hz", c.map(|mhz| f64::from(mhz) * 1e6));
    }

    /// Link recovery events (NVLink 5) in one batched call; a GPU where every link answers NotSupported is
    /// not asked again until the next discovery.
    fn slow_recovery_events(
        &self,
        b: &mut dyn GpuBackend,
        g: &mut GpuSeries,
        sink: &mut dyn FnMut(usize, Value),
        report: &mut ReadReport,
    ) -> bool {
        let req: Vec<FieldRequest> = g
            .links
            .iter()
            .map(|l| FieldRequest {
                field_id: field::NVLINK_COUNT_LINK_RECOVERY_EVENTS,
                scope_id: l.link,
            })
            .collect();
        let t = Instant::now();
        let r = b.field_values(g.index, &req);
        self.observe_call("field_values", t);
        match r {
            Ok(values) => {
                self.observe_fields(&values);
                if values
                    .iter()
                    .all(|v| v.value == Err(GpuError::NotSupported))
                {
                    g.recovery_events_supported = false;
                }
                let values = by_request(values);
                for l in &g.links {
                    if let Some(Ok(v)) = values
                        .get(&(field::NVLINK_COUNT_LINK_RECOVERY_EVENTS, l.link))
                        .map(|v| &v.value)
                    {
                        sink(l.recovery_events, Value::Counter(*v));
                        report.read += 1;
                    }
                }
                false
            }
            Err(GpuError::NotSupported) => {
                g.recovery_events_supported = false;
                false
            }
            Err(e) => {
                report.fail(gpu_err("recovery events", g.index, &e));
                e == GpuError::GpuLost
            }
        }
    }

    /// The error counters of every active link, one driver call per link.
    fn slow_error_counters(
        &self,
        b: &mut dyn GpuBackend,
        g: &GpuSeries,
        sink: &mut dyn FnMut(usize, Value),
        report: &mut ReadReport,
    ) -> bool {
        let gpu = g.index;
        for l in g.links.iter().filter(|l| l.active) {
            let t = Instant::now();
            let r = b.nvlink_errors(gpu, l.link);
            self.observe_call("nvlink_error_counter", t);
            match r {
                Ok(e) => {
                    for (idx, v) in [
                        (l.crc_flit, e.crc_flit),
                        (l.crc_data, e.crc_data),
                        (l.replay, e.replay),
                        (l.recovery, e.recovery),
                    ] {
                        match v {
                            Ok(v) => {
                                sink(idx, Value::Counter(v));
                                report.read += 1;
                            }
                            Err(GpuError::NotSupported) => {}
                            Err(e) => report.fail(gpu_err("nvlink error counter", gpu, &e)),
                        }
                    }
                }
                Err(GpuError::GpuLost) => {
                    report.fail(gpu_err("nvlink error counters", gpu, &GpuError::GpuLost));
                    return true;
                }
                Err(GpuError::NotSupported) => {}
                Err(e) => report.fail(gpu_err("nvlink error counters", gpu, &e)),
            }
        }
        false
    }
}
