//! The nccl-tests parser (text of every generation and the -J JSON) and the line normaliser before it, on
//! arbitrary input.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = commwatch_diagnose::nccl_tests::parse_str(&text, "fuzz");
    let _ = commwatch_diagnose::kernels::parse_str(&text, "fuzz");
});
