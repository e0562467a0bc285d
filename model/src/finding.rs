//! How bad a finding is and what kind it is. Both names are part of the API: label values of
//! `commwatch_findings*` and keys of `/api/v1/findings`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How bad a finding is. `Critical`: the job is measurably slowed now; `Warning`: it will be or partly is;
/// `Info`: context (e.g. a consequence of another finding's root cause). Ordered by badness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub const ALL: [Severity; 3] = [Severity::Info, Severity::Warning, Severity::Critical];

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    /// The severity named by its label value; `None` for anything else.
    pub fn parse(s: &str) -> Option<Severity> {
        Severity::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kinds of finding the collector raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    ManagementNetworkTraffic,
    LinkUnderutilized,
    LinkDegraded,
    LinkErrors,
    Congestion,
    Straggler,
    ExposedCommunication,
    CpuBound,
    ScalingEfficiencyDrop,
    NcclMisconfiguration,
    TcpRetransmits,
    TransmitQueueBacklog,
}

impl FindingKind {
    pub const ALL: [FindingKind; 12] = [
        FindingKind::ManagementNetworkTraffic,
        FindingKind::LinkUnderutilized,
        FindingKind::LinkDegraded,
        FindingKind::LinkErrors,
        FindingKind::Congestion,
        FindingKind::Straggler,
        FindingKind::ExposedCommunication,
        FindingKind::CpuBound,
        FindingKind::ScalingEfficiencyDrop,
        FindingKind::NcclMisconfiguration,
        FindingKind::TcpRetransmits,
        FindingKind::TransmitQueueBacklog,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::ManagementNetworkTraffic => "management_network_traffic",
            FindingKind::LinkUnderutilized => "link_underutilized",
            FindingKind::LinkDegraded => "link_degraded",
            FindingKind::LinkErrors => "link_errors",
            FindingKind::Congestion => "congestion",
            FindingKind::Straggler => "straggler",
            FindingKind::ExposedCommunication => "exposed_communication",
            FindingKind::CpuBound => "cpu_bound",
            FindingKind::ScalingEfficiencyDrop => "scaling_efficiency_drop",
            FindingKind::NcclMisconfiguration => "nccl_misconfiguration",
            FindingKind::TcpRetransmits => "tcp_retransmits",
            FindingKind::TransmitQueueBacklog => "transmit_queue_backlog",
        }
    }

    /// The kind named by its label value; `None` for anything else.
    pub fn parse(s: &str) -> Option<FindingKind> {
        FindingKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde_and_parse() {
        for k in FindingKind::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            assert_eq!(FindingKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(FindingKind::parse("bogus"), None);
        for s in Severity::ALL {
            assert_eq!(Severity::parse(&s.to_string()), Some(s));
        }
        assert!(Severity::Critical > Severity::Warning && Severity::Warning > Severity::Info);
    }
}
