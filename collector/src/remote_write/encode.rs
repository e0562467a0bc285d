//! Samples → `prometheus.WriteRequest` (remote-write protocol 1.0) → snappy block format. Pure: no I/O.
//!
//! The messages are prost structs with the field numbers of `prometheus/prompb/remote.proto` and `types.proto`
//! (`WriteRequest.timeseries = 1`; `TimeSeries.labels = 1, samples = 2`; `Label.name = 1, value = 2`;
//! `Sample.value = 1, timestamp = 2`). Protocol 1.0 sends no metadata (field 3 is reserved by the spec).
//! Labels: `__name__` and the sample's own, external labels where the sample has none of that name, empty
//! values left out, sorted by name, as the spec requires.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use prost::Message;

use crate::config::remote_write::is_label_name;
use crate::export::exposition::SampleRef;

/// `prometheus.WriteRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// `prometheus.TimeSeries`: labels sorted by name, samples in time order.
#[derive(Clone, PartialEq, Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, Eq, Hash, Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`: `timestamp` in milliseconds since the Unix epoch.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// Prometheus's staleness marker: the NaN that tells a receiver a series ended (bit pattern of
/// `value.StaleNaN`). Sent once for each series present in the previous gather and gone from this one.
pub const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// One request ready to send: its snappy-compressed protobuf body and how many samples it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub body: Vec<u8>,
    pub samples: usize,
}

/// Why a request could not be encoded. The message says the cause itself, so it is not also a `source()`.
#[derive(Debug, thiserror::Error)]
#[error("snappy compression of a remote-write request failed: {0}")]
pub struct EncodeError(snap::Error);

impl From<snap::Error> for EncodeError {
    fn from(e: snap::Error) -> Self {
        EncodeError(e)
    }
}

/// Why one sample is not sent (it is skipped and counted dropped; the others are sent). Names are checked as
/// the text format requires them, so remote write never sends what `/metrics` could not show.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sample of {name:?}: {reason}")]
pub struct InvalidSample {
    /// The sample's metric name.
    pub name: String,
    pub reason: &'static str,
}

/// The label set of a sample as remote write sends it: `__name__`, its labels, then `external` labels it
/// lacks; empty values left out; sorted by name. A name repeated in `labels` keeps its first value.
pub fn series_labels(
    name: &str,
    labels: &[(&str, &str)],
    external: &[(String, String)],
) -> Vec<Label> {
    let mut out: Vec<Label> = Vec::with_capacity(1 + labels.len() + external.len());
    out.push(Label {
        name: "__name__".into(),
        value: name.to_string(),
    });
    let external = external.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    for (name, value) in labels.iter().copied().chain(external) {
        if value.is_empty() || out.iter().any(|l| l.name == name) {
            continue;
        }
        out.push(Label {
            name: name.to_string(),
            value: value.to_string(),
        });
    }
    out.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    out
}

/// A hash of a label set (to find the series that went away between two gathers).
pub fn labels_hash(labels: &[Label]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    labels.hash(&mut h);
    h.finish()
}

/// One gather's series, built from its samples handed in one at a time ([`GatherSeries::push`]), each
/// stamped with the gather's time.
pub struct GatherSeries<'e> {
    external: &'e [(String, String)],
    timestamp_ms: i64,
    series: Vec<TimeSeries>,
    /// The last metric name found valid: a family's samples come together, so each name is checked once.
    valid_name: String,
    invalid: usize,
    first_invalid: Option<InvalidSample>,
}

/// A gather's series ([`GatherSeries::finish`]) and the samples left out.
pub struct Finished {
    /// The gather's own series, then a staleness marker for each series of the previous gather it lacks.
    pub series: Vec<TimeSeries>,
    /// The hashes of the gather's own series ([`labels_hash`]), in order.
    hashes: Vec<u64>,
    /// Samples skipped (invalid names), and the first of them.
    pub invalid: usize,
    pub first_invalid: Option<InvalidSample>,
}

/// The series of a gather as the next one needs them, to send a staleness marker for each that went away:
/// every label set with its hash. Empty before the first gather.
#[derive(Debug, Default)]
pub struct Previous(Vec<(u64, Vec<Label>)>);

impl Previous {
    /// How many series the gather had.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'e> GatherSeries<'e> {
    /// A gather stamped `timestamp_ms` (milliseconds since the Unix epoch), with `external` labels.
    pub fn new(external: &'e [(String, String)], timestamp_ms: i64) -> GatherSeries<'e> {
        GatherSeries {
            external,
            timestamp_ms,
            series: Vec::new(),
            valid_name: String::new(),
            invalid: 0,
            first_invalid: None,
        }
    }

    /// Adds one sample as a series of its own. A NaN value is sent as the plain NaN (the text `/metrics`
    /// shows), never with another bit pattern such as the staleness marker's. A sample with an invalid metric
    /// or label name is skipped and counted.
    pub fn push(&mut self, s: SampleRef<'_>) {
        if let Err(reason) = self.check(s) {
            self.invalid += 1;
            self.first_invalid.get_or_insert_with(|| InvalidSample {
                name: s.name.to_string(),
                reason,
            });
            return;
        }
        let value = if s.value.is_nan() { f64::NAN } else { s.value };
        self.series.push(TimeSeries {
            labels: series_labels(s.name, s.labels, self.external),
            samples: vec![Sample {
                value,
                timestamp: self.timestamp_ms,
            }],
        });
    }

    fn check(&mut self, s: SampleRef<'_>) -> Result<(), &'static str> {
        if s.name != self.valid_name {
            if !is_metric_name(s.name) {
                return Err("invalid metric name");
            }
            s.name.clone_into(&mut self.valid_name);
        }
        if s.labels.iter().any(|(name, _)| !is_label_name(name)) {
            return Err("invalid label name");
        }
        Ok(())
    }

    /// The series, plus a staleness marker for every series of `previous` not among them.
    pub fn finish(self, previous: Previous) -> Finished {
        let mut series = self.series;
        let hashes: Vec<u64> = series.iter().map(|t| labels_hash(&t.labels)).collect();
        let present: HashSet<u64> = hashes.iter().copied().collect();
        let stale = previous
            .0
            .into_iter()
            .filter(|(h, _)| !present.contains(h))
            .map(|(_, labels)| labels);
        let timestamp = self.timestamp_ms;
        series.extend(stale.map(|labels| TimeSeries {
            labels,
            samples: vec![Sample {
                value: f64::from_bits(STALE_NAN),
                timestamp,
            }],
        }));
        Finished {
            series,
            hashes,
            invalid: self.invalid,
            first_invalid: self.first_invalid,
        }
    }
}

/// A Prometheus metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn is_metric_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

impl Finished {
    /// The series in requests ([`encode_requests`]), and the gather's own series for the next gather, their
    /// label sets moved out of the encoded requests (not copied). On an error the next gather starts afresh.
    pub fn encode(self, max_samples: usize) -> Result<(Vec<Encoded>, Previous), EncodeError> {
        let mut hashes = self.hashes.into_iter();
        let mut now = Vec::with_capacity(hashes.len());
        let requests = encode_chunks(self.series, max_samples, |t| {
            if let Some(h) = hashes.next() {
                now.push((h, t.labels));
            }
        })?;
        Ok((requests, Previous(now)))
    }
}

/// `series` in requests of at most `max_samples` samples each (one sample per series), encoded and compressed.
pub fn encode_requests(
    series: Vec<TimeSeries>,
    max_samples: usize,
) -> Result<Vec<Encoded>, EncodeError> {
    encode_chunks(series, max_samples, drop)
}

/// [`encode_requests`], handing each series to `done` once its request is encoded, in order.
fn encode_chunks(
    series: Vec<TimeSeries>,
    max_samples: usize,
    mut done: impl FnMut(TimeSeries),
) -> Result<Vec<Encoded>, EncodeError> {
    let mut out = Vec::new();
    let mut series = series.into_iter().peekable();
    let mut encoder = snap::raw::Encoder::new();
    while series.peek().is_some() {
        let chunk: Vec<TimeSeries> = series.by_ref().take(max_samples.max(1)).collect();
        let samples = chunk.iter().map(|t| t.samples.len()).sum();
        let request = WriteRequest { timeseries: chunk };
        let body = encoder.compress_vec(&request.encode_to_vec())?;
        out.push(Encoded { body, samples });
        request.timeseries.into_iter().for_each(&mut done);
    }
    Ok(out)
}

/// The `WriteRequest` in a body made by [`encode_requests`] (tests, and receivers written in Rust).
pub fn decode_request(body: &[u8]) -> Result<WriteRequest, String> {
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| format!("snappy: {e}"))?;
    WriteRequest::decode(raw.as_slice()).map_err(|e| format!("protobuf: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample: name, labels, value.
    type Owned<'s> = (&'s str, Vec<(&'s str, &'s str)>, f64);

    /// One gather of `samples` at `timestamp_ms`.
    fn gather(samples: &[Owned<'_>], previous: Previous, timestamp_ms: i64) -> Finished {
        let mut g = GatherSeries::new(&[], timestamp_ms);
        for (name, labels, value) in samples {
            g.push(SampleRef {
                name,
                labels,
                value: *value,
            });
        }
        g.finish(previous)
    }

    fn names(labels: &[Label]) -> Vec<(&str, &str)> {
        labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect()
    }

    #[test]
    fn labels_sorted_with_name_external_labels_never_override_empty_values_dropped() {
        let labels = [
            ("node", "n1"),
            ("device", "mlx5_0"),
            ("port", ""),
            ("shard", "own"),
            ("node", "n2"),
        ];
        let external = [
            ("shard".to_string(), "7".to_string()),
            ("a".into(), "x".into()),
        ];
        assert_eq!(
            names(&series_labels("commwatch_link_up", &labels, &external)),
            [
                ("__name__", "commwatch_link_up"),
                ("a", "x"),
                ("device", "mlx5_0"),
                ("node", "n1"),
                ("shard", "own"),
            ]
        );
    }

    #[test]
    fn round_trip_through_snappy_and_protobuf_in_chunks() {
        let nodes: Vec<String> = (0..2_500).map(|i| format!("node-{i:04}")).collect();
        let samples: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| ("commwatch_x", vec![("node", n.as_str())], i as f64 * 0.5))
            .collect();
        let g = gather(&samples, Previous::default(), 1_712_345_678_123);
        let requests = encode_requests(g.series, 1_000).unwrap();
        assert_eq!(
            requests.iter().map(|r| r.samples).collect::<Vec<_>>(),
            [1_000, 1_000, 500]
        );
        let mut seen = 0;
        for r in &requests {
            let decoded = decode_request(&r.body).unwrap();
            assert_eq!(decoded.timeseries.len(), r.samples);
            for t in &decoded.timeseries {
                assert_eq!(
                    names(&t.labels),
                    [
                        ("__name__", "commwatch_x"),
                        ("node", format!("node-{seen:04}").as_str())
                    ]
                );
                assert_eq!(
                    t.samples,
                    [Sample {
                        value: seen as f64 * 0.5,
                        timestamp: 1_712_345_678_123
                    }]
                );
                seen += 1;
            }
        }
        assert_eq!(seen, 2_500);
        assert!(decode_request(b"not snappy").is_err());
    }

    #[test]
    fn field_numbers_are_the_protocols() {
        // WriteRequest{timeseries: [TimeSeries{labels: [Label{"a","b"}], samples: [Sample{1.0, 2}]}]}, by hand.
        let request = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label {
                    name: "a".into(),
                    value: "b".into(),
                }],
                samples: vec![Sample {
                    value: 1.0,
                    timestamp: 2,
                }],
            }],
        };
        let label = [0x0a, 1, b'a', 0x12, 1, b'b'];
        let mut sample = vec![0x09];
        sample.extend(1.0f64.to_le_bytes());
        sample.extend([0x10, 2]);
        let mut series = vec![0x0a, label.len() as u8];
        series.extend(label);
        series.extend([0x12, sample.len() as u8]);
        series.extend(&sample);
        let mut expected = vec![0x0a, series.len() as u8];
        expected.extend(series);
        assert_eq!(request.encode_to_vec(), expected);
    }

    #[test]
    fn series_gone_since_the_previous_gather_get_one_staleness_marker() {
        let (a, b) = (
            ("f", vec![("kind", "a")], 1.0),
            ("f", vec![("kind", "b")], 1.0),
        );
        let (_, first) = gather(&[a.clone(), b], Previous::default(), 1_000)
            .encode(100)
            .unwrap();
        assert_eq!(first.len(), 2);
        let second = gather(std::slice::from_ref(&a), first, 2_000);
        let series = &second.series;
        assert_eq!(series.len(), 2);
        assert_eq!(names(&series[1].labels), [("__name__", "f"), ("kind", "b")]);
        assert_eq!(series[1].samples[0].value.to_bits(), STALE_NAN);
        assert_eq!(series[1].samples[0].timestamp, 2_000);
        // One request per series: the label sets kept for the next gather are the gather's own, not the marker.
        let (requests, second) = second.encode(1).unwrap();
        assert_eq!(requests.len(), 2);
        assert_eq!(second.len(), 1);
        let third = gather(&[a], second, 3_000);
        assert_eq!(third.series.len(), 1, "the marker is sent once");
    }

    #[test]
    fn invalid_names_are_skipped_and_counted_nan_is_the_plain_nan() {
        let stale = f64::from_bits(STALE_NAN);
        let g = gather(
            &[
                ("ok_a", vec![("node", "n")], stale),
                ("9bad", vec![], 1.0),
                ("ok_b", vec![("bad-label", "v")], 1.0),
                ("ok_b", vec![("", "v")], 1.0),
                ("ok_b", vec![("good", "v")], 2.0),
            ],
            Previous::default(),
            0,
        );
        assert_eq!(g.series.len(), 2);
        assert_eq!(g.invalid, 3);
        let first = g.first_invalid.unwrap();
        assert_eq!(
            (first.name.as_str(), first.reason),
            ("9bad", "invalid metric name")
        );
        assert!(g.series[0].samples[0].value.is_nan());
        assert_ne!(g.series[0].samples[0].value.to_bits(), STALE_NAN);
        assert_eq!(g.series[1].samples[0].value, 2.0);
    }
}
