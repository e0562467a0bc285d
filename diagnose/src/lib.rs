//! commwatch-diagnose
pub mod analysis;
pub mod kineto;
pub mod nccl_log;
pub mod nccl_tests;
pub mod progress;
pub mod timeline;
