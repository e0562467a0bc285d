//! A training process's dump directory, opened inside the process's own view of the filesystem and nowhere
//! else, and the files in it opened without following a link.
//!
//! The directory a process names (`NCCL_INSPECTOR_DUMP_DIR`, or the plugin's default under its working
//! directory) is the process's to choose, and the agent reads it with more rights than the process has. So:
//! - it is resolved from `<procfs-root>/<pid>/root` (the process's root in its own mount namespace, as in a
//!   container), one component at a time (`openat` with `O_NOFOLLOW`): a component that is a symbolic link, a
//!   `..`, or not a directory is refused ([`ConfineError`]); the host's path of the same name is never tried;
//! - a relative directory is taken under the process's working directory as its own root shows it
//!   (`<procfs-root>/<pid>/cwd`, which the kernel gives as an absolute path inside that root);
//! - a file in it is opened by name from the directory's handle, `O_NOFOLLOW | O_NONBLOCK` (a link is refused,
//!   a FIFO never blocks), and used only when it is a regular file owned by the process's user (or the process
//!   runs as root): a training process cannot make the agent read what it could not read itself.
//!
//! Every refusal says its reason ([`Refusal`]): the follower counts it and logs it once.

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{openat, Mode, OFlags};
use rustix::io::Errno;

/// Why a dump directory or a dump file is not read. Each is one value of the `reason` label of
/// `commwatch_agent_inspector_dropped_total` ([`Refusal::reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The directory, one of its components, or the file is a symbolic link.
    Symlink,
    /// The directory climbs out (`..`), or the working directory it is relative to is not an absolute path.
    OutsideRoot,
    /// A component of the directory is not a directory, or the file is not a regular file (a FIFO, a socket,
    /// a device, a directory named like a dump file).
    NotRegular,
    /// The file belongs to another user than the process's.
    ForeignOwner,
}

impl Refusal {
    /// The `reason` label value.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Symlink => "symlink",
            Refusal::OutsideRoot => "outside_root",
            Refusal::NotRegular => "not_regular",
            Refusal::ForeignOwner => "foreign_owner",
        }
    }
}

/// Errors of opening a dump directory or file.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The process, its root, or a component of the path does not exist (not an error for the follower: the
    /// plugin creates its directory when it first writes).
    #[error("{path}: does not exist")]
    Absent { path: PathBuf },
    #[error("{path}: refused ({})", why.reason())]
    Refused { path: PathBuf, why: Refusal },
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A dump directory opened inside its process's root; files are opened from its handle.
#[derive(Debug)]
pub struct DumpDir {
    fd: OwnedFd,
    /// Device and inode: the same directory named by several processes is followed once.
    identity: (u64, u64),
    /// The user the process runs as (the owner of `<procfs-root>/<pid>`); `None`: not checked.
    uid: Option<u32>,
    /// Where it is as the agent sees it, for logs (`<procfs-root>/<pid>/root/...`).
    shown: PathBuf,
}

/// Opens `dir`, as process `pid` names it, under `<procfs_root>/<pid>/root` (see the module documentation).
pub fn open_dump_dir(procfs_root: &Path, pid: u32, dir: &Path) -> Result<DumpDir, ConfineError> {
    let proc = procfs_root.join(pid.to_string());
    let uid = std::fs::metadata(&proc)
        .map_err(|e| io_error(&proc, e))?
        .uid();
    let mut inside: Vec<OsString> = Vec::new();
    if dir.is_relative() {
        let cwd_link = proc.join("cwd");
        let cwd = std::fs::read_link(&cwd_link).map_err(|e| io_error(&cwd_link, e))?;
        if !cwd.is_absolute() {
            return Err(refused(&cwd_link, Refusal::OutsideRoot));
        }
        inside.extend(normal_components(&cwd, &cwd_link)?);
    }
    inside.extend(normal_components(dir, dir)?);
    let root = proc.join("root");
    // The one link followed: `root` is the kernel's own link to the process's root directory.
    let mut fd = rustix::fs::open(
        &root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| errno_error(&root, e))?;
    let mut shown = root;
    for (i, name) in inside.iter().enumerate() {
        shown.push(name);
        let last = i + 1 == inside.len();
        fd = open_component(&fd, name, last, &shown)?;
    }
    if inside.is_empty() {
        // The process's root itself: reopened for reading its entries.
        fd = open_component(&fd, OsStr::new("."), true, &shown)?;
    }
    let meta = File::from(fd.try_clone().map_err(|e| io_error(&shown, e))?)
        .metadata()
        .map_err(|e| io_error(&shown, e))?;
    Ok(DumpDir {
        fd,
        identity: (meta.dev(), meta.ino()),
        uid: (uid != 0).then_some(uid),
        shown,
    })
}

/// The names of `path`'s components, refusing `..`; `.` and the root are dropped.
fn normal_components(path: &Path, shown: &Path) -> Result<Vec<OsString>, ConfineError> {
    let mut out = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n.to_os_string()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            Component::ParentDir => return Err(refused(shown, Refusal::OutsideRoot)),
        }
    }
    Ok(out)
}

/// One directory below `at`, never through a link; the last one opened for reading its entries.
fn open_component(
    at: &OwnedFd,
    name: &OsStr,
    last: bool,
    shown: &Path,
) -> Result<OwnedFd, ConfineError> {
    let mode = if last { OFlags::RDONLY } else { OFlags::PATH };
    let flags = mode | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match openat(at, name, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOENT) => Err(ConfineError::Absent {
            path: shown.to_path_buf(),
        }),
        Err(e @ (Errno::LOOP | Errno::NOTDIR)) => match lstat_at(at, name) {
            Ok(m) if m.file_type().is_symlink() => Err(refused(shown, Refusal::Symlink)),
            Ok(_) => Err(refused(shown, Refusal::NotRegular)),
            Err(_) => Err(errno_error(shown, e)),
        },
        Err(e) => Err(errno_error(shown, e)),
    }
}

/// What `name` in `dir` is, without following a link or opening it for I/O (`O_PATH`): a FIFO never blocks.
fn lstat_at(dir: &OwnedFd, name: &OsStr) -> std::io::Result<Metadata> {
    let fd = openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    File::from(fd).metadata()
}

impl DumpDir {
    /// Device and inode of the directory.
    pub fn identity(&self) -> (u64, u64) {
        self.identity
    }

    /// The directory as the agent sees it (for logs).
    pub fn shown(&self) -> &Path {
        &self.shown
    }

    /// At most `max` names of entries, in the order the directory gives them, and whether there were more.
    /// An unreadable directory lists nothing.
    pub fn names(&self, max: usize) -> (Vec<OsString>, bool) {
        let Ok(dir) = rustix::fs::Dir::read_from(&self.fd) else {
            return (Vec::new(), false);
        };
        let mut out = Vec::new();
        for entry in dir.flatten() {
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if out.len() == max {
                return (out, true);
            }
            out.push(OsStr::from_bytes(name).to_os_string());
        }
        (out, false)
    }

    /// Device and inode of the regular file `name` now, without following a link; `Ok(None)`: absent.
    pub fn identity_of(&self, name: &OsStr) -> Result<Option<(u64, u64)>, Refusal> {
        match lstat_at(&self.fd, name) {
            Ok(m) => self.check(&m).map(|()| Some((m.dev(), m.ino()))),
            Err(_) => Ok(None),
        }
    }

    /// Opens the regular file `name` for reading (see the module documentation); `Ok(None)`: absent.
    pub fn open_file(&self, name: &OsStr) -> Result<Option<File>, Refusal> {
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let file = match openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => File::from(fd),
            Err(Errno::LOOP) => return Err(Refusal::Symlink),
            Err(_) => return Ok(None),
        };
        let Ok(m) = file.metadata() else {
            return Ok(None);
        };
        self.check(&m).map(|()| Some(file))
    }

    /// A regular file the process's user owns (any, when the process runs as root).
    fn check(&self, m: &Metadata) -> Result<(), Refusal> {
        let kind = m.file_type();
        if kind.is_symlink() {
            return Err(Refusal::Symlink);
        }
        if !kind.is_file() {
            return Err(Refusal::NotRegular);
        }
        match self.uid {
            Some(uid) if m.uid() != uid => Err(Refusal::ForeignOwner),
            _ => Ok(()),
        }
    }
}

/// Opens `path` as a dump directory with no process around it (tests): links refused at its last component
/// only, files of any owner.
#[cfg(test)]
pub fn open_plain(path: &Path) -> DumpDir {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .expect("open a test directory");
    let meta = std::fs::metadata(path).expect("stat a test directory");
    DumpDir {
        fd,
        identity: (meta.dev(), meta.ino()),
        uid: None,
        shown: path.to_path_buf(),
    }
}

fn refused(path: &Path, why: Refusal) -> ConfineError {
    ConfineError::Refused {
        path: path.to_path_buf(),
        why,
    }
}

fn io_error(path: &Path, error: std::io::Error) -> ConfineError {
    if error.kind() == std::io::ErrorKind::NotFound {
        ConfineError::Absent {
            path: path.to_path_buf(),
        }
    } else {
        ConfineError::Io {
            path: path.to_path_buf(),
            error,
        }
    }
}

fn errno_error(path: &Path, e: Errno) -> ConfineError {
    io_error(path, std::io::Error::from(e))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A fake procfs with process 12 whose root is `root` and whose working directory is `/work`.
    fn process(root: &Path) -> tempfile::TempDir {
        let proc = tempfile::tempdir().unwrap();
        std::fs::create_dir(proc.path().join("12")).unwrap();
        symlink(root, proc.path().join("12/root")).unwrap();
        symlink("/work", proc.path().join("12/cwd")).unwrap();
        proc
    }

    fn refusal(r: Result<DumpDir, ConfineError>) -> Option<Refusal> {
        match r {
            Err(ConfineError::Refused { why, .. }) => Some(why),
            _ => None,
        }
    }

    #[test]
    fn directories_resolve_inside_the_process_root_only() {
        let root = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("logs/dump")).unwrap();
        std::fs::create_dir_all(root.path().join("work/nccl-inspector-7")).unwrap();
        let proc = process(root.path());
        let abs = open_dump_dir(proc.path(), 12, Path::new("/logs/dump")).unwrap();
        assert!(abs.shown().ends_with("12/root/logs/dump"));
        let rel = open_dump_dir(proc.path(), 12, Path::new("nccl-inspector-7")).unwrap();
        assert!(rel.shown().ends_with("root/work/nccl-inspector-7"));
        // The host's own directory of that name is never tried.
        let host_only = host.path().join("only-on-the-host");
        std::fs::create_dir(&host_only).unwrap();
        assert!(matches!(
            open_dump_dir(proc.path(), 12, &host_only),
            Err(ConfineError::Absent { .. })
        ));
        assert!(matches!(
            open_dump_dir(proc.path(), 13, Path::new("/logs/dump")),
            Err(ConfineError::Absent { .. })
        ));
    }

    #[test]
    fn links_climbs_and_non_directories_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("logs")).unwrap();
        symlink(outside.path(), root.path().join("logs/linked")).unwrap();
        symlink("/var", root.path().join("var")).unwrap();
        std::fs::write(root.path().join("logs/file"), "x").unwrap();
        let proc = process(root.path());
        let p = proc.path();
        let open = |d: &str| refusal(open_dump_dir(p, 12, Path::new(d)));
        assert_eq!(open("/logs/linked"), Some(Refusal::Symlink));
        assert_eq!(
            open("/var/log"),
            Some(Refusal::Symlink),
            "a link in the middle"
        );
        assert_eq!(open("/logs/../../etc"), Some(Refusal::OutsideRoot));
        assert_eq!(open("../etc"), Some(Refusal::OutsideRoot));
        assert_eq!(open("/logs/file"), Some(Refusal::NotRegular));
    }

    #[test]
    fn files_are_regular_unlinked_and_listed_within_a_bound() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.log"), "1\n").unwrap();
        std::fs::write(dir.path().join("secret"), "s\n").unwrap();
        symlink(dir.path().join("secret"), dir.path().join("b.log")).unwrap();
        std::fs::create_dir(dir.path().join("c.log")).unwrap();
        let d = open_plain(dir.path());
        assert!(d.open_file(OsStr::new("a.log")).unwrap().is_some());
        assert!(d.open_file(OsStr::new("absent.log")).unwrap().is_none());
        assert_eq!(
            d.open_file(OsStr::new("b.log")).unwrap_err(),
            Refusal::Symlink
        );
        assert_eq!(
            d.identity_of(OsStr::new("b.log")).unwrap_err(),
            Refusal::Symlink
        );
        assert_eq!(
            d.open_file(OsStr::new("c.log")).unwrap_err(),
            Refusal::NotRegular
        );
        let (names, more) = d.names(10);
        assert_eq!((names.len(), more), (4, false));
        let (names, more) = d.names(2);
        assert_eq!((names.len(), more), (2, true));
    }

    #[test]
    fn a_file_of_another_user_is_refused_unless_the_process_is_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.log"), "1\n").unwrap();
        let mut d = open_plain(dir.path());
        let mine = std::fs::metadata(dir.path().join("a.log")).unwrap().uid();
        d.uid = Some(mine.wrapping_add(1));
        assert_eq!(
            d.open_file(OsStr::new("a.log")).unwrap_err(),
            Refusal::ForeignOwner
        );
        d.uid = Some(mine);
        assert!(d.open_file(OsStr::new("a.log")).unwrap().is_some());
    }
}
