//! Every file a source opens under `--sysfs-root` or `--procfs-root` goes through an [`FsRoot`].
//!
//! The trees under those roots are read, never trusted: a file there may be a FIFO that blocks `open()` for
//! good, a device node, a symbolic link to anywhere on the host, or a link loop. A path is opened only when
//! - it resolves (every link followed) inside the root, itself resolved: sysfs links within the tree
//!   (`class/net/eth0 → ../../devices/…`) stay allowed, a link out of the root is refused;
//! - it is a regular file, checked twice: `stat` before the open (a device or FIFO is never opened at all) and
//!   `fstat` after it, before any read (for a file swapped in between). sysfs and procfs attributes are regular
//!   files;
//! - the open cannot block or follow a link swapped in at the last step: `O_NONBLOCK` (a FIFO without a writer
//!   opens at once), `O_NOFOLLOW`, `O_NOCTTY`.
//!
//! A refusal is a [`SourceError::Refused`] naming the path and why; no error carries what a file holds.
//! Directories are listed only when they resolve inside the root too, so names found outside it never become
//! series. A missing file is an I/O error of kind `NotFound`, as before: absent hardware is not an error for
//! the callers.
//!
//! Limit: a directory of the path swapped for a link between the check and the open, by someone who can write
//! inside the root, is not caught (only the last component is opened with `O_NOFOLLOW`). Only the kernel
//! writes in the real sysfs and procfs.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Refusal, SourceError};

/// Largest file [`FsRoot::read_trimmed`] reads: sysfs attributes are at most one page.
pub const MAX_SMALL_FILE: usize = 64 * 1024;

/// A directory tree the sources read (sysfs, procfs). Cheap to clone. See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsRoot {
    path: Arc<Path>,
}

impl FsRoot {
    /// The tree at `path` (as given: it is resolved on each open, so a root created later is found).
    pub fn new(path: impl Into<PathBuf>) -> FsRoot {
        FsRoot {
            path: Arc::from(path.into()),
        }
    }

    /// The root as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `<root>/<rel>`.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// `path` with every link resolved, when that lies inside the resolved root.
    fn resolve(&self, path: &Path) -> Result<PathBuf, SourceError> {
        let real = std::fs::canonicalize(path).map_err(|e| io_error(path, e))?;
        let root = std::fs::canonicalize(&self.path).map_err(|e| io_error(&self.path, e))?;
        if real.starts_with(&root) {
            Ok(real)
        } else {
            Err(SourceError::Refused {
                path: path.to_path_buf(),
                why: Refusal::OutsideRoot(self.path.to_path_buf()),
            })
        }
    }

    /// Opens `path` for reading. See the module documentation for what is refused.
    pub fn open(&self, path: &Path) -> Result<File, SourceError> {
        let real = self.resolve(path)?;
        let kind = std::fs::metadata(&real)
            .map_err(|e| io_error(path, e))?
            .file_type();
        regular(path, kind)?;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY)
            .open(&real)
            .map_err(|e| io_error(path, e))?;
        let kind = file.metadata().map_err(|e| io_error(path, e))?.file_type();
        regular(path, kind)?;
        Ok(file)
    }

    /// The first `limit` bytes of `path` (opened by [`FsRoot::open`]); the rest, if any, is not read.
    pub fn read(&self, path: &Path, limit: usize) -> Result<Vec<u8>, SourceError> {
        let file = self.open(path)?;
        let mut buf = Vec::new();
        file.take(limit as u64)
            .read_to_end(&mut buf)
            .map_err(|e| io_error(path, e))?;
        Ok(buf)
    }

    /// The trimmed text of a small file, `None` when it is absent, refused, unreadable, not UTF-8 or empty.
    /// For inventory facts read at discovery (`hca_type`, `link_layer`, `type`, ...), not for sampling.
    pub fn read_trimmed(&self, path: &Path) -> Option<String> {
        let bytes = match self.read(path, MAX_SMALL_FILE) {
            Ok(b) => b,
            Err(e) => {
                if !is_absent(&e) {
                    tracing::debug!(error = %e, "fact not read");
                }
                return None;
            }
        };
        let text = String::from_utf8(bytes).ok()?;
        let t = text.trim();
        (!t.is_empty()).then(|| t.to_string())
    }

    /// `dir` when it resolves inside the root; a missing directory is `Ok(None)`.
    fn dir_inside(&self, dir: &Path) -> Result<Option<PathBuf>, SourceError> {
        match self.resolve(dir) {
            Ok(real) => Ok(Some(real)),
            Err(e) if is_absent(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sub-directories of `dir` (links followed), sorted; see the free [`list_subdirs`](fn@list_subdirs). A
    /// directory that resolves outside the root is refused.
    pub fn list_subdirs(&self, dir: &Path) -> Result<Vec<String>, SourceError> {
        match self.dir_inside(dir)? {
            Some(_) => list_subdirs(dir),
            None => Ok(Vec::new()),
        }
    }

    /// Entries of `dir` that are not directories, sorted; see the free [`list_files`](fn@list_files). A
    /// directory that resolves outside the root is refused.
    pub fn list_files(&self, dir: &Path) -> Result<Vec<String>, SourceError> {
        match self.dir_inside(dir)? {
            Some(_) => list_files(dir),
            None => Ok(Vec::new()),
        }
    }

    /// Every entry of `dir`, sorted. A directory that resolves outside the root is refused.
    pub fn list_entries(&self, dir: &Path) -> Result<Vec<String>, SourceError> {
        match self.dir_inside(dir)? {
            Some(_) => list_dir(dir, |_| true),
            None => Ok(Vec::new()),
        }
    }
}

/// Names of the entries of `dir` for which `keep` holds on what the entry is (symlinks followed; an entry whose
/// metadata cannot be read, a link loop or a dangling link, gives the error), sorted. A missing directory is
/// `Ok(empty)`; an unreadable one is an error. Not confined to a root: the sources list through
/// [`FsRoot::list_subdirs`] and its siblings, which check the directory first.
///
/// Cost: the listing itself, plus one `statx` per symbolic link (to follow it); an entry that is not a link
/// is known by the type the listing gives (sysfs, procfs and local file systems give it), without a `statx`
/// of its own: a rediscovery lists hundreds of counter files.
pub fn list_dir(
    dir: &Path,
    keep: impl Fn(Result<std::fs::FileType, &io::Error>) -> bool,
) -> Result<Vec<String>, SourceError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => {
            return Err(SourceError::Io {
                path: dir.to_path_buf(),
                error,
            })
        }
    };
    let mut names = Vec::new();
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        // A link is followed (`metadata`): in a real sysfs `class/net/<if>` and `device` are links to
        // directories. `file_type` stats the entry itself only where the listing gives no type.
        let kind = match entry.file_type() {
            Ok(t) if !t.is_symlink() => Ok(t),
            _ => std::fs::metadata(entry.path()).map(|m| m.file_type()),
        };
        if keep(kind.as_ref().map(|t| *t)) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Sub-directories of `dir`, sorted by name (see [`list_dir`]).
pub fn list_subdirs(dir: &Path) -> Result<Vec<String>, SourceError> {
    list_dir(dir, |md| md.is_ok_and(|m| m.is_dir()))
}

/// Entries of `dir` that are not directories, sorted by name (see [`list_dir`]): plain files, and also what
/// a counter should not be (a FIFO, a link loop) so that reading it fails and is counted instead of the entry
/// going unnoticed. Dangling links (the target is gone) are left out.
pub fn list_files(dir: &Path) -> Result<Vec<String>, SourceError> {
    list_dir(dir, |md| match md {
        Ok(m) => !m.is_dir(),
        Err(e) => e.kind() != io::ErrorKind::NotFound,
    })
}

fn io_error(path: &Path, error: io::Error) -> SourceError {
    SourceError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// Refuses what is not a regular file, naming its kind.
fn regular(path: &Path, kind: std::fs::FileType) -> Result<(), SourceError> {
    let what = if kind.is_file() {
        return Ok(());
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_dir() {
        "a directory"
    } else {
        "not a file"
    };
    Err(SourceError::Refused {
        path: path.to_path_buf(),
        why: Refusal::NotRegular(what),
    })
}

/// Whether `e` says the file (or a directory above it) does not exist, or its device went away: absent
/// hardware, not an error.
pub fn is_absent(e: &SourceError) -> bool {
    matches!(e, SourceError::Io { error, .. } if is_gone(error))
}

/// Whether an I/O error means the file is gone: missing (`ENOENT`, `ENOTDIR`), or its device removed (`ENXIO`,
/// `ENODEV`, `ESTALE`: a driver reload or device reset left the handle dead; the path may exist again).
pub fn is_gone(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENXIO | libc::ENODEV | libc::ESTALE)
    ) || err.kind() == io::ErrorKind::NotFound
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::time::{Duration, Instant};

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn regular_files_inside_are_read_and_links_inside_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = FsRoot::new(dir.path());
        std::fs::create_dir_all(dir.path().join("devices/a")).unwrap();
        std::fs::write(dir.path().join("devices/a/x"), "42\n").unwrap();
        std::fs::create_dir(dir.path().join("class")).unwrap();
        symlink("../devices/a", dir.path().join("class/a")).unwrap();
        assert_eq!(
            root.read_trimmed(&root.join("class/a/x")).as_deref(),
            Some("42")
        );
        assert_eq!(root.list_files(&root.join("class/a")).unwrap(), ["x"]);
        assert!(root.list_subdirs(&root.join("missing")).unwrap().is_empty());
    }

    #[test]
    fn a_fifo_a_directory_and_a_link_out_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let inside = dir.path().join("root");
        std::fs::create_dir(&inside).unwrap();
        let root = FsRoot::new(&inside);
        mkfifo(&inside.join("fifo"));
        let t = Instant::now();
        let e = root.open(&inside.join("fifo")).unwrap_err().to_string();
        assert!(t.elapsed() < Duration::from_secs(1));
        assert!(
            e.ends_with("fifo: refused: not a regular file (a FIFO)"),
            "{e}"
        );
        let e = root.open(&inside).unwrap_err().to_string();
        assert!(e.contains("not a regular file (a directory)"), "{e}");

        std::fs::write(dir.path().join("secret"), "hunter2").unwrap();
        symlink("../secret", inside.join("out")).unwrap();
        let e = root.read(&inside.join("out"), 100).unwrap_err();
        assert!(matches!(
            &e,
            SourceError::Refused {
                why: Refusal::OutsideRoot(_),
                ..
            }
        ));
        assert!(!e.to_string().contains("hunter2"), "{e}");
        symlink("..", inside.join("up")).unwrap();
        assert!(root.list_files(&inside.join("up")).is_err());
    }

    #[test]
    fn a_link_loop_is_an_error_that_is_not_absence() {
        let dir = tempfile::tempdir().unwrap();
        let root = FsRoot::new(dir.path());
        symlink("loop", dir.path().join("loop")).unwrap();
        let e = root.open(&dir.path().join("loop")).unwrap_err();
        assert!(!is_absent(&e), "{e}");
        assert!(
            matches!(&e, SourceError::Io { error, .. } if error.raw_os_error() == Some(libc::ELOOP))
        );
        let missing = root.open(&dir.path().join("missing")).unwrap_err();
        assert!(is_absent(&missing), "{missing}");
    }

    #[test]
    fn reads_stop_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let root = FsRoot::new(dir.path());
        std::fs::write(dir.path().join("big"), vec![b'7'; 10_000]).unwrap();
        assert_eq!(root.read(&dir.path().join("big"), 100).unwrap().len(), 100);
    }
}
