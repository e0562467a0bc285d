//! The README's test command is what CI runs, and CI ends by naming the tests that skipped.

use std::path::Path;

fn read(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The command in the README's `sh` block after "Run the tests:".
fn readme_test_command(readme: &str) -> &str {
    let after = &readme[readme
        .find("Run the tests:")
        .expect("README: \"Run the tests:\"")..];
    let block = &after[after
        .find("```sh\n")
        .expect("README: the test command's block")
        + 6..];
    block[..block.find('\n').unwrap()].trim()
}

#[test]
fn ci_runs_the_readme_test_command_on_every_binary() {
    let readme = read("README.md");
    let command = readme_test_command(&readme);
    assert!(command.starts_with("cargo test --workspace"), "{command}");
    assert!(command.contains("--no-fail-fast"), "{command}");
    let ci = read(".ci/run");
    assert!(
        ci.lines().any(|l| l.trim_start().starts_with(command)),
        ".ci/run does not run the README's `{command}`"
    );
}

#[test]
fn ci_prints_the_skipped_tests_at_its_end() {
    let ci = read(".ci/run");
    let log = commwatch_testdata::skip::SKIP_LOG_NAME;
    let cleared = ci
        .find("rm -f \"$skip_log\"")
        .expect(".ci/run clears the skip log");
    let tests = ci
        .find("cargo test --workspace")
        .expect(".ci/run runs the tests");
    let printed = ci
        .find("sort \"$skip_log\"")
        .expect(".ci/run prints the skip log");
    assert!(cleared < tests && tests < printed);
    assert!(ci.contains(&format!("/debug/{log}\"")), "{log} in .ci/run");
}
