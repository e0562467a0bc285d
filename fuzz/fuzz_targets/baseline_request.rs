//! `POST /api/v1/baselines` bodies from arbitrary bytes (issue #13): parsed, validated and merged as the
//! collector does, several requests in a row (split at 0xff). Nothing panics; whatever is kept is within the
//! bounds a stored record is checked against at start (finite, plausible: a `1e300` GB/s once stopped every
//! restart), and the held lists never pass their bounds.
#![no_main]
use commwatch_collector::analysis::baselines::{
    check_bare, check_throughput, merge_stored, BaselineRequest,
};
use commwatch_collector::analysis::input::{BareBaseline, ThroughputBaseline};
use commwatch_model::baseline::{MAX_BARE_BASELINES, MAX_OPERATOR_THROUGHPUT_BASELINES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut bare: Vec<BareBaseline> = Vec::new();
    let mut thr: Vec<ThroughputBaseline> = Vec::new();
    for body in data.split(|b| *b == 0xff) {
        let Ok(stored) = BaselineRequest::parse(body).and_then(BaselineRequest::into_records) else {
            continue;
        };
        for b in &stored.bare {
            assert!(check_bare(b).is_ok(), "{b:?}");
        }
        for t in &stored.throughput {
            assert!(check_throughput(t).is_ok(), "{t:?}");
        }
        let _ = merge_stored(&mut bare, &mut thr, &stored);
        assert!(bare.len() <= MAX_BARE_BASELINES);
        assert!(thr.len() <= MAX_OPERATOR_THROUGHPUT_BASELINES);
    }
});
