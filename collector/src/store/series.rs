//! One series: its identity across agent restarts ([`SeriesKey`]), its bounded window and, for a counter, the
//! reset-corrected cumulative increase the window holds ([`Series`]), and what applying samples to it counted
//! ([`ApplyCounts`]).

use std::sync::Arc;

use commwatch_model::{LinkKey, SeriesKind, Tier};

use super::rate::{counter_step, plausibility_cap, window_rate, Step, RATE_WINDOW_NS};
use super::ring::Ring;

/// Identity of a series across agent restarts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    /// The link it measures; `None` for node-level series.
    pub link: Option<LinkKey>,
    pub metric: String,
    /// Extra labels, sorted by key.
    pub labels: Vec<(String, String)>,
}

/// Counts produced by applying one batch (added to the collector's health metrics once per batch).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ApplyCounts {
    pub samples: u64,
    /// Samples of refused series (unknown kind), skipped.
    pub refused: u64,
    /// Samples not newer than the series' previous one, skipped.
    pub out_of_order: u64,
    pub resets: u64,
    pub implausible: u64,
    /// Step markers appended to the node's marker log.
    pub markers: u64,
    /// Samples of ticks stamped outside the window around their receipt (more than `limits.max_clock_skew`
    /// ahead, or not after the Unix epoch, which the edge refuses already), skipped: one far-future sample
    /// would hold its series' newest time and make every later one out of order.
    pub out_of_window: u64,
}

/// One series' window and counter state.
///
/// Laid out in two cache lines: the first holds what taking a reading reads and writes ([`Series::accept`], at
/// every sample), the second its ring and what readers ask for (the ring's pointer is all a flush of the node's
/// head reads here). Why: a batch checks hundreds of series a tick, each cold by then at a few hundred nodes;
/// at 104 B in no particular order a reading touched two lines of most series, and the apply waited on the
/// memory. 24 B more a series (128 B).
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Series {
    /// Previous reading (0 timestamp: none yet).
    pub(super) last_ts: i64,
    pub(super) last_raw: u64,
    /// The number of the node's tick the previous reading was taken at (its newest sample's: held while the
    /// node holds that tick, [`super::NodeState::newest_sample`]).
    pub(super) last_tick: u64,
    pub(super) acc: u64,
    /// Plausibility cap, units per second.
    pub(super) cap_per_s: f64,
    pub(super) kind: SeriesKind,
    pub(super) saturated: bool,
    /// Whether it is a link's byte counter ([`super::NodeState::link_byte_series`]), set at each inventory.
    pub(super) link_bytes: bool,
    /// `(tick number, value)`: the timestamps are the node's (`Ticks`). Boxed: a batch checks every series'
    /// reading (the first line) a tick at a time, and the ring's state, only touched when the node's head
    /// moves a run into it, would spread those readings over five times the cache lines.
    pub(super) ring: Box<Ring>,
    pub(super) key: Arc<SeriesKey>,
    /// Index into the node's links.
    pub(super) link: Option<usize>,
    /// Its index in its node's series (its column in the node's head).
    pub(super) slot: usize,
    pub(super) tier: Option<Tier>,
}

impl Series {
    pub(super) fn new(
        key: Arc<SeriesKey>,
        kind: SeriesKind,
        tier: Option<Tier>,
        cap: usize,
    ) -> Series {
        Series {
            key,
            kind,
            tier,
            link: None,
            slot: 0,
            cap_per_s: plausibility_cap(None),
            ring: Box::new(Ring::new(cap)),
            last_ts: 0,
            last_raw: 0,
            last_tick: 0,
            link_bytes: false,
            acc: 0,
            saturated: false,
        }
    }

    /// The bytes [`Series::accept`] reads and writes, from the start of a series: its first cache line.
    pub(super) const READING_BYTES: usize = 64;

    pub fn key(&self) -> &Arc<SeriesKey> {
        &self.key
    }

    pub fn kind(&self) -> SeriesKind {
        self.kind
    }

    /// The tier the agent reads it in (`None`: the agent did not say).
    pub fn tier(&self) -> Option<Tier> {
        self.tier
    }

    /// Its index in its node's series ([`super::NodeState::series`]), while the node's layout stands
    /// ([`super::NodeState::layout`]).
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Index of the link it measures in its node's [`NodeState::links`]; `None` for node-level series.
    pub fn link_index(&self) -> Option<usize> {
        self.link
    }

    /// The ring of `(tick number, value)` samples (for the in-process measurements, `crate::measure`).
    #[cfg(test)]
    pub(crate) fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The last reading as the agent sent it: `(timestamp_ns, raw)`.
    pub fn last_raw(&self) -> Option<(i64, u64)> {
        (self.last_ts > 0).then_some((self.last_ts, self.last_raw))
    }

    /// Counter rate per second over the last [`RATE_WINDOW_NS`] of `samples` (its own); `None` for gauges,
    /// with fewer than two readings, or while the counter sits at its saturation value (its true rate is
    /// unknown).
    #[cfg(test)]
    pub(super) fn rate(&self, samples: super::ticks::Samples<'_>) -> Option<f64> {
        self.rate_of(samples.iter().rev())
    }

    /// [`Series::rate`] of its samples as `(timestamp_ns, value)`, given newest first (read only as far as
    /// the window needs).
    pub(super) fn rate_of(&self, newest_first: impl Iterator<Item = (i64, u64)>) -> Option<f64> {
        match self.kind {
            SeriesKind::Counter { .. } if !self.saturated => {
                window_rate(newest_first, RATE_WINDOW_NS)
            }
            _ => None,
        }
    }

    pub(super) fn value_f64(&self) -> f64 {
        match self.kind {
            SeriesKind::Counter { .. } => self.last_raw as f64,
            SeriesKind::Gauge => f64::from_bits(self.last_raw),
        }
    }

    /// Takes the reading `raw` at `ts`, of the node's tick numbered `tick`: the value its ring is to hold (the
    /// reading for a gauge, the reset-corrected cumulative increase for a counter), or `None` when it is not
    /// newer than the previous reading (counted, skipped). The caller pushes the value under `tick`; `ts` > 0
    /// (the batch's window check), so the first reading is always newer than "none yet" (0).
    #[inline]
    pub(super) fn accept(
        &mut self,
        ts: i64,
        tick: u64,
        raw: u64,
        c: &mut ApplyCounts,
    ) -> Option<u64> {
        debug_assert!(ts > 0);
        if ts <= self.last_ts {
            c.out_of_order += 1;
            return None;
        }
        c.samples += 1;
        let value = match self.kind {
            SeriesKind::Gauge => raw,
            SeriesKind::Counter { max_value } => {
                if self.last_ts != 0 {
                    match counter_step(
                        self.last_raw,
                        raw,
                        max_value,
                        ts - self.last_ts,
                        self.cap_per_s,
                    ) {
                        Step::Delta(d) => self.acc = self.acc.wrapping_add(d),
                        Step::Reset(d) => {
                            c.resets += 1;
                            self.acc = self.acc.wrapping_add(d);
                        }
                        Step::ResetSkipped => c.resets += 1,
                        Step::Implausible => c.implausible += 1,
                        Step::Hold => {}
                    }
                }
                self.saturated = raw >= max_value;
                self.acc
            }
        };
        self.last_ts = ts;
        self.last_raw = raw;
        self.last_tick = tick;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    #[test]
    fn a_reading_touches_one_line_and_a_flush_the_other() {
        assert_eq!(size_of::<Series>(), 128);
        assert_eq!(std::mem::align_of::<Series>(), 64);
        let reading = [
            offset_of!(Series, last_ts),
            offset_of!(Series, last_raw),
            offset_of!(Series, last_tick),
            offset_of!(Series, acc),
            offset_of!(Series, cap_per_s),
            offset_of!(Series, kind) + size_of::<SeriesKind>() - 1,
            offset_of!(Series, saturated),
            offset_of!(Series, link_bytes),
        ];
        assert!(
            reading.iter().all(|&o| o < Series::READING_BYTES),
            "{reading:?}"
        );
        let ring = offset_of!(Series, ring);
        assert!(ring >= Series::READING_BYTES && ring + 8 <= 128);
    }
}
