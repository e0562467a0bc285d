//! The machine-readable outputs: nccl-tests' `-J FILE` document, and rccl-tests' JSON lines
//! (`--output_file`: one object per measurement, `{"name": "AllReduce", "size": 1024, "inPlace": 0,
//! "time": 19.18, "algBw": 0.053, "busBw": 0.080, "#wrong": "0", "gpus": 4, …}`).

use serde_json::Value;

use super::naming::collective_from_name;
use super::{
    nccl_version_from_code, Generation, LineWarning, NcclTest, NcclTestsError, NcclTestsFile,
    Placement, RankDevice, Row,
};

pub fn parse_json(text: &str, file: &str) -> Result<NcclTestsFile, NcclTestsError> {
    let doc: Value = serde_json::from_str(text).map_err(|e| NcclTestsError::Json {
        file: file.to_string(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let mut warnings = Vec::new();
    let mut skipped = 0;
    let program = doc
        .get("args")
        .and_then(|a| a.get(0))
        .and_then(|a| a.as_str())
        .and_then(|p| p.rsplit('/').next())
        .map(str::to_string);
    let config = doc.get("config");
    let as_u32 = |v: Option<&Value>| v.and_then(|v| v.as_u64()).map(|v| v as u32);
    let ranks = config
        .and_then(|c| c.get("devices"))
        .and_then(|d| d.as_array())
        .map(|devs| {
            devs.iter()
                .filter_map(|d| {
                    Some(RankDevice {
                        rank: d.get("rank")?.as_u64()? as u32,
                        host: d.get("hostname")?.as_str()?.to_string(),
                        device: d.get("device").and_then(|v| v.as_u64()).map(|v| v as u32),
                        bus: d.get("busId").and_then(|v| v.as_str()).map(str::to_string),
                        line: 0,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let mut rows = Vec::new();
    if let Some(results) = doc.get("results").and_then(|r| r.as_array()) {
        for (i, r) in results.iter().enumerate() {
            match json_row(r) {
                Some(row) => rows.push(row),
                None => {
                    skipped += 1;
                    warnings.push(LineWarning {
                        line: 0,
                        message: format!("results[{i}] is missing size, count or measurements"),
                    });
                }
            }
        }
    }
    let mut test = NcclTest::new(0);
    if let Some(name) = program.as_deref().and_then(collective_from_name) {
        test.collective = name.to_string();
        test.collective_source = "json";
    }
    test.generation = Generation::Json;
    test.nccl_version = doc
        .get("nccl_version")
        .and_then(|v| v.as_u64())
        .map(|c| nccl_version_from_code(c as u32));
    test.nthreads = as_u32(config.and_then(|c| c.get("nthreads")));
    test.ngpus = as_u32(config.and_then(|c| c.get("ngpus")));
    test.ranks = ranks;
    test.rows = rows;
    test.avg_busbw_gbps = doc
        .get("average_bus_bandwidth")
        .and_then(|a| a.get("bandwidth"))
        .and_then(|b| b.as_f64());
    test.out_of_bounds = doc
        .get("out_of_bounds")
        .and_then(|o| o.get("count"))
        .and_then(|c| c.as_u64());
    Ok(NcclTestsFile {
        tests: vec![test],
        warnings,
        skipped_lines: skipped,
    })
}

fn json_row(r: &Value) -> Option<Row> {
    let placement = |key: &str| -> Option<Placement> {
        let p = r.get(key)?;
        if p.is_null() {
            return None;
        }
        let time = p.get("time").or_else(|| p.get("cpu_time"))?.as_f64()?;
        Some(Placement {
            time_us: time,
            algbw_gbps: p.get("alg_bw")?.as_f64()?,
            busbw_gbps: p.get("bus_bw")?.as_f64()?,
            wrong: p.get("nwrong").and_then(|w| w.as_f64()),
        })
    };
    let out_of_place = placement("out_of_place");
    let in_place = placement("in_place");
    if out_of_place.is_none() && in_place.is_none() {
        return None;
    }
    let root = match r.get("root") {
        Some(Value::String(s)) => s.trim().parse().ok(),
        Some(v) => v.as_i64(),
        None => None,
    };
    Some(Row {
        size_bytes: r.get("size")?.as_u64()?,
        count: r.get("count")?.as_u64()?,
        dtype: r.get("type")?.as_str()?.to_string(),
        redop: r.get("redop").and_then(|v| v.as_str()).map(str::to_string),
        root,
        out_of_place,
        in_place,
        line: 0,
    })
}

/// Whether the text is rccl-tests' JSON lines: its first line alone is an object with a bus bandwidth.
pub fn is_json_lines(text: &str) -> bool {
    let Some(first) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return false;
    };
    first.starts_with('{')
        && serde_json::from_str::<Value>(first).is_ok_and(|v| v.get("busBw").is_some())
}

/// Bytes of one element of a type as nccl-tests and rccl-tests name it; `None` for a name it does not know.
fn type_bytes(dtype: &str) -> Option<u64> {
    match dtype {
        "int8" | "uint8" | "char" | "fp8_e4m3" | "fp8_e5m2" | "f8e4m3" | "f8e5m2" => Some(1),
        "half" | "float16" | "bfloat16" | "bf16" | "fp16" => Some(2),
        "float" | "float32" | "int32" | "uint32" | "int" => Some(4),
        "double" | "float64" | "int64" | "uint64" => Some(8),
        _ => None,
    }
}

/// rccl-tests' JSON lines: one test per collective `name`, one row per size with the record of `inPlace` 0
/// as its out-of-place and of 1 as its in-place measurement. A line that is not such a record is a warning.
pub fn parse_json_lines(text: &str) -> NcclTestsFile {
    let mut tests: Vec<NcclTest> = Vec::new();
    let mut warnings = Vec::new();
    for (idx, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match json_line_record(line, idx + 1) {
            Some((name, gpus, in_place, row)) => add_record(&mut tests, name, gpus, in_place, row),
            None => warnings.push(LineWarning {
                line: idx + 1,
                message: "not an rccl-tests JSON record (name, size, time, algBw, busBw)"
                    .to_string(),
            }),
        }
    }
    NcclTestsFile {
        skipped_lines: warnings.len(),
        tests,
        warnings,
    }
}

/// (collective name, `gpus`, in place, the row with its one measurement) of one record.
fn json_line_record(line: &str, lineno: usize) -> Option<(String, Option<u32>, bool, Row)> {
    let v: Value = serde_json::from_str(line).ok()?;
    let num = |k: &str| -> Option<f64> {
        match v.get(k)? {
            Value::String(s) => s.trim().parse().ok(),
            other => other.as_f64(),
        }
    };
    let size = num("size")? as u64;
    let dtype = v
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let placement = Placement {
        time_us: num("time")?,
        algbw_gbps: num("algBw")?,
        busbw_gbps: num("busBw")?,
        wrong: num("#wrong"),
    };
    let in_place = num("inPlace").is_some_and(|p| p != 0.0);
    let row = Row {
        size_bytes: size,
        count: num("count")
            .map(|c| c as u64)
            .or_else(|| type_bytes(&dtype).map(|b| size / b))
            .unwrap_or(0),
        dtype,
        redop: v.get("redop").and_then(Value::as_str).map(str::to_string),
        root: num("root").map(|r| r as i64),
        out_of_place: (!in_place).then(|| placement.clone()),
        in_place: in_place.then_some(placement),
        line: lineno,
    };
    let name = v.get("name")?.as_str()?.to_string();
    Some((name, num("gpus").map(|g| g as u32), in_place, row))
}

/// Adds a record to the test of its collective, into the row of its size.
fn add_record(
    tests: &mut Vec<NcclTest>,
    name: String,
    gpus: Option<u32>,
    in_place: bool,
    row: Row,
) {
    let collective = collective_from_name(&name).unwrap_or("unknown").to_string();
    let pos = match tests.iter().position(|t| t.collective == collective) {
        Some(pos) => pos,
        None => {
            let mut t = NcclTest::new(row.line);
            t.collective = collective;
            t.collective_source = "json";
            t.generation = Generation::JsonLines;
            tests.push(t);
            tests.len() - 1
        }
    };
    let test = &mut tests[pos];
    test.declared_ranks = test.declared_ranks.or(gpus);
    match test
        .rows
        .iter_mut()
        .find(|r| r.size_bytes == row.size_bytes)
    {
        Some(existing) if in_place => existing.in_place = row.in_place,
        Some(existing) => existing.out_of_place = row.out_of_place,
        None => test.rows.push(row),
    }
}
