//! NCCL's share of GPU kernel time, from an `nsys stats` table or a trace: how much of the GPU's work is
//! communication at all. Under 5 % communication cannot be what holds the job back, and tuning NCCL will not
//! help; above a third it is worth the timeline (step 2) to see whether it overlaps computation. Said at
//! `info` with the table's lines: the share alone shows no fault.

use super::{Cite, Context, Finding, Severity};

/// Below this share of kernel time communication is no bottleneck, a fraction.
pub const SMALL_SHARE: f64 = 0.05;
/// From this share on communication is a large part of the GPU's work, a fraction.
pub const LARGE_SHARE: f64 = 1.0 / 3.0;

pub fn check(ctx: &Context) -> Vec<Finding> {
    ctx.kernels
        .iter()
        .filter_map(|k| {
            let share = k.nccl_time_share?;
            let verdict = if share < SMALL_SHARE {
                "communication is no bottleneck of this work: tuning NCCL will not speed it up"
            } else if share >= LARGE_SHARE {
                "communication is a large part of the GPU's work: see on the timeline whether it overlaps \
                 computation"
            } else {
                return None;
            };
            let mut cites: Vec<Cite> = k
                .nccl_kernels
                .iter()
                .filter_map(|r| r.cite.clone())
                .take(3)
                .collect();
            if cites.is_empty() {
                cites.push(Cite {
                    file: k.file.clone(),
                    line: None,
                    text: format!(
                        "NCCL kernels {:.1} ms of {:.1} ms kernel time ({} kernels)",
                        k.nccl_kernel_time_us / 1e3,
                        k.kernel_time_us / 1e3,
                        k.nccl_kernels.iter().map(|r| r.instances).sum::<u64>()
                    ),
                });
            }
            Some(
                Finding::new(
                    "communication_share",
                    Severity::Info,
                    format!(
                        "NCCL kernels take {:.1} % of GPU kernel time ({:.1} ms of {:.1} ms): {verdict}",
                        share * 100.0,
                        k.nccl_kernel_time_us / 1e3,
                        k.kernel_time_us / 1e3
                    ),
                    if share < SMALL_SHARE {
                        "look at the computation kernels for speed-up, not at the network"
                    } else if k.source == "timeline" {
                        "see step 2 of this report: whether the communication overlaps computation decides"
                    } else {
                        "profile a few steps with the training loop's step markers and pass the trace (--trace) to \
                         see the overlap"
                    },
                )
                .subject("file", &k.file)
                .evidence("nccl_time_share", (share * 1e4).round() / 1e4)
                .evidence("nccl_kernel_time_us", super::r2(k.nccl_kernel_time_us))
                .evidence("kernel_time_us", super::r2(k.kernel_time_us))
                .cite(&cites),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::LinkInfo;

    fn run(table: &str) -> Vec<Finding> {
        let k = crate::kernels::parse_str(table, "k.csv").unwrap();
        let kernels = [k];
        check(&Context {
            tests: &[],
            logs: &[],
            traces: &[],
            straggler: None,
            link: &LinkInfo::default(),
            kernels: &kernels,
        })
    }

    #[test]
    fn a_small_and_a_large_share_are_said_a_middle_one_is_not() {
        let small = run("Time (%),Total Time (ns),Instances,Name\n99.8,998000,10,gemm\n0.2,2000,3,ncclDevKernel_AllGather_RING_LL\n");
        assert_eq!(small.len(), 1);
        assert!(small[0].summary.contains("no bottleneck"));
        assert_eq!(small[0].cites[0].line, Some(3));
        let large = run("Time (%),Total Time (ns),Instances,Name\n60.0,6000,3,ncclKernel_SendRecv\n40.0,4000,2,gemm\n");
        assert!(large[0].summary.contains("large part"));
        let middle = run("Time (%),Total Time (ns),Instances,Name\n20.0,2000,3,ncclKernel_SendRecv\n80.0,8000,2,gemm\n");
        assert!(middle.is_empty());
    }
}
