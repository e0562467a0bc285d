//! Series ([`super::series`]) → `prometheus.WriteRequest` (remote-write protocol 1.0) → snappy block format.
//! Pure: no I/O.
//!
//! The messages are prost structs with the field numbers of `prometheus/prompb/remote.proto` and `types.proto`
//! (`WriteRequest.timeseries = 1`; `TimeSeries.labels = 1, samples = 2`; `Label.name = 1, value = 2`;
//! `Sample.value = 1, timestamp = 2`). Protocol 1.0 sends no metadata (field 3 is reserved by the spec).
//! Labels: `__name__` and the sample's own, external labels where the sample has none of that name, empty
//! values left out, sorted by name, as the spec requires.

use prost::Message;

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

/// `series` in requests of at most `max_samples` samples each (one sample per series), encoded and compressed.
pub fn encode_requests(
    series: Vec<TimeSeries>,
    max_samples: usize,
) -> Result<Vec<Encoded>, EncodeError> {
    encode_chunks(series, max_samples, drop)
}

/// [`encode_requests`], handing each series to `done` once its request is encoded, in order.
pub(super) fn encode_chunks(
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

    #[test]
    fn requests_of_at_most_max_samples_round_trip_through_snappy_and_protobuf() {
        let series: Vec<TimeSeries> = (0..2_500)
            .map(|i| TimeSeries {
                labels: vec![Label {
                    name: "node".into(),
                    value: format!("node-{i:04}"),
                }],
                samples: vec![Sample {
                    value: i as f64 * 0.5,
                    timestamp: 1_712_345_678_123,
                }],
            })
            .collect();
        let requests = encode_requests(series.clone(), 1_000).unwrap();
        assert_eq!(
            requests.iter().map(|r| r.samples).collect::<Vec<_>>(),
            [1_000, 1_000, 500]
        );
        let decoded: Vec<TimeSeries> = requests
            .iter()
            .flat_map(|r| decode_request(&r.body).unwrap().timeseries)
            .collect();
        assert_eq!(decoded, series);
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
}
