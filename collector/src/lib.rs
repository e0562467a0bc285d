//! commwatch-collector
