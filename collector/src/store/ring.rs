//! A bounded ring of `(timestamp_ns, value)` samples: at most `cap` samples and, when pushing, everything older
//! than `newest - retention` is dropped. 16 bytes per sample; the buffer grows to `cap` on demand and never
//! beyond it, so a series costs what it holds.

use std::collections::VecDeque;

/// One series' sample window.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    buf: VecDeque<(i64, u64)>,
    cap: usize,
}

impl Ring {
    /// An empty ring holding at most `cap` (≥ 2) samples.
    pub fn new(cap: usize) -> Ring {
        Ring {
            buf: VecDeque::new(),
            cap: cap.max(2),
        }
    }

    /// Most samples this ring keeps.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Changes the bound; drops the oldest samples if it shrank.
    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap.max(2);
        while self.buf.len() > self.cap {
            self.buf.pop_front();
        }
        if self.buf.capacity() > self.cap {
            self.buf.shrink_to(self.cap);
        }
    }

    /// Appends a sample (timestamps are expected to increase) and evicts what fell out of `retention_ns`.
    #[inline]
    pub fn push(&mut self, ts: i64, value: u64, retention_ns: i64) {
        let horizon = ts.saturating_sub(retention_ns);
        while let Some(&(t, _)) = self.buf.front() {
            if t < horizon || self.buf.len() >= self.cap {
                self.buf.pop_front();
            } else {
                break;
            }
        }
        if self.buf.len() == self.buf.capacity() {
            // Grow geometrically but never past `cap`.
            let len = self.buf.len();
            let want = (len.max(8) * 2).min(self.cap);
            self.buf.reserve_exact(want.saturating_sub(len).max(1));
        }
        self.buf.push_back((ts, value));
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The newest sample.
    pub fn last(&self) -> Option<(i64, u64)> {
        self.buf.back().copied()
    }

    /// Samples oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (i64, u64)> + '_ {
        self.buf.iter().copied()
    }

    /// Bytes held by the sample buffer (allocated capacity).
    pub fn heap_bytes(&self) -> usize {
        self.buf.capacity() * std::mem::size_of::<(i64, u64)>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_by_cap_and_time() {
        let mut r = Ring::new(5);
        for i in 0..10 {
            r.push(i, i as u64, 1_000);
        }
        assert_eq!(r.len(), 5);
        assert_eq!(r.iter().next(), Some((5, 5)));
        assert!(r.heap_bytes() <= 16 * 8);
        let mut r = Ring::new(100);
        for i in 0..10 {
            r.push(i * 10, 0, 25);
        }
        // newest 90, horizon 65: keeps 70, 80, 90.
        assert_eq!(
            r.iter().map(|(t, _)| t).collect::<Vec<_>>(),
            vec![70, 80, 90]
        );
        assert_eq!(r.last(), Some((90, 0)));
    }

    #[test]
    fn capacity_never_exceeds_cap() {
        let mut r = Ring::new(1000);
        for i in 0..5000 {
            r.push(i, 0, i64::MAX);
        }
        assert_eq!(r.len(), 1000);
        assert!(r.heap_bytes() <= 1000 * 16 + 16, "{}", r.heap_bytes());
    }
}
