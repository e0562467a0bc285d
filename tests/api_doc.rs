//! `docs/API.md` is the project's API contract; these tests keep it current with the code. Each fails naming
//! what the document is missing:
//! - every long flag `commwatch <command> --help` prints has a table row (`` | `--flag …` | ``) in that
//!   command's section (headed `` `commwatch <command>` ``), and the top-level flags in "Global options";
//! - every finding kind the collector raises has a row (`` | `kind` | ``) in "Finding kinds and severities";
//! - every `/api/` route the collector's source registers (`.route("/api/…"`) has a heading of its own in
//!   "HTTP: collector".
//!
//! The commands come from the binary's own help, so a new command without a section fails too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_commwatch");
const DOC: &str = "docs/API.md";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn doc() -> String {
    let path = repo().join(DOC);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Every heading of `text` as `(byte offset of its line, offset after its line, level, title)`. Lines inside
/// code fences are never headings.
fn heading_lines(text: &str) -> Vec<(usize, usize, usize, &str)> {
    let mut out = Vec::new();
    let mut in_fence = false;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let at = offset;
        offset += line.len();
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        let level = line.chars().take_while(|c| *c == '#').count();
        if !in_fence && level > 0 && line[level..].starts_with(' ') {
            out.push((at, offset, level, line[level..].trim()));
        }
    }
    out
}

/// The titles of the headings of `text`.
fn headings(text: &str) -> Vec<&str> {
    heading_lines(text).into_iter().map(|(.., t)| t).collect()
}

/// The body of the section whose heading text is exactly `title`: from its heading to the next heading of the
/// same or a higher level (sub-sections included).
fn section<'a>(doc: &'a str, title: &str) -> Option<&'a str> {
    let all = heading_lines(doc);
    let i = all.iter().position(|(.., t)| *t == title)?;
    let (_, body, level, _) = all[i];
    let end = all[i + 1..]
        .iter()
        .find(|(_, _, l, _)| *l <= level)
        .map_or(doc.len(), |(at, ..)| *at);
    Some(&doc[body..end])
}

/// Whether `text` holds `` `token `` followed by one of `follow` (so `--tls-cert` is not found in
/// `` `--tls-cert-file` `` and `/api/v1/step` not in `/api/v1/steps`).
fn mentions(text: &str, token: &str, follow: impl Fn(char) -> bool) -> bool {
    text.match_indices(token)
        .any(|(i, _)| text[i + token.len()..].chars().next().is_some_and(&follow))
}

/// `commwatch <path…> --help`, which must succeed.
fn help(path: &[String]) -> String {
    let out = Command::new(BIN)
        .args(path)
        .arg("--help")
        .output()
        .expect("run commwatch --help");
    assert!(
        out.status.success(),
        "`commwatch {} --help` exited {:?}: {}",
        path.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The long flags a help text defines: the `--name` tokens of its option specs. clap indents an option's line
/// by at most six spaces and separates the spec (`-h, --help`, `--trace <F|DIR>`) from a description on the
/// same line by two or more spaces; descriptions, which may name other flags, are left out.
fn long_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|line| {
            let body = line.trim_start();
            (body.starts_with('-') && line.len() - body.len() <= 6)
                .then(|| body.split("  ").next().unwrap_or(body))
        })
        .flat_map(|spec| spec.split([' ', ',']))
        .filter(|token| token.starts_with("--") && token.len() > 2)
        .map(|token| {
            let end = token[2..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .map_or(token.len(), |i| i + 2);
            token[..end].to_string()
        })
        .collect()
}

/// The subcommands a help text lists under `Commands:` (clap's own `help` left out).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// Every command path (`["agent"]`, `["baseline", "import"]`, …) with its help text, found from the top-level
/// help down.
fn commands() -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let mut queue: Vec<Vec<String>> = subcommands(&help(&[]))
        .into_iter()
        .map(|c| vec![c])
        .collect();
    while let Some(path) = queue.pop() {
        let text = help(&path);
        for sub in subcommands(&text) {
            let mut p = path.clone();
            p.push(sub);
            queue.push(p);
        }
        out.push((path, text));
    }
    out.sort();
    out
}

fn is_flag_end(c: char) -> bool {
    matches!(c, '`' | ' ' | '=')
}

#[test]
fn every_flag_is_documented_under_its_command() {
    let doc = doc();
    let mut missing = Vec::new();
    let global = long_flags(&help(&[]));
    assert!(
        global.contains("--log"),
        "the flag parser found no `--log` in `commwatch --help`: {global:?}"
    );
    match section(&doc, "Global options") {
        None => missing.push("no section \"Global options\"".to_string()),
        Some(body) => missing.extend(
            global
                .iter()
                .filter(|f| !mentions(body, &format!("\n| `{f}"), is_flag_end))
                .map(|f| format!("\"Global options\" has no row for `{f}`")),
        ),
    }
    let commands = commands();
    for name in ["agent", "collector", "demo", "diagnose"] {
        assert!(
            commands.iter().any(|(p, _)| p == &[name.to_string()]),
            "`commwatch --help` does not list `{name}`: the command list was not parsed"
        );
    }
    for (path, text) in &commands {
        // Global flags (`--log`, `--help`) are printed by every command and documented once.
        let own: Vec<String> = long_flags(text).difference(&global).cloned().collect();
        if own.is_empty() && !subcommands(text).is_empty() {
            continue; // a command group without flags of its own, like `baseline`
        }
        let title = format!("`commwatch {}`", path.join(" "));
        let Some(body) = section(&doc, &title) else {
            missing.push(format!("no section headed {title}"));
            continue;
        };
        missing.extend(
            own.iter()
                .filter(|f| !mentions(body, &format!("\n| `{f}"), is_flag_end))
                .map(|f| format!("section {title} has no row for `{f}`")),
        );
    }
    assert!(
        missing.is_empty(),
        "{DOC} is behind the command line:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn every_finding_kind_is_documented() {
    let doc = doc();
    let title = "Finding kinds and severities";
    let body = section(&doc, title).unwrap_or_else(|| panic!("{DOC}: no section \"{title}\""));
    let missing: Vec<&str> = commwatch_collector::analysis::FindingKind::ALL
        .iter()
        .map(|k| k.as_str())
        .filter(|k| !body.contains(&format!("\n| `{k}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "{DOC}, \"{title}\", has no table row for the finding kind(s) {missing:?}"
    );
}

/// The string literals of `.route("…"` calls in the Rust files under `dir`.
fn route_literals(dir: &Path, out: &mut BTreeSet<String>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            route_literals(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            for (i, m) in text.match_indices(".route(\"") {
                let rest = &text[i + m.len()..];
                if let Some(end) = rest.find('"') {
                    out.insert(rest[..end].to_string());
                }
            }
        }
    }
}

#[test]
fn every_api_route_is_documented() {
    let mut routes = BTreeSet::new();
    route_literals(&repo().join("collector/src"), &mut routes);
    routes.retain(|r| r.starts_with("/api/"));
    assert!(
        routes.contains("/api/v1/nodes"),
        "the scan of collector/src for `.route(\"/api/…\"` found no /api/v1/nodes: {routes:?}"
    );
    let doc = doc();
    let title = "HTTP: collector";
    let body = section(&doc, title).unwrap_or_else(|| panic!("{DOC}: no section \"{title}\""));
    let headings = headings(body).join("\n");
    let missing: Vec<&String> = routes
        .iter()
        .filter(|r| {
            !mentions(&headings, r, |c| {
                !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/'))
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{DOC}, \"{title}\", has no heading for the route(s) {missing:?} the collector serves"
    );
}

#[test]
fn sections_end_at_the_next_heading_of_their_level() {
    let doc =
        "# A\nintro\n## B\nb text\n### B1\nb1 text\n```\n# not a heading\n```\n## C\nc text\n";
    let b = section(doc, "B").expect("B");
    assert!(b.contains("b1 text") && b.contains("# not a heading") && !b.contains("c text"));
    assert_eq!(section(doc, "C"), Some("c text\n"));
    assert_eq!(section(doc, "D"), None);
    assert_eq!(headings(b), ["B1"]);
    assert!(mentions(
        "see `--tls-cert FILE`",
        "`--tls-cert",
        is_flag_end
    ));
    assert!(!mentions(
        "see `--tls-cert-file`",
        "`--tls-cert",
        is_flag_end
    ));
}

#[test]
fn flags_are_read_from_option_lines_only() {
    let help = "Usage: commwatch x [OPTIONS]\n\nOptions:\n      --grpc-listen <GRPC_LISTEN>\n          Allow \
                plain text\n          --not-a-flag here\n  -h, --help  Print help\n      --once   Sample, \
                unless --other\n";
    let flags: Vec<String> = long_flags(help).into_iter().collect();
    assert_eq!(flags, ["--grpc-listen", "--help", "--once"]);
}
