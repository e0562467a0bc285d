//! The NCCL debug-log parser on arbitrary input.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = commwatch_diagnose::nccl_log::parse_str(&text, "fuzz");
});
