//! The four-step report: golden text, JSON contract keys, findings and the key judgment.

use std::path::{Path, PathBuf};

use commwatch_diagnose::progress::Progress;
use commwatch_diagnose::report::{html, render_json, render_text, Inputs, Report};
use commwatch_diagnose::{run, DiagnoseArgs, DiagnoseError, Format, EXIT_INPUT_ERRORS};
use commwatch_testdata::shared_testdata;

/// The project's own inputs (the synthesized nccl-tests files). Relative to the crate root (cargo runs tests
/// there) so a report naming them does not depend on the checkout.
fn rel(p: &str) -> PathBuf {
    PathBuf::from("tests/data").join(p)
}

/// Real outputs, logs and traces, read in place from the shared test data; `None` after a loud skip (a
/// failure under CI) when one is absent.
fn fixed_inputs() -> Option<Inputs> {
    let shared = |p: &str| shared_testdata!(p);
    Some(Inputs {
        nccl_tests: vec![
            shared("nccl/gke-a3-allreduce-8gpu-nvlink.txt")?,
            shared("nccl/nccl-tests-cluster-N10G1-allreduce.txt")?,
        ],
        nccl_logs: vec![shared("nccl/gke-a3-socket-fallback-rank0.txt")?],
        traces: vec![
            shared("kineto/sampled_rank-0.json.gz")?,
            shared("kineto/sampled_rank-1.json.gz")?,
        ],
        nsys: vec![],
        nccl_inspector: vec![],
        link_rate_gbps: Some(50.0),
        nics_per_node: None,
        inventory: None,
        bare_links: None,
    })
}

/// The report names its inputs by path: the shared folder's location becomes `<shared>`, so the golden text
/// does not depend on where the data lives.
fn portable(text: &str) -> Option<String> {
    let root = shared_testdata!("")?;
    Some(text.replace(&format!("{}/", root.display()), "<shared>/"))
}

#[test]
fn golden_text_report() {
    let Some(inputs) = fixed_inputs() else {
        return;
    };
    let report = Report::build(&inputs, &Progress::hidden());
    let Some(text) = portable(&render_text(&report)) else {
        return;
    };
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/report.txt");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &text).unwrap();
    }
    let expected =
        std::fs::read_to_string(&golden).expect("golden file (UPDATE_GOLDEN=1 writes it)");
    assert_eq!(text, expected);
}

#[test]
fn socket_fallback_findings_and_judgment() {
    let Some(inputs) = fixed_inputs() else {
        return;
    };
    let report = Report::build(&inputs, &Progress::hidden());
    let kinds: Vec<&str> = report.findings.iter().map(|f| f.kind).collect();
    assert!(kinds.contains(&"nccl_misconfiguration"), "{kinds:?}");
    assert!(kinds.contains(&"management_network_traffic"), "{kinds:?}");
    let mgmt = report
        .findings
        .iter()
        .find(|f| f.kind == "management_network_traffic")
        .unwrap();
    assert_eq!(
        mgmt.subject.get("interface").map(String::as_str),
        Some("eth0")
    );
    assert_eq!(
        mgmt.evidence.get("NCCL_SOCKET_IFNAME"),
        Some(&serde_json::json!("eth0"))
    );
    let fallback = report
        .findings
        .iter()
        .find(|f| f.kind == "nccl_misconfiguration")
        .unwrap();
    assert_eq!(
        fallback.evidence.get("socket_connections"),
        Some(&serde_json::json!(7))
    );
    assert_eq!(
        fallback.evidence.get("ib_no_device"),
        Some(&serde_json::json!(true))
    );
    // The 10-node baseline peaks at 48.89 GB/s against a 50 GB/s link: it meets the link (98 %), yet the log
    // shows the socket fallback; the baseline alone does not condemn the link.
    assert!(!kinds.contains(&"link_underutilized"));
    assert_eq!(report.conclusion.verdict, "not_the_link");
    assert!(!report.conclusion.confident);
}

#[test]
fn baseline_below_the_link_blames_the_link_or_binding() {
    let Some(mut inputs) = fixed_inputs() else {
        return;
    };
    inputs.link_rate_gbps = Some(100.0);
    inputs.traces.clear();
    let report = Report::build(&inputs, &Progress::hidden());
    let under = report
        .findings
        .iter()
        .find(|f| f.kind == "link_underutilized")
        .expect("finding");
    assert_eq!(
        under.evidence.get("peak_busbw_gbps"),
        Some(&serde_json::json!(48.89))
    );
    assert_eq!(report.conclusion.verdict, "link_or_binding");
    assert!(report
        .conclusion
        .summary
        .contains("the link, the NIC binding or the algorithm"));
}

#[test]
fn json_contract_keys() {
    let Some(inputs) = fixed_inputs() else {
        return;
    };
    let report = Report::build(&inputs, &Progress::hidden());
    let v = render_json(&report);
    for key in [
        "inputs",
        "nccl_tests",
        "nccl_logs",
        "traces",
        "findings",
        "conclusion",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let t = &v["nccl_tests"][0];
    assert_eq!(t["collective"], "all_reduce_perf");
    assert_eq!(t["avg_busbw_gbps"], 145.47);
    assert_eq!(t["peak_busbw_gbps"], 479.93);
    assert_eq!(t["rows"].as_array().unwrap().len(), 62);
    for key in [
        "size_bytes",
        "time_us",
        "algbw_gbps",
        "busbw_gbps",
        "in_place",
    ] {
        assert!(t["rows"][0].get(key).is_some(), "row key {key}");
    }
    assert_eq!(t["rows"][1]["in_place"], true);
    let l = &v["nccl_logs"][0];
    for key in [
        "version",
        "nranks",
        "nnodes",
        "network",
        "interfaces",
        "transports",
        "channels",
        "gdr",
    ] {
        assert!(l.get(key).is_some(), "log key {key}");
    }
    assert_eq!(l["transports"]["NET/Socket"], 7);
    assert_eq!(l["gdr"], false);
    let tr = &v["traces"][0];
    for key in [
        "rank",
        "comm_time_us",
        "compute_time_us",
        "idle_time_us",
        "overlap_ratio",
        "steps",
        "top_collectives",
    ] {
        assert!(tr.get(key).is_some(), "trace key {key}");
    }
    for key in [
        "step",
        "step_time_us",
        "comm_time_us",
        "compute_time_us",
        "overlap_ratio",
        "exposed_comm_us",
    ] {
        assert!(tr["steps"][0].get(key).is_some(), "step key {key}");
    }
    for key in ["kind", "severity", "summary", "evidence", "action"] {
        assert!(v["findings"][0].get(key).is_some(), "finding key {key}");
    }
    assert_eq!(v["inputs"][0]["kind"], "nccl_tests");
    assert_eq!(v["inputs"][0]["status"], "ok");
    assert!(v["conclusion"]["verdict"].is_string());
}

#[test]
fn bad_inputs_are_reported_and_the_rest_analysed() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.txt");
    std::fs::write(&garbage, "not a result\n").unwrap();
    let cut = dir.path().join("cut.json");
    std::fs::write(&cut, "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 1, \"dur\": 2},").unwrap();
    let Some(mut inputs) = fixed_inputs() else {
        return;
    };
    inputs.nccl_tests.push(garbage.clone());
    inputs.nccl_logs.push(dir.path().join("missing.log"));
    inputs.traces = vec![cut.clone()];
    let report = Report::build(&inputs, &Progress::hidden());
    let rec = |p: &Path| {
        report
            .inputs
            .iter()
            .find(|i| i.path == p.display().to_string())
            .unwrap()
            .clone()
    };
    assert_eq!(rec(&garbage).status, "error");
    assert!(rec(&garbage).warnings[0].contains("no nccl-tests result table"));
    assert_eq!(rec(&dir.path().join("missing.log")).status, "error");
    let c = rec(&cut);
    assert_eq!(c.status, "partial");
    assert!(c.warnings[0].contains("line 1 column"), "{:?}", c.warnings);
    assert_eq!(report.nccl_tests.len(), 2);
    assert_eq!(report.traces.len(), 1);
    assert!(report.has_input_errors());
}

#[test]
fn html_is_self_contained() {
    let Some(inputs) = fixed_inputs() else {
        return;
    };
    let report = Report::build(&inputs, &Progress::hidden());
    let page = html::render_html(&report);
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_eq!(page.matches("<svg").count(), 2);
    assert!(page.contains("link 50.0 GB/s"));
    assert!(!page.contains("<script") && !page.contains("src=\"http"));
}

#[test]
fn run_writes_the_report_and_returns_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let args = DiagnoseArgs {
        nccl_tests: vec![rel("nccl/synth-allreduce-J.json")],
        nccl_log: vec![dir.path().join("absent.log")],
        trace: vec![],
        nsys: vec![],
        nccl_inspector: vec![],
        collector: Some("http://127.0.0.1:9".to_string()),
        tls_ca: None,
        api_token_file: None,
        link_rate: None,
        nics_per_node: None,
        format: Format::Json,
        output: Some(out.clone()),
    };
    assert_eq!(run(&args).unwrap(), EXIT_INPUT_ERRORS);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(v["nccl_tests"][0]["nranks"], 16);
    // The unreachable collector is a warning in the report, not a failure.
    assert!(v["link"]["warning"]
        .as_str()
        .unwrap()
        .contains("127.0.0.1:9"));
    assert_eq!(v["conclusion"]["verdict"], "insufficient_evidence");

    let none = DiagnoseArgs {
        nccl_tests: vec![],
        nccl_log: vec![],
        ..args.clone()
    };
    assert!(matches!(run(&none), Err(DiagnoseError::NoInputs)));
    let bad_rate = DiagnoseArgs {
        link_rate: Some(-1.0),
        ..args.clone()
    };
    assert!(matches!(
        run(&bad_rate),
        Err(DiagnoseError::InvalidLinkRate(_))
    ));
    let no_nics = DiagnoseArgs {
        nics_per_node: Some(0),
        ..args
    };
    assert!(matches!(
        run(&no_nics),
        Err(DiagnoseError::InvalidNicsPerNode)
    ));
}

#[test]
fn the_json_document_has_a_schema_version_and_units_in_its_keys() {
    let Some(inputs) = fixed_inputs() else {
        return;
    };
    let v = render_json(&Report::build(&inputs, &Progress::hidden()));
    assert_eq!(v["schema_version"], 2);
    let t = &v["nccl_tests"][1];
    assert_eq!(t["complete"], true);
    assert_eq!(t["tests_version"], "2.17.8");
    // 10 ranks on 10 nodes, one NIC each (the log lists one socket interface): the ceiling is the link.
    let c = &t["fabric_comparison"];
    assert_eq!(
        (c["nics_per_node"].clone(), c["nics_source"].clone()),
        (serde_json::json!(1), serde_json::json!("log"))
    );
    assert_eq!(c["ceiling_busbw_gbps"], 50.0);
    assert_eq!(c["verdict"], "meets");
    // No latency from a run whose smallest size is 32 MiB.
    assert_eq!(t["latency_us"], serde_json::Value::Null);
}

#[test]
fn traces_of_two_jobs_are_not_compared_as_one() {
    let shared = |p: &str| shared_testdata!(p);
    let (Some(a), Some(b)) = (
        shared("kineto/nccl_data.json.gz"),
        shared("kineto/sampled_rank-0.json.gz"),
    ) else {
        return;
    };
    // Rank 0 of a 2-rank job beside rank 0 of a 128-rank job.
    let inputs = Inputs {
        traces: vec![a, b],
        ..Inputs::default()
    };
    let report = Report::build(&inputs, &Progress::hidden());
    assert!(report.straggler.is_none());
    let mixed = report
        .findings
        .iter()
        .find(|f| f.kind == "mixed_inputs")
        .expect("a mixed_inputs finding");
    assert!(
        mixed
            .summary
            .contains("world sizes 2, 128; rank 0 traced more than once"),
        "{}",
        mixed.summary
    );
    assert_eq!(report.conclusion.verdict, "mixed_inputs");
}

/// `--api-token-file` is read once and sent as a bearer token with the inventory request.
#[test]
fn the_collector_inventory_request_carries_the_api_token() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            request.extend_from_slice(&buf[..n]);
        }
        let body = "[]";
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(answer.as_bytes()).unwrap();
        String::from_utf8_lossy(&request).to_string()
    });
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let args = DiagnoseArgs {
        nccl_tests: vec![rel("nccl/synth-allreduce-J.json")],
        nccl_log: vec![],
        trace: vec![],
        nsys: vec![],
        nccl_inspector: vec![],
        collector: Some(format!("http://{addr}")),
        tls_ca: None,
        api_token_file: Some(token),
        link_rate: None,
        nics_per_node: None,
        format: Format::Json,
        output: Some(dir.path().join("r.json")),
    };
    run(&args).unwrap();
    let request = server.join().unwrap().to_ascii_lowercase();
    assert!(request.starts_with("get /api/v1/nodes"), "{request}");
    assert!(
        request.contains("authorization: bearer s3cret-token"),
        "{request}"
    );
}

/// A report on one file given as `kind`: the JSON, and the text report followed by the HTML page.
fn report_on(text: &str, kind: &str) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.txt");
    std::fs::write(&path, text).unwrap();
    let mut inputs = Inputs::default();
    match kind {
        "nccl_tests" => inputs.nccl_tests.push(path),
        _ => inputs.nccl_logs.push(path),
    }
    let r = Report::build(&inputs, &Progress::hidden());
    (render_json(&r), render_text(&r) + &html::render_html(&r))
}

#[test]
fn an_input_that_gives_nothing_is_unreadable_with_its_reason_and_first_lines() {
    let prose = "We ran the test on Friday.\n\nIt was slow, see below.\n";
    let (v, text) = report_on(prose, "nccl_tests");
    let input = &v["inputs"][0];
    assert_eq!(input["status"], "error");
    let why = input["warnings"][0].as_str().unwrap();
    assert!(why.contains("no nccl-tests result table found"), "{why}");
    assert!(
        why.contains("1: We ran the test on Friday. | 3: It was slow, see below."),
        "{why}"
    );
    assert!(text.contains("input.txt gave no results: "), "{text}");
    assert!(!text.contains("no nccl-tests results given"), "{text}");
    assert!(
        text.contains("input.txt</span> gave no results: "),
        "the HTML page says it too"
    );
    assert!(!text.contains("No nccl-tests results given"), "{text}");
    assert!(!v["conclusion"]["summary"]
        .as_str()
        .unwrap()
        .contains("most severe"));
    let (v, _) = report_on(prose, "nccl_log");
    let why = v["inputs"][0]["warnings"][0].as_str().unwrap();
    assert!(
        why.contains("no NCCL log lines found (first lines: 1: We ran the test on Friday."),
        "{why}"
    );
}

#[test]
fn a_crash_is_a_finding_first_and_cites_its_line() {
    // NCCL 1.0's tests, as pasted: the header, the rank list, the table header, the crash.
    let out = "nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n\
               #   Rank  0 on     node03 device  0 [0x00] Tesla P100-PCIE-16GB\n\
               #   Rank  1 on     node03 device  1 [0x00] Tesla P100-PCIE-16GB\n\
               #      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res\n\
               NCCL failure all_reduce.cu:95 'unhandled cuda error'\n";
    let (v, text) = report_on(out, "nccl_tests");
    let f = &v["findings"][0];
    assert_eq!(
        (f["kind"].as_str(), f["severity"].as_str()),
        (Some("test_failed"), Some("critical"))
    );
    assert_eq!(f["cites"][0]["line"], 5);
    assert_eq!(
        f["cites"][0]["text"],
        "NCCL failure all_reduce.cu:95 'unhandled cuda error'"
    );
    assert_eq!(v["nccl_tests"][0]["nranks"], 2);
    assert_eq!(v["conclusion"]["verdict"], "run_failed");
    assert!(!v["conclusion"]["cites"].as_array().unwrap().is_empty());
    assert!(
        text.contains("input.txt:5: NCCL failure all_reduce.cu:95 'unhandled cuda error'"),
        "{text}"
    );
    // The same crash in an NCCL log: an error returned up through init, after the warning that says why.
    let log =
        "h1:1:2 [0] include/socket.h:361 NCCL WARN Call to connect timeout : Connection refused\n\
               h1:1:2 [0] NCCL INFO bootstrap.cu:19 -> 2\n\
               h1:1:2 [0] NCCL INFO init.cu:420 -> 2\n";
    let (v, _) = report_on(log, "nccl_log");
    let f = &v["findings"][0];
    assert_eq!(f["kind"], "test_failed");
    assert!(f["summary"]
        .as_str()
        .unwrap()
        .contains("Connection refused"));
    assert_eq!(v["nccl_logs"][0]["failure"]["line"], 2);
}
