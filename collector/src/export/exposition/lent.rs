//! Buffers kept from one scrape to the next and lent to the response that carries them: the response body
//! ([`Bytes`]) owns the buffer while the client reads it and gives it back when it is dropped, so the next
//! scrape writes into memory already mapped instead of pages the kernel must zero (tens of megabytes a scrape
//! in a large fleet).

use std::sync::{Arc, Weak};

use axum::body::Bytes;
use parking_lot::Mutex;

/// One kept buffer: in its slot between scrapes, out of it while a scrape writes it or a response holds it.
#[derive(Default)]
pub(super) struct Kept {
    slot: Arc<Mutex<Option<Vec<u8>>>>,
}

impl Kept {
    /// The kept buffer, emptied (its room kept); an empty one while the kept one is out.
    pub(super) fn take(&self) -> Vec<u8> {
        let mut buf = self.slot.lock().take().unwrap_or_default();
        buf.clear();
        buf
    }

    /// `buf` as a response body; when the body is dropped, `buf` goes back to the slot, unless the slot holds
    /// one already (two scrapes at once: the other's is kept) or its owner is gone.
    pub(super) fn lend(&self, buf: Vec<u8>) -> Bytes {
        Bytes::from_owner(Lent {
            buf,
            home: Arc::downgrade(&self.slot),
        })
    }

    /// The room of the buffer in the slot (0 while it is out), bytes.
    pub(super) fn room(&self) -> usize {
        self.slot.lock().as_ref().map_or(0, Vec::capacity)
    }
}

/// A buffer a response body holds, given back to its slot when dropped.
struct Lent {
    buf: Vec<u8>,
    home: Weak<Mutex<Option<Vec<u8>>>>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(home) = self.home.upgrade() {
            let mut slot = home.lock();
            if slot.is_none() {
                *slot = Some(std::mem::take(&mut self.buf));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_buffer_comes_back_when_its_body_is_dropped() {
        let kept = Kept::default();
        let mut buf = kept.take();
        buf.extend_from_slice(b"first");
        let at = buf.as_ptr();
        let body = kept.lend(buf);
        assert_eq!(&body[..], b"first");
        assert_eq!(body.as_ptr(), at, "lent, not copied");
        // While it is out, a scrape gets a buffer of its own.
        let other = kept.take();
        assert_eq!(other.capacity(), 0);
        let other = kept.lend(other);
        drop(body);
        assert!(kept.room() >= 5);
        // The slot is full: the second body's buffer is dropped, not swapped in.
        drop(other);
        let again = kept.take();
        assert_eq!(again.as_ptr(), at);
        assert!(again.is_empty());
        // A body that outlives its owner drops its buffer.
        let body = kept.lend(again);
        drop(kept);
        assert_eq!(body.len(), 0);
        drop(body);
    }
}
