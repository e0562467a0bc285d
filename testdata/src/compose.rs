//! Directory trees assembled from several source trees, for tests that need one root holding outside data and
//! the project's own additions side by side.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// Copying a tree failed; names the operation and the path.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    #[error("{op} {}: {error}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    /// Two source trees both hold this file: composing adds files, it never replaces one.
    #[error("{} exists already: composed trees only add files", .0.display())]
    Collision(PathBuf),
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ComposeError + 'a {
    move |error| ComposeError::Io {
        op,
        path: path.to_path_buf(),
        error,
    }
}

/// Copies the contents of `from` into `to` (created as needed), merging into directories already there:
/// files are copied, symbolic links recreated with the same target. A file or link that exists in `to` already
/// is a [`ComposeError::Collision`].
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), ComposeError> {
    fs::create_dir_all(to).map_err(io_err("create", to))?;
    for entry in fs::read_dir(from).map_err(io_err("read", from))? {
        let entry = entry.map_err(io_err("read", from))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(io_err("stat", &src))?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
            continue;
        }
        if dst.symlink_metadata().is_ok() {
            return Err(ComposeError::Collision(dst));
        }
        if kind.is_symlink() {
            let target = fs::read_link(&src).map_err(io_err("read link", &src))?;
            std::os::unix::fs::symlink(target, &dst).map_err(io_err("link", &dst))?;
        } else {
            fs::copy(&src, &dst).map_err(io_err("copy", &src))?;
        }
    }
    Ok(())
}

/// A tree in a temporary directory, removed on drop: keep the value alive while anything reads the tree.
#[derive(Debug)]
pub struct ComposedTree {
    _dir: TempDir,
    root: PathBuf,
}

impl ComposedTree {
    /// An empty tree whose root is named `root_name` (e.g. `sys`) inside a new temporary directory.
    pub fn new(root_name: &str) -> Result<ComposedTree, ComposeError> {
        let dir = tempfile::Builder::new()
            .prefix("commwatch-testdata-")
            .tempdir()
            .map_err(io_err("create", &std::env::temp_dir()))?;
        let root = dir.path().join(root_name);
        fs::create_dir_all(&root).map_err(io_err("create", &root))?;
        Ok(ComposedTree { _dir: dir, root })
    }

    /// Adds the contents of `from` under `<root>/<at>` (`""`: the root itself); see [`copy_tree`].
    pub fn add(self, at: &str, from: &Path) -> Result<ComposedTree, ComposeError> {
        copy_tree(from, &self.root.join(at))?;
        Ok(self)
    }

    /// The tree's root.
    pub fn path(&self) -> &Path {
        &self.root
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error and its `source()`s joined by `: `, as a chain printer (`{:#}`) says them.
    fn chain(e: &dyn std::error::Error) -> String {
        let mut out = e.to_string();
        let mut next = e.source();
        while let Some(cause) = next {
            out = format!("{out}: {cause}");
            next = cause.source();
        }
        out
    }

    #[test]
    fn a_cause_is_said_once() {
        let e = io_err("read", Path::new("/t"))(io::Error::other("disk gone"));
        assert_eq!(chain(&e), "read /t: disk gone");
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn trees_merge_under_their_places() {
        let src = tempfile::tempdir().unwrap();
        let (a, b) = (src.path().join("a"), src.path().join("b"));
        write(&a.join("mlx5_0/ports/1/rate"), "400 Gb/sec\n");
        write(
            &b.join("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0"),
            "ib0\n",
        );
        write(&b.join("class/net/ib0/type"), "32\n");
        std::os::unix::fs::symlink("../../devices/ib0", b.join("class/net/ib0/device")).unwrap();

        let tree = ComposedTree::new("sys")
            .unwrap()
            .add("class/infiniband", &a)
            .unwrap()
            .add("", &b)
            .unwrap();
        let root = tree.path();
        assert!(root.ends_with("sys"));
        let read = |p: &str| fs::read_to_string(root.join(p)).unwrap();
        assert_eq!(read("class/infiniband/mlx5_0/ports/1/rate"), "400 Gb/sec\n");
        assert_eq!(
            read("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0"),
            "ib0\n"
        );
        assert_eq!(read("class/net/ib0/type"), "32\n");
        assert_eq!(
            fs::read_link(root.join("class/net/ib0/device")).unwrap(),
            Path::new("../../devices/ib0")
        );
        // The sources are untouched.
        assert!(!a.join("mlx5_0/ports/1/gid_attrs").exists());

        let kept = root.to_path_buf();
        drop(tree);
        assert!(!kept.exists(), "removed on drop");
    }

    #[test]
    fn a_file_in_two_sources_is_a_collision() {
        let src = tempfile::tempdir().unwrap();
        write(&src.path().join("a/net/eth0/mtu"), "1500\n");
        write(&src.path().join("b/net/eth0/mtu"), "9000\n");
        let err = ComposedTree::new("sys")
            .unwrap()
            .add("", &src.path().join("a"))
            .unwrap()
            .add("", &src.path().join("b"))
            .unwrap_err();
        assert!(
            matches!(&err, ComposeError::Collision(p) if p.ends_with("net/eth0/mtu")),
            "{err}"
        );
    }

    #[test]
    fn a_missing_source_names_its_path() {
        let err = ComposedTree::new("sys")
            .unwrap()
            .add("", Path::new("/nonexistent/tree"))
            .unwrap_err();
        assert!(
            err.to_string().starts_with("read /nonexistent/tree: "),
            "{err}"
        );
    }
}
