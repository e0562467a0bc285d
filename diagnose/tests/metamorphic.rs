//! Metamorphic tests over both real corpora (`nccl/real/`, `nccl/real2/`) and the other text inputs of the
//! shared data (`nccl/*.txt`) and of this crate (`tests/data/nccl/`): every text input, transformed as
//! people's pastes transform it, must give the same facts, or the same with some unknown, never a different
//! value; and every finding must cite lines of its input that show what it claims.
//!
//! Transforms: each launcher prefix (`srun --label`'s ` 3: `, `mpirun --tag-output`'s `[1,3]<stdout>:`, a
//! `pdsh` host, a rank tag `[3]`, torchrun's `[default3]:`, `kubectl logs --prefix`, `docker compose logs`,
//! Ray's `(RayTrainWorker pid=…, ip=…)`, journald's timestamp and tag, a Markdown quote, a timestamp), CRLF line ends, ANSI colours, tabs for runs of spaces, two
//! ranks' NCCL lines interleaved, the file renamed to `input.txt`, and the file cut at a line.
//!
//! The facts compared are what a reader takes from a report: per run its collective, ranks, nodes, rows,
//! largest size and its bus bandwidth, average, wrong results, failure; per log its library, version, ranks,
//! nodes, network, interfaces, GDR, provider, failure; per kernel table NCCL's time; and the findings' kinds
//! and severities.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use commwatch_diagnose::progress::Progress;
use commwatch_diagnose::report::{render_json, Inputs, Report};
use commwatch_testdata::shared_testdata;
use serde_json::Value;

/// One corpus file: its path and how it is given (`nccl_tests`, `nccl_log`, `nsys_stats`).
struct Case {
    name: String,
    path: PathBuf,
    kind: String,
}

fn cases(dir: &Path) -> Vec<Case> {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let mut out: Vec<Case> = expected
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, e)| e["kind"] != "kineto")
        .map(|(name, e)| Case {
            name: name.clone(),
            path: dir.join(name),
            kind: e["kind"].as_str().unwrap().to_string(),
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The other text inputs of the shared data and of this crate (`nccl/*.txt`, `tests/data/nccl/*.txt`), each
/// given as an nccl-tests output (whose NCCL lines are read as a log too).
fn others(dirs: &[PathBuf]) -> Vec<Case> {
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "txt") {
                out.push(Case {
                    name: path.file_name().unwrap().to_string_lossy().into_owned(),
                    path,
                    kind: "nccl_tests".to_string(),
                });
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn corpora() -> Option<Vec<Case>> {
    let real = shared_testdata!("nccl/real")?;
    let real2 = shared_testdata!("nccl/real2")?;
    let shared = shared_testdata!("nccl")?;
    let own = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nccl");
    Some(
        cases(&real)
            .into_iter()
            .chain(cases(&real2))
            .chain(others(&[shared, own]))
            .collect(),
    )
}

fn report(path: &Path, kind: &str) -> Value {
    let mut inputs = Inputs::default();
    match kind {
        "nccl_tests" => inputs.nccl_tests.push(path.to_path_buf()),
        "nsys_stats" => inputs.nsys.push(path.to_path_buf()),
        _ => inputs.nccl_logs.push(path.to_path_buf()),
    }
    render_json(&Report::build(&inputs, &Progress::hidden()))
}

fn array(v: &Value) -> Vec<&Value> {
    v.as_array().map(|a| a.iter().collect()).unwrap_or_default()
}

/// The facts of a report, by name. Row facts are the table's: distinct sizes, the largest, its bus bandwidth.
fn facts(v: &Value) -> BTreeMap<String, Value> {
    let mut f = BTreeMap::new();
    for (i, t) in array(&v["nccl_tests"]).into_iter().enumerate() {
        let rows = array(&t["rows"]);
        let mut sizes: Vec<u64> = rows
            .iter()
            .filter_map(|r| r["size_bytes"].as_u64())
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let largest = sizes.last().copied();
        let busbw = rows
            .iter()
            .find(|r| r["size_bytes"].as_u64() == largest && r["in_place"] == false)
            .map(|r| r["busbw_gbps"].clone())
            .unwrap_or(Value::Null);
        let collective = match &t["collective"] {
            Value::String(s) if s == "unknown" => Value::Null,
            c => c.clone(),
        };
        for (k, x) in [
            ("collective", collective),
            ("nranks", t["nranks"].clone()),
            ("nnodes", t["nnodes"].clone()),
            ("rows", Value::from(sizes.len())),
            (
                "largest_bytes",
                largest.map(Value::from).unwrap_or(Value::Null),
            ),
            ("largest_busbw_gbps", busbw),
            ("avg_busbw_gbps", t["avg_busbw_gbps"].clone()),
            (
                "wrong",
                Value::from(t["wrong_total"].as_f64().unwrap_or(0.0) > 0.0),
            ),
            ("failure", t["failure"]["message"].clone()),
        ] {
            f.insert(format!("test{i}.{k}"), x);
        }
    }
    for (i, l) in array(&v["nccl_logs"]).into_iter().enumerate() {
        let mut names: Vec<&str> = array(&l["interfaces"])
            .iter()
            .filter_map(|x| x["name"].as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        for (k, x) in [
            ("library", l["library"].clone()),
            ("version", l["version"].clone()),
            ("nranks", l["nranks"].clone()),
            ("nnodes", l["nnodes"].clone()),
            ("network", l["network"].clone()),
            ("interfaces", Value::from(names)),
            ("gdr", l["gdr"].clone()),
            ("net_provider", l["net_provider"].clone()),
            ("failure", l["failure"]["message"].clone()),
        ] {
            f.insert(format!("log{i}.{k}"), x);
        }
    }
    for (i, k) in array(&v["kernel_summaries"]).into_iter().enumerate() {
        f.insert(
            format!("kernels{i}.nccl_kernel_time_us"),
            k["nccl_kernel_time_us"].clone(),
        );
    }
    // Never fewer runs, logs or tables read: a transform that made the file unreadable would pass as unknowns.
    for section in ["nccl_tests", "nccl_logs", "kernel_summaries", "inputs"] {
        f.insert(
            format!("{section}.len"),
            Value::from(array(&v[section]).len()),
        );
    }
    let status: Vec<&Value> = array(&v["inputs"]).iter().map(|i| &i["status"]).collect();
    f.insert("inputs.status".to_string(), serde_json::json!(status));
    let mut kinds: Vec<String> = array(&v["findings"])
        .iter()
        .map(|x| format!("{}:{}", x["kind"], x["severity"]))
        .collect();
    kinds.sort();
    f.insert("findings".to_string(), Value::from(kinds));
    f
}

/// Lines with their ends, as the file has them.
fn split(text: &str) -> Vec<&str> {
    text.lines().collect()
}

fn per_line(text: &str, f: impl Fn(usize, &str) -> String) -> String {
    split(text)
        .iter()
        .enumerate()
        .map(|(i, l)| f(i, l) + "\n")
        .collect()
}

/// Runs of spaces as one tab.
fn tabs(line: &str) -> String {
    let mut out = String::new();
    let mut spaces = 0;
    for c in line.chars() {
        if c == ' ' {
            spaces += 1;
            continue;
        }
        if spaces > 1 {
            out.push('\t');
        } else if spaces == 1 {
            out.push(' ');
        }
        spaces = 0;
        out.push(c);
    }
    out
}

/// A second rank's copy of every `NCCL INFO` line (the pid changed), placed after the next line: two ranks'
/// output interleaved.
fn interleave(text: &str) -> String {
    let lines = split(text);
    let mut out = String::new();
    let mut pending: Option<String> = None;
    for l in lines {
        out.push_str(l);
        out.push('\n');
        if let Some(p) = pending.take() {
            out.push_str(&p);
            out.push('\n');
        }
        if l.contains("NCCL INFO") {
            pending = Some(second_rank(l));
        }
    }
    if let Some(p) = pending {
        out.push_str(&p);
        out.push('\n');
    }
    out
}

/// `host:123:456 [0] NCCL INFO …` as another process on the same host would print it.
fn second_rank(line: &str) -> String {
    match line.split_once(" [") {
        Some((prefix, rest)) if prefix.matches(':').count() >= 2 => {
            let mut parts: Vec<String> = prefix.rsplitn(3, ':').map(str::to_string).collect();
            parts.reverse();
            if let Ok(pid) = parts[1].parse::<u64>() {
                parts[1] = (pid + 1).to_string();
            }
            format!("{} [{rest}", parts.join(":"))
        }
        _ => line.to_string(),
    }
}

/// The named transforms of a file's text.
fn transforms(text: &str) -> Vec<(&'static str, String)> {
    vec![
        ("srun label", per_line(text, |_, l| format!(" 3: {l}"))),
        (
            "mpirun tag",
            per_line(text, |_, l| format!("[1,3]<stdout>:{l}")),
        ),
        (
            "pdsh host",
            per_line(text, |_, l| format!("gpu-node-07: {l}")),
        ),
        ("rank tag", per_line(text, |_, l| format!("[3] {l}"))),
        ("torchrun", per_line(text, |_, l| format!("[default3]:{l}"))),
        (
            "kubectl --prefix",
            per_line(text, |_, l| format!("[pod/trainer-worker-1/main] {l}")),
        ),
        (
            "compose",
            per_line(text, |_, l| format!("trainer-1  | {l}")),
        ),
        (
            "timestamp",
            per_line(text, |i, l| {
                format!("2024-05-01T10:{:02}:{:02}.123Z {l}", i / 60 % 60, i % 60)
            }),
        ),
        ("CRLF", per_line(text, |_, l| format!("{l}\r"))),
        (
            "ANSI",
            per_line(text, |_, l| format!("\x1b[1;32m{l}\x1b[0m")),
        ),
        ("tabs", per_line(text, |_, l| tabs(l))),
        ("interleaved ranks", interleave(text)),
    ]
}

/// Where `got` departs from `want`: a fact with another value (an unknown where a value was is allowed).
fn departures(want: &BTreeMap<String, Value>, got: &BTreeMap<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    for (k, w) in want {
        let g = got.get(k).unwrap_or(&Value::Null);
        if g != w && !g.is_null() {
            out.push(format!("{k}: {w} became {g}"));
        }
    }
    for (k, g) in got {
        if !want.contains_key(k) && !g.is_null() {
            out.push(format!("{k}: new {g}"));
        }
    }
    out
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn prefixes_line_ends_colours_tabs_and_interleaving_keep_the_facts() {
    let Some(cases) = corpora() else {
        return;
    };
    let mut problems = Vec::new();
    for case in &cases {
        let text = String::from_utf8_lossy(&std::fs::read(&case.path).unwrap()).into_owned();
        let want = facts(&report(&case.path, &case.kind));
        for (name, changed) in transforms(&text) {
            let tmp = tempfile::tempdir().unwrap();
            let got = facts(&report(
                &write(tmp.path(), "input.txt", &changed),
                &case.kind,
            ));
            for d in departures(&want, &got) {
                problems.push(format!("{} ({name}): {d}", case.name));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_renamed_file_gives_the_same_report() {
    let Some(cases) = corpora() else {
        return;
    };
    let mut problems = Vec::new();
    for case in &cases {
        let tmp = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(&case.path).unwrap();
        let named = write(tmp.path(), &case.name, &text);
        let plain = tempfile::tempdir().unwrap();
        let renamed = write(plain.path(), "input.txt", &text);
        let (a, b) = (
            facts(&report(&named, &case.kind)),
            facts(&report(&renamed, &case.kind)),
        );
        if a != b {
            problems.push(format!("{}: {:?}", case.name, departures(&a, &b)));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A fact that a cut file may lose but never change: the collective, library, version, network, rank and
/// node counts, and every row it still has.
#[test]
fn a_file_cut_at_a_line_says_less_never_otherwise() {
    let Some(cases) = corpora() else {
        return;
    };
    let mut problems = Vec::new();
    for case in &cases {
        let text = std::fs::read_to_string(&case.path).unwrap();
        let lines = split(&text);
        if lines.len() < 4 {
            continue;
        }
        let full = report(&case.path, &case.kind);
        // A line fixed per file (a pseudo-random one: the test must be repeatable).
        let at = 1 + (case.name.len() * 7919 + lines.len() * 31) % (lines.len() - 2);
        let cut: String = lines[..at].iter().map(|l| format!("{l}\n")).collect();
        let tmp = tempfile::tempdir().unwrap();
        let part = report(&write(tmp.path(), "input.txt", &cut), &case.kind);
        let stable = [
            "collective",
            "library",
            "version",
            "network",
            "nranks",
            "nnodes",
        ];
        for (section, key_of) in [("nccl_tests", "collective"), ("nccl_logs", "version")] {
            for (i, p) in array(&part[section]).into_iter().enumerate() {
                let Some(f) = array(&full[section]).get(i).copied() else {
                    problems.push(format!(
                        "{} cut at {at}: a {section} entry the whole file has not ({})",
                        case.name, p[key_of]
                    ));
                    continue;
                };
                for k in stable {
                    let (pv, fv) = (&p[k], &f[k]);
                    if !pv.is_null() && *pv != "unknown" && pv != fv {
                        problems.push(format!(
                            "{} cut at {at}: {section}[{i}].{k} {fv} became {pv}",
                            case.name
                        ));
                    }
                }
                let full_rows = array(&f["rows"]);
                for r in array(&p["rows"]) {
                    if !full_rows.contains(&r) {
                        problems.push(format!(
                            "{} cut at {at}: a row the whole file has not: {r}",
                            case.name
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The words a finding's cited lines must hold: the interface, setting, plugin or provider it names.
fn claimed(f: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for key in ["interface", "setting", "plugin"] {
        if let Some(v) = f["subject"][key].as_str() {
            // A setting may be named by its value's line: `NCCL_P2P_LEVEL set … to LOC`.
            out.push(v.to_string());
        }
    }
    if let Some(p) = f["evidence"]["provider"].as_str() {
        out.push(p.to_string());
    }
    out
}

/// Every finding of every corpus file cites at least one line; every line it cites is the file's line of that
/// number, quoted; and the cited lines hold what the finding names. The finding kinds seen are counted, so
/// that the test covers the kinds it claims to.
#[test]
fn every_finding_cites_lines_that_show_what_it_claims() {
    let Some(cases) = corpora() else {
        return;
    };
    let mut problems = Vec::new();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for case in &cases {
        let tmp = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(&case.path).unwrap();
        let path = write(tmp.path(), "input.txt", &text);
        let lines = split(&text);
        let v = report(&path, &case.kind);
        let mut all = array(&v["findings"]);
        let conclusion = &v["conclusion"];
        for f in all.drain(..) {
            *kinds
                .entry(f["kind"].as_str().unwrap().to_string())
                .or_default() += 1;
            let cites = array(&f["cites"]);
            if cites.is_empty() {
                problems.push(format!("{}: {} cites nothing", case.name, f["kind"]));
                continue;
            }
            for c in &cites {
                if let Some(n) = c["line"].as_u64() {
                    let line = lines.get(n as usize - 1).map(|l| l.trim()).unwrap_or("");
                    let quoted = c["text"].as_str().unwrap_or("").trim_end_matches('…');
                    if !line.starts_with(quoted) || quoted.is_empty() {
                        problems.push(format!(
                            "{}: {} cites line {n} as {quoted:?}, the file has {line:?}",
                            case.name, f["kind"]
                        ));
                    }
                }
            }
            for word in claimed(f) {
                if !cites
                    .iter()
                    .any(|c| c["text"].as_str().is_some_and(|t| t.contains(&word)))
                {
                    problems.push(format!(
                        "{}: {} names {word:?}, no cited line holds it",
                        case.name, f["kind"]
                    ));
                }
            }
        }
        if !array(&v["findings"]).is_empty() && array(&conclusion["cites"]).is_empty() {
            problems.push(format!("{}: the conclusion cites nothing", case.name));
        }
    }
    println!("finding kinds seen: {kinds:?}");
    for kind in [
        "test_failed",
        "results_incomplete",
        "wrong_results",
        "possible_causes",
        "nccl_misconfiguration",
        "net_plugin_fallback",
        "ranks_share_gpu",
        "bandwidth_collapse",
        "mixed_inputs",
        "results_unvalidated",
    ] {
        if !kinds.contains_key(kind) {
            problems.push(format!(
                "no corpus file raised {kind}: the test does not cover it"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
