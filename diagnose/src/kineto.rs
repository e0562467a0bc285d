//! Streaming reader for PyTorch profiler (Kineto) traces, `.json` or `.json.gz`.
//!
//! Traces run to gigabytes, so the document is never held in memory: a serde visitor walks the top-level object
//! and hands each element of `traceEvents` to an accumulator as soon as it is parsed, keeping only what the
//! analysis needs (GPU activities as a few numbers each, `ProfilerStep#N` windows, launch times by correlation
//! id, the `distributedInfo` rank). A bare top-level array of events (Chrome trace format) is read the same way.
//!
//! Events read:
//! - `ph: "X"` with `cat` `kernel`, `gpu_memcpy`, `gpu_memset` (and the capitalised names of old traces): GPU
//!   activities; `args.correlation` links them to their launch, NCCL kernels carry `Collective name`,
//!   `In msg nelems`, `Out msg nelems`, `dtype`, `Group size` in recent PyTorch;
//! - CPU events with `args.correlation` (`cuda_runtime`, `cuda_driver`): launch times;
//! - CPU events named `ProfilerStep#N`: iterations.
//!
//! A truncated or garbled file stops the reading at the error, which names the line and column; what was read
//! before it is kept and the result is marked partial.

use std::collections::HashMap;
use std::fmt;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::progress::Progress;
use crate::timeline::{
    classify_kernel, collective_from_kernel, dtype_bytes, protocol_from_kernel, CollectiveKey,
    GpuEvent, KernelClass, StepWindow, Timeline,
};

#[derive(Debug, thiserror::Error)]
pub enum KinetoError {
    #[error("{file}: cannot read: {error}")]
    Io { file: String, error: std::io::Error },
    #[error("{file}: not a Kineto trace: no traceEvents")]
    NotATrace { file: String },
}

/// One trace read from a file.
#[derive(Debug, Clone)]
pub struct KinetoTrace {
    pub file: String,
    pub timeline: Timeline,
    /// Events in `traceEvents`.
    pub events_read: u64,
    /// Events that had a GPU category but no usable `ts`/`dur`.
    pub events_skipped: u64,
    /// The error that stopped the reading early, with line and column; the timeline holds what came before.
    pub truncated: Option<String>,
}

/// Lists the trace files of a `--trace` argument: the file itself, or the `.json`/`.json.gz` files of a
/// directory in name order.
pub fn trace_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().to_ascii_lowercase());
            name.is_some_and(|n| n.ends_with(".json") || n.ends_with(".json.gz"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Reads one trace file; gzip is recognised by its magic bytes.
pub fn parse_file(path: &Path, progress: &Progress) -> Result<KinetoTrace, KinetoError> {
    let file = path.display().to_string();
    let io = |error| KinetoError::Io {
        file: file.clone(),
        error,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut magic = [0u8; 2];
    let n = f.read(&mut magic).map_err(io)?;
    let head = std::io::Cursor::new(magic[..n].to_vec());
    let counted = progress.reader(head.chain(f), len, &file);
    let mut trace = if magic[..n] == [0x1f, 0x8b] {
        let gz = flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 16, counted));
        parse_reader(BufReader::with_capacity(1 << 16, gz), &file)?
    } else {
        parse_reader(BufReader::with_capacity(1 << 16, counted), &file)?
    };
    if trace.timeline.rank.is_none() {
        trace.timeline.rank = rank_from_file_name(path);
    }
    Ok(trace)
}

/// `rank-3`, `rank_3`, `rank3` in a file name.
pub fn rank_from_file_name(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    let pos = name.rfind("rank")?;
    let digits: String = name[pos + 4..]
        .trim_start_matches(['-', '_', '.'])
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Reads a trace from any reader (uncompressed JSON).
pub fn parse_reader<R: Read>(reader: R, file: &str) -> Result<KinetoTrace, KinetoError> {
    let mut acc = Accumulator::default();
    let mut de = serde_json::Deserializer::from_reader(reader);
    let result = TopSeed { acc: &mut acc }
        .deserialize(&mut de)
        .and_then(|()| de.end());
    let truncated = match result {
        Ok(()) => None,
        // A read error mid-stream (a cut gzip member, a failing disk) ends the input like a truncation does:
        // what was parsed before it is sound.
        Err(e) => Some(format!(
            "{file}: {e}; the {} events before it were kept",
            acc.events_read
        )),
    };
    if !acc.saw_events && truncated.is_none() {
        return Err(KinetoError::NotATrace {
            file: file.to_string(),
        });
    }
    let events_read = acc.events_read;
    let events_skipped = acc.events_skipped;
    Ok(KinetoTrace {
        file: file.to_string(),
        timeline: acc.finish(),
        events_read,
        events_skipped,
        truncated,
    })
}

/// A kernel before its launch time is known.
struct PendingEvent {
    start_us: f64,
    end_us: f64,
    class: KernelClass,
    correlation: Option<u64>,
    collective: Option<u32>,
}

#[derive(Default)]
struct Accumulator {
    timeline: Timeline,
    pending: Vec<PendingEvent>,
    launches: HashMap<u64, f64>,
    events_read: u64,
    events_skipped: u64,
    saw_events: bool,
}

impl Accumulator {
    fn push(&mut self, ev: RawEvent) {
        self.events_read += 1;
        if ev.ph.as_deref().is_some_and(|p| p != "X") {
            return;
        }
        let cat = ev.cat.as_deref().unwrap_or("");
        let name = ev.name.as_deref().unwrap_or("");
        let gpu = matches!(
            cat,
            "kernel" | "Kernel" | "gpu_memcpy" | "gpu_memset" | "Memcpy" | "Memset"
        );
        if gpu {
            let (Some(ts), Some(dur)) = (ev.ts, ev.dur) else {
                self.events_skipped += 1;
                return;
            };
            let class = classify_kernel(name);
            let args = ev.args.unwrap_or_default();
            let collective =
                (class == KernelClass::Communication).then(|| self.collective(name, &args));
            self.pending.push(PendingEvent {
                start_us: ts,
                end_us: ts + dur.max(0.0),
                class,
                correlation: args.correlation,
                collective,
            });
            return;
        }
        if let Some(step) = name.strip_prefix("ProfilerStep#") {
            if let (Some(ts), Some(dur), Ok(step)) = (ev.ts, ev.dur, step.trim().parse::<i64>()) {
                self.timeline.steps.push(StepWindow {
                    step,
                    start_us: ts,
                    end_us: ts + dur,
                });
            }
            return;
        }
        if let (Some(ts), Some(corr)) = (ev.ts, ev.args.as_ref().and_then(|a| a.correlation)) {
            if cat.eq_ignore_ascii_case("cuda_runtime")
                || cat.eq_ignore_ascii_case("cuda_driver")
                || cat.eq_ignore_ascii_case("runtime")
            {
                self.launches.insert(corr, ts);
            }
        }
    }

    fn collective(&mut self, kernel: &str, args: &RawArgs) -> u32 {
        let name = args
            .collective_name
            .clone()
            .or_else(|| collective_from_kernel(kernel))
            .unwrap_or_else(|| "unknown".to_string());
        let elem = args.dtype.as_deref().and_then(dtype_bytes);
        let nelems = match (args.in_msg_nelems, args.out_msg_nelems) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let size_bytes = match (nelems, elem) {
            (Some(n), Some(e)) => n.checked_mul(e),
            _ => None,
        };
        self.timeline.intern_collective(CollectiveKey {
            name,
            size_bytes,
            dtype: args.dtype.clone(),
            group_size: args.group_size.map(|g| g.min(u64::from(u32::MAX)) as u32),
            protocol: protocol_from_kernel(kernel),
        })
    }

    fn finish(mut self) -> Timeline {
        let launches = std::mem::take(&mut self.launches);
        self.timeline.events = self
            .pending
            .into_iter()
            .map(|p| GpuEvent {
                start_us: p.start_us,
                end_us: p.end_us,
                class: p.class,
                launch_us: p.correlation.and_then(|c| launches.get(&c).copied()),
                collective: p.collective,
            })
            .collect();
        self.timeline
            .steps
            .sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        self.timeline
    }
}

#[derive(Deserialize, Default)]
struct RawEvent {
    #[serde(default)]
    ph: Option<String>,
    #[serde(default)]
    cat: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default, deserialize_with = "lenient_f64")]
    ts: Option<f64>,
    #[serde(default, deserialize_with = "lenient_f64")]
    dur: Option<f64>,
    #[serde(default)]
    args: Option<RawArgs>,
}

#[derive(Deserialize, Default)]
struct RawArgs {
    #[serde(default, deserialize_with = "lenient_u64")]
    correlation: Option<u64>,
    #[serde(
        rename = "Collective name",
        default,
        deserialize_with = "lenient_string"
    )]
    collective_name: Option<String>,
    #[serde(rename = "In msg nelems", default, deserialize_with = "lenient_u64")]
    in_msg_nelems: Option<u64>,
    #[serde(rename = "Out msg nelems", default, deserialize_with = "lenient_u64")]
    out_msg_nelems: Option<u64>,
    #[serde(default, deserialize_with = "lenient_string")]
    dtype: Option<String>,
    #[serde(rename = "Group size", default, deserialize_with = "lenient_u64")]
    group_size: Option<u64>,
}

#[derive(Deserialize, Default)]
struct DistributedInfo {
    #[serde(default, deserialize_with = "lenient_u64")]
    rank: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    world_size: Option<u64>,
    #[serde(default, deserialize_with = "lenient_string")]
    nccl_version: Option<String>,
}

#[derive(Deserialize)]
struct DeviceProperties {
    #[serde(default, deserialize_with = "lenient_string")]
    name: Option<String>,
}

/// A scalar that may come as a number, a string or something else (then `None`).
enum Scalar {
    Num(f64),
    Str(String),
    Other,
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
        Ok(Scalar::Num(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
        Ok(Scalar::Num(v as f64))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
        Ok(Scalar::Num(v as f64))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
        Ok(Scalar::Str(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
        Ok(Scalar::Str(v))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_none<E: de::Error>(self) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
}

fn scalar<'de, D: Deserializer<'de>>(d: D) -> Result<Scalar, D::Error> {
    d.deserialize_any(ScalarVisitor)
}

fn lenient_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(match scalar(d)? {
        Scalar::Num(v) if v.is_finite() => Some(v),
        Scalar::Str(s) => s.trim().parse::<f64>().ok().filter(|v| v.is_finite()),
        _ => None,
    })
}

fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(match scalar(d)? {
        Scalar::Num(v) if v.is_finite() && v >= 0.0 && v <= u64::MAX as f64 => Some(v as u64),
        Scalar::Str(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    })
}

fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match scalar(d)? {
        Scalar::Str(s) => Some(s),
        Scalar::Num(v) => Some(v.to_string()),
        Scalar::Other => None,
    })
}

struct TopSeed<'a> {
    acc: &'a mut Accumulator,
}

impl<'de> DeserializeSeed<'de> for TopSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kineto trace object or an array of trace events")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "traceEvents" => {
                    self.acc.saw_events = true;
                    map.next_value_seed(EventsSeed {
                        acc: &mut *self.acc,
                    })?
                }
                "distributedInfo" => {
                    let info: Option<DistributedInfo> = map.next_value()?;
                    if let Some(info) = info {
                        let tl = &mut self.acc.timeline;
                        tl.rank = info.rank.map(|r| r as u32);
                        tl.world_size = info.world_size.map(|w| w as u32);
                        tl.nccl_version = info.nccl_version;
                    }
                }
                "deviceProperties" => {
                    let devices: Option<Vec<DeviceProperties>> = map.next_value()?;
                    self.acc.timeline.devices = devices
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|d| d.name)
                        .collect();
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        self.acc.saw_events = true;
        EventsSeed { acc: self.acc }.visit_seq(seq)
    }
}

struct EventsSeed<'a> {
    acc: &'a mut Accumulator,
}

impl<'de> DeserializeSeed<'de> for EventsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(ev) = seq.next_element::<Option<RawEvent>>()? {
            match ev {
                Some(ev) => self.acc.push(ev),
                None => self.acc.events_read += 1,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error and its `source()`s joined by `: `, as a chain printer (`{:#}`) says them.
    fn chain(e: &dyn std::error::Error) -> String {
        let mut out = e.to_string();
        let mut next = e.source();
        while let Some(cause) = next {
            out = format!("{out}: {cause}");
            next = cause.source();
        }
        out
    }

    #[test]
    fn a_cause_is_said_once() {
        let e = KinetoError::Io {
            file: "rank0.json".into(),
            error: std::io::Error::other("disk gone"),
        };
        let said = chain(&e);
        assert_eq!(said.matches("disk gone").count(), 1, "{said}");
        assert!(said.starts_with("rank0.json: cannot read"), "{said}");
    }

    const SMALL: &str = r#"{"distributedInfo": {"rank": 3, "world_size": 8},
      "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "ts": 100, "dur": 1000},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 110, "dur": 5, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 200, "dur": 100, "args": {"correlation": 1, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float(x)", "ts": 250, "dur": "100",
         "args": {"correlation": 2, "stream": 20, "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float",
                  "Group size": 8, "Collective name": "allreduce"}},
        {"ph": "f", "cat": "ac2g", "id": 1, "ts": 200}
      ]}"#;

    #[test]
    fn reads_the_events_it_needs() {
        let t = parse_reader(SMALL.as_bytes(), "small.json").unwrap();
        assert!(t.truncated.is_none());
        assert_eq!(t.events_read, 5);
        let tl = &t.timeline;
        assert_eq!(tl.rank, Some(3));
        assert_eq!(tl.world_size, Some(8));
        assert_eq!(
            tl.steps,
            vec![StepWindow {
                step: 7,
                start_us: 100.0,
                end_us: 1100.0
            }]
        );
        assert_eq!(tl.events.len(), 2);
        assert_eq!(tl.events[0].launch_us, Some(110.0));
        assert_eq!(tl.events[1].launch_us, None);
        assert_eq!(tl.events[1].end_us, 350.0);
        let key = &tl.collectives[tl.events[1].collective.unwrap() as usize];
        assert_eq!(key.name, "allreduce");
        assert_eq!(key.size_bytes, Some(4000));
        assert_eq!(key.group_size, Some(8));
    }

    #[test]
    fn truncated_input_keeps_what_came_before() {
        let cut = &SMALL[..SMALL.find("ncclKernel").unwrap()];
        let t = parse_reader(cut.as_bytes(), "cut.json").unwrap();
        let msg = t.truncated.expect("marked truncated");
        assert!(
            msg.starts_with("cut.json: EOF while parsing a string at line 6 column 46"),
            "{msg}"
        );
        assert_eq!(t.timeline.events.len(), 1);
        assert_eq!(t.timeline.steps.len(), 1);
    }

    #[test]
    fn not_a_trace() {
        assert!(matches!(
            parse_reader(&b"{\"a\": 1}"[..], "x.json"),
            Err(KinetoError::NotATrace { .. })
        ));
    }

    #[test]
    fn bare_array_of_events() {
        let t = parse_reader(
            &br#"[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2}]"#[..],
            "a.json",
        )
        .unwrap();
        assert_eq!(t.timeline.events.len(), 1);
    }

    #[test]
    fn ranks_from_file_names() {
        assert_eq!(
            rank_from_file_name(Path::new("sampled_rank-1.json.gz")),
            Some(1)
        );
        assert_eq!(
            rank_from_file_name(Path::new("trace_rank12.json")),
            Some(12)
        );
        assert_eq!(rank_from_file_name(Path::new("trace.json")), None);
    }
}
