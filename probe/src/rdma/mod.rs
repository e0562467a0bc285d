//! RDMA verbs transport: RC queue pairs, RDMA WRITE for bulk, SEND ping-pong for latency, queue-pair addresses
//! exchanged in `Hello`/`Accept`. The verbs calls (`verbs.rs`, through rdma-sys) exist only with the cargo
//! feature `rdma`; the plan they follow (`plan.rs`: queue-pair states, addresses, batching) is pure and always
//! built, so it is tested without hardware.

pub mod plan;

#[cfg(feature = "rdma")]
mod verbs;

#[cfg(feature = "rdma")]
pub use verbs::{devices, open, Verbs};

#[cfg(not(feature = "rdma"))]
mod absent;

#[cfg(not(feature = "rdma"))]
pub use absent::{devices, open, Verbs};
