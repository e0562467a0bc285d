//! The probe server's edge: a frame header and a control message from anyone who reaches a probe port, and
//! the phase budget a client's `phase` requests draw from. Garbage must become an error, never a panic, and no
//! sequence of phases gets more than the session's duration in all.
#![no_main]
use std::time::Duration;

use commwatch_probe::session::phase_span;
use commwatch_probe::wire::{decode_header, decode_message, HEADER_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(head) = data.first_chunk::<HEADER_BYTES>() {
        let _ = decode_header(*head);
        let _ = decode_message(&data[HEADER_BYTES..]);
    }
    // Spans asked, two bytes each (in 16 ms units, up to about 17 min): their sum stays within the budget.
    let budget = Duration::from_millis(5000);
    let mut left = budget;
    let mut total = Duration::ZERO;
    for pair in data.chunks_exact(2) {
        let ms = u64::from(u16::from_be_bytes([pair[0], pair[1]])) * 16;
        match phase_span(&mut left, ms) {
            Some(span) => total += span,
            None => break,
        }
    }
    assert!(total <= budget, "{total:?} served of {budget:?}");
});
