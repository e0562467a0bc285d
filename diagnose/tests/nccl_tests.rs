//! nccl-tests parser and bandwidth-curve analysis against real outputs of three format generations and
//! synthesized files of the others (see tests/data/nccl/SYNTHESIZED.md).

use std::path::{Path, PathBuf};

use commwatch_diagnose::analysis::bandwidth::{busbw_at, summarize};
use commwatch_diagnose::nccl_tests::{parse_file, parse_str, Generation, NcclTestsError};
use commwatch_testdata::shared_testdata;

/// A real nccl-tests output, read in place from the shared test data (its first line names its origin);
/// `None` after a loud skip (a failure under CI) when it is absent.
#[track_caller]
fn data(name: &str) -> Option<PathBuf> {
    shared_testdata!(&format!("nccl/{name}"))
}

/// A file the project synthesized (`tests/data/nccl/SYNTHESIZED.md`).
fn synth(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/nccl")
        .join(name)
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn gke_allreduce_2022_generation() {
    let Some(path) = data("gke-a3-allreduce-8gpu-nvlink.txt") else {
        return;
    };
    let f = parse_file(&path).unwrap();
    assert_eq!(f.tests.len(), 1);
    assert_eq!(f.skipped_lines, 0);
    let t = &f.tests[0];
    assert_eq!(t.collective, "all_reduce_perf");
    // The file's name says all-reduce too, but a name is no evidence: the numbers tell it.
    assert_eq!(t.collective_source, "inferred");
    assert_eq!(t.generation, Generation::Wrong);
    assert_eq!(t.nccl_version.as_deref(), Some("2.22.3+cuda12.6"));
    assert_eq!(t.nranks(), Some(8));
    assert_eq!(t.nnodes(), Some(1));
    assert_eq!(t.rows.len(), 31);
    assert_eq!(t.rows[0].size_bytes, 8);
    assert_eq!(t.rows[30].size_bytes, 8_589_934_592);
    let last = &t.rows[30];
    assert_eq!(last.count, 2_147_483_648);
    assert_eq!(last.dtype, "float");
    assert_eq!(last.redop.as_deref(), Some("sum"));
    assert_eq!(last.root, Some(-1));
    let oop = last.out_of_place.as_ref().unwrap();
    assert_eq!(
        (oop.time_us, oop.algbw_gbps, oop.busbw_gbps, oop.wrong),
        (31322.0, 274.24, 479.93, Some(0.0))
    );
    let ip = last.in_place.as_ref().unwrap();
    assert_eq!(
        (ip.time_us, ip.algbw_gbps, ip.busbw_gbps),
        (31322.0, 274.25, 479.93)
    );
    assert_eq!(t.avg_busbw_gbps, Some(145.47));
    assert_eq!(t.out_of_bounds, Some(0));

    let s = summarize(t);
    assert_eq!(s.measured_rows, 31);
    assert_eq!(s.peak_busbw_gbps, Some(479.93));
    assert_eq!(s.peak_at_bytes, Some(8_589_934_592));
    // 90 % of 479.93 is 431.9: first reached at 512 MiB (433.29 in-place).
    assert_eq!(s.saturation_bytes, Some(536_870_912));
    assert_eq!(s.latency_us, Some(32.28));
    // Time stays within 1.5x of 32.28 us up to 2 MiB (43.19 us); 4 MiB takes 55.22 us.
    assert_eq!(s.latency_bound_below_bytes, Some(4_194_304));
    // nccl-tests' average is the mean of all 62 busbw values.
    assert!(
        close(s.avg_busbw_computed_gbps.unwrap(), 145.47, 0.01),
        "{:?}",
        s.avg_busbw_computed_gbps
    );
    assert_eq!(s.wrong_total, 0.0);
    assert!(close(busbw_at(t, 6_000_000_000).unwrap(), 477.83, 0.01));
}

#[test]
fn cluster_versioned_generation() {
    let Some(path) = data("nccl-tests-cluster-N10G1-allreduce.txt") else {
        return;
    };
    let f = parse_file(&path).unwrap();
    assert_eq!(f.tests.len(), 1);
    let t = &f.tests[0];
    assert_eq!(t.collective, "all_reduce_perf");
    assert_eq!(t.collective_source, "marker");
    assert_eq!(t.generation, Generation::Versioned);
    assert_eq!(t.tests_version.as_deref(), Some("2.17.8"));
    assert_eq!(t.nccl_version.as_deref(), Some("2.29.2"));
    assert_eq!(t.nranks(), Some(10));
    assert_eq!(t.nnodes(), Some(10));
    assert_eq!(t.rows.len(), 10);
    assert_eq!(t.rows[0].dtype, "double");
    assert_eq!(t.rows[9].size_bytes, 17_179_869_184);
    assert_eq!(t.rows[9].out_of_place.as_ref().unwrap().time_us, 632480.0);
    assert_eq!(t.avg_busbw_gbps, Some(47.8165));
    let s = summarize(t);
    assert_eq!(s.peak_busbw_gbps, Some(48.89));
    assert_eq!(s.saturation_bytes, Some(67_108_864));
    assert!(close(s.avg_busbw_computed_gbps.unwrap(), 47.8165, 0.005));
}

#[test]
fn mpirun_tag_output_prefixes_inside_rows() {
    let Some(path) = data("p5-efa-allreduce-mpirun-tagged.txt") else {
        return;
    };
    let f = parse_file(&path).unwrap();
    assert_eq!(f.tests.len(), 1);
    assert_eq!(f.skipped_lines, 0);
    let t = &f.tests[0];
    assert_eq!(t.rows.len(), 32);
    assert_eq!(t.rows[0].out_of_place.as_ref().unwrap().time_us, 85.70);
    assert_eq!(t.rows[0].in_place.as_ref().unwrap().time_us, 74.97);
    assert_eq!(t.rows[31].size_bytes, 17_179_869_184);
    assert_eq!(t.rows[31].in_place.as_ref().unwrap().busbw_gbps, 488.14);
    assert_eq!(t.avg_busbw_gbps, Some(124.584));
    // The header was cut off above the table in this excerpt, so no rank list: the name comes from the file.
    assert_eq!(t.collective, "all_reduce_perf");
    let s = summarize(t);
    assert_eq!(s.peak_busbw_gbps, Some(488.14));
    assert!(close(s.avg_busbw_computed_gbps.unwrap(), 124.584, 0.01));
}

#[test]
fn legacy_generation_with_error_column() {
    let Some(path) = data("superbench-nccl_allreduce.log.txt") else {
        return;
    };
    let f = parse_file(&path).unwrap();
    let t = &f.tests[0];
    assert_eq!(t.generation, Generation::Legacy);
    assert_eq!(t.collective, "all_reduce_perf");
    assert_eq!(t.nranks(), Some(8));
    assert_eq!(t.rows.len(), 34);
    assert_eq!(t.rows[0].root, None);
    assert_eq!(t.rows[0].out_of_place.as_ref().unwrap().wrong, None);
    assert_eq!(t.avg_busbw_gbps, Some(68.4048));
    let s = summarize(t);
    assert_eq!(s.measured_rows, 32);
    assert_eq!(s.peak_busbw_gbps, Some(235.26));
    assert!(close(s.avg_busbw_computed_gbps.unwrap(), 68.4048, 0.01));

    let Some(path) = data("superbench-nccl_allgather.log.txt") else {
        return;
    };
    let g = parse_file(&path).unwrap();
    let t = &g.tests[0];
    // The content does not name it (only the file's name does), and all-gather's numbers are all-to-all's.
    assert_eq!(t.collective, "unknown");
    assert_eq!(t.rows.len(), 34);
    assert_eq!(t.rows[0].redop, None);
    assert_eq!(t.avg_busbw_gbps, Some(58.2651));
    assert_eq!(summarize(t).peak_busbw_gbps, Some(230.07));
    assert!(close(
        summarize(t).avg_busbw_computed_gbps.unwrap(),
        58.2651,
        0.01
    ));
}

#[test]
fn current_generation_two_tests_with_per_iteration_columns() {
    let f = parse_file(&synth("synth-2025-allgather-reducescatter-periter.txt")).unwrap();
    assert_eq!(f.skipped_lines, 0, "{:?}", f.warnings);
    assert_eq!(f.tests.len(), 2);
    let (ag, rs) = (&f.tests[0], &f.tests[1]);
    assert_eq!(ag.collective, "all_gather_perf");
    assert_eq!(rs.collective, "reduce_scatter_perf");
    assert_eq!(ag.nccl_version.as_deref(), Some("2.27.3"));
    for t in [ag, rs] {
        assert_eq!(t.generation, Generation::Versioned);
        assert_eq!(t.rows.len(), 4);
        assert_eq!(t.nranks(), Some(2));
        assert_eq!(t.nnodes(), Some(2));
    }
    assert_eq!(ag.rows[3].out_of_place.as_ref().unwrap().busbw_gbps, 14.43);
    assert_eq!(ag.rows[3].in_place.as_ref().unwrap().time_us, 288.40);
    assert_eq!(ag.rows[1].redop.as_deref(), Some("none"));
    assert_eq!(ag.avg_busbw_gbps, Some(11.8889));
    assert_eq!(rs.rows[0].count, 131_072);
    assert!(close(
        summarize(rs).avg_busbw_computed_gbps.unwrap(),
        rs.avg_busbw_gbps.unwrap(),
        0.01
    ));
}

#[test]
fn timestamp_column() {
    let f = parse_file(&synth("synth-alltoall-timestamps.txt")).unwrap();
    assert_eq!(f.skipped_lines, 0, "{:?}", f.warnings);
    let t = &f.tests[0];
    // Nothing in the content names it (only the file's name does), and all-to-all's numbers are all-gather's.
    assert_eq!(t.collective, "unknown");
    assert_eq!(t.rows.len(), 3);
    assert_eq!(t.nranks(), Some(16));
    assert_eq!(t.nnodes(), Some(2));
    assert_eq!(t.rows[2].in_place.as_ref().unwrap().busbw_gbps, 3.17);
    assert_eq!(t.avg_busbw_gbps, Some(1.9955));
}

#[test]
fn json_of_dash_j() {
    let f = parse_file(&synth("synth-allreduce-J.json")).unwrap();
    let t = &f.tests[0];
    assert_eq!(t.generation, Generation::Json);
    assert_eq!(t.collective, "all_reduce_perf");
    assert_eq!(t.nccl_version.as_deref(), Some("2.27.3"));
    assert_eq!(t.nranks(), Some(16));
    assert_eq!(t.nnodes(), Some(2));
    assert_eq!(t.rows.len(), 4);
    assert_eq!(t.rows[3].size_bytes, 67_108_864);
    assert_eq!(t.rows[3].root, Some(-1));
    assert_eq!(t.rows[3].out_of_place.as_ref().unwrap().time_us, 1105.3);
    assert!(close(t.avg_busbw_gbps.unwrap(), 85.611215, 1e-6));
}

#[test]
fn inferred_name_from_bus_bandwidth_ratio() {
    let Some(path) = data("gke-a3-allreduce-8gpu-nvlink.txt") else {
        return;
    };
    let text = std::fs::read_to_string(&path).unwrap();
    let f = parse_str(&text, "stdin").unwrap();
    assert_eq!(f.tests[0].collective, "all_reduce_perf");
    assert_eq!(f.tests[0].collective_source, "inferred");
}

#[test]
fn truncated_and_garbled_files() {
    let Some(path) = data("gke-a3-allreduce-8gpu-nvlink.txt") else {
        return;
    };
    let text = std::fs::read_to_string(&path).unwrap();
    // Cut in the middle of the 21st row.
    let cut = &text[..text.find("     4194304       1048576").unwrap() + 40];
    let f = parse_str(cut, "cut.txt").unwrap();
    assert_eq!(f.tests[0].rows.len(), 19);
    assert_eq!(f.skipped_lines, 1);
    assert_eq!(f.warnings[0].line, 37);
    assert_eq!(f.tests[0].avg_busbw_gbps, None);

    let garbled = text.replace(
        "   524288        131072     float",
        "   524288        1x1072     float",
    );
    let f = parse_str(&garbled, "g.txt").unwrap();
    assert_eq!(f.tests[0].rows.len(), 30);
    assert_eq!(f.warnings.len(), 1);
    assert!(
        f.warnings[0].message.contains("count \"1x1072\""),
        "{:?}",
        f.warnings
    );

    assert!(matches!(
        parse_str("hello\n", "x.txt"),
        Err(NcclTestsError::NoResults { .. })
    ));
    match parse_str("{\"results\": [", "x.json") {
        Err(NcclTestsError::Json { line: 1, .. }) => {}
        other => panic!("{other:?}"),
    }
}
