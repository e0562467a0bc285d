//! The state directory and the database file on disk. They hold what agents sent, NCCL settings of training
//! jobs included, so they are private to the collector's user: the directory is created 0700 (an existing one
//! group or others can enter is warned about, not changed: the operator made it), the database file 0600 (an
//! existing one group or others can read is tightened: it is ours; SQLite gives its journal (and the WAL and
//! shared-memory files of an older collector's database) the database's mode).
//!
//! A database that exists but is empty (0 bytes) is said loudly — SQLite would start on it silently, yet an
//! empty file where a database was is a truncation (a copy cut short, a full disk). A damaged one is moved
//! aside whole ([`move_aside`]: database, journal, WAL and shared memory under one `.corrupt-<unix seconds>`
//! suffix) so that the collector starts fresh and the file stays for inspection.

use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tracing::{error, info, warn};

use super::PersistError;

/// Mode of the state directory the collector creates.
pub const DIR_MODE: u32 = 0o700;
/// Mode of the database file.
pub const DB_MODE: u32 = 0o600;
/// SQLite's companion files of a database (suffixes of its path): its rollback journal, and the WAL and shared
/// memory of a database an older collector left in WAL mode. A journal left by a kill belongs to its database:
/// beside an empty one in its place, SQLite would roll it back into that.
const COMPANIONS: [&str; 3] = ["-journal", "-wal", "-shm"];

/// What was found at the database's path before it was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbFile {
    /// No file: created empty.
    Created,
    /// A file of 0 bytes: SQLite starts on it as on a new database.
    Empty,
    /// A file with contents.
    Existing,
}

/// Creates `dir` (and its missing parents) with mode 0700; warns when an existing one is open to group or
/// others.
pub fn prepare_dir(dir: &Path) -> Result<(), PersistError> {
    let create = |error| PersistError::CreateDir {
        path: dir.to_owned(),
        error,
    };
    if !dir.exists() {
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .map_err(create)?;
        return Ok(());
    }
    let mode = std::fs::metadata(dir).map_err(create)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        warn!(path = %dir.display(), mode = format!("{mode:04o}"),
            "the state directory can be entered by group or others; it holds what agents sent (NCCL settings \
             included): chmod 700 it");
    }
    Ok(())
}

/// Makes sure the database file at `path` exists with mode 0600 (created, or tightened) and says what it
/// found: an empty file is logged as an error (see the module documentation).
pub fn prepare_db_file(path: &Path) -> Result<DbFile, PersistError> {
    let io = |error| PersistError::File {
        path: path.to_owned(),
        error,
    };
    let found = match std::fs::metadata(path) {
        Ok(m) if m.len() == 0 => DbFile::Empty,
        Ok(_) => DbFile::Existing,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(DB_MODE)
                .open(path)
                .map_err(io)?;
            return Ok(DbFile::Created);
        }
        Err(e) => return Err(io(e)),
    };
    let mode = std::fs::metadata(path).map_err(io)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(DB_MODE)).map_err(io)?;
        info!(path = %path.display(), was = format!("{mode:04o}"), "state database made private (0600)");
    }
    if found == DbFile::Empty {
        error!(path = %path.display(),
            "the state database is an empty file (0 bytes): starting with no stored batches, findings or \
             baselines. If it held data, it was truncated (a full disk, a copy cut short): look for a backup");
    }
    Ok(found)
}

/// Renames the database at `path` and its companion files to `<name>.corrupt-<unix seconds>[-journal|-wal|-shm]` (with
/// `.1`, `.2`, … after the seconds when that name is taken); returns the database's new path.
pub fn move_aside(path: &Path, unix_s: u64) -> Result<PathBuf, PersistError> {
    let suffixed = |p: &Path, suffix: &str| {
        let mut s = p.as_os_str().to_owned();
        s.push(suffix);
        PathBuf::from(s)
    };
    let mut aside = suffixed(path, &format!(".corrupt-{unix_s}"));
    for n in 1.. {
        if !aside.exists() {
            break;
        }
        aside = suffixed(path, &format!(".corrupt-{unix_s}.{n}"));
    }
    let rename = |from: &Path, to: &Path| {
        std::fs::rename(from, to).map_err(|error| PersistError::File {
            path: from.to_owned(),
            error,
        })
    };
    rename(path, &aside)?;
    for c in COMPANIONS {
        let from = suffixed(path, c);
        if from.exists() {
            rename(&from, &suffixed(&aside, c))?;
        }
    }
    Ok(aside)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn created_private_and_a_loose_database_is_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/state");
        prepare_dir(&dir).unwrap();
        assert_eq!(mode(&dir), DIR_MODE);
        assert_eq!(mode(&tmp.path().join("a")), DIR_MODE);
        let db = dir.join("db");
        assert_eq!(prepare_db_file(&db).unwrap(), DbFile::Created);
        assert_eq!(mode(&db), DB_MODE);
        assert_eq!(prepare_db_file(&db).unwrap(), DbFile::Empty);
        std::fs::write(&db, b"x").unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(prepare_db_file(&db).unwrap(), DbFile::Existing);
        assert_eq!(mode(&db), DB_MODE);
        // An operator's looser directory is left as it is (warned about).
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o755);
    }

    #[test]
    fn a_database_is_moved_aside_with_its_companions() {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("collector.sqlite3");
        std::fs::write(&db, b"garbage").unwrap();
        std::fs::write(tmp.path().join("collector.sqlite3-wal"), b"w").unwrap();
        std::fs::write(tmp.path().join("collector.sqlite3-journal"), b"j").unwrap();
        let aside = move_aside(&db, 1_700_000_000).unwrap();
        assert_eq!(
            aside,
            tmp.path().join("collector.sqlite3.corrupt-1700000000")
        );
        assert_eq!(std::fs::read(&aside).unwrap(), b"garbage");
        let wal = tmp.path().join("collector.sqlite3.corrupt-1700000000-wal");
        assert_eq!(std::fs::read(wal).unwrap(), b"w");
        let journal = tmp
            .path()
            .join("collector.sqlite3.corrupt-1700000000-journal");
        assert_eq!(std::fs::read(journal).unwrap(), b"j");
        assert!(!tmp.path().join("collector.sqlite3-journal").exists());
        assert!(!db.exists());
        assert!(!tmp.path().join("collector.sqlite3-wal").exists());
        // The same second again: a name of its own.
        std::fs::write(&db, b"again").unwrap();
        let second = move_aside(&db, 1_700_000_000).unwrap();
        assert_eq!(
            second,
            tmp.path().join("collector.sqlite3.corrupt-1700000000.1")
        );
        assert_eq!(std::fs::read(&aside).unwrap(), b"garbage");
    }
}
