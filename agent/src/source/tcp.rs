//! The node's TCP stack, from procfs: `<procfs_root>/net/snmp` and `<procfs_root>/net/netstat` (the counters
//! of the network namespace the agent reads them in: the node's). Node-level series (no link); no links.
//!
//! Series (slow-tier 64-bit counters):
//! - `tcp_out_segments_total` (`Tcp: OutSegs`): segments sent, retransmissions excluded;
//! - `tcp_retransmitted_segments_total` (`Tcp: RetransSegs`): segments retransmitted;
//! - `tcp_in_segments_total` (`Tcp: InSegs`): segments received (a coalesced receive counts once);
//! - `tcp_out_of_order_packets_total` (`TcpExt: TCPOFOQueue`): received packets queued out of order, behind
//!   a hole that a lost packet left. Only where `net/netstat` has the field (absent: the series is not sent).
//!
//! On a TCP fabric (collectives over sockets: NCCL's socket transport, Gloo, MPI's TCP transport) the
//! retransmitted share of a node's segments says whether packets it sends are lost, and its out-of-order share
//! of what it receives whether packets sent to it are: a lossy link shows both on its own node, one of the two
//! on each peer. A lossy link or a congested switch port costs the job a retransmission timeout each time, far
//! more than its bytes. The `tcp_retransmits` rule reads them; counters are sent as they are (the kernel keeps
//! them 64-bit wide on 64-bit machines).

use std::path::PathBuf;

use super::attr_file::{read_parsed, AttrFile};
use super::fsroot::FsRoot;
use super::{Inventory, ReadReport, SeriesKind, SeriesSpec, Source, SourceError, Tier, Value};

/// The metrics of the series, in the order [`TcpCounters`] holds them (the last only with `net/netstat`).
pub const METRICS: [&str; 4] = [
    "tcp_out_segments_total",
    "tcp_retransmitted_segments_total",
    "tcp_in_segments_total",
    "tcp_out_of_order_packets_total",
];

/// The counters the source reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpCounters {
    pub out_segments: u64,
    pub retransmitted_segments: u64,
    pub in_segments: u64,
    /// `TcpExt: TCPOFOQueue`; `None` without `net/netstat` or the field.
    pub out_of_order_packets: Option<u64>,
}

impl TcpCounters {
    /// The values in [`METRICS`] order (the out-of-order count only when read).
    fn values(&self) -> impl Iterator<Item = u64> {
        [
            Some(self.out_segments),
            Some(self.retransmitted_segments),
            Some(self.in_segments),
            self.out_of_order_packets,
        ]
        .into_iter()
        .flatten()
    }
}

/// The counters of `/proc/net/snmp`'s `Tcp:` lines (see [`parse_snmp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnmpTcp {
    pub out_segments: u64,
    pub retransmitted_segments: u64,
    pub in_segments: u64,
}

/// Field `name` of the `PREFIX` section in a procfs file of header/value line pairs (`/proc/net/snmp`,
/// `/proc/net/netstat`): a line of names, then a line of values, both starting `PREFIX`.
fn field(text: &str, prefix: &str, name: &str) -> Result<u64, String> {
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return Err(format!("no {prefix} header and values"));
    };
    let names: Vec<&str> = names.split_whitespace().skip(1).collect();
    let values: Vec<&str> = values.split_whitespace().skip(1).collect();
    if names.len() != values.len() {
        return Err(format!(
            "{prefix} {} names but {} values",
            names.len(),
            values.len()
        ));
    }
    let i = names
        .iter()
        .position(|n| *n == name)
        .ok_or_else(|| format!("no {prefix} {name}"))?;
    values[i]
        .parse()
        .map_err(|_| format!("{prefix} {name} = {:?} is not a count", values[i]))
}

/// Parses `TcpExt: TCPOFOQueue` of `/proc/net/netstat`.
pub fn parse_netstat(text: &str) -> Result<u64, String> {
    field(text, "TcpExt:", "TCPOFOQueue")
}

/// Parses the `Tcp:` lines of `/proc/net/snmp`: a header line of field names, then a line of values, both
/// starting `Tcp:`. Other protocols' lines are ignored.
/// Not procfs-core's `Snmp`: it requires every Ip, Icmp, Tcp, Udp and UdpLite field the kernel writes today,
/// and reports a missing one as an internal error of its own ("please report this procfs bug"), not by name.
pub fn parse_snmp(text: &str) -> Result<SnmpTcp, String> {
    Ok(SnmpTcp {
        out_segments: field(text, "Tcp:", "OutSegs")?,
        retransmitted_segments: field(text, "Tcp:", "RetransSegs")?,
        in_segments: field(text, "Tcp:", "InSegs")?,
    })
}

/// Reads the node's TCP counters.
pub struct TcpSource {
    root: FsRoot,
    inventory: Inventory,
    /// `net/snmp` and `net/netstat`, kept open once opened and re-read from offset 0 (procfs generates them
    /// anew at each read from the start): one `pread` each a read instead of a path's resolution, an open
    /// and a close. Closed after a failed read, reopened at the next.
    snmp: Option<AttrFile>,
    netstat: Option<AttrFile>,
}

impl TcpSource {
    /// A source reading `<procfs_root>/net/snmp`.
    pub fn new(procfs_root: PathBuf) -> Self {
        TcpSource {
            root: FsRoot::new(procfs_root),
            inventory: Inventory::default(),
            snmp: None,
            netstat: None,
        }
    }

    /// The counters; the out-of-order count only when `with_netstat` (a failure to read it then fails the
    /// read: the series was discovered).
    fn read(&mut self, with_netstat: bool) -> Result<TcpCounters, SourceError> {
        let snmp = read_parsed(&self.root, &mut self.snmp, "net/snmp", parse_snmp)?;
        let out_of_order_packets = if with_netstat {
            let netstat = &mut self.netstat;
            Some(read_parsed(
                &self.root,
                netstat,
                "net/netstat",
                parse_netstat,
            )?)
        } else {
            None
        };
        Ok(TcpCounters {
            out_segments: snmp.out_segments,
            retransmitted_segments: snmp.retransmitted_segments,
            in_segments: snmp.in_segments,
            out_of_order_packets,
        })
    }

    /// Whether the out-of-order series was discovered.
    fn with_netstat(&self) -> bool {
        self.inventory.series.len() == METRICS.len()
    }
}

impl Source for TcpSource {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn quick_reads(&self) -> bool {
        true
    }

    fn discover(&mut self) -> Result<bool, SourceError> {
        if !self.inventory.series.is_empty() {
            return Ok(false);
        }
        // A procfs without the file (a container without its network namespace's /proc) is absent hardware;
        // without `net/netstat` (or its TCPOFOQueue) only the out-of-order series is left out.
        let Ok(c) = self.read(true).or_else(|_| self.read(false)) else {
            return Ok(false);
        };
        let n = c.values().count();
        self.inventory.series = METRICS[..n]
            .iter()
            .map(|m| SeriesSpec {
                metric: m.to_string(),
                kind: SeriesKind::COUNTER64,
                tier: Tier::Slow,
                link: None,
                labels: Default::default(),
            })
            .collect();
        Ok(true)
    }

    fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    fn sample(&mut self, tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
        let mut report = ReadReport::default();
        if tier != Tier::Slow || self.inventory.series.is_empty() {
            return report;
        }
        match self.read(self.with_netstat()) {
            Ok(c) => {
                for (i, v) in c.values().enumerate() {
                    sink(i, Value::Counter(v));
                    report.read += 1;
                }
            }
            Err(e) => report.fail(e),
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "Ip: Forwarding DefaultTTL InReceives\nIp: 1 64 100\n\
        Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n\
        Tcp: 1 200 120000 -1 10 20 0 1 4 123456 654321 789 0 5 0\n\
        Udp: InDatagrams NoPorts\nUdp: 1 2\n";
    const NETSTAT: &str = "TcpExt: SyncookiesSent TCPOFOQueue TCPOFODrop\nTcpExt: 0 709 0\n\
        IpExt: InNoRoutes\nIpExt: 0\n";

    #[test]
    fn reads_the_tcp_counters_by_name() {
        assert_eq!(
            parse_snmp(SNMP),
            Ok(SnmpTcp {
                out_segments: 654321,
                retransmitted_segments: 789,
                in_segments: 123456,
            })
        );
        assert_eq!(parse_netstat(NETSTAT), Ok(709));
    }

    #[test]
    fn bad_snmp_files_say_what_is_wrong() {
        assert!(parse_snmp("Ip: a\nIp: 1\n")
            .unwrap_err()
            .contains("no Tcp:"));
        assert!(parse_snmp("Tcp: OutSegs RetransSegs\nTcp: 1\n")
            .unwrap_err()
            .contains("2 names but 1 values"));
        assert!(parse_snmp("Tcp: OutSegs InSegs\nTcp: 5 6\n")
            .unwrap_err()
            .contains("no Tcp: RetransSegs"));
        assert!(parse_snmp("Tcp: OutSegs RetransSegs InSegs\nTcp: x 1 2\n")
            .unwrap_err()
            .contains("not a count"));
        assert!(parse_netstat("TcpExt: TCPOFODrop\nTcpExt: 1\n")
            .unwrap_err()
            .contains("no TcpExt: TCPOFOQueue"));
    }

    #[test]
    fn reads_this_machine_s_procfs() {
        // /proc/net is a link to self/net: the counters of the reader's network namespace.
        let mut src = TcpSource::new(PathBuf::from("/proc"));
        assert!(src.discover().unwrap(), "/proc/net/snmp readable");
        let mut got = Vec::new();
        assert_eq!(
            src.sample(Tier::Slow, &mut |i, v| got.push((i, v))).failed,
            0
        );
        // Linux has had TCPOFOQueue in net/netstat since 2.6.
        assert_eq!(got.len(), 4);
    }

    fn sample(src: &mut TcpSource) -> (ReadReport, Vec<(usize, Value)>) {
        let mut got = Vec::new();
        let r = src.sample(Tier::Slow, &mut |i, v| got.push((i, v)));
        (r, got)
    }

    #[test]
    fn samples_a_procfs_tree_and_stays_quiet_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut absent = TcpSource::new(dir.path().to_path_buf());
        assert!(!absent.discover().unwrap());
        assert!(absent.inventory().series.is_empty());
        std::fs::create_dir_all(dir.path().join("net")).unwrap();
        std::fs::write(dir.path().join("net/snmp"), SNMP).unwrap();
        std::fs::write(dir.path().join("net/netstat"), NETSTAT).unwrap();
        let mut src = TcpSource::new(dir.path().to_path_buf());
        assert!(src.discover().unwrap());
        let metrics: Vec<&str> = src
            .inventory()
            .series
            .iter()
            .map(|s| s.metric.as_str())
            .collect();
        assert_eq!(metrics, METRICS);
        let (r, got) = sample(&mut src);
        assert_eq!(r.read, 4);
        assert_eq!(
            got,
            vec![
                (0, Value::Counter(654321)),
                (1, Value::Counter(789)),
                (2, Value::Counter(123456)),
                (3, Value::Counter(709))
            ]
        );
        assert!(src.sample(Tier::Fast, &mut |_, _| panic!("fast tier")).read == 0);
        // A netstat that cannot be parsed after discovery fails the read, named; readable again, it reads
        // again. (Its file is kept open: it is rewritten in place here, as procfs regenerates it.)
        std::fs::write(dir.path().join("net/netstat"), "TcpExt: x\nTcpExt: y\n").unwrap();
        let (r, _) = sample(&mut src);
        assert_eq!(r.failed, 1);
        assert!(
            r.errors[0].to_string().contains("net/netstat"),
            "{:?}",
            r.errors
        );
        std::fs::write(dir.path().join("net/netstat"), NETSTAT).unwrap();
        assert_eq!(sample(&mut src).0.read, 4);
    }

    #[test]
    fn without_netstat_the_out_of_order_series_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("net")).unwrap();
        std::fs::write(dir.path().join("net/snmp"), SNMP).unwrap();
        let mut src = TcpSource::new(dir.path().to_path_buf());
        assert!(src.discover().unwrap());
        assert_eq!(src.inventory().series.len(), 3);
        let (r, got) = sample(&mut src);
        assert_eq!((r.read, r.failed), (3, 0));
        assert_eq!(got[2], (2, Value::Counter(123456)));
    }
}
