//! Per-collective figures from NCCL Inspector records: the stage that reads every node's records from the store
//! (incrementally, as the step engine reads markers), aligns the ranks of each collective by communicator and
//! sequence number, and keeps a bounded window per job; [`summary`] derives per collective and size class the
//! count, bytes, time, median bus bandwidth, slowest rank and the share of the nodes' fabric.
//!
//! Bounds: [`MAX_JOBS`] jobs (the least recently updated goes), [`MAX_INSTANCES_PER_JOB`] collectives per job
//! (the oldest go), [`MAX_RANKS_PER_INSTANCE`] ranks per collective. Readers call [`CollectiveStage::update`]
//! first; it is cheap when nothing is new. Not persisted: after a restart the window fills again.

pub mod by_step;
pub mod summary;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::store::{CollectiveEntry, Store};
pub use by_step::ByStep;
pub use summary::{CollectiveSummary, Instance, RankFigure};

pub const MAX_JOBS: usize = 256;
pub const MAX_INSTANCES_PER_JOB: usize = 4096;
pub const MAX_RANKS_PER_INSTANCE: usize = 4096;

type InstanceKey = (String, u64);

#[derive(Debug, Default)]
struct JobState {
    instances: HashMap<InstanceKey, Instance>,
    order: VecDeque<InstanceKey>,
    last_unix_ns: i64,
}

#[derive(Debug, Default)]
struct State {
    /// Per node, the sequence number of the next record to read.
    cursors: HashMap<String, u64>,
    jobs: HashMap<String, JobState>,
    /// Records evicted from a node's log before they were read.
    lost: u64,
    /// `(store::collectives::appended(), nodes_version)` read before the last walk over a caller's list of nodes
    /// ([`CollectiveStage::update_listed`]).
    walked: Option<(u64, u64)>,
}

/// The collectives stage; shared by the exporters and the analysis.
#[derive(Debug, Default)]
pub struct CollectiveStage {
    state: Mutex<State>,
}

impl CollectiveStage {
    pub fn new() -> Arc<CollectiveStage> {
        Arc::new(CollectiveStage::default())
    }

    /// Reads the records every node received since the last update.
    pub fn update(&self, store: &Store, now_unix_ns: i64) {
        self.update_nodes(store, &store.node_names(now_unix_ns));
    }

    /// Reads the records each of `nodes` received since the last update (a node's cursor is written only when
    /// it moved: an update that finds nothing new copies nothing).
    pub fn update_nodes(&self, store: &Store, nodes: &[String]) {
        for node in nodes {
            let from = self.state.lock().cursors.get(node).copied().unwrap_or(0);
            let read = store.with_node(node, |n| {
                let log = n.collectives();
                // A node recreated after expiry starts its numbering again.
                let start = if log.next_seq() < from { 0 } else { from };
                (start != log.next_seq() || start != from)
                    .then(|| (log.since(start), log.next_seq()))
            });
            let Some(Some(((entries, lost), next))) = read else {
                continue;
            };
            let mut st = self.state.lock();
            match st.cursors.get_mut(node) {
                Some(c) => *c = next,
                None => _ = st.cursors.insert(node.clone(), next),
            }
            st.lost += lost;
            drop(st);
            self.apply(entries);
        }
    }

    /// [`CollectiveStage::update_nodes`] unless no node's log took a record since the last walk over the same
    /// list (`nodes_version`: the caller's number for `nodes`, changed whenever the list does). An analysis
    /// round asks this of the whole fleet up to 32 times a second; the walk looks up every node by name.
    pub fn update_listed(&self, store: &Store, nodes: &[String], nodes_version: u64) {
        // Read before the walk: a record applied during it moves the number, and the next call walks again.
        let now = (crate::store::collectives::appended(), nodes_version);
        if self.state.lock().walked == Some(now) {
            return;
        }
        self.update_nodes(store, nodes);
        self.state.lock().walked = Some(now);
    }

    /// Files records under their job and collective instance.
    pub fn apply(&self, entries: impl IntoIterator<Item = CollectiveEntry>) {
        let mut st = self.state.lock();
        for e in entries {
            if !st.jobs.contains_key(&e.job) && st.jobs.len() >= MAX_JOBS {
                let oldest = st
                    .jobs
                    .iter()
                    .min_by_key(|(_, j)| j.last_unix_ns)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    st.jobs.remove(&k);
                }
            }
            let job = st.jobs.entry(e.job.clone()).or_default();
            job.last_unix_ns = job.last_unix_ns.max(e.received_unix_ns);
            file(job, e);
        }
    }

    /// Jobs with records.
    pub fn job_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.state.lock().jobs.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// The job's summaries, costliest first; `None` for a job without records. `capacity` gives a node's
    /// fabric capacity in bytes/s.
    pub fn summaries(
        &self,
        job: &str,
        capacity: &dyn Fn(&str) -> Option<f64>,
    ) -> Option<Vec<CollectiveSummary>> {
        let st = self.state.lock();
        let j = st.jobs.get(job)?;
        Some(summary::summarize(j.instances.values(), capacity))
    }

    /// The job's collectives placed in `steps` (every held step of the job, oldest first), the newest `limit`
    /// steps summarised ([`by_step::by_step`]); `None` for a job without records.
    pub fn by_step(
        &self,
        job: &str,
        steps: &[crate::steps::JobStep],
        limit: usize,
        capacity: &dyn Fn(&str) -> Option<f64>,
    ) -> Option<ByStep> {
        let st = self.state.lock();
        let j = st.jobs.get(job)?;
        Some(by_step::by_step(
            j.instances.values(),
            steps,
            limit,
            capacity,
        ))
    }

    /// Records evicted from the nodes' logs before this stage read them.
    pub fn lost(&self) -> u64 {
        self.state.lock().lost
    }
}

fn file(job: &mut JobState, e: CollectiveEntry) {
    let r = e.record;
    let key = (r.comm_id.clone(), r.sequence);
    if !job.instances.contains_key(&key) {
        while job.order.len() >= MAX_INSTANCES_PER_JOB {
            if let Some(old) = job.order.pop_front() {
                job.instances.remove(&old);
            }
        }
        job.order.push_back(key.clone());
        job.instances.insert(
            key.clone(),
            Instance {
                collective: r.collective.clone(),
                size_bytes: r.size_bytes,
                n_ranks: r.n_ranks,
                n_nodes: r.n_nodes,
                first_received_unix_ns: e.received_unix_ns,
                ranks: Vec::new(),
            },
        );
    }
    let Some(inst) = job.instances.get_mut(&key) else {
        return;
    };
    let rank = e.job_rank.unwrap_or(r.rank);
    // A rank reports a collective once; a resend or a second agent adds nothing.
    if inst.ranks.len() >= MAX_RANKS_PER_INSTANCE || inst.ranks.iter().any(|x| x.rank == rank) {
        return;
    }
    inst.ranks.push(RankFigure {
        rank,
        node: r.hostname,
        bus_bandwidth_bytes_per_second: r.bus_bandwidth_bytes_per_second,
        exec_time_us: r.exec_time_us,
        time_unix_ns: midpoint_unix_ns(r.dump_timestamp_us, r.exec_time_us),
    });
}

/// The collective's estimated midpoint: the dump time less half the execution time, ns; `None` without a
/// dump time (0) or past the range of an i64.
fn midpoint_unix_ns(dump_timestamp_us: u64, exec_time_us: f64) -> Option<i64> {
    let dump = i64::try_from(dump_timestamp_us.checked_mul(1_000)?).ok()?;
    // A saturating cast: the ingest refuses non-finite and negative times.
    let half = (exec_time_us * 500.0) as i64;
    (dump > 0).then(|| dump.saturating_sub(half))
}

/// One job's summaries, as the analysis reads them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct JobCollectives {
    pub job: String,
    pub summaries: Vec<CollectiveSummary>,
}

/// Reads what is new and summarises every job, with the nodes' fabric capacities.
pub fn job_summaries(
    stage: &CollectiveStage,
    store: &Store,
    now_unix_ns: i64,
) -> Vec<JobCollectives> {
    stage.update(store, now_unix_ns);
    summaries_read(stage, store)
}

/// [`job_summaries`] reading what is new on `nodes` only (the nodes a caller already listed, `nodes_version`
/// its number for the list: [`CollectiveStage::update_listed`]).
pub fn job_summaries_of(
    stage: &CollectiveStage,
    store: &Store,
    (nodes, nodes_version): (&[String], u64),
) -> Vec<JobCollectives> {
    stage.update_listed(store, nodes, nodes_version);
    summaries_read(stage, store)
}

/// Every job's summaries of the records read so far, with the nodes' fabric capacities.
fn summaries_read(stage: &CollectiveStage, store: &Store) -> Vec<JobCollectives> {
    let capacity = |node: &str| node_fabric_capacity(store, node);
    stage
        .job_ids()
        .into_iter()
        .filter_map(|job| {
            let summaries = stage.summaries(&job, &capacity)?;
            Some(JobCollectives { job, summaries })
        })
        .collect()
}

/// The fabric capacity a rank's collectives are held against: one fabric RDMA link of its node (the largest),
/// bytes/s. Bus bandwidth is a per-rank figure; each rank's traffic leaves on one rail, as nccl-tests' baseline
/// is read against one link.
pub fn node_fabric_capacity(store: &Store, node: &str) -> Option<f64> {
    store
        .with_node(node, |n| {
            n.links()
                .iter()
                .filter(|l| l.link.is_fabric_rdma())
                .filter_map(|l| l.link.capacity_bytes_per_second)
                .fold(0.0, f64::max)
        })
        .filter(|c| *c > 0.0)
}

#[cfg(test)]
mod tests {
    use commwatch_model::inspector::CollectiveRecord;

    use super::*;

    pub(crate) fn entry(
        job: &str,
        comm: &str,
        sn: u64,
        rank: u32,
        node: &str,
        bw: f64,
    ) -> CollectiveEntry {
        CollectiveEntry {
            job: job.into(),
            job_rank: Some(rank),
            record: CollectiveRecord {
                comm_id: comm.into(),
                rank,
                n_ranks: 4,
                n_nodes: 2,
                hostname: node.into(),
                pid: 1,
                dump_timestamp_us: 0,
                collective: "AllReduce".into(),
                sequence: sn,
                size_bytes: 220_000_000,
                exec_time_us: 220e6 / (bw / 1.5) * 1e6,
                timing_source: None,
                algorithm: None,
                algo_bandwidth_bytes_per_second: bw / 1.5,
                bus_bandwidth_bytes_per_second: bw,
            },
            received_unix_ns: sn as i64,
        }
    }

    #[test]
    fn ranks_align_by_communicator_and_sequence_number() {
        let stage = CollectiveStage::new();
        let mut entries = Vec::new();
        for sn in 0..3 {
            for (rank, node, bw) in [
                (0, "a", 9.9e9),
                (1, "a", 9.8e9),
                (2, "b", 9.8e9),
                (3, "b", 9.3e9),
            ] {
                entries.push(entry("j", "0xc", sn, rank, node, bw));
            }
        }
        // The same record twice (a resend) and another communicator with the same sequence numbers.
        entries.push(entry("j", "0xc", 0, 3, "b", 1.0));
        entries.push(entry("j", "0xd", 0, 0, "a", 9.8e9));
        stage.apply(entries);
        let s = stage.summaries("j", &|_| Some(22e9)).unwrap();
        assert_eq!(s[0].count, 4, "three instances of 0xc and one of 0xd");
        assert_eq!(s[0].slowest_rank, Some(3));
        assert!((s[0].bus_bandwidth_bytes_per_second - 9.8e9).abs() < 1.0);
        assert!(stage.summaries("other", &|_| None).is_none());
        assert_eq!(stage.job_ids(), ["j"]);
    }

    #[test]
    fn a_record_is_timed_at_its_midpoint() {
        assert_eq!(midpoint_unix_ns(10_000_000, 2_000.0), Some(9_999_000_000));
        assert_eq!(midpoint_unix_ns(0, 2_000.0), None);
        assert_eq!(midpoint_unix_ns(u64::MAX, 1.0), None);
        let stage = CollectiveStage::new();
        let mut e = entry("j", "0xc", 0, 0, "a", 1e9);
        e.record.dump_timestamp_us = 11_000_000;
        e.record.exec_time_us = 1_000.0;
        stage.apply([e]);
        let b = stage.by_step("j", &[], 5, &|_| None).unwrap();
        assert_eq!((b.steps.len(), b.outside_steps.count), (0, 1));
        let st = stage.state.lock();
        let inst = st.jobs["j"].instances.values().next().unwrap();
        assert_eq!(inst.ranks[0].time_unix_ns, Some(10_999_500_000));
    }

    #[test]
    fn a_listed_walk_reads_every_record_applied_since_and_each_new_list() {
        use crate::store::{Batch, Hello};
        const S: i64 = 1_000_000_000;
        let store = Store::new(
            std::time::Duration::from_secs(600),
            std::time::Duration::from_secs(60),
            crate::config::Limits::default(),
        );
        let send = |node: &str, seq: u64, sn: u64| {
            let hello = Hello {
                node: node.into(),
                agent_version: "t".into(),
                boot_id: "b".into(),
                instance_id: 1,
                inventory: Default::default(),
                fast_period_ms: 50,
                slow_period_ms: 1000,
                blind: Vec::new(),
            };
            let out = store.hello(&hello, S, None).expect("hello");
            let batch = Batch {
                collectives: vec![entry("j", "0xc", sn, 0, node, 1e9)],
                ..Batch::numbered(seq)
            };
            let applied = out.node.lock().apply_batch(&batch, S, &mut Vec::new());
            applied.expect("applied");
        };
        let count =
            |stage: &CollectiveStage| stage.summaries("j", &|_| None).map_or(0, |s| s[0].count);
        let stage = CollectiveStage::new();
        let (a, ab) = (["a".to_string()], ["a".to_string(), "b".to_string()]);
        send("a", 1, 0);
        send("b", 1, 1);
        stage.update_listed(&store, &a, 1);
        assert_eq!(count(&stage), 1, "a's record only: b is not listed");
        // Nothing applied since: the same list again reads nothing new (and loses nothing).
        stage.update_listed(&store, &a, 1);
        assert_eq!(count(&stage), 1);
        // A new list reads the records its new node received before it was listed.
        stage.update_listed(&store, &ab, 2);
        assert_eq!(count(&stage), 2, "b's record, applied before the last walk");
        // A record applied after a walk is read by the next one over the same list.
        send("a", 2, 2);
        stage.update_listed(&store, &ab, 2);
        assert_eq!(count(&stage), 3);
        send("b", 2, 3);
        stage.update_listed(&store, &ab, 2);
        assert_eq!(count(&stage), 4);
    }

    #[test]
    fn a_job_keeps_a_bounded_window() {
        let stage = CollectiveStage::new();
        stage.apply(
            (0..MAX_INSTANCES_PER_JOB as u64 + 10).map(|sn| entry("j", "0xc", sn, 0, "a", 1e9)),
        );
        let s = stage.summaries("j", &|_| None).unwrap();
        assert_eq!(s[0].count, MAX_INSTANCES_PER_JOB as u64);
    }
}
