//! [`FileSeries`]: the table of file-backed series shared by the sysfs sources (infiniband, netdev).

use std::collections::HashMap;
use std::path::PathBuf;

use super::attr_file::AttrFile;
use super::fsroot::{is_absent, FsRoot};
use super::sysfs::{decode, Decode, Reading};
use super::{ReadReport, SeriesSpec, SourceError, Tier, Value};

/// What a series reads from.
#[derive(Debug)]
enum Handle {
    /// Its file, open.
    Open(AttrFile),
    /// Its file exists but cannot be used (refused: a FIFO, a link out of the root; a link loop; no
    /// permission): every read of the series fails with this error, counted, until a discovery opens it.
    Broken(SourceError),
    /// No file: its device is gone, or it was not found again. The series stops producing.
    Closed,
}

impl Handle {
    /// Opens `path`: a missing file is [`Handle::Closed`], any other failure [`Handle::Broken`].
    fn open(root: &FsRoot, path: PathBuf) -> Handle {
        match AttrFile::open(root, path) {
            Ok(f) => Handle::Open(f),
            Err(e) if is_absent(&e) => Handle::Closed,
            Err(e) => {
                tracing::debug!(error = %e, "series file refused or unreadable");
                Handle::Broken(e)
            }
        }
    }

    fn is_closed(&self) -> bool {
        matches!(self, Handle::Closed)
    }
}

/// One file-backed series: what it reads from and how to decode it.
#[derive(Debug)]
struct Slot {
    handle: Handle,
    decode: Decode,
    seen: bool,
}

/// The file-backed series of a sysfs source, index-aligned with the source's `Inventory::series`.
///
/// Discovery is a pass of [`FileSeries::begin`], one [`FileSeries::upsert`] per series found, and
/// [`FileSeries::finish`]. Indices are stable: a series found again keeps its index (and its open file when
/// the path is unchanged and still exists); a series not found again keeps its index and stops producing.
/// A file that exists but cannot be opened (a FIFO, a link out of the root or in a loop) is still a series:
/// each read of it fails, naming the path, and is counted.
#[derive(Debug)]
pub struct FileSeries {
    root: FsRoot,
    slots: Vec<Slot>,
    by_identity: HashMap<String, usize>,
    fast: Vec<usize>,
    slow: Vec<usize>,
    not_available: u64,
}

impl FileSeries {
    /// An empty table whose files all lie under `root`.
    pub fn new(root: FsRoot) -> FileSeries {
        FileSeries {
            root,
            slots: Vec::new(),
            by_identity: HashMap::new(),
            fast: Vec::new(),
            slow: Vec::new(),
            not_available: 0,
        }
    }

    /// Starts a discovery pass.
    pub fn begin(&mut self) {
        for slot in &mut self.slots {
            slot.seen = false;
        }
    }

    /// Records that `spec` is read from `path` with `how`. A known series keeps its open file when `path` is
    /// unchanged and still names the same inode; otherwise the file is (re)opened. Returns the index in
    /// `series`, or `None` when the file does not exist (then the series is not in the inventory, or, if it
    /// was, it stops producing). `series` is the source's `Inventory::series`; a new series is appended to it,
    /// a known one updated in place; `changed` is set when either happens.
    pub fn upsert(
        &mut self,
        series: &mut Vec<SeriesSpec>,
        spec: SeriesSpec,
        path: PathBuf,
        how: Decode,
        changed: &mut bool,
    ) -> Option<usize> {
        let identity = spec.identity();
        if let Some(&idx) = self.by_identity.get(&identity) {
            let slot = &mut self.slots[idx];
            let keep =
                matches!(&slot.handle, Handle::Open(f) if f.path() == path && f.is_current());
            if !keep {
                slot.handle = Handle::open(&self.root, path);
            }
            slot.decode = how;
            slot.seen = !slot.handle.is_closed();
            if series[idx] != spec {
                series[idx] = spec;
                *changed = true;
            }
            return slot.seen.then_some(idx);
        }
        let handle = Handle::open(&self.root, path);
        if handle.is_closed() {
            return None;
        }
        let idx = series.len();
        series.push(spec);
        self.slots.push(Slot {
            handle,
            decode: how,
            seen: true,
        });
        self.by_identity.insert(identity, idx);
        *changed = true;
        Some(idx)
    }

    /// Ends a discovery pass: series not found in it stop producing (their files are closed); the tier lists
    /// are rebuilt from `series`.
    pub fn finish(&mut self, series: &[SeriesSpec]) {
        self.fast.clear();
        self.slow.clear();
        for (idx, slot) in self.slots.iter_mut().enumerate() {
            if !slot.seen {
                slot.handle = Handle::Closed;
                continue;
            }
            match series.get(idx).map(|s| s.tier) {
                Some(Tier::Fast) => self.fast.push(idx),
                Some(Tier::Slow) => self.slow.push(idx),
                None => {}
            }
        }
    }

    /// Reads the text of series `idx` now (for inventory facts at discovery, through the same open file).
    pub fn read_text(&mut self, idx: usize) -> Result<&str, SourceError> {
        match self.slots.get_mut(idx).map(|s| &mut s.handle) {
            Some(Handle::Open(f)) => f.read(),
            Some(Handle::Broken(e)) => Err(e.duplicate()),
            _ => Err(SourceError::Other(format!("series {idx} has no open file"))),
        }
    }

    /// Reads every producing series of `tier`, pushing values to `sink`; failures go to `report`,
    /// not-available values are counted in [`FileSeries::not_available`].
    pub fn sample(
        &mut self,
        tier: Tier,
        sink: &mut dyn FnMut(usize, Value),
        report: &mut ReadReport,
    ) {
        let list = match tier {
            Tier::Fast => &self.fast,
            Tier::Slow => &self.slow,
        };
        for &idx in list {
            let Some(slot) = self.slots.get_mut(idx) else {
                continue;
            };
            let how = slot.decode;
            let file = match &mut slot.handle {
                Handle::Open(f) => f,
                Handle::Broken(e) => {
                    report.fail(e.duplicate());
                    continue;
                }
                Handle::Closed => continue,
            };
            match file.read() {
                Ok(text) => match decode(how, text) {
                    Ok(Reading::Value(v)) => {
                        sink(idx, v);
                        report.read += 1;
                    }
                    Ok(Reading::NotAvailable) => self.not_available += 1,
                    Err(e) => {
                        let bytes = text.len();
                        report.fail(SourceError::Parse {
                            path: file.path().to_path_buf(),
                            bytes,
                            reason: e.reason,
                        });
                    }
                },
                Err(SourceError::Io { .. }) if how.io_error_is_unknown() => self.not_available += 1,
                Err(e) => report.fail(e),
            }
        }
    }

    /// How many reads so far found the value not available (`N/A (no PMA)`, unknown speed or rate).
    pub fn not_available(&self) -> u64 {
        self.not_available
    }
}
