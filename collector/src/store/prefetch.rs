//! A hint to the processor to bring memory into the cache ahead of its use ([`prefetch`]).
//!
//! Why: under load a node's state is cold by the time its next batch comes (hundreds of nodes' samples pass
//! between two batches of one node), and the store walks hundreds of series per tick and per flush, each in
//! memory of its own. A walk that waits for each series' lines in turn is bound by the memory's latency; one
//! that asks for the lines a few series ahead overlaps those waits. The step engine asks for its tails' and
//! links' lines with it too.

/// Asks for the cache lines of `bytes` bytes from `p` (at most four lines: the hint is for the start of a
/// structure, not for a copy). A hint only: it never faults, reads nothing and changes nothing, whatever `p`.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = p.cast::<i8>();
        for line in 0..bytes.div_ceil(64).min(4) {
            // SAFETY: a prefetch dereferences nothing and cannot fault, even on an invalid address; the
            // address is only computed (wrapping), never read through.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line * 64)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (p, bytes);
    }
}
