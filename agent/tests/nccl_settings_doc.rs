//! `docs/API.md` lists the NCCL settings the agent reads (section "NCCL settings the agent reads"): the list
//! must be the code's, name for name and in order, so the document cannot drift from what leaves a node.

use commwatch_agent::source::processes::NCCL_KEYS;

#[test]
fn the_documented_nccl_settings_are_the_ones_read() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/API.md");
    let doc = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let start = doc
        .find("## NCCL settings the agent reads")
        .expect("docs/API.md has the section");
    let section = &doc[start..];
    let list = &section[..section.find("Left out on purpose").expect("the list ends")];
    let documented: Vec<&str> = list
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| n.starts_with("NCCL_") && n.len() > 5)
        .collect();
    assert_eq!(documented, NCCL_KEYS);
}
