//! A progress bar on stderr for long inputs, drawn only when stderr is a terminal.

use std::io::{IsTerminal, Read, Write};

/// Inputs smaller than this are read without a bar.
const MIN_BYTES_FOR_BAR: u64 = 32 << 20;

/// Whether and where to draw progress.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    enabled: bool,
}

impl Progress {
    /// Draws on stderr when it is a terminal.
    pub fn auto() -> Progress {
        Progress {
            enabled: std::io::stderr().is_terminal(),
        }
    }

    /// Never draws (tests, benches, library use).
    pub fn hidden() -> Progress {
        Progress { enabled: false }
    }

    /// Wraps a reader of `total` bytes; the bar follows the bytes read from it.
    pub fn reader<R: Read>(&self, inner: R, total: u64, label: &str) -> ProgressReader<R> {
        ProgressReader {
            inner,
            read: 0,
            total,
            last_percent: None,
            label: label.to_string(),
            draw: self.enabled && total >= MIN_BYTES_FOR_BAR,
        }
    }
}

/// A reader that draws how much of its input it has read.
pub struct ProgressReader<R> {
    inner: R,
    read: u64,
    total: u64,
    last_percent: Option<u64>,
    label: String,
    draw: bool,
}

impl<R: Read> Read for ProgressReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.draw {
            let percent = (self.read * 100)
                .checked_div(self.total)
                .unwrap_or(100)
                .min(100);
            if self.last_percent != Some(percent) {
                self.last_percent = Some(percent);
                let filled = (percent / 4) as usize;
                let mut err = std::io::stderr().lock();
                // Progress output is best effort: a closed stderr must not fail the analysis.
                let _ = write!(
                    err,
                    "\r{} [{}{}] {percent:3}%",
                    self.label,
                    "#".repeat(filled),
                    " ".repeat(25 - filled)
                );
                if percent == 100 {
                    let _ = writeln!(err);
                }
            }
        }
        Ok(n)
    }
}
