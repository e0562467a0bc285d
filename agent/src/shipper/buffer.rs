//! The resend buffer: unacknowledged batches, oldest first, bounded in encoded bytes. When full, the oldest
//! batches are dropped (and counted); the newest is always kept.

use std::collections::VecDeque;

use commwatch_proto::v1 as pb;
use prost::Message;

/// One held batch and its encoded size.
pub(super) struct Entry {
    pub(super) seq: u64,
    bytes: usize,
    pub(super) batch: pb::SampleBatch,
}

/// Unacknowledged batches, oldest first, bounded in encoded bytes.
pub struct ResendBuffer {
    entries: VecDeque<Entry>,
    bytes: usize,
    capacity: usize,
    dropped: u64,
}

impl ResendBuffer {
    pub fn new(capacity: usize) -> ResendBuffer {
        ResendBuffer {
            entries: VecDeque::new(),
            bytes: 0,
            capacity,
            dropped: 0,
        }
    }

    /// Adds a batch (its `seq` must be above every held one); drops the oldest while over capacity and
    /// returns how many were dropped. The newest batch is always kept.
    pub fn push(&mut self, batch: pb::SampleBatch) -> u64 {
        let bytes = batch.encoded_len();
        self.bytes += bytes;
        self.entries.push_back(Entry {
            seq: batch.seq,
            bytes,
            batch,
        });
        let mut dropped = 0;
        while self.bytes > self.capacity && self.entries.len() > 1 {
            if let Some(e) = self.entries.pop_front() {
                self.bytes -= e.bytes;
                dropped += 1;
            }
        }
        self.dropped += dropped;
        dropped
    }

    /// Forgets every batch with `seq <= acked`.
    pub fn ack(&mut self, acked: u64) {
        while let Some(e) = self.entries.front() {
            if e.seq > acked {
                break;
            }
            self.bytes -= e.bytes;
            self.entries.pop_front();
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Batches dropped so far because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
    /// Held batches with `seq > after`, oldest first.
    ///
    /// Held sequence numbers are consecutive (drops and acks only remove from the front), so this indexes
    /// directly instead of scanning: resending a full buffer stays linear.
    pub(super) fn after(&self, after: u64) -> impl Iterator<Item = &Entry> {
        let skip = match self.entries.front() {
            Some(front) => usize::try_from(after.saturating_add(1).saturating_sub(front.seq))
                .unwrap_or(usize::MAX),
            None => 0,
        };
        self.entries.iter().skip(skip)
    }
    pub(super) fn oldest_seq(&self) -> Option<u64> {
        self.entries.front().map(|e| e.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seq: u64, n: usize) -> pb::SampleBatch {
        pb::SampleBatch {
            seq,
            timestamps_unix_ns: vec![1],
            tick_lengths: vec![n as u32],
            series_ids: vec![1; n],
            values: vec![7; n],
            ..Default::default()
        }
    }

    #[test]
    fn buffer_drops_oldest_and_counts() {
        let one = batch(1, 100).encoded_len();
        let mut b = ResendBuffer::new(one * 3);
        for s in 1..=5 {
            b.push(batch(s, 100));
        }
        assert_eq!(b.len(), 3);
        assert_eq!(b.dropped(), 2);
        assert_eq!(b.oldest_seq(), Some(3));
        b.ack(4);
        assert_eq!(b.len(), 1);
        assert_eq!(b.bytes(), one);
        assert_eq!(b.after(4).map(|e| e.seq).collect::<Vec<_>>(), vec![5]);
        assert_eq!(b.after(0).map(|e| e.seq).collect::<Vec<_>>(), vec![5]);
        assert_eq!(b.after(5).count(), 0);
        assert_eq!(b.after(u64::MAX).count(), 0);
        b.push(batch(6, 100));
        b.push(batch(7, 100));
        assert_eq!(b.after(5).map(|e| e.seq).collect::<Vec<_>>(), vec![6, 7]);
    }
}
