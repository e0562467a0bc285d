//! Edge validation: the wire messages become the store's inputs ([`crate::store::input`]) through `TryFrom`, and
//! the per-agent limits are checked before anything is applied. Anything the wire can say wrong becomes an
//! [`IngestError`] naming the field; nothing here panics on input. What only the store can check (it needs the
//! node's state) comes back as a [`StoreError`] and is mapped to the same statuses here.
//!
//! - [`inventory`]: `Hello` and inventory updates (links, series descriptors), node names and label rules.
//! - [`batch`]: sample batches and their step markers; [`collective`]: their NCCL Inspector records.
//! - [`job_list`]: a node's job list (ranks, NCCL settings and conflicts).
//!
//! Enum compatibility (per the proto's rules): an unknown link class or role maps to `Unknown` (still stored,
//! exported as `"unknown"`); a link of unspecified endpoint kind gets the one its class and names imply; a
//! series of unspecified or unknown kind is *refused*: it is not stored and its samples are skipped (counted),
//! the stream goes on.

pub mod batch;
pub mod collective;
pub mod inventory;
pub mod job_list;

use tonic::Status;

use crate::store::StoreError;

pub use batch::MAX_MARKER_JOB_LEN;
pub use inventory::{validate_node_name, MAX_BLINDNESS, MAX_LINK_ATTRIBUTES, RESERVED_LABELS};
pub use job_list::{
    MAX_CONFLICTS_PER_JOB, MAX_GPUS_PER_RANK, MAX_JOBS_PER_NODE, MAX_JOB_ID_LEN, MAX_NCCL_KEY_LEN,
    MAX_NCCL_SETTINGS_PER_RANK, MAX_RANKS_PER_NODE,
};

/// Why a stream was failed. `Invalid` → `INVALID_ARGUMENT`, `Limit` → `RESOURCE_EXHAUSTED`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IngestError {
    #[error("invalid {field}: {reason}")]
    Invalid { field: String, reason: String },
    #[error("limit exceeded at {field}: {reason}")]
    Limit {
        field: String,
        reason: String,
        /// Bounded label value for `commwatch_collector_rejected_streams_total{reason}`.
        limit: &'static str,
    },
    /// The bytes are not a valid `AgentMessage` (tonic's protobuf decode failed).
    #[error("undecodable message: {0}")]
    Decode(String),
}

impl IngestError {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        IngestError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub fn limit(limit: &'static str, field: impl Into<String>, reason: impl Into<String>) -> Self {
        IngestError::Limit {
            field: field.into(),
            reason: reason.into(),
            limit,
        }
    }

    /// The gRPC status the stream fails with.
    pub fn to_status(&self) -> Status {
        match self {
            IngestError::Invalid { .. } | IngestError::Decode(_) => {
                Status::invalid_argument(self.to_string())
            }
            IngestError::Limit { .. } => Status::resource_exhausted(self.to_string()),
        }
    }

    /// The `reason` label of `commwatch_collector_rejected_streams_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            IngestError::Invalid { .. } => "invalid_argument",
            IngestError::Decode(_) => "decode",
            IngestError::Limit { limit, .. } => limit,
        }
    }
}

/// The store's refusals fail the stream like the edge's own: a series limit is `RESOURCE_EXHAUSTED`
/// (`max_series`), as is the node limit (`max_nodes`); a reference to something the instance did not describe
/// is `INVALID_ARGUMENT`.
impl From<StoreError> for IngestError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::TooMany {
                field,
                what,
                count,
                limit,
            } => IngestError::limit(
                "max_series",
                field,
                format!("{count} {what}, limit {limit}"),
            ),
            StoreError::TooManyNodes { count, limit } => IngestError::limit(
                "max_nodes",
                "hello.node",
                format!("{count} nodes held, limit {limit} (limits.max_nodes)"),
            ),
            StoreError::UndescribedLink { series, link } => IngestError::invalid(
                format!("series[id={series}].link_id"),
                format!("link {link} was not described"),
            ),
            StoreError::Redescribed { series } => IngestError::invalid(
                format!("series[id={series}]"),
                "described again with a different meaning",
            ),
            StoreError::UndescribedSeries { index, id } => IngestError::invalid(
                format!("batch.series_ids[{index}]"),
                format!("series {id} was not described on this instance"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_refusals_keep_their_status_and_field() {
        let e = IngestError::from(StoreError::TooMany {
            field: "hello.inventory.series",
            what: "series",
            count: 9,
            limit: 8,
        });
        assert_eq!(e.reason(), "max_series");
        assert_eq!(e.to_status().code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            e.to_string(),
            "limit exceeded at hello.inventory.series: 9 series, limit 8"
        );
        let e = IngestError::from(StoreError::UndescribedSeries { index: 3, id: 9 });
        assert_eq!(e.to_status().code(), tonic::Code::InvalidArgument);
        assert_eq!(
            e.to_string(),
            "invalid batch.series_ids[3]: series 9 was not described on this instance"
        );
        let e = IngestError::from(StoreError::UndescribedLink { series: 4, link: 2 });
        assert_eq!(
            e.to_string(),
            "invalid series[id=4].link_id: link 2 was not described"
        );
        let e = IngestError::from(StoreError::Redescribed { series: 4 });
        assert_eq!(
            e.to_string(),
            "invalid series[id=4]: described again with a different meaning"
        );
    }
}
