//! Export: Prometheus text (`/metrics`), the JSON API and health endpoints.

pub mod access;
pub mod api;
pub mod findings;
pub mod health;
pub mod jobs;
pub mod names;
pub mod prometheus;
mod proto;
pub mod steps;
