//! The columnar batch (`commwatch.v1.SampleBatch`) under construction: ticks of samples sharing a
//! timestamp, each sample a series id and its value's wire bits.

use commwatch_proto::v1 as pb;

/// Columnar batch under construction.
#[derive(Debug, Default)]
pub struct BatchBuilder {
    timestamps: Vec<i64>,
    lengths: Vec<u32>,
    ids: Vec<u32>,
    values: Vec<u64>,
    open: bool,
}

impl BatchBuilder {
    /// Starts a tick at `unix_ns`; samples pushed until [`end_tick`](Self::end_tick) share its timestamp.
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

    /// Takes the batch gathered so far (`seq` 0), or `None` when it holds no sample.
    pub fn take(&mut self) -> Option<pb::SampleBatch> {
        self.end_tick();
        if self.ids.is_empty() {
            return None;
        }
        Some(pb::SampleBatch {
            seq: 0,
            timestamps_unix_ns: std::mem::take(&mut self.timestamps),
            tick_lengths: std::mem::take(&mut self.lengths),
            series_ids: std::mem::take(&mut self.ids),
            values: std::mem::take(&mut self.values),
            dropped_batches_total: 0,
            markers: Vec::new(),
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
}
