//! Nsight Systems exports, built here in the shape `nsys export --type sqlite` writes (the tables and columns
//! documented in src/nsys.rs; times in nanoseconds; NVTX eventType 59 = push/pop range).

use commwatch_diagnose::analysis::overlap;
use commwatch_diagnose::nsys::{parse_file, NsysError};
use rusqlite::{params, Connection};

fn build(path: &std::path::Path) {
    let c = Connection::open(path).unwrap();
    c.execute_batch(
        "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
             contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER,
             demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
             globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
             streamId INTEGER, correlationId INTEGER, bytes INTEGER, copyKind INTEGER);
         CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
             category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
             domainId INTEGER);",
    )
    .unwrap();
    let strings = [
        (1, "ampere_sgemm_128x64_tn"),
        (
            2,
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        ),
        (3, "cudaLaunchKernel"),
        (4, "ProfilerStep#1"),
        (5, "forward"),
    ];
    for (id, v) in strings {
        c.execute("INSERT INTO StringIds VALUES (?1, ?2)", params![id, v])
            .unwrap();
    }
    // Two steps of 1 ms each. Step 1: compute 0.10-0.50 ms, all-reduce 0.40-0.80 ms (0.1 ms overlapped).
    // Step 2: compute 1.10-1.50 ms, all-reduce 1.20-1.60 ms (0.3 ms overlapped).
    let kernels = [
        (100_000, 500_000, 1, 1),
        (400_000, 800_000, 2, 2),
        (1_100_000, 1_500_000, 3, 1),
        (1_200_000, 1_600_000, 4, 2),
    ];
    for (s, e, corr, name) in kernels {
        c.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?1, ?2, 0, 1, 7, ?3, 1, ?4, ?4, NULL)",
            params![s, e, corr, name],
        )
        .unwrap();
        c.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?1, ?2, 0, 1, ?3, 3, 0)",
            params![s - 50_000, s - 40_000, corr],
        )
        .unwrap();
    }
    c.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (850000, 900000, 0, 7, 5, 4096, 1)",
        [],
    )
    .unwrap();
    c.execute(
        "INSERT INTO NVTX_EVENTS VALUES (0, 1000000, 59, NULL, 0, NULL, NULL, 1, 1, 4, 0)",
        [],
    )
    .unwrap();
    c.execute(
        "INSERT INTO NVTX_EVENTS VALUES (1000000, 2000000, 59, NULL, 0, NULL, 'ProfilerStep#2', 1, 1, NULL, 0)",
        [],
    )
    .unwrap();
    c.execute(
        "INSERT INTO NVTX_EVENTS VALUES (0, 300000, 59, NULL, 0, NULL, NULL, 1, 1, 5, 0)",
        [],
    )
    .unwrap();
}

#[test]
fn export_gives_the_same_analysis_as_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report_rank3.sqlite");
    build(&path);
    let t = parse_file(&path).unwrap();
    assert_eq!(t.rows_skipped, 0);
    let tl = &t.timeline;
    assert_eq!(tl.rank, Some(3));
    assert_eq!(tl.events.len(), 5);
    assert_eq!(tl.steps.len(), 2);
    assert_eq!(
        (tl.steps[0].step, tl.steps[0].start_us, tl.steps[0].end_us),
        (1, 0.0, 1000.0)
    );
    assert_eq!(tl.steps[1].step, 2);
    assert_eq!(tl.collectives.len(), 1);
    assert_eq!(tl.collectives[0].name, "allreduce");

    let a = overlap::analyze(tl, 0);
    assert_eq!(a.rank, 3);
    assert_eq!(a.nccl_kernels, 2);
    assert_eq!(a.steps.len(), 2);
    let (s1, s2) = (&a.steps[0], &a.steps[1]);
    assert_eq!((s1.comm_time_us, s1.compute_time_us), (400.0, 400.0));
    assert_eq!(s1.overlap_ratio, Some(0.25));
    assert_eq!(s1.exposed_comm_us, 300.0);
    // Busy 0.10-0.80 ms, then the memcpy at 0.85-0.90 ms: 50 us idle inside the step's GPU span.
    assert_eq!(s1.kernels, 3);
    assert_eq!(s1.idle_time_us, 50.0);
    assert_eq!(s2.overlap_ratio, Some(0.75));
    assert_eq!(s2.step_time_us, 1000.0);
    // Whole trace: the last step is excluded, as for Kineto traces.
    assert!(a.last_step_excluded);
    assert_eq!(a.comm_time_us, 400.0);
    assert_eq!(a.overlap_ratio, Some(0.25));
    assert_eq!(a.top_collectives[0].count, 2);
    assert_eq!(a.top_collectives[0].total_time_us, 800.0);
}

#[test]
fn not_an_export() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.sqlite");
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE x (a INTEGER);")
        .unwrap();
    assert!(matches!(
        parse_file(&path),
        Err(NsysError::NoKernels { .. })
    ));
    let garbage = dir.path().join("garbage.sqlite");
    std::fs::write(&garbage, b"this is not sqlite at all, just text").unwrap();
    let err = parse_file(&garbage).unwrap_err();
    assert!(err.to_string().contains("garbage.sqlite"), "{err}");
}
