//! commwatch-sim
