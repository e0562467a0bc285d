//! The in-memory store: per node, per series a bounded ring of samples over `retention`, and per link the byte
//! rates derived from counter deltas.
//!
//! Concurrency: a map of nodes behind an `RwLock` (written only when a node appears or expires), and one `Mutex`
//! per node. Ingesting one batch takes that node's lock once; a scrape copies a node's figures under its lock and
//! formats them outside it, so readers hold any one lock only briefly and never block other nodes' ingest.
//!
//! Counters: the ring of a counter holds `(timestamp_ns, acc)` where `acc` is the reset-corrected cumulative
//! increase since the collector first saw the series (see [`rate`]): a rate or a byte count over any interval
//! is a difference of two `acc`, never negative. The raw value as last read is kept beside it (exported as the
//! `_total`). Gauges hold the f64 bits. A series keeps its ring across agent restarts when its identity
//! (link `(class, device, port)` + metric + labels) matches, so rates continue across the restart.
//!
//! What it applies ([`input`]: an agent's `Hello`, inventory updates, batches with their step markers, job
//! lists) comes validated from the ingest edge or from replay; what only the store can refuse is a
//! [`StoreError`]. Readers take copies ([`view`]) or run short closures under a node's lock.

pub mod collectives;
pub mod error;
mod head;
pub mod input;
pub mod markers;
mod memory;
mod newest_rates;
pub mod node;
pub(crate) mod prefetch;
pub mod rate;
pub mod ring;
pub mod seq_log;
pub mod series;
pub mod ticks;
pub mod view;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::sync::{oneshot, watch};

use crate::config::Limits;
pub use collectives::{CollectiveEntry, CollectiveLog, MAX_COLLECTIVES_PER_NODE};
pub use error::StoreError;
pub use input::{
    Batch, Blindness, Hello, Inventory, JobList, LinkInfo, Marker, SeriesDesc, StepPhase,
};
pub use markers::{MarkerLog, MAX_MARKERS_PER_NODE};
use node::Conn;
pub use node::{BatchOutcome, LinkState, NodeState, HARD_CAP_SAMPLES};
pub use series::{ApplyCounts, Series, SeriesKey};
pub use ticks::{Samples, Ticks};
pub use view::{LinkSnapshot, NodeSnapshot, SeriesSnapshot};

/// The store's own accounting of what it holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StoreMemory {
    pub nodes: usize,
    pub series: usize,
    /// Samples held in all rings (among them a ring's samples past the retention that wait for the rest of their
    /// chunk: see `Ring::extend_run`).
    pub samples: usize,
    /// Bytes allocated for samples.
    pub sample_bytes: usize,
    /// Estimated bytes for everything (samples, series state, keys, id maps).
    pub bytes: usize,
}

/// Shared handle to one node.
pub type NodeRef = Arc<Mutex<NodeState>>;

/// The outcome of a `Hello`.
pub(crate) struct HelloOutcome {
    pub node: NodeRef,
    /// Highest sequence number already held for the instance.
    pub highest_seq: u64,
    pub durable: Arc<watch::Sender<u64>>,
    /// Whether an older stream for the node was told to close.
    pub superseded: bool,
}

/// All nodes. Cheap to share (`Arc<Store>`); the analysis reads it through [`Store::with_node`] and
/// [`Store::node_names`].
#[derive(Debug)]
pub struct Store {
    nodes: RwLock<HashMap<String, NodeRef>>,
    retention_ns: i64,
    node_expiry_ns: i64,
    /// How far past its receipt a sample's timestamp may be (`limits.max_clock_skew`).
    future_ns: i64,
    limits: Limits,
    /// Bumped whenever a node's job list is replaced (readers: [`Store::jobs_changed`]).
    jobs_version: watch::Sender<u64>,
}

impl Store {
    pub fn new(
        retention: std::time::Duration,
        node_expiry: std::time::Duration,
        limits: Limits,
    ) -> Store {
        Store {
            nodes: RwLock::new(HashMap::new()),
            retention_ns: i64::try_from(retention.as_nanos()).unwrap_or(i64::MAX),
            node_expiry_ns: i64::try_from(node_expiry.as_nanos()).unwrap_or(i64::MAX),
            future_ns: i64::try_from(limits.max_clock_skew.as_nanos()).unwrap_or(i64::MAX),
            limits,
            jobs_version: watch::channel(0).0,
        }
    }

    /// Replaces `node`'s job list and tells [`Store::jobs_changed`] subscribers.
    pub(crate) fn set_jobs(&self, node: &NodeRef, jobs: JobList) {
        node.lock().set_jobs(jobs);
        self.note_jobs_changed();
    }

    /// Tells [`Store::jobs_changed`] subscribers that a job list was replaced (after [`NodeState::set_jobs`]).
    pub(crate) fn note_jobs_changed(&self) {
        self.jobs_version.send_modify(|v| *v += 1);
    }

    /// Changes whenever a node's job list is replaced (the value counts replacements).
    pub fn jobs_changed(&self) -> watch::Receiver<u64> {
        self.jobs_version.subscribe()
    }

    /// Every node seen within `node_expiry` whose agent said it is blind to something, with what, sorted by
    /// node name.
    pub fn node_blind(&self, now_unix_ns: i64) -> Vec<(String, Arc<Vec<Blindness>>)> {
        let mut v: Vec<(String, Arc<Vec<Blindness>>)> = self
            .fresh_nodes(now_unix_ns)
            .iter()
            .filter_map(|n| {
                let n = n.lock();
                (!n.blind.is_empty()).then(|| (n.name.clone(), n.blind.clone()))
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Every node seen within `node_expiry` that has jobs, with its job list, sorted by node name.
    pub fn node_jobs(&self, now_unix_ns: i64) -> Vec<(String, Arc<JobList>)> {
        let mut v: Vec<(String, Arc<JobList>)> = self
            .fresh_nodes(now_unix_ns)
            .iter()
            .filter_map(|n| {
                let n = n.lock();
                (!n.jobs.jobs.is_empty()).then(|| (n.name.clone(), n.jobs.clone()))
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The node `name`, created when new — unless `limits.max_nodes` are held (checked under the map's write
    /// lock, so concurrent Hellos cannot overshoot it).
    fn node_or_insert(&self, name: &str) -> Result<NodeRef, StoreError> {
        if let Some(n) = self.nodes.read().get(name) {
            return Ok(n.clone());
        }
        let mut nodes = self.nodes.write();
        if let Some(n) = nodes.get(name) {
            return Ok(n.clone());
        }
        if nodes.len() >= self.limits.max_nodes {
            return Err(StoreError::TooManyNodes {
                count: nodes.len(),
                limit: self.limits.max_nodes,
            });
        }
        let node = Arc::new(Mutex::new(NodeState::new(
            name,
            self.retention_ns,
            self.future_ns,
        )));
        nodes.insert(name.to_string(), node.clone());
        Ok(node)
    }

    /// Registers a `Hello`. With `conn` (a live stream: id and a channel to close it), an older stream of the
    /// same node is told to close: the newer one wins.
    pub(crate) fn hello(
        &self,
        hello: &Hello,
        received_unix_ns: i64,
        conn: Option<(u64, oneshot::Sender<()>)>,
    ) -> Result<HelloOutcome, StoreError> {
        let node = self.node_or_insert(&hello.node)?;
        let (highest_seq, durable, superseded) = {
            let mut n = node.lock();
            n.register_hello(hello, &self.limits)?;
            n.touch(received_unix_ns);
            let mut superseded = false;
            if let Some((id, close)) = conn {
                if let Some(mut old) = n.conn.take() {
                    if let Some(tx) = old.close.take() {
                        superseded = tx.send(()).is_ok();
                    }
                }
                n.conn = Some(Conn {
                    id,
                    close: Some(close),
                });
            }
            let highest = n.highest_seq(hello.instance_id);
            (highest, n.durable(hello.instance_id), superseded)
        };
        // A node expired while its stream was silent comes back with the Hello.
        self.nodes
            .write()
            .entry(hello.node.clone())
            .or_insert_with(|| node.clone());
        Ok(HelloOutcome {
            node,
            highest_seq,
            durable,
            superseded,
        })
    }

    /// Makes sure `node` is in the map (a live stream's node may have expired while silent).
    pub(crate) fn ensure_present(&self, node: &NodeRef) {
        let name = node.lock().name.clone();
        let present = self
            .nodes
            .read()
            .get(&name)
            .is_some_and(|n| Arc::ptr_eq(n, node));
        if !present {
            self.nodes
                .write()
                .entry(name)
                .or_insert_with(|| node.clone());
        }
    }

    /// The stream `conn_id` ended; the node stays until it expires.
    pub(crate) fn release(&self, node: &NodeRef, conn_id: u64) {
        let mut n = node.lock();
        if n.is_current(conn_id) {
            n.conn = None;
        }
    }

    /// Removes nodes with no message for `node_expiry` and no open stream. Returns how many.
    pub fn expire(&self, now_unix_ns: i64) -> usize {
        // Find the stale nodes under the read lock (each node's lock taken alone), then remove them under a
        // short write lock, so a busy node's lock never stalls every other node's Hello and reads.
        let stale: Vec<(String, NodeRef)> = self
            .nodes
            .read()
            .iter()
            .filter(|(_, n)| self.is_stale(&n.lock(), now_unix_ns))
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        if stale.is_empty() {
            return 0;
        }
        let mut nodes = self.nodes.write();
        let mut removed = 0;
        for (name, node) in stale {
            // Still the same node object (not replaced by a new Hello meanwhile), and still stale.
            let still = nodes.get(&name).is_some_and(|n| Arc::ptr_eq(n, &node))
                && self.is_stale(&node.lock(), now_unix_ns);
            if still {
                nodes.remove(&name);
                removed += 1;
            }
        }
        removed
    }

    /// No open stream and no message for `node_expiry`: [`Store::expire`] removes it.
    fn is_stale(&self, n: &NodeState, now_unix_ns: i64) -> bool {
        n.conn.is_none() && now_unix_ns - n.last_seen_unix_ns > self.node_expiry_ns
    }

    fn fresh_nodes(&self, now_unix_ns: i64) -> Vec<NodeRef> {
        let nodes: Vec<NodeRef> = self.nodes.read().values().cloned().collect();
        nodes
            .into_iter()
            .filter(|n| now_unix_ns - n.lock().last_seen_unix_ns <= self.node_expiry_ns)
            .collect()
    }

    /// Copies of every node seen within `node_expiry`, sorted by name. Each node's lock is held only while its
    /// copy is taken.
    pub fn snapshot(&self, now_unix_ns: i64) -> Vec<NodeSnapshot> {
        let mut out: Vec<NodeSnapshot> = self
            .fresh_nodes(now_unix_ns)
            .iter()
            .map(|n| n.lock().snapshot())
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Names of the nodes seen within `node_expiry`, sorted.
    pub fn node_names(&self, now_unix_ns: i64) -> Vec<String> {
        let mut v: Vec<String> = self
            .fresh_nodes(now_unix_ns)
            .iter()
            .map(|n| n.lock().name.clone())
            .collect();
        v.sort();
        v
    }

    /// Runs `f` on a node under its lock (keep `f` short: it blocks that node's ingest).
    pub fn with_node<R>(&self, name: &str, f: impl FnOnce(&NodeState) -> R) -> Option<R> {
        let node = self.nodes.read().get(name).cloned()?;
        let n = node.lock();
        Some(f(&n))
    }

    /// The store's memory accounting over every node held (expired-but-connected included).
    pub fn memory(&self) -> StoreMemory {
        let nodes: Vec<NodeRef> = self.nodes.read().values().cloned().collect();
        let mut m = StoreMemory::default();
        for n in nodes {
            let x = n.lock().memory();
            m.nodes += x.nodes;
            m.series += x.series;
            m.samples += x.samples;
            m.sample_bytes += x.sample_bytes;
            m.bytes += x.bytes;
        }
        m
    }

    /// Nodes held, expired-but-connected included.
    pub fn node_count(&self) -> usize {
        self.nodes.read().len()
    }

    pub(crate) fn node(&self, name: &str) -> Option<NodeRef> {
        self.nodes.read().get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commwatch_model::{Endpoint, Link, LinkClass, LinkKey, LinkRole, SeriesKind, Tier};

    const S: i64 = 1_000_000_000;

    /// A store of 10 minutes' retention whose nodes expire after a minute.
    fn test_store() -> Store {
        Store::new(
            std::time::Duration::from_secs(600),
            std::time::Duration::from_secs(60),
            Limits::default(),
        )
    }

    fn hello(instance: u64, with_rx: bool) -> Hello {
        let mut series = vec![SeriesDesc {
            id: 1,
            metric: "tx_bytes".into(),
            kind: Some(SeriesKind::Counter {
                max_value: u64::MAX,
            }),
            link_id: 1,
            labels: vec![],
            tier: Some(Tier::Fast),
        }];
        if with_rx {
            series.push(SeriesDesc {
                id: 2,
                metric: "rx_bytes".into(),
                kind: Some(SeriesKind::Counter {
                    max_value: u64::MAX,
                }),
                link_id: 1,
                labels: vec![],
                tier: Some(Tier::Fast),
            });
        }
        Hello {
            node: "n1".into(),
            agent_version: "t".into(),
            boot_id: "b".into(),
            instance_id: instance,
            inventory: Inventory {
                links: vec![LinkInfo {
                    id: 1,
                    link: Link {
                        key: LinkKey::new(LinkClass::Infiniband, "mlx5_0", "1"),
                        endpoint: Endpoint::HcaPort,
                        role: LinkRole::Fabric,
                        capacity_bytes_per_second: Some(25e9),
                        state: "ACTIVE".into(),
                        attributes: [("phys_state".to_string(), "LinkUp".to_string())].into(),
                        gpu: None,
                        link: None,
                    },
                }],
                series,
                refused: Vec::new(),
            },
            fast_period_ms: 50,
            slow_period_ms: 1000,
            blind: Vec::new(),
        }
    }

    fn batch(seq: u64, ticks: &[(i64, u64)]) -> Batch {
        Batch {
            seq,
            timestamps_unix_ns: ticks.iter().map(|t| t.0).collect(),
            tick_lengths: vec![1; ticks.len()],
            series_ids: vec![1; ticks.len()],
            values: ticks.iter().map(|t| t.1).collect(),
            dropped_batches_total: 0,
            markers: vec![],
            invalid_markers: 0,
            collectives: vec![],
            invalid_collectives: vec![],
        }
    }

    #[test]
    fn link_attributes_reach_the_analysis_input() {
        let store = test_store();
        let out = store.hello(&hello(7, false), S, None).expect("hello");
        let n = out.node.lock();
        assert_eq!(n.links()[0].link.attributes["phys_state"], "LinkUp");
        let input = crate::analysis::input::node_input(&n, 0);
        assert_eq!(input.links[0].link.attributes["phys_state"], "LinkUp");
    }

    #[test]
    fn the_analysis_input_analyses_the_links_its_rules_read() {
        let store = test_store();
        let mut h = hello(7, false);
        let mut nvlink = h.inventory.links[0].clone();
        nvlink.id = 2;
        nvlink.link.key = LinkKey::new(LinkClass::Nvlink, "gpu0", "0");
        nvlink.link.endpoint = Endpoint::GpuLink;
        h.inventory.links.push(nvlink);
        let mut tx = h.inventory.series[0].clone();
        (tx.id, tx.link_id) = (3, 2);
        h.inventory.series.push(tx);
        let out = store.hello(&h, S, None).expect("hello");
        let mut n = out.node.lock();
        // 2 s at 20 Hz, both links moving 1 MB a tick.
        let ticks: Vec<i64> = (0..40).map(|k| S + k * S / 20).collect();
        let b = Batch {
            tick_lengths: vec![2; ticks.len()],
            series_ids: ticks.iter().flat_map(|_| [1, 3]).collect(),
            values: (0..ticks.len() as u64)
                .flat_map(|k| [k << 20, k << 20])
                .collect(),
            timestamps_unix_ns: ticks,
            ..batch(1, &[])
        };
        n.apply_batch(&b, 3 * S, &mut Vec::new()).expect("applied");
        let input = crate::analysis::input::node_input(&n, 0);
        let by_class = |c: LinkClass| {
            input
                .links
                .iter()
                .find(|l| l.link.key.class == c)
                .expect("the link")
        };
        let hca = by_class(LinkClass::Infiniband).activity.as_ref();
        assert_eq!(hca.map(|a| a.tx_bytes), Some(39 << 20));
        assert_eq!(by_class(LinkClass::Nvlink).activity, None);
    }

    #[test]
    fn tcp_counters_are_read_over_their_newest_seconds() {
        let store = test_store();
        let mut h = hello(7, false);
        for (id, metric) in [
            (4, "tcp_retransmitted_segments_total"),
            (5, "symbol_errors"),
        ] {
            h.inventory.series.push(SeriesDesc {
                id,
                metric: metric.into(),
                kind: Some(SeriesKind::Counter {
                    max_value: u64::MAX,
                }),
                link_id: 0,
                labels: vec![],
                tier: Some(Tier::Slow),
            });
        }
        let out = store.hello(&h, S, None).expect("hello");
        let mut n = out.node.lock();
        // 20 s at 1 Hz, both counters rising by 100 a second.
        let ticks: Vec<i64> = (0..20).map(|k| S + k * S).collect();
        let b = Batch {
            tick_lengths: vec![2; ticks.len()],
            series_ids: ticks.iter().flat_map(|_| [4, 5]).collect(),
            values: (0..ticks.len() as u64)
                .flat_map(|k| [100 * k, 100 * k])
                .collect(),
            timestamps_unix_ns: ticks,
            ..batch(1, &[])
        };
        n.apply_batch(&b, 21 * S, &mut Vec::new()).expect("applied");
        let input = crate::analysis::input::node_input(&n, 0);
        let c = |m: &str| input.counter(m).expect(m);
        // The TCP counter over its newest 6 s; any other over the whole window.
        let tcp = c("tcp_retransmitted_segments_total");
        assert_eq!((tcp.increase, tcp.window_s), (600, 6.0));
        let other = c("symbol_errors");
        assert_eq!((other.increase, other.window_s), (1900, 19.0));
    }

    #[test]
    fn dedup_gap_and_rate() {
        let store = test_store();
        let out = store.hello(&hello(7, false), S, None).expect("hello");
        let mut scratch = Vec::new();
        let mut n = out.node.lock();
        let b1 = batch(1, &[(S, 0), (2 * S, 1_000_000)]);
        assert!(matches!(
            n.apply_batch(&b1, S, &mut scratch),
            Ok(BatchOutcome::Accepted { gap: 0, .. })
        ));
        assert_eq!(
            n.apply_batch(&b1, S, &mut scratch),
            Ok(BatchOutcome::Duplicate)
        );
        let b3 = batch(3, &[(3 * S, 3_000_000)]);
        assert!(matches!(
            n.apply_batch(&b3, S, &mut scratch),
            Ok(BatchOutcome::Accepted { gap: 1, .. })
        ));
        assert_eq!(n.highest_seq(7), 3);
        let snap = n.snapshot();
        assert_eq!(snap.links[0].tx_bytes_total, Some(3_000_000));
        assert_eq!(snap.links[0].tx_bytes_per_second, Some(2_000_000.0));
        assert_eq!(snap.links[0].rx_bytes_total, None);
        // Unknown series id: rejected, nothing applied.
        let mut bad = batch(4, &[(4 * S, 4_000_000)]);
        bad.series_ids[0] = 9;
        let e = n.apply_batch(&bad, S, &mut scratch).unwrap_err();
        assert!(e.to_string().contains("batch.series_ids[0]"), "{e}");
        assert_eq!(n.highest_seq(7), 3);
    }

    #[test]
    fn restart_keeps_series_by_identity() {
        let store = test_store();
        let mut scratch = Vec::new();
        let out = store.hello(&hello(1, false), S, None).expect("hello");
        out.node
            .lock()
            .apply_batch(
                &batch(1, &[(S, 10_000_000), (2 * S, 11_000_000)]),
                S,
                &mut scratch,
            )
            .expect("apply");
        drop(out);
        // New instance, series ids shuffled (rx first): tx continues from 11_000_000.
        let mut h = hello(2, true);
        h.inventory.series[0].id = 5;
        let out = store.hello(&h, 3 * S, None).expect("hello");
        let mut n = out.node.lock();
        let mut b = batch(1, &[(4 * S, 13_000_000)]);
        b.series_ids = vec![5];
        n.apply_batch(&b, 4 * S, &mut scratch).expect("apply");
        let snap = n.snapshot();
        // (13M - 11M) over 2 s.
        assert_eq!(snap.links[0].tx_bytes_per_second, Some(1_000_000.0));
        assert_eq!(n.highest_seq(1), 1);
        assert_eq!(n.highest_seq(2), 1);
    }

    fn marker(step: u64, t: i64) -> Marker {
        Marker {
            job: "j".into(),
            rank: 0,
            step,
            phase: StepPhase::End,
            sent_unix_ns: 0,
            received_unix_ns: t,
            samples: None,
        }
    }

    #[test]
    fn markers_logged_once_and_read_incrementally() {
        let store = test_store();
        let out = store.hello(&hello(7, false), S, None).expect("hello");
        let mut scratch = Vec::new();
        let mut n = out.node.lock();
        let mut b1 = batch(1, &[(S, 0)]);
        b1.markers = vec![marker(1, S), marker(2, 2 * S)];
        let r = n.apply_batch(&b1, S, &mut scratch).expect("apply");
        assert!(matches!(r, BatchOutcome::Accepted { counts, .. } if counts.markers == 2));
        // A resend of the same batch: duplicate, no marker added.
        assert_eq!(
            n.apply_batch(&b1, S, &mut scratch),
            Ok(BatchOutcome::Duplicate)
        );
        assert_eq!(n.markers().len(), 2);
        let mut b2 = batch(2, &[(2 * S, 0)]);
        b2.markers = vec![marker(3, 3 * S)];
        n.apply_batch(&b2, S, &mut scratch).expect("apply");
        let (all, lost) = n.markers().since(0);
        assert_eq!(
            all.iter().map(|m| m.step).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(lost, 0);
        let (new, lost) = n.markers().since(2);
        assert_eq!(new.iter().map(|m| m.step).collect::<Vec<_>>(), vec![3]);
        assert_eq!(lost, 0);
        assert_eq!(n.markers().next_seq(), 3);
        assert!(n.markers().since(3).0.is_empty());
    }

    #[test]
    fn ring_cap_follows_period() {
        let store = test_store();
        let out = store.hello(&hello(1, true), S, None).expect("hello");
        let n = out.node.lock();
        // 600 s at 20 Hz = 12000, + 1/8 + 2.
        assert_eq!(n.series()[0].ring().cap(), 13_502);
    }

    /// Three gauges (two fast, one slow) over ticks that go through the node's head into the rings several
    /// times, with a tick that goes backwards, eviction by retention, and an agent restart that reorders the
    /// series ids and slots midway: every series reads exactly the samples of its held ticks, in order, both ways.
    #[test]
    fn samples_read_the_same_through_head_and_rings() {
        let store = Store::new(
            std::time::Duration::from_secs(5),
            std::time::Duration::from_secs(600),
            Limits::default(),
        );
        let desc = |id: u32, metric: &str, tier: Tier| SeriesDesc {
            id,
            metric: metric.into(),
            kind: Some(SeriesKind::Gauge),
            link_id: 0,
            labels: vec![],
            tier: Some(tier),
        };
        let mut h = hello(1, false);
        h.inventory.series = vec![
            desc(1, "a", Tier::Fast),
            desc(2, "b", Tier::Fast),
            desc(3, "slow", Tier::Slow),
        ];
        let out = store.hello(&h, S, None).expect("hello");
        let mut want: Vec<Vec<(i64, u64)>> = vec![vec![]; 3];
        let mut scratch = Vec::new();
        let (mut seq, mut ids, mut newest) = (0u64, [1u32, 2, 3], 0i64);
        for t in 1..=400i64 {
            if t == 230 {
                // A restart: the new instance numbers the series the other way round.
                let mut h2 = h.clone();
                h2.instance_id = 2;
                for d in &mut h2.inventory.series {
                    d.id = 4 - d.id;
                }
                // Described in the other order too: the series take other slots.
                h2.inventory.series.reverse();
                ids = [3, 2, 1];
                seq = 0;
                store.hello(&h2, S + t * S / 20, None).expect("hello");
            }
            // Tick 150 goes backwards: every sample of it is out of order and skipped.
            let ts = if t == 150 { S } else { S + t * S / 20 };
            let n = if t % 20 == 0 { 3 } else { 2 };
            seq += 1;
            let b = Batch {
                seq,
                timestamps_unix_ns: vec![ts],
                tick_lengths: vec![n as u32],
                series_ids: ids[..n].to_vec(),
                values: (0..n as u64).map(|k| t as u64 * 10 + k).collect(),
                ..batch(seq, &[])
            };
            out.node
                .lock()
                .apply_batch(&b, ts, &mut scratch)
                .expect("apply");
            if t != 150 {
                newest = ts;
                for (k, w) in want.iter_mut().enumerate().take(n) {
                    w.push((ts, t as u64 * 10 + k as u64));
                }
            }
            let n = out.node.lock();
            for (k, w) in want.iter().enumerate() {
                let key = ["a", "b", "slow"][k];
                let s = n
                    .series()
                    .iter()
                    .find(|s| s.key().metric == key)
                    .expect("series");
                let samples = n.samples(s);
                // 5 s of retention from the newest tick held.
                let held: Vec<_> = w
                    .iter()
                    .copied()
                    .filter(|x| x.0 >= newest - 5 * S)
                    .collect();
                let got: Vec<_> = samples.iter().collect();
                assert_eq!(got, held, "series {key} after tick {t}");
                let mut back: Vec<_> = samples.iter().rev().collect();
                back.reverse();
                assert_eq!(back, held, "series {key} newest first after tick {t}");
                assert_eq!(samples.last(), held.last().copied());
            }
        }
    }
}
