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

use super::parse::TextSample;

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

/// The label set of `s` as remote write sends it: `__name__`, its labels, then `external` labels it lacks;
/// empty values left out; sorted by name. A name repeated on the line keeps its first value.
pub fn series_labels(s: &TextSample, external: &[(String, String)]) -> Vec<Label> {
    let mut labels: Vec<Label> = Vec::with_capacity(1 + s.labels.len() + external.len());
    labels.push(Label {
        name: "__name__".into(),
        value: s.name.clone(),
    });
    for (name, value) in s.labels.iter().chain(external) {
        if value.is_empty() || labels.iter().any(|l| l.name == *name) {
            continue;
        }
        labels.push(Label {
            name: name.clone(),
            value: value.clone(),
        });
    }
    labels.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    labels
}

/// A hash of a label set (to find the series that went away between two gathers).
pub fn labels_hash(labels: &[Label]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    labels.hash(&mut h);
    h.finish()
}

/// One gather's series: `samples` stamped `timestamp_ms`, plus a staleness marker for every series of
/// `previous` not in it. Returns the series, and the label sets to hand in as `previous` next time.
pub fn gather_series(
    samples: Vec<TextSample>,
    external: &[(String, String)],
    previous: Vec<Vec<Label>>,
    timestamp_ms: i64,
) -> (Vec<TimeSeries>, Vec<Vec<Label>>) {
    let mut series: Vec<TimeSeries> = samples
        .into_iter()
        .map(|s| TimeSeries {
            labels: series_labels(&s, external),
            samples: vec![Sample {
                value: s.value,
                timestamp: timestamp_ms,
            }],
        })
        .collect();
    let present: HashSet<u64> = series.iter().map(|t| labels_hash(&t.labels)).collect();
    let now: Vec<Vec<Label>> = series.iter().map(|t| t.labels.clone()).collect();
    let stale = previous
        .into_iter()
        .filter(|l| !present.contains(&labels_hash(l)));
    series.extend(stale.map(|labels| TimeSeries {
        labels,
        samples: vec![Sample {
            value: f64::from_bits(STALE_NAN),
            timestamp: timestamp_ms,
        }],
    }));
    (series, now)
}

/// `series` in requests of at most `max_samples` samples each (one sample per series), encoded and compressed.
pub fn encode_requests(
    series: Vec<TimeSeries>,
    max_samples: usize,
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

    fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> TextSample {
        TextSample {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
        }
    }

    fn names(labels: &[Label]) -> Vec<(&str, &str)> {
        labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect()
    }

    #[test]
    fn labels_sorted_with_name_external_labels_never_override_empty_values_dropped() {
        let s = sample(
            "commwatch_link_up",
            &[
                ("node", "n1"),
                ("device", "mlx5_0"),
                ("port", ""),
                ("shard", "own"),
            ],
            1.0,
        );
        let external = [
            ("shard".to_string(), "7".to_string()),
            ("a".into(), "x".into()),
        ];
        assert_eq!(
            names(&series_labels(&s, &external)),
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
        let samples: Vec<TextSample> = (0..2_500)
            .map(|i| {
                sample(
                    "commwatch_x",
                    &[("node", &format!("node-{i:04}"))],
                    i as f64 * 0.5,
                )
            })
            .collect();
        let (series, _) = gather_series(samples, &[], Vec::new(), 1_712_345_678_123);
        let requests = encode_requests(series, 1_000).unwrap();
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
        let first = vec![
            sample("f", &[("kind", "a")], 1.0),
            sample("f", &[("kind", "b")], 1.0),
        ];
        let (_, previous) = gather_series(first, &[], Vec::new(), 1_000);
        let (series, previous) = gather_series(
            vec![sample("f", &[("kind", "a")], 1.0)],
            &[],
            previous,
            2_000,
        );
        assert_eq!(series.len(), 2);
        assert_eq!(names(&series[1].labels), [("__name__", "f"), ("kind", "b")]);
        assert_eq!(series[1].samples[0].value.to_bits(), STALE_NAN);
        assert_eq!(series[1].samples[0].timestamp, 2_000);
        let (series, _) = gather_series(
            vec![sample("f", &[("kind", "a")], 1.0)],
            &[],
            previous,
            3_000,
        );
        assert_eq!(series.len(), 1, "the marker is sent once");
    }
}
