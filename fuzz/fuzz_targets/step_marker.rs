//! The agent's step-marker parser on arbitrary datagrams: no panic; accepted markers respect the limits.
#![no_main]
use commwatch_agent::steps::{parse_marker, MAX_JOB_LEN, MAX_RANK};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = parse_marker(data, 1) {
        assert!(!m.job.is_empty() && m.job.len() <= MAX_JOB_LEN);
        assert!(u64::from(m.rank) < MAX_RANK);
    }
});
