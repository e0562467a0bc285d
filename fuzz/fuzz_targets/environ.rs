//! The agent's `/proc/PID/environ` filter on arbitrary bytes: no panic; only allowlisted names are kept, each
//! value within the length cap and free of control characters, and a secret-looking name's value redacted even
//! when every name is allowed.
#![no_main]
use commwatch_agent::source::processes::{
    is_allowed, looks_secret, parse_environ, parse_environ_with, MAX_VALUE_BYTES, REDACTED,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for (k, v) in parse_environ(data) {
        assert!(is_allowed(&k), "{k}");
        assert!(v.len() <= MAX_VALUE_BYTES);
        assert!(!v.chars().any(char::is_control));
    }
    for (k, v) in parse_environ_with(data, |_| true) {
        if looks_secret(&k) {
            assert_eq!(v, REDACTED);
        }
        assert!(v.len() <= MAX_VALUE_BYTES);
    }
});
