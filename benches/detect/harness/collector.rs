//! The collector's stages on the virtual clock: the real store (fed by `ingest::direct`), the real step
//! engine ticked at the clock's time, and the real analysis (input build, rules, tracker) evaluated at it.

use std::sync::Arc;

use commwatch_collector::analysis::{AnalysisConfig, AnalysisHandle, FindingEvent};
use commwatch_collector::steps::engine::Engine;
use commwatch_collector::steps::StepStore;
use commwatch_collector::telemetry::Passes;
use commwatch_collector::{CollectorConfig, CollectorError, Store};
use tokio::sync::broadcast::{self, error::TryRecvError};

use super::HarnessError;

/// A collector without servers or timers: its owner says when each stage runs.
pub struct VirtualCollector {
    pub store: Arc<Store>,
    pub steps: Arc<StepStore>,
    engine: Engine,
    analysis: AnalysisHandle,
    events: broadcast::Receiver<FindingEvent>,
    /// Events the broadcast channel dropped because they were not read in time (should stay 0).
    pub lagged: u64,
}

impl VirtualCollector {
    /// A collector with the default retention, expiry and limits, memory only.
    pub fn new() -> Result<VirtualCollector, HarnessError> {
        let config = CollectorConfig::default();
        let store = Arc::new(Store::new(
            config.retention,
            config.node_expiry,
            config.limits.clone(),
        ));
        let steps = Arc::new(StepStore::new());
        // Its own pass metrics (the step engine's and the input builds'), registered nowhere.
        let passes = Passes::new().map_err(|e| HarnessError::Metrics(CollectorError::from(e)))?;
        // Without a state directory opening starts nothing: a throwaway runtime is enough.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(HarnessError::Runtime)?;
        let analysis = runtime.block_on(AnalysisHandle::open(
            store.clone(),
            steps.clone(),
            passes.clone(),
            AnalysisConfig::default(),
        ))?;
        let events = analysis.subscribe();
        Ok(VirtualCollector {
            engine: Engine::new(store.clone(), steps.clone(), passes),
            store,
            steps,
            analysis,
            events,
            lagged: 0,
        })
    }

    /// One pass of the step engine at `now_unix_ns`; returns the steps it added.
    pub fn steps_tick(&mut self, now_unix_ns: i64) -> usize {
        self.engine.tick(now_unix_ns)
    }

    /// One evaluation at `now_unix_ns`; returns the raises, changes and clears it published.
    pub fn evaluate(&mut self, now_unix_ns: i64) -> Vec<FindingEvent> {
        self.analysis.evaluate_at(now_unix_ns);
        let mut out = Vec::new();
        loop {
            match self.events.try_recv() {
                Ok(ev) => out.push(ev),
                Err(TryRecvError::Lagged(n)) => self.lagged += n,
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        out
    }
}
