//! One gather's samples → remote write's series: each sample's label set as the spec wants it (`__name__` and
//! the sample's own labels, external labels where the sample has none of that name, empty values left out,
//! sorted by name), stamped with the gather's time, plus a staleness marker for each series of the previous
//! gather that is gone. Pure: no I/O.
//!
//! Cost: a sample's label set is chosen and hashed on the borrowed strings; a series the previous gather had
//! takes its owned labels back from it (compared, not rebuilt), so in the steady state a gather allocates no
//! label strings, only those of new series.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use super::encode::{encode_chunks, EncodeError, Encoded, Label, Sample, TimeSeries, STALE_NAN};
use crate::config::remote_write::is_label_name;
use crate::export::exposition::SampleRef;

/// Why one sample is not sent (it is skipped and counted dropped; the others are sent). Names are checked as
/// the text format requires them, so remote write never sends what `/metrics` could not show.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sample of {name:?}: {reason}")]
pub struct InvalidSample {
    /// The sample's metric name.
    pub name: String,
    pub reason: &'static str,
}

/// One label of a series: `__name__`, one of the sample's own (by index), or an external one (by index).
#[derive(Debug, Clone, Copy)]
enum Pick {
    Name,
    Own(usize),
    External(usize),
}

/// A sample and the external labels: what [`Pick`]s point into.
#[derive(Clone, Copy)]
struct Source<'s> {
    name: &'s str,
    labels: &'s [(&'s str, &'s str)],
    external: &'s [(String, String)],
}

impl<'s> Source<'s> {
    fn pair(&self, p: Pick) -> (&'s str, &'s str) {
        match p {
            Pick::Name => ("__name__", self.name),
            Pick::Own(i) => self.labels[i],
            Pick::External(i) => (self.external[i].0.as_str(), self.external[i].1.as_str()),
        }
    }

    /// The series' labels into `picks` (cleared first): `__name__`, the sample's, then the external labels
    /// it lacks; empty values left out; a repeated name keeps its first value; sorted by name.
    fn choose(&self, picks: &mut Vec<Pick>) {
        picks.clear();
        picks.push(Pick::Name);
        let own = (0..self.labels.len()).map(Pick::Own);
        for p in own.chain((0..self.external.len()).map(Pick::External)) {
            let (name, value) = self.pair(p);
            if value.is_empty() || picks.iter().any(|&q| self.pair(q).0 == name) {
                continue;
            }
            picks.push(p);
        }
        picks.sort_unstable_by(|&a, &b| self.pair(a).0.cmp(self.pair(b).0));
    }

    fn labels(&self, picks: &[Pick]) -> Vec<Label> {
        picks
            .iter()
            .map(|&p| {
                let (name, value) = self.pair(p);
                Label {
                    name: name.to_string(),
                    value: value.to_string(),
                }
            })
            .collect()
    }

    fn equal(&self, picks: &[Pick], labels: &[Label]) -> bool {
        picks.len() == labels.len()
            && picks.iter().zip(labels).all(|(&p, l)| {
                let (name, value) = self.pair(p);
                l.name == name && l.value == value
            })
    }
}

/// The label set of a sample as remote write sends it: `__name__`, its labels, then `external` labels it
/// lacks; empty values left out; sorted by name. A name repeated in `labels` keeps its first value.
pub fn series_labels(
    name: &str,
    labels: &[(&str, &str)],
    external: &[(String, String)],
) -> Vec<Label> {
    let source = Source {
        name,
        labels,
        external,
    };
    let mut picks = Vec::new();
    source.choose(&mut picks);
    source.labels(&picks)
}

/// A hash of a label set given as (name, value) pairs (to find the series that went away between two
/// gathers); [`labels_hash`] of the same labels.
fn pairs_hash<'x>(pairs: impl ExactSizeIterator<Item = (&'x str, &'x str)>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write_usize(pairs.len());
    for (name, value) in pairs {
        name.hash(&mut h);
        value.hash(&mut h);
    }
    h.finish()
}

/// A hash of a label set (to find the series that went away between two gathers).
pub fn labels_hash(labels: &[Label]) -> u64 {
    pairs_hash(labels.iter().map(|l| (l.name.as_str(), l.value.as_str())))
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

/// One gather's series, built from its samples handed in one at a time ([`GatherSeries::push`]), each
/// stamped with the gather's time.
pub struct GatherSeries<'e> {
    external: &'e [(String, String)],
    timestamp_ms: i64,
    series: Vec<TimeSeries>,
    /// The hashes of `series`, in order.
    hashes: Vec<u64>,
    /// The previous gather's series; the labels of those found again are taken (left empty).
    previous: Vec<(u64, Vec<Label>)>,
    /// Index in `previous` by hash (the first of a hash).
    by_hash: HashMap<u64, usize>,
    /// (index in `series`, index in `previous`) of every label set taken from `previous`.
    taken: Vec<(usize, usize)>,
    picks: Vec<Pick>,
    /// The last metric name found valid: a family's samples come together, so each name is checked once.
    valid_name: String,
    invalid: usize,
    first_invalid: Option<InvalidSample>,
}

/// A gather's series ([`GatherSeries::finish`]) and the samples left out.
pub struct Finished {
    /// The gather's own series, then a staleness marker for each series of the previous gather it lacks.
    pub series: Vec<TimeSeries>,
    /// The hashes of the gather's own series, in order.
    hashes: Vec<u64>,
    /// Samples skipped (invalid names), and the first of them.
    pub invalid: usize,
    pub first_invalid: Option<InvalidSample>,
}

impl<'e> GatherSeries<'e> {
    /// A gather stamped `timestamp_ms` (milliseconds since the Unix epoch), with `external` labels, after the
    /// gather that had `previous`.
    pub fn new(
        external: &'e [(String, String)],
        timestamp_ms: i64,
        previous: Previous,
    ) -> GatherSeries<'e> {
        let mut by_hash = HashMap::with_capacity(previous.len());
        for (i, (h, _)) in previous.0.iter().enumerate() {
            by_hash.entry(*h).or_insert(i);
        }
        GatherSeries {
            external,
            timestamp_ms,
            series: Vec::with_capacity(previous.len()),
            hashes: Vec::with_capacity(previous.len()),
            previous: previous.0,
            by_hash,
            taken: Vec::new(),
            picks: Vec::new(),
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
        let source = Source {
            name: s.name,
            labels: s.labels,
            external: self.external,
        };
        source.choose(&mut self.picks);
        let hash = pairs_hash(self.picks.iter().map(|&p| source.pair(p)));
        let labels = match self.by_hash.get(&hash) {
            Some(&i) if source.equal(&self.picks, &self.previous[i].1) => {
                self.taken.push((self.series.len(), i));
                std::mem::take(&mut self.previous[i].1)
            }
            _ => source.labels(&self.picks),
        };
        let value = if s.value.is_nan() { f64::NAN } else { s.value };
        self.hashes.push(hash);
        self.series.push(TimeSeries {
            labels,
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

    /// The previous gather's series back as they were, for a gather that failed part way (it queues nothing).
    pub fn abandon(mut self) -> Previous {
        for (s, p) in self.taken {
            self.previous[p].1 = std::mem::take(&mut self.series[s].labels);
        }
        Previous(self.previous)
    }

    /// The series, plus a staleness marker for every series of the previous gather not among them.
    pub fn finish(self) -> Finished {
        let mut series = self.series;
        let present: HashSet<u64> = self.hashes.iter().copied().collect();
        let stale = self
            .previous
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
            hashes: self.hashes,
            invalid: self.invalid,
            first_invalid: self.first_invalid,
        }
    }
}

impl Finished {
    /// The series in requests ([`super::encode::encode_requests`]), and the gather's own series for the next
    /// gather, their label sets moved out of the encoded requests (not copied). On an error the next gather
    /// starts afresh.
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

/// A Prometheus metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn is_metric_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote_write::encode::{decode_request, encode_requests};

    /// A sample: name, labels, value.
    type Owned<'s> = (&'s str, Vec<(&'s str, &'s str)>, f64);

    /// One gather of `samples` at `timestamp_ms`.
    fn gather(samples: &[Owned<'_>], previous: Previous, timestamp_ms: i64) -> Finished {
        let mut g = GatherSeries::new(&[], timestamp_ms, previous);
        for (name, labels, value) in samples {
            g.push(SampleRef {
                name,
                labels,
                value: *value,
            });
        }
        g.finish()
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
            ("__name__", "x"),
        ];
        let external = [
            ("shard".to_string(), "7".to_string()),
            ("a".into(), "x".into()),
        ];
        let labels = series_labels("commwatch_link_up", &labels, &external);
        assert_eq!(
            names(&labels),
            [
                ("__name__", "commwatch_link_up"),
                ("a", "x"),
                ("device", "mlx5_0"),
                ("node", "n1"),
                ("shard", "own"),
            ]
        );
        let pairs = labels.iter().map(|l| (l.name.as_str(), l.value.as_str()));
        assert_eq!(pairs_hash(pairs), labels_hash(&labels));
        assert_ne!(labels_hash(&labels), labels_hash(&labels[1..]));
    }

    #[test]
    fn series_in_time_order_through_snappy_and_protobuf() {
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
            for t in &decode_request(&r.body).unwrap().timeseries {
                let node = format!("node-{seen:04}");
                assert_eq!(
                    names(&t.labels),
                    [("__name__", "commwatch_x"), ("node", node.as_str())]
                );
                let sample = Sample {
                    value: seen as f64 * 0.5,
                    timestamp: 1_712_345_678_123,
                };
                assert_eq!(t.samples, [sample]);
                seen += 1;
            }
        }
        assert_eq!(seen, 2_500);
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
        assert_eq!(names(&series[0].labels), [("__name__", "f"), ("kind", "a")]);
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
    fn a_series_seen_again_or_twice_keeps_its_labels() {
        let a = ("f", vec![("kind", "a")], 1.0);
        let (_, first) = gather(std::slice::from_ref(&a), Previous::default(), 1_000)
            .encode(100)
            .unwrap();
        // Twice in one gather (the second gets labels of its own), and a series new to this gather.
        let b = ("f", vec![("kind", "b")], 2.0);
        let second = gather(&[a.clone(), a.clone(), b], first, 2_000);
        let got: Vec<_> = second.series.iter().map(|t| names(&t.labels)).collect();
        let (fa, fb) = (
            [("__name__", "f"), ("kind", "a")],
            [("__name__", "f"), ("kind", "b")],
        );
        assert_eq!(got, [fa.to_vec(), fa.to_vec(), fb.to_vec()]);
        let (_, second) = second.encode(100).unwrap();
        assert_eq!(second.len(), 3);
        let third = gather(std::slice::from_ref(&a), second, 3_000);
        let got: Vec<_> = third.series.iter().map(|t| names(&t.labels)).collect();
        assert_eq!(got, [fa.to_vec(), fb.to_vec()], "one marker, for b");
        assert_eq!(third.series[1].samples[0].value.to_bits(), STALE_NAN);
        // A gather abandoned part way gives the previous series back whole.
        let (_, third) = third.encode(100).unwrap();
        let mut g = GatherSeries::new(&[], 4_000, third);
        g.push(SampleRef {
            name: a.0,
            labels: &a.1,
            value: 1.0,
        });
        let back = g.abandon();
        let got: Vec<_> = back.0.iter().map(|(_, l)| names(l)).collect();
        assert_eq!(got, [fa.to_vec()]);
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
