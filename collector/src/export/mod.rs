//! Export: Prometheus text (`/metrics`), the JSON API and health endpoints.

pub mod access;
pub mod api;
pub mod capped;
pub mod collectives;
pub mod exposition;
pub mod findings;
pub mod findings_query;
pub mod jobs;
pub mod names;
pub mod nodes;
pub mod page;
pub mod probes;
mod proto;
pub mod steps;

/// `/metrics` under the name it had before it became [`exposition`], for the callers that still use it.
pub use exposition as prometheus;
