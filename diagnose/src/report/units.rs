//! How quantities are written for people: the crate's [`crate::units`], where the renderers look for them.

pub use crate::units::human_bytes;
