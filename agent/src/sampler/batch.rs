//! The columnar batch (`commwatch.v1.SampleBatch`) under construction: ticks of samples sharing a
//! timestamp, each sample a series id and its value's wire bits.
//!
//! A sample is stamped with the time it was read ([`BatchBuilder::push_read`]), not with the time its tick
//! was due: the collector's rates divide by the distance between two samples' timestamps, so a read delayed
//! behind a slow source, a stalled thread or a late tick must carry its own time. Samples read within the
//! builder's resolution of each other share one tick (one timestamp on the wire); a later one opens the next.

use std::time::Duration;

use commwatch_proto::v1 as pb;

/// Resolution of a builder that was not given one: samples read within 100 µs of a tick's first sample
/// share its timestamp.
pub const DEFAULT_RESOLUTION: Duration = Duration::from_micros(100);

/// Columnar batch under construction.
#[derive(Debug)]
pub struct BatchBuilder {
    timestamps: Vec<i64>,
    lengths: Vec<u32>,
    ids: Vec<u32>,
    values: Vec<u64>,
    open: bool,
    /// Largest distance, in nanoseconds, between a sample's read time and its tick's timestamp.
    resolution_ns: i64,
}

impl Default for BatchBuilder {
    fn default() -> BatchBuilder {
        BatchBuilder {
            timestamps: Vec::new(),
            lengths: Vec::new(),
            ids: Vec::new(),
            values: Vec::new(),
            open: false,
            resolution_ns: DEFAULT_RESOLUTION.as_nanos() as i64,
        }
    }
}

impl BatchBuilder {
    /// Sets how far a sample's read time may be from its tick's timestamp (at least 1 µs). A sample is
    /// stamped up to this much early, so a rate over an interval `T` is off by at most `resolution / T`.
    pub fn set_resolution(&mut self, resolution: Duration) {
        self.resolution_ns = i64::try_from(resolution.as_nanos())
            .unwrap_or(i64::MAX)
            .max(1_000);
    }

    /// Adds a sample read at `unix_ns`: it joins the open tick when that tick's timestamp is within the
    /// resolution of `unix_ns`, else it opens a new tick stamped `unix_ns` (a clock stepped back opens one
    /// too).
    pub fn push_read(&mut self, id: u32, value: u64, unix_ns: i64) {
        let joins = self.open
            && self
                .timestamps
                .last()
                .is_some_and(|&t| unix_ns >= t && unix_ns - t <= self.resolution_ns);
        if !joins {
            self.begin_tick(unix_ns);
        }
        self.push(id, value);
    }

    /// Starts a tick at `unix_ns`; samples [`push`](Self::push)ed until [`end_tick`](Self::end_tick) share
    /// its timestamp.
    pub fn begin_tick(&mut self, unix_ns: i64) {
        if self.open {
            self.end_tick();
        }
        self.timestamps.push(unix_ns);
        self.lengths.push(0);
        self.open = true;
    }

    pub fn push(&mut self, id: u32, value: u64) {
        if !self.open {
            return;
        }
        self.ids.push(id);
        self.values.push(value);
        if let Some(l) = self.lengths.last_mut() {
            *l += 1;
        }
    }

    /// Closes the tick; an empty tick is removed.
    pub fn end_tick(&mut self) {
        if self.open && self.lengths.last() == Some(&0) {
            self.lengths.pop();
            self.timestamps.pop();
        }
        self.open = false;
    }

    pub fn samples(&self) -> usize {
        self.ids.len()
    }

    /// Takes the batch gathered so far (`seq` 0), or `None` when it holds no sample. The next batch starts
    /// with room for as many samples and ticks as this one (batches of a node are alike: no regrowth).
    pub fn take(&mut self) -> Option<pb::SampleBatch> {
        self.end_tick();
        if self.ids.is_empty() {
            return None;
        }
        fn take_sized<T>(v: &mut Vec<T>) -> Vec<T> {
            let room = Vec::with_capacity(v.len());
            std::mem::replace(v, room)
        }
        Some(pb::SampleBatch {
            seq: 0,
            timestamps_unix_ns: take_sized(&mut self.timestamps),
            tick_lengths: take_sized(&mut self.lengths),
            series_ids: take_sized(&mut self.ids),
            values: take_sized(&mut self.values),
            dropped_batches_total: 0,
            markers: Vec::new(),
            collectives: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_groups_ticks_and_drops_empty_ones() {
        let mut b = BatchBuilder::default();
        b.begin_tick(10);
        b.push(1, 100);
        b.push(2, 200);
        b.begin_tick(20);
        b.end_tick();
        b.begin_tick(30);
        b.push(1, 150);
        let batch = b.take().unwrap();
        assert_eq!(batch.timestamps_unix_ns, vec![10, 30]);
        assert_eq!(batch.tick_lengths, vec![2, 1]);
        assert_eq!(batch.series_ids, vec![1, 2, 1]);
        assert_eq!(batch.values, vec![100, 200, 150]);
        assert!(b.take().is_none());
    }

    #[test]
    fn reads_share_a_tick_within_the_resolution_and_open_one_after_it() {
        const MS: i64 = 1_000_000;
        let mut b = BatchBuilder::default();
        b.set_resolution(Duration::from_millis(1));
        // A tick begun at 10 ms whose first read comes 0.5 ms later keeps its stamp.
        b.begin_tick(10 * MS);
        b.push_read(1, 100, 10 * MS + MS / 2);
        b.push_read(2, 200, 11 * MS);
        // Read after a stall: its own tick, stamped at the read.
        b.push_read(3, 300, 31 * MS);
        b.push_read(4, 400, 31 * MS + 10);
        // A clock stepped back opens a tick rather than stamping the sample late.
        b.push_read(5, 500, 30 * MS);
        b.end_tick();
        // After a closed tick, the next read opens a new one even within the resolution.
        b.push_read(1, 150, 30 * MS + 10);
        let batch = b.take().unwrap();
        assert_eq!(
            batch.timestamps_unix_ns,
            vec![10 * MS, 31 * MS, 30 * MS, 30 * MS + 10]
        );
        assert_eq!(batch.tick_lengths, vec![2, 2, 1, 1]);
        assert_eq!(batch.series_ids, vec![1, 2, 3, 4, 5, 1]);
        assert_eq!(batch.values, vec![100, 200, 300, 400, 500, 150]);
    }
}
