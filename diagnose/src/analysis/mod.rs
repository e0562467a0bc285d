//! Analyses over parsed inputs: pure functions from parser output to numbers. Findings are decided from these
//! in [`crate::findings`].

pub mod bandwidth;
pub mod overlap;
pub mod straggler;
