//! Ingest without a stream: one agent instance's messages applied to a [`Store`] at a receive time the caller
//! gives.
//!
//! The same edge validation ([`super::domain`]: `TryFrom` and the limits) and the same store calls as a
//! stream's Hello, inventory update and batch, in the same order. What a stream adds around them — transport,
//! authentication, acks, persistence, the per-stream sample rate limit, the health counters — is left out.
//! It exists for runs on a virtual clock, where a stream's receive time (the wall clock) would not match the
//! samples' own: the detection benchmark drives real agents' sampling through simulated hours in minutes.

use std::sync::Arc;

use commwatch_proto::v1 as pb;

use super::domain::IngestError;
use crate::store::{ApplyCounts, Batch, BatchOutcome, Hello, Inventory, JobList, NodeRef, Store};

/// One agent instance, connected without a stream: [`DirectAgent::hello`] registers it, then its inventory
/// updates and batches are applied as a stream applies them.
pub struct DirectAgent {
    store: Arc<Store>,
    node: NodeRef,
    /// Reused across batches (series slots of the batch being applied).
    scratch: Vec<u32>,
}

impl DirectAgent {
    /// Accepts a Hello received at `received_unix_ns`: validated, checked against the limits and registered
    /// in `store`, as a stream's first message is.
    pub fn hello(
        store: Arc<Store>,
        hello: pb::Hello,
        received_unix_ns: i64,
    ) -> Result<DirectAgent, IngestError> {
        let hello = Hello::try_from(hello)?;
        hello.inventory.check_limits(store.limits())?;
        let out = store.hello(&hello, received_unix_ns, None)?;
        Ok(DirectAgent {
            store,
            node: out.node,
            scratch: Vec::new(),
        })
    }

    /// Applies an inventory update (new links and series, and the node's complete job list when it carries
    /// one), validated whole first: nothing of a bad one is applied.
    pub fn inventory_update(
        &mut self,
        update: pb::InventoryUpdate,
        received_unix_ns: i64,
    ) -> Result<(), IngestError> {
        let limits = self.store.limits();
        let inv = Inventory::try_from(update.inventory)?;
        inv.check_limits(limits)?;
        let jobs = update
            .jobs
            .map(|j| JobList::validated(j, limits))
            .transpose()?;
        let replaced_jobs = jobs.is_some();
        {
            let mut n = self.node.lock();
            n.apply_inventory(&inv, limits)?;
            if let Some(list) = jobs {
                n.set_jobs(list);
            }
            n.touch(received_unix_ns);
        }
        if replaced_jobs {
            self.store.note_jobs_changed();
        }
        Ok(())
    }

    /// Applies a batch received at `received_unix_ns`: validated at the edge, then applied under the node's
    /// lock. Returns what the store counted, or `None` for a batch already applied (a resend).
    pub fn batch(
        &mut self,
        batch: pb::SampleBatch,
        received_unix_ns: i64,
    ) -> Result<Option<ApplyCounts>, IngestError> {
        let batch = Batch::try_from(batch)?;
        let outcome = self
            .node
            .lock()
            .apply_batch(&batch, received_unix_ns, &mut self.scratch)?;
        Ok(match outcome {
            BatchOutcome::Accepted { counts, .. } => Some(counts),
            BatchOutcome::Duplicate => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Limits;

    const T0: i64 = 1_700_000_000_000_000_000;

    fn store() -> Arc<Store> {
        Arc::new(Store::new(
            Duration::from_secs(600),
            Duration::from_secs(30),
            Limits::default(),
        ))
    }

    fn hello() -> pb::Hello {
        pb::Hello {
            node: "node-00".into(),
            agent_version: "test".into(),
            boot_id: "b".into(),
            instance_id: 7,
            inventory: Some(pb::Inventory {
                links: vec![],
                series: vec![pb::SeriesDescriptor {
                    id: 1,
                    metric: "cpu_utilization_ratio".into(),
                    kind: pb::SeriesKind::Gauge as i32,
                    tier: pb::Tier::Slow as i32,
                    ..Default::default()
                }],
            }),
            fast_period_ms: 50,
            slow_period_ms: 1000,
            blind: Vec::new(),
        }
    }

    #[test]
    fn messages_reach_the_store_at_the_given_time() {
        let store = store();
        let mut agent = DirectAgent::hello(store.clone(), hello(), T0).unwrap();
        assert_eq!(store.node_names(T0), vec!["node-00".to_string()]);
        let batch = |seq| pb::SampleBatch {
            seq,
            timestamps_unix_ns: vec![T0 + 1_000_000_000],
            tick_lengths: vec![1],
            series_ids: vec![1],
            values: vec![0.5f64.to_bits()],
            ..Default::default()
        };
        let later = T0 + 3_600_000_000_000;
        let counts = agent.batch(batch(1), later).unwrap().unwrap();
        assert_eq!(counts.samples, 1);
        assert!(agent.batch(batch(1), later).unwrap().is_none(), "a resend");
        // Fresh at the virtual time it was received, whatever the wall clock says.
        assert_eq!(store.node_names(later), vec!["node-00".to_string()]);
        let unknown = pb::SampleBatch {
            series_ids: vec![9],
            ..batch(2)
        };
        assert!(agent.batch(unknown, later).is_err());
    }
}
