//! commwatch agent: samples the node's links and ships the samples to a collector.
//!
//! Module map:
//! - [`source`]: one file per hardware source behind the [`source::Source`] trait.
pub mod source;
