//! The node's TCP stack, from procfs: `<procfs_root>/net/snmp` (the counters of the network namespace the
//! agent reads it in: the node's). Node-level series (no link); no links.
//!
//! Series (slow-tier 64-bit counters, segments):
//! - `tcp_out_segments_total` (`Tcp: OutSegs`): segments sent, retransmissions excluded;
//! - `tcp_retransmitted_segments_total` (`Tcp: RetransSegs`): segments retransmitted.
//!
//! On a TCP fabric (collectives over sockets: NCCL's socket transport, Gloo, MPI's TCP transport) the
//! retransmitted share of a node's segments says whether its links drop packets: a lossy link or a congested
//! switch port costs the job a retransmission timeout each time, far more than its bytes. The `tcp_retransmits`
//! rule reads it; counters are sent as they are (the kernel keeps them 64-bit wide on 64-bit machines).

use std::path::PathBuf;

use super::fsroot::FsRoot;
use super::{Inventory, ReadReport, SeriesKind, SeriesSpec, Source, SourceError, Tier, Value};

/// The metrics of the two series, in the order [`TcpCounters`] holds them.
pub const METRICS: [&str; 2] = ["tcp_out_segments_total", "tcp_retransmitted_segments_total"];

/// The `Tcp:` counters the source reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpCounters {
    pub out_segments: u64,
    pub retransmitted_segments: u64,
}

/// Parses the `Tcp:` lines of `/proc/net/snmp`: a header line of field names, then a line of values, both
/// starting `Tcp:`. Other protocols' lines are ignored.
pub fn parse_snmp(text: &str) -> Result<TcpCounters, String> {
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else {
        return Err("no Tcp: header and values".to_string());
    };
    let names: Vec<&str> = names.split_whitespace().skip(1).collect();
    let values: Vec<&str> = values.split_whitespace().skip(1).collect();
    if names.len() != values.len() {
        return Err(format!(
            "Tcp: {} names but {} values",
            names.len(),
            values.len()
        ));
    }
    let field = |name: &str| -> Result<u64, String> {
        let i = names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| format!("no Tcp: {name}"))?;
        values[i]
            .parse()
            .map_err(|_| format!("Tcp: {name} = {:?} is not a count", values[i]))
    };
    Ok(TcpCounters {
        out_segments: field("OutSegs")?,
        retransmitted_segments: field("RetransSegs")?,
    })
}

/// Reads the node's TCP counters.
pub struct TcpSource {
    root: FsRoot,
    inventory: Inventory,
}

impl TcpSource {
    /// A source reading `<procfs_root>/net/snmp`.
    pub fn new(procfs_root: PathBuf) -> Self {
        TcpSource {
            root: FsRoot::new(procfs_root),
            inventory: Inventory::default(),
        }
    }

    fn path(&self) -> PathBuf {
        self.root.join("net/snmp")
    }

    fn read(&self) -> Result<TcpCounters, SourceError> {
        let path = self.path();
        let bytes = self.root.read(&path, super::fsroot::MAX_SMALL_FILE)?;
        let text = String::from_utf8_lossy(&bytes);
        parse_snmp(&text).map_err(|reason| SourceError::Parse {
            path,
            bytes: bytes.len(),
            reason,
        })
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
        // A procfs without the file (a container without its network namespace's /proc) is absent hardware.
        if self.read().is_err() {
            return Ok(false);
        }
        self.inventory.series = METRICS
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
        match self.read() {
            Ok(c) => {
                sink(0, Value::Counter(c.out_segments));
                sink(1, Value::Counter(c.retransmitted_segments));
                report.read += 2;
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

    #[test]
    fn reads_the_tcp_counters_by_name() {
        assert_eq!(
            parse_snmp(SNMP),
            Ok(TcpCounters {
                out_segments: 654321,
                retransmitted_segments: 789
            })
        );
    }

    #[test]
    fn bad_snmp_files_say_what_is_wrong() {
        assert!(parse_snmp("Ip: a\nIp: 1\n")
            .unwrap_err()
            .contains("no Tcp:"));
        assert!(parse_snmp("Tcp: OutSegs RetransSegs\nTcp: 1\n")
            .unwrap_err()
            .contains("2 names but 1 values"));
        assert!(parse_snmp("Tcp: OutSegs\nTcp: 5\n")
            .unwrap_err()
            .contains("no Tcp: RetransSegs"));
        assert!(parse_snmp("Tcp: OutSegs RetransSegs\nTcp: x 1\n")
            .unwrap_err()
            .contains("not a count"));
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
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn samples_a_procfs_tree_and_stays_quiet_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut absent = TcpSource::new(dir.path().to_path_buf());
        assert!(!absent.discover().unwrap());
        assert!(absent.inventory().series.is_empty());
        std::fs::create_dir_all(dir.path().join("net")).unwrap();
        std::fs::write(dir.path().join("net/snmp"), SNMP).unwrap();
        let mut src = TcpSource::new(dir.path().to_path_buf());
        assert!(src.discover().unwrap());
        let metrics: Vec<&str> = src
            .inventory()
            .series
            .iter()
            .map(|s| s.metric.as_str())
            .collect();
        assert_eq!(metrics, METRICS);
        let mut got = Vec::new();
        let r = src.sample(Tier::Slow, &mut |i, v| got.push((i, v)));
        assert_eq!(r.read, 2);
        assert_eq!(
            got,
            vec![(0, Value::Counter(654321)), (1, Value::Counter(789))]
        );
        assert!(src.sample(Tier::Fast, &mut |_, _| panic!("fast tier")).read == 0);
    }
}
