//! commwatch-diagnose
