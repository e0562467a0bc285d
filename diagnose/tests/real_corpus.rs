//! `diagnose` on real-world inputs: two corpora of nccl-tests outputs, NCCL/RCCL debug logs, profiler traces
//! and `nsys stats` tables people posted publicly (`nccl/real/`, 36 files, and `nccl/real2/`, 25 files, of the
//! shared test data, read in place), each against its `expected.json`, the facts a careful engineer reads
//! from it.
//!
//! Every file is copied to a temporary directory as `input-NN.txt` (`input-NN.json` for a trace), so that its
//! name (which tells the case) cannot help, and given to the report as a new user would: an nccl-tests output
//! with `--nccl-tests`, a log with `--nccl-log`, a Kineto trace with `--trace`, an `nsys stats` table with
//! `--nsys`. Each fact of `expected.json` is checked against the JSON report (see `facts` for the
//! generic ones and `flags` for the flags an expert would raise); the test prints, per file, which facts agree,
//! and the total "N of M facts agree". Facts that the file itself does not show (a maintainer's diagnosis
//! later in the thread) are listed as not checkable and left out of M.
//!
//! Beyond the facts: single-node runs carry no network finding, and crashed runs carry a crash finding.

#[path = "real_corpus/facts.rs"]
mod facts;
#[path = "real_corpus/flags.rs"]
mod flags;

use std::path::{Path, PathBuf};

use commwatch_diagnose::progress::Progress;
use commwatch_diagnose::report::{render_json, Inputs, Report};
use commwatch_testdata::shared_testdata;
use serde_json::Value;

/// What one fact check found.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Agree,
    Disagree(String),
    /// The fact is not in the file (context from elsewhere); why.
    NotInFile(&'static str),
}

impl Outcome {
    /// Agree when `ok`, else disagree with the detail `why` gives.
    pub fn check(ok: bool, why: impl FnOnce() -> String) -> Outcome {
        if ok {
            Outcome::Agree
        } else {
            Outcome::Disagree(why())
        }
    }
}

/// One corpus file under its neutral name, with its expected facts and its report.
pub struct Case {
    /// The corpus name (for the printout only; the report never sees it).
    pub name: String,
    pub neutral: PathBuf,
    /// `nccl_tests`, `nccl_log`, `kineto` or `nsys_stats`.
    pub kind: String,
    pub expected: Value,
    /// The JSON report, without a link rate.
    pub report: Value,
}

impl Case {
    /// The JSON report of this input alone, with `--link-rate` (GB/s) when given.
    pub fn report_with(&self, link_rate_gbps: Option<f64>) -> Value {
        let mut inputs = Inputs {
            link_rate_gbps,
            ..Inputs::default()
        };
        match self.kind.as_str() {
            "nccl_tests" => inputs.nccl_tests.push(self.neutral.clone()),
            "kineto" => inputs.traces.push(self.neutral.clone()),
            "nsys_stats" => inputs.nsys.push(self.neutral.clone()),
            _ => inputs.nccl_logs.push(self.neutral.clone()),
        }
        render_json(&Report::build(&inputs, &Progress::hidden()))
    }

    pub fn tests(&self) -> Vec<&Value> {
        array(&self.report["nccl_tests"])
    }

    pub fn logs(&self) -> Vec<&Value> {
        array(&self.report["nccl_logs"])
    }

    pub fn traces(&self) -> Vec<&Value> {
        array(&self.report["traces"])
    }

    pub fn findings(&self) -> Vec<&Value> {
        array(&self.report["findings"])
    }

    /// Findings of this kind.
    pub fn findings_of(&self, kind: &str) -> Vec<&Value> {
        self.findings()
            .into_iter()
            .filter(|f| f["kind"] == kind)
            .collect()
    }

    /// Findings of warning or critical severity.
    pub fn serious_findings(&self) -> Vec<&Value> {
        self.findings()
            .into_iter()
            .filter(|f| f["severity"] == "warning" || f["severity"] == "critical")
            .collect()
    }
}

/// The elements of a JSON array (none for anything else).
pub fn array(v: &Value) -> Vec<&Value> {
    v.as_array().map(|a| a.iter().collect()).unwrap_or_default()
}

/// A finding's words and numbers in one string: summary, subject and evidence.
pub fn finding_text(f: &Value) -> String {
    format!("{} {} {}", f["summary"], f["subject"], f["evidence"])
}

/// A network finding: one that says something about the network carrying data.
fn is_network_finding(f: &Value) -> bool {
    let serious = f["severity"] == "warning" || f["severity"] == "critical";
    let kind = f["kind"].as_str().unwrap_or("");
    let about_network = matches!(
        kind,
        "management_network_traffic" | "link_underutilized" | "impossible_bandwidth"
    ) || f["subject"].get("interface").is_some()
        || f["subject"].get("network").is_some();
    serious && about_network
}

/// Whether expected.json says the run stayed on one node.
fn single_node(expected: &Value) -> bool {
    let sub = expected.get("also_nccl_log").unwrap_or(expected);
    let transport = sub["inter_node_transport"].as_str().unwrap_or("");
    expected["nnodes"] == 1
        || expected["nranks"] == 1
        || transport.starts_with("none")
        || expected["notes"]
            .as_str()
            .is_some_and(|n| n.contains("single-node") || n.contains("single node"))
}

fn load_cases(dir: &Path, tmp: &Path) -> Vec<Case> {
    std::fs::create_dir_all(tmp).unwrap();
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap())
            .expect("expected.json");
    let mut names: Vec<&String> = expected.as_object().unwrap().keys().collect();
    names.sort();
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let kind = expected[name]["kind"].as_str().unwrap().to_string();
            let ext = if kind == "kineto" { "json" } else { "txt" };
            let neutral = tmp.join(format!("input-{:02}.{ext}", i + 1));
            std::fs::copy(dir.join(name), &neutral).unwrap();
            let mut case = Case {
                name: name.clone(),
                neutral,
                kind,
                expected: expected[name].clone(),
                report: Value::Null,
            };
            case.report = case.report_with(None);
            case
        })
        .collect()
}

/// Checks every fact of every file of one corpus; prints each and the total, and returns the disagreements.
fn score(dir: &Path, files: usize) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let cases = load_cases(dir, tmp.path());
    assert_eq!(cases.len(), files, "the corpus holds {files} files");
    let (mut agree, mut total, mut not_in_file) = (0, 0, 0);
    let mut failures = Vec::new();
    for case in &cases {
        println!("{} ({})", case.name, case.neutral.display());
        let mut outcomes = facts::check(case);
        outcomes.extend(flags::check(case));
        for (fact, outcome) in outcomes {
            match &outcome {
                Outcome::Agree => {
                    agree += 1;
                    total += 1;
                    println!("  agree     {fact}");
                }
                Outcome::Disagree(why) => {
                    total += 1;
                    println!("  DISAGREE  {fact}: {why}");
                    failures.push(format!("{}: {fact}: {why}", case.name));
                }
                Outcome::NotInFile(why) => {
                    not_in_file += 1;
                    println!("  n/a       {fact}: {why}");
                }
            }
        }
    }
    println!("{agree} of {total} facts agree ({not_in_file} not checkable from the file)");
    failures
}

#[test]
fn every_fact_of_the_real_corpus() {
    let Some(dir) = shared_testdata!("nccl/real") else {
        return;
    };
    let failures = score(&dir, 36);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_fact_of_the_second_real_corpus() {
    let Some(dir) = shared_testdata!("nccl/real2") else {
        return;
    };
    let failures = score(&dir, 25);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn single_node_runs_make_no_network_claim_and_crashes_are_findings() {
    let (Some(real), Some(real2)) = (
        shared_testdata!("nccl/real"),
        shared_testdata!("nccl/real2"),
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    let cases = load_cases(&real, &tmp.path().join("real"))
        .into_iter()
        .chain(load_cases(&real2, &tmp.path().join("real2")));
    for case in cases {
        if single_node(&case.expected) {
            let claims: Vec<String> = case
                .findings()
                .into_iter()
                .filter(|f| is_network_finding(f))
                .map(|f| f["summary"].to_string())
                .collect();
            if !claims.is_empty() {
                problems.push(format!(
                    "{}: single-node run with network findings {claims:?}",
                    case.name
                ));
            }
        }
        if case.expected["crashed"] == true && case.findings_of("test_failed").is_empty() {
            problems.push(format!(
                "{}: crashed run without a crash finding",
                case.name
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
