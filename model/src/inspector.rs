//! NCCL Inspector records: one collective of one communicator on one rank, as NVIDIA's Inspector profiler
//! plugin (`ext-profiler/inspector` in NCCL's repository) writes it. Pure parsing, no I/O: the agent follows
//! the files, `diagnose` reads them offline, the collector aligns the records; all three share this type.
//!
//! ## The format (output format `v4.0`, read from the plugin's README)
//!
//! Enabled with `NCCL_PROFILER_PLUGIN=<path>/libnccl-profiler-inspector.so` and `NCCL_INSPECTOR_ENABLE=1`; files
//! go to `NCCL_INSPECTOR_DUMP_DIR` (default `nccl-inspector-<SLURM_JOB_ID>` or `nccl-inspector-unknown-jobid`
//! in the working directory), one file per process (`<hostname>-pid<PID>.log`), one JSON object per line, one
//! line per completed collective per communicator, written by a dump thread every
//! `NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS`. A line:
//!
//! ```json
//! {"header":   {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 8, "nnodes": 1},
//!  "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "profiler_plugin",
//!               "dump_timestamp_us": 1748030377748202, "hostname": "node-a", "pid": 1639453},
//!  "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184,
//!                "coll_exec_time_us": 61974, "coll_timing_source": "kernel_gpu",
//!                "coll_algobw_gbs": 277.210914, "coll_busbw_gbs": 485.119099}}
//! ```
//!
//! - `header.id`: the communicator's hash (hex string); `rank` is the rank *in that communicator*, `n_ranks` its
//!   size, `nnodes` the nodes it spans.
//! - `metadata.dump_timestamp_us`: wall clock of the dump, microseconds since the Unix epoch (not the
//!   collective's start); `hostname`, `pid`: the writing process.
//! - `coll_perf.coll`: `AllReduce`, `AllGather`, `ReduceScatter`, `Broadcast`, `Reduce`, …; `coll_sn`: the
//!   communicator's sequence number of the collective, the same on every rank — ranks align on
//!   (`header.id`, `coll_sn`); `coll_msg_size_bytes`: bytes; `coll_exec_time_us`: microseconds;
//!   `coll_timing_source`: `kernel_gpu` (GPU clock) > `kernel_cpu` > `collective_cpu`; `coll_algobw_gbs` and
//!   `coll_busbw_gbs`: algorithm and bus bandwidth in GB/s (10⁹ bytes/s, as nccl-tests counts them). Newer
//!   plugins add `coll_algo` (`RING`, `TREE`, …) and `coll_proto` (`SIMPLE`, `LL`, `LL128`).
//! - Verbose form (`NCCL_INSPECTOR_DUMP_VERBOSE=1`): `coll_perf` adds `event_trace_sn` and `event_trace_ts`
//!   (callback sequence numbers and microsecond timestamps of the collective and of each channel's kernel);
//!   accepted and not kept.
//! - Prometheus-textfile mode (`NCCL_INSPECTOR_PROM_DUMP=1`): instead of JSON lines, a file per GPU rewritten each
//!   interval with `nccl_bus_bandwidth_gbs`, `nccl_algorithm_bandwidth_gbs` and
//!   `nccl_collective_exec_time_microseconds`, labelled `comm_id`, `collective`, `rank`, `n_ranks`, `n_nodes`,
//!   `coll_sn`, `message_size` (rounded text such as `2.00GB`) …: a latest-value snapshot, not a record of every
//!   collective. This module reads the JSON form only; a reader says when a process runs in that mode.
//!
//! Every line is judged alone: a line that is not JSON (a partial or truncated last line), lacks a field, has
//! another output format major version than 4 or is not a collective (`p2p_perf` lines of newer plugins) is an
//! [`InspectorError`] for that line only; fields this module does not know are ignored and counted.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The output format this parser was written against; records of any `v4.x` are read.
pub const FORMAT_VERSION: &str = "v4.0";

/// The environment settings that enable the plugin and name its output (the agent's allowlist takes these).
pub const ENV_PROFILER_PLUGIN: &str = "NCCL_PROFILER_PLUGIN";
pub const ENV_ENABLE: &str = "NCCL_INSPECTOR_ENABLE";
pub const ENV_DUMP_DIR: &str = "NCCL_INSPECTOR_DUMP_DIR";
pub const ENV_PROM_DUMP: &str = "NCCL_INSPECTOR_PROM_DUMP";
/// The four settings, in one list.
pub const ENV_SETTINGS: [&str; 4] = [ENV_PROFILER_PLUGIN, ENV_ENABLE, ENV_DUMP_DIR, ENV_PROM_DUMP];

/// One collective of one communicator on one rank. Bandwidths in bytes per second (the file's GB/s × 10⁹).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveRecord {
    /// `header.id`: the communicator's hash.
    pub comm_id: String,
    /// Rank in the communicator.
    pub rank: u32,
    pub n_ranks: u32,
    pub n_nodes: u32,
    pub hostname: String,
    pub pid: u32,
    /// When the plugin wrote the record, microseconds since the Unix epoch.
    pub dump_timestamp_us: u64,
    /// `AllReduce`, `AllGather`, …
    pub collective: String,
    /// `coll_sn`: the communicator's sequence number, the same on every rank.
    pub sequence: u64,
    pub size_bytes: u64,
    /// Execution time, microseconds.
    pub exec_time_us: f64,
    /// `kernel_gpu`, `kernel_cpu`, `collective_cpu`; absent in older files.
    pub timing_source: Option<String>,
    /// `coll_algo` (`RING`, `TREE`, …) where the plugin writes it.
    pub algorithm: Option<String>,
    pub algo_bandwidth_bytes_per_second: f64,
    pub bus_bandwidth_bytes_per_second: f64,
}

/// A parsed line: the record and how many fields it carried that this parser does not know.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedLine {
    pub record: CollectiveRecord,
    pub unknown_fields: u32,
}

/// Why one line gave no record; every case concerns that line only.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InspectorError {
    #[error("not a JSON object (truncated or partial line?): {0}")]
    Json(String),
    #[error("unsupported Inspector output format version {0:?} (this reader knows v4.x)")]
    Version(String),
    #[error("not a collective record (no coll_perf; p2p or other record kind)")]
    NotCollective,
    #[error("field {0} missing or of the wrong type")]
    Field(&'static str),
}

const TOP: &[&str] = &["header", "metadata", "coll_perf"];
const HEADER: &[&str] = &["id", "rank", "n_ranks", "nnodes"];
const METADATA: &[&str] = &[
    "inspector_output_format_version",
    "git_rev",
    "rec_mechanism",
    "dump_timestamp_us",
    "hostname",
    "pid",
];
const COLL_PERF: &[&str] = &[
    "coll",
    "coll_sn",
    "coll_msg_size_bytes",
    "coll_exec_time_us",
    "coll_timing_source",
    "coll_algobw_gbs",
    "coll_busbw_gbs",
    "coll_algo",
    "coll_proto",
    "event_trace_sn",
    "event_trace_ts",
];

/// GB/s in the file to bytes per second.
const GB: f64 = 1e9;

/// Parses one line of an Inspector dump file (without its newline).
pub fn parse_line(line: &str) -> Result<ParsedLine, InspectorError> {
    let value: Value =
        serde_json::from_str(line.trim()).map_err(|e| InspectorError::Json(e.to_string()))?;
    let top = value
        .as_object()
        .ok_or_else(|| InspectorError::Json("not an object".into()))?;
    let metadata = object(top, "metadata")?;
    let version = str_field(
        metadata,
        "inspector_output_format_version",
        "metadata.inspector_output_format_version",
    )?;
    if !version_supported(version) {
        return Err(InspectorError::Version(version.to_string()));
    }
    let header = object(top, "header")?;
    let perf = top
        .get("coll_perf")
        .and_then(Value::as_object)
        .ok_or(InspectorError::NotCollective)?;
    let unknown_fields = unknown(top, TOP)
        + unknown(header, HEADER)
        + unknown(metadata, METADATA)
        + unknown(perf, COLL_PERF);
    let record = CollectiveRecord {
        comm_id: str_field(header, "id", "header.id")?.to_string(),
        rank: u32_field(header, "rank", "header.rank")?,
        n_ranks: u32_field(header, "n_ranks", "header.n_ranks")?,
        n_nodes: header
            .get("nnodes")
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(1),
        hostname: metadata
            .get("hostname")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        pid: metadata
            .get("pid")
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0),
        dump_timestamp_us: u64_field(metadata, "dump_timestamp_us", "metadata.dump_timestamp_us")?,
        collective: str_field(perf, "coll", "coll_perf.coll")?.to_string(),
        sequence: u64_field(perf, "coll_sn", "coll_perf.coll_sn")?,
        size_bytes: u64_field(perf, "coll_msg_size_bytes", "coll_perf.coll_msg_size_bytes")?,
        exec_time_us: f64_field(perf, "coll_exec_time_us", "coll_perf.coll_exec_time_us")?,
        timing_source: perf
            .get("coll_timing_source")
            .and_then(Value::as_str)
            .map(str::to_string),
        algorithm: perf
            .get("coll_algo")
            .and_then(Value::as_str)
            .map(str::to_string),
        algo_bandwidth_bytes_per_second: f64_field(
            perf,
            "coll_algobw_gbs",
            "coll_perf.coll_algobw_gbs",
        )? * GB,
        bus_bandwidth_bytes_per_second: f64_field(
            perf,
            "coll_busbw_gbs",
            "coll_perf.coll_busbw_gbs",
        )? * GB,
    };
    Ok(ParsedLine {
        record,
        unknown_fields,
    })
}

/// `v4`, `v4.0`, `v4.1`, …: the major version this parser reads.
pub fn version_supported(version: &str) -> bool {
    let Some(rest) = version.strip_prefix('v') else {
        return false;
    };
    let major = rest.split('.').next().unwrap_or("");
    major == "4"
}

fn object<'a>(
    map: &'a Map<String, Value>,
    key: &'static str,
) -> Result<&'a Map<String, Value>, InspectorError> {
    map.get(key)
        .and_then(Value::as_object)
        .ok_or(InspectorError::Field(key))
}

fn str_field<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    name: &'static str,
) -> Result<&'a str, InspectorError> {
    map.get(key)
        .and_then(Value::as_str)
        .ok_or(InspectorError::Field(name))
}

fn u64_field(
    map: &Map<String, Value>,
    key: &str,
    name: &'static str,
) -> Result<u64, InspectorError> {
    map.get(key)
        .and_then(Value::as_u64)
        .ok_or(InspectorError::Field(name))
}

fn u32_field(
    map: &Map<String, Value>,
    key: &str,
    name: &'static str,
) -> Result<u32, InspectorError> {
    u64_field(map, key, name)
        .and_then(|v| u32::try_from(v).map_err(|_| InspectorError::Field(name)))
}

/// A finite, non-negative number.
fn f64_field(
    map: &Map<String, Value>,
    key: &str,
    name: &'static str,
) -> Result<f64, InspectorError> {
    map.get(key)
        .and_then(Value::as_f64)
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or(InspectorError::Field(name))
}

fn unknown(map: &Map<String, Value>, known: &[&str]) -> u32 {
    map.keys().filter(|k| !known.contains(&k.as_str())).count() as u32
}

/// The size classes of collectives: bounded label values for metrics and the grouping of the API. Message sizes
/// in bytes, upper bounds inclusive.
pub const SIZE_CLASSES: [(&str, u64); 5] = [
    ("le_64KiB", 64 << 10),
    ("le_1MiB", 1 << 20),
    ("le_16MiB", 16 << 20),
    ("le_256MiB", 256 << 20),
    ("gt_256MiB", u64::MAX),
];

/// The size class of a message of `bytes`: small messages are latency-bound, large ones bandwidth-bound, so
/// figures are compared within a class only.
pub fn size_class(bytes: u64) -> &'static str {
    SIZE_CLASSES
        .iter()
        .find(|(_, max)| bytes <= *max)
        .map(|(name, _)| *name)
        .unwrap_or("gt_256MiB")
}

/// Counts of what a reader of Inspector lines met, so that every dropped line is visible.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineCounts {
    /// Lines that gave a record.
    pub records: u64,
    /// Fields ignored because this parser does not know them (summed over records).
    pub unknown_fields: u64,
    /// Lines of an output format version other than v4.x.
    pub unknown_version: u64,
    /// Lines that are not collectives (p2p records and the like).
    pub not_collective: u64,
    /// Lines that are not JSON or lack a field: truncated, partial or corrupt.
    pub malformed: u64,
}

impl LineCounts {
    /// Counts one parse result and hands the record on.
    pub fn count(
        &mut self,
        result: Result<ParsedLine, InspectorError>,
    ) -> Option<CollectiveRecord> {
        match result {
            Ok(parsed) => {
                self.records += 1;
                self.unknown_fields += u64::from(parsed.unknown_fields);
                Some(parsed.record)
            }
            Err(InspectorError::Version(_)) => {
                self.unknown_version += 1;
                None
            }
            Err(InspectorError::NotCollective) => {
                self.not_collective += 1;
                None
            }
            Err(InspectorError::Json(_) | InspectorError::Field(_)) => {
                self.malformed += 1;
                None
            }
        }
    }

    /// Adds another reader's counts.
    pub fn add(&mut self, other: &LineCounts) {
        self.records += other.records;
        self.unknown_fields += other.unknown_fields;
        self.unknown_version += other.unknown_version;
        self.not_collective += other.not_collective;
        self.malformed += other.malformed;
    }

    /// Lines that gave no record.
    pub fn dropped(&self) -> u64 {
        self.unknown_version + self.not_collective + self.malformed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: &str = r#"{"header":{"id":"0x7f8c496ae9f661","rank":2,"n_ranks":8,"nnodes":1},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"profiler_plugin","dump_timestamp_us":1748030377748202,"hostname":"example-hostname","pid":1639453},"coll_perf":{"coll":"AllReduce","coll_sn":1407,"coll_msg_size_bytes":17179869184,"coll_exec_time_us":61974,"coll_algobw_gbs":277.210914,"coll_busbw_gbs":485.119099}}"#;

    #[test]
    fn plain_record_has_every_field_in_project_units() {
        let parsed = parse_line(PLAIN).unwrap();
        let r = parsed.record;
        assert_eq!(parsed.unknown_fields, 0);
        assert_eq!(r.comm_id, "0x7f8c496ae9f661");
        assert_eq!((r.rank, r.n_ranks, r.n_nodes), (2, 8, 1));
        assert_eq!(r.pid, 1639453);
        assert_eq!(r.dump_timestamp_us, 1748030377748202);
        assert_eq!(r.collective, "AllReduce");
        assert_eq!(r.sequence, 1407);
        assert_eq!(r.size_bytes, 17179869184);
        assert_eq!(r.exec_time_us, 61974.0);
        assert_eq!(r.timing_source, None);
        assert!((r.bus_bandwidth_bytes_per_second - 485.119099e9).abs() < 1.0);
        assert!((r.algo_bandwidth_bytes_per_second - 277.210914e9).abs() < 1.0);
    }

    #[test]
    fn unknown_fields_are_counted_not_fatal() {
        let line = PLAIN.replace(
            r#""coll":"AllReduce""#,
            r#""coll":"AllReduce","new_thing":1,"other":[1]"#,
        );
        let parsed = parse_line(&line).unwrap();
        assert_eq!(parsed.unknown_fields, 2);
    }

    #[test]
    fn other_major_versions_are_refused_minor_ones_read() {
        let v5 = PLAIN.replace("v4.0", "v5.0");
        assert_eq!(parse_line(&v5), Err(InspectorError::Version("v5.0".into())));
        assert!(parse_line(&PLAIN.replace("v4.0", "v4.1")).is_ok());
        assert!(!version_supported("4.0"));
        assert!(!version_supported("v40"));
    }

    #[test]
    fn truncated_lines_and_missing_fields_are_typed_errors() {
        assert!(matches!(
            parse_line(&PLAIN[..120]),
            Err(InspectorError::Json(_))
        ));
        assert!(matches!(parse_line(""), Err(InspectorError::Json(_))));
        let no_sn = PLAIN.replace(r#""coll_sn":1407,"#, "");
        assert_eq!(
            parse_line(&no_sn),
            Err(InspectorError::Field("coll_perf.coll_sn"))
        );
        let negative = PLAIN.replace("485.119099", "-1");
        assert_eq!(
            parse_line(&negative),
            Err(InspectorError::Field("coll_perf.coll_busbw_gbs"))
        );
        let p2p = PLAIN.replace("coll_perf", "p2p_perf");
        assert_eq!(parse_line(&p2p), Err(InspectorError::NotCollective));
    }

    #[test]
    fn counts_sort_every_line() {
        let mut counts = LineCounts::default();
        assert!(counts.count(parse_line(PLAIN)).is_some());
        counts.count(parse_line("{"));
        counts.count(parse_line(&PLAIN.replace("v4.0", "v3.0")));
        counts.count(parse_line(&PLAIN.replace("coll_perf", "p2p_perf")));
        assert_eq!(
            (
                counts.records,
                counts.malformed,
                counts.unknown_version,
                counts.not_collective
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(counts.dropped(), 3);
    }

    #[test]
    fn size_classes_are_bounded() {
        assert_eq!(size_class(0), "le_64KiB");
        assert_eq!(size_class(65536), "le_64KiB");
        assert_eq!(size_class(65537), "le_1MiB");
        assert_eq!(size_class(220_000_000), "le_256MiB");
        assert_eq!(size_class(17179869184), "gt_256MiB");
    }
}
