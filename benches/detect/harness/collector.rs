//! The collector's stages on the virtual clock: the real store (fed by `ingest::direct`), the real step
//! engine ticked at the clock's time, and the real analysis (input build, rules, tracker) evaluated at it.

use std::sync::Arc;

use commwatch_collector::analysis::engine::FindingFilter;
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
    /// The oracle: a second analysis on the same store and steps that evaluates the whole fleet in one input
    /// at the same instants ([`AnalysisHandle::evaluate_full_at`]); its findings must be the scoped ones.
    oracle: AnalysisHandle,
    events: broadcast::Receiver<FindingEvent>,
    /// Events the broadcast channel dropped because they were not read in time (should stay 0).
    pub lagged: u64,
    /// Evaluations after which the scoped and the whole-fleet findings differed (should stay 0), and the first
    /// difference.
    pub oracle_mismatches: u64,
    pub oracle_first_mismatch: Option<String>,
    /// Evaluations compared with the oracle.
    pub oracle_compared: u64,
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
        let open = || {
            runtime.block_on(AnalysisHandle::open(
                store.clone(),
                steps.clone(),
                passes.clone(),
                AnalysisConfig::default(),
            ))
        };
        let (analysis, oracle) = (open()?, open()?);
        let events = analysis.subscribe();
        Ok(VirtualCollector {
            engine: Engine::new(store.clone(), steps.clone(), passes),
            store,
            steps,
            analysis,
            oracle,
            events,
            lagged: 0,
            oracle_mismatches: 0,
            oracle_first_mismatch: None,
            oracle_compared: 0,
        })
    }

    /// One pass of the step engine at `now_unix_ns`; returns the steps it added.
    pub fn steps_tick(&mut self, now_unix_ns: i64) -> usize {
        self.engine.tick(now_unix_ns)
    }

    /// One evaluation at `now_unix_ns`; returns the raises, changes and clears it published.
    pub fn evaluate(&mut self, now_unix_ns: i64) -> Vec<FindingEvent> {
        self.analysis.evaluate_at(now_unix_ns);
        self.oracle.evaluate_full_at(now_unix_ns);
        self.compare_with_oracle(now_unix_ns);
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

    /// Compares every finding (active and cleared) of the scoped analysis with the oracle's, field for field.
    fn compare_with_oracle(&mut self, now_unix_ns: i64) {
        let all = FindingFilter::default();
        let (scoped, full) = (self.analysis.findings(&all), self.oracle.findings(&all));
        self.oracle_compared += 1;
        if scoped == full {
            return;
        }
        self.oracle_mismatches += 1;
        if self.oracle_first_mismatch.is_none() {
            let ids = |v: &[commwatch_collector::analysis::Finding]| {
                v.iter()
                    .map(|f| f.id.clone())
                    .collect::<std::collections::BTreeSet<_>>()
            };
            let (a, b) = (ids(&scoped), ids(&full));
            let differing: Vec<&String> = a
                .symmetric_difference(&b)
                .chain(
                    scoped
                        .iter()
                        .filter(|f| full.iter().any(|g| g.id == f.id && g != *f))
                        .map(|f| &f.id),
                )
                .take(5)
                .collect();
            self.oracle_first_mismatch = Some(format!(
                "at {:.1} s: {} scoped vs {} whole-fleet findings; differing: {differing:?}",
                now_unix_ns as f64 / 1e9,
                scoped.len(),
                full.len()
            ));
        }
    }
}
