//! [`AttrFile`]: one sysfs attribute kept open and re-read at offset 0 on every tick.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::fsroot::{is_gone, FsRoot};
use super::SourceError;

/// Largest attribute [`AttrFile`] reads. sysfs attributes are at most one page; this only bounds a runaway
/// regular file in a fixture tree.
const MAX_ATTR_LEN: usize = 1 << 20;
/// Initial buffer: counters and states fit in a few dozen bytes.
pub(crate) const INITIAL_BUF: usize = 64;

/// An attribute file kept open and re-read with `pread` at offset 0 into a reusable buffer, so a read costs
/// one system call and no allocation (sysfs regenerates the content on each read at offset 0). It is opened
/// (and reopened) through its [`FsRoot`]: never a FIFO, device or link out of the root. If a read fails because
/// the device went away, the file is reopened once and read again.
#[derive(Debug)]
pub struct AttrFile {
    root: FsRoot,
    path: PathBuf,
    file: File,
    buf: Vec<u8>,
}

impl AttrFile {
    /// Opens `path`, which lies under `root`, for reading.
    pub fn open(root: &FsRoot, path: PathBuf) -> Result<Self, SourceError> {
        let file = root.open(&path)?;
        Ok(AttrFile {
            root: root.clone(),
            path,
            file,
            buf: vec![0; INITIAL_BUF],
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the path still names the open file (same device and inode). False when the path is gone or
    /// was replaced (a device re-created its attributes, or a writer renamed a new file over it).
    pub fn is_current(&self) -> bool {
        match (std::fs::metadata(&self.path), self.file.metadata()) {
            (Ok(p), Ok(f)) => p.dev() == f.dev() && p.ino() == f.ino(),
            _ => false,
        }
    }

    /// Reads the whole file from offset 0 and returns its text (untrimmed).
    pub fn read(&mut self) -> Result<&str, SourceError> {
        let len = match read_all_at(&self.file, &mut self.buf) {
            Ok(n) => n,
            Err(e) if is_gone(&e) => {
                // The device was reset or its driver reloaded: the old handle stays dead, so reopen once.
                self.file = self.root.open(&self.path)?;
                read_all_at(&self.file, &mut self.buf).map_err(|error| SourceError::Io {
                    path: self.path.clone(),
                    error,
                })?
            }
            Err(error) => {
                return Err(SourceError::Io {
                    path: self.path.clone(),
                    error,
                })
            }
        };
        std::str::from_utf8(&self.buf[..len]).map_err(|_| SourceError::Parse {
            path: self.path.clone(),
            bytes: len,
            reason: "not UTF-8".to_string(),
        })
    }
}

/// Reads `path` (under `root`) through `file`, opening it first when it is not open, and hands its text to
/// `parse`; a file whose read fails is closed, to be opened again at the next call. For procfs files read at
/// every tick (`net/snmp`, `stat`): procfs generates a file anew at each read from offset 0, so a kept file
/// costs one `pread` a read instead of a path's resolution, an open and a close.
pub fn read_kept<T>(
    root: &FsRoot,
    file: &mut Option<AttrFile>,
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, SourceError>,
) -> Result<T, SourceError> {
    let open = match file {
        Some(f) => f,
        None => file.insert(AttrFile::open(root, path.to_path_buf())?),
    };
    match open.read() {
        Ok(text) => parse(text),
        Err(e) => {
            *file = None;
            Err(e)
        }
    }
}

/// Reads `<root>/<name>` through `file` ([`read_kept`]) and parses its text with `parse`; a parse failure is a
/// [`SourceError::Parse`] naming the file, its length and the reason.
pub fn read_parsed<T>(
    root: &FsRoot,
    file: &mut Option<AttrFile>,
    name: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<T, SourceError> {
    let path = root.join(name);
    read_kept(root, file, &path, |text| {
        parse(text).map_err(|reason| SourceError::Parse {
            path: path.clone(),
            bytes: text.len(),
            reason,
        })
    })
}

/// Reads from offset 0 to end of file into `buf`, growing it when full; returns the length read.
fn read_all_at(file: &File, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut len = 0;
    loop {
        let n = file.read_at(&mut buf[len..], len as u64)?;
        len += n;
        // A short read on a regular or sysfs file means end of file: this saves the second system call that a
        // read-until-zero loop would make on every tick.
        if n == 0 || len < buf.len() {
            return Ok(len);
        }
        if buf.len() >= MAX_ATTR_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "attribute file larger than 1 MiB",
            ));
        }
        let grown = (buf.len() * 2).min(MAX_ATTR_LEN);
        buf.resize(grown, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_file_rereads_and_grows() {
        let dir = tempfile::tempdir().unwrap();
        let root = FsRoot::new(dir.path());
        let path = dir.path().join("a");
        let long = "x".repeat(1000);
        std::fs::write(&path, &long).unwrap();
        let mut f = AttrFile::open(&root, path.clone()).unwrap();
        assert_eq!(f.read().unwrap(), long);
        std::fs::write(&path, "7\n").unwrap();
        assert_eq!(f.read().unwrap(), "7\n");
        // Exactly the initial buffer length: needs the second read that finds the end.
        let exact = "y".repeat(INITIAL_BUF);
        std::fs::write(&path, &exact).unwrap();
        assert_eq!(f.read().unwrap(), exact);
    }

    #[test]
    fn attr_file_keeps_reading_an_unlinked_inode() {
        let dir = tempfile::tempdir().unwrap();
        let root = FsRoot::new(dir.path());
        let path = dir.path().join("a");
        std::fs::write(&path, "1\n").unwrap();
        let mut f = AttrFile::open(&root, path.clone()).unwrap();
        assert_eq!(f.read().unwrap(), "1\n");
        assert!(f.is_current());
        // Renamed over: the path names another inode.
        let tmp = dir.path().join("b");
        std::fs::write(&tmp, "2\n").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert!(!f.is_current());
        assert_eq!(f.read().unwrap(), "1\n");
        // A regular file keeps its inode readable after unlink (unlike a sysfs attribute of a removed device,
        // which fails with ENODEV and is reopened); opening the missing path is an I/O error, not a panic.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(f.read().unwrap(), "1\n");
        assert!(AttrFile::open(&root, path).is_err());
    }

    #[test]
    fn text_that_is_not_utf8_is_measured_not_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, b"pw=\xff\xfe").unwrap();
        let mut f = AttrFile::open(&FsRoot::new(dir.path()), path).unwrap();
        let e = f.read().unwrap_err().to_string();
        assert!(e.ends_with("a: cannot parse (5 bytes): not UTF-8"), "{e}");
    }
}
