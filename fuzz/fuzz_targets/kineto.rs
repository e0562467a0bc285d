//! The streaming Kineto trace reader on arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = commwatch_diagnose::kineto::parse_reader(data, "fuzz");
});
