//! `compose-sysfs gpud_h100 DIR`: writes the H100 sysfs root the tests use (the shared `class/infiniband`
//! plus the project's additions) at DIR, for the benchmark scripts that run real processes on it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use commwatch_testdata::locate::{lookup, Env, Lookup};
use commwatch_testdata::sysfs::{write_gpud_h100, GPUD_H100_INFINIBAND, H100_ADDITIONS};
use commwatch_testdata::SHARED_VAR;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [tree, dir] = args.as_slice() else {
        eprintln!("usage: compose-sysfs gpud_h100 DIR");
        return ExitCode::from(2);
    };
    if tree != "gpud_h100" {
        eprintln!("compose-sysfs: unknown tree {tree:?} (known: gpud_h100)");
        return ExitCode::from(2);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let infiniband = match lookup(&Env::from_process(), manifest, GPUD_H100_INFINIBAND) {
        Lookup::Found(p) => p,
        Lookup::Missing(p) => {
            eprintln!(
                "compose-sysfs: shared test data not found at {}; set {SHARED_VAR}",
                p.display()
            );
            return ExitCode::FAILURE;
        }
    };
    let additions = commwatch_testdata::locate::workspace_root(manifest).join(H100_ADDITIONS);
    match write_gpud_h100(&infiniband, &additions, &PathBuf::from(dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("compose-sysfs: {e}");
            ExitCode::FAILURE
        }
    }
}
