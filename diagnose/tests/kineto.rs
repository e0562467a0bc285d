//! Kineto traces from Holistic Trace Analysis' test data (`kineto/` of the shared test data, read in place;
//! its PROVENANCE.md gives the origin and the figures upstream expects), cross-checked with
//! HTA's own analysis of the same files (holistictraceanalysis from PyPI, `TraceAnalysis(trace_dir)`,
//! `get_comm_comp_overlap()` and `get_temporal_breakdown()`; HTA rounds times to whole microseconds):
//!
//! | trace | HTA overlap % | HTA idle us | HTA compute us | HTA kernel span us | GPU events | NCCL kernels |
//! |---|---|---|---|---|---|---|
//! | nccl_data (rank 0) | 14.31 | 338781 | 75169 | 435586 | 2516 | 14 |
//! | sampled_rank-0 | 11.81 | 321378 | 106252 | 600058 | 602 | 5 |
//! | sampled_rank-1 | 20.05 | 328671 | 135548 | 600674 | 577 | 5 |
//!
//! The sampled ranks have whole-microsecond times and agree exactly; nccl_data has fractional times (see there).

use std::path::PathBuf;

use commwatch_diagnose::analysis::{overlap, straggler};
use commwatch_diagnose::kineto::{parse_file, trace_files};
use commwatch_diagnose::progress::Progress;
use commwatch_testdata::shared_testdata;

/// A trace (or, for `""`, the folder of traces), read in place from the shared test data; `None` after a loud
/// skip (a failure under CI) when it is absent.
#[track_caller]
fn data(name: &str) -> Option<PathBuf> {
    shared_testdata!(&format!("kineto/{name}"))
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn nccl_data_trace_matches_provenance_and_hta() {
    let Some(path) = data("nccl_data.json.gz") else {
        return;
    };
    let t = parse_file(&path, &Progress::hidden()).unwrap();
    assert!(t.truncated.is_none());
    assert_eq!(t.events_read, 40_573);
    let tl = &t.timeline;
    assert_eq!(tl.rank, Some(0));
    assert_eq!(tl.world_size, Some(2));
    assert_eq!(tl.nccl_version.as_deref(), Some("2.17.1"));
    assert_eq!(tl.devices.len(), 8);
    assert_eq!(tl.devices[0], "NVIDIA A100-PG509-200");
    // PROVENANCE.md: 2,700 kernels + 960 memcpy + 114 memset; 21 NCCL kernels.
    assert_eq!(tl.events.len(), 2700 + 960 + 114);
    let a = overlap::analyze(tl, 0);
    assert_eq!(a.nccl_kernels, 21);
    assert_eq!(a.gpu_events_counted, 2516);
    assert!(a.last_step_excluded);
    assert_eq!(a.steps.len(), 3);
    assert_eq!(a.steps[0].step, 4);
    assert!(close(a.steps[0].step_time_us, 222_442.191, 1e-3));
    // This trace has fractional-microsecond times, which HTA's parser turns into integers: the same activities
    // and span, but the sums of a few-microsecond kernels move by about that much each.
    let ratio = a.overlap_ratio.unwrap();
    assert!(close(ratio, 0.147_625, 1e-6), "{ratio}");
    assert!(close(ratio * 100.0, 14.31, 0.5));
    assert!(close(a.comm_time_us, 24_289.05, 0.01), "{}", a.comm_time_us);
    assert!(
        close(a.compute_time_us, 76_935.82, 0.01),
        "{}",
        a.compute_time_us
    );
    assert!(close(a.compute_time_us, 75_169.0, 0.025 * 75_169.0));
    assert!(
        close(a.idle_time_us, 336_419.67, 0.01),
        "{}",
        a.idle_time_us
    );
    assert!(close(a.idle_time_us, 338_781.0, 0.01 * 338_781.0));
    assert!(close(a.span_us, 435_586.0, 2.0), "{}", a.span_us);
    assert!(close(
        a.exposed_comm_us,
        a.comm_time_us * (1.0 - ratio),
        1e-6
    ));

    // The longest NCCL kernel: allreduce of 2,049,000 floats in a group of 2 (PROVENANCE.md).
    let top = &a.top_collectives;
    let allreduce = top
        .iter()
        .find(|c| c.collective == "allreduce" && c.size_bytes == Some(2_049_000 * 4));
    let allreduce = allreduce.expect("the large allreduce");
    assert_eq!(allreduce.group_size, Some(2));
    assert_eq!(allreduce.dtype.as_deref(), Some("Float"));
    let counted: usize = top
        .iter()
        .filter(|c| c.collective == "allreduce")
        .map(|c| c.count)
        .sum();
    assert_eq!(counted, 15);
    let bcast: usize = top
        .iter()
        .filter(|c| c.collective == "broadcast")
        .map(|c| c.count)
        .sum();
    assert_eq!(bcast, 6);
}

#[test]
fn sampled_ranks_match_hta() {
    let Some(dir) = data("") else { return };
    let files: Vec<PathBuf> = trace_files(&dir)
        .unwrap()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("sampled_rank"))
        .collect();
    assert_eq!(files.len(), 2);
    let traces: Vec<_> = files
        .iter()
        .map(|f| parse_file(f, &Progress::hidden()).unwrap())
        .collect();
    let expected = [
        (0u32, 11.81, 321_378.0, 106_252.0, 602usize),
        (1, 20.05, 328_671.0, 135_548.0, 577),
    ];
    for (t, (rank, pct, idle, compute, counted)) in traces.iter().zip(expected) {
        assert_eq!(t.timeline.world_size, Some(128));
        let a = overlap::analyze(&t.timeline, 99);
        assert_eq!(a.rank, rank);
        assert_eq!(a.nccl_kernels, 10);
        assert_eq!(a.gpu_events_counted, counted);
        assert!(
            close(a.overlap_ratio.unwrap() * 100.0, pct, 0.01),
            "rank {rank}: {:?}",
            a.overlap_ratio
        );
        assert!(
            close(a.idle_time_us, idle, 2.0),
            "rank {rank}: {}",
            a.idle_time_us
        );
        assert!(
            close(a.compute_time_us, compute, 2.0),
            "rank {rank}: {}",
            a.compute_time_us
        );
        assert_eq!(a.steps.len(), 2);
        // SendRecv kernels carry no message size in these traces.
        assert!(a
            .top_collectives
            .iter()
            .all(|c| c.collective == "sendrecv" && c.size_bytes.is_none()));
    }
    let ranks: Vec<_> = traces
        .iter()
        .map(|t| (t.timeline.rank.unwrap(), &t.timeline))
        .collect();
    let s = straggler::analyze(&ranks).expect("comparable ranks");
    assert_eq!(s.compared, 10);
    assert_eq!(s.ranks.len(), 2);
}

#[test]
fn truncated_gzip_trace_is_partial_not_an_error() {
    let Some(path) = data("sampled_rank-0.json.gz") else {
        return;
    };
    let bytes = std::fs::read(&path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut_rank-0.json.gz");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let t = parse_file(&path, &Progress::hidden()).unwrap();
    let msg = t.truncated.expect("marked partial");
    assert!(msg.starts_with(&path.display().to_string()), "{msg}");
    assert!(!t.timeline.events.is_empty());
    assert!(t.timeline.events.len() < 1204);
}
