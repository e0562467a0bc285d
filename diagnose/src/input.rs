//! The one gate for the text inputs `diagnose` reads whole (nccl-tests output, NCCL debug logs, `nsys stats`
//! tables, NCCL Inspector dumps, and the lines the report quotes): a file over [`MAX_TEXT_INPUT_BYTES`] is
//! refused before it is read, and a file that grows (or a pipe) is read no further than the limit. Such a
//! file is an error naming it and the limit; the other inputs are still read. Kineto traces are streamed and
//! Nsight Systems exports are read by SQLite: neither goes through here.

use std::io::Read;
use std::path::Path;

/// Largest text input read, bytes (256 MiB: a whole NCCL `INFO` log of a 1,000-rank job is tens of MB).
/// Reading one costs about three times its size in memory while it is parsed.
pub const MAX_TEXT_INPUT_BYTES: u64 = 256 << 20;

/// The text of the file at `path` (invalid UTF-8 replaced), at most [`MAX_TEXT_INPUT_BYTES`]; larger is an
/// error of kind [`std::io::ErrorKind::FileTooLarge`] saying its size and the limit.
pub fn read_text(path: &Path) -> std::io::Result<String> {
    read_text_within(path, MAX_TEXT_INPUT_BYTES)
}

/// [`read_text`] with the limit `limit` (bytes).
pub fn read_text_within(path: &Path, limit: u64) -> std::io::Result<String> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_file() && meta.len() > limit {
        return Err(too_large(&format!("{} bytes", meta.len()), limit));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(limit)).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large("more than that", limit));
    }
    Ok(String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

fn too_large(size: &str, limit: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::FileTooLarge,
        format!(
            "{size}, over the limit of {limit} bytes ({} MiB) on a text input; not read (give a part of it)",
            limit >> 20
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_over_the_limit_is_refused_naming_its_size_and_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small.log");
        std::fs::write(&small, "NCCL INFO a\n\u{ff}x\n").unwrap();
        assert_eq!(
            read_text_within(&small, 64).unwrap(),
            "NCCL INFO a\n\u{ff}x\n"
        );
        let big = dir.path().join("big.log");
        // Sparse: costs no disk.
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_TEXT_INPUT_BYTES + 1)
            .unwrap();
        let e = read_text(&big).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        let said = e.to_string();
        assert!(
            said.starts_with("268435457 bytes, over the limit of 268435456 bytes (256 MiB)"),
            "{said}"
        );
        let e = read_text_within(&small, 4).unwrap_err();
        assert!(e.to_string().contains("over the limit of 4 bytes"), "{e}");
    }

    #[test]
    fn a_pipe_is_read_no_further_than_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
                let chunk = vec![b'x'; 4096];
                while f.write_all(&chunk).is_ok() {}
            })
        };
        let e = read_text_within(&fifo, 1 << 20).unwrap_err();
        assert!(
            e.to_string().starts_with("more than that, over the limit"),
            "{e}"
        );
        drop(e);
        writer.join().unwrap();
    }
}
