//! Analyses over parsed inputs: pure functions from parser output to numbers. Findings are decided from these
//! in [`crate::findings`].
//!
//! - [`bandwidth`]: a run's bus-bandwidth curve (average, peak, saturation, latency);
//! - [`collapse`]: a curve that falls far below what smaller sizes reached;
//! - [`mixing`]: repeated runs in one file, traces of different jobs;
//! - [`overlap`], [`straggler`]: a rank's timeline per step, and the rank the others wait for.

pub mod bandwidth;
pub mod collapse;
pub mod mixing;
pub mod overlap;
pub mod straggler;
