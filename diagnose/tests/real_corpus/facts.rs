//! The facts of `expected.json` that every file of a kind has: collective, ranks, averages, rows, the largest
//! size, `#wrong`, crashes, versions and nodes for nccl-tests outputs; transport, NICs, ranks, GDR and version
//! for logs. `expected.json` states them for people (`"all_reduce_perf (not named; redop sum)"`, `">= 16
//! (ranks up to 15)"`); each check reads the statement's leading value as described on its function.

use serde_json::Value;

use super::{array, finding_text, Case, Outcome};

/// Every generic fact of one file, named `key` (or `also_nccl_log.key`).
pub fn check(case: &Case) -> Vec<(String, Outcome)> {
    let mut out = Vec::new();
    let e = &case.expected;
    if case.kind == "nccl_tests" {
        for key in [
            "collective",
            "nranks",
            "avg_bus_bandwidth_printed",
            "rows",
            "largest_size_bytes",
            "largest_size_busbw_oop_gbps",
            "wrong_nonzero",
            "crashed",
            "crash_message",
            "nccl_version",
            "nnodes",
            "incomplete",
        ] {
            if let Some(want) = e.get(key) {
                out.push((key.to_string(), test_fact(case, key, want)));
            }
        }
        if let Some(sub) = e.get("also_nccl_log") {
            for (key, want) in sub.as_object().unwrap() {
                if key != "expert_flags" {
                    let log = case.logs().first().copied().cloned().unwrap_or(Value::Null);
                    out.push((
                        format!("also_nccl_log.{key}"),
                        log_fact(case, &log, key, want),
                    ));
                }
            }
        }
    } else if case.kind == "nccl_log" {
        let log = case.logs().first().copied().cloned().unwrap_or(Value::Null);
        for (key, want) in e.as_object().unwrap() {
            if matches!(
                key.as_str(),
                "inter_node_transport"
                    | "nics"
                    | "nranks"
                    | "nnodes"
                    | "gdr"
                    | "nccl_version"
                    | "crashed"
                    | "incomplete"
            ) {
                out.push((key.clone(), log_fact(case, &log, key, want)));
            }
        }
    } else {
        out.extend(profile_facts(case));
    }
    out
}

/// A trace's or a kernel summary's facts: ranks and NCCL version of a trace, the NCCL kernels' time and the
/// total kernel time (ms, within 1 %), and per NCCL kernel its instances, total time and share.
fn profile_facts(case: &Case) -> Vec<(String, Outcome)> {
    let e = &case.expected;
    let mut out = Vec::new();
    let trace = case
        .traces()
        .first()
        .copied()
        .cloned()
        .unwrap_or(Value::Null);
    let kernels = array(&case.report["kernel_summaries"])
        .first()
        .copied()
        .cloned()
        .unwrap_or(Value::Null);
    let close = |got: &Value, want: f64, tolerance: f64| {
        got.as_f64().is_some_and(|g| (g - want).abs() <= tolerance)
    };
    if case.kind == "kineto" {
        if let Some(want) = e.get("nranks") {
            out.push((
                "nranks".to_string(),
                Outcome::check(trace["world_size"] == *want, || {
                    format!("world size {}", trace["world_size"])
                }),
            ));
        }
        if let Some(want) = e.get("nccl_version") {
            out.push((
                "nccl_version".to_string(),
                Outcome::check(trace["nccl_version"] == *want, || {
                    format!("nccl version {}", trace["nccl_version"])
                }),
            ));
        }
    }
    for (key, field) in [
        ("nccl_kernel_time_ms", "nccl_kernel_time_us"),
        ("total_kernel_time_ms", "kernel_time_us"),
    ] {
        if let Some(want) = e[key].as_f64() {
            let got = &kernels[field];
            let ms = got.as_f64().map(|us| us / 1e3);
            out.push((
                key.to_string(),
                Outcome::check(ms.is_some_and(|m| (m - want).abs() <= 0.01 * want), || {
                    format!("{field} {got}")
                }),
            ));
        }
    }
    if let Some(wanted) = e["nccl_kernels"].as_object() {
        for (name, want) in wanted {
            let got = array(&kernels["nccl_kernels"])
                .into_iter()
                .find(|k| {
                    k["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(name.as_str()))
                })
                .cloned()
                .unwrap_or(Value::Null);
            let ok = got["instances"] == want["instances"]
                && close(
                    &got["total_time_us"],
                    want["total_ms"].as_f64().unwrap() * 1e3,
                    50.0,
                )
                && close(
                    &got["time_share"],
                    want["time_pct"].as_f64().unwrap() / 100.0,
                    5e-4,
                );
            out.push((
                format!("nccl_kernels.{name}"),
                Outcome::check(ok, || format!("got {got}")),
            ));
        }
    }
    out
}

fn test_fact(case: &Case, key: &str, want: &Value) -> Outcome {
    let tests = case.tests();
    match key {
        "collective" => collective(&tests, want),
        "nranks" => ranks(&table_runs(&tests), want),
        "avg_bus_bandwidth_printed" => per_test(&tests, want, |t, w| {
            let got = &t["avg_busbw_gbps"];
            match w {
                Value::Null => got.is_null(),
                w => {
                    let w: f64 = w.as_str().unwrap().parse().unwrap();
                    got.as_f64().is_some_and(|g| (g - w).abs() < 1e-9)
                }
            }
        }),
        "rows" => rows(&tests, want),
        "largest_size_bytes" => per_test(&tests, want, |t, w| {
            largest(t)
                .map(|r| r["size_bytes"].clone())
                .unwrap_or(Value::Null)
                == *w
        }),
        "largest_size_busbw_oop_gbps" => per_test(&tests, want, |t, w| {
            let got = largest(t).and_then(|r| r["busbw_gbps"].as_f64());
            match (got, w.as_f64()) {
                (Some(g), Some(w)) => (g - w).abs() < 0.005,
                (None, None) => true,
                _ => false,
            }
        }),
        "wrong_nonzero" => wrong(case, &tests, want),
        "crashed" => {
            let failed = !case.findings_of("test_failed").is_empty()
                && tests
                    .iter()
                    .any(|t| t["complete"] == false && !t["failure"].is_null());
            Outcome::check(failed == (want == true), || {
                format!(
                    "test_failed findings {:?}, complete {:?}",
                    case.findings_of("test_failed").len(),
                    tests
                        .iter()
                        .map(|t| t["complete"].clone())
                        .collect::<Vec<_>>()
                )
            })
        }
        "crash_message" => crash_message(case, &tests, want.as_str().unwrap()),
        "nccl_version" => {
            let text = want.as_str().unwrap();
            let (nccl, tests_version) = versions(text);
            Outcome::check(
                !tests.is_empty()
                    && tests.iter().all(|t| {
                        t["nccl_version"].as_str() == nccl.as_deref()
                            && tests_version
                                .as_deref()
                                .is_none_or(|v| t["tests_version"].as_str() == Some(v))
                    }),
                || {
                    format!(
                        "want {nccl:?} / tests {tests_version:?}, got {:?}",
                        tests
                            .iter()
                            .map(|t| (t["nccl_version"].clone(), t["tests_version"].clone()))
                            .collect::<Vec<_>>()
                    )
                },
            )
        }
        "nnodes" => per_test(&tests, want, |t, w| t["nnodes"] == *w),
        "incomplete" => {
            let stopped = |t: &&Value| t["complete"] == false || t["footer"] == false;
            let finding = !case.findings_of("results_incomplete").is_empty()
                || !case.findings_of("test_failed").is_empty();
            let agree = match want {
                Value::Bool(true) => tests.iter().any(stopped) && finding,
                _ => !tests.iter().any(stopped),
            };
            Outcome::check(agree, || {
                format!(
                    "complete/footer {:?}, finding {finding}",
                    tests
                        .iter()
                        .map(|t| (t["complete"].clone(), t["footer"].clone()))
                        .collect::<Vec<_>>()
                )
            })
        }
        _ => unreachable!("{key}"),
    }
}

/// The runs a statement about the table is about: where a file holds a run with rows and runs without (a
/// failure pasted beside another run's table), the runs with rows.
fn table_runs<'v>(tests: &[&'v Value]) -> Vec<&'v Value> {
    let with_rows: Vec<&Value> = tests
        .iter()
        .copied()
        .filter(|t| !array(&t["rows"]).is_empty())
        .collect();
    if with_rows.is_empty() {
        tests.to_vec()
    } else {
        with_rows
    }
}

/// A statement per test: a list gives one value per test (in file order), anything else applies to all the
/// runs with a table ([`table_runs`]).
fn per_test(tests: &[&Value], want: &Value, ok: impl Fn(&Value, &Value) -> bool) -> Outcome {
    let tests = &if want.is_array() {
        tests.to_vec()
    } else {
        table_runs(tests)
    };
    let wants: Vec<&Value> = match want.as_array() {
        Some(list) => list.iter().collect(),
        None => vec![want; tests.len().max(1)],
    };
    let agree = tests.len() == wants.len() && tests.iter().zip(&wants).all(|(t, w)| ok(t, w));
    Outcome::check(agree, || {
        format!("{} test(s) read, expected {want}", tests.len())
    })
}

/// The out-of-place measurement at the largest size of a test (the in-place one where only it exists).
fn largest(t: &Value) -> Option<&Value> {
    let rows = array(&t["rows"]);
    let max = rows.iter().filter_map(|r| r["size_bytes"].as_u64()).max()?;
    let at: Vec<&&Value> = rows.iter().filter(|r| r["size_bytes"] == max).collect();
    at.iter()
        .find(|r| r["in_place"] == false)
        .or(at.first())
        .map(|r| **r)
}

/// The collective: the `*_perf` name the statement gives, or the one `all_reduce`/`AllReduce` stands for.
fn collective(tests: &[&Value], want: &Value) -> Outcome {
    let text = want.as_str().unwrap();
    let lower = text.to_ascii_lowercase();
    // Longer names first: `reduce` is in `all_reduce` and `reduce_scatter`.
    let names = [
        ("sendrecv", "sendrecv_perf"),
        ("all_gather", "all_gather_perf"),
        ("allgather", "all_gather_perf"),
        ("alltoall", "alltoall_perf"),
        ("all_to_all", "alltoall_perf"),
        ("reduce_scatter", "reduce_scatter_perf"),
        ("reducescatter", "reduce_scatter_perf"),
        ("all_reduce", "all_reduce_perf"),
        ("allreduce", "all_reduce_perf"),
        ("broadcast", "broadcast_perf"),
        ("hypercube", "hypercube_perf"),
        ("scatter", "scatter_perf"),
        ("gather", "gather_perf"),
        ("reduce", "reduce_perf"),
    ];
    let Some(name) = names
        .iter()
        .find(|(n, _)| lower.contains(n))
        .map(|(_, b)| b.to_string())
    else {
        return Outcome::Disagree(format!("no collective in the statement {text:?}"));
    };
    // `not named; all_reduce per redop sum and the issue`: the name comes from outside the file where the
    // numbers cannot tell it; a report that says `unknown` claims nothing.
    if text.starts_with("not named") && tests.iter().all(|t| t["collective"] == "unknown") {
        return Outcome::NotInFile(
            "the file does not name the collective and its numbers cannot tell it",
        );
    }
    Outcome::check(
        !tests.is_empty() && tests.iter().all(|t| t["collective"] == name.as_str()),
        || {
            format!(
                "want {name}, got {:?}",
                tests
                    .iter()
                    .map(|t| t["collective"].clone())
                    .collect::<Vec<_>>()
            )
        },
    )
}

/// What a rank statement asks: an exact count, a lower bound, or that no count is claimed.
#[derive(Debug)]
enum RankClaim {
    Exact(u64),
    AtLeast(u64),
    Unknown,
}

/// `16`, `"1024 (mpirun -np 1024; …)"` exact; `">= 32 (…)"`, `">=72 (…)"` a lower bound; null, `"not printed…"`,
/// `"… (not in excerpt)"` and a statement without a leading number claim nothing.
fn rank_claim(want: &Value) -> RankClaim {
    if let Some(n) = want.as_u64() {
        return RankClaim::Exact(n);
    }
    let Some(text) = want.as_str() else {
        return RankClaim::Unknown;
    };
    if text.starts_with("not printed") || text.contains("not in excerpt") {
        return RankClaim::Unknown;
    }
    let lead = |s: &str| -> Option<u64> {
        s.trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
    };
    match text.strip_prefix(">=") {
        Some(rest) => lead(rest).map_or(RankClaim::Unknown, RankClaim::AtLeast),
        None => lead(text).map_or(RankClaim::Unknown, RankClaim::Exact),
    }
}

/// Whether a report element's `nranks`/`nranks_at_least` honour the claim. An exact count also agrees when the
/// report gives it as a lower bound only (the file shows no more than that).
fn ranks_agree(claim: &RankClaim, v: &Value) -> bool {
    let exact = v["nranks"].as_u64();
    let at_least = v["nranks_at_least"].as_u64();
    match claim {
        RankClaim::Exact(n) => exact == Some(*n) || (exact.is_none() && at_least == Some(*n)),
        RankClaim::AtLeast(n) => exact.map_or(at_least.is_some_and(|m| m >= *n), |e| e >= *n),
        RankClaim::Unknown => exact.is_none(),
    }
}

fn ranks(elements: &[&Value], want: &Value) -> Outcome {
    let claim = rank_claim(want);
    Outcome::check(
        !elements.is_empty() && elements.iter().all(|v| ranks_agree(&claim, v)),
        || {
            format!(
                "want {claim:?}, got {:?}",
                elements
                    .iter()
                    .map(|v| (v["nranks"].clone(), v["nranks_at_least"].clone()))
                    .collect::<Vec<_>>()
            )
        },
    )
}

/// Rows: a count of table lines per test ([`table_rows`]), or `"5 records (3 out-of-place, 2 in-place)"` for a format of one
/// record per measurement.
fn rows(tests: &[&Value], want: &Value) -> Outcome {
    if let Some(text) = want.as_str() {
        let nums: Vec<usize> = text
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|d| d.parse().ok())
            .collect();
        let (records, oop, ip) = (nums[0], nums[1], nums[2]);
        let got: Vec<&Value> = tests.iter().flat_map(|t| array(&t["rows"])).collect();
        let count = |in_place: bool| got.iter().filter(|r| r["in_place"] == in_place).count();
        return Outcome::check(
            got.len() == records && count(false) == oop && count(true) == ip,
            || format!("{} records, {} in-place", got.len(), count(true)),
        );
    }
    per_test(tests, want, |t, w| {
        table_rows(t) == w.as_u64().unwrap() as usize
    })
}

/// Table lines read: the distinct sizes measured (a line gives one size, out-of-place and in-place).
pub fn table_rows(t: &Value) -> usize {
    let mut sizes: Vec<u64> = array(&t["rows"])
        .iter()
        .filter_map(|r| r["size_bytes"].as_u64())
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes.len()
}

/// `#wrong` nonzero (or out-of-bounds values): the test says so and a `wrong_results` finding is raised; false:
/// neither; null (no measurement): no such finding.
fn wrong(case: &Case, tests: &[&Value], want: &Value) -> Outcome {
    let counted = tests.iter().any(|t| {
        t["wrong_total"].as_f64().is_some_and(|w| w > 0.0)
            || t["out_of_bounds"].as_u64().is_some_and(|n| n > 0)
    });
    let finding = !case.findings_of("wrong_results").is_empty();
    let agree = match want {
        Value::Bool(true) => counted && finding,
        _ => !counted && !finding,
    };
    Outcome::check(agree, || {
        format!("counted in the test {counted}, wrong_results finding {finding}")
    })
}

/// The crash message's parts, each in the `test_failed` finding or the test's `failure`: the failing source
/// line (`common.cu:392`), the quoted error, an NCCL WARN it follows, the size it came after, "many hosts",
/// the launcher's exit code.
fn crash_message(case: &Case, tests: &[&Value], msg: &str) -> Outcome {
    let findings = case.findings_of("test_failed");
    let Some(failure) = tests.iter().map(|t| &t["failure"]).find(|f| !f.is_null()) else {
        return Outcome::Disagree("no test carries a failure".to_string());
    };
    let text = format!(
        "{} {}",
        findings.iter().map(|f| finding_text(f)).collect::<String>(),
        failure
    );
    let mut missing = Vec::new();
    let words: Vec<&str> = msg.split_whitespace().collect();
    for w in &words {
        if w.starts_with("common.cu:") && !text.contains(w) {
            missing.push(w.to_string());
        }
    }
    for quoted in msg.split('\'').skip(1).step_by(2) {
        if !text.contains(quoted) {
            missing.push(format!("'{quoted}'"));
        }
    }
    if let Some(pos) = msg.find("NCCL WARN ") {
        let warn = &msg[pos + "NCCL WARN ".len()..];
        let in_failure = array(&failure["nccl_warnings"])
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains(warn)));
        if !in_failure {
            missing.push(format!("WARN {warn}"));
        }
    }
    if let Some(pos) = words.iter().position(|w| *w == "GiB") {
        let gib: u64 = words[pos - 1].parse().unwrap();
        if failure["after_bytes"].as_u64() != Some(gib << 30) {
            missing.push(format!("after {gib} GiB"));
        }
    }
    if msg.contains("many hosts") && failure["hosts"].as_u64().is_none_or(|h| h < 2) {
        missing.push("many hosts".to_string());
    }
    if let Some(pos) = words.iter().position(|w| *w == "code") {
        let code: i64 = words[pos + 1].parse().unwrap();
        if failure["exit_code"].as_i64() != Some(code) {
            missing.push(format!("exit code {code}"));
        }
    }
    Outcome::check(missing.is_empty(), || {
        format!("missing {missing:?} in {text}")
    })
}

/// The NCCL version (`2.30.3+cuda13.0`, `2.28.9`) and the nccl-tests version a statement names.
fn versions(text: &str) -> (Option<String>, Option<String>) {
    let is_version = |t: &str| {
        let core = t.split('+').next().unwrap_or("");
        core.split('.').count() == 3 && core.split('.').all(|p| p.parse::<u32>().is_ok())
    };
    let clean = |t: &str| t.trim_matches(|c: char| "(),".contains(c)).to_string();
    let tokens: Vec<String> = text.split_whitespace().map(clean).collect();
    let nccl = tokens.iter().find(|t| is_version(t)).cloned();
    let tests = tokens
        .iter()
        .position(|t| t == "nccl-tests")
        .and_then(|i| tokens.get(i + 1))
        .filter(|t| is_version(t))
        .cloned();
    (nccl, tests)
}

fn log_fact(case: &Case, log: &Value, key: &str, want: &Value) -> Outcome {
    if log.is_null() {
        return Outcome::Disagree("the file was not read as an NCCL log".to_string());
    }
    match key {
        "inter_node_transport" => transport(case, log, want.as_str().unwrap()),
        "nics" => nics(
            log,
            want,
            case.expected.get("also_nccl_log").unwrap_or(&case.expected)["oob_interface"].as_str(),
        ),
        "nranks" => ranks(&[log], want),
        "nnodes" => {
            let claim = rank_claim(want);
            let exact = log["nnodes"].as_u64();
            let at_least = log["nnodes_at_least"].as_u64();
            // As for ranks: an exact count also agrees when the report gives it as a lower bound only.
            let ok = match claim {
                RankClaim::Exact(n) => exact == Some(n) || (exact.is_none() && at_least == Some(n)),
                RankClaim::AtLeast(n) => exact.or(at_least).is_some_and(|m| m >= n),
                RankClaim::Unknown => exact.is_none(),
            };
            Outcome::check(ok, || format!("nnodes {exact:?}, at least {at_least:?}"))
        }
        "crashed" => {
            let finding = !case.findings_of("test_failed").is_empty();
            let failed = !log["failure"].is_null();
            Outcome::check((finding && failed) == (want == true), || {
                format!("failure {}, test_failed finding {finding}", log["failure"])
            })
        }
        "incomplete" => {
            let stopped = log["init_complete"] == false;
            let finding = case
                .findings()
                .iter()
                .any(|f| f["kind"] == "results_incomplete" && f["subject"]["file"] == log["file"]);
            Outcome::check((stopped && finding) == (want == true), || {
                format!("init_complete {}, finding {finding}", log["init_complete"])
            })
        }
        "gdr" => {
            // The two corpora word one fact two ways: where no data crosses a network (`none …`) or the
            // network is TCP, GDR is both "not used" (false) and "not applicable" (null); the report gives null
            // for the first (as the docs say) and false for the second, and either statement agrees.
            let single = case.expected.get("also_nccl_log").unwrap_or(&case.expected)
                ["inter_node_transport"]
                .as_str()
                .is_some_and(|t| t.starts_with("none"));
            let tcp = matches!(log["network"].as_str(), Some("Socket" | "FastSocket"));
            let got = &log["gdr"];
            let ok = match want {
                Value::Bool(false) if single => got.is_null() || *got == false,
                Value::Bool(b) => *got == *b,
                _ => got.is_null() || (tcp && *got == false),
            };
            Outcome::check(ok, || format!("want {want}, got {got}"))
        }
        "nccl_version" => {
            let want = want.as_str().and_then(|t| versions(t).0);
            Outcome::check(log["version"].as_str() == want.as_deref(), || {
                format!("want {want:?}, got {}", log["version"])
            })
        }
        _ => unreachable!("{key}"),
    }
}

/// The network across nodes, by the statement's first word: `IB`, `RoCE` (NCCL's IB transport over RoCE
/// ports), `Socket`, `OFI` (Libfabric), `FastSocket`; `none` for a single-node run: the log's data never
/// crosses a network and the report says so.
fn transport(case: &Case, log: &Value, want: &str) -> Outcome {
    let first = want.split_whitespace().next().unwrap_or("");
    let network = log["network"].as_str().unwrap_or("");
    let ok = match first {
        "none" => {
            log["nnodes"] == 1
                && log["network_carries_data"] == false
                && case.serious_findings().iter().all(|f| {
                    f["subject"].get("interface").is_none() && f["subject"].get("network").is_none()
                })
        }
        "IB" => network == "IB" || network == "IBext" || network.contains("RDMA Plugin"),
        "RoCE" => {
            network == "IB"
                && array(&log["interfaces"])
                    .iter()
                    .any(|i| i["detail"] == "RoCE")
        }
        "Socket" => network == "Socket",
        "OFI" | "EFA" => network.contains("Libfabric"),
        "aws-ofi-nccl" => {
            let provider = want.split('\'').nth(1).unwrap_or("");
            network.contains("Libfabric") && log["net_provider"] == provider
        }
        "FastSocket" => network == "FastSocket",
        "TCPX" | "TCPXO" | "GPUDirect-TCPX" | "GPUDirectTCPX" => network.contains("TCPX"),
        "Slingshot" | "CXI" => network.contains("Libfabric") && log["net_provider"] == "cxi",
        other => {
            return Outcome::Disagree(format!(
                "the statement's transport {other:?} has no check yet"
            ))
        }
    };
    Outcome::check(ok, || {
        format!(
            "want {first}, got network {:?}, nnodes {}, carries data {}",
            log["network"], log["nnodes"], log["network_carries_data"]
        )
    })
}

/// NICs: plain names (`mlx5_0:1`, `mlx5_0` for its port, `eth0 (bootstrap/OOB)`) must be the interfaces the log
/// lists, all of them and no more (the `oob_interface` a statement names apart besides); descriptions stand for other facts: `NET/IB indexes 0, 2, 4, 5` and `NET devices 1 and 6` the
/// device indexes of `via NET/…/N`, `efa (provider; …)` the Libfabric provider, `EFA devices by PCI address
/// (0000:56:00.0 …)` an interface of that address, `bootstrap eth0` an interface of that name.
fn nics(log: &Value, want: &Value, oob: Option<&str>) -> Outcome {
    let names: Vec<String> = array(&log["interfaces"])
        .iter()
        .filter_map(|i| i["name"].as_str().map(str::to_string))
        .collect();
    let indexes: Vec<u64> = array(&log["net_device_indexes"])
        .iter()
        .filter_map(|i| i.as_u64())
        .collect();
    // `mlx5_0` names the device of the port `mlx5_0:1`.
    let names: Vec<String> = names
        .iter()
        .map(|n| match n.rsplit_once(':') {
            Some((dev, port)) if port.parse::<u32>().is_ok() => dev.to_string(),
            _ => n.clone(),
        })
        .collect();
    let mut plain = Vec::new();
    let mut problems = Vec::new();
    let mut all_plain = true;
    for item in array(want).iter().filter_map(|i| i.as_str()) {
        let numbers = |s: &str| -> Vec<u64> {
            s.split(|c: char| !c.is_ascii_digit())
                .filter_map(|d| d.parse().ok())
                .collect()
        };
        if item.starts_with("NET/") || item.starts_with("NET devices") {
            all_plain = false;
            let head = item.split('(').next().unwrap();
            let head = head
                .trim_start_matches("NET/IB")
                .trim_start_matches("NET/Socket");
            if numbers(head) != indexes {
                problems.push(format!("device indexes {indexes:?} for {item:?}"));
            }
        } else if let Some(rest) = item.strip_prefix("EFA devices by PCI address (") {
            all_plain = false;
            let addr = rest.split_whitespace().next().unwrap();
            if !names.iter().any(|n| n == addr) {
                problems.push(format!("no interface {addr}"));
            }
        } else if item.contains("(provider") {
            all_plain = false;
            let provider = item.split_whitespace().next().unwrap();
            if log["net_provider"] != provider {
                problems.push(format!("provider {} for {item:?}", log["net_provider"]));
            }
        } else {
            let name = item.strip_prefix("bootstrap ").unwrap_or(item);
            let name = name.split_whitespace().next().unwrap();
            let name = match name.rsplit_once(':') {
                Some((dev, port)) if port.parse::<u32>().is_ok() => dev,
                _ => name,
            };
            plain.push(name.to_string());
        }
    }
    for p in &plain {
        if !names.contains(p) {
            problems.push(format!("no interface {p}"));
        }
    }
    if all_plain {
        for n in &names {
            if !plain.contains(n) && oob != Some(n.as_str()) {
                problems.push(format!("interface {n} beyond the expected ones"));
            }
        }
    }
    Outcome::check(problems.is_empty(), || {
        format!("{problems:?} (interfaces {names:?})")
    })
}
