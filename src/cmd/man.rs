//! `commwatch man`: the manual page in roff, generated from the command line itself. On stdout, the page of
//! `commwatch` (its commands listed); with `--dir`, one page per command (`commwatch.1`, `commwatch-status.1`,
//! …) written there, ready for `/usr/share/man/man1`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write one page per command into this directory (created if missing) instead of the main page to stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Writes the page(s) of `command` (the whole command line).
pub fn run(args: &ManArgs, command: clap::Command) -> anyhow::Result<()> {
    match &args.dir {
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(command)
                .render(&mut out)
                .context("writing the manual page")
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("writing manual pages into {}", dir.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::CommandFactory;

    #[test]
    fn a_page_per_command() {
        let dir = tempfile::tempdir().unwrap();
        run(
            &ManArgs {
                dir: Some(dir.path().to_path_buf()),
            },
            Cli::command(),
        )
        .unwrap();
        for page in ["commwatch.1", "commwatch-status.1", "commwatch-findings.1"] {
            let text = std::fs::read_to_string(dir.path().join(page)).expect(page);
            assert!(text.starts_with(".ie"), "{page}: {}", &text[..40]);
        }
        let status = std::fs::read_to_string(dir.path().join("commwatch-status.1")).unwrap();
        assert!(status.contains("stale"), "{status}");
        // Each page says its exit statuses.
        assert!(
            status.contains("Exit status: 0 the collector answered"),
            "{status}"
        );
        assert!(
            status.contains("3 it answered and one is critical"),
            "{status}"
        );
        let main = std::fs::read_to_string(dir.path().join("commwatch.1")).unwrap();
        assert!(main.contains("Exit status: 0 success"), "{main}");
    }
}
