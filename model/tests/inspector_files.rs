//! The synthetic Inspector dump files (tests/data/inspector, see its README) parse as documented: every
//! record, the truncated line, the unknown version and the unknown field each counted.

use std::path::PathBuf;

use commwatch_model::inspector::{parse_line, CollectiveRecord, LineCounts};

fn read_all() -> (Vec<CollectiveRecord>, LineCounts) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/inspector");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixture directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().contains(".log"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 8, "four files and their rotated parts");
    let mut counts = LineCounts::default();
    let mut records = Vec::new();
    for path in names {
        let text = std::fs::read_to_string(&path).expect("readable");
        for line in text.lines() {
            records.extend(counts.count(parse_line(line)));
        }
    }
    (records, counts)
}

#[test]
fn fixture_files_give_every_record_and_count_every_drop() {
    let (records, counts) = read_all();
    assert_eq!(counts.records, 32);
    assert_eq!(counts.malformed, 1, "the truncated last line");
    assert_eq!(counts.unknown_version, 1);
    assert_eq!(counts.unknown_fields, 1);
    assert_eq!(records.len(), 32);
}

#[test]
fn fixture_ranks_align_on_communicator_and_sequence() {
    let (records, _) = read_all();
    let world: Vec<_> = records
        .iter()
        .filter(|r| r.comm_id == "0x5eed0000a11" && r.sequence == 103)
        .collect();
    let mut ranks: Vec<u32> = world.iter().map(|r| r.rank).collect();
    ranks.sort();
    assert_eq!(ranks, vec![0, 1, 2, 3]);
    let slowest = world
        .iter()
        .min_by(|a, b| {
            a.bus_bandwidth_bytes_per_second
                .total_cmp(&b.bus_bandwidth_bytes_per_second)
        })
        .expect("four ranks");
    assert_eq!(slowest.rank, 3);
    assert_eq!(slowest.size_bytes, 220_000_000);
    assert!((slowest.bus_bandwidth_bytes_per_second - 9.3e9).abs() < 1e3);
    let verbose = records
        .iter()
        .find(|r| r.pid == 1002)
        .expect("verbose rank");
    assert_eq!(verbose.timing_source.as_deref(), Some("kernel_gpu"));
}
