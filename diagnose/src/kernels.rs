//! GPU kernel time by kernel: the NCCL kernels' time, count and share of all kernel time. Read from the
//! tables `nsys stats` prints (`cuda_gpu_kern_sum`, `nvtx_sum`; box-drawn, column or CSV format), as people
//! post them, or summed from a trace's timeline.
//!
//! A table is found by its header (`Time (%)`, `Total Time (ns)`, `Instances`, `Name` or `Range`), wherever it
//! is in the file; the columns are mapped from the header, so their order and the format do not matter. A
//! kernel is NCCL's when its name starts with `nccl` (`ncclDevKernel_AllGather_RING_LL`,
//! `ncclKernel_AllReduce_RING_LL_Sum_float`); other kernels that move data between GPUs
//! (`multimem_all_reduce_kernel`, `cross_device_reduce`) are listed apart as other communication kernels.

use std::path::Path;

use serde::Serialize;

use crate::lines::Cite;
use crate::timeline::{KernelClass, Timeline};

#[derive(Debug, thiserror::Error)]
pub enum KernelsError {
    #[error("{file}: cannot read: {error}")]
    Io { file: String, error: std::io::Error },
    #[error(
        "{file}: no `nsys stats` table found (a header with Time (%), Total Time (ns), Instances and Name); \
         first lines: {}",
        first_lines.join(" | ")
    )]
    NoTable {
        file: String,
        first_lines: Vec<String>,
    },
}

/// One kernel (or range) of a summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelRow {
    pub name: String,
    pub instances: u64,
    /// Total time, microseconds.
    pub total_time_us: f64,
    /// Share of all kernel time, a fraction (the table's `Time (%)` / 100).
    pub time_share: f64,
    /// The row's line in the file, quoted.
    pub cite: Option<Cite>,
}

/// Kernel time of one input.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelSummary {
    pub file: String,
    /// `cuda_gpu_kern_sum`, `nvtx_sum` (an `nsys stats` table) or `timeline` (summed from a trace).
    pub source: String,
    /// Kernel time of the rows read, microseconds (a table of the top kernels only covers those).
    pub kernel_time_us: f64,
    /// NCCL kernels' time, microseconds.
    pub nccl_kernel_time_us: f64,
    /// NCCL kernels' share of all kernel time: the table's own shares summed, else the ratio of the two
    /// times above.
    pub nccl_time_share: Option<f64>,
    /// NCCL's kernels, costliest first.
    pub nccl_kernels: Vec<KernelRow>,
    /// Other kernels that move data between GPUs (not NCCL's), costliest first.
    pub other_comm_kernels: Vec<KernelRow>,
    /// Rows read.
    pub rows: usize,
}

/// Names of communication kernels that are not NCCL's.
const OTHER_COMM: [&str; 4] = [
    "multimem_all_reduce",
    "cross_device_reduce",
    "all_reduce_kernel",
    "allgather",
];

/// Whether a kernel or range name is NCCL's.
pub fn is_nccl(name: &str) -> bool {
    let n = name.trim().trim_start_matches("void ");
    n.starts_with("nccl")
}

pub fn parse_file(path: &Path) -> Result<KernelSummary, KernelsError> {
    let file = path.display().to_string();
    let text = crate::input::read_text(path).map_err(|error| KernelsError::Io {
        file: file.clone(),
        error,
    })?;
    parse_str(&text, &file)
}

/// The column indexes of a summary table.
#[derive(Debug, Clone)]
struct Columns {
    share: usize,
    total: usize,
    instances: usize,
    name: usize,
    /// How cells are separated: `|`, `,` or runs of two spaces.
    sep: Sep,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Sep {
    Bar,
    Comma,
    Spaces,
}

fn cells(line: &str, sep: Sep) -> Vec<String> {
    match sep {
        Sep::Bar => line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect(),
        Sep::Comma => line
            .split(',')
            .map(|c| c.trim().trim_matches('"').to_string())
            .collect(),
        Sep::Spaces => line
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect(),
    }
}

fn header(line: &str) -> Option<(Columns, &'static str)> {
    // Older nsys prints `Time(%)`.
    let line = &line.replace("Time(%)", "Time (%)");
    if !line.contains("Time (%)") || !line.contains("Total Time") {
        return None;
    }
    let sep = if line.contains('|') {
        Sep::Bar
    } else if line.contains(',') {
        Sep::Comma
    } else {
        Sep::Spaces
    };
    let c = cells(line, sep);
    let at = |name: &str| c.iter().position(|x| x.starts_with(name));
    let (name, source) = match at("Name") {
        Some(i) => (i, "cuda_gpu_kern_sum"),
        None => (at("Range")?, "nvtx_sum"),
    };
    Some((
        Columns {
            share: at("Time (%)")?,
            total: at("Total Time")?,
            instances: at("Instances").or_else(|| at("Num Calls"))?,
            name,
            sep,
        },
        source,
    ))
}

/// Reads the first summary table of `text`.
pub fn parse_str(text: &str, file: &str) -> Result<KernelSummary, KernelsError> {
    let mut table: Option<(Columns, &'static str)> = None;
    let mut rows: Vec<KernelRow> = Vec::new();
    let mut first_lines = Vec::new();
    for line in crate::lines::lines(text) {
        let t = line.text.as_ref();
        if t.is_empty() {
            continue;
        }
        let Some((cols, _)) = &table else {
            table = header(t);
            if table.is_none() && first_lines.len() < 5 {
                first_lines.push(format!("{}: {}", line.number, line.raw.trim()));
            }
            continue;
        };
        let c = cells(t, cols.sep);
        let num = |i: usize| {
            c.get(i)
                .and_then(|v| v.replace(',', "").parse::<f64>().ok())
        };
        let (Some(share), Some(total), Some(instances)) =
            (num(cols.share), num(cols.total), num(cols.instances))
        else {
            continue;
        };
        // A C++ name holds the separator (`kernel<(int)128, (int)4>`): the last column takes the rest.
        let name = if cols.name + 1 >= c.len() && cols.sep != Sep::Bar {
            c.get(cols.name..).map(|r| r.join(",")).unwrap_or_default()
        } else {
            c.get(cols.name).cloned().unwrap_or_default()
        };
        rows.push(KernelRow {
            name,
            instances: instances as u64,
            total_time_us: total / 1e3,
            time_share: share / 100.0,
            cite: Some(line.cite(file)),
        });
    }
    let Some((_, source)) = table else {
        return Err(KernelsError::NoTable {
            file: file.to_string(),
            first_lines,
        });
    };
    let shares: f64 = rows
        .iter()
        .filter(|r| is_nccl(&r.name))
        .map(|r| r.time_share)
        .sum();
    let mut s = summarize(file, source, rows);
    s.nccl_time_share = Some(shares);
    Ok(s)
}

/// The summary of `rows`: totals, NCCL's kernels and the other communication kernels, costliest first.
fn summarize(file: &str, source: &str, mut rows: Vec<KernelRow>) -> KernelSummary {
    rows.sort_by(|a, b| b.total_time_us.total_cmp(&a.total_time_us));
    let kernel_time_us = rows.iter().map(|r| r.total_time_us).sum();
    let n = rows.len();
    let (nccl, rest): (Vec<KernelRow>, Vec<KernelRow>) =
        rows.into_iter().partition(|r| is_nccl(&r.name));
    let nccl_kernel_time_us: f64 = nccl.iter().map(|r| r.total_time_us).sum();
    let other = rest
        .into_iter()
        .filter(|r| {
            let lower = r.name.to_ascii_lowercase();
            OTHER_COMM.iter().any(|k| lower.contains(k))
        })
        .collect();
    KernelSummary {
        file: file.to_string(),
        source: source.to_string(),
        kernel_time_us,
        nccl_kernel_time_us,
        nccl_time_share: (kernel_time_us > 0.0).then(|| nccl_kernel_time_us / kernel_time_us),
        nccl_kernels: nccl,
        other_comm_kernels: other,
        rows: n,
    }
}

/// The kernel time of a trace's timeline: all kernels (not memory copies), and the communication kernels
/// per collective.
pub fn from_timeline(file: &str, tl: &Timeline) -> KernelSummary {
    let mut per: std::collections::BTreeMap<String, (u64, f64)> = Default::default();
    for e in &tl.events {
        let name = match e.class {
            KernelClass::Communication => e
                .collective
                .and_then(|i| tl.collectives.get(i as usize))
                .map(|c| format!("nccl {}", c.name))
                .unwrap_or_else(|| "nccl kernel".to_string()),
            KernelClass::Computation => "computation".to_string(),
            _ => continue,
        };
        let entry = per.entry(name).or_default();
        entry.0 += 1;
        entry.1 += e.end_us - e.start_us;
    }
    let total: f64 = per.values().map(|(_, t)| t).sum();
    let rows = per
        .into_iter()
        .map(|(name, (n, t))| KernelRow {
            name,
            instances: n,
            total_time_us: t,
            time_share: if total > 0.0 { t / total } else { 0.0 },
            cite: None,
        })
        .collect();
    summarize(file, "timeline", rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOX: &str = "\
 ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):

+----------+-----------------+-----------+----------+------+
| Time (%) | Total Time (ns) | Instances | Avg (ns) | Name |
+----------+-----------------+-----------+----------+------+
|     42.3 |     11596070409 |    469676 |  24689.5 | void at::native::elementwise_kernel<(int)128> |
|      0.3 |        76652072 |       123 | 623187.6 | void <unnamed>::multimem_all_reduce_kernel<c10::BFloat16> |
|      0.2 |        46702618 |       621 |  75205.5 | ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096>) |
";

    #[test]
    fn a_box_table() {
        let s = parse_str(BOX, "k.txt").unwrap();
        assert_eq!(s.source, "cuda_gpu_kern_sum");
        assert_eq!(s.rows, 3);
        assert_eq!(s.nccl_kernels.len(), 1);
        let k = &s.nccl_kernels[0];
        assert_eq!(k.instances, 621);
        assert!((k.total_time_us - 46702.618).abs() < 1e-6);
        assert!((k.time_share - 0.002).abs() < 1e-12);
        assert_eq!(k.cite.as_ref().unwrap().line, Some(8));
        assert_eq!(s.other_comm_kernels.len(), 1);
        assert!((s.nccl_time_share.unwrap() - 0.002).abs() < 1e-12);
    }

    #[test]
    fn csv_and_column_formats() {
        let csv = "Time (%),Total Time (ns),Instances,Avg (ns),Name\n\
                   60.0,6000,3,2000,\"ncclKernel_AllReduce_RING_LL_Sum_float\"\n\
                   40.0,4000,2,2000,\"gemm\"\n";
        let s = parse_str(csv, "k.csv").unwrap();
        assert_eq!(s.nccl_kernels[0].instances, 3);
        assert!((s.nccl_kernel_time_us - 6.0).abs() < 1e-9);
        let col = " Time (%)  Total Time (ns)  Instances  Avg (ns)  Name\n \
                   --------  ---------------  ---------  --------  ----\n     \
                   100.0             5000          5    1000.0  ncclDevKernel_SendRecv\n";
        let s = parse_str(col, "k.txt").unwrap();
        assert_eq!(s.nccl_kernels[0].name, "ncclDevKernel_SendRecv");
        let old = "Time(%)  Total Time (ns)  Instances  Average  Minimum  Maximum  Name\n\
                   -------  ---------------  ---------  -------  -------  -------  ----\n\
                      70.0             7000          7   1000.0      900     1100  ncclKernel_AllReduce_RING_LL_Sum_float\n";
        assert_eq!(
            parse_str(old, "o.txt").unwrap().nccl_kernels[0].instances,
            7
        );
        let nvtx = "Time (%),Total Time (ns),Instances,Avg (ns),Style,Range\n90.0,900,9,100,PushPop,ncclAllReduce\n";
        assert_eq!(parse_str(nvtx, "n.csv").unwrap().source, "nvtx_sum");
        assert!(matches!(
            parse_str("hello\n", "x"),
            Err(KernelsError::NoTable { .. })
        ));
    }
}
