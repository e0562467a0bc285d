//! `commwatch completions SHELL`: the shell's completion script on stdout, generated from the command line
//! itself, so it always knows every command and flag of this build.

use clap::Args;
use clap_complete::Shell;

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish (also elvish, powershell).
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Writes the script of `command` (the whole command line) to `out`.
pub fn write(args: &CompletionsArgs, mut command: clap::Command, out: &mut dyn std::io::Write) {
    clap_complete::generate(args.shell, &mut command, "commwatch", out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::CommandFactory;

    #[test]
    fn every_shell_gets_a_script_naming_the_commands() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut out = Vec::new();
            write(&CompletionsArgs { shell }, Cli::command(), &mut out);
            let text = String::from_utf8(out).unwrap();
            for word in ["status", "findings", "collector", "api-token-file"] {
                assert!(text.contains(word), "{shell:?} lacks {word}");
            }
        }
    }
}
