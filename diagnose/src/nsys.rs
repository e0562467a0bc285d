//! Reader for Nsight Systems exports (`nsys export --type sqlite`).
//!
//! Tables and columns relied on (times are nanoseconds):
//! - `StringIds(id, value)`: the string table;
//! - `CUPTI_ACTIVITY_KIND_KERNEL(start, end, correlationId, demangledName → StringIds.id)` (`shortName` where
//!   an export has no `demangledName`): required;
//! - `CUPTI_ACTIVITY_KIND_MEMCPY(start, end, correlationId)`, `CUPTI_ACTIVITY_KIND_MEMSET(…)`: optional, memory
//!   activities;
//! - `CUPTI_ACTIVITY_KIND_RUNTIME(start, correlationId)`: optional, launch times (a kernel's step is the step of
//!   its launch);
//! - `NVTX_EVENTS(start, end, eventType, text, textId → StringIds.id)`: optional; push/pop (59) and start/end
//!   (60) ranges named `ProfilerStep#N`, `step N`, `iteration N` mark the steps.
//!
//! Message sizes are not in the export, so collectives are named from their kernels only.

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::timeline::{
    classify_kernel, collective_from_kernel, protocol_from_kernel, CollectiveKey, GpuEvent,
    KernelClass, StepWindow, Timeline,
};

#[derive(Debug, thiserror::Error)]
pub enum NsysError {
    #[error("{file}: cannot open as SQLite: {error}")]
    Open {
        file: String,
        error: rusqlite::Error,
    },
    #[error("{file}: no CUPTI_ACTIVITY_KIND_KERNEL table: not an nsys export, or the profile traced no CUDA")]
    NoKernels { file: String },
    #[error("{file}: reading {table}: {error}")]
    Query {
        file: String,
        table: &'static str,
        error: rusqlite::Error,
    },
}

/// One export read.
#[derive(Debug, Clone)]
pub struct NsysTrace {
    pub file: String,
    pub timeline: Timeline,
    /// Rows whose times were missing or reversed.
    pub rows_skipped: u64,
}

/// Step number from an NVTX range name, or `None` when the range is not a step.
pub fn step_from_range(text: &str) -> Option<i64> {
    let t = text.trim().to_ascii_lowercase();
    let rest = ["profilerstep#", "iteration", "iter", "step"]
        .iter()
        .find_map(|p| t.strip_prefix(p))?;
    let rest = rest.trim_start_matches([' ', '_', '#', ':', '-', '=']);
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

pub fn parse_file(path: &Path) -> Result<NsysTrace, NsysError> {
    let file = path.display().to_string();
    let conn =
        Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(|error| {
            NsysError::Open {
                file: file.clone(),
                error,
            }
        })?;
    let mut trace = read(&conn, &file)?;
    trace.timeline.rank = crate::kineto::rank_from_file_name(path);
    Ok(trace)
}

fn columns(conn: &Connection, table: &str) -> Option<Vec<String>> {
    let mut stmt = conn.prepare(&format!("PRAGMA table_info({table})")).ok()?;
    let cols: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(1))
        .ok()?
        .filter_map(Result::ok)
        .collect();
    (!cols.is_empty()).then_some(cols)
}

/// Reads an open export.
pub fn read(conn: &Connection, file: &str) -> Result<NsysTrace, NsysError> {
    let kernel_cols =
        columns(conn, "CUPTI_ACTIVITY_KIND_KERNEL").ok_or_else(|| NsysError::NoKernels {
            file: file.to_string(),
        })?;
    let name_col = if kernel_cols.iter().any(|c| c == "demangledName") {
        "demangledName"
    } else {
        "shortName"
    };
    let export = Export {
        conn,
        file,
        has_strings: columns(conn, "StringIds").is_some(),
    };
    let launches = export.launches()?;
    let mut tl = Timeline::default();
    let mut skipped = export.kernels(name_col, &launches, &mut tl)?;
    for table in ["CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"] {
        skipped += export.memory(table, &launches, &mut tl)?;
    }
    export.steps(&mut tl)?;
    Ok(NsysTrace {
        file: file.to_string(),
        timeline: tl,
        rows_skipped: skipped,
    })
}

/// Microseconds from an export's nanoseconds.
fn us(ns: i64) -> f64 {
    ns as f64 / 1e3
}

/// An open export and what every table read needs to know of it.
struct Export<'a> {
    conn: &'a Connection,
    file: &'a str,
    /// Whether names can be looked up in `StringIds`.
    has_strings: bool,
}

impl Export<'_> {
    /// The error for a failed read of `table`.
    fn query(&self, table: &'static str) -> impl Fn(rusqlite::Error) -> NsysError + '_ {
        move |error| NsysError::Query {
            file: self.file.to_string(),
            table,
            error,
        }
    }

    /// Launch time (µs) of every runtime call by correlation id; empty without the runtime table.
    fn launches(&self) -> Result<HashMap<i64, f64>, NsysError> {
        const TABLE: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
        let mut launches = HashMap::new();
        if columns(self.conn, TABLE).is_none() {
            return Ok(launches);
        }
        let mut stmt = self
            .conn
            .prepare("SELECT start, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")
            .map_err(self.query(TABLE))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, Option<i64>>(1)?))
            })
            .map_err(self.query(TABLE))?;
        for row in rows {
            if let (Some(start), Some(corr)) = row.map_err(self.query(TABLE))? {
                launches.insert(corr, us(start));
            }
        }
        Ok(launches)
    }

    /// Every kernel, named from `name_col` through the string table, as a GPU event; returns the rows skipped
    /// for a missing or reversed time.
    fn kernels(
        &self,
        name_col: &str,
        launches: &HashMap<i64, f64>,
        tl: &mut Timeline,
    ) -> Result<u64, NsysError> {
        const TABLE: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
        let sql = if self.has_strings {
            format!(
                "SELECT k.start, k.end, k.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k \
                 LEFT JOIN StringIds s ON s.id = k.{name_col}"
            )
        } else {
            "SELECT start, end, correlationId, NULL FROM CUPTI_ACTIVITY_KIND_KERNEL".to_string()
        };
        let mut stmt = self.conn.prepare(&sql).map_err(self.query(TABLE))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, Option<i64>>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                ))
            })
            .map_err(self.query(TABLE))?;
        let mut skipped = 0;
        for row in rows {
            let (start, end, corr, name) = row.map_err(self.query(TABLE))?;
            let (Some(start), Some(end)) = (start, end) else {
                skipped += 1;
                continue;
            };
            if end < start {
                skipped += 1;
                continue;
            }
            let name = name.unwrap_or_default();
            let class = classify_kernel(&name);
            let collective = (class == KernelClass::Communication).then(|| {
                tl.intern_collective(CollectiveKey {
                    name: collective_from_kernel(&name).unwrap_or_else(|| "unknown".to_string()),
                    size_bytes: None,
                    dtype: None,
                    group_size: None,
                    protocol: protocol_from_kernel(&name),
                })
            });
            tl.events.push(GpuEvent {
                start_us: us(start),
                end_us: us(end),
                class,
                launch_us: corr.and_then(|c| launches.get(&c).copied()),
                collective,
            });
        }
        Ok(skipped)
    }

    /// Every row of a memcpy or memset table as a memory activity; returns the rows skipped. Nothing when the
    /// export has no such table.
    fn memory(
        &self,
        table: &'static str,
        launches: &HashMap<i64, f64>,
        tl: &mut Timeline,
    ) -> Result<u64, NsysError> {
        if columns(self.conn, table).is_none() {
            return Ok(0);
        }
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT start, end, correlationId FROM {table}"))
            .map_err(self.query(table))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, Option<i64>>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                ))
            })
            .map_err(self.query(table))?;
        let mut skipped = 0;
        for row in rows {
            match row.map_err(self.query(table))? {
                (Some(s), Some(e), corr) if e >= s => tl.events.push(GpuEvent {
                    start_us: us(s),
                    end_us: us(e),
                    class: KernelClass::Memory,
                    launch_us: corr.and_then(|c| launches.get(&c).copied()),
                    collective: None,
                }),
                _ => skipped += 1,
            }
        }
        Ok(skipped)
    }

    /// The steps: closed NVTX push/pop and start/end ranges named as a step, in time order. Nothing when the
    /// export has no NVTX table.
    fn steps(&self, tl: &mut Timeline) -> Result<(), NsysError> {
        const TABLE: &str = "NVTX_EVENTS";
        let Some(cols) = columns(self.conn, TABLE) else {
            return Ok(());
        };
        let text_expr = if cols.iter().any(|c| c == "textId") && self.has_strings {
            "COALESCE(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId"
        } else {
            "n.text FROM NVTX_EVENTS n"
        };
        let sql = format!(
            "SELECT n.start, n.end, {text_expr} WHERE n.end IS NOT NULL AND n.eventType IN (59, 60)"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(self.query(TABLE))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, Option<i64>>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })
            .map_err(self.query(TABLE))?;
        for row in rows {
            if let (Some(s), Some(e), Some(text)) = row.map_err(self.query(TABLE))? {
                if let Some(step) = step_from_range(&text) {
                    tl.steps.push(StepWindow {
                        step,
                        start_us: us(s),
                        end_us: us(e),
                    });
                }
            }
        }
        tl.steps.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names() {
        assert_eq!(step_from_range("ProfilerStep#12"), Some(12));
        assert_eq!(step_from_range("step 3"), Some(3));
        assert_eq!(step_from_range("train_step"), None);
        assert_eq!(step_from_range("Iteration_7"), Some(7));
        assert_eq!(step_from_range("forward"), None);
        assert_eq!(step_from_range("step"), None);
    }
}
