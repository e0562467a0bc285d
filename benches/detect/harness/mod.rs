//! The detection harness: a simulated cluster, real agents' sampling and a real collector's store, step
//! engine and analysis, all on one virtual clock, as fast as the CPU allows.
//!
//! Per fast tick (50 ms of model time) the cluster's files move to the tick, every node's agent reads its
//! sources (the slow tier every second), every 250 ms each agent's batch goes through the collector's edge
//! validation into the store, every 500 ms the step engine runs and every second the analysis evaluates —
//! each stamped with, or run at, the tick's time.
//!
//! - [`clock`]: the virtual clock, and the simulated GPUs and host CPUs answering at it.
//! - [`agent`]: one node's agent (sources, sampler, batch builder) shipping through `ingest::direct`.
//! - [`collector`]: store, step engine and analysis, each run when told.
//! - [`run`]: one run, tick by tick ([`run::run`]).
//! - [`expect`]: what each fault should raise, on which subject.
//! - [`truth`]: per-step bytes against the simulator's.
//! - [`score`]: a run's alarms scored.

pub mod agent;
pub mod clock;
pub mod collector;
pub mod expect;
pub mod run;
pub mod score;
pub mod truth;

use commwatch_collector::analysis::history::HistoryError;
use commwatch_collector::ingest::domain::IngestError;
use commwatch_sim::SimError;

/// Why a run could not go on.
/// Each message says its cause itself, so none is also a `source()`: a chain printer says it once.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("simulator: {0}")]
    Sim(SimError),
    #[error("the collector refused a message: {0}")]
    Ingest(IngestError),
    #[error("analysis: {0}")]
    Analysis(HistoryError),
    #[error("temporary directory: {0}")]
    Io(std::io::Error),
    #[error("runtime: {0}")]
    Runtime(std::io::Error),
    #[error("collector metrics: {0}")]
    Metrics(commwatch_collector::CollectorError),
}

impl From<SimError> for HarnessError {
    fn from(e: SimError) -> Self {
        HarnessError::Sim(e)
    }
}

impl From<IngestError> for HarnessError {
    fn from(e: IngestError) -> Self {
        HarnessError::Ingest(e)
    }
}

impl From<HistoryError> for HarnessError {
    fn from(e: HistoryError) -> Self {
        HarnessError::Analysis(e)
    }
}
