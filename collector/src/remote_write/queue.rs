//! The bounded queue between the gather (producer) and the sender: encoded requests, bounded by the samples
//! they hold. When a new request would exceed the bound, the oldest ones are dropped (newer data is worth more
//! to a dashboard than older data a receiver may refuse as too old anyway) and counted by the caller.

use std::collections::VecDeque;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::encode::Encoded;

/// A request waiting to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub request: Encoded,
    /// When it was gathered, for the sender's `retry_for`.
    pub gathered: tokio::time::Instant,
}

/// Requests waiting, oldest first, holding at most `max_samples` samples (a single larger request is still
/// taken, alone).
#[derive(Debug)]
pub struct Queue {
    inner: Mutex<Inner>,
    max_samples: usize,
    ready: Notify,
}

#[derive(Debug, Default)]
struct Inner {
    items: VecDeque<Queued>,
    samples: usize,
}

impl Queue {
    pub fn new(max_samples: usize) -> Queue {
        Queue {
            inner: Mutex::new(Inner::default()),
            max_samples,
            ready: Notify::new(),
        }
    }

    /// Appends `q`; returns the samples of the oldest requests dropped to make room.
    pub fn push(&self, q: Queued) -> usize {
        let mut dropped = 0;
        {
            let mut inner = self.inner.lock();
            while !inner.items.is_empty() && inner.samples + q.request.samples > self.max_samples {
                if let Some(old) = inner.items.pop_front() {
                    inner.samples -= old.request.samples;
                    dropped += old.request.samples;
                }
            }
            inner.samples += q.request.samples;
            inner.items.push_back(q);
        }
        self.ready.notify_one();
        dropped
    }

    /// The oldest request, if any.
    pub fn try_pop(&self) -> Option<Queued> {
        let mut inner = self.inner.lock();
        let q = inner.items.pop_front()?;
        inner.samples -= q.request.samples;
        Some(q)
    }

    /// Waits for a request.
    pub async fn pop(&self) -> Queued {
        loop {
            let ready = self.ready.notified();
            if let Some(q) = self.try_pop() {
                return q;
            }
            ready.await;
        }
    }

    /// Samples waiting now.
    pub fn samples(&self) -> usize {
        self.inner.lock().samples
    }

    /// Empties the queue; returns the samples it held.
    pub fn clear(&self) -> usize {
        let mut inner = self.inner.lock();
        inner.items.clear();
        std::mem::take(&mut inner.samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(samples: usize, tag: u8) -> Queued {
        Queued {
            request: Encoded {
                body: vec![tag],
                samples,
            },
            gathered: tokio::time::Instant::now(),
        }
    }

    #[test]
    fn bounded_by_samples_dropping_the_oldest() {
        let queue = Queue::new(10);
        assert_eq!(queue.push(q(4, 1)), 0);
        assert_eq!(queue.push(q(4, 2)), 0);
        assert_eq!(queue.samples(), 8);
        assert_eq!(queue.push(q(4, 3)), 4, "the first request makes room");
        assert_eq!(queue.samples(), 8);
        assert_eq!(
            queue.push(q(30, 4)),
            8,
            "a request over the bound is taken alone"
        );
        assert_eq!(queue.try_pop().unwrap().request.body, [4]);
        assert_eq!(queue.try_pop(), None);
        assert_eq!(queue.samples(), 0);
        queue.push(q(2, 5));
        assert_eq!(queue.clear(), 2);
    }

    #[tokio::test]
    async fn pop_waits_for_a_push() {
        let queue = std::sync::Arc::new(Queue::new(10));
        let waiter = tokio::spawn({
            let queue = queue.clone();
            async move { queue.pop().await.request.body }
        });
        tokio::task::yield_now().await;
        queue.push(q(1, 9));
        assert_eq!(waiter.await.unwrap(), [9]);
    }
}
