//! Every sysfs value parser on arbitrary text: no panic, and a parsed counter re-parses to itself.
#![no_main]
use commwatch_agent::source::sysfs;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(v) = sysfs::parse_u64(text) {
        assert_eq!(sysfs::parse_u64(&v.to_string()).ok(), Some(v));
    }
    let _ = sysfs::parse_counter(text);
    let _ = sysfs::parse_ib_rate(text);
    let _ = sysfs::parse_ib_state(text);
    let _ = sysfs::parse_netdev_speed(text);
    let _ = sysfs::parse_operstate(text);
});
