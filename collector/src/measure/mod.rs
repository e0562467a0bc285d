//! In-process measurements: ignored tests that time parts of the collector no public API reaches alone (the
//! store's apply without the ingest edge, the periodic passes over a store filled from a recorded tape). They
//! sit beside the stages they measure, never inside one: a measurement drives the store and the stages above
//! it, and the store must not know those. Benches that need only the public API are in `benches/`.
//!
//! Run with `cargo test --release -p commwatch-collector --lib measure:: -- --ignored --nocapture`; each module
//! says its environment.

mod analysis_cost;
mod apply_cost;
mod round_cost;
