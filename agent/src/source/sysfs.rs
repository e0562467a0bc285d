//! Reading sysfs: pure parsers for the text of each attribute, and the RDMA netdev lookup shared by the sysfs
//! sources (infiniband, netdev). The file a series reads is an [`AttrFile`](super::attr_file::AttrFile), the
//! table of them a [`FileSeries`](super::file_series::FileSeries); the directory helpers live with
//! [`FsRoot`] and are re-exported here.
//!
//! Parsing is separated from I/O: every `parse_*` function takes the text of a file and is tested on its own;
//! only [`rdma_netdevs`] and [`FsRoot`] touch the file system. Every path is built from the sysfs root the
//! caller injects (`--sysfs-root`), never from a hard-coded `/sys`, and every file is opened through that
//! root's [`FsRoot`].

use std::collections::BTreeSet;
use std::fmt;

use super::fsroot::FsRoot;
pub use super::fsroot::{list_dir, list_files, list_subdirs};
use super::Value;

/// Why a text could not be parsed. The I/O layer turns it into [`SourceError::Parse`] with the path and the
/// text's length (never the text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub reason: String,
}

impl ParseError {
    fn new(reason: impl Into<String>) -> Self {
        ParseError {
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for ParseError {}

/// Outcome of reading a value that the hardware may not provide.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reading<T> {
    Value(T),
    /// The kernel says the value does not exist on this hardware (`N/A (no PMA)`) or it is unknown (netdev
    /// `speed` of `-1`). Neither an error nor zero.
    NotAvailable,
}

/// Parses an unsigned decimal integer; surrounding whitespace (the trailing newline of sysfs) is ignored.
pub fn parse_u64(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(ParseError::new("empty"));
    }
    t.parse::<u64>()
        .map_err(|e| ParseError::new(format!("not an unsigned integer: {e}")))
}

/// Parses an InfiniBand counter file: a number, or `N/A (no PMA)` (old kernels, adapters without a
/// Performance Management Agent) which is [`Reading::NotAvailable`].
pub fn parse_counter(text: &str) -> Result<Reading<u64>, ParseError> {
    let t = text.trim();
    if t.starts_with("N/A") {
        return Ok(Reading::NotAvailable);
    }
    parse_u64(t).map(Reading::Value)
}

/// An InfiniBand port's `rate`, e.g. `400 Gb/sec (4X NDR)`.
#[derive(Debug, Clone, PartialEq)]
pub struct IbRate {
    /// Signalling rate per direction in gigabits per second, as the kernel prints it (`2.5`, `400`).
    pub gbit_per_second: f64,
    /// The same in bytes per second (`400 Gb/sec` → 50e9).
    pub bytes_per_second: f64,
    /// Link width (`4X`), when printed.
    pub width: Option<String>,
    /// Speed name (`SDR`, `QDR`, `HDR`, `NDR`, ...), when printed; old kernels print only the width.
    pub speed: Option<String>,
}

/// Parses an InfiniBand `rate` file: `"<n> Gb/sec (<w>X[ <SPEED>])"`. The parenthesised part is optional.
pub fn parse_ib_rate(text: &str) -> Result<IbRate, ParseError> {
    let t = text.trim();
    let (number, rest) = t
        .split_once("Gb/sec")
        .ok_or_else(|| ParseError::new("no `Gb/sec` in rate"))?;
    let gbit_per_second: f64 = number
        .trim()
        .parse()
        .map_err(|e| ParseError::new(format!("rate is not a number: {e}")))?;
    if !gbit_per_second.is_finite() || gbit_per_second < 0.0 {
        return Err(ParseError::new("rate out of range"));
    }
    let mut width = None;
    let mut speed = None;
    let rest = rest.trim();
    if !rest.is_empty() {
        let inner = rest
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| ParseError::new("text after `Gb/sec` is not parenthesised"))?;
        let mut words = inner.split_whitespace();
        if let Some(w) = words.next() {
            let digits = w
                .strip_suffix('X')
                .ok_or_else(|| ParseError::new("width does not end in `X`"))?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ParseError::new("width is not `<n>X`"));
            }
            width = Some(w.to_string());
        }
        speed = words.next().map(str::to_string);
        if words.next().is_some() {
            return Err(ParseError::new("unexpected words in rate"));
        }
    }
    Ok(IbRate {
        gbit_per_second,
        bytes_per_second: gbit_per_second * 1e9 / 8.0,
        width,
        speed,
    })
}

/// A numbered state as InfiniBand prints it: `state` (`4: ACTIVE`) and `phys_state` (`5: LinkUp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbState {
    pub code: u32,
    pub name: String,
}

/// Parses `"<code>: <NAME>"` (IB `state` and `phys_state`).
pub fn parse_ib_state(text: &str) -> Result<IbState, ParseError> {
    let (code, name) = text
        .trim()
        .split_once(':')
        .ok_or_else(|| ParseError::new("no `:` in state"))?;
    let code = code
        .trim()
        .parse::<u32>()
        .map_err(|e| ParseError::new(format!("state code is not a number: {e}")))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(ParseError::new("state has no name"));
    }
    Ok(IbState {
        code,
        name: name.to_string(),
    })
}

/// Parses a netdev `speed` file (Mb/s). `-1` (SPEED_UNKNOWN), `0`, negative values or garbage mean unknown
/// (`None`): drivers print `-1` for a link that is down or has no fixed speed (bonds, virtual devices).
pub fn parse_netdev_speed(text: &str) -> Option<u64> {
    match text.trim().parse::<i64>() {
        Ok(v) if v > 0 => u64::try_from(v).ok(),
        _ => None,
    }
}

/// Megabits per second → bytes per second (`25000` → 3.125e9).
pub fn mbps_to_bytes_per_second(mbps: u64) -> f64 {
    mbps as f64 * 125_000.0
}

/// RFC 2863 operational state of a netdev (`operstate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperState {
    Up,
    Down,
    Dormant,
    LowerLayerDown,
    NotPresent,
    Testing,
    Unknown,
    /// Any other text, kept as printed.
    Other(String),
}

impl OperState {
    /// The name as the kernel prints it.
    pub fn as_str(&self) -> &str {
        match self {
            OperState::Up => "up",
            OperState::Down => "down",
            OperState::Dormant => "dormant",
            OperState::LowerLayerDown => "lowerlayerdown",
            OperState::NotPresent => "notpresent",
            OperState::Testing => "testing",
            OperState::Unknown => "unknown",
            OperState::Other(s) => s,
        }
    }

    pub fn is_up(&self) -> bool {
        matches!(self, OperState::Up)
    }
}

/// Parses a netdev `operstate` file. Never fails: unrecognised text becomes [`OperState::Other`].
pub fn parse_operstate(text: &str) -> OperState {
    match text.trim() {
        "up" => OperState::Up,
        "down" => OperState::Down,
        "dormant" => OperState::Dormant,
        "lowerlayerdown" => OperState::LowerLayerDown,
        "notpresent" => OperState::NotPresent,
        "testing" => OperState::Testing,
        "unknown" | "" => OperState::Unknown,
        other => OperState::Other(other.to_string()),
    }
}

/// How the text of a file-backed series becomes a value. Pure: see [`decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decode {
    /// Unsigned counter multiplied by `scale` (4 for IB data counters, whose unit is 4 octets). The product
    /// saturates at `u64::MAX`. `N/A (no PMA)` is not available.
    Counter { scale: u64 },
    /// IB `state` / `phys_state` → its numeric code, as a gauge.
    IbStateCode,
    /// IB `rate` → bytes per second, as a gauge; a rate of 0 is not available.
    IbRateBytes,
    /// netdev `operstate` → 1 when `up`, else 0.
    OperUp,
    /// netdev `speed` (Mb/s) → bytes per second; unknown speed (or an unreadable file) is not available.
    NetSpeedBytes,
}

impl Decode {
    /// Whether an I/O error while reading means "unknown" rather than a failure: drivers refuse to report the
    /// speed of a link that is down (`EINVAL`).
    pub(crate) fn io_error_is_unknown(self) -> bool {
        matches!(self, Decode::NetSpeedBytes)
    }
}

/// Turns the text of a file into a value according to `how`.
pub fn decode(how: Decode, text: &str) -> Result<Reading<Value>, ParseError> {
    Ok(match how {
        Decode::Counter { scale } => match parse_counter(text)? {
            Reading::Value(v) => Reading::Value(Value::Counter(v.saturating_mul(scale))),
            Reading::NotAvailable => Reading::NotAvailable,
        },
        Decode::IbStateCode => Reading::Value(Value::Gauge(f64::from(parse_ib_state(text)?.code))),
        Decode::IbRateBytes => {
            let rate = parse_ib_rate(text)?;
            if rate.bytes_per_second > 0.0 {
                Reading::Value(Value::Gauge(rate.bytes_per_second))
            } else {
                Reading::NotAvailable
            }
        }
        Decode::OperUp => Reading::Value(Value::Gauge(if parse_operstate(text).is_up() {
            1.0
        } else {
            0.0
        })),
        Decode::NetSpeedBytes => match parse_netdev_speed(text) {
            Some(mbps) => Reading::Value(Value::Gauge(mbps_to_bytes_per_second(mbps))),
            None => Reading::NotAvailable,
        },
    })
}

/// Saturation value of a counter of `bits` width after multiplying by `scale`: `(2^bits − 1) × scale`,
/// itself saturating at `u64::MAX` (so a 64-bit data counter saturates at `u64::MAX`).
pub fn counter_max(bits: u32, scale: u64) -> u64 {
    let ones = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    ones.saturating_mul(scale)
}

/// Names of the netdevs that belong to RDMA devices under `<sysfs_root>/class/infiniband`: the content of
/// `<dev>/ports/<n>/gid_attrs/ndevs/*` of RoCE ports (GID table entries) and the entries of `<dev>/device/net/`.
/// Unreadable entries are skipped (the kernel refuses reads of unused GID slots).
pub fn rdma_netdevs(sysfs_root: &FsRoot) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let class = sysfs_root.join("class/infiniband");
    for dev in sysfs_root.list_subdirs(&class).unwrap_or_default() {
        let dev_dir = class.join(&dev);
        let ports = sysfs_root.list_subdirs(&dev_dir.join("ports"));
        for port in ports.unwrap_or_default() {
            let port_dir = dev_dir.join("ports").join(&port);
            // GID netdevs exist only on RoCE ports; an InfiniBand port has a table of slots that all refuse
            // to be read, so it is not walked.
            let link_layer = sysfs_root.read_trimmed(&port_dir.join("link_layer"));
            if link_layer.as_deref() == Some("InfiniBand") {
                continue;
            }
            let ndevs = port_dir.join("gid_attrs/ndevs");
            for slot in sysfs_root.list_files(&ndevs).unwrap_or_default() {
                if let Some(name) = sysfs_root.read_trimmed(&ndevs.join(slot)) {
                    out.insert(name);
                }
            }
        }
        let net = sysfs_root.list_entries(&dev_dir.join("device/net"));
        out.extend(net.unwrap_or_default());
    }
    out
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters (`veth*`, `*np0`, `ib*`).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    // Position of the last `*` and the name index it was tried at, for backtracking.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u64_trims_and_rejects() {
        assert_eq!(parse_u64("4294967295\n"), Ok(4_294_967_295));
        assert_eq!(parse_u64("  0 "), Ok(0));
        assert_eq!(parse_u64("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_u64("18446744073709551616").is_err());
        assert!(parse_u64("").is_err());
        assert!(parse_u64("\n").is_err());
        assert!(parse_u64("-1").is_err());
        assert!(parse_u64("12abc").is_err());
    }

    #[test]
    fn counter_not_available() {
        assert_eq!(parse_counter("N/A (no PMA)\n"), Ok(Reading::NotAvailable));
        assert_eq!(parse_counter("255"), Ok(Reading::Value(255)));
        assert!(parse_counter("garbage").is_err());
    }

    #[test]
    fn rates() {
        let r = parse_ib_rate("400 Gb/sec (4X NDR)").unwrap();
        assert_eq!(r.bytes_per_second, 50e9);
        assert_eq!(r.gbit_per_second, 400.0);
        assert_eq!(r.width.as_deref(), Some("4X"));
        assert_eq!(r.speed.as_deref(), Some("NDR"));

        let r = parse_ib_rate("2.5 Gb/sec (1X SDR)\n").unwrap();
        assert_eq!(r.bytes_per_second, 312_500_000.0);
        assert_eq!(r.width.as_deref(), Some("1X"));
        assert_eq!(r.speed.as_deref(), Some("SDR"));

        let r = parse_ib_rate("40 Gb/sec (4X QDR)\n").unwrap();
        assert_eq!(r.bytes_per_second, 5e9);
        assert_eq!(r.speed.as_deref(), Some("QDR"));

        let r = parse_ib_rate("10 Gb/sec (4X SDR)").unwrap();
        assert_eq!(r.bytes_per_second, 1.25e9);

        // Old kernels print the width only.
        let r = parse_ib_rate("10 Gb/sec (4X)\n").unwrap();
        assert_eq!(r.bytes_per_second, 1.25e9);
        assert_eq!(r.width.as_deref(), Some("4X"));
        assert_eq!(r.speed, None);

        let r = parse_ib_rate("200 Gb/sec (2X NDR)").unwrap();
        assert_eq!(r.bytes_per_second, 25e9);
        assert_eq!(r.width.as_deref(), Some("2X"));

        let r = parse_ib_rate("56 Gb/sec (4X FDR)").unwrap();
        assert_eq!(r.bytes_per_second, 7e9);

        assert!(parse_ib_rate("").is_err());
        assert!(parse_ib_rate("fast").is_err());
        assert!(parse_ib_rate("x Gb/sec (4X)").is_err());
        assert!(parse_ib_rate("-5 Gb/sec (4X)").is_err());
        assert!(parse_ib_rate("10 Gb/sec 4X").is_err());
        assert!(parse_ib_rate("10 Gb/sec (Y NDR)").is_err());
        assert!(parse_ib_rate("10 Gb/sec (4X NDR extra)").is_err());
    }

    #[test]
    fn states() {
        assert_eq!(
            parse_ib_state("4: ACTIVE\n"),
            Ok(IbState {
                code: 4,
                name: "ACTIVE".into()
            })
        );
        assert_eq!(
            parse_ib_state("5: LinkUp"),
            Ok(IbState {
                code: 5,
                name: "LinkUp".into()
            })
        );
        assert_eq!(parse_ib_state("1: DOWN").map(|s| s.code), Ok(1));
        assert!(parse_ib_state("ACTIVE").is_err());
        assert!(parse_ib_state("x: ACTIVE").is_err());
        assert!(parse_ib_state("4:").is_err());
    }

    #[test]
    fn netdev_speed_and_operstate() {
        assert_eq!(parse_netdev_speed("25000\n"), Some(25_000));
        assert_eq!(parse_netdev_speed("-1\n"), None);
        assert_eq!(parse_netdev_speed("0"), None);
        assert_eq!(parse_netdev_speed("fast"), None);
        assert_eq!(mbps_to_bytes_per_second(25_000), 3.125e9);
        assert_eq!(mbps_to_bytes_per_second(1000), 1.25e8);

        assert_eq!(parse_operstate("up\n"), OperState::Up);
        assert!(parse_operstate("up").is_up());
        assert!(!parse_operstate("down").is_up());
        assert_eq!(parse_operstate("lowerlayerdown"), OperState::LowerLayerDown);
        assert_eq!(parse_operstate("weird").as_str(), "weird");
        assert_eq!(parse_operstate(""), OperState::Unknown);
    }

    #[test]
    fn decoding() {
        assert_eq!(
            decode(Decode::Counter { scale: 4 }, "3733440\n"),
            Ok(Reading::Value(Value::Counter(14_933_760)))
        );
        assert_eq!(
            decode(Decode::Counter { scale: 4 }, &u64::MAX.to_string()),
            Ok(Reading::Value(Value::Counter(u64::MAX)))
        );
        assert_eq!(
            decode(Decode::Counter { scale: 1 }, "N/A (no PMA)\n"),
            Ok(Reading::NotAvailable)
        );
        assert_eq!(
            decode(Decode::IbStateCode, "4: ACTIVE"),
            Ok(Reading::Value(Value::Gauge(4.0)))
        );
        assert_eq!(
            decode(Decode::IbRateBytes, "400 Gb/sec (4X NDR)"),
            Ok(Reading::Value(Value::Gauge(50e9)))
        );
        assert_eq!(
            decode(Decode::IbRateBytes, "0 Gb/sec (4X)"),
            Ok(Reading::NotAvailable)
        );
        assert_eq!(
            decode(Decode::OperUp, "down\n"),
            Ok(Reading::Value(Value::Gauge(0.0)))
        );
        assert_eq!(
            decode(Decode::NetSpeedBytes, "-1\n"),
            Ok(Reading::NotAvailable)
        );
        assert_eq!(
            decode(Decode::NetSpeedBytes, "1000\n"),
            Ok(Reading::Value(Value::Gauge(1.25e8)))
        );
        assert!(decode(Decode::Counter { scale: 1 }, "x").is_err());
    }

    #[test]
    fn saturation_values() {
        assert_eq!(counter_max(32, 1), u64::from(u32::MAX));
        assert_eq!(counter_max(32, 4), 17_179_869_180);
        assert_eq!(counter_max(64, 4), u64::MAX);
        assert_eq!(counter_max(64, 1), u64::MAX);
        assert_eq!(counter_max(16, 1), 65_535);
        assert_eq!(counter_max(8, 1), 255);
        assert_eq!(counter_max(4, 1), 15);
    }

    #[test]
    fn globs() {
        assert!(glob_match("veth*", "veth12ab"));
        assert!(glob_match("veth*", "veth"));
        assert!(!glob_match("veth*", "eth0"));
        assert!(glob_match("lo", "lo"));
        assert!(!glob_match("lo", "lo0"));
        assert!(glob_match("*np0", "ens1f0np0"));
        assert!(glob_match("en*f0*", "ens1f0np0"));
        assert!(glob_match("*", "anything"));
        assert!(!glob_match("ib*", "eth0"));
    }
}
