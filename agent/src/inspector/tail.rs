//! Following one growing file: what was appended since the last poll, as complete lines, in bounded memory.
//!
//! - A file seen for the first time is read from its start, but never more than `max_backlog_bytes` behind its
//!   end: an older backlog is skipped (counted in bytes) and reading resumes at the next line start.
//! - Rotation (the path now names another file, by device and inode): the old file is read to its end through
//!   the handle still open, its unterminated last line handed on as it is (the parser counts it), then the
//!   new file is read from its start.
//! - Truncation (the file is shorter than what was read): reading restarts at its start.
//! - A partial last line waits for its newline; a line longer than `max_line_bytes` is dropped and counted.
//! - At most `max_bytes_per_poll` bytes are read per poll; the rest waits for the next poll.
//! - The file is named in its dump directory's handle ([`DumpDir`]) and opened from it, never through a link
//!   and only as a regular file of the process's user; a refusal is counted ([`TailCounts::refused`]). While
//!   the directory is not found, the open handle is read to its end and nothing new is opened.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;

use super::confine::{DumpDir, Refusal};

/// Bounds of one file's follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailLimits {
    pub max_bytes_per_poll: usize,
    pub max_backlog_bytes: u64,
    pub max_line_bytes: usize,
}

impl Default for TailLimits {
    fn default() -> TailLimits {
        TailLimits {
            max_bytes_per_poll: 1 << 20,
            max_backlog_bytes: 4 << 20,
            max_line_bytes: 64 << 10,
        }
    }
}

/// What following met besides lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TailCounts {
    /// Bytes of backlog skipped (more than `max_backlog_bytes` behind the end).
    pub skipped_bytes: u64,
    /// Lines dropped for their length.
    pub long_lines: u64,
    pub rotations: u64,
    pub truncations: u64,
    /// Files not opened, by why (a link or a FIFO swapped in for a followed file).
    pub refused: Vec<Refusal>,
}

/// One followed file.
#[derive(Debug)]
pub struct FileTail {
    name: OsString,
    /// Whether the last poll found the name in its directory (a regular file).
    present: bool,
    file: Option<File>,
    identity: Option<(u64, u64)>,
    offset: u64,
    partial: Vec<u8>,
    /// Dropping bytes up to the next newline (after a skip or an overlong line).
    discarding: bool,
}

impl FileTail {
    /// The file `name` of a dump directory (not opened until [`FileTail::poll`]).
    pub fn new(name: &OsStr) -> FileTail {
        FileTail {
            name: name.to_os_string(),
            present: true,
            file: None,
            identity: None,
            offset: 0,
            partial: Vec::new(),
            discarding: false,
        }
    }

    pub fn name(&self) -> &OsStr {
        &self.name
    }

    /// Whether the last poll found the name in its directory or the open handle has bytes left.
    pub fn alive(&self) -> bool {
        self.present || !self.at_end()
    }

    /// The complete lines appended since the last poll (without their newlines). `dir`: the file's dump
    /// directory as found in this poll; `None` (not found now) reads only what the open handle has left.
    pub fn poll(
        &mut self,
        dir: Option<&DumpDir>,
        limits: &TailLimits,
        counts: &mut TailCounts,
    ) -> Vec<String> {
        let mut lines = Vec::new();
        let mut budget = limits.max_bytes_per_poll;
        // The dump directory belongs to the training job: a link or anything but a regular file of the
        // process's user is not followed.
        let current = match dir.map(|d| d.identity_of(&self.name)) {
            Some(Ok(id)) => id,
            Some(Err(why)) => {
                counts.refused.push(why);
                None
            }
            None => None,
        };
        self.present = current.is_some();
        if self.file.is_some() {
            budget -= self.read_open(limits, budget, &mut lines, counts);
            if current.is_some() && current != self.identity && self.at_end() {
                // Rotated: the old file is read to its end; its unterminated last line goes on as it is.
                if !self.partial.is_empty() && !self.discarding {
                    lines.push(String::from_utf8_lossy(&self.partial).into_owned());
                }
                self.file = None;
                counts.rotations += 1;
            }
        }
        let dir = dir.filter(|_| self.file.is_none() && current.is_some() && budget > 0);
        if let Some(dir) = dir {
            let opened = dir.open_file(&self.name).unwrap_or_else(|why| {
                counts.refused.push(why);
                None
            });
            if let Some(f) = opened {
                self.identity = f.metadata().ok().map(|m| (m.dev(), m.ino()));
                self.file = Some(f);
                self.offset = 0;
                self.partial.clear();
                self.discarding = false;
                self.read_open(limits, budget, &mut lines, counts);
            }
        }
        lines
    }

    fn len(&self) -> Option<u64> {
        self.file.as_ref()?.metadata().ok().map(|m| m.len())
    }

    fn at_end(&self) -> bool {
        self.len().is_none_or(|len| self.offset >= len)
    }

    /// Reads from the open handle at most `budget` bytes; returns the bytes read.
    fn read_open(
        &mut self,
        limits: &TailLimits,
        budget: usize,
        lines: &mut Vec<String>,
        counts: &mut TailCounts,
    ) -> usize {
        let Some(len) = self.len() else {
            return 0;
        };
        if len < self.offset {
            counts.truncations += 1;
            self.offset = 0;
            self.partial.clear();
            self.discarding = false;
        }
        if len - self.offset > limits.max_backlog_bytes {
            let skip_to = len - limits.max_backlog_bytes;
            counts.skipped_bytes += skip_to - self.offset;
            self.offset = skip_to;
            self.partial.clear();
            self.discarding = true;
        }
        let want = (len - self.offset).min(budget as u64) as usize;
        if want == 0 {
            return 0;
        }
        let mut buf = vec![0u8; want];
        let Some(f) = self.file.as_mut() else {
            return 0;
        };
        let read = f
            .seek(SeekFrom::Start(self.offset))
            .and_then(|_| f.read(&mut buf));
        let n = match read {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(file = ?self.name, error = %e, "inspector file read failed");
                return 0;
            }
        };
        self.offset += n as u64;
        self.split(&buf[..n], limits, lines, counts);
        n
    }

    /// Splits read bytes into complete lines; keeps the unterminated rest for the next read.
    fn split(
        &mut self,
        bytes: &[u8],
        limits: &TailLimits,
        lines: &mut Vec<String>,
        counts: &mut TailCounts,
    ) {
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            let (piece, after) = rest.split_at(nl);
            rest = &after[1..];
            if self.discarding {
                self.discarding = false;
                self.partial.clear();
                continue;
            }
            if self.partial.len() + piece.len() > limits.max_line_bytes {
                counts.long_lines += 1;
                self.partial.clear();
                continue;
            }
            self.partial.extend_from_slice(piece);
            lines.push(String::from_utf8_lossy(&self.partial).into_owned());
            self.partial.clear();
        }
        if self.discarding {
            return;
        }
        if self.partial.len() + rest.len() > limits.max_line_bytes {
            counts.long_lines += 1;
            self.partial.clear();
            self.discarding = true;
        } else {
            self.partial.extend_from_slice(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::Path;

    use super::super::confine::open_plain;
    use super::*;

    fn append(path: &Path, s: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(s.as_bytes()).unwrap();
    }

    #[test]
    fn links_and_fifos_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        append(&secret, "{\"not\":\"a dump\"}\n");
        let link = dir.path().join("a.log");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let fifo = dir.path().join("b.log");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let (limits, mut c) = (TailLimits::default(), TailCounts::default());
        let d = open_plain(dir.path());
        let mut link = FileTail::new(OsStr::new("a.log"));
        assert!(link.poll(Some(&d), &limits, &mut c).is_empty());
        let mut fifo = FileTail::new(OsStr::new("b.log"));
        assert!(fifo.poll(Some(&d), &limits, &mut c).is_empty());
        assert_eq!(c.refused, [Refusal::Symlink, Refusal::NotRegular]);
        assert!(!link.alive() && !fifo.alive());
    }

    #[test]
    fn appended_lines_and_a_partial_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.log");
        let (limits, mut c) = (TailLimits::default(), TailCounts::default());
        let d = open_plain(dir.path());
        let mut t = FileTail::new(OsStr::new("a.log"));
        assert!(t.poll(Some(&d), &limits, &mut c).is_empty(), "no file yet");
        append(&p, "one\ntw");
        assert_eq!(t.poll(Some(&d), &limits, &mut c), vec!["one"]);
        append(&p, "o\nthree\n");
        assert_eq!(t.poll(Some(&d), &limits, &mut c), vec!["two", "three"]);
        assert!(t.poll(Some(&d), &limits, &mut c).is_empty());
    }

    #[test]
    fn rotation_reads_the_old_file_to_its_end_then_the_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.log");
        let (limits, mut c) = (TailLimits::default(), TailCounts::default());
        let d = open_plain(dir.path());
        let mut t = FileTail::new(OsStr::new("a.log"));
        append(&p, "1\n");
        assert_eq!(t.poll(Some(&d), &limits, &mut c), vec!["1"]);
        append(&p, "2\n3-cut");
        std::fs::rename(&p, dir.path().join("a.log.1")).unwrap();
        append(&p, "4\n");
        assert_eq!(t.poll(Some(&d), &limits, &mut c), vec!["2", "3-cut", "4"]);
        assert_eq!(c.rotations, 1);
    }

    #[test]
    fn truncation_restarts_at_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.log");
        let (limits, mut c) = (TailLimits::default(), TailCounts::default());
        let d = open_plain(dir.path());
        let mut t = FileTail::new(OsStr::new("a.log"));
        append(&p, "aaaa\nbbbb\n");
        assert_eq!(t.poll(Some(&d), &limits, &mut c).len(), 2);
        std::fs::write(&p, "c\n").unwrap();
        assert_eq!(t.poll(Some(&d), &limits, &mut c), vec!["c"]);
        assert_eq!(c.truncations, 1);
    }

    #[test]
    fn memory_is_bounded_by_backlog_poll_and_line_limits() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.log");
        let limits = TailLimits {
            max_bytes_per_poll: 16,
            max_backlog_bytes: 24,
            max_line_bytes: 8,
        };
        let mut c = TailCounts::default();
        let d = open_plain(dir.path());
        let mut t = FileTail::new(OsStr::new("a.log"));
        // 10 lines of 4 bytes: 40 bytes, 16 skipped, then "line" boundary found.
        append(&p, &"abc\n".repeat(10));
        let first = t.poll(Some(&d), &limits, &mut c);
        assert_eq!(c.skipped_bytes, 16);
        assert_eq!(
            first,
            vec!["abc"; 3],
            "the skipped-into line is dropped, 16 bytes per poll"
        );
        assert_eq!(t.poll(Some(&d), &limits, &mut c), vec!["abc"; 2]);
        append(&p, "0123456789abcdef\nok\n");
        assert_eq!(t.poll(Some(&d), &limits, &mut c), Vec::<String>::new());
        assert_eq!(t.poll(Some(&d), &limits, &mut c), vec!["ok"]);
        assert_eq!(c.long_lines, 1);
    }
}
