//! [`PidFiles`]: the small files of a process under `--procfs-root` (`<pid>/stat`, `environ`, `cgroup`), read
//! in as few system calls as the root allows, never outside it.
//!
//! The `processes` source reads these files for every process that appears, each second on a node where
//! processes start often. Two ways:
//! - **On procfs** (the root's file system is procfs, checked with `fstatfs` on a handle of the root kept
//!   open): `openat2` from that handle with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV` and
//!   `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`, then `read`, then `close`: three system calls, and one for a pid
//!   gone already. The kernel refuses, in the same call, a path that leaves the root, crosses a link or
//!   another mount: the file opened is procfs's own, and procfs holds no FIFO or device under a pid. The
//!   kept handle's file system is checked again at each [`PidFiles::recheck_root`] (the source's full scan).
//! - **Elsewhere** (a directory tree standing in for procfs, as in tests, or a kernel without `openat2`):
//!   `lstat` (a regular file, not a link), `open` with the same flags, `fstat` (still a regular file), `read`,
//!   `close`.
//!
//! A read the first way refuses or fails for any reason but a missing or denied file is tried the second
//! way, so what is read or refused is what the second way reads or refuses. A read shorter than asked is the
//! end of the file (procfs generates a file whole).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Reads the files of processes under a root. See the module documentation.
#[derive(Debug)]
pub struct PidFiles {
    root: PathBuf,
    /// A handle of the root, kept while its file system is procfs and `openat2` answers; `None`: the second
    /// way for every read.
    procfs: Option<OwnedFd>,
    /// Whether the first way is looked for at all (not with [`PidFiles::by_path`]).
    detect: bool,
}

impl PidFiles {
    /// The files under `root`; whether it is procfs is found at once (and again at each
    /// [`PidFiles::recheck_root`]).
    pub fn new(root: &Path) -> PidFiles {
        PidFiles {
            root: root.to_path_buf(),
            procfs: open_procfs(root),
            detect: true,
        }
    }

    /// The files under `root`, always read the second way, even on procfs (to compare the two ways).
    pub fn by_path(root: &Path) -> PidFiles {
        PidFiles {
            root: root.to_path_buf(),
            procfs: None,
            detect: false,
        }
    }

    /// Looks again at whether the root is procfs (a root mounted or replaced since is then read the right
    /// way): one `open` and one `fstatfs`.
    pub fn recheck_root(&mut self) {
        if self.detect {
            self.procfs = open_procfs(&self.root);
        }
    }

    /// Whether reads take the first way (procfs, `openat2`).
    pub fn on_procfs(&self) -> bool {
        self.procfs.is_some()
    }

    /// Reads `<root>/<pid>/<name>` into `buf` (its content replaced), at most `limit` bytes. A missing file
    /// (the process is gone) is an error of kind `NotFound`.
    pub fn read(
        &mut self,
        pid: u32,
        name: &str,
        limit: usize,
        buf: &mut Vec<u8>,
    ) -> io::Result<()> {
        if let Some(dir) = &self.procfs {
            match open_beneath(dir, pid, name) {
                Ok(file) => return read_to_limit(file, limit, buf),
                // Gone, or denied (another user's `environ`): the second way would answer the same.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EACCES)) => {
                    return Err(e)
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                    // A kernel without `openat2` (before 5.6), or a system-call filter refusing it (procfs
                    // itself denies with EACCES): the second way from now.
                    tracing::debug!("openat2 not available: procfs read by path");
                    self.procfs = None;
                }
                Err(_) => {}
            }
        }
        read_by_path(&self.root.join(pid.to_string()).join(name), limit, buf)
    }
}

/// A handle of `root` when its file system is procfs and it can be opened as a directory.
fn open_procfs(root: &Path) -> Option<OwnedFd> {
    let fd = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let fs = rustix::fs::fstatfs(&fd).ok()?;
    (fs.f_type == rustix::fs::PROC_SUPER_MAGIC).then_some(fd)
}

/// Opens `<pid>/<name>` from the procfs handle `dir`, never leaving it: see the module documentation.
fn open_beneath(dir: &OwnedFd, pid: u32, name: &str) -> io::Result<File> {
    let path = format!("{pid}/{name}");
    let fd = rustix::fs::openat2(
        dir,
        path.as_str(),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV,
    )?;
    Ok(File::from(fd))
}

/// The second way: `lstat`, `open`, `fstat`, `read`, `close`; see the module documentation.
fn read_by_path(path: &Path, limit: usize, buf: &mut Vec<u8>) -> io::Result<()> {
    let not_regular = || io::Error::new(io::ErrorKind::InvalidInput, "not a regular file");
    if !std::fs::symlink_metadata(path)?.is_file() {
        return Err(not_regular());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    read_to_limit(file, limit, buf)
}

/// Reads `file` from its start into `buf`, at most `limit` bytes, one `read` per buffer's worth.
fn read_to_limit(mut file: File, limit: usize, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    // At least a page (one `read` for most files), never more than `limit` (a `clamp` would panic below a page).
    buf.resize(buf.capacity().max(4096).min(limit.max(1)), 0);
    let mut len = 0;
    loop {
        let n = file.read(&mut buf[len..])?;
        len += n;
        if n == 0 || len < buf.len() || len >= limit {
            break;
        }
        let grown = (buf.len() * 2).min(limit);
        buf.resize(grown, 0);
    }
    buf.truncate(len.min(limit));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procfs_is_read_beneath_its_handle_and_the_same_as_by_path() {
        let mut files = PidFiles::new(Path::new("/proc"));
        if !files.on_procfs() {
            // CI and this project's machines mount procfs at /proc: required under CI, recorded elsewhere.
            commwatch_testdata::skip::unavailable("/proc is not procfs here");
            return;
        }
        let pid = std::process::id();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut by_path = PidFiles::by_path(Path::new("/proc"));
        by_path.recheck_root();
        assert!(!by_path.on_procfs());
        files.read(pid, "cgroup", 1 << 16, &mut a).unwrap();
        by_path.read(pid, "cgroup", 1 << 16, &mut b).unwrap();
        assert_eq!(a, b, "both ways read the same file");
        files.read(pid, "stat", 1 << 16, &mut a).unwrap();
        assert!(a.starts_with(format!("{pid} (").as_bytes()));
        // A gone pid is NotFound; a link (`exe`, `cwd`) and a climb out are refused, on both ways.
        let gone = files.read(u32::MAX - 1, "stat", 4096, &mut a).unwrap_err();
        // (pids stop far below u32::MAX: `pid_max` is at most 2^22.)
        assert_eq!(gone.kind(), io::ErrorKind::NotFound);
        let link = files.read(pid, "exe", 4096, &mut a).unwrap_err();
        assert_eq!(
            link.kind(),
            io::ErrorKind::InvalidInput,
            "a link is refused"
        );
        let fd = open_procfs(Path::new("/proc")).unwrap();
        for refused in [
            format!("{pid}/exe"),
            format!("{pid}/root/etc/hostname"),
            "../etc/hostname".into(),
        ] {
            let e = rustix::fs::openat2(
                &fd,
                refused.as_str(),
                OFlags::RDONLY | OFlags::NOFOLLOW,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV,
            );
            assert!(e.is_err(), "{refused} is refused by the first way");
        }
        assert!(
            files.on_procfs(),
            "a refusal does not give up the first way"
        );
    }

    #[test]
    fn a_plain_tree_is_read_by_path_with_its_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("7");
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("stat"), "7 (x) S 1").unwrap();
        std::os::unix::fs::symlink(p.join("stat"), p.join("environ")).unwrap();
        let mut files = PidFiles::new(dir.path());
        assert!(!files.on_procfs());
        let mut buf = Vec::new();
        files.read(7, "stat", 4096, &mut buf).unwrap();
        assert_eq!(buf, b"7 (x) S 1");
        // At most `limit` bytes.
        files.read(7, "stat", 3, &mut buf).unwrap();
        assert_eq!(buf, b"7 (");
        let link = files.read(7, "environ", 4096, &mut buf).unwrap_err();
        assert_eq!(
            link.kind(),
            io::ErrorKind::InvalidInput,
            "a link is refused"
        );
        let gone = files.read(8, "stat", 4096, &mut buf).unwrap_err();
        assert_eq!(gone.kind(), io::ErrorKind::NotFound);
        files.recheck_root();
        assert!(!files.on_procfs());
    }
}
