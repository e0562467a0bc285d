//! The parser on small hand-written outputs, one format trait each.

use super::*;

const HEADER: &str = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";

fn row(size: u64, busbw: f64) -> String {
    format!(
        "{size:>12} {:>13}     float     sum      -1    10.00  {busbw:.2}  {busbw:.2}      0    10.00  {busbw:.2}  {busbw:.2}      0\n",
        size / 4
    )
}

fn parse(text: &str) -> NcclTestsFile {
    parse_str(text, "t").unwrap()
}

#[test]
fn strips_tags_inside_rows() {
    let line = "[1,0]<stdout>:           8             2     float     sum      -1[1,0]<stdout>:    85.70    0.00    0.00      0[1,0]<stdout>:    74.97    0.00    0.00      0";
    let s = strip_mpi_tags(line);
    let tokens: Vec<&str> = s.split_whitespace().collect();
    assert_eq!(
        tokens,
        [
            "8", "2", "float", "sum", "-1", "85.70", "0.00", "0.00", "0", "74.97", "0.00", "0.00",
            "0"
        ]
    );
}

#[test]
fn keeps_brackets_that_are_not_tags() {
    assert_eq!(
        strip_mpi_tags("a [0x04] b ]<stdout>:"),
        "a [0x04] b ]<stdout>:"
    );
}

#[test]
fn version_codes() {
    assert_eq!(nccl_version_from_code(22902), "2.29.2");
    assert_eq!(nccl_version_from_code(2708), "2.7.8");
}

#[test]
fn a_short_row_is_a_warning_not_a_panic() {
    let text = format!(
        "{HEADER}           8             2     float     sum      -1    33.66    0.00    0.00      0    33.55\n{}",
        row(16, 0.0)
    );
    let f = parse(&text);
    assert_eq!(f.tests[0].rows.len(), 1);
    assert_eq!(f.skipped_lines, 1);
    assert_eq!(f.warnings[0].line, 2);
}

#[test]
fn a_paste_without_hashes() {
    // The legacy layout, every `#` lost in the paste: header, units and footers are read all the same.
    let text = "all_gather_perf -g 8 -b 4294967296 -e 4294967296 -n 100
                                             out-of-place                       in-place
       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  4294967296     134217728   float    29122  129.05  129.05  1e+00    29169  128.84  128.84  1e+00
 Out of bounds values : 2 FAILED
 Avg bus bandwidth    : 128.942
";
    let t = &parse(text).tests[0];
    assert_eq!(t.generation, Generation::Legacy);
    assert_eq!(
        (t.collective.as_str(), t.collective_source),
        ("all_gather_perf", "command_line")
    );
    assert_eq!(t.rows.len(), 1);
    assert_eq!(t.out_of_bounds, Some(2));
    assert_eq!(t.avg_busbw_gbps, Some(128.942));
    // `-g 8` alone does not say how many ranks ran.
    assert_eq!((t.nranks(), t.nranks_at_least()), (None, None));
}

#[test]
fn rccl_colon_header_and_validation() {
    let text = format!(
        "# nThread: 1 nGpus: 2 minBytes: 8 maxBytes: 16 step: 2(factor) warmupIters: 5 iters: 20 validation: 0\n\
         #   Rank  0 Pid 1 on  a device  0 [0000:c9:00.0] Device 738c\n\
         #   Rank  1 Pid 1 on  a device  1 [0000:c9:00.0] Device 738c\n{HEADER}{}{}# Avg bus bandwidth    : 0.5\n",
        row(8, 0.0),
        row(16, 1.0)
    );
    let t = &parse(&text).tests[0];
    assert_eq!((t.nthreads, t.ngpus), (Some(1), Some(2)));
    assert_eq!((t.max_bytes, t.step), (Some(16), Some((2, true))));
    assert_eq!(t.validation, Some(false));
    assert_eq!((t.nranks(), t.nnodes()), (Some(2), Some(1)));
    assert!(t.complete());
}

#[test]
fn a_partial_rank_list_is_a_lower_bound() {
    let text = format!(
        "#  Rank 71 Group  0 Pid  14840 on slurm-gb200-207-171 device  3 [0x01] NVIDIA Graphics Device\n{HEADER}{}",
        row(1 << 29, 586.06)
    );
    let t = &parse(&text).tests[0];
    assert_eq!(
        (t.nranks(), t.nranks_at_least(), t.nnodes()),
        (None, Some(72), None)
    );
}

#[test]
fn the_launcher_counts_ranks_a_cut_list_does_not_show() {
    let mut text = String::from(
        "mpirun --allow-run-as-root -c 0 -np 8 -x NCCL_SOCKET_NTHREADS=2 /home/nccl-tests/build/all_reduce_perf -g 1\n\
         # nThread 1 nGpus 1 minBytes 1073741824 maxBytes 34359738368 step: 2(factor) validation: 1\n",
    );
    for r in 0..2 {
        text.push_str(&format!(
            "#  Rank {r} Group  0 Pid 1 on h{r} device  0 [0x01] H100\n"
        ));
    }
    text.push_str(HEADER);
    text.push_str(&row(1 << 30, 110.0));
    let t = &parse(&text).tests[0];
    assert_eq!(t.launched_processes, Some(8));
    assert_eq!((t.nranks(), t.nnodes()), (Some(8), None));
    assert_eq!(t.collective_source, "command_line");
    // A longer list than the launcher's count (GPUs per process the header does not show) wins.
    let text = text.replace("-np 8", "-np 1");
    assert_eq!(parse(&text).tests[0].nranks(), Some(2));
}

#[test]
fn a_crash_before_the_first_row_is_a_failed_run() {
    let text = format!(
        "user@h:~/nccl-tests$ NCCL_DEBUG=INFO ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 2
# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#  Rank  0 Group  0 Pid   4766 on   GENOA-06 device  0 [0x21] NVIDIA GeForce RTX 5090
#  Rank  1 Group  0 Pid   4766 on   GENOA-06 device  1 [0x61] NVIDIA GeForce RTX 5090
GENOA-06:4766:4766 [0] NCCL INFO NCCL version 2.25.1+cuda12.8
{HEADER}
GENOA-06:4766:4781 [1] graph/search.cc:1135 NCCL WARN Could not find a path for pattern 4
GENOA-06:4766:4766 [1] enqueue.cc:1500 NCCL WARN Cuda failure 1 'invalid argument'
GENOA-06:4766:4766 [1] NCCL INFO group.cc:242 -> 1
GENOA-06: Test NCCL failure common.cu:392 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '
 .. GENOA-06 pid 4766: Test failure common.cu:590
"
    );
    let f = parse(&text);
    let t = &f.tests[0];
    assert!(t.rows.is_empty());
    assert_eq!(
        (t.collective.as_str(), t.nranks()),
        ("all_reduce_perf", Some(2))
    );
    assert_eq!(t.nccl_version.as_deref(), Some("2.25.1+cuda12.8"));
    let failure = t.failure.as_ref().unwrap();
    assert_eq!(
        failure.message,
        "Test NCCL failure common.cu:392 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '"
    );
    assert_eq!(
        (failure.line, failure.hosts, failure.after_bytes),
        (11, 1, None)
    );
    assert_eq!(
        failure.nccl_warnings,
        vec![
            "Could not find a path for pattern 4".to_string(),
            "Cuda failure 1 'invalid argument'".to_string()
        ]
    );
    assert!(!t.complete());
    // Without the failure line, a header alone is no result.
    let cut = &text[..text.find("GENOA-06: Test").unwrap()];
    assert!(matches!(
        parse_str(cut, "t"),
        Err(NcclTestsError::NoResults { .. })
    ));
}

#[test]
fn a_crash_midway_keeps_the_rows_and_marks_the_run_incomplete() {
    let text = format!(
        "# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 34359738368 step: 2(factor) validation: 1
# Reducing maxBytes to 27951912277 due to memory limitation
{HEADER}{}{}HCA-128: Test NCCL failure common.cu:1204 'unhandled cuda error'
 .. HCA-128 pid 757466: Test failure common.cu:915
HCA-108: Test NCCL failure common.cu:1204 'unhandled cuda error'
--------------------------------------------------------------------------
  Process name: [[44912,1],251]
  Exit code:    3
",
        row(8 << 30, 364.57),
        row(16 << 30, 367.29)
    );
    let t = &parse(&text).tests[0];
    assert_eq!(t.rows.len(), 2);
    assert_eq!(t.max_bytes, Some(27_951_912_277));
    let failure = t.failure.as_ref().unwrap();
    assert_eq!(
        (failure.hosts, failure.after_bytes, failure.exit_code),
        (2, Some(16 << 30), Some(3))
    );
    assert!(!t.complete());
}

#[test]
fn a_table_cut_before_its_last_size_is_incomplete() {
    let header = "# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor) validation: 1\n";
    let cut = format!("{header}{HEADER}{}{}", row(8, 0.0), row(16, 0.0));
    let t = &parse(&cut).tests[0];
    assert!(t.cut_short() && !t.complete() && t.failure.is_none());
    let whole = format!("{cut}{}{}", row(32, 0.0), row(64, 0.0));
    assert!(parse(&whole).tests[0].complete());
    // The footer says the run ended where it meant to.
    let footed = format!("{cut}# Avg bus bandwidth    : 0\n");
    assert!(parse(&footed).tests[0].complete());
    // A step in bytes: 32 MiB + 1 MiB is past a 32 MiB maximum.
    let bytes = format!(
        "# nThread 1 nGpus 1 minBytes 33554432 maxBytes 33554432 step: 1048576(bytes)\n{HEADER}{}",
        row(32 << 20, 0.0)
    );
    assert!(parse(&bytes).tests[0].complete());
}

#[test]
fn two_runs_with_their_own_command_lines() {
    let run = |ip: &str, busbw: f64| {
        format!(
            "mpirun -np 2 \\\n  -H {ip}:1 \\\n  ./build/all_gather_perf -b 1G -e 4G -f 2 -n 50 -g 1\n\
             # nccl-tests version 2.18.3 nccl-headers=22809 nccl-library=22809\n\
             # nThread 1 nGpus 1 minBytes 1073741824 maxBytes 1073741824 step: 2(factor) validation: 1\n\
             {HEADER}{}# Avg bus bandwidth    : {busbw}\n#\n# Collective test concluded: all_gather_perf\n\n```\n",
            row(1 << 30, busbw)
        )
    };
    let text = format!(
        "{}### notes\n{}",
        run("10.0.0.1", 21.0),
        run("10.0.1.1", 2.8)
    );
    let f = parse(&text);
    assert_eq!(f.tests.len(), 2);
    for t in &f.tests {
        assert_eq!(t.launched_processes, Some(2));
        assert_eq!(t.command_binary.as_deref(), Some("all_gather_perf"));
        assert_eq!(t.tests_version.as_deref(), Some("2.18.3"));
        assert_eq!(t.nccl_version.as_deref(), Some("2.28.9"));
    }
    assert_eq!(f.tests[1].avg_busbw_gbps, Some(2.8));
}

#[test]
fn the_nccl_version_line_refines_the_version_code() {
    let text = format!(
        "# nccl-tests version 2.18.3 nccl-headers=23003 nccl-library=23003\nNCCL version 2.30.3+cuda13.0\n{HEADER}{}",
        row(8, 0.0)
    );
    assert_eq!(
        parse(&text).tests[0].nccl_version.as_deref(),
        Some("2.30.3+cuda13.0")
    );
}

#[test]
fn rccl_json_lines() {
    let text = r##"{"#wrong":"0","algBw":0.053,"busBw":0.080,"gpus":4,"inPlace":0,"name":"AllReduce","redop":"sum","size":1024,"time":19.18,"type":"float"}
{"#wrong":"0","algBw":0.051,"busBw":0.077,"gpus":4,"inPlace":1,"name":"AllReduce","redop":"sum","size":1024,"time":19.90,"type":"float"}
{"#wrong":"0","algBw":0.205,"busBw":0.307,"gpus":4,"inPlace":0,"name":"AllReduce","redop":"sum","size":4096,"time":19.96,"type":"float"}
"##;
    let f = parse(text);
    assert_eq!(f.tests.len(), 1);
    let t = &f.tests[0];
    assert_eq!(
        (t.collective.as_str(), t.collective_source, t.generation),
        ("all_reduce_perf", "json", Generation::JsonLines)
    );
    assert_eq!(t.nranks(), Some(4));
    assert_eq!(t.rows.len(), 2);
    assert_eq!(t.rows[0].count, 256);
    assert_eq!(t.rows[0].in_place.as_ref().unwrap().time_us, 19.90);
    assert_eq!(t.rows[1].out_of_place.as_ref().unwrap().busbw_gbps, 0.307);
    assert!(t.rows[1].in_place.is_none());
    assert_eq!(t.rows[0].out_of_place.as_ref().unwrap().wrong, Some(0.0));
}

#[test]
fn launcher_labels_a_continued_srun_line_and_a_concluded_marker() {
    let t = parse(
        "srun --nodes=4 --ntasks-per-node=8 --label \\
    -- all_gather_perf -b 64K -e 4G -f 2 -g 1
 0: #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
 0:        65536           512     float    none      -1    107.5    0.61    0.59      0    105.6    0.62    0.60      0
 0: # Collective test concluded: all_gather_perf
",
    );
    let r = &t.tests[0];
    assert_eq!(
        (r.collective.as_str(), r.collective_source),
        ("all_gather_perf", "marker")
    );
    assert_eq!((r.nranks(), r.nnodes()), (Some(32), Some(4)));
    assert!(r.footer);
    let concluded = parse(
        "  8589934592      67108864     float    none      -1   165769   51.82   50.20      0   164522   52.21   50.58    N/A
# Avg bus bandwidth    : 20.8042
# Collective test concluded: alltoall_perf
",
    );
    assert_eq!(concluded.tests[0].collective, "alltoall_perf");
    let mpi = parse("# Collective test starting: reduce_scatter_perf_mpi\n1048576 131072 float sum -1 2678.52 0.39 0.20 0 3748.54 0.28 0.14 0\n");
    assert_eq!(mpi.tests[0].collective, "reduce_scatter_perf");
}

#[test]
fn nccl_1_tables_and_a_rank_list_after_a_failed_run() {
    let old = parse(
        "#      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res
NCCL failure all_reduce.cu:95 'unhandled cuda error'
",
    );
    let f = old.tests[0].failure.as_ref().unwrap();
    assert_eq!(
        f.message,
        "NCCL failure all_reduce.cu:95 'unhandled cuda error'"
    );
    let two = parse(
        "c2211f46f318: Test NCCL failure common.cu:1005 'unhandled CUDA error'
#  Rank 0 Group 0 Pid 3590 on c2211f46f318 device 0 [0x16] NVIDIA GeForce RTX 4090
#  Rank 1 Group 0 Pid 3590 on c2211f46f318 device 1 [0x3c] NVIDIA GeForce RTX 4090
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
8             2     float     sum      -1    97.98    0.00    0.00      0    190.2    0.00    0.00      0
",
    );
    assert_eq!(two.tests.len(), 2);
    assert_eq!(two.tests[0].failure.as_ref().unwrap().hosts, 1);
    assert!(two.tests[0].ranks.is_empty());
    assert_eq!(
        (two.tests[1].nranks(), two.tests[1].rows.len()),
        (Some(2), 1)
    );
}
