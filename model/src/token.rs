//! Bearer-token files (agent ↔ collector stream, the collector's API, the CLI's clients): read once at start,
//! trailing whitespace (a newline from `echo`) trimmed, an empty file refused.

use std::path::{Path, PathBuf};

/// Why a token file cannot be used. Each message says its cause itself, so none is also a `source()`: a
/// printed chain (`{e:#}`) says it once.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read token file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("token file {0} is empty")]
    Empty(PathBuf),
    #[error("token file {0} is not UTF-8 text")]
    NotText(PathBuf),
}

/// Reads the token in `path`: its text with surrounding whitespace trimmed, never empty.
pub fn read_token_file(path: &Path) -> Result<String, TokenError> {
    let bytes = std::fs::read(path).map_err(|error| TokenError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let text = String::from_utf8(bytes).map_err(|_| TokenError::NotText(path.to_path_buf()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(TokenError::Empty(path.to_path_buf()));
    }
    Ok(token.to_string())
}

/// A warning when the secret file `path` can be read or changed by its group or others, naming the file and
/// `chmod 600` (`None` when it cannot, or its mode cannot be read). Said at every start, as ssh does for a
/// private key: a token others on the host can read is a token they hold.
pub fn exposure_warning(what: &str, path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then(|| {
        format!(
            "{what} {} can be read or changed by group or others (mode {mode:04o}): chmod 600 {}",
            path.display(),
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_and_refuses_empty_missing_and_binary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "s3cret\n").unwrap();
        assert_eq!(read_token_file(&p).unwrap(), "s3cret");
        std::fs::write(&p, " \n\t").unwrap();
        assert!(matches!(read_token_file(&p), Err(TokenError::Empty(_))));
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(matches!(read_token_file(&p), Err(TokenError::NotText(_))));
        let missing = dir.path().join("missing");
        let e = read_token_file(&missing).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }

    #[test]
    fn a_file_others_can_read_is_warned_about() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "s3cret\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(exposure_warning("probe token file", &p), None);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let w = exposure_warning("probe token file", &p).unwrap();
        assert!(w.starts_with("probe token file "), "{w}");
        assert!(w.contains("(mode 0644): chmod 600"), "{w}");
        assert_eq!(exposure_warning("x", &dir.path().join("absent")), None);
    }

    #[test]
    fn an_error_says_its_cause_once() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_token_file(&dir.path().join("missing")).unwrap_err();
        let cause = "No such file or directory";
        assert_eq!(e.to_string().matches(cause).count(), 1, "{e}");
        // Nothing repeats it when the chain is printed.
        assert!(std::error::Error::source(&e).is_none(), "{e:?}");
    }
}
