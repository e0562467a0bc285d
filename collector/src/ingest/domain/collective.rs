//! NCCL Inspector records at the edge: a bad record is dropped and counted, the batch goes on (a plugin's odd
//! line must not cost the node its samples). Strings bounded, numbers finite and non-negative. A refusal names
//! its bounded reason ([`RefusedCollective::reason`], one of [`crate::telemetry::COLLECTIVE_REFUSE_REASONS`]),
//! counted in `commwatch_collector_refused_collectives_total{reason}`.

use commwatch_proto::convert::collective_from_pb;
use commwatch_proto::v1 as pb;

use super::IngestError;
use crate::store::CollectiveEntry;

/// A refused record: the bounded reason (`text`, `missing`, `number`, `rank`) and what was wrong where.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct RefusedCollective {
    pub reason: &'static str,
    pub error: IngestError,
}

fn refuse(reason: &'static str, field: &str, what: impl Into<String>) -> RefusedCollective {
    RefusedCollective {
        reason,
        error: IngestError::invalid(field, what),
    }
}

/// Longest job id, communicator id, collective name or timing source, in bytes.
pub const MAX_COLLECTIVE_STR_LEN: usize = 128;

/// A wire record to the store's entry; `node` is the sending agent's node, `received_unix_ns` the collector's
/// time of receipt (the store sets both when it applies the batch; validation passes them empty).
pub fn collective_entry(
    m: &pb::CollectiveRecord,
    node: &str,
    received_unix_ns: i64,
) -> Result<CollectiveEntry, RefusedCollective> {
    for (field, value) in [
        ("collective.job", &m.job),
        ("collective.comm_id", &m.comm_id),
        ("collective.collective", &m.collective),
        ("collective.timing_source", &m.timing_source),
        ("collective.algorithm", &m.algorithm),
    ] {
        if value.len() > MAX_COLLECTIVE_STR_LEN || value.chars().any(|c| c.is_control()) {
            return Err(refuse(
                "text",
                field,
                "too long or holds control characters",
            ));
        }
    }
    if m.job.is_empty() || m.comm_id.is_empty() || m.collective.is_empty() {
        return Err(refuse(
            "missing",
            "collective",
            "job, comm_id and collective are required",
        ));
    }
    for (field, v) in [
        ("collective.exec_time_us", m.exec_time_us),
        (
            "collective.bus_bandwidth_bytes_per_second",
            m.bus_bandwidth_bytes_per_second,
        ),
        (
            "collective.algo_bandwidth_bytes_per_second",
            m.algo_bandwidth_bytes_per_second,
        ),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(refuse(
                "number",
                field,
                format!("{v} is not a finite non-negative number"),
            ));
        }
    }
    if m.n_ranks == 0 || m.rank >= m.n_ranks {
        return Err(refuse(
            "rank",
            "collective.rank",
            format!("rank {} of {} ranks", m.rank, m.n_ranks),
        ));
    }
    Ok(CollectiveEntry {
        job: m.job.clone(),
        job_rank: m.job_rank,
        record: collective_from_pb(m, node),
        received_unix_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> pb::CollectiveRecord {
        pb::CollectiveRecord {
            job: "j".into(),
            comm_id: "0x1".into(),
            collective: "AllReduce".into(),
            rank: 1,
            n_ranks: 2,
            bus_bandwidth_bytes_per_second: 9.8e9,
            ..Default::default()
        }
    }

    #[test]
    fn good_records_pass_and_bad_ones_name_their_field() {
        let e = collective_entry(&record(), "node-a", 5).unwrap();
        assert_eq!(
            (e.record.hostname.as_str(), e.received_unix_ns),
            ("node-a", 5)
        );
        let bad = |f: fn(&mut pb::CollectiveRecord)| {
            let mut r = record();
            f(&mut r);
            let e = collective_entry(&r, "n", 1).unwrap_err();
            assert!(
                crate::telemetry::COLLECTIVE_REFUSE_REASONS.contains(&e.reason),
                "{} is a label value",
                e.reason
            );
            (e.reason, e.to_string())
        };
        let (reason, msg) = bad(|r| r.job.clear());
        assert!(reason == "missing" && msg.contains("required"), "{msg}");
        let (reason, msg) = bad(|r| r.exec_time_us = f64::NAN);
        assert!(reason == "number" && msg.contains("collective.exec_time_us"));
        let (reason, msg) = bad(|r| r.rank = 2);
        assert!(reason == "rank" && msg.contains("collective.rank"));
        let (reason, msg) = bad(|r| r.comm_id = "x\n".into());
        assert!(reason == "text" && msg.contains("collective.comm_id"));
        let (reason, msg) = bad(|r| r.collective = "A".repeat(200));
        assert!(reason == "text" && msg.contains("collective.collective"));
    }
}
