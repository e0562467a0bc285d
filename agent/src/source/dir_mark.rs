//! [`DirMark`] and [`Rewalk`]: a rediscovery that walks a source's tree in full only when the tree changed.
//!
//! A sysfs source's discovery opens and checks every file it reads (a path walk, a `statx` and a `readlink`
//! per component each), hundreds of files on an InfiniBand node, every discovery period. What changes on
//! hot-plug, a driver reload or a port appearing is the shape of the tree: directories and files come and go,
//! and each new one has a new inode (sysfs numbers its nodes cyclically and never hands a number out again
//! soon). A [`DirMark`] is a fingerprint of that shape: for each directory the discovery walks, every entry's
//! name and inode number (what one listing gives, no `statx` per entry) and the directory's own inode and
//! modification time (one `statx`: on plain file systems, as in fixture trees, an entry removed and another
//! made under the same name may reuse the inode number, but the directory's time moves). [`Rewalk`] decides
//! from two marks whether the next discovery walks the tree in full or only re-reads what a walk would read
//! through files already open; it walks in full at least every [`FULL_WALK_EVERY`] discoveries anyway, so what
//! the mark cannot see (an attribute's text changed in place: a firmware version, a netdev renamed) is found
//! within that bound.
//!
//! The mark reads names and numbers only, never what a file holds, and lists directories without the
//! confinement of [`FsRoot`](super::FsRoot): nothing it learns leaves the hash, and a directory that cannot be
//! listed (other than a missing one) makes the mark unknown, which forces a full walk (whose reads are
//! confined and report the failure).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::Path;

/// A full walk at least once in this many discoveries (one minute at the default discovery period of 10 s).
pub const FULL_WALK_EVERY: u32 = 6;

/// A fingerprint being taken of the directories a discovery walks. See the module documentation.
#[derive(Debug)]
pub struct DirMark {
    hasher: DefaultHasher,
    /// A directory could not be listed (other than missing): the mark is unknown.
    failed: bool,
}

impl Default for DirMark {
    fn default() -> Self {
        DirMark::new()
    }
}

impl DirMark {
    /// An empty mark.
    pub fn new() -> DirMark {
        DirMark {
            hasher: DefaultHasher::new(),
            failed: false,
        }
    }

    /// Adds `dir` to the mark (its inode and modification time, and each entry's name and inode number) and
    /// returns the entries' names, sorted. A missing directory (or a path that is not one) adds a marker of its
    /// own and gives no names; any other failure makes the mark unknown.
    pub fn list(&mut self, dir: &Path) -> Vec<String> {
        dir.hash(&mut self.hasher);
        let (md, entries) = match (std::fs::metadata(dir), std::fs::read_dir(dir)) {
            (Ok(md), Ok(entries)) => (md, entries),
            (Err(e), _) | (_, Err(e)) if is_missing(&e) => {
                0xdead_u16.hash(&mut self.hasher);
                return Vec::new();
            }
            _ => {
                self.failed = true;
                return Vec::new();
            }
        };
        (md.dev(), md.ino(), md.mtime(), md.mtime_nsec()).hash(&mut self.hasher);
        let mut listed: Vec<(String, u64)> = Vec::new();
        for entry in entries {
            match entry {
                Ok(e) => match e.file_name().into_string() {
                    Ok(name) => listed.push((name, e.ino())),
                    // A name that is not UTF-8 is never a series; it still counts in the shape.
                    Err(raw) => raw.hash(&mut self.hasher),
                },
                Err(_) => self.failed = true,
            }
        }
        listed.sort_unstable();
        listed.hash(&mut self.hasher);
        listed.into_iter().map(|(name, _)| name).collect()
    }

    /// The fingerprint, or `None` when a directory could not be listed.
    pub fn finish(self) -> Option<u64> {
        (!self.failed).then(|| self.hasher.finish())
    }
}

/// A missing directory, or a path whose component is not a directory: the hardware is absent.
fn is_missing(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENODEV)
    )
}

/// Whether a discovery walks its tree in full: see the module documentation.
#[derive(Debug, Default)]
pub struct Rewalk {
    /// The mark taken before the last full walk; `None` before the first or when it was unknown.
    last: Option<u64>,
    /// Discoveries since the last full walk.
    since_full: u32,
    /// Full walks so far.
    full_walks: u64,
}

impl Rewalk {
    /// Whether the discovery about to run, whose tree has the mark `now` (taken before it reads anything),
    /// must walk the tree in full: the first, after a change of the mark or an unknown mark, and at least
    /// every [`FULL_WALK_EVERY`] discoveries. Records the decision: call it once per discovery.
    pub fn full(&mut self, now: Option<u64>) -> bool {
        let full = now.is_none() || now != self.last || self.since_full + 1 >= FULL_WALK_EVERY;
        if full {
            self.last = now;
            self.since_full = 0;
            self.full_walks += 1;
        } else {
            self.since_full += 1;
        }
        full
    }

    /// Full walks so far (each decided by [`Rewalk::full`]).
    pub fn full_walks(&self) -> u64 {
        self.full_walks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(dirs: &[&Path]) -> Option<u64> {
        let mut m = DirMark::new();
        for d in dirs {
            m.list(d);
        }
        m.finish()
    }

    #[test]
    fn the_mark_moves_with_entries_and_not_with_contents() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a"), "1").unwrap();
        let m0 = mark(&[d]);
        assert!(m0.is_some());
        assert_eq!(mark(&[d]), m0, "the same tree, the same mark");
        std::fs::write(d.join("a"), "2").unwrap();
        assert_eq!(
            mark(&[d]),
            m0,
            "a content written in place is not the shape"
        );
        std::fs::write(d.join("b"), "1").unwrap();
        let m1 = mark(&[d]);
        assert_ne!(m1, m0, "an entry added");
        let sub = d.join("missing");
        assert_eq!(
            mark(&[&sub]),
            mark(&[&sub]),
            "a missing directory has a mark"
        );
        assert_ne!(mark(&[&sub]), mark(&[d]));
    }

    #[test]
    fn full_walks_on_change_and_at_the_bound() {
        let mut r = Rewalk::default();
        assert!(r.full(Some(1)), "the first");
        for _ in 1..FULL_WALK_EVERY {
            assert!(!r.full(Some(1)));
        }
        assert!(r.full(Some(1)), "the bound");
        assert!(!r.full(Some(1)));
        assert!(r.full(Some(2)), "a change");
        assert!(r.full(None), "unknown");
        assert!(r.full(None), "unknown again");
        assert!(r.full(Some(2)), "known after unknown");
        assert_eq!(r.full_walks(), 6);
    }
}
