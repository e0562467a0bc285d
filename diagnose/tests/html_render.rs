//! The HTML report as a person sees it: reports of the project's own fixtures, of real captures, of every
//! nccl-tests output and NCCL log of the shared corpus (read in place) and of hostile inputs are rendered,
//! checked as markup, then loaded in headless Chromium and measured there.
//!
//! The page has no script, so a copy of it gets a probe script at its end. The probe writes what it measured
//! into the DOM: the page's scroll width, every element past the viewport's edges or its section's, every
//! chart label outside its chart or on top of another label, every box that scrolls sideways, the sections with their headings,
//! the script, image and event-handler counts. Each page is the document of its own frame (`srcdoc`) of the
//! viewport's width, so one Chromium run (`--dump-dom`) measures many pages; a script of the outer page
//! gathers the probes' results once every frame has loaded. `the_probe_sees_each_fault` checks the probe.
//!
//! Chromium is Debian's `chromium` at `/usr/bin/chromium` (or `COMMWATCH_CHROMIUM`). Without it these tests
//! fail under `CI=true` and print a loud SKIPPED line elsewhere. `COMMWATCH_HTML_SHOTS=DIR` keeps each page
//! and a full-page screenshot of it in `DIR`, to look at.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use commwatch_diagnose::collector::probes::BareLink;
use commwatch_diagnose::progress::Progress;
use commwatch_diagnose::report::html::render_html;
use commwatch_diagnose::report::{Inputs, Report};
use commwatch_testdata::shared_testdata;
use serde_json::Value;

/// The sections every report has, whatever its inputs: the conclusion, the findings, the four steps, the
/// inputs.
const SECTIONS: [&str; 7] = [
    "conclusion",
    "findings",
    "step-1",
    "step-2",
    "step-3",
    "step-4",
    "inputs",
];

/// The viewport the pages are measured in, pixels: a desktop window, and half a laptop's screen.
const WIDTH: u32 = 1280;
const NARROW: u32 = 760;

/// How long one Chromium run may take.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(90);

/// Measures the page it ends, as it is laid out when the parser reaches it (the page has no resource to
/// wait for); a label is "on top of another" when their boxes overlap by more than half a pixel each way.
const PROBE: &str = r#"<script>
(function () {
  var de = document.documentElement, vw = de.clientWidth;
  var out = {scrollWidth: de.scrollWidth, clientWidth: vw, scrollHeight: de.scrollHeight,
             overflow: [], spills: [], clipped: [], overlaps: [], sideways: [], sections: [],
             scripts: document.scripts.length, images: document.images.length,
             handlers: document.querySelectorAll('[onerror],[onload],[onclick],[onmouseover]').length,
             svgs: document.querySelectorAll('svg').length, text: document.body.innerText};
  function name(e) {
    var c = e.getAttribute('class');
    return e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (c ? '.' + c : '') + ' "' +
      (e.textContent || '').trim().slice(0, 50) + '"';
  }
  document.querySelectorAll('body *').forEach(function (e) {
    var b = e.getBoundingClientRect();
    if (b.width > 0 && (b.right > vw + 0.5 || b.left < -0.5)) {
      out.overflow.push(name(e) + ' spans ' + b.left.toFixed(1) + '..' + b.right.toFixed(1));
    }
    var sec = e.closest('section');
    if (sec && b.width > 0 && b.right > sec.getBoundingClientRect().right + 0.5) {
      out.spills.push(name(e) + ' ends at ' + b.right.toFixed(1) + ', its section at ' +
        sec.getBoundingClientRect().right.toFixed(1));
    }
    var s = getComputedStyle(e).overflowX;
    if ((s === 'auto' || s === 'scroll' || s === 'hidden') && e.scrollWidth > e.clientWidth + 1) {
      out.sideways.push(name(e) + ' ' + e.scrollWidth + ' > ' + e.clientWidth);
    }
  });
  document.querySelectorAll('svg').forEach(function (svg) {
    var sb = svg.getBoundingClientRect();
    var texts = Array.prototype.slice.call(svg.querySelectorAll('text'));
    var boxes = texts.map(function (t) { return t.getBoundingClientRect(); });
    boxes.forEach(function (b, i) {
      if (b.left < sb.left - 0.5 || b.right > sb.right + 0.5 || b.top < sb.top - 0.5 || b.bottom > sb.bottom + 0.5) {
        out.clipped.push(name(texts[i]));
      }
      for (var j = 0; j < i; j++) {
        var c = boxes[j];
        if (b.left < c.right - 0.5 && c.left < b.right - 0.5 && b.top < c.bottom - 0.5 && c.top < b.bottom - 0.5) {
          out.overlaps.push(name(texts[j]) + ' / ' + name(texts[i]));
        }
      }
    });
  });
  document.querySelectorAll('section[id]').forEach(function (s) {
    var h = s.querySelector('h2');
    out.sections.push({id: s.id, heading: h ? h.textContent : '', height: s.getBoundingClientRect().height});
  });
  var p = document.createElement('pre');
  p.id = 'commwatch-probe';
  p.textContent = JSON.stringify(out);
  document.body.appendChild(p);
})();
</script>"#;

/// Chromium, or `None` after a loud skip recorded in the run's skip log (a failure under `CI=true`). `_test`
/// names the caller; the skip names the running test itself.
fn chromium(_test: &str) -> Option<PathBuf> {
    let bin = std::env::var_os("COMMWATCH_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if bin.is_file() {
        return Some(bin);
    }
    commwatch_testdata::skip::unavailable(&format!(
        "chromium not found at {}; apt-get install chromium or set COMMWATCH_CHROMIUM",
        bin.display()
    ));
    None
}

/// Runs Chromium headless on `page` with `extra` arguments (the output mode) in a `width` × `height` window;
/// returns its standard output.
fn run_chromium(bin: &Path, page: &Path, width: u32, height: u32, extra: &[String]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let stdout_path = dir.path().join("stdout");
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg(format!("--window-size={width},{height}"))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium on {}: {status}", page.display());
            break;
        }
        if start.elapsed() > CHROMIUM_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium on {} took over {CHROMIUM_TIMEOUT:?}",
                page.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::read_to_string(stdout_path).unwrap()
}

/// What the probe measured in each of `pages` at `width` pixels.
///
/// One Chromium run measures them all: each page is the document of its own `width`-wide frame (`srcdoc`,
/// so the frame's viewport is the page's), with the probe at its end; once every frame has loaded, a script
/// of the outer page gathers what the probes wrote.
fn measure_all(bin: &Path, pages: &[&str], width: u32) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let outer = dir.path().join("pages.html");
    let mut html = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{{margin:0}}\
         iframe{{display:block;border:0;width:{width}px;height:2000px}}</style></head><body>"
    );
    for page in pages {
        let probed = page.replacen("</body>", &format!("{PROBE}</body>"), 1);
        html.push_str(&format!("<iframe srcdoc=\"{}\"></iframe>", attr(&probed)));
    }
    html.push_str(GATHER);
    html.push_str("</body></html>");
    std::fs::write(&outer, html).unwrap();
    let dom = run_chromium(
        bin,
        &outer,
        width + 40,
        2000,
        &[
            "--run-all-compositor-stages-before-draw".to_string(),
            "--virtual-time-budget=5000".to_string(),
            "--dump-dom".to_string(),
        ],
    );
    let start = dom
        .find("<pre id=\"commwatch-probes\">")
        .unwrap_or_else(|| panic!("no probe output in the DOM: {}", &dom[..dom.len().min(500)]));
    let body = &dom[start + "<pre id=\"commwatch-probes\">".len()..];
    let json = &body[..body.find("</pre>").expect("probe end")];
    let json = json
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&");
    let all: Vec<Value> =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("probe output: {e}: {json}"));
    assert_eq!(all.len(), pages.len());
    for (i, m) in all.iter().enumerate() {
        assert!(m.is_object(), "page {i}: the probe did not run");
    }
    all
}

/// Once every frame has loaded: what each frame's probe wrote, in frame order (`null` where it wrote
/// nothing).
const GATHER: &str = r#"<script>
window.addEventListener('load', function () {
  var all = [];
  document.querySelectorAll('iframe').forEach(function (f) {
    var p = f.contentDocument && f.contentDocument.getElementById('commwatch-probe');
    all.push(p ? JSON.parse(p.textContent) : null);
  });
  var out = document.createElement('pre');
  out.id = 'commwatch-probes';
  out.textContent = JSON.stringify(all);
  document.body.appendChild(out);
});
</script>"#;

/// Text for a double-quoted attribute value.
fn attr(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The markup checks that need no browser.
fn check_markup(name: &str, page: &str) {
    assert!(page.starts_with("<!DOCTYPE html>"), "{name}");
    for id in SECTIONS {
        assert!(
            page.contains(&format!("<section id=\"{id}\"")),
            "{name}: no section {id}"
        );
    }
    for bad in [
        "<script",
        "<pre",
        "src=\"",
        "href=\"http",
        "url(",
        "@import",
        "(0 ranks)",
    ] {
        assert!(!page.contains(bad), "{name}: the page contains {bad:?}");
    }
    // Headings in words: no machine token (`not_the_link`) in any heading.
    for h in page.split("<h2>").skip(1) {
        let text = strip_tags(&h[..h.find("</h2>").expect("closed h2")]);
        assert!(!text.contains('_'), "{name}: heading {text:?}");
    }
}

fn strip_tags(s: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for c in s.chars() {
        match c {
            '<' => inside = true,
            '>' => inside = false,
            c if !inside => out.push(c),
            _ => {}
        }
    }
    out
}

/// The layout checks: nothing wider than the page, no chart label clipped or on another, nothing that
/// scrolls sideways, every section shown with a heading, no script but the probe.
fn check_layout(name: &str, m: &Value, width: u32) {
    let list = |k: &str| m[k].as_array().cloned().unwrap_or_default();
    let mut problems = Vec::new();
    if m["scrollWidth"].as_u64() > m["clientWidth"].as_u64() {
        problems.push(format!("the page is {} px wide", m["scrollWidth"]));
    }
    for k in ["overflow", "spills", "clipped", "overlaps", "sideways"] {
        if !list(k).is_empty() {
            problems.push(format!("{k}: {:#?}", list(k)));
        }
    }
    assert!(
        problems.is_empty(),
        "{name} at {width} px:\n{}",
        problems.join("\n")
    );
    assert_eq!(m["scripts"], 1, "{name}: scripts other than the probe");
    assert_eq!(m["images"], 0, "{name}: images");
    assert_eq!(m["handlers"], 0, "{name}: event handler attributes");
    let sections = list("sections");
    for id in SECTIONS {
        let s = sections
            .iter()
            .find(|s| s["id"] == id)
            .unwrap_or_else(|| panic!("{name}: section {id} not in the DOM"));
        assert!(
            s["height"].as_f64().unwrap() > 30.0,
            "{name}: section {id} is not shown"
        );
        assert!(
            !s["heading"].as_str().unwrap().trim().is_empty(),
            "{name}: {id} has no heading"
        );
    }
}

/// Keeps the page and a full-page screenshot when `COMMWATCH_HTML_SHOTS` names a folder.
fn keep(bin: &Path, name: &str, page: &str, m: &Value) {
    let Some(dir) = std::env::var_os("COMMWATCH_HTML_SHOTS").map(PathBuf::from) else {
        return;
    };
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join(format!("{name}.html"));
    std::fs::write(&html, page).unwrap();
    let height = m["scrollHeight"]
        .as_u64()
        .unwrap_or(2000)
        .clamp(600, 16_000) as u32;
    let shot = dir.join(format!("{name}.png"));
    run_chromium(
        bin,
        &html,
        WIDTH,
        height,
        &[format!("--screenshot={}", shot.display())],
    );
}

/// Renders each report, checks its markup, and (with Chromium) measures every page at full width and, when
/// `narrow`, in a narrow window too. Returns the pages and what the probe saw in each at full width.
fn render_and_check(
    bin: Option<&Path>,
    reports: &[(String, Report)],
    narrow: bool,
) -> (Vec<String>, Option<Vec<Value>>) {
    let pages: Vec<String> = reports
        .iter()
        .map(|(name, r)| {
            let page = render_html(r);
            check_markup(name, &page);
            page
        })
        .collect();
    let Some(bin) = bin else {
        return (pages, None);
    };
    let refs: Vec<&str> = pages.iter().map(String::as_str).collect();
    let wide = measure_all(bin, &refs, WIDTH);
    let narrowed = if narrow {
        measure_all(bin, &refs, NARROW)
    } else {
        Vec::new()
    };
    for (i, (name, _)) in reports.iter().enumerate() {
        // Kept first, so that a page that fails its checks can be looked at.
        keep(bin, name, &pages[i], &wide[i]);
        check_layout(name, &wide[i], WIDTH);
        if let Some(m) = narrowed.get(i) {
            check_layout(name, m, NARROW);
        }
    }
    (pages, Some(wide))
}

/// [`render_and_check`] of one report.
fn render_and_check_one(
    bin: Option<&Path>,
    name: &str,
    r: Report,
    narrow: bool,
) -> (String, Option<Value>) {
    let (mut pages, measured) = render_and_check(bin, &[(name.to_string(), r)], narrow);
    (pages.remove(0), measured.map(|mut m| m.remove(0)))
}

fn report(inputs: &Inputs) -> Report {
    Report::build(inputs, &Progress::hidden())
}

/// The project's own nccl-tests files, relative to the crate root (where cargo runs tests).
fn repo_fixture(p: &str) -> PathBuf {
    PathBuf::from("tests/data/nccl").join(p)
}

#[test]
fn the_repos_fixtures_fit_the_page() {
    let bin = chromium("the_repos_fixtures_fit_the_page");
    let files = [
        "synth-2025-allgather-reducescatter-periter.txt",
        "synth-alltoall-timestamps.txt",
        "synth-allreduce-J.json",
    ];
    // Step 1 with the collector's probes too: a usable bare link and a declined one (`bare_links`).
    let probe = |from: &str, bare: Option<f64>, unused: Option<&'static str>| BareLink {
        from: from.into(),
        to: "node-b".into(),
        transport: "tcp".into(),
        at_unix_s: 0.0,
        age_s: 90.0,
        outcome: if unused.is_none() { "ok" } else { "declined" }.into(),
        error: unused.map(|_| "the node's fabric is busy".to_string()),
        bare_gbps: bare,
        tx_gbps: bare,
        rx_gbps: bare,
        latency_p50_us: Some(14.2),
        latency_p99_us: Some(31.0),
        unused,
    };
    let inputs = Inputs {
        nccl_tests: files.iter().map(|f| repo_fixture(f)).collect(),
        link_rate_gbps: Some(25.0),
        bare_links: Some(Ok(vec![
            probe("node-a", Some(23.5), None),
            probe("node-c", None, Some("declined")),
        ])),
        ..Inputs::default()
    };
    let (page, m) = render_and_check_one(bin.as_deref(), "repo-fixtures", report(&inputs), true);
    assert!(
        page.contains(
            "The bare link gives <strong>23.50 GB/s</strong> at its lowest (node-a -&gt; node-b)."
        ),
        "step 1 shows the bare link"
    );
    assert!(page.contains("not used: declined (the node&#39;s fabric is busy)"));
    assert_eq!(
        page.matches("<svg").count(),
        1,
        "the bandwidth chart only: no traces"
    );
    assert!(page.contains("link 25.0 GB/s"));
    if let Some(m) = m {
        let text = m["text"].as_str().unwrap();
        assert!(
            text.contains("No traces given"),
            "step 2 says what is missing"
        );
        assert!(text.contains("16 ranks on 2 nodes"));
    }
}

#[test]
fn a_full_report_of_real_captures_fits_the_page() {
    let bin = chromium("a_full_report_of_real_captures_fits_the_page");
    let shared = |p: &str| shared_testdata!(p);
    let (Some(t1), Some(t2), Some(log), Some(k0), Some(k1)) = (
        shared("nccl/gke-a3-allreduce-8gpu-nvlink.txt"),
        shared("nccl/nccl-tests-cluster-N10G1-allreduce.txt"),
        shared("nccl/gke-a3-socket-fallback-rank0.txt"),
        shared("kineto/sampled_rank-0.json.gz"),
        shared("kineto/sampled_rank-1.json.gz"),
    ) else {
        return;
    };
    let inputs = Inputs {
        nccl_tests: vec![t1, t2],
        nccl_logs: vec![log],
        traces: vec![k0, k1],
        link_rate_gbps: Some(50.0),
        ..Inputs::default()
    };
    let r = report(&inputs);
    // One article per run of findings of one kind, severity and action (one rule firing on several ranks).
    let articles = r
        .findings
        .iter()
        .enumerate()
        .filter(|(i, f)| {
            *i == 0 || {
                let p = &r.findings[i - 1];
                (p.kind, p.severity, &p.action) != (f.kind, f.severity, &f.action)
            }
        })
        .count();
    let (page, m) = render_and_check_one(bin.as_deref(), "full-report", r, true);
    assert_eq!(page.matches("<svg").count(), 2, "both charts");
    assert!(page.contains("class=\"bar-label\">rank 1</text>"));
    assert_eq!(page.matches("<article class=\"finding").count(), articles);
    if let Some(m) = m {
        assert_eq!(m["svgs"], 2);
        let text = m["text"].as_str().unwrap();
        assert!(!text.contains("not_the_link") && !text.contains("link_or_binding"));
    }
}

/// Every nccl-tests output and NCCL log of the real corpus, each alone, as a user passes one file.
#[test]
fn every_corpus_file_fits_the_page() {
    let bin = chromium("every_corpus_file_fits_the_page");
    let Some(dir) = shared_testdata!("nccl/real") else {
        return;
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    assert!(files.len() >= 36, "{}", files.len());
    let reports: Vec<(String, Report)> = files
        .iter()
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let inputs = if name.starts_with("nccllog-") {
                Inputs {
                    nccl_logs: vec![path.clone()],
                    ..Inputs::default()
                }
            } else {
                Inputs {
                    nccl_tests: vec![path.clone()],
                    ..Inputs::default()
                }
            };
            (name, report(&inputs))
        })
        .collect();
    render_and_check(bin.as_deref(), &reports, false);
}

/// The whole corpus in one report: 19 results in one chart and its legend, 17 logs in one table.
#[test]
fn the_whole_corpus_in_one_report_fits_the_page() {
    let bin = chromium("the_whole_corpus_in_one_report_fits_the_page");
    let Some(dir) = shared_testdata!("nccl/real") else {
        return;
    };
    let mut inputs = Inputs {
        link_rate_gbps: Some(50.0),
        ..Inputs::default()
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for p in files {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("nccltests-") {
            inputs.nccl_tests.push(p);
        } else if name.starts_with("nccllog-") {
            inputs.nccl_logs.push(p);
        }
    }
    let r = report(&inputs);
    let logs = r.nccl_logs.len();
    let (page, _) = render_and_check_one(bin.as_deref(), "whole-corpus", r, true);
    assert_eq!(page.matches("<table class=\"logs stack\">").count(), 1);
    assert_eq!(
        page.split("<table class=\"logs stack\">")
            .nth(1)
            .unwrap()
            .split("</table>")
            .next()
            .unwrap()
            .matches("<tr>")
            .count(),
        // The header row and one row per log.
        1 + logs
    );
}

/// Markup, quotes and ampersands in file names, collective names and log values are shown as text.
#[test]
fn hostile_names_and_values_stay_text() {
    let bin = chromium("hostile_names_and_values_stay_text");
    let dir = tempfile::tempdir().unwrap();
    let hostile = "<script>alert(1)</script> \"q\" & 'a' <img src=x onerror=alert(2)>";
    // A file name may hold all of it but the slash.
    let tests = dir
        .path()
        .join(format!("all_reduce_perf {}.txt", hostile.replace('/', "|")));
    std::fs::write(
        &tests,
        format!(
            "# Collective test starting: {hostile}\n\
             # nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n\
             #\n# Using devices\n\
             #  Rank  0 Group  0 Pid   1000 on {hostile} device  0 [0x10] NVIDIA A100\n\
             #  Rank  1 Group  0 Pid   1000 on b&c device  0 [0x10] NVIDIA A100\n\
             #\n\
             #       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n\
             #        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)\n\
             \x20          8             2     float     sum      -1    10.00    0.00    0.00       0    10.00    0.00    0.00       0\n\
             \x20         16             4     float     sum      -1    10.00    0.00    0.00       0    10.00    0.00    0.00       0\n\
             # Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.00\n"
        ),
    )
    .unwrap();
    let log = dir.path().join("rank0 & <b>.log");
    std::fs::write(
        &log,
        format!(
            "node1:1:1 [0] NCCL INFO NCCL version 2.18.1+{hostile}\n\
             node1:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set to {hostile}\n\
             node1:1:1 [0] NCCL INFO NET/Socket : Using [0]{hostile}:10.0.0.1<0>\n\
             node1:1:1 [0] NCCL INFO Using network Socket\n\
             node1:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n\
             node1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n\
             node1:1:1 [0] NCCL WARN {hostile}\n"
        ),
    )
    .unwrap();
    let inputs = Inputs {
        nccl_tests: vec![tests],
        nccl_logs: vec![log],
        link_rate_gbps: Some(12.5),
        ..Inputs::default()
    };
    let (page, m) = render_and_check_one(bin.as_deref(), "hostile", report(&inputs), false);
    assert!(!page.contains("<img") && !page.contains("<b>"));
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt; &quot;q&quot; &amp; &#39;a&#39;"));
    if let Some(m) = m {
        // The values are on the page, as text.
        let text = m["text"].as_str().unwrap();
        assert!(text.contains("<img src=x onerror=alert(2)>"), "{text}");
        assert!(text.contains("rank0 & <b>.log"));
    }
}

/// The probe itself: a page with each fault it looks for is seen to have each, and a clean page none.
#[test]
fn the_probe_sees_each_fault() {
    let Some(bin) = chromium("the_probe_sees_each_fault") else {
        return;
    };
    let faulty = "<!DOCTYPE html><html><body>\
        <div style=\"width:3000px\">too wide</div>\
        <section style=\"width:200px\"><table><tr><td>spills_out_of_its_section_with_one_long_word</td></tr>\
        </table></section>\
        <div style=\"overflow-x:auto;width:100px\"><span style=\"display:inline-block;width:400px\">scrolls</span></div>\
        <svg width=\"200\" height=\"50\"><text x=\"190\" y=\"20\">clipped label</text>\
        <text x=\"10\" y=\"40\">first</text><text x=\"12\" y=\"42\">second</text></svg>\
        </body></html>";
    let clean = "<!DOCTYPE html><html><body><p>fine</p></body></html>";
    let m = measure_all(&bin, &[faulty, clean], WIDTH);
    let list = |i: usize, k: &str| m[i][k].as_array().cloned().unwrap_or_default();
    assert!(
        m[0]["scrollWidth"].as_u64() > m[0]["clientWidth"].as_u64(),
        "{:#?}",
        m[0]
    );
    assert!(list(0, "overflow")
        .iter()
        .any(|e| e.as_str().unwrap().contains("too wide")));
    assert!(list(0, "sideways")
        .iter()
        .any(|e| e.as_str().unwrap().contains("scrolls")));
    assert!(list(0, "spills")
        .iter()
        .any(|e| e.as_str().unwrap().contains("spills_out")));
    assert!(list(0, "clipped")
        .iter()
        .any(|e| e.as_str().unwrap().contains("clipped label")));
    assert!(list(0, "overlaps")
        .iter()
        .any(|e| e.as_str().unwrap().contains("first")));
    for k in ["overflow", "spills", "sideways", "clipped", "overlaps"] {
        assert!(list(1, k).is_empty(), "{k}: {:?}", list(1, k));
    }
    // The frame is the page's viewport, less a scroll bar at most.
    let w = m[1]["clientWidth"].as_u64().unwrap();
    assert!((WIDTH as u64 - 20..=WIDTH as u64).contains(&w), "{w}");
    assert_eq!(m[1]["scripts"], 1);
}
