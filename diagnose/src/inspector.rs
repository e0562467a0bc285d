//! NCCL Inspector dump files read offline (`--nccl-inspector DIR`): every collective of every communicator on
//! every rank, as the plugin wrote it (format and units in `commwatch_model::inspector`), and the per-collective
//! summary step 3 of the report ranks by cost.
//!
//! A directory stands for the dump files in it: `*.log` (the plugin's `<host>-pid<PID>.log`), their rotated
//! parts (`*.log.1`, …) and `*.jsonl`; Prometheus-textfile dumps (`*.prom`) are a latest-value snapshot and
//! are not read. Each line is judged alone; what gave no record is counted per file.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use commwatch_model::inspector::{parse_line, size_class, CollectiveRecord, LineCounts};
use commwatch_model::stats::median;
use serde::Serialize;

/// Why a path could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum InspectorReadError {
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{0}: no Inspector dump files (*.log, *.log.N, *.jsonl) in this directory")]
    Empty(String),
}

/// One dump file as read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileRead {
    pub file: String,
    pub counts: LineCounts,
}

/// Everything read from one `--nccl-inspector` argument.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InspectorRead {
    pub files: Vec<FileRead>,
    pub records: Vec<CollectiveRecord>,
}

/// Whether a file name is one of the plugin's JSON dump files (or a rotated part of one).
pub fn is_dump_file(name: &str) -> bool {
    if name.ends_with(".jsonl") || name.ends_with(".log") {
        return true;
    }
    match name.rsplit_once(".log.") {
        Some((_, n)) => !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

/// Reads a dump file, or every dump file of a directory (sorted by name).
pub fn read_path(path: &Path) -> Result<InspectorRead, InspectorReadError> {
    let io = |error| InspectorReadError::Io {
        path: path.display().to_string(),
        error,
    };
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && p.file_name()
                        .is_some_and(|n| is_dump_file(&n.to_string_lossy()))
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(InspectorReadError::Empty(path.display().to_string()));
        }
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut read = InspectorRead::default();
    for file in files {
        let text = crate::input::read_text(&file).map_err(|error| InspectorReadError::Io {
            path: file.display().to_string(),
            error,
        })?;
        let mut counts = LineCounts::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            read.records.extend(counts.count(parse_line(line)));
        }
        read.files.push(FileRead {
            file: file.display().to_string(),
            counts,
        });
    }
    Ok(read)
}

/// One collective and size class over every rank and instance. Bandwidths in GB/s (10⁹ bytes/s), times in µs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveSummary {
    pub collective: String,
    /// `commwatch_model::inspector::size_class`.
    pub size_class: &'static str,
    /// Median message size of the class, bytes.
    pub size_bytes: u64,
    /// Instances: distinct (communicator, sequence number).
    pub count: u64,
    /// Records: one per rank per instance.
    pub records: u64,
    /// Sum over instances of the slowest rank's execution time: what the job waited, µs.
    pub total_time_us: f64,
    /// Median bus bandwidth over ranks and instances, GB/s.
    pub bus_bandwidth_gbps: f64,
    /// The rank (in its communicator) with the lowest median bus bandwidth, its host and that median.
    pub slowest_rank: Option<u32>,
    pub slowest_host: Option<String>,
    pub slowest_bus_bandwidth_gbps: Option<f64>,
    /// Most ranks and nodes of a communicator that ran it.
    pub ranks: u32,
    pub nodes: u32,
}

type Key = (String, &'static str);

/// Groups records by collective and size class; the costliest (most total time) first.
pub fn summarize(records: &[CollectiveRecord]) -> Vec<CollectiveSummary> {
    let mut groups: BTreeMap<Key, Vec<&CollectiveRecord>> = BTreeMap::new();
    for r in records {
        groups
            .entry((r.collective.clone(), size_class(r.size_bytes)))
            .or_default()
            .push(r);
    }
    let mut out: Vec<CollectiveSummary> = groups
        .into_iter()
        .map(|(k, rs)| summarize_group(k, &rs))
        .collect();
    out.sort_by(|a, b| b.total_time_us.total_cmp(&a.total_time_us));
    out
}

fn summarize_group((collective, class): Key, rs: &[&CollectiveRecord]) -> CollectiveSummary {
    let mut instances: HashMap<(&str, u64), f64> = HashMap::new();
    let mut per_rank: HashMap<(&str, u32), (Vec<f64>, &str)> = HashMap::new();
    for r in rs {
        let slowest = instances
            .entry((r.comm_id.as_str(), r.sequence))
            .or_insert(0.0);
        *slowest = slowest.max(r.exec_time_us);
        per_rank
            .entry((r.comm_id.as_str(), r.rank))
            .or_insert_with(|| (Vec::new(), r.hostname.as_str()))
            .0
            .push(r.bus_bandwidth_bytes_per_second / 1e9);
    }
    let mut sizes: Vec<f64> = rs.iter().map(|r| r.size_bytes as f64).collect();
    let mut bws: Vec<f64> = rs
        .iter()
        .map(|r| r.bus_bandwidth_bytes_per_second / 1e9)
        .collect();
    let slowest = per_rank
        .iter_mut()
        .filter_map(|((_, rank), (v, host))| median(v).map(|m| (*rank, *host, m)))
        .min_by(|a, b| a.2.total_cmp(&b.2).then(a.0.cmp(&b.0)));
    let distinct_ranks: HashSet<(&str, u32)> = per_rank.keys().copied().collect();
    CollectiveSummary {
        collective,
        size_class: class,
        size_bytes: median(&mut sizes).unwrap_or(0.0) as u64,
        count: instances.len() as u64,
        records: rs.len() as u64,
        total_time_us: instances.values().sum(),
        bus_bandwidth_gbps: median(&mut bws).unwrap_or(0.0),
        // One rank cannot be slower than itself.
        slowest_rank: slowest.filter(|_| distinct_ranks.len() > 1).map(|s| s.0),
        slowest_host: slowest
            .filter(|_| distinct_ranks.len() > 1)
            .map(|s| s.1.to_string()),
        slowest_bus_bandwidth_gbps: slowest.filter(|_| distinct_ranks.len() > 1).map(|s| s.2),
        ranks: rs.iter().map(|r| r.n_ranks).max().unwrap_or(0),
        nodes: rs.iter().map(|r| r.n_nodes).max().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/data/inspector")
    }

    #[test]
    fn dump_file_names() {
        assert!(is_dump_file("node-a-pid1001.log"));
        assert!(is_dump_file("node-a-pid1001.log.1"));
        assert!(is_dump_file("x.jsonl"));
        assert!(!is_dump_file("x.log.gz"));
        assert!(!is_dump_file("x.prom"));
        assert!(!is_dump_file("README.md"));
    }

    #[test]
    fn a_directory_reads_every_file_and_counts_every_drop() {
        let read = read_path(&fixtures()).unwrap();
        assert_eq!(read.files.len(), 8);
        assert_eq!(read.records.len(), 32);
        let mut total = LineCounts::default();
        read.files.iter().for_each(|f| total.add(&f.counts));
        assert_eq!(
            (total.malformed, total.unknown_version, total.unknown_fields),
            (1, 1, 1)
        );
    }

    #[test]
    fn the_costliest_collective_first_with_its_slowest_rank() {
        let read = read_path(&fixtures()).unwrap();
        let s = summarize(&read.records);
        assert_eq!(s.len(), 2);
        let ar = &s[0];
        assert_eq!(
            (ar.collective.as_str(), ar.size_class),
            ("AllReduce", "le_256MiB")
        );
        assert_eq!(
            (ar.size_bytes, ar.count, ar.records, ar.ranks, ar.nodes),
            (220_000_000, 4, 16, 4, 2)
        );
        assert!((ar.bus_bandwidth_gbps - 9.8).abs() < 1e-9);
        assert_eq!(ar.slowest_rank, Some(3));
        assert_eq!(ar.slowest_host.as_deref(), Some("node-b"));
        assert!((ar.slowest_bus_bandwidth_gbps.unwrap() - 9.3).abs() < 1e-9);
        // Four instances, each waiting for rank 3: 220 MB at 9.3 GB/s bus bandwidth (x 4/6 algorithm) per instance.
        let per_instance_us = (220e6 / (9.3e9 * 4.0 / 6.0) * 1e6_f64).round();
        assert!((ar.total_time_us - 4.0 * per_instance_us).abs() < 4.0);
        let ag = &s[1];
        assert_eq!(
            (ag.collective.as_str(), ag.count, ag.records),
            ("AllGather", 8, 16)
        );
    }

    #[test]
    fn an_empty_directory_says_so() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            read_path(dir.path()),
            Err(InspectorReadError::Empty(_))
        ));
    }
}
