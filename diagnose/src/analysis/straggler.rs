//! Across ranks: which rank starts the big collectives last (the others wait for it inside NCCL).
//!
//! Collectives are issued in the same order on every rank of a communicator, so the i-th communication kernel
//! of each rank is the same collective. For each of them, a rank's lateness is its start minus the earliest
//! start; the straggler is the rank with the largest mean lateness, when that lateness is material.

use serde::Serialize;

use crate::timeline::{KernelClass, Timeline};

/// A rank counts as a straggler when its mean lateness is at least this long…
pub const MIN_LATENESS_US: f64 = 50.0;
/// …and at least this share of the mean collective duration.
pub const MIN_LATENESS_SHARE: f64 = 0.1;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankLateness {
    pub rank: u32,
    pub mean_lateness_us: f64,
    /// Share of the compared collectives this rank started last.
    pub latest_share: f64,
    /// Mean duration of its communication kernels (ranks that wait for a straggler show longer ones).
    pub mean_comm_kernel_us: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StragglerAnalysis {
    /// Collectives compared (the common prefix of equal names over all ranks).
    pub compared: usize,
    pub ranks: Vec<RankLateness>,
    pub straggler: Option<u32>,
}

/// Compares ranks; `None` with fewer than two ranks, without communication kernels, or when the traces do not
/// share a clock (their time ranges do not overlap).
pub fn analyze(ranks: &[(u32, &Timeline)]) -> Option<StragglerAnalysis> {
    if ranks.len() < 2 {
        return None;
    }
    let seqs: Vec<Vec<(String, f64, f64)>> = ranks
        .iter()
        .map(|(_, tl)| {
            let mut v: Vec<(String, f64, f64)> = tl
                .events
                .iter()
                .filter(|e| e.class == KernelClass::Communication)
                .map(|e| {
                    let name = e
                        .collective
                        .and_then(|c| tl.collectives.get(c as usize))
                        .map(|k| k.name.clone())
                        .unwrap_or_default();
                    (name, e.start_us, e.end_us - e.start_us)
                })
                .collect();
            v.sort_by(|a, b| a.1.total_cmp(&b.1));
            v
        })
        .collect();
    if seqs.iter().any(|s| s.is_empty()) {
        return None;
    }
    let ranges: Vec<(f64, f64)> = seqs
        .iter()
        .map(|s| (s[0].1, s[s.len() - 1].1 + s[s.len() - 1].2))
        .collect();
    let latest_start = ranges.iter().map(|r| r.0).fold(f64::NEG_INFINITY, f64::max);
    let earliest_end = ranges.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    if latest_start > earliest_end {
        return None;
    }
    let min_len = seqs.iter().map(Vec::len).min().unwrap_or(0);
    let compared = (0..min_len)
        .take_while(|&i| seqs.iter().all(|s| s[i].0 == seqs[0][i].0))
        .count();
    if compared == 0 {
        return None;
    }
    let mut late = vec![0.0; ranks.len()];
    let mut latest = vec![0usize; ranks.len()];
    for i in 0..compared {
        let starts: Vec<f64> = seqs.iter().map(|s| s[i].1).collect();
        let min = starts.iter().copied().fold(f64::INFINITY, f64::min);
        let (arg_max, _) = starts
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .expect("at least two ranks");
        latest[arg_max] += 1;
        for (r, s) in starts.iter().enumerate() {
            late[r] += s - min;
        }
    }
    let out: Vec<RankLateness> = ranks
        .iter()
        .enumerate()
        .map(|(i, (rank, _))| RankLateness {
            rank: *rank,
            mean_lateness_us: late[i] / compared as f64,
            latest_share: latest[i] as f64 / compared as f64,
            mean_comm_kernel_us: seqs[i][..compared].iter().map(|x| x.2).sum::<f64>()
                / compared as f64,
        })
        .collect();
    let mean_dur = out.iter().map(|r| r.mean_comm_kernel_us).sum::<f64>() / out.len() as f64;
    let straggler = out
        .iter()
        .max_by(|a, b| a.mean_lateness_us.total_cmp(&b.mean_lateness_us))
        .filter(|r| {
            r.mean_lateness_us >= MIN_LATENESS_US
                && r.mean_lateness_us >= MIN_LATENESS_SHARE * mean_dur
                && r.latest_share >= 0.5
        })
        .map(|r| r.rank);
    Some(StragglerAnalysis {
        compared,
        ranks: out,
        straggler,
    })
}
