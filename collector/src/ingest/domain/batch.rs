//! Sample batches and their step markers: the batch's shape is checked whole (a bad batch fails the stream);
//! a bad marker is dropped and counted, the batch goes on.

use commwatch_proto::v1 as pb;

use super::IngestError;
use crate::store::{Batch, Marker, StepPhase};

/// Longest job id of a marker, in bytes (as the agent's listener enforces).
pub const MAX_MARKER_JOB_LEN: usize = 128;

impl TryFrom<pb::StepMarker> for Marker {
    type Error = IngestError;

    fn try_from(m: pb::StepMarker) -> Result<Self, Self::Error> {
        if m.job.is_empty() || m.job.len() > MAX_MARKER_JOB_LEN {
            return Err(IngestError::invalid(
                "marker.job",
                format!("{} bytes, 1..={MAX_MARKER_JOB_LEN} allowed", m.job.len()),
            ));
        }
        if m.job.chars().any(|c| c.is_control()) {
            return Err(IngestError::invalid(
                "marker.job",
                "contains control characters",
            ));
        }
        let phase = match pb::StepPhase::try_from(m.phase) {
            Ok(pb::StepPhase::Begin) => StepPhase::Begin,
            Ok(pb::StepPhase::End) => StepPhase::End,
            Ok(pb::StepPhase::Unspecified) | Err(_) => {
                return Err(IngestError::invalid(
                    "marker.phase",
                    format!("{} is not begin or end", m.phase),
                ))
            }
        };
        if m.received_unix_ns <= 0 {
            return Err(IngestError::invalid(
                "marker.received_unix_ns",
                format!("{} is not after the Unix epoch", m.received_unix_ns),
            ));
        }
        Ok(Marker {
            job: m.job,
            rank: m.rank,
            step: m.step,
            phase,
            sent_unix_ns: m.sent_unix_ns.max(0),
            received_unix_ns: m.received_unix_ns,
            samples: m.samples,
        })
    }
}

impl TryFrom<pb::SampleBatch> for Batch {
    type Error = IngestError;

    fn try_from(b: pb::SampleBatch) -> Result<Self, Self::Error> {
        if b.seq == 0 {
            return Err(IngestError::invalid("batch.seq", "must be > 0"));
        }
        if b.timestamps_unix_ns.len() != b.tick_lengths.len() {
            return Err(IngestError::invalid(
                "batch.tick_lengths",
                format!(
                    "{} tick lengths for {} timestamps",
                    b.tick_lengths.len(),
                    b.timestamps_unix_ns.len()
                ),
            ));
        }
        let total: u64 = b.tick_lengths.iter().map(|&n| u64::from(n)).sum();
        if total != b.series_ids.len() as u64 {
            return Err(IngestError::invalid(
                "batch.series_ids",
                format!(
                    "{} series ids, tick lengths sum to {total}",
                    b.series_ids.len()
                ),
            ));
        }
        if b.values.len() != b.series_ids.len() {
            return Err(IngestError::invalid(
                "batch.values",
                format!(
                    "{} values for {} series ids",
                    b.values.len(),
                    b.series_ids.len()
                ),
            ));
        }
        if let Some(t) = b.timestamps_unix_ns.iter().find(|&&t| t <= 0) {
            return Err(IngestError::invalid(
                "batch.timestamps_unix_ns",
                format!("{t} is not after the Unix epoch"),
            ));
        }
        let mut markers = Vec::with_capacity(b.markers.len());
        let mut invalid_markers = 0u64;
        for m in b.markers {
            match Marker::try_from(m) {
                Ok(m) => markers.push(m),
                Err(_) => invalid_markers += 1,
            }
        }
        let mut collectives = Vec::with_capacity(b.collectives.len());
        let mut invalid_collectives = Vec::new();
        for c in &b.collectives {
            match super::collective::collective_entry(c, "", 0) {
                Ok(c) => collectives.push(c),
                Err(e) => invalid_collectives.push(e.reason),
            }
        }
        Ok(Batch {
            seq: b.seq,
            timestamps_unix_ns: b.timestamps_unix_ns,
            tick_lengths: b.tick_lengths,
            series_ids: b.series_ids,
            values: b.values,
            dropped_batches_total: b.dropped_batches_total,
            markers,
            invalid_markers,
            collectives,
            invalid_collectives,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> pb::SampleBatch {
        pb::SampleBatch {
            seq: 1,
            timestamps_unix_ns: vec![1, 2],
            tick_lengths: vec![1, 2],
            series_ids: vec![1, 1, 2],
            values: vec![1, 2, 3],
            ..Default::default()
        }
    }

    #[test]
    fn batch_invariants() {
        assert!(Batch::try_from(batch()).is_ok());
        let mut b = batch();
        b.values.pop();
        let e = Batch::try_from(b).unwrap_err();
        assert!(e.to_string().contains("batch.values"), "{e}");
        let mut b = batch();
        b.tick_lengths = vec![3];
        assert!(Batch::try_from(b)
            .unwrap_err()
            .to_string()
            .contains("batch.tick_lengths"));
        let mut b = batch();
        b.tick_lengths = vec![1, 1];
        assert!(Batch::try_from(b)
            .unwrap_err()
            .to_string()
            .contains("batch.series_ids"));
        let mut b = batch();
        b.seq = 0;
        assert!(Batch::try_from(b)
            .unwrap_err()
            .to_string()
            .contains("batch.seq"));
        let mut b = batch();
        b.tick_lengths = vec![u32::MAX, u32::MAX];
        assert!(Batch::try_from(b).is_err());
    }

    #[test]
    fn markers_validated_not_fatal() {
        let m = |job: &str, phase: i32, received: i64| pb::StepMarker {
            job: job.into(),
            rank: 3,
            step: 7,
            phase,
            sent_unix_ns: -5,
            received_unix_ns: received,
            samples: Some(64),
        };
        let mut b = batch();
        b.markers = vec![
            m("j1", pb::StepPhase::End as i32, 10),
            m("", pb::StepPhase::End as i32, 10),
            m("j1", 0, 10),
            m("j1", 9, 10),
            m("j1", pb::StepPhase::Begin as i32, 0),
            m(&"x".repeat(129), pb::StepPhase::Begin as i32, 10),
            m("a\u{7}b", pb::StepPhase::Begin as i32, 10),
            m("j2", pb::StepPhase::Begin as i32, 11),
        ];
        let b = Batch::try_from(b).expect("bad markers do not fail the batch");
        assert_eq!(b.invalid_markers, 6);
        assert_eq!(b.markers.len(), 2);
        assert_eq!(
            b.markers[0],
            Marker {
                job: "j1".into(),
                rank: 3,
                step: 7,
                phase: StepPhase::End,
                sent_unix_ns: 0,
                received_unix_ns: 10,
                samples: Some(64),
            }
        );
        assert_eq!(b.markers[1].phase, StepPhase::Begin);
        assert_eq!(b.markers[1].job, "j2");
    }
}
