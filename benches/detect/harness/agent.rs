//! One simulated node's agent: the real sources (the explicit list built on the node's sysfs and procfs trees,
//! its GPUs and host CPUs behind the virtual clock), the real sampler with its ids and wire forms, and the
//! agent's batch builder. What the sampling thread and the shipper would send reaches the collector through
//! `ingest::direct`, received at the clock's time.

use std::path::Path;
use std::sync::Arc;

use commwatch_agent::sampler::{BatchBuilder, Sampler};
use commwatch_agent::source::{build_sources_with, SourceExtras, Tier};
use commwatch_agent::telemetry::AgentMetrics;
use commwatch_agent::AgentConfig;
use commwatch_collector::ingest::direct::DirectAgent;
use commwatch_collector::store::ApplyCounts;
use commwatch_collector::Store;
use commwatch_proto::v1 as pb;
use commwatch_sim::{JobModel, SimGpus, SimHost};

use super::clock::{ClockedGpus, ClockedHost, VirtualClock};
use super::HarnessError;

/// The agent's sampling periods (its defaults): what the collector is told in the Hello.
pub const FAST_PERIOD_MS: u32 = 50;
pub const SLOW_PERIOD_MS: u32 = 1000;

/// What the store did with one node's batches, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shipped {
    pub batches: u64,
    pub samples: u64,
    pub out_of_order: u64,
    pub resets: u64,
    pub implausible: u64,
    pub refused: u64,
}

impl Shipped {
    fn add(&mut self, c: &ApplyCounts) {
        self.batches += 1;
        self.samples += c.samples;
        self.out_of_order += c.out_of_order;
        self.resets += c.resets;
        self.implausible += c.implausible;
        self.refused += c.refused;
    }
}

/// One node's agent on the virtual clock.
pub struct SimAgent {
    name: String,
    sampler: Sampler,
    builder: BatchBuilder,
    next_seq: u64,
    conn: DirectAgent,
    clock: VirtualClock,
    shipped: Shipped,
}

impl SimAgent {
    /// Builds node `index`'s sources on its trees, discovers them, and says Hello to `store` with the
    /// inventory (then the job list the `processes` source found), as an agent does at start.
    pub fn start(
        name: &str,
        index: usize,
        (sysfs_root, procfs_root): (&Path, &Path),
        model: &JobModel,
        clock: &VirtualClock,
        store: Arc<Store>,
    ) -> Result<SimAgent, HarnessError> {
        let config = AgentConfig {
            node: name.to_string(),
            sysfs_root: sysfs_root.to_path_buf(),
            procfs_root: procfs_root.to_path_buf(),
            sources: ["infiniband", "netdev", "host", "nvml", "processes"]
                .map(String::from)
                .to_vec(),
            ..Default::default()
        };
        // The backends' own epoch is never used: they always answer at the clock's time.
        let epoch = std::time::Instant::now();
        let extras = SourceExtras {
            gpu: Some(Box::new(ClockedGpus::new(
                SimGpus::new(model, index, epoch),
                clock.clone(),
            ))),
            host: Some(Box::new(ClockedHost::new(
                SimHost::new(model, index, epoch),
                clock.clone(),
            ))),
        };
        let sources = build_sources_with(&config.source_settings(), extras);
        let mut sampler = Sampler::new(sources, Arc::new(AgentMetrics::new()));
        sampler.discover();
        let _ = sampler.take_update();
        let hello = pb::Hello {
            node: name.to_string(),
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            boot_id: format!("sim-{name}"),
            instance_id: 1,
            inventory: Some(sampler.full_inventory()),
            fast_period_ms: FAST_PERIOD_MS,
            slow_period_ms: SLOW_PERIOD_MS,
            blind: Vec::new(),
        };
        let conn = DirectAgent::hello(store, hello, clock.unix_ns())?;
        let mut agent = SimAgent {
            name: name.to_string(),
            sampler,
            builder: BatchBuilder::default(),
            next_seq: 1,
            conn,
            clock: clock.clone(),
            shipped: Shipped::default(),
        };
        agent.flush_updates()?;
        Ok(agent)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads every series of `tier`, each stamped at the clock's time.
    pub fn read(&mut self, tier: Tier) {
        let clock = &self.clock;
        self.sampler
            .sample_at(tier, &mut self.builder, &mut || clock.unix_ns());
    }

    /// Ends the tick the reads of this instant share.
    pub fn end_tick(&mut self) {
        self.builder.end_tick();
    }

    /// Cuts the batch gathered so far and has the collector apply it (after any pending inventory or job
    /// update, as the sampling thread orders them).
    pub fn ship(&mut self) -> Result<(), HarnessError> {
        self.flush_updates()?;
        let Some(mut batch) = self.builder.take() else {
            return Ok(());
        };
        batch.seq = self.next_seq;
        self.next_seq += 1;
        if let Some(counts) = self.conn.batch(batch, self.clock.unix_ns())? {
            self.shipped.add(&counts);
        }
        Ok(())
    }

    /// The agent's periodic rediscovery: the batch so far leaves first, a changed inventory follows.
    pub fn rediscover(&mut self) -> Result<(), HarnessError> {
        self.ship()?;
        if self.sampler.discover() {
            self.flush_updates()?;
        }
        Ok(())
    }

    /// Read and discovery errors the sampler noted (most recent, bounded).
    pub fn recent_errors(&self) -> usize {
        self.sampler.recent_errors().len()
    }

    pub fn shipped(&self) -> Shipped {
        self.shipped
    }

    fn flush_updates(&mut self) -> Result<(), HarnessError> {
        let now = self.clock.unix_ns();
        if let Some(inventory) = self.sampler.take_update() {
            let u = pb::InventoryUpdate {
                inventory: Some(inventory),
                jobs: None,
            };
            self.conn.inventory_update(u, now)?;
        }
        if let Some(jobs) = self.sampler.take_jobs_update() {
            let u = pb::InventoryUpdate {
                inventory: None,
                jobs: Some(jobs),
            };
            self.conn.inventory_update(u, now)?;
        }
        Ok(())
    }
}
