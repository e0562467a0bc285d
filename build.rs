//! Stamps the binary with what `commwatch --version` prints: the git revision (`git rev-parse --short HEAD`,
//! or `COMMWATCH_REVISION` when the build sets it, "unknown" outside a git checkout or without git) and the build date (UTC, from `SOURCE_DATE_EPOCH` when set,
//! for reproducible builds; else the time of the build). Both reach the code as `COMMWATCH_REVISION` and
//! `COMMWATCH_BUILD_DATE`.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-env-changed=COMMWATCH_REVISION");
    // A new commit moves the branch's ref; watching HEAD and that ref reruns this script then and only then.
    for path in [git(&["rev-parse", "--git-path", "HEAD"]), head_ref_path()]
        .into_iter()
        .flatten()
    {
        println!("cargo:rerun-if-changed={path}");
    }
    // A build without `.git` (a container's build context) can name its revision itself.
    let revision = std::env::var("COMMWATCH_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=7", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=COMMWATCH_REVISION={revision}");
    println!("cargo:rustc-env=COMMWATCH_BUILD_DATE={}", build_date());
}

/// The output of a git command run in the crate's directory, trimmed; `None` when git is absent or fails.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// The file of the ref HEAD points to (`.git/refs/heads/main`), when HEAD is a branch.
fn head_ref_path() -> Option<String> {
    let reference = git(&["symbolic-ref", "-q", "HEAD"])?;
    git(&["rev-parse", "--git-path", &reference])
}

/// `YYYY-MM-DD` (UTC) of `SOURCE_DATE_EPOCH`, else of now.
fn build_date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
