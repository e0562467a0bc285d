//! One module per command: its flags and its run. The agent, collector and demo run in the async runtime;
//! the others are blocking and run outside it.

pub mod agent;
pub mod baseline;
pub mod collector;
pub mod completions;
pub mod findings;
pub mod man;
pub mod probe;
pub mod shards;
pub mod status;

/// `--format` of the commands that print a result for people or for scripts.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}
