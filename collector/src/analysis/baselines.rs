//! Operators' baselines (`POST /api/v1/baselines`, what `commwatch baseline import` sends): the request, its
//! validation at the edge, and the merge into what the engine holds.
//!
//! Every number and name is checked against [`commwatch_model::baseline`]'s bounds before anything is kept,
//! and a refusal names the field (`tests[3].peak_busbw_gbps: must be at most 10000`): a number out of bounds
//! used to be stored (`1e300` GB/s is infinite in bytes/s, which SQLite holds as `null`) and stopped every
//! later start of the collector. A request carries at most [`bounds::MAX_TESTS_PER_REQUEST`] tests (`413`
//! beyond); the collector holds at most [`bounds::MAX_BARE_BASELINES`] bare baselines and
//! [`bounds::MAX_OPERATOR_THROUGHPUT_BASELINES`] operators' throughput baselines (`400` for a request that
//! would add more; replacing one is always possible). The merge ([`merge`]) is linear in what is held plus
//! what is added, so the engine's lock is held for a bounded, short time (it was quadratic: 40,000 tests in
//! one POST held it for minutes, and `/metrics` and the findings API waited on it).

use std::collections::HashMap;
use std::hash::Hash;

use commwatch_model::baseline::{self as bounds, BoundError};
use serde::Serialize;
use serde_json::{Map, Value};

use super::input::{BareBaseline, ThroughputBaseline};

/// A throughput baseline: a job's samples per second per GPU at a scale.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputRequest {
    pub job: String,
    pub gpus: u32,
    pub samples_per_second_per_gpu: f64,
}

/// A bare-communication baseline: the `commwatch diagnose` baseline of a nccl-tests file, optionally for one
/// job (`None`: every job).
#[derive(Debug, Clone, PartialEq)]
pub struct BareRequest {
    pub job: Option<String>,
    pub source_file: Option<String>,
    pub tests: Vec<BareTest>,
}

/// One nccl-tests test of a bare baseline (the fields used; others are ignored).
#[derive(Debug, Clone, PartialEq)]
pub struct BareTest {
    pub collective: String,
    pub nranks: Option<u32>,
    pub avg_busbw_gbps: Option<f64>,
    pub peak_busbw_gbps: Option<f64>,
}

/// `POST /api/v1/baselines` body: an object with `tests` is a bare baseline, any other a throughput baseline.
#[derive(Debug, Clone, PartialEq)]
pub enum BaselineRequest {
    Throughput(ThroughputRequest),
    Bare(BareRequest),
}

/// Why a baseline request was refused, or not stored.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum BaselineError {
    #[error("not a baseline: {0}")]
    Malformed(String),
    #[error("invalid baseline field `{field}`: {reason}")]
    Invalid { field: String, reason: String },
    #[error("a baseline request holds at most {max} tests (collectives); this one holds {tests}")]
    TooManyTests { tests: usize, max: usize },
    #[error(
        "the collector holds at most {max} {kind} baselines ({held} now) and this request adds {adding}: \
         replace existing ones (same {key}) instead"
    )]
    TooManyHeld {
        kind: &'static str,
        key: &'static str,
        held: usize,
        adding: usize,
        max: usize,
    },
    #[error(
        "the baselines are held in memory but could not be stored in the state directory: {0}"
    )]
    NotStored(String),
}

impl BaselineError {
    /// The HTTP status of the refusal: `413` for too many tests in one request, `503` for a failed write,
    /// `400` otherwise.
    pub fn status(&self) -> u16 {
        match self {
            BaselineError::TooManyTests { .. } => 413,
            BaselineError::NotStored(_) => 503,
            _ => 400,
        }
    }

    /// The field a refusal is about, if one.
    pub fn field(&self) -> Option<&str> {
        match self {
            BaselineError::Invalid { field, .. } => Some(field),
            BaselineError::TooManyTests { .. } => Some("tests"),
            _ => None,
        }
    }
}

fn invalid(field: impl Into<String>, e: impl std::fmt::Display) -> BaselineError {
    BaselineError::Invalid {
        field: field.into(),
        reason: e.to_string(),
    }
}

/// The fields of one JSON object, read with errors that name them (`prefix` + name).
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    prefix: String,
}

impl Fields<'_> {
    fn present(&self, name: &str) -> Option<&Value> {
        self.obj.get(name).filter(|v| !v.is_null())
    }
    fn field(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
    fn number(&self, name: &str) -> Result<Option<f64>, BaselineError> {
        match self.present(name) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| invalid(self.field(name), "must be a number")),
        }
    }
    fn count(&self, name: &str) -> Result<Option<u32>, BaselineError> {
        match self.present(name) {
            None => Ok(None),
            Some(v) => {
                let n = v
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        invalid(
                            self.field(name),
                            format!("must be a whole number from 1 to {}", bounds::MAX_RANKS),
                        )
                    })?;
                bounds::check_ranks(n)
                    .map(Some)
                    .map_err(|e| invalid(self.field(name), e))
            }
        }
    }
    fn text(&self, name: &str, max: usize) -> Result<Option<String>, BaselineError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::String(s)) => bounds::check_name(s, max)
                .map(|s| Some(s.to_string()))
                .map_err(|e| invalid(self.field(name), e)),
            Some(_) => Err(invalid(self.field(name), "must be a string")),
        }
    }
    fn required<T>(&self, name: &str, v: Option<T>) -> Result<T, BaselineError> {
        v.ok_or_else(|| invalid(self.field(name), "is required"))
    }
}

/// A bus bandwidth field within [`bounds::MAX_BUSBW_GBPS`].
fn busbw(f: &Fields<'_>, name: &str) -> Result<Option<f64>, BaselineError> {
    match f.number(name)? {
        None => Ok(None),
        Some(g) => bounds::check_busbw_gbps(g)
            .map(Some)
            .map_err(|e: BoundError| invalid(f.field(name), format!("{e} (GB/s)"))),
    }
}

impl BaselineRequest {
    /// Parses and validates a request body: every number finite and within its bound, every name bounded
    /// and free of control characters, at most [`bounds::MAX_TESTS_PER_REQUEST`] tests.
    pub fn parse(body: &[u8]) -> Result<BaselineRequest, BaselineError> {
        let v: Value =
            serde_json::from_slice(body).map_err(|e| BaselineError::Malformed(e.to_string()))?;
        let Some(obj) = v.as_object() else {
            return Err(BaselineError::Malformed(
                "the body must be a JSON object".into(),
            ));
        };
        let top = Fields {
            obj,
            prefix: String::new(),
        };
        if !obj.contains_key("tests") {
            let job = top.text("job", bounds::MAX_NAME_LEN)?;
            let gpus = top.count("gpus")?;
            let per_gpu = match top.number("samples_per_second_per_gpu")? {
                None => None,
                Some(x) => Some(
                    bounds::check_positive(x, bounds::MAX_SAMPLES_PER_SECOND_PER_GPU)
                        .map_err(|e| invalid("samples_per_second_per_gpu", e))?,
                ),
            };
            return Ok(BaselineRequest::Throughput(ThroughputRequest {
                job: top.required("job", job)?,
                gpus: top.required("gpus", gpus)?,
                samples_per_second_per_gpu: top.required("samples_per_second_per_gpu", per_gpu)?,
            }));
        }
        let Some(Value::Array(tests)) = obj.get("tests") else {
            return Err(invalid("tests", "must be a list"));
        };
        if tests.len() > bounds::MAX_TESTS_PER_REQUEST {
            return Err(BaselineError::TooManyTests {
                tests: tests.len(),
                max: bounds::MAX_TESTS_PER_REQUEST,
            });
        }
        Ok(BaselineRequest::Bare(BareRequest {
            job: top.text("job", bounds::MAX_NAME_LEN)?,
            source_file: top.text("source_file", bounds::MAX_SOURCE_LEN)?,
            tests: tests
                .iter()
                .enumerate()
                .map(|(i, t)| parse_test(i, t))
                .collect::<Result<_, _>>()?,
        }))
    }

    /// Converts a parsed request into what the engine keeps (nccl-tests GB/s are 1e9 bytes/s; the peak bus
    /// bandwidth is the large-message figure a rail link should reach, the average is used when no peak is
    /// given; a test with neither is left out).
    pub fn into_records(self) -> Result<StoredBaselines, BaselineError> {
        match self {
            BaselineRequest::Throughput(t) => Ok(StoredBaselines {
                bare: vec![],
                throughput: vec![ThroughputBaseline {
                    job: t.job,
                    gpus: t.gpus,
                    samples_per_second_per_gpu: t.samples_per_second_per_gpu,
                    source: "operator".into(),
                }],
            }),
            BaselineRequest::Bare(b) => {
                let source = b.source_file.unwrap_or_else(|| "operator".into());
                let bare: Vec<BareBaseline> = b
                    .tests
                    .into_iter()
                    .filter_map(|t| {
                        let g = t.peak_busbw_gbps.or(t.avg_busbw_gbps)?;
                        Some(BareBaseline {
                            job: b.job.clone(),
                            collective: t.collective,
                            busbw_bytes_per_second: g * 1e9,
                            nranks: t.nranks,
                            source: source.clone(),
                        })
                    })
                    .collect();
                if bare.is_empty() {
                    return Err(invalid("tests", "no test with a bus bandwidth"));
                }
                Ok(StoredBaselines {
                    bare,
                    throughput: vec![],
                })
            }
        }
    }
}

fn parse_test(i: usize, t: &Value) -> Result<BareTest, BaselineError> {
    let Some(obj) = t.as_object() else {
        return Err(invalid(format!("tests[{i}]"), "must be an object"));
    };
    let f = Fields {
        obj,
        prefix: format!("tests[{i}]."),
    };
    let collective = f.text("collective", bounds::MAX_NAME_LEN)?;
    Ok(BareTest {
        collective: f.required("collective", collective)?,
        nranks: f.count("nranks")?,
        avg_busbw_gbps: busbw(&f, "avg_busbw_gbps")?,
        peak_busbw_gbps: busbw(&f, "peak_busbw_gbps")?,
    })
}

/// What was stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StoredBaselines {
    pub bare: Vec<BareBaseline>,
    pub throughput: Vec<ThroughputBaseline>,
}

/// Whether a stored bare baseline is within the bounds a request is held to (a row of an older collector
/// may not be).
pub fn check_bare(b: &BareBaseline) -> Result<(), BaselineError> {
    bounds::check_busbw_gbps(b.busbw_bytes_per_second / 1e9)
        .map_err(|e| invalid("busbw_bytes_per_second", format!("{e} (GB/s)")))?;
    bounds::check_name(&b.collective, bounds::MAX_NAME_LEN)
        .map_err(|e| invalid("collective", e))?;
    Ok(())
}

/// Whether a stored throughput baseline is within bounds.
pub fn check_throughput(b: &ThroughputBaseline) -> Result<(), BaselineError> {
    bounds::check_positive(
        b.samples_per_second_per_gpu,
        bounds::MAX_SAMPLES_PER_SECOND_PER_GPU,
    )
    .map_err(|e| invalid("samples_per_second_per_gpu", e))?;
    Ok(())
}

/// The bare baselines an evaluation can use: per job (and the fleet-wide `None`), the one
/// [`super::input::AnalysisInput::bare_baseline`] picks — the first AllReduce one, else the first — so that
/// the rules, which look one up per link, scan one per job rather than every one held (up to
/// [`bounds::MAX_BARE_BASELINES`]). Linear.
pub fn effective_bare(all: &[BareBaseline]) -> Vec<BareBaseline> {
    let is_all_reduce = |b: &BareBaseline| b.collective.to_ascii_lowercase().contains("all_reduce");
    let mut pick: HashMap<Option<&str>, usize> = HashMap::new();
    for (i, b) in all.iter().enumerate() {
        let slot = pick.entry(b.job.as_deref()).or_insert(i);
        if !is_all_reduce(&all[*slot]) && is_all_reduce(b) {
            *slot = i;
        }
    }
    let mut chosen: Vec<usize> = pick.into_values().collect();
    chosen.sort_unstable();
    chosen.into_iter().map(|i| all[i].clone()).collect()
}

/// How many elements a [`merge`] would add beyond those it replaces, when that is over its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBound {
    pub adding: usize,
}

/// Puts `new` into `held`: an element of `held` with the key of one of `new` is replaced by it, and of
/// several elements of `new` with one key the last is kept; they are appended in the order of those last
/// occurrences. Refuses, changing nothing, when the merge would add elements and leave more than `max`.
/// Linear: `key` is computed once per element of `held` and of `new`, with one hash map of `new`'s keys.
pub fn merge<T: Clone, K: Eq + Hash>(
    held: &mut Vec<T>,
    new: &[T],
    max: usize,
    key: impl Fn(&T) -> K,
) -> Result<(), OverBound> {
    let mut last: HashMap<K, usize> = HashMap::with_capacity(new.len());
    for (i, x) in new.iter().enumerate() {
        last.insert(key(x), i);
    }
    let replaced: Vec<bool> = held.iter().map(|y| last.contains_key(&key(y))).collect();
    let kept = replaced.iter().filter(|r| !**r).count();
    let adding = (kept + last.len()).saturating_sub(held.len());
    if adding > 0 && kept + last.len() > max {
        return Err(OverBound { adding });
    }
    let mut gone = replaced.into_iter();
    held.retain(|_| !gone.next().unwrap_or(false));
    let mut order: Vec<usize> = last.into_values().collect();
    order.sort_unstable();
    held.extend(order.into_iter().map(|i| new[i].clone()));
    Ok(())
}

/// Merges `b` into the held baselines within their bounds. A request carries one kind, bare or throughput;
/// a bound refuses it whole (nothing of that kind changes).
pub fn merge_stored(
    bare: &mut Vec<BareBaseline>,
    throughput: &mut Vec<ThroughputBaseline>,
    b: &StoredBaselines,
) -> Result<(), BaselineError> {
    let bare_key = |x: &BareBaseline| (x.job.clone(), x.collective.clone());
    let thr_key = |x: &ThroughputBaseline| (x.source.clone(), x.job.clone(), x.gpus);
    let held = bare.len();
    merge(bare, &b.bare, bounds::MAX_BARE_BASELINES, bare_key).map_err(|o| {
        BaselineError::TooManyHeld {
            kind: "bare",
            key: "job and collective",
            held,
            adding: o.adding,
            max: bounds::MAX_BARE_BASELINES,
        }
    })?;
    // Learned throughput figures do not count against the operators' bound.
    let learned = throughput.iter().filter(|x| x.source != "operator").count();
    let held = throughput.len() - learned;
    let max = bounds::MAX_OPERATOR_THROUGHPUT_BASELINES + learned;
    merge(throughput, &b.throughput, max, thr_key).map_err(|o| BaselineError::TooManyHeld {
        kind: "operator throughput",
        key: "job and GPU count",
        held,
        adding: o.adding,
        max: bounds::MAX_OPERATOR_THROUGHPUT_BASELINES,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn refused(body: &str) -> BaselineError {
        BaselineRequest::parse(body.as_bytes())
            .and_then(BaselineRequest::into_records)
            .expect_err(body)
    }

    #[test]
    fn every_number_out_of_bounds_is_refused_naming_its_field() {
        let cases = [
            (
                r#"{"tests":[{"collective":"all_reduce","peak_busbw_gbps":1e300}]}"#,
                "tests[0].peak_busbw_gbps",
            ),
            (
                r#"{"tests":[{"collective":"a","peak_busbw_gbps":1},{"collective":"b","avg_busbw_gbps":-3}]}"#,
                "tests[1].avg_busbw_gbps",
            ),
            (
                r#"{"tests":[{"collective":"a","peak_busbw_gbps":0}]}"#,
                "tests[0].peak_busbw_gbps",
            ),
            (
                r#"{"tests":[{"collective":"a","peak_busbw_gbps":"fast"}]}"#,
                "tests[0].peak_busbw_gbps",
            ),
            // A finite peak does not excuse an absurd average (both are checked).
            (
                r#"{"tests":[{"collective":"a","peak_busbw_gbps":50,"avg_busbw_gbps":1e20}]}"#,
                "tests[0].avg_busbw_gbps",
            ),
            (
                r#"{"tests":[{"collective":"a","nranks":0,"peak_busbw_gbps":5}]}"#,
                "tests[0].nranks",
            ),
            (
                r#"{"tests":[{"collective":"a","nranks":-1,"peak_busbw_gbps":5}]}"#,
                "tests[0].nranks",
            ),
            (
                r#"{"tests":[{"collective":"a\nb","peak_busbw_gbps":5}]}"#,
                "tests[0].collective",
            ),
            (
                r#"{"tests":[{"peak_busbw_gbps":5}]}"#,
                "tests[0].collective",
            ),
            (
                r#"{"job":"","tests":[{"collective":"a","peak_busbw_gbps":5}]}"#,
                "job",
            ),
            (r#"{"tests":{}}"#, "tests"),
            (r#"{"tests":[{"collective":"a"}]}"#, "tests"),
            (
                r#"{"job":"j","gpus":8,"samples_per_second_per_gpu":1e300}"#,
                "samples_per_second_per_gpu",
            ),
            (
                r#"{"job":"j","gpus":0,"samples_per_second_per_gpu":100}"#,
                "gpus",
            ),
            (r#"{"job":"j","gpus":8}"#, "samples_per_second_per_gpu"),
        ];
        for (body, field) in cases {
            let e = refused(body);
            assert_eq!(e.field(), Some(field), "{body}: {e}");
            assert_eq!(e.status(), 400, "{body}");
            assert!(e.to_string().contains(field), "{e}");
        }
        let e = refused(r#"{"tests":[{"collective":"all_reduce","peak_busbw_gbps":1e300}]}"#);
        assert_eq!(
            e.to_string(),
            "invalid baseline field `tests[0].peak_busbw_gbps`: must be at most 10000 (GB/s)"
        );
        // Beyond f64 altogether, or not JSON: malformed.
        assert!(matches!(
            refused(r#"{"tests":[{"collective":"a","peak_busbw_gbps":1e400}]}"#),
            BaselineError::Malformed(_)
        ));
        assert!(matches!(refused("[1]"), BaselineError::Malformed(_)));
    }

    #[test]
    fn a_good_request_is_kept_in_bytes_per_second() {
        let r = BaselineRequest::parse(
            br#"{"job":"llm-7","source_file":"x.txt","tests":[{"collective":"all_reduce_perf","nranks":10,
                 "avg_busbw_gbps":40.0,"peak_busbw_gbps":48.89,"points":[{"size_bytes":8}]},
                 {"collective":"no_figure"}]}"#,
        )
        .unwrap();
        let s = r.into_records().unwrap();
        assert_eq!(s.bare.len(), 1);
        assert_eq!(s.bare[0].busbw_bytes_per_second, 48.89e9);
        assert_eq!(s.bare[0].job.as_deref(), Some("llm-7"));
        assert_eq!(s.bare[0].nranks, Some(10));
        assert_eq!(s.bare[0].source, "x.txt");
        let t =
            BaselineRequest::parse(br#"{"job":"j","gpus":8,"samples_per_second_per_gpu":100.0}"#)
                .unwrap()
                .into_records()
                .unwrap();
        assert_eq!(t.throughput[0].gpus, 8);
    }

    #[test]
    fn a_request_over_the_test_limit_is_413_naming_the_limit() {
        let tests: Vec<String> = (0..=bounds::MAX_TESTS_PER_REQUEST)
            .map(|i| format!(r#"{{"collective":"c{i}","peak_busbw_gbps":1}}"#))
            .collect();
        let e = refused(&format!(r#"{{"tests":[{}]}}"#, tests.join(",")));
        assert_eq!(e.status(), 413);
        assert!(
            e.to_string()
                .contains(&format!("at most {}", bounds::MAX_TESTS_PER_REQUEST)),
            "{e}"
        );
    }

    #[test]
    fn merge_replaces_by_key_keeps_the_last_duplicate_and_appends_in_order() {
        let mut held = vec![("a", 1), ("b", 1), ("c", 1)];
        merge(&mut held, &[("b", 2), ("d", 2), ("b", 3)], 10, |x| x.0).unwrap();
        assert_eq!(held, [("a", 1), ("c", 1), ("d", 2), ("b", 3)]);
        // At the bound: replacing is allowed, adding is not, and a refusal changes nothing.
        let mut full = vec![("a", 1), ("b", 1)];
        merge(&mut full, &[("a", 2)], 2, |x| x.0).unwrap();
        assert_eq!(full, [("b", 1), ("a", 2)]);
        assert_eq!(
            merge(&mut full, &[("a", 3), ("z", 3)], 2, |x| x.0),
            Err(OverBound { adding: 1 })
        );
        assert_eq!(full, [("b", 1), ("a", 2)]);
    }

    #[test]
    fn merge_computes_each_key_once_linear_in_held_plus_new() {
        // The old merge compared every new baseline with every held one: n × (held + n) comparisons.
        for n in [1_000usize, 10_000, 40_000] {
            let mut held: Vec<(u32, u32)> = (0..n as u32).map(|i| (i, 0)).collect();
            let new: Vec<(u32, u32)> = (n as u32 / 2..n as u32 * 3 / 2).map(|i| (i, 1)).collect();
            let calls = Cell::new(0usize);
            merge(&mut held, &new, usize::MAX, |x| {
                calls.set(calls.get() + 1);
                x.0
            })
            .unwrap();
            assert_eq!(calls.get(), 2 * n, "key computed once per element");
            assert_eq!(held.len(), n * 3 / 2);
        }
    }

    #[test]
    fn the_held_bounds_refuse_new_keys_but_not_replacements() {
        let one = |job: &str, c: &str| BareBaseline {
            job: Some(job.into()),
            collective: c.into(),
            busbw_bytes_per_second: 1e9,
            nranks: None,
            source: "operator".into(),
        };
        let mut bare: Vec<BareBaseline> = (0..bounds::MAX_BARE_BASELINES)
            .map(|i| one(&format!("j{i}"), "all_reduce"))
            .collect();
        let mut thr = vec![];
        let add = StoredBaselines {
            bare: vec![one("j0", "all_reduce"), one("new", "all_reduce")],
            throughput: vec![],
        };
        let e = merge_stored(&mut bare, &mut thr, &add).unwrap_err();
        assert!(e.to_string().contains("at most 4096 bare baselines"), "{e}");
        assert_eq!(e.status(), 400);
        let replace = StoredBaselines {
            bare: vec![one("j0", "all_reduce")],
            throughput: vec![],
        };
        merge_stored(&mut bare, &mut thr, &replace).unwrap();
        assert_eq!(bare.len(), bounds::MAX_BARE_BASELINES);
    }

    #[test]
    fn stored_records_out_of_bounds_are_found() {
        let b = BareBaseline {
            job: None,
            collective: "all_reduce".into(),
            busbw_bytes_per_second: f64::INFINITY,
            nranks: None,
            source: "operator".into(),
        };
        assert!(check_bare(&b).is_err());
        assert!(check_bare(&BareBaseline {
            busbw_bytes_per_second: 48e9,
            ..b
        })
        .is_ok());
    }

    /// The fuzz target's property (`fuzz/fuzz_targets/baseline_request.rs`) on mutated bodies, in every test run.
    #[test]
    fn mutated_bodies_never_keep_a_value_out_of_bounds() {
        use rand::{Rng, SeedableRng};
        let seeds = [
            r#"{"job":"llm-7","source_file":"a.txt","tests":[{"collective":"all_reduce_perf","nranks":16,"peak_busbw_gbps":190.5,"avg_busbw_gbps":150}]}"#,
            r#"{"job":"j","gpus":8,"samples_per_second_per_gpu":100.0}"#,
            r#"{"tests":[{"collective":"all_reduce","peak_busbw_gbps":9999.9},{"collective":"b","avg_busbw_gbps":1e3}]}"#,
        ];
        let alphabet = b"0123456789e+-.\"{}[],:naux";
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        let (mut bare, mut thr) = (Vec::new(), Vec::new());
        let mut kept = 0;
        for i in 0..20_000 {
            let mut b = seeds[i % seeds.len()].as_bytes().to_vec();
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..b.len());
                match rng.random_range(0..3) {
                    0 => b[at] = alphabet[rng.random_range(0..alphabet.len())],
                    1 => b.insert(at, alphabet[rng.random_range(0..alphabet.len())]),
                    _ => {
                        b.remove(at);
                    }
                }
            }
            let Ok(s) = BaselineRequest::parse(&b).and_then(BaselineRequest::into_records) else {
                continue;
            };
            kept += 1;
            for x in &s.bare {
                assert!(
                    check_bare(x).is_ok(),
                    "{}: {x:?}",
                    String::from_utf8_lossy(&b)
                );
            }
            for x in &s.throughput {
                assert!(
                    check_throughput(x).is_ok(),
                    "{}: {x:?}",
                    String::from_utf8_lossy(&b)
                );
            }
            let _ = merge_stored(&mut bare, &mut thr, &s);
        }
        assert!(
            kept > 100,
            "the mutations left too few valid bodies: {kept}"
        );
    }

    #[test]
    fn the_effective_baselines_pick_what_the_rules_would_pick() {
        use crate::analysis::input::AnalysisInput;
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let jobs = [None, Some("a"), Some("b"), Some("c")];
        let collectives = [
            "all_reduce_perf",
            "all_gather_perf",
            "AllReduce_x",
            "broadcast",
        ];
        for _ in 0..200 {
            let all: Vec<BareBaseline> = (0..rng.random_range(0..12))
                .map(|i| BareBaseline {
                    job: jobs[rng.random_range(0..jobs.len())].map(str::to_string),
                    collective: collectives[rng.random_range(0..collectives.len())].into(),
                    busbw_bytes_per_second: f64::from(i + 1) * 1e9,
                    nranks: None,
                    source: "operator".into(),
                })
                .collect();
            let full = AnalysisInput {
                bare_baselines: all.clone(),
                ..Default::default()
            };
            let reduced = AnalysisInput {
                bare_baselines: effective_bare(&all),
                ..Default::default()
            };
            assert!(reduced.bare_baselines.len() <= jobs.len());
            for j in jobs.iter().chain(&[Some("unknown")]) {
                assert_eq!(full.bare_baseline(*j), reduced.bare_baseline(*j), "{all:?}");
            }
        }
    }
}
